"""Compressed all-reduce, as PyTorch DDP's communication hooks do it: fp16 and bf16 (cast, divide by
the worker count, sum in the narrow type, cast back) and PowerSGD (Vogels et al. 2019: rank-r power
iteration per matrix-shaped parameter, error feedback, warm start; vectors and matrices too small to
gain go uncompressed). The pure math is here; ``Compressor.mean`` is the piece of a worker program
that averages a vector over the workers with it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms.api import Sub
from hpcbench.algorithms.ops import Allreduce, Workers
from hpcbench.bfloat16 import from_bf16, to_bf16
from hpcbench.errors import one_of
from hpcbench.ranges import bounded

COMPRESSORS = ("none", "fp16", "bf16", "powersgd")
MIN_COMPRESSION_RATE = 2.0  # DDP's: a matrix is compressed only where r·(rows + cols) < rows·cols / 2
POWERSGD_SEED = 0x5D6  # the first Qs: the same random matrices on every worker


@dataclass(frozen=True)
class CompressOptions:
    """The all-reduce's compression (``allreduce`` and ``local-sgd`` share these fields)."""

    compress: str = "none"  # none | fp16 | bf16 | powersgd
    powersgd_rank: int = bounded(1, low=1, unit="columns")  # r: rank of each matrix's approximation
    powersgd_start: int = bounded(10, low=0, unit="all-reduces")  # plain all-reduces before PowerSGD starts
    error_feedback: bool = True  # PowerSGD adds what its last approximation missed to the next vector


def orthogonalize(m: np.ndarray) -> None:
    """Gram-Schmidt on the columns of ``m``, in place (PowerSGD's; a zero column stays zero)."""
    for i in range(m.shape[1]):
        col = m[:, i]
        norm = np.linalg.norm(col)
        if norm > 0:
            col /= norm
        m[:, i + 1:] -= np.outer(col, col @ m[:, i + 1:])


@dataclass(frozen=True)
class Matrix:
    """A parameter as PowerSGD sees it: rows × the rest of its shape, approximated at ``rank``."""

    start: int  # where the parameter begins in the flat vector
    rows: int
    cols: int
    rank: int


def compressible(shape: Sequence[int], rank: int) -> bool:
    """DDP's rule for a parameter of ``shape`` (rows × the rest; a vector is rows × 1): compressed where
    the factors take less than half of it. (Where it holds, ``rank`` is below both sides, so DDP's
    min(rows, cols, rank) is ``rank``.)"""
    rows, cols = shape[0], int(np.prod(shape[1:]))
    return rows * cols > MIN_COMPRESSION_RATE * rank * (rows + cols)


def matrices(bounds: Sequence[int], shapes: Sequence[Sequence[int]], rank: int) -> list[Matrix]:
    """The parameters PowerSGD compresses: each matrix-shaped one that gains at ``rank``."""
    return [Matrix(start, shape[0], int(np.prod(shape[1:])), rank)
            for start, shape in zip(bounds, shapes) if compressible(shape, rank)]


def check(owner: str, options: CompressOptions) -> None:
    if options.compress not in COMPRESSORS:
        raise one_of(f"{owner}.compress", options.compress, COMPRESSORS)


class Compressor:
    """One worker's all-reduce with its compression, and the state PowerSGD keeps between calls."""

    def __init__(self, options: CompressOptions, size: int, bounds: Sequence[int],
                 shapes: Sequence[tuple[int, ...]]) -> None:
        self.kind, self.options = options.compress, options
        self.calls = 0
        power = self.kind == "powersgd"
        kept = size if power else 0  # PowerSGD's state; none for the other kinds
        self.mats = matrices(bounds, shapes, options.powersgd_rank) if power else []
        rest = np.ones(kept, bool)
        for m in self.mats:
            rest[m.start:m.start + m.rows * m.cols] = False
        self.rest = np.flatnonzero(rest)  # elements PowerSGD all-reduces as they are
        self.error = np.zeros(kept, np.float32)
        rng = np.random.default_rng(POWERSGD_SEED)
        self.qs = [rng.standard_normal((m.cols, m.rank)).astype(np.float32) for m in self.mats]

    def mean(self, vector: np.ndarray) -> Sub[np.ndarray]:
        """The workers' mean of ``vector`` (float32), through this compression; → a new array. When
        workers fail during it, the survivors begin it again among themselves (at the same all-reduce,
        so all of them do), with its state as it was."""
        self.calls += 1
        while True:
            members = yield Workers()
            out = yield from self._mean(vector, members)
            if out is not None:
                return out

    def _sum(self, part: np.ndarray, members: tuple[int, ...], bf16: bool = False) -> Sub[np.ndarray | None]:
        """``part`` summed over ``members``; None if some of them failed meanwhile."""
        total = yield Allreduce(part, bf16)
        return total if (yield Workers()) == members else None

    def _mean(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        n, kind = len(members), self.kind
        if kind == "fp16":
            total = yield from self._sum(vector.astype(np.float16) / np.float16(n), members)
            return None if total is None else total.astype(np.float32)
        if kind == "bf16":
            total = yield from self._sum(to_bf16(from_bf16(to_bf16(vector)) / np.float32(n)), members, bf16=True)
            return None if total is None else from_bf16(total)
        if kind == "none" or self.calls <= self.options.powersgd_start:
            total = yield from self._sum(vector, members)
            return None if total is None else total * np.float32(1.0 / n)
        return (yield from self.powersgd(vector, members))

    def powersgd(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        """DDP's ``powerSGD_hook`` over the whole vector: the uncompressed part summed, then per matrix
        M (with the error fed back): P = M·Q summed and orthogonalized, Q = Mᵀ·P summed and divided by
        n, M̂ = P·Qᵀ. The error kept is this worker's own residual M − P·(Mᵀ·P)ᵀ (Vogels et al.'s
        Algorithm 1); DDP keeps M less the workers' M̂, which differs by terms that sum to zero over the
        workers, so every average is the same, with smaller numbers carried. The kept state (Q, the
        error) changes only once every sum is in (None, and no change, if ``members`` changed)."""
        scale = np.float32(1.0 / len(members))
        fed = vector + self.error  # the error stays zero without error feedback
        out = np.empty_like(fed)
        if self.rest.size:
            rest = yield from self._sum(np.ascontiguousarray(fed[self.rest]), members)
            if rest is None:
                return None
            out[self.rest] = rest * scale
        if self.mats:
            ms = [fed[m.start:m.start + m.rows * m.cols].reshape(m.rows, m.cols) for m in self.mats]
            for q in self.qs:  # warm start: last step's Qs, orthogonalized again
                orthogonalize(q)
            p_sum = yield from self._sum(np.concatenate([(mat @ q).ravel() for mat, q in zip(ms, self.qs)]), members)
            if p_sum is None:
                return None
            ps = split(p_sum, [(m.rows, m.rank) for m in self.mats])
            for p in ps:
                orthogonalize(p)
            own = [mat.T @ p for mat, p in zip(ms, ps)]  # this worker's Q
            summed = yield from self._sum(np.concatenate([q.ravel() for q in own]), members)
            if summed is None:
                return None
            self.qs = split(summed * scale, [(m.cols, m.rank) for m in self.mats])
            for m, p, q, mine, mat in zip(self.mats, ps, self.qs, own, ms):
                out[m.start:m.start + m.rows * m.cols] = (p @ q.T).ravel()
                if self.options.error_feedback:
                    self.error[m.start:m.start + m.rows * m.cols] = (mat - p @ mine.T).ravel()
        return out


def split(flat: np.ndarray, shapes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Consecutive matrices of ``shapes`` out of one flat vector, each its own contiguous copy."""
    out, at = [], 0
    for rows, cols in shapes:
        out.append(flat[at:at + rows * cols].reshape(rows, cols).copy())
        at += rows * cols
    return out
