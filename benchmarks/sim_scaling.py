"""Issue 5's study on the virtual cluster: time to 90% accuracy at 8, 32 and 128 workers.

allreduce vs asgd vs easgd vs sgp on digits (gamma compute times, shape 100, mean 50 ms per batch;
10 Gb/s links), with and without 10% of the workers slowed 3×. Every algorithm gets the same budget
at a given size and the same learning-rate recipe (lr 0.1, batch 32, a 2-epoch warm-up;
``--lr-scaling linear`` scales the synchronous methods' rate with n as Goyal et al. do).
Run by hand: python benchmarks/sim_scaling.py
"""
import argparse
import tempfile
from pathlib import Path

from tabulate import tabulate

from common import fmt, simulated

ALGOS = ("allreduce", "asgd", "easgd", "sgp")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", default="8,32,128")
    p.add_argument("--steps", default="150")
    p.add_argument("--model", default="mlp")
    p.add_argument("--lr", default="0.1")
    p.add_argument("--lr-scaling", default="none", choices=("none", "linear", "sqrt"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.workers.split(",")):
            for stragglers in ("", "0.1:3"):
                for algo in ALGOS:
                    run_args = ["--algo", algo, "--dataset", "digits", "--model", args.model, "--steps", args.steps,
                                "--lr", args.lr, "--set", f"lr_scaling={args.lr_scaling}", "--set", "warmup_epochs=2",
                                "--set", "evals=40", "--compute", "gamma:shape=100,mean=0.05"]
                    if stragglers:
                        run_args += ["--stragglers", stragglers]
                    rec = simulated(n, run_args, Path(tmp) / f"{algo}-{n}-{bool(stragglers)}.h5")
                    s = rec.summary
                    rows.append([n, "10% at 3x" if stragglers else "none", algo, fmt(s["time_to_target_s"], 2),
                                 fmt(s["final_accuracy"]), f"{s['samples_per_s']:.0f}", fmt(s["wait_fraction"], 2),
                                 fmt(s["communicate_fraction"], 2)])
    print(f"simulated, digits, {args.model}, {args.steps} steps per worker, lr {args.lr} "
          f"(synchronous methods: {args.lr_scaling} scaling), no momentum")
    print(tabulate(rows, headers=["workers", "stragglers", "algorithm", "time to 90% (s)", "final acc",
                                  "samples/s", "wait frac", "comm frac"]))


if __name__ == "__main__":
    main()
