"""``hpcbench reproduce``: verdicts computed from the data, and each study end to end at toy sizes."""
import dataclasses
import json
import math
import re

import pytest

from hpcbench.cli import main
from hpcbench.reproduce import findings
from hpcbench.reproduce.claims import crossing, diloco, gap_aware, jin, momentum_helps, sgp
from hpcbench.reproduce.protocol import ArmResult, across_arms, headline
from hpcbench.reproduce.runner import reproduce
from hpcbench.reproduce.verdicts import FAILS, HOLDS, NOT_MODELLED, UNCLEAR, Cell
from hpcbench.results.store import read_run, rewrite_run
from hpcbench.tuning.grid import Setting

from conftest import requires_mpi

INF = math.inf
SEEDS = (0, 1, 2)
NOISE = (-0.002, 0.0, 0.002)  # each seed's offset: a spread of 0.2 pts, so intervals are finite


def cell(algo, n, acc=0.5, ttt=1.0, wall=1.0, variant="", noise=NOISE):
    """A cell over three seeds around ``acc`` (``noise`` apart), each seed's time to target ``ttt`` and
    run time ``wall`` (scalars, or a value per seed)."""
    accs = acc if isinstance(acc, tuple) else tuple(acc + e for e in noise)
    def per(v):
        return v if isinstance(v, tuple) else (v,) * len(accs)

    return Cell(algo, n, variant, accs, per(ttt), per(wall), seeds=SEEDS[:len(accs)])


def outcomes(verdicts):
    return {v.claim.key: v.outcome for v in verdicts}


def ga_cells(margins, dana=0.01, noise=NOISE):
    """GA ahead of SA by ``margins[i]`` at size i (ASGD 5 points below SA); DANA-GA ``dana`` ahead of GA."""
    out = []
    for n, m in zip((8, 32, 128), margins):
        out += [cell("asgd", n, 0.65, noise=noise), cell("sa-asgd", n, 0.7, noise=noise),
                cell("ga-asgd", n, 0.7 + m, noise=tuple(-e for e in noise)),
                cell("dana-ga", n, 0.7 + m + dana, noise=noise)]
    return out


def test_each_gap_aware_claim_gets_its_own_verdict_from_intervals_over_seeds():
    assert set(outcomes(gap_aware(ga_cells([0.01, 0.03, 0.06]))).values()) == {HOLDS}
    # GA behind SA at the largest size: that claim fails; GA still beats ASGD there, and says so.
    behind = outcomes(gap_aware(ga_cells([0.01, 0.03, -0.02])))
    assert behind["ga-over-sa"] == FAILS and behind["ga-over-asgd"] == HOLDS
    # The margin shrinks with n: only the trend fails.
    shrinking = outcomes(gap_aware(ga_cells([0.06, 0.03, 0.01])))
    assert shrinking == {"ga-over-sa": HOLDS, "ga-over-asgd": HOLDS, "ga-margin-grows": FAILS, "dana-ga-best": HOLDS}
    weak = outcomes(gap_aware(ga_cells([0.01, 0.03, 0.06], dana=-0.02)))
    assert weak["dana-ga-best"] == FAILS and weak["ga-over-sa"] == HOLDS
    # A lead inside the seeds' interval (0.3 pts against seeds 5 pts apart) is inconclusive, not a win.
    noisy = gap_aware(ga_cells([0.003, 0.003, 0.003], noise=(-0.05, 0.0, 0.05)))
    assert outcomes(noisy)["ga-over-sa"] == UNCLEAR
    row = noisy[0].evidence[0]
    assert row.interval.low < 0 < row.interval.high and row.where == "n=8"
    # One seed decides nothing, however large the lead.
    single = gap_aware(ga_cells([0.2, 0.3, 0.4], noise=(0.0,)))
    assert set(outcomes(single).values()) == {UNCLEAR}
    assert single[0].evidence[0].numbers.endswith("; 1 seed: a verdict needs 3")
    assert set(outcomes(gap_aware([])).values()) == {UNCLEAR}


def test_momentum_with_ga_is_judged_across_the_two_momentum_arms():
    def ga(n, acc):
        return cell("ga-asgd", n, acc)

    helps = momentum_helps([ga(8, 0.72), ga(128, 0.71)], [ga(8, 0.70), ga(128, 0.60)])
    assert helps.outcome == HOLDS and "n=128: GA with momentum − without +11.0 pts" in helps.effect()
    hurts_at_scale = momentum_helps([ga(8, 0.72), ga(128, 0.50)], [ga(8, 0.70), ga(128, 0.60)])
    assert hurts_at_scale.outcome == FAILS and hurts_at_scale.summary() == "does not hold (holds at n=8; not at n=128)"
    arms = [ArmResult("momentum 0", (ga(8, 0.70),), {}, ()), ArmResult("momentum 0.9", (ga(8, 0.72),), {}, ())]
    across = across_arms("gap-aware", arms)
    assert [(label, cv.outcome) for label, cv in across] == [("momentum 0.9 against momentum 0", HOLDS)]
    assert headline(arms, across) == "with GA, momentum helps at every n: holds (momentum 0.9 against momentum 0)"
    assert across_arms("gap-aware", arms[:1]) == [] and across_arms("jin", arms) == []


def test_a_claim_with_mixed_rows_says_where_it_holds():
    v = gap_aware(ga_cells([-0.02, 0.03, 0.06]))[0]
    assert v.outcome == FAILS and v.summary() == "does not hold (holds at n=32, n=128; not at n=8)"


def jin_cells(times, eval_gap=0.0):
    """times: n → (all-reduce, easgd, gossip) time to target, the same at every seed but for a small jitter."""
    return [dataclasses.replace(cell(a, n, ttt=t if math.isinf(t) else (t - 0.01, t, t + 0.01)), eval_gap=eval_gap)
            for n, ts in times.items() for a, t in zip(("allreduce", "easgd", "gossip"), ts)]


def test_jin_claims_and_crossing_follow_the_times():
    claim = {8: (10, 5, 6), 32: (8, 7, 9), 64: (5, 6, 8), 128: (4, 9, INF)}
    assert outcomes(jin(jin_cells(claim))) == {"async-first-small": HOLDS, "allreduce-first-large": HOLDS}
    assert crossing(jin_cells(claim)) == "the curves cross between n=32 and n=64"
    # All-reduce first everywhere: the first claim is not reproduced, the second holds.
    always = {n: (1, 5, 6) for n in (8, 32, 64, 128)}
    assert outcomes(jin(jin_cells(always))) == {"async-first-small": NOT_MODELLED, "allreduce-first-large": HOLDS}
    assert crossing(jin_cells(always)) == "all-reduce is first from the smallest size measured (n=8)"
    never = {n: (10, 5, 6) for n in (8, 32, 64, 128)}
    assert outcomes(jin(jin_cells(never))) == {"async-first-small": HOLDS, "allreduce-first-large": NOT_MODELLED}
    assert crossing(jin_cells(never)) == "all-reduce is never first at the sizes measured"
    # Only one side reaches the target: that side is first.
    assert outcomes(jin(jin_cells({8: (INF, 5, 6), 64: (4, INF, INF)}))) == \
        {"async-first-small": HOLDS, "allreduce-first-large": HOLDS}
    assert set(outcomes(jin(jin_cells({8: (INF, INF, INF), 64: (INF, INF, INF)}))).values()) == {UNCLEAR}
    # Times within one evaluation interval are a tie: inconclusive at that size.
    tie = jin(jin_cells({8: (10, 5, 6), 32: (8.0, 8.05, 9), 64: (5, 6, 8)}, eval_gap=0.1))
    assert outcomes(tie)["async-first-small"] == UNCLEAR
    assert "n=32: all-reduce 8 s, easgd 8.05 s: within one evaluation interval (a tie)" in tie[0].effect()
    assert crossing(jin_cells({8: (10, 5, 6), 32: (8.0, 8.05, 9), 64: (5, 6, 8)}, eval_gap=0.1)) == \
        "the curves meet at n=32 (within one evaluation interval)"


def sgp_cells(slow_ratio, fast_ratio, acc_gap=0.0, acc=0.75):
    out = []
    for variant, ratio in (("slow", slow_ratio), ("fast", fast_ratio)):
        out += [cell("allreduce", 32, acc, wall=(ratio * 0.99, ratio, ratio * 1.01), variant=variant),
                cell("sgp", 32, acc + acc_gap, wall=1.0, variant=variant),
                cell("osgp", 32, acc, wall=0.5, variant=variant)]
    return out


def test_sgp_claims_follow_the_numbers_and_a_time_claim_the_model_misses_says_so():
    assert set(outcomes(sgp(sgp_cells(3.0, 1.2), "slow", "fast", 0.7)).values()) == {HOLDS}
    too_slow = sgp(sgp_cells(1.3, 1.1), "slow", "fast", 0.7)
    assert outcomes(too_slow)["sgp-3x"] == NOT_MODELLED and "1.30x [" in too_slow[0].effect()
    assert outcomes(sgp(sgp_cells(3.0, 1.2, acc_gap=-0.05), "slow", "fast", 0.7))["sgp-accuracy"] == FAILS
    assert outcomes(sgp(sgp_cells(3.0, 3.5), "slow", "fast", 0.7))["sgp-gap-shrinks"] == NOT_MODELLED
    assert outcomes(sgp(sgp_cells(6.0, 1.2), "slow", "fast", 0.7))["sgp-3x"] == NOT_MODELLED  # not "about 3x"
    # Two methods that both failed to train match trivially: inconclusive, and said why.
    untrained = sgp(sgp_cells(3.0, 1.2, acc=0.346), "slow", "fast", 0.7)
    assert outcomes(untrained)["sgp-accuracy"] == UNCLEAR
    assert "allreduce itself ends below 70%" in untrained[1].effect()


def diloco_cells(acc_gap=0.0, bytes_ratio=None, time_ratio=0.2, net="1 GbE"):
    """All-reduce and DiLoCo at H = 10 and 50 at 8 and 32 workers: DiLoCo ``acc_gap`` more accurate,
    ``bytes_ratio`` (default H) times fewer bytes per sample, ``time_ratio`` of all-reduce's time."""
    out = []
    for n in (8, 32):
        out.append(dataclasses.replace(cell("allreduce", n, 0.8, wall=10.0, variant=net), bytes_per_sample=(1e6,) * 3))
        for h in (10, 50):
            ratio = bytes_ratio or h
            out.append(dataclasses.replace(cell(f"diloco-h{h}", n, 0.8 + acc_gap, variant=net,
                                                wall=tuple(10.0 * time_ratio * (1 + e) for e in NOISE)),
                                           bytes_per_sample=(1e6 / ratio,) * 3))
    return out


def test_diloco_claims_follow_the_numbers():
    assert set(outcomes(diloco(diloco_cells(), "1 GbE", (10, 50), 0.7)).values()) == {HOLDS}
    worse = diloco(diloco_cells(acc_gap=-0.05), "1 GbE", (10, 50), 0.7)
    assert outcomes(worse)["diloco-matches"] == FAILS and "H=10, n=8: diloco-h10 75.0%, allreduce 80.0%" in \
        worse[0].effect()
    chatty = diloco(diloco_cells(bytes_ratio=2.0), "1 GbE", (10, 50), 0.7)
    assert outcomes(chatty)["diloco-less-communication"] == FAILS
    slower = diloco(diloco_cells(time_ratio=1.5), "1 GbE", (10, 50), 0.7)
    assert outcomes(slower)["diloco-sooner"] == NOT_MODELLED and "all-reduce 10 s, DiLoCo 15 s" in slower[2].effect()
    # A period with no runs adds no row; no runs at all is inconclusive.
    assert outcomes(diloco(diloco_cells(), "1 GbE", (10, 50, 200), 0.7))["diloco-matches"] == HOLDS
    assert set(outcomes(diloco([], "1 GbE", (10,), 0.7)).values()) == {UNCLEAR}


def test_diloco_at_toy_size_runs_each_period_with_adamw_inside_and_its_outer_rate_chosen(tmp_path):
    out = tmp_path / "diloco"
    assert reproduce("diloco", str(out), "toy") == 0
    text, verdict = report_of(out)
    shared = verdict["arms"][0]
    chosen = {(c["algo"], c["workers"]): Setting.of(c["setting"]) for c in shared["cells"]}
    runs = {a: read_run(out / "runs" / f"{a}-n4-{chosen[(a, 4)].stem()}-s0-1gbe.h5")
            for a in ("allreduce", "local-sgd-h15", "diloco-h5", "diloco-h15")}
    assert {rec.attrs["config"]["lr_scaling"] for rec in map(read_run, (out / "runs").glob("allreduce-n4-*.h5"))} == \
        {"none", "sqrt", "linear"}  # all-reduce's rate scaling chosen on validation
    # DiLoCo's outer rate is chosen on validation in each cell, among three, on top of the inner rate.
    outer = {p.name.split("-s0-")[0] for p in (out / "runs").glob("diloco-h5-n4-lr0.05-m0.9-*-s0-1gbe.h5")}
    assert outer == {f"diloco-h5-n4-lr0.05-m0.9-o{o:g}" for o in (0.3, 0.7, 1.0)}
    assert chosen[("diloco-h5", 4)].outer_lr in (0.3, 0.7, 1.0) and chosen[("allreduce", 4)].outer_lr is None
    local = runs["diloco-h5"].attrs["config"]
    assert local["options"]["local-sgd"]["period"] == 5 and local["options"]["local-sgd"]["outer"] == "nesterov"
    assert local["options"]["local-sgd"]["inner"] == "adamw" and local["weight_decay"] == 0.1
    assert local["options"]["local-sgd"]["outer_lr"] == chosen[("diloco-h5", 4)].outer_lr
    plain = runs["local-sgd-h15"].attrs["config"]["options"]["local-sgd"]
    assert (plain["outer"], plain["inner"], plain["period"]) == ("none", "adamw", 15)
    assert runs["allreduce"].simulation["message_params"] == 25_557_032
    ratio = runs["allreduce"].summary["bytes_per_sample"] / runs["diloco-h5"].summary["bytes_per_sample"]
    less = next(c for c in verdict["claims"] if c["key"] == "diloco-less-communication")
    assert any(e["where"] == "H=5, n=4" and e["numbers"].startswith(f"{ratio:.2f}x")
               for e in less["arms"]["shared"]["evidence"])
    assert "| 1 GbE     |         4 | diloco-h15" in text and "bytes vs all-reduce" in text


def test_every_diloco_setting_of_the_real_sizes_gets_ten_outer_rounds():
    from hpcbench.reproduce.studies import DILOCO, DILOCO_PERIODS, outer_rounds

    for preset in ("full", "quick"):
        size = DILOCO.sizes[preset]
        assert min(outer_rounds(size, n, h) for n in size.workers for h in DILOCO_PERIODS) >= 10, preset


def edit_accuracy(path, accuracy):
    """A result file whose final accuracy (and last evaluation) says ``accuracy``."""
    rec = read_run(path)
    rec.summary["final_accuracy"] = accuracy
    rec.evals["accuracy"][-1] = accuracy
    rewrite_run(path, rec)


def strict_json(path):
    """The file as JSON that JSON.parse and jq accept: no Infinity, no NaN."""
    def refuse(name):
        raise AssertionError(f"{path} holds {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def report_of(out):
    return (out / "report.md").read_text(), strict_json(out / "verdict.json")


def edit_all(runs, accuracy_of):
    """Every arm's file of each (algorithm, workers) says ``accuracy_of(algo, n)``."""
    for path in runs.glob("*.h5"):
        algo, n = path.name.split("-n")[0], int(path.name.split("-n")[1].split("-")[0])
        if n > 1:
            edit_accuracy(path, accuracy_of(algo, n))


def claim_outcomes(verdict):
    """claim -> arm -> outcome, from verdict.json."""
    return {c["key"]: {arm: v["outcome"] for arm, v in c["arms"].items()} for c in verdict["claims"]}


def copy_seeds(runs, seeds, accuracy_of):
    """Seeds 1.. as copies of seed 0's files, every run's accuracy set by ``accuracy_of(algo, n, seed)``
    (the runner keeps files that say ok, so a re-run with these seeds reads them and runs nothing)."""
    import shutil

    for path in list(runs.glob("*-s0.h5")):
        for seed in seeds:
            target = path.with_name(path.name.replace("-s0.h5", f"-s{seed}.h5"))
            if seed:
                shutil.copyfile(path, target)
            algo, n = target.name.split("-n")[0], int(target.name.split("-n")[1].split("-")[0])
            if n > 1:
                edit_accuracy(target, accuracy_of(algo, n, seed))


@pytest.mark.timeout(240)
def test_gap_aware_at_toy_size_reports_what_its_files_say_and_each_claim_flips_with_them(tmp_path, capsys):
    out = tmp_path / "ga"
    assert reproduce("gap-aware", str(out), "toy", extensions=1) == 0  # a toy grid grows only when asked
    text, verdict = report_of(out)
    for heading in ("# Gap-Aware", "(TOY size", "**In short: ", "## The claims", "## Protocol", "## Arm: shared",
                    "## Arm: own lr", "## Arm: momentum 0", "## Arm: momentum 0.9", "## Arm: decay schedule",
                    "## How it was measured"):
        assert heading in text
    arms = ["shared", "own lr", "momentum 0", "momentum 0.9", "decay schedule"]
    assert [a["name"] for a in verdict["arms"]] == arms
    assert [c["key"] for c in verdict["claims"]] == ["ga-over-sa", "ga-over-asgd", "ga-margin-grows", "dana-ga-best"]
    assert all(c["quote"] and c["source"] and c["paper"] and c["test"] for c in verdict["claims"])
    assert [(c["key"], list(c["arms"])) for c in verdict["across"]] == \
        [("ga-momentum-helps", ["momentum 0.9 against momentum 0"])]
    assert "## Across arms" in text
    # One seed: every claim in every arm is inconclusive, and says why.
    assert {o for arms_ in claim_outcomes(verdict).values() for o in arms_.values()} == {UNCLEAR}
    assert "a verdict needs 3" in verdict["claims"][0]["arms"]["shared"]["evidence"][0]["numbers"]
    assert verdict["protocol"]["schedule"].startswith("linear warm-up over 0 epochs")
    for arm in ("shared", "own-lr", "momentum-0", "momentum-0.9", "decay-schedule"):
        assert (out / f"gap-aware-{arm}.png").stat().st_size > 1000
    # The decay arm runs the large rate with its own warm-up and decays, for every algorithm.
    decay = next(a for a in verdict["arms"] if a["name"] == "decay schedule")
    assert {(c["setting"]["lr"], c["setting"]["momentum"], tuple(c["setting"]["lr_decay_epochs"]))
            for c in decay["cells"]} == {(0.05, 0.9, (0.5, 0.8))}
    # own lr tried two rates per cell: every choice sat at an edge, so every cell's grid grew.
    own = next(a for a in verdict["arms"] if a["name"] == "own lr")
    assert sorted(own["grown"]) == sorted(f"{a} n={n}" for a in ("asgd", "sa-asgd", "ga-asgd", "dana-ga")
                                          for n in (2, 4))
    # Each arm's table shows the final accuracy of the file its cell's setting chose on validation.
    for arm in verdict["arms"]:
        for c in arm["cells"]:
            stem = f"{c['algo']}-n{c['workers']}-{Setting.of(c['setting']).stem()}-s0.h5"
            assert read_run(out / "runs" / stem).summary["final_accuracy"] == c["accuracy"][0]
    # Three seeds whose files make every claim true: every claim holds in every arm (every run kept).
    margin = {2: 0.02, 4: 0.08}
    base = {"asgd": 0.5, "sa-asgd": 0.6, "ga-asgd": 0.61, "dana-ga": 0.7}
    copy_seeds(out / "runs", (0, 1, 2), lambda a, n, seed: base[a] + (margin[n] if a != "asgd" and a != "sa-asgd"
                                                                      else 0) + 0.001 * seed * (a == "sa-asgd"))
    assert reproduce("gap-aware", str(out), "toy", seeds=(0, 1, 2), extensions=1) == 0
    assert "runs kept from an earlier invocation" in capsys.readouterr().out
    text, verdict = report_of(out)
    assert re.search(r"this invocation only reported: its \d+ runs were run earlier, in [\d.]+ min, 1 at a time\)",
                     text)
    assert {o for arms_ in claim_outcomes(verdict).values() for o in arms_.values()} == {HOLDS}
    assert verdict["command"].endswith("--preset toy --seeds 0,1,2 --extend 1 --out-dir " + str(out))
    # GA far behind SA at 4 workers without momentum: that claim fails in that arm only, the others
    # still hold there, and the headline says each.
    for seed in (0, 1, 2):
        edit_accuracy(out / "runs" / f"ga-asgd-n4-lr0.05-m0-s{seed}.h5", 0.1 + 0.001 * seed)
    assert reproduce("gap-aware", str(out), "toy", seeds=(0, 1, 2), extensions=1) == 0
    text, verdict = report_of(out)
    found = claim_outcomes(verdict)
    assert found["ga-over-sa"]["momentum 0"] == FAILS and found["ga-over-sa"]["shared"] == HOLDS
    assert found["dana-ga-best"]["momentum 0"] == HOLDS
    assert verdict["headline"].startswith("GA beats SA: holds in shared, own lr, momentum 0.9, decay schedule; "
                                          "does not hold in momentum 0 · ")
    assert "DANA-GA is the most accurate: holds in every arm" in verdict["headline"]
    assert f"**In short: {verdict['headline']} (TOY size: a test of the machinery, not a finding).**" in text
    assert (verdict["capped"], verdict["max_steps"]) == (False, 0)
    # A run cut short by HPCBENCH_MAX_STEPS, as its file says: the study says so, wherever it states the verdict.
    capped = read_run(out / "runs" / "ga-asgd-n4-lr0.05-m0-s0.h5")
    capped.attrs["config"]["max_steps"] = 20
    rewrite_run(out / "runs" / "ga-asgd-n4-lr0.05-m0-s0.h5", capped)
    assert reproduce("gap-aware", str(out), "toy", seeds=(0, 1, 2), extensions=1) == 0
    text, verdict = report_of(out)
    assert (verdict["capped"], verdict["max_steps"]) == (True, 20)
    cap = "CAPPED at 20 steps per worker (HPCBENCH_MAX_STEPS): its runs were cut short"
    assert verdict["verdict"] == f"{verdict['headline']} ({cap}, so this is a trial of the machinery, not a finding)"
    assert "(CAPPED at 20 steps per worker (HPCBENCH_MAX_STEPS)" in text.splitlines()[0]
    # What the files were made with: their commit, and a digest of each part of the code that made them.
    made = verdict["made_with"]
    assert set(made["versions"]) == {"simulator", "transport", "algorithms", "workload", "measurement"}
    assert made["files"]["runtime/sim/engine.py"] and len(made["commits"]) == 1


@requires_mpi
@pytest.mark.timeout(240)
def test_jin_at_toy_size_calibrates_from_a_real_run_and_reports(tmp_path):
    out = tmp_path / "jin"
    assert reproduce("jin", str(out), "toy") == 0
    text, verdict = report_of(out)
    assert "calibration: a real all-reduce run here" in text
    assert (out / "calibration-allreduce-n2.h5").exists()
    assert set(claim_outcomes(verdict)) == {"async-first-small", "allreduce-first-large"}
    assert [a["name"] for a in verdict["arms"]] == ["shared", "scaling none", "scaling linear", "scaling sqrt",
                                                     "own lr"]
    assert "time to 70%" in text and "where the curves cross" in text
    # A scaling arm's all-reduce runs with that scaling; the shared arm's is one of the three.
    sqrt_arm = next(a for a in verdict["arms"] if a["name"] == "scaling sqrt")
    assert {c["setting"].get("lr_scaling") for c in sqrt_arm["cells"] if c["algo"] == "allreduce"} == {"sqrt"}
    # The simulated runs used the calibrated compute model.
    path = next((out / "runs").glob("allreduce-n2-*-s0.h5"))
    mean = read_run(path).simulation["compute_mean_s"]
    assert f"{1e3 * mean:.3g} ms per batch" in text


@pytest.mark.timeout(240)
def test_sgp_at_toy_size_runs_both_networks_at_the_modeled_message_size(tmp_path):
    out = tmp_path / "sgp"
    assert reproduce("sgp", str(out), "toy") == 0
    text, verdict = report_of(out)
    # recipe; 3 algorithms x 2 sizes x 2 networks x 2 rates (a toy grid does not grow)
    assert len(list((out / "runs").glob("*.h5"))) == 2 + 3 * 2 * 2 * 2
    shared = verdict["arms"][0]
    setting = Setting.of(shared["cells"][0]["setting"]).stem()
    rec = read_run(out / "runs" / f"sgp-n4-{setting}-s0-10gbe.h5")
    assert rec.simulation["message_params"] == 25_557_032 and rec.simulation["bandwidth"] == 1.25e9
    assert "| 10 GbE" in text and "| 100 Gb/s InfiniBand" in text
    # The speed check is the ratio of the two runs' times, as their files hold them.
    wall = {a: read_run(out / "runs" / f"{a}-n4-{setting}-s0-10gbe.h5").summary["wall_s"] for a in ("allreduce", "sgp")}
    speed = next(c for c in verdict["claims"] if c["key"] == "sgp-3x")
    assert speed["modelled"] and f"{wall['allreduce'] / wall['sgp']:.2f}x" in speed["arms"]["shared"]["evidence"][0][
        "numbers"]


def test_a_study_with_no_size_that_fits_is_one_line(tmp_path, capsys):
    assert main(["reproduce", "sgp", "--mode", "mpi", "--out-dir", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "hpcbench: error: no size of study 'sgp' (full) fits in --max-ranks 9: the smallest needs 17 ranks; "
        "raise --max-ranks or use the simulator (--mode sim)")
    assert not (tmp_path / "x").exists()


def test_a_resumed_study_states_the_time_of_every_invocation_that_ran_its_runs(tmp_path):
    from hpcbench.reproduce.runner import earlier, invocations

    path = tmp_path / "verdict.json"
    assert earlier(path, "jin", "full") == {}
    assert invocations({}, 60.0, 10, 2) == [{"elapsed_s": 60.0, "ran": 10, "jobs": 2}]
    path.write_text(json.dumps({"study": "jin", "preset": "full", "elapsed_s": 600.0, "runs": 50, "kept": 20}))
    assert invocations(earlier(path, "jin", "full"), 60.0, 10) == [{"elapsed_s": 600.0, "ran": 30},
                                                                   {"elapsed_s": 60.0, "ran": 10, "jobs": 1}]
    path.write_text(json.dumps({"study": "jin", "preset": "full", "invocations": [{"elapsed_s": 1.0, "ran": 2}]}))
    assert invocations(earlier(path, "jin", "full"), 9.0, 0) == [{"elapsed_s": 1.0, "ran": 2}]  # only reported
    assert earlier(path, "jin", "quick") == earlier(path, "sgp", "full") == {}  # another preset's, another study's
    path.write_text("{broken")
    assert earlier(path, "jin", "full") == {}
    # The time is said with each invocation's runs at a time, not the last one's (which may only report).
    spent = [{"elapsed_s": 600.0, "ran": 30, "jobs": 2}, {"elapsed_s": 60.0, "ran": 10, "jobs": 2}]
    assert findings.minutes({"runs": 40, "kept": 40, "jobs": 1, "invocations": spent}) == \
        "40 runs in 11.0 min, 2 at a time, over 2 invocations"
    assert findings.minutes({"runs": 40, "kept": 40, "jobs": 1, "invocations": [*spent, {"elapsed_s": 6.0, "ran": 1,
                                                                                        "jobs": 1}]}) == \
        "40 runs in 11.1 min, 1–2 at a time, over 3 invocations"


def test_an_unknown_study_is_one_line(tmp_path, capsys):
    assert main(["reproduce", "gossip", "--out-dir", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == ("hpcbench: error: unknown study 'gossip'; valid: gap-aware, jin, sgp, "
                                               "diloco, resilience")
    assert not (tmp_path / "x").exists()



@requires_mpi
@pytest.mark.timeout(300)
def test_sgp_with_real_runs_uses_this_machine_and_skips_what_does_not_fit(tmp_path):
    out = tmp_path / "sgp-mpi"
    assert reproduce("sgp", str(out), "toy", mode="mpi", max_ranks=3) == 0
    text, verdict = report_of(out)
    files = sorted(p.name for p in (out / "runs").glob("*.h5"))
    recipe = [f for f in files if f.startswith("asgd-n1-")]
    assert len(recipe) == 2 and len(files) == 2 + 3 * 2
    assert all(f.endswith("-thismachine.h5") for f in files if f not in recipe)
    rec = read_run(out / "runs" / next(f for f in files if f.startswith("allreduce-n2-")))
    assert rec.mode == "mpi" and rec.workers == 2
    assert read_run(out / "runs" / recipe[0]).mode == "mpi"  # the recipe, too, from real runs
    assert "skipped: 4 workers (5 ranks > --max-ranks 3)" in text
    assert "| this machine" in text and "message_params" not in text
    # No run over a second network: that claim cannot be told, and says why.
    shrinks = next(c for c in verdict["claims"] if c["key"] == "sgp-gap-shrinks")["arms"]["shared"]
    assert shrinks["outcome"] == UNCLEAR and shrinks["evidence"][0]["numbers"] == "no runs over 100 Gb/s InfiniBand"
