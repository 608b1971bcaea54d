"""The range every numeric option declares, where it is declared: ``bounded(default, low=1,
unit="local steps")`` is a dataclass field that carries its limits, so one check and one message
serve every option table and the run's own keys, and ``hpcbench list`` shows them."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpcbench.errors import UsageError, one_of


@dataclass(frozen=True)
class Range:
    """Limits on a number: ``low``/``high`` inclusive, ``above``/``below`` exclusive (None: no limit)."""

    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None
    unit: str = ""

    def contains(self, value: float) -> bool:
        return ((isinstance(value, int) or math.isfinite(value))  # an int of any size compares exactly
                and (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
                and (self.above is None or value > self.above) and (self.below is None or value < self.below))

    def text(self) -> str:
        """``>= 1 local steps``, ``in [0, 1)``, ``between 0 and 8192 versions``."""
        lo = self.low if self.above is None else self.above
        hi = self.high if self.below is None else self.below
        unit = f" {self.unit}" if self.unit else ""
        if lo is not None and hi is not None:
            if self.above is None and self.below is None and self.unit:
                return f"between {number(lo)} and {number(hi)}{unit}"
            return f"in {'(' if self.above is not None else '['}{number(lo)}, {number(hi)}" \
                   f"{')' if self.below is not None else ']'}{unit}"
        if lo is not None:
            return f"{'>' if self.above is not None else '>='} {number(lo)}{unit}"
        if hi is not None:
            return f"{'<' if self.below is not None else '<='} {number(hi)}{unit}"
        return f"a finite number{unit}"


def number(value: float) -> str:
    """``8192``, ``0.5``, ``1e-09``, ``10,000,000`` (whole numbers of five digits and more grouped)."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 2**53):
        whole = int(value)
        return f"{whole:,}" if abs(whole) >= 10_000 else str(whole)
    return f"{value:g}"


def bounded(default: Any, low: float | None = None, high: float | None = None, *, above: float | None = None,
            below: float | None = None, unit: str = "", resolves: str = "") -> Any:
    """A numeric dataclass field with its range; ``resolves``: the rule a placeholder default stands
    for (the placeholder itself is accepted though outside the range, e.g. -1 for "2 ns per parameter")."""
    meta: dict[str, Any] = {"range": Range(low, high, above, below, unit)}
    if resolves:
        meta["resolves"] = resolves
    return field(default=default, metadata=meta)


def choice(default: str, choices: Sequence[str] | Callable[[], Sequence[str]]) -> Any:
    """A text dataclass field that takes one of ``choices`` (a callable: a registry's names, read when
    checked, so what registers later counts)."""
    return field(default=default, metadata={"choices": choices})


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """A text field's valid values (``choice``), or None when it declares none."""
    found = f.metadata.get("choices")
    if found is None:
        return None
    return tuple(found() if callable(found) else found)


def range_of(f: dataclasses.Field) -> Range | None:
    return f.metadata.get("range")


def check_ranges(obj: Any, owner: str) -> None:
    """Every numeric field of the dataclass ``obj`` within its declared range and every text field one
    of its choices, or one line naming the option, what it takes and the value given (``owner``: the
    table's prefix, ``ga-asgd.``)."""
    for f in dataclasses.fields(obj):
        limits, value, valid = range_of(f), getattr(obj, f.name), choices_of(f)
        if valid is not None and value not in valid:
            raise one_of(f"{owner}{f.name}", value, valid)
        if limits is None or value is None or (value == f.default and "resolves" in f.metadata):
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if not limits.contains(item):
                placeholder = f" ({number(f.default)}: {f.metadata['resolves']})" \
                    if "resolves" in f.metadata and isinstance(f.default, (int, float)) else ""
                raise UsageError(f"{owner}{f.name} must be {limits.text()}{placeholder}, got {shown_value(value)}")


SHOWN = 40  # characters of a value an error line shows whole (a 4,000-digit seed is cut)


def shown_value(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(shown_value(v) for v in value) + "]"
    text = str(value)  # a float as Python reads it back (1.0, 1e+300, inf)
    return text if len(text) <= SHOWN else f"{text[:SHOWN // 2]}...{text[-8:]} ({len(text):,} characters)"
