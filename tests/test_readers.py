"""Readers are strict and keep going: a malformed result file is one line, and over a directory the
others are still reported (exit 1 for skipped files only with --strict)."""
import h5py
import pytest
from test_store import record

from hpcbench.cli import main
from hpcbench.results.store import write_run


def good(path, status="ok"):
    cfg = {"algo": "asgd", "evals": 2, "schedule": {"lr": 0.1, "text": "lr 0.1"}}
    summary = {"wall_s": 1.0, "samples": 32, "samples_per_s": 32.0, "final_accuracy": 0.5}
    rec = record(summary=summary)
    rec.attrs.update(config=cfg, status=status, error="" if status == "ok" else "it stopped")
    return write_run(path, rec)


def break_file(path, how):
    with h5py.File(path, "a") as f:
        if how in ("summary", "evals", "timeline"):
            del f[how]
        elif how == "schema_version":
            f.attrs["schema_version"] = "two"
        elif how == "config":
            f.attrs["config"] = "{not json"
        elif how == "config_list":
            f.attrs["config"] = "[1, 2]"


@pytest.mark.parametrize("how, says", [
    ("summary", "is not a well-formed hpcbench result file (missing"),
    ("evals", "is not a well-formed hpcbench result file (missing"),
    ("timeline", "is not a well-formed hpcbench result file (missing"),
    ("schema_version", "has schema_version 'two', not an integer"),
    ("config", "has a config attribute that is not JSON"),
    ("config_list", "has a config attribute that is not a JSON object"),
])
def test_a_malformed_file_is_one_line_for_every_reader_and_the_rest_are_reported(tmp_path, capsys, how, says):
    bad = good(tmp_path / "bad.h5")
    break_file(bad, how)
    for argv in (["report", str(bad)], ["trace", str(bad), "-o", str(tmp_path / "t.json")],
                 ["calibrate", str(bad)], ["diff", str(bad), str(bad)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (argv, err)
    good(tmp_path / "fine.h5")
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"skipped: {bad}" in err and says in err
    assert "asgd" in out
    assert main(["report", "--strict", str(tmp_path)]) == 1


@pytest.mark.parametrize("status", ["running", "incomplete", "timeout"])
def test_a_file_that_is_not_ok_is_shown_with_its_status_never_as_complete(tmp_path, capsys, status):
    good(tmp_path / "a.h5", status=status)
    assert main(["report", str(tmp_path), "--format", "csv", "--table", "runs"]) == 0
    out = capsys.readouterr().out
    header, row = out.strip().splitlines()
    values = dict(zip(header.split(","), row.split(",")))
    assert values["result"] == status and values["samples_per_s"] == ""
