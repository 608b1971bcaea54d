"""What rank 0 evaluates during a run: the snapshot protocol of the decentralized methods, on the real
programs in the simulator (tests/quadratic.py: worker r's gradient is H_r·x, so workers differ).

Synchronous methods keep snapshot k at the step whose samples first reach k·eval_every, all at the
same step: it must be exactly the model a run stopped at that step ends with. Asynchronous methods
keep a cut at the time rank 0 asks: each worker after the step during which the request arrives.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcbench.algorithms import decentral, ops
from hpcbench.config import RunConfig
from hpcbench.runtime import plan
from hpcbench.runtime.sim.engine import Engine

from arrivals import SERVERS
from quadratic import X0, run_quadratic

STEPS = 12


def curvature(rank: int) -> float:
    return 0.2 * rank


@pytest.mark.parametrize("name, options, at", [
    ("allreduce", {}, range(1, STEPS)),
    ("allreduce", {"overlap": False}, range(1, STEPS)),  # one flat all-reduce after the backward pass
    ("local-sgd", {"period": 4}, range(1, STEPS)),  # mid-period: the workers' average, as a run ending there
    ("easgd-sync", {"tau": 3}, range(3, STEPS, 3)),  # the centre, which moves only at exchanges
])
def test_a_synchronous_snapshot_is_the_model_a_run_stopped_at_its_step_ends_with(name, options, at):
    workers = 3
    long = run_quadratic(name, workers, STEPS, options, curvature=curvature, momentum=0.5, evals=STEPS)
    per_step = workers * long.batch
    samples = [s for s, _ in long.snapshots]
    assert samples[:STEPS + 1] == [k * per_step for k in range(STEPS + 1)]  # the start, then every step
    assert samples[STEPS + 1:] in ([], [STEPS * per_step])  # and the final model, unless the last step's was it
    assert [op.updates for _, op in long.logs.snapshots[:STEPS + 1]] == [k * workers for k in range(STEPS + 1)]
    for steps in at:
        short = run_quadratic(name, workers, steps, options, curvature=curvature, momentum=0.5)
        np.testing.assert_allclose(long.snapshots[steps][1], short.last, rtol=1e-6, atol=1e-7)
    assert not np.allclose(long.snapshots[at[0]][1], long.snapshots[at[1]][1])


@pytest.mark.parametrize("name, options", [("gossip", {}), ("gossip", {"variant": "push"}), ("osgp", {"tau": 2}),
                                           ("easgd", {})])
def test_an_asynchronous_snapshot_is_a_cut_taken_when_rank0_asks(name, options):
    workers, evals = 4, 6
    slow = {2: 1.7, 3: 2.3}
    ran = run_quadratic(name, workers, STEPS, options, curvature=curvature, slow=slow, evals=evals)
    budget = STEPS * workers * ran.batch
    every = budget // evals
    samples = [s for s, _ in ran.snapshots]
    assert samples[0] == 0 and samples[-1] == budget and len(samples) == evals + 2
    for k, got in enumerate(samples[1:-1], start=1):
        # Noted once the reports reach k·every; kept by each worker within the step it is in then.
        assert k * every <= got <= min(k * every + workers * ran.batch, budget), (k, samples)
    models = [m for _, m in ran.snapshots]
    assert all(np.isfinite(m).all() for m in models)
    assert not np.allclose(models[0], models[-2]) and not np.allclose(models[1], models[-2])  # later cuts, later models
    assert sum(ran.steps.values()) == STEPS * workers  # the shared budget, exactly


@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("evals", [STEPS, 4])
def test_a_parameter_server_snapshot_is_the_model_after_that_many_updates(name, evals):
    """One worker: nothing is stale, every method is sequential gradient descent, x_k = (1 − lr·H)^k x_0;
    rank 0 evaluates every budget/evals samples."""
    lr, h = 0.1, 0.5
    ran = run_quadratic(name, 1, STEPS, lr=lr, curvature=lambda rank: h, evals=evals)
    every = STEPS // evals
    assert [op.updates for _, op in ran.logs.snapshots] == list(range(0, STEPS + 1, every))
    assert [s for s, _ in ran.snapshots] == [k * ran.batch for k in range(0, STEPS + 1, every)]
    for k, (_, model) in zip(range(0, STEPS + 1, every), ran.snapshots):
        np.testing.assert_allclose(model, (1 - lr * h) ** k * X0, rtol=1e-5)


@pytest.mark.parametrize("name, options", [("allreduce", {}), ("local-sgd", {"period": 4})])
def test_replicas_end_identical_with_weight_one_and_their_own_mass(name, options):
    """final_models holds each worker's (samples, updates, weight, mass): methods without push-sum
    carry weight 1, and mass is the sum of the model's elements; these end with identical replicas."""
    workers = 3
    ran = run_quadratic(name, workers, STEPS, options, curvature=curvature)
    rows = ran.logs.tables["final_models"]  # (t, worker, samples, updates, weight, mass)
    assert [row[1] for row in rows] == [1, 2, 3]
    assert all(row[2:4] == (STEPS * ran.batch, STEPS) for row in rows)
    assert all(row[4] == 1.0 and row[5] == pytest.approx(float(ran.last.sum()), rel=1e-6) for row in rows)


def test_rank0_reads_no_kept_snapshot_before_each_worker_says_it_kept_what_was_asked():
    """A request rank 0 sends while a worker is finishing crosses the worker's last report: the worker
    keeps it only after that report, so rank 0 must wait for the worker's word that every request it
    was sent is kept before reading the snapshots (else it reads a slot never written: samples 0).
    Rank 0's program is driven here by hand, message by message, in the order the race takes."""
    ctx = plan.make_context(plan.validate(RunConfig(algo="osgp", steps=4, batch_size=2)), 2, X0.astype(np.float32), 64)
    frame = decentral.model_frame(ctx.size)
    report = decentral.PROGRESS.pack
    every = ctx.eval_every
    inbox = [(1, report(samples=every, done=0)),  # the reports reach snapshot 1: rank 0 asks both workers
             (1, report(samples=ctx.budget // 2, done=1)),  # both had already ended: the requests cross these
             (2, report(samples=ctx.budget // 2, done=1))]
    said_kept: set[int] = set()
    program = decentral.coordinate(ctx, synchronous=False)
    got = None
    while True:
        try:
            op = program.send(got)
        except StopIteration:
            break
        got = None
        if type(op) is ops.Recv:
            if not inbox:  # rank 0 waits on: the workers' word that they kept all, here after the race
                inbox = [(r, report(samples=ctx.budget // 2, done=decentral.KEPT_ALL)) for r in (1, 2)]
            got = inbox.pop(0)
            said_kept |= {got[0]} if decentral.PROGRESS.integer(got[1], "done") == decentral.KEPT_ALL else set()
        elif type(op) is ops.Read:
            if op.window == "kept":
                assert set(op.ranks) <= said_kept, "rank 0 read a snapshot its worker may not have kept yet"
            got = [decentral.packed(frame, ctx, 2, X0.astype(np.float32)) if op.window != "kept"
                   else np.zeros(op.nbytes, np.uint8) for _ in op.ranks]
        elif type(op) is ops.Timestamp:
            got = 0.0
    assert said_kept == {1, 2}


@pytest.mark.parametrize("name", ["allreduce", "local-sgd", "gossip"])
def test_rank0_looks_less_often_only_until_the_next_report_it_must_act_on(monkeypatch, name):
    # At a steady pace (each step 1 s, the network instant) rank 0 may look less often between snapshots
    # (calm_s: a real coordinator otherwise wakes for every report, 10% of a core on 2 shared cores), but
    # never past the moment it notes the next one: that moment is a snapshot's time.
    looks = []
    recv = Engine.recv

    def spy(self, rank, op):
        if rank == 0 and op.channel == "progress":
            looks.append((self.now, op.calm_s))
        return recv(self, rank, op)

    monkeypatch.setattr(Engine, "recv", spy)
    ran = run_quadratic(name, 3, 48, {"period": 4} if name == "local-sgd" else {}, evals=8)
    noted = sorted(t for t, op in ran.logs.snapshots[1:])  # the last: the final models, read after the last report
    assert len(noted) >= 8
    calm = [(t, c) for t, c in looks if c > 0]
    assert len(calm) >= 8, looks
    assert len(calm) >= len([t for t, _ in looks if noted[1] <= t < noted[-1]]) // 2, looks
    for t, c in calm:
        due = min(n for n in noted if n > t)
        assert t + c <= due - 0.05 * (noted[1] - noted[0]), (t, c, due, noted)


@given(st.floats(0, 1e4), st.floats(1e-3, 1e3), st.integers(1, 10**6), st.integers(1, 10**6),
       st.integers(0, 10**7), st.floats(0, 1e3))
def test_the_calm_ends_before_the_due_report_at_the_last_pace_and_never_goes_negative(t0, gap, s0, more, left, since):
    # (t0, s0) and (t0 + gap, s0 + more): the last two snapshots noted; due: `left` samples after the second
    now, due = t0 + gap + since, s0 + more + left
    calm = decentral.calm_until([(t0, s0), (t0 + gap, s0 + more)], now, due)
    at_pace = t0 + gap + left * gap / more  # when the due report comes if the pace holds
    assert calm >= 0
    assert calm == 0 or now + calm <= at_pace - (1 - decentral.CALM_SHARE) * left * gap / more + 1e-6 * (1 + at_pace)
    if since == 0 and left:
        assert calm == pytest.approx(decentral.CALM_SHARE * left * gap / more)
    assert decentral.calm_until([(t0, s0), (t0, s0 + more)], now, due) == 0  # no time between them: no pace
