"""MPI's library, started once for every module of comm/ that calls it: Open MPI's settings go into the
environment first (it reads them once, as mpi4py loads the library), then mpi4py."""
from __future__ import annotations

import os

from hpcbench.comm import openmpi

openmpi.prepare(os.environ)
openmpi.quiet_collectives(os.environ)
from mpi4py import MPI  # noqa: E402
from mpi4py.util import dtlib, pkl5  # noqa: E402

__all__ = ["MPI", "dtlib", "pkl5"]
