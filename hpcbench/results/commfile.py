"""The file ``hpcbench comm`` writes (HDF5, ``kind = "comm"``, its own schema version) and reads back.

/ attrs: kind, schema_version, hpcbench_version, world_size, hosts (one per rank, comma-separated),
mpi_library_version, iters, warmup, created.
/rows: one row per (operation, peer, size): op, link, peer (-1: every rank), bytes, time_s (mean over
the iterations), min_s, max_s, algbw, busbw (bytes/s); /seconds: every iteration's time, one row per
row of /rows. /fits: one row per link class fitted: link, op, alpha_s, bandwidth, noise, sizes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcbench.comm.linkfit import LinkFit, chosen_fit
from hpcbench.errors import UsageError

KIND = "comm"
COMM_SCHEMA_VERSION = 1
ROW_TEXT = ("op", "link")
ROW_NUMBERS = ("peer", "bytes", "time_s", "min_s", "max_s", "algbw", "busbw")


@dataclass(frozen=True)
class CommRow:
    op: str
    link: str
    peer: int
    bytes: int
    time_s: float
    min_s: float
    max_s: float
    algbw: float
    busbw: float


@dataclass(frozen=True)
class CommFile:
    attrs: dict[str, Any]
    rows: list[CommRow]
    seconds: np.ndarray  # (rows, iterations)
    fits: list[LinkFit]


def write_comm(path: str | os.PathLike, data: CommFile, overwrite: bool = False) -> Path:
    """Write ``data`` whole under a temporary name, then rename it into place (never half a file)."""
    final = Path(path)
    if final.exists() and not overwrite:
        raise UsageError(f"{final} exists; choose another --out or add --overwrite")
    partial = final.with_name(f".{final.name}.{os.getpid()}.partial")
    text = h5py.string_dtype()
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(partial, "w") as f:
            for key, value in data.attrs.items():
                f.attrs[key] = value
            f.attrs["kind"] = KIND
            f.attrs["schema_version"] = COMM_SCHEMA_VERSION
            rows = f.create_group("rows")
            for name in ROW_TEXT:
                rows.create_dataset(name, data=[getattr(r, name) for r in data.rows], dtype=text)
            for name in ROW_NUMBERS:
                rows.create_dataset(name, data=np.array([getattr(r, name) for r in data.rows], dtype=np.float64))
            f.create_dataset("seconds", data=data.seconds)
            fits = f.create_group("fits")
            for name in ("link", "op"):
                fits.create_dataset(name, data=[getattr(x, name) for x in data.fits], dtype=text)
            for name in ("alpha_s", "bandwidth", "noise", "sizes"):
                fits.create_dataset(name, data=np.array([getattr(x, name) for x in data.fits], dtype=np.float64))
        os.replace(partial, final)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise UsageError(f"could not write {final}: {exc.strerror or exc}") from None
    return final


def read_comm(path: str | os.PathLike) -> CommFile:
    """A file ``hpcbench comm`` wrote; one line for anything else."""
    if not os.path.isfile(path):
        raise UsageError(f"cannot read {str(path)!r}: {'not a file' if os.path.exists(path) else 'no such file'}")
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise UsageError(f"cannot read {str(path)!r}: not an HDF5 file") from None
    with f:
        if f.attrs.get("kind") != KIND:
            raise UsageError(f"{path} is not a file of hpcbench comm (a network sweep)")
        version = int(f.attrs.get("schema_version", 0))
        if version > COMM_SCHEMA_VERSION:
            raise UsageError(f"{path} has comm schema {version}; this hpcbench reads up to {COMM_SCHEMA_VERSION}")
        try:
            attrs = {k: v.item() if hasattr(v, "item") else v for k, v in f.attrs.items()}
            columns = {name: f["rows"][name][()] for name in ROW_TEXT + ROW_NUMBERS}
            rows = [CommRow(_text(columns["op"][i]), _text(columns["link"][i]), int(columns["peer"][i]),
                            int(columns["bytes"][i]), *(float(columns[n][i]) for n in ROW_NUMBERS[2:]))
                    for i in range(len(columns["op"]))]
            fit = {name: f["fits"][name][()] for name in ("link", "op", "alpha_s", "bandwidth", "noise", "sizes")}
            fits = [LinkFit(_text(fit["link"][i]), float(fit["alpha_s"][i]), float(fit["bandwidth"][i]),
                            float(fit["noise"][i]), int(fit["sizes"][i]), _text(fit["op"][i]))
                    for i in range(len(fit["link"]))]
            seconds = np.asarray(f["seconds"][()], dtype=np.float64)
        except KeyError as exc:
            raise UsageError(f"{path} is a comm file without {exc.args[0]!r}: written by something else") from None
        except (ValueError, TypeError, OverflowError) as exc:  # a number that is not one (int(nan), text)
            raise UsageError(f"{path} is invalid: a value of its rows or fits is not a number ({exc})") from None
    data = CommFile(attrs, rows, seconds, fits)
    wrong = impossible(data)
    if wrong:
        raise UsageError(f"{path} is invalid: {wrong}")
    return data


def impossible(data: CommFile) -> str:
    """The first value of a sweep's file that cannot be what its name means ("" when none): sizes and
    times not negative and finite, min <= mean <= max, bandwidths not negative, a peer within the world,
    a time per row of the table, fits of a positive bandwidth and a latency and noise not negative."""
    world = data.attrs.get("world_size")
    for i, r in enumerate(data.rows):
        numbers = {"bytes": r.bytes, "time_s": r.time_s, "min_s": r.min_s, "max_s": r.max_s, "algbw": r.algbw,
                   "busbw": r.busbw}
        bad = next((k for k, v in numbers.items() if not (np.isfinite(v) and v >= 0)), None)
        if bad:
            return f"rows/{bad} = {numbers[bad]!r} at row {i}: not a size, time or rate (finite, never negative)"
        if not r.min_s <= r.time_s <= r.max_s:
            return f"rows at row {i}: min_s {r.min_s!r}, time_s {r.time_s!r}, max_s {r.max_s!r} are not in order"
        if r.peer < -1 or (isinstance(world, int) and r.peer >= world):
            return f"rows/peer = {r.peer} at row {i}: not a rank of the world (or -1, every rank)"
    if data.seconds.ndim != 2 or len(data.seconds) != len(data.rows) or not np.all(np.isfinite(data.seconds)) \
            or np.any(data.seconds < 0):
        return "seconds is not one row of finite times, never negative, per row of the table"
    for i, fit in enumerate(data.fits):
        if not (np.isfinite(fit.alpha_s) and fit.alpha_s >= 0 and np.isfinite(fit.bandwidth) and fit.bandwidth > 0
                and np.isfinite(fit.noise) and fit.noise >= 0 and fit.sizes >= 1):
            return (f"fits at row {i}: alpha_s {fit.alpha_s!r}, bandwidth {fit.bandwidth!r}, noise {fit.noise!r}, "
                    f"sizes {fit.sizes} is not a link (latency and noise not negative, bandwidth positive)")
    return ""


def measured_link(path: str | os.PathLike) -> LinkFit:
    """The fit of a sweep's file that ``simulate`` and ``calibrate`` take (``linkfit.chosen_fit``)."""
    return chosen_fit(read_comm(path).fits)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

