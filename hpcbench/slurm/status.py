"""``hpcbench status STUDY_DIR``: every point of a study, its result and its latest Slurm job's state."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tabulate import tabulate

from hpcbench.errors import one_line
from hpcbench.results.study_dir import point_states, recorded_jobs


def run(command: list[str]) -> subprocess.CompletedProcess[str] | None:
    """A Slurm command's outcome, or None when it is not there or did not answer in time."""
    if shutil.which(command[0]) is None:
        return None
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None


def job_states(ids: list[str]) -> dict[str, str]:
    """Slurm's state of each job: from accounting (sacct) where the cluster keeps it, else from the
    controller's memory of recent jobs (scontrol); "unknown" for jobs neither remembers. A controller that
    cannot be reached is asked once (each try takes it many seconds), not once per job."""
    states: dict[str, str] = {}
    if not ids:
        return states
    accounted = run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(ids)])
    for line in (accounted.stdout if accounted and accounted.returncode == 0 else "").splitlines():
        job, _, state = line.partition("|")
        if job in ids and state:
            states[job] = state.split()[0]
    reachable = True
    for job in ids:
        if job in states:
            continue
        shown = run(["scontrol", "show", "job", "-o", job]) if reachable else None
        if shown is None or shown.returncode != 0 and "invalid job id" not in shown.stderr.lower():
            reachable = False  # not there, no answer, or no controller: the other jobs are unknown too
        fields = dict(f.split("=", 1) for f in (shown.stdout if shown and shown.returncode == 0 else "").split()
                      if "=" in f)
        states[job] = fields.get("JobState", "unknown")
    return states


def status_text(out_dir: str) -> str:
    points = point_states(out_dir)
    latest = [p.jobs[-1] for p in points if p.jobs]
    report_jobs = recorded_jobs(Path(out_dir)).get("report", [])
    states = job_states(latest + report_jobs[-1:])
    rows = [[p.stem, p.result, p.jobs[-1] if p.jobs else "-", states.get(p.jobs[-1], "-") if p.jobs else "-",
             len(p.jobs)] for p in points]
    if report_jobs:
        rows.append(["(report)", "-", report_jobs[-1], states.get(report_jobs[-1], "-"), len(report_jobs)])
    ok = sum(p.result == "ok" for p in points)
    table = tabulate(rows, headers=["point", "result", "latest job", "Slurm state", "submissions"],
                     disable_numparse=True)
    text = f"{out_dir}: {ok} of {len(points)} points have an ok result\n\n{table}"
    invalid = [one_line(p.why) for p in points if p.why]  # each invalid file, the field and the value that make it so
    return "\n\n".join([text, "\n".join(invalid)]) if invalid else text
