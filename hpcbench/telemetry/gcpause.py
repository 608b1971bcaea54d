"""Pause Python's cyclic garbage collector around a timed run, as ``timeit`` does.

A run appends millions of long-lived timeline rows; each full collection walks all of them again,
which costs time and shows up as jitter in whatever phase it lands in. Reference counting still
frees memory; cycles are collected when the run is over.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
