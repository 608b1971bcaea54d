"""A grid of learning-rate recipes and the choice among them on the validation split (pure).

A *setting* is one point of the grid: a rate, a momentum and, where the grid varies them, a warm-up,
decay epochs and a rate scaling. A *trial* is one setting run at one (algorithm, worker count) over
seeds, with the final validation accuracy of each seed. The choice reads validation accuracy only:
the test set is never looked at.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import mean
from typing import Any

from hpcbench.config import toml_literal
from hpcbench.tuning.intervals import Interval, paired

MAX_EXTENSIONS = 3  # log steps a grid may grow past one edge
LR_LIMITS = (1e-5, 10.0)  # rates a grid never grows past


@dataclass(frozen=True)
class Setting:
    """One recipe of the grid; None leaves that option as the run options say."""

    lr: float
    momentum: float | None = None
    warmup_epochs: float | None = None
    decay_epochs: tuple[float, ...] | None = None
    lr_scaling: str | None = None
    outer_lr: float | None = None  # local-sgd's outer rate (DiLoCo's, chosen on validation in its study)

    def values(self) -> dict[str, Any]:
        """The run options this setting sets, by their names here (``outer_lr``: ``local-sgd.outer_lr``)."""
        out: dict[str, Any] = {"lr": self.lr, "momentum": self.momentum, "warmup_epochs": self.warmup_epochs,
                               "lr_decay_epochs": self.decay_epochs, "lr_scaling": self.lr_scaling,
                               "outer_lr": self.outer_lr}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Setting:
        """The setting whose ``values()`` these are (as verdict.json and tune.json hold them)."""
        fields = {("decay_epochs" if k == "lr_decay_epochs" else k): v for k, v in values.items()}
        if "decay_epochs" in fields:
            fields["decay_epochs"] = tuple(fields["decay_epochs"])
        return cls(**fields)

    def args(self) -> list[str]:
        """``--set`` flags for a run (given last, they win over the options they share)."""
        return [a for k, v in self.values().items()
                for a in ("--set", f"{'local-sgd.' if k == 'outer_lr' else ''}{k}={toml_literal(v)}")]

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
        if self.outer_lr is not None:
            parts.append(f"outer lr {self.outer_lr:g}")
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
        if self.outer_lr is not None:
            parts.append(f"o{self.outer_lr:g}")
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


STEPPED = ("lr", "outer_lr")  # what a grid grows along, on a log scale: the rate, then DiLoCo's outer rate


def tried_along(chosen: Setting, tried: Iterable[Setting], field: str) -> list[float]:
    """The values of ``field`` tried with ``chosen``'s other settings, sorted ([] where it has none)."""
    here = getattr(chosen, field)
    if here is None:
        return []
    return sorted({getattr(t, field) for t in tried if replace(t, **{field: here}) == chosen})


def at_edge(chosen: Setting, tried: Sequence[Setting]) -> bool:
    """The chosen rate (or outer rate) is the largest or smallest of several tried with the same other
    settings: the algorithm might do better outside the grid, and a report should say so."""
    return any(len(values) > 1 and getattr(chosen, field) in (values[0], values[-1])
               for field in STEPPED for values in [tried_along(chosen, tried, field)])


def step_outs(chosen: Setting, tried: Iterable[Setting]) -> list[Setting]:
    """For each of ``STEPPED`` whose value in ``chosen`` sits at an edge of the grid, the setting one of
    the grid's own log steps past it (the ratio of the two values at that edge), the rest the same;
    none where the choice is interior, the grid has a single value, or the next would leave ``LR_LIMITS``."""
    tried = list(tried)
    out = []
    for field in STEPPED:
        values, here = tried_along(chosen, tried, field), getattr(chosen, field)
        if len(values) < 2 or values[0] <= 0 or here not in (values[0], values[-1]):
            continue
        new = float(f"{(values[0] ** 2 / values[1] if here == values[0] else values[-1] ** 2 / values[-2]):.6g}")
        if LR_LIMITS[0] <= new <= LR_LIMITS[1]:
            out.append(replace(chosen, lr=new) if field == "lr" else replace(chosen, outer_lr=new))
    return out


def past_edges(choices: Mapping[Any, tuple[Setting, Collection[Setting]]]) -> dict[Any, Setting]:
    """For each group (key → its choice and the settings it tried) whose choice sits at an edge, the
    first untried setting past it (``step_outs``): what ``tune`` and a study run before choosing again."""
    out = {}
    for key, (chosen, tried) in choices.items():
        nxt = next((s for s in step_outs(chosen, tried) if s not in tried), None)
        if nxt is not None:
            out[key] = nxt
    return out


def ties(trials: Sequence[Trial]) -> list[tuple[Trial, Interval]]:
    """The trials that tie with the chosen one: the 95% interval of (chosen − other) over their shared
    seeds straddles 0. Each with that interval (the tie's effect: how much the choice may cost)."""
    best = choose(trials)
    out = []
    for t in trials:
        if t is best or not math.isfinite(t.score) or len(t.val) != len(best.val) or len(t.val) < 2:
            continue
        iv = paired(best.val, t.val)
        if iv.side(0.0) is None:
            out.append((t, iv))
    return sorted(out, key=lambda x: x[1].mean)


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
