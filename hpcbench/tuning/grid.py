"""A grid of learning-rate recipes and the choice among them on the validation split (pure).

A *setting* is one point of the grid: a rate, a momentum and, where the grid varies them, a warm-up,
decay epochs and a rate scaling. A *trial* is one setting run at one (algorithm, worker count) over
seeds, with the final validation accuracy of each seed. The choice reads validation accuracy only:
the test set is never looked at.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any

from hpcbench.config import toml_literal


@dataclass(frozen=True)
class Setting:
    """One recipe of the grid; None leaves that option as the run options say."""

    lr: float
    momentum: float | None = None
    warmup_epochs: float | None = None
    decay_epochs: tuple[float, ...] | None = None
    lr_scaling: str | None = None

    def values(self) -> dict[str, Any]:
        """The run options this setting sets, by their configuration names."""
        out: dict[str, Any] = {"lr": self.lr, "momentum": self.momentum, "warmup_epochs": self.warmup_epochs,
                               "lr_decay_epochs": self.decay_epochs, "lr_scaling": self.lr_scaling}
        return {k: v for k, v in out.items() if v is not None}

    def args(self) -> list[str]:
        """``--set`` flags for a run (given last, they win over the options they share)."""
        return [a for k, v in self.values().items() for a in ("--set", f"{k}={toml_literal(v)}")]

    def label(self) -> str:
        parts = [f"lr {self.lr:g}"]
        if self.momentum is not None:
            parts.append(f"momentum {self.momentum:g}")
        if self.warmup_epochs is not None:
            parts.append(f"warm-up {self.warmup_epochs:g}")
        if self.decay_epochs is not None:
            parts.append("decay at " + (",".join(f"{e:g}" for e in self.decay_epochs) or "none"))
        if self.lr_scaling is not None:
            parts.append(f"{self.lr_scaling} scaling")
        return ", ".join(parts)

    def stem(self) -> str:
        """A file-name part that tells settings apart: ``lr0.05-m0.9-w5-d10_15-sqrt``."""
        parts = [f"lr{self.lr:g}"]
        if self.momentum is not None:
            parts.append(f"m{self.momentum:g}")
        if self.warmup_epochs is not None:
            parts.append(f"w{self.warmup_epochs:g}")
        if self.decay_epochs is not None:
            parts.append("d" + ("_".join(f"{e:g}" for e in self.decay_epochs) or "none"))
        if self.lr_scaling is not None:
            parts.append(self.lr_scaling)
        return "-".join(parts)


def expand(lrs: Sequence[float], momenta: Sequence[float] = (), warmups: Sequence[float] = (),
           decays: Sequence[tuple[float, ...]] = (), scalings: Sequence[str] = ()) -> list[Setting]:
    """Every combination; an empty axis is not varied."""
    axes: list[Sequence[Any]] = [lrs, momenta or [None], warmups or [None], decays or [None], scalings or [None]]
    return [Setting(*combo) for combo in itertools.product(*axes)]


@dataclass(frozen=True)
class Trial:
    """One setting at one (algorithm, worker count): final validation accuracy of each seed."""

    algo: str
    workers: int
    setting: Setting
    val: tuple[float, ...]

    @property
    def score(self) -> float:
        """Mean final validation accuracy over seeds; -inf when a seed has none (diverged, or failed)."""
        if not self.val or any(not math.isfinite(v) for v in self.val):
            return -math.inf
        return mean(self.val)

    @property
    def spread(self) -> float:
        return (max(self.val) - min(self.val)) / 2 if len(self.val) > 1 else 0.0


def choose(trials: Iterable[Trial]) -> Trial:
    """The trial with the best mean validation accuracy; ties go to the smaller rate."""
    return max(trials, key=lambda t: (t.score, -t.setting.lr))


def best_per_group(trials: Iterable[Trial]) -> dict[tuple[str, int], Trial]:
    """``choose`` within each (algorithm, worker count)."""
    groups: dict[tuple[str, int], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.algo, t.workers), []).append(t)
    return {key: choose(group) for key, group in groups.items()}


def parse_floats(text: str, what: str) -> list[float]:
    """``"0.01,0.05"`` → [0.01, 0.05], or one error line."""
    from hpcbench.errors import UsageError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a comma-separated list of numbers") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise UsageError(f"{what} {text!r}: give one or more finite numbers, e.g. 0.01,0.05")
    return values


def parse_ints(text: str, what: str, minimum: int) -> list[int]:
    """``"8,32"`` → [8, 32], each at least ``minimum``, or one error line."""
    from hpcbench.errors import UsageError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < minimum for v in values):
        raise UsageError(f"{what} {text!r}: give integers >= {minimum}, comma-separated")
    return values


def parse_decays(text: str) -> list[tuple[float, ...]]:
    """``"none;8,12"`` → [(), (8.0, 12.0)]: alternatives separated by ';', each epochs or 'none'."""
    return [() if part.strip() == "none" else tuple(parse_floats(part, "--lr-decay-epochs"))
            for part in text.split(";") if part.strip()]
