"""The simulator's numerics, batched against one worker at a time: 128 ga-asgd workers on the teacher task.

Both paths run the same simulation (same seed, same virtual schedule; results equal to float
rounding); reports the engine's wall seconds per applied update for each and their ratio, and with
``--long`` the wall time of a whole 128-worker, 30-epoch run (batched), the size the reproduce
studies need.
Run by hand: python benchmarks/sim_batched_speed.py [--epochs 3] [--long]
"""
import argparse
import tempfile
from pathlib import Path

from common import simulated

ARGS = ["--algo", "ga-asgd", "--dataset", "teacher", "--model", "mlp", "--momentum", "0.9", "--set", "warmup_epochs=1"]


def engine_seconds(workers: int, epochs: float, batched: bool, out: Path) -> tuple[float, int, float]:
    """(engine wall seconds, updates applied, final accuracy)."""
    rec = simulated(workers, [*ARGS, "--epochs", f"{epochs:g}", "--set", f"sim.batch_gradients={str(batched).lower()}"],
                    out)
    return float(rec.provenance["sim_wall_s"]), int(rec.summary["updates"]), float(rec.summary["final_accuracy"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=128)
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--long", action="store_true", help="also a 30-epoch batched run")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for batched in (True, False):
            rows[batched] = engine_seconds(args.workers, args.epochs, batched, Path(tmp) / f"{batched}.h5")
            wall, updates, acc = rows[batched]
            print(f"{'batched' if batched else 'one at a time'}: {updates} updates in {wall:.1f} s = "
                  f"{1e3 * wall / updates:.2f} ms an update, final accuracy {acc:.3f}", flush=True)
        print(f"batched / one at a time: {rows[False][0] / rows[True][0]:.2f}x faster")
        if args.long:
            wall, updates, acc = engine_seconds(args.workers, 30, True, Path(tmp) / "long.h5")
            print(f"{args.workers} workers, 30 epochs, batched: {updates} updates in {wall / 60:.1f} min "
                  f"(engine), final accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
