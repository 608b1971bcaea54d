"""Read result files: a whole run (``read_run``, every file checked by ``results/validation.py``), or what
the studies ask of a file (its status, checked as a whole run is; its step cap, its commit), and the results
killed writers left under a temporary name.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcbench.errors import UsageError
from hpcbench.results.paths import held
from hpcbench.results.schema import ROOT_ATTRS, SCHEMA_VERSION, RunRecord
from hpcbench.results.validation import impossible, malformed, unreadable

CONFIG_MAX_CHARS = 1 << 20
SHOWN_CHARS = 500  # text from a file as readers show it (an error line, a host name: a few hundred at most)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a reader shows it: at most ``limit`` characters, saying how long it was where longer
    (a file may hold an attribute of any length, and every reader prints them)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [cut: {len(text):,} characters in all]"


def _shown(value: Any) -> Any:
    value = _plain(value)
    return cut(value) if isinstance(value, str) else value


def _read_columns(group: h5py.Group) -> dict[str, np.ndarray]:
    return {name: group[name][()] for name in group}


class InvalidResult(UsageError):
    """A result file that reads, but holds a value that cannot be what its name means (an accuracy of 7,
    evaluation times that run backwards, a negative count): never used, by any reader."""


def result_status(path: str | os.PathLike) -> str | None:
    """The ``status`` of the result file at ``path``, "ok" only for a file every reader takes; "invalid"
    for one that holds an impossible value; None when there is none, or no reader would read the file
    (``result_state`` says why)."""
    return result_state(path)[0]


def result_state(path: str | os.PathLike) -> tuple[str | None, str]:
    """(status, why): the status of the file at ``path`` as ``result_status`` gives it, and the reader's
    one line where the file is not taken whole ("" when it is). A file that is not well-formed keeps the
    status it says, unless that is "ok" (then None: a study runs it again)."""
    try:
        return read_run(path).attrs["status"], ""
    except InvalidResult as exc:
        return "invalid", str(exc)
    except UsageError as exc:
        said = _said_status(path)
        return (None if said == "ok" else said), str(exc)


def _said_status(path: str | os.PathLike) -> str | None:
    """The status attribute of the file at ``path``, cut as shown; None when there is none, or no reader
    would read the file (``unreadable``)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with h5py.File(path, "r") as f:
            return None if unreadable(f) else cut(str(_plain(f.attrs.get("status", "")))) or None
    except (OSError, KeyError, ValueError, TypeError, RuntimeError):
        return None


def promote_partials(final: str | os.PathLike) -> list[str]:
    """Finish the renames killed runs left undone: a complete ``NAME.h5.RID.partial`` beside ``final``
    (a kill between writing a result's last image and renaming it over the file) whose run is gone
    (nobody holds the name) takes ``final``'s name when that holds less: no file, an unreadable one, or
    one that says the run had not finished, or one that holds an impossible value. → a line for each file
    promoted."""
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
        if status in ("incomplete", "running") or result_status(target) not in (None, "incomplete", "running",
                                                                                   "invalid"):
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
            return cut(str(_plain(prov.get("git_commit", "unknown")))), bool(prov.get("git_dirty", False))
    except (OSError, KeyError, ValueError):
        return "unknown", False


def read_run(path: str | os.PathLike) -> RunRecord:
    """A result file as a ``RunRecord``; one line (``UsageError``) for anything that is not a complete,
    well-formed hpcbench result file this version can read (``malformed`` lists what is checked), and
    (``InvalidResult``) for one that holds a value that cannot be what its name means, naming the field and
    the value (``impossible``). A path that is not a regular file (a fifo, a device, a directory) is
    refused without opening it."""
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
                raise not_well_formed(path, wrong)
            rec = _read(f, path)
        except UsageError:
            raise
        except RecursionError:
            raise UsageError(f"{path} is not a well-formed hpcbench result file (an attribute nested too deeply "
                             "to read)") from None
        except (KeyError, ValueError, TypeError, AttributeError, IndexError, OSError, RuntimeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise not_well_formed(path, what) from None
    wrong = malformed(rec)
    if wrong:
        raise not_well_formed(path, wrong)
    wrong = impossible(rec)
    if wrong:
        raise InvalidResult(f"{path} is invalid: {cut(wrong, 2 * SHOWN_CHARS)}")
    return rec


def not_well_formed(path: str | os.PathLike, why: str) -> UsageError:
    """The refusal of a file that is not a well-formed result, ``why`` cut to what a line can show (it
    may quote values from the file, each already cut as shown)."""
    return UsageError(f"{path} is not a well-formed hpcbench result file ({cut(why, 2 * SHOWN_CHARS)})")


def _read(f: h5py.File, path: str | os.PathLike) -> RunRecord:
    attrs = {k: _plain(v) if k == "config" else _shown(v) for k, v in f.attrs.items()}
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
    summary = {k: _shown(v) for k, v in f["summary"].attrs.items()}
    prov = f["provenance"]
    tl = f["timeline"]
    timeline = {name: tl[name][()] for name in tl if name != "clock_offset_s"}
    # Columns added after a file was written read as their neutral value ("names may grow").
    timeline.setdefault("op", np.zeros(len(timeline["rank"]), dtype=np.uint8))
    timeline.setdefault("nbytes", np.zeros(len(timeline["rank"]), dtype=np.int64))
    ops = tuple(_names(tl.attrs["ops"])) if "ops" in tl.attrs else ("none",)
    evals = _read_columns(f["evals"])
    for name in ("val_loss", "val_accuracy"):  # schema 3: no validation split before
        evals.setdefault(name, np.full(len(evals["t"]), np.nan))
    per_rank = {k: [_shown(x) for x in prov[k][()]] for k in prov}
    per_rank.setdefault("local_ranks", [""] * len(per_rank.get("hostnames", ())))  # schema 4 added them
    return RunRecord(
        attrs=attrs,
        # schema 4 added network, 6 fault_tolerance
        provenance={"network": "", "fault_tolerance": "", **{k: _shown(v) for k, v in prov.attrs.items()}},
        per_rank=per_rank,
        timeline=timeline,
        phases=tuple(_names(tl.attrs["phases"])),
        ops=ops,
        clock_offsets=tl["clock_offset_s"][()],
        evals=evals,
        tables={name: _read_columns(f["server"][name]) for name in f["server"]},
        summary=summary,
        final_params=f["model"]["final_params"][()],
        simulation={k: _shown(v) for k, v in f["simulation"].attrs.items()} if "simulation" in f else {},
        path=str(path),
    )


def _names(text: Any) -> Any:
    """A JSON list of names (the timeline's phases and ops), each name cut as shown."""
    names = json.loads(text)
    return [cut(n) if isinstance(n, str) else n for n in names] if isinstance(names, list) else names
