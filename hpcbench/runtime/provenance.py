"""Provenance of a run: software versions, git state, Slurm ids and the environment that matters."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

import hpcbench

ENV_PREFIXES = ("MPIR_CVAR_", "MPICH_", "OMPI_", "PRTE_", "PMIX_", "UCX_", "FI_", "SLURM_", "HDF5_", "OMP_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
SLURM_IDS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
             "SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_NNODES")


def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the source tree hpcbench runs from, or ("unknown", False) outside git."""
    root = Path(hpcbench.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
        return commit, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


def relevant_environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def progress_mode() -> str:
    """How passive-target RMA progresses on this run (an experiment factor: MPICH moves one-sided
    operations only inside MPI calls unless MPICH_ASYNC_PROGRESS=1 starts a progress thread)."""
    if os.environ.get("MPICH_ASYNC_PROGRESS") == "1":
        return "mpich-async-progress-thread"
    return "polling (rank 0 tests requests while idle)"


def network() -> str:
    """The emulated network the ranks run over ("" when none): set by jobs/local/mpiexec-emulated."""
    emulated = os.environ.get("HPCBENCH_EMULATED", "")
    return f"emulated {emulated}" if emulated else ""


def software() -> dict[str, object]:
    torch = sys.modules.get("torch")  # a payload run never loads it: its version is read from the package
    commit, dirty = git_state()
    info = {
        "hpcbench_version": hpcbench.__version__,
        "python_version": platform.python_version(),
        "torch_version": str(torch.__version__) if torch is not None else installed("torch"),
        "numpy_version": np.__version__,
        "h5py_version": metadata.version("h5py"),
        "cuda_version": (torch.version.cuda or "none") if torch is not None else "none (torch not loaded)",
        "git_commit": commit,
        "git_dirty": dirty,
        "platform": platform.platform(),
        "environment": relevant_environment(),
        "progress_mode": progress_mode(),
        "network": network(),
    }
    for name in SLURM_IDS:
        info[name.lower()] = os.environ.get(name, "")
    return info


def installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
