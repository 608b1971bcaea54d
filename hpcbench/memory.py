"""This machine's memory, and the one-line refusal of a run whose arrays would not fit in it (checked
before they are allocated, where the sizes are known: the options multiply, each within its range)."""
from __future__ import annotations

import os

from hpcbench.errors import UsageError


def memory_bytes() -> int:
    """This machine's memory (a large default where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def amount(nbytes: float) -> str:
    """``nbytes`` in the largest of KiB, MiB and GiB it makes at least one of (GiB beyond)."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if nbytes >= 2**shift:
            return f"{nbytes / 2**shift:.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"


def check_memory(nbytes: float, what: str, remedy: str) -> None:
    """Refuse ``nbytes`` more than this machine holds, naming ``what`` needs it and the number."""
    have = memory_bytes()
    if nbytes > have:
        raise UsageError(f"{what} needs about {amount(nbytes)}, more than this machine's {amount(have)}: {remedy}")
