"""Issue 14's scale check: every algorithm under real mpiexec at 17 to 129 ranks with the payload
workload (real messages of --params float32, modeled compute, no torch), against the simulator.

For each world size and algorithm: seconds from launch until every rank ended, the run's status,
samples/s, mean staleness (parameter servers), and the simulated samples/s of the same payload and
compute model, uncalibrated (the default network) and calibrated from the real run (`hpcbench
calibrate`), as ratios simulated / real. Run by hand: python benchmarks/payload_scaling.py
"""
import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from hpcbench.algorithms import ALGORITHMS
from hpcbench.launch.local import launch_env, mpi_command
from hpcbench.results.store import read_run

from common import fmt


def real(world: int, args: list[str], out: Path, timeout: float) -> tuple[float, str, object]:
    """(seconds until every rank ended, status, record or None)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(mpi_command(world, ["run", *args, "--out", str(out)]), env=launch_env(world),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, "HANG", None
    took = time.perf_counter() - t0
    if not out.exists():
        lines = [line for line in proc.stderr.splitlines() if "warning" not in line]
        return took, f"exit {proc.returncode}: {lines[-1] if lines else ''}", None
    rec = read_run(out)
    return took, str(rec.attrs["status"]), rec


def simulated(args: list[str], out: Path) -> float:
    subprocess.run([sys.executable, "-m", "hpcbench", "simulate", *args, "--numerics", "off", "--out", str(out)],
                   capture_output=True, text=True, check=True)
    return float(read_run(out).summary["samples_per_s"])


def calibrated(path: Path, out: Path) -> float:
    text = subprocess.run([sys.executable, "-m", "hpcbench", "calibrate", str(path)], capture_output=True,
                          text=True, check=True).stdout
    start = text.index("hpcbench simulate")
    command = shlex.split(text[start:text.index("\n\n", start)].replace("\\\n", " "))[2:]
    return simulated(command, out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="17,33,65,129")
    p.add_argument("--algos", default=",".join(ALGORITHMS.names()))
    p.add_argument("--params", default="100000", help="float32 elements per message")
    p.add_argument("--ms-per-worker", type=float, default=10.0,
                   help="mean modeled compute per batch, per worker (so the server keeps up: 1.28 s at 128)")
    p.add_argument("--steps", default="10")
    p.add_argument("--timeout", type=float, default=400)
    p.add_argument("--no-calibrate", action="store_true")
    args = p.parse_args()
    print(f"payload {args.params} float32, gamma compute (shape 100) of {args.ms_per_worker:g} ms x workers per "
          f"batch, {args.steps} steps per worker, batch 32")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in map(int, args.ranks.split(",")):
            for algo in args.algos.split(","):
                mean = args.ms_per_worker * (world - 1) / 1e3
                run_args = ["--algo", algo, "--model", "payload", "--set", f"payload.params={args.params}",
                            "--compute", f"gamma:shape=100,mean={mean:g}", "--steps", args.steps,
                            "--set", "timeout_s=120"]
                out = Path(tmp) / f"{algo}-{world}.h5"
                took, status, rec = real(world, run_args, out, args.timeout)
                row = [world, algo, f"{took:.1f}", status]
                if rec is None:
                    rows.append(row + ["-"] * 4)
                    print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
                    continue
                s = rec.summary
                sim = simulated(["--workers", str(world - 1), *run_args], Path(tmp) / f"{algo}-{world}-sim.h5")
                cal = float("nan") if args.no_calibrate else calibrated(out, Path(tmp) / f"{algo}-{world}-cal.h5")
                rows.append(row + [f"{s['samples_per_s']:.0f}", fmt(s.get("staleness_mean", float("nan")), 1),
                                   fmt(sim / s["samples_per_s"], 2), fmt(cal / s["samples_per_s"], 2)])
                print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    print()
    print(tabulate(rows, headers=["ranks", "algorithm", "s to end", "status", "samples/s", "staleness",
                                  "sim/real", "calibrated sim/real"]))


if __name__ == "__main__":
    main()
