"""Scripted arrivals: a parameter server's real program fed the gradients a test chooses.

``serve(name, arrivals)`` builds the algorithm ``name`` (any parameter server in the registry) on a
small vector and drives its ``server()`` program with ``lockstep.drive``, playing every worker: each
arrival is ``(worker, staleness, gradient)``, the gradient computed on the version ``staleness``
updates before the current one. It answers the server's echo requests with the version the worker
read, tells stopped workers apart, and returns the initial vector, every version the server published
and what it recorded (``updates``, ``late``) and echoed (``echoes``: (worker, version)) — to compare
with a naive reference written out in the test (``tests/test_staleness_rules.py``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.api import PARAMETER_SERVER
from hpcbench.algorithms.ops import Evaluate, Op, Progress, Publish, Record, Recv, Send
from hpcbench.algorithms.ps import STOP
from hpcbench.config import RunConfig
from hpcbench.runtime import plan

from lockstep import drive

Arrival = tuple[int, int, np.ndarray]  # (worker, staleness, gradient)
SERVERS = tuple(name for name in ALGORITHMS.names() if ALGORITHMS.get(name).family == PARAMETER_SERVER)


def random_arrivals(workers: int, size: int, seed: int = 1, count: int = 12) -> list[Arrival]:
    """``count`` gradients from random workers, each 0 to 3 versions stale."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, workers + 1)), int(rng.integers(0, 4)), rng.normal(size=size).astype(np.float32))
            for _ in range(count)]


def serve(name: str, arrivals: list[Arrival], *, size: int, workers: int, lr: float, momentum: float = 0.0,
          nesterov: bool = False, wd: float = 0.0, options: dict[str, Any] | None = None,
          budget: int = 0) -> tuple[np.ndarray, dict[int, np.ndarray], dict[str, list[Any]]]:
    """Run ``name``'s server program on ``arrivals``; → (initial vector, published versions, logs).

    ``budget``: updates to apply (a multiple of ``workers``); by default all the arrivals. Every worker
    then sends one more gradient, answered with "stop" (logged in ``late``).
    """
    steps = (budget or len(arrivals)) // workers
    cfg = RunConfig(algo=name, steps=steps, lr=lr, momentum=momentum, nesterov=nesterov,
                    weight_decay=wd, warmup_epochs=0.0, options={name: options or {}})
    algo_cls = ALGORITHMS.get(name)
    x0 = np.random.default_rng(0).normal(size=size).astype(np.float32)
    algo = algo_cls(plan.make_context(plan.validate(cfg), workers, x0, train_size=10**9))
    frame = algo.params_frame
    published = {0: frame.view(algo.layout().windows["params"].initial, "params").copy()}
    logs: dict[str, list[Any]] = {"updates": [], "late": [], "echoes": []}
    queue = list(arrivals) + [(w, 0, np.zeros(size, np.float32)) for w in range(1, workers + 1)]
    version = used = 0
    stopped: set[int] = set()

    def answer(op: Op) -> object:
        nonlocal version, used
        if isinstance(op, Recv) and op.channel == "echo":  # the worker sends back what it read
            logs["echoes"].append((op.src, used))
            return (op.src, frame.pack(version=used, params=published[used], check=used))
        if isinstance(op, Recv):
            while queue[0][0] in stopped:  # a worker told to stop sends nothing more
                queue.pop(0)
            worker, staleness, grad = queue.pop(0)
            used = max(version - staleness, 0)
            return (worker, algo.grad_frame.pack(version=used, grad=grad))
        if isinstance(op, Publish):
            version = frame.integer(op.data, "version")
            published[version] = frame.view(op.data, "params").copy()
        elif isinstance(op, Record):
            logs[op.table].append(op.values)
        elif isinstance(op, Send) and op.channel == "ack" and (op.data == STOP).all():
            stopped.add(op.dest)
        else:
            assert isinstance(op, (Send, Evaluate, Progress))
        return None

    drive(algo.server(), answer)
    return x0, published, logs
