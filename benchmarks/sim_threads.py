"""How fast ``simulate`` runs with its default threads against the best setting, on idle and on busy cores.

The README's 128-worker example (fewer epochs), with numerics on: torch computes the workers' gradients.
Each setting (the default, which is one thread unless told, and threads=N for N up to this machine's
cores) runs with the cores idle, then with as many busy-looping processes as there are cores (a study
running beside it, a login node). Reported: seconds per run, and the default's time over the best one's
in each condition (the target: at most 1.5).
Run by hand: python benchmarks/sim_threads.py [--epochs 3] [--rounds 2]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

EXAMPLE = ["--algo", "ga-asgd", "--workers", "128", "--dataset", "teacher", "--momentum", "0.9",
           "--compute", "gamma:shape=100,mean=0.05", "--stragglers", "0.1:3"]


def spin() -> None:
    while True:
        pass


def seconds(args: list[str], out: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", *args, "--out", str(out), "--overwrite"],
                          capture_output=True, text=True, env={**os.environ, "HPCBENCH_PROGRESS": "0"})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", default="3")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    cores = os.cpu_count() or 1
    settings = {"default": []} | {f"threads={n}": ["--set", f"threads={n}"] for n in sorted({1, 2,
                                                                                             cores}) if n <= cores}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for condition in ("idle", "busy"):
            spinners = [multiprocessing.Process(target=spin,
                                                daemon=True) for _ in range(cores if condition == "busy" else 0)]
            for s in spinners:
                s.start()
            try:
                times = {name: min(seconds(EXAMPLE + ["--epochs", args.epochs] + extra, Path(tmp) / "r.h5")
                                   for _ in range(args.rounds)) for name, extra in settings.items()}
            finally:
                for s in spinners:
                    s.terminate()
            best = min(times.values())
            rows += [[condition, name, f"{t:.1f}", f"{t / best:.2f}"] for name, t in times.items()]
    print(tabulate(rows, headers=["cores", "setting", "seconds (best of rounds)", "over the best"]))


if __name__ == "__main__":
    main()
