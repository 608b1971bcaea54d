"""Algorithms by name. Importing this package registers every algorithm module, in listing order."""
# ruff: noqa: I001  (the imports' order is the listing order: never sort them)
from hpcbench.algorithms import allreduce  # noqa: F401  (registration side effects, in this order)
from hpcbench.algorithms import ps  # noqa: F401
from hpcbench.algorithms import dc_asgd  # noqa: F401
from hpcbench.algorithms import easgd  # noqa: F401
from hpcbench.algorithms import gossip  # noqa: F401
from hpcbench.algorithms import sgp  # noqa: F401
from hpcbench.algorithms import local_sgd  # noqa: F401
from hpcbench.algorithms.api import ALGORITHMS, Algorithm, Context

__all__ = ["ALGORITHMS", "Algorithm", "Context"]
