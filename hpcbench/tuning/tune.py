"""``hpcbench tune``: run a grid of recipes, choose on the validation split, write the table, plot and TOML.

OUT_DIR/runs/ holds one result file per (algorithm, workers, setting, seed); OUT_DIR/tune.md the
table (validation accuracy only), OUT_DIR/tune.png validation accuracy against the rate,
OUT_DIR/tune.json the same as data, and OUT_DIR/best/ALGO-nN.toml the chosen recipe for
``run``/``simulate``/``sweep --config``.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from hpcbench.config import toml_literal
from hpcbench.errors import NO_MATPLOTLIB, UsageError
from hpcbench.report.strict_json import dumps
from hpcbench.results.paths import make_dirs
from hpcbench.terminal import for_terminal, wrapped
from hpcbench.tuning.execute import Job, run_jobs
from hpcbench.tuning.grid import MAX_EXTENSIONS, Setting, Trial, at_edge, best_per_group, past_edges, ties


@dataclass(frozen=True)
class Grid:
    algos: tuple[str, ...]
    workers: tuple[int, ...]
    settings: tuple[Setting, ...]
    seeds: tuple[int, ...]


def job_path(runs: Path, algo: str, workers: int, setting: Setting, seed: int) -> Path:
    return runs / f"{algo}-n{workers}-{setting.stem()}-s{seed}.h5"


Group = tuple[str, int]  # (algorithm, workers): the settings that choose among themselves


def grid_jobs(settings: Mapping[Group, Sequence[Setting]], seeds: Sequence[int], runs: Path,
              run_args: Sequence[str]) -> list[Job]:
    return [Job.of(a, n, (*run_args, "--set", f"seed={s}", *st.args()), job_path(runs, a, n, st, s),
                   f"{a}, {n} workers, {st.label()}, seed {s}")
            for (a, n), group in settings.items() for st in group for s in seeds]


def cut_cap(outcome: Mapping[Path, str]) -> int:
    """The step cap (HPCBENCH_MAX_STEPS) that cut any of the runs that ended well, as their files say; 0 where
    none was cut (no cap, or one the runs' budgets stayed under): only then is a tune called capped."""
    from hpcbench.config import cut_by_cap
    from hpcbench.results.store import read_run

    for path, why in outcome.items():
        if not why:
            rec = read_run(path)
            if cut_by_cap(rec.attrs["config"], rec.workers):
                return int(rec.attrs["config"]["max_steps"])
    return 0


def validation_scores(outcome: Mapping[Path, str]) -> dict[Path, float]:
    """Each run's final validation accuracy, read once (NaN for a failed run or one without a split):
    the only number a choice reads. A file no reader takes (one that holds an impossible value) is said in
    one line and scores NaN, as a failed run does: it never moves a choice."""
    from hpcbench.errors import one_line
    from hpcbench.results.store import read_run

    scores = {}
    for path, why in outcome.items():
        scores[path] = math.nan
        if not why:
            try:
                scores[path] = float(read_run(path).summary.get("final_val_accuracy", math.nan))
            except UsageError as exc:
                print(f"hpcbench: {one_line(str(exc))}; it counts as a failed run", file=sys.stderr, flush=True)
    return scores


def trials_of(settings: Mapping[Group, Sequence[Setting]], seeds: Sequence[int], runs: Path,
              scores: Mapping[Path, float]) -> list[Trial]:
    """Each setting's trial at each (algorithm, workers); a failed seed counts as no accuracy."""
    return [Trial(a, n, st, tuple(scores.get(job_path(runs, a, n, st, s), math.nan) for s in seeds))
            for (a, n), group in settings.items() for st in group]


def grown_past_edges(settings: dict[Group, list[Setting]], trials: Sequence[Trial]) -> list[tuple[Group, Setting]]:
    """For each group whose choice sits at the edge of its rates, the next rate past it (added to
    ``settings`` in place): what to run before choosing again."""
    chosen = best_per_group(trials)
    added = past_edges({key: (chosen[key].setting, group) for key, group in settings.items()})
    for key, nxt in added.items():
        settings[key].append(nxt)
    return list(added.items())


def table(trials: Sequence[Trial], chosen: Mapping[Group, Trial]) -> str:
    rows = [[t.algo, t.workers, t.setting.label(), fmt_acc(t), "chosen" if chosen[(t.algo, t.workers)] is t else ""]
            for t in trials]
    return tabulate(rows, headers=["algorithm", "workers", "setting", "validation acc % (mean ± half range)", ""],
                    tablefmt="github", disable_numparse=True)


def fmt_acc(t: Trial) -> str:
    if math.isinf(t.score):
        return "diverged or failed"
    return f"{100 * t.score:.1f}" + (f" ± {100 * t.spread:.1f}" if len(t.val) > 1 else "")


def plot(trials: Sequence[Trial], path: Path, title: str) -> str:
    """Validation accuracy against the rate, one line per (algorithm, workers, other settings)."""
    try:
        import matplotlib
    except ImportError:
        return f"no plot: {NO_MATPLOTLIB}"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, list[Trial]] = {}
    for t in trials:
        rest = ", ".join(t.setting.label().split(", ")[1:])
        lines.setdefault(f"{t.algo}, n={t.workers}" + (f", {rest}" if rest else ""), []).append(t)
    # The legend below the plot as the report lays its legends out (a grid of many settings has long names).
    from hpcbench.report.plots import laid_out, legend_in

    wrapped_names, ncol = laid_out(list(lines), 1)
    names = dict(zip(lines, wrapped_names))
    fig, ax = plt.subplots(figsize=(7.2, 4.5 + legend_in(wrapped_names, ncol)), layout="constrained")
    for name, group in lines.items():
        group = sorted(group, key=lambda t: t.setting.lr)
        ax.errorbar([t.setting.lr for t in group], [100 * t.score if math.isfinite(t.score) else math.nan
                                                    for t in group],
                    yerr=[100 * t.spread for t in group], marker="o", capsize=3, label=names[name])
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (single-worker recipe)")
    ax.set_ylabel("final validation accuracy (%)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", fontsize="small", frameon=False)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def choice_caveats(chosen: Trial, group: Sequence[Trial]) -> str:
    """What a reader should know about a choice: it is still at the grid's edge (the limit stopped the
    growth), or other settings tie with it within the seeds' interval (and by how much)."""
    text = ""
    if at_edge(chosen.setting, [t.setting for t in group]):
        text += "; still at the edge of the rates tried (the grid's limit), so a rate outside may do better"
    tied = ties(group)
    if tied:
        text += "; ties within the seeds' interval with " + ", ".join(
            f"{t.setting.label()} ({iv.text()} behind)" for t, iv in tied)
    return text


def recipe_toml(base: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]], trial: Trial,
                sim: Mapping[str, Any]) -> str:
    """A config file that runs ``trial``'s setting: the base run options (non-default ones), the chosen
    values, the option tables given, and the simulator's values (``[sim]``) when tuned in the simulator."""
    cap = base.get("max_steps")
    values = {**{k: v for k, v in base.items() if k != "max_steps"}, **trial.setting.values(), "algo": trial.algo}
    lines = [f"# chosen by hpcbench tune on the validation split: {trial.algo} at {trial.workers} workers, "
             f"validation accuracy {fmt_acc(trial)}"]
    if cap:  # the environment's cap on the tuning runs (a smoke test), not a setting of the recipe
        lines.append(f"# its runs were capped at {cap} steps per worker (HPCBENCH_MAX_STEPS): a smoke test, not a "
                     "choice; the recipe does not carry the cap")
    lines += [f"{k} = {toml_literal(v)}" for k, v in values.items()]
    for table_name, table_values in {**options, **({"sim": sim} if sim else {})}.items():
        if table_values:
            lines += ["", f"[{table_name}]"] + [f"{k} = {toml_literal(v)}" for k, v in table_values.items()]
    return "\n".join(lines) + "\n"


def tune(grid: Grid, run_args: Sequence[str], base: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]],
         sim: Mapping[str, Any], out_dir: str, mode: str, jobs: int, timeout: float,
         extensions: int = MAX_EXTENSIONS) -> int:
    """Run the grid, choose per (algorithm, workers); → 0 when every run finished, 1 when some failed.

    ``run_args``: the options every run shares (as flags); ``base``, ``options``, ``sim``: the same as
    values, for the chosen recipes' TOML files."""
    out = Path(out_dir)
    runs = out / "runs"
    make_dirs(out / "best", runs)
    settings = {(a, n): list(grid.settings) for a in grid.algos for n in grid.workers}
    total = len(grid_jobs(settings, grid.seeds, runs, run_args))
    print(wrapped(f"tune: {len(grid.algos)} algorithm(s) x {len(grid.workers)} size(s) x {len(grid.settings)} "
                  f"setting(s) x {len(grid.seeds)} seed(s) = {total} runs ({mode}, {jobs if mode == 'sim' else 1} at a "
                  f"time); result files in {runs}/"), flush=True)
    t0 = time.monotonic()
    outcome: dict[Path, str] = {}
    scores: dict[Path, float] = {}
    grew: list[str] = []
    for extension in range(extensions + 1):
        todo = [j for j in grid_jobs(settings, grid.seeds, runs, run_args) if j.path not in outcome]
        done = run_jobs(todo, mode, jobs, timeout)
        outcome.update(done)
        scores.update(validation_scores(done))
        trials = trials_of(settings, grid.seeds, runs, scores)
        added = grown_past_edges(settings, trials) if extension < extensions else []
        if not added:
            break
        grew += [f"{a} at {n} workers: {st.label()}" for (a, n), st in added]
        print(wrapped("the grid grows past its edge: " + "; ".join(f"{a} at {n} workers: lr {st.lr:g}"
                                                                    for (a, n), st in added)), flush=True)
    all_jobs = list(outcome)
    chosen = best_per_group(trials)
    failed = sorted(f"{p.name}: {why}" for p, why in outcome.items() if why)
    text = table(trials, chosen)
    plot_file = plot(trials, out / "tune.png", "hpcbench tune: validation accuracy by rate")
    if not cut_cap(outcome):  # a cap the runs stayed under did not make them a smoke test
        base = {k: v for k, v in base.items() if k != "max_steps"}
    files = {}
    for (a, n), t in chosen.items():
        path = out / "best" / f"{a}-n{n}.toml"
        path.write_text(recipe_toml(base, options, t, sim if mode == "sim" else {}), encoding="utf-8")
        files[f"{a}-n{n}"] = str(path.relative_to(out))
    elapsed = time.monotonic() - t0
    chosen_lines = [f"- {a} at {n} workers: **{t.setting.label()}** (validation {fmt_acc(t)} %) -> "
                    f"`{files[f'{a}-n{n}']}`" + choice_caveats(t, [x for x in trials if (x.algo, x.workers) == (a, n)])
                    for (a, n), t in chosen.items()]
    cap = base.get("max_steps")
    capped = [f"**CAPPED** at {cap} steps per worker (HPCBENCH_MAX_STEPS): a smoke test of the grid, not a choice "
              "to trust; the recipes written do not carry the cap.", ""] if cap else []
    md = ["# hpcbench tune", "", *capped, "Chosen on the validation split (final validation accuracy, mean over seeds; "
          "ties go to the smaller rate). The test set is not read. A choice at the edge of the rates tried grows "
          f"the grid by its own log step on that side (at most {extensions} step(s)).", "", *chosen_lines, "", text,
          "",
          f"![tune]({plot_file})" if plot_file.endswith(".png") else f"({plot_file})", "",
          f"- runs: {len(all_jobs)} ({mode}) in {elapsed / 60:.1f} min; options every run shares: "
          f"`{' '.join(run_args)}`"]
    if grew:
        md.append("- the grid grew past its edge: " + "; ".join(grew))
    if failed:
        md.append("- failed: " + "; ".join(failed))
    (out / "tune.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / "tune.json").write_text(dumps({
        "mode": mode, "seeds": list(grid.seeds), "elapsed_s": elapsed, "failed": failed, "grown": grew,
        "trials": [{"algo": t.algo, "workers": t.workers, "setting": t.setting.values(),
                    "val_accuracy": list(t.val),
                    "chosen": chosen[(t.algo, t.workers)] is t,
                    "at_edge": chosen[(t.algo, t.workers)] is t and at_edge(t.setting, settings[(t.algo, t.workers)]),
                    "ties_with_chosen": any(x is t for x, _ in
                                            ties([y for y in trials if (y.algo, y.workers) == (t.algo, t.workers)]))}
                   for t in trials],
    }, indent=1), encoding="utf-8")
    shown = for_terminal("\n".join(chosen_lines) + f"\n\n{text}", str(out / "tune.md"))
    print(f"\n{shown}\n\nreport: {out / 'tune.md'}", flush=True)
    return 1 if failed else 0
