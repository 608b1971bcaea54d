"""What a reader checks of a result file: before reading, what would stop it (``unreadable``); after,
what in the record it could not rely on (``malformed``), and then whether every value can be what its name
means (``impossible``), against the declarations of ``results/schema.py``.
"""
from __future__ import annotations

import math
from typing import Any

import h5py
import numpy as np

from hpcbench.memory import memory_bytes
from hpcbench.results.paths import mib
from hpcbench.results.schema import (
    ACCURACIES,
    ALGORITHM_NAMES,
    ATTR_TYPES,
    CONFIG_LEAST,
    COUNTS,
    GROUPS,
    LAST_EVALUATION,
    MODES,
    NOT_NEGATIVE,
    OLD_STATUSES,
    PROVENANCE_PER_RANK,
    READ_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    SUMMARY_COUNTS,
    UPDATES,
    RunRecord,
)

# What reading a variable-length element takes beyond its contents: its pointer and the Python object
# behind it (bytes, str or an array).
PY_OBJECT_BYTES = 128
# Reading is bounded by what a file holds, not what it declares: beyond FREELY_READ bytes, a file may declare
# at most HELD_RATIO times its size on disk (hpcbench's own hold at least a fifth of what they declare: gzip
# level 1 on times and codes; chunks never written or compressed zeros hold next to nothing).
FREELY_READ = 64 << 20
HELD_RATIO = 50


def unreadable(f: h5py.File, depth: int = 4) -> str:
    """What would stop a reader before it reads anything, in a few words ("" when nothing): a soft or
    external link (which can loop or leave the file; hpcbench writes none), groups nested deeper than
    hpcbench's, a dataset where it writes a group, or more than half this machine's memory to read
    (``read_bytes``), or more than it holds allows (``HELD_RATIO``)."""
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
    size = f.id.get_filesize()
    text = max(0, size - stored)  # attributes and variable-length contents, read as stored
    if declared + text > budget:
        what = biggest[1] if biggest[0] >= text else f"{mib(text)} of it in attributes and variable-length text"
        return (f"reading it would take {mib(declared + text)}, more than half this machine's memory "
                f"({mib(2 * budget)}); {what}")
    if declared > max(FREELY_READ, HELD_RATIO * size):
        return (f"it declares {mib(declared)} of data in {mib(size)} on disk, more than {HELD_RATIO} times what "
                f"it holds (chunks never written, or compressed far beyond what hpcbench writes); {biggest[1]}")
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
    types, modes and statuses of ``results/schema.py``, an algorithm hpcbench has and the settings of the
    file's own algorithm, model and data set, counts that add up (workers and ranks, every
    per-rank list), numbers where readers do arithmetic, columns of numbers of one length each, one-dimensional.
    What the values mean is ``impossible``'s to check."""
    a = rec.attrs
    for key, kind in ATTR_TYPES.items():
        if not isinstance(a[key], kind) or (kind is int and isinstance(a[key], bool)):
            return f"attribute {key} = {a[key]!r} is not a {kind.__name__}"
    if a["mode"] not in MODES:
        return f"mode {a['mode']!r} is not one of {', '.join(MODES)}"
    if a["algorithm"] not in ALGORITHM_NAMES:
        return f"algorithm {a['algorithm']!r} is not one of {', '.join(ALGORITHM_NAMES)} (a newer hpcbench's?)"
    for key, attr in (("algo", "algorithm"), ("model", "model"), ("dataset", "dataset")):
        if key in a["config"] and a["config"][key] != a[attr]:
            return f"config {key} = {a['config'][key]!r} is not the file's {attr} {a[attr]!r}"
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
        if not is_number(value):
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
    return model_wrong(rec) or shapes_wrong(rec)


def whole(column: np.ndarray, low: int, high: int, kinds: str = "iu") -> bool:
    """Whole numbers of one of ``kinds`` (a float one where "f" is among them), each in low..high-1."""
    if column.dtype.kind not in kinds:
        return False
    if column.dtype.kind == "f" and not np.all(np.isfinite(column) & (column == np.floor(column))):
        return False
    return bool(np.all((column >= low) & (column < high)))


def shapes_wrong(rec: RunRecord) -> str:
    """The schema version, the timeline's names, and columns of one dimension (``malformed`` checked
    their types and lengths first)."""
    if rec.attrs["schema_version"] < 1:
        return f"schema_version {rec.attrs['schema_version']} is not one hpcbench wrote (1..{SCHEMA_VERSION})"
    for kind, listed in (("phases", rec.phases), ("ops", rec.ops)):
        if not listed or not all(isinstance(n, str) for n in listed):
            return f"timeline's {kind} attribute {list(listed)!r} is not a list of names"
    columns = [*rec.timeline.values(), *rec.evals.values(), *(c for t in rec.tables.values() for c in t.values())]
    if any(c.ndim != 1 for c in columns):
        return "a timeline, evals or server column is not one-dimensional"
    return ""


def shown(value: Any) -> str:
    """A value from a file as a refusal names it: 7.0, -5, nan, inf."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def first_row(where: str, column: np.ndarray, bad: np.ndarray, why: str) -> str:
    """The first row of ``column`` that ``bad`` marks, named with its value and ``why`` ("" when none)."""
    rows = np.flatnonzero(bad)
    if not rows.size:
        return ""
    i = int(rows[0])
    more = f" (and {rows.size - 1} more row{'s' if rows.size > 2 else ''})" if rows.size > 1 else ""
    return f"{where} = {shown(column[i])} at row {i}{more}: {why}"


def as_float(column: np.ndarray) -> np.ndarray:
    return np.asarray(column, dtype=np.float64)


def impossible(rec: RunRecord) -> str:
    """The first value in ``rec`` that cannot be what its name means, named with where it is and the value
    ("" when none): ranks and workers within the world, phase and op codes among the names the file gives,
    finite times that do not run backwards (a timeline row ends after it starts, evaluations come in time
    order, within the run), counts that are finite and not negative (``schema.COUNTS``, ``SUMMARY_COUNTS``), accuracies
    within 0..1 (NaN where not measured: ``schema.ACCURACIES``), losses, rates and the like never negative
    (``schema.NOT_NEGATIVE``), durations not negative, and what one part of the file repeats from another
    the same (the summary's last evaluation and best accuracy, a staleness and its versions, the validation
    split scored with the test set at the last evaluation). ``malformed``
    checked the types, lengths and shapes first."""
    return (codes_wrong(rec) or times_wrong(rec) or columns_wrong(rec) or summary_wrong(rec) or repeats_wrong(rec)
            or kept_wrong(rec))


def codes_wrong(rec: RunRecord) -> str:
    a, tl = rec.attrs, rec.timeline
    for name, high in (("rank", a["world_size"]), ("phase", len(rec.phases)), ("op", len(rec.ops))):
        said = code_wrong(f"timeline/{name}", tl[name], high, "iu", f"not a whole number within 0..{high - 1}")
        if said:
            return said
    for name, table in rec.tables.items():
        said = code_wrong(f"server/{name}/worker", table["worker"], a["world_size"], "iuf",
                          f"names a worker outside 1..{a['workers']}")
        if said:
            return said
    return ""


def code_wrong(where: str, column: np.ndarray, high: int, kinds: str, why: str) -> str:
    """Where ``column`` is not whole numbers of ``kinds`` within 0..high-1 (``whole``): its first row that is
    not, with ``why``; a column of another type, in a line of its own ("" when it is)."""
    if whole(column, 0, high, kinds):
        return ""
    values = as_float(column)
    bad = ~(np.isfinite(values) & (values == np.floor(values)) & (values >= 0) & (values < high))
    return first_row(where, column, bad, why) or f"{where} holds values outside 0..{high - 1} (or not whole numbers)"


def times_wrong(rec: RunRecord) -> str:
    tl, evals = rec.timeline, rec.evals
    for where, column in (("timeline/t_start", tl["t_start"]), ("timeline/t_end", tl["t_end"]),
                          ("evals/t", evals["t"]), ("timeline/clock_offset_s", rec.clock_offsets),
                          *((f"server/{name}/t", table["t"]) for name, table in rec.tables.items())):
        said = first_row(where, column, ~np.isfinite(as_float(column)), "a time that is not finite")
        if said:
            return said
    start, end = as_float(tl["t_start"]), as_float(tl["t_end"])
    said = first_row("timeline/t_end", tl["t_end"], end < start, "before the row's t_start (a negative duration)")
    if said:
        i = int(np.flatnonzero(end < start)[0])
        return f"{said}, t_start = {shown(tl['t_start'][i])}"
    t = as_float(evals["t"])
    said = first_row("evals/t", evals["t"], t < 0, "before the run began (evaluation times count from its start)")
    if said:
        return said
    # The run ends with wall_s, or with rank 0's last operation where it reads the workers' final models
    # after them (a decentralised run's last evaluation comes after those reads).
    wall = rec.summary.get("wall_s", math.nan)
    if is_number(wall) and math.isfinite(wall) and wall >= 0:  # (a negative one is summary_wrong's to say)
        last = max(wall, float(np.max(end))) if end.size else wall
        late = t > last + max(1.0, 0.01 * last)
    else:
        late = np.zeros(t.shape, bool)
    said = first_row("evals/t", evals["t"], late, f"after the run's end (wall_s = {shown(wall)}, its last "
                                                   "timeline row ends before)")
    if said:
        return said
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        i = int(back[0]) + 1
        return (f"evals/t = {shown(evals['t'][i])} at row {i}: before the evaluation above it "
                f"({shown(evals['t'][i - 1])}); evaluation times do not run backwards")
    return ""


def columns_wrong(rec: RunRecord) -> str:
    """Each column against ``schema.COUNTS``, ``ACCURACIES`` and ``NOT_NEGATIVE`` (server tables by column name)."""
    parts = [("timeline", "timeline", rec.timeline), ("evals", "evals", rec.evals),
             *((f"server/{name}", "server", table) for name, table in rec.tables.items())]
    for where, kind, columns in parts:
        for name, column in columns.items():
            values = as_float(column)
            if name in COUNTS.get(kind, ()):
                said = first_row(f"{where}/{name}", column, ~(np.isfinite(values) & (values >= 0)),
                                 "not a count (finite and never negative)")
            elif name in ACCURACIES.get(kind, ()):
                said = first_row(f"{where}/{name}", column, ~(np.isnan(values) | ((values >= 0) & (values <= 1))),
                                 "not an accuracy (0 to 1, NaN where not measured)")
            elif name in NOT_NEGATIVE.get(kind, ()):
                said = first_row(f"{where}/{name}", column, values < 0, "negative, which it never is")
            else:
                continue
            if said:
                return said
    return ""


def summary_wrong(rec: RunRecord) -> str:
    for key, value in rec.summary.items():
        if key in SUMMARY_COUNTS and not (math.isfinite(value) and value >= 0):
            return f"summary {key} = {shown(value)} is not a finite count (never negative)"
        if key.endswith("_s") and not key.endswith("_per_s") and (value < 0 or value == math.inf):
            return (f"summary {key} = {shown(value)} is not a duration (finite and never negative; NaN where not "
                    "measured)")
        if key in ACCURACIES["summary"] and not (math.isnan(value) or 0 <= value <= 1):
            return f"summary {key} = {shown(value)} is not an accuracy (0 to 1, NaN where not measured)"
        if key in NOT_NEGATIVE["summary"] and value < 0:
            return f"summary {key} = {shown(value)} is negative, which it never is"
    return ""


def kept_wrong(rec: RunRecord) -> str:
    """The samples a run kept against its time and its budget: ``samples_per_s`` is samples / wall_s, a run
    that trained took time, and no run keeps more than its budget, one team step over it (each worker's
    last batch) and what it lost."""
    s, config = rec.summary, rec.attrs["config"]
    wall, samples, rate = (s.get(k, math.nan) for k in ("wall_s", "samples", "samples_per_s"))
    if not (all(is_number(v) for v in (wall, samples, rate)) and math.isfinite(wall) and math.isfinite(samples)):
        return ""  # (not measured, or not numbers: malformed's to say)
    if wall == 0 and samples > 0:
        return f"summary wall_s = 0 for a run that kept {shown(samples)} samples: training takes time"
    derived = samples / wall if wall > 0 else math.nan
    if not same(float(rate), derived):
        return (f"summary samples_per_s = {shown(rate)}, but samples / wall_s = {shown(derived)} "
                f"({shown(samples)} / {shown(wall)}): it is derived from them")
    budget, batch = config.get("budget_samples"), config.get("batch_size")
    if is_number(budget) and is_number(batch) and budget > 0:
        most = budget + s.get("samples_lost", 0) + rec.attrs["workers"] * batch
        if samples > most:
            return (f"summary samples = {shown(samples)}, more than a run of {shown(budget)} samples keeps (at most "
                    f"{shown(most)}: the budget, one batch more per worker and the samples it lost)")
    return ""


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


def repeats_wrong(rec: RunRecord) -> str:
    """What the summary repeats of the evaluations, and each update's staleness of its versions."""
    s, evals = rec.summary, rec.evals
    if len(evals["t"]):
        for key, column in LAST_EVALUATION.items():
            if key in s and not same(float(s[key]), float(evals[column][-1])):
                return (f"summary {key} = {shown(s[key])}, but the last evaluation's {column} is "
                        f"{shown(evals[column][-1])} (the summary repeats it)")
        held = rec.attrs["config"].get("val_size", 0)
        last, last_val = float(evals["accuracy"][-1]), float(evals["val_accuracy"][-1])
        if held > 0 and not math.isnan(last) and math.isnan(last_val):
            return (f"evals/val_accuracy = nan at the last evaluation, which scored the test set (accuracy "
                    f"{shown(last)}): a run that holds out a validation split (val_size {shown(held)}) scores it there")
        best = float(np.max(as_float(evals["accuracy"])))
        if "best_accuracy" in s and not same(float(s["best_accuracy"]), best):
            return (f"summary best_accuracy = {shown(s['best_accuracy'])}, but the evaluations' best accuracy is "
                    f"{shown(best)}")
    updates = rec.tables.get(UPDATES, {})
    if all(k in updates for k in ("staleness", "version_used", "version_applied")):
        expected = as_float(updates["version_applied"]) - as_float(updates["version_used"])
        said = first_row("server/updates/staleness", updates["staleness"], as_float(updates["staleness"]) != expected,
                         "not version_applied - version_used")
        if said:
            i = int(np.flatnonzero(as_float(updates["staleness"]) != expected)[0])
            return f"{said} ({shown(updates['version_applied'][i])} - {shown(updates['version_used'][i])})"
    return ""


def model_wrong(rec: RunRecord) -> str:
    if not numeric(rec.final_params) or rec.final_params.ndim != 1:
        return "model/final_params is not a vector of numbers"
    if not numeric(rec.clock_offsets) or len(rec.clock_offsets) != rec.attrs["world_size"]:
        return "timeline/clock_offset_s does not hold a number per rank"
    return ""
