"""A study's report: the claim, the measured table, a plot and the verdict, as Markdown."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from tabulate import tabulate

from hpcbench.reproduce.studies import Study, mpi_args
from hpcbench.reproduce.verdicts import Cell, Verdict, crossing, gap_aware, jin, sgp


def judge(s: Study, cells: Sequence[Cell], network: str = "") -> Verdict:
    """``network``: the one network every run used (real runs), instead of the study's modeled ones."""
    if s.name == "gap-aware":
        return gap_aware(cells)
    if s.name == "jin":
        return jin(cells)
    slow, fast = (n.name for n in s.networks)
    return sgp(cells, network or slow, fast)


def acc_text(c: Cell) -> str:
    spread = f" ± {100 * c.acc_spread:.1f}" if len(c.accuracy) > 1 else ""
    return f"{100 * c.acc:.1f}{spread}"


def time_text(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:.3g}"


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
        headers = ["workers"] + [f"{a} time to {100 * s.target:.0f}% (s)" for a in s.algos] + \
                  [f"{a} final acc %" for a in s.algos]
        for v, n in keys:
            rows.append([n] + [time_text(by[(a, n, v)].ttt) if (a, n, v) in by else "-" for a in s.algos] +
                        [acc_text(by[(a, n, v)]) if (a, n, v) in by else "-" for a in s.algos])
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


def plot(s: Study, cells: Sequence[Cell], path: Path) -> str:
    """Write the study's plot; → its file name, or why there is none."""
    try:
        import matplotlib
    except ImportError:
        return "no plot: matplotlib is not installed (pip install 'hpcbench-mpi[plot]')"
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
    fig.suptitle(s.source)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def markdown(s: Study, cells: Sequence[Cell], verdict: Verdict, notes: dict[str, Any], plot_file: str) -> str:
    lines = [f"# {s.title}", "", f"**Claim.** {s.claim}", "", f"**Verdict: {verdict.outcome}.**", ""]
    lines += verdict.lines()
    if s.name == "jin":
        lines += [f"- where the curves cross: {crossing(cells)}"]
    lines += ["", "## Measured", "", table(s, cells) if cells else "(no run finished)", ""]
    if s.name == "gap-aware":
        lines += ["Final test accuracy of the global model, mean over seeds ± half their range.", ""]
    lines += [f"![{s.name}]({plot_file})" if plot_file.endswith(".png") else f"({plot_file})", ""]
    run_args = s.run_args(notes["preset"])
    run_args = run_args if notes["mode"] == "sim" else mpi_args(run_args)
    lines += ["## How it was measured", "", f"- command: `{notes['command']}` ({notes['preset']} sizes, "
              f"mode {notes['mode']}; {notes['runs'] - notes['kept']} runs in {notes['elapsed_s'] / 60:.1f} min"
              + (f", {notes['kept']} kept from an earlier invocation" if notes["kept"] else "") + ")",
              f"- runs: {' '.join(run_args)}; per point --algo, --workers, --seed"
              + (", --network" if s.networks and notes["mode"] == "sim" else "")
              + ("; calibrated --compute" if notes["calibration"] else ""),
              f"- setup: {notes['setup']}"]
    if s.message_params and notes["mode"] == "sim":
        lines.append(f"- --set sim.message_params={s.message_params}")
    if notes["calibration"]:
        lines.append(f"- calibration: {notes['calibration']}")
    for what in ("skipped", "failed"):
        if notes[what]:
            lines.append(f"- {what}: " + "; ".join(notes[what]))
    lines += ["- result files: runs/ (one HDF5 file per run; `hpcbench report runs/` tabulates them)", ""]
    return "\n".join(lines)
