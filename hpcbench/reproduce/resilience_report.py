"""The resilience study's report: its claims, the table of every cell, the plot and the protocol, as
Markdown (the other studies' are ``reproduce.report``, whose pieces this one shares)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tabulate import tabulate

from hpcbench.errors import NO_MATPLOTLIB
from hpcbench.reproduce import findings
from hpcbench.reproduce.findings import mean_half
from hpcbench.reproduce.protocol import ArmResult, Recipe, ceiling
from hpcbench.reproduce.report import (
    caveat,
    claims_table,
    measured,
    protocol,
    recipe_table,
    recipe_ties,
    verdict_line,
    workload,
)
from hpcbench.reproduce.resilience import split_known
from hpcbench.reproduce.studies import Study
from hpcbench.reproduce.verdicts import RULE
from hpcbench.tuning.grid import Trial
from hpcbench.tuning.intervals import interval


def table(cells: Sequence[Any]) -> str:
    """One row per (scenario, size, algorithm): goodput without and with failures, what the failures cost
    (capacity, lost work and the rest, as shares of the failure-free run), accuracy both ways (mean over
    seeds ± half its 95% interval where it is the claim's)."""
    rows = []
    split = split_known(cells)
    for c in sorted(cells, key=lambda c: (c.scenario, c.workers, c.algo)):
        p = c.pairs

        def avg(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
            return f"{scale * sum(values) / len(values):.{digits}f}"

        row = ([c.scenario] if split else []) + [c.workers, c.algo, avg([x.goodput for x in p], digits=0),
                                                 avg([x.goodput_failing for x in p], digits=0)]
        row += ([avg([x.split.capacity for x in p], 100.0), avg([x.split.lost_work for x in p], 100.0),
                 mean_half([x.split.overhead for x in p], 100.0, 1, sign="+")] if split
                else [mean_half([x.kept for x in p], 1.0, 3)])
        row += [avg([x.accuracy for x in p], 100.0), avg([x.accuracy_failing for x in p], 100.0),
                mean_half([x.dropped for x in p], 100.0, 2, sign="+"),
                "-" if math.isnan(c.recovery_s) else f"{1e3 * c.recovery_s:.1f}",
                f"{sum(x.lost for x in p) / len(p):g}", avg([x.samples_lost for x in p], digits=0)]
        rows.append(row)
    cost = ["capacity %", "lost work %", "beyond capacity %"] if split else ["goodput kept"]
    return tabulate(rows, headers=(["scenario"] if split else []) + ["workers", "algorithm", "samples/s",
                                                                     "samples/s, failing", *cost, "final acc %",
                                                                     "final acc %, failing", "acc lost (pts)",
                                                                     "recovery ms", "workers lost", "samples lost"],
                    tablefmt="github", disable_numparse=True)


def bar(values: Sequence[float]) -> float:
    """An error bar: half the 95% interval over seeds (none from one seed)."""
    width = interval(values).half
    return 0.0 if math.isinf(width) else width


def plot(cells: Sequence[Any], path: Path) -> str:
    """Time lost beyond capacity (goodput kept, first design) and accuracy lost against the workers, a column
    per failure scenario, an algorithm a line; → the file, or why none."""
    try:
        import matplotlib
    except ImportError:
        return f"no plot: {NO_MATPLOTLIB}"
    if not cells:
        return "no plot: no run finished"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = sorted({c.scenario for c in cells})
    split = split_known(cells)
    fig, axes = plt.subplots(2, len(scenarios), figsize=(5 * len(scenarios) + 1, 8), squeeze=False)
    for col, scenario in enumerate(scenarios):
        top, bottom = axes[0][col], axes[1][col]
        for algo in sorted({c.algo for c in cells}):
            mine = sorted((c for c in cells if c.algo == algo and c.scenario == scenario), key=lambda c: c.workers)
            x = [c.workers for c in mine]
            cost = [[100 * p.split.overhead if split else p.kept for p in c.pairs] for c in mine]
            lost = [[100 * p.dropped for p in c.pairs] for c in mine]
            top.errorbar(x, [sum(k) / len(k) for k in cost], yerr=[bar(k) for k in cost], capsize=3, marker="o",
                         label=algo)
            bottom.errorbar(x, [100 * c.dropped for c in mine], yerr=[bar(k) for k in lost], capsize=3, marker="o",
                            label=algo)
        top.set_title(scenario or "two failures per run")
        sizes = sorted({c.workers for c in cells})
        for ax, label in ((top, "time lost beyond capacity (% of the run)" if split else
                           "goodput kept (with failures / without)"), (bottom, "final accuracy lost (pts)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.set_xlabel("workers")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
    fig.suptitle("What losing workers costs each family (bars: 95% intervals over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def markdown(s: Study, cells: Sequence[Any], arm: ArmResult, outcome: str, recipe: Recipe,
                        recipe_trials: Sequence[Trial], notes: dict[str, Any], plotted: str) -> str:
    from hpcbench.reproduce.resilience import EXPECTED, SCENARIO_TEXT, SHRINKING

    proto = protocol(s, notes["preset"], recipe, notes["mode"], notes.get("fresh_seeds", True))
    label = f" ({caveat(notes).split(':')[0]})" if caveat(notes) else ""
    first = arm.claims[0].claim
    scenarios = sorted({c.scenario for c in cells})
    split = split_known(cells)
    lines = [f"# {s.title}{label}", "", f"**In short: {verdict_line(outcome, notes)}.**", "",
             workload(s, notes, ceiling(recipe_trials, recipe)), "", claims_table([arm]), "",
             "## The claim", "", f"In paraphrase: {s.claim} ({first.source}). {first.paper.capitalize()}.", "",
             f"Each family's algorithm is tested against the shrinking {SHRINKING} on two claims, a row per "
             + ("failure scenario and size:" if scenarios != [""] else "size:"), ""]
    for cv in arm.claims:
        margin = findings.margin_text(asdict(cv.claim))
        lines += [f"- **{cv.claim.short}** (tested: {cv.claim.test}; margin {margin}): **{cv.summary()}**",
                  *findings.row_lines(cv.record())]
    lines += ["", f"![resilience]({plotted})" if plotted.endswith(".png") else f"({plotted})", "",
              table(cells) if cells else "(no run finished)", ""]
    mtbf = notes.get("node_mtbf_s")
    failures = [f"  - {sc or 'fixed'}: {SCENARIO_TEXT[sc]}" for sc in scenarios]
    lines += ["## Protocol", "",
              f"- task: {proto['task']}; budget {proto['budget_epochs']:g} epochs; seeds "
              f"{', '.join(map(str, proto['seeds']))}", f"- schedule: {proto['schedule']}",
              f"- recipe, tuned on validation without failures: {proto['recipe']}: **{recipe.best.label()}**, shared "
              "by every algorithm" + recipe_ties(recipe_trials),
              "- failures: every cell runs without failures (its duration T), then once per scenario, its schedule "
              "drawn from the seed over T; no schedule kills the last worker"
              + (f"; node MTBF {mtbf:.4g} s (virtual in the simulator), at which {SHRINKING} at the smallest size "
                 f"expects {EXPECTED:g} failures" if mtbf else "") + ":", *failures,
              ("- what failures cost, as shares of T: capacity (the run's duration had the survivors gone on at full "
               "speed from each death, and nothing else been lost: the same for every family under the same "
               "schedule), lost work (samples trained and discarded, at the failure-free rate) and everything "
               "beyond capacity (lost work, recovery, waiting): the part where a collective and an asynchronous "
               "method differ, and the one the claim is tested on" if split else
               "- goodput kept: samples per second (of the samples whose work the run kept) with failures over "
               "without, the same seed. Every family loses the same workers at the same moments, so the capacity "
               "they lose is the same: what can differ is the work lost and the time spent recovering"),
              "- accuracy lost: final test accuracy without failures minus with, where both failure-free runs "
              "trained; ± half the 95% interval over seeds",
              f"- verdict rule: {RULE}. Every row is of the claim's setting. A seed whose run with failures "
              "ended before them is left out, and the row says so."
              + (" In the simulator time is its cost model's: a time claim it does not bear out is "
                 "\"not reproduced by the model\"." if notes["mode"] == "sim" else ""), "",
              recipe_table(recipe_trials, recipe), ""]
    lines += measured(s, notes, "--algo, --workers, --seed, the recipe and, failing, --set fault=kill:R@S,...")
    if notes["failed"]:
        lines.append("- failed: " + "; ".join(notes["failed"]))
    lines += ["- result files: runs/ (one HDF5 file per run; `hpcbench report runs/` tabulates them)", ""]
    return "\n".join(lines)
