"""Point-to-point messages in virtual time: a send travels as a transfer and lands in its receiver's
inbox (or with the receive waiting for it); a receive takes the first that matches, waits, or times
out; a receive waiting for a rank known to have failed (or, from any rank, for news of a failure)
gets ``Lost``. Rank 0 spends ``apply_s`` on each message it is handed.
"""
from __future__ import annotations

import itertools
from collections import deque
from functools import partial
from typing import Any

import numpy as np

from hpcbench.algorithms.api import role_of
from hpcbench.algorithms.ops import ANY, WATCHED, Lost, Poll, Recv, Send
from hpcbench.comm.transport import message_bytes
from hpcbench.errors import RuntimeFailure, undeclared_size
from hpcbench.runtime.sim.core import BLOCKED, Parts
from hpcbench.runtime.sim.transfers import Transfers


class Messages(Transfers):
    """The messages' part of the engine: the channels, each rank's inbox, and what each program was
    told of the failures."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.channels = parts.layout.channels
        self.inbox: dict[tuple[str, int], deque[tuple[int, np.ndarray]]] = {}
        self.tokens = itertools.count()
        self.told: list[set[int]] = [set() for _ in self.ranks]  # the failures a receive from any rank has named

    # Posting a send is instant in virtual time and leaves no timeline row (the bytes of a message are
    # on its receiver's row).
    def send(self, rank: int, op: Send) -> None:
        data = message_bytes(op.data, op.given)
        spec = self.channels[op.channel]
        if data.nbytes != spec.nbytes:
            raise undeclared_size(op.channel, data.nbytes, spec.nbytes)
        if (role_of(rank), role_of(op.dest)) != (spec.sender, spec.to):
            raise RuntimeFailure(f"a {op.channel!r} message from rank {rank} to rank {op.dest}, where its layout "
                                 f"declares it from the {spec.sender} to the {spec.to}")
        self.transfer(rank, op.dest, data.nbytes, self.now, partial(self.deliver, op.channel, op.dest, rank, data))

    def deliver(self, channel: str, dest: int, src: int, data: np.ndarray) -> None:
        if self.dead[dest]:
            return  # a message to a failed rank goes nowhere
        waiting = self.waiting.get(dest)
        if waiting is not None and waiting[0] == channel and waiting[1] in (ANY, src):
            del self.waiting[dest]
            self.row(dest, "wait", waiting[3], self.now, self.modeled(data.nbytes), "Recv")
            self.received(dest, src, data, inline=False)
        else:
            self.inbox.setdefault((channel, dest), deque()).append((src, data))

    def received(self, rank: int, src: int, data: np.ndarray, inline: bool) -> Any:
        """Hand a message to its program; rank 0 then spends apply_s on it (its queue is FIFO)."""
        value = (src, data)
        if rank == 0 and self.cfg.apply_s > 0:
            self.outside_mpi_until[0] = self.now + self.cfg.apply_s
            self.row(0, "apply", self.now, self.now + self.cfg.apply_s)
            return self.later(0, self.now + self.cfg.apply_s, value)
        if inline:
            return value
        self.resume(rank, value)
        return None

    def recv(self, rank: int, op: Recv) -> object:
        queue = self.inbox.get((op.channel, rank))
        if queue:
            if op.src == ANY:
                src, data = queue.popleft()  # the server's queue is long and FIFO: O(1) here
            else:
                found = next((i for i, (s, _) in enumerate(queue) if s == op.src), None)
                if found is not None:
                    src, data = queue[found]
                    del queue[found]
            if op.src == ANY or found is not None:
                return self.received(rank, src, data, inline=True)
        lost = self.lost_for(rank, op.src)
        if lost is not None:
            return lost
        if op.timeout == 0:
            return None
        token = next(self.tokens)
        self.waiting[rank] = (op.channel, op.src, token, self.now)
        if op.timeout is not None and op.timeout != WATCHED:
            self.at(self.now + op.timeout, self.expire, rank, token)
        return BLOCKED

    def expire(self, rank: int, token: int) -> None:
        waiting = self.waiting.get(rank)
        if waiting is not None and waiting[2] == token:
            del self.waiting[rank]
            self.row(rank, "wait", waiting[3], self.now, 0, "Recv")
            self.resume(rank, None)

    def poll(self, rank: int, op: Poll) -> list[tuple[int, np.ndarray]]:
        queue = self.inbox.get((op.channel, rank))
        if not queue:
            return []
        found = [(s, d) for s, d in queue if op.src in (ANY, s)]
        self.inbox[(op.channel, rank)] = deque((s, d) for s, d in queue if op.src not in (ANY, s))
        return found

    def lost_for(self, rank: int, src: int) -> Lost | None:
        """What a receive from ``src`` gets now instead of a message: ``Lost`` if ``src`` is known to
        have failed, or (from any rank) if workers are that this program was not told of."""
        if src != ANY:
            return Lost((src,)) if src in self.known else None
        new = sorted(set(self.known) - self.told[rank])
        if not new:
            return None
        self.told[rank].update(new)
        return Lost(tuple(new))
