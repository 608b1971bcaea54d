"""The papers' claims each study tests, and how each is judged from an arm's cells (pure).

Each claim is quoted with its source (verbatim, or marked as a paraphrase), the paper's own setting,
the sizes of that setting (its primary rows: the verdict) and a practical margin with its source
(``verdicts.Claim``). Each judge turns one arm's cells into a ``ClaimVerdict`` per claim, row by row (a
size, a network, a period), with the rules of ``reproduce.verdicts``; ``ceiling`` is the sequential
recipe's accuracy at the study's budget (a row whose reference ends far below it is not meaningful).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from statistics import mean

from hpcbench.reproduce.verdicts import (
    UNTESTABLE,
    Bounds,
    Cell,
    Claim,
    ClaimVerdict,
    Evidence,
    ahead,
    decide,
    differences,
    index,
    paired,
    sizes_with,
    sooner,
    trained,
    verdict,
    void,
    within,
)
from hpcbench.tuning.intervals import Interval, interval

HALF_POINT = 0.005
HALF_POINT_SOURCE = ("declared minimum effect: half a point of test accuracy, about the spread of one cell's final "
                     "accuracy over seeds here; a smaller lead is not one a user would act on")

# --- Gap-Aware (Barkai, Hakimi, Schuster, ICLR 2020) --------------------------------------------------

GA_SOURCE = "Barkai, Hakimi, Schuster, ICLR 2020 (arXiv 1909.10802)"
GA_SETTING = ("CIFAR-10/100, ImageNet and WikiText-103, up to 128 workers, momentum 0.9, the usual step "
              "schedules; the abstract states the claims without one headline number")
GA_ROWS = "every size the study runs (the paper's runs go up to 128 workers)"
GA_OVER_SA = Claim("ga-over-sa", "GA beats SA",
                   "GA outperforms the currently acceptable gradient penalization method, in final test accuracy",
                   f"{GA_SOURCE}, abstract", GA_SETTING,
                   "GA minus SA final test accuracy, seed by seed, above the margin at every size",
                   margin=HALF_POINT, margin_source=HALF_POINT_SOURCE, setting=GA_ROWS)
GA_GROWS = Claim("ga-margin-grows", "GA's lead over SA grows with n",
                 "[GA] performs well even when scaling to large numbers of workers",
                 f"{GA_SOURCE}, abstract (that the lead over SA grows with the workers is the paper's figures, read "
                 "by this study)",
                 GA_SETTING, "the slope of GA minus SA against log2 n, seed by seed, above the margin",
                 margin=0.0025, margin_source="declared minimum effect: a quarter point per doubling, a point over "
                 "16x the workers", setting=GA_ROWS)
GA_OVER_ASGD = Claim("ga-over-asgd", "GA beats plain ASGD",
                     "Asynchronous SGD (ASGD) methods are immune to these slowdowns but are scarcely used due to "
                     "gradient staleness, which encumbers the convergence process",
                     f"{GA_SOURCE}, abstract (GA is the paper's remedy for it)", GA_SETTING,
                     "GA minus ASGD final test accuracy, seed by seed, above the margin at every size",
                     margin=HALF_POINT, margin_source=HALF_POINT_SOURCE, setting=GA_ROWS)
DANA_BEST = Claim("dana-ga-best", "DANA-GA is the most accurate",
                  "DANA-GA, GA applied to DANA's look-ahead with per-worker momentum, is the most accurate of the "
                  "asynchronous methods",
                  f"{GA_SOURCE}, its experiments section, with DANA (Hakimi et al., arXiv 1907.11612)", GA_SETTING,
                  "DANA-GA minus each of ASGD, SA and GA, seed by seed, above the margin at every size",
                  verbatim=False, margin=HALF_POINT, margin_source=HALF_POINT_SOURCE, setting=GA_ROWS)


def gap_aware(cells: Sequence[Cell], ceiling: float | None = None) -> list[ClaimVerdict]:
    c = index(cells)
    sizes = sizes_with(c, ("asgd", "sa-asgd", "ga-asgd", "dana-ga"))
    cell = {a: {n: c[(a, n, "")] for n in sizes} for a in ("asgd", "sa-asgd", "ga-asgd", "dana-ga")}
    out = [verdict(GA_OVER_SA, [ahead(GA_OVER_SA, f"n={n}", n, cell["ga-asgd"][n], cell["sa-asgd"][n], "GA − SA",
                                      ceiling) for n in sizes]),
           verdict(GA_OVER_ASGD, [ahead(GA_OVER_ASGD, f"n={n}", n, cell["ga-asgd"][n], cell["asgd"][n], "GA − ASGD",
                                        ceiling) for n in sizes]),
           verdict(GA_GROWS, grows(cell["ga-asgd"], cell["sa-asgd"], ceiling),
                   "a trend needs two sizes where GA or SA trained")]
    rows = []
    for n in sizes:
        dg = cell["dana-ga"][n]
        if dg.accuracy == cell["ga-asgd"][n].accuracy:  # without momentum DANA's look-ahead is none: DANA-GA is GA
            rows.append(void(f"n={n}", UNTESTABLE, "DANA-GA's runs are GA's to the bit (without momentum there is "
                             "no look-ahead): this arm cannot test the claim", DANA_BEST, n))
            continue
        rows += [ahead(DANA_BEST, f"n={n} vs {other}", n, dg, cell[other][n], f"DANA-GA − {other}", ceiling)
                 for other in ("asgd", "sa-asgd", "ga-asgd")]
    out.append(verdict(DANA_BEST, rows))
    return out


def grows(ga: dict[int, Cell], sa: dict[int, Cell], ceiling: float | None) -> list[Evidence]:
    """GA's lead over SA against log2 n, over the sizes where one of them trained: one row, the slope's
    interval over seeds."""
    sizes = [n for n in sorted(ga) if trained(GA_GROWS, "", n, max((ga[n], sa[n]), key=lambda x: x.acc), ceiling)
             is None]
    if len(sizes) < 2:
        return []
    x = [math.log2(n) for n in sizes]
    leads = [differences(ga[n], sa[n]) for n in sizes]
    per_seed = [slope(x, [lead[i] for lead in leads]) for i in range(min(map(len, leads)))]
    test = Bounds.exact(per_seed, GA_GROWS.margin)
    shown = test.shown()
    text = shown.text(100.0, " pts per doubling", 2) if shown else "no interval"
    return [decide(GA_GROWS, f"n={sizes[0]}–{sizes[-1]}", test, text, effect=text)]


GA_MOMENTUM = Claim("ga-momentum-helps", "with GA, momentum helps at every n",
                    "if GA is applied, momentum becomes beneficial in asynchronous environments, even when the "
                    "number of workers scales up", f"{GA_SOURCE}, abstract", GA_SETTING,
                    "GA with momentum 0.9 minus GA without momentum, each at the best single-worker rate at its "
                    "momentum (the two momentum arms), seed by seed, above the margin at every size",
                    margin=HALF_POINT, margin_source=HALF_POINT_SOURCE, setting=GA_ROWS)


def momentum_helps(with_momentum: Sequence[Cell], without: Sequence[Cell],
                   ceiling: float | None = None) -> ClaimVerdict:
    """GA's cells of the momentum-0.9 arm against the momentum-0 arm's, size by size."""
    a, b = index(with_momentum), index(without)
    sizes = sorted(n for (algo, n, v) in a if algo == "ga-asgd" and ("ga-asgd", n, v) in b)
    return verdict(GA_MOMENTUM, [ahead(GA_MOMENTUM, f"n={n}", n, a[("ga-asgd", n, "")], b[("ga-asgd", n, "")],
                                       "GA with momentum − without", ceiling) for n in sizes])


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
EVAL_MARGIN = ("one evaluation interval: a time to target is known only to the interval between evaluations, so a "
               "lead shorter than that is a tie")
JIN_SMALL = Claim("async-first-small", f"elastic averaging and gossip first up to {SMALL} workers",
                  "at small scale, elastic averaging and gossiping converge faster than synchronous all-reduce SGD",
                  f"{JIN_SOURCE}, abstract and conclusions", JIN_SETTING,
                  "all-reduce's time to target minus each asynchronous method's, seed by seed (a run that never "
                  "reaches the target censored at its end), above the margin at every size up to "
                  f"{SMALL}", verbatim=False, margin_source=EVAL_MARGIN, primary=(8, 16, 32),
                  setting=f"8, 16 and {SMALL} workers: the paper's small scale")
JIN_LARGE = Claim("allreduce-first-large", f"all-reduce first from {LARGE} workers",
                  "synchronous all-reduce SGD scales better, toward about 100 nodes",
                  f"{JIN_SOURCE}, abstract and conclusions", JIN_SETTING,
                  "each asynchronous method's time to target minus all-reduce's, seed by seed (a run that never "
                  f"reaches the target censored at its end), above the margin at every size from {LARGE}",
                  verbatim=False, margin_source=EVAL_MARGIN, primary=(64, 128),
                  setting=f"{LARGE} and 128 workers: toward the paper's about 100 nodes")


def seconds(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.3g} s"


def times(c: Cell) -> str:
    """A cell's time to target in words: the median, and how many seeds reached it where not all did."""
    text = seconds(c.ttt)
    return text if c.reached == len(c.time_to_target) else f"{text} ({c.reached} of {len(c.time_to_target)} seeds " \
                                                           "reached it)"


def first(claim: Claim, n: int, ar: Cell, asy: Cell, expect_async: bool, ceiling: float | None = None) -> Evidence:
    """Whether the expected side reaches the target first at ``n``, by more than one evaluation interval:
    each seed's difference with a run that never reached the target censored at its end (its budget ending
    first is not "slower")."""
    where = f"n={n} {asy.algo}"
    gate = trained(claim, where, n, ar, ceiling)
    if gate:
        return gate
    numbers = f"all-reduce {times(ar)}, {asy.algo} {times(asy)}"
    tie = max(ar.eval_gap, asy.eval_gap)
    test = sooner(ar, asy, tie) if expect_async else sooner(asy, ar, tie)
    if not any(map(math.isfinite, ar.time_to_target + asy.time_to_target)):
        return decide(claim, where, None, f"{numbers}: neither reaches the target", n)
    shown, known = test.shown(), test.known()
    lead = "no bound on the lead" if shown is None else \
        f"lead {'' if known == 'exact' else known + ' '}{shown.text(1.0, ' s', 3)}"
    return decide(claim, where, test, f"{numbers}; {lead} (a tie within {tie:.3g} s)", n, effect=lead)


def jin(cells: Sequence[Cell], ceiling: float | None = None) -> list[ClaimVerdict]:
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", *ASYNC))
    small = [first(JIN_SMALL, n, c[("allreduce", n, "")], c[(a, n, "")], True, ceiling)
             for n in sizes if n <= SMALL for a in ASYNC]
    large = [first(JIN_LARGE, n, c[("allreduce", n, "")], c[(a, n, "")], False, ceiling)
             for n in sizes if n >= LARGE for a in ASYNC]
    return [verdict(JIN_SMALL, small, f"no size up to {SMALL}"), verdict(JIN_LARGE, large, f"no size from {LARGE}")]


def crossing(cells: Sequence[Cell]) -> str:
    """For each asynchronous method, the smallest size from which all-reduce's median time to target is the
    shorter one, in words (a median: a seed that never reached the target counts as the latest)."""
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", *ASYNC))
    out = []
    for a in ASYNC:
        ahead_from = next((n for i, n in enumerate(sizes)
                           if all(c[("allreduce", m, "")].ttt < c[(a, m, "")].ttt for m in sizes[i:])), None)
        out.append(f"{a}: " + ("all-reduce is never first to stay" if ahead_from is None else
                               f"all-reduce first from n={ahead_from}" if ahead_from != sizes[0] else
                               f"all-reduce first at every size (from n={ahead_from})"))
    return "; ".join(out) if sizes else "no size with all three"


# --- SGP (Assran, Loizou, Ballas, Rabbat, ICML 2019) -------------------------------------------------

RATIO_CLAIMED = (2.0, 4.5)  # "about 3x"
ACCURACY_POINTS = 0.015  # "within about one point" (the paper's 1.2, rounded up)
SGP_SOURCE = "Assran, Loizou, Ballas, Rabbat, ICML 2019 (arXiv 1811.10792)"
SGP_SETTING = ("ResNet-50 on ImageNet, 32 nodes (256 GPUs) over 10 GbE: SGP in about 1.6 h against over 5 h for "
               "AllReduce-SGD, top-1 within 1.2 points; over InfiniBand the times are close")
SGP_ROWS = "32 nodes over 10 GbE (16 nodes is beyond it)"
SGP_FASTER = Claim("sgp-3x", "SGP about 3x faster than all-reduce over 10 GbE",
                   "SGP trains about 3x faster than AllReduce-SGD at 32 nodes over 10 GbE", f"{SGP_SOURCE}, §6",
                   SGP_SETTING, f"all-reduce's time for the budget over SGP's, seed by seed, with its interval inside "
                   f"[{RATIO_CLAIMED[0]:g}, {RATIO_CLAIMED[1]:g}]", modelled=True, verbatim=False,
                   margin=RATIO_CLAIMED[0], margin_source="\"about 3x\" read as 2x to 4.5x, the paper's 1.6 h against "
                   "over 5 h with room on both sides", primary=(32,), setting=SGP_ROWS)
SGP_ACCURATE = Claim("sgp-accuracy", "SGP within about a point of all-reduce",
                     "final top-1 accuracy within about one point of AllReduce-SGD's", f"{SGP_SOURCE}, §6",
                     SGP_SETTING, "SGP minus all-reduce final accuracy, seed by seed, above minus the margin, where "
                     "all-reduce itself trained", verbatim=False, margin=ACCURACY_POINTS,
                     margin_source="the paper's own gap, 1.2 points, rounded up", primary=(32,), setting=SGP_ROWS)
SGP_SHRINKS = Claim("sgp-gap-shrinks", "the gap shrinks over a fast interconnect",
                    "over a fast (InfiniBand) interconnect SGP's advantage is small", f"{SGP_SOURCE}, §6",
                    SGP_SETTING, "the time ratio over the slow network minus over the fast one, seed by seed, above "
                    "the margin", modelled=True, verbatim=False, margin=0.05,
                    margin_source="declared minimum effect: 0.05 of the ratio (5% of an even race)", primary=(32,),
                    setting="32 nodes")


def ratios(a: Cell, b: Cell, field: str = "wall") -> list[float]:
    """a over b of ``field``, seed by seed (matched by seed number)."""
    x, y = paired(a, b, field)
    return [u / v for u, v in zip(x, y)]


def sgp(cells: Sequence[Cell], slow: str, fast: str, ceiling: float | None = None) -> list[ClaimVerdict]:
    """Every size over ``slow`` (the paper's, 32, primary): the time ratio, the accuracy, and the ratio
    against ``fast``'s."""
    c = index(cells)
    sizes = sizes_with(c, ("allreduce", "sgp"), slow)
    faster, accurate, shrinks = [], [], []
    for n in sizes:
        ar, sg = c[("allreduce", n, slow)], c[("sgp", n, slow)]
        where = f"n={n}, {slow}"
        test = Bounds.exact(ratios(ar, sg), RATIO_CLAIMED[0], RATIO_CLAIMED[1])
        text = ratio_text(test.shown())
        faster.append(decide(SGP_FASTER, where, test, f"all-reduce {ar.seconds:.3g} s, SGP {sg.seconds:.3g} s: "
                             f"{text}", n, timing=True, effect=text))
        accurate.append(within(SGP_ACCURATE, where, n, sg, ar, ceiling))
        if ("allreduce", n, fast) in c and ("sgp", n, fast) in c:
            slow_by, fast_by = by_seed(ar, sg), by_seed(c[("allreduce", n, fast)], c[("sgp", n, fast)])
            test = Bounds.exact([slow_by[k] - fast_by[k] for k in slow_by if k in fast_by], SGP_SHRINKS.margin)
            shown = test.shown()
            by = f"shrinks by {shown.text(1.0, 'x', 3) if shown else 'no interval'}"
            quick = ratio_text(interval(list(fast_by.values())))
            shrinks.append(decide(SGP_SHRINKS, f"n={n}", test, f"{quick} over {fast} against {text} over {slow}: {by}",
                                  n, timing=True, effect=by))
    missing = f"no size where all-reduce and SGP finished over {slow}"
    return [verdict(SGP_FASTER, faster, missing), verdict(SGP_ACCURATE, accurate, missing),
            verdict(SGP_SHRINKS, shrinks, f"no runs over {fast}" if sizes else missing)]


def by_seed(a: Cell, b: Cell) -> dict[int, float]:
    """a's time over b's by seed number (by position where the cells carry none)."""
    seeds = [int(k) for k in paired(a, b, "seeds")[0]] if a.seeds and b.seeds else range(min(len(a.wall),
                                                                                                  len(b.wall)))
    return dict(zip(seeds, ratios(a, b)))


def ratio_text(iv: Interval | None) -> str:
    if iv is None:
        return "no interval"
    if math.isinf(iv.low):
        return f"{iv.mean:.2f}x"
    return f"{iv.mean:.2f}x [{iv.low:.2f}, {iv.high:.2f}]"


# --- DiLoCo (Douillard et al. 2023) ---------------------------------------------------------------------

COMMUNICATION_SHARE = 0.5  # "H times less": at least half of H (rank 0's evaluation reads are not divided)
SOONER_RATIO = 1.1
DILOCO_SOURCE = "Douillard et al. 2023 (arXiv 2311.08105)"
DILOCO_SETTING = ("C4 language modelling, 8 workers, H = 500 inner AdamW steps, outer Nesterov (lr 0.7, momentum "
                  "0.9): perplexity on par with fully synchronous training, 500x less communication")
DILOCO_ROWS = "8 workers, every period H the study runs (16–64 workers are beyond it)"
DILOCO_MATCH_ROWS = ("8 workers, every period H the study runs, against all-reduce with AdamW (the paper's baseline) "
                     "where the study ran it; 16–64 workers, and all-reduce with SGD beside AdamW's, are beyond it")
ADAMW_BASELINE = "allreduce-adamw"  # the diloco study's contender: all-reduce with AdamW, the paper's baseline
DILOCO_MATCHES = Claim("diloco-matches", "DiLoCo matches all-reduce's accuracy",
                       "DiLoCo on 8 workers performs as well as fully synchronous optimization",
                       f"{DILOCO_SOURCE}, abstract", DILOCO_SETTING,
                       "DiLoCo minus all-reduce final accuracy, seed by seed, above minus the margin, where all-reduce "
                       "itself trained", margin=ACCURACY_POINTS, margin_source="declared tolerance: the SGP study's "
                       "\"about one point\" (1.5 points), as the paper gives none for \"as well as\"",
                       primary=(8,), setting=DILOCO_MATCH_ROWS)
DILOCO_BYTES = Claim("diloco-less-communication", "H times less communication",
                     "while communicating 500 times less", f"{DILOCO_SOURCE}, abstract", DILOCO_SETTING,
                     "all-reduce's bytes per sample over DiLoCo's, the interval's lower end above the margin",
                     margin=COMMUNICATION_SHARE, margin_source="half of H (rank 0's evaluation reads are not divided "
                     "by H), so the margin is 0.5·H in each row", primary=(8,), setting=DILOCO_ROWS)
DILOCO_SOONER = Claim("diloco-sooner", "DiLoCo finishes sooner over a slow network",
                      "enables training of language models on islands of devices that are poorly connected",
                      f"{DILOCO_SOURCE}, abstract (that it therefore finishes a budget sooner over a slow network is "
                      "this study's reading)", DILOCO_SETTING,
                      "all-reduce's time for the budget over DiLoCo's, seed by seed, above the margin",
                      modelled=True, margin=SOONER_RATIO, margin_source="declared minimum effect: 10% sooner",
                      primary=(8,), setting=DILOCO_ROWS)


def diloco(cells: Sequence[Cell], network: str, periods: Sequence[int], ceiling: float | None = None
           ) -> list[ClaimVerdict]:
    c = index(cells)
    matches, less, faster = [], [], []
    adamw_ran = any(a == ADAMW_BASELINE for a, _, _ in c)  # then its rows make the accuracy verdict
    for h in periods:
        name = f"diloco-h{h}"
        for n in sizes_with(c, (name,), network):
            d, a = c[(name, n, network)], c.get(("allreduce", n, network))
            where = f"H={h}, n={n}"
            if adamw_ran:
                adamw = c.get((ADAMW_BASELINE, n, network))
                matches.append(within(DILOCO_MATCHES, f"{where} vs AdamW all-reduce", n, d, adamw, ceiling) if adamw
                               else decide(DILOCO_MATCHES, f"{where} vs AdamW all-reduce", None,
                                           "no AdamW all-reduce cell at this size (its runs failed)", n))
            if a is None:
                continue
            sgd = within(DILOCO_MATCHES, where + (" vs SGD all-reduce" if adamw_ran else ""), n, d, a, ceiling)
            matches.append(replace(sgd, primary=False) if adamw_ran else sgd)
            if a.bytes_per_sample and d.bytes_per_sample and not math.isnan(a.moved + d.moved):
                test = Bounds.exact(ratios(a, d, "bytes_per_sample"), COMMUNICATION_SHARE * h)
                less.append(decide(DILOCO_BYTES, where, test, ratio_text(test.shown()), n, timing=True))
            test = Bounds.exact(ratios(a, d), SOONER_RATIO)
            text = ratio_text(test.shown())
            faster.append(decide(DILOCO_SOONER, where, test, f"all-reduce {a.seconds:.3g} s, DiLoCo {d.seconds:.3g} s: "
                                 f"{text}", n, timing=True, effect=text))
    missing = "no size where all-reduce and DiLoCo both finished"
    return [verdict(DILOCO_MATCHES, matches, missing), verdict(DILOCO_BYTES, less, missing),
            verdict(DILOCO_SOONER, faster, missing)]


CLAIMS = {"gap-aware": (GA_OVER_SA, GA_OVER_ASGD, GA_GROWS, DANA_BEST), "jin": (JIN_SMALL, JIN_LARGE),
          "sgp": (SGP_FASTER, SGP_ACCURATE, SGP_SHRINKS), "diloco": (DILOCO_MATCHES, DILOCO_BYTES, DILOCO_SOONER)}


# Claims that compare two arms: (claim, the arm it favours, the arm it is against, its judge).
ACROSS = {"gap-aware": ((GA_MOMENTUM, "momentum 0.9", "momentum 0", momentum_helps),)}
