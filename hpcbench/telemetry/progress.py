"""Rank 0's progress during a run: samples, rate, the workers' training loss/accuracy, ETA.

On a terminal, one self-updating line (refreshed twice a second). Elsewhere (batch jobs, whose output
goes to a file) a plain line every ``every_s`` seconds, so a job's log shows it is alive.
HPCBENCH_PROGRESS=0 silences it, =1 forces the live line. Training loss and accuracy are the
workers' own, on the batches they trained on: free to compute, unlike a held-out evaluation, which
would perturb the run.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

REFRESH_S = 0.5
MODES = ("live", "plain", "off")


def mode_for(stream: TextIO) -> str:
    forced = os.environ.get("HPCBENCH_PROGRESS", "")
    if forced in ("0", "1"):
        return "live" if forced == "1" else "off"
    return "live" if stream.isatty() else "plain"


class ProgressLine:
    def __init__(self, label: str, budget: int, stream: TextIO | None = None, mode: str | None = None,
                 every_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 rate_unit: str = "samples/s") -> None:
        """``stream``: stderr as it is when the line is made (not when this module was imported);
        ``rate_unit``: what the rate counts (the simulator's is per second of wall-clock time)."""
        self.rate_unit = rate_unit
        stream = sys.stderr if stream is None else stream
        self.label, self.budget, self.stream, self.clock = label, budget, stream, clock
        self.mode = mode_for(stream) if mode is None else mode
        self.every_s = REFRESH_S if self.mode == "live" else every_s
        self.start = self.last = clock()
        self.shown = False

    def update(self, samples: int, loss: float, accuracy: float) -> None:
        now = self.clock()
        if self.mode == "off" or now - self.last < self.every_s:
            return
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
