"""Whether each study's claim holds, computed from its measured cells (pure).

A claim is split into checks; each check is True (holds), False (contradicted) or None (the data
cannot tell: differences within the spread over seeds, or points missing or never reaching the
target). The verdict: "holds" when every check holds, "does not hold" when any is contradicted,
else "inconclusive". Every check says its numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import mean

HOLDS, FAILS, UNCLEAR = "holds", "does not hold", "inconclusive"


@dataclass(frozen=True)
class Cell:
    """One algorithm at one size (and network), over its seeds."""

    algo: str
    workers: int
    variant: str
    accuracy: tuple[float, ...]  # final accuracy of each seed
    time_to_target: tuple[float, ...]  # seconds of each seed; inf when it never reached the target
    wall: tuple[float, ...]  # seconds each seed's run took (virtual time in the simulator)
    eval_gap: float = 0.0  # seconds between evaluations: times to target closer than this are a tie
    bytes_per_sample: tuple[float, ...] = ()  # bytes that crossed between ranks per sample, each seed's

    @property
    def moved(self) -> float:
        """Mean bytes per training sample over seeds (NaN where the files do not say)."""
        return mean(self.bytes_per_sample) if self.bytes_per_sample else math.nan

    @property
    def acc(self) -> float:
        return mean(self.accuracy)

    @property
    def acc_spread(self) -> float:
        """Half the range over seeds: what a difference must exceed to count."""
        return (max(self.accuracy) - min(self.accuracy)) / 2 if len(self.accuracy) > 1 else 0.0

    @property
    def ttt(self) -> float:
        """Mean time to target; inf when some seed never reached it."""
        return mean(self.time_to_target)

    @property
    def seconds(self) -> float:
        return mean(self.wall)


@dataclass(frozen=True)
class Check:
    what: str
    result: bool | None
    numbers: str


@dataclass(frozen=True)
class Verdict:
    outcome: str
    checks: tuple[Check, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        mark = {True: "holds", False: "does not hold", None: "cannot tell"}
        return [f"- {c.what}: **{mark[c.result]}** ({c.numbers})" for c in self.checks]


def combine(checks: Sequence[Check]) -> Verdict:
    results = [c.result for c in checks]
    outcome = FAILS if False in results else HOLDS if results and all(r is True for r in results) else UNCLEAR
    return Verdict(outcome, tuple(checks))


Cells = dict[tuple[str, int, str], Cell]


def index(cells: Sequence[Cell]) -> Cells:
    return {(c.algo, c.workers, c.variant): c for c in cells}


def sizes_with(cells: Cells, algos: Sequence[str], variant: str = "") -> list[int]:
    """The worker counts at which every one of ``algos`` has a cell."""
    return sorted({n for (_, n, v) in cells if v == variant and all((a, n, variant) in cells for a in algos)})


def pct(x: float) -> str:
    return f"{100 * x:+.1f} pts"


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = mean(xs), mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def gap_aware(cells: Sequence[Cell]) -> Verdict:
    """GA > SA and ASGD at every n; the margin grows with n; DANA-GA the most accurate."""
    c = index(cells)
    sizes = sizes_with(c, ("asgd", "sa-asgd", "ga-asgd", "dana-ga"))
    if not sizes:
        return Verdict(UNCLEAR, (Check("runs of all four algorithms at one size", None, "none finished"),))
    margins, noises, dana = [], [], []
    for n in sizes:
        ga, sa, asgd, dg = (c[(a, n, "")] for a in ("ga-asgd", "sa-asgd", "asgd", "dana-ga"))
        margins.append(ga.acc - max(sa.acc, asgd.acc))
        noises.append(max(ga.acc_spread, sa.acc_spread, asgd.acc_spread))
        best_other = max(ga, sa, asgd, key=lambda x: x.acc)
        dana.append((dg.acc - best_other.acc, max(dg.acc_spread, best_other.acc_spread)))
    each = ", ".join(f"n={n}: {pct(m)}" for n, m in zip(sizes, margins))
    if all(m > e for m, e in zip(margins, noises)):
        beats: bool | None = True
    elif any(m < -e for m, e in zip(margins, noises)):
        beats = False
    else:
        beats = None
    checks = [Check("GA ends more accurate than SA and ASGD at every size", beats,
                    f"GA minus the better of SA and ASGD: {each}")]
    if len(sizes) < 2:
        checks.append(Check("the margin grows with n", None, "one size only"))
    else:
        change = margins[-1] - margins[0]
        trend = slope([math.log2(n) for n in sizes], margins)
        noise = max(noises[0], noises[-1])
        grows = None if abs(change) <= noise else (change > 0 and trend > 0) if (change > 0) == (trend > 0) else None
        checks.append(Check("the margin grows with n", grows,
                            f"{pct(margins[0])} at n={sizes[0]} to {pct(margins[-1])} at n={sizes[-1]}, "
                            f"slope {100 * trend:+.2f} pts per doubling"))
    ahead = sum(d > -e for d, e in dana)
    behind = sum(d < -e for d, e in dana)
    best = True if ahead == len(sizes) else False if behind > len(sizes) / 2 else None
    checks.append(Check("DANA-GA is the most accurate", best, "DANA-GA minus the best of the others: " +
                        ", ".join(f"n={n}: {pct(d)}" for n, (d, _) in zip(sizes, dana))))
    return combine(checks)


SMALL, LARGE = 32, 64  # "up to about 32 nodes", "toward about 100 nodes"


def seconds(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.3g} s"


ASYNC = ("easgd", "gossip")


def race(c: Cells, n: int) -> tuple[float, float, str, bool | None]:
    """At ``n`` workers: (all-reduce's time to target, the best asynchronous time, that method, whether
    it was first). None for the last: neither reached the target, or both did within one evaluation
    interval of each other (a tie)."""
    ar = c[("allreduce", n, "")]
    name = min(ASYNC, key=lambda a: c[(a, n, "")].ttt)
    asy = c[(name, n, "")]
    if (math.isinf(ar.ttt) and math.isinf(asy.ttt)) or abs(asy.ttt - ar.ttt) <= max(ar.eval_gap, asy.eval_gap):
        return ar.ttt, asy.ttt, name, None
    return ar.ttt, asy.ttt, name, asy.ttt < ar.ttt


def jin(cells: Sequence[Cell]) -> Verdict:
    """Asynchronous methods reach the target first at n ≤ 32; all-reduce first at n ≥ 64; where they cross."""
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", *ASYNC))
    if not sizes:
        return Verdict(UNCLEAR, (Check("runs of all three algorithms at one size", None, "none finished"),))
    races = {n: race(c, n) for n in sizes}

    def said(ns: list[int]) -> str:
        return ", ".join(f"n={n}: all-reduce {seconds(ar)}, {name} {seconds(asy)}"
                         + (" (a tie: within one evaluation interval)" if first is None else "")
                         for n in ns for ar, asy, name, first in [races[n]])

    def first(ns: list[int], expect_async: bool) -> bool | None:
        """True: the expected side is first wherever the two are apart, at one size at least; False:
        the other side is first somewhere; None: ties (or nothing reached) only."""
        results = [races[n][3] for n in ns]
        if (not expect_async) in results:
            return False
        return True if expect_async in results else None

    small = [n for n in sizes if n <= SMALL]
    large = [n for n in sizes if n >= LARGE]
    return combine([
        Check(f"an asynchronous method reaches the target first up to {SMALL} workers",
              first(small, True), said(small) if small else f"no size up to {SMALL}"),
        Check(f"all-reduce reaches the target first from {LARGE} workers",
              first(large, False), said(large) if large else f"no size from {LARGE}"),
    ])


def crossing(cells: Sequence[Cell]) -> str:
    """Where all-reduce's time to target first drops below the best asynchronous method's, in words."""
    c = index(cells)
    previous = None
    for n in sizes_with(c, ("allreduce", *ASYNC)):
        ar, _, _, async_first = race(c, n)
        if async_first is None and not math.isinf(ar):
            return f"the curves meet at n={n} (within one evaluation interval)"
        if async_first is False:
            return (f"all-reduce is first from the smallest size measured (n={n})" if previous is None
                    else f"the curves cross between n={previous} and n={n}")
        previous = n
    return "all-reduce is never first at the sizes measured"


RATIO_CLAIMED = (2.0, 4.5)  # "about 3x"
ACCURACY_POINTS = 0.015  # "within about one point"


def sgp(cells: Sequence[Cell], slow: str, fast: str) -> Verdict:
    """At the largest size on the ``slow`` network: all-reduce's time / SGP's in [2, 4.5], accuracy
    within 1.5 points; on the ``fast`` network the ratio is smaller."""
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", "sgp"), slow)
    if not sizes:
        return Verdict(UNCLEAR, (Check(f"runs of all-reduce and SGP over {slow}", None, "none finished"),))
    n = sizes[-1]
    ar, sg = c[("allreduce", n, slow)], c[("sgp", n, slow)]
    ratio = ar.seconds / sg.seconds
    low, high = RATIO_CLAIMED
    faster = True if low <= ratio <= high else False if ratio < low else None
    checks = [Check(f"SGP about 3x faster than all-reduce at n={n} over {slow}", faster,
                    f"all-reduce {ar.seconds:.3g} s, SGP {sg.seconds:.3g} s for the same budget: {ratio:.2f}x")]
    gap = sg.acc - ar.acc
    noise = max(ar.acc_spread, sg.acc_spread)
    close = True if abs(gap) <= ACCURACY_POINTS + noise else False if gap < 0 else None
    checks.append(Check("SGP's final accuracy within about one point of all-reduce's", close,
                        f"all-reduce {100 * ar.acc:.1f}%, SGP {100 * sg.acc:.1f}% ({pct(gap)})"))
    if ("allreduce", n, fast) in c and ("sgp", n, fast) in c:
        fast_ratio = c[("allreduce", n, fast)].seconds / c[("sgp", n, fast)].seconds
        checks.append(Check(f"the gap shrinks over {fast}", fast_ratio < ratio,
                            f"{fast_ratio:.2f}x over {fast} against {ratio:.2f}x over {slow}"))
    else:
        checks.append(Check(f"the gap shrinks over {fast}", None, f"no runs over {fast}"))
    return combine(checks)


COMMUNICATION_SHARE = 0.5  # "H times less": at least half of H (rank 0's evaluation reads are not divided)


def diloco(cells: Sequence[Cell], network: str, periods: Sequence[int]) -> Verdict:
    """For each H: final accuracy at most about one point below all-reduce's at every size ("matches":
    ahead counts); at least H/2 times fewer bytes per sample; the budget finished sooner than
    all-reduce's over ``network``."""
    c = index(cells)
    checks = []
    for h in periods:
        name = f"diloco-h{h}"
        sizes = sizes_with(c, ("allreduce", name), network)
        if not sizes:
            checks.append(Check(f"DiLoCo H={h} against all-reduce", None, "no size where both finished"))
            continue
        pairs = [(n, c[("allreduce", n, network)], c[(name, n, network)]) for n in sizes]
        gaps = [(n, d.acc - a.acc, max(a.acc_spread, d.acc_spread)) for n, a, d in pairs]
        close = all(g >= -(ACCURACY_POINTS + e) for _, g, e in gaps)
        checks.append(Check(f"DiLoCo H={h}: final accuracy at most about one point below all-reduce's", close,
                            ", ".join(f"n={n}: {pct(g)}" for n, g, _ in gaps)))
        ratios = [(n, a.moved / d.moved) for n, a, d in pairs]
        less = None if any(math.isnan(r) for _, r in ratios) else all(r >= COMMUNICATION_SHARE * h for _, r in ratios)
        checks.append(Check(f"DiLoCo H={h}: about {h}x fewer bytes per sample than all-reduce", less,
                            ", ".join(f"n={n}: {r:.3g}x" for n, r in ratios)))
        sooner = all(d.seconds < a.seconds for _, a, d in pairs)
        checks.append(Check(f"DiLoCo H={h} finishes the budget sooner than all-reduce over {network}", sooner,
                            ", ".join(f"n={n}: {a.seconds:.3g} s against {d.seconds:.3g} s" for n, a, d in pairs)))
    return combine(checks)
