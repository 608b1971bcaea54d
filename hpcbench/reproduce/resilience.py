"""``hpcbench reproduce resilience``: what losing workers costs each family of algorithms (pure parts).

The claim (the argument of the asynchronous and decentralised methods' papers, and of torchft's): they
lose less to failing workers than synchronous all-reduce SGD, which must stop, agree and shrink at a
collective. Each algorithm runs every size twice under the shared recipe (tuned on validation without
failures): without failures, then with a schedule of failures. Each run loses ``FAILURES`` workers at
equal intervals of its failure-free duration T: one per (n·T)/FAILURES of node time. A fixed sample
budget takes about the same node time at every size, so that is about the same node MTBF at every
size: the share of workers lost falls as n grows, as on a real cluster. Per cell: goodput kept (the
run's samples per second with failures over without, the same seed) and accuracy lost (the final
accuracy without failures minus with).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

import numpy as np

from hpcbench.reproduce.verdicts import FAILS, HOLDS, UNCLEAR, Check, Verdict, combine

FAILURES = 2  # workers each run with failures loses
SHRINKING = "allreduce"  # the synchronous method the claim compares with
FAMILIES = {"ga-asgd": "parameter server", "easgd": "asynchronous averaging", "gossip": "gossip"}


def schedule(workers: int, seconds: float, seed: int, count: int = FAILURES) -> str:
    """``--set fault=`` for a run of ``seconds`` on ``workers``: ``count`` distinct workers (at most all
    but one), drawn from the seed, killed at equal intervals of the run."""
    count = min(count, workers - 1)
    victims = np.random.default_rng([seed, 0xFA11]).choice(np.arange(1, workers + 1), size=count, replace=False)
    return ",".join(f"kill:{int(r)}@{seconds * (j + 1) / (count + 1):.4g}" for j, r in enumerate(victims))


@dataclass(frozen=True)
class Pair:
    """One seed of one cell: the run without failures and the run with them."""

    goodput: float  # samples/s
    goodput_failing: float
    accuracy: float
    accuracy_failing: float
    recovery_s: float  # mean over the run's failures (NaN: none measured)
    lost: int  # workers the failing run lost
    samples_lost: int

    @property
    def kept(self) -> float:
        return self.goodput_failing / self.goodput if self.goodput > 0 else math.nan

    @property
    def dropped(self) -> float:
        """Final accuracy lost to the failures (positive: worse with them)."""
        return self.accuracy - self.accuracy_failing


@dataclass(frozen=True)
class ResilienceCell:
    algo: str
    workers: int
    pairs: tuple[Pair, ...]

    @property
    def kept(self) -> float:
        return mean(p.kept for p in self.pairs)

    @property
    def kept_spread(self) -> float:
        return spread([p.kept for p in self.pairs])

    @property
    def dropped(self) -> float:
        return mean(p.dropped for p in self.pairs)

    @property
    def short_of_schedule(self) -> bool:
        """A run with failures lost fewer workers than its schedule kills (it ended first)."""
        return any(p.lost < min(FAILURES, self.workers - 1) for p in self.pairs)

    @property
    def dropped_spread(self) -> float:
        return spread([p.dropped for p in self.pairs])

    @property
    def recovery_s(self) -> float:
        finite = [p.recovery_s for p in self.pairs if math.isfinite(p.recovery_s)]
        return mean(finite) if finite else math.nan


def spread(values: Sequence[float]) -> float:
    """Half the range over seeds: what a difference must exceed to count."""
    return (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def compare(better: Sequence[float], worse: Sequence[float], margin: float) -> bool | None:
    """Each size's difference ``better − worse`` against ``margin`` (the larger spread): True where every
    one exceeds it, False where any is below its negative, else None."""
    diffs = [b - w for b, w in zip(better, worse)]
    if diffs and all(d > margin for d in diffs):
        return True
    if any(d < -margin for d in diffs):
        return False
    return None


def judge(cells: Sequence[ResilienceCell]) -> dict[str, Verdict]:
    """A verdict per family (its representative against the shrinking all-reduce, at every size both
    ran): it keeps more of its goodput, and loses no more accuracy (within the spread over seeds)."""
    by = {(c.algo, c.workers): c for c in cells}
    out: dict[str, Verdict] = {}
    for algo, family in FAMILIES.items():
        sizes = sorted(n for (a, n) in by if a == algo and (SHRINKING, n) in by)
        if not sizes:
            out[family] = Verdict(UNCLEAR, (Check(f"{algo} and {SHRINKING} at one size", None, "none finished"),))
            continue
        mine, theirs = [by[(algo, n)] for n in sizes], [by[(SHRINKING, n)] for n in sizes]
        short = [f"{c.algo} n={c.workers}" for c in mine + theirs if c.short_of_schedule]
        if short:  # a run that ended before its failures compares nothing
            out[family] = Verdict(UNCLEAR, (Check("every run with failures lost the workers its schedule kills", None,
                                                  f"{', '.join(short)}: a run ended before its failures (give the "
                                                  "runs a larger sample budget)"),))
            continue
        margin = max(max(c.kept_spread for c in mine + theirs), 0.01)  # 1% of goodput at the least
        kept = compare([c.kept for c in mine], [c.kept for c in theirs], margin)
        noise = max(max(c.dropped_spread for c in mine + theirs), 0.005)
        accuracy = compare([c.dropped for c in theirs], [c.dropped for c in mine], noise)
        each = "; ".join(f"n={n}: {a.kept:.3f} vs {b.kept:.3f}" for n, a, b in zip(sizes, mine, theirs))
        drops = "; ".join(f"n={n}: {100 * a.dropped:+.2f} vs {100 * b.dropped:+.2f} pts"
                          for n, a, b in zip(sizes, mine, theirs))
        checks = [Check(f"{algo} keeps more of its goodput than {SHRINKING} when workers fail", kept,
                        f"goodput kept, {algo} vs {SHRINKING}: {each}; differences must exceed {margin:.3f}"),
                  Check(f"{algo} loses no more accuracy to the failures than {SHRINKING}",
                        True if accuracy is None or accuracy else False,
                        f"final accuracy lost: {drops}; differences within {100 * noise:.2f} pts count as no more")]
        out[family] = combine(checks)
    return out


def overall(verdicts: dict[str, Verdict]) -> str:
    """The claim as a whole: it holds for every family, fails for every one, else it depends on the family."""
    outcomes = {v.outcome for v in verdicts.values()}
    if outcomes == {HOLDS}:
        return HOLDS
    if outcomes == {FAILS}:
        return FAILS
    return UNCLEAR if outcomes == {UNCLEAR} else "depends on the family"
