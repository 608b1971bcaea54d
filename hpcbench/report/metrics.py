"""Report arithmetic (pure): rows per run, groups over repeats, speedup and efficiency."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

import numpy as np

from hpcbench.config import RunConfig
from hpcbench.options import option_tables
from hpcbench.results.schema import (
    DETECTED_BY,
    FAILURES,
    FAMILY_SUMMARIES,
    LEARNING_RATE,
    STALLS,
    SUMMARY_KEYS,
    UPDATES,
    RunRecord,
)
from hpcbench.telemetry.summary import time_to_target

# Resolved configuration keys that never keep runs apart: the seed (repeats differ in it alone), where
# the file went, the run's deadline, and values derived from the others and the worker count.
NOT_SETTINGS = ("algo", "seed", "out", "overwrite", "timeout_s", "progress_s", "data_dir", "steps_per_worker",
                "budget_samples",
                "eval_every", "parameters", "train_size", "val_size", "schedule", "straggler_ranks", "straggler_factor",
                "resolved_options")
# How the gradients were computed follows from sim.batch_gradients (the setting) and the worker count.
NOT_SIM_SETTINGS = ("workers", "model_parameters", "algorithm_parameters", "gradients")

Settings = tuple[tuple[str, str], ...]  # (name, value as text), sorted by name
Curve = tuple[str, str, Settings]  # (algorithm, mode, the grouping settings' values): one line in a plot


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys: {"options": {"gossip": {"variant": "push"}}} → options.gossip.variant."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def settings(rec: RunRecord) -> Settings:
    """Every setting that makes a run what it is, but the algorithm, the worker count and the seed."""
    config = {k: v for k, v in rec.attrs["config"].items() if k not in NOT_SETTINGS}
    sim = {f"sim.{k}": v for k, v in rec.simulation.items() if k not in NOT_SIM_SETTINGS}
    network = {"network": rec.provenance["network"]} if rec.provenance.get("network") else {}
    return tuple(sorted((k, setting_text(v)) for k, v in {**flatten(config), **sim, **network}.items()))


@dataclass(frozen=True)
class Loss:
    """One worker a run lost and went on without, from the file's failures table."""

    worker: int  # its rank
    host: str
    steps: int  # the steps it had completed, as rank 0 had counted them
    t_death: float  # seconds since the run began (NaN: not known)
    t_detected: float
    detected_by: str
    recovery_s: float
    samples_lost: int


@dataclass(frozen=True)
class Stall:
    """One time a worker fell silent past stall_s and was heard again, from the file's stalls table."""

    worker: int
    host: str
    t: float  # seconds since the run began: its last heartbeat before the silence
    duration_s: float


def stalls(rec: RunRecord) -> tuple[Stall, ...]:
    t = rec.tables.get(STALLS, {})
    hosts = rec.per_rank["hostnames"]
    return tuple(Stall(int(w), str(hosts[int(w)]) if int(w) < len(hosts) else "", float(at), float(d))
                 for at, w, d in zip(t.get("t", ()), t.get("worker", ()), t.get("duration_s", ())))


def losses(rec: RunRecord) -> tuple[Loss, ...]:
    t = rec.tables.get(FAILURES)
    if not t:  # a file from before schema 6
        return ()
    hosts = rec.per_rank["hostnames"]
    return tuple(Loss(int(w), str(hosts[w]), int(t["steps"][i]), float(t["t_death"][i]), float(t["t_detected"][i]),
                      DETECTED_BY[int(t["detected_by"][i])], float(t["recovery_s"][i]), int(t["samples_lost"][i]))
                 for i, w in enumerate(np.asarray(t["worker"], dtype=int)))


@dataclass(frozen=True)
class RunRow:
    """The numbers the report shows for one run."""

    algorithm: str
    mode: str
    workers: int
    nodes: int  # distinct hosts the run's ranks were on
    samples_per_s: float
    median_step_s: float
    step_p90_s: float
    step_p99_s: float
    step_worker_min_s: float  # the fastest worker's median step
    step_worker_max_s: float  # the slowest worker's median step
    compute_fraction: float
    communicate_fraction: float
    wait_fraction: float
    final_accuracy: float
    time_to_target_s: float
    staleness_mean: float
    staleness_p50: float
    staleness_p99: float
    penalty_mean: float
    too_stale: float  # parameter servers: gradients neither applied nor logged as late (NaN: not a server)
    peak_lr: float  # the rate after warm-up, scaled as the run's recipe says
    evals: int  # global-model evaluations over the budget: time to target's resolution
    workers_lost: float  # workers that failed and the run went on without (NaN: a file from before schema 6)
    recovery_s: float  # mean seconds from a failure to the next update that did not need the failed worker
    path: str
    settings: Settings = ()
    result: str = "ok"  # how the run ended; a run that did not finish shows no numbers
    error: str = ""  # the error line a failed run's file holds
    lr_recipe: str = ""  # the learning-rate schedule as the run resolved it (warm-up, scaling, decay)
    reached: str = ""  # a run that did not finish: how far it got, from what its file holds
    lost: tuple[Loss, ...] = ()  # each worker it went on without
    stalled: tuple[Stall, ...] = ()  # each time a worker fell silent and came back
    wait_after_budget_s: float = 0.0  # what samples_per_s includes after the last sample was counted


def how_far(rec: RunRecord) -> str:
    """"N of B samples (P%) in T s" from a file's summary; "" when it does not say."""
    samples, wall = rec.summary.get("samples"), rec.summary.get("wall_s")
    config = rec.attrs["config"]
    budget = config.get("budget_samples")
    if not isinstance(samples, (int, float)) or not isinstance(wall, (int, float)) or not budget:
        return ""
    applied = len(rec.tables.get(UPDATES, {}).get("t", ()))  # a server applies one batch per update
    reports = rec.tables.get(LEARNING_RATE, {})  # decentralised workers' progress reports to rank 0
    reported = sum(int(reports["samples"][reports["worker"] == w].max()) for w in set(reports.get("worker", ())))
    samples = max(samples, applied * int(config.get("batch_size", 0)), reported)
    return f"{int(samples)} of {int(budget)} samples ({100 * samples / budget:.0f}%) in {wall:.1f} s"


def run_row(rec: RunRecord, target: float) -> RunRow:
    result = str(rec.attrs["status"])
    schedule = rec.attrs["config"].get("schedule", {})
    s = rec.summary if result == "ok" else {}

    def get(key: str) -> float:
        assert key in SUMMARY_KEYS or any(key in keys for _, keys in FAMILY_SUMMARIES.values()), key
        value = s.get(key, float("nan"))
        return float(value) if value is not None else float("nan")

    return RunRow(
        algorithm=rec.algorithm, mode=rec.mode, workers=rec.workers, nodes=len(set(rec.per_rank["hostnames"])),
        samples_per_s=get("samples_per_s"),
        median_step_s=get("median_step_s"), step_p90_s=get("step_p90_s"), step_p99_s=get("step_p99_s"),
        step_worker_min_s=get("step_worker_min_s"), step_worker_max_s=get("step_worker_max_s"),
        compute_fraction=get("compute_fraction"),
        communicate_fraction=get("communicate_fraction"), wait_fraction=get("wait_fraction"),
        final_accuracy=get("final_accuracy"),
        time_to_target_s=time_to_target(np.asarray(rec.evals["t"]), np.asarray(rec.evals["accuracy"]), target)
        if result == "ok" else float("nan"),
        staleness_mean=get("staleness_mean"), staleness_p50=get("staleness_p50"),
        staleness_p99=get("staleness_p99"), penalty_mean=get("penalty_mean"),
        too_stale=get("too_stale") if "late_gradients" in s else float("nan"),  # a server's summary
        peak_lr=float(schedule.get("lr", float("nan"))), evals=int(rec.attrs["config"].get("evals", 0)),
        workers_lost=get("workers_lost"), recovery_s=get("recovery_s"), path=rec.path,
        settings=settings(rec), result=result, error=str(rec.attrs.get("error", "")),
        lr_recipe=str(schedule.get("text", "")),
        reached="" if result == "ok" else how_far(rec), lost=losses(rec), stalled=stalls(rec),
        wait_after_budget_s=float(s.get("wait_after_budget_s", 0.0)),
    )


def setting(row: RunRow, key: str) -> str:
    return dict(row.settings).get(key, "-")


def missed_target(row: RunRow) -> bool:
    """A finished run that evaluated its model and never reached the target (one that evaluated nothing,
    a timing-only simulation, cannot say)."""
    return row.result == "ok" and math.isnan(row.time_to_target_s) and math.isfinite(row.final_accuracy)


def varying(rows: Sequence[RunRow]) -> list[str]:
    """The settings whose values differ between runs of the same algorithm and mode."""
    keys = sorted({k for r in rows for k, _ in r.settings})
    curves: dict[tuple[str, str], list[RunRow]] = {}
    for r in rows:
        curves.setdefault((r.algorithm, r.mode), []).append(r)
    return [k for k in keys if any(len({setting(r, k) for r in group}) > 1 for group in curves.values())]


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(median, half the min–max range) of the finite values; NaNs when there are none."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return float("nan"), float("nan")
    return median(finite), (max(finite) - min(finite)) / 2


@dataclass(frozen=True)
class ScalePoint:
    algorithm: str
    mode: str
    group: Settings  # the grouping settings and their values, in the order they were given
    workers: int
    nodes: int
    repeats: int
    samples_per_s: float
    samples_per_s_spread: float
    speedup: float
    efficiency: float
    time_to_target_s: float
    ttt_speedup: float  # time to target of the curve's fewest workers over this point's
    ttt_efficiency: float
    final_accuracy: float
    staleness_mean: float
    workers_lost: float = float("nan")  # median over the repeats
    recovery_s: float = float("nan")
    failed: int = 0  # runs of this point that did not finish (not in its numbers)
    result: str = "ok"  # "ok" when a run finished, else how its runs ended (e.g. "timeout")
    time_to_target_spread: float = float("nan")  # half the min-max range over the repeats
    final_accuracy_spread: float = float("nan")
    reached_target: int = 0  # finished repeats that reached the target (time to target: their median)
    missed_target: int = 0  # finished repeats that evaluated their model and never reached it

    @property
    def curve(self) -> Curve:
        return self.algorithm, self.mode, self.group


def speedup_efficiency(base_workers: int, base_rate: float, workers: int, rate: float) -> tuple[float, float]:
    """Throughput speedup against the smallest worker count, and that speedup per added worker."""
    if base_rate <= 0 or math.isnan(base_rate):
        return float("nan"), float("nan")
    speedup = rate / base_rate
    return speedup, speedup / (workers / base_workers)


def scaling(rows: Iterable[RunRow], group_by: Sequence[str] = ()) -> list[ScalePoint]:
    """One point per (algorithm, mode, values of the ``group_by`` settings, workers), medians over
    the repeats that finished, with speedup and efficiency against each curve's smallest worker count
    that has a finished run; runs that did not finish are counted (``failed``), never averaged in."""
    groups: dict[tuple[str, str, Settings, int], list[RunRow]] = {}
    for r in rows:
        group = tuple((k, setting(r, k)) for k in group_by)
        groups.setdefault((r.algorithm, r.mode, group, r.workers), []).append(r)
    points = []
    for curve in sorted({key[:3] for key in groups}):
        sizes = sorted(key[3] for key in groups if key[:3] == curve)
        done = {w: [r for r in groups[(*curve, w)] if r.result == "ok"] for w in sizes}
        # The curve's base: its fewest workers with a finished run (a failed point has no numbers).
        base = next((w for w in sizes if done[w]), sizes[0])
        base_rate = spread([r.samples_per_s for r in done[base]])[0]
        base_ttt = spread([r.time_to_target_s for r in done[base]])[0]
        for w in sizes:
            g, ok = groups[(*curve, w)], done[w]
            rate, rate_spread = spread([r.samples_per_s for r in ok])
            speedup, efficiency = speedup_efficiency(base, base_rate, w, rate)
            ttt = spread([r.time_to_target_s for r in ok])[0]
            # Time to target: a shorter time is the speed-up (the rate of reaching the target).
            ttt_speedup, ttt_efficiency = speedup_efficiency(base, 1 / base_ttt if base_ttt > 0 else math.nan,
                                                             w, 1 / ttt if ttt > 0 else math.nan)
            result = "ok" if ok else "/".join(sorted({r.result for r in g}))
            accuracy = spread([r.final_accuracy for r in ok])
            points.append(ScalePoint(
                *curve, w, int(median(r.nodes for r in g)), len(ok), rate, rate_spread, speedup, efficiency,
                ttt, ttt_speedup, ttt_efficiency, accuracy[0],
                spread([r.staleness_mean for r in ok])[0], spread([r.workers_lost for r in ok])[0],
                spread([r.recovery_s for r in ok])[0], len(g) - len(ok), result,
                time_to_target_spread=spread([r.time_to_target_s for r in ok])[1], final_accuracy_spread=accuracy[1],
                reached_target=sum(math.isfinite(r.time_to_target_s) for r in ok),
                missed_target=sum(map(missed_target, ok))))
    return points


def curve_of(row: RunRow, keys: Sequence[str]) -> Curve:
    return row.algorithm, row.mode, tuple((k, setting(row, k)) for k in keys)


def short_setting(key: str, algorithm: str) -> str:
    """A setting's name as a label shows it: an algorithm's own options without their prefix."""
    for prefix in (f"options.{algorithm}.", "options."):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def clip(text: str, width: int = 40) -> str:
    """``text`` cut to ``width`` characters, the cut marked."""
    return text if len(text) <= width else text[:width - 1] + "…"


UNSET = ("null", "-")  # a setting without a value, or one a run's file does not hold
LEARNED = ("model", "dataset")  # named wherever they differ between groups (a default stays unnamed)


@functools.cache
def defaults() -> dict[str, str]:
    """Each setting's default, as ``settings`` names and writes it: a run's configuration, the option
    tables (``options.ALGO.KEY``, ``sim.KEY``, a model's or data set's ``TABLE.KEY``)."""
    out = {key: value for key, value in flatten(RunConfig().to_dict()).items() if not key.startswith("options")}
    for name, table in option_tables().items():
        prefix = f"options.{name}." if table.algorithm else f"{name}."
        out.update({prefix + f.name: getattr(table.options(), f.name) for f in dataclasses.fields(table.options)})
    return {key: setting_text(value) for key, value in out.items()}


def equal_texts(a: str, b: str) -> bool:
    """Whether two settings' texts are the same value (``5`` and ``5.0`` are)."""
    try:
        x, y = json.loads(a), json.loads(b)
    except ValueError:
        return a == b
    return x == y and isinstance(x, bool) == isinstance(y, bool)


def plain(key: str, value: str) -> bool:
    """Whether a group's name leaves this value out: unset, or the setting's default."""
    return value in UNSET or (key in defaults() and equal_texts(value, defaults()[key]))


def split(members: list[int], texts: Sequence[str]) -> list[list[int]]:
    """``members`` in classes of equal ``texts[member]``."""
    parts: dict[str, list[int]] = {}
    for m in members:
        parts.setdefault(texts[m], []).append(m)
    return list(parts.values())


def pairs(n: int) -> int:
    return n * (n - 1) // 2


def telling(groups: Sequence[Settings], algorithm: str) -> list[list[str]]:
    """For each group of one algorithm (and mode), the settings that tell it apart from the others as
    ``name=value``: the fewest that do, chosen one by one (the one that tells most pairs apart first, then
    by name), each shown only where its value is neither unset nor the default. Groups still alike (one
    value unset, the other the default; values alike in their first 40 characters) show those values in
    full, and a number where even that leaves two alike."""
    if len(groups) < 2:
        return [[] for _ in groups]
    keys = [i for i in range(len(groups[0])) if len({g[i][1] for g in groups}) > 1]
    texts = {i: ["" if plain(*g[i]) else f"{short_setting(g[i][0], algorithm)}={clip(g[i][1])}" for g in groups]
             for i in keys}
    chosen: list[int] = []
    classes = [list(range(len(groups)))]

    def told(i: int) -> int:
        return sum(pairs(len(c)) - sum(pairs(len(part)) for part in split(c, texts[i])) for c in classes)

    while any(len(c) > 1 for c in classes):
        best = max((i for i in keys if i not in chosen), key=lambda i: (told(i), -i), default=None)
        if best is None or told(best) == 0:
            break
        chosen.append(best)
        classes = [part for c in classes for part in split(c, texts[best])]
    shown = [{i: texts[i][g] for i in chosen} for g in range(len(groups))]
    for i in (i for i in keys if groups[0][i][0] in LEARNED):  # what a group learned is never left unsaid
        for g, s in enumerate(shown):
            s[i] = texts[i][g]
    for c in (c for c in classes if len(c) > 1):
        for i in (i for i in keys if len({groups[g][i][1] for g in c}) > 1):
            for g in c:
                key, value = groups[g][i]
                shown[g][i] = f"{short_setting(key, algorithm)}={'unset' if value in UNSET else value}"
    names = [[text for _, text in sorted(s.items()) if text] for s in shown]
    seen: dict[tuple[str, ...], int] = {}
    for name in names:
        seen[tuple(name)] = seen.get(tuple(name), 0) + 1
        if seen[tuple(name)] > 1:
            name.append(f"({seen[tuple(name)]})")
    return names


def curve_labels(curves: Iterable[Curve]) -> dict[Curve, str]:
    """A short label per curve, the same in every table and plot: its algorithm, its mode where the
    runs mix modes, and the settings that tell it apart from the other curves of its algorithm and mode
    (``allreduce compress=powersgd``; plain ``asgd`` where nothing sets asgd's curves apart, or where its
    values are the defaults): never an unset value or a default, and never two curves with one label."""
    known = sorted(set(curves))
    mixed = len({mode for _, mode, _ in known}) > 1
    labels = {}
    for algorithm, mode in dict.fromkeys((a, m) for a, m, _ in known):
        groups = [g for a, m, g in known if (a, m) == (algorithm, mode)]
        name = f"{algorithm} ({mode})" if mixed else algorithm
        for group, shown in zip(groups, telling(groups, algorithm)):
            labels[(algorithm, mode, group)] = " ".join([name, *shown])
    return labels
