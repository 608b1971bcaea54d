"""The speed gate: figures that must not slip back, each a ratio against a reference measured in the same
process and the same minute, so a busy machine slows both sides alike.

- ``engine``: the CPU time of a whole ``simulate`` command (asgd, numerics off, 256 workers, 80 steps:
  ~220k events) over a minimal heap loop's popping and pushing as many events on a heap of as many
  entries (lower is better).
- ``cnn``: the samples per CPU-second of the simulator's numerics training cnn-tiny on Fashion-MNIST
  (all-reduce, 16 workers): the CPU inside the engine's event loop (the workers' gradients, the averages,
  the events), over a plain torch loop's on the same data (higher is better). What a run pays once
  around the loop (reading the data set, building the model, scoring its snapshots, writing the file:
  about 1 s) is left out: it is measured, with a whole run's share, in docs/measurements.md. Skipped,
  and said, where the data set is not installed.

Each figure is measured in rounds, the simulation and its reference in turn (the first of the two on even
rounds, the second on odd ones; the figures too, ``common.in_turn``); each
side's best round (a busy machine only ever slows a round down) makes the figure, compared with the
baseline in speed_baseline.toml: the gate fails where it is worse than the baseline by more than the
tolerance recorded with it (20%: three baselines written here spread by 0.1% for engine and 3% for cnn,
single rounds by up to 12%). Run in CI at this size (~30 s); by hand:

    python benchmarks/speed_gate.py                   # measure and compare with the baseline
    python benchmarks/speed_gate.py --write-baseline  # measure 5 rounds and record them as the baseline
"""
from __future__ import annotations

import argparse
import contextlib
import heapq
import io
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tomllib

from hpcbench.cli import main as cli
from hpcbench.results.store import read_run
from hpcbench.workload.datasets import FASHION_DIR, FASHION_FILES, idx_file

from common import in_turn

BASELINE = Path(__file__).with_name("speed_baseline.toml")
TOLERANCE = 0.2



def simulate(args: list[str], out: Path) -> tuple[float, float, int]:
    """(CPU seconds of the whole command, of its engine's event loop, the engine's events) for
    ``hpcbench simulate ARGS`` run in this process."""
    from hpcbench.runtime.sim.core import Core

    inside = [0.0]
    loop = Core.run

    def timed(engine: Core) -> None:
        t = time.process_time()
        try:
            loop(engine)
        finally:
            inside[0] += time.process_time() - t

    Core.run = timed  # type: ignore[method-assign]
    t0 = time.process_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            if cli(["simulate", *args, "--out", str(out), "--overwrite"]) != 0:
                raise SystemExit(f"simulate failed: {' '.join(args)}\n{err.getvalue()[-2000:]}")
    finally:
        Core.run = loop  # type: ignore[method-assign]
    cpu = time.process_time() - t0
    return cpu, inside[0], int(read_run(out).provenance["sim_events"])


def heap_loop_s(events: int, size: int) -> float:
    """CPU seconds of a bare event loop: ``events`` pops, each pushing its successor, on a heap of ``size``."""
    rng = np.random.default_rng(0)
    heap = [(float(t), i) for i, t in enumerate(rng.random(size))]
    heapq.heapify(heap)
    steps = rng.random(events).tolist()
    pop, push = heapq.heappop, heapq.heappush
    t0 = time.process_time()
    for dt in steps:
        t, i = pop(heap)
        push(heap, (t + dt, i))
    return time.process_time() - t0


def paired(subject: Callable[[], float], reference: Callable[[], float], first: bool) -> tuple[float, float]:
    """(subject's CPU seconds, reference's), the subject measured first or second."""
    if first:
        s = subject()
        return s, reference()
    r = reference()
    return subject(), r


def engine_costs(tmp: Path) -> Callable[[bool], tuple[float, float]]:
    events = [0]  # the simulation's, for the reference to pop and push as many (known after the first round)

    def simulation() -> float:
        cpu, _, events[0] = simulate(["--algo", "asgd", "--workers", "256", "--steps", "80", "--numerics", "off"],
                                     tmp / "engine.h5")
        return cpu

    return lambda first: paired(simulation, lambda: heap_loop_s(events[0], 256), first)


def plain_loop_rate(samples: int) -> float:
    """Samples per CPU-second of a bare torch SGD loop (batch 32, one thread) on cnn-tiny."""
    import torch

    from hpcbench.workload.datasets import load_dataset
    from hpcbench.workload.networks import build_model

    torch.set_num_threads(1)
    data = load_dataset("fashion-mnist")
    net = build_model("cnn-tiny", data.input_shape, data.classes, seed=0)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss = torch.nn.CrossEntropyLoss()
    order = np.random.default_rng(0).permutation(len(data.y_train))
    steps = samples // 32
    t0 = time.process_time()
    for k in range(steps):
        idx = order[k * 32:(k + 1) * 32]
        x, y = torch.from_numpy(data.normalise(data.x_train[idx])), torch.from_numpy(data.y_train[idx])
        opt.zero_grad()
        loss(net(x), y).backward()
        opt.step()
    return steps * 32 / (time.process_time() - t0)


def cnn_costs(tmp: Path, samples: int = 16384) -> Callable[[bool], tuple[float, float]]:
    workers = 16
    args = ["--algo", "allreduce", "--workers", str(workers), "--model", "cnn-tiny", "--dataset", "fashion-mnist",
            "--steps", str(samples // (32 * workers)), "--batch-size", "32", "--lr", "0.01", "--momentum", "0.9",
            "--set", "warmup_epochs=0", "--set", "evals=2"]
    return lambda first: paired(lambda: simulate(args, tmp / "cnn.h5")[1],
                                lambda: samples / plain_loop_rate(samples), first)


# name → (what it is, lower is better?)
FIGURES = {"engine": ("simulator CPU per event, in bare heap-loop events", True),
           "cnn": ("simulator cnn-tiny numerics, samples/CPU-s over a plain torch loop's", False)}


def measure(rounds: int, names: list[str]) -> dict[str, list[tuple[float, float]]]:
    """Each figure's rounds: (CPU seconds of the simulation, of its reference for the same work)."""
    with tempfile.TemporaryDirectory() as tmp:
        makers = {"engine": engine_costs(Path(tmp)), "cnn": cnn_costs(Path(tmp))}
        for n in names:  # a round to warm up (imports, the data set read once per process), not counted
            makers[n](True)
        return in_turn(rounds, lambda r: {n: (lambda n=n: makers[n](r % 2 == 0)) for n in names})


def figure(name: str, rounds: list[tuple[float, float]]) -> float:
    """A figure from its rounds: each side's best (a busy machine only ever slows a round down), the
    simulation's over the reference's where lower is better, else the reference's over the simulation's."""
    subject, reference = min(s for s, _ in rounds), min(r for _, r in rounds)
    return subject / reference if FIGURES[name][1] else reference / subject


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write-baseline", action="store_true", help=f"measure 5 rounds and write {BASELINE.name}")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds: at least 1")
    installed = all(idx_file(Path(FASHION_DIR), f) for f in FASHION_FILES)
    names = [n for n in FIGURES if n != "cnn" or installed]
    if not installed:
        print(f"cnn: skipped: Fashion-MNIST is not installed in {FASHION_DIR} (apt-get install dataset-fashion-mnist)")
    found = measure(5 if args.write_baseline else args.rounds, names)
    if args.write_baseline:
        lines = ["# benchmarks/speed_gate.py --write-baseline: each figure from 5 rounds (CPU seconds of the",
                 f"# simulation, of its reference), and the tolerance the gate allows beyond it ({TOLERANCE:.0%})"]
        for n, rounds in found.items():
            lines += [f"[{n}]", f"ratio = {figure(n, rounds):.4g}", f"tolerance = {TOLERANCE}",
                      f"rounds = [{', '.join(f'[{s:.4g}, {r:.4g}]' for s, r in rounds)}]"]
        BASELINE.write_text("\n".join(lines) + "\n")
        print(f"baseline written to {BASELINE}")
        return 0
    baseline = tomllib.loads(BASELINE.read_text())
    worse = []
    for n, rounds in found.items():
        what, lower = FIGURES[n]
        now, ref, tol = figure(n, rounds), baseline[n]["ratio"], baseline[n]["tolerance"]
        bound = ref * (1 + tol) if lower else ref * (1 - tol)
        failed = now > bound if lower else now < bound
        each = ", ".join(f"{s / r if lower else r / s:.3g}" for s, r in rounds)
        print(f"{n}: {what}: {now:.3g} (each round's {each}); baseline {ref:.3g}, bound {bound:.3g}: "
              f"{'WORSE' if failed else 'holds'}")
        if failed:
            worse.append(n)
    if worse:
        print(f"speed gate: {', '.join(worse)} slipped back beyond the baseline's tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
