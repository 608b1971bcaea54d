"""The simulator's links (each direction shared by the transfers in it, equally or by weights,
transfers between one pair in order) and window locks (granted in the order asked), against hand-worked times and a
naive
fluid simulation."""
import heapq
import itertools

import numpy as np
import pytest

from hpcbench.results.store import read_run
from hpcbench.runtime.sim.links import Links, WindowLock

from conftest import cli

B = 1e6  # bytes per second


class Loop:
    """A bare event loop driving Links: ``send(t, src, dst, nbytes)`` → the time it arrives."""

    def __init__(self, ranks: int, weights=None) -> None:
        self.now, self.heap, self.seq = 0.0, [], itertools.count()
        self.links = Links(ranks, B, self.at, weights)
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


def test_weighted_transfers_share_a_link_in_proportion_and_no_byte_is_lost():
    # weights 3 and 1: the first at 0.75 B is done at 4/3 s; the other has 1/3 of its bytes, the rest alone
    loop = Loop(3, weights=iter([3.0, 1.0]).__next__)
    loop.send(0.0, 0, 1, 1e6, 1)
    loop.send(0.0, 0, 2, 1e6, 2)
    assert loop.run() == {1: pytest.approx(4 / 3), 2: pytest.approx(2.0)}
    alone = Loop(2, weights=iter([0.2]).__next__)  # a weight changes nothing for a transfer alone
    alone.send(0.0, 0, 1, 1e6, 1)
    assert alone.run() == {1: pytest.approx(1.0)}


def weighted_fluid(transfers: list[tuple[float, int, int, float]], weights: list[float], dt: float) -> list[float]:
    """A naive reference for a server's sending end: step time by ``dt``; the active transfers share
    the bandwidth in proportion to their weights."""
    left, done, t = [n for _, _, _, n in transfers], [np.inf] * len(transfers), 0.0
    while any(d == np.inf for d in done):
        active = [i for i, tr in enumerate(transfers) if tr[0] <= t + 1e-12 and done[i] == np.inf]
        total = sum(weights[i] for i in active)
        for i in active:
            left[i] -= dt * B * weights[i] / total
            if left[i] <= 1e-9:
                done[i] = t + dt
        t += dt
    return done


@pytest.mark.parametrize("seed, weighted", [(0, False), (1, False), (2, True), (3, True), (4, True)])
def test_a_server_read_by_many_workers_matches_a_fluid_simulation(seed, weighted):
    """Workers (each with one transfer at a time) reading rank 0 at random times and sizes: only the
    server's end is contended, where sharing per direction is exact (equally, or by drawn weights)."""
    rng = np.random.default_rng(seed)
    transfers = [(float(rng.uniform(0, 1)), 0, w, float(rng.uniform(0.1e6, 1e6))) for w in range(1, 7)]
    weights = [float(x) for x in rng.gamma(4.0, 0.25, len(transfers))] if weighted else [1.0] * len(transfers)
    order = sorted(range(len(transfers)), key=lambda i: transfers[i][0])  # the links draw in start order
    loop = Loop(7, weights=iter([weights[i] for i in order]).__next__ if weighted else None)
    for i, (start, src, dst, nbytes) in enumerate(transfers):
        loop.send(start, src, dst, nbytes, i)
    got = loop.run()
    want = weighted_fluid(transfers, weights, dt=1e-4)
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


def reads_together(path) -> float:
    """How much of worker 1's time reading the server's model worker 2 spends reading it too."""
    rec = read_run(path)
    tl, code = rec.timeline, list(rec.phases).index("communicate")
    spans = {w: [(s, e) for r, p, s, e in zip(tl["rank"], tl["phase"], tl["t_start"], tl["t_end"])
                 if r == w and p == code and e - s > 0.05] for w in (1, 2)}
    shared = sum(max(0.0, min(e, e2) - max(s, s2)) for s, e in spans[1] for s2, e2 in spans[2])
    return shared / sum(e - s for s, e in spans[1])


def test_a_servers_two_readers_fall_into_a_convoy_with_equal_shares_and_drift_apart_by_default(tmp_path):
    """Over a slow link (1.2 MB a message, 0.48 s), equal shares keep two workers that start together
    reading and sending in step; the links' uneven sharing lets them alternate, as real ones do."""
    args = ["simulate", "--algo", "asgd", "--workers", "2", "--model", "payload", "--set", "payload.params=300000",
            "--compute", "gamma:shape=100,mean=0.02", "--steps", "20", "--network", "alpha=1e-5,bandwidth=2.5e6",
            "--numerics", "off", "--set", "evals=1"]
    assert cli(*args, "--set", "sim.share_cv=0", "--out", str(tmp_path / "equal.h5"))[0] == 0
    assert cli(*args, "--out", str(tmp_path / "uneven.h5"))[0] == 0
    assert reads_together(tmp_path / "equal.h5") > 0.95 and reads_together(tmp_path / "uneven.h5") < 0.8
    speed = {name: read_run(tmp_path / f"{name}.h5").summary["samples_per_s"] for name in ("equal", "uneven")}
    assert speed["uneven"] > 1.2 * speed["equal"]  # alternating, each link carries one transfer at a time
