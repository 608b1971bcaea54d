"""The simulator's numerics for a real-image CNN against a plain torch loop, in samples per CPU-second.

The plain loop: one thread, batch 32, SGD with momentum, the same network (``--model``, default
cnn-small) on the same data (``--dataset``, default fashion-mnist), nothing else. The simulator:
``hpcbench simulate --algo allreduce`` (and ``asgd``) at 1, 16 and 64 workers with numerics on, its
engine's wall seconds (``sim_wall_s``, one thread, on a quiet machine its CPU seconds) for the same
samples. A ratio ≥ 0.9 means a study's simulated runs cost about what training the model alone costs.
The loop and the simulations alternate (``common.in_turn``); medians over ``--rounds``. A simulation's
fixed costs (set-up, sharding, the coordinator's averages) weigh on short runs: measured here (2 cores,
2026-12-02), cnn-small, 32,768 samples: 0.75-0.90x at 1, 16 and 64 workers; 131,072 samples (a study's
run is longer): allreduce at 64 workers 1.05x. 2026-12-04, cnn-tiny (the studies' model), 32,768 samples,
2 rounds: allreduce 1.13 / 1.01 / 0.96x at 1 / 16 / 64 workers, asgd 1.06 / 1.01 / 0.94x. Convolutions
go one worker at a time (``batched.pays``): batched they made 0.35-0.55x.
Run by hand: python benchmarks/sim_cnn_speed.py [--samples 32768] [--rounds 3]
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.networks import build_model

from common import in_turn, simulated

BATCH = 32


def plain_loop(model: str, dataset: str, samples: int) -> float:
    """Samples per CPU-second of a bare SGD loop over the training set's first batches."""
    torch.set_num_threads(1)
    data = load_dataset(dataset)
    net = build_model(model, data.input_shape, data.classes, seed=0)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = np.random.default_rng(0).permutation(len(data.y_train))
    steps = samples // BATCH
    t0 = time.process_time()
    for k in range(steps):
        idx = order[(k * BATCH) % (len(order) - BATCH):][:BATCH]
        x = torch.from_numpy(data.normalise(data.x_train[idx]))
        y = torch.from_numpy(data.y_train[idx])
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
    return steps * BATCH / (time.process_time() - t0)


def simulation(model: str, dataset: str, algo: str, workers: int, samples: int, out: Path) -> float:
    """Samples per second of the simulator's engine (wall, one thread) for ``samples`` in all."""
    steps = max(1, samples // (BATCH * workers))
    rec = simulated(workers, ["--algo", algo, "--model", model, "--dataset", dataset, "--steps", str(steps),
                              "--batch-size", str(BATCH), "--lr", "0.01", "--momentum", "0.9",
                              "--set", "warmup_epochs=0", "--set", "evals=2"], out)
    return steps * workers * BATCH / float(rec.provenance["sim_wall_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn-small")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--samples", type=int, default=32768)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", default="1,16,64")
    args = p.parse_args()
    sizes = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        def runs(r: int) -> dict:
            out = {"plain loop": lambda: plain_loop(args.model, args.dataset, args.samples)}
            for algo in ("allreduce", "asgd"):
                for n in sizes:
                    path = Path(tmp) / f"{algo}-{n}-{r}.h5"
                    out[f"{algo} n={n}"] = (lambda a=algo, n=n, path=path:
                                            simulation(args.model, args.dataset, a, n, args.samples, path))
            return out

        results = in_turn(args.rounds, runs)
    base = statistics.median(results.pop("plain loop"))
    print(f"{args.model} on {args.dataset}, batch {BATCH}, one thread: plain loop {base:,.0f} samples/CPU-s")
    for name, rates in results.items():
        rate = statistics.median(rates)
        print(f"  simulate {name:<16} {rate:8,.0f} samples/s  {rate / base:.2f}x the plain loop")


if __name__ == "__main__":
    main()
