"""Local studies: one ``mpiexec`` per (algorithm, world size, repeat) on this machine, then the report."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hpcbench.config import RunConfig
from hpcbench.errors import UsageError, one_line
from hpcbench.telemetry.progress_line import Countdown

# The demo: every algorithm on the real digits data, small enough for 2 cores in a few minutes.
DEMO = RunConfig(dataset="digits", model="mlp", epochs=10, batch_size=32, lr=0.05, warmup_epochs=1, evals=8)
# Beside every algorithm, the demo runs these: a name → (algorithm, its options).
Variants = Mapping[str, tuple[str, Mapping[str, object]]]
DEMO_VARIANTS: Variants = {
    "diloco": ("local-sgd", {"outer": "nesterov"}),  # DiLoCo's outer step (rate 0.7, momentum 0.9)
    "powersgd": ("allreduce", {"compress": "powersgd", "powersgd_start": 10}),
}


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--ranks {text!r} is not a comma-separated list of integers") from None
    if not ranks:
        raise UsageError("--ranks is empty: give world sizes such as 3,5")
    if any(r < 2 for r in ranks):
        raise UsageError(f"--ranks {text!r}: every world size must be >= 2 (rank 0 plus workers)")
    return ranks


def run_local(algos: Sequence[str], ranks: Sequence[int], cfg: RunConfig, out_dir: str,
              timeout: float, repeats: int = 1, replace: bool = False,
              emulated: bool = False, variants: Variants | None = None, jobs: int = 1) -> tuple[list[Path], list[str]]:
    """Run each point, ``jobs`` at a time; returns (result files, failure descriptions). ``emulated``:
    across the emulated cluster's nodes (jobs/local/emulated-cluster.sh). ``variants``: names in
    ``algos`` that run an algorithm with options of their own.

    A point that already has an ``ok`` result is kept and not run again (unless ``replace``: the
    demo, which owns its directory); a failed or unreadable one is run again and replaced. Every point's
    world is first held to ``run --dry-run``'s checks (``preflight``): one that fails them is one line,
    before the directory is made or any run starts.
    """
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.launch.local import run_many, why_failed
    from hpcbench.launch.preflight import check_launches
    from hpcbench.results.paths import make_dirs
    from hpcbench.results.store import result_state
    from hpcbench.results.study_dir import write_manifest
    from hpcbench.terminal import fitted, result_briefs, wrapped

    named = {name: cfg.with_updates(algo=algo, options={algo: dict(options)})
             for name, (algo, options) in (variants or {}).items()}
    configs = {a: named.get(a) or cfg.for_algo(a) for a in algos}
    points = [(a, r, k) for a in algos for r in ranks for k in range(repeats)]
    stems = {p: f"{p[0]}-w{p[1] - 1}" + (f"-r{p[2] + 1}" if repeats > 1 else "") for p in points}
    fits = {p: p[1] - 1 >= ALGORITHMS.get(configs[p[0]].algo).min_workers for p in points}
    check_launches((configs[a], world) for a, world, k in points if fits[a, world, k])  # before anything is made
    make_dirs(out_dir)
    write_manifest(Path(out_dir), [{"stem": stems[p], "algo": configs[p[0]].algo, "ranks": p[1], "repeat": p[2]}
                                   for p in points if fits[p]],
                   {"base_args": cfg.to_argv(), "local": True, "emulated": emulated})
    done: list[Path] = []
    failures: list[str] = []
    todo = []  # (position, label, ranks, arguments, result file)
    for i, (algo, world, repeat) in enumerate(points, 1):
        cls = ALGORITHMS.get(configs[algo].algo)
        label = f"{algo} on {world} ranks" + (f", repeat {repeat + 1}" if repeats > 1 else "")
        if not fits[algo, world, repeat]:
            print(f"[{i}/{len(points)}] {label}: skipped ({algo} needs {cls.min_workers + 1}+ ranks)", flush=True)
            continue
        out = Path(out_dir) / f"{stems[algo, world, repeat]}.h5"
        still = wait_for_holder(out, label, timeout)
        if still:
            failures.append(f"{label}: {still}")
            print(wrapped(f"[{i}/{len(points)}] {label}: FAILED: {still}"), file=sys.stderr, flush=True)
            continue
        status, why = result_state(out) if out.exists() else (None, "")
        if status == "ok" and not replace:
            done.append(out)
            print(wrapped(f"[{i}/{len(points)}] {label}: kept (an ok result is already in {out})"), flush=True)
            continue
        if status == "invalid":  # a file whose numbers cannot be what they mean: never kept
            print(wrapped(f"hpcbench: {one_line(why)}; it is run again"), file=sys.stderr, flush=True)
        point = configs[algo].with_updates(out=str(out), overwrite=replace or out.exists(),
                                           seed=repeat if repeats > 1 else cfg.seed)
        todo.append((i, label, world, ["run", *point.to_argv()], out))
    launches = [(world, args) for _, _, world, args, _ in todo]
    if todo:
        print(f"{len(todo)} runs to do, {jobs} at a time: the count and the time left follow each", flush=True)
    countdown = Countdown([world for world, _ in launches])
    for k, result, seconds in run_many(launches, jobs, timeout, capture=True, emulated=emulated):
        _, label, world, _, out = todo[k]
        counts = [countdown.finished(world), *countdown.shorter()]
        if isinstance(result, subprocess.TimeoutExpired) or result.returncode:
            why = f"killed after {timeout:g} s" if isinstance(result, subprocess.TimeoutExpired) else why_failed(result)
            failures.append(f"{label}: {why}")
            print(wrapped(f"{counts[0]} {label}: FAILED: {why}"), file=sys.stderr, flush=True)
        else:  # in 120 columns: the run's own line less what the label says, and how long it took with its start
            done.append(out)
            briefs = result_briefs(result.stdout.strip().splitlines()[-1])
            print(fitted(counts, label, [f"{b} ({seconds:.0f} s)" for b in briefs]), flush=True)
    return done, failures


def wait_for_holder(out: Path, label: str, timeout: float, poll_s: float = 1.0) -> str:
    """Wait, up to ``timeout``, for a run that still writes ``out`` (one an earlier, killed sweep left
    going: its launcher outlives the sweep) to end, said in one line; → "" once it has, else why not."""
    from hpcbench.results.paths import holder
    from hpcbench.terminal import wrapped

    pid = holder(out)
    if pid is None:
        return ""
    print(wrapped(f"{label}: a run left by an earlier sweep still writes {out} (pid {pid}); waiting for it to end "
                  f"(up to {timeout:g} s; kill {pid} to run the point again now)"), flush=True)
    deadline = time.monotonic() + timeout
    while holder(out) is not None:
        if time.monotonic() > deadline:
            return f"a run left by an earlier sweep (pid {pid}) still writes {out} after {timeout:g} s"
        time.sleep(poll_s)
    return ""


def default_jobs(ranks: Sequence[int], cores: int) -> int:
    """Real runs at a time when none is asked for: as many as fit in the cores with their largest
    world size (one, where that world already shares them)."""
    return max(1, cores // max(ranks))


def demo(out_dir: str, ranks_text: str, steps: int, timeout: float) -> tuple[list[Path], list[str]]:
    """Every algorithm at each world size, and the ``DEMO_VARIANTS``; → (result files, failure descriptions)."""
    from hpcbench.algorithms import ALGORITHMS

    ranks = parse_ranks(ranks_text)
    cfg = DEMO.with_updates(steps=steps, epochs=None) if steps else DEMO
    t0 = time.monotonic()
    files, failures = run_local([*ALGORITHMS.names(), *DEMO_VARIANTS], ranks, cfg, out_dir, timeout, replace=True,
                                variants=DEMO_VARIANTS)
    print(f"\n{len(files)} runs in {time.monotonic() - t0:.0f} s; result files in {out_dir}/\n")
    return files, failures
