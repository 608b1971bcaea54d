"""Issue 3's experiment: asgd, sa-asgd, ga-asgd and dana-ga with momentum 0.9 at 8 workers on digits.

Same model, budget and seed for all; prints final accuracy, mean staleness and mean penalty.
``--mode sim --workers 8,32,128`` runs the same comparison on the virtual cluster.
Run by hand: python benchmarks/staleness_penalties.py [--mode sim --workers 8,32,128]
"""
import argparse
import tempfile
from pathlib import Path

from tabulate import tabulate

from common import fmt, real, simulated

ALGOS = ("asgd", "sa-asgd", "ga-asgd", "dana-ga")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("mpi", "sim"), default="mpi")
    p.add_argument("--workers", default="8")
    p.add_argument("--model", default="mlp")
    p.add_argument("--epochs", default="30")
    p.add_argument("--lr", default="0.05")
    p.add_argument("--seed", default="0")
    args = p.parse_args()
    common = ["--dataset", "digits", "--model", args.model, "--epochs", args.epochs, "--lr", args.lr,
              "--momentum", "0.9", "--seed", args.seed]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.workers.split(",")):
            for algo in ALGOS:
                out = Path(tmp) / f"{algo}-{n}.h5"
                run_args = ["--algo", algo, *common]
                rec = real(n + 1, run_args, out) if args.mode == "mpi" else simulated(n, run_args, out)
                s = rec.summary
                rows.append([algo, n, fmt(s["final_accuracy"]), fmt(s["best_accuracy"]), fmt(s["staleness_mean"], 1),
                             fmt(s["penalty_mean"], 2), fmt(s["gap_mean"], 2), f"{s['samples_per_s']:.0f}"])
    print(f"digits, {args.model}, momentum 0.9, lr {args.lr}, {args.epochs} epochs, seed {args.seed}, "
          f"mode {args.mode}")
    print(tabulate(rows, headers=["algorithm", "workers", "final acc", "best acc", "staleness mean", "penalty mean",
                                  "gap mean", "samples/s"]))


if __name__ == "__main__":
    main()
