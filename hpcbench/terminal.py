"""What the commands that run many runs print (demo, sweep --local, tune, reproduce) fits a terminal of
COLUMNS characters: a line per finished run made to fit, long lines wrapped, a report's tables too wide
for it left to the file they are in."""
from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

COLUMNS = 120

# The parts of a run's result line (runtime.output.result_line) a study's count of finished runs keeps.
_WORKERS = re.compile(r"^\S+ \((?:mpi|sim), \d+ workers(?:, (\d+ of \d+ lost))?\): ")
_TIME = re.compile(r" samples in ([\d.]+ s)( of virtual time)? = (\d+) samples/s, ")
_ACCURACY = re.compile(r"final accuracy ([\d.]+|nan)")
_VALIDATION = re.compile(r"\(validation ([\d.]+)\)")
_DROPPED = re.compile(r", (\d+) gradients dropped")


def result_briefs(line: str) -> list[str]:
    """A run's result line, shortened for a line that already names the run: [its result with the rate and
    time, the result alone, the result in short words]. The result is the final accuracy (or "timing only")
    and validation accuracy, and, where they apply, the workers lost, the gradients dropped, a model that
    diverged and a cap that cut the run. A line of another shape is kept whole, as the first."""
    workers, time = _WORKERS.match(line), _TIME.search(line)
    if workers is None or time is None:
        return [line.split(" -> ")[0]]
    accuracy, validation = _ACCURACY.search(line), _VALIDATION.search(line)
    dropped = _DROPPED.search(line)
    notes = [*([workers.group(1)] if workers.group(1) else []),
             *([f"{dropped.group(1)} gradients dropped"] if dropped and dropped.group(1) != "0" else []),
             *(["DIVERGED"] if "the model diverged" in line else []),
             *(["capped"] if "[capped at " in line else [])]
    rate_time = [f"{time.group(3)} samples/s", time.group(1) + (" virtual" if time.group(2) else "")]

    def result(acc: str, val: str) -> list[str]:
        score = [f"{acc} {accuracy.group(1)}"] if accuracy else ["timing only"]
        return score + ([f"{val} {validation.group(1)}"] if validation else [])

    return [", ".join(result("accuracy", "validation") + notes + rate_time),
            ", ".join(result("accuracy", "validation") + notes),
            ", ".join(result("acc", "val") + notes)]


def fitted(counts: Sequence[str], label: str, briefs: Sequence[str], width: int = COLUMNS) -> str:
    """``COUNT LABEL: BRIEF`` in ``width`` columns: the longest brief that fits with a count that says the time
    left (any of ``counts`` but the last, the longest first), else with the last (the bare count), and where
    none fits, the shortest of each with the label cut short."""
    timed = counts[:-1] or counts
    for count, brief in [*((c, b) for b in briefs for c in timed), *((counts[-1], b) for b in briefs)]:
        line = f"{count} {label}: {brief}"
        if len(line) <= width:
            return line
    head, tail = counts[-1], briefs[-1]
    room = width - len(head) - len(tail) - 3
    return f"{head} {label[:max(room - 1, 0)]}…: {tail}"[:width]


def wrapped(text: str, width: int = COLUMNS) -> str:
    """Each line of ``text`` in ``width`` columns: a longer one broken between words, its continuation lines
    indented under its first (past a list's marker), a table's rows wrapped as prose."""
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        spaces, marker = re.match(r"^(\s*)((?:[-*] |\d+\. )?)", line).groups()  # type: ignore[union-attr]
        hang = " " * (len(spaces) + (len(marker) or 2))  # under a list item's text, else two further in
        out += textwrap.wrap(line, width, subsequent_indent=hang, break_on_hyphens=False) or [line[:width]]
    return "\n".join(out)


def for_terminal(markdown: str, where: str, width: int = COLUMNS) -> str:
    """A Markdown report as a terminal shows it in ``width`` columns: prose wrapped (``wrapped``), and a table
    too wide for them said in one line naming the file that holds it (``where``)."""
    lines, out = markdown.splitlines(), []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            table = lines[i:j]
            if max(map(len, table)) <= width:
                out += table
            else:
                columns = table[0].strip().strip("|").count("|") + 1
                out.append(wrapped(f"(here a table of {j - i - 2} row(s) and {columns} columns, "
                                   f"{max(map(len, table))} characters wide: it is in {where})", width))
            i = j
            continue
        out.append(wrapped(lines[i], width))
        i += 1
    return "\n".join(out)
