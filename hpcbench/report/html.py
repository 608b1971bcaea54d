"""``report --format html``: one self-contained page (tables, and the plots embedded as PNG data)."""
from __future__ import annotations

import base64
import html
from datetime import datetime, timezone
from typing import Mapping

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
p.note { color: #555; max-width: 70em; }
figure { display: inline-block; margin: 0 1em 1em 0; }
img { max-width: 640px; border: 1px solid #ddd; }
"""


def title_html(text: str) -> str:
    return f"<h2>{html.escape(text)}</h2>"


def note_html(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def page(body: list[str], plots: Mapping[str, bytes], sources: int) -> str:
    """The page: ``body`` (already HTML: headings, notes, tables), then each plot as an <img> whose
    data is in the page, so the one file can be mailed or attached to a CI run."""
    figures = [f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
               f"<figcaption>{html.escape(name)}</figcaption></figure>" for name, png in plots.items()]
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', "<title>hpcbench report</title>",
             f"<style>{STYLE}</style></head><body>", "<h1>hpcbench report</h1>",
             note_html(f"{sources} result files; written {stamp}"), *body]
    if figures:
        parts += [title_html("Plots"), *figures]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
