"""``hpcbench reproduce STUDY``: tune the recipe, run every arm's cells, read the files back, judge, report.

Result files go to OUT_DIR/runs/ (a run with an ``ok`` file is kept, so an interrupted study
resumes); the report to OUT_DIR/report.md with one plot per arm (OUT_DIR/STUDY-ARM.png) and the
verdicts as OUT_DIR/verdict.json.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.reproduce import made_with, report
from hpcbench.reproduce import network as emulated_network
from hpcbench.reproduce.protocol import (
    SEQUENTIAL,
    ArmResult,
    CellKey,
    Recipe,
    candidates,
    ceiling,
    choose_recipe,
    recipe_grid,
)
from hpcbench.reproduce.studies import PRESETS, Study, mpi_args, study
from hpcbench.reproduce.verdict_file import bookkeeping, cell_name, command_line, publish
from hpcbench.reproduce.verdicts import Cell
from hpcbench.results.paths import make_dirs
from hpcbench.results.store import commit_of, read_run, result_status
from hpcbench.telemetry.progress_line import clock_text
from hpcbench.terminal import for_terminal, wrapped
from hpcbench.tuning.execute import MODES, Job, run_jobs
from hpcbench.tuning.grid import MAX_EXTENSIONS, Setting, Trial, at_edge, choose, past_edges, ties
from hpcbench.tuning.tune import validation_scores

HERE = "this machine"  # the network of real runs
MPI_SETUP = "Real runs under mpiexec on this machine: its own compute and network, the model's own message size."
# Seconds of this machine (one core) per run started, beside its task's compute (``Task.run_seconds``):
# the basis of the stated running time.
SECONDS_PER_RUN = 3.0  # a real run: processes of its own
SECONDS_PER_INLINE_RUN = 0.3  # a simulated run, in a process that simulates one after another
CALIBRATION_STEPS = {"full": 200, "quick": 100, "teacher": 200, "teacher-quick": 100, "toy": 20}  # every preset


@dataclass(frozen=True)
class Planned:
    """One run of the study: which cell of which arm it may decide, and its job."""

    cell: CellKey  # (algorithm, workers, variant)
    setting: Setting
    seed: int
    job: Job


def stem(algo: str, workers: int, variant: str, setting: Setting, seed: int) -> str:
    net = "-" + "".join(c for c in variant.lower() if c.isalnum()) if variant else ""
    return f"{algo}-n{workers}-{setting.stem()}-s{seed}{net}"


def planned(s: Study, preset: str, runs: Path, cell: CellKey, setting: Setting, seed: int,
            mode: str, extra: Sequence[str]) -> Planned:
    name, n, variant = cell
    contender = s.contender(name)
    flags = dict(s.variants()).get(variant, ()) if mode == "sim" else ()
    args = [*s.run_args(preset), *flags, *extra, *contender.flags, "--set", f"seed={seed}", *setting.args()]
    if mode == "sim" and s.message_params and n > 1:
        args += ["--set", f"sim.message_params={s.message_params}"]
    if mode == "sim" and n > 1 and "allreduce" in s.algos:  # the papers' all-reduce: a ring (NCCL's)
        args += ["--set", "sim.allreduce=ring"]
    # One worker learns the same whatever the network and compute: its runs are the same in every study.
    args = args if mode == "sim" and n > 1 else mpi_args(args)
    label = f"{name}, {n} workers, {setting.label()}, seed {seed}" + (f", {variant}" if variant else "")
    return Planned(cell, setting, seed, Job.of(contender.algo, n, tuple(args),
                                               runs / f"{stem(name, n, variant, setting, seed)}.h5", label))


def expected_seconds(s: Study, preset: str, arm_runs: int, recipe_runs: int, jobs: int, mode: str = "sim") -> float:
    """The running time stated up front (the count after each run then says how much is left)."""
    size = s.sizes[preset]
    start = SECONDS_PER_INLINE_RUN if mode == "sim" else SECONDS_PER_RUN
    return (arm_runs * (start + size.task.run_seconds(size.epochs))
            + recipe_runs * (start + size.task.run_seconds(size.epochs, sequential=True))) / max(1, jobs)


def fits(workers: int, mode: str, max_ranks: int) -> bool:
    return mode == "sim" or workers + 1 <= max_ranks


def calibrate_compute(out_dir: Path, s: Study, preset: str, timeout: float) -> tuple[list[str], str]:
    """The jin study's compute model from a short real all-reduce run here: (simulate flags, what was found)."""
    import subprocess

    from hpcbench.launch.local import run_ranks, why_failed
    from hpcbench.runtime.sim.calibrate import calibrate

    path = out_dir / "calibration-allreduce-n2.h5"
    args = ["run", "--algo", "allreduce", *mpi_args(s.run_args(preset, steps=CALIBRATION_STEPS[preset])),
            "--set", "allreduce.overlap=false", "--out", str(path), "--overwrite"]
    try:
        if result_status(path) != "ok":  # a study resumed keeps the calibration its runs used
            proc = run_ranks(3, args, timeout, capture=True)
            if proc.returncode != 0:
                raise RuntimeError(why_failed(proc))
        fitted = calibrate(read_run(path))
    except (Exception, subprocess.TimeoutExpired) as exc:  # no MPI here, or the run failed: keep the default
        return [], f"calibration run failed ({exc}); the simulator's default compute model (50 ms, shape 100) is used"
    mean, shape = fitted["compute_mean_s"], fitted["compute_shape"]
    text = (f"a real all-reduce run here (2 workers, {CALIBRATION_STEPS[preset]} steps, {path.name}): compute "
            f"{1e3 * mean:.3g} ms per batch, gamma shape {shape:.3g}; this machine's network fitted at "
            f"{1e6 * fitted['alpha_s']:.3g} µs and {fitted['bandwidth'] / 1e9:.3g} GB/s (replaced by the cluster's "
            f"links)")
    return ["--compute", f"gamma:shape={shape:.6g},mean={mean:.6g}"], text


def trials(runs: Sequence[Planned], scores: Mapping[Path, float]) -> list[Trial]:
    """Each (cell, setting) over its seeds, with each seed's final validation accuracy."""
    by: dict[tuple[CellKey, Setting], list[float]] = {}
    for r in runs:
        by.setdefault((r.cell, r.setting), []).append(scores.get(r.job.path, math.nan))
    return [Trial(cell[0], cell[1], setting, tuple(vals)) for (cell, setting), vals in by.items()]


def cell_of(cell: CellKey, paths: Sequence[Path], target: float, seeds: Sequence[int] = ()) -> Cell:
    """A cell over its seeds, from the result files read back (test accuracy on the whole test set)."""
    from hpcbench.telemetry.summary import time_to_target

    acc, ttt, wall, gaps, moved = [], [], [], [], []
    for path in paths:
        rec = read_run(path)
        t = time_to_target(rec.evals["t"], rec.evals["accuracy"], target)
        acc.append(float(rec.summary["final_accuracy"]))
        ttt.append(math.inf if math.isnan(t) else t)
        wall.append(float(rec.summary["wall_s"]))
        gaps.append(float(np.max(np.diff(rec.evals["t"]))) if len(rec.evals["t"]) > 1 else 0.0)
        moved.append(float(rec.summary.get("bytes_per_sample", math.nan)))
    return Cell(cell[0], cell[1], cell[2], tuple(acc), tuple(ttt), tuple(wall), max(gaps), tuple(moved), tuple(seeds))


def decide_arm(name: str, runs: Sequence[Planned], outcome: Mapping[Path, str], scores: Mapping[Path, float],
               s: Study, network: str, grown: Iterable[tuple[str, CellKey]] = (), top: float | None = None,
               fresh: Mapping[CellKey, Sequence[Planned]] | None = None) -> ArmResult:
    """Each cell's setting chosen on validation among the arm's candidates; its cell from that setting's
    runs on fresh seeds where it chose (``fresh``: by cell), else from its own (cells whose runs have a
    failed seed are left out). ``grown``: the (arm, cell) keys whose grid grew past an edge; ``top``: the
    sequential recipe's accuracy (the rows' validity floor)."""
    cells, chosen, edges, tied, chose = [], {}, [], [], False
    for key in dict.fromkeys(r.cell for r in runs):
        mine = [r for r in runs if r.cell == key]
        chose = chose or len({r.setting for r in mine}) > 1
        tried = trials(mine, scores)
        best = choose(tried).setting
        mine_best = sorted((fresh or {}).get(key) or (r for r in mine if r.setting == best), key=lambda r: r.seed)
        paths = [r.job.path for r in mine_best]
        if all(outcome.get(p) == "" for p in paths):
            chosen[key] = best
            cells.append(cell_of(key, paths, s.target, [r.seed for r in mine_best]))
            if at_edge(best, [r.setting for r in mine]):
                edges.append(key)
        tied += [f"{cell_name(key)}: {t.setting.label()} ties with the chosen {best.label()} (validation "
                 f"{iv.text()} in favour of the chosen)" for t, iv in ties(tried)]
    claims = tuple(report.judge(s, cells, network, top))
    return ArmResult(name, tuple(cells), chosen, claims, tuple(edges), chose,
                     tuple(sorted(k for a, k in grown if a == name)), tuple(tied))


def test_runs(groups: Mapping[Any, list[Planned]], make: Callable[[CellKey, Setting, int], Planned],
              scores: Mapping[Path, float], seeds: Sequence[int]) -> dict[Any, list[Planned]]:
    """For each group that chose among several settings on validation, its choice on fresh ``seeds``: the
    seeds that chose a setting never report its test numbers (they would carry the choice's luck). The other
    groups of an arm where some group chose run on the same fresh seeds, so that the arm's comparisons pair
    runs of the same seed (groups: (arm, cell) → runs)."""
    chosen = {key: choose(trials(runs, scores)).setting for key, runs in groups.items()
              if len({r.setting for r in runs}) > 1}
    arms = {arm for arm, _ in chosen}
    return {(arm, cell): [make(runs[0].cell, chosen.get((arm, cell), runs[0].setting), seed) for seed in seeds]
            for (arm, cell), runs in groups.items() if arm in arms}


def run_until_interior(groups: dict[Any, list[Planned]], make: Callable[[CellKey, Setting, int], Planned],
                       seeds: Sequence[int], mode: str, jobs: int, timeout: float, outcome: dict[Path, str],
                       scores: dict[Path, float], extensions: int = MAX_EXTENSIONS) -> tuple[int, set[Any]]:
    """Run every group's runs; then, while a group's choice (on validation) sits at the edge of the rates
    (or outer rates) it tried, add the next one past that edge (``tuning.grid.past_edges``) at every seed
    and run those, up to ``extensions`` times. Groups (the runs that choose among themselves) grow in place.
    → (runs kept from an earlier invocation, the keys of the groups that grew)."""
    kept, grown = 0, set()
    for extension in range(extensions + 1):
        todo = {r.job.path: r.job for rs in groups.values() for r in rs if r.job.path not in outcome}
        kept += sum(result_status(path) == "ok" for path in todo)
        done = run_jobs(list(todo.values()), mode, jobs, timeout)
        outcome.update(done)
        scores.update(validation_scores(done))
        if extension == extensions:
            break
        nexts = past_edges({key: (choose(trials(runs, scores)).setting, {r.setting for r in runs})
                            for key, runs in groups.items()})
        added = []
        for key, nxt in nexts.items():
            groups[key] += [make(groups[key][0].cell, nxt, seed) for seed in seeds]
            grown.add(key)
            added.append(f"{key}: lr {nxt.lr:g}")
        if not added:
            break
        print(wrapped(f"the grid grows past its edge for {len(added)} choice(s): {'; '.join(sorted(added))}"),
              flush=True)
    return kept, grown


def prepare(out_dir: str) -> Path:
    runs = Path(out_dir) / "runs"
    make_dirs(runs)
    if not os.access(runs, os.W_OK):
        raise UsageError(f"cannot write to {runs}")
    return runs


def sized(name: str, preset: str, mode: str, seeds: Sequence[int] = (), extensions: int | None = None) -> Study:
    """Study ``name`` with its preset checked and its seeds or grid growth replaced where asked."""
    s = study(name)
    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    s = s.at(preset)
    if seeds:  # the preset's seeds replaced (a verdict needs three; more narrow the intervals)
        s = replace(s, sizes={**s.sizes, preset: replace(s.sizes[preset], seeds=tuple(seeds))})
    if extensions is not None:  # how far a grid may grow past an edge, instead of the preset's
        s = replace(s, sizes={**s.sizes, preset: replace(s.sizes[preset], extensions=extensions)})
    return s


@dataclass(frozen=True)
class Sweep:
    """How a study's runs are made and run: the study and its preset, where their files go, the mode,
    the runs at a time and each one's timeout, and the flags every run adds (a calibrated compute model)."""

    s: Study
    preset: str
    mode: str
    runs: Path
    jobs: int
    timeout: float
    extra: tuple[str, ...] = ()

    def make(self, cell: CellKey, setting: Setting, seed: int) -> Planned:
        return planned(self.s, self.preset, self.runs, cell, setting, seed, self.mode, self.extra)


def reproduce(name: str, out_dir: str, preset: str = "full", mode: str = "sim", max_ranks: int = 9,
              timeout: float = 1800.0, jobs: int = 1, emulated: bool = False, seeds: Sequence[int] = (),
              extensions: int | None = None) -> int:
    """Run study ``name`` under its protocol; → 0 when every run ran (whatever the verdict), 1 when some failed.
    ``emulated``: also its algorithms across emulated nodes beside the simulator (sgp, real runs)."""
    if name == "resilience":
        raise UsageError("reproduce resilience runs through reproduce.resilience_run (hpcbench reproduce "
                         "resilience)")
    s = sized(name, preset, mode, seeds, extensions)
    refuse_emulated(s, mode, emulated)
    workers, skipped = sizes_that_fit(s, preset, mode, max_ranks)
    variants = [v for v, _ in s.variants()] if mode == "sim" else [HERE if s.networks else ""]
    if mode == "mpi":
        check_real_runs(s, preset, Path(out_dir) / "runs", workers)
    sweep = Sweep(s, preset, mode, prepare(out_dir), jobs, timeout)
    out, size = Path(out_dir), s.sizes[preset]
    recipe_settings = recipe_grid(size.recipe_lrs, size.recipe_momenta)
    announce(sweep, workers, variants, recipe_settings)
    t0 = time.monotonic()
    calibration = ""
    if name == "jin" and mode == "sim":
        extra, calibration = calibrate_compute(out, s, preset, timeout)
        sweep = replace(sweep, extra=tuple(extra))
        print(wrapped(f"calibration: {calibration}"), flush=True)

    print("\nstage 1: the single-worker recipe, chosen on the validation split", flush=True)
    kept, outcome, scores, recipe_trials, recipe = stage_one(s, preset, sweep.runs, recipe_settings, size.seeds, mode,
                                                             jobs, timeout)
    arms, more = stage_arms(sweep, recipe, ceiling(recipe_trials, recipe), workers, variants, outcome, scores)
    points = []
    if emulated:
        print("\nstage 4: across emulated nodes, real beside simulated", flush=True)
        points = emulated_network.run(s, out, preset, timeout)
    before, notes = bookkeeping(out, s.name, preset, mode, t0, outcome, kept + more, jobs)
    notes |= {"calibration": calibration, "run_flags": list(sweep.extra),
              "setup": s.setup if mode == "sim" else MPI_SETUP,
              "skipped": [f"{n} workers ({n + 1} ranks > --max-ranks {max_ranks})" for n in skipped],
              "command": command_line(name, out_dir, preset, mode, emulated, seeds, extensions),
              "emulated": emulated_network.section(points) if points else []}
    plots = {a.name: report.plot(s, list(a.cells), out / f"{s.name}-{a.name.replace(' ', '-')}.png", a.name)
             for a in arms}
    made = made_with.record((commit_of(p) for p in outcome if not outcome[p]), s.algorithms(),
                            before=before.get("made_with"), simulated=mode == "sim")
    text = publish(out, s, arms, recipe, recipe_trials, notes, plots, made, emulated_network.as_json(points))
    print(f"\n{for_terminal(text, str(out / 'report.md'))}\nreport: {out / 'report.md'}", flush=True)
    return 1 if notes["failed"] else 0


def check_real_runs(s: Study, preset: str, runs: Path, workers: Sequence[int]) -> None:
    """``run --dry-run``'s checks of every world the study's real runs launch here (``launch.preflight``),
    before any starts and before its directory is made: the single-worker recipe's, then each algorithm's at
    each size (their settings differ in the recipe alone, which no world check reads)."""
    from hpcbench.launch.preflight import check_launches

    size = s.sizes[preset]
    setting = recipe_grid(size.recipe_lrs, size.recipe_momenta)[0]
    cells = [(*SEQUENTIAL, ""), *((a, n, "") for n in workers for a in s.algos)]
    jobs = [planned(s, preset, runs, cell, setting, size.seeds[0], "mpi", ()).job for cell in cells]
    check_launches((job.cfg, job.workers + 1) for job in jobs)


def refuse_emulated(s: Study, mode: str, emulated: bool) -> None:
    """--emulated only for a study of networks under real runs, as root, with the emulated cluster free."""
    if emulated and (mode != "mpi" or not s.networks):
        raise UsageError("--emulated runs the sgp study's algorithms across emulated nodes: use it with "
                         "reproduce sgp --mode mpi")
    if emulated and os.geteuid() != 0:
        raise UsageError("--emulated brings up the emulated cluster (jobs/local/emulated-cluster.sh): run as root")
    if emulated:
        from hpcbench.launch.emulated import owner
        from hpcbench.reproduce.network import OWNER

        if owner() not in (None, OWNER):
            raise UsageError(f"--emulated reshapes the emulated cluster for each rate, and the one up now is "
                             f"owner {owner()!r}'s: it is left as it is; take it down first "
                             f"(jobs/local/emulated-cluster.sh down --owner {owner()})")


def sizes_that_fit(s: Study, preset: str, mode: str, max_ranks: int) -> tuple[list[int], list[int]]:
    """The study's worker counts that fit in ``max_ranks`` (all of them in the simulator), and those that
    do not; none fitting is one line."""
    size = s.sizes[preset]
    workers = [n for n in size.workers if fits(n, mode, max_ranks)]
    skipped = [n for n in size.workers if not fits(n, mode, max_ranks)]
    if not workers:
        raise UsageError(f"no size of study {s.name!r} ({preset}) fits in --max-ranks {max_ranks}: the smallest "
                         f"needs {min(skipped) + 1} ranks; raise --max-ranks or use the simulator (--mode sim)")
    return workers, skipped


def announce(sweep: Sweep, workers: Sequence[int], variants: Sequence[str], recipe_settings: Sequence[Setting]) -> None:
    """The study's title, its stages, how many runs at most and the running time expected."""
    s, preset, mode, jobs = sweep.s, sweep.preset, sweep.mode, sweep.jobs
    size = s.sizes[preset]
    stand_in = Recipe(Setting(1.0, 0.0), {m: Setting(1.0, m) for m in size.recipe_momenta})
    per_cell = sum(len(candidates(arm, a, stand_in, size.lr_factors, s.scales, size.epochs, s.contender(a).outer_lrs))
                   for arm in s.arms for a in s.algos)
    estimate = expected_seconds(s, preset, per_cell * len(workers) * len(variants) * len(size.seeds),
                                len(recipe_settings) * len(size.seeds), jobs if mode == "sim" else 1, mode)
    print(wrapped(f"{s.title}\n{preset} study ({mode}): the recipe grid ({len(recipe_settings) * len(size.seeds)} "
                  f"runs), then arms {', '.join(s.arms)} at {len(workers)} size(s) (at most "
                  f"{per_cell * len(workers) * len(variants) * len(size.seeds)} "
                  f"runs, fewer where arms share runs); expected running time about {clock_text(estimate)} "
                  f"({jobs if mode == 'sim' else 1} run(s) at a time; measured on a 2-core machine, "
                  f"{3 if mode == 'mpi' else 1}x for real runs). Result files: {sweep.runs}/"), flush=True)


def stage_arms(sweep: Sweep, recipe: Recipe, top: float | None, workers: Sequence[int], variants: Sequence[str],
               outcome: dict[Path, str], scores: dict[Path, float]) -> tuple[list[ArmResult], int]:
    """Stage 2, every arm's cells from the recipe, grown past their grids' edges; stage 3, the choices made on
    validation run again on fresh seeds; then each arm decided (``top``: the recipe's accuracy). → (the arms,
    how many of their runs were kept from an earlier invocation)."""
    s, size = sweep.s, sweep.s.sizes[sweep.preset]
    print(f"\nstage 2: arms {', '.join(s.arms)}", flush=True)
    groups = {(arm, (a, n, v)): [sweep.make((a, n, v), st, seed)
                                 for st in candidates(arm, a, recipe, size.lr_factors, s.scales, size.epochs,
                                                      s.contender(a).outer_lrs)
                                 for seed in size.seeds]
              for arm in s.arms for v in variants for n in workers for a in s.algos}
    kept, grown = run_until_interior(groups, sweep.make, size.seeds, sweep.mode, sweep.jobs, sweep.timeout, outcome,
                                     scores, size.extensions)
    fresh = test_runs(groups, sweep.make, scores, size.test_seeds)
    if fresh:
        print(wrapped(f"\nstage 3: the {len(fresh)} cell(s) of the arms that chose on validation, their setting on "
                      f"fresh seeds {', '.join(map(str, size.test_seeds))}"), flush=True)
        todo = [r.job for rs in fresh.values() for r in rs]
        kept += sum(result_status(j.path) == "ok" for j in todo)
        outcome.update(run_jobs(todo, sweep.mode, sweep.jobs, sweep.timeout))
    network = HERE if sweep.mode == "mpi" else ""
    arms = [decide_arm(arm, [r for (g, _), rs in groups.items() if g == arm for r in rs], outcome, scores, s,
                       network, grown, top, {k: rs for (g, k), rs in fresh.items() if g == arm}) for arm in s.arms]
    return arms, kept


def stage_one(s: Study, preset: str, runs: Path, settings: list[Setting], seeds: tuple[int, ...], mode: str,
              jobs: int, timeout: float):
    """The single-worker recipe grid, each setting at each seed, scored on the validation split, grown past
    an edge where the best rate at a momentum sits on one: how many of its runs were already done, every
    run's outcome, the scores, the trials and the recipe they choose."""
    algo, one = SEQUENTIAL

    def make(cell: CellKey, setting: Setting, seed: int) -> Planned:
        return planned(s, preset, runs, cell, setting, seed, mode, ())

    groups: dict[Any, list[Planned]] = {}
    for st in settings:
        groups.setdefault(st.momentum, []).extend(make((algo, one, ""), st, seed) for seed in seeds)
    outcome: dict[Path, str] = {}
    scores: dict[Path, float] = {}
    kept, _ = run_until_interior(groups, make, seeds, mode, jobs, timeout, outcome, scores,
                                 s.sizes[preset].extensions)
    recipe_trials = trials([r for rs in groups.values() for r in rs], scores)
    recipe = choose_recipe(recipe_trials)
    print(f"recipe: {recipe.best.label()}", flush=True)
    return kept, outcome, scores, recipe_trials, recipe
