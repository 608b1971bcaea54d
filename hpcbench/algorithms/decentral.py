"""Shared parts of the decentralized algorithms: the published worker model and rank 0's coordinator.

Every worker publishes (samples, weight, x) in its own "model" window after each step and reports
its progress to rank 0 every few steps with a small nonblocking message (the last report says it
is done). Rank 0 reads the model windows one-sidedly, without stopping anyone, only when it
evaluates: the average of the de-biased models z_i = x_i / w_i, with the consensus distance
mean ‖z_i − z̄‖ beside it. Reports, not reads, carry progress because a one-sided read of a
computing worker waits until that worker next enters MPI.
"""
from __future__ import annotations

from typing import Generator

import numpy as np

from hpcbench.algorithms.api import ChannelSpec, Context, Layout, WindowSpec
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.meter import TrainingMeter
from hpcbench.algorithms.ops import SERVER, Compute, Evaluate, Gradient, Publish, Read, Record, Recv, Send
from hpcbench.algorithms.rules import momentum_direction

# samples: done so far; loss_sum, correct, seen: training loss and right answers since the last report
PROGRESS = Frame(samples=(np.int64, 1), done=(np.int64, 1), loss_sum=(np.float64, 1), correct=(np.int64, 1),
                 seen=(np.int64, 1))
FINAL_COLUMNS = ("worker", "samples", "updates", "weight", "x_sum")


def model_frame(size: int) -> Frame:
    return Frame(samples=(np.int64, 1), updates=(np.int64, 1), weight=(np.float64, 1), x=(np.float32, size))


def layout(params: np.ndarray, **extra_windows: WindowSpec) -> Layout:
    frame = model_frame(params.size)
    initial = frame.pack(samples=0, updates=0, weight=1.0, x=params)
    return Layout(
        windows={"model": WindowSpec("workers", frame.nbytes, initial), **extra_windows},
        channels={"progress": ChannelSpec("workers", "server", PROGRESS.nbytes)},
        tables={"final_models": FINAL_COLUMNS},
    )


def starting_point(ctx: Context, rank: int, spread: float) -> np.ndarray:
    """The shared initial parameters, optionally perturbed per worker (to study consensus)."""
    x = ctx.params.copy()
    if spread:
        x += ctx.rng(rank, purpose=1).normal(0.0, spread, size=x.size).astype(np.float32)
    return x


def average(frame: Frame, raws: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """(z̄, mean ‖z_i − z̄‖) of the de-biased worker models."""
    zs = np.stack([frame.view(r, "x") / frame.scalar(r, "weight") for r in raws])
    mean = zs.mean(axis=0)
    return mean.astype(np.float32), float(np.linalg.norm(zs - mean, axis=1).mean())


Centre = tuple[Frame, int]  # the layout of a "centre" window and the rank that holds it


def coordinate(ctx: Context, centre: Centre | None = None) -> Generator:
    """Rank 0: evaluate every ``eval_every`` samples until every worker has reported it is done.

    The evaluated model is the workers' de-biased average, or with ``centre`` (EASGD) the "x" of
    the "centre" window on the given rank.
    """
    frame = model_frame(ctx.size)
    ranks = ctx.worker_ranks
    yield Evaluate(ctx.params, 0, 0)
    reported = [0] * (ctx.workers + 1)
    total, done, next_eval = 0, 0, ctx.eval_every
    meter = TrainingMeter()
    while done < ctx.workers:
        src, raw = yield Recv("progress")
        samples = PROGRESS.scalar(raw, "samples")
        total += samples - reported[src]
        reported[src] = samples
        done += PROGRESS.scalar(raw, "done")
        meter.add(PROGRESS.scalar(raw, "loss_sum"), PROGRESS.scalar(raw, "correct"), PROGRESS.scalar(raw, "seen"))
        yield meter.progress(total)
        if total >= next_eval and done < ctx.workers:
            yield from evaluate(frame, ranks, centre)
            next_eval = (total // ctx.eval_every + 1) * ctx.eval_every
    raws = yield from evaluate(frame, ranks, centre)
    for rank, raw in zip(ranks, raws):
        x_sum = float(frame.view(raw, "x").sum(dtype=np.float64))
        yield Record("final_models", (rank, frame.scalar(raw, "samples"), frame.scalar(raw, "updates"),
                                      frame.scalar(raw, "weight"), x_sum))


def evaluate(frame: Frame, ranks: tuple[int, ...], centre: Centre | None) -> Generator:
    """Snapshot the model to evaluate; returns the workers' raw model windows."""
    raws = yield Read("model", ranks, observe=True)
    params, consensus = average(frame, raws)
    if centre is not None:
        centre_frame, holder = centre
        [raw] = yield Read("centre", (holder,), observe=True)
        params = centre_frame.view(raw, "x").copy()
    samples = sum(frame.scalar(r, "samples") for r in raws)
    updates = sum(frame.scalar(r, "updates") for r in raws)
    yield Evaluate(params, samples, updates, consensus)
    return raws


def local_sgd(ctx: Context, x: np.ndarray, grad: np.ndarray, at: np.ndarray, buf: np.ndarray | None,
              step: int, weight: float = 1.0) -> None:
    """A worker's own momentum-SGD step for a gradient taken at ``at``.

    Push-sum workers keep x = w·z and train the de-biased z = x/w, as the SGP reference
    implementation does (it un-biases the parameters for the forward pass and the optimizer step):
    x −= η·w·step is (z − η·step)·w, exact when η = 0. Decentralized workers do not know the
    global sample count; they estimate it as step × workers × batch for the schedule.
    """
    d_p = grad + np.float32(ctx.weight_decay) * at if ctx.weight_decay else grad
    lr = ctx.schedule.at(step * ctx.workers * ctx.batch_size)
    x -= np.float32(lr * weight) * momentum_direction(d_p, buf, ctx.momentum, ctx.nesterov)


def local_step(ctx: Context, reporter: "Reporter", x: np.ndarray, buf: np.ndarray | None, step: int,
               weight: float | None = None) -> Generator:
    """Compute a gradient and take the local step on x; push-sum workers pass their ``weight`` and
    compute at the de-biased x/w."""
    at = x if weight is None else x / np.float32(weight)
    result = yield Compute(at)
    reporter.trained(result)
    local_sgd(ctx, x, result.grad, at, buf, step, 1.0 if weight is None else weight)


def publish(frame: Frame, ctx: Context, step: int, x: np.ndarray, weight: float = 1.0) -> Publish:
    """This worker's model after ``step`` local steps, for rank 0 to read."""
    return Publish("model", frame.pack(samples=step * ctx.batch_size, updates=step, weight=weight, x=x))


def report_every(ctx: Context) -> int:
    """Steps between a worker's progress reports: about four per evaluation interval."""
    return max(1, ctx.eval_every // (4 * ctx.batch_size * ctx.workers))


class Reporter:
    """A worker's progress reports to rank 0: every few steps, and a last one when it is done."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.every = report_every(ctx)
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0

    def trained(self, result: Gradient) -> None:
        self.loss_sum += result.loss * result.samples
        self.correct += result.correct
        self.seen += result.samples

    def report(self, step: int) -> Generator:
        """After ``step`` local steps."""
        done = step == self.ctx.steps
        if done or step % self.every == 0:
            yield Send("progress", SERVER, PROGRESS.pack(samples=step * self.ctx.batch_size, done=int(done),
                                                         loss_sum=self.loss_sum, correct=self.correct,
                                                         seen=self.seen))
            self.loss_sum, self.correct, self.seen = 0.0, 0, 0
