"""A run that fails still leaves a result file saying how it ended, and the report shows it as a failed
cell: real MPI runs stopped by a signal (on a worker, or Ctrl-C on mpiexec) or past their timeout;
the report, diff and check over records that did not finish."""
from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hpcbench.errors import PeerFailure, Stopped, UsageError, WaitTimeout, error_line, failure_status
from hpcbench.launch.local import (
    RANK_VARS,
    launch_env,
    mpi_command,
    mpi_family,
    mpiexec_path,
    own_lines,
    reclaim_stale_sessions,
)
from hpcbench.results.store import read_run, result_status, write_run

from conftest import cli, mpirun, requires_mpi

pytestmark = pytest.mark.both  # depends on the MPI family: run under each (.ci/run)

RANKS = 3


def rank_pids(marker: str) -> dict[int, int]:
    """The processes whose command line holds ``marker``, by their MPI rank (as their launcher told them)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            for item in environ:
                name, _, value = item.decode(errors="replace").partition("=")
                if name == RANK_VARS[0] or name == "OMPI_COMM_WORLD_RANK":
                    found[int(value)] = int(pid)
    return found


def stop_mid_run(out: Path, victim: str, sig: signal.Signals, *args: str,
                 meanwhile: Callable[[], None] | None = None) -> tuple[int, str]:
    """Start a long run, wait for its first progress line (training has begun), call ``meanwhile``,
    send ``sig`` to ``victim`` ("mpiexec" or a rank number); → (exit code, stderr)."""
    cmd = mpi_command(RANKS, ["run", *args, "--set", "progress_s=0.2", "--out", str(out)])
    env = {**launch_env(RANKS), "HPCBENCH_PROGRESS": ""}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "samples (" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(120), f"no progress line in 120 s: {''.join(lines)}"
        if meanwhile is not None:
            meanwhile()
        if victim == "mpiexec":
            os.kill(proc.pid, sig)
        else:
            deadline = time.monotonic() + 10
            while int(victim) not in (pids := rank_pids(str(out))) and time.monotonic() < deadline:
                time.sleep(0.1)
            os.kill(pids[int(victim)], sig)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    return proc.returncode, "".join(lines)


def failed_cell(path: Path) -> tuple[dict[str, str], str]:
    """The scaling row of the report over ``path`` (csv) and the text report."""
    code, out, err = cli("report", str(path), "--format", "csv", "--table", "scaling")
    assert code == 0, err
    (row,) = list(csv.DictReader(io.StringIO(out)))
    code, text, err = cli("report", str(path))
    assert code == 0, err
    return row, text


@requires_mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim, sig", [("2", signal.SIGTERM), ("mpiexec", signal.SIGINT), ("1", signal.SIGUSR1)])
def test_a_stopped_run_leaves_an_aborted_file_with_what_rank0_recorded(tmp_path, victim, sig):
    out = tmp_path / "stopped.h5"
    code, err = stop_mid_run(out, victim, sig, "--algo", "asgd", "--epochs", "200")
    assert code != 0
    # Open MPI's launcher passes a Ctrl-C on to the ranks as SIGTERM, and forwards nothing they print after
    relayed = victim == "mpiexec" and mpi_family(mpiexec_path()) == "openmpi"
    seen = signal.SIGTERM if relayed else sig
    assert relayed or f"stopped by {seen.name}" in err
    assert result_status(out) == "aborted", err
    rec = read_run(out)
    assert f"stopped by {seen.name}" in rec.attrs["error"]
    if victim != "mpiexec":
        assert rec.attrs["error"].startswith(f"rank {victim} on ")  # the rank that was stopped is named
    # What rank 0 recorded until then: its own timeline, the evaluations (scored) and every update.
    assert set(rec.timeline["rank"].tolist()) == {0} and rec.timeline["rank"].size > 0
    assert rec.evals["t"].size >= 1 and rec.evals["accuracy"][0] > 0
    assert 0 < rec.tables["updates"]["t"].size < rec.attrs["config"]["budget_samples"]
    assert rec.summary["wall_s"] > 0
    assert not list(tmp_path.glob("*.partial"))
    row, text = failed_cell(tmp_path)
    assert row["result"] == "aborted" and row["failed"] == "1" and row["samples_per_s"] == ""
    assert "ABORTED" in text and "Runs that did not finish (1" in text


@requires_mpi
@pytest.mark.timeout(300)
def test_a_live_runs_file_is_never_replaced_by_another_run_and_never_rewritten_once_replaced(tmp_path):
    """Run B's --overwrite onto running run A's file is refused (A holds the name); a file put over A's
    by something else is left alone, and A goes on under a name of its own."""
    out = tmp_path / "a.h5"
    seen: dict[str, object] = {}

    def meanwhile() -> None:
        while not out.exists():
            time.sleep(0.05)
        seen["b"] = mpirun(RANKS, "run", "--algo", "asgd", "--steps", "5", "--out", str(out), "--overwrite",
                           timeout=120)
        seen["after_b"] = result_status(out)
        foreign = tmp_path / "foreign"
        foreign.write_bytes(b"another tool's file")
        os.replace(foreign, out)
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("a-*.h5"))) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)

    code, err = stop_mid_run(out, "mpiexec", signal.SIGINT, "--algo", "asgd", "--epochs", "200",
                             "--set", "flush_s=0.3", meanwhile=meanwhile)
    b = seen["b"]
    assert b.returncode == 2, b.stderr
    assert own_lines(b.stderr)[-1] == (
        f"hpcbench: error: --out {str(out)!r} belongs to a run that is still going (it holds .a.h5.lock): "
        "--overwrite replaces only a finished run's file; choose another --out, or wait for that run to end")
    assert seen["after_b"] == "incomplete"  # still A's file
    assert out.read_bytes() == b"another tool's file"  # left alone once replaced
    (moved,) = tmp_path.glob("a-*.h5")
    assert f"{out} is no longer the file this run wrote" in err and f"the result goes to {moved}" in err
    assert code != 0 and result_status(moved) == "aborted"
    assert read_run(moved).tables["updates"]["t"].size > 0
    assert not list(tmp_path.glob(".*.lock")) and not list(tmp_path.glob("*.partial"))  # nothing left behind


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of ``pid``'s child processes."""
    found = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append((int(child), cmdline))
    return found


@requires_mpi
@pytest.mark.timeout(300)
def test_ranks_whose_launcher_died_end_themselves_and_leave_an_aborted_file(tmp_path):
    out = tmp_path / "orphans.h5"
    timeout_s = 4.0
    cmd = mpi_command(RANKS, ["run", "--algo", "asgd", "--epochs", "200", "--set", f"timeout_s={timeout_s}",
                              "--set", "progress_s=0.2", "--out", str(out)])
    proc = subprocess.Popen(cmd, env={**launch_env(RANKS), "HPCBENCH_PROGRESS": ""}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while result_status(out) != "incomplete" and time.monotonic() < deadline:
            time.sleep(0.1)
        ranks = rank_pids(str(out))
        assert len(ranks) == RANKS, ranks
        # MPICH's Hydra starts each node's ranks from a proxy; Open MPI's launcher starts them itself
        proxies = [pid for pid, cmdline in children(proc.pid) if "hydra_pmi_proxy" in cmdline]
        (proxy,) = proxies or [proc.pid]
        os.kill(proxy, signal.SIGKILL)
        killed = time.monotonic()
        while rank_pids(str(out)) and time.monotonic() - killed < timeout_s + 10:
            time.sleep(0.1)
        assert rank_pids(str(out)) == {}, "ranks went on without their launcher"
        ended_after = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert ended_after < timeout_s
    rec = read_run(out)
    if mpi_family(mpiexec_path()) == "openmpi":  # its ranks end with the launcher that started them:
        assert rec.attrs["status"] == "incomplete", rec.attrs  # the file is rank 0's last rewrite
    else:
        assert rec.attrs["status"] == "aborted", rec.attrs
        assert "the launcher that started this rank" in rec.attrs["error"] and "has gone" in rec.attrs["error"]
        assert rec.tables["updates"]["t"].size > 0
        assert not list(tmp_path.glob(".*.lock"))  # (a killed rank 0 leaves its lock's file, not its lock)
    assert not list(tmp_path.glob("*.partial"))


@requires_mpi
@pytest.mark.timeout(300)
def test_a_run_past_its_timeout_leaves_a_timeout_file_and_a_failed_cell(tmp_path):
    # A worker 100000x slower than the other (a 1 ms gradient takes 100 s): someone's wait passes
    # timeout_s long before the run ends (at 1000x the step took 1 s, and the run trained to its end).
    out = tmp_path / "late.h5"
    proc = mpirun(RANKS, "run", "--algo", "allreduce", "--steps", "200", "--stragglers", "0.5:100000",
                  "--set", "timeout_s=3", "--out", str(out))
    assert proc.returncode != 0
    rec = read_run(out)
    assert rec.attrs["status"] == "timeout"
    # Two clocks run out at about the same moment, and either may end the run: the other worker's wait
    # for the all-reduce (3 s), or rank 0 hearing nothing from the straggler, whose stretched compute
    # sleeps without a heartbeat, for timeout_s.
    error = rec.attrs["error"]
    assert error.startswith("rank ") and ("timed out after 3 s" in error or (
        "a rank has stopped answering (nothing heard past timeout_s)" in error and error.endswith("for 3 s")))
    assert error in proc.stderr
    row, text = failed_cell(tmp_path)
    assert (row["result"], row["repeats"], row["failed"]) == ("timeout", "0", "1")
    assert "TIMEOUT" in text and rec.attrs["error"] in text


# --- the report over records that did not finish (simulated runs, marked as a failed run would be) ---

def simulate(path: Path, workers: int, seed: int = 0) -> Path:
    code, _, err = cli("simulate", "--numerics", "off", "--steps", "30", "--algo", "asgd",
                       "--workers", str(workers), "--seed", str(seed), "--out", str(path))
    assert code == 0, err
    return path


def mark_failed(path: Path, status: str, error: str) -> None:
    rec = read_run(path)
    rec.attrs.update(status=status, error=error)
    write_run(path, rec, overwrite=True)


def scaling(path: Path, *flags: str) -> dict[int, dict[str, str]]:
    code, out, err = cli("report", str(path), "--format", "csv", "--table", "scaling", *flags)
    assert code == 0, err
    return {int(r["workers"]): r for r in csv.DictReader(io.StringIO(out))}


def test_failed_runs_are_counted_never_averaged_and_the_base_is_the_first_finished_point(tmp_path):
    simulate(tmp_path / "w1.h5", 1)                      # failed: the curve's base moves to 2 workers
    mark_failed(tmp_path / "w1.h5", "failed", "rank 1 on a: CUDA error")
    simulate(tmp_path / "w2.h5", 2)
    simulate(tmp_path / "w4-s0.h5", 4, seed=0)
    simulate(tmp_path / "w4-s1.h5", 4, seed=1)           # a failed repeat beside a finished one
    mark_failed(tmp_path / "w4-s1.h5", "timeout", "rank 0 on a: timed out after 9 s")
    points = scaling(tmp_path)
    assert (points[1]["result"], points[1]["repeats"], points[1]["failed"]) == ("failed", "0", "1")
    assert points[1]["samples_per_s"] == "" and points[1]["speedup"] == ""
    finished4 = float(read_run(tmp_path / "w4-s0.h5").summary["samples_per_s"])
    base = float(read_run(tmp_path / "w2.h5").summary["samples_per_s"])
    assert (points[4]["result"], points[4]["repeats"], points[4]["failed"]) == ("ok", "1", "1")
    assert float(points[4]["samples_per_s"]) == pytest.approx(finished4, rel=1e-9)
    assert float(points[2]["speedup"]) == pytest.approx(1.0)
    assert float(points[4]["speedup"]) == pytest.approx(finished4 / base, rel=1e-9)
    assert float(points[4]["efficiency"]) == pytest.approx(finished4 / base / 2, rel=1e-9)
    code, text, _ = cli("report", str(tmp_path))
    assert "FAILED" in text and "1 (1 failed)" in text and "CUDA error" in text and "timed out after 9 s" in text
    code, out, _ = cli("report", str(tmp_path), "--format", "json")
    assert code == 0 and '"result": "timeout"' in out


def test_a_point_that_failed_after_is_a_regression_and_a_check_miss(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    simulate(before / "w2.h5", 2)
    simulate(after / "w2.h5", 2)
    mark_failed(after / "w2.h5", "timeout", "rank 0 on a: timed out after 9 s")
    code, out, _ = cli("diff", str(before), str(after), "--fail-above", "50")
    assert code == 1 and "regression:" in out
    ref = tmp_path / "ref.toml"
    ref.write_text("[asgd.2]\nsamples_per_s = [0, 1e12]\n")
    code, out, _ = cli("check", str(after), "--reference", str(ref))
    assert code == 1 and "miss:" in out


def test_status_is_written_last_and_older_files_read_without_an_error_line(tmp_path):
    path = simulate(tmp_path / "ok.h5", 1)
    rec = read_run(path)
    assert (rec.attrs["status"], rec.attrs["error"]) == ("ok", "")
    import h5py

    with h5py.File(path, "a") as f:  # as files written before failed runs left records
        del f.attrs["error"]
    assert read_run(path).attrs["error"] == ""
    mark_failed(path, "aborted", "rank 2 on a: stopped by SIGTERM")
    assert result_status(path) == "aborted"
    assert read_run(path).attrs["error"] == "rank 2 on a: stopped by SIGTERM"


@pytest.mark.parametrize("exc, status, line", [
    (WaitTimeout("timed out after 3 s waiting for a barrier"), "timeout", "timed out after 3 s waiting for a barrier"),
    (Stopped("stopped by SIGTERM"), "aborted", "stopped by SIGTERM"),
    (KeyboardInterrupt(), "aborted", "KeyboardInterrupt"),
    (PeerFailure("rank 3 on b: timed out after 2 s", "timeout"), "timeout", "rank 3 on b: timed out after 2 s"),
    (UsageError("bad"), "failed", "bad"),
    (MemoryError("CUDA out of memory.\nTried to allocate 2 GiB"), "failed", "MemoryError: CUDA out of memory."),
])
def test_how_a_run_ended_from_its_exception(exc, status, line):
    assert (failure_status(exc), error_line(exc)) == (status, line)


@pytest.mark.parametrize("kind", ["stop", "kill"])
def test_a_stop_or_kill_fault_waits_until_no_lock_is_held(monkeypatch, kind):
    # A rank stopped while it holds a lock on rank 0's window would block rank 0's own publish inside
    # MPI, where no heartbeat runs: the healthy worker would then name rank 0, not the stopped rank.
    # The injected fault stops a rank between operations, as its documentation says.
    from hpcbench.config import Faults
    from hpcbench.runtime.mpi import faults
    from hpcbench.signals import stops_deferred
    sent: list[int] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: sent.append(sig))
    injector = faults.Injector(Faults.parse(f"{kind}:2@0.5"), rank=2, start=0.0)
    with stops_deferred():
        injector.check(now=1.0, step=3)
        assert sent == []
    injector.check(now=1.1, step=3)
    assert sent == [signal.SIGSTOP if kind == "stop" else signal.SIGKILL]


@pytest.mark.slow  # starts a process, to have the id of one gone
def test_only_the_sessions_of_launchers_no_longer_running_are_reclaimed(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, live, other = tmp_path / f"ompi.{gone.pid}", tmp_path / f"ompi.{os.getpid()}", tmp_path / "ompi.x1"
    for path in (stale, live, other):
        (path / "1").mkdir(parents=True)
        (path / "pmix.vm.tool").write_text("left by a killed launcher")
    assert reclaim_stale_sessions(str(tmp_path)) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")


@pytest.mark.root
@requires_mpi
@pytest.mark.skipif(not os.access(NEXT_PID, os.W_OK), reason="choosing the next process id needs root")
def test_a_launcher_given_the_pid_of_one_killed_before_it_still_starts(tmp_path):
    """Open MPI's launcher killed by SIGKILL leaves TMPDIR/ompi.<pid>; the next one given that pid found its
    rendezvous files and stopped ("The PMIx server's listener thread failed to start", exit 213)."""
    mpi_family(mpiexec_path())  # (known before the launch: asking the launcher starts a process)
    gone = subprocess.Popen(["true"])
    gone.wait()
    session = Path(tempfile.gettempdir()) / f"ompi.{gone.pid}"
    for name in ("pmix.vm.tool", f"pmix.vm.tool.{gone.pid}", f"pmix.vm.tool.prterun-vm-{gone.pid}@0"):
        (session / "1").mkdir(parents=True, exist_ok=True)
        (session / name).write_text("a rendezvous file of a killed launcher\n")
    NEXT_PID.write_text(str(gone.pid - 1))  # the next process this one starts is the launcher
    proc = mpirun(1, "list")
    assert proc.returncode == 0 and "asgd" in proc.stdout, proc.stderr
