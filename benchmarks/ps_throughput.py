"""Issue 14's parameter-server throughput: hpcbench's asgd server against a bare mpi4py server
doing the same protocol (``bare_ps.py``), and what Gap-Aware costs on top of asgd.

Payload workload with zero compute, so every number is the server's and the messages' cost. For
each message size and worker count, rounds alternate bare, asgd and ga-asgd; prints the median
updates/s of each and the ratios asgd / bare (goal >= 0.9) and ga-asgd / asgd.
Run by hand: python benchmarks/ps_throughput.py
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from hpcbench.results.store import read_run
from hpcbench.launch.local import launch_env, mpi_command, mpiexec_path

HERE = Path(__file__).parent


def bare(world: int, params: int, steps: int) -> float:
    cmd = [mpiexec_path(), "-n", str(world), sys.executable, str(HERE / "bare_ps.py"), "--params", str(params),
           "--steps", str(steps)]
    out = subprocess.run(cmd, env=launch_env(world), capture_output=True, text=True, timeout=600, check=True)
    return float(re.search(r"updates_per_s=([0-9.]+)", out.stdout).group(1))


def hpcbench(world: int, algo: str, params: int, steps: int, out: Path) -> float:
    cmd = mpi_command(world, ["run", "--algo", algo, "--model", "payload", "--set", f"payload.params={params}",
                              "--compute", "gamma:shape=100,mean=0", "--steps", str(steps), "--out", str(out),
                              "--overwrite"])
    subprocess.run(cmd, env=launch_env(world), capture_output=True, text=True, timeout=600, check=True)
    s = read_run(out).summary
    return s["updates"] / s["wall_s"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--params", default="100000,1000000")
    p.add_argument("--workers", default="2,4")
    p.add_argument("--steps", type=int, default=300, help="updates per worker")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"payload, zero compute, {args.steps} updates per worker, {args.rounds} rounds, medians")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for params in map(int, args.params.split(",")):
            for n in map(int, args.workers.split(",")):
                b, a, g = [], [], []
                for _ in range(args.rounds):
                    b.append(bare(n + 1, params, args.steps))
                    a.append(hpcbench(n + 1, "asgd", params, args.steps, Path(tmp) / "asgd.h5"))
                    g.append(hpcbench(n + 1, "ga-asgd", params, args.steps, Path(tmp) / "ga.h5"))
                ratios = [y / x for x, y in zip(b, a)]
                rows.append([params, n, f"{statistics.median(b):.0f}", f"{statistics.median(a):.0f}",
                             f"{statistics.median(g):.0f}",
                             f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
                             f"{statistics.median(g) / statistics.median(a):.2f}"])
                print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    print()
    print(tabulate(rows, headers=["params", "workers", "bare updates/s", "asgd", "ga-asgd", "asgd / bare",
                                  "ga-asgd / asgd"]))


if __name__ == "__main__":
    main()
