"""Issue 5's check of ``hpcbench calibrate``: does the calibrated simulator reproduce a real run?

For asgd and allreduce at 4 workers (digits + cnn): a real run under mpiexec, ``calibrate`` on its
result file, the printed simulation with the same budget, and samples/s of both. Rounds repeat the
pair; the target is agreement within 15%. Run by hand: python benchmarks/calibration.py
"""
import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcbench.results.store import read_run

from common import real


def calibrated_command(path: Path) -> list[str]:
    text = subprocess.run([sys.executable, "-m", "hpcbench", "calibrate", str(path)], capture_output=True,
                          text=True, check=True).stdout
    start = text.index("hpcbench simulate")
    return shlex.split(text[start:text.index("\n\n", start)].replace("\\\n", " "))[1:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", default="100")
    args = p.parse_args()
    print(f"digits, cnn, 4 workers, {args.steps} steps per worker, {args.rounds} rounds")
    print(f"{'algorithm':>10} {'real samples/s':>15} {'simulated':>10} {'sim / real':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ("asgd", "allreduce"):
            ratios, reals, sims = [], [], []
            for r in range(args.rounds):
                rec = real(5, ["--algo", algo, "--model", "cnn", "--steps", args.steps], Path(tmp) / f"{algo}{r}.h5")
                out = Path(tmp) / f"{algo}{r}-sim.h5"
                subprocess.run([sys.executable, "-m", "hpcbench", *calibrated_command(rec_path := Path(rec.path)),
                                "--out", str(out)], capture_output=True, text=True, check=True)
                assert rec_path.exists()
                sim = read_run(out)
                reals.append(rec.summary["samples_per_s"])
                sims.append(sim.summary["samples_per_s"])
                ratios.append(sims[-1] / reals[-1])
            print(f"{algo:>10} {statistics.median(reals):>15.0f} {statistics.median(sims):>10.0f} "
                  f"{statistics.median(ratios):>6.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
