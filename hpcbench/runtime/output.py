"""What a run leaves: its result file on rank 0, the line it prints, and ``--dry-run``'s text."""
from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hpcbench.config import RunConfig, cut_by_cap
from hpcbench.memory import amount
from hpcbench.results.paths import NameHold, identity, run_id, sibling, utc_stamp
from hpcbench.results.schema import STALLS, RunRecord
from hpcbench.runtime.assemble import MODEL_COPIES, Run, assemble, model_bytes
from hpcbench.runtime.plan import Plan
from hpcbench.runtime.record import resolved_config
from hpcbench.signals import stops_deferred

if TYPE_CHECKING:
    from hpcbench.results.store import DiskFull


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
        """Write ``rec``; → where it went. ``last``: the run's final write (the name is let go after it).
        A final write that finds no room (no space left, a disk quota) goes to another directory
        (``fallback_dirs``) and says where in one line; the file written before stays as it was (its
        status says the run had not finished)."""
        from hpcbench.results.store import DiskFull  # here: workers never load h5py

        # A stop signal waits until the file and the identity this run keeps of it agree: one landing
        # between a rename and the identity's update would make the next write take its own file for
        # another's and move the result again.
        with stops_deferred():
            try:
                self.write_here(rec)
            except DiskFull as exc:
                if not last:
                    raise
                self.write_elsewhere(rec, exc)
            self.written = identity(self.path)
            if last:
                self.release()
            return self.path

    def write_here(self, rec: RunRecord) -> None:
        """``rec`` over this run's file, or where the run's result goes now (its first write, or its file
        replaced or removed meanwhile)."""
        from hpcbench.results.store import rewrite_run

        # Still the file this run wrote (checked again just before the rename): rewritten; else left alone.
        if self.path and identity(self.path) == self.written and rewrite_run(self.path, rec, self.written):
            return
        lost = self.path
        want = Path(lost or self.wanted)
        if lost:
            want = sibling(want, run_id())
        path = self.claim(self.room_for(want), rec, self.overwrite and not lost)
        if lost:
            print(f"hpcbench: {lost} is no longer the file this run wrote (something replaced or removed it); "
                  f"it is left alone and the result goes to {path}", file=sys.stderr, flush=True)
        elif path != self.wanted:
            print(f"hpcbench: {self.wanted} appeared while this run was set up; the result goes to {path}",
                  file=sys.stderr, flush=True)

    def claim(self, want: Path, rec: RunRecord, overwrite: bool) -> str:
        """Hold ``want`` (a sibling name where another live run holds it) and write ``rec`` there, never over
        another run's file; → where it went, the name this run now holds (the one it held before let go)."""
        from hpcbench.results.store import write_run

        hold = NameHold(want)
        if not hold.take():  # another live run holds the name
            want = sibling(want, run_id())
            hold = NameHold(want)
            hold.take()
        try:
            path = str(write_run(want, rec, overwrite))
        except BaseException:
            hold.release()
            raise
        if path != str(want):  # the name was taken meanwhile: hold the one the file got
            hold.release()
            hold = NameHold(Path(path))
            hold.take()
        self.release()
        self.path, self.hold = path, hold
        return path

    def write_elsewhere(self, rec: RunRecord, full: DiskFull) -> None:
        """The final write found no room where the result goes (``full``): the record goes to the first of
        ``fallback_dirs`` with room, under the same name, said in one line; none: one line naming each try."""
        from hpcbench.errors import ResultWriteError

        before, here = self.path, Path(self.path or self.wanted)
        tried = [str(full)]
        for directory in fallback_dirs():
            try:
                path = self.claim(directory / here.name, rec, False)
            except (ResultWriteError, OSError) as exc:
                tried.append(f"nor in {directory}: {exc}")
                continue
            kept = f"; {before} keeps the run as of its last write (status 'incomplete')" if before else ""
            print(f"hpcbench: {here.parent} has no room for the result ({full.cause}); the result goes to "
                  f"{path}{kept}", file=sys.stderr, flush=True)
            return
        raise ResultWriteError("; ".join(tried))

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


def fallback_dirs() -> list[Path]:
    """Where a final write that found no room goes instead, in this order, those that are directories: the
    system's temporary directory ($TMPDIR, else /tmp), /var/tmp, /dev/shm (often other file systems)."""
    found: list[Path] = []
    for name in (tempfile.gettempdir(), "/var/tmp", "/dev/shm"):
        where = Path(name)
        if where.is_dir() and where.resolve() not in [f.resolve() for f in found]:
            found.append(where)
    return found


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
    file would record it (steps, budget, schedule, straggler ranks, the algorithm's options), and the
    memory a rank's copies of the model take; checked and resolved from the model's sizes, never its values."""
    run = assemble(plan, workers, values=False)
    size = run.workload.size
    config = resolved_config(run, size)
    return (f"{plan.algo.name} with {workers} workers (world size {workers + 1}): "
            f"{config['budget_samples']} samples, {config['steps_per_worker']} steps per worker, "
            f"{config['schedule']['text']}, about {amount(model_bytes(size))} a rank ({MODEL_COPIES} copies of "
            f"{size} parameters)\n{json.dumps(config, indent=1)}")


def warn_unfired(faults: Sequence[str], rec: RunRecord) -> None:
    """One warning line where faults asked for never came (``RankResult.unfired``; the simulator's kills
    after the end): the record is of a run without them (its summary's ``faults_unfired`` says so too)."""
    if faults:
        virtual = " (virtual time)" if rec.mode == "sim" else ""
        print(f"hpcbench: warning: fault {','.join(faults)} did not fire: training ended at "
              f"{rec.summary['wall_s']:.1f} s{virtual}, before it was due, so this run had no failure from it",
              file=sys.stderr, flush=True)


def stalled(rec: RunRecord) -> str:
    """What the rate includes that is not training: the wait after the budget was done (where it is a
    second and more, and a twentieth of the run), and each worker that stalled."""
    s, table = rec.summary, rec.tables.get(STALLS, {})
    wait = s.get("wait_after_budget_s", 0.0)
    parts = [f"rank {int(r)} stalled {d:.1f} s at {t:.1f} s"
             for t, r, d in zip(table.get("t", ()), table.get("worker", ()), table.get("duration_s", ()))]
    if wait >= max(1.0, s["wall_s"] / 20):
        parts.insert(0, f"including {wait:.1f} s waiting after the budget was done")
    return f" ({'; '.join(parts)})" if parts else ""


def result_line(rec: RunRecord, path: str) -> str:
    s = rec.summary
    virtual = " of virtual time" if rec.mode == "sim" else ""
    trained = s["final_accuracy"] == s["final_accuracy"]  # NaN: no model (payload, or numerics off)
    lost = int(s.get("workers_lost", 0) or 0)  # workers that died and the run went on without (ULFM, a simulation)
    after = int(s.get("lost_after_training", 0) or 0)  # died once they had trained: the run lost only their rows
    ms = 1000 * s.get("recovery_s", math.nan)  # a few ms keep their digits (0.88 ms, not 0 ms)
    recovery = f" (recovery {ms:.2g} ms)" if ms < 10 else f" (recovery {ms:.0f} ms)" if ms >= 10 else ""
    who = (f"{rec.workers} workers" + (f", {lost} of {rec.workers} lost{recovery}" if lost else "")
           + (f", {after} lost after training (not in the timeline)" if after else ""))
    status = rec.attrs.get("status", "ok")
    if status != "ok":  # a run whose programs ended and still failed (it lost every worker): no rate to give
        return f"{rec.algorithm} ({rec.mode}, {who}): {status}: {rec.attrs.get('error', '')} -> {path}"
    line = (f"{rec.algorithm} ({rec.mode}, {who}): {s['samples']} samples in {s['wall_s']:.1f} s"
            f"{virtual} = {s['samples_per_s']:.0f} samples/s{stalled(rec)}, "
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
    cap = rec.attrs["config"].get("max_steps", 0)  # said where the cap cut the run, not where it had room
    capped = f" [capped at {cap} steps per worker by max_steps: a smoke test, not a measurement]" \
        if cut_by_cap(rec.attrs["config"], rec.workers) else ""
    return f"{line}{schedule}{capped} -> {path}"
