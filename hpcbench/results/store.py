"""Write result files; read them through ``results/reader.py`` (the writer's names and the reader's, from here).

A file is built in memory with status "running", marked with its final status ("ok", or how a failed
run ended) last, written out in one go, then given its name without replacing anything
(``paths.move_into_place``). On Linux the bytes go to a file with no name until all are there (``O_TMPFILE``),
so a writer killed meanwhile, even by SIGKILL, leaves nothing; elsewhere to a temporary ``.partial``
name of its own run. Never a file that reads as complete, and no run's result is lost to another's.
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcbench.errors import ResultWriteError
from hpcbench.results.paths import identity, move_into_place, partial_name, run_id
from hpcbench.results.reader import (
    InvalidResult,
    commit_of,
    promote_partials,
    read_run,
    result_state,
    result_status,
    step_cap_of,
)
from hpcbench.results.schema import SCHEMA_VERSION, RunRecord, undeclared

__all__ = ["DiskFull", "InvalidResult", "cause", "commit_of", "promote_partials", "read_run", "result_state",
           "result_status", "rewrite_run", "step_cap_of", "write_run"]

STRING = h5py.string_dtype()
FULL = (errno.ENOSPC, errno.EDQUOT)  # no room: another file system may have some


class DiskFull(ResultWriteError):
    """The result file could not be written for want of room (no space left, a disk quota): another
    directory, on another file system, may take it. ``cause``: the system's words."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


def write_error(final: Path, exc: OSError) -> ResultWriteError:
    """The one line of a failed write of ``final``, a ``DiskFull`` where there was no room."""
    message = f"could not write the result file {str(final)!r}: {cause(exc)}"
    return DiskFull(message, cause(exc)) if exc.errno in FULL else ResultWriteError(message)


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
    try:
        return move_into_place(partial, final, overwrite, rid)
    except OSError as exc:  # a directory with no room for the name: no complete file is left under another
        partial.unlink(missing_ok=True)
        raise write_error(final, exc) from None


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
    try:
        os.replace(partial, final)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise write_error(final, exc) from None
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
            raise write_error(final, exc) from None
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
