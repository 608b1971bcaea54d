"""``hpcbench run``: one benchmark run under real MPI, from set-up to the result file on rank 0.

Everything after MPI starts goes through the ``Cluster`` protocol (``run_on``), so the same set-up
agreement, heartbeats, failure notices and final gather run over the loopback cluster in tests.
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import numpy as np

from hpcbench.algorithms.api import Layout, Program, role_of
from hpcbench.algorithms.rules import diverging
from hpcbench.comm.transport import Cluster
from hpcbench.errors import (
    HpcbenchError,
    LauncherGone,
    PeerFailure,
    ResultWriteError,
    RunEnded,
    Stopped,
    TimeLimitPassed,
    UsageError,
    WaitTimeout,
    error_line,
    failure_status,
)
from hpcbench.results.paths import check_room
from hpcbench.results.schema import RunRecord
from hpcbench.runtime.assemble import Run, assemble
from hpcbench.runtime.mpi.driver import MpiDriver
from hpcbench.runtime.mpi.faults import Injector
from hpcbench.runtime.mpi.placement import choose_device
from hpcbench.runtime.mpi.selfcheck import oversubscribed_nodes, shared_gpus, slurm_world_mismatch
from hpcbench.runtime.output import ResultFile, default_out, expected_bytes, result_line, warn_unfired
from hpcbench.runtime.plan import Plan
from hpcbench.runtime.record import RankResult, build_record
from hpcbench.runtime.threads import cpu_count, set_threads, thread_count
from hpcbench.signals import signals_held, stop_on_signals
from hpcbench.telemetry.gcpause import collector_paused
from hpcbench.telemetry.timeline import Timeline

# A worker that fails tells rank 0 and waits this long for it to write the run's record (rank 0 then
# ends every rank); rank 0 spends at most SCORE_ON_FAILURE_S (and a quarter of timeout_s, the time
# workers wait to hear from it) scoring the evaluations.
NOTICE_GRACE_S = 30.0
LAUNCHER_GONE_GRACE_S = 1.0  # for the notice to leave, when nothing but this rank itself can end it
SCORE_ON_FAILURE_S = 3.0
FLUSH_SHARE = 0.05  # the most of rank 0's time that rewriting the result file mid-run may take


def prepare(plan: Plan, rank: int, workers: int, local: tuple[int, int], on_rank0_node: bool) -> tuple[Run, str, int]:
    """Everything a rank sets up alone; → (run, device, torch threads). May raise UsageError (agreed on
    by all ranks afterwards)."""
    threads = thread_count(plan.cfg.threads, local[1])
    set_threads(plan.cfg, threads)
    device = choose_device(plan.cfg, rank, local[0], on_rank0_node)
    return assemble(plan, workers, device, sharing=local[1]), device, threads


def open_layout(comm: Cluster, layout: Layout, workers: int) -> None:
    """Collective, in name order so every rank creates the same windows and tags."""
    for name in sorted(layout.windows):
        spec = layout.windows[name]
        owned = spec.owner == role_of(comm.rank)
        comm.open_window(name, spec.nbytes, owned, spec.mode)
        if owned and spec.initial is not None:
            comm.publish(name, spec.initial)
    for name in sorted(layout.channels):
        channel = layout.channels[name]
        sources: tuple[int, ...] = ()
        if channel.to == "server" and comm.rank == 0:
            sources = tuple(range(1, workers + 1))
        elif channel.sender == "server" and comm.rank != 0:
            sources = (0,)
        comm.open_channel(name, channel.nbytes, sources)


def agree(comm: Cluster, error: str | None, timeout: float) -> tuple[int, str, str] | None:
    """Collective: the first rank's set-up error, if any rank had one."""
    errors = comm.exchange((comm.rank, comm.host, error or ""), timeout, "agreeing that set-up went well")
    every_rank(comm, errors, "set-up")
    return next(((r, h, e) for r, h, e in errors if e), None)


def every_rank(comm: Cluster, parts: list[Any], what: str) -> None:
    """Before training, every rank is needed (the run is the world it was asked for): a rank that failed
    (its part None, where the MPI outlives it) ends the run, named on every rank's line."""
    lost = [r for r, part in enumerate(parts) if part is None]
    if lost:
        names = ", ".join(f"rank {r}" + (f" on {comm.hosts[r]}" if comm.hosts[r] else "") for r in lost)
        raise LostBeforeTraining(f"{names} failed during {what}, before training began: the run did not start "
                                 f"(it needs every rank of the {len(parts)} it was launched with)")


class LostBeforeTraining(PeerFailure):
    """A rank failed before training (where the MPI outlives it): every rank knows it from the same
    exchange and ends by itself, with nothing to record."""


def place(comm: Cluster, device: str, threads: int, timeout: float) -> list[RankResult]:
    """Collective: every rank's host, device and threads; rank 0 warns about shared GPUs and
    oversubscribed nodes (the run goes on)."""
    reports = comm.exchange((comm.rank, comm.host, device, comm.local_size, cpu_count(), threads, comm.local_rank),
                            timeout, "the placement report")
    every_rank(comm, reports, "the placement report")
    if comm.rank == 0:
        nodes = {host: (ranks, cores) for _, host, _, ranks, cores, *_ in reports}
        for warning in shared_gpus([(r, h, d) for r, h, d, *_ in reports]) + oversubscribed_nodes(nodes):
            print(f"hpcbench: warning: {warning}", file=sys.stderr, flush=True)
    return [RankResult(r, h, d, t, i) for r, h, d, _, _, t, i in reports]


def run_mpi(plan: Plan) -> int:
    from hpcbench.comm.mpi import MpiComm
    from hpcbench.comm.probe import mpi_library

    comm = MpiComm()
    mismatch = slurm_world_mismatch(os.environ, comm.size, mpi_library()["mpi_vendor"])
    if mismatch is not None:
        # Every task believes it is rank 0 of 1 here: only Slurm's task 0 says so.
        if os.environ.get("SLURM_PROCID", "0") == "0":
            print(f"hpcbench: error: {mismatch}", file=sys.stderr, flush=True)
        comm.finalize()
        return 2
    if hasattr(signal, "SIGXFSZ"):  # past a file-size limit a write fails with EFBIG instead of killing us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return run_on(plan, comm)


def run_on(plan: Plan, comm: Cluster) -> int:
    """This rank's part of the run, and its part in ending a run that fails: → its exit code."""
    try:
        with stop_on_signals(), diverging():
            return execute(plan, comm)
    except LostBeforeTraining as exc:  # every rank says so and ends; no one waits for anyone
        report(exc, comm)
        comm.finalize(1)
        return 1
    except RunEnded:  # rank 0 has said why and kept the record
        comm.abort(1)
        return 1
    except BaseException as exc:
        with signals_held(), ending(comm):
            if not isinstance(exc, Reported):
                report(exc, comm)
            if comm.rank != 0:  # rank 0 keeps a record of the run, then ends every rank
                # Rank 0 gets a grace to keep the record and end every rank, unless it is the one that went
                # silent, or this rank's launcher is gone (rank 0 could not end this rank: it ends itself).
                if isinstance(exc, WaitTimeout) and exc.peer == 0:
                    grace = 0.0
                else:
                    grace = LAUNCHER_GONE_GRACE_S if isinstance(exc, LauncherGone) else NOTICE_GRACE_S
                comm.tell_failure(failure_status(exc), error_line(exc), grace)
    return 1


@contextmanager
def ending(comm: Cluster) -> Iterator[None]:
    """Whatever happens within (stderr gone with a dead launcher, a second failure), every rank ends."""
    try:
        yield
    finally:
        comm.abort(1)


class Reported(Exception):
    """Rank 0 has printed the run's error and kept its record: what is left is to end every rank."""


def report(exc: BaseException, comm: Cluster) -> None:
    """The error, once, on this rank's stderr: one line for the failures we know, a traceback otherwise."""
    if isinstance(exc, (PeerFailure, ResultWriteError)):
        print(f"hpcbench: error: {exc}", file=sys.stderr, flush=True)
    elif isinstance(exc, HpcbenchError):
        print(f"hpcbench: error: rank {comm.rank} on {comm.host}: {exc}", file=sys.stderr, flush=True)
    else:
        traceback.print_exc()
        sys.stderr.flush()


def set_up(plan: Plan, comm: Cluster) -> tuple[Run, str, int, float] | None:
    """Everything before the timed window, checked on every rank and agreed: → (run, device, threads,
    warm-up seconds), or None when a rank found the run cannot work (rank 0 has said why)."""
    cfg, rank, workers = plan.cfg, comm.rank, comm.size - 1
    local = comm.node_local()
    comm.oversubscribed(local[1] / cpu_count())
    comm.hosts = comm.exchange(comm.host, cfg.timeout_s, "the set-up (every rank saying where it runs)")
    prepared, error, warmup_s = None, None, 0.0
    Injector(cfg.fault, rank, 0.0).at_phase("setup")
    try:
        plan.check_world(comm.size, cpu_count())
        prepared = prepare(plan, rank, workers, local, comm.hosts[rank] == comm.hosts[0])
        run = prepared[0]
        if rank == 0:
            check_room(cfg.out or default_out(cfg, workers), expected_bytes(run))
            if any(r > 0 for r in cfg.fault.killed()) and not comm.survives_failures:
                print(f"hpcbench: warning: fault = {cfg.fault} kills a worker, and this MPI ends every rank when one "
                      "fails: the run ends there, with its record (Open MPI launched with mpirun --with-ft ulfm "
                      "lets the others go on)", file=sys.stderr, flush=True)
        elif cfg.warmup_steps:  # before the timed window: counts toward nothing
            step_s = run.workload.warm_up(np.resize(run.stream(rank).shard, cfg.batch_size), cfg.warmup_steps)
            warmup_s = step_s * cfg.warmup_steps
            if run.workload.compute is not None:
                step_s += run.workload.compute.mean(rank)
            plan.check_duration(run.algo.ctx.steps, step_s * run.slow_factor(rank), time.time())
    except UsageError as exc:
        error = str(exc)
    failure = agree(comm, error, cfg.timeout_s)
    if failure is not None:
        if rank == 0:
            who, host, message = failure
            where = "" if who == 0 else f"rank {who} on {host}: "
            print(f"hpcbench: error: {where}{message}", file=sys.stderr, flush=True)
        return None
    assert prepared is not None
    return (*prepared, warmup_s)


def execute(plan: Plan, comm: Cluster) -> int:
    cfg, rank, workers = plan.cfg, comm.rank, comm.size - 1
    ready = set_up(plan, comm)
    if ready is None:
        comm.finalize()
        return 2
    run, device, threads, warmup_s = ready
    placed = place(comm, device, threads, cfg.timeout_s)
    comm.world_barrier(cfg.timeout_s, "window creation")  # a rank missing here is named, not waited for forever
    open_layout(comm, run.layout, workers)
    offsets = comm.clock_offsets(cfg.timeout_s)
    timeline = Timeline(rank)
    keeper = Keeper(run, comm, placed, offsets, timeline) if rank == 0 else None
    progress = run.progress_line(early=True) if rank == 0 else None  # (a launcher's pipe: a line even for a short run)
    stream = run.stream(rank) if rank > 0 else None
    if keeper is not None:
        keeper.claim()  # the file exists before the first step, outside the timed window
    comm.world_barrier(cfg.timeout_s, "the start of training")
    start, cpu_start = comm.wtime(), time.process_time()
    limit_s, limited_by = plan.limit.at(time.time())
    injector = Injector(cfg.fault, rank, start)
    driver = MpiDriver(comm, timeline, cfg.timeout_s, run.workload, stream, run.slow_factor(rank),
                       keeper.logs if keeper is not None else None, progress, tick=comm.tick,
                       slowdown=injector.slow_factor, modeled=run.modeled(rank), fault=injector)

    def on_wait() -> None:
        now = comm.wtime()
        injector.check(now, driver.step)
        if keeper is not None:
            if now - start > limit_s:  # rank 0 ends the run, with its record, when its time is up
                raise TimeLimitPassed(f"the run passed the {limit_s:.4g} s it may take ({limited_by}) after "
                                      f"{driver.step} of rank 0's steps")
            keeper.maybe_flush(driver.step)

    comm.on_wait = on_wait
    comm.start_heartbeats(min(1.0, cfg.timeout_s / 10), cfg.timeout_s, min(cfg.stall_s, cfg.timeout_s / 2))
    gathered: list[RankResult | None] | None = None
    try:
        if keeper is not None:
            keeper.begin(start)
        with collector_paused():
            end = driver.run(program_of(run, rank))
        cpu_end, cpu_at = driver.trained
        comm.on_wait = None
        if progress is not None:
            progress.close()
        comm.close(cfg.timeout_s)
        injector.at_phase("gather")
        gathered = comm.collect(placed[rank].timed(start, end, timeline.columns(), warmup_s=warmup_s,
                                                   cpu_s=cpu_at - cpu_start, cpu_end=cpu_end,
                                                   unfired=injector.unfired()),
                                cfg.timeout_s, "the final gather of timelines")
        injector.at_phase("final")
        if keeper is not None:
            assert gathered is not None
            final, path = keeper.finish(gathered)
            print(result_line(final, path), flush=True)
            warn_unfired([p.unfired for p in gathered if p is not None and p.unfired], final)
            if final.attrs["status"] != "ok":  # it lost every worker: its record is kept, and it failed
                print(f"hpcbench: error: {final.attrs['error']}; what rank 0 recorded is in {path} "
                      f"(status {final.attrs['status']!r})", file=sys.stderr, flush=True)
                comm.finalize(1)
                return 1
    except Reported:
        raise
    except BaseException as exc:
        comm.on_wait = None
        if keeper is not None:
            if gathered is not None and isinstance(exc, Stopped):  # stopped after the gather: keep every row
                keeper.keep_stopped(gathered, exc)
            named = blamed(comm, exc, cfg.timeout_s)
            with signals_held():
                if progress is not None:
                    progress.close()
                # Said first: a worker that stops hearing rank 0 while it writes the record ends every rank.
                report(named, comm)
                keeper.fail(named)
            raise Reported() from None
        raise
    comm.finalize()
    return 0


def program_of(run: Run, rank: int) -> Program:
    return run.algo.server() if rank == 0 else run.algo.worker(rank)


def blamed(comm: Cluster, exc: BaseException, timeout: float) -> BaseException:
    """Rank 0, when a wait in training failed: name the workers that stopped answering (heartbeats
    silent for over half the timeout), which the rank that timed out cannot know."""
    if not isinstance(exc, (WaitTimeout, PeerFailure)) or getattr(exc, "peer", None) is not None:
        return exc
    quiet = comm.silent(timeout / 2)
    if not quiet:
        return exc
    who = ", ".join(f"{comm.name(r)} (silent for {s:.0f} s)" for r, s in quiet)
    verb = "has" if len(quiet) == 1 else "have"
    return PeerFailure(f"{who} {verb} stopped answering; {where_from(exc, comm.host)}", failure_status(exc))


def provenance() -> dict[str, Any]:
    from hpcbench.comm.probe import mpi_library
    from hpcbench.runtime.provenance import software

    return {**software(), **mpi_library()}


def where_from(exc: BaseException, host: str) -> str:
    """The error line for the record, naming the rank it came from."""
    return str(exc) if isinstance(exc, PeerFailure) else f"rank 0 on {host}: {error_line(exc)}"


class Keeper:
    """Rank 0's record of the run while it goes on: the result file is written when training starts,
    rewritten every ``flush_s`` seconds with status "incomplete" (so a kill of any rank, rank 0
    included, leaves what was measured until then), and finally as "ok" or how the run failed."""

    def __init__(self, run: Run, comm: Cluster, placed: list[RankResult], offsets: np.ndarray | None,
                 timeline: Timeline) -> None:
        assert offsets is not None
        self.run, self.comm, self.placed, self.offsets, self.timeline = run, comm, placed, offsets, timeline
        self.logs = run.logs()
        self.file = ResultFile(run.cfg, comm.size - 1, "mpi")
        self.provenance = {**provenance(), "fault_tolerance": "ulfm" if comm.survives_failures else "none"}
        self.start = 0.0
        self.next_flush = math.inf

    def record(self, parts: list[RankResult | None], failure: tuple[str, str, float] | None,
               stopped: tuple[str, str] | None = None) -> RunRecord:
        """``parts``: every rank's, None for a rank that failed (where the run outlived it); when they are
        the final gather's, a None is a worker whose timeline was lost with it."""
        placed = [p if p is not None else self.placed[r].timed(self.start, self.start, Timeline(r).columns())
                  for r, p in enumerate(parts)]
        detected = self.comm.failure_log()
        kills = self.run.cfg.fault.kills()
        return build_record(self.run, mode="mpi", world_size=self.comm.size, parts=placed, offsets=self.offsets,
                            origin=self.start, logs=self.logs, provenance=self.provenance, failure=failure,
                            stopped=stopped, detected=detected, stalls=self.comm.stall_log(),
                            deaths={r: kills[r] for r in detected if r in kills},
                            unfired=[p.unfired for p in parts if p is not None and p.unfired],
                            missing=[r for r, p in enumerate(parts) if p is None] if failure is None else ())

    def own_parts(self, now: float) -> list[RankResult | None]:
        """Rank 0's timeline; the workers' are gathered only at the end."""
        own = self.placed[0].timed(self.start, now, self.timeline.columns())
        return [own] + [None] * (len(self.placed) - 1)

    def claim(self) -> None:
        """Write the file for the first time (an empty record, "incomplete")."""
        self.start = self.comm.wtime()
        self.flush(self.start)

    def begin(self, start: float) -> None:
        """Training started at ``start``: flushes count from there."""
        self.start = start
        self.next_flush = start + self.run.cfg.flush_s

    def flush(self, now: float) -> None:
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        line = (f"the run had not finished when rank 0 last wrote this file, {now - self.start:.1f} s into it "
                f"({when}): it was killed, or is still running")
        self.file.write(self.record(self.own_parts(now), ("incomplete", line, now)))
        done = self.comm.wtime()
        # Each rewrite costs in proportion to the file: never spend over FLUSH_SHARE of rank 0's time on them.
        self.next_flush = done + max(self.run.cfg.flush_s, (done - now) / FLUSH_SHARE)

    def maybe_flush(self, step: int) -> None:
        """Rewrite the file when it is due. A rewrite that fails (a full disk) is said and tried again
        after ``flush_s``; the run goes on (only the final write's failure ends it)."""
        t0 = self.comm.wtime()
        if t0 >= self.next_flush:
            self.next_flush = math.inf  # no flush within a flush
            try:
                self.flush(t0)
            except ResultWriteError as exc:
                self.next_flush = self.comm.wtime() + self.run.cfg.flush_s
                print(f"hpcbench: warning: a periodic rewrite of the result failed, the run goes on and tries again "
                      f"in {self.run.cfg.flush_s:g} s: {exc}", file=sys.stderr, flush=True)
            self.timeline.add(step, "flush", t0, self.comm.wtime())

    def finish(self, gathered: list[RankResult | None]) -> tuple[RunRecord, str]:
        """The complete record, written over the last flush; → (record, path). A stop signal here (Slurm's
        warning or time limit can land while the evaluations are scored) ends in ``keep_stopped``."""
        self.score()
        final = self.record(gathered, None)
        try:
            return final, self.file.write(final, last=True)
        except ResultWriteError as exc:
            raise ResultWriteError(f"{exc}; {self.file.path} keeps the run as of its last flush "
                                   "(status 'incomplete')") from None

    def score(self, seconds: float = math.inf) -> None:
        """Rank 0's evaluations scored (the last on the whole test set and validation split)."""
        self.logs.score(self.run.workload.evaluate, self.run.cfg.eval_limits, seconds)

    def keep_stopped(self, gathered: list[RankResult | None], exc: Stopped) -> None:
        """Stopped after the final gather (scoring, writing): every row the ranks measured, as
        "aborted", with the evaluations a few seconds can score; then the run ends (``Reported``)."""
        with signals_held():
            line = f"rank 0 on {self.comm.host}: {exc} after training, while its result was scored and written"
            print(f"hpcbench: error: {line}", file=sys.stderr, flush=True)
            self.score(min(SCORE_ON_FAILURE_S, self.run.cfg.timeout_s / 4))
            path = self.file.write(self.record(gathered, None, stopped=(exc.status, line)), last=True)
            print(f"hpcbench: the run ended as {exc.status!r} after it trained; every row it measured is in {path}",
                  file=sys.stderr, flush=True)
        raise Reported()

    def fail(self, exc: BaseException) -> None:
        """When the run cannot finish: what rank 0 recorded until now (its own timeline, the
        evaluations it can score in a few seconds, the server's tables) with the status and error."""
        cfg = self.run.cfg
        now = self.comm.wtime()
        try:
            self.score(min(SCORE_ON_FAILURE_S, cfg.timeout_s / 4))
            record = self.record(self.own_parts(now),
                                 (failure_status(exc), where_from(exc, self.comm.host), now))
            path = self.file.write(record, last=True)
        except Exception as write_error:  # the run's own error is the one to report
            print(f"hpcbench: could not keep a record of the failed run: {write_error}", file=sys.stderr, flush=True)
            return
        print(f"hpcbench: the run ended as {record.attrs['status']!r}; what rank 0 recorded until then is in {path}",
              file=sys.stderr, flush=True)
