"""A run's tables as pandas DataFrames (pandas is optional: only this function needs it).

    from hpcbench.results.store import read_run
    from hpcbench.results.dataframes import to_frames
    frames = to_frames(read_run("results/demo/asgd-w4.h5"))
    frames["timeline"].groupby(["rank", "phase"])["duration_s"].sum()
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.results.schema import RunRecord


def to_frames(rec: RunRecord) -> dict[str, Any]:
    """{"timeline", "evals", and each server table by name} → DataFrame. The timeline's phase and op
    are their names (categoricals), not the file's codes, with ``duration_s`` beside the times."""
    try:
        import pandas as pd
    except ImportError:
        raise UsageError("to_frames needs pandas: pip install pandas") from None
    timeline = {k: np.asarray(v) for k, v in rec.timeline.items()}
    for column, names in (("phase", rec.phases), ("op", rec.ops)):
        timeline[column] = pd.Categorical.from_codes(timeline[column].astype(np.int64), categories=list(names))
    frames = {"timeline": pd.DataFrame(timeline), "evals": pd.DataFrame(rec.evals)}
    frames["timeline"]["duration_s"] = frames["timeline"]["t_end"] - frames["timeline"]["t_start"]
    frames.update({name: pd.DataFrame(table) for name, table in rec.tables.items()})
    return frames
