"""``hpcbench reproduce``: verdicts computed from the data, and each study end to end at toy sizes."""
import json
import re
import shutil

import pytest

from hpcbench.cli import main
from hpcbench.reproduce import findings, made_with, recheck
from hpcbench.reproduce.runner import reproduce
from hpcbench.reproduce.verdicts import FAILS, HOLDS, UNCLEAR, UNTESTABLE
from hpcbench.results.store import read_run, rewrite_run
from hpcbench.tuning.grid import Setting

from conftest import requires_mpi


@pytest.mark.slow  # a study at toy size: about a minute
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
    # Judged again from its verdict.json alone (no result file read, nothing run): the same verdict.
    for path in (out / "runs").iterdir():
        path.unlink()
    assert main(["reproduce", "diloco", "--rejudge", "--out-dir", str(out)]) == 0
    again = strict_json(out / "verdict.json")
    assert {k: again[k] for k in ("headline", "claims", "arms", "made_with")} == \
        {k: verdict[k] for k in ("headline", "claims", "arms", "made_with")}
    assert again["rejudged"]["replaced_headline"] == verdict["headline"]
    assert (out / "report.md").read_text() == text


def test_every_diloco_setting_of_the_real_sizes_gets_ten_outer_rounds():
    from hpcbench.reproduce.studies import DILOCO, DILOCO_PERIODS, outer_rounds

    for preset in ("full", "quick"):
        size = DILOCO.sizes[preset]
        assert min(outer_rounds(size, n, h) for n in size.workers for h in DILOCO_PERIODS) >= 10, preset


def edit_accuracy(path, accuracy):
    """A result file whose final accuracy (and last evaluation) says ``accuracy`` (its best accuracy the
    evaluations' best, as a reader checks)."""
    rec = read_run(path)
    rec.summary["final_accuracy"] = accuracy
    rec.evals["accuracy"][-1] = accuracy
    rec.summary["best_accuracy"] = float(max(rec.evals["accuracy"]))
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


@pytest.mark.slow  # a study at toy size: about 2 minutes
@pytest.mark.timeout(240)
def test_gap_aware_at_toy_size_reports_what_its_files_say_and_each_claim_flips_with_them(tmp_path, capsys,
                                                                                          monkeypatch):
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
    # One seed: every claim in every arm is inconclusive, and says why; but DANA-GA without momentum is GA to
    # the bit, so the momentum-0 arm cannot test the claim that it is the most accurate.
    found = claim_outcomes(verdict)
    assert found["dana-ga-best"]["momentum 0"] == UNTESTABLE
    assert {o for key, arms_ in found.items() for arm, o in arms_.items()
            if (key, arm) != ("dana-ga-best", "momentum 0")} == {UNCLEAR}
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
    # Each arm's table shows the final accuracy of the file its cell's setting chose on validation: on a fresh
    # seed where the cell chose among several settings (own lr), never on the seed that chose it.
    for arm in verdict["arms"]:
        for c in arm["cells"]:
            assert c["seeds"] == ([1000] if arm["name"] == "own lr" else [0])
            stem = f"{c['algo']}-n{c['workers']}-{Setting.of(c['setting']).stem()}-s{c['seeds'][0]}.h5"
            assert read_run(out / "runs" / stem).summary["final_accuracy"] == c["accuracy"][0]
    assert verdict["protocol"]["test_seeds"] == [1000]
    # Made again (one run per algorithm, by processes of their own where the study ran them in this one), the
    # runs come out the same to the last digit; a verdict whose numbers are not those of the code here is found.
    written = (out / "verdict.json").read_text()
    assert main(["reproduce", "gap-aware", "--recheck", "--out-dir", str(out), "--jobs", "2"]) == 0
    rechecked = json.loads((out / "recheck.json").read_text())
    assert rechecked["same"] and [r["cell"] for r in rechecked["runs"]] == [f"{a} n=4" for a in
                                                                            ("asgd", "sa-asgd", "ga-asgd", "dana-ga")]
    assert (out / "verdict.json").read_text() == written
    edited = json.loads((out / "verdict.json").read_text())
    next(c for c in edited["arms"][0]["cells"] if (c["algo"], c["workers"]) == ("ga-asgd", 4))["accuracy"][0] += 1e-4
    (out / "verdict.json").write_text(json.dumps(edited))
    capsys.readouterr()
    assert main(["reproduce", "gap-aware", "--recheck", "--out-dir", str(out), "--jobs", "1"]) == 1  # in this process
    said = capsys.readouterr().out
    assert "ga-asgd n=4, seed 0: DIFFERS" in said and "1 of 4 run(s) differ" in said, said
    rechecked = json.loads((out / "recheck.json").read_text())
    assert not rechecked["same"] and "made on a machine like this one" in rechecked["machine"], rechecked
    # The same verdict made on another CPU: its own code (here a copy of this one, as git would give it) makes
    # here what the code here makes, so this machine's arithmetic made the difference, not the code.
    edited["made_with"]["machine"] = "another CPU (AVX2); torch 0.0, numpy 0.0"
    (out / "verdict.json").write_text(json.dumps(edited))

    def code_of(made, tmp):
        shutil.copytree(made_with.package(), tmp / "hpcbench")
        return "0123456789"

    monkeypatch.setattr(recheck, "code_of", code_of)
    assert main(["reproduce", "gap-aware", "--recheck", "--out-dir", str(out), "--jobs", "2"]) == 0
    rechecked = json.loads((out / "recheck.json").read_text())
    row = next(r for r in rechecked["runs"] if r["cell"] == "ga-asgd n=4")
    assert rechecked["same"] and row["by_machine"] and row["then_here"] == row["now"] != row["was"], row
    assert "commit 0123456789 (the verdict's) gives here what the code here gives" in rechecked["machine"]
    assert "came out the same to the last digit (1 as the verdict's own code makes them on the machine of the " \
        "recheck" in findings.recheck_text(rechecked)
    # Three seeds whose files make every claim true: every claim holds in every arm (every run kept).
    margin = {2: 0.02, 4: 0.08}
    base = {"asgd": 0.5, "sa-asgd": 0.6, "ga-asgd": 0.61, "dana-ga": 0.7}
    copy_seeds(out / "runs", (0, 1, 2, 1000, 1001, 1002),
               lambda a, n, seed: base[a] + (margin[n] if a != "asgd" and a != "sa-asgd" else 0)
               + 0.001 * (seed % 1000) * (a == "sa-asgd"))
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
    # The copied files give every arm but momentum 0 the same numbers: the same evidence, named once.
    assert verdict["headline"].startswith("GA beats SA: holds in shared = own lr = momentum 0.9 = decay schedule; "
                                          "does not hold in momentum 0 (1 of 2 rows hold) · ")
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
    # A kept file whose accuracies (test and validation, what the choice reads) say 7: refused in one line and
    # run again, so neither a recipe choice nor a claim's numbers come from it.
    seven = out / "runs" / "ga-asgd-n4-lr0.05-m0-s1.h5"
    rec = read_run(seven)
    rec.evals["accuracy"][-1] = rec.evals["val_accuracy"][-1] = 7.0
    rec.summary.update(final_accuracy=7.0, final_val_accuracy=7.0, best_accuracy=7.0)
    rewrite_run(seven, rec)
    capsys.readouterr()
    assert reproduce("gap-aware", str(out), "toy", seeds=(0, 1, 2), extensions=1) == 0
    err = capsys.readouterr().err
    assert f"hpcbench: {seven} is invalid: evals/accuracy = 7.0 at row " in err and "; it is run again" in err, err
    assert read_run(seven).summary["final_accuracy"] <= 1
    _, verdict = report_of(out)
    assert all(a <= 1 for arm in verdict["arms"] for c in arm["cells"] for a in c["accuracy"])


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


@pytest.mark.slow  # a study at toy size: about a minute
@pytest.mark.timeout(240)
def test_sgp_at_toy_size_runs_both_networks_at_the_modeled_message_size(tmp_path):
    out = tmp_path / "sgp"
    assert reproduce("sgp", str(out), "toy") == 0
    text, verdict = report_of(out)
    # recipe; 3 algorithms x 2 sizes x 2 networks x 2 rates (a toy grid does not grow); and each own-lr cell's
    # choice again on a fresh seed
    assert len(list((out / "runs").glob("*.h5"))) == 2 + 3 * 2 * 2 * 2 + 3 * 2 * 2
    assert len(list((out / "runs").glob("*-s1000-*.h5"))) == 3 * 2 * 2
    shared = verdict["arms"][0]
    setting = Setting.of(shared["cells"][0]["setting"]).stem()
    rec = read_run(out / "runs" / f"sgp-n4-{setting}-s0-10gbe.h5")
    assert rec.simulation["message_params"] == 25_557_032 and rec.simulation["bandwidth"] == 1.25e9
    assert "| 10 GbE" in text and "| 100 Gb/s InfiniBand" in text
    # The speed check is the ratio of the two runs' times, as their files hold them.
    wall = {a: read_run(out / "runs" / f"{a}-n4-{setting}-s0-10gbe.h5").summary["wall_s"] for a in ("allreduce", "sgp")}
    speed = next(c for c in verdict["claims"] if c["key"] == "sgp-3x")
    row = next(e for e in speed["arms"]["shared"]["evidence"] if e["where"] == "n=4, 10 GbE")
    assert speed["modelled"] and f"{wall['allreduce'] / wall['sgp']:.2f}x" in row["numbers"]
    assert not row["primary"]  # the paper's claim is at 32 nodes: a toy size is beyond its setting


def test_a_study_with_no_size_that_fits_is_one_line(tmp_path, capsys):
    assert main(["reproduce", "sgp", "--mode", "mpi", "--out-dir", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "hpcbench: error: no size of study 'sgp' (full) fits in --max-ranks 9: the smallest needs 17 ranks; "
        "raise --max-ranks or use the simulator (--mode sim)")
    assert not (tmp_path / "x").exists()


def test_a_resumed_study_states_the_time_of_every_invocation_that_ran_its_runs(tmp_path):
    from hpcbench.reproduce.verdict_file import earlier, invocations

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



@pytest.mark.parametrize("study, copy, args, words", [
    ("gap-aware", None, [], "cannot read a verdict to recheck"),
    ("jin", "teacher-gap-aware", [], "is study 'gap-aware''s verdict, not 'jin''s"),
    ("jin", "teacher-jin", [], "does not record the compute model its runs were given"),
    ("resilience", "teacher-gap-aware", [], "is study 'gap-aware''s verdict, not 'resilience''s"),
    ("gap-aware", "teacher-gap-aware", ["--rejudge"], "--rejudge and --recheck are two things"),
])
def test_a_recheck_it_cannot_make_is_one_line(tmp_path, capsys, study, copy, args, words):
    import shutil
    from pathlib import Path

    if copy:
        shutil.copytree(Path(__file__).resolve().parent.parent / "docs" / "reproduce" / copy, tmp_path / "s")
        (tmp_path / "s" / "recheck.json").unlink(missing_ok=True)
    assert main(["reproduce", study, "--recheck", "--out-dir", str(tmp_path / "s"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "s" / "recheck.json").exists()


@requires_mpi
@pytest.mark.timeout(300)
def test_sgp_with_real_runs_uses_this_machine_and_skips_what_does_not_fit(tmp_path):
    out = tmp_path / "sgp-mpi"
    assert reproduce("sgp", str(out), "toy", mode="mpi", max_ranks=3) == 0
    text, verdict = report_of(out)
    files = sorted(p.name for p in (out / "runs").glob("*.h5"))
    recipe = [f for f in files if f.startswith("asgd-n1-")]
    assert len(recipe) == 2 and len(files) == 2 + 3 * 2 + 3  # and each own-lr choice on a fresh seed
    assert all(f.endswith("-thismachine.h5") for f in files if f not in recipe)
    rec = read_run(out / "runs" / next(f for f in files if f.startswith("allreduce-n2-")))
    assert rec.mode == "mpi" and rec.workers == 2
    assert read_run(out / "runs" / recipe[0]).mode == "mpi"  # the recipe, too, from real runs
    assert "skipped: 4 workers (5 ranks > --max-ranks 3)" in text
    assert "| this machine" in text and "message_params" not in text
    # No run over a second network: that claim cannot be told, and says why.
    shrinks = next(c for c in verdict["claims"] if c["key"] == "sgp-gap-shrinks")["arms"]["shared"]
    assert shrinks["outcome"] == UNCLEAR and shrinks["evidence"][0]["numbers"] == "no runs over 100 Gb/s InfiniBand"


def test_every_preset_has_its_calibration_and_emulated_steps():
    """jin's calibration run and sgp's emulated runs look their steps up by preset: a preset added without
    them would end those studies in a KeyError."""
    from hpcbench.reproduce import network
    from hpcbench.reproduce.runner import CALIBRATION_STEPS
    from hpcbench.reproduce.studies import PRESETS, STUDIES

    assert set(CALIBRATION_STEPS) == set(network.STEPS) == set(PRESETS)
    assert all(set(s.sizes) == set(PRESETS) for s in STUDIES.values())


def test_quick_with_another_preset_is_refused_in_one_line(tmp_path, capsys):
    from hpcbench.cli import main

    assert main(["reproduce", "jin", "--quick", "--preset", "teacher", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--quick is --preset quick" in err and "teacher-quick" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.fast
def test_runs_made_with_the_verdicts_commit_leave_out_what_only_scores_the_validation_split(tmp_path, monkeypatch):
    """The verdict's commit may predate a key that chooses only what is scored of the validation split
    (val_eval_samples, which the Fashion-MNIST studies set): the runs it is asked to make leave it at its
    default, so an older commit can make them; everything else they set is as the study's."""
    from types import SimpleNamespace

    from hpcbench.tuning.execute import Job

    job = Job.of("asgd", 2, ("--dataset", "digits", "--steps", "5", "--set", "val_eval_samples=0", "--lr", "0.02"),
                 tmp_path / "a.h5", "asgd")
    asked = []

    def run_jobs(jobs, mode, width, timeout, package=None):
        asked.extend(jobs)
        return {j.path: "failed" for j in jobs}

    monkeypatch.setattr("hpcbench.tuning.execute.run_jobs", run_jobs)
    monkeypatch.setattr(recheck, "code_of", lambda made, tmp: "0123456789")
    v = {"made_with": {"machine": "another machine", "commits": ["0123456789"], "files": {"x": "y"}}}
    line = recheck.machine_or_code(v, [SimpleNamespace(job=job)], [{"same": False}], 0.9, 1, 60)
    assert "could not make its runs" in line
    argv = asked[0].argv("sim")
    assert "val_eval_samples=0" in job.argv("sim") and not any("val_eval_samples" in a for a in argv)
    assert asked[0].cfg.lr == 0.02 and asked[0].cfg.steps == 5 and asked[0].path != job.path
