"""Identical workers stay identical: with the same start, the same gradient and the same speed, every
average or push-sum round of a method that waits for its peers is between equal models, so it
reduces to one worker's momentum SGD (PyTorch's heavy ball, buf ← m·buf + g, x ← x − lr·buf),
written out here. A method that drops the momentum buffer, mixes in a foreign vector, or loses a
step fails it. (Asynchronous gossip and osgp mix with whatever a peer last published, which at equal
speeds may be a step older: tests/test_gossip_closed_form.py writes theirs out event by event.)"""
import numpy as np
import pytest

from quadratic import X0, run_quadratic

LR, H, STEPS, WORKERS = 0.05, 0.8, 12, 4


def heavy_ball(steps: int, momentum: float, nesterov: bool = False) -> list[np.ndarray]:
    """x_0 … x_steps: the points a worker takes its gradients at, then where it ends."""
    x, buf, points = X0.astype(np.float64), np.zeros(X0.size), [X0.astype(np.float64)]
    for _ in range(steps):
        g = H * x
        buf = momentum * buf + g
        x = x - LR * (g + momentum * buf if nesterov else buf)
        points.append(x)
    return points


@pytest.mark.parametrize("name, options", [
    ("allreduce", {}), ("allreduce", {"overlap": False}), ("local-sgd", {"period": 3}), ("sgp", {}),
])
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_identical_workers_follow_one_workers_momentum_sgd(name, options, momentum, nesterov):
    ran = run_quadratic(name, WORKERS, STEPS, options, lr=LR, curvature=lambda rank: H, momentum=momentum,
                        nesterov=nesterov)
    assert set(ran.steps.values()) == {STEPS}
    np.testing.assert_allclose(ran.last, heavy_ball(STEPS, momentum, nesterov)[-1], rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("name, workers", [("allreduce", 2), ("local-sgd", 2), ("sgp", 2), ("asgd", 1),
                                           ("ga-asgd", 1)])
@pytest.mark.parametrize("evals", [STEPS, 1])
def test_rank0_shows_the_training_loss_and_accuracy_the_workers_measured(name, workers, evals):
    """The progress line: every worker reports the mean loss and share of right answers of its steps
    since its last report (about four reports per evaluation interval: every step with an evaluation
    per step, every 3 steps with one per run; a server: every gradient it applies); rank 0 shows their
    moving average (the first report as it is, then 0.1 of each new one). Equal workers at equal
    speeds take their k-th gradients at gradient descent's k-th point (a lone worker of a server too)."""
    shown: list = []
    ran = run_quadratic(name, workers, STEPS, {}, lr=LR, curvature=lambda rank: H, momentum=0.0, evals=evals,
                        progress=shown)
    points = heavy_ball(STEPS, 0.0)[:-1]
    losses = [0.5 * H * float(x @ x) for x in points]
    right = [1.0 if float(x @ x) < 4 else 0.0 for x in points]
    assert right[0] == 0.0 and right[-1] == 1.0  # the accuracy changes during the run
    every = 1 if name.endswith("asgd") else max(1, STEPS * workers * ran.batch // evals // (4 * ran.batch * workers))
    assert every == (1 if evals == STEPS or name.endswith("asgd") else 3)
    loss = accuracy = float("nan")
    for first in range(0, STEPS, every):  # each report, each worker's, in worker order
        steps = slice(first, first + every)
        mean_loss, mean_right = np.mean(losses[steps]), np.mean(right[steps])
        for _ in range(workers):
            if loss != loss:
                loss, accuracy = mean_loss, mean_right
            else:
                loss, accuracy = loss + 0.1 * (mean_loss - loss), accuracy + 0.1 * (mean_right - accuracy)
    samples, last_loss, last_accuracy = shown[-1]
    assert samples == workers * STEPS * ran.batch
    assert (last_loss, last_accuracy) == pytest.approx((loss, accuracy), rel=1e-4)
