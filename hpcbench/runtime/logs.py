"""Rank 0's logs during a run: evaluations of the global model and the algorithm's tables."""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from hpcbench.algorithms.ops import Evaluate, Record
from hpcbench.results.schema import EVAL_COLUMNS, TABLES

EVERY = sys.maxsize  # an evaluation of every sample of the test set and validation split
# (params, test samples, validation samples) -> (loss, accuracy, validation loss, validation accuracy)
Evaluator = Callable[[np.ndarray, int, int], tuple[float, float, float, float]]


class RunLogs:
    """Evaluations are snapshots during the run, scored after it: measuring never slows the run."""

    def __init__(self, tables: Sequence[str], added: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """``added``: the columns the algorithm adds to a table, after the schema's (its layout's)."""
        self.snapshots: list[tuple[float, Evaluate]] = []
        self.evals: list[tuple[float, ...]] = []
        self.table_columns = {name: TABLES[name] + (added or {}).get(name, ()) for name in tables}
        self.tables: dict[str, list[tuple[float, ...]]] = {name: [] for name in tables}

    def snapshot(self, t: float, op: Evaluate) -> None:
        self.snapshots.append((t, Evaluate(op.params.copy(), op.samples, op.updates, op.consensus)))

    def score(self, evaluate: Evaluator, limits: tuple[int, int], seconds: float = math.inf) -> None:
        """Evaluate every snapshot not scored yet, in order, with ``evaluate(params, test samples, validation
        samples) -> (loss, accuracy, val_loss, val_accuracy)``: at most ``limits`` samples of the test set and
        the validation split for the snapshots during training, every sample for the last one (the run's final
        accuracy). After ``seconds`` the rest are kept unscored (NaN). Scoring cut short (a stop signal) goes on
        where it stopped when called again."""
        deadline = time.monotonic() + seconds
        last = len(self.snapshots) - 1
        for i, (t, op) in enumerate(self.snapshots[len(self.evals):], start=len(self.evals)):
            loss, accuracy, val_loss, val_accuracy = \
                evaluate(op.params, *((EVERY, EVERY) if i == last else limits)) if time.monotonic() < deadline \
                else (math.nan,) * 4
            self.evals.append((t, op.samples, op.updates, loss, accuracy, op.consensus, val_loss, val_accuracy))

    @property
    def last_params(self) -> np.ndarray | None:
        return self.snapshots[-1][1].params if self.snapshots else None

    def record(self, t: float, op: Record) -> None:
        if len(op.values) != len(self.table_columns[op.table]) - 1:
            raise ValueError(f"a {op.table!r} row has {len(op.values)} values; the schema declares "
                             f"{', '.join(self.table_columns[op.table][1:])}")
        self.tables[op.table].append((t,) + tuple(op.values))

    def eval_columns(self, shift: float = 0.0) -> dict[str, np.ndarray]:
        """Scored evaluations, then the snapshots not scored yet (NaN loss and accuracy)."""
        rows = self.evals + [(t, op.samples, op.updates, math.nan, math.nan, op.consensus, math.nan, math.nan)
                             for t, op in self.snapshots[len(self.evals):]]
        cols = {name: np.array([row[i] for row in rows], dtype=np.float64)
                for i, name in enumerate(EVAL_COLUMNS)}
        cols["t"] = cols["t"] + shift
        for name in ("samples", "updates"):
            cols[name] = cols[name].astype(np.int64)
        return cols

    def table_columns_of(self, name: str, shift: float = 0.0) -> dict[str, np.ndarray]:
        """Columns of integers come out as int64, all others as float64."""
        rows = self.tables[name]
        names = self.table_columns[name]
        cols = {}
        for c, column in zip(names, zip(*rows) if rows else [()] * len(names)):
            values = np.asarray(column)
            cols[c] = values.astype(np.int64 if values.dtype.kind in "iu" else np.float64)
        cols["t"] = cols["t"].astype(np.float64) + shift
        return cols

    def all_tables(self, shift: float = 0.0) -> dict[str, dict[str, np.ndarray]]:
        return {name: self.table_columns_of(name, shift) for name in self.tables}
