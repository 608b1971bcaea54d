"""Shared parts of the decentralized algorithms: the published worker model and rank 0's coordinator.

Every worker publishes (samples, weight, z) in its own "model" window after each step and reports
its progress to rank 0 with a small nonblocking message (the last report says it is done). Rank 0
reads the model windows one-sidedly, without stopping anyone, only when it evaluates: the average
of the de-biased models z_i, with the consensus distance mean ‖z_i − z̄‖ beside it. Reports, not
reads, carry progress because a one-sided read of a computing worker waits until that worker next
enters MPI. Synchronous methods take equal steps; asynchronous ones claim each batch from a shared
budget counter on rank 0, so fast workers are not held to a straggler's share.
"""
from __future__ import annotations

import numpy as np

from hpcbench.algorithms.api import ChannelSpec, Context, Layout, Program, Sub, WindowSpec
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.meter import TrainingMeter
from hpcbench.algorithms.ops import (SERVER, WATCHED, Compute, Evaluate, FetchAdd, Gradient, Publish, Read, Record,
                                     Recv, Send)
from hpcbench.algorithms.rules import momentum_direction

# samples: done so far; loss_sum, correct, seen: training loss and right answers since the last report;
# lr: the learning rate of the worker's last step
PROGRESS = Frame(samples=(np.int64, 1), done=(np.int64, 1), loss_sum=(np.float64, 1), correct=(np.int64, 1),
                 seen=(np.int64, 1), lr=(np.float64, 1))
# mass: the worker's share of Σ_i w_i·Σ z_i (push-sum numerator), summed in float64


def model_frame(size: int) -> Frame:
    """A worker's published state: its de-biased model z (float32) and push-sum weight w (float64)."""
    return Frame(samples=(np.int64, 1), updates=(np.int64, 1), weight=(np.float64, 1), mass=(np.float64, 1),
                 z=(np.float32, size))


def layout(params: np.ndarray, until_budget: bool, **extra_windows: WindowSpec) -> Layout:
    """``until_budget``: workers share the sample budget through a counter on rank 0 ("budget")."""
    frame = model_frame(params.size)
    initial = frame.pack(samples=0, updates=0, weight=1.0, mass=params.sum(dtype=np.float64), z=params)
    windows = {"model": WindowSpec("workers", frame.nbytes, initial), **extra_windows}
    if until_budget:
        windows["budget"] = WindowSpec("server", 8, None, "accumulate")
    return Layout(
        windows=windows,
        channels={"progress": ChannelSpec("workers", "server", PROGRESS.nbytes)},
        tables=("final_models", "learning_rate"),
    )


def starting_point(ctx: Context, rank: int, spread: float, dtype: type = np.float32) -> np.ndarray:
    """The shared initial parameters, optionally perturbed per worker (to study consensus)."""
    x: np.ndarray = ctx.params.astype(dtype)
    if spread:
        x += ctx.rng(rank, purpose=1).normal(0.0, spread, size=x.size).astype(np.float32)
    return x


def average(frame: Frame, raws: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """(z̄, mean ‖z_i − z̄‖) of the de-biased worker models."""
    zs = np.stack([frame.view(r, "z") for r in raws]).astype(np.float64)
    mean = zs.mean(axis=0)
    return mean.astype(np.float32), float(np.linalg.norm(zs - mean, axis=1).mean())


def mix(z: np.ndarray, w: float, z_in: np.ndarray, w_in: float) -> float:
    """Push-sum's absorb as a weighted average, in place: z ← (w·z + w_in·z_in) / (w + w_in).

    Equal to adding numerators x = w·z, but no numerator is ever formed, so a weight that has
    halved a thousand times cannot underflow a model into 0/0. Returns the new weight w + w_in.
    """
    total = w + w_in
    if w_in > 0:
        z += (w_in / total) * (z_in - z)
    return total


Centre = tuple[Frame, int]  # the layout of a "centre" window and the rank that holds it


def coordinate(ctx: Context, centre: Centre | None = None) -> Program:
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
        src, raw = yield Recv("progress", timeout=WATCHED)  # reports come as often as the run's pace allows
        samples = PROGRESS.integer(raw, "samples")
        total += samples - reported[src]
        reported[src] = samples
        done += PROGRESS.integer(raw, "done")
        yield Record("learning_rate", (src, samples, PROGRESS.real(raw, "lr")))
        meter.add(PROGRESS.real(raw, "loss_sum"), PROGRESS.integer(raw, "correct"), PROGRESS.integer(raw, "seen"))
        yield meter.progress(total)
        if total >= next_eval and done < ctx.workers:
            yield from evaluate(frame, ranks, centre)
            next_eval = (total // ctx.eval_every + 1) * ctx.eval_every
    raws = yield from evaluate(frame, ranks, centre)
    for rank, raw in zip(ranks, raws):
        yield Record("final_models", (rank, frame.integer(raw, "samples"), frame.integer(raw, "updates"),
                                      frame.real(raw, "weight"), frame.real(raw, "mass")))


def evaluate(frame: Frame, ranks: tuple[int, ...], centre: Centre | None) -> Sub[list[np.ndarray]]:
    """Snapshot the model to evaluate; returns the workers' raw model windows."""
    raws = yield Read("model", ranks, observe=True)
    params, consensus = average(frame, raws)
    if centre is not None:
        centre_frame, holder = centre
        [raw] = yield Read("centre", (holder,), observe=True)
        params = centre_frame.view(raw, "x").copy()
    samples = sum(frame.integer(r, "samples") for r in raws)
    updates = sum(frame.integer(r, "updates") for r in raws)
    yield Evaluate(params, samples, updates, consensus)
    return raws


def local_sgd(ctx: Context, x: np.ndarray, grad: np.ndarray, at: np.ndarray, buf: np.ndarray | None,
              step: int) -> float:
    """A worker's own momentum-SGD step for a gradient taken at ``at``; returns the rate applied.

    Push-sum workers train their de-biased model z, as the SGP reference implementation does (it
    un-biases the parameters for the forward pass and the optimizer step). Decentralized workers
    do not know the global sample count; they estimate it as step × workers × batch for the schedule.
    """
    d_p = grad + np.float32(ctx.weight_decay) * at if ctx.weight_decay else grad
    lr = ctx.schedule.at(step * ctx.workers * ctx.batch_size)
    x -= np.float32(lr) * momentum_direction(d_p, buf, ctx.momentum, ctx.nesterov)
    return lr


def local_step(ctx: Context, reporter: "Reporter", x: np.ndarray, buf: np.ndarray | None, step: int) -> Program:
    """Compute a gradient at x (float32 on the wire, whatever x is kept in) and take the local step."""
    at = x if x.dtype == np.float32 else x.astype(np.float32)
    result = yield Compute(at)
    reporter.trained(result, local_sgd(ctx, x, result.grad, at, buf, step))


def publish(frame: Frame, ctx: Context, step: int, z: np.ndarray, weight: float = 1.0) -> Publish:
    """This worker's model after ``step`` local steps, for rank 0 to read."""
    return Publish("model", frame.pack(samples=step * ctx.batch_size, updates=step, weight=weight,
                                       mass=weight * float(z.sum(dtype=np.float64)), z=z))


def report_every(ctx: Context) -> int:
    """Steps between a worker's progress reports: about four per evaluation interval."""
    return max(1, ctx.eval_every // (4 * ctx.batch_size * ctx.workers))


class Budget:
    """Whether a worker takes another step: its equal share of ``ctx.steps`` (synchronous methods),
    or, with ``shared``, a batch claimed from the budget counter on rank 0 with an atomic
    fetch-and-add: exactly the budget is trained, fast workers take more of it than slow ones, and
    rank 0 does no work for it."""

    def __init__(self, ctx: Context, shared: bool) -> None:
        self.ctx, self.shared = ctx, shared

    def next_step(self, step: int) -> Sub[bool]:
        """With ``step`` local steps done: may this worker take one more?"""
        if not self.shared:
            return step < self.ctx.steps
        claimed_before = yield FetchAdd("budget", SERVER, self.ctx.batch_size)
        return claimed_before < self.ctx.budget


class Reporter:
    """A worker's progress reports to rank 0: every few steps, and a last one when it is done."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.every = report_every(ctx)
        self.loss_sum, self.correct, self.seen, self.lr = 0.0, 0, 0, float("nan")

    def trained(self, result: Gradient, lr: float) -> None:
        self.loss_sum += result.loss * result.samples
        self.correct += result.correct
        self.seen += result.samples
        self.lr = lr

    def due(self, step: int, done: bool = False) -> bool:
        """Whether a report goes out after ``step`` local steps; ``done``: the last step."""
        return done or step % self.every == 0

    def report(self, step: int, done: bool = False) -> Program:
        """After ``step`` local steps; ``done``: the last report."""
        if self.due(step, done):
            yield Send("progress", SERVER, PROGRESS.pack(samples=step * self.ctx.batch_size, done=int(done),
                                                         loss_sum=self.loss_sum, correct=self.correct,
                                                         seen=self.seen, lr=self.lr))
            self.loss_sum, self.correct, self.seen = 0.0, 0, 0
