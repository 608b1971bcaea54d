"""The simulator's speed: 1024 workers and 200,000 asgd updates with numerics off, against SimPy.

hpcbench runs the real asgd programs (versions, frames, logs, timelines) in its engine; the SimPy
model is the bare minimum of the same system (gamma compute times, one FIFO server), so it is a
floor, not an equal. Reports updates per wall second for both, and their ratio, median of rounds.
Run by hand: python benchmarks/sim_engine_speed.py
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def simpy_updates_per_s(workers: int, updates: int) -> float:
    import simpy

    env = simpy.Environment()
    server = simpy.Resource(env, capacity=1)
    rngs = [np.random.default_rng([0, w]) for w in range(workers)]
    done = [0]

    def worker(w: int):
        while done[0] < updates:
            yield env.timeout(rngs[w].gamma(100, 0.05 / 100))
            with server.request() as req:
                yield req
                yield env.timeout(52e-6)
                done[0] += 1

    for w in range(workers):
        env.process(worker(w))
    t0 = time.perf_counter()
    env.run()
    return done[0] / (time.perf_counter() - t0)


def hpcbench_seconds(workers: int, steps: int) -> tuple[float, float]:
    """(whole command's wall seconds, engine seconds) for one numerics-off simulation."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", "--algo", "asgd", "--workers",
                              str(workers), "--steps", str(steps), "--numerics", "off", "--out",
                              str(Path(tmp) / "s.h5")], capture_output=True, text=True, check=True).stdout
        total = time.perf_counter() - t0
    engine = float(out.rsplit(" events in ", 1)[1].split(" s]")[0])
    return total, engine


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1024)
    p.add_argument("--updates", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    steps = -(-args.updates // args.workers)
    updates = steps * args.workers
    totals, engines, simpy_rates = [], [], []
    for _ in range(args.rounds):
        total, engine = hpcbench_seconds(args.workers, steps)
        totals.append(total)
        engines.append(engine)
        simpy_rates.append(simpy_updates_per_s(args.workers, updates))
    ours = updates / statistics.median(engines)
    theirs = statistics.median(simpy_rates)
    print(f"{args.workers} workers, {updates} asgd updates, numerics off, {args.rounds} rounds (median, min-max)")
    print(f"  hpcbench simulate, whole command: {statistics.median(totals):.1f} s ({min(totals):.1f}-{max(totals):.1f})")
    print(f"  hpcbench engine: {statistics.median(engines):.1f} s = {ours:,.0f} updates/s")
    print(f"  minimal SimPy model of the same system: {theirs:,.0f} updates/s")
    print(f"  ratio hpcbench / SimPy: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
