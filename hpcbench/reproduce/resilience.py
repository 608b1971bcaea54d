"""``hpcbench reproduce resilience``: what losing workers costs each family of algorithms (pure parts).

The claim (the argument of the asynchronous and decentralised methods' papers, and of torchft's): they
lose less to failing workers than synchronous all-reduce SGD, which must stop, agree and shrink at a
collective. Each algorithm runs every size twice under the shared recipe (tuned on validation without
failures): without failures, then with a schedule of failures. Each run loses ``FAILURES`` workers at
equal intervals of its failure-free duration T: one per (n·T)/FAILURES of node time. A fixed sample
budget takes about the same node time at every size, so that is about the same node MTBF at every
size: the share of workers lost falls as n grows, as on a real cluster. Per cell: goodput kept (the
run's samples per second with failures over without, the same seed) and accuracy lost (the final
accuracy without failures minus with). Each family's algorithm gets a verdict per claim (it keeps more
goodput; it loses no more accuracy) from the paired 95% intervals over seeds, with the rules of
``reproduce.verdicts``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

import numpy as np

from hpcbench.reproduce.verdicts import UNCLEAR, Claim, ClaimVerdict, Evidence, pts, row, verdict
from hpcbench.tuning.intervals import paired

FAILURES = 2  # workers each run with failures loses
SHRINKING = "allreduce"  # the synchronous method the claim compares with
FAMILIES = {"ga-asgd": "parameter server", "easgd": "asynchronous averaging", "gossip": "gossip"}


def killed(workers: int, count: int = FAILURES) -> int:
    """The workers a schedule kills in a run on ``workers``: ``count``, at most all but one."""
    return min(count, workers - 1)


def schedule(workers: int, seconds: float, seed: int, count: int = FAILURES) -> str:
    """``--set fault=`` for a run of ``seconds`` on ``workers``: ``killed`` distinct workers, drawn from
    the seed, killed at equal intervals of the run."""
    count = killed(workers, count)
    victims = np.random.default_rng([seed, 0xFA11]).choice(np.arange(1, workers + 1), size=count, replace=False)
    return ",".join(f"kill:{int(r)}@{seconds * (j + 1) / (count + 1):.4g}" for j, r in enumerate(victims))


@dataclass(frozen=True)
class Pair:
    """One seed of one cell: the run without failures and the run with them."""

    seed: int
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
    def dropped(self) -> float:
        return mean(p.dropped for p in self.pairs)

    @property
    def recovery_s(self) -> float:
        finite = [p.recovery_s for p in self.pairs if math.isfinite(p.recovery_s)]
        return mean(finite) if finite else math.nan

    def whole(self) -> dict[int, Pair]:
        """The seeds whose run with failures lost every worker its schedule kills (one that ended first
        compares nothing), by seed."""
        return {p.seed: p for p in self.pairs if p.lost >= killed(self.workers)}


ACCURACY_POINTS = 0.005  # "no more accuracy lost": within half a point
SOURCE = ("the argument of the asynchronous methods' papers (Dean et al. 2012; Zhang et al. 2015; Jin et al. 2016) "
          "and of torchft, paraphrased")
SETTING = ("none of them measures it against a shrinking all-reduce: the argument is that a method without a "
           "collective need not stop, agree and regroup when a worker fails")


def claims_of(algo: str, modelled: bool) -> tuple[Claim, Claim]:
    """The two claims about ``algo``'s family; ``modelled``: in the simulator, whose cost model decides
    goodput (a claim about time)."""
    family = FAMILIES[algo]
    quote = (f"{family} methods lose less to failing workers than synchronous all-reduce SGD, which must "
             "detect the failure, agree and shrink at a collective")
    return (Claim(f"{algo}-goodput", f"{algo} keeps more goodput", quote, SOURCE, SETTING,
                  f"{algo}'s goodput kept minus {SHRINKING}'s, seed by seed, above 0 at every size", modelled),
            Claim(f"{algo}-accuracy", f"{algo} loses no more accuracy", quote, SOURCE, SETTING,
                  f"{SHRINKING}'s final accuracy lost minus {algo}'s, seed by seed, above "
                  f"−{100 * ACCURACY_POINTS:g} pts at every size"))


def judge(cells: Sequence[ResilienceCell], modelled: bool = True) -> list[ClaimVerdict]:
    """Each family's two claims, a row per size where its algorithm and the shrinking all-reduce both
    ran, over the seeds whose runs with failures both lost what their schedules kill."""
    by = {(c.algo, c.workers): c for c in cells}
    out = []
    for algo in FAMILIES:
        keeps, accurate = claims_of(algo, modelled)
        goodput, accuracy = [], []
        for n in sorted(n for (a, n) in by if a == algo and (SHRINKING, n) in by):
            mine, theirs = by[(algo, n)].whole(), by[(SHRINKING, n)].whole()
            seeds = sorted(set(mine) & set(theirs))
            ran = {p.seed for p in by[(algo, n)].pairs} & {p.seed for p in by[(SHRINKING, n)].pairs}
            short = len(ran) - len(seeds)
            note = f"; {short} seed{'s' * (short > 1)} left out: a run ended before its failures" if short else ""
            if not seeds:
                none = Evidence(f"n={n}", UNCLEAR, "every seed's run with failures ended before them (give the runs "
                                "a larger sample budget)")
                goodput.append(none)
                accuracy.append(none)
                continue
            a, b = [mine[k] for k in seeds], [theirs[k] for k in seeds]
            iv = paired([p.kept for p in a], [p.kept for p in b])
            goodput.append(row(keeps, f"n={n}", iv, iv.side(0.0),
                               f"kept: {algo} {mean(p.kept for p in a):.3f}, {SHRINKING} "
                               f"{mean(p.kept for p in b):.3f}, difference {iv.text(1.0, '', 3)}{note}"))
            iv = paired([p.dropped for p in b], [p.dropped for p in a])
            accuracy.append(row(accurate, f"n={n}", iv, iv.side(-ACCURACY_POINTS),
                                f"accuracy lost: {algo} {100 * mean(p.dropped for p in a):+.2f}, {SHRINKING} "
                                f"{100 * mean(p.dropped for p in b):+.2f} pts, {SHRINKING} − {algo} {pts(iv)}"
                                f"{note}"))
        missing = f"no size where {algo} and {SHRINKING} both finished"
        out += [verdict(keeps, goodput, missing), verdict(accurate, accuracy, missing)]
    return out
