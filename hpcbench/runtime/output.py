"""What a run leaves: its result file on rank 0, the line it prints, and ``--dry-run``'s text."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from hpcbench.config import RunConfig
from hpcbench.results.paths import NameHold, identity, run_id, sibling, utc_stamp
from hpcbench.results.schema import RunRecord
from hpcbench.runtime.assemble import Run, assemble
from hpcbench.runtime.plan import Plan
from hpcbench.runtime.record import resolved_config
from hpcbench.signals import stops_deferred


def default_out(cfg: RunConfig, workers: int, mode: str = "mpi") -> str:
    """A readable name, unique even for runs started in the same second on different nodes."""
    return f"results/{cfg.algo}-{cfg.dataset}-{cfg.model}-{mode}-w{workers}-s{cfg.seed}-{utc_stamp()}-{run_id()}.h5"


class ResultFile:
    """A run's result file on rank 0: first written when training starts (status "incomplete"), then
    rewritten whole at each flush and at the end. Every write goes to a temporary name renamed over
    the file, so a kill at any instant leaves the last complete write, readable. The run holds the
    file's name while it goes on (``NameHold``), and rewrites only the file it wrote: one replaced
    meanwhile (by anything) is left alone and the run goes on beside it, under a name of its own."""

    def __init__(self, cfg: RunConfig, workers: int, mode: str) -> None:
        self.wanted = cfg.out or default_out(cfg, workers, mode)
        self.overwrite = cfg.overwrite
        self.path = ""
        self.written: tuple[int, int] | None = None  # the file this run wrote last (device, inode)
        self.hold: NameHold | None = None

    def write(self, rec: RunRecord, last: bool = False) -> str:
        """Write ``rec``; → where it went. ``last``: the run's final write (the name is let go after it)."""
        from hpcbench.results.store import rewrite_run, write_run  # here: workers never load h5py

        # A stop signal waits until the file and the identity this run keeps of it agree: one landing
        # between a rename and the identity's update would make the next write take its own file for
        # another's and move the result again.
        with stops_deferred():
            # Still the file this run wrote (checked again just before the rename): rewritten; else left alone.
            if not (self.path and identity(self.path) == self.written and rewrite_run(self.path, rec, self.written)):
                lost = self.path
                want = Path(lost or self.wanted)
                if lost:
                    want = sibling(want, run_id())
                want = self.room_for(want)
                hold = NameHold(want)
                if not hold.take():  # another live run holds the name
                    want = sibling(want, run_id())
                    hold = NameHold(want)
                    hold.take()
                path = str(write_run(want, rec, self.overwrite and not lost))
                if path != str(want):  # the name was taken meanwhile: hold the one the file got
                    hold.release()
                    hold = NameHold(Path(path))
                    hold.take()
                self.release()
                self.path, self.hold = path, hold
                if lost:
                    print(f"hpcbench: {lost} is no longer the file this run wrote (something replaced or removed it); "
                          f"it is left alone and the result goes to {path}", file=sys.stderr, flush=True)
                elif path != self.wanted:
                    print(f"hpcbench: {self.wanted} appeared while this run was set up; the result goes to {path}",
                          file=sys.stderr, flush=True)
            self.written = identity(self.path)
            if last:
                self.release()
            return self.path

    def room_for(self, want: Path) -> Path:
        """``want``, its directory made again if it was removed while the run went on; where that cannot
        be, the same name in the system's temporary directory (said in one line): the record is kept."""
        if want.parent.is_dir():
            return want
        try:
            want.parent.mkdir(parents=True, exist_ok=True)
            if self.path:
                print(f"hpcbench: {want.parent} was removed while this run wrote into it; it is made again",
                      file=sys.stderr, flush=True)
            return want
        except OSError as exc:
            elsewhere = Path(tempfile.gettempdir()) / want.name
            print(f"hpcbench: {want.parent} was removed and cannot be made again ({exc.strerror or exc}); the "
                  f"result goes to {elsewhere}", file=sys.stderr, flush=True)
            return elsewhere

    def release(self) -> None:
        """Let go of the name (after the last write)."""
        if self.hold is not None:
            self.hold.release()
            self.hold = None


def expected_bytes(run: Run) -> int:
    """A rough size of the run's result file: the timeline rows of every step on every rank, the
    server's rows, the evaluations and the final model (used to refuse a disk that is too full)."""
    ctx = run.algo.ctx
    steps = ctx.steps * ctx.workers
    row = 38  # bytes per timeline row: rank, step, phase, op, two times, bytes
    server = steps * 8 * len(run.layout.tables)
    evals = ctx.budget // ctx.eval_every + 1
    return steps * 6 * row + steps * 2 * row + server + evals * 48 + 4 * ctx.size + 256 * 1024


def dry_run_text(plan: Plan, workers: int) -> str:
    """What ``run --dry-run`` prints: the configuration resolved for ``workers`` workers, as the result
    file would record it (steps, budget, schedule, straggler ranks, the algorithm's options)."""
    run = assemble(plan, workers)
    config = resolved_config(run, run.workload.size)
    return (f"{plan.algo.name} with {workers} workers (world size {workers + 1}): "
            f"{config['budget_samples']} samples, {config['steps_per_worker']} steps per worker, "
            f"{config['schedule']['text']}\n{json.dumps(config, indent=1)}")


def result_line(rec: RunRecord, path: str) -> str:
    s = rec.summary
    virtual = " of virtual time" if rec.mode == "sim" else ""
    trained = s["final_accuracy"] == s["final_accuracy"]  # NaN: no model (payload, or numerics off)
    line = (f"{rec.algorithm} ({rec.mode}, {rec.workers} workers): {s['samples']} samples in {s['wall_s']:.1f} s"
            f"{virtual} = {s['samples_per_s']:.0f} samples/s, "
            + (f"final accuracy {s['final_accuracy']:.3f}" if trained else "timing only (no model trained)"))
    if trained and not np.isfinite(rec.final_params).all():
        line += " (the model diverged: its parameters are no longer finite)"
    if s["final_val_accuracy"] == s["final_val_accuracy"]:  # a validation split was held out
        line += f" (validation {s['final_val_accuracy']:.3f})"
    if "late_gradients" in s:  # a parameter server: say that every gradient was applied
        line += f", {s['too_stale']} gradients dropped"
        if s["echoed_updates"]:
            line += f" ({s['echoed_updates']} applied with Δ echoed by their worker)"
    schedule = f" [{rec.attrs['config']['schedule']['text']}]" if trained else ""
    cap = rec.attrs["config"].get("max_steps", 0)
    capped = f" [capped at {cap} steps per worker by max_steps: a smoke test, not a measurement]" if cap else ""
    return f"{line}{schedule}{capped} -> {path}"
