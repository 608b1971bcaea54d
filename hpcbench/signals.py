"""Signals that end a run become an exception, so rank 0 can keep a record of the run before it ends.

Slurm sends SIGTERM at the time limit and on ``scancel`` (SIGKILL follows after its KillWait), mpiexec
passes Ctrl-C (SIGINT) and SIGTERM on to the ranks, a lost terminal sends SIGHUP. Python runs the
handler between bytecodes; every wait in ``comm`` is a polling loop, so a waiting rank sees it too.
A stop that lands inside ``stops_deferred()`` (a lock held on another rank's window) is raised as the
section ends, so nothing is left half done for another rank to wait on.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from hpcbench.errors import SignalStop, Stopped

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU")
                     if hasattr(signal, name))

# Handlers run in the main thread only, between its bytecodes: plain module state is enough.
_deferring = 0
_pending: list[str] = []


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    reason = f"stopped by {signal.Signals(signum).name}"
    if _deferring:
        _pending.append(reason)
    else:
        raise Stopped(reason)


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Within: a stop signal is held back and raised as the outermost such section ends (unless the
    section is already ending with an exception of its own)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        reason = _pending[0] if _pending and not _deferring else None
        if not _deferring:
            _pending.clear()
    if reason is not None:
        raise Stopped(reason)


def deferring() -> bool:
    """Whether this moment is inside ``stops_deferred()`` (a lock is held on some rank's window)."""
    return _deferring > 0


@contextmanager
def _handled_by(handler: Any, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within: ``handler`` for ``signals`` (every stop signal). Off the main thread (a rank of the
    loopback cluster, where signals reach the process, not the rank) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def stop_on_signals() -> Any:
    """Within: a stop signal raises ``Stopped`` naming it."""
    return _handled_by(_raise_stopped)


def signals_held() -> Any:
    """Within: stop signals are ignored (while the record of a failed run is written)."""
    return _handled_by(signal.SIG_IGN)


def _study_stopped(signum: int, frame: FrameType | None) -> None:
    raise SignalStop(signal.Signals(signum).name)


def signals_stop_study() -> Any:
    """Within: SIGHUP (the terminal closed) or SIGTERM (a batch job's end, ``kill``) raises ``SignalStop``, a
    KeyboardInterrupt, so a study stops its runs as Ctrl-C would, each run ending "aborted" with its
    record, and says so (SIGTERM used to end it without a word)."""
    return _handled_by(_study_stopped, (signal.SIGHUP, signal.SIGTERM))


def hangup_ignored() -> Any:
    """Within: SIGHUP is ignored, by this process and by the processes it starts (they inherit it):
    MPICH's mpiexec, which would kill its ranks outright on a hangup, started so."""
    return _handled_by(signal.SIG_IGN, (signal.SIGHUP,))
