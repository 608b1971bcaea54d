"""A run's result record, assembled on rank 0 from every rank's part (the MPI session's and the simulator's)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

import hpcbench
from hpcbench.options import TABLES
from hpcbench.results.schema import DETECTED_BY, FAILURES, STALLS, UPDATES, RunRecord, family_of
from hpcbench.runtime.assemble import Run
from hpcbench.runtime.logs import RunLogs
from hpcbench.telemetry.summary import failure_summary, family_summary, recovery_times, stall_summary, summarize
from hpcbench.telemetry.timeline import COLUMNS, OPS, PHASES, concat


@dataclass(frozen=True)
class RankResult:
    """One rank's part of the record: where it ran, and what it measured on its own clock."""

    rank: int
    host: str
    device: str
    threads: int
    local_rank: int
    start: float = 0.0  # the timed window, in seconds on the rank's own clock
    end: float = 0.0
    timeline: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # its Timeline's columns
    warmup_s: float = 0.0  # untimed gradients before the window
    # Processor seconds from ``start`` to ``cpu_end``, the end of its last training operation (MPI
    # runs; NaN elsewhere): reading and averaging evaluation snapshots afterwards is measurement.
    cpu_s: float = math.nan
    cpu_end: float = math.nan
    unfired: str = ""  # the fault asked of this rank during training that had not come when training ended

    def timed(self, start: float, end: float, timeline: Mapping[str, np.ndarray], warmup_s: float = 0.0,
              cpu_s: float = math.nan, cpu_end: float = math.nan, unfired: str = "") -> RankResult:
        """This placement with what the rank measured."""
        return dataclasses.replace(self, start=start, end=end, timeline=timeline, warmup_s=warmup_s, cpu_s=cpu_s,
                                   cpu_end=cpu_end, unfired=unfired)


def resolved_config(run: Run, parameters: int) -> dict[str, Any]:
    """The configuration as given, plus every value resolved from it for this run (what readers use)."""
    ctx = run.algo.ctx
    out = run.cfg.to_dict()
    out["options"] = {run.algo.name: {k: getattr(ctx.options, k) for k in vars(ctx.options)}}
    out["resolved_options"] = run.algo.resolved_options()  # placeholders given as defaults, as this run set them
    sched = ctx.schedule
    out.update(steps_per_worker=ctx.steps, budget_samples=ctx.budget, eval_every=ctx.eval_every,
               parameters=parameters, train_size=ctx.train_size, val_size=len(run.workload.data.y_val),
               schedule={"lr": sched.lr, "warmup_from": sched.warmup_from, "warmup_epochs": sched.warmup_epochs,
                         "scaling": sched.scaling, "decay_epochs": list(sched.decay_epochs),
                         "decay_factor": sched.decay_factor, "text": sched.describe()},
               straggler_ranks=list(run.stragglers), straggler_factor=run.cfg.stragglers.factor)
    for name, found in TABLES.items():  # the model's and the dataset's tables (payload, teacher)
        if found.applies(run.cfg):
            out[name] = dataclasses.asdict(run.plan.tables[name])
    return out


def failure_columns(table: Mapping[str, np.ndarray], timeline: Mapping[str, np.ndarray], workers: int,
                    detected: Mapping[int, tuple[float, str]], deaths: Mapping[int, float],
                    applied: np.ndarray | None, batch_size: int) -> dict[str, np.ndarray]:
    """The failures table as rank 0's program recorded it, with what the record knows besides: the
    steps each worker had completed as rank 0 counted them (``batch_size`` samples a step), when and
    how each failure was detected (``detected``: rank → (seconds since the run began, how); the time
    rank 0's program learned it where the transport does not say), when the worker died (``deaths``),
    and the recovery measured in the timelines (``applied``: when a parameter server applied each
    gradient; None for the others)."""
    ranks = np.asarray(table["worker"], dtype=np.int64)
    found = [detected.get(int(r), (float(t), "notification")) for r, t in zip(ranks, table["t"])]
    t_detected = np.array([t for t, _ in found], dtype=np.float64)
    t_death = np.array([deaths.get(int(r), np.nan) for r in ranks], dtype=np.float64)
    survivors = np.setdiff1d(np.arange(1, workers + 1), ranks)
    since = np.where(np.isfinite(t_death), t_death, t_detected)
    steps = np.asarray(table["samples"], dtype=np.int64) // max(1, batch_size)
    return {**table, "steps": steps, "t_detected": t_detected, "t_death": t_death,
            "detected_by": np.array([DETECTED_BY.index(how) for _, how in found], dtype=np.int64),
            "recovery_s": recovery_times(timeline, survivors, since, applied)}


EVERY_WORKER_LOST = "every worker was lost"
FAILED = "failed"


def every_worker_lost(tables: Mapping[str, Mapping[str, np.ndarray]], workers: int) -> bool:
    """Whether every worker failed while the run still needed it (a row each in the failures table)."""
    return FAILURES in tables and len(tables[FAILURES]["worker"]) >= workers > 0


def lost_every_worker(failures: Mapping[str, np.ndarray], workers: int, budget: int) -> str:
    """The error line of a run that lost every worker, with the samples they had trained as rank 0
    counted them (applied, or reported: the failures table's ``samples``; the summary repeats the last
    evaluation, and where no worker's model is left to read that is the one before the failures)."""
    trained = int(np.asarray(failures["samples"]).sum())
    last = float(np.nanmax(failures["t_detected"]))
    return (f"{EVERY_WORKER_LOST} ({workers} of {workers}, the last known {last:.2f} s into the run): "
            f"{trained} of the budget's {budget} samples trained, no worker left to train the rest")


def build_record(run: Run, mode: str, world_size: int, parts: list[RankResult], offsets: np.ndarray,
                 origin: float, logs: RunLogs, provenance: dict[str, Any], simulation: dict[str, Any] | None = None,
                 model_parameters: int = 0, failure: tuple[str, str, float] | None = None,
                 stopped: tuple[str, str] | None = None, detected: Mapping[int, tuple[float, str]] | None = None,
                 deaths: Mapping[int, float] | None = None, unfired: Sequence[str] = (),
                 missing: Sequence[int] = (), stalls: Sequence[tuple[int, float, float]] = ()) -> RunRecord:
    """``parts``: every rank's part, its times on its own clock (``offsets``: each clock minus rank 0's).

    ``model_parameters``: the model's size when the algorithms ran on a stand-in (simulation
    without numerics); by default the size of the parameters the algorithms saw. ``failure``: (status,
    error line, when on rank 0's clock) for the record of a run that did not finish. ``stopped``:
    (status, error line) of a run stopped after it trained: every row is there, the status says how
    it ended. ``detected``: the workers that failed, when (rank 0's clock) and how rank 0's MPI said
    so; ``deaths``: when they died, in seconds since the run began, where that is known. ``unfired``:
    the faults asked for that never came (the run ended first). ``missing``: the workers whose parts
    are empty because they were lost (those not lost during training were lost after it). ``stalls``:
    (worker, when it fell silent on its own clock, seconds) for each time one was silent past
    ``stall_s`` and was heard again.
    """
    cfg, algo, ctx = run.cfg, run.algo, run.algo.ctx
    parts = sorted(parts, key=lambda p: p.rank)
    shifted = []
    for p in parts:
        shift = -float(offsets[p.rank]) - origin
        cols = dict(p.timeline)
        cols["t_start"] = cols["t_start"] + shift
        cols["t_end"] = cols["t_end"] + shift
        shifted.append(cols)
    timeline = concat(shifted) if shifted else {c: np.zeros(0) for c in COLUMNS}
    evals = logs.eval_columns(-origin)
    tables = logs.all_tables(-origin)
    if stalls:
        ranks = np.array([r for r, _, _ in stalls], dtype=np.int64)
        tables[STALLS] = {"t": np.array([t - float(offsets[r]) - origin for r, t, _ in stalls]), "worker": ranks,
                          "duration_s": np.array([d for _, _, d in stalls])}
    lost_all = failure is None and stopped is None and every_worker_lost(tables, ctx.workers)
    # Training time: until the last worker is done (rank 0's final snapshot comes after it); where every
    # worker failed, until rank 0's program had learned of the last failure and ended.
    if failure is None:
        ended = [p for p in parts if p.rank == 0] if lost_all else [p for p in parts if p.rank > 0]
        wall = max(p.end - float(offsets[p.rank]) for p in ended) - origin
    else:
        wall = failure[2] - origin
    if FAILURES in tables:
        found = {r: (t - origin, how) for r, (t, how) in (detected or {}).items()}
        applied = tables[UPDATES]["t"] if UPDATES in tables else None
        tables[FAILURES] = failure_columns(tables[FAILURES], timeline, ctx.workers, found, deaths or {}, applied,
                                           cfg.batch_size)
    summary = summarize(timeline, evals, tables.get(UPDATES, {}), ctx.workers, wall, cfg.target_accuracy)
    summary.update(failure_summary(tables.get(FAILURES, {})))
    summary.update(stall_summary(tables.get(STALLS, {})))
    after = sorted(set(missing) - set(int(w) for w in tables.get(FAILURES, {}).get("worker", ())))
    summary["lost_after_training"] = len(after)
    summary["faults_unfired"] = len(unfired)
    if lost_all:
        failure = (FAILED, lost_every_worker(tables[FAILURES], ctx.workers, ctx.budget), wall)
    summary["server_state_bytes"] = algo.state_bytes()
    summary["warmup_s"] = max(p.warmup_s for p in parts)
    own = parts[0]  # rank 0's processor time over its part of the training (MPI runs; NaN simulated or failed)
    summary["rank0_cpu_share"] = own.cpu_s / (own.cpu_end - own.start) if own.cpu_end > own.start else math.nan
    summary.update(family_summary(family_of(tables), timeline, tables, ctx.workers, complete=failure is None,
                                  unrecorded=after))
    final = logs.last_params if logs.last_params is not None else ctx.params
    attrs = {
        "hpcbench_version": hpcbench.__version__,
        "mode": mode,
        "algorithm": algo.name,
        "world_size": world_size,
        "workers": ctx.workers,
        "model": cfg.model,
        "dataset": cfg.dataset,
        "seed": cfg.seed,
        "status": (failure or stopped or ("ok",))[0],
        "error": (failure or stopped or ("", ""))[1],
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": resolved_config(run, model_parameters or ctx.size),
    }
    per_rank = {"hostnames": [p.host for p in parts], "devices": [p.device for p in parts],
                "threads": [str(p.threads) for p in parts], "local_ranks": [str(p.local_rank) for p in parts]}
    return RunRecord(attrs=attrs, provenance=provenance, per_rank=per_rank, timeline=timeline, phases=PHASES, ops=OPS,
                     clock_offsets=np.asarray(offsets, dtype=np.float64), evals=evals, tables=tables,
                     summary=summary, final_params=np.asarray(final, dtype=np.float32),
                     simulation=simulation or {})
