"""What launches MPI, and the guard of the processes a test not marked ``mpi`` starts.

``conftest.py`` asks ``launches_mpi`` of every process a test starts. A test not marked ``mpi`` starts
its processes with this directory first on their PYTHONPATH and ``NOTES`` naming a file: Python loads
this module (as ``sitecustomize``) first in each of them, and a process of hpcbench (or any Python, and
the Pythons those start in turn) then refuses to start mpiexec or mpirun and notes the command in that
file, which the test's guard reads when the test ends.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Any

NOTES = "HPCBENCH_TEST_LAUNCH_NOTES"
# Programs that start MPI ranks: mpiexec and mpirun (MPICH's mpiexec.hydra, Open MPI's prterun and
# orterun), and the emulated cluster's jobs/local/mpiexec-emulated.
LAUNCHER = re.compile(r"(mpiexec|mpirun|orterun|prterun|srun)([.-][\w.-]*)?")
SHELLS = ("sh", "bash", "dash", "zsh")
ASKING = {"--version", "-V", "--help", "-h", "-info"}  # a launcher asked what it is starts no ranks


def launches_mpi(args: Any) -> bool:
    """Whether the command ``args`` (a list as ``subprocess.Popen`` takes it, or a shell's command line)
    starts MPI ranks: a word of it, or of the script a shell runs with ``-c``, is an MPI launcher (and the
    launcher is not only asked its version)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return any(is_launcher(word) for word in re.split(r"[\s;&|()`]+", os.fsdecode(args)))
    argv = [os.fsdecode(a) for a in args]
    if argv and is_launcher(argv[0]) and set(argv[1:]) <= ASKING:
        return False
    if any(is_launcher(a) for a in argv):
        return True
    shell = bool(argv) and os.path.basename(argv[0]) in SHELLS and "-c" in argv[1:-1]
    return shell and launches_mpi(argv[argv.index("-c", 1) + 1])


def is_launcher(word: str) -> bool:
    return LAUNCHER.fullmatch(os.path.basename(word.strip("'\""))) is not None


def refuse_mpi(notes: str) -> None:
    """Make this process refuse to start MPI, noting each command it refused in the file ``notes``."""
    start = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        if launches_mpi(args):
            shown = args if isinstance(args, (str, bytes)) else " ".join(os.fsdecode(a) for a in args)
            with open(notes, "a", encoding="utf-8") as out:
                out.write(f"{shown}\n")
            raise RuntimeError(f"a test not marked mpi may not launch MPI: refused {shown}")
        start(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]


if os.environ.get(NOTES):
    refuse_mpi(os.environ[NOTES])
