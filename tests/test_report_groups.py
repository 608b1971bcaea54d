"""The report keeps apart runs that differ in a setting, and gates: diff --fail-above, check --reference.

Studies are real result files from the simulator (timing only, so they are quick); expected numbers
are read from the files' own summaries, never recomputed by the report's code.
"""
import csv
import dataclasses
import io

import pytest

from hpcbench.results.store import read_run

from conftest import cli


def simulate(path, *args: str) -> None:
    code, _, err = cli("simulate", "--numerics", "off", "--steps", "30", *args, "--out", str(path))
    assert code == 0, err


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """batch/: ga-asgd at batch 32 and 128, 2 and 4 workers; slow/: batch 32 with computes twice as long;
    seeds/: allreduce at 2 workers, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("studies")
    for batch in (32, 128):
        for workers in (2, 4):
            simulate(root / "batch" / f"b{batch}-w{workers}.h5", "--algo", "ga-asgd", "--workers", str(workers),
                     "--batch-size", str(batch))
    for workers in (2, 4):
        simulate(root / "slow" / f"w{workers}.h5", "--algo", "ga-asgd", "--workers", str(workers),
                 "--batch-size", "32", "--compute", "gamma:shape=100,mean=0.1")
    for seed in (0, 1):
        simulate(root / "seeds" / f"s{seed}.h5", "--algo", "allreduce", "--workers", "2", "--seed", str(seed))
    return root


def scaling_rows(*paths) -> list[dict[str, str]]:
    """The scaling table of ``report PATHS --format csv --table scaling`` (with any further flags)."""
    code, out, err = cli("report", *map(str, paths), "--format", "csv", "--table", "scaling")
    assert code == 0, err
    return list(csv.DictReader(io.StringIO(out)))


def rate(path) -> float:
    return float(read_run(path).summary["samples_per_s"])


def test_runs_that_differ_in_batch_size_are_kept_apart_with_the_setting_shown(studies):
    code, out, _ = cli("report", str(studies / "batch"))
    assert code == 0
    assert "Settings that differ between runs keep them apart (in the group names, and as columns with --wide): " \
           "batch_size" in " ".join(out.split())  # (the text report wraps at 120 columns)
    points = {(r["batch_size"], r["workers"]): r for r in scaling_rows(studies / "batch")}
    assert sorted(points) == [("128", "2"), ("128", "4"), ("32", "2"), ("32", "4")]
    for batch in ("32", "128"):
        assert points[(batch, "2")]["repeats"] == points[(batch, "4")]["repeats"] == "1"
        expected = rate(studies / "batch" / f"b{batch}-w4.h5") / rate(studies / "batch" / f"b{batch}-w2.h5")
        assert float(points[(batch, "4")]["speedup"]) == pytest.approx(expected, rel=1e-9)
        assert float(points[(batch,
                             "2")]["samples_per_s"]) == pytest.approx(rate(studies / "batch" / f"b{batch}-w2.h5"))


def test_group_by_overrides_and_says_what_it_pooled(studies):
    code, out, _ = cli("report", str(studies / "batch"), "--group-by", "")
    assert code == 0 and "pooled although they differ: batch_size" in out
    assert [(r["workers"], r["repeats"]) for r in scaling_rows(studies / "batch", "--group-by", "")] == \
        [("2", "2"), ("4", "2")]


def test_an_unknown_group_by_setting_is_one_line_naming_the_valid_ones(studies):
    code, out, err = cli("report", str(studies / "batch"), "--group-by", "batchsize")
    assert code == 2 and out == ""
    assert err.startswith("hpcbench: error: unknown --group-by setting 'batchsize'; valid: ")
    assert "batch_size" in err and "lr" in err and len(err.strip().splitlines()) == 1


def test_runs_equal_but_for_the_seed_are_repeats(studies):
    code, out, _ = cli("report", str(studies / "seeds"))
    assert "no other setting differs between runs" in out
    [point] = scaling_rows(studies / "seeds")
    assert point["repeats"] == "2" and "seed" not in point


def test_diff_fails_above_a_threshold_and_names_the_points(studies):
    slow = rate(studies / "slow" / "w2.h5") / rate(studies / "batch" / "b32-w2.h5") - 1
    assert slow < -0.3  # computes twice as long: a real regression to catch
    old = str(studies / "batch" / "b32-w2.h5")
    code, out, _ = cli("diff", old, str(studies / "slow" / "w2.h5"), "--fail-above", "10")
    assert code == 1
    [line] = [s for s in out.splitlines() if s.startswith("regression:")]
    assert line.startswith("regression: ga-asgd, sim, 2 workers: samples_per_s ")
    assert f"({100 * slow:+.0f}%)" in line
    code, out, _ = cli("diff", old, str(studies / "slow" / "w2.h5"), "--fail-above", "90")
    assert code == 0 and "no samples_per_s worse by more than 90%" in out
    code, out, _ = cli("diff", str(studies / "slow" / "w2.h5"), old, "--fail-above", "10")  # faster: fine
    assert code == 0
    code, _, err = cli("diff", old, old, "--fail-above", "10", "--metric", "speed")
    assert code == 2 and "unknown --metric 'speed'; valid: samples_per_s, speedup" in err
    for metric in ("speed", "speedup"):  # without --fail-above it watched nothing and said nothing
        code, out, err = cli("diff", old, old, "--metric", metric)
        assert code == 2 and not out and len(err.splitlines()) == 1, (metric, out, err)
    assert "give --fail-above PCT too" in err


def test_check_against_reference_bounds(studies, tmp_path):
    w2, w4 = rate(studies / "batch" / "b32-w2.h5"), rate(studies / "batch" / "b32-w4.h5")
    ref = tmp_path / "ref.toml"
    ref.write_text(f"[ga-asgd.2]\nsamples_per_s = [{0.9 * w2}, {1.1 * w2}]\n"
                   f"[ga-asgd.4]\nsamples_per_s = {{min = {0.9 * w4}}}\nspeedup = {{max = 10}}\n")
    slow_runs = str(studies / "slow")  # computes twice as long: below the bounds
    code, out, _ = cli("check", str(studies / "batch" / "b32-w2.h5"), str(studies / "batch" / "b32-w4.h5"),
                       "--reference", str(ref))
    assert code == 0 and out.strip() == f"all 3 bounds of {ref} hold"
    code, out, _ = cli("check", slow_runs, "--reference", str(ref))
    assert code == 1
    misses = out.strip().splitlines()
    assert len(misses) == 2 and all(m.startswith("miss: ga-asgd at ") for m in misses)
    assert "samples_per_s = " in misses[0] and f"expected within [{0.9 * w2:g}, {1.1 * w2:g}]" in misses[0]
    ref.write_text("[ga-asgd.16]\nsamples_per_s = {min = 1}\n")
    code, out, _ = cli("check", slow_runs, "--reference", str(ref))
    assert code == 1 and out.strip() == "miss: ga-asgd at 16 workers: no runs"


@pytest.mark.parametrize("text, message", [
    ("[asgd.4]\nsamples = [1, 2]\n", "unknown metric in [asgd.4] 'samples'; valid: samples_per_s"),
    ("[asgd.4]\nsamples_per_s = [2, 1]\n", "lower bound 2 is above upper bound 1"),
    ("[asgd.4]\nsamples_per_s = 5\n", "expected [LOW, HIGH], {min = LOW, max = HIGH} or {ref = VALUE, lower = "
     "-FRACTION, upper = FRACTION}, got 5"),
    ("[asgd.4]\nsamples_per_s = {ref = 100, lower = 0.2}\n", "lower must be <= 0 and upper >= 0 (fractions of ref)"),
    ("[asgd.4]\nsamples_per_s = {ref = 'fast'}\n", "got {'ref': 'fast'}"),
    ("[asgd.four]\nsamples_per_s = [1, 2]\n", "[asgd.four] is not a worker count"),
    ("", "reference: no bounds"),
])
def test_a_malformed_reference_is_one_error_line(studies, tmp_path, text, message):
    ref = tmp_path / "ref.toml"
    ref.write_text(text)
    code, out, err = cli("check", str(studies / "seeds"), "--reference", str(ref))
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


NUMERIC = ("workers", "nodes", "samples_per_s", "final_accuracy", "time_to_target_s")


@pytest.mark.parametrize("table, extra", [("runs", ("median_step_s", "compute_fraction", "staleness_p99")),
                                          ("scaling", ("repeats", "speedup", "efficiency"))])
def test_csv_tables_load_into_pandas_as_numbers(studies, table, extra):
    pd = pytest.importorskip("pandas")
    code, out, _ = cli("report", str(studies / "batch"), "--format", "csv", "--table", table)
    frame = pd.read_csv(io.StringIO(out))
    assert len(frame) == 4 and frame["algorithm"].eq("ga-asgd").all() and frame["mode"].eq("sim").all()
    for column in NUMERIC[:3] + extra + ("batch_size",):
        assert pd.api.types.is_numeric_dtype(frame[column]), column
    fractions = [c for c in frame.columns if c.endswith("_fraction") or c in ("efficiency", "final_accuracy")]
    assert all(frame[c].dropna().between(0, 1.5).all() for c in fractions)  # fractions, not percent strings
    if table == "runs":
        by_path = {row.path: row for row in frame.itertuples()}
        for path, row in by_path.items():
            assert row.samples_per_s == pytest.approx(rate(path), rel=1e-12)
            assert row.median_step_s == pytest.approx(read_run(path).summary["median_step_s"], rel=1e-12)


def test_json_is_one_document_with_runs_scaling_settings_and_units(studies):
    import json

    code, out, _ = cli("report", str(studies / "batch"), "--format", "json")
    doc = json.loads(out)
    assert doc["grouped_by"] == ["batch_size"] and "batch_size" in doc["grouping"]
    assert len(doc["runs"]) == 4 and len(doc["scaling"]) == 4
    assert {r["batch_size"] for r in doc["runs"]} == {"32", "128"}
    assert all(k in doc["units"] for k in ("samples_per_s", "median_step_s", "speedup", "compute_fraction"))
    run = next(r for r in doc["runs"] if r["path"].endswith("b32-w2.h5"))
    assert run["samples_per_s"] == pytest.approx(rate(studies / "batch" / "b32-w2.h5"), rel=1e-12)
    assert run["final_accuracy"] is None  # numerics off: no accuracy, null rather than NaN


def test_to_frames_names_phases_and_ops(studies):
    pytest.importorskip("pandas")
    from hpcbench.results.dataframes import to_frames

    rec = read_run(studies / "batch" / "b32-w2.h5")
    frames = to_frames(rec)
    timeline = frames["timeline"]
    assert len(timeline) == len(rec.timeline["rank"])
    assert set(timeline["phase"].unique()) <= set(rec.phases) and "compute" in set(timeline["phase"])
    codes = rec.timeline["op"]
    assert list(timeline["op"].astype(str)) == [rec.ops[c] for c in codes]
    assert (timeline["duration_s"] >= 0).all()
    assert set(frames) == {"timeline", "evals", *rec.tables}
    assert len(frames["updates"]) == len(rec.tables["updates"]["worker"])


def test_the_report_names_each_learning_rate_recipe_with_the_worker_counts_it_applied_to(studies):
    code, out, _ = cli("report", str(studies / "batch"))
    assert code == 0
    texts = {w: read_run(studies / "batch" / f"b32-w{w}.h5").attrs["config"]["schedule"]["text"] for w in (2, 4)}
    flat = " ".join(out.split())  # (the text report wraps at 120 columns)
    line = flat[flat.index("Learning-rate recipes: "):]
    if texts[2] == texts[4]:
        assert f"{texts[2]} (2, 4 workers)" in line
    else:
        assert f"{texts[2]} (2 workers)" in line and f"{texts[4]} (4 workers)" in line
    code, out, _ = cli("report", str(studies / "batch"), "--format", "csv", "--table", "runs")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["lr_recipe"] for r in rows if r["workers"] == "2"} == {texts[2]}


# Written out here, not imported: the configuration keys that never keep runs apart (the seed, where
# the file goes, a deadline, the progress line, and values derived from the others and the worker count).
NEVER_APART = {"algo", "seed", "out", "overwrite", "timeout_s", "progress_s", "data_dir", "steps_per_worker",
               "budget_samples", "eval_every", "parameters", "train_size", "val_size", "schedule",
               "straggler_ranks", "straggler_factor"}
# gradients: from batch_gradients and n
NEVER_APART_SIM = {"workers", "model_parameters", "algorithm_parameters", "gradients"}


def changed(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, list):
        return [*value, 1]
    assert value is None, value
    return 1


def test_every_setting_alone_keeps_runs_apart_and_only_the_listed_ones_do_not(studies):
    """Each configuration key, each option of every algorithm and each simulator parameter, changed
    alone, makes a different group — but for the keys listed above."""
    from types import SimpleNamespace

    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.report.metrics import settings

    rec = read_run(studies / "batch" / "b32-w2.h5")
    options = {name: dataclasses.asdict(ALGORITHMS.get(name).Options()) for name in ALGORITHMS.names()}
    config = {**rec.attrs["config"], "options": options}
    assert sum(map(len, options.values())) >= 15 and rec.simulation

    def groups(config, simulation=rec.simulation, network="emulated nodes=2,rate=1gbit"):
        return settings(SimpleNamespace(attrs={"config": config}, simulation=simulation,
                                        provenance={"network": network}))

    base = groups(config)
    for key, value in config.items():
        if key == "options":
            continue
        if isinstance(value, dict):  # an option table of the run (payload, teacher), or the derived schedule
            for name, inner in value.items():
                apart = groups({**config, key: {**value, name: changed(inner)}}) != base
                assert apart == (key not in NEVER_APART), f"{key}.{name}"
            continue
        apart = groups({**config, key: changed(value)}) != base
        assert apart == (key not in NEVER_APART), key
    for algo, opts in options.items():
        for name, value in opts.items():
            assert groups({**config, "options": {**options, algo: {**opts, name: changed(value)}}}) != base, \
                f"{algo}.{name}"
    for key, value in rec.simulation.items():
        apart = groups(config, {**rec.simulation, key: changed(value)}) != base
        assert apart == (key not in NEVER_APART_SIM), f"sim.{key}"
    assert groups(config, network="emulated nodes=2,rate=100mbit") != base


@pytest.fixture(scope="module")
def one_apart(tmp_path_factory):
    """ga-asgd at 2 workers, and beside it one run for each class of setting changed alone."""
    root = tmp_path_factory.mktemp("apart")
    variants = {"base": (), "lr": ("--lr", "0.1"), "momentum": ("--momentum", "0.9"),
                "schedule": ("--set", "lr_decay_epochs=[1]"), "stragglers": ("--stragglers", "0.5:2"),
                "option": ("--set", "ga-asgd.beta=0.5"), "sim": ("--network", "alpha=5e-6,bandwidth=1e9,noise=0.1")}
    for name, extra in variants.items():
        simulate(root / f"{name}.h5", "--algo", "ga-asgd", "--workers", "2", *extra)
    return root


def test_the_report_keeps_each_run_that_differs_in_one_setting_apart(one_apart):
    rows = scaling_rows(one_apart)
    assert len(rows) == 7 and {r["repeats"] for r in rows} == {"1"}
    code, out, _ = cli("report", str(one_apart))
    assert code == 0
    flat = " ".join(out.split())  # (the text report wraps at 120 columns)
    shown = flat[flat.index("as columns with --wide):"):].split(" Scaling (")[0]
    for setting in ("lr", "momentum", "lr_decay_epochs", "stragglers", "options.ga-asgd.beta", "sim.noise"):
        assert setting in shown, setting


@pytest.mark.parametrize("algo", ["ga-asgd", "sgp"])
def test_a_run_row_holds_what_its_file_says(tmp_path, algo):
    """Each number of a report row, read from the file itself: its summary, its recipe, and time to
    target found here by walking its evaluations."""
    import math

    import numpy as np

    from hpcbench.report.metrics import run_row

    path = tmp_path / f"{algo}.h5"
    code, _, err = cli("simulate", "--algo", algo, "--workers", "3", "--epochs", "2", "--lr", "0.1",
                       "--set", "evals=8", "--out", str(path))
    assert code == 0, err
    rec = read_run(path)
    s, config = rec.summary, rec.attrs["config"]
    hits = np.nonzero(np.asarray(rec.evals["accuracy"]) >= 0.5)[0]
    row = run_row(rec, 0.5)
    for key in ("samples_per_s", "median_step_s", "step_p90_s", "step_p99_s", "step_worker_min_s",
                "step_worker_max_s", "compute_fraction", "communicate_fraction", "wait_fraction",
                "final_accuracy", "staleness_mean", "staleness_p50", "staleness_p99", "penalty_mean"):
        expected, got = float(s[key]), getattr(row, key)
        assert got == expected or (math.isnan(got) and math.isnan(expected)), key
    assert hits.size and row.time_to_target_s == float(rec.evals["t"][hits[0]])
    assert (row.algorithm, row.mode, row.workers, row.result, row.error, row.reached) == (algo, "sim", 3, "ok", "", "")
    assert row.peak_lr == config["schedule"]["lr"] and row.lr_recipe == config["schedule"]["text"]
    assert row.evals == config["evals"] == 8
    server = algo == "ga-asgd"  # only a parameter server has gradients too stale to apply
    assert math.isnan(row.too_stale) != server and (not server or row.too_stale == float(s["too_stale"]))


def test_a_default_resolved_per_worker_count_keeps_one_curve(tmp_path):
    """easgd's alpha defaults to 0.9/n: the file records the value used (config.resolved_options), and
    the 2- and 4-worker runs still make one scaling curve."""
    for workers in (2, 4):
        simulate(tmp_path / f"w{workers}.h5", "--algo", "easgd", "--workers", str(workers))
    assert read_run(tmp_path / "w4.h5").attrs["config"]["resolved_options"] == {"alpha": 0.9 / 4}
    rows = scaling_rows(tmp_path)
    assert [(r["algorithm"], r["workers"]) for r in rows] == [("easgd", "2"), ("easgd", "4")]
    assert float(rows[0]["speedup"]) == 1.0 and float(rows[1]["speedup"]) != 1.0
