"""What a driver needs from a transport: the seam between the MPI driver and MPI (or a loopback).

``Transport`` is what one rank uses while its program runs: one-sided window operations,
messages on named channels, the workers' collectives and a clock. ``Cluster`` adds what a session
needs around the run: where the rank is, opening windows and channels, agreeing on set-up errors,
clock offsets, gathering the results on rank 0, and the run's health (heartbeats, failure notices,
ending every rank). Every blocking call takes or implies a deadline. ``comm/mpi.py`` implements it
over MPI, ``comm/loopback.py`` over threads of one process.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from hpcbench.lost import Lost

# A worker waits for rank 0 this much longer than the run's timeout, which rank 0 waits for a worker: when a
# worker stalls, rank 0's deadline passes first and it names the rank (the other workers, waiting on rank 0
# meanwhile, would name rank 0); when rank 0 stalls, the workers name it.
WORKER_MARGIN_S = 5.0


def message_bytes(data: np.ndarray, given: bool) -> np.ndarray:
    """What a send puts on its way: ``data``'s bytes, copied, or with ``given`` (a sender that never
    touches them again) as they are."""
    raw = np.ascontiguousarray(data).view(np.uint8)
    return raw if given else raw.copy()


class Shrunk(Exception):
    """A workers' collective ended because workers failed: the survivors agreed so, and the workers'
    collectives now span only them. Start it again (``Transport.members`` says whom it spans).
    ``regrouping``: when (this rank's clock) the failed collective had ended here and the agreement and
    the shrink began."""

    def __init__(self, regrouping: float) -> None:
        super().__init__(regrouping)
        self.regrouping = regrouping


class Transport(Protocol):
    rank: int
    size: int
    members: tuple[int, ...]  # workers: the ranks the workers' collectives span (the survivors, after a failure)

    def wtime(self) -> float:
        """Seconds on this rank's clock."""

    def window_size(self, window: str) -> int:
        """Bytes of ``window`` on each rank that owns it."""

    def publish(self, window: str, data: np.ndarray, offset: int = 0) -> None:
        """Overwrite this rank's own ``window`` from byte ``offset``; readers never see a mix."""

    def read(self, window: str, ranks: tuple[int, ...], nbytes: int, offset: int = 0) -> list[np.ndarray] | Lost:
        """``nbytes`` of ``window`` from byte ``offset``, on each of ``ranks``, as bytes (``Lost``: one
        of them has failed)."""

    def accumulate(self, window: str, rank: int, parts: tuple[tuple[int, np.ndarray], ...]) -> Lost | None:
        """Element-wise atomic add of each (byte offset, typed array) into ``window`` on ``rank``
        (``Lost``: ``rank`` has failed, nothing was added)."""

    def fetch_add(self, window: str, rank: int, value: int) -> int:
        """Atomically add ``value`` to the int64 at the start of ``window`` on ``rank``; → the old value."""

    def drain(self, window: str) -> np.ndarray:
        """This rank's own ``window`` as bytes, zeroed in the same atomic step."""

    def send(self, channel: str, dest: int, data: np.ndarray, given: bool = False) -> None:
        """Nonblocking: ``data`` on ``channel`` to ``dest`` (the buffer may be reused at once, unless
        ``given``: then the caller never touches it again and it is sent as it is)."""

    def recv(self, channel: str, src: int, timeout: float, told: frozenset[int] = frozenset(),
             calm: float = 0.0) -> tuple[int, np.ndarray] | Lost | None:
        """Next message on ``channel`` from ``src`` (-1: any) as (sender, bytes); None after ``timeout``;
        ``Lost`` when ``src`` has failed, or (any) when workers not in ``told`` have and nothing came.
        ``calm``: seconds during which nothing needing a prompt answer is expected (``ops.Recv.calm_s``)."""

    def failed(self) -> frozenset[int]:
        """The ranks this rank knows to have failed (a run outlives them only where MPI lets it)."""

    def collective(self, name: str, data: np.ndarray, timeout: float, bf16: bool = False) -> np.ndarray:
        """Workers only: the collective ``name`` (a key of ``comm.collectives.COMBINE``: ``Allreduce``, the
        element-wise sum in ``data``'s own type, ``bf16``: uint16 bfloat16 bit patterns summed as
        bfloat16; ``Allgather``, every worker's ``data`` in worker order) over the workers; ``Shrunk``
        when workers failed during it."""

    def start_allreduce(self, data: np.ndarray, out: np.ndarray) -> Any:
        """Workers only, nonblocking: ``out`` becomes the element-wise sum of ``data`` over the workers
        once ``finish_allreduces`` returns (every worker starts the same all-reduces in the same order;
        ``data`` stays untouched until then); → a handle for the two calls below."""

    def advance(self, started: list[Any]) -> None:
        """Let started all-reduces advance (MPI moves them only inside its calls)."""

    def finish_allreduces(self, started: list[Any], timeout: float) -> None:
        """Wait until every started all-reduce has ended; ``Shrunk`` when workers failed meanwhile."""

    def worker_barrier(self, timeout: float) -> None:
        """Workers only: wait until every worker is here; ``Shrunk`` when workers failed meanwhile."""


class Cluster(Transport, Protocol):
    survives_failures: bool  # the run outlives a failed worker (ULFM): its failures are reported, not fatal
    host: str
    hosts: list[str]  # every rank's host, once the session's first exchange has told them
    local_rank: int
    local_size: int
    on_wait: Callable[[], None] | None  # called while waiting and between operations (faults, flushes)

    # --- placement ----------------------------------------------------------------------------
    def node_local(self) -> tuple[int, int]:
        """(this rank's index among the ranks on its node, how many ranks its node runs)."""

    def oversubscribed(self, ranks_per_core: float) -> None:
        """More ranks than cores on this node: wait without spinning."""

    def name(self, rank: int) -> str:
        """"rank R on HOST", for error lines."""

    # --- set-up and the end ------------------------------------------------------------------

    def open_window(self, name: str, nbytes: int, owned: bool, mode: str = "publish") -> None:
        """Collective: ``nbytes`` on the ranks that own it, nothing on the others; ``mode``: as the
        layout declares it ("publish", "accumulate" or "count")."""

    def open_channel(self, name: str, nbytes: int, sources: tuple[int, ...]) -> None:
        """Messages of ``nbytes``; receives from ``sources`` are posted now, others on first use."""

    def exchange(self, obj: object, timeout: float, what: str) -> list[Any]:
        """Collective: every rank's ``obj``, in rank order; a rank missing after ``timeout`` is named."""

    def collect(self, obj: object, timeout: float, what: str) -> list[Any] | None:
        """Collective: every rank's ``obj`` on rank 0 (None elsewhere), within ``timeout``."""

    def clock_offsets(self, timeout: float) -> np.ndarray | None:
        """Collective: on rank 0 each rank's clock minus rank 0's; None elsewhere."""

    def world_barrier(self, timeout: float, what: str = "a barrier") -> None:
        """Collective over every rank."""

    def close(self, timeout: float) -> None:
        """Collective: wait for outstanding sends, then free channels and windows."""

    def finalize(self, code: int = 0) -> None:
        """This rank is done with the cluster (after ``close``, or after set-up failed); ``code``: the exit
        status the rank will end with, for a transport that must end the process itself."""

    # --- health -------------------------------------------------------------------------------
    def tick(self) -> None:
        """Between operations and while waiting: heartbeats, failure notices (rank 0), ``on_wait``."""

    def start_heartbeats(self, every: float, deadline: float, stall: float = math.inf) -> None:
        """Rank 0 and every worker tell each other every ``every`` s that they are there; a peer silent
        for ``deadline`` s ends the run naming it; a worker silent for over ``stall`` s that is heard
        again is a stall (``stall_log``)."""

    def silent(self, longer_than: float) -> list[tuple[int, float]]:
        """The peers not heard from for ``longer_than`` s, as (rank, seconds), longest first."""

    def stall_log(self) -> list[tuple[int, float, float]]:
        """Rank 0: the workers that fell silent past the stall threshold and were heard again, as (rank,
        when it fell silent on that rank's clock, seconds)."""

    def failure_log(self) -> dict[int, tuple[float, str]]:
        """The ranks known to have failed: when this rank learned it (its clock) and by what."""

    def tell_failure(self, status: str, error: str, grace: float) -> None:
        """A worker that cannot go on tells rank 0 why (rank 0's next tick raises ``PeerFailure``),
        then gives it up to ``grace`` s to keep a record of the run."""

    def abort(self, code: int) -> None:
        """End every rank of the run."""
