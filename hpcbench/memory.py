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


def check_memory(nbytes: float, what: str, remedy: str) -> None:
    """Refuse ``nbytes`` more than this machine holds, naming ``what`` needs it and the number."""
    have = memory_bytes()
    if nbytes > have:
        raise UsageError(f"{what} needs about {gib(nbytes)}, more than this machine's {gib(have)}: {remedy}")
