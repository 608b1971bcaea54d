"""Which MPI library mpi4py loads, asked without starting MPI when it is not already running."""
from __future__ import annotations

import sys


def mpi_library() -> dict[str, str]:
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        # MPI_Get_library_version and MPI_Get_version may be called before MPI_Init.
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
    from mpi4py import MPI

    vendor, version = MPI.get_vendor()
    return {
        # Open MPI's string ends in a NUL byte (C's terminator, counted in its length)
        "mpi_library_version": MPI.Get_library_version().replace("\x00", "").strip(),
        "mpi_vendor": f"{vendor} {'.'.join(map(str, version))}",
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py_version": mpi4py.__version__,
    }


def srun_mpi_flag(mpi_vendor: str) -> str:
    """The ``srun --mpi=`` plugin for this MPI: pmix for Open MPI, pmi2 for the MPICH family."""
    return "pmix" if "open mpi" in mpi_vendor.lower() else "pmi2"
