"""Open MPI as a run finds it before MPI starts: the settings a run on one node needs, and whether
the launcher asked for fault tolerance (ULFM). Reads and sets only environment variables, so it is
safe to call before mpi4py loads the library."""
from __future__ import annotations

from collections.abc import MutableMapping

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
