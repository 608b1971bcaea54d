"""The real algorithm programs on the simulator's engine with an analytic gradient: worker r's loss is
½·H_r·‖x‖², its gradient H_r·x, so a whole trajectory can be written out by hand and compared. A
batch counts as classified right where ‖x‖ < 2 (the training accuracy rank 0 reports).

Compute is deterministic (a gamma this narrow is its mean: 1 s a step, times a worker's slow factor)
and the network instant, so events happen at known times.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.ops import Gradient
from hpcbench.config import RunConfig
from hpcbench.options.sim import SimConfig
from hpcbench.runtime import plan
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.sim.engine import Engine, Parts
from hpcbench.workload.compute import ComputeModel

X0 = np.array([1.0, -2.0, 0.5], dtype=np.float32)


@dataclass
class Ran:
    logs: RunLogs
    steps: dict[int, int]  # local steps per worker rank
    batch: int  # samples per step

    @property
    def last(self) -> np.ndarray:
        """The model rank 0 evaluated last (the final one)."""
        return self.logs.last_params

    @property
    def snapshots(self) -> list[tuple[int, np.ndarray]]:
        """Every evaluated model, in order, with the samples it counts."""
        return [(op.samples, op.params) for _, op in self.logs.snapshots]


def run_quadratic(name: str, workers: int, steps: int, options: dict | None = None, *, lr: float = 0.1,
                  curvature: Callable[[int], float] = lambda rank: 0.5, slow: dict[int, float] | None = None,
                  momentum: float = 0.0, nesterov: bool = False, evals: int = 1, x0: np.ndarray = X0,
                  progress: list | None = None, deaths: dict[int, float] | None = None,
                  detect_s: float = 0.0) -> Ran:
    """``progress``: filled with rank 0's (samples, training loss, training accuracy) as it reports them;
    ``deaths``: workers that fail, and when (the others learn it ``detect_s`` later)."""
    cfg = RunConfig(algo=name, steps=steps, lr=lr, warmup_epochs=0.0, momentum=momentum, nesterov=nesterov,
                    evals=evals, options={name: options or {}})
    algo_cls = ALGORITHMS.get(name)
    algo = algo_cls(plan.make_context(plan.validate(cfg), workers, x0, train_size=10**9))
    layout = algo.layout()
    sim = SimConfig(workers=workers, apply_s=0.0, update_s=0.0, compute_shape=1e12, compute_mean_s=1.0,
                    alpha_s=0.0, bandwidth=1e30, detect_s=detect_s)
    logs = RunLogs(layout.tables, layout.columns)

    def gradient(rank: int, x: np.ndarray) -> Gradient:
        h = curvature(rank)
        norm2 = float(np.dot(x.astype(np.float64), x))
        return Gradient(np.float32(h) * x, 0.5 * h * norm2, cfg.batch_size, cfg.batch_size if norm2 < 4 else 0)

    class Shown:
        def update(self, samples: int, loss: float, accuracy: float) -> None:
            if progress is not None:
                progress.append((samples, loss, accuracy))

    Engine(Parts(algo=algo, layout=layout, cfg=sim, compute=ComputeModel(sim, 0, slow or {}), gradient=gradient,
                 logs=logs, real_size=x0.size, progress=Shown(), deaths=deaths)).run()
    # (t, worker, samples, updates…)
    per_worker = {int(row[1]): int(row[3]) for row in logs.tables.get("final_models", [])}
    return Ran(logs, per_worker, cfg.batch_size)
