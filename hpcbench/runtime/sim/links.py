"""The simulator's network links and window locks, in virtual time.

Links: every rank has a full-duplex link, a send and a receive direction of the same bandwidth. The
transfers under way through one direction share it in proportion to their weights (weighted
processor sharing; equal weights by default of ``weights``): a transfer alone has all of it, and TCP
flows through one bottleneck split it unevenly, which one gets more changing from one transfer to
the next (benchmarks/link_sharing.py: the first of two peers reading one rank's model at once done
after 1.6–1.9 message times on average, single rounds 1.1–2.1, where equal shares finish both after
two and first-come-first-served one after one). A transfer is done when both of its directions have
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
from collections.abc import Callable

Schedule = Callable[..., None]  # at(t, action, *args)
Done = Callable[[], None]


class Direction:
    """One direction of one rank's link, shared by the transfers in it in proportion to their
    weights. ``served``: bytes a transfer of weight 1 in it has received so far (one of weight w has
    received w times as many), so a transfer of ``n`` bytes and weight ``w`` that joined when
    ``served`` was ``s`` leaves at ``s + n / w``; ``weight``: the weights in it, summed. ``due``: when
    the next departure event is scheduled; a transfer joining only delays departures, so that event
    stays and, if early, finds nothing leaving and schedules the next (one event however many join
    meanwhile); ``version`` tells it from events superseded by an earlier one."""

    __slots__ = ("active", "weight", "served", "since", "tags", "version", "due")

    def __init__(self) -> None:
        self.active = 0
        self.weight = 0.0
        self.served = 0.0
        self.since = 0.0
        self.tags: list[tuple[float, int, float]] = []  # heap of (served when it leaves, transfer id, weight)
        self.version = 0
        self.due = math.inf


class Links:
    """``weights``: each transfer's weight where several share a direction (None: all 1, equal shares)."""

    def __init__(self, ranks: int, bandwidth: float, at: Schedule, weights: Callable[[], float] | None = None) -> None:
        self.bandwidth, self.at, self.weights = bandwidth, at, weights
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
        weight = 1.0 if self.weights is None else self.weights()
        self.join(self.sending[pair[0]], tid, nbytes, weight, now)
        self.join(self.receiving[pair[1]], tid, nbytes, weight, now)

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
            d.served += (now - d.since) * self.bandwidth / d.weight
        d.since = now

    def join(self, d: Direction, tid: int, nbytes: float, weight: float, now: float) -> None:
        self.advance(d, now)
        heapq.heappush(d.tags, (d.served + nbytes / weight, tid, weight))
        d.active += 1
        d.weight += weight
        self.reschedule(d, now)

    def reschedule(self, d: Direction, now: float) -> None:
        if d.tags:
            t = now + (d.tags[0][0] - d.served) * d.weight / self.bandwidth
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
        return left <= d.served * 1e-12 + 1e-9 or now + left * d.weight / self.bandwidth <= now

    def tick(self, d: Direction, version: int, now: float) -> None:
        if version != d.version:
            return
        d.due = math.inf
        self.advance(d, now)
        finished = []
        while d.tags and self.served_by(d, d.tags[0][0], now):
            _, tid, weight = heapq.heappop(d.tags)
            finished.append(tid)
            d.active -= 1
            d.weight = d.weight - weight if d.active else 0.0  # no rounding left over once empty
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
