"""``Lost``: what a transport hands back, and a program receives, when ranks it needed have failed.

The transports (``comm/``) make it and the programs (``algorithms/``, which re-export it from
``ops``) look for it; it lives below both, so that neither imports the other (``algorithms`` is the
lower layer of the two, and ``comm`` imports nothing of it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lost:
    """Not an operation: what a ``Recv``, ``Read`` or ``Accumulate`` hands back instead of its result
    when ranks it needed have failed (a run whose MPI lets the others go on, or a simulated
    failure). A ``Recv`` from any rank gets one as soon as workers have failed that this program was
    not yet told of, and from a failed rank on every try; messages a rank sent before it failed are
    handed over first."""

    ranks: tuple[int, ...]
