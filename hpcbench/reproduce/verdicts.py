"""How a claim's verdict is computed from measured cells (pure); the papers' claims and their judges
are ``reproduce.claims``.

A study states the papers' claims (``Claim``: quoted, with the source and the paper's numbers). Each
claim gets its own verdict in each arm: *holds*, *does not hold* (*not reproduced by the model* for a
claim about time, which the simulator models rather than measures) or *inconclusive*. A verdict rests
on evidence rows (one per size, network or period), each the 95% interval over seeds of a paired
difference (``tuning.intervals``): a row holds when its whole interval clears the claim's threshold,
fails when its whole interval falls short, and is inconclusive when it straddles the threshold or
rests on fewer than three seeds. A claim holds when every row holds and fails when a row fails.
Claims are never joined into one verdict: a study's headline lists each claim's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from hpcbench.tuning.intervals import MIN_SEEDS, Interval, paired

HOLDS, FAILS, UNCLEAR = "holds", "does not hold", "inconclusive"
NOT_MODELLED = "not reproduced by the model"
OUTCOMES = (HOLDS, FAILS, NOT_MODELLED, UNCLEAR)


@dataclass(frozen=True)
class Cell:
    """One algorithm at one size (and network), over its seeds (every tuple in the order of ``seeds``)."""

    algo: str
    workers: int
    variant: str
    accuracy: tuple[float, ...]  # final accuracy of each seed
    time_to_target: tuple[float, ...]  # seconds of each seed; inf when it never reached the target
    wall: tuple[float, ...]  # seconds each seed's run took (virtual time in the simulator)
    eval_gap: float = 0.0  # seconds between evaluations: times to target closer than this are a tie
    bytes_per_sample: tuple[float, ...] = ()  # bytes that crossed between ranks per sample, each seed's
    seeds: tuple[int, ...] = ()

    @property
    def moved(self) -> float:
        """Mean bytes per training sample over seeds (NaN where the files do not say)."""
        return mean(self.bytes_per_sample) if self.bytes_per_sample else math.nan

    @property
    def acc(self) -> float:
        return mean(self.accuracy)

    @property
    def acc_spread(self) -> float:
        """Half the range over seeds (the tables' ± where intervals are not the point)."""
        return (max(self.accuracy) - min(self.accuracy)) / 2 if len(self.accuracy) > 1 else 0.0

    @property
    def ttt(self) -> float:
        """Mean time to target; inf when some seed never reached it."""
        return mean(self.time_to_target)

    @property
    def seconds(self) -> float:
        return mean(self.wall)


# --- claims and their verdicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A paper's claim: ``quote`` in its words (or as close a paraphrase as says so), ``source`` where it
    says it, ``paper`` its own setting and numbers, ``test`` how this study tests it and against what
    threshold. ``modelled``: a claim about time, which the simulator's cost model decides."""

    key: str
    short: str
    quote: str
    source: str
    paper: str
    test: str
    modelled: bool = False

    def failed(self) -> str:
        return NOT_MODELLED if self.modelled else FAILS


@dataclass(frozen=True)
class Evidence:
    """One row of a claim's verdict: where (``n=16``, ``H=10, n=32``), its interval and what it makes of it."""

    where: str
    outcome: str
    numbers: str
    interval: Interval | None = None


@dataclass(frozen=True)
class ClaimVerdict:
    claim: Claim
    outcome: str
    evidence: tuple[Evidence, ...]

    def effect(self) -> str:
        """The effect in words: each row's numbers, shortest first where rows are many."""
        return "; ".join(f"{e.where}: {e.numbers}" for e in self.evidence)

    def summary(self) -> str:
        """The outcome, and where rows disagree, which rows held and which did not."""
        rows = [e for e in self.evidence if e.where]
        held = [e.where for e in rows if e.outcome == HOLDS]
        other = [e.where for e in rows if e.outcome != HOLDS and e.outcome != UNCLEAR]
        if self.outcome == HOLDS or not held:
            return self.outcome
        return f"{self.outcome} (holds at {', '.join(held)}" + (f"; not at {', '.join(other)})" if other else ")")


def row(claim: Claim, where: str, iv: Interval | None, side: bool | None, numbers: str) -> Evidence:
    """A row's outcome from ``side`` (True: the interval clears the threshold; False: falls short; None:
    straddles), made inconclusive when the interval rests on fewer than MIN_SEEDS seeds."""
    if iv is not None and iv.n < MIN_SEEDS:
        return Evidence(where, UNCLEAR, f"{numbers}; {iv.n} seed{'s' if iv.n > 1 else ''}: a verdict needs "
                        f"{MIN_SEEDS}", iv)
    outcome = HOLDS if side is True else claim.failed() if side is False else UNCLEAR
    return Evidence(where, outcome, numbers, iv)


def verdict(claim: Claim, evidence: Sequence[Evidence], missing: str = "") -> ClaimVerdict:
    """Every row holds: holds; a row fails: the claim fails; else inconclusive (also with no rows)."""
    if not evidence:
        return ClaimVerdict(claim, UNCLEAR, (Evidence("", UNCLEAR, missing or "no cells to compare"),))
    outcomes = [e.outcome for e in evidence]
    if all(o == HOLDS for o in outcomes):
        return ClaimVerdict(claim, HOLDS, tuple(evidence))
    failed = claim.failed()
    return ClaimVerdict(claim, failed if failed in outcomes else UNCLEAR, tuple(evidence))


Cells = dict[tuple[str, int, str], Cell]


def index(cells: Sequence[Cell]) -> Cells:
    return {(c.algo, c.workers, c.variant): c for c in cells}


def sizes_with(cells: Cells, algos: Sequence[str], variant: str = "") -> list[int]:
    """The worker counts at which every one of ``algos`` has a cell."""
    return sorted({n for (_, n, v) in cells if v == variant and all((a, n, variant) in cells for a in algos)})


def pts(iv: Interval) -> str:
    return iv.text(100.0, " pts")


def ahead(claim: Claim, where: str, a: Cell, b: Cell, what: str) -> Evidence:
    """``a`` ends more accurate than ``b``: the interval of a − b, seed by seed, above 0."""
    iv = paired(a.accuracy, b.accuracy)
    return row(claim, where, iv, iv.side(0.0), f"{what} {pts(iv)}")


def within(claim: Claim, where: str, a: Cell, ref: Cell, points: float, floor: float) -> Evidence:
    """``a``'s accuracy at most ``points`` below ``ref``'s (ahead counts): a − ref above −points. Only where
    ``ref`` itself reaches ``floor`` (two methods that both failed to train match trivially)."""
    iv = paired(a.accuracy, ref.accuracy)
    numbers = f"{a.algo} {100 * a.acc:.1f}%, {ref.algo} {100 * ref.acc:.1f}%: {pts(iv)}"
    if ref.acc < floor:
        return Evidence(where, UNCLEAR, f"{numbers}; {ref.algo} itself ends below {100 * floor:.0f}%, so "
                        "matching it says nothing", iv)
    return row(claim, where, iv, iv.side(-points), numbers)
