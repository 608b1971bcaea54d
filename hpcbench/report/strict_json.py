"""JSON that every reader accepts: no bare NaN or Infinity (``jq`` and ``JSON.parse`` refuse them).

A non-finite number becomes null; each document says in its own words what null means where it
can occur ("never", "no value").
"""
from __future__ import annotations

import json
import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None, tuples as lists, through nested dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
