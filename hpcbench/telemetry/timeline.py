"""Per-rank timelines: one row per timed operation (step, phase, start, end, bytes)."""
from __future__ import annotations

import numpy as np

from hpcbench.algorithms.ops import TIMED_OPS

# data: batch assembly · compute: forward/backward (and injected straggler delay) · communicate:
# one-sided and point-to-point transfers, collectives · wait: blocked on a message or barrier ·
# apply: rank 0's update math · update: a worker's own update math · eval: rank 0 snapshotting
# the global model (it is scored after the run) · flush: rank 0 rewriting the result file mid-run.
PHASES = ("data", "compute", "communicate", "wait", "apply", "update", "eval", "flush")
PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
# The operation a row belongs to ("none": the program's own math between operations).
OPS = ("none",) + tuple(op.__name__ for op in TIMED_OPS)
OP_CODE = {name: i for i, name in enumerate(OPS)}
COLUMNS = ("rank", "step", "phase", "op", "t_start", "t_end", "nbytes")
ROW_DTYPE = np.dtype([("step", np.int64), ("phase", np.uint8), ("op", np.uint8), ("t_start", np.float64),
                      ("t_end", np.float64), ("nbytes", np.int64)])


class Timeline:
    """Rows appended during a run on one rank, in that rank's own clock."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.rows: list[tuple[int, int, int, float, float, int]] = []

    def add(self, step: int, phase: str, t_start: float, t_end: float, nbytes: int = 0, op: str = "none") -> None:
        self.rows.append((step, PHASE_CODE[phase], OP_CODE[op], t_start, t_end, nbytes))

    def columns(self, shift: float = 0.0) -> dict[str, np.ndarray]:
        """The rows as columns, times moved by ``shift`` (onto rank 0's clock and run origin)."""
        table = np.fromiter(self.rows, dtype=ROW_DTYPE, count=len(self.rows))
        return {
            "rank": np.full(len(self.rows), self.rank, dtype=np.int32),
            "step": table["step"],
            "phase": table["phase"],
            "op": table["op"],
            "t_start": table["t_start"] + shift,
            "t_end": table["t_end"] + shift,
            "nbytes": table["nbytes"],
        }


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
