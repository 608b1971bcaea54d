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
from hpcbench.report.tables import collect, render, report_text
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
Repeats: runs equal in everything but the seed. Settings that differ between runs keep them apart and are shown as columns: batch_size

Learning-rate recipes: 0.2 flat (2 workers); 0.4 flat (4 workers)

Runs (6; time to target = first evaluation at accuracy >= 0.85; evaluations every 1/evals (evals 2, 4) of a run's samples, so it resolves to that share of the run's time)

algorithm    mode    batch_size    nodes    workers    samples/s    step ms p50/p90/p99    workers' step ms    compute    communicate    wait    final acc    time to target s    staleness mean    staleness p50/p99    penalty mean    too stale    lr
-----------  ------  ------------  -------  ---------  -----------  ---------------------  ------------------  ---------  -------------  ------  -----------  ------------------  ----------------  -------------------  --------------  -----------  ------
allreduce    mpi     32            1        2          90           10.0/12.0/20.0         9.0-11.0            50%        30%            20%     0.900        1.0                 -                 -/-                  -               -            0.2000
allreduce    mpi     32            1        4          TIMEOUT      -/-/-                  -                   -          -              -       -            -                   -                 -/-                  -               -            0.4000
asgd         mpi     32            1        2          100          10.0/12.0/20.0         9.0-11.0            50%        30%            20%     0.900        1.0                 1.5               1/3                  1.00            2            0.2000
asgd         mpi     32            2        4          180          10.0/12.0/20.0         9.0-11.0            50%        30%            20%     0.900        1.0                 1.5               1/3                  1.00            2            0.4000
asgd         mpi     32            2        4          220          10.0/12.0/20.0         9.0-11.0            50%        30%            20%     0.800        1.0                 1.5               1/3                  1.00            2            0.4000
asgd         mpi     64            1        2          150          10.0/12.0/20.0         9.0-11.0            50%        30%            20%     0.900        1.0                 1.5               1/3                  1.00            2            0.2000

Scaling (medians over repeats; speedup and efficiency against each curve's fewest workers)

algorithm    mode    batch_size    nodes    workers    runs          samples/s    ± spread    speedup    efficiency    time to target s    ttt speedup    ttt efficiency    final acc    staleness mean
-----------  ------  ------------  -------  ---------  ------------  -----------  ----------  ---------  ------------  ------------------  -------------  ----------------  -----------  ----------------
allreduce    mpi     32            1        2          1             90           0           1.00       100%          1.0                 1.00           100%              0.900        -
allreduce    mpi     32            1        4          0 (1 failed)  TIMEOUT      -           -          -             -                   -              -                 -            -
asgd         mpi     32            1        2          1             100          0           1.00       100%          1.0                 1.00           100%              0.900        1.5
asgd         mpi     32            2        4          2             200          20          2.00       100%          1.0                 1.00           50%               0.850        1.5
asgd         mpi     64            1        2          1             150          0           1.00       100%          1.0                 1.00           100%              0.900        1.5

Runs that did not finish (1; shown above without numbers)

algorithm    workers    result    got to                              error                                      file
-----------  ---------  --------  ----------------------------------  -----------------------------------------  ----------------
allreduce    4          timeout   250 of 1000 samples (25%) in 4.0 s  rank 2 on b: a rank has stopped answering  allreduce-4-0.h5"""


def test_the_text_report_cell_by_cell(records):
    # asgd at 4: median of 180 and 220 = 200 ± 20; speedup 200/100 = 2.00 with twice the workers: 100%;
    # both reach 0.85 at t = 1 s, as at 2 workers: ttt speedup 1.00, over twice the workers 50%; final
    # accuracy the median of 0.9 and 0.8. Batch 64 differs within asgd's curve: a curve of its own.
    # allreduce's evals (4) differ from asgd's (2) but not within a curve: no column.
    assert report_text(records, target=0.85) == TEXT


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


def test_group_by_pools_what_it_does_not_name_and_says_so(records):
    text = report_text(records, target=0.85, group_by=["evals"])
    assert text.splitlines()[0] == "Grouped by --group-by evals; pooled although they differ: batch_size"
    assert report_text(records, target=0.85, group_by=[]).splitlines()[0] == (
        "Grouped by algorithm and mode only; pooled although they differ: batch_size")
    assert report_text(records, target=0.85, group_by=["batch_size", "evals"]).splitlines()[0] == (
        "Grouped by --group-by batch_size,evals")
    same = [r for r in records if r.algorithm == "asgd" and r.attrs["config"]["batch_size"] == 32]
    assert report_text(same, target=0.85).splitlines()[0] == (
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
    assert "| asgd        | mpi    | 32           | 2       | 4         | 2            | 200         | 20         | 2.00" in md
    assert "\\toprule" in report_text(records, "latex", target=0.85)
    html = report_text(records, "html", target=0.85)
    assert "<td>TIMEOUT    </td>" in html and "<table>" in html and "<h2>Scaling (medians" in html
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
    assert [t.split(" (")[0] for t in titles] == ["Runs", "Scaling", "Runs that did not finish", "Points without an ok result"]
    assert report_text(records, target=0.85, table="runs").count("Scaling (") == 0
    assert "Runs (6" not in report_text(records, target=0.85, table="scaling")
    assert report_text([], target=0.85) == ""  # nothing to show: no table, no notes


def test_a_run_without_a_recorded_recipe_says_so(records):
    old = records[0]
    config = {**old.attrs["config"], "schedule": {"lr": 0.1}}  # written before recipes were recorded
    records[0] = dataclasses.replace(old, attrs={**old.attrs, "config": config})
    lines = report_text(records, target=0.85).splitlines()
    assert lines[2] == "Learning-rate recipes: 0.2 flat (2 workers); 0.4 flat (4 workers); not recorded (2 workers)"


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
    assert report_text([a, b], target=0.85).splitlines()[0].endswith("shown as columns: batch_size, momentum")
    assert report_text([a, b], target=0.85, group_by=[]).splitlines()[0] == (
        "Grouped by algorithm and mode only; pooled although they differ: batch_size, momentum")


def test_each_table_alone_and_a_setting_a_run_lacks_shown_as_a_dash(records):
    assert "Runs (6;" in report_text(records, target=0.85, table="runs")
    assert "Scaling (medians" in report_text(records, target=0.85, table="scaling")
    b = record("asgd", 2, batch=64)
    b.attrs["config"]["momentum"] = 0.9  # a key the other run's file does not hold
    doc = json.loads(report_text([record("asgd", 2), b], "json", target=0.85))
    assert [(r["batch_size"], r["momentum"]) for r in doc["runs"]] == [("32", "-"), ("64", "0.9")]
    assert [(p["batch_size"], p["momentum"]) for p in doc["scaling"]] == [("32", "-"), ("64", "0.9")]
    assert "group" not in doc["scaling"][0] and "settings" not in doc["runs"][0]
