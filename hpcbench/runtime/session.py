"""``hpcbench run``: one benchmark run under real MPI, from set-up to the result file on rank 0."""
from __future__ import annotations

import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hpcbench.algorithms.api import Layout
from hpcbench.comm.transport import Cluster
from hpcbench.errors import HpcbenchError, PeerFailure, UsageError, error_line, failure_status
from hpcbench.runtime.assemble import Run, assemble
from hpcbench.runtime.mpi_driver import MpiDriver
from hpcbench.runtime.placement import choose_device, cpu_count, thread_count
from hpcbench.runtime.plan import Plan
from hpcbench.runtime.provenance import software
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.record import build_record, result_line, write_result
from hpcbench.runtime.signals import signals_held, stop_on_signals
from hpcbench.runtime.selfcheck import oversubscribed_nodes, shared_gpus, slurm_world_mismatch
from hpcbench.telemetry.gcpause import collector_paused
from hpcbench.telemetry.timeline import Timeline

if TYPE_CHECKING:
    from hpcbench.comm.mpi import MpiComm

# A worker that fails tells rank 0 and waits this long for it to write the run's record (rank 0 then
# ends every rank); rank 0 spends at most SCORE_ON_FAILURE_S of it scoring the evaluations.
NOTICE_GRACE_S = 30.0
SCORE_ON_FAILURE_S = 10.0


def prepare(plan: Plan, rank: int, workers: int, local: tuple[int, int], on_rank0_node: bool) -> tuple[Run, str, int]:
    """Everything a rank sets up alone; → (run, device, torch threads). May raise UsageError (agreed on
    by all ranks afterwards)."""
    threads = thread_count(plan.cfg.threads, local[1])
    torch.set_num_threads(threads)
    device = choose_device(rank, local[0], on_rank0_node)
    return assemble(plan, workers, device), device, threads


def open_layout(comm: Cluster, layout: Layout, workers: int) -> None:
    """Collective, in name order so every rank creates the same windows and tags."""
    for name in sorted(layout.windows):
        spec = layout.windows[name]
        owned = (spec.owner == "server") == (comm.rank == 0)
        comm.open_window(name, spec.nbytes, owned, accumulated=spec.mode == "accumulate")
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


def agree(comm: Cluster, error: str | None) -> tuple[int, str, str] | None:
    """Collective: the first rank's set-up error, if any rank had one."""
    errors = comm.allgather(None if error is None else (comm.rank, comm.host, error))
    return next((e for e in errors if e is not None), None)


def place(comm: Cluster, device: str, threads: int) -> list[dict[str, Any]]:
    """Collective: every rank's host, device and threads; rank 0 warns about shared GPUs and
    oversubscribed nodes (the run goes on)."""
    reports = comm.allgather((comm.rank, comm.host, device, comm.local_size, cpu_count(), threads))
    if comm.rank == 0:
        nodes = {host: (ranks, cores) for _, host, _, ranks, cores, _ in reports}
        for warning in shared_gpus([(r, h, d) for r, h, d, *_ in reports]) + oversubscribed_nodes(nodes):
            print(f"hpcbench: warning: {warning}", file=sys.stderr, flush=True)
    return [{"rank": r, "host": h, "device": d, "threads": t} for r, h, d, _, _, t in reports]


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
    try:
        with stop_on_signals():
            return execute(plan, comm)
    except BaseException as exc:
        with signals_held():
            if isinstance(exc, PeerFailure):
                print(f"hpcbench: error: {exc}", file=sys.stderr, flush=True)
            elif isinstance(exc, HpcbenchError):
                print(f"hpcbench: error: rank {comm.rank} on {comm.host}: {exc}", file=sys.stderr, flush=True)
            else:
                traceback.print_exc()
                sys.stderr.flush()
            if comm.rank != 0:  # rank 0 keeps a record of the run, then ends every rank
                comm.tell_failure(failure_status(exc), error_line(exc), NOTICE_GRACE_S)
            comm.abort(1)
    return 1


def execute(plan: Plan, comm: MpiComm) -> int:
    cfg, rank, workers = plan.cfg, comm.rank, comm.size - 1
    local = comm.node_local()
    comm.oversubscribed(local[1] > cpu_count())
    hosts = comm.allgather(comm.host)
    prepared, error = None, None
    try:
        prepared = prepare(plan, rank, workers, local, hosts[rank] == hosts[0])
    except UsageError as exc:
        error = str(exc)
    failure = agree(comm, error)
    if failure is not None:
        if rank == 0:
            who, host, message = failure
            where = "" if who == 0 else f"rank {who} on {host}: "
            print(f"hpcbench: error: {where}{message}", file=sys.stderr, flush=True)
        comm.finalize()
        return 2
    assert prepared is not None
    run, device, threads = prepared
    placed = place(comm, device, threads)
    open_layout(comm, run.layout, workers)
    offsets = comm.clock_offsets()
    timeline = Timeline(rank)
    logs = run.logs() if rank == 0 else None
    progress = run.progress() if rank == 0 else None
    stream = run.stream(rank) if rank > 0 else None
    driver = MpiDriver(comm, timeline, cfg.timeout_s, run.trainer, stream, run.slow_factor(rank), logs, progress)
    program = run.algo.server() if rank == 0 else run.algo.worker(rank)
    warmup_s = 0.0
    if stream is not None and cfg.warmup_steps:  # before the timed window: counts toward nothing
        t0 = comm.wtime()
        run.trainer.warm_up(np.resize(stream.shard, cfg.batch_size), cfg.warmup_steps)
        warmup_s = comm.wtime() - t0
    comm.world_barrier(cfg.timeout_s)
    start = comm.wtime()
    try:
        with collector_paused():
            end = driver.run(program)
        if progress is not None:
            progress.close()
        comm.close(cfg.timeout_s)
    except BaseException as exc:
        if rank == 0:
            assert logs is not None and offsets is not None
            with signals_held():
                if progress is not None:
                    progress.close()
                parts = [{**p, "start": start, "end": start, "timeline": Timeline(p["rank"]).columns()}
                         for p in placed]
                parts[0].update(end=comm.wtime(), timeline=timeline.columns())
                keep_failure(run, comm, parts, offsets, start, logs, exc)
        raise
    gathered = comm.gather({**placed[rank], "start": start, "end": end, "warmup_s": warmup_s,
                            "timeline": timeline.columns()})
    if rank == 0:
        assert logs is not None and offsets is not None and gathered is not None
        logs.score(lambda params: run.trainer.evaluate(params, cfg.eval_samples))
        record = build_record(run, mode="mpi", world_size=comm.size, parts=gathered, offsets=offsets, origin=start,
                              logs=logs, provenance=provenance())
        path = write_result(cfg, record)
        print(result_line(record, path), flush=True)
    comm.finalize()
    return 0


def provenance() -> dict[str, Any]:
    from hpcbench.comm.probe import mpi_library

    return {**software(), **mpi_library()}


def where_from(exc: BaseException, host: str) -> str:
    """The error line for the record, naming the rank it came from."""
    return str(exc) if isinstance(exc, PeerFailure) else f"rank 0 on {host}: {error_line(exc)}"


def keep_failure(run: Run, comm: MpiComm, parts: list[dict[str, Any]], offsets: np.ndarray, start: float,
                 logs: RunLogs, exc: BaseException) -> None:
    """Rank 0, when the run cannot finish: write what it recorded until now (its own timeline, the
    evaluations it can score in a few seconds, the server's tables) with the run's status and error."""
    cfg = run.cfg
    try:
        logs.score(lambda params: run.trainer.evaluate(params, cfg.eval_samples), seconds=SCORE_ON_FAILURE_S)
        record = build_record(run, mode="mpi", world_size=comm.size, parts=parts, offsets=offsets, origin=start,
                              logs=logs, provenance=provenance(),
                              failure=(failure_status(exc), where_from(exc, comm.host), parts[0]["end"]))
        path = write_result(cfg, record)
    except Exception as write_error:  # the run's own error is the one to report
        print(f"hpcbench: could not keep a record of the failed run: {write_error}", file=sys.stderr, flush=True)
        return
    print(f"hpcbench: the run ended as {record.attrs['status']!r}; what rank 0 recorded until then is in {path}",
          file=sys.stderr, flush=True)
