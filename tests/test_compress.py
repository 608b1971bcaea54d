"""Compressed all-reduce: bfloat16 against torch's own conversion, fp16/bf16 means within their
precision, and PowerSGD against a naive re-implementation written out here (same starting Qs, same
error feedback; orthogonalization by numpy's QR instead of Gram-Schmidt), step after step."""
import numpy as np
import pytest
import torch

from hpcbench.algorithms.compressors import COMPRESSORS, CompressOptions, make
from hpcbench.algorithms.compressors.powersgd import POWERSGD_SEED, compressible, orthogonalize
from hpcbench.algorithms.ops import Allgather, Allreduce, Workers
from hpcbench.bfloat16 import add_bf16, from_bf16, to_bf16


def test_bf16_rounds_to_nearest_even_as_torch_does():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(10_000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 10_000),
                        np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 0.0, -0.0, np.inf, -np.inf,
                                  3.3895314e38, 1e-40], np.float32)])  # ties both ways, the largest, a subnormal
    x = np.append(x, np.float32(np.nan))
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = to_bf16(x)
    assert got.dtype == np.uint16 and got[-1] == 0x7FC0  # torch's NaN, bit for bit
    np.testing.assert_array_equal(got, want)
    assert from_bf16(got).dtype == np.float32 and np.isnan(from_bf16(got)[-1])
    finite = x[np.isfinite(x) & (np.abs(x) > 1e-37)]
    back = from_bf16(to_bf16(finite))
    assert np.max(np.abs(back - finite) / np.abs(finite)) <= 2.0**-8  # half a unit in the last of 8 bits


def test_a_bf16_sum_is_the_rounded_float_sum():
    a, b = np.float32([1.0, 256.0, -3.5]), np.float32([2**-9, 1.0, 3.5])
    np.testing.assert_array_equal(from_bf16(add_bf16(to_bf16(a), to_bf16(b))), [1.0, 256.0, 0.0])


def means(kind: str, vectors: list[list[np.ndarray]], bounds=(0,), shapes=None, sent=None,
          **options) -> list[np.ndarray]:
    """Every worker's compressor averaging vectors[step][worker], its all-reduces answered by summing
    the workers' parts in their own type and its all-gathers by concatenating them; → each step's
    results (checked identical on every worker). ``sent``: a list to receive, per step, each
    collective's (dtype, size, bf16) of worker 1."""
    n, size = len(vectors[0]), vectors[0][0].size
    shapes = shapes or [(size,)]
    compressors = [make(CompressOptions(compress=kind, **options), rank, size, list(bounds) + [size], shapes)
                   for rank in range(1, n + 1)]
    members = tuple(range(1, n + 1))

    def advance(program, value):
        """The program's next all-reduce (who the workers are, answered on the way), or its result."""
        op = program.send(value)
        while isinstance(op, Workers):
            op = program.send(members)
        return op

    out = []
    for parts in vectors:
        programs = [c.mean(v) for c, v in zip(compressors, parts)]
        ops = [advance(p, None) for p in programs]
        results = [None] * n
        if sent is not None:
            sent.append([])
        while True:
            assert all(type(op) is type(ops[0]) and type(op) in (Allreduce, Allgather) for op in ops)
            if sent is not None:
                sent[-1].append((ops[0].data.dtype, ops[0].data.size, getattr(ops[0], "bf16", False)))
            if isinstance(ops[0], Allgather):
                total = np.concatenate([op.data for op in ops])
            else:
                total = ops[0].data.copy()
                for op in ops[1:]:
                    total = add_bf16(total, op.data) if op.bf16 else total + op.data
            ops = []
            for i, p in enumerate(programs):
                try:
                    ops.append(advance(p, total.copy()))
                except StopIteration as done:
                    results[i] = done.value
            if not ops:
                break
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])
        out.append(results[0])
    return out


@pytest.mark.parametrize("kind, precision, wire", [("fp16", 2.0**-10, (np.float16, False)),
                                                   ("bf16", 2.0**-7, (np.uint16, True))])
def test_fp16_and_bf16_means_are_within_their_precision_and_travel_in_16_bits(kind, precision, wire):
    rng = np.random.default_rng(1)
    parts = [[rng.standard_normal(1000).astype(np.float32) for _ in range(4)] for _ in range(12)]
    sent: list = []
    for got, step in zip(means(kind, parts, sent=sent), parts):
        exact = np.mean(step, axis=0, dtype=np.float64)
        scale = np.max(np.abs(step))  # the error is relative to the largest term summed
        assert got.dtype == np.float32 and np.max(np.abs(got - exact)) <= 4 * precision * scale
        assert np.max(np.abs(got - exact)) > 0  # it was rounded
    assert sent == [[(np.dtype(wire[0]), 1000, wire[1])]] * 12  # every step, past powersgd_start too


def test_no_compression_is_the_float32_mean_every_time():
    rng = np.random.default_rng(4)
    parts = [[rng.standard_normal(50).astype(np.float32) for _ in range(3)] for _ in range(12)]
    sent: list = []
    for got, step in zip(means("none", parts, sent=sent), parts):
        np.testing.assert_allclose(got, np.mean(step, axis=0), rtol=1e-6, atol=1e-7)
    assert sent == [[(np.dtype(np.float32), 50, False)]] * 12


def test_orthogonalize_gives_orthonormal_columns_whatever_their_scale_and_keeps_a_zero_column():
    rng = np.random.default_rng(5)
    for scale in (1e-3, 1.0, 1e3):
        m = (rng.standard_normal((20, 3)) * scale).astype(np.float32)
        want = gram_schmidt_by_qr(m)
        orthogonalize(m)
        np.testing.assert_allclose(m.T @ m, np.eye(3), atol=1e-5)
        np.testing.assert_allclose(m, want, atol=1e-5)
    m = np.zeros((5, 2), np.float32)
    m[:, 1] = 1.0
    orthogonalize(m)
    assert np.all(m[:, 0] == 0) and np.allclose(m[:, 1], 1 / np.sqrt(5))


def gram_schmidt_by_qr(m: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning m's, signed as Gram-Schmidt signs them (R's diagonal positive)."""
    q, r = np.linalg.qr(m.astype(np.float64))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def naive_powersgd(vectors, bounds, shapes, rank, start, feedback=True):
    """PowerSGD written out: per step, each worker's vector plus its error; the uncompressed elements
    averaged; per matrix P = Σ_i M_i·Q, orthonormalized; Q = Σ_i M_iᵀ·P / n; M̂ = P·Qᵀ; errors M_i − M̂."""
    n, size = len(vectors[0]), vectors[0][0].size
    edges = list(bounds) + [size]
    spans = [(a, b, s) for a, b, s in zip(edges, edges[1:], shapes) if compressible(s, rank)]
    rng = np.random.default_rng(POWERSGD_SEED)
    qs = [rng.standard_normal((s[0] and int(np.prod(s[1:])), min(s[0], int(np.prod(s[1:])), rank))).astype(np.float32)
          for _, _, s in spans]
    errors = [np.zeros(size, np.float32) for _ in range(n)]
    out = []
    for k, parts in enumerate(vectors):
        if k < start:
            out.append(np.mean(parts, axis=0, dtype=np.float64))
            continue
        fed = [p + e if feedback else p for p, e in zip(parts, errors)]
        result = np.mean(fed, axis=0, dtype=np.float64)  # the uncompressed elements
        for j, (a, b, s) in enumerate(spans):
            mats = [f[a:b].reshape(s[0], -1) for f in fed]
            q = gram_schmidt_by_qr(qs[j])
            p = gram_schmidt_by_qr(sum(m @ q for m in mats))
            qs[j] = sum(m.T @ p for m in mats) / n
            result[a:b] = (p @ qs[j].T).ravel()
        errors = [f - result.astype(np.float32) for f in fed]
        out.append(result)
    return out


# 268 floats: at rank 1 three matrices are compressed (16x12, 8x3, 6x5), at rank 2 one, at rank 3 one.
LAYERS = {"bounds": (0, 192, 204, 228, 238), "shapes": [(16, 12), (12,), (8, 3), (10,), (6, 5)]}
SIZE = 268


@pytest.mark.parametrize("rank, start, feedback", [(1, 0, True), (2, 2, True), (3, 1, False)])
def test_powersgd_matches_the_naive_reimplementation_step_for_step(rank, start, feedback):
    rng = np.random.default_rng(2)
    steps = [[rng.standard_normal(SIZE).astype(np.float32) for _ in range(3)] for _ in range(6)]
    got = means("powersgd", steps, **LAYERS, powersgd_rank=rank, powersgd_start=start, error_feedback=feedback)
    want = naive_powersgd(steps, LAYERS["bounds"], LAYERS["shapes"], rank, start, feedback)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"step {k}")
    assert not np.allclose(got[-1], np.mean(steps[-1], axis=0), atol=1e-2)  # it did compress


def test_powersgd_at_the_matrices_rank_is_the_plain_mean():
    """Matrices whose sum has rank 2: at rank 2 the approximation is exact, at rank 1 it is not. They
    change from step to step as gradients do, a little (where consecutive sums are nearly orthogonal,
    the warm-started power step is ill-conditioned and float32 loses digits: DDP's too)."""
    rng = np.random.default_rng(3)
    u = rng.standard_normal((32, 2)).astype(np.float32)
    base = [rng.standard_normal((2, 24)) for _ in range(4)]
    steps = [[(u @ (b + 0.3 * rng.standard_normal((2,
                                                   24)))).astype(np.float32).ravel() for b in base] for _ in range(6)]
    shapes = [(32, 24)]
    for g, parts in zip(means("powersgd", steps, shapes=shapes, powersgd_rank=2, powersgd_start=0), steps):
        np.testing.assert_allclose(g, np.mean(parts, axis=0), rtol=1e-5, atol=1e-5)
    low = means("powersgd", steps, shapes=shapes, powersgd_rank=1, powersgd_start=0)
    assert not np.allclose(low[0], np.mean(steps[0], axis=0), atol=1e-2)


@pytest.mark.parametrize("shape, rank, compressed", [((4, 4), 1, False), ((5, 4), 1, True), ((4, 3, 3), 1, True),
                                                     ((4, 3, 3), 2, False), ((100,), 1, False), ((100, 1), 1, False)])
def test_a_matrix_is_compressed_where_its_factors_take_less_than_half_of_it(shape, rank, compressed):
    """DDP's rule, its edge included: 4 x 4 at rank 1 is 16 numbers either way (8·2 = 16): not compressed."""
    assert compressible(shape, rank) is compressed


def sent_by(compressor, vector, workers=1):
    """The collectives one call of ``compressor.mean`` makes, answered as if every worker gave the same
    vector: [(op type, bytes, bf16)], at the array's size or, where given, the declared ``wire``."""
    members = tuple(range(1, workers + 1))
    sent, program = [], compressor.mean(vector)
    op = next(program)
    try:
        while True:
            if isinstance(op, Workers):
                op = program.send(members)
                continue
            nbytes = op.wire if op.wire >= 0 else op.data.nbytes
            sent.append((type(op), nbytes, getattr(op, "bf16", False)))
            answer = np.concatenate([op.data] * workers) if isinstance(op, Allgather) else op.data * workers
            op = program.send(answer)
    except StopIteration:
        pass
    return sent


@pytest.mark.parametrize("kind", COMPRESSORS.names())
def test_every_compression_sends_what_it_declares_and_a_stand_in_sends_the_same(kind):
    """What the simulator without numerics counts (the declared messages, sent from a stand-in vector a
    few floats long) is what the compression sends from the real vector, call after call; one whose
    messages are whole vectors sends the stand-in itself, which the simulator counts at the model's size."""
    options = CompressOptions(compress=kind, powersgd_rank=2, powersgd_start=1, topk_ratio=0.05)
    bounds = list(LAYERS["bounds"]) + [SIZE]
    real = make(options, 1, SIZE, bounds, LAYERS["shapes"])
    stand_in = make(options, 1, 64, bounds, LAYERS["shapes"])
    rng = np.random.default_rng(6)
    for call in range(3):
        sent = sent_by(real, rng.standard_normal(SIZE).astype(np.float32), 3)
        declared = [(m.op, m.nbytes, m.bf16) for m in real.messages(3)]  # of the call just made
        assert sent == declared, (kind, call)
        if real.whole_vectors:
            declared = [(op, nbytes * 64 // SIZE, bf16) for op, nbytes, bf16 in declared]
        assert sent_by(stand_in, np.zeros(64, np.float32), 3) == declared, (kind, call)


def test_powersgd_sends_r_times_rows_plus_columns_per_matrix():
    compressor = make(CompressOptions(compress="powersgd", powersgd_rank=2, powersgd_start=0), 1, SIZE,
                      list(LAYERS["bounds"]) + [SIZE], LAYERS["shapes"])
    # (8, 3) and (6, 5) gain nothing at rank 2 and go with the vectors: 12 + 24 + 10 + 30 = 76; P 16·2, Q 12·2
    assert [n // 4 for _, n, _ in sent_by(compressor, np.ones(SIZE, np.float32))] == [76, 32, 24]


def sim_and_mpi(tmp_path, name: str, args: list[str]):
    import contextlib
    import io

    from hpcbench.cli import main
    from hpcbench.results.store import read_run

    from conftest import mpirun, ok
    common = ["--dataset", "digits", "--model", "mlp", "--batch-size", "16", "--steps", "12", "--lr", "0.05",
              "--set", "warmup_epochs=0", "--set", "evals=3", *args]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["simulate", "--workers", "2", *common, "--out", str(tmp_path / f"{name}-sim.h5")]) == 0
    ok(mpirun(3, "run", *common, "--out", str(tmp_path / f"{name}-mpi.h5")))
    return read_run(tmp_path / f"{name}-sim.h5"), read_run(tmp_path / f"{name}-mpi.h5")


# Every compression in the all-reduce (from its 4th call where it waits), and DiLoCo's outer step through PowerSGD.
COMPRESSED_RUNS = {
    **{kind: ["--algo", "allreduce", "--set", "allreduce.overlap=false", "--set", f"allreduce.compress={kind}",
              "--set", "allreduce.powersgd_start=3", "--set", "allreduce.topk_ratio=0.1"]
       for kind in COMPRESSORS.names()},
    "diloco": ["--algo", "local-sgd", "--set", "local-sgd.period=3", "--set", "local-sgd.outer=nesterov",
               "--set", "local-sgd.outer_lr=0.7", "--set", "local-sgd.outer_momentum=0.9",
               "--set", "local-sgd.compress=powersgd", "--set", "local-sgd.powersgd_start=1"],
}


@pytest.mark.mpi
def test_compressed_runs_under_mpi_end_where_the_simulator_does_and_move_fewer_bytes(tmp_path):
    """Two workers: a sum of two is the same in any order, so the real bf16 reduction (an MPI user
    operation), fp16's (MPI's own), PowerSGD's three all-reduces and top-k's all-gather give the
    simulator's models."""
    import pytest as _pytest

    from conftest import (
        have_mpiexec,
        requires_mpi,  # noqa: F401  (the mark's condition, checked here)
    )
    if not have_mpiexec():
        _pytest.skip("no mpiexec")
    moved = {}
    for name, args in COMPRESSED_RUNS.items():
        sim, real = sim_and_mpi(tmp_path, name, args)
        assert real.attrs["status"] == "ok" and sim.attrs["status"] == "ok"
        np.testing.assert_allclose(real.final_params, sim.final_params, rtol=1e-4, atol=1e-5, err_msg=name)
        assert real.summary["bytes_per_sample"] == _pytest.approx(sim.summary["bytes_per_sample"], rel=1e-9), name
        codes = [list(real.ops).index(op) for op in ("Allreduce", "Allgather")]
        moved[name] = (int(real.timeline["nbytes"][np.isin(real.timeline["op"], codes)].sum()),
                       real.summary["bytes_per_sample"])
    samples = 12 * 2 * 16
    (plain, plain_per), (half, half_per) = moved["none"], moved["fp16"]
    assert half * 2 == plain and moved["bf16"] == moved["fp16"]  # 2 bytes a number instead of 4
    assert plain_per - half_per == _pytest.approx((plain - half) / samples)  # and the summary says so
    # PowerSGD from the 4th step: the 128×64, 128×128 and 10×128 weights as r·(rows + columns) numbers
    assert moved["powersgd"][0] < 0.5 * plain
    assert moved["topk"][0] < 0.25 * plain  # a tenth of the elements, each with its index


def test_the_simulator_refuses_a_compression_with_message_params(tmp_path):
    from conftest import cli
    code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "2", "--steps", "3",
                       "--set", "sim.message_params=1000000", "--set", "allreduce.compress=powersgd",
                       "--out", str(tmp_path / "x.h5"))
    assert code == 2 and err.strip() == ("hpcbench: error: sim.message_params counts whole-model messages at another "
                                         "size, and allreduce.compress = powersgd sends messages of the model's own "
                                         "making: leave out one or the other")
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("kind", COMPRESSORS.names())
def test_with_numerics_off_every_compression_moves_the_bytes_it_moves_with_numerics_on(tmp_path, kind):
    """The stand-in vector is 64 floats; the timeline counts each collective at what the real model sends."""
    from hpcbench.results.store import read_run

    from conftest import cli
    moved = {}
    for numerics in ("on", "off"):
        code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "3", "--steps", "4", "--numerics", numerics,
                           "--set", "allreduce.overlap=false", "--set", f"allreduce.compress={kind}",
                           "--set", "allreduce.powersgd_start=2", "--out", str(tmp_path / f"{numerics}.h5"))
        assert code == 0, err
        rec = read_run(tmp_path / f"{numerics}.h5")
        tl = rec.timeline
        rows = np.isin(tl["op"], [list(rec.ops).index(op) for op in ("Allreduce", "Allgather")]) & (tl["rank"] > 0)
        moved[numerics] = sorted(zip(tl["rank"][rows].tolist(), tl["nbytes"][rows].tolist()))
        assert moved[numerics], kind
    assert moved["off"] == moved["on"]
    params = rec.attrs["config"]["parameters"]
    if kind == "none":
        assert {n for _, n in moved["off"]} == {4 * params}


@pytest.mark.parametrize("flags", [["--set", "allreduce.overlap=false"], ["--set", "allreduce.compress=fp16"]])
def test_whole_vector_messages_count_at_message_params_with_numerics_on_and_off(tmp_path, flags):
    """A compression whose messages are the whole vector (none, fp16, bf16) sends it from a stand-in too,
    so sim.message_params sizes it the same with numerics off as on."""
    from hpcbench.results.store import read_run

    from conftest import cli
    got = {}
    for numerics in ("on", "off"):
        code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "4", "--steps", "4", "--numerics", numerics,
                           *flags, "--set", "sim.message_params=10000000", "--out", str(tmp_path / f"{numerics}.h5"))
        assert code == 0, err
        rec = read_run(tmp_path / f"{numerics}.h5")
        tl = rec.timeline
        reduced = (tl["op"] == list(rec.ops).index("Allreduce")) & (tl["rank"] > 0)
        got[numerics] = set(tl["nbytes"][reduced].tolist())
    assert got["on"] == got["off"] and max(got["on"]) >= 2 * 10_000_000


def test_each_compression_is_described_and_its_options_are_its_own():
    """docs/algorithms.md says how each registered compression works; no compression's option takes the
    name of a compressing algorithm's own."""
    import dataclasses
    from pathlib import Path

    from hpcbench.algorithms import ALGORITHMS

    text = (Path(__file__).resolve().parents[1] / "docs" / "algorithms.md").read_text(encoding="utf-8")
    bullet = text[text.index("- **Compressed all-reduce**"):].split("\n- **")[0]
    for name in COMPRESSORS.names():
        assert f"`{name}" in bullet or f"| {name}" in bullet or f" {name}`" in bullet, name
    shared = {f.name for f in dataclasses.fields(CompressOptions)}
    for _, cls in ALGORITHMS.items():
        if issubclass(cls.Options, CompressOptions):
            own = [f.name for f in dataclasses.fields(cls.Options) if f.name not in shared]
            assert len(own) == len(set(own)) and not set(own) & shared, cls.name
