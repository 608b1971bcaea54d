"""The payload workload: real messages through the real algorithm programs at 17 ranks, modeled
compute drawn as the simulator draws it, and no torch on any rank."""
import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.results.store import read_run

from conftest import mpirun, ok, requires_mpi

pytestmark = pytest.mark.both  # depends on the MPI family: run under each (.ci/run)

PAYLOAD = ["--model", "payload", "--set", "payload.params=5000"]


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory):
    """A PYTHONPATH whose ``torch`` fails to import: any rank that imports it fails the run."""
    root = tmp_path_factory.mktemp("shadow")
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text('raise ImportError("a payload run imported torch")\n')
    return {"PYTHONPATH": str(root)}


def compute_rows(rec, rank):
    tl = rec.timeline
    mask = (tl["rank"] == rank) & (tl["phase"] == rec.phases.index("compute"))
    order = np.argsort(tl["step"][mask])
    return (tl["t_end"] - tl["t_start"])[mask][order]


@requires_mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize("algo", ALGORITHMS.names())
def test_every_algorithm_runs_17_ranks_of_payload_without_torch(tmp_path, no_torch, algo):
    out = tmp_path / f"{algo}.h5"
    steps, workers, batch = 6, 16, 32
    proc = ok(mpirun(17, "run", "--algo", algo, *PAYLOAD, "--compute", "gamma:shape=100,mean=0.004",
                     "--steps", str(steps), "--set", "timeout_s=60", "--out", str(out), env=no_torch, timeout=180))
    # mpiexec pipes rank 0's stderr: still a progress line, at 10% of the budget for a run this short.
    assert f"] {algo}, 16 workers: " in proc.stderr and "/3072 samples (" in proc.stderr, proc.stderr
    rec = read_run(out)
    s = rec.summary
    assert rec.attrs["status"] == "ok" and rec.attrs["world_size"] == 17 and rec.workers == workers
    assert s["samples"] == steps * workers * batch  # the budget, exactly: every algorithm, every worker
    assert np.isnan(s["final_accuracy"]) and s["samples_per_s"] > 0
    assert rec.final_params.shape == (5000,) and np.isfinite(rec.final_params).all()
    assert rec.attrs["config"]["payload"] == {"params": 5000, "compute_shape": 100.0, "compute_mean_s": 0.004}
    assert rec.provenance["cuda_version"] == "none (torch not loaded)"
    ranks = set(np.unique(rec.timeline["rank"]).tolist())
    assert ranks == set(range(17))  # every rank's timeline came back
    computes = np.concatenate([compute_rows(rec, r) for r in range(1, 17)])
    assert computes.min() >= 0.002  # each compute lasted the modeled time (gamma, mean 4 ms, cv 0.1)


@requires_mpi
@pytest.mark.timeout(120)
def test_a_real_workers_compute_times_are_the_simulators_draws(tmp_path):
    """Worker r's k-th compute lasts the k-th draw of the simulator's gamma stream for worker r
    (written out here from numpy, not from hpcbench's compute model)."""
    out = tmp_path / "asgd.h5"
    shape, mean, seed, steps = 4.0, 0.02, 5, 12
    ok(mpirun(3, "run", "--algo", "asgd", *PAYLOAD, "--compute", f"gamma:shape={shape:g},mean={mean:g}",
              "--seed", str(seed), "--steps", str(steps), "--out", str(out)))
    rec = read_run(out)
    for rank in (1, 2):
        took = compute_rows(rec, rank)  # asynchronous: each worker takes its own share of 2 x 12 steps
        assert len(took) >= steps // 2
        draws = np.random.default_rng([seed, 0xC0DE, rank]).standard_gamma(shape, size=len(took)) * mean / shape
        assert (took >= draws - 1e-4).all(), (took, draws)
        assert (took <= draws + 0.015).all(), (took, draws)  # woken late on a loaded machine, never early


@pytest.mark.parametrize("argv, message", [
    (["run", "--algo", "asgd", *PAYLOAD[:2], "--set", "payload.params=0"],
     "payload.params must be between 1 and 536,870,912 floats, got 0"),
    (["run", "--algo", "asgd", "--set", "payload.params=10"], "payload.* options go with --model payload"),
    (["run", "--algo", "asgd", "--compute", "gamma:shape=2,mean=0.1"], "--compute models the compute of --model "
                                                                       "payload"),
    (["run", "--algo", "asgd", *PAYLOAD, "--compute", "gamma:shape=2,mean=-1"], "payload.compute_mean_s must be >= 0 "
                                                                                "seconds, got -1.0"),
    (["run", "--algo", "asgd", *PAYLOAD, "--set", "payload.size=3"], "unknown"),
])
def test_payload_input_that_cannot_work_is_one_line(capsys, argv, message):
    from hpcbench.cli import main

    capsys.readouterr()
    code = main(argv + ["--dry-run", "--workers", "4"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and message in err[0], (code, err)


def test_simulate_and_run_share_one_compute_model():
    """``--compute`` sets the payload's compute and the simulator's alike; payload.* wins over it."""
    from hpcbench.config import from_sources

    cfg, sim = from_sources(None, {"model": "payload"}, ["payload.compute_mean_s=0.2"],
                            {"compute_shape": 7.0, "compute_mean_s": 0.1})
    assert dict(cfg.options["payload"]) == {"compute_mean_s": 0.2, "compute_shape": 7.0}
    assert sim["compute_mean_s"] == 0.2 and sim["compute_shape"] == 7.0


@requires_mpi
@pytest.mark.timeout(200)
def test_compressed_all_reduces_send_what_their_compression_says_without_torch(tmp_path, no_torch):
    """Two 256 x 256 pieces and a 1,000-float rest: fp16 and bf16 send 2 bytes a number; PowerSGD at rank
    2 (after 2 plain all-reduces) the rest as it is, then P and Q of 2 x 256 x 2 floats each."""
    params = 2 * 65536 + 1000
    runs = {"fp16": ("allreduce", "allreduce.compress=fp16"), "bf16": ("allreduce", "allreduce.compress=bf16"),
            "powersgd": ("allreduce", "allreduce.compress=powersgd"),
            "diloco": ("local-sgd", "local-sgd.compress=powersgd")}
    for name, (algo, compress) in runs.items():
        out = tmp_path / f"{name}.h5"
        extra = ["--set", f"{algo}.powersgd_rank=2", "--set", f"{algo}.powersgd_start=2"]
        if algo == "local-sgd":
            extra += ["--set", "local-sgd.period=1", "--set", "local-sgd.outer=nesterov"]
        ok(mpirun(5, "run", "--algo", algo, "--model", "payload", "--set", f"payload.params={params}",
                  "--compute", "gamma:shape=100,mean=0.002", "--steps", "5", "--set", f"{compress}", *extra,
                  "--out", str(out), env=no_torch, timeout=180))
        rec = read_run(out)
        assert rec.attrs["status"] == "ok" and np.isfinite(rec.final_params).all(), name
        tl = rec.timeline
        for rank in range(1, 5):
            mine = (tl["rank"] == rank) & (tl["op"] == list(rec.ops).index("Allreduce"))
            sent = tl["nbytes"][mine][np.argsort(tl["t_start"][mine], kind="stable")].tolist()
            if name in ("fp16", "bf16"):
                assert sent == [2 * params] * 5, (name, sent)
            else:  # 2 plain all-reduces, then 3 steps of rest, P and Q
                assert sent == [4 * params] * 2 + [4 * 1000, 4 * 2 * 256 * 2, 4 * 2 * 256 * 2] * 3, (name, sent)
