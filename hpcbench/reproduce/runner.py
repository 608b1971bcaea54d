"""``hpcbench reproduce STUDY``: run a study's points, read the result files back, judge the claim, write the report.

Result files go to OUT_DIR/runs/ (a point with an ``ok`` file is kept, so an interrupted study
resumes); the report to OUT_DIR/report.md with its plot OUT_DIR/STUDY.png and the verdict as
OUT_DIR/verdict.json.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.reproduce import report
from hpcbench.reproduce.studies import PRESETS, Point, Study, mpi_args, study
from hpcbench.reproduce.verdicts import Cell

MODES = ("sim", "mpi")
HERE = "this machine"  # the network of real runs
MPI_SETUP = "Real runs under mpiexec on this machine: its own compute and network, the mlp's own message size."
# Seconds of this machine (2 cores) per simulated gradient of the teacher mlp, and per run started:
# the basis of the full study's stated running time (measured with the batched simulator).
SECONDS_PER_GRADIENT = 1.6e-3
SECONDS_PER_RUN = 3.0
CALIBRATION_STEPS = {"full": 200, "quick": 100, "toy": 20}


def expected_seconds(s: Study, preset: str, points: Sequence[Point]) -> float:
    size = s.sizes[preset]
    gradients = size.epochs * size.samples / 32
    return len(points) * (SECONDS_PER_RUN + gradients * SECONDS_PER_GRADIENT)


def fits(point: Point, mode: str, max_ranks: int) -> bool:
    return mode == "sim" or point.workers + 1 <= max_ranks


def calibrate_compute(out_dir: Path, s: Study, preset: str, timeout: float) -> tuple[list[str], str]:
    """The jin study's compute model from a short real all-reduce run here: (simulate flags, what was found)."""
    from hpcbench.results.store import read_run, result_status
    from hpcbench.runtime.launch import run_ranks
    from hpcbench.runtime.sim.calibrate import calibrate

    path = out_dir / "calibration-allreduce-n2.h5"
    args = ["run", "--algo", "allreduce", *s.run_args(preset, steps=CALIBRATION_STEPS[preset]),
            "--set", "allreduce.overlap=false", "--out", str(path), "--overwrite"]
    try:
        if result_status(path) != "ok":  # a study resumed keeps the calibration its runs used
            proc = run_ranks(3, args, timeout, capture=True)
            if proc.returncode != 0:
                raise RuntimeError((proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])
        fitted = calibrate(read_run(path))
    except Exception as exc:  # no MPI here, or the run failed: say so and keep the simulator's default
        return [], f"calibration run failed ({exc}); the simulator's default compute model (50 ms, shape 100) is used"
    mean, shape = fitted["compute_mean_s"], fitted["compute_shape"]
    text = (f"a real all-reduce run here (2 workers, {CALIBRATION_STEPS[preset]} steps, {path.name}): compute "
            f"{1e3 * mean:.3g} ms per batch, gamma shape {shape:.3g}; this machine's network fitted at "
            f"{1e6 * fitted['alpha_s']:.3g} µs and {fitted['bandwidth'] / 1e9:.3g} GB/s (replaced by the cluster's links)")
    return ["--compute", f"gamma:shape={shape:.6g},mean={mean:.6g}"], text


def run_point(point: Point, s: Study, preset: str, mode: str, extra: Sequence[str], path: Path,
              timeout: float) -> str:
    """Run one point to ``path``; → "" or why it failed."""
    args = [*s.run_args(preset), *point.args, *extra, "--seed", str(point.seed), "--out", str(path), "--overwrite"]
    if mode == "sim":
        from hpcbench.cli import main

        sim = ["--set", f"sim.message_params={s.message_params}"] if s.message_params else []
        try:
            code = main(["simulate", "--algo", point.algo, "--workers", str(point.workers), *args, *sim])
        except Exception as exc:  # a deadlock or a bug in one point must not lose the others
            return f"{type(exc).__name__}: {exc}"
        return "" if code == 0 else f"exit code {code}"
    from hpcbench.runtime.launch import run_ranks

    try:
        proc = run_ranks(point.workers + 1, ["run", "--algo", point.algo, *mpi_args(args)], timeout, capture=True)
    except subprocess.TimeoutExpired:
        return f"killed after {timeout:g} s"
    if proc.returncode == 0:
        print(proc.stdout.strip().splitlines()[-1], flush=True)
        return ""
    return (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]


def cells_of(points: Sequence[tuple[Point, Path]], target: float) -> list[Cell]:
    """Each (algorithm, size, variant) over its seeds, from the result files read back."""
    from hpcbench.results.store import read_run
    from hpcbench.telemetry.summary import time_to_target

    groups: dict[tuple[str, int, str], list[tuple[float, float, float, float]]] = {}
    for point, path in points:
        rec = read_run(path)
        t = time_to_target(rec.evals["t"], rec.evals["accuracy"], target)
        gap = float(np.max(np.diff(rec.evals["t"]))) if len(rec.evals["t"]) > 1 else 0.0
        groups.setdefault((point.algo, point.workers, point.variant), []).append(
            (float(rec.summary["final_accuracy"]), math.inf if math.isnan(t) else t, float(rec.summary["wall_s"]), gap))
    return [Cell(a, n, v, tuple(x[0] for x in runs), tuple(x[1] for x in runs), tuple(x[2] for x in runs),
                 max(x[3] for x in runs))
            for (a, n, v), runs in groups.items()]


def reproduce(name: str, out_dir: str, preset: str = "full", mode: str = "sim", max_ranks: int = 9,
              timeout: float = 1800.0) -> int:
    """Run study ``name``; → 0 when every point ran (whatever the verdict), 1 when some failed."""
    s = study(name)
    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    points = s.points(preset)
    if mode == "mpi":  # this machine's own network: one variant, and only the sizes that fit
        first = s.networks[0].name if s.networks else ""
        points = [replace(p, variant=HERE if p.variant else "", args=tuple(mpi_args(p.args)))
                  for p in points if p.variant == first]
    skipped = [p for p in points if not fits(p, mode, max_ranks)]
    points = [p for p in points if fits(p, mode, max_ranks)]
    if not points:
        smallest = min(p.workers for p in skipped) + 1
        raise UsageError(f"no size of study {name!r} ({preset}) fits in --max-ranks {max_ranks}: the smallest "
                         f"needs {smallest} ranks; raise --max-ranks or use the simulator (--mode sim)")
    out = Path(out_dir)
    runs = out / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make {runs}: {exc.strerror}") from None
    if not os.access(runs, os.W_OK):
        raise UsageError(f"cannot write to {runs}")
    estimate = expected_seconds(s, preset, points) * (3 if mode == "mpi" else 1)
    print(f"{s.title}\n{len(points)} runs ({preset}, {mode}); expected running time about "
          f"{estimate / 60:.0f} min on a 2-core machine. Result files: {runs}/", flush=True)
    extra: list[str] = []
    calibration = ""
    if name == "jin" and mode == "sim":
        extra, calibration = calibrate_compute(out, s, preset, timeout)
        print(f"calibration: {calibration}", flush=True)
    from hpcbench.results.store import result_status

    done: list[tuple[Point, Path]] = []
    kept = 0
    failures: list[str] = []
    t0 = time.monotonic()
    for i, point in enumerate(points, 1):
        path = runs / f"{point.stem}.h5"
        label = f"[{i}/{len(points)}] {point.algo}, {point.workers} workers, seed {point.seed}" + \
            (f", {point.variant}" if point.variant else "")
        if result_status(path) == "ok":
            print(f"{label}: kept ({path.name})", flush=True)
            kept += 1
            done.append((point, path))
            continue
        print(f"{label}:", flush=True)
        why = run_point(point, s, preset, mode, extra, path, timeout)
        if why:
            failures.append(f"{point.stem}: {why}")
            print(f"{label}: FAILED: {why}", file=sys.stderr, flush=True)
        else:
            done.append((point, path))
    elapsed = time.monotonic() - t0
    cells = cells_of(done, s.target)
    verdict = report.judge(s, cells, HERE if mode == "mpi" else "")
    notes = {"preset": preset, "mode": mode, "elapsed_s": elapsed, "runs": len(points), "kept": kept,
             "calibration": calibration,
             "setup": s.setup if mode == "sim" else MPI_SETUP,
             "skipped": [f"{p.stem} ({p.workers + 1} ranks > --max-ranks {max_ranks})" for p in skipped],
             "failed": failures, "command": command_line(name, out_dir, preset, mode)}
    text = report.markdown(s, cells, verdict, notes, report.plot(s, cells, out / f"{s.name}.png"))
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "verdict.json").write_text(json.dumps({"study": s.name, "outcome": verdict.outcome,
                                                  "checks": [asdict(c) for c in verdict.checks],
                                                  "cells": [asdict(c) for c in cells], **notes},
                                                 indent=1, default=str), encoding="utf-8")
    print(f"\n{text}\nreport: {out / 'report.md'}", flush=True)
    return 1 if failures else 0


def command_line(name: str, out_dir: str, preset: str, mode: str) -> str:
    flags = {"quick": " --quick", "toy": " --preset toy"}.get(preset, "")
    return f"hpcbench reproduce {name}{flags}{' --mode mpi' if mode == 'mpi' else ''} --out-dir {out_dir}"

