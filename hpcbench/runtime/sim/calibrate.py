"""``hpcbench calibrate REAL.h5``: fit the simulator's cost models to a real run's timeline.

compute: each worker step's data + compute time (injected stragglers excluded), gamma by moments;
heterogeneity: spread of the workers' mean step times; update: a worker's own math, local
publishes (each at the shortest: the simulator models their lock waits) and send postings per step;
apply: rank 0's own math, publishes and sends per message it received;
network: latency and bandwidth from blocking one-sided transfers (an Isend returns before its
transfer, so sends are not used), and for collectives the fastest worker's all-reduce in each step
(the others' include waiting for it); jitter: the mean extra delay per transfer that makes the
simulated workers' blocking communication per step (reads, accumulates, message waits) as long as
the real one, found by simulating the run without numerics (the network fit takes medians; this
puts back the slow tail the simulator does not model itself, such as ranks sharing cores).
The links' noise is not fitted (one run cannot tell it from the jitter); ``--noise CV`` sets it, as
``benchmarks/bare_exchange.py`` measures it, and the jitter is then fitted on top.
failures: from every run given that lost a worker under ULFM, detection and the survivors' agreement
and shrink (``failurefit.py``).
"""
from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcbench.algorithms import ALGORITHMS
from hpcbench.algorithms.api import PARAMETER_SERVER
from hpcbench.algorithms.buckets import FLOAT_BYTES
from hpcbench.comm.linkfit import LinkFit
from hpcbench.config import RUN_KEYS, RunConfig, Stragglers, make_config, toml_literal
from hpcbench.errors import UsageError
from hpcbench.options import TABLES
from hpcbench.options.sim import SimConfig
from hpcbench.results.schema import RunRecord
from hpcbench.runtime import plan
from hpcbench.runtime.sim.costs import allreduce_terms, link_bandwidth
from hpcbench.runtime.sim.failurefit import FailureFit, fit_failures
from hpcbench.runtime.sim.session import simulated_record

DEFAULT_ALPHA_S = SimConfig().alpha_s
MAX_SHAPE = 1e4
BLOCKING_OPS = ("Read", "Accumulate", "Recv")
JITTER_TOLERANCE = 0.03  # relative agreement of blocking time per step that ends the search


def per_step_sums(rows: dict[str, np.ndarray], mask: np.ndarray, durations: np.ndarray | None = None) -> np.ndarray:
    """Σ duration (the rows' own unless ``durations`` are given) of the masked rows for each (rank, step)."""
    keys = rows["rank"][mask].astype(np.int64) * (1 << 40) + rows["step"][mask]
    _, inverse = np.unique(keys, return_inverse=True)
    durations = rows["t_end"] - rows["t_start"] if durations is None else durations
    return np.bincount(inverse, weights=durations[mask])


def uncontended(durations: np.ndarray, locked: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """``durations`` with rank 0's and the workers' rows that may wait for others (``locked``) each at
    the group's shortest: an owner's publish waits for the readers still copying the slot it writes,
    a drain for the adders holding its window, which the simulator models itself; what it needs from
    the run is the copy, which the shortest is."""
    out = durations.copy()
    for group in (ranks == 0, ranks > 0):
        rows = locked & group
        if rows.any():
            out[rows] = durations[rows].min()
    return out


def fit_network(sizes: np.ndarray, durations: np.ndarray) -> tuple[float, float] | None:
    """(α, bandwidth) from (bytes, seconds) of blocking transfers, median per size, least squares.

    Medians: the slow tail of a read is the owner holding its window, which the simulator models
    itself (lock contention and the owner's link queue); counting it here would count it twice.
    """
    if sizes.size == 0:
        return None
    uniq = np.unique(sizes)
    med = np.array([np.median(durations[sizes == s]) for s in uniq])
    if uniq.size >= 2:
        slope, intercept = np.polyfit(uniq.astype(np.float64), med, 1)
        if slope > 0:
            return max(float(intercept), 0.0), float(1.0 / slope)
    biggest = int(np.argmax(uniq))
    alpha = min(DEFAULT_ALPHA_S, float(med[biggest]) / 2)
    return alpha, float(uniq[biggest]) / max(float(med[biggest]) - alpha, 1e-12)


def calibrate(rec: RunRecord, noise: float = 0.0, link: LinkFit | None = None) -> dict[str, Any]:
    """The simulator's settings that simulate ``rec``; ``link``: the network as a sweep of it measured
    (``hpcbench comm``), taken instead of fitting it from the run (its noise too, unless ``noise``)."""
    if rec.mode != "mpi":
        raise UsageError(f"{rec.path} is a {rec.mode} run; calibrate needs a real (mpi) run")
    n = rec.workers
    tl = rec.timeline
    phase = {p: i for i, p in enumerate(rec.phases)}
    op = {o: i for i, o in enumerate(rec.ops)}
    slow = stragglers_of(rec)
    computed = set(np.unique(tl["rank"][tl["phase"] == phase["compute"]]).tolist())
    # The workers that computed a step (a run that did not finish may have ranks that never did)
    normal = np.array([r for r in range(1, n + 1) if r not in slow and r in computed])
    if not normal.size:
        status = rec.attrs.get("status", "ok")
        raise UsageError(f"{rec.path} ({status}): its timeline holds no step of a "
                         f"worker{' outside the stragglers' if slow else ''} "
                         "(a run that failed keeps rank 0's rows only), so there is no compute time to fit; "
                         "calibrate a run that trained")
    workers = np.isin(tl["rank"], normal)

    step_time = per_step_sums(tl, workers & np.isin(tl["phase"], [phase["data"], phase["compute"]]))
    mean = float(step_time.mean())
    var = float(step_time.var())
    shape = min(mean * mean / var, MAX_SHAPE) if var > 0 else MAX_SHAPE
    compute = workers & (tl["phase"] == phase["compute"])
    seconds = tl["t_end"] - tl["t_start"]
    means = np.array([seconds[compute & (tl["rank"] == r)].mean() for r in normal])
    heterogeneity = float(means.std() / means.mean()) if len(means) > 1 else 0.0

    # What the simulator charges a sender nothing for: its own math, local publishes, posting sends.
    own = (tl["phase"] == phase["update"]) | np.isin(tl["op"], [op["Publish"], op["Drain"], op["Send"]])
    durations = uncontended(seconds, np.isin(tl["op"], [op["Publish"], op["Drain"]]), tl["rank"])
    # Means, not medians: throughput is set by the total, tails included (but not the lock waits).
    update_s = float(per_step_sums(tl, workers & own, durations).mean()) if (workers & own).any() else 0.0

    # Only a parameter server serves workers; a coordinator's own time delays no one.
    server = (tl["rank"] == 0) & (ALGORITHMS.get(rec.algorithm).family == PARAMETER_SERVER)
    received = int((server & (tl["op"] == op["Recv"]) & (tl["nbytes"] > 0)).sum())
    service = server & ((tl["phase"] == phase["apply"]) | np.isin(tl["op"], [op["Publish"], op["Send"]]))
    apply_s = float(durations[service].sum() / received) if received else 0.0

    blocking = workers & np.isin(tl["op"], [op["Read"], op["Accumulate"]]) & (tl["nbytes"] > 0)
    fit = fit_network(tl["nbytes"][blocking], seconds[blocking])
    alpha, bandwidth = fit if fit is not None else (DEFAULT_ALPHA_S, SimConfig().bandwidth)
    # Links whose rate the run recorded (the emulated cluster) are taken at that rate: transfers that
    # queued behind others (every read of a busy server) would fit a slower link, and the simulator
    # models the queueing itself.
    known = link_bandwidth(str(rec.provenance.get("network", "")))
    bandwidth = known or bandwidth
    if link is not None:
        alpha, bandwidth, known = link.alpha_s, link.bandwidth, link.bandwidth
        noise = noise or link.noise
    reduce = np.isin(tl["rank"], np.arange(1, n + 1)) & (tl["op"] == op["Allreduce"])
    algorithm = allreduce_of(rec)
    if reduce.any() and n > 1 and not overlapped(rec) and known is None:
        reduce_s, steps = seconds[reduce], tl["step"][reduce]
        fastest = float(np.median([reduce_s[steps == s].min() for s in np.unique(steps)]))
        nbytes = float(np.median(tl["nbytes"][reduce]))
        latencies, lengths = allreduce_terms(n, algorithm)
        if fit is None:
            alpha = min(DEFAULT_ALPHA_S, fastest / (2 * latencies))
        bandwidth = lengths * nbytes / max(fastest - latencies * alpha, 1e-12)
    fitted = SimConfig(workers=n, numerics=False, compute_shape=round(shape, 3), compute_mean_s=mean,
                       heterogeneity=heterogeneity, alpha_s=alpha, bandwidth=bandwidth, apply_s=apply_s,
                       update_s=update_s, progress=progress_of(rec), allreduce=algorithm, noise=noise)
    fitted.validate()
    fitted = dataclasses.replace(fitted, jitter_s=fit_jitter(rec, fitted, normal))
    out = dataclasses.asdict(fitted)
    del out["numerics"], out["pause_prob"], out["pause_s"]
    return out


def blocking_rows(rec: RunRecord, ranks: np.ndarray) -> tuple[np.ndarray, int]:
    """(mask of the reads, accumulates and message waits of the workers ``ranks``, their steps)."""
    tl = rec.timeline
    workers = np.isin(tl["rank"], ranks)
    blocking = workers & np.isin(tl["op"], [rec.ops.index(o) for o in BLOCKING_OPS])
    return blocking, int((workers & (tl["phase"] == rec.phases.index("compute"))).sum())


def blocking_per_step(rec: RunRecord, ranks: np.ndarray) -> float:
    """Mean seconds per step that the workers ``ranks`` spend in reads, accumulates and message waits."""
    blocking, steps = blocking_rows(rec, ranks)
    return float((rec.timeline["t_end"] - rec.timeline["t_start"])[blocking].sum() / max(steps, 1))


def stragglers_of(rec: RunRecord) -> tuple[int, ...]:
    """The worker ranks the run slowed, as it recorded them (files before they did: from the seed)."""
    cfg = rec.attrs["config"]
    if "straggler_ranks" in cfg:
        return tuple(cfg["straggler_ranks"])
    return plan.straggler_ranks(Stragglers.parse(cfg.get("stragglers", "")), rec.workers, int(cfg["seed"]))


def plan_of(rec: RunRecord) -> plan.Plan:
    """The real run's plan, with its steps per worker, to simulate the same run."""
    keys, tables = run_settings(rec)
    return plan.validate(make_config({**keys, "algo": rec.algorithm}, tables))


def fit_jitter(rec: RunRecord, sim: SimConfig, ranks: np.ndarray) -> float:
    """Secant search for the jitter at which simulated blocking time per step matches the real run's."""
    target = blocking_per_step(rec, ranks)
    run = plan_of(rec)

    def simulate(jitter: float) -> RunRecord:
        return simulated_record(run, dataclasses.replace(sim, jitter_s=jitter), show_progress=False)[0]

    first = simulate(0.0)
    b0 = blocking_per_step(first, ranks)
    if target <= b0 * (1 + JITTER_TOLERANCE):
        return 0.0
    blocking, steps = blocking_rows(first, ranks)
    # First guess: the whole shortfall spread over the blocking operations of a step.
    j0, j1 = 0.0, (target - b0) / max(blocking.sum() / max(steps, 1), 1.0)
    for _ in range(4):
        b1 = blocking_per_step(simulate(j1), ranks)
        if abs(b1 - target) <= JITTER_TOLERANCE * target or j1 == j0:
            break
        slope = (b1 - b0) / (j1 - j0)
        if slope <= 0:  # the waits did not follow the jitter: nothing better to aim for
            break
        j0, b0, j1 = j1, b1, max(j1 + (target - b1) / slope, 0.0)
    return j1


def progress_of(rec: RunRecord) -> str:
    """MPICH-family libraries progress one-sided operations only inside MPI calls, unless told otherwise."""
    vendor = str(rec.provenance.get("mpi_vendor", "")).lower()
    env = str(rec.provenance.get("environment", ""))
    mpich = any(v in vendor for v in ("mpich", "mvapich", "intel"))
    return "polling" if mpich and '"MPICH_ASYNC_PROGRESS": "1"' not in env else "async"


def allreduce_of(rec: RunRecord) -> str:
    """The all-reduce algorithm the run's MPI uses for large vectors: a ring in Open MPI, Rabenseifner's
    in the MPICH family."""
    return "ring" if "open mpi" in str(rec.provenance.get("mpi_vendor", "")).lower() else "rabenseifner"


def g(value: float) -> str:
    return f"{value:.6g}" if not (isinstance(value, float) and math.isnan(value)) else "nan"


# Settings of a real run that a simulation of it has no use for (where it ran, how it failed or flushed).
REAL_ONLY = ("algo", "steps", "epochs", "out", "overwrite", "fault", "timeout_s", "flush_s", "time_limit_s",
             "progress_s", "warmup_steps", "threads")
FLAGS = ("model", "dataset", "steps", "batch_size", "lr", "momentum", "seed")  # shown as flags in the command


def run_settings(rec: RunRecord) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The real run's settings that a simulation of it shares: run keys (steps as the run resolved
    them) and option tables (the algorithm's, the teacher task's, and payload's message size; its
    compute is the fitted --compute)."""
    cfg = rec.attrs["config"]
    keys: dict[str, Any] = {k: cfg[k] for k in RUN_KEYS if k not in REAL_ONLY and cfg.get(k) not in (None, "")}
    keys["steps"] = int(cfg["steps_per_worker"])
    tables = {table: dict(options) for table, options in cfg.get("options", {}).items()}
    for name, table in TABLES.items():  # the model's and the dataset's tables the run recorded
        if name in cfg:  # less what they share with the simulator (the fitted --compute)
            tables[name] = {k: v for k, v in cfg[name].items() if k not in table.shares}
    return keys, tables


def set_flag(key: str, value: Any) -> str:
    return "--set " + shlex.quote(f"{key}={toml_literal(value)}")


def failure_line(fit: FailureFit, files: int) -> str:
    """What the failure costs were fitted from, in one line."""
    parts = []
    if fit.detections:
        parts.append(f"detection {1e3 * fit.detect_s:.1f} ms (median of {len(fit.detections)})")
    if fit.regroups:
        parts.append(f"agreement and shrink {1e3 * fit.regroup_s:.2f} ms + {1e3 * fit.regroup_log_s:.2f} ms "
                     f"x log2(survivors) ({len(fit.regroups)} shrinks at "
                     f"{', '.join(str(p) for p in sorted({p for p, _ in fit.regroups}))} survivors)")
    return f"failure costs from {files} run(s): " + "; ".join(parts)


def simulate_command(rec: RunRecord, sim: dict[str, Any]) -> str:
    keys, tables = run_settings(rec)
    defaults = RunConfig().to_dict()  # as a result file records them
    parts = [
        "hpcbench simulate", f"--algo {rec.algorithm}", f"--workers {sim['workers']}",
        *(f"--{k.replace('_', '-')} {keys[k]}" for k in FLAGS),
        f"--compute gamma:shape={g(sim['compute_shape'])},mean={g(sim['compute_mean_s'])}",
        f"--network alpha={g(sim['alpha_s'])},bandwidth={g(sim['bandwidth'])},jitter={g(sim['jitter_s'])}"
        + (f",noise={g(sim['noise'])}" if sim["noise"] else ""),
        f"--heterogeneity {g(sim['heterogeneity'])}",
        f"--set sim.apply_s={g(sim['apply_s'])}", f"--set sim.update_s={g(sim['update_s'])}",
        f"--set sim.progress={sim['progress']}", f"--set sim.allreduce={sim['allreduce']}",
        *(f"--set sim.{k}={g(v)}" for k, v in sim.get("failures", {}).items()),
    ]
    parts += [set_flag(k, v) for k, v in keys.items() if k not in FLAGS and v != defaults[k]]
    parts += [set_flag(f"{table}.{k}", v) for table, options in tables.items() for k, v in options.items()]
    return " \\\n    ".join(parts)


def as_toml(rec: RunRecord, sim: dict[str, Any]) -> str:
    """A --config file that simulates the run: its settings, its option tables and the fitted [sim]."""
    keys, tables = run_settings(rec)
    fitted = {k: float(g(v)) if isinstance(v, float) else v for k, v in sim.items()
              if k != "failures"}  # as the command shows them
    lines = [f"{k} = {toml_literal(v)}" for k, v in keys.items()]
    for table, options in {**tables, "sim": fitted}.items():
        if options:
            lines += ["", f"[{table}]"] + [f"{k} = {toml_literal(v)}" for k, v in options.items()]
    return "\n".join(lines)


def overlapped(rec: RunRecord) -> bool:
    """Whether the run all-reduced several buckets during backward: its all-reduce rows then hold only
    what the backward pass did not hide, which says nothing exact about the network."""
    cfg = rec.attrs["config"]
    opts = cfg.get("options", {}).get("allreduce", {})
    return (rec.algorithm == "allreduce" and bool(opts.get("overlap", False))
            and FLOAT_BYTES * cfg["parameters"] > opts.get("bucket_mb", 25.0) * 2**20)


def describe(rec: RunRecord, noise: float = 0.0, link: LinkFit | None = None, more: Sequence[RunRecord] = ()) -> str:
    sim = calibrate(rec, noise, link)
    s = rec.summary
    head = (f"# calibrated from {rec.path}: {rec.algorithm}, {rec.workers} workers, "
            f"{g(s['samples_per_s'])} samples/s on {rec.per_rank['hostnames'][0]}")
    fit = fit_failures([rec, *more], SimConfig().regroup_log_s)
    if fit is None:
        if more:
            raise UsageError(f"none of the {1 + len(more)} runs lost a worker: there is no failure cost to fit "
                             "(runs under Open MPI's --with-ft ulfm with --set fault=kill:RANK@SECONDS)")
    else:
        fitted = {k: v for k, v in fit.settings().items() if not math.isnan(v)}
        sim.update(fitted)
        sim["failures"] = fitted
        head += "\n# " + failure_line(fit, 1 + len(more))
    if overlapped(rec):
        head += ("\n# its all-reduces overlapped the backward pass in buckets: the network was not fitted from "
                 "them (calibrate from a run with --set allreduce.overlap=false)")
    return "\n".join([head, "", simulate_command(rec, sim), "", "# or, in a --config file:", as_toml(rec, sim)])
