"""Gossip (pull and push-sum) against an event list written out by hand, on the real programs in the
simulator (tests/quadratic.py). Two workers, so each one's only peer is the other and no random
choice enters; speeds 1 and 1.37 s a step, so no two steps end at the same instant after the start.
"""
from collections import Counter

import numpy as np
import pytest

from quadratic import X0, run_quadratic

LR, STEPS = 0.1, 10
SPEEDS = {1: 1.0, 2: 1.37}


def curvature(rank: int) -> float:
    return 0.3 * rank  # the workers pull apart, so mixing shows


def claimed(total: int) -> Counter:
    """Steps per worker under the shared budget: each claims a batch as it starts a step (worker w's
    j-th at j × its step time); the first ``total`` claims in time order get one."""
    claims = sorted((j * s, w) for w, s in SPEEDS.items() for j in range(total))
    return Counter(w for _, w in claims[:total])


def step_ends(steps: Counter) -> list[tuple[float, int]]:
    return sorted((k * SPEEDS[w], w) for w in SPEEDS for k in range(1, steps[w] + 1))


def local_step(x: np.ndarray, buf: np.ndarray, w: int, momentum: float) -> tuple[np.ndarray, np.ndarray]:
    buf = momentum * buf + curvature(w) * x
    return x - LR * buf, buf


def pull_reference(momentum: float) -> tuple[np.ndarray, Counter]:
    """After its local step a worker averages with the model its peer last published, and publishes.
    → the models at the end (and weights of 1)."""
    steps = claimed(STEPS * len(SPEEDS))
    x = {w: X0.astype(np.float64) for w in SPEEDS}
    buf = {w: np.zeros(X0.size) for w in SPEEDS}
    published = {w: X0.astype(np.float64) for w in SPEEDS}
    for _, w in step_ends(steps):
        x[w], buf[w] = local_step(x[w], buf[w], w, momentum)
        x[w] = (x[w] + published[3 - w]) / 2
        published[w] = x[w].copy()
    return [published[w] for w in SPEEDS], [1.0] * len(SPEEDS), steps


def push_reference(momentum: float) -> tuple[np.ndarray, Counter]:
    """Push-sum: after its local step a worker halves its weight, adds (w, w·z) into its peer's mailbox,
    and absorbs its own mailbox: z ← (w·z + W·(X/W)) / (w + W). At the end every push has landed and
    each absorbs what is left. → the de-biased models z and the weights."""
    steps = claimed(STEPS * len(SPEEDS))
    z = {w: X0.astype(np.float64) for w in SPEEDS}
    weight = {w: 1.0 for w in SPEEDS}
    buf = {w: np.zeros(X0.size) for w in SPEEDS}
    mailbox = {w: (0.0, np.zeros(X0.size)) for w in SPEEDS}

    def absorb(w: int) -> None:
        got_w, got_x = mailbox[w]
        mailbox[w] = (0.0, np.zeros(X0.size))
        if got_w > 0:
            z[w] = (weight[w] * z[w] + got_x) / (weight[w] + got_w)
            weight[w] += got_w

    for _, w in step_ends(steps):
        z[w], buf[w] = local_step(z[w], buf[w], w, momentum)
        weight[w] /= 2
        peer_w, peer_x = mailbox[3 - w]
        mailbox[3 - w] = (peer_w + weight[w], peer_x + weight[w] * z[w])
        absorb(w)
    for w in SPEEDS:
        absorb(w)
    assert sum(weight.values()) == pytest.approx(len(SPEEDS))
    return [z[w] for w in SPEEDS], [weight[w] for w in SPEEDS], steps


@pytest.mark.parametrize("variant, reference", [("pull", pull_reference), ("push", push_reference)])
@pytest.mark.parametrize("momentum", [0.0, 0.6])
def test_gossip_follows_its_event_list(variant, reference, momentum):
    ran = run_quadratic("gossip", 2, STEPS, {"variant": variant}, lr=LR, curvature=curvature,
                        slow={w: s for w, s in SPEEDS.items() if s != 1.0}, momentum=momentum)
    models, weights, steps = reference(momentum)
    assert ran.steps == dict(steps)
    assert steps[1] > steps[2]  # the faster worker took more of the shared budget
    # Evaluated: the workers' mean, with the consensus distance mean ‖z_i − z̄‖ beside it.
    mean = np.mean(models, axis=0)
    np.testing.assert_allclose(ran.last, mean, rtol=1e-5)
    final = ran.logs.snapshots[-1][1]
    assert final.consensus == pytest.approx(np.mean([np.linalg.norm(z - mean) for z in models]), rel=1e-4)
    assert final.consensus > 1e-5  # the two models still differ
    rows = ran.logs.tables["final_models"]  # (t, worker, samples, updates, weight, mass)
    np.testing.assert_allclose([row[4] for row in rows], weights, rtol=1e-12)
    np.testing.assert_allclose([row[5] for row in rows], [w * z.sum() for w, z in zip(weights, models)], rtol=1e-5)
