"""Throughput with and without stragglers for every algorithm, on 8 simulated workers (issue 10).

Each algorithm runs the same sample budget (digits, mlp-sized messages, gamma compute times with
shape 100 and mean 50 ms per batch, 10 Gb/s links), once with equal workers and once with a
quarter of them 3× slower. Asynchronous methods should barely notice the stragglers (fast workers
take over their share of the budget); synchronous ones run at the stragglers' pace.
Run by hand: python benchmarks/straggler_throughput.py [--workers 8] [--steps 100]
"""
import argparse
import tempfile
from pathlib import Path

from tabulate import tabulate

from hpcbench.algorithms import ALGORITHMS

from common import simulated

VARIANTS = {"gossip (push)": ("gossip", ("--set", "gossip.variant=push"))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--steps", default="100")
    p.add_argument("--stragglers", default="0.25:3")
    args = p.parse_args()
    runs = {name: (name, ()) for name in ALGORITHMS.names()}
    runs.update(VARIANTS)
    rates: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (algo, extra) in runs.items():
            common = ["--algo", algo, *extra, "--dataset", "digits", "--model", "mlp", "--steps", args.steps,
                      "--numerics", "off", "--compute", "gamma:shape=100,mean=0.05"]
            stem = "".join(c if c.isalnum() or c == "-" else "_" for c in label)  # a variant shares its algorithm
            plain = simulated(args.workers, common, Path(tmp) / f"{stem}-plain.h5").summary["samples_per_s"]
            slowed = simulated(args.workers, [*common, "--stragglers", args.stragglers],
                               Path(tmp) / f"{stem}-slow.h5").summary["samples_per_s"]
            rates[label] = (plain, slowed)
    base = rates["allreduce"][1]
    rows = [[label, "async" if ALGORITHMS.get(runs[label][0]).asynchronous else "sync", f"{plain:.0f}",
             f"{slowed:.0f}", f"{slowed / plain:.2f}", f"{slowed / base:.2f}"]
            for label, (plain, slowed) in rates.items()]
    print(f"simulated, {args.workers} workers, {args.steps} steps per worker of budget, stragglers {args.stragglers}")
    print(tabulate(rows, headers=["algorithm", "kind", "samples/s", "with stragglers", "kept",
                                  "vs allreduce (stragglers)"]))


if __name__ == "__main__":
    main()
