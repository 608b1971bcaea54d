"""Run many independent runs (simulated or under mpiexec), a few at a time, each to its own result file.

A run whose file already says ``ok`` is kept, so an interrupted study or grid resumes. Simulated
runs go ``jobs`` at a time, each one-threaded, so they share the cores without changing any result:
one at a time in this process, else to ``jobs`` processes that simulate one run after another
(``tuning.simworker``; another commit's package: a process per run); real runs go one at a time (they
would time each other), each in processes of its own.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbench.config import RunConfig, table_argv
from hpcbench.launch.arguments import parse_run
from hpcbench.options.sim import SimConfig
from hpcbench.signals import signals_stop_study
from hpcbench.telemetry.progress_line import Countdown

MODES = ("sim", "mpi")


@dataclass(frozen=True)
class Job:
    """One run: ``algo`` on ``workers`` workers with ``cfg`` (its ``out`` is ``path``), simulated on ``sim``."""

    cfg: RunConfig
    sim: SimConfig
    path: Path
    label: str

    @classmethod
    def of(cls, algo: str, workers: int, args: Sequence[str], path: Path, label: str) -> Job:
        """From run options as a command line gives them (parsed once, here)."""
        cfg, sim = parse_run(["--algo", algo, *args], simulate=True)
        return cls(cfg.for_algo(algo).with_updates(out=str(path), overwrite=True), dataclasses.replace(sim,
                                                                                                       workers=workers),
                   path, label)

    @property
    def algo(self) -> str:
        return self.cfg.algo

    @property
    def workers(self) -> int:
        return self.sim.workers

    def argv(self, mode: str) -> list[str]:
        """``hpcbench simulate`` or ``run`` of this job, for a process of its own."""
        if mode == "mpi":
            return ["run", *self.cfg.to_argv()]
        return ["simulate", "--workers", str(self.workers), *self.cfg.to_argv(),
                *table_argv("sim", self.sim, SimConfig(workers=self.workers))]


def jobs_or_cores(jobs: int) -> int:
    """``--jobs``: runs at a time; 0 means one per core here."""
    from hpcbench.errors import UsageError
    from hpcbench.runtime.threads import cpu_count

    if jobs < 0:
        raise UsageError(f"--jobs must be >= 1 (0: the cores here), got {jobs}")
    return jobs or cpu_count()


def start(job: Job, mode: str, package: Path | None = None) -> subprocess.Popen:
    """``job`` in a process of its own (simulated: with the package in ``package`` where given)."""
    from hpcbench.launch.local import launch_env, mpi_command

    if mode == "sim":
        env = {**os.environ, "OMP_NUM_THREADS": "1"} | ({"PYTHONPATH": str(package)} if package else {})
        argv = [sys.executable, "-m", "hpcbench", *job.argv(mode), "--set", "threads=1"]
    else:
        env = launch_env(job.workers + 1)
        argv = mpi_command(job.workers + 1, job.argv(mode))
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=package)


def not_ok(path: Path) -> str:
    """Why the file of a run that ended well is not ok ("" when it is): it holds an impossible value, or
    something else is there (a run whose disk filled kept its result elsewhere and said so)."""
    from hpcbench.results.store import result_state

    status, why = result_state(path)
    return "" if status == "ok" else why or f"its result file {str(path)!r} says {status!r}"


def why_failed(code: int, stderr: str) -> str:
    from hpcbench.launch.local import own_lines

    lines = own_lines(stderr)
    return lines[-1] if lines else f"exit code {code}"


def weight(job: Job, mode: str) -> float:
    """A run's share of a study's time: a real run's grows with its ranks (each starts a process, on
    cores they share); a simulated run's with its fixed budget of gradients, whatever its workers."""
    return job.workers + 1 if mode == "mpi" else 1.0


def run_jobs(jobs: Sequence[Job], mode: str, parallel: int, timeout: float,
             package: Path | None = None) -> dict[Path, str]:
    """Run every job; → for each result file, "" when it is ok (run now or kept), else why it failed.
    Ok means every reader takes the file whole: a kept file that holds an impossible value is said in one
    line and run again, and a run whose file is not ok when it ends counts as failed, with the reason.

    Prints one line per job as it ends: ``[k/N, T so far, about U left] label: its result`` (or FAILED),
    counting the runs to do (those kept are said once). ``package``: simulate with the package there (another
    commit's, which ``reproduce --recheck`` compares with the code here), each run in a process of its own."""
    from hpcbench.errors import one_line
    from hpcbench.results.store import result_state

    width = 1 if mode == "mpi" else max(1, parallel)
    outcome: dict[Path, str] = {}
    todo: list[Job] = []
    for job in jobs:
        if job.path in outcome or job in todo:
            continue
        status, why = result_state(job.path)
        if status == "ok":
            outcome[job.path] = ""
        else:
            if status == "invalid":
                print(f"hpcbench: {one_line(why)}; it is run again", file=sys.stderr, flush=True)
            todo.append(job)
    done = len(outcome)
    total = done + len(todo)
    if done:
        print(f"{done} of {total} runs kept from an earlier invocation (their files say ok)", flush=True)
    countdown = Countdown([weight(job, mode) for job in todo])
    if todo:
        print(f"{len(todo)} runs to do, {width} at a time: the count and the time left follow each", flush=True)
    if mode == "sim" and width == 1 and package is None:  # one at a time: in this process, without a start-up per run
        with signals_stop_study():
            for job in todo:
                outcome[job.path] = inline(job, countdown)
        return outcome
    runner = Workers.here() if mode == "sim" and package is None else OwnProcesses(mode, package)
    running: list[tuple[Job, Any, float]] = []
    queue = list(todo)
    # Each run has a session of its own (no terminal's signal reaches it): a hangup or SIGTERM here stops them.
    with signals_stop_study():
        try:
            while queue or running:
                while queue and len(running) < width:
                    job = queue.pop(0)
                    running.append((job, runner.begin(job), time.monotonic()))
                time.sleep(0.05)
                for entry in list(running):
                    job, handle, t0 = entry
                    ended = runner.ended(handle)
                    if ended is None and time.monotonic() - t0 < timeout:
                        continue
                    running.remove(entry)
                    if ended is None:
                        runner.kill(handle)
                        why, out = f"killed after {timeout:g} s", ""
                    else:
                        failed, out = ended
                        why = failed or not_ok(job.path)
                    outcome[job.path] = why
                    say([countdown.finished(weight(job, mode)), *countdown.shorter()], job, why, out)
        finally:
            for _, handle, _ in running:
                runner.kill(handle)
    return outcome


Ended = tuple[str, str]  # why a run failed ("" if it did not: its file then says), what it printed


class OwnProcesses:
    """Each run in a process of its own: real runs, and simulated ones with another commit's package."""

    def __init__(self, mode: str, package: Path | None) -> None:
        self.mode, self.package = mode, package

    def begin(self, job: Job) -> subprocess.Popen:
        return start(job, self.mode, self.package)

    def ended(self, proc: subprocess.Popen) -> Ended | None:
        code = proc.poll()
        if code is None:
            return None
        out, err = proc.communicate()
        return ("" if code == 0 else why_failed(code, err)), out

    def kill(self, proc: subprocess.Popen) -> None:
        stop(proc)


class SimWorker:
    """A process of ``hpcbench.tuning.simworker`` (one thread, a session of its own): simulated runs handed
    over one at a time."""

    def __init__(self) -> None:
        self.errors = tempfile.TemporaryFile("w+")  # what it says outside the runs, should it end
        self.proc = subprocess.Popen([sys.executable, "-m", "hpcbench.tuning.simworker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errors, text=True,
                                     start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})

    def give(self, job: Job) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job.argv("sim")[1:]) + "\n")  # less "simulate"
        self.proc.stdin.flush()

    def hang_up(self) -> None:
        """No more runs: it ends when the one it is simulating has."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # it had ended: nothing to tell it
                self.proc.stdin.close()
            self.proc.stdin = None

    def close(self) -> None:
        """After it ended: its pipe and its file of errors."""
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.errors.close()

    def ended(self) -> Ended | None:
        """The run handed over, once it has ended (None before)."""
        from hpcbench.launch.local import own_lines

        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], 0)[0]:
            return None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.errors.seek(0)
            said = own_lines(self.errors.read())
            return f"the process simulating it ended (exit code {code})" + (f": {said[-1]}" if said else ""), ""
        reply = json.loads(line)
        return str(reply["failed"]), str(reply["out"])


class Workers:
    """Simulated runs handed to processes that simulate one after another (as many as run at a time):
    each pays for starting Python and importing torch once, not once per run. A run past its time is
    stopped with its process, and the next run gets a fresh one. The processes wait for the next
    ``run_jobs`` of this process (a study calls it once per stage) while the directory and environment
    they were started in are this process's; they end with it."""

    _kept: Workers | None = None

    def __init__(self) -> None:
        self.idle: list[SimWorker] = []
        self.where = (os.getcwd(), sorted(os.environ.items()))

    @classmethod
    def here(cls) -> Workers:
        kept = cls._kept
        if kept is None or kept.where != (os.getcwd(), sorted(os.environ.items())):
            if kept is not None:
                kept.end()
            else:
                atexit.register(lambda: cls._kept.end() if cls._kept else None)
            kept = cls._kept = cls()
        return kept

    def begin(self, job: Job) -> SimWorker:
        worker = self.idle.pop() if self.idle else SimWorker()
        try:
            worker.give(job)
        except OSError:  # it had ended meanwhile
            self.kill(worker)
            worker = SimWorker()
            try:
                worker.give(job)
            except OSError:
                self.kill(worker)
                raise
        return worker

    def ended(self, worker: SimWorker) -> Ended | None:
        found = worker.ended()
        if found is not None:
            if worker.proc.poll() is None:
                self.idle.append(worker)
            else:
                worker.close()
        return found

    def kill(self, worker: SimWorker) -> None:
        worker.hang_up()
        stop(worker.proc)
        worker.close()

    def end(self) -> None:
        for worker in self.idle:
            try:
                worker.hang_up()
                worker.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                stop(worker.proc)
            worker.close()
        self.idle.clear()


def simulated_here(cfg: RunConfig, sim: SimConfig) -> tuple[str, str]:
    """Simulate a run in this process, one-threaded; → (why it failed, "" if it did not, what it printed)."""
    import io

    from hpcbench.errors import UsageError
    from hpcbench.runtime.plan import prepare
    from hpcbench.runtime.sim.session import simulate

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            simulate(prepare(cfg.with_updates(threads=1), "simulate", sim))
        return "", out.getvalue()
    except UsageError as exc:
        return str(exc), out.getvalue()
    except Exception as exc:  # a deadlock or a bug in one run must not lose the others
        return f"{type(exc).__name__}: {exc}", out.getvalue()


def inline(job: Job, countdown: Countdown) -> str:
    """Simulate ``job`` in this process; → "" or why it failed (printed as run_jobs prints)."""
    failed, out = simulated_here(job.cfg, job.sim)
    why = failed or not_ok(job.path)
    say([countdown.finished(weight(job, "sim")), *countdown.shorter()], job, why, out)
    return why


def say(counts: Sequence[str], job: Job, why: str, stdout: str) -> None:
    """One progress line for a finished run, in the terminal's 120 columns: the count and time left (``counts``:
    the longest first, the first that fits), its label and its result (``terminal.result_briefs``: the run's
    own line less what the label says); or why it failed, whole, in as many lines as it takes."""
    from hpcbench.terminal import fitted, result_briefs, wrapped

    if why:
        print(wrapped(f"{counts[0]} {job.label}: FAILED: {why}"), file=sys.stderr, flush=True)
    else:
        last = (stdout.strip().splitlines() or [""])[-1]
        print(fitted(counts, job.label, result_briefs(last)), flush=True)


def stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()
