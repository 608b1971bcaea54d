"""Assemble a run's result record on rank 0 (shared by the MPI driver and the simulator)."""
from __future__ import annotations

import dataclasses
import json
import sys
from datetime import datetime, timezone
from typing import Any

import numpy as np

import hpcbench
from hpcbench.config import RunConfig
from hpcbench.results.paths import run_id
from hpcbench.results.schema import RunRecord
from hpcbench.runtime.assemble import Run, assemble
from hpcbench.runtime.plan import Plan
from hpcbench.runtime.logs import RunLogs
from hpcbench.telemetry.summary import dropped_gradients, summarize
from hpcbench.telemetry.timeline import COLUMNS, OPS, PHASES, concat


def default_out(cfg: RunConfig, workers: int, mode: str = "mpi") -> str:
    """A readable name, unique even for runs started in the same second on different nodes."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"results/{cfg.algo}-{cfg.dataset}-{cfg.model}-{mode}-w{workers}-s{cfg.seed}-{stamp}-{run_id()}.h5"


class ResultFile:
    """A run's result file on rank 0: first written when training starts (status "incomplete"), then
    rewritten whole at each flush and at the end. Every write goes to a temporary name renamed over
    the file, so a kill at any instant leaves the last complete write, readable."""

    def __init__(self, cfg: RunConfig, workers: int, mode: str) -> None:
        self.wanted = cfg.out or default_out(cfg, workers, mode)
        self.overwrite = cfg.overwrite
        self.path = ""

    def write(self, rec: RunRecord) -> str:
        from hpcbench.results.store import rewrite_run, write_run  # here: workers never load h5py

        if self.path:
            rewrite_run(self.path, rec)
            return self.path
        self.path = str(write_run(self.wanted, rec, self.overwrite))
        if self.path != self.wanted:
            print(f"hpcbench: {self.wanted} appeared while this run was set up; the result goes to {self.path}",
                  file=sys.stderr, flush=True)
        return self.path


def expected_bytes(run: Run) -> int:
    """A rough size of the run's result file: the timeline rows of every step on every rank, the
    server's rows, the evaluations and the final model (used to refuse a disk that is too full)."""
    ctx = run.algo.ctx
    steps = ctx.steps * ctx.workers
    row = 38  # bytes per timeline row: rank, step, phase, op, two times, bytes
    server = steps * 8 * len(run.layout.tables)
    evals = ctx.budget // ctx.eval_every + 1
    return steps * 6 * row + steps * 2 * row + server + evals * 48 + 4 * ctx.size + 256 * 1024


def resolved_config(run: Run, parameters: int) -> dict[str, Any]:
    """The configuration as given, plus every value resolved from it for this run (what readers use)."""
    ctx = run.algo.ctx
    out = run.cfg.to_dict()
    out["options"] = {run.algo.name: {k: getattr(ctx.options, k) for k in vars(ctx.options)}}
    sched = ctx.schedule
    out.update(steps_per_worker=ctx.steps, budget_samples=ctx.budget, eval_every=ctx.eval_every,
               parameters=parameters, train_size=ctx.train_size, val_size=len(run.workload.data.y_val),
               schedule={"lr": sched.lr, "warmup_from": sched.warmup_from, "warmup_epochs": sched.warmup_epochs,
                         "scaling": sched.scaling, "decay_epochs": list(sched.decay_epochs),
                         "decay_factor": sched.decay_factor, "text": sched.describe()},
               straggler_ranks=list(run.stragglers), straggler_factor=run.cfg.stragglers.factor)
    if run.cfg.model == "payload":
        out["payload"] = dataclasses.asdict(run.plan.payload)
    if run.cfg.dataset == "teacher":
        out["teacher"] = dataclasses.asdict(run.plan.teacher)
    return out


def dry_run_text(plan: Plan, workers: int) -> str:
    """What ``run --dry-run`` prints: the configuration resolved for ``workers`` workers, as the result
    file would record it (steps, budget, schedule, straggler ranks, the algorithm's options)."""
    run = assemble(plan, workers)
    config = resolved_config(run, run.workload.size)
    return (f"{plan.algo.name} with {workers} workers (world size {workers + 1}): "
            f"{config['budget_samples']} samples, {config['steps_per_worker']} steps per worker, "
            f"{config['schedule']['text']}\n{json.dumps(config, indent=1)}")


def build_record(run: Run, mode: str, world_size: int, parts: list[dict[str, Any]], offsets: np.ndarray,
                 origin: float, logs: RunLogs, provenance: dict[str, Any], simulation: dict[str, Any] | None = None,
                 model_parameters: int = 0, failure: tuple[str, str, float] | None = None) -> RunRecord:
    """``parts``: one dict per rank with its timeline columns and start/end on its own clock.

    ``model_parameters``: the model's size when the algorithms ran on a stand-in (simulation
    without numerics); by default the size of the parameters the algorithms saw. ``failure``: (status,
    error line, when on rank 0's clock) for the record of a run that did not finish.
    """
    cfg, algo, ctx = run.cfg, run.algo, run.algo.ctx
    parts = sorted(parts, key=lambda p: p["rank"])
    shifted = []
    for p in parts:
        shift = -float(offsets[p["rank"]]) - origin
        cols = dict(p["timeline"])
        cols["t_start"] = cols["t_start"] + shift
        cols["t_end"] = cols["t_end"] + shift
        shifted.append(cols)
    timeline = concat(shifted) if shifted else {c: np.zeros(0) for c in COLUMNS}
    # Training time: until the last worker is done (rank 0's final snapshot comes after it).
    if failure is None:
        wall = max(p["end"] - float(offsets[p["rank"]]) for p in parts if p["rank"] > 0) - origin
    else:
        wall = failure[2] - origin
    evals = logs.eval_columns(-origin)
    tables = logs.all_tables(-origin)
    summary = summarize(timeline, evals, tables.get("updates", {}), ctx.workers, wall, cfg.target_accuracy)
    summary["server_state_bytes"] = algo.state_bytes()
    summary["warmup_s"] = max(float(p.get("warmup_s", 0.0)) for p in parts)
    own = parts[0]  # rank 0's processor time over its part of the run (MPI runs; NaN simulated or failed)
    summary["rank0_cpu_share"] = (own["cpu_s"] / (own["end"] - own["start"])
                                  if "cpu_s" in own and own["end"] > own["start"] else float("nan"))
    updates = tables.get("updates")
    if updates is not None:
        late = len(tables["late"]["t"])
        summary["late_gradients"] = late
        # A failed run's record holds rank 0's timeline only: the workers' computed gradients are unknown.
        summary["too_stale"] = (dropped_gradients(timeline, ctx.workers, len(updates["t"]), late)
                                if failure is None else float("nan"))
        summary["echoed_updates"] = int((updates["echo_bytes"] > 0).sum())
        summary["echo_bytes"] = int(updates["echo_bytes"].sum())
    else:
        summary["too_stale"] = 0  # decentralized workers apply every gradient they compute themselves
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
        "status": "ok" if failure is None else failure[0],
        "error": "" if failure is None else failure[1],
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": resolved_config(run, model_parameters or ctx.size),
    }
    per_rank = {"hostnames": [p["host"] for p in parts], "devices": [p["device"] for p in parts],
                "threads": [str(p["threads"]) for p in parts], "local_ranks": [str(p["local_rank"]) for p in parts]}
    return RunRecord(attrs=attrs, provenance=provenance, per_rank=per_rank, timeline=timeline, phases=PHASES, ops=OPS,
                     clock_offsets=np.asarray(offsets, dtype=np.float64), evals=evals, tables=tables,
                     summary=summary, final_params=np.asarray(final, dtype=np.float32),
                     simulation=simulation or {})


def result_line(rec: RunRecord, path: str) -> str:
    s = rec.summary
    virtual = " of virtual time" if rec.mode == "sim" else ""
    trained = s["final_accuracy"] == s["final_accuracy"]  # NaN: no model (payload, or numerics off)
    line = (f"{rec.algorithm} ({rec.mode}, {rec.workers} workers): {s['samples']} samples in {s['wall_s']:.1f} s"
            f"{virtual} = {s['samples_per_s']:.0f} samples/s, "
            + (f"final accuracy {s['final_accuracy']:.3f}" if trained else "timing only (no model trained)"))
    if s["final_val_accuracy"] == s["final_val_accuracy"]:  # a validation split was held out
        line += f" (validation {s['final_val_accuracy']:.3f})"
    if "late_gradients" in s:  # a parameter server: say that every gradient was applied
        line += f", {s['too_stale']} gradients dropped"
        if s["echoed_updates"]:
            line += f" ({s['echoed_updates']} applied with Δ echoed by their worker)"
    schedule = f" [{rec.attrs['config']['schedule']['text']}]" if trained else ""
    cap = rec.attrs["config"].get("max_steps", 0)
    capped = f" [capped at {cap} steps per worker by max_steps: a smoke test, not a measurement]" if cap else ""
    return f"{line}{schedule}{capped} -> {path}"
