"""Peer choice and mixing, against exact averaging and conservation laws (no MPI)."""
import numpy as np
import pytest

from hpcbench.algorithms.topology import exponential_hops, exponential_in_peer, exponential_out_peer, random_peer


@pytest.mark.parametrize("n", range(2, 18))
def test_exponential_graph_is_a_permutation_with_matching_in_peers(n):
    for k in range(3 * exponential_hops(n)):
        outs = [exponential_out_peer(i, k, n) for i in range(n)]
        assert sorted(outs) == list(range(n)) and all(o != i for i, o in enumerate(outs))
        assert all(exponential_in_peer(outs[i], k, n) == i for i in range(n))


def test_hops_follow_floor_log2_n_minus_1():
    assert [exponential_hops(n) for n in (2, 3, 4, 5, 8, 9, 16, 17)] == [1, 2, 2, 3, 3, 4, 4, 5]


def push_sum_round(x, w, k):
    """One sgp gossip round, written out: keep half, send half to the out-peer."""
    n = len(w)
    nx, nw = x / 2, w / 2
    for i in range(n):
        j = exponential_out_peer(i, k, n)
        nx[j] += x[i] / 2
        nw[j] += w[i] / 2
    return nx, nw


@pytest.mark.parametrize("n", [4, 8])
def test_exact_average_after_log2_n_rounds(n):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 5))
    w = np.ones(n)
    target = x.mean(axis=0)
    for k in range(int(np.log2(n))):
        x, w = push_sum_round(x, w, k)
    np.testing.assert_allclose(x / w[:, None], np.tile(target, (n, 1)), rtol=0, atol=1e-12)
    assert (w == 1.0).all()


def test_push_sum_with_random_peers_conserves_mass_over_many_rounds():
    n, rng = 7, np.random.default_rng(3)
    peers = [np.random.default_rng([0, i]) for i in range(n)]
    x, w = rng.normal(size=(n, 4)), np.ones(n)
    total_x, total_w = x.sum(axis=0), w.sum()
    mailbox_x, mailbox_w = np.zeros_like(x), np.zeros_like(w)
    for _ in range(500):
        for i in rng.permutation(n):  # workers act in random order, asynchronously
            j = random_peer(int(i), n, peers[i])
            x[i] /= 2
            w[i] /= 2
            mailbox_x[j] += x[i]
            mailbox_w[j] += w[i]
            x[i] += mailbox_x[i]
            w[i] += mailbox_w[i]
            mailbox_x[i] = 0
            mailbox_w[i] = 0
        np.testing.assert_allclose((x + mailbox_x).sum(axis=0), total_x, rtol=1e-12)
        assert abs((w + mailbox_w).sum() - total_w) < 1e-12
    assert np.ptp(x / w[:, None], axis=0).max() < 1e-6  # and it reached consensus


def test_random_peer_is_uniform_and_never_self():
    rng = np.random.default_rng(0)
    picks = [random_peer(2, 5, rng) for _ in range(4000)]
    counts = np.bincount(picks, minlength=5)
    assert counts[2] == 0 and all(900 < c < 1100 for i, c in enumerate(counts) if i != 2)
