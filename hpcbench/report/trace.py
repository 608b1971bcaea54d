"""``hpcbench trace FILE.h5 -o trace.json``: the timeline as Chrome trace JSON (Perfetto, chrome://tracing).

One track per rank; each timed operation is a complete event named after the operation, in the
category of its phase; evaluations are instant events on rank 0 with a counter for accuracy.
"""
from __future__ import annotations

import math
import os
import secrets
import stat
from typing import Any

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.report.strict_json import dumps
from hpcbench.results.schema import RunRecord, family_of


def chrome_trace(rec: RunRecord) -> dict[str, Any]:
    """The trace of ``rec``; one line (``UsageError``) where its times do not fit microseconds."""
    tl = rec.timeline
    check_times(rec)
    family = family_of(rec.tables) or "coordinator"
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0,
         "args": {"name": f"{rec.algorithm}, {rec.workers} workers ({rec.mode})"}},
    ]
    for rank in range(rec.workers + 1):
        role = family if rank == 0 else "worker"
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": rank,
                       "args": {"name": f"rank {rank} ({role})"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": rank, "args": {"sort_index": rank}})
    for rank, step, phase, op, t0, t1, nbytes in zip(tl["rank"].tolist(), tl["step"].tolist(), tl["phase"].tolist(),
                                                     tl["op"].tolist(), tl["t_start"].tolist(), tl["t_end"].tolist(),
                                                     tl["nbytes"].tolist()):
        name = rec.ops[op] if rec.ops[op] != "none" else rec.phases[phase]
        events.append({"name": name, "cat": rec.phases[phase], "ph": "X", "pid": 0, "tid": rank,
                       "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "args": {"step": step, "bytes": nbytes}})
    for t, samples, accuracy in zip(rec.evals["t"].tolist(), rec.evals["samples"].tolist(),
                                    rec.evals["accuracy"].tolist()):
        scored = math.isfinite(accuracy)  # NaN in simulations without numerics; null in the trace
        events.append({"name": "evaluation", "ph": "i", "s": "t", "pid": 0, "tid": 0, "ts": t * 1e6,
                       "args": {"samples": samples, "accuracy": accuracy if scored else None}})
        if scored:
            events.append({"name": "accuracy", "ph": "C", "pid": 0, "ts": t * 1e6, "args": {"accuracy": accuracy}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"algorithm": rec.algorithm, "mode": rec.mode, "source": rec.path}}


def check_times(rec: RunRecord) -> None:
    """Refuse times a trace cannot hold: each start, end, duration and evaluation in microseconds must
    be a finite number (the reader checked them finite in seconds, where 1e305 s still is)."""
    tl = rec.timeline
    seconds = [np.asarray(c, dtype=np.float64) for c in (tl["t_start"], tl["t_end"], rec.evals["t"])]
    with np.errstate(over="ignore", invalid="ignore"):
        micros = [c * 1e6 for c in (*seconds, seconds[1] - seconds[0])]
    if not all(np.all(np.isfinite(c)) for c in micros):
        largest = max(float(np.max(np.abs(c), initial=0.0)) for c in seconds)
        raise UsageError(f"{rec.path} holds times too large for a trace in microseconds (up to {largest:g} s)")


def write_trace(rec: RunRecord, path: str) -> int:
    """Write the trace whole or not at all (``write_whole``); returns the number of events."""
    trace = chrome_trace(rec)
    write_whole(path, dumps(trace, default=str))
    return len(trace["traceEvents"])


def write_whole(path: str, text: str) -> None:
    """``text`` at ``path``, never a part of it: written beside it under a name of its own, then renamed
    over it (the file a link names, where ``path`` is one). A device or fifo, which a rename would
    replace, is written to as it is."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        special = False
    if special:
        with open(path, "w") as fh:
            fh.write(text)
        return
    target = os.path.realpath(path)
    partial = f"{target}.{secrets.token_hex(4)}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(partial, target)
    except BaseException:
        os.unlink(partial)
        raise
