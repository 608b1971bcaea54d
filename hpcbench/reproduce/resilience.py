"""``hpcbench reproduce resilience``: what losing workers costs each family of algorithms (pure parts).

The claim (the argument of the asynchronous and decentralised methods' papers, and of torchft's): they
lose less to failing workers than synchronous all-reduce SGD, which must stop, agree and shrink at a
collective. Each algorithm runs every size under the shared recipe (tuned on validation without
failures): once without failures (its duration T), then once per failure scenario, each a schedule drawn
from the seed over T:

- ``mtbf``: every worker fails after an exponential time with the node MTBF M, so a run expects n·T/M
  failures: more where more node time is spent. M is one number for the study: the one at which
  all-reduce at the smallest size expects ``EXPECTED`` failures.
- ``early``: one worker fails at 5% of the run (a failure in the first minute of a long job).
- ``burst``: a quarter of the workers fail at once, half-way (a switch or a rack).

No schedule kills the last worker. What failures cost a run is split three ways (``Split``): the
capacity they remove (the run's duration had the survivors worked on at full speed from each death:
the same for every family under the same schedule), the work lost (samples trained and then discarded)
and the rest: recovery, waiting and redone work, which is where a collective and an asynchronous method
differ. The claims are tested on that part: a family *loses less beyond capacity* when all-reduce's
overhead (beyond capacity, as a share of the failure-free run) exceeds its own by the margin; it *loses
no more accuracy* when its final accuracy lost is within half a point of all-reduce's, where both
failure-free runs trained. Each row is a (scenario, size), judged with ``reproduce.verdicts``' rules.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

import numpy as np

from hpcbench.reproduce.verdicts import (
    NOT_MEANINGFUL,
    UNCLEAR,
    VALID_GAP,
    Bounds,
    Claim,
    ClaimVerdict,
    Evidence,
    decide,
    pts,
    verdict,
    void,
)

SHRINKING = "allreduce"  # the synchronous method the claim compares with
FAMILIES = {"ga-asgd": "parameter server", "easgd": "asynchronous averaging", "gossip": "gossip"}
SCENARIOS = ("mtbf", "early", "burst")
SCENARIO_TEXT = {"mtbf": "each worker fails after an exponential time with the node MTBF",
                 "early": "one worker fails at 5% of the run",
                 "burst": "a quarter of the workers fail at once, half-way",
                 "": "two workers fail at equal intervals of the run (the study's first design)"}
EXPECTED = 2.0  # failures all-reduce expects at the smallest size under the node MTBF
EARLY, BURST_AT, BURST_SHARE = 0.05, 0.5, 0.25


def node_mtbf(workers: int, seconds: float) -> float:
    """The node MTBF at which a run of ``seconds`` on ``workers`` expects ``EXPECTED`` failures."""
    return workers * seconds / EXPECTED


def schedule(scenario: str, workers: int, seconds: float, seed: int, mtbf: float = math.inf) -> str:
    """``--set fault=`` for scenario ``scenario`` of a run of ``seconds`` on ``workers`` (module docstring),
    drawn from the seed; "" where the MTBF draws no failure within the run. Never every worker."""
    rng = np.random.default_rng([seed, 0xFA11, SCENARIOS.index(scenario)])
    ranks = rng.permutation(np.arange(1, workers + 1))
    if scenario == "mtbf":
        times = rng.exponential(mtbf, size=workers) if math.isfinite(mtbf) else np.full(workers, math.inf)
        kills = sorted((float(t), int(r)) for r, t in zip(ranks, times) if t < seconds)[:workers - 1]
    elif scenario == "early":
        kills = [(EARLY * seconds, int(ranks[0]))] if workers > 1 else []
    else:
        count = min(workers - 1, max(1, round(BURST_SHARE * workers)))
        kills = [(BURST_AT * seconds, int(r)) for r in ranks[:count]]
    return ",".join(f"kill:{r}@{t:.6g}" for t, r in kills)


def scheduled(spec: str) -> int:
    """Workers a schedule kills."""
    return len(spec.split(",")) if spec else 0


def capacity_time(seconds: float, workers: int, deaths: Sequence[float]) -> float:
    """How long a run of ``seconds`` on ``workers`` takes when each death removes a worker's share of the
    speed from then on and nothing else is lost: the capacity the failures take, and no more."""
    t, done, alive = 0.0, 0.0, workers
    for d in sorted(deaths):
        if d >= t + (seconds - done) * workers / alive or alive <= 1:
            break
        done += (d - t) * alive / workers
        t, alive = d, alive - 1
    return t + (seconds - done) * workers / alive


@dataclass(frozen=True)
class Pair:
    """One seed of one cell: the run without failures and the run with them (older verdicts hold the first
    eight fields only)."""

    seed: int
    goodput: float  # samples/s
    goodput_failing: float
    accuracy: float
    accuracy_failing: float
    recovery_s: float  # mean over the run's failures (NaN: none measured)
    lost: int  # workers the failing run lost
    samples_lost: int
    wall: float = math.nan  # seconds, without failures
    wall_failing: float = math.nan
    deaths: tuple[float, ...] = ()  # when each worker died (seconds into the run)
    scheduled: int = 2  # workers its schedule kills
    workers: int = 0

    @property
    def kept(self) -> float:
        return self.goodput_failing / self.goodput if self.goodput > 0 else math.nan

    @property
    def dropped(self) -> float:
        """Final accuracy lost to the failures (positive: worse with them)."""
        return self.accuracy - self.accuracy_failing

    @property
    def split(self) -> Split:
        return Split.of(self)


@dataclass(frozen=True)
class Split:
    """What failures cost a run, as shares of its failure-free duration T: ``capacity`` (the survivors at
    full speed from each death), ``lost_work`` (samples trained and discarded, at the failure-free rate)
    and ``overhead``: everything beyond capacity (recovery, waiting, lost work whether redone or not). A
    run that did not redo the samples it lost kept fewer than the budget, so its time is scaled to the
    budget at its own rate with failures (goodput without over with, times T) before the capacity's time
    is taken off: a method that drops work cannot look cheaper for it. NaN where a verdict predates the
    fields."""

    capacity: float
    lost_work: float
    overhead: float

    @classmethod
    def of(cls, p: Pair) -> Split:
        if not (p.workers and math.isfinite(p.wall) and math.isfinite(p.wall_failing) and p.wall > 0):
            return cls(math.nan, math.nan, math.nan)
        ideal = capacity_time(p.wall, p.workers, p.deaths)
        budget_time = p.wall / p.kept  # the budget's samples at the failing run's goodput
        return cls(ideal / p.wall - 1, p.samples_lost / (p.goodput * p.wall) if p.goodput > 0 else math.nan,
                   (budget_time - ideal) / p.wall)


def split_known(cells: Sequence[ResilienceCell]) -> bool:
    """Whether every seed's pair says what its failures cost beyond capacity (a verdict of the first design
    does not: it is judged on goodput kept)."""
    return all(math.isfinite(p.split.overhead) for c in cells for p in c.pairs)


@dataclass(frozen=True)
class ResilienceCell:
    algo: str
    workers: int
    pairs: tuple[Pair, ...]
    scenario: str = ""  # "" in verdicts of the first design (a fixed two-kill schedule)

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
        return {p.seed: p for p in self.pairs if p.lost >= min(p.scheduled, self.workers - 1)}
        # (a seed whose MTBF draw has no failure within its run is kept: under the node MTBF, a run that meets
        # no failure is one of its outcomes, and it costs nothing)


ACCURACY_POINTS = 0.005  # "no more accuracy lost": within half a point
GOODPUT_SHARE = 0.01  # "keeps more goodput": by at least 1% of the failure-free goodput
SOURCE = ("the argument of the asynchronous methods' papers (Dean et al. 2012; Zhang et al. 2015; Jin et al. 2016) "
          "and of torchft, in this study's words")
SETTING = ("none of them measures it against a shrinking all-reduce: the argument is that a method without a "
           "collective need not stop, agree and regroup when a worker fails")


def claims_of(algo: str, modelled: bool, split: bool = True) -> tuple[Claim, Claim]:
    """The two claims about ``algo``'s family; ``modelled``: in the simulator, whose cost model decides
    time; ``split``: the runs say when each worker died, so time is judged beyond the capacity lost (a
    verdict of the first design: goodput kept as a whole)."""
    family = FAMILIES[algo]
    quote = (f"{family} methods lose less to failing workers than synchronous all-reduce SGD, which must "
             "detect the failure, agree and shrink at a collective")
    time = (Claim(f"{algo}-overhead", f"{algo} loses less beyond capacity", quote, SOURCE, SETTING,
                  f"{SHRINKING}'s time lost beyond the capacity the failures remove minus {algo}'s (shares of the "
                  "failure-free run), seed by seed, above the margin", modelled, verbatim=False,
                  margin=GOODPUT_SHARE, margin_source="declared minimum effect: 1% of the failure-free run")
            if split else
            Claim(f"{algo}-goodput", f"{algo} keeps more goodput", quote, SOURCE, SETTING,
                  f"{algo}'s goodput kept minus {SHRINKING}'s, seed by seed, above the margin at every size",
                  modelled, verbatim=False, margin=GOODPUT_SHARE,
                  margin_source="declared minimum effect: 1% of the failure-free goodput"))
    return (time,
            Claim(f"{algo}-accuracy", f"{algo} loses no more accuracy", quote, SOURCE, SETTING,
                  f"{SHRINKING}'s final accuracy lost minus {algo}'s, seed by seed, above minus the margin where "
                  "both failure-free runs trained", verbatim=False, margin=ACCURACY_POINTS,
                  margin_source="declared tolerance: half a point, about the spread of a cell's accuracy over seeds"))


def untrained(cells: Sequence[ResilienceCell], ceiling: float | None) -> str:
    """Why a row's accuracy claim is not meaningful ("" where every failure-free run trained): one of the
    cells' failure-free runs ends more than VALID_GAP below the sequential recipe's ``ceiling``."""
    if ceiling is None:
        return ""
    for c in cells:
        acc = mean(p.accuracy for p in c.pairs)
        if acc < ceiling - VALID_GAP:
            return (f"{c.algo} without failures ends at {100 * acc:.1f}%, more than {100 * VALID_GAP:g} points below "
                    f"the sequential recipe's {100 * ceiling:.1f}%: it did not come close to it, so what failures cost "
                    "its accuracy decides nothing")
    return ""


def judge(cells: Sequence[ResilienceCell], modelled: bool = True, ceiling: float | None = None) -> list[ClaimVerdict]:
    """Each family's two claims, a row per (scenario, size) where its algorithm and the shrinking
    all-reduce both ran, over the seeds whose runs with failures both lost what their schedules kill;
    ``ceiling``: the sequential recipe's accuracy (an accuracy row whose failure-free runs did not train
    is not meaningful)."""
    by = {(c.algo, c.scenario, c.workers): c for c in cells}
    split = split_known(cells)
    out = []
    for algo in FAMILIES:
        losses, accurate = claims_of(algo, modelled, split)
        time: list[Evidence] = []
        accuracy: list[Evidence] = []
        for scenario, n in sorted((sc, n) for (a, sc, n) in by if a == algo and (SHRINKING, sc, n) in by):
            where = f"{scenario} n={n}" if scenario else f"n={n}"
            mine, theirs = by[(algo, scenario, n)].whole(), by[(SHRINKING, scenario, n)].whole()
            seeds = sorted(set(mine) & set(theirs))
            ran = {p.seed for p in by[(algo, scenario, n)].pairs} & {p.seed for p in by[(SHRINKING, scenario, n)].pairs}
            short = len(ran) - len(seeds)
            note = f"; {short} seed{'s' * (short > 1)} left out: a run ended before its failures" if short else ""
            if not seeds:
                none = Evidence(where, UNCLEAR, "every seed's run with failures ended before them (give the runs "
                                "a larger sample budget)")
                time.append(none)
                accuracy.append(none)
                continue
            a, b = [mine[k] for k in seeds], [theirs[k] for k in seeds]
            time.append((beyond if split else kept)(losses, where, n, algo, a, b, note))
            why = untrained([by[(algo, scenario, n)], by[(SHRINKING, scenario, n)]], ceiling)
            if why:
                accuracy.append(void(where, NOT_MEANINGFUL, why, accurate, n))
                continue
            test = Bounds.exact([y.dropped - x.dropped for x, y in zip(a, b)], -ACCURACY_POINTS)
            accuracy.append(decide(accurate, where, test, f"accuracy lost: {algo} "
                                   f"{100 * mean(p.dropped for p in a):+.2f}, {SHRINKING} "
                                   f"{100 * mean(p.dropped for p in b):+.2f} pts, {SHRINKING} − {algo} "
                                   f"{pts(test.shown())}{note}", n, effect=pts(test.shown())))
        missing = f"no size where {algo} and {SHRINKING} both finished"
        out += [verdict(losses, time, missing), verdict(accurate, accuracy, missing)]
    return out


def beyond(claim: Claim, where: str, n: int, algo: str, a: Sequence[Pair], b: Sequence[Pair], note: str) -> Evidence:
    """All-reduce's time lost beyond capacity minus ``algo``'s, seed by seed (shares of the failure-free run)."""
    test = Bounds.exact([y.split.overhead - x.split.overhead for x, y in zip(a, b)], claim.margin)
    shown = test.shown()
    difference = f"difference {shown.text(100.0, ' pts', 1) if shown else 'no interval'}"
    return decide(claim, where, test, f"beyond capacity: {algo} {100 * mean(p.split.overhead for p in a):+.1f}%, "
                  f"{SHRINKING} {100 * mean(p.split.overhead for p in b):+.1f}% of the failure-free run "
                  f"(capacity {100 * mean(p.split.capacity for p in b):+.1f}%), {difference}{note}", n, timing=True,
                  effect=difference)


def kept(claim: Claim, where: str, n: int, algo: str, a: Sequence[Pair], b: Sequence[Pair], note: str) -> Evidence:
    """The first design's test: ``algo``'s goodput kept minus all-reduce's, seed by seed."""
    test = Bounds.exact([x.kept - y.kept for x, y in zip(a, b)], claim.margin)
    shown = test.shown()
    difference = f"difference {shown.text(1.0, '', 3) if shown else 'no interval'}"
    return decide(claim, where, test, f"kept: {algo} {mean(p.kept for p in a):.3f}, {SHRINKING} "
                  f"{mean(p.kept for p in b):.3f}, {difference}{note}", n, timing=True, effect=difference)
