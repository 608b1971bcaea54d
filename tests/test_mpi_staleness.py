"""The staleness-aware parameter servers under mpiexec, and their one-worker identity."""
import contextlib
import io

import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.cli import main
from hpcbench.results.store import read_run

from arrivals import SERVERS
from conftest import first_under_both, mpirun, ok, requires_mpi

ARGS = ("--dataset", "digits", "--model", "mlp", "--steps", "30", "--momentum", "0.9", "--lr", "0.02")


@requires_mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", first_under_both(["dana-ga", "sa-asgd", "ga-asgd", "dana"]))
def test_runs_under_mpi_and_applies_every_gradient(tmp_path, algo):
    out = tmp_path / "r.h5"
    short_ring = ("--set", f"{algo}.history=2") if algo.endswith("ga") else ()  # real echoes over MPI
    ok(mpirun(5, "run", "--algo", algo, *ARGS, *short_ring, "--out", str(out)))
    rec = read_run(out)
    up = rec.tables["updates"]
    assert len(up["t"]) == 30 * 4
    # The workers' own timelines and the server's log agree that no gradient went unaccounted for.
    assert rec.summary["too_stale"] == 0 and rec.summary["late_gradients"] <= 3
    if algo.endswith("ga"):
        echoed = up["echo_bytes"] > 0
        assert echoed.any() and (up["staleness"][echoed] >= 2).all() and (up["staleness"][~echoed] <= 1).all()
        assert rec.summary["echo_bytes"] == up["echo_bytes"].sum() > 0
    warm = rec.attrs["config"]["schedule"]
    assert up["lr"][0] == pytest.approx(warm["warmup_from"]) and (np.diff(up["lr"]) >= 0).all()
    assert rec.evals["accuracy"][-1] > 0.5


def test_with_one_worker_every_server_with_one_momentum_follows_asgds_trajectory(tmp_path):
    """Nothing is stale with one worker: no divisor, no gap, no compensation (DANA's momentum per worker
    publishes a look-ahead, so it is left out)."""
    finals = {}
    same = [name for name in SERVERS if not ALGORITHMS.get(name).per_worker_momentum]
    assert {"asgd", "sa-asgd", "ga-asgd", "dc-asgd"} <= set(same)
    for algo in same:
        out = tmp_path / f"{algo}.h5"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["simulate", "--algo", algo, "--workers", "1", *ARGS, "--out", str(out)]) == 0
        finals[algo] = read_run(out)
    for algo in same:
        np.testing.assert_array_equal(finals[algo].final_params, finals["asgd"].final_params)
        assert (finals[algo].tables["updates"]["penalty_mean"] == 1.0).all()
