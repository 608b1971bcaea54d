"""``report --format html``: one self-contained page that answers first (the headline), then shows the
plots, then narrow tables with every column a click away. Plots are embedded as PNG data."""
from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from datetime import datetime, timezone

# No horizontal scroll from 800 px up: a table wider than the page scrolls in its own box, and the plots
# (drawn 720 px wide) are shown at their size there, shrinking only on a narrower screen.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; padding: 0 1em; max-width: 1200px; color: #222;
       line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
section#headline { background: #f5f8fc; border: 1px solid #cdd9e8; border-radius: 6px; padding: 0.2em 1.2em 0.6em; }
section#headline li { margin: 0.2em 0; }
p.note { color: #555; max-width: 60em; }
p.capped { color: #8a1c00; font-weight: bold; }
div.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
details { margin-bottom: 1.5em; } summary { cursor: pointer; color: #1f4e8c; }
figure { margin: 0 0 1.5em; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.9em; max-width: 50em; }
"""


def title_html(text: str) -> str:
    return f"<h2>{html.escape(text)}</h2>"


def note_html(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, from a PNG's header."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def figures_html(images: Mapping[str, bytes], missing: str = "") -> str:
    """The plots section: each plot as an <img> of its own size whose data is in the page (so the one file
    can be mailed or attached to a CI run), under its caption (``images``' keys, sentences saying what
    each shows), or ``missing``: why there are none."""
    figures = []
    for caption, png in images.items():
        width, height = png_size(png)
        figures.append(f'<figure><img alt="{html.escape(caption)}" width="{width}" height="{height}" '
                       f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                       f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    if not figures and not missing:
        return ""
    return '<section id="plots">' + title_html("Plots") + (note_html(missing) if missing else "") + "".join(figures) \
        + "</section>"


def page(body: list[str], sources: int) -> str:
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">', "<title>hpcbench report</title>",
             f"<style>{STYLE}</style></head><body>", "<h1>hpcbench report</h1>",
             note_html(f"{sources} result files; written {stamp}"), *body, "</body></html>"]
    return "\n".join(parts) + "\n"
