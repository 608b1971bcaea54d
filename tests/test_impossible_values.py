"""Every number read from a result file is checked against what it means before anything uses it: an
accuracy outside 0..1 (NaN only where nothing was measured), times that are not finite or run backwards,
a negative count (bytes, steps, samples, staleness), a summary that disagrees with the evaluations it
repeats. Such a file is refused as invalid in one line naming the file, the field and the value, by every
reader: report, diff, check, trace, calibrate, status, a study's kept runs and a tune's choice."""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_files import every_reader_refuses, good_file, quietly

from hpcbench.cli import main
from hpcbench.results.store import result_state, result_status
from hpcbench.tuning.tune import validation_scores

pytestmark = pytest.mark.timeout(300)


def cell(name, row, value):
    """Set row ``row`` of the column ``name`` to ``value`` (the column as floats where the value is one)."""
    def edit(f):
        data = f[name][()]
        if isinstance(value, float):
            data = data.astype(np.float64)
        data[row] = value
        del f[name]
        f[name] = data
    return edit


def attr(key, value):
    def edit(f):
        f["summary"].attrs[key] = value
    return edit


IMPOSSIBLE = {  # → the words of the one line, after "bad.h5 is invalid: "
    "an accuracy of 7": (cell("evals/accuracy", 1, 7.0), "evals/accuracy = 7.0 at row 1: not an accuracy"),
    "a last accuracy of 7 (the summary's too)": (lambda f: (cell("evals/accuracy", -1, 7.0)(f),
                                                            attr("final_accuracy", 7.0)(f)),
                                                 "evals/accuracy = 7.0 at row 3: not an accuracy"),
    "a validation accuracy below 0": (cell("evals/val_accuracy", 2, -0.5), "evals/val_accuracy = -0.5 at row 2"),
    "an infinite accuracy": (cell("evals/accuracy", 0, np.inf), "evals/accuracy = inf at row 0"),
    "a final accuracy of 7": (attr("final_accuracy", 7.0), "summary final_accuracy = 7.0 is not an accuracy"),
    "a best accuracy of 1.5": (attr("best_accuracy", 1.5), "summary best_accuracy = 1.5 is not an accuracy"),
    "a final accuracy that is not the last evaluation's": (
        attr("final_accuracy", 0.75), "summary final_accuracy = 0.75, but the last evaluation's accuracy is"),
    "a best accuracy that is not the evaluations' best": (
        attr("best_accuracy", 0.5), "summary best_accuracy = 0.5, but the evaluations' best accuracy is"),
    "evaluation times that run backwards": (cell("evals/t", 2, 0.01), "evals/t = 0.01 at row 2: before the "
                                                                      "evaluation above it"),
    "a NaN evaluation time": (cell("evals/t", 1, np.nan), "evals/t = nan at row 1: a time that is not finite"),
    "evaluation times before the run began (all of them, in order)": (
        lambda f: f["evals/t"].write_direct(f["evals/t"][()] - 1000.0),
        "evals/t = -1000.0 at row 0 (and 3 more rows): before the run began"),
    "an evaluation long after the run's end": (cell("evals/t", -1, 1e6), "evals/t = 1000000.0 at row 3: after the "
                                                                         "run's end (wall_s = 0.35"),
    "a validation split held out and not scored at the last evaluation": (
        lambda f: f.attrs.modify("config", json.dumps({**json.loads(f.attrs["config"]), "val_size": 100})),
        "evals/val_accuracy = nan at the last evaluation, which scored the test set"),
    "a timeline row that ends before it starts": (cell("timeline/t_end", 5, -1.0), "timeline/t_end = -1.0 at row 5: "
                                                                                   "before the row's t_start"),
    "a negative byte count": (cell("timeline/nbytes", 0, -5), "timeline/nbytes = -5 at row 0: not a count"),
    "a byte count that is not finite": (cell("timeline/nbytes", 4, np.nan), "timeline/nbytes = nan at row 4"),
    "a negative step": (cell("timeline/step", 3, -1), "timeline/step = -1 at row 3: not a count"),
    "negative samples in an evaluation": (cell("evals/samples", 1, -128), "evals/samples = -128 at row 1"),
    "a negative staleness": (cell("server/updates/staleness", 0, -3), "server/updates/staleness = -3 at row 0"),
    "a staleness its versions do not give": (cell("server/updates/staleness", 2, 40),
                                             "server/updates/staleness = 40 at row 2: not version_applied - "
                                             "version_used"),
    "a negative model version": (cell("server/late/version_used", 0, -1), "server/late/version_used = -1 at row 0"),
    "a negative learning rate": (cell("server/updates/lr", 1, -0.1), "server/updates/lr = -0.1 at row 1: negative"),
    "a negative loss": (cell("evals/loss", 0, -2.0), "evals/loss = -2.0 at row 0: negative"),
    "summary samples that are not the last evaluation's": (attr("samples", 999), "summary samples = 999, but the "
                                                                                 "last evaluation's samples is 384"),
    "a negative count in the summary": (attr("echo_bytes", -1), "summary echo_bytes = -1 is not a finite count"),
    "negative bytes per sample": (attr("bytes_per_sample", -7.0), "summary bytes_per_sample = -7.0 is negative"),
    "a negative time to target": (attr("time_to_target_s", -0.5), "summary time_to_target_s = -0.5 is not a "
                                                                  "duration"),
    "a negative count of stalls": (attr("stalls", -1), "summary stalls = -1 is not a finite count"),
    "a negative wait after the budget": (attr("wait_after_budget_s", -2.0),
                                         "summary wait_after_budget_s = -2.0 is not a duration"),
    "a stall that lasted a negative time": (lambda f: stalls_table(f, [1.0, -4.0]),
                                            "server/stalls/duration_s = -4.0 at row 1: negative"),
    "an infinite wall time": (attr("wall_s", np.inf), "summary wall_s = inf is not a duration"),
    "a rate that is not the samples over the wall time": (attr("samples_per_s", 1e30),
                                                          "summary samples_per_s = 1e+30, but samples / wall_s = "),
    "no time for the samples kept": (lambda f: (attr("wall_s", 0.0)(f), attr("samples_per_s", np.nan)(f)),
                                     "summary wall_s = 0 for a run that kept 384 samples"),
    "more samples than the budget keeps, each field agreeing": (lambda f: kept(f, 10**9),
                                                                "summary samples = 1000000000, more than a run of "),
}


def kept(f, samples):
    """The run kept ``samples``: its last evaluation, its summary and its rate all say so."""
    cell("evals/samples", -1, samples)(f)
    attr("samples", samples)(f)
    attr("samples_per_s", samples / f["summary"].attrs["wall_s"])(f)


def stalls_table(f, seconds):
    """A /server/stalls table (worker 1, at 0.5 s and 2 s) whose stalls lasted ``seconds``."""
    group = f["server"].create_group("stalls")
    group["t"], group["worker"] = np.array([0.5, 2.0]), np.array([1, 1])
    group["duration_s"] = np.array(seconds)


@pytest.mark.parametrize("name", IMPOSSIBLE)
def test_each_impossible_value_is_one_line_naming_the_file_the_field_and_the_value_for_every_reader(name, tmp_path):
    change, says = IMPOSSIBLE[name]
    every_reader_refuses(tmp_path, change, f"bad.h5 is invalid: {says}")
    status, why = result_state(tmp_path / "bad.h5")  # what a study and status go by: not ok
    assert status == "invalid" and why.startswith(f"{tmp_path / 'bad.h5'} is invalid: {says}"), why


def edited(path, change):
    with h5py.File(path, "r+") as f:
        change(f)


def test_what_a_real_file_leaves_unmeasured_is_accepted(tmp_path):
    """NaN where nothing was measured (snapshots not scored, no validation split), a loss that is infinite
    (a model that diverged), a file that says its run had not finished: read as they are."""
    path = tmp_path / "unscored.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:
        f.attrs["status"] = "incomplete"
        f.attrs["error"] = "the run had not finished"
        for name in ("accuracy", "loss"):
            data = f[f"evals/{name}"][()]
            data[:] = np.nan if name == "accuracy" else np.inf
            del f[f"evals/{name}"]
            f[f"evals/{name}"] = data
        for key in ("final_accuracy", "best_accuracy"):
            f["summary"].attrs[key] = np.nan
        f["summary"].attrs["final_loss"] = np.inf
    assert result_status(path) == "incomplete" and quietly(["report", str(path)]) == (0, "")


def test_status_lists_an_invalid_file_as_invalid_with_the_field_and_the_value(tmp_path, capsys):
    shutil.copy(good_file(), tmp_path / "fine.h5")
    shutil.copy(good_file(), tmp_path / "seven.h5")
    edited(tmp_path / "seven.h5", cell("evals/accuracy", 1, 7.0))
    (tmp_path / "study.json").write_text(json.dumps({"points": [{"stem": "fine", "algo": "ga-asgd"},
                                                                {"stem": "seven", "algo": "ga-asgd"}]}))
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 points have an ok result" in out and "seven    invalid" in out, out
    assert out.rstrip().endswith(f"{tmp_path / 'seven.h5'} is invalid: evals/accuracy = 7.0 at row 1: not an "
                                 "accuracy (0 to 1, NaN where not measured)"), out


def test_a_kept_run_with_an_impossible_value_is_run_again_and_never_scored(tmp_path, capsys):
    from hpcbench.tuning.execute import Job, run_jobs

    job = Job.of("asgd", 2, ["--steps", "6", "--set", "evals=3", "--set", "val_fraction=0.2"], tmp_path / "a.h5",
                 "asgd, 2 workers")
    assert run_jobs([job], "sim", 1, 60) == {job.path: ""}
    score = validation_scores({job.path: ""})[job.path]
    assert 0 <= score <= 1
    # The kept file's validation accuracy (what a choice reads) becomes 7: it is not kept, but run again.
    edited(job.path, lambda f: (cell("evals/val_accuracy", -1, 7.0)(f), attr("final_val_accuracy", 7.0)(f)))
    capsys.readouterr()
    assert math.isnan(validation_scores({job.path: ""})[job.path])
    assert capsys.readouterr().err == (f"hpcbench: {job.path} is invalid: evals/val_accuracy = 7.0 at row 3: not an "
                                       "accuracy (0 to 1, NaN where not measured); it counts as a failed run\n")
    assert run_jobs([job], "sim", 1, 60) == {job.path: ""}
    out, err = capsys.readouterr()
    assert err.startswith(f"hpcbench: {job.path} is invalid: evals/val_accuracy = 7.0 at row 3") and \
        err.endswith("; it is run again\n") and "1 runs to do" in out and "kept" not in out, (out, err)
    assert validation_scores({job.path: ""})[job.path] == score  # the run made again: the same number


def test_sweep_local_says_it_runs_a_kept_invalid_file_again(tmp_path, monkeypatch, capsys):
    import hpcbench.launch.local as local
    from hpcbench.config import RunConfig
    from hpcbench.launch.local_study import run_local

    kept = tmp_path / "asgd-w2.h5"
    shutil.copy(good_file(), kept)
    edited(kept, cell("evals/accuracy", 1, 7.0))
    launched = []
    monkeypatch.setattr(local, "run_many", lambda launches, *a, **k: launched.extend(launches) or iter(()))
    run_local(["asgd"], [3], RunConfig(dataset="digits", steps=2), str(tmp_path), timeout=30)
    err = " ".join(capsys.readouterr().err.split())
    assert f"hpcbench: {kept} is invalid: evals/accuracy = 7.0 at row 1" in err and "it is run again" in err, err
    assert len(launched) == 1  # the point is run again


def test_a_run_that_ends_well_with_a_file_that_is_not_ok_counts_as_failed(tmp_path, monkeypatch, capsys):
    from hpcbench.runtime.sim import session
    from hpcbench.tuning.execute import Job, run_jobs

    job = Job.of("asgd", 2, ["--steps", "6", "--set", "evals=3"], tmp_path / "a.h5", "asgd, 2 workers")
    simulate = session.simulate

    def and_then_a_negative_byte_count(plan):
        code = simulate(plan)
        edited(job.path, cell("timeline/nbytes", 0, -5))
        return code

    monkeypatch.setattr(session, "simulate", and_then_a_negative_byte_count)
    why = f"{job.path} is invalid: timeline/nbytes = -5 at row 0: not a count (finite and never negative)"
    assert run_jobs([job], "sim", 1, 60) == {job.path: why}
    assert f"asgd, 2 workers: FAILED: {why}" in " ".join(capsys.readouterr().err.split())  # (folded to fit)


# The property: any impossible value Hypothesis draws, in any field of its kind, at any row.
COUNT_FIELDS = ["timeline/step", "timeline/nbytes", "evals/samples", "evals/updates", "server/updates/version_used",
                "server/updates/version_applied", "server/updates/staleness", "server/updates/echo_bytes",
                "server/late/version_used"]
ACCURACY_FIELDS = ["evals/accuracy", "evals/val_accuracy"]
NOT_NEGATIVE_FIELDS = ["evals/loss", "evals/val_loss", "evals/consensus", "server/updates/lr",
                       "server/updates/gap_mean", "server/updates/penalty_mean"]
TIME_FIELDS = ["timeline/t_start", "timeline/t_end", "evals/t", "server/updates/t", "server/late/t"]
SUMMARY = {"count": ["samples", "updates", "late_gradients", "echo_bytes", "server_state_bytes", "workers_lost"],
           "accuracy": ["final_accuracy", "best_accuracy", "final_val_accuracy", "target_accuracy"],
           "not negative": ["bytes_per_sample", "samples_per_s", "final_loss", "staleness_mean", "gap_p99",
                            "compute_fraction", "too_stale"],
           "duration": ["wall_s", "median_step_s", "eval_s", "warmup_s", "time_to_target_s"]}

negative = st.floats(max_value=0, exclude_max=True)  # -inf too
outside_0_1 = st.one_of(st.floats(min_value=1, exclude_min=True), negative)  # inf too
not_counts = st.one_of(st.integers(-2**63, -1), negative, st.sampled_from([math.nan, math.inf]))
not_finite = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def impossible_values(draw):
    """(where, row or None, value, how the line names the field): one impossible value for its field."""
    kind = draw(st.sampled_from(["count", "accuracy", "not negative", "time", "backwards", "summary"]))
    if kind == "summary":
        meaning = draw(st.sampled_from(sorted(SUMMARY)))
        key = draw(st.sampled_from(SUMMARY[meaning]))
        value = draw({"count": not_counts, "accuracy": outside_0_1, "not negative": negative,
                      "duration": st.one_of(negative, st.just(math.inf))}[meaning])
        return key, None, value, f"summary {key}"
    if kind == "backwards":  # an evaluation before the one above it, or a timeline row that ends before it starts
        where = draw(st.sampled_from(["evals/t", "timeline/t_end"]))
        return where, draw(st.integers(1, 3)), -draw(st.floats(min_value=1e-9, max_value=1e300)), where
    fields = {"count": COUNT_FIELDS, "accuracy": ACCURACY_FIELDS, "not negative": NOT_NEGATIVE_FIELDS,
              "time": TIME_FIELDS}[kind]
    where = draw(st.sampled_from(fields))
    value = draw({"count": not_counts, "accuracy": outside_0_1, "not negative": negative, "time": not_finite}[kind])
    return where, draw(st.integers(0, 100)), value, where


def put(path: Path, where: str, row: int | None, value) -> str:
    """The value written into the file at ``path``; → the value as read back, as a line names it."""
    with h5py.File(path, "r+") as f:
        if row is None:
            f["summary"].attrs[where] = value
            return repr(read_run_unchecked(f["summary"].attrs[where]))
        data = f[where][()]
        row %= len(data)
        if where in ("evals/t", "timeline/t_end") and value < 0 and math.isfinite(value) and row:
            # backwards: before the evaluation above it / before the row's own start
            value = (data[row - 1] if where == "evals/t" else f["timeline/t_start"][row]) + value
        if isinstance(value, float) or data.dtype.kind == "f":
            data = data.astype(np.float64)
        data[row] = value
        del f[where]
        f[where] = data
        return f"{repr(data[row].item())} at row {row}"


def read_run_unchecked(value):
    return value.item() if isinstance(value, np.generic) else value


@pytest.mark.slow  # 40 files, each through every reader: about 15 s
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(change=impossible_values())
def test_every_reader_refuses_any_impossible_value_in_one_line_naming_the_field_and_the_value(change):
    where, row, value, field = change
    with tempfile.TemporaryDirectory() as tmp:
        bad, fine = Path(tmp) / "bad.h5", Path(tmp) / "fine.h5"
        shutil.copy(good_file(), bad)
        shutil.copy(good_file(), fine)
        shown = put(bad, where, row, value)
        says = f"{bad} is invalid: {field} = {shown}"
        for argv in (["report", tmp], ["diff", str(fine), str(bad)],
                     ["check", str(bad), "--reference", str(good_file().with_suffix(".toml"))],
                     ["trace", str(bad), "-o", f"{tmp}/t.json"], ["calibrate", str(bad)]):
            code, err = quietly(argv)
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1 and says in lines[0] and "Traceback" not in err, (argv, change, err)
            assert code == (0 if argv[0] == "report" else 2), (argv, code, err)
        status, why = result_state(bad)
        assert status == "invalid" and says in why, (change, why)
        assert math.isnan(validation_scores({bad: ""})[bad])


def test_a_files_stalls_are_listed_by_report_with_the_wait_they_added(tmp_path):
    """A file whose stalls table is sound: report lists each stall (rank, host, from when, how long) beside
    the run's wait after its budget, in text and in json."""
    path = tmp_path / "stalled.h5"
    shutil.copy(good_file(), path)
    edited(path, lambda f: (stalls_table(f, [1.5, 3.25]), attr("stalls", 2)(f), attr("longest_stall_s", 3.25)(f),
                            attr("wait_after_budget_s", 2.0)(f)))
    text = printed(["report", str(path), "--wide"])
    assert "Workers that stalled (2:" in text, text
    rows = [line.split() for line in text.splitlines() if line.startswith("ga-asgd") and "stalled.h5" in line]
    assert [r[-3:] for r in rows][-2:] == [["0.500", "1.500", "2.000"], ["2.000", "3.250", "2.000"]], text
    doc = printed(["report", str(path), "--format", "json"])
    listed = [(s["worker"], s["t"], s["duration_s"]) for s in json.loads(doc)["stalls"]]
    assert listed == [(1, 0.5, 1.5), (1, 2.0, 3.25)]


def printed(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_a_last_evaluation_after_rank_0_read_the_final_models_is_within_the_run(tmp_path):
    """A decentralised run's last evaluation comes after rank 0 has read every worker's final model, which
    can take long past wall_s (the workers' end) over a slow network: its timeline's rows say how long."""
    path = tmp_path / "late.h5"
    shutil.copy(good_file(), path)
    with h5py.File(path, "r+") as f:
        wall = float(f["summary"].attrs["wall_s"])
        for name, value in (("timeline/t_end", wall + 20.0), ("evals/t", wall + 20.5)):
            cell(name, -1, value)(f)
    assert quietly(["report", str(path)])[0] == 0
    with h5py.File(path, "r+") as f:
        cell("evals/t", -1, wall + 30.0)(f)  # past the last row as well
    code, err = quietly(["report", str(path)])
    assert code == 2 and "after the run's end" in err, err
