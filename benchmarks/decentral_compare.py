"""Issue 4's comparison: the decentralized algorithms next to allreduce and asgd, same budget and recipe.

digits + cnn, 4 workers (5 ranks) under mpiexec by default; prints final accuracy, samples/s and the
time to 90% held-out accuracy. Run by hand: python benchmarks/decentral_compare.py [--workers 4]
"""
import argparse
import tempfile
from pathlib import Path

from tabulate import tabulate

from common import fmt, real, simulated

ALGOS = [("allreduce", ()), ("asgd", ()), ("easgd", ()), ("easgd-sync", ()), ("gossip", ()),
         ("gossip", ("--set", "gossip.variant=push")), ("sgp", ()), ("osgp", ())]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--mode", choices=("mpi", "sim"), default="mpi")
    p.add_argument("--model", default="cnn")
    p.add_argument("--epochs", default="15")
    p.add_argument("--lr", default="0.1")
    p.add_argument("--momentum", default="0")
    p.add_argument("--stragglers", default="")
    args = p.parse_args()
    common = ["--dataset", "digits", "--model", args.model, "--epochs", args.epochs, "--lr", args.lr,
              "--momentum", args.momentum, "--set", "evals=30"]
    if args.stragglers:
        common += ["--stragglers", args.stragglers]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo, extra in ALGOS:
            name = algo + ("-push" if extra else "")
            out = Path(tmp) / f"{name}.h5"
            run_args = ["--algo", algo, *extra, *common]
            rec = real(args.workers + 1, run_args, out) if args.mode == "mpi" else simulated(args.workers, run_args,
                                                                                              out)
            s = rec.summary
            rows.append([name, fmt(s["final_accuracy"]), f"{s['samples_per_s']:.0f}", fmt(s["time_to_target_s"], 2),
                         fmt(s["wall_s"], 2), fmt(s["final_consensus"], 4)])
    print(f"digits, {args.model}, {args.workers} workers, {args.epochs} epochs, lr {args.lr}, "
          f"momentum {args.momentum}, mode {args.mode}")
    print(tabulate(rows, headers=["algorithm", "final acc", "samples/s", "time to 90% (s)", "wall (s)",
                                  "final consensus"]))


if __name__ == "__main__":
    main()
