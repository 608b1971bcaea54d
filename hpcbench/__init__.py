"""hpcbench: benchmark distributed SGD algorithms under MPI and in a virtual cluster.

Importing the package never starts MPI; only ``hpcbench.comm`` imports mpi4py.
"""

__version__ = "0.1.0"
