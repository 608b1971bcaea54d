"""Run summary arithmetic from the timeline, evaluations and server log (pure functions)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hpcbench.algorithms.ops import COLLECTIVES
from hpcbench.results.schema import DISTRIBUTED, FAILURES, LATE, UPDATES, added_columns, distribution_keys
from hpcbench.telemetry.timeline import OP_CODE, PHASE_CODE

WORKER_PHASES = ("data", "compute", "communicate", "wait", "update")


def time_to_target(t: np.ndarray, accuracy: np.ndarray, target: float) -> float:
    """First evaluation time at which accuracy reached ``target``; NaN if never."""
    hits = np.flatnonzero(accuracy >= target)
    return float(t[hits[0]]) if hits.size else float("nan")


def by_rank(tl: Mapping[str, np.ndarray], workers: np.ndarray) -> dict[str, np.ndarray]:
    """The workers' rows, sorted by rank then start time (one sort instead of a mask per rank)."""
    mask = np.isin(tl["rank"], workers)
    order = np.lexsort((tl["t_start"][mask], tl["rank"][mask]))
    return {k: v[mask][order] for k, v in tl.items()}


def phase_fractions(tl: Mapping[str, np.ndarray], workers: np.ndarray) -> dict[str, float]:
    """Share of the workers' busy time spent in each phase (busy = first to last timed operation)."""
    rows = by_rank(tl, workers)
    if not rows["rank"].size:
        return {f"{p}_fraction": float("nan") for p in WORKER_PHASES}
    starts = np.flatnonzero(np.r_[True, rows["rank"][1:] != rows["rank"][:-1]])
    first = np.minimum.reduceat(rows["t_start"], starts)
    last = np.maximum.reduceat(rows["t_end"], starts)
    busy = float((last - first).sum())
    spent = rows["t_end"] - rows["t_start"]
    return {f"{p}_fraction": float(spent[rows["phase"] == PHASE_CODE[p]].sum() / busy) if busy > 0 else float("nan")
            for p in WORKER_PHASES}


def step_times(tl: Mapping[str, np.ndarray], workers: np.ndarray) -> dict[str, float]:
    """Step time: between the starts of consecutive gradient computations on the same worker.

    ``median_step_s``, ``step_p90_s``, ``step_p99_s`` over every worker's steps; ``step_worker_min_s``
    and ``step_worker_max_s``: the fastest and the slowest worker's own median (the spread across workers).
    """
    rows = by_rank(tl, workers)
    compute = rows["phase"] == PHASE_CODE["compute"]
    ranks, starts = rows["rank"][compute], rows["t_start"][compute]
    same = ranks[1:] == ranks[:-1]
    gaps, owners = np.diff(starts)[same], ranks[1:][same]
    if not gaps.size:
        return dict.fromkeys(STEP_KEYS, float("nan"))
    p50, p90, p99 = np.percentile(gaps, [50, 90, 99])
    per_worker = [float(np.median(g)) for g in np.split(gaps, np.flatnonzero(np.diff(owners)) + 1)]  # owners ascend
    return {"median_step_s": float(p50), "step_p90_s": float(p90), "step_p99_s": float(p99),
            "step_worker_min_s": min(per_worker), "step_worker_max_s": max(per_worker)}


STEP_KEYS = ("median_step_s", "step_p90_s", "step_p99_s", "step_worker_min_s", "step_worker_max_s")


def dropped_gradients(tl: Mapping[str, np.ndarray], survivors: np.ndarray, applied: np.ndarray,
                      late: np.ndarray) -> int:
    """Gradients the ``survivors`` computed (their timelines) that the server neither applied nor
    answered as late (its log, by worker: ``applied`` and ``late``): two independent counts that must
    agree, so any silent drop shows here. (A failed worker's last gradient is recorded as lost.)"""
    computed = int((np.isin(tl["rank"], survivors) & (tl["phase"] == PHASE_CODE["compute"])).sum())
    return computed - int(np.isin(applied, survivors).sum()) - int(np.isin(late, survivors).sum())


def family_summary(family: str, tl: Mapping[str, np.ndarray], tables: Mapping[str, Mapping[str, np.ndarray]],
                   workers: int, complete: bool, unrecorded: Sequence[int] = ()) -> dict[str, float]:
    """What a family of algorithms adds to the summary (``results.schema.FAMILY_SUMMARIES``), and
    ``too_stale``, which every run has. ``complete``: the timeline holds every worker's rows (a failed
    run's holds rank 0's only, so the gradients the workers computed are unknown); ``unrecorded``: the
    workers lost after training, whose rows are not in it (their gradients are counted by no one)."""
    if family != "server":
        return {"too_stale": 0}  # decentralised workers apply every gradient they compute themselves
    updates, late = tables[UPDATES], tables[LATE]["worker"]
    gone = np.concatenate([tables.get(FAILURES, {}).get("worker", np.zeros(0)), np.asarray(unrecorded)])
    survivors = np.setdiff1d(np.arange(1, workers + 1), gone)
    return {"late_gradients": len(late),
            "too_stale": dropped_gradients(tl, survivors, updates["worker"], late) if complete else float("nan"),
            "echoed_updates": int((updates["echo_bytes"] > 0).sum()),
            "echo_bytes": int(updates["echo_bytes"].sum())}


def percentiles(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, median, 99th percentile) of the finite values; NaN without any."""
    v = values[np.isfinite(values)] if values.size else values
    if not v.size:
        return (float("nan"),) * 3
    return float(v.mean()), float(np.percentile(v, 50)), float(np.percentile(v, 99))


# Operations whose bytes cross between ranks, each counted once: a message where it is received, a
# one-sided read or add where it is started, a collective as each worker's part. (A send's bytes
# are its receiver's; a publish writes the rank's own window; an evaluation is local.)
WIRE_OPS = ("Read", "Recv", "Accumulate", "FetchAdd") + tuple(op.__name__ for op in COLLECTIVES)


def wire_bytes(tl: Mapping[str, np.ndarray]) -> int:
    """Bytes training moved between ranks (``WIRE_OPS``), in the type they travelled in. Rank 0's own
    reads are left out: it reads the workers' models only to evaluate them (a measurement)."""
    moved = np.isin(tl["op"], [OP_CODE[op] for op in WIRE_OPS])
    measuring = (tl["rank"] == 0) & (tl["op"] == OP_CODE["Read"])
    return int(tl["nbytes"][moved & ~measuring].sum())


def summarize(tl: Mapping[str, np.ndarray], evals: Mapping[str, np.ndarray], updates: Mapping[str, np.ndarray],
              workers: int, wall_s: float, target: float) -> dict[str, float]:
    worker_ranks = np.arange(1, workers + 1)
    samples = int(evals["samples"][-1]) if len(evals["samples"]) else 0
    out: dict[str, float] = {
        "wall_s": wall_s,
        "samples": samples,
        "samples_per_s": samples / wall_s if wall_s > 0 else float("nan"),
        "updates": int(evals["updates"][-1]) if len(evals["updates"]) else 0,
        "final_loss": float(evals["loss"][-1]) if len(evals["loss"]) else float("nan"),
        "final_accuracy": float(evals["accuracy"][-1]) if len(evals["accuracy"]) else float("nan"),
        "best_accuracy": float(np.max(evals["accuracy"])) if len(evals["accuracy"]) else float("nan"),
        "final_val_loss": float(evals["val_loss"][-1]) if len(evals["val_loss"]) else float("nan"),
        "final_val_accuracy": float(evals["val_accuracy"][-1]) if len(evals["val_accuracy"]) else float("nan"),
        "target_accuracy": target,
        "time_to_target_s": time_to_target(evals["t"], evals["accuracy"], target),
        "eval_s": float(((tl["t_end"] - tl["t_start"])[(tl["rank"] == 0) & (tl["phase"] == PHASE_CODE["eval"])]).sum()),
        "final_consensus": float(evals["consensus"][-1]) if len(evals["consensus"]) else float("nan"),
        "bytes_per_sample": wire_bytes(tl) / samples if samples else float("nan"),
        "wait_after_budget_s": wait_after_budget(evals["t"], evals["samples"], wall_s),
    }
    out.update(step_times(tl, worker_ranks))
    out.update(phase_fractions(tl, worker_ranks))
    for column in DISTRIBUTED + added_columns(UPDATES, updates):
        values = np.asarray(updates.get(column, np.zeros(0)), dtype=np.float64)
        out.update(zip(distribution_keys(column), percentiles(values)))
    return out


def wait_after_budget(t: np.ndarray, samples: np.ndarray, wall_s: float) -> float:
    """The part of ``wall_s`` after the run's last sample was counted (its first evaluation at the final
    count): waiting on a worker that had nothing left to train (one that stalled); ~0 otherwise."""
    if not len(t):
        return float("nan")
    done = float(t[int(np.argmax(samples >= samples[-1]))])
    return max(0.0, wall_s - done)


def stall_summary(stalls: Mapping[str, np.ndarray]) -> dict[str, float]:
    """How many times a worker fell silent past the stall threshold and came back, and the longest."""
    seconds = np.asarray(stalls.get("duration_s", np.zeros(0)), dtype=np.float64)
    return {"stalls": int(seconds.size), "longest_stall_s": float(seconds.max()) if seconds.size else 0.0}


def recovery_times(tl: Mapping[str, np.ndarray], survivors: np.ndarray, since: np.ndarray,
                   applied: np.ndarray | None = None) -> np.ndarray:
    """For each failure, the seconds from ``since`` (its death, or its detection where the time of death
    is not known) until the first update that did not need the failed worker was done: the next
    gradient a parameter server applied (``applied``: when each was), else the survivors' first
    collective after they regrouped (their "recover" rows), else the first step a survivor finished.
    NaN where nothing came after."""
    out = np.full(len(since), np.nan)
    mine = np.isin(tl["rank"], survivors)
    recover = mine & (tl["phase"] == PHASE_CODE["recover"])
    collective = mine & np.isin(tl["op"], [OP_CODE["Allreduce"], OP_CODE["Barrier"]]) & ~recover
    shrunk = recover & (tl["op"] == OP_CODE["Shrink"])  # where a failed try has two rows, the second's end
    recover = shrunk if shrunk.any() else recover
    computes = mine & (tl["phase"] == PHASE_CODE["compute"])
    for i, t0 in enumerate(since):
        if applied is not None:
            after = applied[applied > t0]
        elif (regrouped := tl["t_end"][recover & (tl["t_end"] > t0)]).size:
            after = tl["t_end"][collective & (tl["t_start"] >= regrouped.min())]
            after = after if after.size else regrouped  # a team of one sums nothing: regrouped, it goes on
        else:
            after = tl["t_end"][computes & (tl["t_end"] > t0)]
        if after.size:
            out[i] = after.min() - t0
    return out


def failure_summary(failures: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Workers lost, the samples lost with them, and the mean recovery (NaN without a failure)."""
    lost = np.asarray(failures.get("samples_lost", np.zeros(0)))
    recovery = np.asarray(failures.get("recovery_s", np.zeros(0)), dtype=np.float64)
    finite = recovery[np.isfinite(recovery)]
    return {"workers_lost": int(len(lost)), "samples_lost": int(lost.sum()),
            "recovery_s": float(finite.mean()) if finite.size else float("nan")}
