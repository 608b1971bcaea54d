"""Parameter-server algorithms on rank 0: asgd, and the rules made of its parts (``rules.RulePart``).

Rank 0 publishes (version, parameters, version) in its window; a worker reads it one-sidedly,
computes a gradient, sends (version used, gradient) into the server's pre-posted receives and waits
for the acknowledgement that its gradient was applied and published, so its next read sees at
least its own update (the papers' parameter-server model: one worker is exactly sequential SGD).
The server applies gradients in arrival order until the sample budget is spent, then answers
every worker's next gradient with "stop" (such late gradients are logged in ``late``).

Gap-Aware needs Δ = θ_now − θ_used exactly. The server keeps the last ``history`` published vectors;
for a gradient older than that it answers "echo" and the worker sends back the vector it read (it
still holds it), so no gradient is ever dropped or given a guessed Δ.

A worker that fails (where the MPI lets the others go on, and in the simulator) is no longer waited
for: the survivors apply the rest of the budget, DANA drops its momentum, and the server records the
batch it was computing as lost (or, failing while its gradient waited for its echo, that gradient).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms.api import (
    PARAMETER_SERVER,
    Algorithm,
    ChannelSpec,
    Context,
    Layout,
    Program,
    Settings,
    Sub,
    WindowSpec,
    register,
)
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.meter import TrainingMeter
from hpcbench.algorithms.ops import SERVER, Compute, Evaluate, Lost, Publish, Read, Record, Recv, Send
from hpcbench.algorithms.rules import (
    NEUTRAL,
    GapPenalty,
    Momentum,
    RulePart,
    ServerRule,
    StalenessDivisor,
    VersionRing,
    WorkerMomentum,
)
from hpcbench.errors import RuntimeFailure, UsageError
from hpcbench.memory import check_memory
from hpcbench.ranges import bounded
from hpcbench.results.schema import FAILURES, LATE, UPDATES, added_columns

# version_used: the version the worker read; version_applied: the version the gradient was applied
# onto (staleness = version_applied − version_used); penalty_mean: the divisor actually applied;
# lr: the learning rate applied; echo_bytes: bytes the worker sent back so that Δ was exact
# (0: Δ came from the server's ring, or the rule needs none).
ACK = Frame(answer=(np.int64, 1))
ANSWERS = ("go", "stop", "echo")  # echo: "send back the parameters you computed on"
GO, STOP, ECHO = (ACK.pack(answer=i) for i in range(len(ANSWERS)))  # sent as they are, never written
GO.flags.writeable = STOP.flags.writeable = ECHO.flags.writeable = False


class ParameterServer(Algorithm):
    family = PARAMETER_SERVER
    asynchronous = True
    per_worker_momentum = False  # DANA's momentum, a buffer per worker and a published look-ahead

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        d = ctx.size
        self.params_frame = Frame(version=(np.int64, 1), params=(np.float32, d), check=(np.int64, 1))
        self.grad_frame = Frame(version=(np.int64, 1), loss=(np.float64, 1), correct=(np.int64, 1),
                                grad=(np.float32, d))
        # θ lives in the bytes the server publishes from (a copy less per update), unless what it
        # publishes is a look-ahead (DANA)
        self.window = None if self.per_worker_momentum else self.params_frame.new()
        momentum = (WorkerMomentum(d, ctx.momentum, ctx.workers) if self.per_worker_momentum
                    else Momentum(d, ctx.momentum, ctx.nesterov))
        self.rule = ServerRule(ctx.params, ctx.weight_decay, momentum, self.parts(),
                               into=None if self.window is None else self.params_frame.view(self.window, "params"))
        # the columns the parts add to the updates table, after its own (which hold NEUTRAL's where no
        # part records them)
        self.added = added_columns(UPDATES, self.rule.columns)
        self.ring = None
        if self.rule.needs_delta:
            self.check_state(d)
            self.ring = VersionRing(self.history(), d)

    def history(self) -> int:
        """Published versions the server keeps for Δ."""
        return getattr(self.opts, "history", 0) or 2 * self.ctx.workers + 4

    def check_state(self, size: int) -> None:
        if self.rule.needs_delta:
            capacity = self.history()
            check_memory(4.0 * capacity * size, f"{self.name}'s history of {capacity} versions of {size} parameters",
                         f"lower {self.name}.history")

    def parts(self) -> tuple[RulePart, ...]:
        """The parts of this server's rule, applied in order before momentum (none: plain asgd)."""
        return ()

    @classmethod
    def check(cls, cfg: Settings, options: Any, workers: int) -> None:
        super().check(cfg, options, workers)
        if cls.per_worker_momentum and cfg.nesterov:
            raise UsageError(f"{cls.name} already publishes a look-ahead; --set nesterov=true is not available")

    def layout(self) -> Layout:
        first = self.params_frame.pack(version=0, params=self.rule.published(self.ctx.schedule.at(0)), check=0)
        channels = {"grad": ChannelSpec("workers", "server", self.grad_frame.nbytes),
                    "ack": ChannelSpec("server", "workers", ACK.nbytes)}
        if self.ring is not None:
            channels["echo"] = ChannelSpec("workers", "server", self.params_frame.nbytes)
        return Layout(
            windows={"params": WindowSpec("server", self.params_frame.nbytes, first)},
            channels=channels,
            tables=(UPDATES, LATE, FAILURES),
            columns={UPDATES: self.added} if self.added else {},
        )

    def state_bytes(self) -> int:
        return self.rule.state_bytes() + (self.ring.nbytes if self.ring is not None else 0)

    def worker(self, rank: int) -> Program:
        frame = self.params_frame
        while True:
            [raw] = yield Read("params", (SERVER,))
            version = frame.integer(raw, "version")
            if version != frame.integer(raw, "check"):
                raise RuntimeFailure(f"rank {rank} read a torn parameter window "
                                     f"(header version {version}, trailer {frame.integer(raw, 'check')})")
            # a new message each step, the gradient written straight into it, then handed over: the
            # transport sends it without a copy of its own
            msg = self.grad_frame.empty()
            result = yield Compute(frame.view(raw, "params"), out=self.grad_frame.view(msg, "grad"))
            self.grad_frame.fill(msg, version=version, loss=result.loss, correct=result.correct)
            yield Send("grad", SERVER, msg, given=True)
            _, ack = yield Recv("ack", SERVER)
            if ANSWERS[ACK.integer(ack, "answer")] == "echo":  # the server no longer holds what we read
                yield Send("echo", SERVER, raw)
                _, ack = yield Recv("ack", SERVER)
            if ANSWERS[ACK.integer(ack, "answer")] == "stop":
                return

    def server(self) -> Program:
        ctx, rule, ring = self.ctx, self.rule, self.ring
        batch, target = ctx.batch_size, ctx.steps * ctx.workers
        version = applied = 0
        gone: set[int] = set()  # workers that send no more: told to stop, or failed
        applied_from = [0] * (ctx.workers + 1)
        meter = TrainingMeter()
        published = rule.published(ctx.schedule.at(0))  # version 0 is the window's initial content
        window = self.params_frame.new() if self.window is None else self.window  # what each Publish copies from
        if ring is not None:
            ring.put(0, published)
        yield Evaluate(rule.theta, 0, 0)
        next_eval, evaluated = ctx.eval_every, 0
        while len(gone) < ctx.workers:
            got = yield Recv("grad")
            if type(got) is Lost:
                yield from self.lose(got.ranks, gone, applied_from)
                continue
            src, msg = got
            used = self.grad_frame.integer(msg, "version")
            if applied >= target:
                yield Record(LATE, (src, used))
                yield Send("ack", src, STOP)
                gone.add(src)
                continue
            delta, echoed = None, 0
            if ring is not None:
                old = ring.get(used)
                if old is None:
                    old = yield from self.echo(src, used)
                    if old is None:  # it failed before it echoed: its gradient goes with it
                        yield from self.lose((src,), gone, applied_from)
                        continue
                    echoed = self.params_frame.nbytes
                delta = published - old
            lr = ctx.schedule.at(applied * batch)
            onto, staleness = version, version - used  # staleness: updates applied since the worker read
            recorded = {**NEUTRAL, **rule.apply(self.grad_frame.view(msg, "grad"), src - 1, staleness, delta, lr)}
            applied += 1
            applied_from[src] += 1
            version += 1
            published = rule.published(ctx.schedule.at(applied * batch))
            fresh = {} if published is rule.theta else {"params": published}  # θ is in the window already
            yield Publish("params", self.params_frame.fill(window, version=version, check=version, **fresh))
            if ring is not None:
                ring.put(version, published)
            yield Record(UPDATES, (src, used, onto, staleness, recorded["penalty_mean"], recorded["gap_mean"], lr,
                                   echoed, *(recorded.get(c, math.nan) for c in self.added)))
            meter.add(batch * self.grad_frame.real(msg, "loss"), self.grad_frame.integer(msg, "correct"), batch)
            yield meter.progress(applied * batch)
            done = applied >= target
            yield Send("ack", src, STOP if done else GO)
            if done:
                gone.add(src)
            if applied * batch >= next_eval or done:
                yield Evaluate(rule.theta, applied * batch, applied)
                next_eval, evaluated = (applied * batch // ctx.eval_every + 1) * ctx.eval_every, applied
        if evaluated != applied:  # every worker failed short of the budget: the model as they left it
            yield Evaluate(rule.theta, applied * batch, applied)

    def lose(self, ranks: tuple[int, ...], gone: set[int], applied_from: list[int]) -> Program:
        """Workers that failed: no longer waited for, their state dropped, each with the batch it was
        computing (none for one already told to stop)."""
        for rank in ranks:
            if rank not in gone:
                gone.add(rank)
                self.rule.forget(rank - 1)
                yield Record(FAILURES, (rank, applied_from[rank] * self.ctx.batch_size, self.ctx.batch_size))

    def echo(self, src: int, used: int) -> Sub[np.ndarray | None]:
        """The vector ``src`` computed on, from ``src`` itself: the ring no longer holds version ``used``
        (None: ``src`` failed first)."""
        yield Send("ack", src, ECHO)
        got = yield Recv("echo", src)
        if type(got) is Lost:
            return None
        raw = got[1]
        got_version = self.params_frame.integer(raw, "version")
        if got_version != used:
            raise RuntimeFailure(f"rank {src} echoed version {got_version}, but its gradient was computed on {used}")
        return self.params_frame.view(raw, "params")


MAX_HISTORY = 8192  # published versions the server keeps: each a copy of the model


@dataclass(frozen=True)
class GapOptions:
    beta: float = bounded(0.999, low=0, below=1)  # decay of the running second moment of the step direction
    eps: float = bounded(1e-8, above=0, high=1.0)
    # published versions kept for Δ (older ones are echoed by the worker)
    history: int = bounded(0, low=0, high=MAX_HISTORY, unit="versions", resolves="2·workers + 4")


@register
class Asgd(ParameterServer):
    name = "asgd"
    summary = "asynchronous parameter server (Downpour, one fetch and one push per step)"


@register
class StalenessAware(ParameterServer):
    name = "sa-asgd"
    summary = "asgd with each step divided by its staleness (Zhang et al. 2016)"

    def parts(self) -> tuple[RulePart, ...]:
        return (StalenessDivisor(),)


@register
class GapAware(ParameterServer):
    name = "ga-asgd"
    summary = "asgd with the Gap-Aware penalty G = 1 + |Δ|/C per element (Barkai et al. 2020)"
    Options = GapOptions

    def parts(self) -> tuple[RulePart, ...]:
        return (GapPenalty(self.ctx.size, self.opts.beta, self.opts.eps),)


@register
class Dana(ParameterServer):
    name = "dana"
    summary = "per-worker server momentum with a published look-ahead (Hakimi et al. 2019)"
    per_worker_momentum = True


@register
class DanaGapAware(ParameterServer):
    name = "dana-ga"
    summary = "dana with the Gap-Aware penalty measured against the look-ahead used"
    per_worker_momentum = True
    Options = GapOptions

    def parts(self) -> tuple[RulePart, ...]:
        return (GapPenalty(self.ctx.size, self.opts.beta, self.opts.eps),)
