"""Parameter-server update rules against naive re-implementations of the papers' rules, written out here.

The real server program (ring buffer, Δ, penalties, log) is driven with scripted gradient arrivals
of mixed staleness; every published vector and log row is compared with the naive reference.
"""
import math

import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.ops import Op, Recv
from hpcbench.algorithms.rules import gap_divisor
from hpcbench.config import RunConfig
from hpcbench.errors import RuntimeFailure
from hpcbench.runtime import plan

from arrivals import SERVERS, random_arrivals, serve
from lockstep import drive

D, WORKERS, LR, BETA, EPS = 6, 3, 0.1, 0.9, 1e-8


def drive_server(name, arrivals, momentum=0.0, nesterov=False, wd=0.0, history=0, budget=0, lr=LR):
    """The real server program fed ``arrivals`` (tests/arrivals.py), with this module's sizes and options."""
    options = {"history": history, **({"beta": BETA} if NAIVE[name]["gap"] else {})} if NAIVE[name]["delta"] else {}
    return serve(name, arrivals, size=D, workers=WORKERS, lr=lr, momentum=momentum, nesterov=nesterov, wd=wd,
                 options=options, budget=budget)


# How each parameter server in the registry differs, as the naive server below reads it: DANA's
# momentum per worker, the staleness divisor, the Gap-Aware penalty, DC-ASGD's compensation λ (and
# whether the server needs Δ, so takes a history).
NAIVE = {
    "asgd": dict(dana=False, staleness=False, gap=False, lam=0.0, delta=False),
    "sa-asgd": dict(dana=False, staleness=True, gap=False, lam=0.0, delta=False),
    "ga-asgd": dict(dana=False, staleness=False, gap=True, lam=0.0, delta=True),
    "dana": dict(dana=True, staleness=False, gap=False, lam=0.0, delta=False),
    "dana-ga": dict(dana=True, staleness=False, gap=True, lam=0.0, delta=True),
    "dc-asgd": dict(dana=False, staleness=False, gap=False, lam=0.04, delta=True),
}


def test_every_parameter_server_in_the_registry_has_a_naive_reference_here():
    assert set(SERVERS) == set(NAIVE)


def naive_server(name, x0, arrivals, momentum=0.0, nesterov=False, wd=0.0):
    """The papers' server rules, one element at a time, in float64. Rows: (worker, version used,
    version applied onto, staleness, mean divisor, mean gap, and DC-ASGD's mean λ|g||Δ|)."""
    theta = x0.astype(np.float64).copy()
    buf = np.zeros(D)
    bufs = np.zeros((WORKERS, D))
    v, k, lr_max = np.zeros(D), 0, 0.0
    dana, gap, lam = NAIVE[name]["dana"], NAIVE[name]["gap"], NAIVE[name]["lam"]

    def publish():
        return theta - LR * momentum * bufs.sum(axis=0) if dana else theta.copy()

    history, rows = [publish()], []
    for worker, staleness, grad in arrivals:
        now = len(history) - 1
        used = max(now - staleness, 0)
        tau = now - used
        lr_max = max(lr_max, LR)
        penalty = np.ones(D)
        ratio = np.full(D, np.nan)
        if NAIVE[name]["staleness"]:
            penalty[:] = max(tau, 1)
        if gap:
            u = (momentum * bufs[worker - 1] + grad if dana else buf) if momentum else grad
            k += 1
            for i in range(D):
                v[i] = BETA * v[i] + (1 - BETA) * u[i] ** 2
            if v.any():
                for i in range(D):
                    c = lr_max * (math.sqrt(v[i] / (1 - BETA**k)) + EPS)
                    ratio[i] = abs(history[now][i] - history[used][i]) / c
                    penalty[i] = 1 + ratio[i]
        gap_now = history[now] - history[used]
        compensation = [lam * grad[i] * grad[i] * gap_now[i] for i in range(D)]  # Zheng et al.'s g⊙g⊙Δ
        step = np.array([(grad[i] + wd * theta[i] + compensation[i]) / penalty[i] for i in range(D)])
        if dana:
            new = momentum * bufs[worker - 1] + step
            theta = theta - LR * new
            bufs[worker - 1] = new
        else:
            if momentum:
                buf = momentum * buf + step
                step = step + momentum * buf if nesterov else buf
            theta = theta - LR * step
        history.append(publish())
        rows.append((worker, used, now, tau, penalty.mean(), np.nanmean(ratio) if v.any() and gap else np.nan,
                     np.mean([lam * abs(grad[i]) * abs(gap_now[i]) for i in range(D)])))
    return history, rows


def arrivals(seed=1, count=12):
    return random_arrivals(WORKERS, D, seed, count)


CASES = [(name, m, nest, wd) for name in SERVERS
         for (m, nest, wd) in ((0.0, False, 0.0), (0.9, False, 0.01), (0.9, True, 0.0))
         if not (NAIVE[name]["dana"] and nest)]


@pytest.mark.parametrize("name, momentum, nesterov, wd", CASES)
def test_rule_matches_the_naive_reference(name, momentum, nesterov, wd):
    arr = arrivals()
    x0, published, logs = drive_server(name, arr, momentum, nesterov, wd)
    expected, rows = naive_server(name, x0, arr, momentum, nesterov, wd)
    assert len(published) == len(expected)
    for version, vec in enumerate(expected):
        np.testing.assert_allclose(published[version], vec, rtol=1e-5, atol=1e-6, err_msg=f"version {version}")
    for got, want in zip(logs["updates"], rows):
        assert got[:4] == want[:4]  # worker, version used, version applied onto, staleness
        assert got[4] == pytest.approx(want[4], rel=1e-5)
        assert (math.isnan(got[5]) and math.isnan(want[5])) or got[5] == pytest.approx(want[5], rel=1e-4)
        assert got[6] == pytest.approx(LR)  # the rate applied (no warm-up here)
        if NAIVE[name]["lam"]:  # the column DC-ASGD adds to the table
            assert len(got) == 9 and got[8] == pytest.approx(want[6], rel=1e-4, abs=1e-9)
        else:
            assert len(got) == 8
    assert any(row[3] > 0 for row in logs["updates"])  # staleness really was mixed


def test_gap_is_one_exactly_where_the_parameters_did_not_move():
    delta = np.array([0.0, 0.3, 0.0, -0.2], dtype=np.float32)
    g, ratio = gap_divisor(delta, np.full(4, 0.04, np.float32), lr_max=0.1, eps=1e-8)
    assert (g[delta == 0] == 1.0).all() and (ratio[delta == 0] == 0.0).all()
    np.testing.assert_allclose(g[delta != 0], 1 + np.abs(delta[delta != 0]) / (0.1 * (0.2 + 1e-8)), rtol=1e-6)


def test_first_update_is_not_penalised():
    arr = [(2, 0, np.ones(D, np.float32))] + arrivals(count=2)
    x0, published, logs = drive_server("ga-asgd", arr, momentum=0.9)
    first = logs["updates"][0]
    assert first[4] == 1.0 and math.isnan(first[5])  # momentum buffer still zero: v̂ = 0, no penalty
    np.testing.assert_allclose(published[1], x0 - LR * np.ones(D), rtol=1e-6)


def test_dana_publishes_the_look_ahead():
    arr = arrivals(count=6)
    x0, published, _ = drive_server("dana", arr, momentum=0.9)
    expected, _ = naive_server("dana", x0, arr, momentum=0.9)
    theta = x0.astype(np.float64)
    bufs = np.zeros((WORKERS, D))
    for worker, _, grad in arr:
        bufs[worker - 1] = 0.9 * bufs[worker - 1] + grad
        theta = theta - LR * bufs[worker - 1]
    np.testing.assert_allclose(published[len(arr)], theta - LR * 0.9 * bufs.sum(axis=0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(published[len(arr)], theta)  # the look-ahead differs from θ itself


@pytest.mark.parametrize("name", [n for n in SERVERS if NAIVE[n]["delta"]])
def test_gradients_older_than_the_ring_are_applied_with_the_echoed_parameters(name):
    fresh = [(1, 0, np.ones(D, np.float32))] * 5
    stale = (2, 4, np.full(D, 3.0, np.float32))  # read 4 versions ago; the ring keeps only 2
    arr = fresh + [stale] + fresh[:3]
    x0, published, logs = drive_server(name, arr, momentum=0.9, history=2)
    expected, rows = naive_server(name, x0, arr, momentum=0.9)  # the naive server keeps every version
    assert logs["late"] == [(2, 9), (3, 9)]  # only arrivals after the budget go unapplied (and are logged)
    assert logs["echoes"] == [(2, 1)]  # the worker was asked for version 1, once
    assert [row[7] > 0 for row in logs["updates"]] == [False] * 5 + [True] + [False] * 3
    assert len(published) == len(expected) == 10  # every gradient applied, the stale one included
    for version, vec in enumerate(expected):
        np.testing.assert_allclose(published[version], vec, rtol=1e-5, atol=1e-6, err_msg=f"version {version}")
    stale = logs["updates"][5]  # the penalty, or the compensation, used the exact Δ
    assert stale[5] == pytest.approx(rows[5][5], rel=1e-4, nan_ok=True)
    assert stale[8:] == (pytest.approx(rows[5][6:]) if NAIVE[name]["lam"] else ())


def test_ga_under_stragglers_matches_a_naive_replay_of_the_same_arrival_order(tmp_path):
    """A simulated ga-asgd run with stragglers and a ring too short for them (so Δ is echoed), replayed
    by a single-process Gap-Aware server written out here, fed the arrivals in the order the log shows."""
    import contextlib
    import io

    from hpcbench.cli import main
    from hpcbench.results.store import read_run
    from hpcbench.workload.datasets import load_dataset
    from hpcbench.workload.trainer import Trainer

    from reference import streams

    workers, batch, lr, momentum, beta = 6, 16, 0.05, 0.9, 0.999
    out = tmp_path / "ga.h5"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["simulate", "--algo", "ga-asgd", "--workers", str(workers), "--steps", "20", "--batch-size",
                     str(batch), "--lr", str(lr), "--momentum", str(momentum), "--set", "warmup_epochs=0",
                     "--set", "ga-asgd.history=3", "--stragglers", "0.34:3", "--out", str(out)]) == 0
    rec = read_run(out)
    up = rec.tables["updates"]
    assert (up["echo_bytes"] > 0).sum() >= 5 and up["staleness"].max() > 3  # the echo path was exercised
    assert rec.summary["too_stale"] == 0 and len(up["t"]) == 20 * workers  # and nothing was dropped

    data = load_dataset("digits")
    trainer = Trainer("mlp", data, 0)
    batches = streams(len(data.y_train), workers, batch, 0)
    # In the server's float32: the penalty divides by 1 + |Δ|/C with a small C, which amplifies any
    # rounding difference, so a float64 replay drifts by a few percent over 120 updates.
    history = [trainer.initial.astype(np.float32)]
    theta, buf, v = history[0].copy(), np.zeros_like(history[0]), np.zeros_like(history[0])
    penalties = []
    for k, (worker, used) in enumerate(zip(up["worker"], up["version_used"]), start=1):
        grad, _, _ = trainer.gradient(history[used], *trainer.batch(batches[worker - 1].next()))
        v = beta * v + (1 - beta) * buf**2  # the step direction: the momentum buffer before this update
        gap = np.ones_like(theta)
        if v.any():
            gap = 1 + np.abs(theta - history[used]) / (lr * (np.sqrt(v / (1 - beta**k)) + 1e-8))
        penalties.append(gap.mean())
        buf = momentum * buf + grad / gap
        theta = theta - lr * buf
        history.append(theta.copy())
    np.testing.assert_allclose(up["penalty_mean"], penalties, rtol=1e-3)
    moved = np.linalg.norm(theta - history[0])
    assert np.linalg.norm(rec.final_params - theta) < 5e-3 * moved


@pytest.mark.parametrize("name", [n for n in SERVERS if NAIVE[n]["delta"]])
def test_only_versions_the_ring_no_longer_holds_are_echoed(name):
    """A ring of 3 holds the current version and the two before it: staleness 0–2 is answered from
    it, staleness 3 asks the worker."""
    g = np.ones(D, np.float32)
    arr = [(1, 0, g)] * 4 + [(2, 1, g), (3, 2, g), (2, 3, g), (1, 2, g), (3, 1, g)]
    x0, published, logs = drive_server(name, arr, momentum=0.9, history=3)
    assert [row[1] for row in logs["updates"]] == [0, 1, 2, 3, 3, 3, 3, 5, 7]  # the versions used
    assert [row[7] > 0 for row in logs["updates"]] == [False] * 6 + [True] + [False] * 2
    assert logs["echoes"] == [(2, 3)]
    expected, _ = naive_server(name, x0, arr, momentum=0.9)
    np.testing.assert_allclose(published[len(arr)], expected[len(arr)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", [n for n in SERVERS if NAIVE[n]["gap"]])
def test_gap_aware_at_a_zero_learning_rate_leaves_the_model_as_it_was(name):
    """With η = 0 throughout, C = η_max(√v̂ + ε) is 0: no penalty is computed (it would be |Δ|/0), and
    nothing moves."""
    x0, published, logs = drive_server(name, arrivals(count=9), momentum=0.9, lr=0.0)
    assert all(np.array_equal(vec, x0) for vec in published.values())
    assert all(row[4] == 1.0 and math.isnan(row[5]) for row in logs["updates"])


@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_server_state_it_reports_is_what_it_allocates(name, momentum):
    """``server_state_bytes`` in every server's summary: measured here as what building the server
    allocates (tracemalloc sees numpy's buffers), less its one copy of the parameters."""
    import tracemalloc

    size, workers = 250_000, 4
    cfg = RunConfig(algo=name, steps=10, momentum=momentum)
    algo_cls = ALGORITHMS.get(name)
    ctx = plan.make_context(plan.validate(cfg), workers, np.zeros(size, np.float32), train_size=10**6)
    tracemalloc.start()
    try:
        algo = algo_cls(ctx)
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    one_copy = 4 * size
    assert abs(allocated - one_copy - algo.state_bytes()) < 0.01 * one_copy, (allocated, algo.state_bytes())


def test_the_default_ring_holds_two_versions_per_worker_and_four():
    """history = 0: 2·workers + 4 versions (10 with 3 workers), so staleness 9 is answered from the
    ring and staleness 10 asks the worker."""
    g = np.ones(D, np.float32)
    arr = [(1, 0, g)] * 10 + [(2, 9, g), (3, 10, g)]
    _, _, logs = drive_server("ga-asgd", arr, momentum=0.9)
    assert [row[3] for row in logs["updates"][10:]] == [9, 10]
    assert logs["echoes"] == [(3, 1)]


def test_a_worker_that_reads_a_torn_parameter_window_says_so():
    """The window's version is written before the parameters and its check after them: a read that
    sees two different numbers caught the server mid-publish (a locking bug), and the run ends."""
    cfg = RunConfig(algo="asgd", steps=2, warmup_epochs=0.0)
    algo_cls = ALGORITHMS.get("asgd")
    algo = algo_cls(plan.make_context(plan.validate(cfg), WORKERS, np.zeros(D, np.float32), train_size=10**9))
    program = algo.worker(2)
    assert next(program).window == "params"
    with pytest.raises(RuntimeFailure) as torn:
        program.send([algo.params_frame.pack(version=3, params=np.zeros(D, np.float32), check=2)])
    assert str(torn.value) == "rank 2 read a torn parameter window (header version 3, trailer 2)"


def test_an_echo_of_another_version_than_the_gradient_used_ends_the_run():
    cfg = RunConfig(algo="ga-asgd", steps=4, lr=LR, warmup_epochs=0.0, options={"ga-asgd": {"history": 1}})
    algo_cls = ALGORITHMS.get("ga-asgd")
    algo = algo_cls(plan.make_context(plan.validate(cfg), WORKERS, np.zeros(D, np.float32), train_size=10**9))
    grads = iter([(1, 0), (2, 0)])  # worker 2 computed on version 0, which a ring of 1 no longer holds

    def answer(op: Op) -> object:
        if isinstance(op, Recv) and op.channel == "echo":  # answers with version 1 instead of 0
            return (op.src, algo.params_frame.pack(version=1, params=np.zeros(D, np.float32), check=1))
        if isinstance(op, Recv):
            worker, used = next(grads)
            return (worker, algo.grad_frame.pack(version=used, grad=np.ones(D, np.float32)))
        return None

    with pytest.raises(RuntimeFailure) as wrong:
        drive(algo.server(), answer)
    assert str(wrong.value) == "rank 2 echoed version 1, but its gradient was computed on 0"


def test_delay_compensation_moves_a_stale_gradient_towards_the_current_model_and_not_a_fresh_one():
    """A fresh gradient (Δ = 0) is applied as asgd would; a stale one differs from asgd's by exactly
    λ·g⊙g⊙Δ, and the recorded compensation is 0 for the fresh one."""
    g = np.full(D, 2.0, np.float32)
    arr = [(1, 0, g), (2, 0, g), (3, 2, g)]
    x0, dc, dc_logs = drive_server("dc-asgd", arr)
    _, plain, _ = drive_server("asgd", arr)
    np.testing.assert_array_equal(dc[2], plain[2])  # both fresh
    assert [row[8] for row in dc_logs["updates"][:2]] == [0.0, 0.0]
    delta = dc[2] - dc[0]  # the third was computed on version 0, applied onto version 2
    np.testing.assert_allclose(dc[3], plain[3] - LR * 0.04 * g * g * delta, rtol=1e-6)
    assert dc_logs["updates"][2][8] == pytest.approx(float(np.mean(0.04 * 2.0 * np.abs(delta))), rel=1e-5)
