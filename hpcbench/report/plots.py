"""Drawing a report's figures (``figures.py``) as PNGs: ``report --plot DIR`` and the html page's plots
(needs matplotlib, the ``plot`` extra). Every group keeps one colour and marker in every plot."""
from __future__ import annotations

import importlib.util
import math
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

from hpcbench.errors import NO_MATPLOTLIB, UsageError
from hpcbench.report.figures import PHASES, Figure

MARKERS = "osD^v<>ph*XP"
# Every plot 720 px wide (legends below, in 10 points: 14 px), so that a page read at 800 px, its margins
# and a scroll bar taken off, still shows each at its size.
WIDTH_IN, DPI = 7.2, 100
WIDTH_PX = round(WIDTH_IN * DPI)
GREY = "0.72"
TITLE_CHARS = 95  # a title's line, in 11 points, within WIDTH_PX


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
    """A colour, marker and line style per label, the same in every plot of one report (never a grey: grey
    is for the groups behind the most accurate few)."""
    cmap = plt.get_cmap("tab10" if len(labels) <= 9 else "tab20")
    colours = [c for c in map(cmap, range(cmap.N)) if len(set(c[:3])) > 1]
    return {label: {"color": colours[i % len(colours)], "marker": MARKERS[i % len(MARKERS)],
                    "linestyle": ("-", "--", ":")[(i // len(colours)) % 3]} for i, label in enumerate(labels)}


# Characters of 10-point legend text that fit across WIDTH_PX, the handles and margins taken off.
LEGEND_CHARS = 84


def columns(names: Sequence[str]) -> int:
    """Two columns for more than four entries that each fit in half the width; else one."""
    return 2 if len(names) > 4 and max(map(len, names)) <= LEGEND_CHARS // 2 - 6 else 1


def laid_out(names: Sequence[str], ncol: int = 0) -> tuple[list[str], int]:
    """The legend's entries, each wrapped to its column's width (a long group name on several lines, never
    cut at the figure's edge), and the columns."""
    ncol = ncol or columns(names)
    width = LEGEND_CHARS // ncol - (6 if ncol > 1 else 0)
    return [textwrap.fill(n, width, subsequent_indent="  ", break_on_hyphens=False) for n in names], ncol


def legend(fig, handles: list, names: list[str], ncol: int) -> None:
    """Below the plot, in columns, inside the figure (the layout leaves it room: ``legend_in``)."""
    fig.legend(handles, names, loc="outside lower center", ncol=ncol, fontsize=10, frameon=False)


def legend_in(names: Sequence[str], ncol: int) -> float:
    """The height, in inches, a legend of ``names`` (as ``laid_out`` wraps them) needs below the plot."""
    rows = [names[i:i + ncol] for i in range(0, len(names), ncol)]
    return 0.2 + 0.24 * sum(max(n.count("\n") + 1 for n in row) for row in rows)


def draw_never(ax, figure: Figure, panel: int, style: dict[str, dict]) -> None:
    """Time to target: a dotted line above the points, marked "never" at its right end, and on it, hollow,
    each group's marker where its finished runs never reached the target; "2 of 3" beside a point that only
    some repeats reached."""
    mine = [s for s in figure.series if s.panel == panel]
    for s in mine:
        for x, y, text in s.notes:
            ax.annotate(text, (x, y), xytext=(6, 4), textcoords="offset points", fontsize=9,
                        color=style[s.label]["color"])
    if not any(s.never for s in mine):
        return
    top = max((y + (0 if math.isnan(e) else e) for s in mine for _, y, e in s.points), default=1.0)
    at = 1.15 * top if top > 0 else 1.0
    ax.axhline(at, color="gray", linestyle=":", linewidth=1)
    for s in (s for s in mine if s.never):
        ax.plot(s.never, [at] * len(s.never), linestyle="none", marker=style[s.label]["marker"], markersize=8,
                markerfacecolor="none", markeredgecolor=style[s.label]["color"])
    ax.set_ylim(0, at * 1.08)
    right = ax.secondary_yaxis("right")  # the line's name, at its right end, where no point can hide it
    right.set_yticks([at], ["never"], fontsize=10)


def legend_name(figure: Figure, label: str) -> str:
    """A group's name in a plot's legend, with "(never reached)" where the plot shows it only on that line."""
    mine = [s for s in figure.series if s.label == label]
    return f"{label} (never reached)" if any(s.never for s in mine) and not any(s.points for s in mine) else label


def draw_lines(plt, figure: Figure, style: dict[str, dict]):
    panels = figure.panels()
    named = list(dict.fromkeys(s.label for s in figure.series if s.highlight))
    grey = {s.label for s in figure.series} - set(named)
    names, ncol = laid_out([legend_name(figure, label) for label in named]
                           + ([f"{len(grey)} other group{'s' * (len(grey) > 1)} (grey)"] if grey else []))
    fig, axes = plt.subplots(len(panels), 1, figsize=(WIDTH_IN, 3.0 * len(panels) + 0.7 + legend_in(names, ncol)),
                             squeeze=False, sharex=len(panels) > 1, layout="constrained")
    handles: dict[str, object] = {}
    for ax, panel in zip(axes[:, 0], panels):
        for s in (s for s in figure.series if s.panel == panel):
            xs, ys, errs = zip(*s.points) if s.points else ((), (), ())
            if not s.highlight:
                ax.plot(xs, ys, color=GREY, linewidth=1, zorder=1)
                continue
            yerr = [0.0 if math.isnan(e) else e for e in errs] if any(not math.isnan(e) for e in errs) else None
            line = ax.errorbar(xs, ys, yerr=yerr, capsize=3 if yerr else 0, markersize=5, label=s.label,
                               zorder=2, **style[s.label])
            handles.setdefault(s.label, line)
        draw_never(ax, figure, panel, style)
        if not math.isnan(figure.line_at):
            ax.axhline(figure.line_at, color="gray", linestyle="--", linewidth=1)
        if figure.log_x:
            ax.set_xscale("log", base=2)
            ticks = sorted({x for s in figure.series for x, _, _ in s.points} | {x for s in figure.series
                                                                                  for x in s.never})
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_ylabel(figure.y, fontsize=11)
        ax.grid(True, alpha=0.3)
        if len(panels) > 1:
            ax.set_title(f"{panel} workers", fontsize=11, loc="left")
    axes[-1, 0].set_xlabel(figure.x, fontsize=11)
    fig.suptitle(textwrap.fill(figure.title, TITLE_CHARS), fontsize=11)
    shown = [(handles[label], name) for label, name in zip(named, names) if label in handles]
    if grey:
        shown.append((plt.Line2D([], [], color=GREY, linewidth=1), names[-1]))
    legend(fig, [h for h, _ in shown], [n for _, n in shown], ncol)
    return fig


def draw_bars(plt, figure: Figure):
    names = [s.label for s in figure.series]
    phases, ncol = laid_out(PHASES, len(PHASES))
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.32 * len(names) + 1.2 + legend_in(phases, ncol)),
                           layout="constrained")
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
    fig.suptitle(textwrap.fill(figure.title, TITLE_CHARS), fontsize=11)
    legend(fig, handles, phases, ncol)
    return fig


def write_figures(figures: Sequence[Figure], out_dir: str | Path) -> dict[str, list[str]]:
    """Each figure as OUT_DIR/NAME.png, WIDTH_PX wide; returns {file name: the labels it shows}."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = sorted({s.label for f in figures if f.kind == "line" for s in f.series})
    style = styles(plt, labels)
    written = {}
    for figure in figures:
        fig = draw_bars(plt, figure) if figure.kind == "bars" else draw_lines(plt, figure, style)
        fig.savefig(out / f"{figure.name}.png", dpi=DPI)  # the figure's own size: no cropping
        plt.close(fig)
        written[f"{figure.name}.png"] = list(dict.fromkeys(s.label for s in figure.series))
    return written


def images(figures: Sequence[Figure]) -> dict[str, bytes]:
    """The figures as PNG data, by caption (for the html page)."""
    with tempfile.TemporaryDirectory() as tmp:
        write_figures(figures, tmp)
        return {figure.caption or figure.title: (Path(tmp) / f"{figure.name}.png").read_bytes() for figure in figures}
