"""Algorithms by name. Importing this package registers every algorithm module."""
from hpcbench.algorithms import allreduce, ps  # noqa: F401  (registration side effect)
from hpcbench.algorithms.api import ALGORITHMS, Algorithm, Context

__all__ = ["ALGORITHMS", "Algorithm", "Context"]
