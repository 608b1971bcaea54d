"""How a claim's verdict is computed from measured cells (pure); the papers' claims and their judges
are ``reproduce.claims``.

A study states the papers' claims (``Claim``: quoted verbatim with where, or marked as a paraphrase;
the paper's own setting; a practical margin with its source). Each claim gets its own verdict in each
arm: *holds*, *does not hold* (*not reproduced by the model* where the simulator's cost model is the
cause: the time or bytes for the same budget), *inconclusive*, *not meaningful* (the
reference itself did not train: nothing to compare) or *cannot be tested here* (the arm cannot test
it by construction).

A verdict rests on evidence rows (one per size, network or period), each a test of a paired
difference over seeds (``Bounds``): per seed the difference's lower and upper bound (equal where both
runs are measured; a run that never reached a target is right-censored at its end, so one bound is
open). A row holds when the 95% t interval of the lower bounds clears the claim's margin, fails when
that of the upper bounds falls short of it, is inconclusive otherwise, and decides nothing on fewer
than ``MIN_SEEDS`` seeds, whichever way it would go. Rows in the paper's setting are *primary* and
make the verdict; rows beyond it are *extension* rows, reported beside it, never sinking or carrying
it. Of k primary rows, the claim holds when every one holds (each at 95%: a claim that needs all of
them is no more likely to hold by chance than one, so no correction is needed) and does not hold
when one falls short at 1 − 0.05/k (Bonferroni: k chances to fail, each at 0.05/k, so a true effect at
the margin fails at most 5% of the time); else it is inconclusive. Claims are never joined.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from hpcbench.tuning.intervals import CONFIDENCE, MIN_SEEDS, Interval, interval

HOLDS, FAILS, UNCLEAR = "holds", "does not hold", "inconclusive"
NOT_MODELLED = "not reproduced by the model"
NOT_MEANINGFUL = "not meaningful"
UNTESTABLE = "cannot be tested here"
OUTCOMES = (HOLDS, FAILS, NOT_MODELLED, UNCLEAR, NOT_MEANINGFUL, UNTESTABLE)
FAILED = (FAILS, NOT_MODELLED)
SHOWN = 4  # rows that do not hold a summary names (the rest are in the rows themselves)
RULE = ("each claim gets its own verdict in each arm. A row (a size, network or period) tests a paired difference over "
        "seeds against the claim's practical margin: it holds where the 95% t interval clears the margin, does not "
        "hold where it falls short, is inconclusive where it straddles it or rests on fewer than 3 seeds whichever "
        "way it would go; a run that never reached a target is censored at its end (the difference's bound on that "
        "side stays open); a row whose reference ends more than 5 points below the sequential recipe's accuracy is "
        "not meaningful. The rows of the paper's setting make the verdict: it holds where all of them hold (no "
        "correction needed: all must), does not hold where one falls short at 1 − 0.05/k for k rows (Bonferroni), "
        "else inconclusive; rows beyond the paper's setting are reported beside it. A failure whose cause is the "
        "simulator's cost model (the time or bytes for the same budget) is 'not reproduced by the model'")
# A row counts only where its reference trained: within this much of the sequential recipe's accuracy
# at the same budget (its validation accuracy, mean over seeds).
VALID_GAP = 0.05


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
        """Median time to target over seeds (a seed that never reached it counts as later than any that
        did: the median is finite where most seeds reached it)."""
        xs = sorted(self.time_to_target)
        if not xs:
            return math.inf
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2

    @property
    def reached(self) -> int:
        """Seeds that reached the target."""
        return sum(math.isfinite(x) for x in self.time_to_target)

    @property
    def seconds(self) -> float:
        return mean(self.wall)


# --- claims and their verdicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A paper's claim: ``quote`` in its words where ``verbatim`` (else a paraphrase, and said so),
    ``source`` where it says it, ``paper`` its own setting and numbers, ``test`` how this study tests it.
    ``margin``: the practical margin the difference must clear (in the difference's unit), and
    ``margin_source`` where it comes from; ``primary``: the sizes of the paper's setting (empty: every
    size the study runs) and ``setting`` the primary rows in words. ``modelled``: a claim about time,
    which the simulator's cost model decides."""

    key: str
    short: str
    quote: str
    source: str
    paper: str
    test: str
    modelled: bool = False
    verbatim: bool = True
    margin: float = 0.0
    margin_source: str = ""
    primary: tuple[int, ...] = ()
    setting: str = ""

    def in_setting(self, workers: int) -> bool:
        return not self.primary or workers in self.primary


@dataclass(frozen=True)
class Bounds:
    """A row's test: per seed the lower and upper bound of the difference (equal where both sides are
    measured; ±inf where a censored run leaves it open), against ``threshold`` (the claim's margin) and,
    for a claim that a value lies in a range, ``ceiling``."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    threshold: float
    ceiling: float = math.inf

    @classmethod
    def exact(cls, values: Sequence[float], threshold: float, ceiling: float = math.inf) -> Bounds:
        xs = tuple(float(v) for v in values)
        return cls(xs, xs, threshold, ceiling)

    @property
    def seeds(self) -> int:
        return len(self.low)

    @property
    def censored(self) -> bool:
        return self.low != self.high

    def side(self, confidence: float = CONFIDENCE) -> bool | None:
        """True: the interval of the lower bounds clears the threshold (and that of the upper bounds stays
        under the ceiling); False: the upper bounds' falls short (or the lower bounds' lies over the
        ceiling); None: neither."""
        low = interval(self.low, confidence) if all(map(math.isfinite, self.low)) else None
        high = interval(self.high, confidence) if all(map(math.isfinite, self.high)) else None
        if low is not None and low.low > self.threshold and (high is not None and high.high < self.ceiling
                                                              or math.isinf(self.ceiling)):
            return True
        if high is not None and high.high < self.threshold or low is not None and low.low > self.ceiling:
            return False
        return None

    def shown(self) -> Interval | None:
        """The interval a row prints: of the measured differences; where censored, of the bound that
        is known (the lower one first), or None where neither is."""
        side = self.known()
        return interval(self.low if side in ("exact", "at least") else self.high) if side else None

    def known(self) -> str:
        """Which bound ``shown`` prints: "exact" (nothing censored), "at least", "at most", or "" (neither)."""
        if not self.censored:
            return "exact"
        return "at least" if all(map(math.isfinite, self.low)) else "at most" if all(map(math.isfinite, self.high)) \
            else ""


@dataclass(frozen=True)
class Evidence:
    """One row of a claim's verdict: where (``n=16``, ``H=10, n=32``), what it makes of the difference,
    its numbers in words, the interval printed, whether it is in the paper's setting, and its test
    (to decide it again at a corrected level)."""

    where: str
    outcome: str
    numbers: str
    interval: Interval | None = None
    primary: bool = True
    test: Bounds | None = field(default=None, compare=False)
    effect: str = ""  # the difference in a few words (the summary's)

    def strict(self, rows: int) -> str:
        """Its outcome when it is one of ``rows`` primary rows: a failure counts at 1 − 0.05/rows."""
        if self.outcome not in FAILED or rows <= 1 or self.test is None:
            return self.outcome
        return self.outcome if self.test.side(1 - (1 - CONFIDENCE) / rows) is False else UNCLEAR


@dataclass(frozen=True)
class ClaimVerdict:
    claim: Claim
    outcome: str
    evidence: tuple[Evidence, ...]
    why: str = ""  # where no row decides it: why

    @property
    def primary(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if e.primary)

    @property
    def extension(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if not e.primary)

    def counted_as(self, e: Evidence) -> str:
        """What row ``e`` counts as in this verdict: a primary row's failure at the corrected level."""
        return e.strict(len(counted(self.primary))) if e.primary else e.outcome

    def record(self) -> dict[str, Any]:
        """This verdict as verdict.json holds it: its outcome, summary and evidence rows (each interval's ends,
        null for none: one seed), each row with what it counts as."""
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"outcome": self.outcome, "summary": self.summary(), "evidence": [
            {"where": e.where, "outcome": e.outcome, "counted_as": self.counted_as(e), "numbers": e.numbers,
             "primary": e.primary,
             **({"mean": finite(e.interval.mean), "low": finite(e.interval.low), "high": finite(e.interval.high),
                 "seeds": e.interval.n} if e.interval else {})} for e in self.evidence]}

    def effect(self) -> str:
        """The effect in words: each row's numbers."""
        return "; ".join(f"{e.where}: {e.numbers}" if e.where else e.numbers for e in self.evidence)

    def summary(self) -> str:
        """The outcome with its counts: how many of the paper's rows hold and what the others are (a
        failure counted at its corrected level), then the rows beyond the paper's setting."""
        if self.outcome in (NOT_MEANINGFUL, UNTESTABLE) or (self.why and not self.primary):
            return f"{self.outcome} ({self.why})" if self.why else self.outcome
        rows = [e for e in self.primary if e.where]
        text = self.outcome
        if not rows and self.why:
            text += f" ({self.why})"
        elif any(e.outcome != HOLDS for e in rows) and (len(rows) > 1 or rows[0].outcome != self.outcome):
            held = sum(e.outcome == HOLDS for e in rows)
            others = [f"{e.where}: {self.counted_as(e)}" + (f", {e.effect}" if e.effect else "")
                      for e in rows if e.outcome != HOLDS]
            more = f"; {len(others) - SHOWN} more below" if len(others) > SHOWN else ""
            text += f" ({held} of {len(rows)} rows of the paper's setting hold; " + "; ".join(others[:SHOWN]) + \
                    more + ")"
        ext = [e for e in self.extension if e.where]
        if ext:
            by: dict[str, list[str]] = {}
            for e in ext:
                by.setdefault(e.outcome, []).append(e.where)
            text += "; beyond it: " + ", ".join(f"{o} at {len(ws)} ({'; '.join(ws)})" for o, ws in by.items())
        return text


def counted(rows: Sequence[Evidence]) -> list[Evidence]:
    """The rows that decide a claim: not those whose reference did not train or that cannot test it."""
    return [e for e in rows if e.outcome not in (NOT_MEANINGFUL, UNTESTABLE)]


def decide(claim: Claim, where: str, test: Bounds | None, numbers: str, workers: int = 0,
           timing: bool = False, effect: str = "") -> Evidence:
    """A row from its test: held, failed or inconclusive at 95%, inconclusive on fewer than MIN_SEEDS
    seeds whichever way it would go. ``timing``: the difference is only what the cost model decides (the
    time or bytes for the same budget), so a failure of a claim about time is the model's. ``workers``: the
    row's size (the claim's primary sizes say whether it is in the paper's setting)."""
    primary = claim.in_setting(workers) if workers else True
    failure = NOT_MODELLED if claim.modelled and timing else FAILS
    if test is None:
        return Evidence(where, UNCLEAR, numbers, None, primary, None, effect)
    shown = test.shown()
    if test.seeds < MIN_SEEDS:
        return Evidence(where, UNCLEAR, f"{numbers}; {test.seeds} seed{'s' * (test.seeds != 1)}: a verdict needs "
                        f"{MIN_SEEDS}", shown, primary, test, effect)
    side = test.side()
    outcome = HOLDS if side is True else failure if side is False else UNCLEAR
    return Evidence(where, outcome, numbers, shown, primary, test, effect)


def void(where: str, outcome: str, numbers: str, claim: Claim, workers: int = 0) -> Evidence:
    """A row that is not decided by a test: not meaningful, cannot be tested, or nothing to compare."""
    return Evidence(where, outcome, numbers, None, claim.in_setting(workers) if workers else True)


def verdict(claim: Claim, evidence: Sequence[Evidence], missing: str = "") -> ClaimVerdict:
    """The primary rows decide (module docstring): all hold → holds; one fails at 1 − 0.05/k → it fails;
    else inconclusive. No primary row at all: inconclusive, and why; only rows whose reference did not
    train (or that cannot test the claim): that outcome."""
    if not evidence:
        return ClaimVerdict(claim, UNCLEAR, (Evidence("", UNCLEAR, missing or "no cells to compare"),),
                            missing or "no cells to compare")
    primary = [e for e in evidence if e.primary]
    if not primary:
        return ClaimVerdict(claim, UNCLEAR, tuple(evidence), "no row in the paper's setting" +
                            (f" ({claim.setting})" if claim.setting else ""))
    deciding = counted(primary)
    if not deciding:
        outcome = NOT_MEANINGFUL if any(e.outcome == NOT_MEANINGFUL for e in primary) else UNTESTABLE
        first = next(e for e in primary if e.outcome == outcome)
        return ClaimVerdict(claim, outcome, tuple(evidence), f"{first.where}: {first.numbers}" if first.where
                            else first.numbers)
    if all(e.outcome == HOLDS for e in deciding):
        return ClaimVerdict(claim, HOLDS, tuple(evidence))
    strict = [e.strict(len(deciding)) for e in deciding]
    failed = [o for o in strict if o in FAILED]
    if failed:
        return ClaimVerdict(claim, FAILS if FAILS in failed else NOT_MODELLED, tuple(evidence))
    return ClaimVerdict(claim, UNCLEAR, tuple(evidence))


def paired(a: Cell, b: Cell, field: str = "accuracy") -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The values of ``field`` of the seeds both cells ran, matched by seed number (a cell without seed
    numbers, as hand-made cells in older files: by position)."""
    x, y = getattr(a, field), getattr(b, field)
    if not (a.seeds and b.seeds):
        n = min(len(x), len(y))
        return tuple(x[:n]), tuple(y[:n])
    at = {s: i for i, s in enumerate(b.seeds)}
    both = [(i, at[s]) for i, s in enumerate(a.seeds) if s in at]
    return tuple(x[i] for i, _ in both), tuple(y[j] for _, j in both)


def differences(a: Cell, b: Cell, field: str = "accuracy") -> list[float]:
    """a − b of ``field``, seed by seed (``paired``)."""
    x, y = paired(a, b, field)
    return [u - v for u, v in zip(x, y)]


Cells = dict[tuple[str, int, str], Cell]


def index(cells: Sequence[Cell]) -> Cells:
    return {(c.algo, c.workers, c.variant): c for c in cells}


def sizes_with(cells: Cells, algos: Sequence[str], variant: str = "") -> list[int]:
    """The worker counts at which every one of ``algos`` has a cell."""
    return sorted({n for (_, n, v) in cells if v == variant and all((a, n, variant) in cells for a in algos)})


def pts(iv: Interval | None) -> str:
    return iv.text(100.0, " pts") if iv else "no interval"


def trained(claim: Claim, where: str, workers: int, reference: Cell, ceiling: float | None,
            shown: str = "") -> Evidence | None:
    """None where ``reference`` trained (its accuracy within VALID_GAP of the sequential recipe's
    ``ceiling``; no ceiling: no gate); else the row that says it is not meaningful, and why (``shown``: the
    comparison's numbers, reported beside, not counted)."""
    if ceiling is None or reference.acc >= ceiling - VALID_GAP:
        return None
    why = (f"{reference.algo} ends at {100 * reference.acc:.1f}%, more than {100 * VALID_GAP:g} points below the "
           f"sequential recipe's {100 * ceiling:.1f}%: it did not come close to it, so the row compares unfinished "
           "training and does not decide the claim")
    return void(where, NOT_MEANINGFUL, f"{shown} (not counted: {why})" if shown else why, claim, workers)


def ahead(claim: Claim, where: str, workers: int, a: Cell, b: Cell, what: str,
          ceiling: float | None = None) -> Evidence:
    """``a`` ends more accurate than ``b`` by the claim's margin: the interval of a − b, seed by seed, above
    the margin; only where the better of the two trained."""
    test = Bounds.exact(differences(a, b), claim.margin)
    numbers = f"{what} {pts(test.shown())}"
    return (trained(claim, where, workers, max((a, b), key=lambda c: c.acc), ceiling, numbers)
            or decide(claim, where, test, numbers, workers, effect=pts(test.shown())))


def within(claim: Claim, where: str, workers: int, a: Cell, ref: Cell, ceiling: float | None) -> Evidence:
    """``a``'s accuracy at most the claim's margin below ``ref``'s (ahead counts): a − ref above −margin.
    Only where ``ref`` itself trained (two methods that both failed to train match trivially)."""
    test = Bounds.exact(differences(a, ref), -claim.margin)
    numbers = f"{a.algo} {100 * a.acc:.1f}%, {ref.algo} {100 * ref.acc:.1f}%: {pts(test.shown())}"
    return trained(claim, where, workers, ref, ceiling, numbers) or decide(claim, where, test, numbers, workers,
                                                                           effect=pts(test.shown()))


def sooner(ref: Cell, alt: Cell, threshold: float) -> Bounds:
    """How much sooner ``alt`` reaches the target than ``ref`` (ref's time − alt's), seed by seed, as
    bounds: a run that never reached the target is censored at its end (it would have reached it later
    than that, or never), so its side of the difference is open."""
    low, high = [], []
    (r_times, a_times), (r_ends, a_ends) = paired(ref, alt, "time_to_target"), paired(ref, alt, "wall")
    for r, r_end, a, a_end in zip(r_times, r_ends, a_times, a_ends):
        r_low, r_high = (r, r) if math.isfinite(r) else (r_end, math.inf)
        a_low, a_high = (a, a) if math.isfinite(a) else (a_end, math.inf)
        low.append(r_low - a_high)
        high.append(r_high - a_low)
    return Bounds(tuple(low), tuple(high), threshold)
