"""Simulated runs side by side (``run_jobs`` with ``jobs`` > 1): handed to processes that simulate one run
after another, they make the files a run in this process makes, a run past its time is stopped with its
process, and the processes serve the next call only while the directory and environment are the same."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from hpcbench.results.store import read_run
from hpcbench.tuning.execute import Job, Workers, run_jobs, start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # starts processes


def job(path, steps=6, algo="asgd", seed=0):
    return Job.of(algo, 2, ["--dataset", "teacher", "--model", "mlp", "--steps", str(steps), "--set",
                            f"seed={seed}"], path, f"{algo} seed {seed}")


def alive(worker) -> bool:
    return worker.proc.poll() is None


def test_runs_handed_to_worker_processes_make_the_files_runs_in_processes_of_their_own_make(tmp_path):
    """Three runs for two processes: the third follows another run (another algorithm) in its process, and
    still makes the file a process of its own makes, to the last digit."""
    side = [job(tmp_path / "side" / f"{a}-{s}.h5", algo=a, seed=s) for a, s in (("asgd", 0), ("allreduce", 1),
                                                                                  ("asgd", 2))]
    own = [job(tmp_path / "own" / f"{a}-{s}.h5", algo=a, seed=s) for a, s in (("asgd", 0), ("allreduce", 1),
                                                                                ("asgd", 2))]
    assert run_jobs(side, "sim", 2, 120) == {j.path: "" for j in side}
    for j in own:
        proc = start(j, "sim")
        assert proc.wait(120) == 0, proc.communicate()
    for a, b in zip(side, own):
        ra, rb = read_run(a.path), read_run(b.path)
        assert ra.summary["final_accuracy"] == rb.summary["final_accuracy"]
        assert np.array_equal(ra.final_params, rb.final_params)


def test_a_run_past_its_time_is_stopped_with_its_process_and_the_next_run_gets_a_fresh_one(tmp_path):
    warm = [job(tmp_path / f"warm-{s}.h5", seed=s) for s in (0, 1)]
    assert run_jobs(warm, "sim", 2, 120) == {j.path: "" for j in warm}  # both processes started and waiting
    before = list(Workers.here().idle)
    assert len(before) == 2 and all(map(alive, before))
    slow, quick = job(tmp_path / "slow.h5", steps=100_000), job(tmp_path / "quick.h5", seed=2)
    outcome = run_jobs([slow, quick], "sim", 2, 3)
    assert outcome == {slow.path: "killed after 3 s", quick.path: ""}
    assert sum(alive(w) for w in before) == 1  # the slow run's process was stopped with it
    again = job(tmp_path / "again.h5", seed=3), job(tmp_path / "again2.h5", seed=4)
    assert run_jobs(list(again), "sim", 2, 120) == {j.path: "" for j in again}  # a fresh process in its place
    assert read_run(again[1].path).summary["samples"] > 0


def test_the_processes_serve_the_next_call_only_while_the_directory_and_environment_are_the_same(tmp_path,
                                                                                               monkeypatch):
    first = [job(tmp_path / f"a-{s}.h5", seed=s) for s in (0, 1)]
    assert run_jobs(first, "sim", 2, 120) == {j.path: "" for j in first}
    pool = Workers.here()
    pids = sorted(w.proc.pid for w in pool.idle)
    second = [job(tmp_path / f"b-{s}.h5", seed=s) for s in (0, 1)]
    assert run_jobs(second, "sim", 2, 120) == {j.path: "" for j in second}
    assert Workers.here() is pool and sorted(w.proc.pid for w in pool.idle) == pids  # the same two, again
    # A run sees the environment of the call that made it (HPCBENCH_MAX_STEPS caps its steps): not a
    # process started before the change.
    old = list(pool.idle)
    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "2")
    capped = [job(tmp_path / f"c-{s}.h5", seed=s) for s in (0, 1)]
    assert run_jobs(capped, "sim", 2, 120) == {j.path: "" for j in capped}
    assert Workers.here() is not pool and all(read_run(j.path).summary["samples"] == 2 * 2 * 32 for j in capped)
    deadline = time.monotonic() + 10
    while any(w.proc.poll() is None for w in old) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(old) == 2 and not [w.proc.pid for w in old if w.proc.poll() is None], "the old processes ended"
    monkeypatch.chdir(tmp_path)
    relative = [job(os.path.join("rel", f"d-{s}.h5"), seed=s) for s in (0, 1)]
    assert run_jobs(relative, "sim", 2, 120) == {j.path: "" for j in relative}
    assert all((tmp_path / "rel" / f"d-{s}.h5").is_file() for s in (0, 1))


def marked(mark: str) -> list[int]:
    """The processes whose environment holds ``mark``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in open(f"/proc/{pid}/environ", "rb").read():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigterm_stops_a_study_with_one_line_and_leaves_no_process(tmp_path, jobs):
    """A batch job's time limit or ``kill`` sends SIGTERM to the study's process alone: it said nothing and
    exited 143. Now it stops as Ctrl-C does: one line saying so, 143, and no run or worker process left."""
    import signal
    import subprocess
    import sys

    mark = f"HPCBENCH_TEST_STUDY={os.getpid()}-{jobs}"
    tune = subprocess.Popen([sys.executable, "-m", "hpcbench", "tune", "--algo", "asgd", "--workers", "2", "--dataset",
                             "teacher", "--model", "mlp", "--steps", "400", "--lr", "0.01,0.02,0.03,0.05",
                             "--seeds", "0,1", "--jobs", str(jobs), "--out-dir", str(tmp_path / "t")],
                            env={**os.environ, mark.split("=")[0]: mark.split("=")[1]}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "t" / "runs").glob("*.h5")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the first run has ended: the study is under way
        tune.send_signal(signal.SIGTERM)
        _, err = tune.communicate(timeout=60)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.communicate()
    assert tune.returncode == 143, err
    assert err.strip().splitlines()[-1] == "hpcbench: stopped by SIGTERM during tune; tune run again keeps the " \
                                           "finished runs", err
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not marked(mark)
