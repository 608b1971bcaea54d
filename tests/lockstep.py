"""Driving real programs by hand: the test answers every operation a program yields.

``drive`` runs one program (a worker whose peers the test plays, or rank 0 fed arrivals the test
chooses); ``lockstep`` runs several, each until it joins a collective, then completes the
collective for all of them. A program that never ends fails the test after ``MAX_OPS`` operations
instead of hanging it. (To run the programs on the simulator with an analytic gradient instead, see
``tests/quadratic.py``.) ``as_threads`` runs a function once per rank, each rank a thread (the
loopback cluster's tests).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hpcbench.algorithms.api import Program
from hpcbench.algorithms.ops import Failures, Op, Workers

MAX_OPS = 100_000


def membership(op: Op, members: tuple[int, ...]) -> Any:
    """The answer to a question about failures where none happens: no worker has failed, and the
    workers' collectives span ``members``; ``NOT_ASKED`` for every other operation."""
    if isinstance(op, Failures):
        return frozenset()
    if isinstance(op, Workers):
        return members
    return NOT_ASKED


NOT_ASKED = object()


def drive(program: Program, answer: Callable[[Op], Any], max_ops: int = MAX_OPS,
          members: tuple[int, ...] = ()) -> int:
    """Run ``program`` to its end, sending back ``answer(op)`` for each operation (None for one that
    returns nothing; a question about failures gets ``membership``'s answer). → the number of
    operations it yielded."""
    result = None
    for count in range(max_ops):
        try:
            op = program.send(result)
        except StopIteration:
            return count
        asked = membership(op, members)
        result = answer(op) if asked is NOT_ASKED else asked
    raise AssertionError(f"a program yielded {max_ops} operations without ending")


def lockstep(programs: dict[int, Program], answer: Callable[[int, Op], Any], joins: Callable[[Op], bool],
             complete: Callable[[dict[int, Op]], dict[int, Any]], max_ops: int = MAX_OPS) -> None:
    """Run every rank's program until it yields an operation that ``joins`` a collective (or ends), then
    hand each rank in the collective its part of ``complete({rank: op})``; every other operation is
    answered by ``answer(rank, op)``. Every rank still running must join each collective."""
    results: dict[int, Any] = {r: None for r in programs}
    running = dict(programs)
    for _ in range(max_ops):
        if not running:
            return
        joined: dict[int, Op] = {}
        for rank, program in list(running.items()):
            while True:
                try:
                    op = program.send(results[rank])
                except StopIteration:
                    del running[rank]
                    break
                results[rank] = None
                if joins(op):
                    joined[rank] = op
                    break
                asked = membership(op, tuple(sorted(programs)))
                results[rank] = answer(rank, op) if asked is NOT_ASKED else asked
        if joined:
            assert sorted(joined) == sorted(running), "a rank skipped a collective"
            results.update(complete(joined))
    raise AssertionError(f"programs ran {max_ops} collectives without ending")


def as_threads(body: Callable[[int], Any], ranks: int, limit: float) -> dict[int, Any]:
    """``body(rank)`` for ranks 0..ranks-1, each in its own thread; → each rank's result, or the
    exception it raised. Fails, instead of hanging, if a rank has not ended after ``limit`` seconds."""
    results: dict[int, Any] = {}

    def rank_main(rank: int) -> None:
        try:
            results[rank] = body(rank)
        except BaseException as exc:  # noqa: BLE001 — handed to the test
            results[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return results
