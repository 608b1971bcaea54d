"""No run is lost or hidden: a result directory removed while a run writes is made again, a complete
result whose rename a killed run left undone is found and given its name, and a resumed study waits for
the run an earlier, killed sweep left going instead of running the point beside it or replacing its file."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from test_store import record

from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.launch.local_study import run_local
from hpcbench.results.paths import NameHold, partial_name
from hpcbench.results.store import read_run, result_status, write_run
from hpcbench.runtime.output import ResultFile


def status(rec, value):
    rec.attrs.update(status=value, error="" if value == "ok" else "it had not finished")
    return rec


@pytest.mark.slow  # rm -rf while the run writes
def test_a_result_directory_removed_while_the_run_writes_is_made_again_and_the_record_kept(tmp_path, capsys):
    out = tmp_path / "results" / "run.h5"
    result = ResultFile(RunConfig(out=str(out)), 1, "mpi")
    result.write(status(record(), "incomplete"))
    subprocess.run(["rm", "-rf", str(tmp_path / "results")], check=True)
    path = result.write(status(record(), "ok"), last=True)
    assert read_run(path).attrs["status"] == "ok" and str(tmp_path / "results") in path
    assert "was removed while this run wrote into it; it is made again" in capsys.readouterr().err


@pytest.mark.slow  # rm -rf while the run writes
def test_a_result_whose_directory_cannot_be_made_again_goes_to_the_temporary_directory(tmp_path, capsys):
    out = tmp_path / "results" / "run.h5"
    result = ResultFile(RunConfig(out=str(out)), 1, "mpi")
    result.write(status(record(), "incomplete"))
    subprocess.run(["rm", "-rf", str(tmp_path / "results")], check=True)
    (tmp_path / "results").write_text("a file where the directory was")
    path = result.write(status(record(), "ok"), last=True)
    assert read_run(path).attrs["status"] == "ok"
    assert "cannot be made again" in capsys.readouterr().err
    assert result_status(path) == "ok"


def killed_in_the_rename(directory, final_status="ok"):
    """What a rank 0 killed between writing its last image and renaming it leaves: the file it wrote
    earlier (incomplete) and the complete one under its temporary name."""
    final = directory / "asgd.h5"
    write_run(final, status(record(), "incomplete"))
    partial = partial_name(final, "ab12cd")
    write_run(partial, status(record(), final_status))
    return final, partial


def test_report_finds_a_complete_result_left_under_its_temporary_name_and_gives_it_its_name(tmp_path, capsys):
    final, partial = killed_in_the_rename(tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"{partial} was a complete result (ok) whose rename a killed run did not finish: it is now {final}" in err
    assert result_status(final) == "ok" and not partial.exists()
    assert "asgd" in out and "unfinished" not in out.lower()


def test_a_temporary_file_of_a_live_run_or_an_unfinished_one_is_left_alone(tmp_path, capsys):
    final, partial = killed_in_the_rename(tmp_path)
    hold = NameHold(final)
    assert hold.take()
    try:
        main(["report", str(tmp_path)])
        assert partial.exists() and result_status(final) == "incomplete"
    finally:
        hold.release()
    other = tmp_path / "other"
    other.mkdir()
    final, partial = killed_in_the_rename(other, final_status="incomplete")
    main(["report", str(other)])
    assert partial.exists() and result_status(final) == "incomplete"


def test_a_studys_status_counts_the_promoted_result_as_ok(tmp_path, capsys):
    (tmp_path / "study.json").write_text('{"points": [{"stem": "asgd", "algo": "asgd", "ranks": 2, "repeat": 0}], '
                                         '"local": true}')
    final, partial = killed_in_the_rename(tmp_path)
    from hpcbench.results.study_dir import point_states
    assert [p.result for p in point_states(tmp_path)] == ["ok"] and not partial.exists()


@pytest.mark.slow  # a Python that holds the name
@pytest.mark.timeout(60)
def test_resume_waits_for_the_run_a_killed_sweep_left_going_and_keeps_its_ok_file(tmp_path, capsys):
    out = tmp_path / "asgd-w2.h5"
    ready = tmp_path / "ready"
    done = write_run(tmp_path / "finished.h5", status(record(), "ok"))
    orphan = subprocess.Popen([sys.executable, "-c", f"""
import os, pathlib, time
from hpcbench.results.paths import NameHold
hold = NameHold(pathlib.Path({str(out)!r}))
assert hold.take()
pathlib.Path({str(ready)!r}).touch()
time.sleep(2)
os.replace({str(done)!r}, {str(out)!r})
hold.release()
"""])
    while not ready.exists():
        time.sleep(0.05)
    files, failures = run_local(["asgd"], [3], RunConfig(dataset="digits", steps=2), str(tmp_path), timeout=30)
    orphan.wait(10)
    said = capsys.readouterr().out
    assert f"still writes {out} (pid {orphan.pid}); waiting for it to end" in said
    assert "kept (an ok result is already in" in said and files == [out] and not failures
    assert result_status(out) == "ok"


@pytest.mark.timeout(60)
def test_resume_gives_up_on_an_orphan_that_outlasts_the_timeout_in_one_line(tmp_path, capsys):
    out = tmp_path / "asgd-w2.h5"
    hold = NameHold(out)
    assert hold.take()
    try:
        files, failures = run_local(["asgd"], [3], RunConfig(dataset="digits", steps=2), str(tmp_path), timeout=1.5)
    finally:
        hold.release()
    assert files == [] and len(failures) == 1 and "still writes" in failures[0] and "after 1.5 s" in failures[0]
