"""What demo, sweep --local, tune and reproduce print fits 120 columns: a line per finished run that keeps
its label and result, long lines wrapped, a report's tables too wide for the terminal left to its file."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.terminal import COLUMNS, fitted, for_terminal, result_briefs, wrapped
from hpcbench.tuning.execute import Job, say

from conftest import cli, requires_mpi

# The longest labels the studies give their runs (reproduce.runner.planned, tuning.tune.grid_jobs).
LABELS = ["diloco-h15, 128 workers, lr 0.0125, momentum 0.9, outer lr 0.7, seed 1002, 1 GbE",
          "osgp, 32 workers, lr 0.05, momentum 0.9, seed 1002, 100 Gb/s InfiniBand",
          "dana-ga, 32 workers, lr 0.1, momentum 0, seed 2",
          "ga-asgd, 64 workers, lr 0.1, momentum 0.9, decay at 1.5,2.25, seed 1001",
          "easgd-sync on 129 ranks, repeat 3"]
COUNTS = ["[180/240, 1 h 27 min so far, about 29 min 19 s left]", "[180/240, ~29 min 19 s left]", "[180/240]"]


def widest(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


def test_a_finished_run_is_one_line_with_its_label_whole_and_its_result(tmp_path):
    code, out, err = cli("simulate", "--algo", "dana-ga", "--workers", "4", "--steps", "2", "--set",
                         "val_fraction=0.1", "--set", "evals=2", "--out", str(tmp_path / "r.h5"))
    assert code == 0, err
    line = out.splitlines()[0]
    assert line.startswith("dana-ga (sim, 4 workers): ") and len(line) > COLUMNS  # the run's own line is long
    briefs = result_briefs(line)
    accuracy = line.split("final accuracy ")[1][:5]
    validation = line.split("(validation ")[1][:5]
    assert briefs[0].startswith(f"accuracy {accuracy}, validation {validation}, ") and "samples/s" in briefs[0]
    assert briefs[0].endswith(" s virtual") and briefs[1] == f"accuracy {accuracy}, validation {validation}"
    assert briefs[2] == f"acc {accuracy}, val {validation}"
    for label in LABELS:
        shown = fitted(COUNTS, label, briefs)
        assert len(shown) <= COLUMNS and f" {label}: " in shown and accuracy in shown, shown
    assert fitted(COUNTS, "asgd", briefs[1:]) == f"{COUNTS[0]} asgd: {briefs[1]}"  # the longest count that fits
    assert fitted(COUNTS, "asgd on 3 ranks", briefs) == f"{COUNTS[1]} asgd on 3 ranks: {briefs[0]}"  # then brief
    cut = fitted(COUNTS, "x" * 200, briefs)  # a label that cannot fit is cut, the result kept
    assert len(cut) == COLUMNS and cut.endswith(f"…: {briefs[2]}")


def test_the_brief_keeps_what_matters_of_a_run_that_lost_workers_or_was_capped():
    line = ("asgd (mpi, 4 workers, 1 of 4 lost): 28736 samples in 4.1 s = 7009 samples/s, timing only (no model "
            "trained), 3 gradients dropped [capped at 20 steps per worker by max_steps: a smoke test, not a "
            "measurement] -> results/x.h5")
    assert result_briefs(line) == [
        "timing only, 1 of 4 lost, 3 gradients dropped, capped, 7009 samples/s, 4.1 s",
        "timing only, 1 of 4 lost, 3 gradients dropped, capped",
        "timing only, 1 of 4 lost, 3 gradients dropped, capped"]
    assert result_briefs("something else -> x.h5") == ["something else"]


def test_a_failed_run_is_said_whole_in_lines_that_fit(capsys, tmp_path):
    job = Job.of("asgd", 2, ["--steps", "2"], tmp_path / "x.h5", LABELS[0])
    why = "a rank has stopped answering (nothing heard past timeout_s): " + ", ".join(f"worker {i} for 120 s"
                                                                                     for i in range(1, 12))
    say(COUNTS[:2], job, why, "")
    err = capsys.readouterr().err
    assert widest(err) <= COLUMNS and " ".join(err.split()) == f"{COUNTS[0]} {LABELS[0]}: FAILED: {why}"


def test_a_report_for_the_terminal_wraps_its_prose_and_names_the_file_of_a_table_too_wide():
    wide = "| network | " + " | ".join(f"allreduce final acc % {i}" for i in range(8)) + " |"
    text = "\n".join(["# A study", "", "**In short: " + "the claim holds · " * 20 + "**", "",
                      "- a list item " + "that goes on " * 15, "  - a nested one " + "and on " * 25, "",
                      wide, "|" + "---|" * 9, "| 10 GbE | " + " | ".join("0.5" for _ in range(8)) + " |", "",
                      "| lr | chosen |", "|----|--------|", "| 0.05 | yes |"])
    shown = for_terminal(text, "out/report.md")
    assert widest(shown) <= COLUMNS
    assert "| lr | chosen |" in shown and "| 0.05 | yes |" in shown  # a table that fits is kept
    assert wide not in shown and "here a table of 1 row(s) and 9 columns, 219 characters wide: it is in " \
        "out/report.md)" in " ".join(shown.split())
    assert " ".join(shown.split()) .count("the claim holds") == 20
    lines = shown.splitlines()
    nested = lines.index(next(line for line in lines if line.startswith("  - a nested one")))
    assert lines[nested + 1].startswith("    ") and lines[nested + 1][4] != " "  # under the item's text
    assert wrapped("short") == "short"


def each_line_fits(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    long = [line for line in (proc.stdout + proc.stderr).splitlines() if len(line) > COLUMNS]
    assert not long, "\n".join(long)


def hpcbench(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPCBENCH_MAX_STEPS": "2", "HPCBENCH_PROGRESS": "0",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "hpcbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow  # a tune and a toy study, simulated: about a minute on 2 busy cores
@pytest.mark.timeout(300)
def test_every_line_of_tune_and_reproduce_fits_120_columns(tmp_path):
    each_line_fits(hpcbench("tune", "--algo", "asgd,ga-asgd", "--workers", "2", "--lr", "0.05,0.1", "--seeds", "0",
                            "--out-dir", str(tmp_path / "tune"), cwd=tmp_path, timeout=240))
    # sgp: the longest labels (its networks), the widest tables of any study's report
    each_line_fits(hpcbench("reproduce", "sgp", "--preset", "toy", "--seeds", "0", "--out-dir",
                            str(tmp_path / "sgp"), cwd=tmp_path, timeout=240))


@requires_mpi
@pytest.mark.timeout(300)
def test_every_line_of_a_local_sweep_fits_120_columns(tmp_path):
    """The demo prints its runs as a local sweep does (launch.local_study.run_local; test_readme runs the demo
    and holds its lines to the same width)."""
    each_line_fits(hpcbench("sweep", "--local", "--ranks", "3", "--algos", "asgd,local-sgd", "--out-dir",
                            str(tmp_path / "a-study-directory-with-a-rather-long-name"), cwd=tmp_path, timeout=240))
