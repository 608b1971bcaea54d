"""Parameter-server throughput: hpcbench's asgd server against a bare mpi4py server doing the same
protocol (``bare_ps.py --protocol versioned``) and the locked protocol hpcbench had before (``locked``),
and what Gap-Aware costs on top of asgd.

Payload workload with zero compute, so every number is the server's and the messages' cost. For
each message size and worker count, rounds run the two bare servers, asgd and ga-asgd, each round in
the reverse order of the one before; prints the median updates/s of each and the ratios asgd / bare
(goal >= 0.9) and ga-asgd / asgd.
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

from hpcbench.launch.local import launch_env, mpi_command, mpiexec_path
from hpcbench.results.store import read_run

from common import in_turn

HERE = Path(__file__).parent


def bare(world: int, params: int, steps: int, protocol: str) -> float:
    cmd = [mpiexec_path(), "-n", str(world), sys.executable, str(HERE / "bare_ps.py"), "--params", str(params),
           "--steps", str(steps), "--protocol", protocol]
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
    p.add_argument("--steps", type=int, default=0,
                   help="updates per worker (default: 2e8 / params, at least 200: a run of a second or more)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"payload, zero compute, {args.rounds} rounds, medians (ratios: median, min-max over rounds)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for params in map(int, args.params.split(",")):
            steps = args.steps or max(200, int(2e8 / params))
            for n in map(int, args.workers.split(",")):
                got = in_turn(args.rounds, lambda r: {
                    "versioned": lambda: bare(n + 1, params, steps, "versioned"),
                    "locked": lambda: bare(n + 1, params, steps, "locked"),
                    "asgd": lambda: hpcbench(n + 1, "asgd", params, steps, Path(tmp) / "asgd.h5"),
                    "ga-asgd": lambda: hpcbench(n + 1, "ga-asgd", params, steps, Path(tmp) / "ga.h5")})
                v, lk, a, g = got["versioned"], got["locked"], got["asgd"], got["ga-asgd"]
                rows.append([params, n, steps, f"{statistics.median(v):.0f}", f"{statistics.median(lk):.0f}",
                             f"{statistics.median(a):.0f}", f"{statistics.median(g):.0f}", spread(v, a), spread(lk, a),
                             spread(a, g)])
                print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    print()
    print(tabulate(rows, headers=["params", "workers", "steps", "bare (versioned)", "bare (locked)", "asgd", "ga-asgd",
                                  "asgd / bare versioned", "asgd / bare locked", "ga-asgd / asgd"]))


def spread(base: list[float], other: list[float]) -> str:
    ratios = [y / x for x, y in zip(base, other)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    main()
