"""Algorithms by name. Importing this package registers every algorithm module, in listing order."""
from hpcbench.algorithms import (
    allreduce,  # noqa: F401  (registration side effects, in this order)
    dc_asgd,  # noqa: F401
    easgd,  # noqa: F401
    gossip,  # noqa: F401
    local_sgd,  # noqa: F401
    ps,  # noqa: F401
    sgp,  # noqa: F401
)
from hpcbench.algorithms.api import ALGORITHMS, Algorithm, Context

__all__ = ["ALGORITHMS", "Algorithm", "Context"]
