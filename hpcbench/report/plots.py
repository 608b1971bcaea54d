"""``hpcbench report --plot DIR``: PNGs of a study (needs matplotlib, the ``plot`` extra).

throughput.png and efficiency.png against workers, accuracy.png against time, phases.png with the
share of each phase per algorithm. Each writer returns the series it drew, for the caller to list.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.report.metrics import RunRow, ScalePoint, run_row, scaling, varying
from hpcbench.results.schema import RunRecord

PHASES = ("compute", "communicate", "wait")


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'hpcbench-mpi[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


MARKERS = "osD^v<>ph*X"


def style(plt, i: int, count: int) -> dict:
    """A distinct colour, marker and line style per series (all eleven algorithms may share a plot)."""
    colours = plt.get_cmap("tab10" if count <= 10 else "tab20")
    return {"color": colours(i % colours.N), "marker": MARKERS[i % len(MARKERS)],
            "linestyle": ("-", "--", ":")[(i // 10) % 3]}


def finish(fig, ax, path: Path) -> None:
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def label(algorithm: str, mode: str, modes: set[str]) -> str:
    return algorithm if len(modes) == 1 else f"{algorithm} ({mode})"


def curves(points: Sequence[ScalePoint]) -> dict[str, list[ScalePoint]]:
    """Points by curve: algorithm, its mode where modes are mixed, and the grouping settings' values."""
    modes = {p.mode for p in points}
    out: dict[str, list[ScalePoint]] = {}
    for p in points:
        name = label(p.algorithm, p.mode, modes) + "".join(f", {k}={v}" for k, v in p.group)
        out.setdefault(name, []).append(p)
    return out


def scaling_plot(plt, points: Sequence[ScalePoint], path: Path, what: str) -> list[str]:
    fig, ax = plt.subplots(figsize=(10, 5))
    series = curves(points)
    for i, (name, pts) in enumerate(series.items()):
        x = [p.workers for p in pts]
        if what == "throughput":
            ax.errorbar(x, [p.samples_per_s for p in pts], yerr=[p.samples_per_s_spread for p in pts], capsize=3,
                        label=name, **style(plt, i, len(series)))
        else:
            ax.plot(x, [100 * p.efficiency for p in pts], label=name, **style(plt, i, len(series)))
    if what == "throughput":
        ax.set_ylabel("samples / s (median over repeats)")
        ax.set_title("Throughput against workers")
    else:
        ax.axhline(100, color="gray", linestyle="--", linewidth=1)
        ax.set_ylabel("parallel efficiency (%) against the fewest workers")
        ax.set_title("Scaling efficiency")
    ax.set_xscale("log", base=2)
    workers = sorted({p.workers for p in points})
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.grid(True, alpha=0.3)
    finish(fig, ax, path)
    plt.close(fig)
    return list(series)


def largest_runs(records: Sequence[RunRecord]) -> dict[str, RunRecord]:
    """Each algorithm's (and mode's) run with the most workers."""
    modes = {r.mode for r in records}
    best: dict[str, RunRecord] = {}
    for r in records:
        key = label(r.algorithm, r.mode, modes)
        if key not in best or r.workers > best[key].workers:
            best[key] = r
    return best


def accuracy_plot(plt, records: Sequence[RunRecord], path: Path, target: float) -> list[str]:
    fig, ax = plt.subplots(figsize=(10, 5))
    names = []
    runs = sorted(largest_runs(records).items())
    for i, (name, r) in enumerate(runs):
        ax.plot(r.evals["t"], r.evals["accuracy"], label=f"{name}, {r.workers} workers", markersize=4,
                **style(plt, i, len(runs)))
        names.append(name)
    ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("Accuracy against time (each algorithm at its largest worker count)")
    ax.grid(True, alpha=0.3)
    finish(fig, ax, path)
    plt.close(fig)
    return names


def phases_plot(plt, rows: Sequence[RunRow], path: Path) -> list[str]:
    largest: dict[str, RunRow] = {}
    modes = {r.mode for r in rows}
    for r in rows:
        key = label(r.algorithm, r.mode, modes)
        if key not in largest or r.workers > largest[key].workers:
            largest[key] = r
    names = sorted(largest)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.5))
    left = np.zeros(len(names))
    for phase in PHASES:
        share = np.nan_to_num([100 * getattr(largest[n], f"{phase}_fraction") for n in names])
        ax.barh(names, share, left=left, label=phase)
        left += share
    ax.barh(names, np.clip(100 - left, 0, None), left=left, label="other (data, own math)", color="lightgray")
    ax.set_xlabel("share of the workers' time (%)")
    ax.set_title("Where workers spend their time (each algorithm at its largest worker count)")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    finish(fig, ax, path)
    plt.close(fig)
    return names


def plot_images(records: Sequence[RunRecord], target: float) -> dict[str, bytes]:
    """The plots as PNG data (for the html page); none without matplotlib or finished runs."""
    import importlib.util
    import tempfile

    if importlib.util.find_spec("matplotlib") is None or not any(r.attrs["status"] == "ok" for r in records):
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        names = write_plots(records, tmp, target)
        return {name: (Path(tmp) / name).read_bytes() for name in names if (Path(tmp) / name).is_file()}


def write_plots(records: Sequence[RunRecord], out_dir: str, target: float) -> dict[str, list[str]]:
    """Write the PNGs of the runs that finished; returns {file name: series drawn}."""
    records = [r for r in records if r.attrs["status"] == "ok"]
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_row(r, target) for r in records]
    points = scaling(rows, varying(rows))
    return {
        "throughput.png": scaling_plot(plt, points, out / "throughput.png", "throughput"),
        "efficiency.png": scaling_plot(plt, points, out / "efficiency.png", "efficiency"),
        "accuracy.png": accuracy_plot(plt, records, out / "accuracy.png", target),
        "phases.png": phases_plot(plt, rows, out / "phases.png"),
    }
