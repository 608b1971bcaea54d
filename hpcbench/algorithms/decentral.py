"""Shared parts of the decentralized algorithms: the published worker model and rank 0's coordinator.

Every worker publishes (samples, weight, x) in its own "model" window after each step; rank 0 reads
those one-sidedly, without stopping anyone, to follow progress and to evaluate the average of the
de-biased models z_i = x_i / w_i, recording the consensus distance mean ‖z_i − z̄‖ beside it.
Workers tell rank 0 when they finish on the "done" channel.
"""
from __future__ import annotations

from typing import Generator

import numpy as np

from hpcbench.algorithms.api import ChannelSpec, Context, Layout, WindowSpec
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import ANY, SERVER, Evaluate, Read, Recv, Send

DONE = Frame(samples=(np.int64, 1))
HEADER = Frame(samples=(np.int64, 1), updates=(np.int64, 1), weight=(np.float64, 1))


def model_frame(size: int) -> Frame:
    return Frame(samples=(np.int64, 1), updates=(np.int64, 1), weight=(np.float64, 1), x=(np.float32, size))


def layout(params: np.ndarray, **extra_windows: WindowSpec) -> Layout:
    frame = model_frame(params.size)
    initial = frame.pack(samples=0, updates=0, weight=1.0, x=params)
    return Layout(
        windows={"model": WindowSpec("workers", frame.nbytes, initial), **extra_windows},
        channels={"done": ChannelSpec("workers", "server", DONE.nbytes)},
    )


def average(frame: Frame, raws: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """(z̄, mean ‖z_i − z̄‖) of the de-biased worker models."""
    zs = np.stack([frame.view(r, "x") / frame.scalar(r, "weight") for r in raws])
    mean = zs.mean(axis=0)
    return mean.astype(np.float32), float(np.linalg.norm(zs - mean, axis=1).mean())


def coordinate(ctx: Context, centre: Frame | None = None) -> Generator:
    """Rank 0: evaluate every ``eval_every`` samples until every worker has said it is done.

    The evaluated model is the workers' de-biased average, or with ``centre`` (EASGD) the "x" of
    rank 0's own "centre" window.
    """
    frame = model_frame(ctx.size)
    ranks = ctx.worker_ranks
    yield Evaluate(ctx.params, 0, 0)
    next_eval, done = ctx.eval_every, 0
    while done < ctx.workers:
        if (yield Recv("done", ANY, timeout=ctx.poll_s)) is not None:
            done += 1
            continue
        headers = yield Read("model", ranks, HEADER.nbytes)
        samples = sum(HEADER.scalar(h, "samples") for h in headers)
        if samples >= next_eval:
            yield from evaluate(frame, ranks, centre)
            next_eval = (samples // ctx.eval_every + 1) * ctx.eval_every
    yield from evaluate(frame, ranks, centre)


def evaluate(frame: Frame, ranks: tuple[int, ...], centre: Frame | None) -> Generator:
    raws = yield Read("model", ranks)
    params, consensus = average(frame, raws)
    if centre is not None:
        [raw] = yield Read("centre", (SERVER,))
        params = centre.view(raw, "x").copy()
    samples = sum(frame.scalar(r, "samples") for r in raws)
    updates = sum(frame.scalar(r, "updates") for r in raws)
    yield Evaluate(params, samples, updates, consensus)


def finish(samples: int) -> Generator:
    """A worker's last word to rank 0."""
    yield Send("done", SERVER, DONE.pack(samples=samples))
