"""Per-rank timelines: one row per timed operation (step, phase, start, end, bytes)."""
from __future__ import annotations

import numpy as np

from hpcbench.algorithms.ops import TIMED_OPS

# data: batch assembly · compute: forward/backward (and injected straggler delay) · communicate:
# one-sided and point-to-point transfers, collectives · wait: blocked on a message or barrier ·
# apply: rank 0's update math · update: a worker's own update math · eval: rank 0 snapshotting
# the global model (it is scored after the run) · flush: rank 0 rewriting the result file mid-run ·
# recover: a workers' collective that failed with a worker, and the survivors agreeing and regrouping.
PHASES = ("data", "compute", "communicate", "wait", "apply", "update", "eval", "flush", "recover")
PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
# The operation a row belongs to ("none": the program's own math between operations; "Shrink": the
# survivors of a failed collective agreeing on it and shrinking their communicator, a "recover" row).
OPS = ("none",) + tuple(op.__name__ for op in TIMED_OPS) + ("Shrink",)
OP_CODE = {name: i for i, name in enumerate(OPS)}
COLUMNS = ("rank", "step", "phase", "op", "t_start", "t_end", "nbytes")
ROW_WIDTH = 6  # numbers in a row as a Timeline keeps it


class Timeline:
    """Rows appended during a run on one rank, in that rank's own clock.

    ``values``: the rows' six numbers one after another (step, phase code, op code, start, end,
    bytes): a flat list of numbers costs no object per row to keep, free or convert (a 1,024-worker
    simulation writes over a million rows)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.values: list[float] = []

    def add(self, step: int, phase: str, t_start: float, t_end: float, nbytes: int = 0, op: str = "none") -> None:
        self.values.extend((step, PHASE_CODE[phase], OP_CODE[op], t_start, t_end, nbytes))

    def columns(self, shift: float = 0.0) -> dict[str, np.ndarray]:
        """The rows as columns, times moved by ``shift`` (onto rank 0's clock and run origin)."""
        # Steps, codes and byte counts are integers below 2**53: float64 holds them exactly.
        table = np.fromiter(self.values, dtype=np.float64, count=len(self.values)).reshape(-1, ROW_WIDTH)
        return {
            "rank": np.full(len(table), self.rank, dtype=np.int32),
            "step": table[:, 0].astype(np.int64),
            "phase": table[:, 1].astype(np.uint8),
            "op": table[:, 2].astype(np.uint8),
            "t_start": table[:, 3] + shift,
            "t_end": table[:, 4] + shift,
            "nbytes": table[:, 5].astype(np.int64),
        }


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
