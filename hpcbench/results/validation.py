"""What a reader checks of a result file: before reading, what would stop it (``unreadable``); after,
what in the record it could not rely on (``malformed``), against the declarations of ``results/schema.py``.
"""
from __future__ import annotations

import math
from typing import Any

import h5py
import numpy as np

from hpcbench.memory import memory_bytes
from hpcbench.results.paths import mib
from hpcbench.results.schema import (
    ATTR_TYPES,
    CONFIG_LEAST,
    GROUPS,
    MODES,
    OLD_STATUSES,
    PROVENANCE_PER_RANK,
    READ_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    SUMMARY_COUNTS,
    RunRecord,
)

# What reading a variable-length element takes beyond its contents: its pointer and the Python object
# behind it (bytes, str or an array).
PY_OBJECT_BYTES = 128


def unreadable(f: h5py.File, depth: int = 4) -> str:
    """What would stop a reader before it reads anything, in a few words ("" when nothing): a soft or
    external link (which can loop or leave the file; hpcbench writes none), groups nested deeper than
    hpcbench's, a dataset where it writes a group, or more than half this machine's memory to read
    (``read_bytes``)."""
    budget = memory_bytes() // 2
    declared = stored = 0
    biggest: tuple[int, str] = (0, "")
    todo: list[tuple[h5py.Group, int]] = [(f, 0)]
    while todo:
        group, level = todo.pop()
        for name in group:
            link = group.get(name, getlink=True)
            if not isinstance(link, h5py.HardLink):
                return f"{group.name.rstrip('/')}/{name} is a {type(link).__name__}, and hpcbench writes no links"
            member = group[name]
            if isinstance(member, h5py.Group):
                if level + 1 >= depth:
                    return f"{member.name} is nested deeper than a result file's groups"
                todo.append((member, level + 1))
            elif isinstance(member, h5py.Dataset):
                if (level == 0 and name in GROUPS) or group.name == "/server":
                    return f"{member.name} is a dataset, where hpcbench writes a group"
                size = read_bytes(member)
                declared += size
                stored += member.id.get_storage_size()
                biggest = max(biggest, (size, f"{member.name} alone {member.shape}"))
    text = max(0, f.id.get_filesize() - stored)  # attributes and variable-length contents, read as stored
    if declared + text > budget:
        what = biggest[1] if biggest[0] >= text else f"{mib(text)} of it in attributes and variable-length text"
        return (f"reading it would take {mib(declared + text)}, more than half this machine's memory "
                f"({mib(2 * budget)}); {what}")
    return ""


def read_bytes(dataset: h5py.Dataset) -> int:
    """What reading ``dataset`` takes, beyond the contents of its variable-length elements: its shape
    whatever is on disk (compressed, or chunks never written), and a Python object per variable-length
    element."""
    itemsize = dataset.dtype.itemsize
    if dataset.dtype.hasobject:
        itemsize += itemsize // 8 * PY_OBJECT_BYTES
    return int(np.prod(dataset.shape, dtype=object) or 0) * itemsize


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numeric(column: Any) -> bool:
    return isinstance(column, np.ndarray) and column.dtype.kind in "iufb"


def malformed(rec: RunRecord) -> str:
    """What in ``rec`` a reader could not rely on, in a few words ("" when it is well-formed): the
    types, modes and statuses of ``results/schema.py``, counts that add up (workers and ranks, every
    per-rank list), numbers where readers do arithmetic, columns of numbers of one length each."""
    a = rec.attrs
    for key, kind in ATTR_TYPES.items():
        if not isinstance(a[key], kind) or (kind is int and isinstance(a[key], bool)):
            return f"attribute {key} = {a[key]!r} is not a {kind.__name__}"
    if a["mode"] not in MODES:
        return f"mode {a['mode']!r} is not one of {', '.join(MODES)}"
    if a["status"] not in STATUSES + OLD_STATUSES:
        return f"status {a['status']!r} is not one of {', '.join(STATUSES)}"
    if a["workers"] < 1 or a["world_size"] != a["workers"] + 1:
        return f"{a['workers']} workers in a world of {a['world_size']} ranks"
    for key, least in CONFIG_LEAST.items():
        value = a["config"].get(key, least)
        if not is_number(value) or not value >= least:
            return f"config {key} = {value!r} is not a number >= {least}"
    schedule = a["config"].get("schedule", {})
    if not isinstance(schedule, dict) or not is_number(schedule.get("lr", 0.0)):
        return f"config schedule = {schedule!r} is not a schedule"
    for key, value in rec.summary.items():
        if not is_number(value) or (key in SUMMARY_COUNTS and not value >= 0):
            return f"summary {key} = {value!r} is not a {'count' if key in SUMMARY_COUNTS else 'number'}"
    for where, values in (("provenance", rec.provenance), ("simulation", rec.simulation)):
        odd = [k for k, v in values.items() if not isinstance(v, (str, int, float))]
        if odd:
            return f"{where} {odd[0]} = {values[odd[0]]!r} is not text or a number"
    odd = [k for k, v in rec.per_rank.items() if not all(isinstance(x, str) for x in v)]
    if odd:
        return f"provenance/{odd[0]} is not a list of text"
    for key in PROVENANCE_PER_RANK:  # the host of every rank; the other lists where a file has them
        if (key == "hostnames" or key in rec.per_rank) and len(rec.per_rank.get(key, ())) != a["world_size"]:
            return f"provenance/{key} does not list the {a['world_size']} ranks"
    parts = {"timeline": (rec.timeline, READ_COLUMNS["timeline"]), "evals": (rec.evals, READ_COLUMNS["evals"]),
             **{f"server/{name}": (table, READ_COLUMNS["server"]) for name, table in rec.tables.items()}}
    for where, (columns, needed) in parts.items():
        missing = [n for n in needed if n not in columns]
        if missing:
            return f"{where} has no {', '.join(missing)}"
        if not all(numeric(c) for c in columns.values()) or len({len(c) for c in columns.values()}) > 1:
            return f"{where}'s columns are not numbers of one length"
    return model_wrong(rec) or values_wrong(rec)


def whole(column: np.ndarray, low: int, high: int, kinds: str = "iu") -> bool:
    """Whole numbers of one of ``kinds`` (a float one where "f" is among them), each in low..high-1."""
    if column.dtype.kind not in kinds:
        return False
    if column.dtype.kind == "f" and not np.all(np.isfinite(column) & (column == np.floor(column))):
        return False
    return bool(np.all((column >= low) & (column < high)))


def values_wrong(rec: RunRecord) -> str:
    """The values readers compute with, checked against what they can be: ranks and workers within the
    world, phase and op codes among the names the file gives, finite times that do not run backwards,
    finite counts (``malformed`` checked their types and lengths first)."""
    a, tl = rec.attrs, rec.timeline
    if a["schema_version"] < 1:
        return f"schema_version {a['schema_version']} is not one hpcbench wrote (1..{SCHEMA_VERSION})"
    for key in SUMMARY_COUNTS:
        if key in rec.summary and not math.isfinite(rec.summary[key]):
            return f"summary {key} = {rec.summary[key]!r} is not a finite count"
    negative = [k for k, v in rec.summary.items() if k.endswith("_s") and v < 0]
    if negative:
        return f"summary {negative[0]} = {rec.summary[negative[0]]!r} is a negative duration"
    names = {"phases": rec.phases, "ops": rec.ops}
    for kind, listed in names.items():
        if not listed or not all(isinstance(n, str) for n in listed):
            return f"timeline's {kind} attribute {list(listed)!r} is not a list of names"
    columns = [*tl.values(), *rec.evals.values(), *(c for t in rec.tables.values() for c in t.values())]
    if any(c.ndim != 1 for c in columns):
        return "a timeline, evals or server column is not one-dimensional"
    for name, high in (("rank", a["world_size"]), ("phase", len(rec.phases)), ("op", len(rec.ops))):
        if not whole(tl[name], 0, high):
            return f"timeline/{name} holds values outside 0..{high - 1} (or not whole numbers)"
    if not (np.all(np.isfinite(tl["t_start"])) and np.all(np.isfinite(tl["t_end"]))):
        return "timeline/t_start or t_end holds a time that is not finite"
    if np.any(tl["t_end"] < tl["t_start"]):
        return "timeline/t_end is before t_start (a negative duration)"
    if not all(np.all(np.isfinite(rec.evals[k])) for k in ("t", "samples", "updates")):
        return "evals/t, samples or updates holds a value that is not finite"
    for name, table in rec.tables.items():
        if not whole(table["worker"], 0, a["world_size"], "iuf") or not np.all(np.isfinite(table["t"])):
            return f"server/{name} names a worker outside 1..{a['workers']} or a time that is not finite"
    if not np.all(np.isfinite(rec.clock_offsets)):
        return "timeline/clock_offset_s holds an offset that is not finite"
    return ""


def model_wrong(rec: RunRecord) -> str:
    if not numeric(rec.final_params) or rec.final_params.ndim != 1:
        return "model/final_params is not a vector of numbers"
    if not numeric(rec.clock_offsets) or len(rec.clock_offsets) != rec.attrs["world_size"]:
        return "timeline/clock_offset_s does not hold a number per rank"
    return ""
