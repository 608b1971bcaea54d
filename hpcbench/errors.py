"""Errors a user can act on: each renders as one line naming the bad value and the valid choices."""
from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import TextIO

KEPT = "\n\t"  # the control characters plain output may hold; every other one is shown escaped


def is_control(c: str) -> bool:
    """Whether the character ``c`` could end a line or steer a terminal: newlines, NUL, escapes and the
    other control characters, and Unicode's line and paragraph separators."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def is_unseen(c: str) -> bool:
    """Whether printing ``c`` would change how the text around it reads: a control character, or a format
    character (bidi overrides and isolates such as U+202E and U+2066, zero-width spaces), which reorders or
    hides text without showing itself."""
    return is_control(c) or unicodedata.category(c) == "Cf"


def escaped(text: str, keep: str = KEPT) -> str:
    """``text`` with its control and format characters (an escape sequence, a carriage return, NUL, Unicode's
    line separators, bidi controls) written as Python writes them in a string (``\\x1b``, ``\\u202e``), so
    no value steers a terminal or reorders what it shows."""
    return "".join(repr(c)[1:-1] if is_unseen(c) and c not in keep else c for c in text)


def one_line(text: str) -> str:
    """``text`` as one line: newlines in it too are shown escaped (an error names values, and a value
    may hold anything)."""
    return escaped(text, keep="")


class Escaping:
    """A text stream that writes through to ``stream`` with ``escaped``: what hpcbench prints, values
    from files and the command line included, never reaches the terminal as a control sequence."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(escaped(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


class HpcbenchError(Exception):
    """Base class for errors reported as a single line, without a traceback."""


class UsageError(HpcbenchError):
    """Bad input: unknown names, impossible sizes, missing data, malformed config."""


class ResultWriteError(HpcbenchError):
    """The result file could not be written (a full disk, a file-size limit, a permission)."""


class RuntimeFailure(HpcbenchError):
    """A run that cannot go on: a timeout, a torn read, a rank that failed."""

    status = "failed"  # what the run's result file says it ended as


class WaitTimeout(RuntimeFailure):
    """A wait that passed its deadline (``timeout_s``); ``peer``: the rank waited for, when one was."""

    status = "timeout"

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class TimeLimitPassed(RuntimeFailure):
    """The run took longer than it may (``time_limit_s``, or the Slurm job's end)."""

    status = "timeout"


class InjectedFault(RuntimeFailure):
    """``--set fault=raise:RANK@STEP``: the failure a user asked for."""


class Stopped(RuntimeFailure):
    """A signal asked the run to stop (Slurm's time limit or scancel, Ctrl-C, mpiexec passing one on)."""

    status = "aborted"


class HungUp(KeyboardInterrupt):
    """The terminal went away (SIGHUP) while this process ran a study's runs: stopped as Ctrl-C stops it."""


class LauncherGone(RuntimeFailure):
    """The process that started this rank (mpiexec's proxy, srun's step daemon) has died: nothing will
    end this rank for it, so it ends itself."""

    status = "aborted"


class PeerFailure(RuntimeFailure):
    """Another rank failed and said so before it stopped."""

    def __init__(self, message: str, status: str = "failed") -> None:
        super().__init__(message)
        self.status = status


def one_of(kind: str, name: object, valid: list[str] | tuple[str, ...]) -> UsageError:
    """The standard "unknown X" error listing the valid choices."""
    return UsageError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")


def undeclared_add(window: str, what: str = "an add into", declared: str = "publish") -> RuntimeFailure:
    """An operation a window's declared mode does not take: an Accumulate, fetch-and-add or drain of a
    "publish" window, anything but a fetch-and-add on a "count" one. An algorithm's bug, refused by
    the simulator and under MPI alike."""
    if declared == "count":
        return RuntimeFailure(f"{what} window {window!r}, which its layout declares \"count\": a counter "
                              "takes fetch-and-adds only")
    return RuntimeFailure(f"{what} window {window!r}, which its layout declares \"publish\": declare it "
                          "\"accumulate\" (reads of a window others add into must exclude the adders)")


def undeclared_size(channel: str, nbytes: int, declared: int) -> RuntimeFailure:
    """A message whose size is not its channel's: MPI would truncate it, or hand over stale bytes."""
    return RuntimeFailure(f"a {channel!r} message of {nbytes} bytes, where its layout declares {declared}")


def stopped_answering(quiet: list[tuple[int, float]], name: Callable[[int], str]) -> WaitTimeout:
    """The peers ``quiet`` (rank, seconds silent; the longest first) ended the run: named by ``name``."""
    who = ", ".join(f"{name(r)} for {s:.0f} s" for r, s in quiet)
    return WaitTimeout(f"{'a rank has' if len(quiet) == 1 else 'ranks have'} stopped answering "
                       f"(nothing heard past timeout_s): {who}", peer=quiet[0][0])


def failure_status(exc: BaseException) -> str:
    """How a run that raised ``exc`` ended: failed, timeout or aborted (a signal, Ctrl-C)."""
    if isinstance(exc, KeyboardInterrupt):
        return "aborted"
    return exc.status if isinstance(exc, RuntimeFailure) else "failed"


def error_line(exc: BaseException) -> str:
    """One line for the record: the message of our own errors, the type and message of any other."""
    if isinstance(exc, HpcbenchError):
        return str(exc)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
