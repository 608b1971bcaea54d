"""The staleness-aware parameter servers under mpiexec, and their one-worker identity."""
import contextlib
import io

import numpy as np
import pytest

from conftest import mpirun, ok, requires_mpi
from hpcbench.cli import main
from hpcbench.results.store import read_run

ARGS = ("--dataset", "digits", "--model", "mlp", "--steps", "30", "--momentum", "0.9", "--lr", "0.02")


@requires_mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["sa-asgd", "ga-asgd", "dana", "dana-ga"])
def test_runs_under_mpi_with_a_consistent_log(tmp_path, algo):
    out = tmp_path / "r.h5"
    ok(mpirun(5, "run", "--algo", algo, *ARGS, "--out", str(out)))
    rec = read_run(out)
    up = rec.tables["updates"]
    assert len(up["t"]) == 30 * 4
    assert (up["staleness"] == up["version_applied"] - up["version_used"]).all() and (up["staleness"] >= 0).all()
    assert (up["penalty_mean"] >= 1.0).all()
    if algo == "sa-asgd":
        assert (up["penalty_mean"] == np.maximum(up["staleness"], 1)).all()
    if algo.endswith("ga"):
        assert np.nanmin(up["gap_mean"]) >= 0 and np.isfinite(up["gap_mean"][5:]).all()
        assert rec.summary["server_state_bytes"] >= (2 * 4 + 4) * 4 * rec.attrs["config"]["parameters"]
        assert rec.summary["too_stale"] == 0
    for key in ("penalty_mean", "penalty_p50", "penalty_p99", "staleness_mean", "gap_p50"):
        assert key in rec.summary
    assert rec.evals["accuracy"][-1] > 0.5


def test_with_one_worker_asgd_sa_and_ga_follow_the_same_trajectory(tmp_path):
    finals = {}
    for algo in ("asgd", "sa-asgd", "ga-asgd"):
        out = tmp_path / f"{algo}.h5"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["simulate", "--algo", algo, "--workers", "1", *ARGS, "--out", str(out)]) == 0
        finals[algo] = read_run(out)
    for algo in ("sa-asgd", "ga-asgd"):
        np.testing.assert_array_equal(finals[algo].final_params, finals["asgd"].final_params)
        assert (finals[algo].tables["updates"]["penalty_mean"] == 1.0).all()
