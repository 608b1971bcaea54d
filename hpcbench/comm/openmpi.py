"""Open MPI as a run finds it before MPI starts: the settings a run on one node needs, and whether
the launcher asked for fault tolerance (ULFM). Reads and sets only environment variables, so it is
safe to call before mpi4py loads the library; and under ULFM, this rank's stderr without the lines
Open MPI's nonblocking collectives print when a failure cuts one short."""
from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import NoReturn

TRUE = ("1", "true", "yes", "on", "enabled")
# Open MPI's UCX one-sided component fails its selection query unless UCX also carries the
# point-to-point traffic (a network with RDMA), and prints an "Error:" line on every rank that opens a
# window while it does. On one node the shared-memory component serves every window; elsewhere the
# site's choice stands (docs/running.md says how to silence it on a cluster without such a network).
# Ranks on one node talk through shared memory: the byte transfer layers are that and the loopback
# alone (probing the others, libfabric's above all, took 1 s of every rank's start: 1.2 s against 0.2 s).
ONE_NODE_SETTINGS = {"OMPI_MCA_osc": "^ucx", "OMPI_MCA_btl": "self,sm"}


def ulfm_requested(environ: MutableMapping[str, str]) -> bool:
    """Whether this rank was launched to survive the failure of others: Open MPI's ULFM switched on
    (``mpirun --with-ft ulfm``, or ``--mca mpi_ft_enable 1``, reach every rank as this variable)."""
    return environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() in TRUE


def one_node(environ: MutableMapping[str, str]) -> bool:
    """Whether the launcher placed every rank on this node (False when it does not say)."""
    local, world = environ.get("OMPI_COMM_WORLD_LOCAL_SIZE"), environ.get("OMPI_COMM_WORLD_SIZE")
    if local and world:
        return local == world
    return environ.get("SLURM_NNODES") == "1"


def prepare(environ: MutableMapping[str, str]) -> None:
    """Before MPI starts: Open MPI's settings for a run on one node, where the user set none."""
    if one_node(environ):
        for key, value in ONE_NODE_SETTINGS.items():
            environ.setdefault(key, value)


# What Open MPI's nonblocking collectives print straight to a rank's stderr when a failure cuts one short
# ("NBC_Progress: an error 75 was found during schedule 0x... at row-offset 215 - aborting the schedule", then
# an empty line): under ULFM the failure is the run's to handle and record, and hpcbench's lines say so.
COLLECTIVE_NOISE = (b"NBC_Progress: an error ", b"Error in NBC_")


class QuietCollectives:
    """This process's stderr (file descriptor 2, where the MPI library writes) through a pipe whose reader
    passes every byte on as it comes, less COLLECTIVE_NOISE's lines and the empty line after each. ``close``
    puts stderr back and passes on what is left: at exit, and before any end without Python's (``settle``)."""

    def __init__(self) -> None:
        import atexit
        import threading

        self.out = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.read = read
        self.closed = False
        self.pump = threading.Thread(target=self._pass_on, name="hpcbench-stderr", daemon=True)
        self.pump.start()
        atexit.register(self.close)

    def _pass_on(self) -> None:
        pending, after_noise = b"", False
        while True:
            try:
                chunk = os.read(self.read, 65536)
            except OSError:
                chunk = b""
            pending += chunk
            *lines, pending = pending.split(b"\n")
            kept = []
            for line in lines:
                if line.startswith(COLLECTIVE_NOISE):
                    after_noise = True
                elif after_noise and not line.strip():
                    after_noise = False
                else:
                    after_noise = False
                    kept.append(line + b"\n")
            if pending and not any(noise.startswith(pending[:len(noise)]) for noise in COLLECTIVE_NOISE):
                kept.append(pending)  # a line still being written that cannot be the noise: as it comes
                pending = b""
            if not chunk:  # every writer has gone: the last of it
                kept.append(pending)
            if any(kept):
                os.write(self.out, b"".join(kept))
            if not chunk:
                os.close(self.read)
                return

    def close(self) -> None:
        """Stderr back to where it went, and what the pipe still holds passed on (at most a second)."""
        if self.closed:
            return
        self.closed = True
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self.out, 2)  # the pipe's last writer gone: its reader passes on the rest and ends
        self.pump.join(timeout=1.0)


QUIET: list[QuietCollectives] = []


def quiet_collectives(environ: MutableMapping[str, str]) -> None:
    """Under ULFM, leave out of this rank's stderr what Open MPI's nonblocking collectives print of a failure
    (once a process)."""
    if ulfm_requested(environ) and not QUIET:
        QUIET.append(QuietCollectives())


def exit_now(code: int) -> NoReturn:
    """End this process at once, without Python's exit (no MPI_Finalize, no atexit handlers), what it wrote to
    stderr passed on whole first (``settle``)."""
    settle()
    os._exit(code)


def settle() -> None:
    """Before this process ends without Python's exit (``os._exit``, MPI_Abort): what it wrote to stderr is
    passed on whole."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    for quiet in QUIET:
        quiet.close()
