"""Write and read result files (the only module that imports h5py).

A file is built in memory with status "running", marked with its final status ("ok", or how a failed
run ended) last, written out in one go, then given its name without replacing anything
(``paths.move_into_place``). On Linux the bytes go to a file with no name until all are there (``O_TMPFILE``),
so a writer killed meanwhile, even by SIGKILL, leaves nothing; elsewhere to a temporary ``.partial``
name of its own run. Never a file that reads as complete, and no run's result is lost to another's.
"""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcbench.errors import ResultWriteError, UsageError
from hpcbench.memory import memory_bytes
from hpcbench.results.paths import held, identity, mib, move_into_place, partial_name, run_id
from hpcbench.results.schema import (
    ATTR_TYPES,
    CONFIG_LEAST,
    MODES,
    OLD_STATUSES,
    PROVENANCE_PER_RANK,
    READ_COLUMNS,
    ROOT_ATTRS,
    SCHEMA_VERSION,
    STATUSES,
    SUMMARY_COUNTS,
    RunRecord,
    undeclared,
)

STRING = h5py.string_dtype()
CONFIG_MAX_CHARS = 1 << 20


def _attr(value: Any) -> Any:
    # HDF5's variable-length strings cannot hold a NUL byte (Open MPI's library version ends in one):
    # strings are written without them, in JSON too, where they are escaped.
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value).replace("\\u0000", "")
    if value is None:
        return ""
    if isinstance(value, str):
        return _text(value)
    return value


def _text(value: str) -> str:
    return str(value).replace("\x00", "")  # plain str: h5py refuses subclasses such as torch's TorchVersion


def _columns(group: h5py.Group, columns: dict[str, np.ndarray]) -> None:
    for name, values in columns.items():
        values = np.asarray(values)
        big = values.size > 4096
        group.create_dataset(name, data=values, chunks=True if big else None,
                             compression="gzip" if big else None, compression_opts=1 if big else None)


def write_run(path: str | os.PathLike, rec: RunRecord, overwrite: bool = False) -> Path:
    """Write the result; → where it went: ``path``, or a sibling name if another run took ``path``
    while this one ran (``overwrite``: replace a regular file that is there)."""
    final = Path(path)
    rid = run_id()
    partial = partial_name(final, rid)
    _write_file(partial, rec, final)
    return move_into_place(partial, final, overwrite, rid)


def rewrite_run(path: str | os.PathLike, rec: RunRecord, mine: tuple[int, int] | None = None) -> bool:
    """Replace this run's own file at ``path`` whole (under a temporary name, then renamed over it):
    a kill at any instant leaves either the previous file or this one, never a torn one. ``mine``: the
    file (device, inode) this run wrote last; when another is there once the new one is ready to be
    renamed (something replaced it meanwhile, however long the write took), it is left alone: → False."""
    final = Path(path)
    partial = partial_name(final, run_id())
    _write_file(partial, rec, final)
    if mine is not None and identity(final) != mine:
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, final)
    return True


def _write_file(partial: Path, rec: RunRecord, final: Path) -> None:
    """``rec`` into a new file at ``partial``; on failure nothing is left there and the error names
    ``final`` and the cause in one line (a full disk, a file-size limit, a permission)."""
    unknown = undeclared(rec)
    if unknown:
        raise ValueError(f"names not declared in hpcbench/results/schema.py: {', '.join(unknown)}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        # Built in memory, then written out in one go: the file exists on disk only for that write.
        with h5py.File(partial.name, "w", driver="core", backing_store=False) as f:
            for key, value in rec.attrs.items():
                f.attrs[key] = _attr(value)
            f.attrs["schema_version"] = SCHEMA_VERSION
            f.attrs["status"] = "running"
            prov = f.create_group("provenance")
            for key, value in rec.provenance.items():
                prov.attrs[key] = _attr(value)
            for key, values in rec.per_rank.items():
                prov.create_dataset(key, data=np.asarray([_text(v) for v in values], dtype=object), dtype=STRING)
            tl = f.create_group("timeline")
            tl.attrs["clock"] = "seconds since the run started, on rank 0's MPI_Wtime (virtual time in sim mode)"
            tl.attrs["phases"] = json.dumps(list(rec.phases))
            tl.attrs["ops"] = json.dumps(list(rec.ops))
            columns = dict(rec.timeline)
            _columns(tl, {k: v for k, v in columns.items() if k not in ("phase", "op")})
            for name, names in (("phase", rec.phases), ("op", rec.ops)):
                kind = h5py.enum_dtype({p: i for i, p in enumerate(names)}, basetype="u1")
                codes = columns[name].astype(np.uint8)
                tl.create_dataset(name, data=codes, dtype=kind, chunks=True if codes.size > 4096 else None)
            tl.create_dataset("clock_offset_s", data=rec.clock_offsets)
            _columns(f.create_group("evals"), rec.evals)
            server = f.create_group("server")
            for name, table in rec.tables.items():
                _columns(server.create_group(name), table)
            summary = f.create_group("summary")
            for key, value in rec.summary.items():
                summary.attrs[key] = _attr(value)
            model = f.create_group("model")
            model.create_dataset("final_params", data=rec.final_params)
            model.attrs["parameters"] = int(rec.final_params.size)
            if rec.simulation:
                sim = f.create_group("simulation")
                for key, value in rec.simulation.items():
                    sim.attrs[key] = _attr(value)
            f.attrs["status"] = _attr(rec.attrs.get("status", "ok"))
            f.flush()
            image = f.id.get_file_image()
        _store(image, partial)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ResultWriteError(f"could not write the result file {str(final)!r}: {cause(exc)}") from None
        raise


def _store(image: bytes, partial: Path) -> None:
    """The file's bytes at ``partial``, named only once all are written where the system allows."""
    unnamed = _unnamed_file(partial.parent)
    fd = unnamed if unnamed is not None else os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view):]
        if unnamed is not None:  # complete: now it may have a name
            _name(fd, partial)
    finally:
        os.close(fd)


def _name(fd: int, path: Path) -> None:
    """Give the unnamed file open as ``fd`` the name ``path``: linkat(2) with AT_SYMLINK_FOLLOW on its
    /proc/self/fd entry (os.link takes that path only when given a directory descriptor)."""
    root = os.open("/", os.O_RDONLY)
    try:
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=root, follow_symlinks=True)
    finally:
        os.close(root)


def _unnamed_file(directory: Path) -> int | None:
    """A descriptor of a new file in ``directory`` that has no name yet (Linux's O_TMPFILE), or None
    where the system or the file system cannot make one."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not Path("/proc/self/fd").is_dir():
        return None
    try:
        return os.open(directory, flag | os.O_RDWR, 0o644)
    except OSError:
        return None


def cause(exc: OSError) -> str:
    """An OSError's cause in a few words: h5py's own messages wrap the system's."""
    if exc.errno is not None and exc.strerror:
        return f"{exc.strerror} (errno {exc.errno})"
    text = str(exc)
    for errno_name, words in (("ENOSPC", "No space left on device"), ("EFBIG", "File too large")):
        if errno_name in text or words.lower() in text.lower():
            return words
    return text.splitlines()[0] if text else type(exc).__name__


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_columns(group: h5py.Group) -> dict[str, np.ndarray]:
    return {name: group[name][()] for name in group}


def result_status(path: str | os.PathLike) -> str | None:
    """The ``status`` of the result file at ``path``; None when there is none or it cannot be read."""
    try:
        with h5py.File(path, "r") as f:
            return str(_plain(f.attrs.get("status", ""))) or None
    except (OSError, FileNotFoundError):
        return None


def promote_partials(final: str | os.PathLike) -> list[str]:
    """Finish the renames killed runs left undone: a complete ``NAME.h5.RID.partial`` beside ``final``
    (a kill between writing a result's last image and renaming it over the file) whose run is gone
    (nobody holds the name) takes ``final``'s name when that holds less: no file, an unreadable one, or
    one that says the run had not finished. → a line for each file promoted."""
    target = Path(final)
    said: list[str] = []
    for partial in sorted(target.parent.glob(f"{glob_escape(target.name)}.*.partial")):
        if held(target):
            break  # its run is alive and may be renaming it now
        if not partial.is_file():
            continue
        try:
            status = read_run(partial).attrs["status"]
        except UsageError:
            continue  # torn, or not a run's: left as it is
        if status in ("incomplete", "running") or result_status(target) not in (None, "incomplete", "running"):
            continue
        os.replace(partial, target)
        said.append(f"{partial} was a complete result ({status}) whose rename a killed run did not finish: "
                    f"it is now {target}")
    return said


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def step_cap_of(path: str | os.PathLike) -> int:
    """The ``max_steps`` the run at ``path`` was capped at (0: none, or no readable file), from its config alone."""
    try:
        with h5py.File(path, "r") as f:
            value = json.loads(str(_plain(f.attrs.get("config", "{}")))).get("max_steps", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and value > 0 else 0


def commit_of(path: str | os.PathLike) -> tuple[str, bool]:
    """(git commit, dirty) of the code that made the run at ``path``, from its provenance alone;
    ("unknown", False) where the file does not say."""
    try:
        with h5py.File(path, "r") as f:
            prov = f["provenance"].attrs
            return str(_plain(prov.get("git_commit", "unknown"))), bool(prov.get("git_dirty", False))
    except (OSError, KeyError, ValueError):
        return "unknown", False


def read_run(path: str | os.PathLike) -> RunRecord:
    """A result file as a ``RunRecord``; one line (``UsageError``) for anything that is not a complete,
    well-formed hpcbench result file this version can read (``malformed`` lists what is checked). A
    path that is not a regular file (a fifo, a device, a directory) is refused without opening it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UsageError(f"cannot read result file {str(path)!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a fifo" if stat.S_ISFIFO(mode) else "a device or socket"
        raise UsageError(f"{path} is not a regular file ({kind}), so not a result file")
    signed = True
    try:
        signed = h5py.is_hdf5(path)
        f = h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        if not signed:  # a README, a log, a file cut short before its header: h5py's words would not say so
            raise UsageError(f"cannot read result file {str(path)!r}: not HDF5 (hpcbench writes one HDF5 file per "
                             "run, NAME.h5)") from None
        raise UsageError(f"cannot read result file {str(path)!r}: {exc}") from None
    with f:
        try:
            wrong = unreadable(f)
            if wrong:
                raise UsageError(f"{path} is not a well-formed hpcbench result file ({wrong})")
            rec = _read(f, path)
        except UsageError:
            raise
        except RecursionError:
            raise UsageError(f"{path} is not a well-formed hpcbench result file (an attribute nested too deeply "
                             "to read)") from None
        except (KeyError, ValueError, TypeError, AttributeError, IndexError, OSError, RuntimeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise UsageError(f"{path} is not a well-formed hpcbench result file ({what})") from None
    wrong = malformed(rec)
    if wrong:
        raise UsageError(f"{path} is not a well-formed hpcbench result file ({wrong})")
    return rec


def unreadable(f: h5py.File, depth: int = 4) -> str:
    """What would stop a reader before it reads anything, in a few words ("" when nothing): a soft or
    external link (which can loop or leave the file; hpcbench writes none), groups nested deeper than
    hpcbench's, or datasets declaring more bytes than half this machine's memory holds."""
    budget = memory_bytes() // 2
    declared = 0
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
                declared += int(np.prod(member.shape, dtype=object) or 0) * member.dtype.itemsize
                if declared > budget:
                    return (f"its datasets declare {mib(declared)}, more than half this machine's memory "
                            f"({mib(2 * budget)}); {member.name} alone {member.shape}")
    return ""


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


def _read(f: h5py.File, path: str | os.PathLike) -> RunRecord:
    attrs = {k: _plain(v) for k, v in f.attrs.items()}
    if "status" in attrs:
        attrs.setdefault("error", "")  # written since failed runs leave files (names may grow)
    missing = [k for k in ROOT_ATTRS if k not in attrs]
    if missing:
        raise UsageError(f"{path} is not an hpcbench result file (missing {', '.join(missing)})")
    version = attrs["schema_version"]
    if not isinstance(version, int):
        raise UsageError(f"{path} has schema_version {version!r}, not an integer")
    if version > SCHEMA_VERSION:
        raise UsageError(f"{path} has schema {version}; this hpcbench reads up to {SCHEMA_VERSION}: upgrade hpcbench")
    if isinstance(attrs["config"], str) and len(attrs["config"]) > CONFIG_MAX_CHARS:
        raise UsageError(f"{path} has a config attribute of {len(attrs['config'])} characters; hpcbench writes a "
                         f"few thousand (at most {CONFIG_MAX_CHARS})")
    try:
        attrs["config"] = json.loads(attrs["config"])
    except (json.JSONDecodeError, TypeError):
        raise UsageError(f"{path} has a config attribute that is not JSON") from None
    if not isinstance(attrs["config"], dict):
        raise UsageError(f"{path} has a config attribute that is not a JSON object")
    summary = {k: _plain(v) for k, v in f["summary"].attrs.items()}
    prov = f["provenance"]
    tl = f["timeline"]
    timeline = {name: tl[name][()] for name in tl if name != "clock_offset_s"}
    # Columns added after a file was written read as their neutral value ("names may grow").
    timeline.setdefault("op", np.zeros(len(timeline["rank"]), dtype=np.uint8))
    timeline.setdefault("nbytes", np.zeros(len(timeline["rank"]), dtype=np.int64))
    ops = tuple(json.loads(tl.attrs["ops"])) if "ops" in tl.attrs else ("none",)
    evals = _read_columns(f["evals"])
    for name in ("val_loss", "val_accuracy"):  # schema 3: no validation split before
        evals.setdefault(name, np.full(len(evals["t"]), np.nan))
    per_rank = {k: [_plain(x) for x in prov[k][()]] for k in prov}
    per_rank.setdefault("local_ranks", [""] * len(per_rank.get("hostnames", ())))  # schema 4 added them
    return RunRecord(
        attrs=attrs,
        # schema 4 added network, 6 fault_tolerance
        provenance={"network": "", "fault_tolerance": "", **{k: _plain(v) for k, v in prov.attrs.items()}},
        per_rank=per_rank,
        timeline=timeline,
        phases=tuple(json.loads(tl.attrs["phases"])),
        ops=ops,
        clock_offsets=tl["clock_offset_s"][()],
        evals=evals,
        tables={name: _read_columns(f["server"][name]) for name in f["server"]},
        summary=summary,
        final_params=f["model"]["final_params"][()],
        simulation={k: _plain(v) for k, v in f["simulation"].attrs.items()} if "simulation" in f else {},
        path=str(path),
    )
