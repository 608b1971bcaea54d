"""``hpcbench reproduce``: verdicts computed from the data, and each study end to end at toy sizes."""
import dataclasses
import json
import math

import pytest

from hpcbench.cli import main
from hpcbench.reproduce.protocol import DEPENDS
from hpcbench.reproduce.runner import reproduce
from hpcbench.reproduce.verdicts import FAILS, HOLDS, UNCLEAR, Cell, crossing, diloco, gap_aware, jin, sgp
from hpcbench.results.store import read_run, rewrite_run
from hpcbench.tuning.grid import Setting

from conftest import requires_mpi

INF = math.inf


def cell(algo, n, acc=0.5, ttt=1.0, wall=1.0, variant=""):
    accs = acc if isinstance(acc, tuple) else (acc,)
    return Cell(algo, n, variant, accs, (ttt,) * len(accs), (wall,) * len(accs))


def ga_cells(margins, dana=0.01, spread=0.0):
    """GA ahead of the better of SA and ASGD by ``margins[i]`` at size i; DANA-GA ``dana`` ahead of GA."""
    out = []
    for n, m in zip((8, 32, 128), margins):
        base = 0.7
        out += [cell("asgd", n, (base - 0.05 - spread, base - 0.05 + spread)),
                cell("sa-asgd", n, (base - spread, base + spread)),
                cell("ga-asgd", n, (base + m - spread, base + m + spread)),
                cell("dana-ga", n, (base + m + dana - spread, base + m + dana + spread))]
    return out


def test_gap_aware_verdict_follows_the_numbers():
    holds = gap_aware(ga_cells([0.01, 0.03, 0.06]))
    assert holds.outcome == HOLDS and [c.result for c in holds.checks] == [True, True, True]
    # GA behind SA at the largest size: the claim is contradicted.
    assert gap_aware(ga_cells([0.01, 0.03, -0.02])).outcome == FAILS
    # The margin shrinks with n.
    shrinking = gap_aware(ga_cells([0.06, 0.03, 0.01]))
    assert shrinking.outcome == FAILS and shrinking.checks[1].result is False
    # DANA-GA behind GA everywhere.
    weak = gap_aware(ga_cells([0.01, 0.03, 0.06], dana=-0.02))
    assert weak.outcome == FAILS and weak.checks[2].result is False
    # Differences inside the spread over seeds cannot tell.
    noisy = gap_aware(ga_cells([0.01, 0.02, 0.03], spread=0.05))
    assert noisy.outcome == UNCLEAR
    assert gap_aware([]).outcome == UNCLEAR


def jin_cells(times, eval_gap=0.0):
    """times: n → (all-reduce, easgd, gossip) time to target."""
    return [dataclasses.replace(cell(a, n, ttt=t), eval_gap=eval_gap)
            for n, ts in times.items() for a, t in zip(("allreduce", "easgd", "gossip"), ts)]


def test_jin_verdict_and_crossing_follow_the_numbers():
    claim = {8: (10, 5, 6), 32: (8, 7, 9), 64: (5, 6, 8), 128: (4, 9, INF)}
    v = jin(jin_cells(claim))
    assert v.outcome == HOLDS
    assert crossing(jin_cells(claim)) == "the curves cross between n=32 and n=64"
    # All-reduce first everywhere: the first half of the claim is contradicted.
    always = {n: (1, 5, 6) for n in (8, 32, 64, 128)}
    assert jin(jin_cells(always)).outcome == FAILS
    assert crossing(jin_cells(always)) == "all-reduce is first from the smallest size measured (n=8)"
    # The asynchronous methods stay ahead at 128: the second half is contradicted.
    never = {n: (10, 5, 6) for n in (8, 32, 64, 128)}
    assert jin(jin_cells(never)).outcome == FAILS
    assert crossing(jin_cells(never)) == "all-reduce is never first at the sizes measured"
    # Nobody reaches the target: cannot tell.
    assert jin(jin_cells({8: (INF, INF, INF), 64: (INF, INF, INF)})).outcome == UNCLEAR
    # Times within one evaluation interval are a tie: a tie at 32 leaves the claim standing, ties
    # everywhere cannot tell.
    tie_at_32 = jin(jin_cells({8: (10, 5, 6), 32: (8.0, 8.05, 9), 64: (5, 6, 8)}, eval_gap=0.1))
    assert tie_at_32.outcome == HOLDS and "n=32: all-reduce 8 s, easgd 8.05 s (a tie" in tie_at_32.checks[0].numbers
    assert crossing(jin_cells({8: (10, 5, 6), 32: (8.0, 8.05, 9), 64: (5, 6, 8)}, eval_gap=0.1)) == \
        "the curves meet at n=32 (within one evaluation interval)"
    assert jin(jin_cells({8: (8.0, 8.05, 9), 64: (5, 5.05, 8)}, eval_gap=0.1)).outcome == UNCLEAR


def sgp_cells(slow_ratio, fast_ratio, acc_gap=0.0):
    out = []
    for variant, ratio in (("slow", slow_ratio), ("fast", fast_ratio)):
        out += [cell("allreduce", 32, 0.7, wall=ratio, variant=variant),
                cell("sgp", 32, 0.7 + acc_gap, wall=1.0, variant=variant),
                cell("osgp", 32, 0.7, wall=0.5, variant=variant)]
    return out


def test_sgp_verdict_follows_the_numbers():
    assert sgp(sgp_cells(3.0, 1.2), "slow", "fast").outcome == HOLDS
    too_slow = sgp(sgp_cells(1.3, 1.1), "slow", "fast")
    assert too_slow.outcome == FAILS and too_slow.checks[0].result is False
    assert "1.30x" in too_slow.checks[0].numbers
    assert sgp(sgp_cells(3.0, 1.2, acc_gap=-0.05), "slow", "fast").outcome == FAILS
    assert sgp(sgp_cells(3.0, 3.5), "slow", "fast").outcome == FAILS  # the gap grows on the fast network
    assert sgp(sgp_cells(6.0, 1.2), "slow", "fast").outcome == UNCLEAR  # faster than claimed: not "about 3x"


def diloco_cells(acc_gap=0.0, bytes_ratio=None, time_ratio=0.2, net="1 GbE"):
    """All-reduce and DiLoCo at H = 10 and 50 at 8 and 32 workers: DiLoCo ``acc_gap`` more accurate,
    ``bytes_ratio`` (default H) times fewer bytes per sample, ``time_ratio`` of all-reduce's time."""
    out = []
    for n in (8, 32):
        out.append(Cell("allreduce", n, net, (0.8,), (1.0,), (10.0,), 0.1, (1e6,)))
        for h in (10, 50):
            ratio = bytes_ratio or h
            out.append(Cell(f"diloco-h{h}", n, net, (0.8 + acc_gap,), (1.0,), (10.0 * time_ratio,), 0.1, (1e6 / ratio,
                                                                                                          )))
    return out


def test_diloco_verdict_follows_the_numbers():
    assert diloco(diloco_cells(), "1 GbE", (10, 50)).outcome == HOLDS
    worse = diloco(diloco_cells(acc_gap=-0.05), "1 GbE", (10, 50))
    assert worse.outcome == FAILS and worse.checks[0].result is False and "n=8: -5.0 pts" in worse.checks[0].numbers
    chatty = diloco(diloco_cells(bytes_ratio=2.0), "1 GbE", (10, 50))
    assert chatty.checks[1].result is False and chatty.checks[1].numbers == "n=8: 2x, n=32: 2x"
    slower = diloco(diloco_cells(time_ratio=1.5), "1 GbE", (10, 50))
    assert slower.checks[2].result is False and "10 s against 15 s" in slower.checks[2].numbers
    missing = diloco(diloco_cells(), "1 GbE", (10, 50, 200))
    assert missing.outcome == UNCLEAR and missing.checks[-1].numbers == "no size where both finished"


def test_diloco_at_toy_size_runs_each_period_and_counts_the_bytes_its_files_hold(tmp_path):
    out = tmp_path / "diloco"
    assert reproduce("diloco", str(out), "toy") == 0
    text, verdict = report_of(out)
    shared = verdict["arms"][0]
    chosen = {(c["algo"], c["workers"]): Setting(**c["setting"]).stem() for c in shared["cells"]}
    runs = {a: read_run(out / "runs" / f"{a}-n4-{chosen[(a, 4)]}-s0-1gbe.h5")
            for a in ("allreduce", "local-sgd-h50", "diloco-h10", "diloco-h50")}
    scalings = {p.name.split("-s0-")[0] for p in (out / "runs").glob("allreduce-n4-*.h5")}
    assert len(scalings) == 3 * 2  # all-reduce's rate scaling chosen on validation: 3 in shared, 3 x 2 rates in own lr
    assert {rec.attrs["config"]["lr_scaling"] for rec in map(read_run, (out / "runs").glob("allreduce-n4-*.h5"))} == \
        {"none", "sqrt", "linear"}
    assert runs["diloco-h10"].attrs["config"]["options"]["local-sgd"]["period"] == 10
    assert runs["diloco-h10"].attrs["config"]["options"]["local-sgd"]["outer"] == "nesterov"
    assert runs["local-sgd-h50"].attrs["config"]["options"]["local-sgd"]["outer"] == "none"
    assert runs["allreduce"].simulation["message_params"] == 25_557_032
    ratio = runs["allreduce"].summary["bytes_per_sample"] / runs["diloco-h10"].summary["bytes_per_sample"]
    assert f"n=4: {ratio:.3g}x" in shared["checks"][1]["numbers"]
    assert "| 1 GbE     |         4 | diloco-h50" in text and "bytes vs all-reduce" in text


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


@pytest.mark.timeout(240)
def test_gap_aware_at_toy_size_reports_what_its_files_say_and_flips_with_them(tmp_path, capsys):
    out = tmp_path / "ga"
    assert reproduce("gap-aware", str(out), "toy") == 0
    text, verdict = report_of(out)
    for heading in ("# Gap-Aware", "(TOY size", "**Claim.**", "**Verdict: ", "## Protocol", "## Arm: shared",
                    "## Arm: own lr", "## Arm: momentum 0", "## Arm: momentum 0.9", "## How it was measured"):
        assert heading in text
    assert [a["name"] for a in verdict["arms"]] == ["shared", "own lr", "momentum 0", "momentum 0.9"]
    assert verdict["protocol"]["schedule"].startswith("linear warm-up over 0 epochs")
    for arm in ("shared", "own-lr", "momentum-0", "momentum-0.9"):
        assert (out / f"gap-aware-{arm}.png").stat().st_size > 1000
    files = sorted((out / "runs").glob("*.h5"))
    # The recipe grid (2 runs of one worker), then 3 settings per algorithm and size: own lr's two
    # rates at the recipe's momentum, and the other momentum (the arms share the rest).
    assert len(files) == 2 + 4 * 2 * 3
    assert len([f for f in files if f.name.startswith("asgd-n1-")]) == 2
    # Each arm's table shows the final accuracy of the file its cell's setting chose on validation.
    for arm in verdict["arms"]:
        for c in arm["cells"]:
            stem = f"{c['algo']}-n{c['workers']}-{Setting(**c['setting']).stem()}-s0.h5"
            assert read_run(out / "runs" / stem).summary["final_accuracy"] == c["accuracy"][0]
    # Make the claim true in every file, run again (every run is kept): every arm holds, so does the study.
    margin = {2: 0.02, 4: 0.08}
    edit_all(out / "runs", lambda a, n: {"asgd": 0.5, "sa-asgd": 0.6, "ga-asgd": 0.6 + margin[n],
                                         "dana-ga": 0.7 + margin[n]}[a])
    assert reproduce("gap-aware", str(out), "toy") == 0
    assert "runs kept from an earlier invocation" in capsys.readouterr().out
    text, verdict = report_of(out)
    assert "runs kept from an earlier invocation, which ran them; this one only reported)" in text
    assert " 0 run now" not in text
    assert verdict["outcome"] == HOLDS
    assert "**Verdict: holds (TOY size: a test of the machinery, not a finding).**" in text
    assert verdict["verdict"] == "holds (TOY size: a test of the machinery, not a finding)"
    assert (verdict["capped"], verdict["max_steps"]) == (False, 0)
    # False in one arm only (GA far behind SA without momentum): the verdict depends on the protocol.
    edit_accuracy(out / "runs" / "ga-asgd-n4-lr0.05-m0-s0.h5", 0.1)
    assert reproduce("gap-aware", str(out), "toy") == 0
    text, verdict = report_of(out)
    outcomes = {a["name"]: a["outcome"] for a in verdict["arms"]}
    assert outcomes["momentum 0"] == FAILS and outcomes["momentum 0.9"] == HOLDS
    assert verdict["outcome"] == DEPENDS and "**Verdict: depends on the protocol (TOY size" in text
    # A run cut short by HPCBENCH_MAX_STEPS, as its file says: the study says so, wherever it states the verdict.
    capped = read_run(out / "runs" / "ga-asgd-n4-lr0.05-m0-s0.h5")
    capped.attrs["config"]["max_steps"] = 20
    rewrite_run(out / "runs" / "ga-asgd-n4-lr0.05-m0-s0.h5", capped)
    assert reproduce("gap-aware", str(out), "toy") == 0
    text, verdict = report_of(out)
    assert (verdict["capped"], verdict["max_steps"]) == (True, 20) and verdict["outcome"] == DEPENDS
    cap = "CAPPED at 20 steps per worker (HPCBENCH_MAX_STEPS): its runs were cut short"
    assert verdict["verdict"].startswith(f"depends on the protocol ({cap}")
    assert text.startswith("# Gap-Aware")
    assert "(CAPPED at 20 steps per worker (HPCBENCH_MAX_STEPS)" in text.splitlines()[0]
    assert f"**Verdict: depends on the protocol ({cap}" in text


@requires_mpi
@pytest.mark.timeout(240)
def test_jin_at_toy_size_calibrates_from_a_real_run_and_reports(tmp_path):
    out = tmp_path / "jin"
    assert reproduce("jin", str(out), "toy") == 0
    text, verdict = report_of(out)
    assert "calibration: a real all-reduce run here" in text
    assert (out / "calibration-allreduce-n2.h5").exists()
    assert verdict["outcome"] in (HOLDS, FAILS, UNCLEAR, DEPENDS)
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
    # recipe; 3 algorithms x 2 sizes x 2 networks x 2 rates
    assert len(list((out / "runs").glob("*.h5"))) == 2 + 3 * 2 * 2 * 2
    shared = verdict["arms"][0]
    setting = Setting(**shared["cells"][0]["setting"]).stem()
    rec = read_run(out / "runs" / f"sgp-n4-{setting}-s0-10gbe.h5")
    assert rec.simulation["message_params"] == 25_557_032 and rec.simulation["bandwidth"] == 1.25e9
    assert "| 10 GbE" in text and "| 100 Gb/s InfiniBand" in text
    # The speed check is the ratio of the two runs' times, as their files hold them.
    wall = {a: read_run(out / "runs" / f"{a}-n4-{setting}-s0-10gbe.h5").summary["wall_s"] for a in ("allreduce", "sgp")}
    assert f"{wall['allreduce'] / wall['sgp']:.2f}x" in shared["checks"][0]["numbers"]


def test_a_study_with_no_size_that_fits_is_one_line(tmp_path, capsys):
    assert main(["reproduce", "sgp", "--mode", "mpi", "--out-dir", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "hpcbench: error: no size of study 'sgp' (full) fits in --max-ranks 9: the smallest needs 17 ranks; "
        "raise --max-ranks or use the simulator (--mode sim)")
    assert not (tmp_path / "x").exists()


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
    # No run over a second network: that part of the claim cannot be told.
    assert verdict["arms"][0]["checks"][2]["result"] is None
