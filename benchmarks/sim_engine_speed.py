"""The simulator's speed: 1024 workers and 200,000 asgd updates with numerics off, against SimPy.

hpcbench runs the real asgd programs (versions, frames, logs, timelines) in its engine; the SimPy
model is the bare minimum of the same system (gamma compute times, one FIFO server), so it is a
floor, not an equal. Reports updates per wall second for both, and their ratio, median of rounds,
and what the asgd programs alone cost per update when a do-nothing driver answers their operations
(no virtual time, no events): the floor for any engine that runs the real programs.
Run by hand: python benchmarks/sim_engine_speed.py
"""
import argparse
import re
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
    engine = float(re.search(r"events simulated in ([0-9.]+) s", out).group(1))
    return total, engine


def programs_only_s(workers: int, steps: int) -> tuple[int, float]:
    """(updates, seconds) for the real asgd server and worker programs driven with no engine at all:
    reads answered with the window, computes with a zero gradient, messages handed over in a FIFO."""
    from collections import deque

    from hpcbench.algorithms.ops import Compute, Evaluate, Gradient, Progress, Publish, Read, Record, Recv, Send
    from hpcbench.cli import build_parser
    from hpcbench.launch.arguments import configs_from_args
    from hpcbench.runtime.assemble import assemble
    from hpcbench.runtime.plan import validate
    from hpcbench.runtime.sim.session import STAND_IN_FLOATS

    args = build_parser().parse_args(["simulate", "--algo", "asgd", "--workers", str(workers), "--steps",
                                      str(steps), "--numerics", "off"])
    cfg, _ = configs_from_args(args)
    run = assemble(validate(cfg), workers, stand_in=STAND_IN_FLOATS)
    logs, window = run.logs(), run.layout.windows["params"].initial.copy()
    programs = [run.algo.server()] + [run.algo.worker(r) for r in range(1, workers + 1)]
    sent: deque = deque()  # (from, to, bytes)

    def drive(rank: int, value: object) -> bool:
        """Run ``rank`` until it waits for a message; False when its program has ended."""
        try:
            while True:
                op = programs[rank].send(value)
                value, kind = None, type(op)
                if kind is Read:
                    value = [window.copy()]
                elif kind is Compute:
                    value = Gradient(np.zeros(STAND_IN_FLOATS, np.float32), float("nan"), cfg.batch_size, 0)
                elif kind is Send:
                    sent.append((rank, op.dest, np.ascontiguousarray(op.data).view(np.uint8).copy()))
                elif kind is Publish:
                    window[:] = op.data.view(np.uint8)
                elif kind is Record:
                    logs.record(0.0, op)
                elif kind is Recv:
                    return True
                elif kind not in (Evaluate, Progress):
                    raise TypeError(kind)
        except StopIteration:
            return False

    t0 = time.perf_counter()
    for rank in range(workers + 1):
        drive(rank, None)
    updates = 0
    while sent:
        src, _, grad = sent.popleft()
        drive(0, (src, grad))
        updates += 1
        _, dest, ack = sent.pop()  # the acknowledgement, just sent
        drive(dest, (0, ack))  # the worker's next gradient joins the back of the queue
    return updates, time.perf_counter() - t0


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
    print(f"  hpcbench simulate, whole command: {statistics.median(totals):.1f} s "
          f"({min(totals):.1f}-{max(totals):.1f})")
    print(f"  hpcbench engine: {statistics.median(engines):.1f} s = {ours:,.0f} updates/s")
    print(f"  minimal SimPy model of the same system: {theirs:,.0f} updates/s")
    print(f"  ratio hpcbench / SimPy: {ours / theirs:.2f}")
    done, seconds = programs_only_s(args.workers, steps)
    print(f"  per update: hpcbench engine {1e6 / ours:.0f} us, of which the asgd programs alone "
          f"{1e6 * seconds / done:.0f} us ({done} updates, no engine); SimPy model {1e6 / theirs:.0f} us")


if __name__ == "__main__":
    main()
