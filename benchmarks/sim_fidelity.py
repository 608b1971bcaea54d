"""The simulator held to real networks: every algorithm under real MPI across the emulated cluster's
nodes (network namespaces, links shaped to a rate; jobs/local/emulated-cluster.sh), against `hpcbench
simulate` with the same payload, compute model and the links' rate, uncalibrated and calibrated from
the real file.

For each link rate, world size and message size: the real run's samples/s and median step, and
simulated / real for both (1.00 = the simulator predicts the real network exactly). Runs with the
default number of evaluations: rank 0's evaluation reads of the workers' models cross the same links.
Needs root (it brings the emulated cluster up and down). Run by hand:
    python benchmarks/sim_fidelity.py --ranks 4,8 --rates 1gbit,100mbit --params 250000
"""
import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from common import fmt
from hpcbench.algorithms import ALGORITHMS
from hpcbench.results.store import read_run
from hpcbench.runtime.launch import run_ranks
from hpcbench.runtime.sim.models import link_bandwidth

CLUSTER = Path(__file__).resolve().parent.parent / "jobs" / "local" / "emulated-cluster.sh"
ALPHA_S = 1e-5  # one way, 8 bytes, MPI over TCP between two emulated nodes: 8.7 µs (median of 180)


def simulate(args: list[str], out: Path) -> object:
    subprocess.run([sys.executable, "-m", "hpcbench", "simulate", *args, "--numerics", "off", "--out", str(out),
                    "--overwrite"], capture_output=True, text=True, check=True)
    return read_run(out)


def calibrated_args(path: Path) -> list[str]:
    """The `hpcbench simulate` command `calibrate` prints for a real file, as arguments."""
    text = subprocess.run([sys.executable, "-m", "hpcbench", "calibrate", str(path)], capture_output=True,
                          text=True, check=True).stdout
    start = text.index("hpcbench simulate")
    return shlex.split(text[start:text.index("\n\n", start)].replace("\\\n", " "))[2:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="4,8", help="world sizes (one rank per node)")
    p.add_argument("--rates", default="1gbit,100mbit", help="link rates, as tc writes them")
    p.add_argument("--params", default="250000", help="float32 elements per message, comma-separated")
    p.add_argument("--algos", default=",".join(ALGORITHMS.names()))
    p.add_argument("--compute-ms", type=float, default=10.0, help="mean modeled compute per batch")
    p.add_argument("--steps", default="20")
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()
    worlds = [int(x) for x in args.ranks.split(",")]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rate in args.rates.split(","):
                subprocess.run([str(CLUSTER), "up", "--nodes", str(max(worlds)), "--rate", rate], check=True,
                               capture_output=True)
                for world in worlds:
                    for params in args.params.split(","):
                        for algo in args.algos.split(","):
                            if world - 1 < ALGORITHMS.get(algo).min_workers:
                                continue
                            rows.append(point(Path(tmp), rate, world, int(params), algo, args))
                            print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    finally:
        subprocess.run([str(CLUSTER), "down"], capture_output=True)
    print()
    print(tabulate(rows, headers=["rate", "ranks", "floats", "algorithm", "samples/s", "step ms", "sim/real samples/s",
                                  "sim/real step", "calibrated sim/real samples/s"]))


def point(tmp: Path, rate: str, world: int, params: int, algo: str, args: argparse.Namespace) -> list[object]:
    run_args = ["--algo", algo, "--model", "payload", "--set", f"payload.params={params}",
                "--compute", f"gamma:shape=100,mean={args.compute_ms / 1e3:g}", "--steps", args.steps]
    out = tmp / f"{algo}-{world}-{params}-{rate}.h5"
    row: list[object] = [rate, world, params, algo]
    try:
        proc = run_ranks(world, ["run", *run_args, "--out", str(out), "--overwrite"], args.timeout, capture=True,
                         emulated=True)
    except subprocess.TimeoutExpired:
        return row + ["HANG"] + ["-"] * 4
    if proc.returncode != 0 or not out.exists():
        return row + [f"exit {proc.returncode}"] + ["-"] * 4
    real = read_run(out).summary
    network = f"alpha={ALPHA_S:g},bandwidth={link_bandwidth('rate=' + rate):g}"
    sim = simulate(["--workers", str(world - 1), *run_args, "--network", network], tmp / "sim.h5").summary
    cal = simulate(calibrated_args(out), tmp / "cal.h5").summary
    return row + [f"{real['samples_per_s']:.0f}", f"{1e3 * real['median_step_s']:.1f}",
                  fmt(sim["samples_per_s"] / real["samples_per_s"], 2),
                  fmt(sim["median_step_s"] / real["median_step_s"], 2),
                  fmt(cal["samples_per_s"] / real["samples_per_s"], 2)]


if __name__ == "__main__":
    main()
