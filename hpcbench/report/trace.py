"""``hpcbench trace FILE.h5 -o trace.json``: the timeline as Chrome trace JSON (Perfetto, chrome://tracing).

One track per rank; each timed operation is a complete event named after the operation, in the
category of its phase; evaluations are instant events on rank 0 with a counter for accuracy.
"""
from __future__ import annotations

import json
from typing import Any

from hpcbench.results.schema import RunRecord, family_of


def chrome_trace(rec: RunRecord) -> dict[str, Any]:
    tl = rec.timeline
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
        scored = accuracy == accuracy  # NaN in simulations without numerics
        events.append({"name": "evaluation", "ph": "i", "s": "t", "pid": 0, "tid": 0, "ts": t * 1e6,
                       "args": {"samples": samples, "accuracy": accuracy if scored else None}})
        if scored:
            events.append({"name": "accuracy", "ph": "C", "pid": 0, "ts": t * 1e6, "args": {"accuracy": accuracy}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"algorithm": rec.algorithm, "mode": rec.mode, "source": rec.path}}


def write_trace(rec: RunRecord, path: str) -> int:
    """Write the trace; returns the number of events."""
    trace = chrome_trace(rec)
    with open(path, "w") as fh:
        json.dump(trace, fh, allow_nan=False, default=str)
    return len(trace["traceEvents"])
