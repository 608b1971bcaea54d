"""The simulator's network links and window locks, in virtual time.

Links: every rank has a full-duplex link, a send and a receive direction of the same bandwidth. The
transfers under way through one direction share it equally (processor sharing), as TCP flows
through one bottleneck do: two peers reading one rank's model each get half its send rate and both
finish after two message times (measured over emulated links: 1 MB read by 1, 2 and 4 peers at once
over 100 Mbit/s: 64, 95–160 and 210–320 ms), where first-come-first-served would finish one after
one message time and the other after two. A transfer is done when both of its directions have
served it. Transfers between the same two ranks go one after another (one connection carries them
in order). Each direction is served in its own right, so a transfer held back at its sender still
takes an equal share at its receiver (a fair-share approximation that is exact when only one end
is contended, as at a parameter server).

Locks: a passive-target lock on one rank's window, granted in the order requested (so a read that
comes while the owner waits to publish waits behind the publish, as MPICH queues lock requests).
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Callable

Schedule = Callable[..., None]  # at(t, action, *args)
Done = Callable[[], None]


class Direction:
    """One direction of one rank's link. ``served``: bytes each transfer in it has received so far
    (all in it are served alike), so a transfer of ``n`` bytes that joined when ``served`` was ``s``
    leaves at ``s + n``. ``due``: when the next departure event is scheduled; a transfer joining
    only delays departures, so that event stays and, if early, finds nothing leaving and schedules
    the next (one event however many join meanwhile); ``version`` tells it from events superseded
    by an earlier one."""

    __slots__ = ("active", "served", "since", "tags", "version", "due")

    def __init__(self) -> None:
        self.active = 0
        self.served = 0.0
        self.since = 0.0
        self.tags: list[tuple[float, int]] = []  # heap of (served when it leaves, transfer id)
        self.version = 0
        self.due = math.inf


class Links:
    def __init__(self, ranks: int, bandwidth: float, at: Schedule) -> None:
        self.bandwidth, self.at = bandwidth, at
        self.sending = [Direction() for _ in range(ranks)]
        self.receiving = [Direction() for _ in range(ranks)]
        self.left: dict[int, list] = {}  # transfer id → [directions still serving it, pair, done]
        self.pairs: dict[tuple[int, int], deque[tuple[float, Done]]] = {}  # waiting behind the one under way
        self.ids = itertools.count()

    def start(self, src: int, dst: int, nbytes: float, done: Done, now: float) -> None:
        """Put ``nbytes`` from src to dst on the links at ``now``, or after the transfers between the
        two already under way; ``done()`` when both directions have served them."""
        pair = (src, dst)
        queue = self.pairs.get(pair)
        if queue is not None:
            queue.append((nbytes, done))
            return
        self.pairs[pair] = deque()
        self.send(pair, nbytes, done, now)

    def send(self, pair: tuple[int, int], nbytes: float, done: Done, now: float) -> None:
        tid = next(self.ids)
        self.left[tid] = [2, pair, done]
        self.join(self.sending[pair[0]], tid, nbytes, now)
        self.join(self.receiving[pair[1]], tid, nbytes, now)

    def finished(self, tid: int, now: float) -> None:
        entry = self.left[tid]
        entry[0] -= 1
        if entry[0]:
            return
        del self.left[tid]
        pair, done = entry[1], entry[2]
        queue = self.pairs[pair]
        if queue:
            self.send(pair, *queue.popleft(), now)
        else:
            del self.pairs[pair]
        done()

    def advance(self, d: Direction, now: float) -> None:
        if d.active:
            d.served += (now - d.since) * self.bandwidth / d.active
        d.since = now

    def join(self, d: Direction, tid: int, nbytes: float, now: float) -> None:
        self.advance(d, now)
        heapq.heappush(d.tags, (d.served + nbytes, tid))
        d.active += 1
        self.reschedule(d, now)

    def reschedule(self, d: Direction, now: float) -> None:
        if d.tags:
            t = now + (d.tags[0][0] - d.served) * d.active / self.bandwidth
            if t < d.due:
                d.version += 1
                d.due = t
                self.at(t, self.tick, d, d.version, t)

    def served_by(self, d: Direction, tag: float, now: float) -> bool:
        """Whether a transfer that leaves ``d`` once it has served ``tag`` is done at ``now``: its bytes
        are served (to rounding), or what is left of them would take less time than ``now`` can tell from
        itself (late in a long run a float second holds fewer digits: an event that moved no byte would
        else be rescheduled at ``now`` without end)."""
        left = tag - d.served
        return left <= d.served * 1e-12 + 1e-9 or now + left * d.active / self.bandwidth <= now

    def tick(self, d: Direction, version: int, now: float) -> None:
        if version != d.version:
            return
        d.due = math.inf
        self.advance(d, now)
        finished = []
        while d.tags and self.served_by(d, d.tags[0][0], now):
            finished.append(heapq.heappop(d.tags)[1])
            d.active -= 1
        self.reschedule(d, now)
        for tid in finished:
            self.finished(tid, now)


class WindowLock:
    """Shared holders together (reads; adds into a window others accumulate into), an exclusive one
    alone (the owner's publish or drain; a read of an accumulated window), in the order requested."""

    __slots__ = ("shared", "exclusive", "queue")

    def __init__(self) -> None:
        self.shared = 0
        self.exclusive = False
        self.queue: deque[tuple[bool, Done]] = deque()

    def fits(self, exclusive: bool) -> bool:
        return not self.exclusive and (not exclusive or self.shared == 0)

    def take(self, exclusive: bool) -> None:
        if exclusive:
            self.exclusive = True
        else:
            self.shared += 1

    def acquire(self, exclusive: bool, granted: Done) -> bool:
        """True: held now (``granted`` is not called); False: ``granted`` is queued."""
        if not self.queue and self.fits(exclusive):
            self.take(exclusive)
            return True
        self.queue.append((exclusive, granted))
        return False

    def release(self, exclusive: bool) -> list[Done]:
        """Let go; → the queued requests now granted, in order (the caller runs them)."""
        if exclusive:
            self.exclusive = False
        else:
            self.shared -= 1
        granted = []
        while self.queue and self.fits(self.queue[0][0]):
            wants, then = self.queue.popleft()
            self.take(wants)
            granted.append(then)
        return granted


class Versions:
    """A versioned window's two slots: readers count themselves on the newest while they copy it; a
    publish writes the other slot (the newest, for a part of the window) once no reader is on it,
    else waits until the last one lets go."""

    __slots__ = ("newest", "readers", "waiting")

    def __init__(self) -> None:
        self.newest = 0
        self.readers = [0, 0]
        self.waiting: tuple[int, Done] | None = None  # the owner's publish: (its slot, what to do once free)

    def hold(self) -> int:
        """A reader begins copying the newest version; → its slot (for ``release``)."""
        self.readers[self.newest] += 1
        return self.newest

    def release(self, slot: int) -> Done | None:
        """A reader is done with ``slot``; → the owner's waiting publish, now free to go."""
        self.readers[slot] -= 1
        if self.waiting is not None and self.waiting[0] == slot and not self.readers[slot]:
            then = self.waiting[1]
            self.waiting = None
            self.newest = slot
            return then
        return None

    def publish(self, whole: bool, then: Done) -> bool:
        """True: written now (``then`` is not called); False: ``then`` runs once the slot is free."""
        slot = 1 - self.newest if whole else self.newest
        if self.readers[slot]:
            self.waiting = (slot, then)
            return False
        self.newest = slot
        return True
