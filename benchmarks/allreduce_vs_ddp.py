"""hpcbench's allreduce against a bare mpi4py + torch loop and against PyTorch DDP over gloo, one run.

For each worker count: the bare loop (``bare_allreduce.py``: flat gradient, blocking Allreduce after
backward) and DDP (``ddp_allreduce.py``: buckets all-reduced during backward) on N ranks, the bare
loop beside an idle rank 0 (as many processes as hpcbench), and ``hpcbench run --algo allreduce`` on
N+1 ranks (rank 0 coordinates) with its default buckets overlapped with backward and with
``allreduce.overlap=false``; several rounds, each in the reverse order of the one before. Reports
median step times, the ratios (below 1: hpcbench is faster) and rank 0's processor share. Then the
overlap's effect on resnet20 (synthetic CIFAR-shaped data) with small buckets, against DDP with the
same buckets. With 1 worker nothing is oversubscribed on a 2-core machine; beyond it the
coordinator also competes for the cores. Run by hand: python benchmarks/allreduce_vs_ddp.py
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcbench.launch.local import launch_env, mpi_command, mpiexec_path
from hpcbench.results.store import read_run

from common import in_turn, simulated

HERE = Path(__file__).parent


def reference(script: str, workers: int, steps: int, extra: list[str], idle_rank: bool = False) -> float:
    """The median step time of a reference loop; ``idle_rank``: beside an idle rank 0 (bare loop only)."""
    ranks, flag = (workers + 1, ["--idle-rank"]) if idle_rank else (workers, [])
    cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, str(HERE / script), "--steps", str(steps), *extra, *flag]
    out = subprocess.run(cmd, env=launch_env(ranks), capture_output=True, text=True, timeout=900, check=True)
    return float(re.search(r"median_step_s=([0-9.]+)", out.stdout).group(1))


def harness(workers: int, steps: int, extra: list[str], out: Path) -> tuple[float, float]:
    """(median step seconds, rank 0's processor share) of one hpcbench run."""
    cmd = mpi_command(workers + 1, ["run", "--algo", "allreduce", "--steps", str(steps + 20), *extra,
                                    "--out", str(out), "--overwrite"])
    subprocess.run(cmd, env=launch_env(workers + 1), capture_output=True, text=True, timeout=900, check=True)
    summary = read_run(out).summary
    return float(summary["median_step_s"]), float(summary["rank0_cpu_share"])


def median_ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):.2f}"


def spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", default="1,2,4", help="worker counts for the cnn comparison ('' for none)")
    p.add_argument("--model", default="cnn")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--resnet-workers", type=int, default=2, help="workers for the resnet20 comparison (0: none)")
    p.add_argument("--resnet-steps", type=int, default=30)
    p.add_argument("--bucket-mb", type=float, default=0.25, help="buckets for the resnet20 overlap comparison")
    args = p.parse_args()
    model = ["--model", args.model]
    print(f"model {args.model}, digits, batch 32, {args.steps} timed steps, {args.rounds} rounds; "
          "step times in ms (median), ratios hpcbench/reference (median, min-max)")
    print(f"{'workers':>7} {'bare':>7} {'+idle 0':>8} {'DDP':>7} {'hpcbench':>9} {'no overlap':>11} {'vs bare':>17} "
          f"{'vs bare+idle 0':>17} {'vs DDP':>17} {'rank 0 CPU':>10}")
    port = 29517
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(w) for w in args.workers.split(",") if w]:
            got = in_turn(args.rounds, lambda r: {
                "bare": lambda: reference("bare_allreduce.py", n, args.steps, model),
                "idle": lambda: reference("bare_allreduce.py", n, args.steps, model, idle_rank=True),
                "ddp": lambda: reference("ddp_allreduce.py", n, args.steps, [*model, "--port", str(port + r)]),
                "ours": lambda: harness(n, args.steps, model, Path(tmp) / "h.h5"),
                "flat": lambda: harness(n, args.steps, [*model, "--set", "allreduce.overlap=false"],
                                        Path(tmp) / "f.h5")[0]})
            port += args.rounds
            bare, idle, ddp, flat = got["bare"], got["idle"], got["ddp"], got["flat"]
            ours, cpu = [step for step, _ in got["ours"]], [share for _, share in got["ours"]]
            print(f"{n:>7} {median_ms(bare):>7} {median_ms(idle):>8} {median_ms(ddp):>7} {median_ms(ours):>9} "
                  f"{median_ms(flat):>11} {spread([h / b for h, b in zip(ours, bare)]):>17} "
                  f"{spread([h / b for h, b in zip(ours, idle)]):>17} {spread([h / d for h, d in zip(ours, ddp)]):>17} "
                  f"{100 * statistics.median(cpu):>9.1f}%")
        n, steps = args.resnet_workers, args.resnet_steps
        if not n:
            return
        resnet = ["--model", "resnet20", "--dataset", "synthetic"]
        scored = ["--set", "evals=1", "--set", "eval_samples=64"]  # scoring resnet20 after the run is not the point
        got = in_turn(args.rounds, lambda r: {
            "on": lambda: harness(n, steps, [*resnet, *scored, "--set", f"allreduce.bucket_mb={args.bucket_mb}"],
                                  Path(tmp) / "on.h5")[0],
            "off": lambda: harness(n, steps, [*resnet, *scored, "--set", "allreduce.overlap=false"],
                                   Path(tmp) / "off.h5")[0],
            "ddp": lambda: reference("ddp_allreduce.py", n, steps, [*resnet, "--bucket-mb", str(args.bucket_mb),
                                                                     "--port", str(port + r)])})
        on, off, ddp = got["on"], got["off"], got["ddp"]
        print(f"\nresnet20, synthetic 32x32x3, {n} workers, {steps} timed steps, buckets of {args.bucket_mb} MiB:")
        print(f"  hpcbench overlapped {median_ms(on)} ms, not overlapped {median_ms(off)} ms "
              f"(overlapped/not {spread([a / b for a, b in zip(on, off)])}); DDP {median_ms(ddp)} ms")
        # The same model on a virtual cluster whose network matters: the measured compute, 1 Gb/s links.
        compute = statistics.median(off)
        for workers in (8, 64):
            medians = {}
            for label, option in (("on", f"allreduce.bucket_mb={args.bucket_mb}"), ("off", "allreduce.overlap=false")):
                rec = simulated(workers, [*resnet, "--algo", "allreduce", "--numerics", "off", "--steps", "20",
                                          "--compute", f"gamma:shape=100,mean={compute}", "--network",
                                          "alpha=2e-5,bandwidth=1.25e8", "--set", option],
                                Path(tmp) / f"sim-{workers}-{label}.h5")
                medians[label] = rec.summary["median_step_s"]
            print(f"  simulated, {workers} workers, 1 Gb/s: overlapped {1e3 * medians['on']:.1f} ms, not "
                  f"{1e3 * medians['off']:.1f} ms ({medians['on'] / medians['off']:.2f})")


if __name__ == "__main__":
    main()
