"""Drawing a report's figures (``figures.py``) as PNGs: ``report --plot DIR`` and the html page's plots
(needs matplotlib, the ``plot`` extra). Every group keeps one colour and marker in every plot."""
from __future__ import annotations

import importlib.util
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hpcbench.errors import UsageError
from hpcbench.report.figures import PHASES, Figure

NO_MATPLOTLIB = "plots need matplotlib: pip install 'hpcbench-mpi[plot]'"
MARKERS = "osD^v<>ph*XP"
WIDTH_IN, DPI = 8.0, 100  # 800 px: drawn at full size in a page read at 800 px and up


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def pyplot():
    if not have_matplotlib():
        raise UsageError(NO_MATPLOTLIB)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def styles(plt, labels: Sequence[str]) -> dict[str, dict]:
    """A colour, marker and line style per label, the same in every plot of one report."""
    colours = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: {"color": colours(i % colours.N), "marker": MARKERS[i % len(MARKERS)],
                    "linestyle": ("-", "--", ":")[(i // colours.N) % 3]} for i, label in enumerate(labels)}


def legend(fig, handles: list, names: list[str]) -> None:
    """Below the plot, in columns, at a size that reads at 800 px."""
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2 if len(names) > 4 else 1,
               fontsize=10, frameon=False)


def draw_lines(plt, figure: Figure, style: dict[str, dict]):
    panels = figure.panels()
    fig, axes = plt.subplots(len(panels), 1, figsize=(WIDTH_IN, 3.6 * len(panels) + 0.6), squeeze=False,
                             sharex=len(panels) > 1)
    handles: dict[str, object] = {}
    for ax, panel in zip(axes[:, 0], panels):
        for s in (s for s in figure.series if s.panel == panel):
            xs, ys, errs = zip(*s.points) if s.points else ((), (), ())
            yerr = [0.0 if math.isnan(e) else e for e in errs] if any(not math.isnan(e) for e in errs) else None
            line = ax.errorbar(xs, ys, yerr=yerr, capsize=3 if yerr else 0, markersize=5, label=s.label,
                               **style[s.label])
            handles.setdefault(s.label, line)
        if not math.isnan(figure.line_at):
            ax.axhline(figure.line_at, color="gray", linestyle="--", linewidth=1)
        if figure.log_x:
            ax.set_xscale("log", base=2)
            ticks = sorted({x for s in figure.series for x, _, _ in s.points})
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_ylabel(figure.y, fontsize=11)
        ax.grid(True, alpha=0.3)
        if len(panels) > 1:
            ax.set_title(f"{panel} workers", fontsize=11, loc="left")
    axes[-1, 0].set_xlabel(figure.x, fontsize=11)
    fig.suptitle(figure.title, fontsize=11)
    legend(fig, list(handles.values()), list(handles))
    return fig


def draw_bars(plt, figure: Figure):
    names = [s.label for s in figure.series]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.32 * len(names) + 1.4))
    left = [0.0] * len(names)
    colours = ["tab:blue", "tab:orange", "tab:green", "lightgray"]
    handles = []
    for i, phase in enumerate(PHASES):
        share = [dict((int(x), y) for x, y, _ in s.points).get(i, 0.0) for s in figure.series]
        handles.append(ax.barh(names, share, left=left, color=colours[i], label=phase))
        left = [a + b for a, b in zip(left, share)]
    ax.set_xlim(0, 100)
    ax.set_xlabel(figure.x, fontsize=11)
    ax.tick_params(axis="y", labelsize=10)
    ax.invert_yaxis()
    ax.set_title(figure.title, fontsize=11)
    fig.legend(handles, PHASES, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=10, frameon=False)
    return fig


def write_figures(figures: Sequence[Figure], out_dir: str | Path) -> dict[str, list[str]]:
    """Each figure as OUT_DIR/NAME.png; returns {file name: the labels it shows}."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = sorted({s.label for f in figures if f.kind == "line" for s in f.series})
    style = styles(plt, labels)
    written = {}
    for figure in figures:
        fig = draw_bars(plt, figure) if figure.kind == "bars" else draw_lines(plt, figure, style)
        fig.savefig(out / f"{figure.name}.png", dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        written[f"{figure.name}.png"] = list(dict.fromkeys(s.label for s in figure.series))
    return written


def images(figures: Sequence[Figure]) -> dict[str, bytes]:
    """The figures as PNG data, by file name (for the html page)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {name: (Path(tmp) / name).read_bytes() for name in write_figures(figures, tmp)}
