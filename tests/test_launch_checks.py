"""``run --dry-run``'s checks, before anything starts: made by every command that launches runs here
(``sweep --local``, ``demo``, ``tune --mode mpi``, ``reproduce --mode mpi``) once per distinct world,
before the first ``mpiexec`` and before the output directory is made; and made from the model's sizes,
never its values, so that a dry run at the largest payload takes seconds and little memory, and states
the memory the real run's copies of the model take."""
from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc

import pytest

import hpcbench.memory
from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.memory import amount
from hpcbench.runtime import plan
from hpcbench.runtime.assemble import MODEL_COPIES, assemble, model_bytes
from hpcbench.workload.payload import MAX_PARAMS

from conftest import cli

LARGEST = ["--model", "payload", "--set", f"payload.params={MAX_PARAMS}"]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test when a run would start: mpiexec (sweep --local, demo, reproduce) or a run of a tune."""
    import hpcbench.launch.local as local
    import hpcbench.tuning.execute as execute

    def started(*args, **kwargs):
        pytest.fail("a run was started")

    monkeypatch.setattr(local, "start_ranks", started)
    monkeypatch.setattr(execute, "start", started)


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcbench: error: ") and "Traceback" not in err, err
    return lines[0]


SHARD = "batch size 32 is larger than a worker's shard"
# (argv, what the one line says, extra environment): OUT is the command's output directory.
REFUSED = {
    "sweep --local, a world the data cannot shard (the issue's --ranks 200)": (
        ["sweep", "--local", "--algos", "asgd", "--ranks", "3,200"],
        f"asgd on 200 ranks: {SHARD} (7 of the 1437 training samples of digits with 199 workers); use "
        "--batch-size 7 or less, or fewer workers"),
    "sweep --local, the model's copies on every rank here beyond this machine's memory": (
        ["sweep", "--local", "--algos", "asgd", "--ranks", "3", *LARGEST],
        f"asgd on 3 ranks: 3 rank(s) here, each with ~6 copies of {MAX_PARAMS} parameters needs about 36.0 GiB, "
        "more than this machine's 8.0 GiB: a smaller model, or fewer ranks on this machine"),
    "sweep --local, every rank's process beyond this machine's memory (data that shards: the teacher task)": (
        ["sweep", "--local", "--algos", "asgd", "--ranks", "3,200", "--dataset", "teacher"],
        "asgd on 200 ranks: 200 ranks here, each a Python process with torch loaded (about 150 MiB before its "
        "model and data), needs about 29.3 GiB, more than this machine's 8.0 GiB: fewer ranks on this machine"),
    "sweep --local, threads beyond the cores": (
        ["sweep", "--local", "--algos", "asgd", "--ranks", "3", "--set", "threads=100000"],
        "asgd on 3 ranks: threads = 100000 is more than the"),
    "sweep --local, a fault on a rank the world lacks": (
        ["sweep", "--local", "--algos", "asgd,allreduce", "--ranks", "5,3", "--set", "fault=kill:4@1"],
        "asgd on 3 ranks: fault kill:4@1: there is no rank 4 (ranks 0..2)"),
    "demo, a world the data cannot shard": (
        ["demo", "--ranks", "3,200"], f"allreduce on 200 ranks: {SHARD}"),
    "tune --mode mpi, a world the data cannot shard": (
        ["tune", "--mode", "mpi", "--algo", "asgd", "--workers", "1,199", "--lr", "0.1"],
        f"asgd on 200 ranks: {SHARD}"),
    "tune --mode mpi, the model's copies beyond this machine's memory": (
        ["tune", "--mode", "mpi", "--algo", "asgd", "--workers", "2", "--lr", "0.1", *LARGEST],
        "asgd on 3 ranks: 3 rank(s) here, each with ~6 copies of"),
    "reproduce --mode mpi, the model's copies beyond this machine's memory": (
        ["reproduce", "gap-aware", "--preset", "toy", "--mode", "mpi"],
        "asgd on 2 ranks: 2 rank(s) here, each with ~6 copies of"),
    "reproduce resilience --mode mpi, likewise": (
        ["reproduce", "resilience", "--preset", "toy", "--mode", "mpi"],
        "asgd on 2 ranks: 2 rank(s) here, each with ~6 copies of"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_launching_command_makes_the_dry_runs_checks_before_it_starts_anything(tmp_path, monkeypatch,
                                                                                 nothing_starts, case):
    import hpcbench.launch.local as local

    argv, says = REFUSED[case]
    monkeypatch.chdir(tmp_path)  # (the demo's results/demo)
    if "reproduce" in argv or "copies" in says or "process" in says:  # this machine's memory, as the case needs it
        monkeypatch.setattr(hpcbench.memory, "memory_bytes", lambda: 8 << 30 if "8.0 GiB" in says else 4096)
    if "resilience" in argv:  # (its real runs need an MPI that outlives a failed worker: say this one does)
        monkeypatch.setattr(local, "fault_tolerance", lambda mpiexec: "ULFM built in")
        monkeypatch.setattr(local, "mpiexec_path", lambda: "mpiexec")
    out = [] if argv[0] == "demo" else ["--out-dir", str(tmp_path / "out")]
    code, stdout, err = cli(*argv, *out)
    assert code == 2, (stdout, err)
    assert says in one_line(err)
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()


def test_the_checks_run_once_per_distinct_world_and_a_sound_study_then_launches(tmp_path, monkeypatch):
    import hpcbench.launch.local as local
    import hpcbench.launch.preflight as preflight

    checked, launched = [], []
    real = preflight.assemble
    monkeypatch.setattr(preflight, "assemble", lambda p, workers, **k: checked.append((p.cfg.algo, workers))
                        or real(p, workers, **k))
    monkeypatch.setattr(local, "run_many", lambda launches, *a, **k: launched.extend(launches) or iter(()))
    code, _, err = cli("sweep", "--local", "--algos", "asgd,sgp", "--ranks", "3,5", "--repeats", "3", "--out-dir",
                       str(tmp_path / "s"))
    assert code == 0, err
    assert sorted(checked) == [("asgd", 2), ("asgd", 4), ("sgp", 2), ("sgp", 4)]
    assert len(launched) == 12  # every repeat of every point, once its world was checked


def test_the_dry_run_at_the_largest_payload_takes_seconds_and_allocates_no_model():
    """It used to build the model and the algorithm for real: 94 s and 4.2 GB at this size."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        code, out, err = cli("run", "--dry-run", "--workers", "4", "--algo", "asgd", *LARGEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - t0
    assert code == 0, err
    one_copy = 4 * MAX_PARAMS  # 2 GiB: the old dry run made several
    assert peak < one_copy / 16, f"{peak / 2**20:.0f} MiB traced"
    assert took < 60, f"{took:.1f} s"
    assert f"about 12.0 GiB a rank ({MODEL_COPIES} copies of {MAX_PARAMS} parameters)" in out.splitlines()[0]


def test_every_algorithms_dry_run_at_the_largest_payload_allocates_no_model(monkeypatch):
    from hpcbench.algorithms import ALGORITHMS

    monkeypatch.setattr(hpcbench.memory, "memory_bytes", lambda: 1 << 50)  # room for any history
    for name in ALGORITHMS.names():
        tracemalloc.start()
        try:
            code, _, err = cli("run", "--dry-run", "--workers", "4", "--algo", name, *LARGEST)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert code == 0, (name, err)
        assert peak < 4 * MAX_PARAMS / 16, f"{name}: {peak / 2**20:.0f} MiB traced"


def test_a_dry_run_refuses_a_history_beyond_memory_without_making_it(monkeypatch):
    tracemalloc.start()
    try:
        code, _, err = cli("run", "--dry-run", "--workers", "4", "--algo", "ga-asgd", *LARGEST,
                           "--set", "ga-asgd.history=8192")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2
    assert (f"ga-asgd's history of 8192 versions of {MAX_PARAMS} parameters needs about 16384.0 GiB, more than "
            "this machine's") in one_line(err)
    assert peak < 4 * MAX_PARAMS / 16


@pytest.mark.parametrize("model, options", [("mlp", {}), ("cnn-tiny", {}),
                                            ("payload", {"payload": {"params": 300_000}})])
def test_the_dry_runs_sizes_and_memory_are_the_real_runs(model, options, capsys):
    """The sizes the dry run takes from the shapes are those of the model a run builds, and the memory it
    states is what that run's copies of the model take."""
    from hpcbench.cli import main

    cfg = RunConfig(algo="ga-asgd", dataset="digits", model=model, options=options)
    validated = plan.validate(cfg)
    real = assemble(validated, 3)
    dry = assemble(validated, 3, values=False)
    assert dry.workload.size == real.workload.size == real.algo.ctx.size
    assert (dry.workload.bounds, dry.workload.shapes) == (real.workload.bounds, real.workload.shapes)
    assert dry.algo.ctx.size < 100 and dry.algo.ctx.steps == real.algo.ctx.steps  # a stand-in, the same budget
    allocated = MODEL_COPIES * real.algo.ctx.params.nbytes
    assert model_bytes(dry.workload.size) == allocated
    sets = [f"--set=payload.params={options['payload']['params']}"] if options else []
    assert main(["run", "--dry-run", "--workers", "3", "--algo", "ga-asgd", "--model", model, *sets]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert f", about {amount(allocated)} a rank ({MODEL_COPIES} copies of {real.workload.size} parameters)" in first


def test_the_dry_run_refuses_what_the_real_run_refuses_in_the_same_words(monkeypatch):
    monkeypatch.setattr(hpcbench.memory, "memory_bytes", lambda: 10 << 20)
    validated = plan.validate(RunConfig(algo="ga-asgd", model="payload", options={"payload": {"params": 1000},
                                                                                   "ga-asgd": {"history": 8192}}))
    said = []
    for values in (True, False):
        with pytest.raises(UsageError) as refused:
            assemble(validated, 2, values=values)
        said.append(str(refused.value))
    assert said[0] == said[1] and "history of 8192 versions of 1000 parameters needs about 31.2 MiB" in said[0]


@pytest.mark.slow  # hpcbench in processes of their own
def test_the_dry_run_at_the_largest_payload_stays_small_in_a_process_of_its_own():
    """Measured as the process's peak resident memory against the same dry run at a small size."""
    measure = ("import resource, sys\nfrom hpcbench.cli import main\ncode = main(sys.argv[1:])\n"
               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\nsys.exit(code)")

    def peak_kib(params: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", measure, "run", "--dry-run", "--workers", "4", "--algo", "asgd",
                               "--model", "payload", "--set", f"payload.params={params}"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.splitlines()[-1]), time.perf_counter() - t0

    small, _ = peak_kib(1000)
    large, took = peak_kib(MAX_PARAMS)
    assert (large - small) * 1024 < 2**30 / 4, f"{(large - small) / 1024:.0f} MiB more at the largest size"
    assert took < 120, f"{took:.1f} s"
