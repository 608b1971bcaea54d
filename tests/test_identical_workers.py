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


def heavy_ball(steps: int, momentum: float, nesterov: bool = False) -> np.ndarray:
    x, buf = X0.astype(np.float64), np.zeros(X0.size)
    for _ in range(steps):
        g = H * x
        buf = momentum * buf + g
        x = x - LR * (g + momentum * buf if nesterov else buf)
    return x


@pytest.mark.parametrize("name, options", [
    ("allreduce", {}), ("allreduce", {"overlap": False}), ("local-sgd", {"period": 3}), ("sgp", {}),
])
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_identical_workers_follow_one_workers_momentum_sgd(name, options, momentum, nesterov):
    ran = run_quadratic(name, WORKERS, STEPS, options, lr=LR, curvature=lambda rank: H, momentum=momentum,
                        nesterov=nesterov)
    assert set(ran.steps.values()) == {STEPS}
    np.testing.assert_allclose(ran.last, heavy_ball(STEPS, momentum, nesterov), rtol=2e-5, atol=1e-7)
