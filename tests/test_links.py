"""The simulator's links (each direction shared fairly by the transfers in it, transfers between one
pair in order) and window locks (granted in the order asked), against hand-worked times and a naive
fluid simulation."""
import heapq
import itertools

import numpy as np
import pytest

from hpcbench.runtime.sim.links import Links, WindowLock

B = 1e6  # bytes per second


class Loop:
    """A bare event loop driving Links: ``send(t, src, dst, nbytes)`` → the time it arrives."""

    def __init__(self, ranks: int) -> None:
        self.now, self.heap, self.seq = 0.0, [], itertools.count()
        self.links = Links(ranks, B, self.at)
        self.arrived: dict[int, float] = {}

    def at(self, t, action, *args):
        heapq.heappush(self.heap, (t, next(self.seq), action, args))

    def send(self, t: float, src: int, dst: int, nbytes: float, name: int) -> None:
        self.at(t, self.links.start, src, dst, nbytes, lambda: self.arrived.__setitem__(name, self.now), t)

    def run(self) -> dict[int, float]:
        while self.heap:
            self.now, _, action, args = heapq.heappop(self.heap)
            action(*args)
        return self.arrived


def test_one_transfer_takes_its_bytes_over_the_bandwidth():
    loop = Loop(2)
    loop.send(0.5, 0, 1, 2e6, 0)
    assert loop.run()[0] == pytest.approx(2.5)


def test_two_peers_reading_one_rank_at_once_both_finish_after_two_message_times():
    loop = Loop(3)
    loop.send(0.0, 0, 1, 1e6, 1)
    loop.send(0.0, 0, 2, 1e6, 2)
    assert loop.run() == {1: pytest.approx(2.0), 2: pytest.approx(2.0)}


def test_a_transfer_joining_halfway_slows_the_one_under_way():
    # 1 MB alone for 0.5 s (half sent), then shared: its other half at B/2 takes 1 s more; the
    # newcomer has half its bytes by then and the rest alone: 0.5 s more.
    loop = Loop(3)
    loop.send(0.0, 0, 1, 1e6, 1)
    loop.send(0.5, 0, 2, 1e6, 2)
    assert loop.run() == {1: pytest.approx(1.5), 2: pytest.approx(2.0)}


def test_transfers_between_one_pair_go_one_after_another():
    loop = Loop(2)
    loop.send(0.0, 0, 1, 1e6, 1)
    loop.send(0.0, 0, 1, 1e6, 2)
    assert loop.run() == {1: pytest.approx(1.0), 2: pytest.approx(2.0)}


def test_sending_and_receiving_at_once_do_not_slow_each_other():
    loop = Loop(2)
    loop.send(0.0, 0, 1, 1e6, 1)
    loop.send(0.0, 1, 0, 1e6, 2)
    assert loop.run() == {1: pytest.approx(1.0), 2: pytest.approx(1.0)}


def fluid(transfers: list[tuple[float, int, int, float]], dt: float) -> list[float]:
    """A naive reference: step time by ``dt``; at each step every active transfer gets the smaller of
    its sender's and its receiver's equal share of the bandwidth."""
    left = [n for _, _, _, n in transfers]
    done = [np.inf] * len(transfers)
    t = 0.0
    while any(d == np.inf for d in done):
        active = [i for i, (start, _, _, _) in enumerate(transfers) if start <= t + 1e-12 and done[i] == np.inf]
        sends = {s: sum(transfers[i][1] == s for i in active) for _, s, _, _ in transfers}
        recvs = {r: sum(transfers[i][2] == r for i in active) for _, _, r, _ in transfers}
        for i in active:
            _, s, r, _ = transfers[i]
            left[i] -= dt * B / max(sends[s], recvs[r])
            if left[i] <= 1e-9:
                done[i] = t + dt
        t += dt
    return done


@pytest.mark.parametrize("seed", range(4))
def test_a_server_read_by_many_workers_matches_a_fluid_simulation(seed):
    """Workers (each with one transfer at a time) reading rank 0 at random times and sizes: only the
    server's end is contended, where fair sharing per direction is exact."""
    rng = np.random.default_rng(seed)
    transfers = [(float(rng.uniform(0, 1)), 0, w, float(rng.uniform(0.1e6, 1e6))) for w in range(1, 7)]
    loop = Loop(7)
    for i, (start, src, dst, nbytes) in enumerate(transfers):
        loop.send(start, src, dst, nbytes, i)
    got = loop.run()
    want = fluid(transfers, dt=1e-4)
    for i in range(len(transfers)):
        assert got[i] == pytest.approx(want[i], abs=2e-3)


def test_window_locks_are_granted_in_the_order_asked():
    lock, order = WindowLock(), []
    assert lock.acquire(False, lambda: order.append("r1"))  # a read: held at once
    assert lock.acquire(False, lambda: order.append("r2"))  # another: shared with it
    assert not lock.acquire(True, lambda: order.append("publish"))  # the owner waits for both ...
    assert not lock.acquire(False, lambda: order.append("r3"))  # ... and a later read waits behind it
    assert lock.release(False) == []
    for granted in lock.release(False):
        granted()
    assert order == ["publish"]
    for granted in lock.release(True):
        granted()
    assert order == ["publish", "r3"] and lock.shared == 1 and not lock.exclusive
