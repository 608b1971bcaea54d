"""hpcbench's allreduce step time against the bare mpi4py + torch loop, as a ratio, same run.

For each worker count: the bare loop on N ranks and ``hpcbench run --algo allreduce`` on N+1
ranks (rank 0 coordinates), alternating, several rounds; reports the median step time of each,
the median ratio and its spread. With 1 worker nothing is oversubscribed on a 2-core machine, so
that row is the harness's own cost; beyond it the extra coordinator process also competes for the
cores. Run by hand: python benchmarks/harness_overhead.py
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcbench.results.store import read_run
from hpcbench.runtime.launch import launch_env, mpi_command, mpiexec_path

HERE = Path(__file__).parent


def bare(workers: int, model: str, steps: int) -> float:
    cmd = [mpiexec_path(), "-n", str(workers), sys.executable, str(HERE / "bare_allreduce.py"), "--model", model,
           "--steps", str(steps)]
    out = subprocess.run(cmd, env=launch_env(workers), capture_output=True, text=True, timeout=600, check=True)
    return float(re.search(r"median_step_s=([0-9.]+)", out.stdout).group(1))


def harness(workers: int, model: str, steps: int, out: Path) -> float:
    cmd = mpi_command(workers + 1, ["run", "--algo", "allreduce", "--model", model, "--steps", str(steps + 20),
                                    "--out", str(out)])
    subprocess.run(cmd, env=launch_env(workers + 1), capture_output=True, text=True, timeout=600, check=True)
    return float(read_run(out).summary["median_step_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--model", default="cnn")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"model {args.model}, digits, batch 32, {args.steps} timed steps, {args.rounds} rounds")
    print(f"{'workers':>7} {'bare ms':>9} {'hpcbench ms':>12} {'ratio':>7} {'ratio spread':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.workers.split(",")):
            b, h = [], []
            for r in range(args.rounds):
                b.append(bare(n, args.model, args.steps))
                h.append(harness(n, args.model, args.steps, Path(tmp) / f"h{n}-{r}.h5"))
            ratios = [y / x for x, y in zip(b, h)]
            print(f"{n:>7} {1e3 * statistics.median(b):>9.2f} {1e3 * statistics.median(h):>12.2f} "
                  f"{statistics.median(ratios):>7.2f} {min(ratios):>6.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
