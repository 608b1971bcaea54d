"""The report as a user reads it, from records written out by hand: every cell of the text and csv
tables checked against the numbers put in (worked out in the comments), and the other formats'
structure. Fast: no run, no file."""
import csv
import dataclasses
import io
import json

import numpy as np
import pytest

from hpcbench.errors import UsageError
from hpcbench.report.document import report_text
from hpcbench.report.tables import collect, render
from hpcbench.results.schema import RunRecord


def record(algo, workers, status="ok", seed=0, batch=32, evals=2, hosts=("a",), **summary):
    numbers = {"samples_per_s": 100.0, "median_step_s": 0.010, "step_p90_s": 0.012, "step_p99_s": 0.020,
               "step_worker_min_s": 0.009, "step_worker_max_s": 0.011, "compute_fraction": 0.5,
               "communicate_fraction": 0.3, "wait_fraction": 0.2, "final_accuracy": 0.9}
    if algo == "asgd":
        numbers.update(staleness_mean=1.5, staleness_p50=1.0, staleness_p99=3.0, penalty_mean=1.0,
                       late_gradients=0, too_stale=2)
    config = {"batch_size": batch, "seed": seed, "evals": evals, "budget_samples": 1000,
              "schedule": {"lr": 0.1 * workers, "text": f"{0.1 * workers:g} flat"}}
    attrs = {"algorithm": algo, "workers": workers, "mode": "mpi", "status": status, "config": config}
    if status != "ok":
        attrs["error"] = "rank 2 on b: a rank has stopped answering"
        numbers = {"samples": 250, "wall_s": 4.0}
    return RunRecord(attrs=attrs, provenance={}, per_rank={"hostnames": list(hosts) * (workers + 1)}, timeline={},
                     phases=(), ops=(), clock_offsets=np.zeros(0),
                     evals={"t": np.array([0.0, 1.0, 2.0]), "accuracy": np.array([0.1, 0.85, 0.9])},
                     tables={}, summary={**numbers, **summary}, final_params=np.zeros(0),
                     path=f"{algo}-{workers}-{seed}.h5")


@pytest.fixture
def records():
    return [
        record("asgd", 2),
        record("asgd", 4, samples_per_s=180.0, seed=1, hosts=("a", "b")),
        record("asgd", 4, samples_per_s=220.0, seed=2, hosts=("a", "b"), final_accuracy=0.8),  # a repeat of the last
        record("asgd", 2, batch=64, samples_per_s=150.0),  # another setting within the curve: kept apart
        record("allreduce", 2, samples_per_s=90.0, evals=4),
        record("allreduce", 4, status="timeout", evals=4),
    ]


TEXT = """\
Headline: at each worker count, who is first to accuracy 0.85, most accurate at the end and fastest (medians over
repeats; no lead here has repeats on both sides to judge it by: sweep --repeats 3)

  2 workers, first to accuracy 0.85: allreduce (1 s), level with asgd (1 s)
  2 workers, best final accuracy: allreduce (0.900), level with asgd (0.900)
  2 workers, most samples/s: asgd batch_size=64 (150), 1.50x more than asgd (100)
  4 workers, first to accuracy 0.85: asgd (1 s; the only curve with a value)
  4 workers, best final accuracy: asgd (0.850; the only curve with a value)
  4 workers, most samples/s: asgd (200; the only curve with a value)

Repeats: runs equal in everything but the seed. Settings that differ between runs keep them apart (in the group names,
and as columns with --wide): batch_size

Scaling (medians over repeats; speedup and efficiency against each curve's fewest workers)

group               workers  samples/s  final acc  to target s  nodes  speedup  efficiency  runs
------------------  -------  ---------  ---------  -----------  -----  -------  ----------  ------------
allreduce           2        90         0.900      1            1      1.00     100%        1
allreduce           4        TIMEOUT    -          -            1      -        -           0 (1 failed)
asgd                2        100        0.900      1            1      1.00     100%        1
asgd                4        200 ± 20   0.850      1            2      2.00     100%        2
asgd batch_size=64  2        150        0.900      1            1      1.00     100%        1

Runs (6)

group               workers  samples/s  final acc  to target s  nodes  step ms  compute/comm/wait %
------------------  -------  ---------  ---------  -----------  -----  -------  -------------------
allreduce           2        90         0.900      1            1      10.0     50/30/20
allreduce           4        TIMEOUT    -          -            1      -        -
asgd                2        100        0.900      1            1      10.0     50/30/20
asgd                4        180        0.900      1            2      10.0     50/30/20
asgd                4        220        0.800      1            2      10.0     50/30/20
asgd batch_size=64  2        150        0.900      1            1      10.0     50/30/20

Runs that did not finish (1; shown above without numbers)

algorithm  workers  result   got to
---------  -------  -------  ----------------------------------
allreduce  4        timeout  250 of 1000 samples (25%) in 4.0 s

allreduce-4-0.h5: rank 2 on b: a rank has stopped answering

Learning-rate recipes: 0.2 flat (2 workers); 0.4 flat (4 workers)

Time to target = first evaluation at accuracy >= 0.85; evaluations every 1/evals (evals 2, 4) of a run's samples, so it
resolves to that share of the run's time"""


def test_the_text_report_cell_by_cell(records):
    # asgd at 4: median of 180 and 220 = 200 ± 20; speedup 200/100 = 2.00 with twice the workers: 100%;
    # both reach 0.85 at t = 1 s, as at 2 workers: ttt speedup 1.00, over twice the workers 50%; final
    # accuracy the median of 0.9 and 0.8. Batch 64 differs within asgd's curve: a curve of its own, named by
    # it; batch 32 is the default, so its curve is plain asgd.
    # allreduce's evals (4) differ from asgd's (2) but not within a curve: no column.
    assert report_text(records, target=0.85) == TEXT


def test_the_text_report_fits_in_120_columns_and_wide_shows_every_column(records):
    # The demo's 14 groups have labels up to 27 characters; the widest settings fold into them.
    many = records + [record("allreduce", 2, seed=s, batch=b, samples_per_s=123456.0) for s in (1, 2) for b in (16, 48)]
    assert max(map(len, report_text(many, target=0.85).splitlines())) <= 120
    wide = report_text(records, target=0.85, wide=True)
    header = ("algorithm  mode  batch_size  nodes  workers  samples/s  step ms p50/p90/p99  workers' step ms  compute  "
              "communicate  wait  final acc  time to target s  staleness mean  staleness p50/p99  penalty mean  "
              "too stale  lr")
    assert header in wide.splitlines()
    assert "asgd       mpi   32          2      4        220        10.0/12.0/20.0       9.0-11.0" in wide


def test_csv_tables_hold_raw_numbers_and_empty_cells_for_missing_ones(records):
    runs = list(csv.DictReader(io.StringIO(report_text(records, "csv", target=0.85, table="runs"))))
    assert [(r["algorithm"], r["workers"], r["batch_size"], r["result"]) for r in runs] == [
        ("allreduce", "2", "32", "ok"), ("allreduce", "4", "32", "timeout"), ("asgd", "2", "32", "ok"),
        ("asgd", "4", "32", "ok"), ("asgd", "4", "32", "ok"), ("asgd", "2", "64", "ok")]
    assert runs[0]["samples_per_s"] == "90.0" and runs[0]["compute_fraction"] == "0.5"
    assert runs[1]["samples_per_s"] == "" and runs[1]["reached"] == "250 of 1000 samples (25%) in 4.0 s"
    assert runs[2]["too_stale"] == "2.0" and runs[0]["too_stale"] == ""
    scaling = list(csv.DictReader(io.StringIO(report_text(records, "csv", target=0.85, table="scaling"))))
    four = [p for p in scaling if p["algorithm"] == "asgd" and p["workers"] == "4"][0]
    assert (four["samples_per_s"], four["samples_per_s_spread"], four["speedup"], four["efficiency"]) == \
        ("200.0", "20.0", "2.0", "1.0")
    assert four["batch_size"] == "32" and four["repeats"] == "2"


def grouping_line(records, **kwargs) -> str:
    line = json.loads(report_text(records, "json", target=0.85, **kwargs))["grouping"]
    assert line.replace("\n", " ") in report_text(records, target=0.85, **kwargs).replace("\n", " ")
    return line


def test_group_by_pools_what_it_does_not_name_and_says_so(records):
    assert grouping_line(records, group_by=["evals"]) == (
        "Grouped by --group-by evals; pooled although they differ: batch_size")
    assert grouping_line(records, group_by=[]) == (
        "Grouped by algorithm and mode only; pooled although they differ: batch_size")
    assert grouping_line(records, group_by=["batch_size", "evals"]) == "Grouped by --group-by batch_size,evals"
    same = [r for r in records if r.algorithm == "asgd" and r.attrs["config"]["batch_size"] == 32]
    assert grouping_line(same) == (
        "Repeats: runs equal in everything but the seed (no other setting differs between runs)")
    assert "evaluations every 1/2 of a run's samples" in report_text(same, target=0.85)


def test_json_is_one_document_and_md_latex_html_hold_the_same_cells(records):
    doc = json.loads(report_text(records, "json", target=0.85))
    assert doc["grouped_by"] == ["batch_size"] and doc["target_accuracy"] == 0.85
    assert [p["samples_per_s"] for p in doc["scaling"]] == [90.0, None, 100.0, 200.0, 150.0]
    assert [p["batch_size"] for p in doc["scaling"]] == ["32", "32", "32", "32", "64"]
    assert doc["runs"][1]["error"] == "rank 2 on b: a rank has stopped answering"
    only = json.loads(report_text(records, "json", target=0.85, table="scaling"))
    assert "scaling" in only and "runs" not in only
    md = report_text(records, "md", target=0.85)
    assert "| asgd               | 4       | 200 ± 20  | 0.850     | 1           | 2     | 2.00    | 100%  " in md
    assert "\\toprule" in report_text(records, "latex", target=0.85)
    html = report_text(records, "html", target=0.85)
    assert "<td>TIMEOUT  </td>" in html and "<table>" in html and "<h2>Scaling (medians" in html
    assert report_text(records, "text", target=0.85, table="runs").count("Scaling (") == 0
    assert "Points without an ok result (1" in report_text(records, target=0.85, failed=[("p", "missing", "-")])


@pytest.mark.parametrize("kwargs, line", [
    ({"fmt": "xml"}, "unknown format 'xml'; valid: text, md, latex, csv, json, html"),
    ({"table": "rows"}, "unknown table 'rows'; valid: runs, scaling"),
    ({"fmt": "csv"}, "csv holds one table: add --table runs or --table scaling"),
    ({"group_by": ["lr"]}, "unknown --group-by setting 'lr'; valid: batch_size, evals"),
    ({"group_by": ["batch_size", "seed"]}, "unknown --group-by setting 'seed'; valid: batch_size, evals"),
])
def test_bad_report_options_are_one_line(records, kwargs, line):
    with pytest.raises(UsageError) as refused:
        report_text(records, **kwargs)
    assert str(refused.value) == line


def test_json_lists_failed_points_by_name_and_is_indented_one_space(records):
    text = report_text(records, "json", target=0.85, failed=[("asgd 8 workers", "missing", "-")])
    assert text.startswith('{\n "target_accuracy": 0.85,\n "grouped_by": [\n  "batch_size"')
    assert json.loads(text)["failed_points"] == [{"point": "asgd 8 workers", "result": "missing", "latest_job": "-"}]


def test_the_text_report_lists_unfinished_runs_and_failed_points_after_the_tables(records):
    text = report_text(records, target=0.85, failed=[("asgd 8 workers", "missing", "-")])
    titles = [line for line in text.splitlines() if line.startswith(("Runs", "Scaling", "Points"))]
    assert [t.split(" (")[0] for t in titles] == ["Scaling", "Runs", "Runs that did not finish", "Points without an "
                                                                                                 "ok result"]
    assert report_text(records, target=0.85, table="runs").count("Scaling (") == 0
    assert "Runs (6" not in report_text(records, target=0.85, table="scaling")
    assert report_text([], target=0.85) == ""  # nothing to show: no table, no notes


def test_a_run_without_a_recorded_recipe_says_so(records):
    old = records[0]
    config = {**old.attrs["config"], "schedule": {"lr": 0.1}}  # written before recipes were recorded
    records[0] = dataclasses.replace(old, attrs={**old.attrs, "config": config})
    lines = report_text(records, target=0.85).splitlines()
    assert "Learning-rate recipes: 0.2 flat (2 workers); 0.4 flat (4 workers); not recorded (2 workers)" in lines


def test_a_csv_table_holds_raw_values_and_empty_cells_for_nan():
    columns = [("name", lambda r: r[0], str), ("value", lambda r: r[1], str)]
    assert render(columns, [("a", 1.5), ("b", float("nan")), ("c", 3)], "csv") == "name,value\na,1.5\nb,\nc,3"


def test_missing_result_files_are_one_line(tmp_path):
    with pytest.raises(UsageError) as missing:
        collect([str(tmp_path / "nope.h5")])
    assert str(missing.value) == f"no such result file or directory: {str(tmp_path / 'nope.h5')!r}"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError) as empty:
        collect([str(tmp_path / "empty"), str(tmp_path)])
    assert str(empty.value) == f"no result files (*.h5) in {tmp_path / 'empty'}, {tmp_path}"


def test_every_setting_that_differs_is_named_in_the_grouping_lines():
    a = record("asgd", 2)
    b = record("asgd", 2, batch=64)
    b.attrs["config"]["momentum"] = 0.9
    assert grouping_line([a, b]).endswith("(in the group names, and as columns with --wide): batch_size, momentum")
    assert grouping_line([a, b], group_by=[]) == (
        "Grouped by algorithm and mode only; pooled although they differ: batch_size, momentum")


def test_each_table_alone_and_a_setting_a_run_lacks_shown_as_a_dash(records):
    assert "Runs (6)" in report_text(records, target=0.85, table="runs")
    assert "Scaling (medians" in report_text(records, target=0.85, table="scaling")
    b = record("asgd", 2, batch=64)
    b.attrs["config"]["momentum"] = 0.9  # a key the other run's file does not hold
    doc = json.loads(report_text([record("asgd", 2), b], "json", target=0.85))
    assert [(r["batch_size"], r["momentum"]) for r in doc["runs"]] == [("32", "-"), ("64", "0.9")]
    assert [(p["batch_size"], p["momentum"]) for p in doc["scaling"]] == [("32", "-"), ("64", "0.9")]
    assert "group" not in doc["scaling"][0] and "settings" not in doc["runs"][0]


def test_every_plot_shows_every_group_the_tables_show_under_the_same_label(records):
    doc = json.loads(report_text(records, "json", target=0.85))
    labels = {"allreduce", "asgd", "asgd batch_size=64"}  # batch size differs within asgd alone; 32 is the default
    table = report_text(records, target=0.85, table="scaling").split("\n\n")[2].splitlines()
    assert table[0].startswith("group   ") and {line.split("  ")[0] for line in table[2:]} == labels
    by_plot = {p["plot"]: p for p in doc["plots"]}
    assert sorted(by_plot) == ["accuracy-samples.png", "accuracy-time.png", "efficiency.png", "phases.png",
                               "throughput.png", "time-to-target.png"]
    for name in ("throughput.png", "efficiency.png", "time-to-target.png"):
        assert sorted(c["label"] for c in by_plot[name]["curves"]) == sorted(labels), name
    curves = {c["label"]: c for c in by_plot["throughput.png"]["curves"]}
    assert curves["asgd"]["points"] == [[2, 100.0], [4, 200.0, 20.0]]  # median 200 of 180 and 220
    assert curves["allreduce"]["points"] == [[2, 90.0]]  # its 4-worker point timed out: no number, still a curve
    assert curves["asgd"]["group"] == {"algorithm": "asgd", "mode": "mpi", "batch_size": "32"}
    # Accuracy: a curve per group at each worker count the group has, in a panel per worker count.
    for name in ("accuracy-time.png", "accuracy-samples.png"):
        shown = sorted((c["label"], c["workers"]) for c in by_plot[name]["curves"])
        assert shown == [("allreduce", 2), ("allreduce", 4), ("asgd", 2), ("asgd", 4), ("asgd batch_size=64", 2),
                         ("asgd batch_size=64", 4)]
    accuracy = {(c["label"], c["workers"]): c["points"] for c in by_plot["accuracy-time.png"]["curves"]}
    assert accuracy[("asgd", 4)] == [[0.0, 0.1], [1.0, 0.85], [2.0, 0.9]]
    assert accuracy[("allreduce", 4)] == [] and accuracy[("asgd batch_size=64", 4)] == []  # no such run
    bars = {c["label"]: c["points"] for c in by_plot["phases.png"]["curves"]}
    assert sorted(bars) == ["allreduce, 2 workers", "allreduce, 4 workers", "asgd batch_size=64, 2 workers",
                            "asgd, 2 workers", "asgd, 4 workers"]
    assert bars["asgd, 4 workers"] == [[0, 50.0], [1, 30.0], [2, 20.0], [3, 0.0]]


def test_the_headline_names_the_leader_at_each_worker_count_and_whether_the_repeats_back_it(records):
    leads = json.loads(report_text(records, "json", target=0.85))["headline"]
    four = [lead for lead in leads if lead["workers"] == 4]
    assert [(lead["what"], lead["winner"], lead["value"]) for lead in four] == [
        ("first to accuracy 0.85", "asgd", "1 s"), ("best final accuracy", "asgd", "0.850"),
        ("most samples/s", "asgd", "200")]  # allreduce timed out at 4 workers
    fast = next(lead for lead in leads if lead["workers"] == 2 and lead["what"] == "most samples/s")
    assert (fast["winner"], fast["runner_up"], fast["margin"]) == ("asgd batch_size=64", "asgd",
                                                                   "1.50x more than")
    assert fast["judged"] == "one run each, so no spread to judge it by"
    # Repeats whose ranges overlap are not a lead; ranges apart are.
    def runs(rates_a, rates_b):
        return [record("asgd", 2, seed=i, samples_per_s=v) for i, v in enumerate(rates_a)] + \
            [record("allreduce", 2, seed=i, samples_per_s=v) for i, v in enumerate(rates_b)]

    def judged(rates_a, rates_b):
        doc = json.loads(report_text(runs(rates_a, rates_b), "json", target=0.85))
        return next(lead["judged"] for lead in doc["headline"] if lead["what"] == "most samples/s")

    assert judged([100, 120, 110], [90, 105, 95]).startswith("within the spread of the repeats (3 and 3 runs)")
    assert judged([110, 120, 115], [90, 105, 95]) == "beyond the spread of the repeats (3 and 3 runs)"


def test_runs_cut_short_by_a_step_cap_are_named_before_anything_else(records):
    records[0].attrs["config"]["max_steps"] = 20  # HPCBENCH_MAX_STEPS=20 was set for this run
    text = report_text(records, target=0.85)
    assert text.startswith("CAPPED: 1 of 6 runs stopped early at max_steps (HPCBENCH_MAX_STEPS), so their numbers")
    assert json.loads(report_text(records, "json", target=0.85))["capped_runs"] == ["asgd-2-0.h5"]
    assert report_text(records, "md", target=0.85).startswith("**CAPPED: 1 of 6 runs")
    assert '<p class="capped">CAPPED: 1 of 6 runs' in report_text(records, "html", target=0.85)
    # A cap the run never reached did not cut it: 10 steps per worker asked for, 20 allowed.
    records[0].attrs["config"].update(steps=10, epochs=None, batch_size=32, train_size=1437)
    assert "CAPPED" not in report_text(records, target=0.85)
    records[0].attrs["config"]["steps"] = 30
    assert report_text(records, target=0.85).startswith("CAPPED: 1 of 6 runs")
    records[0].attrs["config"]["max_steps"] = 0
    assert "CAPPED" not in report_text(records, target=0.85)


def labels_of(records) -> dict[str, str]:
    """Each run's group name, as the tables and plots show it, by the run's file name."""
    from hpcbench.report.document import build
    from hpcbench.report.metrics import curve_of

    built = build(records, target=0.85)
    return {row.path: built.labels[curve_of(row, built.keys)] for row in built.rows}


def configured(algo, path, **config):
    """A record of ``algo`` at 2 workers whose configuration also holds ``config``."""
    rec = record(algo, 2)
    rec.attrs["config"].update(config)
    return dataclasses.replace(rec, path=path)


def test_group_names_hold_only_the_settings_that_tell_the_groups_apart_never_null_or_default_values():
    # Runs from three studies pooled in one directory: every one of these settings differs between them,
    # but each study's runs are told apart by one; null, and the defaults (evals 20, warm-up 5 epochs, the
    # mlp, no fault), are never shown.
    base = {"epochs": None, "steps": 300, "evals": 20, "warmup_epochs": 5.0, "model": "mlp", "fault": ""}
    runs = [configured("ga-asgd", "plain.h5", **base),
            configured("ga-asgd", "killed.h5", **{**base, "fault": "kill:2@1", "model": "payload"}),
            configured("ga-asgd", "epochs.h5", **{**base, "epochs": 2.0, "steps": None, "evals": 8,
                                                  "warmup_epochs": 0.0}),
            configured("asgd", "asgd.h5", **base)]
    names = labels_of(runs)
    assert names == {"plain.h5": "ga-asgd", "killed.h5": "ga-asgd fault=kill:2@1 model=payload",
                     "epochs.h5": "ga-asgd epochs=2.0", "asgd.h5": "asgd"}  # (what a run learned always named)
    rows = [line for line in report_text(runs, "md", target=0.85).splitlines() if line.startswith("|")]
    assert not any("null" in row for row in rows) and max(map(len, rows)) <= 120


def test_a_group_that_learned_another_model_says_so():
    """A payload run beside a capped mlp run: the cap alone tells them apart, but what a group learned is
    never left unsaid: the payload group is not named plain asgd."""
    runs = [configured("asgd", "payload.h5", model="payload"), configured("asgd", "mlp.h5", max_steps=20)]
    names = labels_of(runs)
    assert names == {"payload.h5": "asgd model=payload", "mlp.h5": "asgd max_steps=20"}, names


def test_group_names_stay_unique_where_the_values_that_differ_are_null_a_default_or_cut_short():
    fault = "kill:1@1.5,kill:2@2.5,kill:3@3.5,kill:4@4.5,kill:"
    runs = [configured("asgd", "unset.h5", warmup_epochs=None), configured("asgd", "default.h5", warmup_epochs=5.0),
            configured("asgd", "five.h5", fault=fault + "5@5.5"), configured("asgd", "six.h5", fault=fault + "6@6.5")]
    names = labels_of(runs)
    assert len(set(names.values())) == 4, names
    assert not any("null" in name or "None" in name for name in names.values()), names
    assert names["default.h5"] == "asgd warmup_epochs=5.0" and names["unset.h5"] == "asgd warmup_epochs=unset"


def reaching(algo, workers, seed, accuracy, **summary):
    """A record whose evaluations reach ``accuracy`` (at t = 0, 1, 2 s)."""
    rec = record(algo, workers, seed=seed, final_accuracy=accuracy[-1], **summary)
    return dataclasses.replace(rec, evals={"t": np.array([0.0, 1.0, 2.0]), "accuracy": np.array(accuracy)})


@pytest.fixture
def missing():
    """asgd never reaches 0.85; allreduce does in 2 of its 3 seeds; sgp evaluated nothing (numerics off)."""
    never = [reaching("asgd", 2, s, [0.1, 0.5, 0.6]) for s in (0, 1)]
    some = [reaching("allreduce", 2, s, [0.1, 0.9, 0.9] if s < 2 else [0.1, 0.5, 0.6]) for s in range(3)]
    blind = dataclasses.replace(record("sgp", 2, final_accuracy=float("nan")),
                                evals={"t": np.zeros(0), "accuracy": np.zeros(0)})
    return never + some + [blind]


def test_a_group_that_never_reached_the_target_says_never_in_the_tables(missing):
    text = report_text(missing, target=0.85)
    scaling, runs = text.split("\n\nScaling (")[1].split("\n\n")[1], text.split("\n\nRuns (")[1].split("\n\n")[1]
    header = scaling.splitlines()[0].split()
    assert header[:7] == ["group", "workers", "samples/s", "final", "acc", "to", "target"]  # the key columns first
    rows = {line.split()[0]: line for line in scaling.splitlines()[2:]}
    assert " never " in rows["asgd"] + " " and "1 (2 of 3)" in rows["allreduce"] and "never" not in rows["sgp"]
    by_run = [line for line in runs.splitlines()[2:]]
    assert sum(" never" in line for line in by_run) == 3  # two asgd runs and allreduce's third seed
    assert json.loads(report_text(missing, "json", target=0.85, table="scaling"))["scaling"][1]["time_to_target_s"] \
        is None  # machine-readable: still no number


def test_a_group_that_never_reached_the_target_is_marked_in_the_time_to_target_plot(missing):
    doc = json.loads(report_text(missing, "json", target=0.85))
    plot = next(p for p in doc["plots"] if p["plot"] == "time-to-target.png")
    curves = {c["label"]: c for c in plot["curves"]}
    assert curves["asgd"]["points"] == [] and curves["asgd"]["never"] == [2]
    assert curves["allreduce"]["points"] == [[2, 1.0, 0.0]] and "never" not in curves["allreduce"]
    assert curves["sgp"]["points"] == [] and "never" not in curves["sgp"]  # not evaluated: unknown, not never
    pytest.importorskip("matplotlib")
    from hpcbench.report.document import build
    from hpcbench.report.plots import draw_lines, pyplot, styles

    plt = pyplot()
    figure = next(f for f in build(missing, target=0.85).figures if f.name == "time-to-target")
    fig = draw_lines(plt, figure, styles(plt, ["allreduce", "asgd", "sgp"]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "asgd (never reached)" in legend and "allreduce" in legend
    assert [t.get_text() for t in fig.axes[0].child_axes[0].get_yticklabels()] == ["never"]  # the line's name
    plt.close(fig)


def test_with_many_groups_the_accuracy_panels_colour_the_most_accurate_few_and_grey_the_rest():
    runs = [reaching("asgd", 2, 0, [0.1, 0.5, 0.5 + i / 100], lr=0.01 * (i + 1)) for i in range(15)]
    for i, rec in enumerate(runs):
        rec.attrs["config"]["lr"] = 0.01 * (i + 1)
    from hpcbench.report.document import build

    built = build(runs, target=0.85)
    assert len(built.labels) == 15
    figure = next(f for f in built.figures if f.name == "accuracy-time")
    coloured = [s.label for s in figure.series if s.highlight]
    assert len(coloured) == 5 and sorted(coloured) == sorted(
        built.labels[c] for c in built.labels if float(dict(c[2])["lr"]) >= 0.11)  # the five most accurate
    assert all(s.highlight for f in built.figures if f.name == "throughput" for s in f.series)
    pytest.importorskip("matplotlib")
    from hpcbench.report.plots import draw_lines, pyplot, styles

    plt = pyplot()
    fig = draw_lines(plt, figure, styles(plt, sorted(built.labels.values())))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 6 and legend[-1] == "10 other groups (grey)"
    plt.close(fig)


def test_a_legend_of_long_group_names_stays_inside_the_figure(missing):
    """Long group names (settings that differ) wrap onto several lines of one column: no entry is cut at
    the figure's edge, and the figure grows to hold them."""
    pytest.importorskip("matplotlib")
    from hpcbench.report.document import build
    from hpcbench.report.plots import DPI, WIDTH_PX, draw_lines, pyplot, styles

    plt = pyplot()
    figure = next(f for f in build(missing, target=0.85).figures if f.name == "time-to-target")
    long = {s.label: f"{s.label} lr_scaling=sqrt warmup_epochs=0.25 lr_decay_epochs=[0.5, 0.75] momentum=0.9 "
            f"compress=powersgd" for s in figure.series}
    for s in figure.series:
        object.__setattr__(s, "label", long[s.label])
    fig = draw_lines(plt, figure, styles(plt, sorted(long.values())))
    fig.savefig(io.BytesIO(), dpi=DPI)  # lays the figure out
    box = fig.bbox
    texts = fig.legends[0].get_texts()
    assert len(texts) == 3 and all("\n" in t.get_text() for t in texts)
    for t in texts:
        extent = t.get_window_extent()
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0, (t.get_text(), extent, box)
    assert round(fig.get_figwidth() * DPI) == WIDTH_PX
    plt.close(fig)


def test_a_headline_of_timing_only_runs_says_so_instead_of_none_reached_the_target():
    """Runs that measured no accuracy (numerics off, the payload model) did not miss the target: the
    headline says they are timing only; runs that evaluated and missed it say none reached it."""
    from hpcbench.report.headline import leads
    from hpcbench.report.metrics import ScalePoint

    def point(algo, missed):
        nan = float("nan")
        return ScalePoint(algo, "mpi", (), 4, 1, 2, 1000.0, 10.0, 1.0, 1.0, nan, nan, nan,
                          0.5 if missed else nan, 0.0, missed_target=missed)

    for missed, words in ((0, "timing only: no run measured accuracy"), (2, "none reached it")):
        points = [point("asgd", missed), point("allreduce", missed)]
        labels = {p.curve: p.algorithm for p in points}
        first = next(lead for lead in leads(points, labels, 0.9) if lead.what.startswith("first to"))
        assert words in first.line(), first.line()
