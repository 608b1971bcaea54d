"""Transfers between ranks in virtual time: α (and any jitter), then the bytes over per-rank
full-duplex links (a send and a receive direction, each shared fairly by the transfers in it:
``links.py``), small messages eagerly; and the bytes a payload counts at the real model's size.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from hpcbench.runtime.sim.core import Core, Parts
from hpcbench.runtime.sim.links import Links

EAGER_BYTES = 64 * 1024  # smaller messages go out eagerly: they cost time but hold no link


class Transfers(Core):
    """The network's part of the engine: when a transfer reaches the wire, and when it arrives."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        algo, cfg, n = parts.algo, parts.cfg, parts.cfg.workers
        self.jitter, self.noise = parts.jitter, parts.noise
        self.vector, self.float_bytes = algo.ctx.size, 4 * algo.ctx.size
        self.extra_bytes = 4 * (parts.real_size - algo.ctx.size)  # a stand-in vector counts as the real one
        # Full-duplex links, each direction shared by the transfers in it (by their drawn weights).
        self.links = Links(n + 1, cfg.bandwidth, self.at, None if parts.shares is None else parts.shares.sample)
        self.wire_free: dict[tuple[int, int], float] = {}  # when each pair's latest transfer reached the wire
        self.eager_arrives: dict[tuple[int, int], float] = {}  # when each pair's latest eager message arrives
        self.polling = cfg.progress == "polling"

    def modeled(self, nbytes: int) -> int:
        """Bytes on the wire: each parameter-sized vector in a payload counts at the real model's size."""
        return nbytes + (nbytes // self.float_bytes) * self.extra_bytes

    def wire(self, data: np.ndarray) -> int:
        """An all-reduced vector's bytes on the wire, in its own type: one of the model's size (a
        float16 or bfloat16 copy too) counts at the real model's size."""
        return data.nbytes + (data.size // self.vector) * (self.extra_bytes // 4) * data.itemsize

    def transfer(self, src: int, dst: int, nbytes: int, t: float, done: Callable[[], None], target: int = -1,
                 atomic: bool = False) -> None:
        """``done()`` when ``nbytes`` sent from src at ``t`` have reached dst, after every transfer from
        src to dst asked for before it (one connection carries them in order, whatever their delays).
        ``atomic``: an 8-byte atomic, which the network answers on its own, outside that order and
        without the jitter (fitted on transfers of data)."""
        if src == dst:
            self.at(t, done)
            return
        if atomic:
            self.at(self.begins(t, target, jitter=False), self.carry, src, dst, nbytes, done, False)
            return
        pair = (src, dst)
        begin = max(self.begins(t, target), self.wire_free.get(pair, 0.0))
        self.wire_free[pair] = begin
        self.at(begin, self.carry, src, dst, nbytes, done)

    def begins(self, t: float, target: int = -1, jitter: bool = True) -> float:
        """When a transfer asked for at ``t`` reaches the wire: after α, any jitter and, for a one-sided
        ``target`` under polling progress, once the target is inside MPI."""
        if self.polling and target >= 0:
            t = max(t, self.outside_mpi_until[target])
        if jitter and self.jitter is not None:
            t += self.jitter.sample()
        return t + self.cfg.alpha_s

    def carry(self, src: int, dst: int, nbytes: int, done: Callable[[], None], ordered: bool = True) -> None:
        """Move ``nbytes`` from src to dst from now: small messages eagerly, larger ones over the links;
        with link noise, each transfer's bytes count a random factor of mean 1."""
        if src == dst:
            self.at(self.now, done)
            return
        size = self.modeled(nbytes)
        wire = size * self.noise.sample() if self.noise is not None else size
        pair = (src, dst)
        if size < EAGER_BYTES and not ordered:
            self.at(self.now + wire / self.cfg.bandwidth, done)
        elif size < EAGER_BYTES and pair not in self.links.pairs:
            # not behind a larger one still on the links, nor ahead of an earlier small one
            arrives = max(self.now + wire / self.cfg.bandwidth, self.eager_arrives.get(pair, 0.0))
            self.eager_arrives[pair] = arrives
            self.at(arrives, done)
        else:
            self.links.start(src, dst, wire, partial(self.behind_eager, pair, done), self.now)

    def behind_eager(self, pair: tuple[int, int], done: Callable[[], None]) -> None:
        """A transfer off the links arrives no earlier than an eager message sent before it."""
        arrives = self.eager_arrives.get(pair, -1.0)
        if arrives >= self.now:  # at the same instant too: after it (events at one time run in order)
            self.at(arrives, done)
        else:
            done()
