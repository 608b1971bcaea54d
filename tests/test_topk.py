"""Top-k sparsification with error feedback against a naive re-implementation written out here (a full
sort instead of a partition, a dense sparse vector per worker, float64 sums), its conservation law (what
was sent plus what is still owed is everything given), and the edge where it sends every element."""
import numpy as np
import pytest

from hpcbench.algorithms.compressors import CompressOptions, make
from hpcbench.algorithms.ops import Allgather, Workers


def run(vectors, ratio, feedback=True):
    """Every worker's top-k compressor averaging vectors[step][worker], its all-gathers answered by
    concatenating the workers' parts; → (each step's mean, checked identical on every worker, and the
    compressors)."""
    n, size = len(vectors[0]), vectors[0][0].size
    options = CompressOptions(compress="topk", topk_ratio=ratio, error_feedback=feedback)
    workers = [make(options, rank, size, [0, size], [(size,)]) for rank in range(1, n + 1)]
    members = tuple(range(1, n + 1))
    out = []
    for parts in vectors:
        programs = [w.mean(v) for w, v in zip(workers, parts)]
        ops = [next(p) for p in programs]
        ops = [p.send(members) if isinstance(op, Workers) else op for p, op in zip(programs, ops)]
        assert all(isinstance(op, Allgather) for op in ops)
        gathered = np.concatenate([op.data for op in ops])
        results = []
        for p in programs:
            op = p.send(gathered)
            assert isinstance(op, Workers)
            with pytest.raises(StopIteration) as done:
                p.send(members)
            results.append(done.value.value)
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])
        out.append(results[0])
    return out, workers


def naive(vectors, ratio, feedback=True):
    """Per worker: add the error; keep the ⌈ratio·d⌉ largest in magnitude (by a full sort); the rest is
    the next error; the mean of the kept vectors."""
    n, size = len(vectors[0]), vectors[0][0].size
    k = max(1, int(np.ceil(ratio * size)))
    errors = [np.zeros(size) for _ in range(n)]
    out = []
    for parts in vectors:
        total = np.zeros(size)
        for i, g in enumerate(parts):
            fed = g.astype(np.float64) + (errors[i] if feedback else 0.0)
            keep = np.argsort(-np.abs(fed), kind="stable")[:k]
            sent = np.zeros(size)
            sent[keep] = fed[keep]
            errors[i] = fed - sent
            total += sent
        out.append(total / n)
    return out


@pytest.mark.parametrize("ratio, feedback", [(0.05, True), (0.2, True), (0.05, False), (0.001, True)])
def test_topk_matches_the_naive_reimplementation_step_for_step(ratio, feedback):
    rng = np.random.default_rng(7)
    steps = [[rng.standard_normal(300).astype(np.float32) for _ in range(4)] for _ in range(8)]
    got, _ = run(steps, ratio, feedback)
    for k, (g, w) in enumerate(zip(got, naive(steps, ratio, feedback))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"step {k}")
    assert np.count_nonzero(got[0]) <= 4 * max(1, int(np.ceil(ratio * 300)))  # sparse: at most n·k elements


def test_with_error_feedback_nothing_given_is_lost():
    """Σ_t mean_t + mean_i(e_i) = Σ_t mean_i(g_t,i): every element a worker gave was sent or is still owed."""
    rng = np.random.default_rng(8)
    steps = [[rng.standard_normal(200).astype(np.float32) for _ in range(3)] for _ in range(10)]
    got, workers = run(steps, 0.03)
    owed = np.mean([w.error for w in workers], axis=0, dtype=np.float64)
    given = np.sum([np.mean(parts, axis=0, dtype=np.float64) for parts in steps], axis=0)
    np.testing.assert_allclose(np.sum(got, axis=0, dtype=np.float64) + owed, given, rtol=1e-4, atol=1e-4)
    without, _ = run(steps, 0.03, feedback=False)
    assert np.abs(np.sum(without, axis=0) - given).max() > 1.0  # without it the rest is dropped


def test_a_ratio_of_one_is_the_plain_mean():
    rng = np.random.default_rng(9)
    steps = [[rng.standard_normal(50).astype(np.float32) for _ in range(3)] for _ in range(3)]
    got, _ = run(steps, 1.0)
    for g, parts in zip(got, steps):
        np.testing.assert_allclose(g, np.mean(parts, axis=0), rtol=1e-6, atol=1e-6)
