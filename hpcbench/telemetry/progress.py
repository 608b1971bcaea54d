"""One self-updating progress line on rank 0's terminal: samples, rate, training loss/accuracy, ETA.

Shown only when stderr is a terminal (so batch jobs, whose output goes to files, stay quiet);
HPCBENCH_PROGRESS=0 or 1 overrides. Training loss and accuracy are the workers' own, on the batches
they trained on: free to compute, unlike a held-out evaluation, which would perturb the run.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

REFRESH_S = 0.5


def wanted(stream: TextIO) -> bool:
    forced = os.environ.get("HPCBENCH_PROGRESS", "")
    if forced in ("0", "1"):
        return forced == "1"
    return stream.isatty()


class ProgressLine:
    def __init__(self, label: str, budget: int, stream: TextIO = sys.stderr, enabled: bool | None = None) -> None:
        self.label, self.budget, self.stream = label, budget, stream
        self.enabled = wanted(stream) if enabled is None else enabled
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def update(self, samples: int, loss: float, accuracy: float) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < REFRESH_S:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = samples / elapsed
        eta = (self.budget - samples) / rate if rate > 0 else float("inf")
        line = (f"{self.label}: {samples}/{self.budget} samples ({100 * samples / self.budget:.0f}%), "
                f"{rate:.0f} samples/s, train loss {loss:.3f}, train acc {accuracy:.3f}, ETA {eta:.0f} s")
        self.stream.write("\r" + line.ljust(100))
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
