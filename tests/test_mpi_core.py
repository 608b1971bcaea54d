"""Real mpiexec runs of allreduce and asgd, checked against naive references and read back."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbench.results.schema import (
    EVAL_COLUMNS,
    PROVENANCE_ATTRS,
    PROVENANCE_PER_RANK,
    ROOT_ATTRS,
    SERVER_SUMMARY_KEYS,
    SUMMARY_KEYS,
    TABLES,
    TIMELINE_COLUMNS,
)
from hpcbench.results.store import read_run

from conftest import mpirun, ok, requires_mpi
from reference import union_batch_sgd

pytestmark = [requires_mpi, pytest.mark.both, pytest.mark.timeout(600)]

COMMON = ("--dataset", "digits", "--model", "mlp", "--batch-size", "16", "--lr", "0.05", "--momentum", "0.9",
          "--set", "weight_decay=0.001", "--set", "evals=4", "--set", "warmup_epochs=0")
PAYLOAD = ("--model", "payload", "--set", "payload.params=20000", "--compute", "gamma:shape=100,mean=0.03")


@pytest.fixture(scope="module")
def runs(run_dir):
    """Run each configuration once for the whole module."""
    out = {}
    for name, ranks, args in [
        ("allreduce-3", 3, ("--algo", "allreduce", "--steps", "12", *COMMON)),
        ("allreduce-5", 5, ("--algo", "allreduce", "--steps", "12", *COMMON)),
        # buckets of 10 KiB: several all-reduces per step, started from the backward pass's hooks
        ("allreduce-3-buckets", 3, ("--algo", "allreduce", "--steps", "12", *COMMON,
                                    "--set", "allreduce.bucket_mb=0.01")),
        ("asgd-2", 2, ("--algo", "asgd", "--steps", "25", *COMMON)),
        # modeled compute long next to the server's work, so oversubscribed workers really overlap
        ("asgd-3", 3, ("--algo", "asgd", *PAYLOAD, "--steps", "15")),
        ("asgd-5", 5, ("--algo", "asgd", *PAYLOAD, "--steps", "15")),
    ]:
        path = run_dir / f"{name}.h5"
        proc = ok(mpirun(ranks, "run", *args, "--out", str(path)))
        assert str(path) in proc.stdout
        out[name] = read_run(path)
    return out


@pytest.mark.parametrize("name, workers", [("allreduce-3", 2), ("allreduce-5", 4), ("allreduce-3-buckets", 2)])
def test_allreduce_replicas_identical_and_equal_to_union_batch_sgd(runs, name, workers):
    rec = runs[name]
    assert rec.evals["consensus"][-1] == 0.0  # every replica bit-identical to the average
    expected = union_batch_sgd("mlp", "digits", workers, steps=12, batch=16, lr=0.05, momentum=0.9, wd=0.001, seed=0)
    np.testing.assert_allclose(rec.final_params, expected, rtol=1e-4, atol=2e-5)
    assert rec.evals["samples"][-1] == 12 * workers * 16


def test_asgd_with_one_worker_is_sequential_sgd(runs):
    rec = runs["asgd-2"]
    expected = union_batch_sgd("mlp", "digits", 1, steps=25, batch=16, lr=0.05, momentum=0.9, wd=0.001, seed=0)
    np.testing.assert_allclose(rec.final_params, expected, rtol=1e-5, atol=1e-6)
    assert (rec.tables["updates"]["staleness"] == 0).all()


@pytest.mark.parametrize("name, workers", [("asgd-3", 2), ("asgd-5", 4)])
def test_asgd_staleness_settles_near_n_minus_1(runs, name, workers):
    up = runs[name].tables["updates"]
    steady = up["staleness"][2 * workers:]  # after the first round, as workers fall into step
    assert 0.7 * (workers - 1) <= steady.mean() <= 1.3 * (workers - 1), steady.mean()
    # each worker's next read sees at least its own previous update
    for w in range(1, workers + 1):
        mine = up["worker"] == w
        assert (up["version_used"][mine][1:] > up["version_applied"][mine][:-1]).all()
    assert (up["version_applied"] == np.arange(len(up["t"]))).all()  # arrival order, one at a time
    assert (up["staleness"] == up["version_applied"] - up["version_used"]).all()
    assert len(up["t"]) == 15 * workers


@pytest.mark.parametrize("name", ["allreduce-5", "asgd-5"])
def test_result_file_has_every_required_field(runs, name):
    rec = runs[name]
    for key in ROOT_ATTRS:
        assert key in rec.attrs, key
    assert rec.attrs["status"] == "ok" and rec.attrs["mode"] == "mpi"
    assert rec.attrs["world_size"] == 5 and rec.attrs["workers"] == 4
    assert rec.attrs["config"]["algo"] == rec.algorithm
    assert set(rec.provenance) == set(PROVENANCE_ATTRS)
    from hpcbench.comm.probe import mpi_library

    library = rec.provenance["mpi_library_version"]  # the launcher's MPI, whole, with no NUL byte
    assert library == mpi_library()["mpi_library_version"] and library and "\x00" not in library
    for key in PROVENANCE_PER_RANK:
        assert len(rec.per_rank[key]) == 5
    for col in TIMELINE_COLUMNS:
        assert col in rec.timeline
    tl = rec.timeline
    assert set(np.unique(tl["rank"])) == set(range(5)) and (tl["t_end"] >= tl["t_start"]).all()
    assert len(rec.clock_offsets) == 5 and rec.clock_offsets[0] == 0.0
    for col in EVAL_COLUMNS:
        assert col in rec.evals
    assert (np.diff(rec.evals["samples"]) >= 0).all() and rec.evals["samples"][0] == 0
    server = SERVER_SUMMARY_KEYS if rec.algorithm == "asgd" else ()
    assert sorted(rec.summary) == sorted(SUMMARY_KEYS + server)
    assert rec.summary["samples_per_s"] > 0 and 0 < rec.summary["compute_fraction"] < 1
    assert 0 < rec.summary["rank0_cpu_share"] < 2  # rank 0's processor seconds per second of its run
    if rec.algorithm == "asgd":
        assert set(rec.tables["updates"]) == set(TABLES["updates"])
        assert rec.summary["staleness_p99"] >= rec.summary["staleness_p50"] >= 0
    assert rec.final_params.shape == (rec.attrs["config"]["parameters"],)


def test_no_partial_file_left_behind(run_dir, runs):
    assert not list(run_dir.glob("*.partial"))


def test_report_lists_every_run_and_the_scaling_view(runs, run_dir):
    import contextlib
    import io

    from hpcbench.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["report", str(run_dir), "--format", "md"]) == 0
    text = buf.getvalue()
    assert text.count("| allreduce ") == 6 and text.count("| asgd ") == 6  # 3+3 runs, each in both tables
    assert "speedup" in text and "efficiency" in text and "staleness" not in text  # the narrow tables
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["report", str(run_dir), "--format", "md", "--wide"]) == 0
    assert "staleness mean" in buf.getvalue() and buf.getvalue().count("| asgd ") == 6
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["report", str(run_dir / "asgd-5.h5"), "--format", "csv", "--table", "runs"]) == 0
    header = buf.getvalue().splitlines()[0]
    columns = header.split(",")
    assert columns[:6] == ["algorithm", "mode", "workers", "nodes", "samples_per_s", "median_step_s"]
    assert {"step_p99_s", "compute_fraction", "staleness_mean", "path"} <= set(columns)


def test_warmup_steps_are_untimed_and_change_nothing(runs, run_dir):
    """The default run did 2 warm-up computations per worker before its timed window; without them the
    model is bit-identical, the timeline holds the same computes, and the file says no warm-up ran."""
    from hpcbench.telemetry.timeline import PHASE_CODE

    warm = runs["allreduce-3"]
    path = run_dir / "allreduce-3-cold.h5"
    ok(mpirun(3, "run", "--algo", "allreduce", "--steps", "12", *COMMON, "--set", "warmup_steps=0", "--out", str(path)))
    cold = read_run(path)
    assert warm.attrs["config"]["warmup_steps"] == 2 and cold.attrs["config"]["warmup_steps"] == 0
    assert warm.summary["warmup_s"] > 0 and cold.summary["warmup_s"] == 0
    np.testing.assert_array_equal(warm.final_params, cold.final_params)
    for rec in (warm, cold):
        computes = rec.timeline["rank"][rec.timeline["phase"] == PHASE_CODE["compute"]]
        assert sorted(np.unique(computes, return_counts=True)[1].tolist()) == [12, 12]


def test_calibrate_does_not_fit_the_network_to_overlapped_all_reduces(runs):
    from hpcbench.runtime.sim.calibrate import calibrate, describe

    assert "not fitted" not in describe(runs["allreduce-3"])  # one bucket: the whole all-reduce is exposed
    assert "not fitted from them" in describe(runs["allreduce-3-buckets"])
    assert calibrate(runs["allreduce-3-buckets"])["bandwidth"] != calibrate(runs["allreduce-3"])["bandwidth"]


def test_calibrate_given_runs_that_lost_no_worker_says_there_is_no_failure_cost_to_fit(runs, capsys):
    """With one run it fits the rest and leaves the failure costs at their defaults; given more runs for
    the failure costs, none of which lost a worker, it says so in one line."""
    from hpcbench.cli import main

    assert main(["calibrate", str(runs["allreduce-3"].path)]) == 0
    assert "failure costs" not in capsys.readouterr().out
    assert main(["calibrate", str(runs["allreduce-3"].path), str(runs["allreduce-5"].path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "hpcbench: error: none of the 2 runs lost a worker: there is no failure cost to fit (runs under Open MPI's "
        "--with-ft ulfm with --set fault=kill:RANK@SECONDS)")


def test_calibrate_simulates_with_the_links_noise_it_is_given(runs, capsys):
    """The noise is not fitted: calibrate takes it, prints it in both forms and fits the jitter over it;
    a noise that is not a finite number >= 0 is one error line."""
    from hpcbench.cli import main
    from hpcbench.runtime.sim.calibrate import calibrate, describe

    rec = runs["asgd-3"]
    assert calibrate(rec)["noise"] == 0 and calibrate(rec, noise=0.1)["noise"] == 0.1
    text = describe(rec, 0.1)
    assert ",noise=0.1 " in text and "\nnoise = 0.1\n" in text
    assert "noise=" not in describe(rec).split("# or, in a --config file:")[0]
    for bad in ("-1", "nan", "1e308"):  # beyond 10 the draws themselves overflow
        assert main(["calibrate", str(rec.path), "--noise", bad]) == 2
        assert capsys.readouterr().err.strip() == f"hpcbench: error: sim.noise must be in [0, 10], got {float(bad)}"
