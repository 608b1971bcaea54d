"""Studies without Slurm: job scripts line by line, sweeps, self-checks, plots, traces, diffs, progress."""
import io
import json
import os
import re
import subprocess
import sys

import pytest

from hpcbench.comm.probe import srun_mpi_flag
from hpcbench.results.store import read_run
from hpcbench.runtime.mpi.selfcheck import oversubscribed_nodes, shared_gpus, slurm_world_mismatch
from hpcbench.runtime.threads import cpu_count
from hpcbench.slurm.jobs import Resources, report_job, run_job, submit_script
from hpcbench.slurm.sweep import Point, plan_points
from hpcbench.telemetry.progress_line import Countdown, ProgressLine

from conftest import cli, requires_mpi


def test_run_job_script_line_by_line():
    res = Resources(tasks_per_node=4, cpus_per_task=8, gpus_per_task=1, time="02:00:00", partition="gpu",
                    account="proj", mpi="pmix", setup=("source /opt/venv/bin/activate",))
    script = run_job("hpcbench-asgd-n16", 16, res, ["run", "--algo", "asgd", "--out", "/s/asgd-n16.h5"], "/s/log-%j")
    assert script.splitlines() == [
        "#!/bin/bash",
        "#SBATCH --job-name=hpcbench-asgd-n16",
        "#SBATCH --nodes=16",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --gpus-per-task=1",
        "#SBATCH --time=02:00:00",
        "#SBATCH --signal=USR1@60",
        "#SBATCH --output=/s/log-%j",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj",
        "#SBATCH --exclusive",
        "set -euo pipefail",
        "source /opt/venv/bin/activate",
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        "srun --mpi=pmix python -m mpi4py -m hpcbench run --algo asgd --out /s/asgd-n16.h5",
    ]


def test_rank0_as_an_extra_task_gives_every_gpu_slot_a_worker():
    res = Resources(tasks_per_node=4, gpus_per_task=1, rank0="extra", mpi="pmi2", setup=())
    script = run_job("j", 8, res, ["run", "--algo", "asgd"], "/l").splitlines()
    assert script[2:6] == ["#SBATCH --nodes=8", "#SBATCH --ntasks=33", "#SBATCH --cpus-per-task=1",
                           "#SBATCH --gpus-per-node=4"]
    assert not any("--ntasks-per-node" in line or "--gpus-per-task" in line for line in script)
    assert script[-1] == "srun --mpi=pmi2 --distribution=block python -m mpi4py -m hpcbench run --algo asgd"
    assert res.ranks(8) == 33 and Resources(tasks_per_node=4).ranks(8) == 32


@pytest.mark.parametrize("flags, ntasks, gpus", [
    (["--gpus-per-task", "1"], "#SBATCH --ntasks=9", "#SBATCH --gpus-per-node=4"),  # GPU jobs: extra by default
    ([], "#SBATCH --ntasks-per-node=4", None),  # CPU jobs: rank 0 takes a slot
    (["--gpus-per-task", "2", "--rank0", "slot"], "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-task=2"),
])
def test_sweep_chooses_where_rank0_goes(tmp_path, flags, ntasks, gpus):
    code, out, err = cli("sweep", "--algos", "asgd", "--nodes", "2", "--tasks-per-node", "4", "--mpi", "pmi2",
                         "--out-dir", str(tmp_path), *flags)
    assert code == 0, err
    script = (tmp_path / "runs" / "asgd-n2.sbatch").read_text().splitlines()
    assert ntasks in script
    assert (gpus in script) if gpus else not any("gpus" in line for line in script)


def test_rank0_extra_counts_rank0_when_checking_the_world_size(tmp_path):
    # One node with one slot is a world of 2 with rank 0 extra: enough for asgd (one worker).
    code, _, err = cli("sweep", "--algos", "asgd", "--nodes", "1", "--rank0", "extra", "--mpi", "pmi2",
                       "--out-dir", str(tmp_path))
    assert code == 0, err
    code, _, err = cli("sweep", "--algos", "asgd", "--nodes", "1", "--mpi", "pmi2", "--out-dir", str(tmp_path / "b"))
    assert code == 2 and "asgd needs 2+ ranks but 1 node(s) × 1 task(s) give 1" in err


def test_cpu_job_has_no_gpu_line_and_defaults_to_pmi2():
    script = run_job("j", 8, Resources(), ["run", "--algo", "sgp"], "/l")
    assert "--gpus-per-task" not in script and "--partition" not in script
    assert "srun --mpi=pmi2 python -m mpi4py -m hpcbench run --algo sgp" in script


@pytest.mark.slow  # a shell runs the submission script
def test_report_job_and_submission_chain_with_afterany(tmp_path):
    report = report_job("hpcbench-report", "/s", Resources(partition="p"), "/s/logs/report-%j.out")
    assert "#SBATCH --nodes=1" in report and "#SBATCH --partition=p" in report
    assert "#SBATCH --exclusive" not in report  # one small task: no whole node for it
    assert "hpcbench report /s --format md > /s/report.md" in report
    jobs = tmp_path / "jobs.tsv"
    submit = submit_script(["/s/runs/a.sbatch", "/s/runs/b.sbatch"], "/s/report.sbatch", str(jobs))
    assert "for job in /s/runs/a.sbatch /s/runs/b.sbatch; do" in submit
    # Run it against a stand-in sbatch that answers job ids 101, 102, 103 in turn.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$@" >> "$(dirname "$0")/calls"\n'
                                    'n=$(wc -l < "$(dirname "$0")/calls"); echo $((100 + n))\n')
    (bin_dir / "sbatch").chmod(0o755)
    proc = subprocess.run(["bash", "-c", submit], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    assert (bin_dir / "calls").read_text().splitlines() == [
        "--parsable /s/runs/a.sbatch", "--parsable /s/runs/b.sbatch",
        "--parsable --dependency=afterany:101:102 /s/report.sbatch"]
    assert jobs.read_text() == "a\t101\nb\t102\nreport\t103\n"


def test_study_points_and_files(tmp_path):
    points = plan_points(["asgd", "sgp"], [8, 16], repeats=2)
    assert len(points) == 8 and Point("sgp", 16, 2) in points and points[0].stem == "asgd-n8-r1"
    code, out, _ = cli("sweep", "--nodes", "8,16", "--algos", "asgd,sgp", "--tasks-per-node", "2",
                       "--out-dir", str(tmp_path), "--set", "steps=50", "--mpi", "pmi2")
    assert code == 0 and "wrote 4 run jobs" in out
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "asgd-n16.sbatch", "asgd-n8.sbatch", "sgp-n16.sbatch", "sgp-n8.sbatch"]
    script = (tmp_path / "runs" / "sgp-n16.sbatch").read_text()
    assert "#SBATCH --nodes=16" in script and "#SBATCH --ntasks-per-node=2" in script
    assert f"--set steps=50 --out {tmp_path}/sgp-n16.h5" in script
    assert "#SBATCH --exclusive" in script
    assert (tmp_path / "submit.sh").stat().st_mode & 0o100
    manifest = json.loads((tmp_path / "study.json").read_text())
    assert [p["stem"] for p in manifest["points"]] == ["asgd-n8", "sgp-n8", "asgd-n16", "sgp-n16"]
    assert manifest["base_args"] == {"asgd": ["--set", "steps=50"], "sgp": ["--set", "steps=50"]}
    assert manifest["resources"]["tasks_per_node"] == 2


def test_sweep_takes_run_flags_and_sbatch_options(tmp_path):
    code, out, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path), "--mpi", "pmi2",
                         "--model", "cnn", "--epochs", "3", "--batch-size", "64", "--lr", "0.1",
                         "--stragglers", "0.25:3", "--shared", "--mem", "64G", "--constraint", "a100",
                         "--sbatch-arg=--qos=high", "--sbatch-arg=--reservation=bench")
    assert code == 0, err
    script = (tmp_path / "runs" / "asgd-n2.sbatch").read_text()
    assert ("run --algo asgd --set model=cnn --set epochs=3.0 --set batch_size=64 --set lr=0.1 "
            "--set stragglers=0.25:3 --out") in script
    assert "#SBATCH --exclusive" not in script
    assert "#SBATCH --mem=64G\n#SBATCH --constraint=a100\n#SBATCH --qos=high\n#SBATCH --reservation=bench" in script
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path / "x"), "--mpi", "pmi2",
                       "--sbatch-arg", "qos=high")
    assert code == 2 and "--sbatch-arg 'qos=high' is not an sbatch option" in err
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path / "y"), "--mpi", "pmi2",
                       "--model", "vgg")
    assert code == 2 and "unknown model 'vgg'" in err and not (tmp_path / "y").exists()


def test_a_study_reports_and_shows_its_points_without_an_ok_result(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no Slurm here (a stopped one answers in 18 s)
    code, _, err = cli("sweep", "--nodes", "1", "--algos", "asgd,sgp", "--tasks-per-node", "4",
                       "--out-dir", str(tmp_path), "--mpi", "pmi2", "--set", "steps=5")
    assert code == 0, err
    (tmp_path / "jobs.tsv").write_text("asgd-n1\t11\nsgp-n1\t12\nreport\t13\nsgp-n1\t14\n")
    code, out, _ = cli("report", str(tmp_path))  # nothing ran: the list of failed points, not an error
    assert code == 0 and "Points without an ok result (2)" in out
    assert out.startswith("Points without an ok result (2)") and "Runs (" not in out
    assert ["asgd-n1", "missing", "11"] in [line.split() for line in out.splitlines()]
    assert ["sgp-n1", "missing", "14"] in [line.split() for line in out.splitlines()]
    code, _, err = cli("simulate", "--algo", "asgd", "--workers", "3", "--steps", "5", "--numerics", "off",
                       "--out", str(tmp_path / "asgd-n1.h5"))
    assert code == 0, err
    (tmp_path / "sgp-n1.h5.12-x.partial").write_bytes(b"")
    code, out, _ = cli("report", str(tmp_path), "--format", "md")
    assert code == 0 and "| asgd " in out and "Points without an ok result (1)" in out
    assert ["sgp-n1", "partial", "14"] in [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()]
    code, out, _ = cli("status", str(tmp_path))
    assert code == 0 and out.startswith(f"{tmp_path}: 1 of 2 points have an ok result")
    lines = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert lines["asgd-n1"][1:3] == ["ok", "11"] and lines["sgp-n1"][1:3] == ["partial", "14"]
    assert lines["sgp-n1"][-1] == "2" and lines["(report)"][2] == "13"  # submissions of that point

@pytest.mark.slow  # stand-ins for sacct and scontrol
def test_status_asks_a_controller_that_cannot_be_reached_once(tmp_path, monkeypatch):
    from hpcbench.slurm.status import job_states

    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("sacct", "echo 'Slurm accounting storage is disabled' >&2; exit 1"),
                       ("scontrol", "echo 'slurm_load_jobs error: Unable to contact slurm controller "
                                    "(connect failure)' >&2; exit 1")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} >> {calls}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert job_states(["11", "12", "13"]) == {"11": "unknown", "12": "unknown", "13": "unknown"}
    assert calls.read_text().split() == ["sacct", "scontrol"]  # not once per job: each try takes seconds


@pytest.mark.parametrize("args, message", [
    (["--nodes", "8", "--algos", "asgd,nope"], "unknown algorithm 'nope'; valid: allreduce, asgd"),
    (["--nodes", "", "--algos", "asgd"], "--nodes is empty"),
    (["--nodes", "8,0", "--algos", "asgd"], "--nodes: every count must be >= 1, got 0"),
    (["--nodes", "-2", "--algos", "asgd"], "--nodes: every count must be >= 1, got -2"),
    (["--nodes", "8,x", "--algos", "asgd"], "is not a comma-separated list of integers"),
    (["--nodes", "1", "--algos", "sgp"], "sgp needs 3+ ranks but 1 node(s) × 1 task(s) give 1"),
    (["--nodes", "8", "--algos", "asgd", "--set", "lr=-1"], "lr must be in [0, 10,000]"),
])
def test_bad_sweep_input_is_one_clear_line(tmp_path, args, message):
    code, out, err = cli("sweep", *args, "--out-dir", str(tmp_path / "s"))
    assert code == 2 and err.strip().splitlines() == [f"hpcbench: error: {err.strip()[17:]}"]
    assert message in err and not (tmp_path / "s").exists()


def test_self_checks_name_their_fixes():
    env = {"SLURM_NTASKS": "4"}
    assert "srun --mpi=pmi2" in slurm_world_mismatch(env, 1, "MPICH 5.0.2")
    assert "srun --mpi=pmix" in slurm_world_mismatch(env, 1, "Open MPI 5.0.11")
    assert slurm_world_mismatch(env, 4, "MPICH") is None and slurm_world_mismatch({}, 1, "MPICH") is None
    assert srun_mpi_flag("Intel MPI 2021") == "pmi2"
    warnings = shared_gpus([(0, "a", "cuda:0"), (1, "a", "cuda:0"), (2, "a", "cuda:0"), (3, "b", "cuda:0"),
                            (4, "a", "cuda:1")])
    assert warnings == ["ranks 1, 2 share cuda:0 on a: give each task its own GPU (srun --gpus-per-task=1, or "
                        "fewer tasks per node); their timings include the sharing"]
    assert shared_gpus([(1, "a", "cpu"), (2, "a", "cpu")]) == []
    assert oversubscribed_nodes({"a": (5, 2), "b": (2, 2)})[0].startswith("5 ranks share 2 cores on a")
    assert len(oversubscribed_nodes({"a": (5, 2), "b": (2, 2)})) == 1


def test_progress_line_shows_rate_accuracy_and_eta():
    now = [100.0]
    out = io.StringIO()
    line = ProgressLine("asgd, 4 workers", 1000, stream=out, mode="live", clock=lambda: now[0])
    line.update(100, 0.5, 0.75)  # too soon after the start
    now[0] += 10.0
    line.update(250, 0.5, 0.75)
    line.close()
    text = out.getvalue()
    assert text.startswith("\rasgd, 4 workers: 250/1000 samples (25%), 25 samples/s, ") and "train acc 0.750" in text
    assert "ETA 30 s" in text and text.endswith("\n")


def test_batch_logs_get_a_plain_line_every_progress_s():
    now = [0.0]
    out = io.StringIO()  # not a terminal
    line = ProgressLine("sgp, 8 workers", 1000, stream=out, every_s=30.0, clock=lambda: now[0])
    assert line.mode == "plain"
    for t, samples in ((10.0, 100), (31.0, 300), (45.0, 450), (62.0, 620)):
        now[0] = t
        line.update(samples, 0.25, 0.5)
    line.close()
    lines = out.getvalue().splitlines()
    assert lines == [line for line in lines if "\r" not in line] and len(lines) == 2
    assert lines[0].startswith("[31 s] sgp, 8 workers: 300/1000 samples (30%), 10 samples/s, train loss 0.250")
    assert lines[1].startswith("[62 s] sgp, 8 workers: 620/1000 samples (62%), 10 samples/s")
    silent = io.StringIO()
    ProgressLine("x", 10, stream=silent, mode="off", clock=lambda: now[0] + 100).update(5, 0.1, 0.9)
    assert silent.getvalue() == ""


def test_an_mpi_runs_first_plain_line_comes_at_ten_seconds_or_ten_percent():
    now = [0.0]
    out = io.StringIO()  # a launcher's pipe
    line = ProgressLine("asgd, 2 workers", 1000, stream=out, every_s=30.0, clock=lambda: now[0], early=True)
    for t, samples in ((1.0, 50), (2.0, 100), (20.0, 400), (31.0, 500), (33.0, 600)):
        now[0] = t
        line.update(samples, 0.25, 0.5)
    assert [text.split(":")[1].split(" (")[0] for text in out.getvalue().splitlines()] == [" 100/1000 samples",
                                                                                      " 600/1000 samples"]
    now[0] = 0.0
    slow = io.StringIO()
    line = ProgressLine("asgd, 2 workers", 10**9, stream=slow, every_s=30.0, clock=lambda: now[0], early=True)
    for t in (5.0, 9.9, 10.0, 12.0):
        now[0] = t
        line.update(int(t), 0.25, 0.5)
    assert [text.split(" s]")[0] for text in slow.getvalue().splitlines()] == ["[10"]


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    """Simulated runs: two algorithms at two sizes, and a second study with another learning rate."""
    root = tmp_path_factory.mktemp("study")
    for study, lr in (("old", "0.05"), ("new", "0.1")):
        for algo in ("asgd", "sgp"):
            for workers in ("2", "4"):
                code, _, err = cli("simulate", "--algo", algo, "--workers", workers, "--steps", "20", "--lr", lr,
                                   "--out", str(root / study / f"{algo}-{workers}.h5"))
                assert code == 0, err
    return root


def test_plots_are_pngs_with_the_expected_series(small_study, tmp_path):
    code, out, _ = cli("report", str(small_study / "new"), "--plot", str(tmp_path))
    assert code == 0
    for name in ("throughput", "efficiency", "time-to-target", "accuracy-time", "accuracy-samples"):
        assert f"plot: {tmp_path}/{name}.png (2 curves: asgd, sgp)" in out
    phases = f"plot: {tmp_path}/phases.png (4 curves"  # named where the line has room within 120 columns
    assert phases + ": asgd, 2 workers, asgd, 4 workers, sgp, 2 workers, sgp, 4 workers)" in out or \
        phases + ")" in out
    assert max(map(len, out.splitlines())) <= 120
    for name in ("throughput", "efficiency", "time-to-target", "accuracy-time", "accuracy-samples", "phases"):
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    from matplotlib.image import imread
    assert 600 < imread(tmp_path / "throughput.png").shape[1] <= 900  # drawn for a page read at 800 px


def test_trace_has_one_track_per_rank(small_study, tmp_path):
    path = tmp_path / "t.json"
    code, out, _ = cli("trace", str(small_study / "new" / "sgp-4.h5"), "-o", str(path))
    assert code == 0
    trace = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {0: "rank 0 (coordinator)", 1: "rank 1 (worker)", 2: "rank 2 (worker)", 3: "rank 3 (worker)",
                     4: "rank 4 (worker)"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2, 3, 4} and all(e["dur"] >= 0 for e in spans)
    assert {"Compute", "Recv"} <= {e["name"] for e in spans}
    rec = read_run(small_study / "new" / "sgp-4.h5")
    assert len(spans) == len(rec.timeline["rank"])


def test_diff_shows_changed_cells_and_config_keys(small_study):
    code, out, _ = cli("diff", str(small_study / "old"), str(small_study / "new"))
    assert code == 0
    assert out.count(" changed ") == 4 and "->" in out
    assert "lr " in out and "0.05" in out and "0.1" in out
    assert "batch_size" not in out  # unchanged keys are not listed


def test_report_latex_and_csv_formats(small_study):
    code, out, _ = cli("report", str(small_study / "new"), "--format", "latex")
    assert code == 0 and "\\begin{tabular}" in out and "\\toprule" in out
    code, out, _ = cli("report", str(small_study / "new"), "--format", "csv", "--table", "runs")
    assert code == 0 and out.splitlines()[1].startswith("asgd,sim,2,1,")
    code, _, err = cli("report", str(small_study / "new"), "--format", "csv")
    assert code == 2 and "csv holds one table: add --table runs or --table scaling" in err
    code, _, err = cli("report", str(small_study / "new"), "--format", "pdf")
    assert code == 2 and "unknown format 'pdf'; valid: text, md, latex, csv, json, html" in err
    (small_study / "bad.h5").write_text("not a result")  # said before any file is read (or skipped)
    try:
        code, out, err = cli("report", str(small_study), "--format", "pdf")
    finally:
        (small_study / "bad.h5").unlink()
    assert code == 2 and not out and err.splitlines() == ["hpcbench: error: unknown format 'pdf'; valid: text, md, "
                                                          "latex, csv, json, html"], err


@requires_mpi
@pytest.mark.both
@pytest.mark.timeout(300)
def test_local_sweep_runs_each_point_and_prints_the_table(tmp_path):
    code, out, err = cli("sweep", "--local", "--ranks", "3,4", "--algos", "asgd,allreduce", "--set", "steps=10",
                         "--out-dir", str(tmp_path), "--jobs", "2")
    assert code == 0, err
    cores = cpu_count()
    if 8 > cores:  # two runs of up to 4 ranks at a time
        assert f"hpcbench: warning: 2 runs of up to 4 ranks at a time share {cores} cores" in err
    counts = re.findall(r"^\[(\d)/4, [^]]* so far(, about [^]]* left)?\] (asgd|allreduce) on [34] ranks: accuracy "
                        r"[\d.]+, \d+ samples/s, [\d.]+ s \(\d+ s\)$", out, re.M)
    assert [(k, bool(left)) for k, left, _ in counts] == [("1", True), ("2", True), ("3", True), ("4", False)], out
    assert sorted(p.name for p in tmp_path.glob("*.h5")) == ["allreduce-w2.h5", "allreduce-w3.h5", "asgd-w2.h5",
                                                             "asgd-w3.h5"]
    assert "Scaling" in out and out.count("allreduce ") >= 4
    scaling = out[out.index("Scaling"):]
    assert "1.00" in scaling  # speedup of each algorithm's smallest point against itself


@requires_mpi
@pytest.mark.timeout(300)
def test_a_study_directory_with_results_is_added_to_only_when_asked(tmp_path):
    args = ("sweep", "--local", "--ranks", "3", "--algos", "asgd,allreduce", "--set", "steps=5", "--out-dir",
            str(tmp_path))
    code, _, err = cli(*args[:5], "asgd", *args[6:])
    assert code == 0, err
    kept = (tmp_path / "asgd-w2.h5").read_bytes()
    code, out, _ = cli("status", str(tmp_path))  # a local study is a study: status reads it
    assert code == 0 and out.startswith(f"{tmp_path}: 1 of 1 points have an ok result")
    assert out.splitlines()[-1].split() == ["asgd-w2", "ok", "-", "-", "0"]
    code, _, err = cli("sweep", "--resubmit-failed", str(tmp_path))
    assert code == 2 and "ran here (sweep --local)" in err and "--resume" in err
    code, _, err = cli(*args)
    assert code == 2 and "already holds 1 result file(s); pass --resume" in err
    (tmp_path / "allreduce-w2.h5").write_bytes(b"a crashed run's leftovers")
    code, out, err = cli(*args, "--resume")
    assert code == 0, err
    assert "asgd on 3 ranks: kept" in out and (tmp_path / "asgd-w2.h5").read_bytes() == kept  # never rewritten
    assert read_run(tmp_path / "allreduce-w2.h5").attrs["status"] == "ok"  # the broken point was run again
    assert cli("status", str(tmp_path))[1].startswith(f"{tmp_path}: 2 of 2 points have an ok result")


def test_dry_run_prints_the_resolved_configuration_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    code, out, err = cli("run", "--algo", "ga-asgd", "--dry-run", "--workers", "4", "--epochs", "2",
                         "--stragglers", "0.25:3", "--set", "ga-asgd.history=7")
    assert code == 0, err
    first, document = out.split("\n", 1)
    steps = -(-2 * 1437 // (4 * 32))  # 2 epochs of digits' 1437 training samples, batch 32, 4 workers
    assert first.startswith(f"ga-asgd with 4 workers (world size 5): {steps * 4 * 32} samples, {steps} steps")
    config = json.loads(document)
    assert config["steps_per_worker"] == steps and config["options"] == {"ga-asgd": {"beta": 0.999, "eps": 1e-08,
                                                                                     "history": 7}}
    assert len(config["straggler_ranks"]) == 1 and config["schedule"]["warmup_from"] == pytest.approx(0.05 / 4)
    assert list(tmp_path.iterdir()) == []  # nothing written
    code, _, err = cli("run", "--algo", "ga-asgd", "--dry-run")
    assert code == 2 and "--dry-run outside mpiexec needs --workers N" in err
    monkeypatch.setenv("PMI_SIZE", "3")
    code, out, _ = cli("run", "--algo", "sgp", "--dry-run")
    assert code == 0 and out.startswith("sgp with 2 workers (world size 3)")


def at_a_terminal():
    """SIGINT as a terminal's foreground job has it: a suite started in the background (``… &`` from a
    script) ignores it, and so would every process it starts."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@requires_mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop, said, code", [("SIGINT", "Ctrl-C", 130), ("SIGHUP", "SIGHUP", 129)])
def test_ctrl_c_or_a_hangup_stops_a_local_sweep_with_one_line_the_run_aborted_and_resume_finishes_it(
        tmp_path, stop, said, code):
    """What a terminal does: Ctrl-C, or closing (SIGHUP), signals the whole foreground group, the
    sweep, mpiexec and the ranks alike."""
    import signal
    import sys
    import time

    from hpcbench.launch.local import launch_env
    from hpcbench.results.store import result_status

    out_dir = tmp_path / "study"
    point = out_dir / "asgd-w2.h5"
    sweep = subprocess.Popen([sys.executable, "-m", "hpcbench", "sweep", "--local", "--algos", "asgd", "--ranks", "3",
                              "--out-dir", str(out_dir), "--epochs", "300", "--set", "flush_s=0.3"],
                             env=launch_env(3), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=at_a_terminal)
    try:
        deadline = time.monotonic() + 120
        while result_status(point) != "incomplete" and time.monotonic() < deadline:
            time.sleep(0.1)
        os.killpg(sweep.pid, getattr(signal, stop))
        _, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.communicate()
    assert sweep.returncode == code, err
    assert err.strip().splitlines()[-1] == (f"hpcbench: stopped by {said} during sweep; sweep --local ... --resume "
                                            "runs what is left")
    assert "Traceback" not in err
    assert result_status(point) == "aborted"
    code, out, err = cli("sweep", "--local", "--algos", "asgd", "--ranks", "3", "--out-dir", str(out_dir), "--resume",
                         "--steps", "3")
    assert code == 0, err
    assert result_status(point) == "ok"


def test_a_sweep_gives_each_algorithms_runs_its_own_options_only(tmp_path):
    code, out, err = cli("sweep", "--nodes", "2", "--algos", "asgd,ga-asgd", "--out-dir", str(tmp_path),
                         "--set", "ga-asgd.beta=0.5", "--mpi", "pmi2")
    assert code == 0 and err == "", err  # ga-asgd's runs take it: nothing dropped, nothing to warn of
    assert "ga-asgd.beta" not in (tmp_path / "runs" / "asgd-n2.sbatch").read_text()
    assert "run --algo ga-asgd --set ga-asgd.beta=0.5 --out" in (tmp_path / "runs" / "ga-asgd-n2.sbatch").read_text()


def test_the_time_left_of_many_runs_comes_from_the_runs_so_far_weighed_by_their_ranks():
    now = [0.0]
    countdown = Countdown([3, 5, 3, 5], clock=lambda: now[0])
    now[0] = 3.0  # a 3-rank run took 3 s: 1 s per rank, and 13 rank-weights are left
    assert countdown.finished(3) == "[1/4, 3 s so far, about 13 s left]"
    now[0] = 9.0
    assert countdown.finished(5) == "[2/4, 9 s so far, about 9 s left]"
    now[0] = 200.0
    assert countdown.finished(3) == "[3/4, 3 min 20 s so far, about 1 min 31 s left]"  # 200 * 5 / 11 = 91 s
    assert countdown.shorter() == ["[3/4, ~1 min 31 s left]", "[3/4]"]  # for a line with little room
    assert countdown.finished(5) == "[4/4, 3 min 20 s so far]" and countdown.shorter() == ["[4/4]"]


@pytest.mark.parametrize("given, words", [
    (["--set", "ga-asgd.beta=0.5", "--set", "sgp.peers=2"], "ga-asgd.*, sgp.* options go with algorithms this sweep "
                                                              "does not run"),
    (["--config", "SIM"], "sim.workers = 16: simulate's virtual workers"),
])
def test_options_a_sweep_drops_are_one_warning_line(tmp_path, given, words):
    (tmp_path / "sim.toml").write_text("[sim]\nworkers = 16\n")
    given = [str(tmp_path / "sim.toml") if a == "SIM" else a for a in given]
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path / "s"), "--mpi", "pmi2",
                       *given)
    assert code == 0 and err.splitlines() == [f"hpcbench: warning: {err.strip()[19:]}"] and words in err, err
    assert "beta" not in (tmp_path / "s" / "runs" / "asgd-n2.sbatch").read_text()


def test_a_percent_in_the_study_directory_reaches_slurm_as_itself(tmp_path):
    out_dir = tmp_path / "study-%j-%x-%%"
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(out_dir), "--mpi", "pmi2")
    assert code == 0, err
    pattern = str(tmp_path).replace("%", "%%") + "/study-%%j-%%x-%%%%"
    assert f"#SBATCH --output={pattern}/logs/asgd-n2-%j.out" in (out_dir / "runs" / "asgd-n2.sbatch").read_text()
    assert f"#SBATCH --output={pattern}/logs/report-%j.out" in (out_dir / "report.sbatch").read_text()
    assert f"--out {out_dir}/asgd-n2.h5" in (out_dir / "runs" / "asgd-n2.sbatch").read_text()  # not a pattern: as is
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path / "a\\b"), "--mpi",
                       "pmi2")
    assert code == 2 and "--out-dir" in err and "backslash" in err and not (tmp_path / "a\\b").exists(), err


@pytest.mark.parametrize("local", [[], ["--local", "--ranks", "3"]])
@pytest.mark.parametrize("given", [["--set", "out=OUT"], ["--set", "overwrite=true"], ["--config", "TOML"]])
def test_a_sweep_refuses_out_and_overwrite_each_point_writes_its_own_file(tmp_path, monkeypatch, local, given):
    import hpcbench.launch.local_study as local_study

    monkeypatch.setattr(local_study, "run_local", lambda *a, **k: pytest.fail("a local sweep ran"))
    (tmp_path / "c.toml").write_text(f'out = "{tmp_path / "one.h5"}"\n')
    given = [str(tmp_path / "one.h5") if a == "out=OUT" else str(tmp_path / "c.toml") if a == "TOML" else a
             for a in given]
    given = [f"out={a}" if a.endswith("one.h5") else a for a in given]
    code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd,ga-asgd", "--out-dir", str(tmp_path / "s"),
                       "--mpi", "pmi2", *local, *given)
    assert code == 2 and err.splitlines() == [f"hpcbench: error: {err.strip()[17:]}"], err
    assert "each point writes its own file under --out-dir" in err and not (tmp_path / "s").exists(), err


@pytest.mark.parametrize("mode", ["sim", "mpi"])
@pytest.mark.parametrize("given", [["--set", "out=OUT"], ["--set", "overwrite=true"], ["--config", "TOML"]])
def test_a_tune_refuses_out_and_overwrite_each_run_writes_its_own_file(tmp_path, monkeypatch, mode, given):
    """Each run of a tune writes its own file under --out-dir/runs (and one that says ok is kept): an ``out``
    or ``overwrite`` for every run would be dropped without a word."""
    import hpcbench.tuning.tune as tune

    monkeypatch.setattr(tune, "tune", lambda *a, **k: pytest.fail("a tune ran"))
    (tmp_path / "c.toml").write_text(f'out = "{tmp_path / "one.h5"}"\n')
    given = [f"out={tmp_path / 'one.h5'}" if a == "out=OUT" else str(tmp_path / "c.toml") if a == "TOML" else a
             for a in given]
    code, _, err = cli("tune", "--mode", mode, "--algo", "asgd,sgp", "--workers", "2", "--lr", "0.1",
                       "--out-dir", str(tmp_path / "t"), *given)
    assert code == 2 and err.splitlines() == [f"hpcbench: error: {err.strip()[17:]}"], err
    assert "a tune's runs take no out or overwrite" in err and "each run writes its own file under" in err, err
    assert not (tmp_path / "t").exists() and not (tmp_path / "one.h5").exists()


def test_a_study_directory_whose_name_no_filesystem_takes_is_one_line(tmp_path):
    for local in ([], ["--local", "--ranks", "3"]):
        code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--out-dir", str(tmp_path / ("d" * 300)),
                           "--mpi", "pmi2", *local)
        assert code == 2 and err.splitlines() == [f"hpcbench: error: {err.strip()[17:]}"], err
        assert "--out-dir" in err and "File name too long" in err and "Traceback" not in err


def test_a_study_directory_that_cannot_be_made_is_one_line(tmp_path):
    """A file in the way of the directory (as a read-only or full file system would be): one line naming
    the directory that could not be made, exit 2, nothing run (it was a traceback from the mkdir)."""
    (tmp_path / "file").write_text("")
    for local in ([], ["--local", "--ranks", "3"]):
        code, _, err = cli("sweep", "--nodes", "2", "--algos", "asgd", "--steps", "2", "--mpi", "pmi2",
                           "--out-dir", str(tmp_path / "file" / "study"), *local)
        assert code == 2 and err.splitlines() == [f"hpcbench: error: {err.strip()[17:]}"], err
        assert f"cannot make {tmp_path / 'file' / 'study'}" in err and "Not a directory" in err, err
