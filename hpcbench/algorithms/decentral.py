"""Shared parts of the decentralized algorithms: the published worker model and rank 0's coordinator.

Every worker publishes (samples, weight, z) in its own "model" window after each step and reports
its progress to rank 0 with a small nonblocking message (the last report says it is done).
Evaluating measures without moving models while the run goes on. When the workers' reports add up
to the k-th multiple of ``eval_every`` samples, rank 0 notes the time, and snapshot k is kept by each
worker in slot k−1 of its own "kept" window (a local copy: no traffic): by workers of a synchronous
method at the step whose samples (step × batch × workers) first reach that multiple, all at the same
step (each reports at that step, so rank 0 learns of it then); by workers of an asynchronous one
after the step during which an 8-byte request from rank 0 arrives, so the snapshots are a cut at one
time. When every worker is done, and has said it kept every snapshot asked of it (a request sent
as it finished crosses its last report; rank 0 answers that report with "no more", and the worker
says so once it has kept what came before), rank 0 reads the kept snapshots (a worker that had
finished before a request is represented by its final model) and evaluates each: the average of the de-biased
models z_i at the time it noted, with the consensus distance mean ‖z_i − z̄‖ beside it. Synchronous
methods take equal steps; asynchronous ones claim each batch from a shared budget counter on rank 0,
so fast workers are not held to a straggler's share.

Where the MPI lets the others go on when a worker fails (and in the simulator), rank 0 stops
expecting the failed worker, evaluates the survivors, and records each failure with the samples it
took: synchronous workers (a ``Team``) learn it at the collective that fails, which the survivors
begin again among themselves, drop the failed workers' samples since the last collective they took
part in, and train on until the team has trained the whole budget.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from hpcbench.algorithms.api import ChannelSpec, Context, Layout, Program, Sub, WindowSpec
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.meter import TrainingMeter
from hpcbench.algorithms.ops import (
    SERVER,
    WATCHED,
    Compute,
    Evaluate,
    FetchAdd,
    Gradient,
    Lost,
    Poll,
    Publish,
    Read,
    Record,
    Recv,
    Send,
    Timestamp,
    Workers,
)
from hpcbench.algorithms.rules import momentum_direction
from hpcbench.algorithms.schedule import lr_scale
from hpcbench.results.schema import FAILURES, FINAL_MODELS, LEARNING_RATE

# samples: done so far; loss_sum, correct, seen: training loss and right answers since the last report;
# lr: the learning rate of the worker's last step; lost: the samples its team lost with failed workers
PROGRESS = Frame(samples=(np.int64, 1), done=(np.int64, 1), loss_sum=(np.float64, 1), correct=(np.int64, 1),
                 seen=(np.int64, 1), lr=(np.float64, 1), lost=(np.int64, 1))
# mass: the worker's share of Σ_i w_i·Σ z_i (push-sum numerator), summed in float64
# rank 0 → a worker: keep your model as snapshot k; NO_MORE: nothing more is coming, you may end
EVALUATE = Frame(k=(np.int64, 1))
NO_MORE = -1
# a worker's report "done": 1 when it has trained its last batch; KEPT_ALL once it has kept every
# snapshot rank 0 asked of it (requests sent before its last report came in cross that report)
KEPT_ALL = 2


def model_frame(size: int) -> Frame:
    """A worker's published state: its de-biased model z (float32) and push-sum weight w (float64)."""
    return Frame(samples=(np.int64, 1), updates=(np.int64, 1), weight=(np.float64, 1), mass=(np.float64, 1),
                 z=(np.float32, size))


def snapshots(ctx: Context) -> int:
    """The most snapshots rank 0 asks for while the workers train: one per ``eval_every`` samples."""
    return ctx.budget // ctx.eval_every + 1


def slot_bytes(ctx: Context, extra: int = 0) -> int:
    """Bytes of one kept snapshot: the model frame, and ``extra`` bytes after it (EASGD's replicated
    centre)."""
    return model_frame(ctx.size).nbytes + extra


def layout(ctx: Context, until_budget: bool, extra: int = 0, **extra_windows: WindowSpec) -> Layout:
    """``until_budget``: workers share the sample budget through a counter on rank 0 ("budget");
    ``extra``: bytes each kept snapshot holds beyond the model frame."""
    frame = model_frame(ctx.size)
    windows = {"model": WindowSpec("workers", frame.nbytes, packed(frame, ctx, 0, ctx.params)),
               "kept": WindowSpec("workers", snapshots(ctx) * slot_bytes(ctx, extra)), **extra_windows}
    if until_budget:
        windows["budget"] = WindowSpec("server", 8, None, "count")
    return Layout(
        windows=windows,
        channels={"progress": ChannelSpec("workers", "server", PROGRESS.nbytes),
                  "evaluate": ChannelSpec("server", "workers", EVALUATE.nbytes)},
        tables=(FINAL_MODELS, LEARNING_RATE, FAILURES),
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


class Asked(NamedTuple):
    """A snapshot as rank 0 noted it: when, its slot, the workers that keep it, the centre rank 0 holds."""

    t: float
    slot: int
    ranks: tuple[int, ...]
    centre: np.ndarray | None


def coordinate(ctx: Context, synchronous: bool, centre: Centre | None = None) -> Program:
    """Rank 0: follow the workers' reports until every one is done (or has failed), noting a snapshot
    every ``eval_every`` samples (asking for it, when the workers are ``synchronous``ly stepping,
    not); then evaluate the snapshots in order, and the final models, of the workers that are left.

    The evaluated model is the workers' de-biased average, or with ``centre`` (EASGD) the "x" of
    the "centre" window on the given rank (rank 0 copies its own when it notes a snapshot; where the
    workers hold one, each keeps it in its snapshots, after the model, and the first survivor's is read).
    """
    frame = model_frame(ctx.size)
    on_worker = centre is not None and centre[1] != SERVER
    slot = slot_bytes(ctx, centre[0].nbytes if centre is not None and on_worker else 0)
    yield Evaluate(ctx.params, 0, 0)
    reported = [0] * (ctx.workers + 1)
    total, next_eval, team_lost = 0, ctx.eval_every, 0
    training = set(ctx.worker_ranks)
    keeping: set[int] = set()  # done training, still keeping the snapshots asked of them
    failed: list[int] = []  # in the order rank 0 learned of them
    asked: list[Asked] = []
    noted: list[tuple[float, int]] = []  # (when, samples) of each snapshot noted
    meter = TrainingMeter()
    calm = 0.0
    while training or keeping:
        got = yield Recv("progress", timeout=WATCHED, calm_s=calm)  # reports come as the run's pace allows
        calm = 0.0
        if type(got) is Lost:
            failed += [r for r in got.ranks if r not in failed]
            training.difference_update(got.ranks)
            keeping.difference_update(got.ranks)
            continue
        src, raw = got
        if PROGRESS.integer(raw, "done") == KEPT_ALL:
            keeping.discard(src)
            continue
        samples = PROGRESS.integer(raw, "samples")
        total += samples - reported[src]
        reported[src] = samples
        team_lost = max(team_lost, PROGRESS.integer(raw, "lost"))  # every survivor says the same
        if PROGRESS.integer(raw, "done"):
            training.discard(src)
            keeping.add(src)
            yield Send("evaluate", src, EVALUATE.pack(k=NO_MORE))  # after every request it was sent
        yield Record(LEARNING_RATE, (src, samples, PROGRESS.real(raw, "lr")))
        meter.add(PROGRESS.real(raw, "loss_sum"), PROGRESS.integer(raw, "correct"), PROGRESS.integer(raw, "seen"))
        yield meter.progress(total)
        if total >= next_eval and training:
            asked.append((yield from note_snapshot(ctx, total, synchronous, training, failed,
                                                   None if on_worker else centre)))
            noted.append((asked[-1].t, total))
            next_eval = (total // ctx.eval_every + 1) * ctx.eval_every
        if training and len(noted) >= 2:
            calm = calm_until(noted[-2:], (yield Timestamp()), min(next_eval, ctx.budget))
    ranks, finals = yield from read_survivors("model", tuple(r for r in ctx.worker_ranks if r not in failed), failed)
    if not ranks:  # every worker failed: no model is left to read (their snapshots died with them)
        yield from every_worker_lost(ctx, synchronous, reported, failed, team_lost)
        return
    final_centre = None
    if centre is not None:
        [raw] = (yield from read_survivors("centre", (ranks[0],) if on_worker else (SERVER,), failed))[1]
        final_centre = centre[0].view(raw, "x").copy()
    for a in asked:
        holders, raws = yield from read_survivors("kept", tuple(r for r in a.ranks if r in ranks), failed, slot,
                                                  a.slot * slot)
        kept = dict(zip(holders, raws))
        raws = [kept.get(rank, final) for rank, final in zip(ranks, finals)]
        x = a.centre
        if on_worker:
            assert centre is not None and final_centre is not None
            # each worker keeps the same replica of the centre after its model: the first one's is read
            x = centre[0].view(kept[holders[0]][frame.nbytes:], "x").copy() if holders else final_centre
        yield evaluation(frame, raws, x, a.t)
    last = evaluation(frame, finals, final_centre)
    yield last._replace(samples=last.samples + sum(reported[r] for r in failed))  # what the failed had trained
    for rank, raw in zip(ranks, finals):
        yield Record(FINAL_MODELS, (rank, frame.integer(raw, "samples"), frame.integer(raw, "updates"),
                                      frame.real(raw, "weight"), frame.real(raw, "mass")))
    # Samples lost with the failed workers: a synchronous team's (its survivors counted them, and a step
    # a worker took before it died unseen — the survivors had ended — leaves the team short of the
    # budget by it); where the workers claim batches from the budget, the claims no report accounts for
    # (nor any survivor trained).
    short = ctx.budget - sum(frame.integer(raw, "samples") for raw in finals) - sum(reported[r] for r in failed)
    yield from record_failures(reported, failed, max(team_lost, short) if synchronous else max(0, short))


CALM_SHARE = 0.9  # of the time the last interval's pace gives until the next report rank 0 must act on


def calm_until(last: list[tuple[float, int]], now: float, due: int) -> float:
    """Seconds from ``now`` for which rank 0 expects no report it must act on promptly (the one that
    reaches ``due`` samples: the next snapshot, or the budget's end): CALM_SHARE of what the pace
    between the ``last`` two snapshots noted ((when, samples) each) takes from the second to ``due``,
    less the time since the second. A driver still looks every few milliseconds meanwhile (the MPI one
    at most 10 ms apart), so a run that speeds up by more than a tenth has its snapshot noted at most
    one look late; one that slows down only makes rank 0 look sooner than it needed to."""
    (t0, s0), (t1, s1) = last
    if t1 <= t0 or s1 <= s0:
        return 0.0
    return max(0.0, CALM_SHARE * (due - s1) * (t1 - t0) / (s1 - s0) - (now - t1))


def every_worker_lost(ctx: Context, synchronous: bool, reported: list[int], failed: list[int],
                      team_lost: int) -> Program:
    """Rank 0 when no worker is left: each failure recorded with the samples its reports said it had
    trained, and the samples lost with them: a synchronous team's as its last report counted them; where
    the workers claim batches from the budget, the claims (rank 0's own counter, read with an add of 0)
    no report accounts for. The run's record then says it failed (``runtime.record``)."""
    if synchronous:
        lost = team_lost
    else:
        claimed = yield FetchAdd("budget", SERVER, 0)
        lost = max(0, min(int(claimed), ctx.budget) - sum(reported[r] for r in failed))
    yield from record_failures(reported, failed, lost)


def record_failures(reported: list[int], failed: list[int], lost: int) -> Program:
    """A row of the failures table for each failed worker, in the order rank 0 learned of them: the
    samples it had reported, and its share of the ``lost`` samples."""
    for i, rank in enumerate(failed):
        yield Record(FAILURES, (rank, reported[rank], lost // len(failed) + (i < lost % len(failed))))


def note_snapshot(ctx: Context, total: int, synchronous: bool, training: set[int], failed: list[int],
                  own_centre: Centre | None) -> Sub[Asked]:
    """Rank 0 notes a snapshot at ``total`` samples: the workers that keep it (every survivor when they
    step ``synchronous``ly and keep each one unasked; else the training ones, asked to), and with
    ``own_centre`` (EASGD's centre on rank 0) a copy of its "x"."""
    t = yield Timestamp()
    k = min(total // ctx.eval_every, snapshots(ctx))
    whom = tuple(r for r in ctx.worker_ranks if r not in failed) if synchronous else tuple(sorted(training))
    for rank in () if synchronous else whom:
        yield Send("evaluate", rank, EVALUATE.pack(k=k - 1))
    own = None
    if own_centre is not None:
        [raw] = yield Read("centre", (SERVER,), observe=True)  # rank 0's own window: nothing crosses a link
        own = own_centre[0].view(raw, "x").copy()
    return Asked(t, k - 1, whom, own)


def read_survivors(window: str, ranks: tuple[int, ...], failed: list[int], nbytes: int = -1,
                   offset: int = 0) -> Sub[tuple[tuple[int, ...], list[np.ndarray]]]:
    """Rank 0's measuring read of ``ranks``' windows, without the ranks that fail meanwhile (added to
    ``failed``); → (the ranks read, their bytes)."""
    while True:
        got = yield Read(window, ranks, nbytes, observe=True, offset=offset)
        if type(got) is not Lost:
            return ranks, got
        failed += [r for r in got.ranks if r not in failed]
        ranks = tuple(r for r in ranks if r not in got.ranks)


def evaluation(frame: Frame, raws: list[np.ndarray], centre_x: np.ndarray | None, at: float = float("nan")) -> Evaluate:
    """The global model of the workers' models ``raws``: their average (or ``centre_x``), at ``at``."""
    params, consensus = average(frame, raws)
    samples = sum(frame.integer(r, "samples") for r in raws)
    updates = sum(frame.integer(r, "updates") for r in raws)
    return Evaluate(params if centre_x is None else centre_x, samples, updates, consensus, at)


def local_sgd(ctx: Context, x: np.ndarray, grad: np.ndarray, at: np.ndarray, buf: np.ndarray | None,
              samples: int, factor: float = 1.0) -> float:
    """A worker's own momentum-SGD step for a gradient taken at ``at``, at the schedule's rate after
    ``samples`` (over all workers) times ``factor``; returns the rate applied.

    Push-sum workers train their de-biased model z, as the SGP reference implementation does (it
    un-biases the parameters for the forward pass and the optimizer step).
    """
    d_p = grad + np.float32(ctx.weight_decay) * at if ctx.weight_decay else grad
    lr = ctx.schedule.at(samples) * factor
    x -= np.float32(lr) * momentum_direction(d_p, buf, ctx.momentum, ctx.nesterov)
    return lr


def estimated(ctx: Context, step: int) -> int:
    """The samples trained over all workers as an asynchronous worker estimates them after ``step``
    steps of its own (it does not know the others'): step × workers × batch, for the schedule."""
    return step * ctx.workers * ctx.batch_size


def local_step(ctx: Context, reporter: Reporter, x: np.ndarray, buf: np.ndarray | None, samples: int,
               factor: float = 1.0) -> Program:
    """Compute a gradient at x (float32 on the wire, whatever x is kept in) and take the local step at
    the rate after ``samples`` (times ``factor``)."""
    at = x if x.dtype == np.float32 else x.astype(np.float32)
    result = yield Compute(at)
    reporter.trained(result, local_sgd(ctx, x, result.grad, at, buf, samples, factor))


def packed(frame: Frame, ctx: Context, step: int, z: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """This worker's model after ``step`` local steps, as its "model" window and its snapshots hold it."""
    return frame.pack(samples=step * ctx.batch_size, updates=step, weight=weight,
                      mass=weight * float(z.sum(dtype=np.float64)), z=z)


def publish(frame: Frame, ctx: Context, step: int, z: np.ndarray, weight: float = 1.0) -> Publish:
    """This worker's model after ``step`` local steps, for its peers and rank 0 to read."""
    return Publish("model", packed(frame, ctx, step, z, weight))


def report_every(ctx: Context) -> int:
    """Steps between a worker's progress reports: about four per evaluation interval."""
    return max(1, ctx.eval_every // (4 * ctx.batch_size * ctx.workers))


class Team:
    """A synchronous worker's team: whom its collectives span (all the workers, until a collective
    fails with one; every survivor learns it at the same collective, so all agree), the samples the
    team has trained, and those lost with members that failed.

    Each local step credits one batch per member (``stepped``); after each collective
    (``synchronised``) a member that failed since the one before loses the steps it took since then:
    they are taken back from the team's samples, so the survivors train them again. The rate follows
    the members where ``lr_scaling`` makes it grow with the workers (``factor``).
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.members = ctx.worker_ranks
        self.samples = 0
        self.lost = 0
        self.synced = 0  # local steps done at the last collective

    @property
    def done(self) -> bool:
        return self.samples >= self.ctx.budget

    @property
    def factor(self) -> float:
        scaling = self.ctx.schedule.scaling
        return lr_scale(scaling, len(self.members)) / lr_scale(scaling, self.ctx.workers)

    def stepped(self) -> None:
        self.samples += len(self.members) * self.ctx.batch_size

    def lose(self, failed: frozenset[int]) -> None:
        """A team that synchronises by messages rather than collectives (sgp): the members it knows to have
        failed leave it, each with the step it was taking, which ``stepped`` had counted: taken back, so
        the survivors train it again."""
        left = tuple(r for r in self.members if r not in failed)
        lost = (len(self.members) - len(left)) * self.ctx.batch_size
        self.samples -= lost
        self.lost += lost
        self.members = left

    def synchronised(self, steps: int) -> Sub[None]:
        """After a collective, with ``steps`` local steps done."""
        members = yield Workers()
        if len(members) < len(self.members):
            lost = (len(self.members) - len(members)) * (steps - self.synced) * self.ctx.batch_size
            self.samples -= lost
            self.lost += lost
            self.members = members
        self.synced = steps


class Budget:
    """Whether a worker takes another step: until its ``team`` has trained the budget (synchronous
    methods), or, with ``shared``, while a batch claimed from the budget counter on rank 0 with an
    atomic fetch-and-add is within it: exactly the budget is trained, fast workers take more of it than
    slow ones, and rank 0 does no work for it."""

    def __init__(self, ctx: Context, shared: bool, team: Team | None = None) -> None:
        if not shared and team is None:
            raise ValueError("a budget that is not shared is a team's")
        self.ctx, self.shared, self.team = ctx, shared, team

    def next_step(self) -> Sub[bool]:
        """May this worker take one more step?"""
        if self.team is not None and not self.shared:
            return not self.team.done
        claimed_before = yield FetchAdd("budget", SERVER, self.ctx.batch_size)
        return claimed_before < self.ctx.budget


class Reporter:
    """A worker's progress reports to rank 0 (every few steps, and a last one when it is done), and
    its snapshots: at the steps that reach a multiple of ``eval_every`` samples when it steps
    synchronously with a ``team``, else as rank 0 asks."""

    def __init__(self, ctx: Context, team: Team | None, extra: int = 0) -> None:
        self.ctx, self.team = ctx, team
        self.every = report_every(ctx)
        self.slot = slot_bytes(ctx, extra)
        self.reached = 0  # synchronous: the multiples of eval_every kept so far
        self.loss_sum, self.correct, self.seen, self.lr = 0.0, 0, 0, float("nan")

    def trained(self, result: Gradient, lr: float) -> None:
        self.loss_sum += result.loss * result.samples
        self.correct += result.correct
        self.seen += result.samples
        self.lr = lr

    def report(self, step: int, keep: Callable[[], np.ndarray], done: bool = False) -> Program:
        """After ``step`` local steps; ``keep``: this worker's snapshot as of now (``packed``, and the
        extra bytes); ``done``: the last report, after which rank 0's last requests are kept until it
        says no more are coming."""
        crossed = False
        if self.team is not None:
            reached = min(self.team.samples // self.ctx.eval_every, snapshots(self.ctx))
            for k in range(self.reached + 1, reached + 1):
                crossed = True
                yield Publish("kept", keep(), offset=(k - 1) * self.slot)
            self.reached = max(self.reached, reached)
        else:
            for _, raw in (yield Poll("evaluate", SERVER)):
                yield self.kept(raw, keep)
        if done or step % self.every == 0 or crossed:  # rank 0 notes a snapshot's time from the one at its step
            yield Send("progress", SERVER, PROGRESS.pack(samples=step * self.ctx.batch_size, done=int(done),
                                                         loss_sum=self.loss_sum, correct=self.correct,
                                                         seen=self.seen, lr=self.lr,
                                                         lost=self.team.lost if self.team is not None else 0))
            self.loss_sum, self.correct, self.seen = 0.0, 0, 0
        while done:
            _, raw = yield Recv("evaluate", SERVER, timeout=WATCHED)
            if EVALUATE.integer(raw, "k") == NO_MORE:
                yield Send("progress", SERVER, PROGRESS.pack(done=KEPT_ALL))  # rank 0 may read the snapshots now
                return
            yield self.kept(raw, keep)

    def kept(self, request: np.ndarray, keep: Callable[[], np.ndarray]) -> Publish:
        return Publish("kept", keep(), offset=EVALUATE.integer(request, "k") * self.slot)
