"""``hpcbench simulate``: one run of the same algorithm code on a virtual cluster, to a result file."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpcbench.algorithms.api import PARAMETER_SERVER
from hpcbench.algorithms.ops import Gradient
from hpcbench.algorithms.rules import diverging
from hpcbench.config import Faults
from hpcbench.errors import RuntimeFailure, TimeLimitPassed
from hpcbench.options.sim import SimConfig
from hpcbench.results.paths import check_room
from hpcbench.results.schema import RunRecord
from hpcbench.runtime.assemble import Run, assemble
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.output import ResultFile, expected_bytes, result_line, warn_unfired
from hpcbench.runtime.plan import Plan, prepare
from hpcbench.runtime.provenance import software
from hpcbench.runtime.record import RankResult, build_record
from hpcbench.runtime.sim.core import GradientFn, Pending
from hpcbench.runtime.sim.costs import jitter, noise, shares
from hpcbench.runtime.sim.engine import Engine, Parts
from hpcbench.runtime.threads import set_threads
from hpcbench.telemetry.gcpause import collector_paused
from hpcbench.workload.compute import ComputeModel

STAND_IN_FLOATS = 64  # the parameter vector algorithms see when numerics are off


def resolve(sim: SimConfig, parameters: int, serves: bool) -> SimConfig:
    """Fill in the per-parameter defaults of rank 0's and the workers' own math.

    ``serves``: rank 0 is a parameter server. A coordinator's handling of progress reports delays
    no one, so it costs nothing.
    """
    apply_s = 2e-9 * parameters if sim.apply_s < 0 else sim.apply_s
    return dataclasses.replace(
        sim,
        apply_s=apply_s if serves else 0.0,
        update_s=1e-9 * parameters if sim.update_s < 0 else sim.update_s,
    )


def numerics_gradient(run: Run) -> GradientFn:
    """Real gradients, one at a time: one model shared by all virtual workers, each with its own shard stream."""
    workload = run.workload
    streams = {r: run.stream(r) for r in range(1, run.workers + 1)}

    def gradient(rank: int, params: np.ndarray) -> Gradient:
        indices = streams[rank].next()
        grad, loss, correct = workload.gradient(params, *workload.batch(indices))
        return Gradient(grad, loss, len(indices), correct)

    return gradient


def batched_gradient(run: Run) -> GradientFn:
    """Real gradients, deferred until the first of them is needed and then computed together with
    every other one started by then (each worker's batches drawn in its own order, as above)."""
    from hpcbench.workload.batched import BatchedGradients

    batched = BatchedGradients(run.workload)  # type: ignore[arg-type]
    streams = {r: run.stream(r) for r in range(1, run.workers + 1)}
    waiting: list[tuple[Pending, np.ndarray, np.ndarray]] = []

    def flush() -> None:
        results = batched.gradients([params for _, params, _ in waiting], [indices for _, _, indices in waiting])
        for (pending, _, indices), (grad, loss, correct) in zip(waiting, results):
            pending.value = Gradient(grad, loss, len(indices), correct)
        waiting.clear()

    def gradient(rank: int, params: np.ndarray) -> Pending:
        pending = Pending(flush)
        waiting.append((pending, params, streams[rank].next()))
        return pending

    return gradient


# Fewer workers than this batch too few gradients at a time to repay a batched pass's overhead
# (teacher + mlp, 2 epochs: 1 worker 5.6 s batched against 2.7 s one at a time, 2 workers 3.3 / 2.6,
# 3 workers 2.3 / 2.6, 4 workers 2.1 / 2.6, 8 workers 1.6 / 2.6).
BATCH_FROM_WORKERS = 3


def gradients_for(run: Run, sim: SimConfig) -> tuple[GradientFn, str]:
    """How the simulation computes gradients, and a word for it (recorded with the run)."""
    if not sim.numerics:
        zero = Gradient(np.zeros(STAND_IN_FLOATS, dtype=np.float32), float("nan"), run.cfg.batch_size, 0)
        return (lambda rank, params: zero._replace(grad=zero.grad.copy())), "none"
    from hpcbench.workload.trainer import Trainer

    if sim.batch_gradients and run.workers >= BATCH_FROM_WORKERS and isinstance(run.workload, Trainer):
        from hpcbench.workload.batched import batchable, pays

        if batchable(run.workload) and pays(run.workload):
            return batched_gradient(run), "batched"
    return numerics_gradient(run), "one at a time"


def simulated_record(plan: Plan, sim: SimConfig | None = None, show_progress: bool = True,
                     out: str = "") -> tuple[RunRecord, str]:
    """Run the simulation of ``plan`` (``prepare``'s for ``simulate``, which checked it); → its result record
    and a note on the engine's work. ``sim``: a virtual cluster for a plan made without it (calibrate's,
    a test's), checked here as ``prepare`` checks simulate's. ``out``: where the record will be written
    (checked for room before the simulation starts)."""
    if plan.sim is None or (sim is not None and sim != plan.sim):
        plan = prepare(plan.cfg, "simulate", sim)
    cfg, sim, n = plan.cfg, plan.sim, plan.workers
    assert sim is not None and n is not None
    deaths = cfg.fault.kills()
    if sim.numerics:  # with numerics off nothing trains, and torch need not even be imported
        # One thread unless told: a simulation's batches are small, and torch's pool of threads fights for
        # the cores whenever anything else runs (a study, a login node), making it many times slower.
        set_threads(cfg, cfg.threads or 1)
    run = assemble(plan, n, stand_in=0 if sim.numerics else STAND_IN_FLOATS)
    workload, algo = run.workload, run.algo
    if out:
        check_room(out, expected_bytes(run))
    message_params = sim.message_params or workload.size
    sim = resolve(sim, message_params, plan.algo.family == PARAMETER_SERVER)
    gradient, gradients = gradients_for(run, sim)
    logs = run.logs()
    progress = run.progress_line("simulating ", "samples/s simulated (wall clock)") if show_progress else None
    slow = {r: run.slow_factor(r) for r in run.stragglers}
    engine = Engine(Parts(algo=algo, layout=run.layout, cfg=sim, compute=ComputeModel(sim, cfg.seed, slow),
                          gradient=gradient, logs=logs, real_size=message_params, progress=progress,
                          jitter=jitter(sim, cfg.seed), noise=noise(sim, cfg.seed), deaths=deaths,
                          shares=shares(sim, cfg.seed)))
    # The collector stays paused until the record is built: the run keeps millions of live numbers and
    # rows, which each full collection would walk again (0.8 s at 1,024 workers); the engine makes no cycles.
    with collector_paused(), diverging():
        wall0 = time.perf_counter()
        try:
            engine.run()
        except TimeLimitPassed as cut:
            if progress is not None:
                progress.close()
            failure = (cut.status, str(cut), engine.now)
            raise Unfinished(str(cut), engine_record(run, engine, sim, logs, time.perf_counter() - wall0, gradients,
                                                     failure)) from None
        if progress is not None:
            progress.close()
        wall = time.perf_counter() - wall0
        record = engine_record(run, engine, sim, logs, wall, gradients)
    if show_progress:  # (a simulation that talks to the console: simulate's)
        warn_unfired(unfired_kills(cfg.fault, engine.died), record)
    return record, f"{engine.events} events simulated in {wall:.1f} s of wall-clock time"


class Unfinished(TimeLimitPassed):
    """A simulation its deadline (``sim.deadline_s``) ended, with the record of what it simulated."""

    def __init__(self, message: str, record: RunRecord) -> None:
        super().__init__(message)
        self.record = record


def engine_record(run: Run, engine: Engine, sim: SimConfig, logs: RunLogs, wall: float, gradients: str,
                  failure: tuple[str, str, float] | None = None) -> RunRecord:
    """The result record of a simulation (its snapshots scored when it has numerics); ``failure``: (status,
    error line, virtual time) of one that did not finish."""
    cfg, workload, algo, n = run.cfg, run.workload, run.algo, sim.workers
    if sim.numerics:
        logs.score(workload.evaluate, cfg.eval_limits)
    else:
        logs.score(lambda p, test, val: (float("nan"),) * 4, cfg.eval_limits)
    parts = [RankResult(r, "virtual", "virtual", 1, r, 0.0, engine.end[r], engine.timelines[r].columns())
             for r in range(n + 1)]
    provenance: dict[str, Any] = {**software(), "mpi_library_version": "none (simulated)", "mpi_vendor": "none",
                                  "mpi_standard": "none", "mpi4py_version": "none", "network": "",
                                  "fault_tolerance": "simulated",
                                  "sim_wall_s": wall,
                                  "sim_events": engine.events}
    simulation = {**dataclasses.asdict(sim), "model_parameters": workload.size, "algorithm_parameters": algo.ctx.size,
                  "gradients": gradients}
    return build_record(run, mode="sim", world_size=n + 1, parts=parts, offsets=np.zeros(n + 1), origin=0.0,
                        logs=logs, provenance=provenance, simulation=simulation, model_parameters=workload.size,
                        detected={r: (t, "simulated") for r, t in engine.known.items()}, deaths=engine.died,
                        failure=failure, unfired=unfired_kills(run.cfg.fault, engine.died))


def unfired_kills(faults: Faults, died: Mapping[int, float]) -> list[str]:
    """The kills a simulation asked for that never came (the run was over before they were due)."""
    return [str(f) for f in faults.items if f.kind == "kill" and f.rank not in died]


def simulate(plan: Plan) -> int:
    """``hpcbench simulate`` of a plan ``prepare`` made for it: the record, written, and its line."""
    assert plan.workers is not None
    result = ResultFile(plan.cfg, plan.workers, "sim")
    try:
        record, work = simulated_record(plan, out=result.wanted)
    except Unfinished as cut:
        path = result.write(cut.record, last=True)
        raise TimeLimitPassed(f"{cut}; what it simulated is in {path} (status {cut.status!r})") from None
    path = result.write(record, last=True)
    print(result_line(record, path) + f" [{work}]", flush=True)
    if record.attrs["status"] != "ok":  # it lost every worker: what it simulated is kept, and it failed
        raise RuntimeFailure(f"{record.attrs['error']}; what it simulated is in {path} "
                             f"(status {record.attrs['status']!r})")
    return 0
