"""Real runs across the emulated cluster (jobs/local/emulated-cluster.sh) beside the simulator's
prediction of the same runs: one payload run per point, then ``simulate`` with its compute model and
the links' rate. Needs root (the cluster is brought up, and reshaped, here)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hpcbench.errors import UsageError
from hpcbench.launch.local import EMULATED_LAUNCHER, OWNER_VAR, emulated_state, run_ranks, why_failed

CLUSTER = EMULATED_LAUNCHER.parent / "emulated-cluster.sh"
# One way, 8 bytes, MPI over TCP between two emulated nodes: 8.7 µs (median of 180 round trips).
ALPHA_S = 1e-5


def cluster(*args: str) -> str:
    """Run jobs/local/emulated-cluster.sh ARGS; → what it said. UsageError with its error line."""
    if not CLUSTER.exists():
        raise UsageError(f"the emulated cluster needs the repository's {CLUSTER} (run from a checkout)")
    proc = subprocess.run([str(CLUSTER), *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise UsageError(f"emulated cluster: {why_failed(proc)}")
    return proc.stdout


def owner() -> str | None:
    """Who brought up the emulated cluster that is up (its ``--owner``), or None when none is."""
    state = emulated_state()
    return None if state is None else state.get("owner", "user")


def bring_up(me: str, nodes: int, rate: str) -> None:
    """Bring the cluster up (or reshape it) as ``me``; one line, and nothing touched, when someone else's is up."""
    cluster("up", "--nodes", str(nodes), "--rate", rate, "--owner", me)


def take_down(me: str) -> None:
    """Take down the cluster ``me`` brought up; one brought up by anyone else is left as it is."""
    if owner() == me:
        cluster("down", "--owner", me)


@contextmanager
def launching_as(me: str) -> Iterator[None]:
    """Runs started inside launch on the cluster ``me`` brought up (jobs/local/mpiexec-emulated launches
    only its owner's runs, named by HPCBENCH_EMULATED_OWNER)."""
    before = os.environ.get(OWNER_VAR)
    os.environ[OWNER_VAR] = me
    try:
        yield
    finally:
        if before is None:
            del os.environ[OWNER_VAR]
        else:
            os.environ[OWNER_VAR] = before


@dataclass(frozen=True)
class Pair:
    """One point: the real run's result file and the simulated one's, or why one is missing."""

    real: Path
    simulated: Path
    failure: str = ""


def real_and_simulated(algo: str, ranks: int, run_args: Sequence[str], bandwidth: float, out: Path,
                       timeout: float) -> Pair:
    """``algo`` on ``ranks`` ranks across the cluster that is up (payload ``run_args``), then simulated
    with the same arguments over links of ``bandwidth`` bytes/s."""
    real, simulated = files(out)
    try:
        proc = run_ranks(ranks, ["run", "--algo", algo, *run_args, "--out", str(real), "--overwrite"], timeout,
                         capture=True, emulated=True)
    except subprocess.TimeoutExpired:
        return Pair(real, simulated, f"real run killed after {timeout:g} s")
    if proc.returncode != 0:
        return Pair(real, simulated, why_failed(proc))
    return Pair(real, simulated, simulate_like(algo, ranks, run_args, bandwidth, simulated, timeout))


def resimulated(algo: str, ranks: int, run_args: Sequence[str], bandwidth: float, out: Path, timeout: float) -> Pair:
    """The real run ``real_and_simulated`` kept at ``out``, simulated again (after a change to the simulator)."""
    real, simulated = files(out)
    if not real.exists():
        return Pair(real, simulated, f"no kept real run {real.name}")
    return Pair(real, simulated, simulate_like(algo, ranks, run_args, bandwidth, simulated, timeout))


def files(out: Path) -> tuple[Path, Path]:
    """Where a point's real and simulated result files go."""
    return out.with_suffix(".real.h5"), out.with_suffix(".sim.h5")


def simulate_like(algo: str, ranks: int, run_args: Sequence[str], bandwidth: float, out: Path, timeout: float,
                  noise: float = 0.0) -> str:
    """Simulate ``algo`` on ``ranks`` ranks (payload ``run_args``) over links of ``bandwidth`` bytes/s
    (and ``noise``, the spread of a transfer's time) into ``out``; → why it failed, or ''."""
    sim = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", "--algo", algo, "--workers", str(ranks - 1),
                          *run_args, "--network", f"alpha={ALPHA_S:g},bandwidth={bandwidth:g},noise={noise:g}",
                          "--numerics", "off", "--out", str(out), "--overwrite"],
                         capture_output=True, text=True, timeout=timeout)
    return why_failed(sim) if sim.returncode != 0 else ""
