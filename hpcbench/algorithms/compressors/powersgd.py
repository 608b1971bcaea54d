"""PowerSGD (Vogels et al. 2019), as PyTorch DDP's ``powerSGD_hook``: a rank-r power iteration per
matrix-shaped parameter, error feedback and a warm start; vectors and matrices too small to gain go
uncompressed."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms.api import Sub
from hpcbench.algorithms.compressors.base import Compressor, Message, register
from hpcbench.algorithms.ops import Allreduce
from hpcbench.ranges import bounded

MIN_COMPRESSION_RATE = 2.0  # DDP's: a matrix is compressed only where r·(rows + cols) < rows·cols / 2
POWERSGD_SEED = 0x5D6  # the first Qs: the same random matrices on every worker


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


def split(flat: np.ndarray, shapes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Consecutive matrices of ``shapes`` out of one flat vector, each its own contiguous copy."""
    out, at = [], 0
    for rows, cols in shapes:
        out.append(flat[at:at + rows * cols].reshape(rows, cols).copy())
        at += rows * cols
    return out


@register
class PowerSgd(Compressor):
    name = "powersgd"
    summary = "rank-r PowerSGD per matrix-shaped parameter with error feedback and a warm start (DDP's hook)"
    keeps_error = True

    @dataclass(frozen=True)
    class Options:
        rank: int = bounded(1, low=1, unit="columns")  # r: rank of each matrix's approximation
        start: int = bounded(10, low=0, unit="all-reduces")  # plain all-reduces before PowerSGD starts

    def __init__(self, rank: int, options: object, size: int, bounds: Sequence[int],
                 shapes: Sequence[tuple[int, ...]], seed: int = 0) -> None:
        super().__init__(rank, options, size, bounds, shapes, seed)
        self.mats = matrices(self.bounds, self.shapes, self.opts.rank)
        kept = 0 if self.stand_in else size
        rest = np.ones(kept, bool)
        for m in self.mats:
            rest[m.start:m.start + m.rows * m.cols] = False
        self.rest = np.flatnonzero(rest)  # elements all-reduced as they are
        self.rest_size = self.model_size - sum(m.rows * m.cols for m in self.mats)
        self.error = np.zeros(kept, np.float32)
        rng = np.random.default_rng(POWERSGD_SEED)
        self.qs = [] if self.stand_in else [rng.standard_normal((m.cols, m.rank)).astype(np.float32)
                                            for m in self.mats]

    @property
    def warming(self) -> bool:
        return self.calls <= self.opts.start

    def messages(self, workers: int) -> list[Message]:
        if self.warming:
            return [Message(Allreduce, 4 * self.model_size)]
        out = [Message(Allreduce, 4 * self.rest_size)] if self.rest_size else []
        if self.mats:
            out += [Message(Allreduce, 4 * sum(m.rows * m.rank for m in self.mats)),
                    Message(Allreduce, 4 * sum(m.cols * m.rank for m in self.mats))]
        return out

    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        """Before ``start`` calls, the plain mean. Then DDP's hook over the whole vector: the uncompressed
        part summed, then per matrix M (with the error fed back): P = M·Q summed and orthogonalized,
        Q = Mᵀ·P summed and divided by n, M̂ = P·Qᵀ. The error kept is this worker's own residual
        M − P·(Mᵀ·P)ᵀ (Vogels et al.'s Algorithm 1); DDP keeps M less the workers' M̂, which differs by
        terms that sum to zero over the workers, so every average is the same, with smaller numbers
        carried. The kept state (Q, the error) changes only once every sum is in."""
        scale = np.float32(1.0 / len(members))
        if self.warming:
            total = yield from self.summed(vector, members)
            return None if total is None else total * scale
        fed = vector + self.error  # the error stays zero without error feedback
        out = np.empty_like(fed)
        if self.rest.size:
            rest = yield from self.summed(np.ascontiguousarray(fed[self.rest]), members)
            if rest is None:
                return None
            out[self.rest] = rest * scale
        if self.mats:
            ms = [fed[m.start:m.start + m.rows * m.cols].reshape(m.rows, m.cols) for m in self.mats]
            warm = [q.copy() for q in self.qs]  # warm start: last step's Qs, orthogonalized again
            for q in warm:
                orthogonalize(q)
            p_sum = yield from self.summed(np.concatenate([(mat @ q).ravel() for mat, q in zip(ms, warm)]), members)
            if p_sum is None:
                return None
            ps = split(p_sum, [(m.rows, m.rank) for m in self.mats])
            for p in ps:
                orthogonalize(p)
            own = [mat.T @ p for mat, p in zip(ms, ps)]  # this worker's Q
            summed = yield from self.summed(np.concatenate([q.ravel() for q in own]), members)
            if summed is None:
                return None
            self.qs = split(summed * scale, [(m.cols, m.rank) for m in self.mats])
            for m, p, q, mine, mat in zip(self.mats, ps, self.qs, own, ms):
                out[m.start:m.start + m.rows * m.cols] = (p @ q.T).ravel()
                if self.error_feedback:
                    self.error[m.start:m.start + m.rows * m.cols] = (mat - p @ mine.T).ravel()
        return out
