"""Rank 0's progress during a run: samples, rate, the workers' training loss/accuracy, ETA.

On a terminal, one self-updating line (refreshed twice a second). Elsewhere (a launcher's pipe, as
MPICH's mpiexec gives its ranks, or a batch job's log file) a plain line every ``every_s`` seconds, so
the output shows it is alive; an MPI run's first plain line comes early (``early``): after FIRST_S
seconds or at FIRST_SHARE of the budget, whichever is sooner, so even a short run shows one.
HPCBENCH_PROGRESS=0 silences it, =1 forces the live line. Training loss and accuracy are the
workers' own, on the batches they trained on: free to compute, unlike a held-out evaluation, which
would perturb the run.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

REFRESH_S = 0.5
FIRST_S, FIRST_SHARE = 10.0, 0.1
MODES = ("live", "plain", "off")


def mode_for(stream: TextIO) -> str:
    forced = os.environ.get("HPCBENCH_PROGRESS", "")
    if forced in ("0", "1"):
        return "live" if forced == "1" else "off"
    return "live" if stream.isatty() else "plain"


class ProgressLine:
    def __init__(self, label: str, budget: int, stream: TextIO | None = None, mode: str | None = None,
                 every_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 rate_unit: str = "samples/s", early: bool = False) -> None:
        """``stream``: stderr as it is when the line is made (not when this module was imported);
        ``rate_unit``: what the rate counts (the simulator's is per second of wall-clock time);
        ``early``: the first plain line at FIRST_S or FIRST_SHARE, not after ``every_s``."""
        self.rate_unit = rate_unit
        stream = sys.stderr if stream is None else stream
        stream = getattr(stream, "stream", stream)  # its own carriage return, past the CLI's escaping
        self.label, self.budget, self.stream, self.clock = label, budget, stream, clock
        self.mode = mode_for(stream) if mode is None else mode
        self.every_s = REFRESH_S if self.mode == "live" else every_s
        self.start = self.last = clock()
        self.shown = False
        self.early = early and self.mode == "plain"

    def due(self, now: float, samples: int) -> bool:
        if self.mode == "off":
            return False
        if self.early:  # the first plain line of an MPI run
            return now - self.start >= min(FIRST_S, self.every_s) or samples >= FIRST_SHARE * self.budget
        return now - self.last >= self.every_s

    def update(self, samples: int, loss: float, accuracy: float) -> None:
        now = self.clock()
        if not self.due(now, samples):
            return
        self.early = False
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = samples / elapsed
        eta = (self.budget - samples) / rate if rate > 0 else float("inf")
        trained = f"train loss {loss:.3f}, train acc {accuracy:.3f}, " if loss == loss else ""  # NaN: no model
        line = (f"{self.label}: {samples}/{self.budget} samples ({100 * samples / self.budget:.0f}%), "
                f"{rate:.0f} {self.rate_unit}, {trained}ETA {eta:.0f} s")
        if self.mode == "live":
            self.stream.write("\r" + line.ljust(100))
            self.shown = True
        else:
            self.stream.write(f"[{elapsed:.0f} s] {line}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def clock_text(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Countdown:
    """The overall count of many runs and the time left, from the runs so far: each run weighs what its
    size says (its ranks: on one machine a run's time grows with them), and the time left is the time so
    far scaled by the weight left over the weight done."""

    def __init__(self, weights: Sequence[float], clock: Callable[[], float] = time.monotonic) -> None:
        self.left, self.done_weight, self.done, self.total = float(sum(weights)), 0.0, 0, len(weights)
        self.clock = clock
        self.start = clock()
        self.left_s = float("nan")

    def finished(self, weight: float) -> str:
        """Count one run of ``weight`` as done; → "[k/N, T so far, about U left]"."""
        self.done += 1
        self.done_weight += weight
        self.left = max(0.0, self.left - weight)
        elapsed = self.clock() - self.start
        left = elapsed * self.left / self.done_weight if self.done_weight > 0 else float("nan")
        ahead = "" if self.done == self.total else f", about {clock_text(left)} left"
        self.left_s = left
        return f"[{self.done}/{self.total}, {clock_text(elapsed)} so far{ahead}]"

    def shorter(self) -> list[str]:
        """The last count in short, for a line with little room: "[k/N, ~U left]", then "[k/N]"."""
        count = f"{self.done}/{self.total}"
        return ([] if self.done == self.total else [f"[{count}, ~{clock_text(self.left_s)} left]"]) + [f"[{count}]"]
