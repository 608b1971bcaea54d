"""Who talks to whom: pure functions of (worker index, iteration, n). Indices are 0-based workers."""
from __future__ import annotations

import numpy as np


def exponential_hops(n: int) -> int:
    """L + 1 distinct hop lengths 1, 2, 4, … 2^L with L = ⌊log2(n − 1)⌋ (one hop when n ≤ 2)."""
    return max(1, (n - 1).bit_length())


def exponential_out_peer(i: int, k: int, n: int) -> int:
    """SGP's directed exponential graph, one peer per iteration: i + 2^(k mod (L+1))."""
    return (i + 2 ** (k % exponential_hops(n))) % n


def exponential_in_peer(i: int, k: int, n: int) -> int:
    return (i - 2 ** (k % exponential_hops(n))) % n


def random_peer(i: int, n: int, rng: np.random.Generator) -> int:
    """A peer other than ``i``, uniformly."""
    j = int(rng.integers(n - 1))
    return j + 1 if j >= i else j


def random_live_peer(i: int, n: int, failed: frozenset[int], rng: np.random.Generator) -> int | None:
    """A peer other than ``i`` and those ``failed``, uniformly (the same draws as ``random_peer`` while
    none has failed); None when no other is left."""
    if not failed:
        return random_peer(i, n, rng)
    live = [j for j in range(n) if j != i and j not in failed]
    return live[int(rng.integers(len(live)))] if live else None
