"""The simulator held to real networks: every algorithm under real MPI across the emulated cluster's
nodes (network namespaces, links shaped to a rate; jobs/local/emulated-cluster.sh), against `hpcbench
simulate` with the same payload, compute model and the links' rate, uncalibrated and calibrated from
the real file (`hpcbench calibrate`).

For each link rate, world size and message size: the real run's samples/s and median step, and
simulated / real for both (1.00 = the simulator predicts the real network exactly); with `--noise CV`
(the links' spread, as `bare_exchange.py` measures it), also simulated, and calibrated, with that
noise. "Reads together": how much of the workers' communication overlaps another worker's (1: convoys
that read and send at once; see ``together``). One evaluation a run (a payload has no accuracy; the
reads of the workers' models an evaluation makes come after training, outside samples/s). One rank per node. Needs root
(it brings the emulated cluster up and
takes it down; one someone else brought up is left as it is, and the benchmark stops in one line). Run by hand, on an
otherwise idle machine:
    python benchmarks/sim_fidelity.py --ranks 4,8 --rates 1gbit,100mbit --params 250000 --keep fidelity/
and after a change to the simulator, without running anything for real again:
    python benchmarks/sim_fidelity.py --ranks 4,8 --rates 1gbit,100mbit --params 250000 --keep fidelity/ --resimulate
"""
import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from tabulate import tabulate

from hpcbench.algorithms import ALGORITHMS
from hpcbench.launch.emulated import bring_up, launching_as, real_and_simulated, resimulated, simulate_like, take_down
from hpcbench.results.store import read_run
from hpcbench.runtime.sim.costs import link_bandwidth

from common import fmt


def merged(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """The union of intervals, as disjoint intervals in order."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist())):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def together(path: Path, phase: str = "communicate") -> float:
    """How much of the workers' time in ``phase`` another worker spends in it too (0: never two at once,
    1: always together, as in a convoy): over every worker, the time its intervals overlap the union of
    the others' over its own time in the phase."""
    rec = read_run(path)
    tl = rec.timeline
    code = list(rec.phases).index(phase)
    mine = (tl["phase"] == code) & (tl["rank"] > 0) & (tl["t_end"] > tl["t_start"])
    ranks, starts, ends = tl["rank"][mine], tl["t_start"][mine], tl["t_end"][mine]
    shared = total = 0.0
    for r in np.unique(ranks):
        others = merged(starts[ranks != r], ends[ranks != r])
        for s, e in merged(starts[ranks == r], ends[ranks == r]):
            total += e - s
            shared += sum(max(0.0, min(e, oe) - max(s, os_)) for os_, oe in others if os_ < e and oe > s)
    return shared / total if total > 0 else float("nan")


def calibrated(path: Path, out: Path, noise: float) -> dict:
    """The summary of the simulation `calibrate --noise` prints for a real file, run as printed."""
    text = subprocess.run([sys.executable, "-m", "hpcbench", "calibrate", str(path), "--noise", f"{noise:g}"],
                          capture_output=True, text=True, check=True).stdout
    start = text.index("hpcbench simulate")
    args = shlex.split(text[start:text.index("\n\n", start)].replace("\\\n", " "))[2:]
    subprocess.run([sys.executable, "-m", "hpcbench", "simulate", *args, "--numerics", "off", "--out", str(out),
                    "--overwrite"], capture_output=True, text=True, check=True)
    return read_run(out).summary


def point(keep: Path, rate: str, world: int, params: int, algo: str, args: argparse.Namespace) -> list[object]:
    """One point: the real run (unless --resimulate), its simulation and the calibrated one → a table row."""
    run_args = ["--model", "payload", "--set", f"payload.params={params}", "--set", "evals=1",
                "--compute", f"gamma:shape=100,mean={args.compute_ms / 1e3:g}", "--steps", args.steps]
    row: list[object] = [rate, world, params, algo]
    out, bandwidth = keep / f"{rate}-{world}-{params}-{algo}", link_bandwidth(f"rate={rate}")
    assert bandwidth is not None, f"not a tc rate: {rate}"
    pair = (resimulated if args.resimulate else real_and_simulated)(algo, world, run_args, bandwidth, out, args.timeout)
    if pair.failure:
        return row + [pair.failure] + ["-"] * 7
    real, sim = read_run(pair.real).summary, read_run(pair.simulated).summary

    def ratio(summary: dict) -> str:
        return fmt(summary["samples_per_s"] / real["samples_per_s"], 2)

    noisy = noisy_cal = "-"
    if args.noise > 0:
        failure = simulate_like(algo, world, run_args, bandwidth, out.with_suffix(".noise.h5"), args.timeout,
                                args.noise)
        noisy = failure or ratio(read_run(out.with_suffix(".noise.h5")).summary)
        noisy_cal = ratio(calibrated(pair.real, out.with_suffix(".calibrated-noise.h5"), args.noise))
    return row + [f"{real['samples_per_s']:.0f}", f"{1e3 * real['median_step_s']:.1f}", ratio(sim),
                  fmt(sim["median_step_s"] / real["median_step_s"], 2), noisy,
                  ratio(calibrated(pair.real, out.with_suffix(".calibrated.h5"), 0.0)), noisy_cal,
                  f"{together(pair.real):.2f} / {together(pair.simulated):.2f}"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="4,8", help="world sizes (one rank per node)")
    p.add_argument("--rates", default="1gbit,100mbit", help="link rates, as tc writes them")
    p.add_argument("--params", default="250000", help="float32 elements per message, comma-separated")
    p.add_argument("--algos", default=",".join(ALGORITHMS.names()))
    p.add_argument("--compute-ms", type=float, default=10.0, help="mean modeled compute per batch")
    p.add_argument("--steps", default="20")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--noise", type=float, default=0.0,
                   help="also simulate, and calibrate, with this link noise (coefficient of variation of a "
                        "transfer's time)")
    p.add_argument("--keep", type=Path, help="keep every point's files here (default: a temporary directory)")
    p.add_argument("--resimulate", action="store_true",
                   help="run nothing for real: simulate and calibrate again the real runs kept in --keep "
                        "(after a change to the simulator; needs no root)")
    args = p.parse_args()
    if args.resimulate and args.keep is None:
        p.error("--resimulate needs --keep DIR, where the real runs were kept")
    worlds = [int(x) for x in args.ranks.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, launching_as("sim_fidelity"):
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for rate in args.rates.split(","):
            try:
                if not args.resimulate:
                    bring_up("sim_fidelity", max(worlds), rate)  # refused, untouched, if someone else's is up
                for world in worlds:
                    for params in args.params.split(","):
                        for algo in args.algos.split(","):
                            if world - 1 < ALGORITHMS.get(algo).min_workers:
                                continue
                            rows.append(point(keep, rate, world, int(params), algo, args))
                            print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
            finally:
                if not args.resimulate:
                    take_down("sim_fidelity")
    print()
    print(tabulate(rows, headers=["rate", "ranks", "floats", "algorithm", "samples/s", "step ms", "sim/real samples/s",
                                  "sim/real step", "with noise", "calibrated sim/real samples/s", "calibrated with "
                                                                                                  "noise",
                                  "reads together real / sim"]))


if __name__ == "__main__":
    main()
