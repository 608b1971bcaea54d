"""``hpcbench comm``'s measurements under MPI: every operation the algorithms use, at each message size,
each iteration timed (collective: every rank calls ``sweep``; rank 0 gets the rows).

all-reduce: every rank, float32 sum, the slowest rank's time per iteration (as nccl-tests reports);
all-gather alike, each rank giving a part of the size (as OSU's osu_allgather counts it).
sendrecv: a ping-pong between rank 0 and a peer, half the round trip (OSU's latency test). get, put,
accumulate (float32 sum), fetch_add (one int64): rank 0 on a peer's window under one passive-target
lock, each operation completed by a flush (OSU's one-sided tests in flush mode); the other ranks wait
inside MPI (a barrier), so a target whose MPI progresses only inside calls is never starved. The
peers: the first rank on rank 0's node and the first on another node, where there are such ranks
(the link classes a fit tells apart).
"""
from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.comm.linkfit import ATOMIC_BYTES, COLLECTIVES, ONE_SIDED, link_of
from hpcbench.comm.mpilib import MPI  # Open MPI's settings first, as for a run


@dataclass(frozen=True)
class Measured:
    op: str
    nbytes: int
    peer: int  # -1: every rank (the all-reduce)
    link: str  # intra-node, inter-node, or "all"
    seconds: tuple[float, ...]  # one per iteration


def timed(step: Callable[[], None], iters: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    out = []
    for _ in range(iters):
        t0 = MPI.Wtime()
        step()
        out.append(MPI.Wtime() - t0)
    return out


def peers(hosts: Sequence[str]) -> list[int]:
    """The first rank on rank 0's node and the first on another node (those that exist)."""
    same = next((r for r in range(1, len(hosts)) if hosts[r] == hosts[0]), None)
    other = next((r for r in range(1, len(hosts)) if hosts[r] != hosts[0]), None)
    return [r for r in (same, other) if r is not None]


def collective(world: MPI.Intracomm, op: str, nbytes: int, iters: int, warmup: int) -> list[float]:
    """An all-reduce of ``nbytes`` of float32, or an all-gather of parts of ``nbytes``, on every rank."""
    send = np.ones(nbytes // 4, dtype=np.float32)
    if op == "allreduce":
        recv = np.empty_like(send)
        action: Callable[[], None] = lambda: world.Allreduce(send, recv, MPI.SUM)  # noqa: E731
    else:
        gathered = np.empty(send.size * world.size, dtype=np.float32)
        action = lambda: world.Allgather(send, gathered)  # noqa: E731
    world.Barrier()
    mine = np.array(timed(action, iters, warmup))
    slowest = np.empty_like(mine)
    world.Allreduce(mine, slowest, MPI.MAX)
    return slowest.tolist()


def sendrecv(world: MPI.Intracomm, peer: int, nbytes: int, iters: int, warmup: int) -> list[float]:
    buf = np.zeros(nbytes, dtype=np.uint8)
    world.Barrier()
    out: list[float] = []
    if world.rank == 0:
        def ping() -> None:
            world.Send(buf, peer, 7)
            world.Recv(buf, peer, 7)
        out = [t / 2 for t in timed(ping, iters, warmup)]
    elif world.rank == peer:
        for _ in range(iters + warmup):
            world.Recv(buf, 0, 7)
            world.Send(buf, 0, 7)
    world.Barrier()
    return out


def one_sided(world: MPI.Intracomm, win: MPI.Win, op: str, peer: int, nbytes: int, iters: int,
              warmup: int) -> list[float]:
    world.Barrier()
    out: list[float] = []
    if world.rank == 0:
        data = np.ones(max(nbytes, ATOMIC_BYTES) // 4, dtype=np.float32)
        one, old = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        count = nbytes // 4
        actions: dict[str, Callable[[], None]] = {
            "get": lambda: win.Get(data[:count], peer),
            "put": lambda: win.Put(data[:count], peer),
            "accumulate": lambda: win.Accumulate(data[:count], peer, op=MPI.SUM),
            "fetch_add": lambda: win.Fetch_and_op(one, old, peer, 0, MPI.SUM),
        }
        action = actions[op]

        def step() -> None:
            action()
            win.Flush(peer)

        win.Lock(peer, MPI.LOCK_SHARED)
        try:
            out = timed(step, iters, warmup)
        finally:
            win.Unlock(peer)
    world.Barrier()
    return out


def sweep(ops: Sequence[str], sizes: Sequence[int], iters: int, warmup: int) -> list[Measured] | None:
    """Collective: every operation at every size (fetch_add at its 8 bytes alone); rank 0 → the rows,
    the other ranks → None."""
    world = MPI.COMM_WORLD
    hosts = world.allgather(socket.gethostname())
    targets = peers(hosts)
    rows: list[Measured] = []
    largest = max(sizes)
    win = MPI.Win.Allocate(largest if world.rank in targets else 0, comm=world) \
        if any(op in ONE_SIDED for op in ops) else None
    try:
        for op in ops:
            for peer in ([-1] if op in COLLECTIVES else targets):
                link = "all" if peer < 0 else link_of(hosts[0], hosts[peer])
                for nbytes in ([ATOMIC_BYTES] if op == "fetch_add" else sizes):
                    if op in COLLECTIVES:
                        seconds = collective(world, op, nbytes, iters, warmup)
                    elif op == "sendrecv":
                        seconds = sendrecv(world, peer, nbytes, iters, warmup)
                    else:
                        assert win is not None
                        seconds = one_sided(world, win, op, peer, nbytes, iters, warmup)
                    rows.append(Measured(op, nbytes, peer, link, tuple(seconds)))
    finally:
        if win is not None:
            win.Free()
    return rows if world.rank == 0 else None


def world() -> tuple[int, int, list[str]]:
    """(this rank, the world's size, every rank's host)."""
    comm = MPI.COMM_WORLD
    return comm.rank, comm.size, comm.allgather(socket.gethostname())


def library() -> str:
    return MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]


def from_rank0(value: object) -> object:
    """Rank 0's ``value`` on every rank (so that all refuse, or none, on what rank 0 alone can see)."""
    return MPI.COMM_WORLD.bcast(value, root=0)
