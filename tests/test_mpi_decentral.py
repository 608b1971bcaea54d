"""Real mpiexec runs of the decentralized algorithms: completeness, conservation, termination."""
import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.api import PARAMETER_SERVER
from hpcbench.algorithms.decentral import starting_point
from hpcbench.config import RunConfig
from hpcbench.results.schema import EVAL_COLUMNS, ROOT_ATTRS, SUMMARY_KEYS
from hpcbench.results.store import read_run
from hpcbench.runtime import plan
from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.trainer import Trainer

from conftest import first_under_both, mpirun, ok, requires_mpi

pytestmark = [requires_mpi, pytest.mark.timeout(600)]

STEPS = 80  # enough that every method learns even when one worker takes most of an asynchronous budget
SMALL = ("--dataset", "digits", "--model", "mlp", "--steps", str(STEPS), "--lr", "0.1", "--set", "evals=5")
BUDGET = 4 * STEPS * 32
# The first three take each kind of one-sided traffic (a locked add into a centre, adds into mailboxes,
# messages): the pass under the second MPI family runs them.
# Then every other algorithm outside the parameter-server family, as the registry lists them.
FIRST = [("easgd", ()), ("gossip", ("--set", "gossip.variant=push")), ("sgp", ())]
ALGOS = FIRST + [(name, ()) for name in ALGORITHMS.names()
                 if ALGORITHMS.get(name).family != PARAMETER_SERVER and name not in ("easgd", "sgp")]


@pytest.mark.parametrize("algo, extra", first_under_both(ALGOS, 3),
                         ids=[algo + ("-push" if extra else "") for algo, extra in ALGOS])
def test_runs_learn_and_write_a_complete_file(tmp_path, algo, extra):
    out = tmp_path / "r.h5"
    ok(mpirun(5, "run", "--algo", algo, *SMALL, *extra, "--out", str(out)))
    rec = read_run(out)
    assert all(k in rec.attrs for k in ROOT_ATTRS) and sorted(rec.summary) == sorted(SUMMARY_KEYS)
    assert all(c in rec.evals for c in EVAL_COLUMNS)
    assert rec.evals["accuracy"][-1] > rec.evals["accuracy"][0] + 0.3  # it learned
    final = rec.tables["final_models"]
    assert sorted(final["worker"].tolist()) == [1, 2, 3, 4]
    assert rec.evals["samples"][-1] == final["samples"].sum()
    if ALGORITHMS.get(algo).asynchronous:  # the shared budget, claimed batch by batch
        assert final["samples"].sum() == BUDGET
    else:
        assert (final["samples"] == STEPS * 32).all()
    assert np.isfinite(rec.evals["consensus"][1:]).all()
    assert np.isfinite(rec.tables["learning_rate"]["lr"]).all()
    evaluations_moved_no_model_while_the_workers_trained(rec)


def evaluations_moved_no_model_while_the_workers_trained(rec) -> None:
    """Measuring does not perturb: rank 0 reads the workers' models (their kept snapshots) only once
    every worker has trained its last batch, yet the evaluations stand for times during training."""
    tl, ops = rec.timeline, rec.ops
    trained = tl["t_end"][(tl["rank"] > 0) & (tl["op"] == ops.index("Compute"))].max()
    reads = (tl["rank"] == 0) & (tl["op"] == ops.index("Read"))
    own_centre = tl["nbytes"] == 4 * rec.attrs["config"]["parameters"]  # easgd: rank 0's own window, no link
    assert reads.any() and (tl["t_start"][reads & ~own_centre] >= trained).all()
    t, samples = rec.evals["t"], rec.evals["samples"]
    assert len(t) >= 5 and (np.diff(t) >= 0).all() and (np.diff(samples) >= 0).all()
    # Snapshots stand for times during training, the final evaluation for the end. Rank 0 notes a snapshot as
    # it reads the report that crossed it, which on a machine with fewer cores than ranks may come a few
    # milliseconds after the last batch ended (CI: the third from last, 1 ms late): every snapshot is noted
    # before rank 0 reads any model, and the first ones while the workers still trained.
    assert (t[1:-1] <= tl["t_start"][reads & ~own_centre].min()).all() and t[-1] >= trained
    assert (t[1:len(t) // 2] < trained).all()
    # Snapshot k is kept once the workers' reports reach k·eval_every samples, never before.
    every = rec.attrs["config"]["eval_every"]
    assert (samples[1:-1] >= every * np.arange(1, len(t) - 1)).all()
    if rec.algorithm == "allreduce":  # identical replicas: every worker kept the same step
        assert (rec.evals["consensus"][1:] == 0).all()


@pytest.mark.parametrize("algo", first_under_both(["osgp", "sgp"]))
def test_push_sum_at_zero_learning_rate_conserves_mass_across_real_messages(tmp_path, algo):
    out = tmp_path / "sgp.h5"
    ok(mpirun(5, "run", "--algo", algo, "--steps", "25", "--lr", "0", "--set", f"{algo}.init_spread=0.05",
              "--out", str(out)))
    final = read_run(out).tables["final_models"]
    cfg = RunConfig(algo=algo)
    ctx = plan.make_context(plan.validate(cfg), 4, Trainer("mlp", load_dataset("digits"), seed=0).initial,
                            1437)
    start = sum(float(starting_point(ctx, r, 0.05, np.float64).sum()) for r in range(1, 5))
    assert final["weight"].sum() == 4.0  # exactly: halves of powers of two
    assert final["mass"].sum() == pytest.approx(start, rel=1e-5, abs=1e-3)


@pytest.mark.both
def test_osgp_drives_consensus_toward_zero_from_spread_out_starts(tmp_path):
    out = tmp_path / "osgp.h5"
    ok(mpirun(5, "run", "--algo", "osgp", "--steps", "30", "--lr", "0", "--set", "osgp.init_spread=0.05",
              "--set", "evals=6", "--out", str(out)))
    rec = read_run(out)
    start = 0.05 * np.sqrt(rec.attrs["config"]["parameters"] * 3 / 4)  # expected ‖z_i − z̄‖ at the start
    assert rec.evals["consensus"][-1] < 1e-4 * start
    assert rec.tables["final_models"]["weight"].sum() == pytest.approx(4.0, abs=1e-12)


@pytest.mark.parametrize("algo, extra", first_under_both([("gossip", ("--set", "gossip.variant=push")), ("easgd", ()),
                                                           ("osgp", ()), ("asgd", ())]))
def test_a_slowed_worker_never_leaves_the_others_waiting(tmp_path, algo, extra):
    out = tmp_path / "slow.h5"
    ok(mpirun(5, "run", "--algo", algo, "--steps", "20", "--stragglers", "0.25:8", *extra, "--out", str(out),
              timeout=120))
    rec = read_run(out)
    assert rec.evals["samples"][-1] == 4 * 20 * 32  # the shared budget, exactly
    samples = rec.tables["final_models"]["samples"] if algo != "asgd" else None
    tl = rec.timeline
    compute = tl["phase"] == rec.phases.index("compute")
    medians = {r: np.median((tl["t_end"] - tl["t_start"])[compute & (tl["rank"] == r)]) for r in range(1, 5)}
    [slow] = rec.attrs["config"]["straggler_ranks"]
    others = [m for r, m in medians.items() if r != slow]
    # The straggler really was slowed (8× its own compute; a ratio well below 8 allows for a loaded
    # machine, where the others' computes stretch too).
    assert medians[slow] > 1.5 * np.median(others) and medians[slow] == max(medians.values())
    if samples is not None and algo != "osgp":  # the others did not wait for it: they took more steps
        # (below the others' median rather than their minimum: on a loaded machine another worker can
        # be descheduled for as long as the straggler sleeps)
        assert samples[slow - 1] < np.median(np.delete(samples, slow - 1))
