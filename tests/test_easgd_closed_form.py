"""EASGD's centre against its closed-form recurrence on a quadratic, running the real programs."""
import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.config import RunConfig
from hpcbench.runtime import plan
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.sim.engine import Engine
from hpcbench.runtime.sim.models import ComputeModel, SimConfig

H, LR, ALPHA, TAU, STEPS = 0.5, 0.1, 0.2, 3, 12


def run_quadratic(name: str, workers: int, x0: np.ndarray) -> np.ndarray:
    """Every worker's gradient is H·x (loss ½H‖x‖²); returns the centre rank 0 evaluates last."""
    cfg = RunConfig(algo=name, steps=STEPS, lr=LR, options={name: {"alpha": ALPHA, "tau": TAU}})
    algo_cls = ALGORITHMS.get(name)
    ctx = plan.make_context(cfg, algo_cls, workers, x0, train_size=10**9)
    algo = algo_cls(ctx)
    layout = algo.layout()
    sim = SimConfig(workers=workers, apply_s=0.0, update_s=0.0)
    logs = RunLogs(layout.tables)
    engine = Engine(algo, layout, sim, ComputeModel(sim, 0, {}), lambda r, p: (np.float32(H) * p, 0.0, 1, 0),
                    logs, x0.size)
    engine.run()
    return logs.last_params


def recurrence(workers: int, x0: float) -> float:
    """The closed form, written out: identical workers, local GD steps, an exchange every τ steps."""
    x, centre = x0, x0
    for step in range(STEPS):
        x -= LR * H * x
        if (step + 1) % TAU == 0 or step + 1 == STEPS:
            diff = x - centre
            x -= ALPHA * diff
            centre += workers * ALPHA * diff
    return centre


@pytest.mark.parametrize("name, workers", [("easgd", 1), ("easgd-sync", 1), ("easgd-sync", 4)])
def test_centre_follows_the_closed_form(name, workers):
    x0 = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    centre = run_quadratic(name, workers, x0)
    expected = np.array([recurrence(workers, float(v)) for v in x0])
    np.testing.assert_allclose(centre, expected, rtol=1e-5)
    assert not np.allclose(centre, x0)  # the centre moved
