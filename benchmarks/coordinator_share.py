"""Rank 0's processor time as an all-reduce coordinator, and its fixed costs before and after training.

Runs ``hpcbench run --algo allreduce --model mlp --dataset digits --steps 300`` on 3 ranks (2 workers)
``--rounds`` times under ``mpiexec`` with the oversubscription settings, each rank started through this
script so that rank 0 notes its processor time at each boundary: the imports (Python, torch, hpcbench),
the set-up (data, model, windows, clocks, the result file claimed), the training (``rank0_cpu_share`` of
the result file is this over the training's wall time), what follows in the run (reading and averaging
the kept snapshots), and what follows the run (the timelines gathered, the evaluations scored, the file
written). Prints each round and the medians.

    python benchmarks/coordinator_share.py [--rounds 5] [--steps 300]
"""
from __future__ import annotations

import argparse
import atexit
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARK = "coordinator-share:"
PHASES = ("imports", "set-up", "training", "after training", "after the run")


def as_rank(argv: list[str]) -> int:
    """One rank of the run: rank 0 prints its processor time at each boundary when it exits."""
    import torch  # noqa: F401  (what every rank imports before it can do anything)

    from hpcbench.cli import main
    from hpcbench.runtime.mpi import driver

    marks = {"imports": time.process_time()}
    run = driver.MpiDriver.run

    def timed(self: driver.MpiDriver, program: driver.Program) -> float:
        if self.comm.rank != 0:
            return run(self, program)
        marks["set-up"] = time.process_time()
        try:
            return run(self, program)
        finally:
            marks["trained"], marks["ran"] = self.trained[1], time.process_time()

    driver.MpiDriver.run = timed  # type: ignore[method-assign]

    def show() -> None:
        if "ran" in marks:
            cut = [0.0, marks["imports"], marks["set-up"], marks["trained"], marks["ran"], time.process_time()]
            print(MARK, " ".join(f"{b - a:.6f}" for a, b in zip(cut, cut[1:])), flush=True)

    atexit.register(show)
    return main(argv)


def measure() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    from hpcbench.launch.local import launch_env, mpiexec_path
    from hpcbench.results.store import read_run

    env = launch_env(3) | {"OMP_NUM_THREADS": "1"}
    shares, phases = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.h5"
        for r in range(args.rounds):
            cmd = [mpiexec_path(), "-n", "3", sys.executable, __file__, "--as-rank", "run", "--algo", "allreduce",
                   "--model", "mlp", "--dataset", "digits", "--steps", str(args.steps), "--out", str(out),
                   "--overwrite"]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
            if proc.returncode != 0 or line is None:
                raise SystemExit(f"the run failed:\n{proc.stderr[-2000:]}")
            rec = read_run(out)
            share, wall = rec.summary["rank0_cpu_share"], rec.summary["wall_s"]
            costs = [float(x) for x in line.split()[1:]]
            shares.append(share)
            phases.append(costs)
            print(f"round {r + 1}: rank 0 {100 * share:.1f}% of a core over {wall:.3f} s of training; "
                  + ", ".join(f"{name} {1e3 * c:.1f} ms" for name, c in zip(PHASES, costs)), flush=True)
    print(f"median of {args.rounds}: rank 0 {100 * statistics.median(shares):.1f}% of a core "
          f"({100 * min(shares):.1f}-{100 * max(shares):.1f}); processor time "
          + ", ".join(f"{name} {1e3 * statistics.median(c):.1f} ms" for name, c in zip(PHASES, zip(*phases))))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--as-rank":
        sys.exit(as_rank(sys.argv[2:]))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(measure())
