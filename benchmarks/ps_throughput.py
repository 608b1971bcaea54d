"""Parameter-server throughput: hpcbench's asgd server against a bare mpi4py server doing the same
protocol (``bare_ps.py --protocol versioned``) and the locked protocol hpcbench had before (``locked``),
and what Gap-Aware costs on top of asgd.

Payload workload with zero compute, so every number is the server's and the messages' cost. For
each message size and worker count, rounds run the two bare servers, asgd and ga-asgd, each round in
the reverse order of the one before; prints the median updates/s of each and the ratios asgd / bare
(goal >= 1.0) and ga-asgd / asgd.

And each against the memory-traffic limit, measured in the same round: a server's own part of an update
moves SERVER_COPIES times the gradient's bytes P through memory (θ -= lr·g read θ, read g, write θ: 3P;
θ copied into the window it publishes: 2P; the gradient copied out of MPI's buffers into the receive:
2P), so a core copying at B bytes/s can apply at most B / (7P) updates a second. The probe: copies from
one P-byte array to the next around as many as the run keeps (the server's θ, two window slots and a
receive per worker; each worker's copy of θ, gradient and message: 3 + 4n), reads and writes counted,
best of 5 bursts (at 1M floats that is 44-76 MB, beyond this machine's 32 MB cache: memory's bandwidth).
Run by hand: python benchmarks/ps_throughput.py
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


SERVER_COPIES = 7  # the gradient's bytes a server's part of one update reads and writes (above)


def copy_bandwidth(nbytes: int, buffers: int, seconds: float = 0.3) -> float:
    """Bytes read and written per second by copies from one ``nbytes`` array to the next around ``buffers``
    of them (best of 5 bursts of ``seconds`` / 5 each: a busy machine only ever slows one down)."""
    ring = [np.ones(nbytes // 4, np.float32) for _ in range(buffers)]
    best = 0.0
    for _ in range(5):
        copies, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds / 5:
            np.copyto(ring[(copies + 1) % buffers], ring[copies % buffers])
            copies += 1
        best = max(best, 2 * nbytes * copies / elapsed)
    return best


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
                    "limit": lambda: copy_bandwidth(4 * params, 3 + 4 * n) / (SERVER_COPIES * 4 * params),
                    "versioned": lambda: bare(n + 1, params, steps, "versioned"),
                    "locked": lambda: bare(n + 1, params, steps, "locked"),
                    "asgd": lambda: hpcbench(n + 1, "asgd", params, steps, Path(tmp) / "asgd.h5"),
                    "ga-asgd": lambda: hpcbench(n + 1, "ga-asgd", params, steps, Path(tmp) / "ga.h5")})
                lim, v, lk, a, g = got["limit"], got["versioned"], got["locked"], got["asgd"], got["ga-asgd"]
                rows.append([params, n, steps, *(f"{statistics.median(x):.0f}" for x in (lim, v, lk, a, g)),
                             spread(v, a), spread(lk, a), spread(a, g), spread(lim, v), spread(lim, a)])
                print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    print()
    print(tabulate(rows, headers=["params", "workers", "steps", "limit", "bare (versioned)", "bare (locked)", "asgd",
                                  "ga-asgd", "asgd / bare versioned", "asgd / bare locked", "ga-asgd / asgd",
                                  "bare / limit", "asgd / limit"]))


def spread(base: list[float], other: list[float]) -> str:
    ratios = [y / x for x, y in zip(base, other)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    main()
