"""Faults injected on purpose (``--set fault=...``), so failures can be reproduced and measured."""
from __future__ import annotations

import math
import os
import signal
import subprocess

from hpcbench.config import Fault, Faults
from hpcbench.errors import InjectedFault
from hpcbench.signals import deferring

SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "term": signal.SIGTERM}


class Injector:
    """One rank's view of the run's fault: checked between operations and while waiting.

    Times count from the start of the timed window (``start``, this rank's clock); steps are the
    rank's own step counter.
    """

    def __init__(self, faults: Faults, rank: int, start: float) -> None:
        self.fault = faults.for_rank(rank)
        self.start = start
        self.slowed = False  # a slow fault has come (it stays on from then)

    def at_phase(self, phase: str) -> None:
        """Set-up and the final gather: a fault meant for ``phase`` happens now."""
        if self.fault.phase == phase:
            kind = self.fault.kind
            text, self.fault = str(self.fault), Fault()
            if kind == "raise":
                raise InjectedFault(f"injected fault {text}")
            os.kill(os.getpid(), SIGNALS[kind])

    def check(self, now: float, step: int) -> None:
        # A kill or stop waits until no lock is held: a rank stopped holding a lock on rank 0's window
        # would block rank 0's own publish inside MPI, where no heartbeat runs, and the run would name
        # rank 0 instead of this one. The fault stops a rank between operations.
        if self.fault.phase or deferring():
            return
        kind, at = self.fault.kind, self.fault.at
        if kind == "kill" and now - self.start >= at:
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind in ("stop", "term") and now - self.start >= at:
            lasts, self.fault = self.fault.lasts, Fault()  # once: after SIGCONT the rank goes on; SIGTERM
            if lasts:  # ends the run its own way. A stopped rank cannot wake itself: a process of its own does
                subprocess.Popen(["/bin/sh", "-c", f"sleep {lasts:g}; kill -CONT {os.getpid()}"],
                                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            os.kill(os.getpid(), SIGNALS[kind])
        elif kind == "raise" and step >= at:
            text, self.fault = str(self.fault), Fault()
            raise InjectedFault(f"injected fault {text}")

    def due(self) -> float:
        """When (this rank's clock) a kill, stop or term due at a time comes: a rank sleeping through a
        modeled compute wakes then, so that it dies when its fault says, as the simulator's does (a real
        gradient is not cut short: the fault comes when it ends); inf where none is pending."""
        fault = self.fault
        return self.start + fault.at if fault.kind in SIGNALS and not fault.phase else math.inf

    def unfired(self) -> str:
        """The fault asked of this rank during training, where training ended before it came (a kill at
        99 s of a 4 s run); '' where it came or there was none. (A fault at a phase comes at that phase.)"""
        return "" if self.fault.phase or self.slowed else str(self.fault)

    def slow_factor(self, now: float) -> float:
        """How much longer this rank's computes last from now on (``slow``)."""
        fault = self.fault
        if fault.kind == "slow" and now - self.start >= fault.at:
            self.slowed = True
            return fault.factor
        return 1.0
