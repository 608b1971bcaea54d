"""A study directory's own records: which points it holds (``study.json``) and which Slurm jobs ran
them (``jobs.tsv``, one "point<TAB>job id" line per submission, appended by ``sweep --submit`` and by
``submit.sh``; the last line for a point is its latest job).

What a point's result is comes from its file: ``ok``, or why not (``missing``, ``partial``: a run
that never finished left only its temporary file, ``unreadable``: a file no reader takes, ``invalid``: a
file that holds an impossible value, or the status a failed run wrote).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.errors import UsageError
from hpcbench.results.store import promote_partials, result_state

MANIFEST = "study.json"
JOBS = "jobs.tsv"


@dataclass(frozen=True)
class PointState:
    stem: str
    result: str  # ok | missing | partial | unreadable | invalid | the status a failed run wrote
    jobs: tuple[str, ...]  # Slurm job ids, oldest first
    why: str = ""  # the reader's line for an invalid file


def write_manifest(out_dir: Path, points: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """Record the study's points (merged with those already recorded) and how to run them again."""
    known = read_manifest(out_dir)["points"] if (out_dir / MANIFEST).exists() else []
    stems = {p["stem"] for p in points}
    merged = [p for p in known if p["stem"] not in stems] + points
    (out_dir / MANIFEST).write_text(json.dumps({"points": merged, **settings}, indent=1) + "\n")


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")  # a point's stem or algorithm: a file name, never a path
MANIFEST_MAX_BYTES = 16 << 20


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The study's record, checked as untrusted input (anyone may have edited it): an object whose
    ``points`` are objects naming a stem and an algorithm that are plain names (no path, no ``..``),
    or one line saying what is wrong."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise UsageError(f"{str(out_dir)!r} is not a study directory (no {MANIFEST}; `hpcbench sweep` writes one)")
    if path.stat().st_size > MANIFEST_MAX_BYTES:
        raise UsageError(f"{path} is {path.stat().st_size} bytes: not a study record (at most {MANIFEST_MAX_BYTES})")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else "too deeply nested"
        raise UsageError(f"{path} is not valid JSON: {why}") from None
    wrong = manifest_problem(manifest)
    if wrong:
        raise UsageError(f"{path} is not a study record: {wrong}")
    return manifest


def manifest_problem(manifest: Any) -> str:
    """What makes ``manifest`` unusable as a study record, in a few words ("" when nothing)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("points"), list):
        return "no list of points"
    for i, point in enumerate(manifest["points"]):
        if not isinstance(point, dict):
            return f"point {i} is not an object"
        for key in ("stem", "algo"):
            value = point.get(key)
            if not isinstance(value, str) or not NAME.fullmatch(value) or ".." in value:
                return f"point {i}'s {key} {value!r} is not a plain name"
    return ""


def record_jobs(out_dir: Path, jobs: dict[str, str]) -> None:
    with open(out_dir / JOBS, "a") as f:
        f.writelines(f"{stem}\t{job}\n" for stem, job in jobs.items())


def recorded_jobs(out_dir: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    path = out_dir / JOBS
    if path.is_file():
        for line in path.read_text().splitlines():
            stem, _, job = line.partition("\t")
            if job:
                out.setdefault(stem, []).append(job)
    return out


def result_of(out_dir: Path, stem: str) -> tuple[str, str]:
    """(the point's result, the reader's line where its file is invalid)."""
    promote_partials(out_dir / f"{stem}.h5")
    status, why = result_state(out_dir / f"{stem}.h5")
    if status is not None:
        return status, why if status == "invalid" else ""
    if (out_dir / f"{stem}.h5").exists():
        return "unreadable", ""
    return ("partial" if any(out_dir.glob(f"{stem}.h5.*.partial")) else "missing"), ""


def point_states(out_dir: str | os.PathLike) -> list[PointState]:
    """Every point the study's manifest names, with its result and its jobs."""
    root = Path(out_dir)
    jobs = recorded_jobs(root)
    states = []
    for point in read_manifest(root)["points"]:
        result, why = result_of(root, point["stem"])
        states.append(PointState(point["stem"], result, tuple(jobs.get(point["stem"], ())), why))
    return states


def not_ok(out_dir: str | os.PathLike) -> list[PointState]:
    """The study's points without an ok result ([] for a directory that is not a study)."""
    if not (Path(out_dir) / MANIFEST).is_file():
        return []
    return [p for p in point_states(out_dir) if p.result != "ok"]
