"""A real single-node Slurm on localhost: a two-point sweep submitted with sbatch, and the launcher check.

Opt-in: they use a Slurm that is already up (and leave it alone), or, with HPCBENCH_TEST_SLURM=1
(CI sets it), start one with jobs/slurm/local-cluster.sh (root, Debian packages) and stop the
daemons they started when they are done. Otherwise they skip and say how to enable them.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcbench.results.store import read_run

# root: a Slurm of their own; mpi: the jobs start MPI ranks (srun, or mpirun under ULFM).
pytestmark = [pytest.mark.root, pytest.mark.mpi, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parent.parent


def slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and re.search(r"idle|mixed|allocated", out.stdout) is not None


LOCAL_CLUSTER = ROOT / "jobs" / "slurm" / "local-cluster.sh"


@pytest.fixture(scope="module")
def slurm():
    if slurm_up():
        yield  # somebody else's Slurm: used as it is, and left running
        return
    if os.environ.get("HPCBENCH_TEST_SLURM") != "1":
        pytest.skip("no Slurm is running; set HPCBENCH_TEST_SLURM=1 to let the tests install and start a local "
                    "one with jobs/slurm/local-cluster.sh (root, apt-get) and stop it afterwards")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("no running Slurm, and jobs/slurm/local-cluster.sh needs root and apt-get to start one")
    proc = subprocess.run([str(LOCAL_CLUSTER)], capture_output=True, text=True, timeout=400)
    try:
        if proc.returncode != 0 or not slurm_up():
            pytest.skip(f"could not install or start a local Slurm: {proc.stderr.strip()[-300:]}")
        yield
    finally:  # what the tests started, they stop (by the daemons' process ids)
        subprocess.run([str(LOCAL_CLUSTER), "stop"], capture_output=True, text=True, timeout=60)


def wait_for_jobs(ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], capture_output=True, text=True)
        if not queued.stdout.strip():
            return
        time.sleep(2)
    pytest.fail(f"Slurm jobs {ids} still queued or running after {timeout} s")


def test_a_two_point_sweep_runs_under_sbatch_and_its_report_job_follows(slurm, tmp_path):
    # Rank 0 as an extra task: 2 slots on the node give 2 workers and 3 tasks.
    out = subprocess.run(
        [sys.executable, "-m", "hpcbench", "sweep", "--nodes", "1", "--tasks-per-node", "2", "--rank0", "extra",
         "--algos", "asgd,allreduce", "--set", "steps=15", "--out-dir", str(tmp_path), "--submit"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runs = re.search(r"submitted runs: ([\d ]+)", out.stdout).group(1).split()
    report = re.search(r"report job: (\d+)", out.stdout).group(1)
    assert len(runs) == 2
    wait_for_jobs(runs + [report], timeout=400)
    for algo in ("asgd", "allreduce"):
        rec = read_run(tmp_path / f"{algo}-n1.h5")
        assert rec.attrs["status"] == "ok" and rec.workers == 2
        assert rec.provenance["slurm_job_id"] in runs and rec.provenance["slurm_ntasks"] == "3"
    report_md = (tmp_path / "report.md").read_text()
    assert "| asgd " in report_md and "| allreduce " in report_md and "efficiency" in report_md
    assert "without an ok result" not in report_md
    log = next((tmp_path / "logs").glob(f"report-{report}.out")).read_text()
    assert "| asgd " in log  # the report job itself ran, after both runs


def test_a_failed_point_still_gets_a_report_and_resubmit_failed_completes_it(slurm, tmp_path):
    """allreduce's job fails on purpose (its setup line needs a file that is not there yet): the report
    job still runs, after every run ended, and lists it; once the file exists, --resubmit-failed runs
    only that point and a new report has both."""
    gate = tmp_path / "allow-allreduce"
    setup = [f"source {sys.prefix}/bin/activate",
             f'[ "$SLURM_JOB_NAME" != hpcbench-allreduce-n1 ] || [ -e {gate} ]']
    out = subprocess.run(
        [sys.executable, "-m", "hpcbench", "sweep", "--nodes", "1", "--tasks-per-node", "3", "--shared",
         "--algos", "asgd,allreduce", "--steps", "10", "--out-dir", str(tmp_path), "--submit",
         *[a for line in setup for a in ("--setup", line)]],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runs = re.search(r"submitted runs: ([\d ]+)", out.stdout).group(1).split()
    report = re.search(r"report job: (\d+)", out.stdout).group(1)
    wait_for_jobs(runs + [report], timeout=400)
    report_md = (tmp_path / "report.md").read_text()
    assert "| asgd " in report_md and "Points without an ok result (1)" in report_md
    assert re.search(r"\| allreduce-n1 +\| missing +\| " + runs[1], report_md)
    status = subprocess.run([sys.executable, "-m", "hpcbench", "status", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and "1 of 2 points have an ok result" in status.stdout
    rows = {line.split()[0]: line.split() for line in status.stdout.splitlines()[3:]}
    assert rows["asgd-n1"][1:] == ["ok", runs[0], "COMPLETED", "1"]
    assert rows["allreduce-n1"][1:] == ["missing", runs[1], "FAILED", "1"]

    gate.touch()
    again = subprocess.run([sys.executable, "-m", "hpcbench", "sweep", "--resubmit-failed", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "resubmitted 1 point(s): allreduce-n1" in again.stdout
    new_runs = re.search(r"submitted runs: ([\d ]+)", again.stdout).group(1).split()
    new_report = re.search(r"report job: (\d+)", again.stdout).group(1)
    wait_for_jobs(new_runs + [new_report], timeout=400)
    assert read_run(tmp_path / "allreduce-n1.h5").attrs["status"] == "ok"
    report_md = (tmp_path / "report.md").read_text()
    assert "| asgd " in report_md and "| allreduce " in report_md and "without an ok result" not in report_md


def test_srun_with_the_wrong_mpi_plugin_is_caught_and_named(slurm, tmp_path):
    proc = subprocess.run(
        ["srun", "--mpi=none", "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hpcbench", "run", "--algo", "asgd",
         "--out", str(tmp_path / "never.h5")], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hpcbench: error:")]
    assert len(errors) == 1  # said once, by Slurm's task 0, not by every task
    assert "Slurm started 2 tasks but MPI sees a world of 1" in errors[0] and "srun --mpi=pmi2" in errors[0]
    assert not (tmp_path / "never.h5").exists()


def test_the_run_script_in_jobs_slurm_runs_one_benchmark(slurm, tmp_path):
    out = tmp_path / "one.h5"
    proc = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=3", "--cpus-per-task=1",
         f"--output={tmp_path}/log-%j.out",
         f"--export=ALL,HPCBENCH_VENV={sys.prefix}", str(ROOT / "jobs" / "slurm" / "run.sbatch"),
         "--algo", "sgp", "--steps", "10", "--out", str(out)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    wait_for_jobs([job], timeout=300)
    rec = read_run(out)
    assert rec.algorithm == "sgp" and rec.workers == 2 and rec.provenance["slurm_job_id"] == job
    assert rec.per_rank["threads"] == ["1", "1", "1"]  # from SLURM_CPUS_PER_TASK


def test_the_local_cluster_script_starts_nothing_twice(slurm):
    pids = [Path(p) for p in ("/run/slurmctld.pid", "/run/slurmd.pid", "/run/munge/munged.pid")]
    if not all(p.exists() for p in pids):
        pytest.skip("this Slurm was not started by jobs/slurm/local-cluster.sh")
    before = [p.read_text() for p in pids]
    proc = subprocess.run([str(LOCAL_CLUSTER)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "already running; nothing to do" in proc.stdout
    assert [p.read_text() for p in pids] == before and "installing" not in proc.stdout
