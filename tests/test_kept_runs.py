"""No run is lost or hidden: a result directory removed while a run writes is made again, a final write
that finds the disk full goes whole to another directory and says where, a complete result whose rename a
killed run left undone is found and given its name, and a resumed study waits for the run an earlier,
killed sweep left going instead of running the point beside it or replacing its file."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_store import record

from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.launch.local_study import run_local
from hpcbench.results.paths import NameHold, partial_name
from hpcbench.results.store import read_run, result_status, write_run
from hpcbench.runtime.output import ResultFile

from conftest import mpirun, requires_mpi


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
    said = " ".join(capsys.readouterr().out.split())  # (lines wrapped to 120 columns)
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


def disk_full_in(monkeypatch, *directories, errno=None):
    """From now on, the final write of a result (status ok) into any of ``directories`` finds the disk full
    after half its bytes: os.write raises ENOSPC (or ``errno``: EDQUOT, a quota), as a full file system
    does. → the statuses of the writes it failed."""
    import errno as errnos
    import os

    errno = errnos.ENOSPC if errno is None else errno

    from hpcbench.results import store

    write, write_file, failing, failed = os.write, store._write_file, [], []

    def noted(partial, rec, final):
        failing.append(final.parent in directories and rec.attrs["status"] == "ok")
        try:
            return write_file(partial, rec, final)
        except BaseException:
            if failing[-1]:
                failed.append(rec.attrs["status"])
            raise
        finally:
            failing.pop()

    def full_disk(fd, data):
        if failing and failing[-1] and Path(os.readlink(f"/proc/self/fd/{fd}")).parent in directories:
            write(fd, bytes(data[:len(data) // 2]))
            raise OSError(errno, os.strerror(errno))
        return write(fd, data)

    monkeypatch.setattr(store, "_write_file", noted)
    monkeypatch.setattr(os, "write", full_disk)
    return failed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed-file", "temporary-name"])
def test_a_final_write_that_finds_the_disk_full_keeps_the_whole_result_elsewhere_and_says_where(
        tmp_path, monkeypatch, capsys, unnamed):
    import tempfile

    from test_session_loopback import COMMON, run_cluster

    from hpcbench.results import store

    full, elsewhere = tmp_path / "full", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))  # the system's temporary directory, here
    if not unnamed:  # a file system without O_TMPFILE: the bytes go to a temporary name first
        monkeypatch.setattr(store, "_unnamed_file", lambda directory: None)
    failed = disk_full_in(monkeypatch, full)  # the worst moment: the last write, after every flush went well
    out = full / "run.h5"
    cfg = RunConfig(algo="asgd", steps=60, out=str(out), **{**COMMON, "evals": 6, "flush_s": 0.05})
    assert run_cluster(cfg, workers=2) == [0, 0, 0]
    assert failed == ["ok"]
    kept = elsewhere / "run.h5"
    said = [line for line in capsys.readouterr().err.splitlines() if "no room" in line]
    assert said == [f"hpcbench: {full} has no room for the result (No space left on device (errno 28)); the result "
                    f"goes to {kept}; {out} keeps the run as of its last write (status 'incomplete')"], said
    rec = read_run(kept)
    assert rec.attrs["status"] == "ok" and len(rec.evals["t"]) == 7 and np.isfinite(rec.evals["accuracy"]).all()
    assert rec.summary["samples"] == rec.attrs["config"]["budget_samples"]
    # What the full directory holds does not look complete: the last flush, and nothing else (no lock, no
    # temporary file a report would take for a complete result).
    assert result_status(out) == "incomplete" and sorted(p.name for p in full.iterdir()) == ["run.h5"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["run.h5"]


def test_a_final_write_with_no_room_anywhere_is_one_line_naming_each_try(tmp_path, monkeypatch):
    from hpcbench.errors import ResultWriteError
    from hpcbench.runtime import output

    full, also = tmp_path / "full", tmp_path / "also-full"
    also.mkdir()
    monkeypatch.setattr(output, "fallback_dirs", lambda: [also])
    out = full / "run.h5"
    result = ResultFile(RunConfig(out=str(out)), 1, "mpi")
    result.write(status(record(), "incomplete"))
    disk_full_in(monkeypatch, full, also)
    with pytest.raises(ResultWriteError) as err:
        result.write(status(record(), "ok"), last=True)
    assert str(err.value) == (f"could not write the result file {str(out)!r}: No space left on device (errno 28); "
                              f"nor in {also}: could not write the result file {str(also / 'run.h5')!r}: No space "
                              "left on device (errno 28)")
    assert result_status(out) == "incomplete" and [p.name for p in full.iterdir() if p.name[0] != "."] == ["run.h5"]
    assert list(also.iterdir()) == []


@pytest.mark.parametrize("errno, cause", [(28, "No space left on device (errno 28)"),
                                          (122, "Disk quota exceeded (errno 122)")], ids=["ENOSPC", "EDQUOT"])
def test_a_simulation_whose_disk_is_full_at_its_only_write_keeps_its_result_elsewhere(tmp_path, monkeypatch,
                                                                                       capsys, errno, cause):
    import tempfile

    full, elsewhere = tmp_path / "full", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    disk_full_in(monkeypatch, full, errno=errno)
    assert main(["simulate", "--algo", "asgd", "--workers", "2", "--steps", "6", "--set", "evals=3", "--out",
                 str(full / "sim.h5")]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == (f"hpcbench: {full} has no room for the result ({cause}); the result goes to "
                           f"{elsewhere / 'sim.h5'}"), err
    assert f"-> {elsewhere / 'sim.h5'} [" in out and read_run(elsewhere / "sim.h5").attrs["status"] == "ok"
    assert list(full.iterdir()) == []


@requires_mpi
@pytest.mark.root  # mounts a tmpfs
@pytest.mark.timeout(240)
def test_a_real_run_whose_small_disk_fills_while_it_trains_loses_nothing():
    import os
    import shutil
    import tempfile
    import threading

    # A directory of its own, not pytest's: another pytest session's clean-up must not move the mount point.
    root = Path(tempfile.mkdtemp(prefix="hpcbench-full-disk-"))
    disk, elsewhere = root / "disk", root / "elsewhere"
    disk.mkdir()
    elsewhere.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if os.geteuid() != 0 or mounted.returncode:
        shutil.rmtree(root)
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    out, filled, ended = disk / "run.h5", threading.Event(), threading.Event()

    def fill():  # once the run has written its file (training has started), something else takes the disk
        while not out.exists():
            if ended.wait(0.01):
                return
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                filled.set()

    try:
        threading.Thread(target=fill, daemon=True).start()
        proc = mpirun(3, "run", "--algo", "asgd", "--dataset", "digits", "--epochs", "20", "--set", "evals=20",
                      "--set", "flush_s=0.2", "--out", str(out), env={"TMPDIR": str(elsewhere)}, timeout=180)
        kept = elsewhere / "run.h5"
        assert proc.returncode == 0 and filled.is_set(), proc.stderr
        assert (f"hpcbench: {disk} has no room for the result (No space left on device (errno 28)); the result goes "
                f"to {kept}; {out} keeps the run as of its last write (status 'incomplete')") in proc.stderr
        assert proc.stdout.rstrip().endswith(f"-> {kept}"), proc.stdout
        rec = read_run(kept)  # every evaluation, every sample
        assert rec.attrs["status"] == "ok" and len(rec.evals["t"]) == 21 and np.isfinite(rec.evals["accuracy"]).all()
        assert rec.summary["samples"] == rec.attrs["config"]["budget_samples"]
        assert result_status(out) == "incomplete" and not list(disk.glob("*.partial"))
    finally:
        ended.set()
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode == 0:
            shutil.rmtree(root)
