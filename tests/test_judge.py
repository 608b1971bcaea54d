"""The judge (reproduce.verdicts, reproduce.claims) against constructed cells: each claim's rows, margins,
censoring, the three-seed rule, the paper's setting against extension rows, the correction for several
rows, the validity floor, arms that cannot test a claim or repeat another's evidence. Each bug an audit
found in the published verdicts has a test here that fails on the old judge."""
import dataclasses
import math

import numpy as np
import pytest

from hpcbench.reproduce.claims import (
    DANA_BEST,
    GA_OVER_SA,
    JIN_LARGE,
    crossing,
    diloco,
    gap_aware,
    jin,
    momentum_helps,
    sgp,
)
from hpcbench.reproduce.protocol import ArmResult, across_arms, headline
from hpcbench.reproduce.verdicts import (
    FAILS,
    HOLDS,
    NOT_MEANINGFUL,
    NOT_MODELLED,
    UNCLEAR,
    UNTESTABLE,
    Bounds,
    Cell,
    Claim,
    ahead,
    decide,
    sooner,
    verdict,
)

INF = math.inf
SEEDS = (0, 1, 2)
NOISE = (-0.002, 0.0, 0.002)  # each seed's offset: a spread of 0.2 pts, so intervals are finite


def cell(algo, n, acc=0.7, ttt=1.0, wall=1.0, variant="", noise=NOISE, gap=0.0):
    """A cell over len(noise) seeds around ``acc``, each seed's time to target ``ttt`` and run time ``wall``
    (scalars, or a value per seed)."""
    accs = acc if isinstance(acc, tuple) else tuple(acc + e for e in noise)

    def per(v):
        return v if isinstance(v, tuple) else (v,) * len(accs)

    return Cell(algo, n, variant, accs, per(ttt), per(wall), gap, seeds=SEEDS[:len(accs)])


def outcomes(verdicts):
    return {v.claim.key: v.outcome for v in verdicts}


def ga_cells(leads, dana=0.03, noise=NOISE, sizes=(8, 32, 128)):
    """GA ahead of SA by ``leads[i]`` at size i (ASGD 5 points below SA); DANA-GA ``dana`` ahead of GA."""
    out = []
    for n, m in zip(sizes, leads):
        out += [cell("asgd", n, 0.65, noise=noise), cell("sa-asgd", n, 0.7, noise=noise),
                cell("ga-asgd", n, 0.7 + m, noise=tuple(-e for e in noise)),
                cell("dana-ga", n, 0.7 + m + dana, noise=noise)]
    return out


# --- margins and the rows of several sizes ------------------------------------------------------------


def test_each_gap_aware_claim_gets_its_own_verdict_against_its_margin():
    assert set(outcomes(gap_aware(ga_cells([0.02, 0.04, 0.06]))).values()) == {HOLDS}
    # GA behind SA at the largest size: that claim fails; GA still beats ASGD there, and says so.
    behind = outcomes(gap_aware(ga_cells([0.02, 0.04, -0.02])))
    assert behind["ga-over-sa"] == FAILS and behind["ga-over-asgd"] == HOLDS
    # The lead shrinks with n: only the trend fails.
    shrinking = outcomes(gap_aware(ga_cells([0.06, 0.04, 0.02])))
    assert shrinking == {"ga-over-sa": HOLDS, "ga-over-asgd": HOLDS, "ga-margin-grows": FAILS, "dana-ga-best": HOLDS}
    weak = outcomes(gap_aware(ga_cells([0.02, 0.04, 0.06], dana=-0.02)))
    assert weak["dana-ga-best"] == FAILS and weak["ga-over-sa"] == HOLDS
    # A lead inside the seeds' interval is inconclusive, not a win.
    noisy = gap_aware(ga_cells([0.006] * 3, noise=(-0.05, 0.0, 0.05)))
    assert outcomes(noisy)["ga-over-sa"] == UNCLEAR
    assert set(outcomes(gap_aware([])).values()) == {UNCLEAR}


def test_a_lead_that_is_real_but_below_the_practical_margin_is_not_a_win():
    """0.2 points ahead at every seed of every size: significant, and smaller than the half point the claim
    declares worth acting on (the old judge's threshold was 0: it said "holds")."""
    tiny = gap_aware(ga_cells([0.002] * 3, noise=(-0.0002, 0.0, 0.0002)))[0]
    assert tiny.claim is GA_OVER_SA and tiny.outcome == FAILS
    assert all(e.interval.low > 0 for e in tiny.evidence)  # every row's lead is real


def test_one_row_short_at_95_percent_does_not_sink_a_claim_of_five_rows():
    """n=8 falls short of the margin at 95% but not at the corrected 1 − 0.05/5: the old judge said "does
    not hold" for the whole claim; now it is inconclusive, with the counts."""
    sizes = (8, 16, 32, 64, 128)
    cells = ga_cells([0.0, 0.03, 0.03, 0.03, 0.03], sizes=sizes, noise=(-0.001, 0.0, 0.001))
    v = gap_aware(cells)[0]
    row = v.evidence[0]
    assert row.where == "n=8" and row.outcome == FAILS  # alone, at 95%, it fails
    assert v.outcome == UNCLEAR
    assert v.summary().startswith("inconclusive (4 of 5 rows of the paper's setting hold; n=8: inconclusive, "
                                  "+0.0 pts [")
    alone = gap_aware([c for c in cells if c.workers == 8])[0]  # one row: no correction, it fails
    assert alone.outcome == FAILS


def test_a_true_effect_at_the_margin_fails_a_claim_of_five_rows_at_most_5_percent_of_the_time():
    claim = Claim("k", "k", "q", "s", "p", "t", margin=0.0)
    rng = np.random.default_rng(7)
    draws = 3000
    old = new = 0
    for _ in range(draws):
        rows = [decide(claim, f"n={n}", Bounds.exact(rng.normal(0.0, 1.0, 3), 0.0), "x", n)
                for n in (8, 16, 32, 64, 128)]
        old += any(e.outcome == FAILS for e in rows)  # the old rule: one failing row sinks the claim
        new += verdict(claim, rows).outcome == FAILS
    assert old / draws > 0.08  # ~12%: the old rule's false "does not hold"
    assert new / draws <= 0.05


# --- time to target: censoring, the three-seed rule, no list-order pick ---------------------------------


def jin_cells(times, gap=0.0, walls=None):
    """times: n → (all-reduce, easgd, gossip) time to target (a number: the same at every seed but for a small
    jitter; a tuple: per seed); walls: n → the same three runs' ends (default 100 s)."""
    out = []
    for n, ts in times.items():
        for i, (a, t) in enumerate(zip(("allreduce", "easgd", "gossip"), ts)):
            per = t if isinstance(t, tuple) else (t,) * 3 if math.isinf(t) else (t - 0.01, t, t + 0.01)
            out.append(cell(a, n, ttt=per, wall=(walls or {}).get(n, (100.0,) * 3)[i], gap=gap))
    return out


def test_jin_claims_follow_each_method_against_all_reduce():
    claim = {8: (10, 5, 6), 32: (8, 7, 7.5), 64: (5, 6, 8), 128: (4, 9, 12)}
    assert outcomes(jin(jin_cells(claim))) == {"async-first-small": HOLDS, "allreduce-first-large": HOLDS}
    assert crossing(jin_cells(claim)) == "easgd: all-reduce first from n=64; gossip: all-reduce first from n=64"
    # A time to target is both how many steps a method needs and what each costs: a claim about it that fails
    # does not hold, and is never put down to the cost model alone.
    always = {n: (1, 5, 6) for n in (8, 32, 64, 128)}
    assert outcomes(jin(jin_cells(always))) == {"async-first-small": FAILS, "allreduce-first-large": HOLDS}
    never = {n: (10, 5, 6) for n in (8, 32, 64, 128)}
    assert outcomes(jin(jin_cells(never))) == {"async-first-small": HOLDS, "allreduce-first-large": FAILS}
    assert crossing(jin_cells(never)) == "easgd: all-reduce is never first to stay; gossip: all-reduce is never " \
                                         "first to stay"
    assert set(outcomes(jin(jin_cells({8: (INF, INF, INF), 64: (INF, INF, INF)}))).values()) == {UNCLEAR}
    # A lead shorter than one evaluation interval is no lead: easgd is not first at 32 workers.
    tie = jin(jin_cells({8: (10, 5, 6), 32: (8.05, 8.0, 9), 64: (5, 6, 8)}, gap=0.1))
    assert outcomes(tie)["async-first-small"] == FAILS
    row = next(e for e in tie[0].evidence if e.where == "n=32 easgd")
    assert row.outcome == FAILS and "lead +0.050 s [" in row.numbers and "(a tie within 0.1 s)" in row.numbers


def test_the_faster_method_is_not_picked_by_list_order_when_both_have_an_infinite_mean():
    """Jin at 64 workers as published: easgd never reaches the target, gossip reaches it in 2 of 3 seeds well
    before all-reduce. The old judge took min() over two infinite means, so easgd (first in the list) and
    "holds"; each method is judged on its own now, and gossip keeps the row from holding."""
    cells = jin_cells({64: ((0.139, 0.150, 0.167), INF, (0.038, 0.086, INF))}, walls={64: ((2.0,) * 3,) * 3})
    large = jin(cells)[1]
    assert large.claim is JIN_LARGE and large.outcome == UNCLEAR
    rows = {e.where: e.outcome for e in large.evidence}
    assert rows == {"n=64 easgd": HOLDS, "n=64 gossip": UNCLEAR}
    assert "gossip 0.086 s (2 of 3 seeds reached it)" in large.effect()


def test_three_seeds_are_needed_whichever_way_a_row_is_decided():
    """One seed, all-reduce reaches the target and the asynchronous methods never do: the old judge said
    "holds" from one seed."""
    one = [cell(a, 64, ttt=(t,), wall=(10.0,), noise=(0.0,)) for a, t in (("allreduce", 1.0), ("easgd", INF),
                                                                         ("gossip", INF))]
    large = jin(one)[1]
    assert large.outcome == UNCLEAR and all("1 seed: a verdict needs 3" in e.numbers for e in large.evidence)


def test_a_run_whose_budget_ended_first_is_censored_not_slower():
    """All-reduce reaches the target at 5 s; the asynchronous runs end at 3 s without reaching it. They might
    have reached it at 4 s: "all-reduce first" is not shown (the old judge: "only all-reduce reaches it",
    holds). Had they run to 8 s without reaching it, all-reduce is first."""
    short = jin(jin_cells({64: (5, INF, INF)}, walls={64: ((20.0,) * 3, (3.0,) * 3, (3.0,) * 3)}))[1]
    assert short.outcome == UNCLEAR
    assert {e.outcome for e in short.evidence} == {UNCLEAR}
    longer = jin(jin_cells({64: (5, INF, INF)}, walls={64: ((20.0,) * 3, (8.0,) * 3, (8.0,) * 3)}))[1]
    assert longer.outcome == HOLDS and "lead at least" in longer.evidence[0].numbers
    b = sooner(cell("allreduce", 8, ttt=(5.0,) * 3, wall=20.0), cell("easgd", 8, ttt=(INF,) * 3, wall=8.0), 0.0)
    assert b.low == (-INF,) * 3 and b.high == (-3.0,) * 3 and b.side() is False


def test_a_failure_to_train_is_not_blamed_on_the_cost_model():
    """The asynchronous methods never reach the target in a long budget while all-reduce does: the claim that
    they are first does not hold, and the cause is accuracy, not the simulator's timing (the old judge said
    "not reproduced by the model"). Only a failure that is the runs' times alone is the model's."""
    small = jin(jin_cells({8: (5, INF, INF)}, walls={8: ((20.0,) * 3, (30.0,) * 3, (30.0,) * 3)}))[0]
    assert small.outcome == FAILS
    claim = Claim("k", "k", "q", "s", "p", "t", modelled=True)
    slower = Bounds.exact([-1.0, -1.1, -0.9], 0.0)
    assert decide(claim, "n=8", slower, "x", 8, timing=True).outcome == NOT_MODELLED
    assert decide(claim, "n=8", slower, "x", 8, timing=False).outcome == FAILS


# --- the paper's setting, the validity floor, arms ----------------------------------------------------------


def sgp_cells(slow_ratio, fast_ratio, acc_gap=0.0, acc=0.75, sizes=(32,)):
    out = []
    for n in sizes:
        for variant, ratio in (("slow", slow_ratio), ("fast", fast_ratio)):
            out += [cell("allreduce", n, acc, wall=(ratio * 0.99, ratio, ratio * 1.01), variant=variant),
                    cell("sgp", n, acc + acc_gap, wall=1.0, variant=variant)]
    return out


def test_sgp_claims_follow_the_numbers():
    assert set(outcomes(sgp(sgp_cells(3.0, 1.2), "slow", "fast")).values()) == {HOLDS}
    too_slow = sgp(sgp_cells(1.3, 1.1), "slow", "fast")
    assert outcomes(too_slow)["sgp-3x"] == NOT_MODELLED and "1.30x [" in too_slow[0].effect()
    assert outcomes(sgp(sgp_cells(3.0, 1.2, acc_gap=-0.05), "slow", "fast"))["sgp-accuracy"] == FAILS
    assert outcomes(sgp(sgp_cells(3.0, 3.5), "slow", "fast"))["sgp-gap-shrinks"] == NOT_MODELLED
    assert outcomes(sgp(sgp_cells(6.0, 1.2), "slow", "fast"))["sgp-3x"] == NOT_MODELLED  # not "about 3x"


def test_a_row_whose_reference_did_not_train_is_not_meaningful():
    """All-reduce ends at 34.6% where the sequential recipe reaches 72%: SGP "matching" it says nothing."""
    untrained = sgp(sgp_cells(3.0, 1.2, acc=0.346), "slow", "fast", ceiling=0.72)
    assert outcomes(untrained)["sgp-accuracy"] == NOT_MEANINGFUL
    assert "allreduce ends at 34.6%, more than 5 points below the sequential recipe's 72.0%" in untrained[1].effect()
    assert outcomes(sgp(sgp_cells(3.0, 1.2, acc=0.70), "slow", "fast", ceiling=0.72))["sgp-accuracy"] == HOLDS
    # Time for a budget does not need the model to train.
    assert outcomes(untrained)["sgp-3x"] == HOLDS


def test_rows_beyond_the_papers_setting_neither_sink_nor_carry_a_claim():
    """SGP's claim is at 32 nodes: 16 is an extension row, reported beside the verdict."""
    cells = sgp_cells(3.0, 1.2) + [c for c in sgp_cells(1.2, 1.1, sizes=(16,))]
    faster = sgp(cells, "slow", "fast")[0]
    assert faster.outcome == HOLDS
    assert [(e.where, e.primary, e.outcome) for e in faster.evidence] == \
        [("n=16, slow", False, NOT_MODELLED), ("n=32, slow", True, HOLDS)]
    assert faster.summary() == "holds; beyond it: not reproduced by the model at 1 (n=16, slow)"
    only_extension = sgp(sgp_cells(3.0, 1.2, sizes=(16,)), "slow", "fast")[0]
    assert only_extension.outcome == UNCLEAR and "no row in the paper's setting" in only_extension.why


def diloco_cells(acc_gap=0.0, bytes_ratio=None, time_ratio=0.2, net="1 GbE", far_gap=None):
    """All-reduce and DiLoCo at H = 10 and 50 at 8 and 32 workers: DiLoCo ``acc_gap`` more accurate (at 32
    ``far_gap`` where given), ``bytes_ratio`` (default H) times fewer bytes per sample, ``time_ratio`` of
    all-reduce's time."""
    out = []
    for n in (8, 32):
        out.append(dataclasses.replace(cell("allreduce", n, 0.8, wall=10.0, variant=net), bytes_per_sample=(1e6,) * 3))
        gap = far_gap if far_gap is not None and n == 32 else acc_gap
        for h in (10, 50):
            out.append(dataclasses.replace(cell(f"diloco-h{h}", n, 0.8 + gap, variant=net,
                                                wall=tuple(10.0 * time_ratio * (1 + e) for e in NOISE)),
                                           bytes_per_sample=(1e6 / (bytes_ratio or h),) * 3))
    return out


def test_diloco_is_judged_at_8_workers_and_larger_sizes_are_reported_beside_it():
    assert set(outcomes(diloco(diloco_cells(), "1 GbE", (10, 50))).values()) == {HOLDS}
    # Behind by 5 points at 32 workers only: the paper's claim (8 workers) holds; the extension says where not.
    far = diloco(diloco_cells(far_gap=-0.05), "1 GbE", (10, 50))[0]
    assert far.outcome == HOLDS and far.summary() == "holds; beyond it: does not hold at 2 (H=10, n=32; H=50, n=32)"
    worse = diloco(diloco_cells(acc_gap=-0.05), "1 GbE", (10, 50))
    assert outcomes(worse)["diloco-matches"] == FAILS
    assert outcomes(diloco(diloco_cells(bytes_ratio=2.0), "1 GbE", (10, 50)))["diloco-less-communication"] == FAILS
    slower = diloco(diloco_cells(time_ratio=1.5), "1 GbE", (10, 50))
    assert outcomes(slower)["diloco-sooner"] == NOT_MODELLED and "all-reduce 10 s, DiLoCo 15 s" in slower[2].effect()
    assert set(outcomes(diloco([], "1 GbE", (10,))).values()) == {UNCLEAR}


def test_diloco_is_judged_against_the_papers_adamw_baseline_where_the_study_ran_it():
    """With an AdamW all-reduce beside SGD's, the rows against AdamW's make the verdict and the rows against
    SGD's are reported beside it: DiLoCo 5 points behind SGD's all-reduce but level with AdamW's holds."""
    cells = diloco_cells(acc_gap=-0.05) + [cell("allreduce-adamw", n, 0.75, wall=10.0, variant="1 GbE")
                                           for n in (8, 32)]
    matches = diloco(cells, "1 GbE", (10, 50))[0]
    assert matches.outcome == HOLDS
    primary = [e.where for e in matches.evidence if e.primary]
    assert primary == ["H=10, n=8 vs AdamW all-reduce", "H=50, n=8 vs AdamW all-reduce"]
    beside = {e.where: e.outcome for e in matches.evidence if not e.primary}
    assert beside["H=10, n=8 vs SGD all-reduce"] == FAILS and beside["H=10, n=32 vs AdamW all-reduce"] == HOLDS
    # AdamW's all-reduce 5 points ahead: the claim does not hold, whatever SGD's all-reduce did
    ahead_of = diloco_cells() + [cell("allreduce-adamw", n, 0.85, wall=10.0, variant="1 GbE") for n in (8, 32)]
    assert diloco(ahead_of, "1 GbE", (10, 50))[0].outcome == FAILS
    # AdamW's cell at 8 workers lost (its runs failed): its rows say so and the claim is not decided by SGD's
    lost = [x for x in cells if not (x.algo == "allreduce-adamw" and x.workers == 8)]
    without = diloco(lost, "1 GbE", (10, 50))[0]
    assert without.outcome == UNCLEAR
    assert [e.where for e in without.evidence if e.primary] == ["H=10, n=8 vs AdamW all-reduce",
                                                                 "H=50, n=8 vs AdamW all-reduce"]
    # SGD's all-reduce lost at 8 workers: the rows against AdamW's are still there
    no_sgd = [x for x in cells if not (x.algo == "allreduce" and x.workers == 8)]
    assert diloco(no_sgd, "1 GbE", (10, 50))[0].outcome == HOLDS


def test_seeds_are_paired_by_their_number_not_their_place():
    """Two cells that ran seeds 0, 1, 2 and 2, 1, 0 (or only some in common) compare seed 2 with seed 2."""
    ga = Cell("ga-asgd", 8, "", (0.70, 0.71, 0.72, 0.90), (1.0,) * 4, (1.0,) * 4, seeds=(0, 1, 2, 7))
    sa = Cell("sa-asgd", 8, "", (0.71, 0.70, 0.69), (1.0,) * 3, (1.0,) * 3, seeds=(2, 1, 0))
    row = ahead(GA_OVER_SA, "n=8", 8, ga, sa, "GA − SA")
    assert row.test.low == pytest.approx((0.01, 0.01, 0.01)) and row.interval.n == 3
    assert row.outcome == HOLDS  # by position it would be -0.01, +0.01, +0.03: inconclusive


def test_a_claim_whose_every_row_did_not_train_is_not_meaningful_and_says_why():
    cells = [cell(a, n, 0.3) for n in (8, 32) for a in ("asgd", "sa-asgd", "ga-asgd", "dana-ga")]
    v = gap_aware(cells, ceiling=0.72)[0]
    assert v.outcome == NOT_MEANINGFUL and v.summary().startswith("not meaningful (n=8: ")
    assert "30.0%, more than 5 points below the sequential recipe's 72.0%" in v.summary()
    nothing = verdict(GA_OVER_SA, [], "no cells to compare")
    assert nothing.summary() == "inconclusive (no cells to compare)"


def test_an_arm_that_cannot_test_a_claim_says_so_instead_of_a_verdict():
    """Without momentum DANA-GA is GA to the bit: the momentum-0 arm cannot test "DANA-GA is the most accurate"."""
    cells = ga_cells([0.02, 0.04, 0.06], dana=0.0)
    cells = [dataclasses.replace(c, accuracy=next(g.accuracy for g in cells if g.algo == "ga-asgd"
                                                  and g.workers == c.workers)) if c.algo == "dana-ga" else c
             for c in cells]
    dana = next(v for v in gap_aware(cells) if v.claim is DANA_BEST)
    assert dana.outcome == UNTESTABLE and "GA's to the bit" in dana.effect()


def test_arms_with_the_same_evidence_count_once_in_the_headline():
    """Gap-Aware's shared arm is its momentum-0.9 arm: one entry, both names, never two votes."""
    def arm(name, leads):
        return ArmResult(name, tuple(ga_cells(leads)), {}, tuple(gap_aware(ga_cells(leads))))

    shared, m09, own = arm("shared", (0.02, 0.04, 0.06)), arm("momentum 0.9", (0.02, 0.04, 0.06)), \
        arm("own lr", (-0.01, -0.02, -0.03))
    clauses = headline([shared, m09, own]).split(" · ")
    assert clauses[0] == "GA beats SA: holds in shared = momentum 0.9; does not hold in own lr"
    assert clauses[1] == "GA beats plain ASGD: holds in every arm"
    assert headline([shared, m09]).startswith("GA beats SA: holds in shared = momentum 0.9 · ")
    assert headline([shared]).startswith("GA beats SA: holds · ")
    assert headline([]) == "no claim could be judged"


def test_a_claim_with_mixed_rows_gives_its_counts_in_the_headline():
    mixed = ArmResult("own lr", (), {}, tuple(gap_aware(ga_cells([-0.02, 0.03, 0.06]))))
    good = ArmResult("shared", (), {}, tuple(gap_aware(ga_cells([0.02, 0.03, 0.06]))))
    assert headline([good, mixed]).startswith("GA beats SA: holds in shared; does not hold in own lr (2 of 3 rows "
                                              "hold) · ")


def test_momentum_with_ga_is_judged_across_the_two_momentum_arms():
    def ga(n, acc):
        return cell("ga-asgd", n, acc)

    helps = momentum_helps([ga(8, 0.72), ga(128, 0.71)], [ga(8, 0.70), ga(128, 0.60)])
    assert helps.outcome == HOLDS and "n=128: GA with momentum − without +11.0 pts" in helps.effect()
    hurts_at_scale = momentum_helps([ga(8, 0.72), ga(128, 0.50)], [ga(8, 0.70), ga(128, 0.60)])
    assert hurts_at_scale.outcome == FAILS
    assert hurts_at_scale.summary().startswith("does not hold (1 of 2 rows of the paper's setting hold; n=128: "
                                               "does not hold, -10.0 pts [")
    arms = [ArmResult("momentum 0", (ga(8, 0.70),), {}, ()), ArmResult("momentum 0.9", (ga(8, 0.72),), {}, ())]
    across = across_arms("gap-aware", arms)
    assert [(label, cv.outcome) for label, cv in across] == [("momentum 0.9 against momentum 0", HOLDS)]
    assert headline(arms, across) == "with GA, momentum helps at every n: holds (momentum 0.9 against momentum 0)"
    assert across_arms("gap-aware", arms[:1]) == [] and across_arms("jin", arms) == []


def test_quotes_are_in_quotation_marks_only_where_they_are_the_papers_words():
    from dataclasses import asdict

    from hpcbench.reproduce.findings import cited

    assert cited(asdict(GA_OVER_SA)).startswith("\"GA outperforms")
    assert cited(asdict(DANA_BEST)).startswith("in paraphrase: ") and "\"" not in cited(asdict(DANA_BEST))


@pytest.mark.parametrize("values,side", [((0.01, 0.011, 0.012), True), ((-0.01, -0.011, -0.012), False),
                                         ((-0.01, 0.0, 0.01), None)])
def test_bounds_of_measured_differences_are_the_t_interval(values, side):
    assert Bounds.exact(values, 0.0).side() is side


# --- a published study judged again from its verdict.json ----------------------------------------------


def test_a_published_study_judged_again_from_its_file_gets_todays_rules(tmp_path, capsys):
    """The Jin study as committed: every row recomputed from the cells in the file, with censoring and one
    row per asynchronous method; a second pass changes nothing but keeps the headline it first replaced."""
    import json
    import shutil
    from pathlib import Path

    from hpcbench.cli import main
    from hpcbench.reproduce.rejudge import cell_of

    out = tmp_path / "jin"
    shutil.copytree(Path(__file__).parent.parent / "docs" / "reproduce" / "teacher-jin", out)
    assert main(["reproduce", "jin", "--rejudge", "--out-dir", str(out)]) == 0
    v = json.loads((out / "verdict.json").read_text())
    own = next(a for a in v["arms"] if a["name"] == "own lr")
    cells = [cell_of(c, ("allreduce", "easgd", "gossip")) for c in own["cells"]]
    want = {cv.claim.key: [(e.where, e.outcome, e.numbers) for e in cv.evidence] for cv in jin(cells, v["ceiling"])}
    got = {c["key"]: [(e["where"], e["outcome"], e["numbers"]) for e in c["arms"]["own lr"]["evidence"]]
           for c in v["claims"]}
    assert got == want
    gossip = next(e for e in v["claims"][1]["arms"]["own lr"]["evidence"] if e["where"] == "n=64 gossip")
    assert gossip["outcome"] == UNCLEAR and "(2 of 3 seeds reached it)" in gossip["numbers"]
    first = v["rejudged"]["replaced_headline"]
    assert main(["reproduce", "jin", "--rejudge", "--out-dir", str(out)]) == 0
    again = json.loads((out / "verdict.json").read_text())
    assert again["headline"] == v["headline"] and again["rejudged"]["replaced_headline"] == first
    capsys.readouterr()


def test_judging_again_refuses_what_is_not_a_verdict_in_one_line(tmp_path, capsys):
    from hpcbench.cli import main

    assert main(["reproduce", "jin", "--rejudge", "--out-dir", str(tmp_path)]) == 2
    (tmp_path / "verdict.json").write_text('{"study": "sgp"}')
    assert main(["reproduce", "jin", "--rejudge", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no verdict to judge again" in err[0] and "not a verdict of study 'jin'" in err[1]


def test_a_verdict_edited_by_hand_is_refused_in_one_line_when_judged_again(tmp_path, capsys):
    import json
    import shutil
    from pathlib import Path

    from hpcbench.cli import main

    out = tmp_path / "sgp"
    shutil.copytree(Path(__file__).parent.parent / "docs" / "reproduce" / "teacher-sgp", out)
    v = json.loads((out / "verdict.json").read_text())
    del v["arms"][0]["cells"][0]["accuracy"]
    (out / "verdict.json").write_text(json.dumps(v))
    assert main(["reproduce", "sgp", "--rejudge", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a verdict of study 'sgp'" in err and "no 'accuracy'" in err


def test_a_verdict_is_judged_again_only_as_a_preset_that_runs_its_task(tmp_path, capsys):
    """The teacher-task verdicts are judged as preset teacher; relabelled as full (now Fashion-MNIST for 3
    epochs) their runs are not what that preset runs: one line, exit 2, nothing written."""
    import json
    import shutil
    from pathlib import Path

    from hpcbench.cli import main

    out = tmp_path / "sgp"
    shutil.copytree(Path(__file__).parent.parent / "docs" / "reproduce" / "teacher-sgp", out)
    v = json.loads((out / "verdict.json").read_text())
    assert v["preset"] == "teacher"
    v["preset"] = "full"
    (out / "verdict.json").write_text(json.dumps(v))
    before = (out / "report.md").read_text()
    assert main(["reproduce", "sgp", "--rejudge", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "made on teacher with mlp for 20 epochs (target 0.7); preset 'full' now runs fashion-mnist with cnn-tiny " \
           "for 3 (target 0.85)" in err
    assert (out / "report.md").read_text() == before


@pytest.mark.parametrize("edit, says", [
    (lambda v: v.update(runs=-3), "runs -3 is not a count"),
    (lambda v: v.update(elapsed_s=-5.0), "elapsed_s -5.0 is outside"),
    (lambda v: v.update(kept=v["runs"] + 1), "kept"),
    (lambda v: v["arms"][0]["cells"][0]["accuracy"].__setitem__(0, 1.7), "an accuracy of 1.7 is outside 0..1"),
    (lambda v: v["recipe_grid"][0]["val_accuracy"].__setitem__(0, -0.2), "validation accuracy -0.2 is outside"),
])
def test_a_verdict_holding_an_impossible_number_is_refused_before_its_report_is_written(tmp_path, capsys, edit,
                                                                                         says):
    """It was judged again and its report said "-3 runs in 58.3 min"."""
    import json
    import shutil
    from pathlib import Path

    from hpcbench.cli import main

    out = tmp_path / "sgp"
    shutil.copytree(Path(__file__).parent.parent / "docs" / "reproduce" / "teacher-sgp", out)
    v = json.loads((out / "verdict.json").read_text())
    edit(v)
    (out / "verdict.json").write_text(json.dumps(v))
    before = (out / "report.md").read_text()
    assert main(["reproduce", "sgp", "--rejudge", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a verdict of study 'sgp'" in err and says in err, err
    assert (out / "report.md").read_text() == before
