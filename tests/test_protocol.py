"""The validation split, ``hpcbench tune`` (chooses on validation, never on test) and the studies' per-arm verdicts."""
import json
import math

import numpy as np
import pytest

from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.options.sim import SimConfig
from hpcbench.reproduce.claims import CLAIMS
from hpcbench.reproduce.protocol import OWN_LR, SHARED, ArmResult, Recipe, candidates, choose_recipe
from hpcbench.results.store import read_run, rewrite_run
from hpcbench.runtime.assemble import assemble
from hpcbench.runtime.plan import validate
from hpcbench.tuning.grid import Setting, Trial, choose, expand, parse_decays
from hpcbench.workload.datasets import load_dataset

from conftest import requires_mpi

GAP_AWARE_CLAIMS = CLAIMS["gap-aware"]
TINY = ["--dataset", "teacher", "--set", "teacher.samples=1200", "--set", "teacher.test_samples=400", "--epochs", "1"]


def rows(x):
    return {r.tobytes() for r in x.reshape(len(x), -1)}


@pytest.mark.parametrize("dataset", ["teacher", "digits"])
def test_the_validation_split_is_disjoint_from_training_and_test_and_the_same_for_every_run(dataset):
    plain = load_dataset(dataset)
    held = load_dataset(dataset, val_fraction=0.1)
    n = len(plain.y_train)
    assert len(held.y_val) == round(0.1 * n) and len(held.y_train) + len(held.y_val) == n
    # Every sample lands in exactly one of training and validation; none of them is a test sample.
    assert rows(held.x_val).isdisjoint(rows(held.x_train))
    assert rows(held.x_val) | rows(held.x_train) == rows(plain.x_train)
    assert rows(held.x_val).isdisjoint(rows(plain.x_test)) and rows(held.x_train).isdisjoint(rows(plain.x_test))
    assert np.array_equal(held.x_test, plain.x_test)
    # The same split whatever the seed, algorithm or number of workers of the run.
    splits = []
    for algo, workers, seed in (("asgd", 2, 0), ("allreduce", 4, 7), ("sgp", 3, 123)):
        cfg = RunConfig(algo=algo, dataset=dataset, seed=seed, val_fraction=0.1)
        splits.append(assemble(validate(cfg), workers).workload.data)
    for data in splits:
        assert np.array_equal(data.x_val, held.x_val) and np.array_equal(data.y_val, held.y_val)
        assert np.array_equal(data.x_train, held.x_train)


def test_a_val_fraction_out_of_range_is_one_line(capsys):
    assert main(["simulate", "--algo", "asgd", "--workers", "2", "--set", "val_fraction=0.9", *TINY]) == 2
    assert capsys.readouterr().err.strip() == "hpcbench: error: val_fraction must be in [0, 0.5], got 0.9"


def naive_mlp_accuracy(params, x, y):
    """The mlp (64 → 128 → 128 → 10, ReLU) written out in numpy from its flat parameters."""
    shapes = [(128, 64), (128,), (128, 128), (128,), (10, 128), (10,)]
    parts, at = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        parts.append(params[at:at + size].reshape(shape).astype(np.float64))
        at += size
    w1, b1, w2, b2, w3, b3 = parts
    h = np.maximum(x.reshape(len(x), -1) @ w1.T + b1, 0)
    h = np.maximum(h @ w2.T + b2, 0)
    return float(((h @ w3.T + b3).argmax(1) == y).mean())


def test_a_run_records_validation_beside_test_accuracy(tmp_path):
    out = tmp_path / "run.h5"
    assert main(["simulate", "--algo", "asgd", "--workers", "2", *TINY, "--set", "val_fraction=0.25",
                 "--set", "evals=3", "--out", str(out)]) == 0
    rec = read_run(out)
    data = load_dataset("teacher", val_fraction=0.25, options=validate(
        RunConfig(algo="asgd", dataset="teacher", options={"teacher": {"samples": 1200,
                                                                       "test_samples": 400}})).tables["teacher"])
    assert rec.attrs["config"]["val_size"] == 300 and rec.attrs["config"]["train_size"] == 900
    assert rec.summary["final_val_accuracy"] == pytest.approx(naive_mlp_accuracy(rec.final_params, data.x_val,
                                                                                 data.y_val))
    assert rec.summary["final_accuracy"] == pytest.approx(naive_mlp_accuracy(rec.final_params, data.x_test,
                                                                             data.y_test))
    assert np.all(np.isfinite(rec.evals["val_accuracy"])) and len(rec.evals["val_loss"]) == len(rec.evals["loss"])
    # Without a split the columns are there, and NaN.
    plain = tmp_path / "plain.h5"
    assert main(["simulate", "--algo", "asgd", "--workers", "2", *TINY, "--out", str(plain)]) == 0
    assert np.all(np.isnan(read_run(plain).evals["val_accuracy"]))


def trial(lr, *val, momentum=0.9):
    return Trial("asgd", 8, Setting(lr, momentum), tuple(val))


def test_choose_takes_the_best_mean_validation_accuracy_ties_to_the_smaller_rate_and_never_a_diverged_one():
    assert choose([trial(0.01, 0.6, 0.7), trial(0.1, 0.66, 0.66), trial(0.05, 0.8, 0.5)]).setting.lr == 0.1
    assert choose([trial(0.1, 0.7), trial(0.02, 0.7), trial(0.05, 0.7)]).setting.lr == 0.02
    assert choose([trial(0.5, math.nan, 0.99), trial(0.05, 0.3, 0.3)]).setting.lr == 0.05
    recipe = choose_recipe([trial(0.01, 0.70), trial(0.05, 0.69, momentum=0.0), trial(0.1, 0.65, momentum=0.0)])
    assert recipe.best == Setting(0.01, 0.9) and recipe.by_momentum == {0.0: Setting(0.05, 0.0), 0.9: Setting(0.01,
                                                                                                              0.9)}


def test_grids_expand_every_combination_and_decays_parse():
    assert parse_decays("none;10,15") == [(), (10.0, 15.0)]
    grid = expand([0.01, 0.1], [0, 0.9], decays=[(), (10.0,)])
    assert len(grid) == 8 and len({s.stem() for s in grid}) == 8
    assert Setting(0.1, 0.9, 5.0, (10.0, 15.0), "sqrt").stem() == "lr0.1-m0.9-w5-d10_15-sqrt"


def set_accuracies(path, val, test):
    rec = read_run(path)
    rec.summary["final_val_accuracy"], rec.evals["val_accuracy"][-1] = val, val
    rec.summary["final_accuracy"], rec.evals["accuracy"][-1] = test, test
    rec.summary["best_accuracy"] = float(max(rec.evals["accuracy"]))  # the evaluations' best, as a reader checks
    rewrite_run(path, rec)


@pytest.mark.timeout(240)
def test_tune_chooses_on_validation_never_on_test_and_its_toml_runs_the_choice(tmp_path, capsys):
    out = tmp_path / "tune"
    args = ["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.01,0.1", "--momentum", "0.9", "--seeds", "0",
            "--jobs", "1", "--out-dir", str(out), *TINY, "--set", "evals=2", "--extend", "0"]
    assert main(args) == 0
    runs = {p.name: p for p in (out / "runs").glob("*.h5")}
    assert sorted(runs) == ["asgd-n2-lr0.01-m0.9-s0.h5", "asgd-n2-lr0.1-m0.9-s0.h5"]
    shown = capsys.readouterr().out
    assert "[1/2, " in shown and " left] asgd, 2 workers" in shown and "[2/2, " in shown  # count, time so far, left
    # Validation says 0.01, test says 0.1: the choice follows validation.
    set_accuracies(runs["asgd-n2-lr0.01-m0.9-s0.h5"], val=0.8, test=0.1)
    set_accuracies(runs["asgd-n2-lr0.1-m0.9-s0.h5"], val=0.2, test=0.9)
    assert main(args) == 0
    chosen = [t for t in json.loads((out / "tune.json").read_text())["trials"] if t["chosen"]]
    assert [t["setting"]["lr"] for t in chosen] == [0.01]
    text = (out / "tune.md").read_text()
    assert "| asgd        | 2         | lr 0.01, momentum 0.9 | 80.0 " in text and "| chosen |" in text
    assert (out / "tune.png").stat().st_size > 1000
    # And the other way round.
    set_accuracies(runs["asgd-n2-lr0.01-m0.9-s0.h5"], val=0.2, test=0.9)
    set_accuracies(runs["asgd-n2-lr0.1-m0.9-s0.h5"], val=0.8, test=0.1)
    assert main(args) == 0
    toml = out / "best" / "asgd-n2.toml"
    assert "lr = 0.1\n" in toml.read_text()
    # The TOML is valid and runs the chosen setting: same resolved configuration as the chosen run.
    again = tmp_path / "again.h5"
    assert main(["simulate", "--config", str(toml), "--workers", "2", "--out", str(again)]) == 0
    want, got = read_run(runs["asgd-n2-lr0.1-m0.9-s0.h5"]).attrs["config"], read_run(again).attrs["config"]
    for key in ("out", "overwrite", "threads"):
        want.pop(key), got.pop(key)
    assert got == want


@pytest.mark.timeout(240)
def test_a_choice_at_the_edge_of_the_rates_grows_the_grid_and_says_so(tmp_path):
    out = tmp_path / "tune"
    args = ["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.01,0.03", "--momentum", "0.9", "--seeds", "0,1",
            "--jobs", "1", "--out-dir", str(out), *TINY, "--set", "evals=2"]
    assert main([*args, "--extend", "0"]) == 0
    runs = {p.name: p for p in (out / "runs").glob("*.h5")}
    assert len(runs) == 4
    for seed, jitter in ((0, 0.0), (1, 0.01)):  # validation prefers the larger rate, the grid's edge
        set_accuracies(runs[f"asgd-n2-lr0.01-m0.9-s{seed}.h5"], val=0.5 + jitter, test=0.5)
        set_accuracies(runs[f"asgd-n2-lr0.03-m0.9-s{seed}.h5"], val=0.7 + jitter, test=0.5)
    assert main([*args, "--extend", "1"]) == 0
    # One log step past the edge (0.03 · 0.03 / 0.01), at every seed; then the choice and what is known of it.
    grown = sorted(p.name for p in (out / "runs").glob("asgd-n2-lr0.09-*.h5"))
    assert grown == ["asgd-n2-lr0.09-m0.9-s0.h5", "asgd-n2-lr0.09-m0.9-s1.h5"]
    report = json.loads((out / "tune.json").read_text())
    assert report["grown"] == ["asgd at 2 workers: lr 0.09, momentum 0.9"]
    text = (out / "tune.md").read_text()
    assert "- the grid grew past its edge: asgd at 2 workers: lr 0.09, momentum 0.9" in text
    chosen = next(t for t in report["trials"] if t["chosen"])
    # Chosen 0.09: the grid stopped growing there (--extend 1), so it is still at an edge, and said; chosen
    # 0.03: interior.
    assert chosen["at_edge"] == (chosen["setting"]["lr"] == 0.09)
    if chosen["at_edge"]:
        assert "still at the edge of the rates tried" in text


def test_ties_are_the_settings_whose_interval_against_the_choice_straddles_zero():
    from hpcbench.tuning.grid import step_outs, ties

    best = Trial("asgd", 2, Setting(0.02, 0.9), (0.70, 0.71, 0.72))
    close = Trial("asgd", 2, Setting(0.04, 0.9), (0.705, 0.70, 0.716))
    far = Trial("asgd", 2, Setting(0.08, 0.9), (0.60, 0.61, 0.62))
    found = ties([best, close, far])
    assert [t.setting.lr for t, _ in found] == [0.04]
    assert found[0][1].low < 0 < found[0][1].high and found[0][1].mean == pytest.approx(0.003, abs=1e-9)
    # The next rate past an edge is the grid's own ratio at that edge, with the same other settings.
    tried = [Setting(lr, 0.9) for lr in (0.01, 0.02, 0.08)]
    assert step_outs(Setting(0.08, 0.9), tried) == [Setting(0.32, 0.9)]
    assert step_outs(Setting(0.01, 0.9), tried) == [Setting(0.005, 0.9)]
    assert step_outs(Setting(0.02, 0.9), tried) == []  # interior
    assert step_outs(Setting(5.0, 0.9), [Setting(2.0, 0.9), Setting(5.0, 0.9)]) == []  # 12.5: past the limit
    assert step_outs(Setting(0.5, 0.0), tried + [Setting(0.5, 0.0)]) == []  # a single rate at its momentum


def test_an_outer_rate_at_the_edge_of_its_grid_grows_too():
    """DiLoCo's cells choose an outer rate among a few: one chosen at the smallest grows below it (the
    grid's own ratio there), after the inner rate, which grows first where both sit at an edge."""
    from hpcbench.tuning.grid import at_edge, past_edges, step_outs

    tried = [Setting(lr, 0.9, outer_lr=o) for lr in (0.01, 0.04, 0.16) for o in (0.3, 0.7, 1.0)]
    interior = Setting(0.04, 0.9, outer_lr=0.3)
    assert at_edge(interior, tried) and step_outs(interior, tried) == [Setting(0.04, 0.9, outer_lr=0.128571)]
    assert step_outs(Setting(0.16, 0.9, outer_lr=1.0), tried) == [Setting(0.64, 0.9, outer_lr=1.0),
                                                                 Setting(0.16, 0.9, outer_lr=1.42857)]
    assert not at_edge(Setting(0.04, 0.9, outer_lr=0.7), tried)
    # The rate past the edge tried already: the outer rate's step is next.
    grown = [*tried, Setting(0.64, 0.9, outer_lr=1.0)]
    assert past_edges({"cell": (Setting(0.16, 0.9, outer_lr=1.0), grown)}) == {
        "cell": Setting(0.16, 0.9, outer_lr=1.42857)}


def test_tune_refuses_a_bad_grid_before_running(tmp_path, capsys):
    base = ["tune", "--algo", "asgd", "--workers", "2", "--out-dir", str(tmp_path / "t"), *TINY]
    assert main([*base, "--lr", "0.1,fast"]) == 2
    assert "--lr '0.1,fast' is not a comma-separated list of numbers" in capsys.readouterr().err
    assert main([*base, "--lr", "0.1", "--momentum", "1.5"]) == 2
    assert "momentum must be in [0, 1), got 1.5" in capsys.readouterr().err
    assert main([*base, "--lr", "0.1", "--algo", "nope"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_arms_try_what_they_say():
    recipe = Recipe(Setting(0.02, 0.9), {0.0: Setting(0.05, 0.0), 0.9: Setting(0.02, 0.9)})
    assert candidates(SHARED, "ga-asgd", recipe, (0.25, 1, 4), False) == [Setting(0.02, 0.9)]
    assert [s.lr for s in candidates(OWN_LR, "ga-asgd", recipe, (0.25, 1, 4), False)] == [0.005, 0.02, 0.08]
    assert candidates("momentum 0", "asgd", recipe, (1,), False) == [Setting(0.05, 0.0)]
    # jin: all-reduce's scaling is chosen on validation in the shared arm, fixed in a scaling arm.
    assert [s.lr_scaling for s in candidates(SHARED, "allreduce", recipe, (1,), True)] == ["none", "linear", "sqrt"]
    assert candidates("scaling sqrt", "allreduce", recipe, (1,), True) == [Setting(0.02, 0.9, lr_scaling="sqrt")]
    assert candidates("scaling sqrt", "easgd", recipe, (1,), True) == [Setting(0.02, 0.9)]
    assert len(candidates(OWN_LR, "allreduce", recipe, (0.25, 1, 4), True)) == 9


@requires_mpi
@pytest.mark.timeout(240)
def test_tune_under_real_mpi_runs_each_setting_with_mpiexec(tmp_path):
    out = tmp_path / "tune"
    assert main(["tune", "--mode", "mpi", "--algo", "asgd", "--workers", "2", "--lr", "0.02,0.1", "--seeds", "0",
                 "--extend", "0", "--out-dir", str(out), *TINY, "--set", "evals=2"]) == 0
    records = [read_run(p) for p in sorted((out / "runs").glob("*.h5"))]
    assert [(r.mode, r.workers, r.attrs["config"]["lr"]) for r in records] == [("mpi", 2, 0.02), ("mpi", 2, 0.1)]
    best = max(records, key=lambda r: (r.summary["final_val_accuracy"], -r.attrs["config"]["lr"]))
    assert f"lr = {best.attrs['config']['lr']!r}\n" in (out / "best" / "asgd-n2.toml").read_text()
    assert "[sim]" not in (out / "best" / "asgd-n2.toml").read_text()


def test_the_recipe_runs_are_the_same_in_every_study(tmp_path):
    from hpcbench.reproduce.runner import planned
    from hpcbench.reproduce.studies import STUDIES

    def recipe_run(study):
        return planned(study, "full", tmp_path, ("asgd", 1, ""), Setting(0.01, 0.9), 0, "sim", ["--compute", "x"]).job

    jobs = [recipe_run(s) for s in STUDIES.values()]
    assert all(j == jobs[0] for j in jobs)
    assert jobs[0].sim == SimConfig(workers=1)  # no study's network nor compute model
    assert jobs[0].path.name == "asgd-n1-lr0.01-m0.9-s0.h5"


def test_a_rate_at_the_edge_of_its_grid_is_flagged():
    from hpcbench.tuning.grid import at_edge

    tried = [Setting(lr, 0.9) for lr in (0.01, 0.04, 0.16)] + [Setting(0.5, 0.0)]
    assert at_edge(Setting(0.16, 0.9), tried) and at_edge(Setting(0.01, 0.9), tried)
    assert not at_edge(Setting(0.04, 0.9), tried)
    assert not at_edge(Setting(0.5, 0.0), tried)  # the only rate tried at its momentum: no grid to be at the edge of


def test_the_report_says_which_setting_each_cell_chose_and_flags_the_grid_edge():
    from hpcbench.reproduce.report import chosen_text

    same = {("sgp", 16, ""): Setting(0.08, 0.9), ("sgp", 32, ""): Setting(0.08, 0.9)}
    edge = ArmResult(OWN_LR, (), same, (), (("sgp", 16, ""),), chose=True)
    assert chosen_text(edge).startswith("Chosen on validation, in every cell: lr 0.08, momentum 0.9 [edge].")
    mixed = {("sgp", 16, ""): Setting(0.02, 0.9), ("sgp", 32, ""): Setting(0.08, 0.9)}
    text = chosen_text(ArmResult(OWN_LR, (), mixed, (), (("sgp", 32, ""),), chose=True, grown=(("sgp", 32, ""),),
                                 ties=("sgp n=16: lr 0.04 ties with the chosen lr 0.02",)))
    assert "sgp n=16: lr 0.02, momentum 0.9;" in text and "sgp n=32: lr 0.08, momentum 0.9 [edge]" in text
    assert "The grid grew past its edge (log steps) for sgp n=32." in text
    assert "[edge]: still the largest or smallest rate tried once the grid stopped growing" in text
    assert "Ties within the seeds' interval on validation: sgp n=16: lr 0.04 ties with the chosen lr 0.02" in text
    # An arm that had one setting to run chose nothing.
    assert chosen_text(ArmResult(SHARED, (), same, (), (), chose=False)) == ""


def test_a_tune_says_capped_only_where_the_cap_cut_its_runs(tmp_path, monkeypatch):
    """HPCBENCH_MAX_STEPS=20 over runs of 10 steps cut nothing: no "capped" in tune.md or the recipes."""
    from hpcbench.tuning.tune import cut_cap

    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "20")
    for steps in (10, 30):
        assert main(["simulate", "--algo", "asgd", "--workers", "2", "--numerics", "off", "--steps", str(steps),
                     "--out", str(tmp_path / f"s{steps}.h5")]) == 0
    assert cut_cap({tmp_path / "s10.h5": ""}) == 0  # the cap had room: the runs are whole
    assert cut_cap({tmp_path / "s10.h5": "", tmp_path / "s30.h5": ""}) == 20
    assert cut_cap({tmp_path / "s30.h5": "it failed", tmp_path / "gone.h5": "it failed"}) == 0  # read only if ok
    out = tmp_path / "tune"
    assert main(["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.05", "--seeds", "0", "--jobs", "1",
                 "--out-dir", str(out), "--steps", "10", *TINY[:6], "--set", "evals=2", "--extend", "0"]) == 0
    assert "CAPPED" not in (out / "tune.md").read_text() and "capped" not in (out / "best" / "asgd-n2.toml").read_text()


def test_a_tuned_recipe_never_carries_the_step_cap_its_runs_were_made_under():
    """HPCBENCH_MAX_STEPS caps the tuning runs (a smoke test); the recipe written for later runs does not
    carry it, or every run made from it would stay capped without the variable. Its header says so."""
    import tomllib

    from hpcbench.tuning.tune import recipe_toml

    trial = Trial("asgd", 8, Setting(0.02, 0.9), (0.7, 0.71))
    text = recipe_toml({"dataset": "teacher", "max_steps": 20}, {}, trial, {})
    values = tomllib.loads(text)
    assert "max_steps" not in values and values["dataset"] == "teacher" and values["lr"] == 0.02
    assert "capped at 20 steps per worker" in text.splitlines()[1]
    assert "capped" not in recipe_toml({"dataset": "teacher"}, {}, trial, {})


@pytest.mark.timeout(240)
def test_a_capped_tune_says_so_and_its_recipe_runs_uncapped(tmp_path, monkeypatch, capsys):
    import tomllib

    monkeypatch.setenv("HPCBENCH_MAX_STEPS", "3")
    out = tmp_path / "tune"
    assert main(["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.05", "--seeds", "0", "--jobs", "1",
                 "--out-dir", str(out), *TINY, "--set", "evals=2", "--extend", "0"]) == 0
    assert (out / "tune.md").read_text().splitlines()[2].startswith("**CAPPED** at 3 steps per worker")
    assert "max_steps" not in tomllib.loads((out / "best" / "asgd-n2.toml").read_text())
    capsys.readouterr()
