"""Errors a user can act on: each renders as one line naming the bad value and the valid choices."""
from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Callable, Sequence
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


class NoLauncher(UsageError):
    """``run`` started as one plain process, by no MPI launcher: the command that starts it under one, with the
    user's own arguments where the command line is known (``text``)."""

    def __init__(self, ranks: int, algo: str) -> None:
        self.ranks, self.algo = ranks, algo
        super().__init__(self.text(["run", "--algo", algo, "..."]))

    def text(self, argv: Sequence[str]) -> str:
        import shlex

        return (f"run needs MPI ranks: mpiexec -n {self.ranks} python -m mpi4py -m hpcbench {shlex.join(argv)} "
                "(or simulate, which needs none)")


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


class SignalStop(KeyboardInterrupt):
    """A signal other than Ctrl-C came while this process ran a study's runs (the terminal went away:
    SIGHUP; a batch job's time limit or kill: SIGTERM): stopped as Ctrl-C stops it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class LauncherGone(RuntimeFailure):
    """The process that started this rank (mpiexec's proxy, srun's step daemon) has died: nothing will
    end this rank for it, so it ends itself."""

    status = "aborted"


class PeerFailure(RuntimeFailure):
    """Another rank failed and said so before it stopped."""

    def __init__(self, message: str, status: str = "failed") -> None:
        super().__init__(message)
        self.status = status


class RunEnded(RuntimeFailure):
    """Rank 0 ended the run (under ULFM, where MPI_Abort ends no other rank): it has said why and kept the
    run's record, so this worker ends without a line of its own."""


# What a command that draws plots says when matplotlib is missing: the ``plot`` extra, as a clone installs it.
NO_MATPLOTLIB = 'plots need matplotlib: pip install -e ".[plot]" in the clone (or pip install matplotlib)'


def closest(name: object, valid: Sequence[str]) -> str | None:
    """The valid name ``name`` was most likely meant to be (a misspelling, ``_`` for ``-``, another case),
    or None when none is close."""
    if not isinstance(name, str) or not name:
        return None
    lowered = {v.lower(): v for v in valid}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[close[0]] if close else None


def did_you_mean(name: object, valid: Sequence[str]) -> str:
    """``"; did you mean 'NAME'?"`` for the valid name closest to ``name``, or "" when none is close: the
    end of an "unknown X" line."""
    close = closest(name, valid)
    return f"; did you mean {close!r}?" if close is not None else ""


def one_of(kind: str, name: object, valid: list[str] | tuple[str, ...]) -> UsageError:
    """The standard "unknown X" error listing the valid choices, and the closest of them when one is close."""
    return UsageError(f"unknown {kind} {name!r}; valid: {', '.join(valid)}{did_you_mean(name, valid)}")


# The widest line hpcbench prints, and the prefix its errors are printed after.
COLUMNS = 120
ERROR_PREFIX = "hpcbench: error: "


def closest_few(name: object, valid: Sequence[str], n: int = 3) -> list[str]:
    """The valid names closest to ``name``, up to ``n``, the closest first: those about as close as the
    closest is (compared without case, ``-`` and ``_`` alike)."""
    if not isinstance(name, str) or not name:
        return []

    def plain(text: str) -> str:
        return text.lower().replace("-", "_")

    scored = sorted(((difflib.SequenceMatcher(None, plain(name), plain(v)).ratio(), v) for v in valid),
                    key=lambda pair: -pair[0])
    best = scored[0][0] if scored else 0.0
    return [v for ratio, v in scored[:n] if ratio >= max(0.6, best - 0.1)]


def unknown_key(kind: str, name: str, valid: Sequence[str], everything: str, before: str = "",
                owner: str = "") -> UsageError:
    """An "unknown X" error in one line that fits the terminal after ``before`` (what the message is printed
    after): every valid name where they fit, else the closest of them and where to find them all
    (``everything``: "hpcbench list shows every key"). ``owner``: the prefix of every name (``ga-asgd.``),
    shown but not compared."""
    room = COLUMNS - len(ERROR_PREFIX) - len(before)
    shown = [owner + v for v in valid]
    listed = f"unknown {kind} {owner + name!r}; valid: {', '.join(shown) or '(none)'}"
    close = closest_few(name, valid)
    if len(listed) + len(f"; did you mean '{owner}{close[0]}'?" if close else "") <= room:
        return UsageError(before + listed + (f"; did you mean '{owner}{close[0]}'?" if close else ""))
    while close:
        line = f"unknown {kind} {owner + name!r}; did you mean {' or '.join(repr(owner + c) for c in close)}? " \
               f"({everything})"
        if len(line) <= room:
            return UsageError(before + line)
        close.pop()
    return UsageError(f"{before}unknown {kind} {owner + name!r}; {everything}")


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
