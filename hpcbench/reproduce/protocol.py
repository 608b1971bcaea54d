"""How a study chooses its settings and which arms test whether its verdict survives other choices (pure).

1. The single-worker recipe: sequential SGD (one asgd worker: every gradient applied at once) over a
   grid of rates and momenta, at the study's budget and schedule, chosen on the validation split.
2. Arms: each cell (algorithm, workers, network) of each arm has candidate settings; a cell with
   several is decided on validation accuracy, never on test. Arms: ``shared`` (the tuned recipe for
   every algorithm), ``own lr`` (each algorithm's best rate from a grid of multiples of the recipe's, at
   each size), ``momentum M`` for each momentum of the recipe grid (the best single-worker rate at that
   momentum, where the claim is about momentum), and all-reduce's rate scaling (``scaling
   none|sqrt|linear``, where the claim pits it against methods that do not scale).
3. Each arm gets its own verdict; the study holds (or does not) only when every arm agrees.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpcbench.algorithms.schedule import SCALINGS
from hpcbench.reproduce.verdicts import UNCLEAR, Cell, Verdict
from hpcbench.tuning.grid import Setting, Trial, choose

SEQUENTIAL = ("asgd", 1)  # the single-worker reference: one asynchronous worker is sequential SGD
DEPENDS = "depends on the protocol"
SHARED, OWN_LR = "shared", "own lr"
SCALING_ARMS = tuple(f"scaling {s}" for s in SCALINGS)
MOMENTUM_ARM = "momentum {:g}"


def arm_text(arm: str) -> str:
    """What an arm runs, in words."""
    if arm == SHARED:
        return "the tuned single-worker recipe (rate and momentum) for every algorithm"
    if arm == OWN_LR:
        return "each algorithm's own best rate at each size, from multiples of the recipe's rate (chosen on validation)"
    kind, _, value = arm.partition(" ")
    if kind == "momentum":
        return f"momentum {value} for every algorithm, at the best single-worker rate with momentum {value}"
    if kind == "scaling":
        return f"the tuned recipe; all-reduce scales its rate by {value} in the number of workers"
    raise ValueError(f"unknown arm {arm!r}")


@dataclass(frozen=True)
class Recipe:
    """What stage 1 chose: the shared recipe, and the best setting at each momentum of the grid."""

    best: Setting
    by_momentum: dict[float, Setting]


def recipe_grid(lrs: Sequence[float], momenta: Sequence[float]) -> list[Setting]:
    return [Setting(lr, m) for m in momenta for lr in lrs]


def choose_recipe(trials: Sequence[Trial]) -> Recipe:
    """The best setting overall, and the best at each momentum."""
    momenta = sorted({t.setting.momentum or 0.0 for t in trials})
    return Recipe(choose(trials).setting,
                  {m: choose([t for t in trials if (t.setting.momentum or 0.0) == m]).setting for m in momenta})


CellKey = tuple[str, int, str]  # (algorithm, workers, variant)


@dataclass(frozen=True)
class ArmResult:
    """An arm decided: its cells, the setting each cell's numbers come from, its verdict."""

    name: str
    cells: tuple[Cell, ...]
    chosen: dict[CellKey, Setting]
    verdict: Verdict
    edges: tuple[CellKey, ...] = ()  # cells whose chosen rate is the largest or smallest their arm tried
    chose: bool = False  # some cell had several candidates (its setting was chosen on validation)


def at_edge(chosen: Setting, tried: Sequence[Setting]) -> bool:
    """The chosen rate is the largest or smallest of several tried (with the same other settings):
    the algorithm might do better outside the grid, and a report should say so."""
    rates = {t.lr for t in tried if (t.momentum, t.lr_scaling) == (chosen.momentum, chosen.lr_scaling)}
    return len(rates) > 1 and chosen.lr in (min(rates), max(rates))


def candidates(arm: str, algo: str, recipe: Recipe, factors: Sequence[float], scales: bool) -> list[Setting]:
    """The settings arm ``arm`` tries for ``algo``; ``scales``: all-reduce's rate scaling is a choice
    of this study (chosen on validation where the arm does not fix it)."""
    lr, m = recipe.best.lr, recipe.best.momentum
    scalings: Sequence[str | None] = SCALINGS if scales and algo == "allreduce" else (None,)
    if arm == SHARED:
        return [Setting(lr, m, lr_scaling=s) for s in scalings]
    if arm == OWN_LR:
        return [Setting(f * lr, m, lr_scaling=s) for s in scalings for f in factors]
    if arm.startswith("momentum "):
        best = recipe.by_momentum[float(arm.split()[1])]
        return [Setting(best.lr, best.momentum, lr_scaling=s) for s in scalings]
    if arm in SCALING_ARMS:
        return [Setting(lr, m, lr_scaling=arm.split()[1] if algo == "allreduce" else None)]
    raise ValueError(f"unknown arm {arm!r}")


def overall(outcomes: Sequence[str]) -> str:
    """The study's outcome from its arms': theirs when every arm agrees, else "depends on the protocol"."""
    if not outcomes:
        return UNCLEAR
    first = outcomes[0]
    return first if all(o == first for o in outcomes) else DEPENDS


