"""The papers' claims each study tests, and how each is judged from an arm's cells (pure).

Each claim is quoted with its source and the paper's own numbers (``verdicts.Claim``); each judge
turns one arm's cells into a ``ClaimVerdict`` per claim, row by row (a size, a network, a period),
with the rules of ``reproduce.verdicts``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import mean

from hpcbench.reproduce.verdicts import (
    UNCLEAR,
    Cell,
    Cells,
    Claim,
    ClaimVerdict,
    Evidence,
    ahead,
    index,
    row,
    sizes_with,
    verdict,
    within,
)
from hpcbench.tuning.intervals import Interval, interval, paired

# --- Gap-Aware (Barkai, Hakimi, Schuster, ICLR 2020) --------------------------------------------------

GA_SOURCE = "Barkai, Hakimi, Schuster, ICLR 2020 (arXiv 1909.10802)"
GA_SETTING = ("CIFAR-10/100, ImageNet and WikiText-103, up to 128 workers, momentum 0.9, the usual step "
              "schedules; the abstract states the claims without one headline number")
GA_OVER_SA = Claim("ga-over-sa", "GA beats SA",
                   "GA outperforms the currently acceptable gradient penalization method, in final test accuracy",
                   f"{GA_SOURCE}, abstract", GA_SETTING,
                   "GA minus SA final test accuracy, seed by seed, above 0 at every size")
GA_GROWS = Claim("ga-margin-grows", "GA's lead over SA grows with n",
                 "[GA] performs well even when scaling to large numbers of workers",
                 f"{GA_SOURCE}, abstract (that the lead over SA grows with the workers is the paper's figures, in "
                 "words)",
                 GA_SETTING, "the slope of GA minus SA against log2 n, seed by seed, above 0")
GA_OVER_ASGD = Claim("ga-over-asgd", "GA beats plain ASGD",
                     "ASGD methods ... are scarcely used due to gradient staleness, which encumbers the convergence "
                     "process", f"{GA_SOURCE}, abstract (GA is the paper's remedy for it)", GA_SETTING,
                     "GA minus ASGD final test accuracy, seed by seed, above 0 at every size")
DANA_BEST = Claim("dana-ga-best", "DANA-GA is the most accurate",
                  "DANA-GA is the strongest combination (GA on DANA's look-ahead with per-worker momentum)",
                  f"{GA_SOURCE}, with DANA (Hakimi et al., arXiv 1907.11612)", GA_SETTING,
                  "DANA-GA minus the best of ASGD, SA and GA, seed by seed, above 0 at every size")


def gap_aware(cells: Sequence[Cell]) -> list[ClaimVerdict]:
    c = index(cells)
    sizes = sizes_with(c, ("asgd", "sa-asgd", "ga-asgd", "dana-ga"))
    cell = {a: [c[(a, n, "")] for n in sizes] for a in ("asgd", "sa-asgd", "ga-asgd", "dana-ga")}
    out = [verdict(GA_OVER_SA, [ahead(GA_OVER_SA, f"n={n}", ga, sa, "GA − SA") for n, ga, sa
                                in zip(sizes, cell["ga-asgd"], cell["sa-asgd"])]),
           verdict(GA_OVER_ASGD, [ahead(GA_OVER_ASGD, f"n={n}", ga, asgd, "GA − ASGD") for n, ga, asgd
                                  in zip(sizes, cell["ga-asgd"], cell["asgd"])])]
    if len(sizes) < 2:
        out.append(verdict(GA_GROWS, [], "a trend needs two sizes"))
    else:
        x = [math.log2(n) for n in sizes]
        per_seed = [slope(x, [ga.accuracy[i] - sa.accuracy[i] for ga, sa in zip(cell["ga-asgd"], cell["sa-asgd"])])
                    for i in range(min(len(k.accuracy) for k in cell["ga-asgd"] + cell["sa-asgd"]))]
        iv = interval(per_seed)
        out.append(verdict(GA_GROWS, [row(GA_GROWS, f"n={sizes[0]}–{sizes[-1]}", iv, iv.side(0.0),
                                          f"{iv.text(100.0, ' pts per doubling', 2)}")]))
    rows = []
    for n, dg, *others in zip(sizes, cell["dana-ga"], cell["asgd"], cell["sa-asgd"], cell["ga-asgd"]):
        best = max(others, key=lambda x: x.acc)
        rows.append(ahead(DANA_BEST, f"n={n}", dg, best, f"DANA-GA − {best.algo}"))
    out.append(verdict(DANA_BEST, rows))
    return out


GA_MOMENTUM = Claim("ga-momentum-helps", "with GA, momentum helps at every n",
                    "if GA is applied, momentum becomes beneficial in asynchronous environments, even when the "
                    "number of workers scales up", f"{GA_SOURCE}, abstract", GA_SETTING,
                    "GA with momentum 0.9 minus GA without momentum, each at the best single-worker rate at its "
                    "momentum (the two momentum arms), seed by seed, above 0 at every size")


def momentum_helps(with_momentum: Sequence[Cell], without: Sequence[Cell]) -> ClaimVerdict:
    """GA's cells of the momentum-0.9 arm against the momentum-0 arm's, size by size."""
    a, b = index(with_momentum), index(without)
    sizes = sorted(n for (algo, n, v) in a if algo == "ga-asgd" and ("ga-asgd", n, v) in b)
    return verdict(GA_MOMENTUM, [ahead(GA_MOMENTUM, f"n={n}", a[("ga-asgd", n, "")], b[("ga-asgd", n, "")],
                                       "GA with momentum − without") for n in sizes])


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = mean(xs), mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


# --- Jin et al. 2016 -----------------------------------------------------------------------------------

SMALL, LARGE = 32, 64  # "up to about 32 nodes", "toward about 100 nodes"
ASYNC = ("easgd", "gossip")
JIN_SOURCE = "Jin, Yuan, Iandola, Keutzer 2016 (arXiv 1611.04581)"
JIN_SETTING = "CIFAR-10 and ImageNet on up to 128 nodes; time to a target accuracy"
JIN_SMALL = Claim("async-first-small", f"an asynchronous method first up to {SMALL} workers",
                  "at small scale, elastic averaging and gossiping converge faster than synchronous all-reduce SGD "
                  "(paraphrase)", f"{JIN_SOURCE}, abstract and conclusions", JIN_SETTING,
                  f"all-reduce's time to target minus the faster asynchronous method's, seed by seed, above 0 at "
                  f"every size up to {SMALL} (and apart by more than one evaluation interval)", modelled=True)
JIN_LARGE = Claim("allreduce-first-large", f"all-reduce first from {LARGE} workers",
                  "synchronous all-reduce SGD scales better, toward about 100 nodes (paraphrase)",
                  f"{JIN_SOURCE}, abstract and conclusions", JIN_SETTING,
                  f"the faster asynchronous method's time to target minus all-reduce's, seed by seed, above 0 at "
                  f"every size from {LARGE}", modelled=True)


def seconds(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.3g} s"


def first(claim: Claim, n: int, ar: Cell, asy: Cell, expect_async: bool) -> Evidence:
    """Whether the expected side reaches the target first at ``n``: from the seeds' time differences, or,
    where one side never reaches it in any seed and the other always does, that."""
    where = f"n={n}"
    numbers = f"all-reduce {seconds(ar.ttt)}, {asy.algo} {seconds(asy.ttt)}"
    a, b = ar.time_to_target, asy.time_to_target
    never_a, never_b = all(math.isinf(x) for x in a), all(math.isinf(x) for x in b)
    if never_a and never_b:
        return Evidence(where, UNCLEAR, f"{numbers}: neither reaches the target")
    if any(math.isinf(x) for x in a + b):
        if never_a and not any(math.isinf(x) for x in b):
            return row(claim, where, None, expect_async, numbers + ": only the asynchronous method reaches it")
        if never_b and not any(math.isinf(x) for x in a):
            return row(claim, where, None, not expect_async, numbers + ": only all-reduce reaches it")
        return Evidence(where, UNCLEAR, f"{numbers}: some seeds never reach the target")
    iv = paired(a, b) if expect_async else paired(b, a)
    if abs(iv.mean) <= max(ar.eval_gap, asy.eval_gap):
        return Evidence(where, UNCLEAR, f"{numbers}: within one evaluation interval (a tie)", iv)
    return row(claim, where, iv, iv.side(0.0), f"{numbers}; lead {iv.text(1.0, ' s', 3)}")


def faster_async(c: Cells, n: int) -> Cell:
    return min((c[(a, n, "")] for a in ASYNC), key=lambda x: x.ttt)


def jin(cells: Sequence[Cell]) -> list[ClaimVerdict]:
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", *ASYNC))
    small = [first(JIN_SMALL, n, c[("allreduce", n, "")], faster_async(c, n), True) for n in sizes if n <= SMALL]
    large = [first(JIN_LARGE, n, c[("allreduce", n, "")], faster_async(c, n), False) for n in sizes if n >= LARGE]
    return [verdict(JIN_SMALL, small, f"no size up to {SMALL}"), verdict(JIN_LARGE, large, f"no size from {LARGE}")]


def crossing(cells: Sequence[Cell]) -> str:
    """Where all-reduce's mean time to target first drops below the faster asynchronous method's, in words."""
    c = index(cells)
    previous = None
    for n in sizes_with(c, ("allreduce", *ASYNC)):
        ar, asy = c[("allreduce", n, "")], faster_async(c, n)
        if not math.isinf(ar.ttt) and abs(ar.ttt - asy.ttt) <= max(ar.eval_gap, asy.eval_gap):
            return f"the curves meet at n={n} (within one evaluation interval)"
        if ar.ttt < asy.ttt:
            return (f"all-reduce is first from the smallest size measured (n={n})" if previous is None
                    else f"the curves cross between n={previous} and n={n}")
        previous = n
    return "all-reduce is never first at the sizes measured"


# --- SGP (Assran, Loizou, Ballas, Rabbat, ICML 2019) -------------------------------------------------

RATIO_CLAIMED = (2.0, 4.5)  # "about 3x"
ACCURACY_POINTS = 0.015  # "within about one point" (the paper's 1.2, rounded up)
SGP_SOURCE = "Assran, Loizou, Ballas, Rabbat, ICML 2019 (arXiv 1811.10792)"
SGP_SETTING = ("ResNet-50 on ImageNet, 32 nodes (256 GPUs) over 10 GbE: SGP in about 1.6 h against over 5 h for "
               "AllReduce-SGD, top-1 within 1.2 points; over InfiniBand the times are close")
SGP_FASTER = Claim("sgp-3x", "SGP about 3x faster than all-reduce over 10 GbE",
                   "SGP trains about 3x faster than AllReduce-SGD at 32 nodes over 10 GbE", f"{SGP_SOURCE}, §6",
                   SGP_SETTING, f"all-reduce's time for the budget over SGP's, seed by seed, with its interval inside "
                   f"[{RATIO_CLAIMED[0]:g}, {RATIO_CLAIMED[1]:g}]", modelled=True)
SGP_ACCURATE = Claim("sgp-accuracy", "SGP within about a point of all-reduce",
                     "final top-1 accuracy within about one point of AllReduce-SGD's", f"{SGP_SOURCE}, §6",
                     SGP_SETTING, "SGP minus all-reduce final accuracy, seed by seed, above "
                     f"−{100 * ACCURACY_POINTS:g} pts, where all-reduce itself reaches the target")
SGP_SHRINKS = Claim("sgp-gap-shrinks", "the gap shrinks over a fast interconnect",
                    "over a fast (InfiniBand) interconnect SGP's advantage is small", f"{SGP_SOURCE}, §6",
                    SGP_SETTING, "the time ratio over the slow network minus over the fast one, seed by seed, above 0",
                    modelled=True)


def ratios(a: Cell, b: Cell) -> list[float]:
    return [x / y for x, y in zip(a.wall, b.wall)]


def sgp(cells: Sequence[Cell], slow: str, fast: str, target: float) -> list[ClaimVerdict]:
    """At the largest size over ``slow``: the time ratio, the accuracy, and the ratio against ``fast``'s."""
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", "sgp"), slow)
    if not sizes:
        return [verdict(k, [], f"no size where all-reduce and SGP finished over {slow}")
                for k in (SGP_FASTER, SGP_ACCURATE, SGP_SHRINKS)]
    n = sizes[-1]
    ar, sg = c[("allreduce", n, slow)], c[("sgp", n, slow)]
    where = f"n={n}, {slow}"
    iv = interval(ratios(ar, sg))
    low, high = RATIO_CLAIMED
    inside = True if low <= iv.low and iv.high <= high else False if iv.high < low or iv.low > high else None
    out = [verdict(SGP_FASTER, [row(SGP_FASTER, where, iv, inside, f"all-reduce {ar.seconds:.3g} s, SGP "
                                    f"{sg.seconds:.3g} s: {ratio_text(iv)}")]),
           verdict(SGP_ACCURATE, [within(SGP_ACCURATE, where, sg, ar, ACCURACY_POINTS, target)])]
    if ("allreduce", n, fast) in c and ("sgp", n, fast) in c:
        quick = ratios(c[("allreduce", n, fast)], c[("sgp", n, fast)])
        d = paired(ratios(ar, sg), quick)
        out.append(verdict(SGP_SHRINKS, [row(SGP_SHRINKS, f"n={n}", d, d.side(0.0),
                                             f"{ratio_text(interval(quick))} over {fast} against {ratio_text(iv)} "
                                             f"over {slow}")]))
    else:
        out.append(verdict(SGP_SHRINKS, [], f"no runs over {fast}"))
    return out


def ratio_text(iv: Interval) -> str:
    if math.isinf(iv.low):
        return f"{iv.mean:.2f}x"
    return f"{iv.mean:.2f}x [{iv.low:.2f}, {iv.high:.2f}]"


# --- DiLoCo (Douillard et al. 2023) ---------------------------------------------------------------------

COMMUNICATION_SHARE = 0.5  # "H times less": at least half of H (rank 0's evaluation reads are not divided)
DILOCO_SOURCE = "Douillard et al. 2023 (arXiv 2311.08105)"
DILOCO_SETTING = ("C4 language modelling, 8 workers, H = 500 inner AdamW steps, outer Nesterov (lr 0.7, momentum "
                  "0.9): perplexity on par with fully synchronous training, 500x less communication")
DILOCO_MATCHES = Claim("diloco-matches", "DiLoCo matches all-reduce's accuracy",
                       "DiLoCo on 8 workers performs as well as fully synchronous optimization",
                       f"{DILOCO_SOURCE}, abstract", DILOCO_SETTING,
                       f"DiLoCo minus all-reduce final accuracy, seed by seed, above −{100 * ACCURACY_POINTS:g} pts "
                       "at every size and period, where all-reduce itself reaches the target")
DILOCO_BYTES = Claim("diloco-less-communication", "H times less communication",
                     "while communicating 500 times less", f"{DILOCO_SOURCE}, abstract", DILOCO_SETTING,
                     f"all-reduce's bytes per sample over DiLoCo's at least {COMMUNICATION_SHARE:g}·H at every size "
                     "and period (the interval's lower end)")
DILOCO_SOONER = Claim("diloco-sooner", "DiLoCo finishes sooner over a slow network",
                      "enables training ... on islands of devices that are poorly connected (so it finishes sooner "
                      "where the network is slow)", f"{DILOCO_SOURCE}, abstract", DILOCO_SETTING,
                      "all-reduce's time for the budget over DiLoCo's, seed by seed, above 1 at every size and period",
                      modelled=True)


def diloco(cells: Sequence[Cell], network: str, periods: Sequence[int], target: float) -> list[ClaimVerdict]:
    c = index(cells)
    matches, less, sooner = [], [], []
    for h in periods:
        name = f"diloco-h{h}"
        for n in sizes_with(c, ("allreduce", name), network):
            a, d = c[("allreduce", n, network)], c[(name, n, network)]
            where = f"H={h}, n={n}"
            matches.append(within(DILOCO_MATCHES, where, d, a, ACCURACY_POINTS, target))
            if a.bytes_per_sample and d.bytes_per_sample and not math.isnan(a.moved + d.moved):
                iv = interval([x / y for x, y in zip(a.bytes_per_sample, d.bytes_per_sample)])
                less.append(row(DILOCO_BYTES, where, iv, iv.side(COMMUNICATION_SHARE * h), ratio_text(iv)))
            iv = interval(ratios(a, d))
            sooner.append(row(DILOCO_SOONER, where, iv, iv.side(1.0),
                              f"all-reduce {a.seconds:.3g} s, DiLoCo {d.seconds:.3g} s: {ratio_text(iv)}"))
    missing = "no size where all-reduce and DiLoCo both finished"
    return [verdict(DILOCO_MATCHES, matches, missing), verdict(DILOCO_BYTES, less, missing),
            verdict(DILOCO_SOONER, sooner, missing)]


CLAIMS = {"gap-aware": (GA_OVER_SA, GA_OVER_ASGD, GA_GROWS, DANA_BEST), "jin": (JIN_SMALL, JIN_LARGE),
          "sgp": (SGP_FASTER, SGP_ACCURATE, SGP_SHRINKS), "diloco": (DILOCO_MATCHES, DILOCO_BYTES, DILOCO_SOONER)}


# Claims that compare two arms: (claim, the arm it favours, the arm it is against, its judge).
ACROSS = {"gap-aware": ((GA_MOMENTUM, "momentum 0.9", "momentum 0", momentum_helps),)}


