"""How a study chooses its settings and which arms test whether its verdict survives other choices (pure).

1. The single-worker recipe: sequential SGD (one asgd worker: every gradient applied at once) over a
   grid of rates and momenta, at the study's budget and schedule, chosen on the validation split.
2. Arms: each cell (algorithm, workers, network) of each arm has candidate settings; a cell with
   several is decided on validation accuracy, never on test. Arms: ``shared`` (the tuned recipe for
   every algorithm), ``own lr`` (each algorithm's best rate from a grid of multiples of the recipe's, at
   each size), ``momentum M`` for each momentum of the recipe grid (the best single-worker rate at that
   momentum, where the claim is about momentum), and all-reduce's rate scaling (``scaling
   none|sqrt|linear``, where the claim pits it against methods that do not scale).
3. Each claim of the study gets its own verdict in each arm (``reproduce.verdicts``); the headline
   lists every claim's verdicts by arm, never one verdict for the study. Arms whose evidence for a
   claim is the same (their runs are the same, or the claim reads only what they share, as the time
   for a budget) count once, named together (``shared = momentum 0.9``).
4. No choice at a grid's edge: where a cell's chosen rate is the largest or smallest tried, the grid
   grows by its own log step on that side until the choice is interior or ``MAX_EXTENSIONS`` steps
   were added (``tuning.grid.extend``); the report says which cells grew and which stayed at an edge.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hpcbench.algorithms.schedule import SCALINGS
from hpcbench.reproduce.claims import ACROSS
from hpcbench.reproduce.verdicts import FAILED, HOLDS, OUTCOMES, Cell, ClaimVerdict
from hpcbench.tuning.grid import Setting, Trial, choose

SEQUENTIAL = ("asgd", 1)  # the single-worker reference: one asynchronous worker is sequential SGD
SHARED, OWN_LR = "shared", "own lr"
SCALING_ARMS = tuple(f"scaling {s}" for s in SCALINGS)
MOMENTUM_ARM = "momentum {:g}"
# The papers' large rate with a short warm-up and step decays, for every algorithm (the setting an audit
# of the Gap-Aware study ran on held-out seeds): lr 0.05, momentum 0.9, a tenth of the budget's warm-up,
# x0.1 at half and four fifths of it.
DECAY_ARM = "decay schedule"
DECAY_LR, DECAY_MOMENTUM, DECAY_WARMUP, DECAY_AT = 0.05, 0.9, 0.1, (0.5, 0.8)


def arm_text(arm: str) -> str:
    """What an arm runs, in words."""
    if arm == SHARED:
        return "the tuned single-worker recipe (rate and momentum) for every algorithm"
    if arm == OWN_LR:
        return "each algorithm's own best rate at each size, from multiples of the recipe's rate (chosen on validation)"
    if arm == DECAY_ARM:
        return (f"lr {DECAY_LR:g} with momentum {DECAY_MOMENTUM:g} for every algorithm (a large rate, not tuned), "
                f"linear warm-up over {DECAY_WARMUP:g} of the budget, x0.1 at "
                + " and ".join(f"{f:g}" for f in DECAY_AT) + " of it")
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


def ceiling(trials: Sequence[Trial], recipe: Recipe) -> float | None:
    """The sequential recipe's accuracy at the study's budget: the chosen recipe's validation accuracy,
    mean over seeds (None where it has none): a row whose reference ends far below it did not train."""
    scores = [t.score for t in trials if t.setting == recipe.best and math.isfinite(t.score)]
    return scores[0] if scores else None


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
    claims: tuple[ClaimVerdict, ...]
    edges: tuple[CellKey, ...] = ()  # cells whose chosen rate is still the largest or smallest tried
    chose: bool = False  # some cell had several candidates (its setting was chosen on validation)
    grown: tuple[CellKey, ...] = ()  # cells whose grid grew past an edge (log steps) before the choice
    ties: tuple[str, ...] = ()  # cells whose best settings tie within the seeds' interval, in words


def candidates(arm: str, algo: str, recipe: Recipe, factors: Sequence[float], scales: bool,
               epochs: float = 0.0, outer_lrs: Sequence[float] = ()) -> list[Setting]:
    """The settings arm ``arm`` tries for ``algo``; ``scales``: all-reduce's rate scaling is a choice
    of this study (chosen on validation where the arm does not fix it); ``epochs``: the budget (the
    decay arm's schedule is in fractions of it); ``outer_lrs``: outer rates to choose among (DiLoCo's)."""
    settings = arm_settings(arm, algo, recipe, factors, scales, epochs)
    return [replace(st, outer_lr=o) for st in settings for o in outer_lrs] if outer_lrs else settings


def arm_settings(arm: str, algo: str, recipe: Recipe, factors: Sequence[float], scales: bool,
                 epochs: float) -> list[Setting]:
    lr, m = recipe.best.lr, recipe.best.momentum
    scalings: Sequence[str | None] = SCALINGS if scales and algo == "allreduce" else (None,)
    if arm == DECAY_ARM:
        return [Setting(DECAY_LR, DECAY_MOMENTUM, round(DECAY_WARMUP * epochs, 6),
                        tuple(round(f * epochs, 6) for f in DECAY_AT), s) for s in scalings]
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


def across_arms(study: str, arms: Sequence[ArmResult], ceiling: float | None = None) -> list[tuple[str, ClaimVerdict]]:
    """The study's claims that compare two arms (``verdicts.ACROSS``), each with its label (``momentum 0.9
    against momentum 0``), judged where both arms ran."""
    cells = {a.name: a.cells for a in arms}
    return [(f"{x} against {y}", judge(cells[x], cells[y], ceiling)) for _, x, y, judge in ACROSS.get(study, ())
            if x in cells and y in cells]


def signature(cv: ClaimVerdict) -> tuple[Any, ...]:
    """What a claim's verdict rests on, to the bit (each row's per-seed values, not their rounded text): two
    arms with the same signature count as one."""
    return tuple((e.where, e.outcome, e.numbers, e.test and (e.test.low, e.test.high)) for e in cv.evidence)


def same_runs(arms: Sequence[ArmResult]) -> dict[str, str]:
    """Arms whose cells are an earlier arm's to the bit (the same settings, so the same runs), → that arm's
    name: such an arm is named once, beside the other, never counted as a replication."""
    out: dict[str, str] = {}
    for i, a in enumerate(arms):
        twin = next((b.name for b in arms[:i] if b.cells == a.cells and b.name not in out), None)
        if twin and a.cells:
            out[a.name] = twin
    return out


def grouped(arms: Sequence[ArmResult], key: str) -> list[tuple[list[str], ClaimVerdict]]:
    """Claim ``key``'s verdict in each arm, arms with the same evidence merged: (their names, the verdict),
    in the arms' order."""
    out: list[tuple[list[str], ClaimVerdict]] = []
    for a in arms:
        cv = next(x for x in a.claims if x.claim.key == key)
        same = next((names for names, other in out if signature(other) == signature(cv)), None)
        if same is None:
            out.append(([a.name], cv))
        else:
            same.append(a.name)
    return out


def counts(cv: ClaimVerdict) -> str:
    """`` (4 of 5 rows hold)`` where some of the paper's rows hold and others do not (a claim that holds
    where its reference trained says so too); else ""."""
    rows = [e for e in cv.primary if e.where]
    held = sum(e.outcome == HOLDS for e in rows)
    return f" ({held} of {len(rows)} rows hold)" if 0 < held < len(rows) else ""


def headline(arms: Sequence[ArmResult], across: Sequence[tuple[str, ClaimVerdict]] = ()) -> str:
    """Each claim's verdicts in the paper's setting by arm, one clause a claim: ``GA beats SA: holds in own
    lr; does not hold in shared = momentum 0.9 (4 of 5 rows hold)``. Never one verdict for the study: a
    claim that holds somewhere is said; arms with the same evidence count once."""
    clauses = []
    for claim in [cv.claim for cv in arms[0].claims] if arms else []:
        groups = grouped(arms, claim.key)
        by: dict[str, list[str]] = {}
        for names, cv in groups:
            by.setdefault(cv.outcome, []).append(" = ".join(names) + counts(cv))
        if len(arms) == 1:
            [(_, cv)] = groups
            clauses.append(f"{claim.short}: {cv.outcome}{counts(cv)}")
        elif len(by) == 1 and not any(counts(cv) for _, cv in groups):
            [outcome] = by
            everywhere = " in any arm" if outcome in FAILED else " in every arm"  # never "not in every"
            clauses.append(f"{claim.short}: {outcome}"
                           + (everywhere if len(groups) > 1 else f" in {' = '.join(groups[0][0])}"))
        else:
            clauses.append(f"{claim.short}: " + "; ".join(f"{o} in {', '.join(by[o])}" for o in OUTCOMES if o in by))
    clauses += [f"{cv.claim.short}: {cv.outcome}{counts(cv)} ({label})" for label, cv in across]
    return " · ".join(clauses) or "no claim could be judged"
