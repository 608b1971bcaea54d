"""A study's report: the claim, the measured table, a plot and the verdict, as Markdown."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tabulate import tabulate

from hpcbench.errors import NO_MATPLOTLIB
from hpcbench.reproduce import findings
from hpcbench.reproduce.claims import CLAIMS, crossing, diloco, gap_aware, jin, sgp
from hpcbench.reproduce.findings import spent
from hpcbench.reproduce.protocol import OWN_LR, ArmResult, Recipe, arm_text, ceiling, counts, grouped, same_runs
from hpcbench.reproduce.studies import DILOCO_PERIODS, TEACHER_NOTE, Study, mpi_args
from hpcbench.reproduce.verdicts import RULE, Cell, Claim, ClaimVerdict
from hpcbench.tuning.grid import Trial, ties


def judge(s: Study, cells: Sequence[Cell], network: str = "", ceiling: float | None = None) -> list[ClaimVerdict]:
    """Each claim's verdict from one arm's cells; ``network``: the one network every run used (real runs),
    instead of the study's modeled ones; ``ceiling``: the sequential recipe's accuracy (the validity floor's
    reference)."""
    if s.name == "gap-aware":
        return gap_aware(cells, ceiling)
    if s.name == "jin":
        return jin(cells, ceiling)
    if s.name == "diloco":
        return diloco(cells, network or s.networks[0].name, DILOCO_PERIODS, ceiling)
    slow, fast = (n.name for n in s.networks)
    return sgp(cells, network or slow, fast, ceiling)


def acc_text(c: Cell) -> str:
    spread = f" ± {100 * c.acc_spread:.1f}" if len(c.accuracy) > 1 else ""
    return f"{100 * c.acc:.1f}{spread}"


def time_text(c: Cell) -> str:
    """Median time to target, and the seeds that reached it where not all did."""
    text = "never" if math.isinf(c.ttt) else f"{c.ttt:.3g}"
    return text if c.reached in (0, len(c.time_to_target)) else f"{text} ({c.reached}/{len(c.time_to_target)})"


def table(s: Study, cells: Sequence[Cell]) -> str:
    """One row per size (and network), one column group per algorithm."""
    keys = sorted({(c.variant, c.workers) for c in cells})
    by = {(c.algo, c.workers, c.variant): c for c in cells}
    rows: list[list[Any]] = []
    if s.name == "gap-aware":
        headers = ["workers"] + [f"{a} final acc %" for a in s.algos]
        for v, n in keys:
            rows.append([n] + [acc_text(by[(a, n, v)]) if (a, n, v) in by else "-" for a in s.algos])
    elif s.name == "jin":
        headers = ["workers"] + [f"{a} median time to {100 * s.target:.0f}% (s)" for a in s.algos] + \
                  [f"{a} final acc %" for a in s.algos]
        for v, n in keys:
            rows.append([n] + [time_text(by[(a, n, v)]) if (a, n, v) in by else "-" for a in s.algos] +
                        [acc_text(by[(a, n, v)]) if (a, n, v) in by else "-" for a in s.algos])
    elif s.name == "diloco":  # a row per contender: its time, accuracy and bytes beside all-reduce's
        headers = ["network", "workers", "algorithm", "time (s)", "final acc %", "bytes per sample",
                   "bytes vs all-reduce", "time vs all-reduce"]
        for v, n in keys:
            base = by.get(("allreduce", n, v))
            for a in s.algos:
                if (a, n, v) in by:
                    x = by[(a, n, v)]
                    rows.append([v, n, a, f"{x.seconds:.3g}", acc_text(x), f"{x.moved:,.0f}",
                                 f"{x.moved / base.moved:.3g}x" if base else "-",
                                 f"{x.seconds / base.seconds:.3g}x" if base else "-"])
    else:
        headers = ["network", "workers"] + [f"{a} time (s)" for a in s.algos] + \
                  [f"{a} final acc %" for a in s.algos] + ["all-reduce / sgp", "all-reduce / osgp"]
        for v, n in keys:
            row: list[Any] = [v, n] + [f"{by[(a, n, v)].seconds:.3g}" if (a, n, v) in by else "-" for a in s.algos]
            row += [acc_text(by[(a, n, v)]) if (a, n, v) in by else "-" for a in s.algos]
            for other in ("sgp", "osgp"):
                both = ("allreduce", n, v) in by and (other, n, v) in by
                row.append(f"{by[('allreduce', n, v)].seconds / by[(other, n, v)].seconds:.2f}x" if both else "-")
            rows.append(row)
    return tabulate(rows, headers=headers, tablefmt="github")


def plot(s: Study, cells: Sequence[Cell], path: Path, arm: str = "") -> str:
    """Write the study's plot; → its file name, or why there is none."""
    try:
        import matplotlib
    except ImportError:
        return f"no plot: {NO_MATPLOTLIB}"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = sorted({c.variant for c in cells})
    if not cells:
        return "no plot: no run finished"
    fig, axes = plt.subplots(1, len(variants), figsize=(6 * len(variants), 4.5), squeeze=False)
    for ax, v in zip(axes[0], variants):
        for a in s.algos:
            mine = sorted((c for c in cells if c.algo == a and c.variant == v), key=lambda c: c.workers)
            if not mine:
                continue
            x = [c.workers for c in mine]
            if s.name == "gap-aware":
                ax.errorbar(x, [100 * c.acc for c in mine], yerr=[100 * c.acc_spread for c in mine], capsize=3,
                            marker="o", label=a)
                ax.set_ylabel("final test accuracy (%)")
            elif s.name == "jin":
                ax.plot(x, [c.ttt if not math.isinf(c.ttt) else float("nan") for c in mine], marker="o", label=a)
                ax.set_ylabel(f"time to {100 * s.target:.0f}% accuracy (s, virtual; missing: never)")
            else:
                ax.plot(x, [c.seconds for c in mine], marker="o", label=a)
                ax.set_ylabel("time for the budget (s, virtual)")
                ax.set_title(v)
        ax.set_xscale("log", base=2)
        sizes = sorted({c.workers for c in cells if c.variant == v})
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{s.source}: arm {arm}" if arm else s.source)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def protocol(s: Study, preset: str, recipe: Recipe, mode: str, fresh: bool = True) -> dict[str, Any]:
    """How every setting of the study was chosen, as data (verdict.json) and text (report.md); ``fresh``:
    a cell that chose on validation reports its choice on fresh seeds (False: a study run before they were,
    judged again)."""
    size = s.sizes[preset]
    return {
        "task": size.task.text(), "dataset": size.task.dataset, "model": size.task.model,
        "target_accuracy": size.target,
        "budget_epochs": size.epochs, "seeds": list(size.seeds), "test_seeds": list(size.test_seeds) if fresh else [],
        "workers": list(size.workers),
        "schedule": f"linear warm-up over {size.warmup_epochs:g} epochs from 1/n of the rate, then x0.1 at epochs "
                    + " and ".join(f"{e:g}" for e in size.decay_epochs) + f" of {size.epochs:g}",
        "recipe": f"sequential SGD (one asgd worker) over rates {', '.join(f'{x:g}' for x in size.recipe_lrs)} "
                  "(grown past an edge where chosen there) x "
                  f"momenta {', '.join(f'{x:g}' for x in size.recipe_momenta)}, {len(size.seeds)} seed(s) each, "
                  "chosen on final validation accuracy (ties: the smaller rate)",
        "chosen_recipe": recipe.best.values(),
        "best_rate_at_momentum": {f"{m:g}": st.lr for m, st in recipe.by_momentum.items()},
        "own_lr_factors": list(size.lr_factors),
        "arms": {arm: arm_text(arm) for arm in s.arms},
        "rule": RULE,
        "grid_edges": f"a choice at the edge of its rates grows the grid by its own log step on that side, up to "
                      f"{size.extensions} step(s) (rates within 1e-5..10)",
        "mode": mode,
    }


def seeds_text(proto: dict[str, Any]) -> str:
    tuning = ", ".join(map(str, proto["seeds"]))
    if proto.get("test_seeds"):
        return (f"seeds {tuning} (an arm where some cell chose its setting on validation reports every cell's "
                f"setting run again on fresh seeds {', '.join(map(str, proto['test_seeds']))})")
    return (f"seeds {tuning} (a cell that chose its setting on validation reports the seeds that chose it: this "
            "study ran before choices were tested on fresh seeds)")


def recipe_table(trials: Sequence[Trial], recipe: Recipe) -> str:
    rows = [[t.setting.lr, t.setting.momentum, "diverged" if math.isinf(t.score) else f"{100 * t.score:.1f}"
             + (f" ± {100 * t.spread:.1f}" if len(t.val) > 1 else ""), "chosen" if t.setting == recipe.best else ""]
            for t in sorted(trials, key=lambda t: (t.setting.momentum or 0.0, t.setting.lr))]
    return tabulate(rows, headers=["lr", "momentum", "validation acc %", ""], tablefmt="github")


def claims_table(arms: Sequence[ArmResult]) -> str:
    """A row per claim, a column per arm: each claim's verdict in the paper's setting in each arm (an arm
    whose evidence is an earlier arm's says so instead of counting again)."""
    if not arms:
        return "(no arm ran)"
    rows = []
    for claim in (cv.claim for cv in arms[0].claims):
        cell: dict[str, str] = {}
        for names, cv in grouped(arms, claim.key):
            cell |= {names[0]: cv.outcome + counts(cv), **{name: f"= {names[0]}" for name in names[1:]}}
        rows.append([claim.short] + [cell[a.name] for a in arms])
    return tabulate(rows, headers=["claim"] + [a.name for a in arms], tablefmt="github")


def recipe_ties(trials: Sequence[Trial]) -> str:
    """The recipe grid's settings that tie with the chosen one on validation, in words ("" when none)."""
    tied = ties(trials)
    if not tied:
        return ""
    best = max(t.score for t in trials if math.isfinite(t.score))
    spread = best - min(t.score for t, _ in tied)
    return (f"; a plateau: {len(tied) + 1} settings within {100 * spread:.1f} points of each other on validation, "
            "the chosen one and, tying with it within the seeds' interval, "
            + ", ".join(f"{t.setting.label()} ({iv.text()} behind)" for t, iv in tied))


def chosen_text(arm: ArmResult) -> str:
    """Which setting each cell's numbers come from, where the arm chose among several."""
    settings = {k: v.label() for k, v in arm.chosen.items()}
    if not arm.chose or not settings:
        return " ".join(arm.ties)
    if len(set(settings.values())) == 1:
        text = (f"Chosen on validation, in every cell: {next(iter(settings.values()))}"
                + (" [edge]" if arm.edges else "") + ".")
    else:
        text = "Chosen on validation: " + "; ".join(f"{a} n={n}{' ' + v if v else ''}: {label}"
                                                    + (" [edge]" if (a, n, v) in arm.edges else "")
                                                    for (a, n, v), label in settings.items()) + "."
    if arm.grown:
        text += (" The grid grew past its edge (log steps) for "
                 + ", ".join(f"{a} n={n}{' ' + v if v else ''}" for a, n, v in arm.grown) + ".")
    if arm.edges:
        text += (" [edge]: still the largest or smallest rate tried once the grid stopped growing (its limit), so "
                 "the algorithm may do better outside it.")
    if arm.ties:
        text += " Ties within the seeds' interval on validation: " + "; ".join(arm.ties) + "."
    return text


def claim_text(claim: Claim) -> str:
    """A claim as the reports state it: its words (or a paraphrase, said so) and source, the rows of the
    paper's setting, the margin and where it comes from (as findings.md states it)."""
    c = asdict(claim)
    return (f"**{claim.short}** — {findings.cited(c)} ({claim.source}). The paper's setting here: "
            f"{claim.setting or 'every size the study runs'}; margin {findings.margin_text(c)}")


def measured(s: Study, notes: dict[str, Any], per_run: str) -> list[str]:
    """The head of a report's "How it was measured": the command and how it ran, the options every run
    shared and ``per_run`` (what each run set), the setup."""
    run_args = s.run_args(notes["preset"])
    run_args = run_args if notes["mode"] == "sim" else mpi_args(run_args)
    return ["## How it was measured", "", f"- command: `{notes['command']}` ({notes['preset']} sizes, "
            f"mode {notes['mode']}; {how_run(notes)})", f"- runs: {' '.join(run_args)}; per run {per_run}",
            f"- setup: {notes['setup']}"]


def how_run(notes: dict[str, Any]) -> str:
    """How many runs this invocation ran, and in what time; runs kept from an earlier one say so (and,
    where this one only reported, the time the invocations that ran them took)."""
    runs, kept, jobs, elapsed_s = notes["runs"], notes["kept"], notes["jobs"], notes["elapsed_s"]
    if kept == runs:
        took = spent(notes)
        return f"this invocation only reported: its {runs} runs were run earlier" + (f", in {took}" if took else "")
    text = f"{runs} runs: {runs - kept} run now, {jobs} at a time, in {elapsed_s / 60:.1f} min"
    return text + (f"; {kept} kept from an earlier invocation" if kept else "")


def caveat(notes: dict[str, Any]) -> str:
    """Why a study's verdict is not a finding (capped runs, a quick or toy size), or ""."""
    if notes.get("capped"):
        return (f"CAPPED at {notes['max_steps']} steps per worker (HPCBENCH_MAX_STEPS): its runs were cut short, so "
                "this is a trial of the machinery, not a finding")
    return {"full": "",
            "quick": "QUICK: fewer sizes and grid points and a shorter budget; the full study is the finding",
            "teacher": f"TEACHER task: {TEACHER_NOTE}: a check of the machinery, not a finding",
            "teacher-quick": "TEACHER-QUICK: the synthetic teacher task at the quick sizes, a check of the machinery, "
                             "not a finding",
            "toy": "TOY size: a test of the machinery, not a finding"}[notes["preset"]]


def workload(s: Study, notes: dict[str, Any], top: float | None) -> str:
    """What carried the study and what it cost: the data set and model, the budget, the accuracy ceiling (the
    sequential recipe's at this budget), the target, the runs and the hours they took."""
    size = s.sizes[notes["preset"]]
    ceiling = f"{100 * top:.1f}%" if top is not None else "unknown (no recipe run finished)"
    return (f"**Workload**: {size.task.text()}; budget {size.epochs:g} epochs a run; accuracy ceiling (the "
            f"sequential recipe's validation accuracy at this budget) {ceiling}; time to target at "
            f"{100 * size.target:g}%. **Cost**: {findings.minutes(notes)}.")


def verdict_line(outcome: str, notes: dict[str, Any]) -> str:
    """The verdict as the report states it: the outcome, and why it is not a finding where it is not."""
    why = caveat(notes)
    return f"{outcome} ({why})" if why else outcome


def markdown(s: Study, arms: Sequence[ArmResult], outcome: str, recipe: Recipe, recipe_trials: Sequence[Trial],
             notes: dict[str, Any], plots: dict[str, str],
             across: Sequence[tuple[str, ClaimVerdict]] = ()) -> str:
    """The answer first (claim, verdict, each arm's verdict), then each arm's plot, numbers and choices, then
    how the study was set up and run."""
    proto = protocol(s, notes["preset"], recipe, notes["mode"], notes.get("fresh_seeds", True))
    label = f" ({caveat(notes).split(':')[0]})" if caveat(notes) else ""
    lines = [f"# {s.title}{label}", "", f"**In short: {verdict_line(outcome, notes)}.**", "",
             workload(s, notes, ceiling(recipe_trials, recipe)), "", claims_table(arms), "", "## The claims", ""]
    claims = (*CLAIMS[s.name], *(cv.claim for _, cv in across))
    shared = claims[0].paper if len({c.paper for c in claims}) == 1 else ""
    if shared:
        lines += [f"The paper: {shared}.", ""]
    for claim in claims:
        paper = "" if shared else f"; the paper: {claim.paper}"
        lines += [f"- {claim_text(claim)}{paper}. Tested here: {claim.test}."]
    lines.append("")
    if across:
        lines += ["## Across arms", ""]
        for label, cv in across:
            lines += [f"- {cv.claim.short} ({label}): **{cv.summary()}**", *findings.row_lines(cv.record())]
        lines.append("")
    twins = same_runs(arms)
    for a in arms:
        lines += [f"## Arm: {a.name}", "", f"What it runs: {arm_text(a.name)}."
                  + (f" Its runs are arm {twins[a.name]}'s (the same settings): counted once." if a.name in twins
                     else ""), ""]
        for cv in a.claims:
            lines += [f"- {cv.claim.short}: **{cv.summary()}**", *findings.row_lines(cv.record())]
        if s.name == "jin":
            lines += [f"- where the curves cross: {crossing(list(a.cells))}"]
        plot_file = plots.get(a.name, "")
        lines += ["", f"![{s.name} {a.name}]({plot_file})" if plot_file.endswith(".png") else f"({plot_file})", ""]
        lines += [table(s, list(a.cells)) if a.cells else "(no run finished)", ""]
        chosen = chosen_text(a)
        if chosen:
            lines += [chosen, ""]
    if s.name == "gap-aware":
        lines += ["Accuracies: final test accuracy of the global model on the whole test set, mean over seeds "
                  "± half their range.", ""]
    lines += ["## Protocol", "",
              f"- task: {proto['task']}; budget {proto['budget_epochs']:g} epochs; {seeds_text(proto)}",
              f"- schedule: {proto['schedule']}",
              f"- recipe: {proto['recipe']}: **{recipe.best.label()}** (best rate at each momentum: "
              + ", ".join(f"momentum {m:g}: lr {st.lr:g}" for m, st in recipe.by_momentum.items()) + ")"
              + recipe_ties(recipe_trials),
              *[f"- arm *{arm}*: {text}" for arm, text in proto["arms"].items()],
              *([f"- own-lr grid: {', '.join(f'{f:g}' for f in proto['own_lr_factors'])} x the recipe's rate"]
                if any(a.name == OWN_LR for a in arms) else []),
              f"- verdict rule: {proto['rule']}", f"- grids: {proto['grid_edges']}", "",
              recipe_table(recipe_trials, recipe), ""]
    lines += measured(s, notes, "--algo, --workers, --seed and the setting"
                      + (", --network" if s.networks and notes["mode"] == "sim" else "")
                      + ("; calibrated --compute" if notes["calibration"] else ""))
    if s.message_params and notes["mode"] == "sim":
        lines.append(f"- --set sim.message_params={s.message_params}")
    if notes["calibration"]:
        lines.append(f"- calibration: {notes['calibration']}")
    for what in ("skipped", "failed"):
        if notes[what]:
            lines.append(f"- {what}: " + "; ".join(notes[what]))
    lines += ["- result files: runs/ (one HDF5 file per run; `hpcbench report runs/` tabulates them)", ""]
    return "\n".join(lines + notes.get("emulated", []))  # real runs across emulated nodes, when asked for
