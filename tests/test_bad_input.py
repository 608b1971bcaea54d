"""Nothing is wasted on a doomed run: every input that cannot work is refused before the first step,
on every rank, with one line and exit 2 (and no result file)."""
import os
import pickle
import shutil
import subprocess

import numpy as np
import pytest

from hpcbench.launch.local import EMULATED_LAUNCHER, own_lines
from hpcbench.workload.datasets import file_datasets

from conftest import mpirun, requires_mpi

pytestmark = [requires_mpi, pytest.mark.timeout(300)]


def refused_here(capsys, argv, out, message):
    """Checks made from the configuration alone, before MPI starts, are the same on every rank: run
    them in this process (test_mpi_errors shows every rank of a real launch exiting 2 on one line)."""
    from hpcbench.cli import main

    capsys.readouterr()
    code = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and message in err[0], (code, err)
    if out is not None:
        assert not any(out.parent.glob(out.name + "*"))


def refused(proc, out, message):
    lines = [line for line in own_lines(proc.stderr) if "warning" not in line]  # (not the launcher's notices)
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert len(lines) == 1, proc.stderr
    assert message in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "samples/s" not in proc.stdout  # no training happened
    if out is not None:
        assert not any(out.parent.glob(out.name + "*")), list(out.parent.iterdir())


# Checked from the configuration alone, before MPI starts.
@pytest.mark.parametrize("args, message", [
    (["--epochs", "nan"], "epochs = nan is not a finite number"),
    (["--lr", "nan"], "lr = nan is not a finite number"),
    (["--lr", "inf"], "lr = inf is not a finite number"),
    (["--momentum", "nan"], "momentum = nan is not a finite number"),
    (["--set", "timeout_s=nan"], "timeout_s = nan is not a finite number"),
    (["--set", "timeout_s=inf"], "timeout_s = inf is not a finite number"),
    (["--set", "warmup_epochs=nan"], "warmup_epochs = nan is not a finite number"),
    (["--set", "lr_decay_epochs=[nan]"], "lr_decay_epochs = nan is not a finite number"),
    (["--set", "ga-asgd.beta=nan"], "ga-asgd.beta = nan is not a finite number"),
    (["--seed", "-1"], "seed must be in [0, 9,223,372,036,854,775,807], got -1"),
    (["--set", "flush_s=0"], "flush_s must be > 0 seconds, got 0"),
    (["--set", "fault=explode:1@2"], "fault 'explode:1@2' is not one of kill:RANK@SECONDS"),
])
def test_impossible_numbers_are_refused_before_mpi(tmp_path, capsys, args, message):
    out = tmp_path / "never.h5"
    refused_here(capsys, ["run", "--algo", "ga-asgd", *args, "--out", str(out)], out, message)


def test_a_simulation_refuses_more_threads_than_its_cores(tmp_path, capsys):
    """As a run does: torch's threads beyond the cores only take turns (1,000 made a 4 s simulation 67 s)."""
    out = tmp_path / "never.h5"
    cores = len(os.sched_getaffinity(0))
    refused_here(capsys, ["simulate", "--algo", "asgd", "--workers", "2", "--set", f"threads={cores + 1}", "--out",
                          str(out)], out, f"threads = {cores + 1} is more than the {cores} cores a simulation here")


def test_a_stall_threshold_the_timeout_would_pass_first_is_refused(tmp_path, capsys):
    """It was held to half of timeout_s without a word, the file recording the value given."""
    out = tmp_path / "never.h5"
    refused_here(capsys, ["run", "--algo", "asgd", "--workers", "2", "--dry-run", "--set", "timeout_s=10", "--set",
                          "stall_s=50", "--out", str(out)], out, "stall_s = 50 is more than half of timeout_s = 10")


def test_a_config_file_that_is_not_utf8(tmp_path, capsys):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes("algo = 'asgd'\n# caf\xe9\n".encode("latin-1"))
    out = tmp_path / "never.h5"
    refused_here(capsys, ["run", "--config", str(bad), "--out", str(out)], out,
                 f"config file '{bad}' is not UTF-8 text")


@pytest.mark.parametrize("args", [["--epochs", "1e30"], ["--steps", "1000000000000000"]])
def test_a_budget_too_large_to_count_is_refused_on_every_rank(tmp_path, args):
    out = tmp_path / "never.h5"
    refused(mpirun(3, "run", "--algo", "asgd", *args, "--out", str(out), timeout=90), out, "a budget of")


# Checked on every rank once data and model are loaded, and agreed before the first step.
@pytest.mark.parametrize("args, message", [
    (["--batch-size", "100000000"], "batch size 100000000 is larger than a worker's shard (718 of the 1437 training "
                                    "samples of digits"),
    (["--batch-size", "719"], "batch size 719 is larger than a worker's shard"),
    (["--set", "threads=100000"], "threads = 100000 is more than the"),
    (["--algo", "ga-asgd", "--set", "ga-asgd.history=-1"], "ga-asgd.history must be between 0 and 8192 versions"),
    (["--set", "fault=kill:7@1"], "fault kill:7@1: there is no rank 7 (ranks 0..2)"),
])
def test_sizes_that_cannot_work_are_refused_before_training(tmp_path, args, message):
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--algo", "asgd", "--steps", "2", *args, "--out", str(out), timeout=90)
    refused(proc, out, message)


def test_a_budget_longer_than_the_job_can_run_is_refused_with_its_estimate(tmp_path):
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--algo", "asgd", "--steps", "300000", "--set", "time_limit_s=60", "--out", str(out),
                  timeout=90)
    refused(proc, out, "300000 steps per worker would take about")
    assert "allowed by time_limit_s" in proc.stderr


def write_cifar(root, n_train=20, n_test=10, test_labels=None, train_shape=None, short_labels=False):
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        n = n_test if name == "test_batch" else n_train
        data = rng.integers(0, 255, size=(n, 3072), dtype=np.uint8)
        labels = list(rng.integers(0, 10, size=n))
        if name == "test_batch" and test_labels is not None:
            labels = test_labels
        if name == "data_batch_3" and train_shape is not None:
            data = rng.integers(0, 255, size=train_shape, dtype=np.uint8)
        if name == "data_batch_2" and short_labels:
            labels = labels[:-3]
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels}, f)
    return root


@pytest.mark.parametrize("kind, message", [
    ("test_label", "test_batch: label 10 is outside 0..9"),
    ("shape", "data_batch_3: data has shape (20, 1000); expected N x 3072"),
    ("labels", "data_batch_2: 20 images but 17 labels"),
])
def test_malformed_cifar_files_are_refused_before_training(tmp_path, kind, message):
    root = write_cifar(tmp_path / "cifar", test_labels=[1] * 9 + [10] if kind == "test_label" else None,
                       train_shape=(20, 1000) if kind == "shape" else None, short_labels=kind == "labels")
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--algo", "asgd", "--dataset", "cifar10", "--data-dir", str(root), "--steps", "1",
                  "--batch-size", "4", "--out", str(out), timeout=90)
    refused(proc, out, message)


def test_out_paths_that_cannot_hold_a_file(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for target, message in ((tmp_path / "adir", "is a directory"),
                            (tmp_path / "afile" / "r.h5", "a part of the path is a file"),
                            ("/dev/null", "is not a regular file")):
        refused_here(capsys, ["run", "--algo", "asgd", "--steps", "1", "--out", str(target)], None, message)


def chattr(flag, path):
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.mark.root  # chattr +i
def test_an_out_directory_that_cannot_be_written_is_refused_before_training(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    if not chattr("+i", locked):
        pytest.skip("chattr +i is not available here (needs root and a filesystem with attributes)")
    try:
        proc = mpirun(3, "run", "--algo", "asgd", "--steps", "1", "--out", str(locked / "r.h5"), timeout=90)
        refused(proc, None, f"--out {str(locked / 'r.h5')!r}: cannot write in {str(locked)!r}")
    finally:
        chattr("-i", locked)


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KiB tmpfs (root only); read-only when asked."""
    mounts = []

    def make(name, options):
        where = tmp_path / name
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(where)
        return where

    yield make
    for where in mounts:
        subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.root  # mounts a tmpfs
def test_a_read_only_filesystem_is_refused_before_training(small_disk):
    ro = small_disk("ro", "ro,size=200k")
    proc = mpirun(3, "run", "--algo", "asgd", "--steps", "1", "--out", str(ro / "r.h5"), timeout=90)
    refused(proc, None, "Read-only file system")


@pytest.mark.root  # mounts a tmpfs
def test_too_little_free_disk_is_refused_with_the_estimate(small_disk):
    tiny = small_disk("tiny", "size=200k")
    proc = mpirun(3, "run", "--algo", "asgd", "--model", "cnn", "--steps", "2000", "--out", str(tiny / "r.h5"),
                  timeout=90)
    refused(proc, None, "free for a result file of about")


def test_the_simulator_refuses_non_finite_cluster_parameters(tmp_path, capsys):
    for args, message in ((["--network", "alpha=nan"], "sim.alpha_s = nan is not a finite number"),
                          (["--pauses", "nan:1"], "sim.pause_prob = nan is not a finite number"),
                          (["--heterogeneity", "nan"], "sim.heterogeneity = nan is not a finite number"),
                          (["--set", "sim.jitter_s=inf"], "sim.jitter_s = inf is not a finite number")):
        out = tmp_path / "never.h5"
        refused_here(capsys, ["simulate", "--algo", "asgd", "--workers", "2", "--steps", "2", *args, "--out",
                              str(out)], out, message)


def test_a_sweep_across_emulated_nodes_needs_local_and_a_cluster_that_is_up(tmp_path, capsys, monkeypatch):
    from hpcbench.launch import local as launch

    monkeypatch.setattr(launch, "EMULATED_STATE", tmp_path / "no-cluster")
    study = ["sweep", "--algos", "asgd", "--steps", "5", "--out-dir", str(tmp_path / "study")]
    refused_here(capsys, [*study, "--emulated"], None, "--emulated runs a local sweep across the emulated nodes: "
                 "give --local too")
    refused_here(capsys, [*study, "--local", "--emulated"], None,
                 "--emulated: no emulated cluster is up; start one as root with jobs/local/emulated-cluster.sh up")
    assert not (tmp_path / "study").exists()  # refused before the study directory was made


def test_a_sweep_launches_only_on_its_owners_emulated_cluster(tmp_path, capsys, monkeypatch):
    from hpcbench.launch import local as launch
    from hpcbench.launch.emulated import launching_as

    state = tmp_path / "cluster"
    state.write_text("state=up\nnodes=3\nrate=50mbit\nburst=256kb\nowner=alice\n")
    monkeypatch.setattr(launch, "EMULATED_STATE", state)
    monkeypatch.delenv("HPCBENCH_EMULATED_OWNER", raising=False)
    study = ["sweep", "--algos", "asgd", "--steps", "5", "--local", "--emulated", "--out-dir", str(tmp_path / "study")]
    refused_here(capsys, study, None, "--emulated: the emulated cluster up now is 'alice''s, not 'user''s: it may be "
                 "reshaped or taken down under your runs; launch on it as its owner with HPCBENCH_EMULATED_OWNER=alice")
    assert not (tmp_path / "study").exists()
    with launching_as("alice"):
        assert launch.emulated_nodes() == 3
    assert "HPCBENCH_EMULATED_OWNER" not in os.environ  # put back as it was


@pytest.mark.slow
@pytest.mark.parametrize("state, me, message", [
    ("state=up\nnodes=3\nrate=50mbit\nowner=alice\n", None,
     "the emulated cluster up now is 'alice''s, not 'user''s: it may be reshaped or taken down under your run; "
     "launch on it as its owner with HPCBENCH_EMULATED_OWNER=alice"),
    ("state=up\nnodes=3\nrate=50mbit\n", "bob", "the emulated cluster up now is 'user''s, not 'bob''s"),
    ("state=building\nnodes=3\nowner=alice\n", "alice", "the emulated cluster is half-built"),
    ("", None, "no emulated cluster is up"),
])
def test_the_emulated_launcher_refuses_a_cluster_that_is_not_the_launchers(tmp_path, state, me, message):
    (tmp_path / "cluster").write_text(state)
    env = {k: v for k, v in os.environ.items() if k != "HPCBENCH_EMULATED_OWNER"}
    env |= {"HPCBENCH_EMULATED_STATE": str(tmp_path / "cluster"), "MPIEXEC": "/bin/echo"}
    env |= {"HPCBENCH_EMULATED_OWNER": me} if me else {}
    proc = subprocess.run([str(EMULATED_LAUNCHER), "-n", "2", "true"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc
    assert proc.stderr.startswith("mpiexec-emulated: ") and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_the_emulated_launcher_launches_its_owners_runs_across_every_node(tmp_path):
    (tmp_path / "cluster").write_text("state=up\nnodes=3\nrate=50mbit\nburst=256kb\nowner=alice\n")
    env = os.environ | {"HPCBENCH_EMULATED_STATE": str(tmp_path / "cluster"), "MPIEXEC": "/bin/echo",
                        "HPCBENCH_EMULATED_OWNER": "alice"}
    proc = subprocess.run([str(EMULATED_LAUNCHER), "-n", "2", "true"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and "-hosts enode1,enode2,enode3" in proc.stdout, proc
    assert "HPCBENCH_EMULATED nodes=3,rate=50mbit,burst=256kb -n 2 true" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "sgp", "--emulated"], "--emulated runs the sgp study's algorithms across emulated nodes: use it "
                                         "with reproduce sgp --mode mpi"),
    (["reproduce", "jin", "--mode", "mpi", "--emulated"], "use it with reproduce sgp --mode mpi"),
])
def test_reproduce_across_emulated_nodes_is_the_sgp_study_in_real_runs(tmp_path, capsys, argv, message):
    refused_here(capsys, [*argv, "--out-dir", str(tmp_path / "out")], None, message)
    assert not (tmp_path / "out").exists()


# Inputs that once got through: a traceback, or nonsense run silently. Each is one line and exit 2.
@pytest.mark.parametrize("argv, message", [
    (["simulate", "--algo", "asgd", "--seed", str(10**23)],
     "seed must be in [0, 9,223,372,036,854,775,807], got 1" + "0" * 23),
    (["simulate", "--algo", "ga-asgd", "--set", "ga-asgd.history=1000000000"],
     "ga-asgd.history must be between 0 and 8192 versions"),
    (["simulate", "--algo", "asgd", "--out", "/tmp/" + "a" * 300 + ".h5"], "File name too long"),
    (["simulate", "--algo", "asgd", "--heterogeneity", "1e300"], "sim.heterogeneity must be in [0, 10], got 1e+300"),
    (["simulate", "--algo", "asgd", "--set", "lr_decay_epochs=[-5, 3]"], "lr_decay_epochs must be >= 0 epochs, got "
                                                                         "[-5.0, 3.0]"),
    (["simulate", "--algo", "asgd", "--set", "lr_decay_epochs=[60, 30]"], "in increasing order, got [60.0, 30.0]"),
    (["simulate", "--algo", "asgd", "--set", "fault=stop:1@2"], "a simulation kills workers at a time in training"),
    (["simulate", "--algo", "asgd", "--out", ""], "--out '': give the path of a result file"),
    (["simulate", "--algo", "asgd", "--set", "fault=kill:2@gather"], "a kill at gather needs the processes of a real "
                                                                     "run (hpcbench run)"),
    (["simulate", "--algo", "asgd", "--data-dir", "/tmp"],
     f"--data-dir goes with a dataset read from files ({', '.join(file_datasets())}); digits needs none"),
    (["simulate", "--algo", "asgd", "--set", "ga-asgd.beta=0.5"], "ga-asgd.* options go with --algo ga-asgd"),
    (["run", "--algo", "asgd", "--dry-run", "--workers", "2", "--set", "sim.noise=0.1"],
     "sim.noise: simulate's options (its virtual cluster); a real run takes none"),
    (["run", "--algo", "asgd", "--dry-run", "--workers", "2", "--out", "results/"], "ends with '/'"),
    (["sweep", "--algos", "asgd", "--nodes", "2", "--out-dir", "x", "--repeats", "0"], "--repeats: '0' is not a whole "
                                                                                       "number >= 1"),
    (["sweep", "--algos", "asgd", "--nodes", "2", "--out-dir", "x", "--time", "abc"], "--time: 'abc' is not a Slurm "
                                                                                      "time"),
    (["sweep", "--algos", "asgd", "--nodes", "2", "--out-dir", "x", "--cpus-per-task", "-1"],
     "--cpus-per-task: '-1' is not a whole number >= 1"),
    (["sweep", "--local", "--algos", "asgd", "--out-dir", "x", "--timeout", "nan"], "--timeout: 'nan' is not a number "
                                                                                    "of seconds > 0"),
    (["sweep", "--local", "--algos", "asgd", "--out-dir", "x", "--timeout", "-5"], "--timeout: '-5' is not a number "
                                                                                   "of seconds > 0"),
    (["sweep", "--local", "--algos", "asgd", "--out-dir", "x", "--jobs", "-1"],
     "--jobs must be >= 1 (0: as many runs as fit in the cores here), got -1"),
    (["sweep", "--algos", "asgd", "--nodes", "2", "--out-dir", "x", "--jobs", "2"],
     "--jobs is how many runs of a local sweep run at a time: give --local too"),
    (["reproduce", "gap-aware", "--out-dir", "x", "--timeout", "nan"], "--timeout: 'nan' is not a number of seconds > "
                                                                       "0"),
    (["report", "results", "--target", "2"], "--target: '2' is not an accuracy in (0, 1]"),
    (["report", "results", "--target", "nan"], "--target: 'nan' is not an accuracy in (0, 1]"),
    (["diff", "a", "b", "--fail-above", "nan"], "--fail-above: 'nan' is not a percentage >= 0"),
    *[(["reproduce", "jin", "--out-dir", "x", "--seeds", seeds], f"--seeds: {seeds!r} is not a list of distinct seeds")
      for seeds in ("0,0,1", "-1", "a,b", "", "1,,2", ",".join(map(str, range(101))))],
    (["tune", "--algo", "asgd", "--workers", "2", "--lr", "0.1", "--out-dir", "x", "--extend", "-1"],
     "--extend: '-1' is not a whole number >= 0"),
])
def test_inputs_that_once_got_through_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    from hpcbench.cli import main

    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and message in err[0], (code, err)
    assert not list(tmp_path.rglob("*.h5"))


def test_an_out_that_is_a_dangling_link_and_a_config_that_is_not_a_file(tmp_path, capsys):
    link = tmp_path / "gone.h5"
    link.symlink_to(tmp_path / "nowhere.h5")
    refused_here(capsys, ["simulate", "--algo", "asgd", "--out", str(link)], None,
                 "is a symbolic link to a file that does not exist")
    os.mkfifo(tmp_path / "config.toml")
    refused_here(capsys, ["simulate", "--algo", "asgd", "--config", str(tmp_path / "config.toml")], None,
                 "is not a regular file (a directory, fifo or device)")


def test_report_outputs_that_cannot_be_written_are_one_line(tmp_path, capsys):
    from conftest import cli

    code, _, err = cli("simulate", "--algo", "asgd", "--workers", "2", "--steps", "2", "--out", str(tmp_path / "r.h5"))
    assert code == 0, err
    (tmp_path / "a-file").write_text("")
    for target in (str(tmp_path), "/proc/hpcbench-trace.json", "", str(tmp_path / "a-file" / "t.json")):
        code, _, err = cli("trace", str(tmp_path / "r.h5"), "-o", target)
        assert code == 2 and err.strip().startswith("hpcbench: error: cannot write the trace to"), (target, err)
    code, _, err = cli("report", str(tmp_path / "r.h5"), "--plot", str(tmp_path / "a-file"))
    assert code == 2 and "cannot write plots to --plot" in err and "Traceback" not in err, err


def test_the_payloads_compute_model_is_a_real_runs_own_not_a_simulator_option(tmp_path, capsys):
    from hpcbench.cli import main

    code = main(["run", "--algo", "asgd", "--model", "payload", "--compute", "gamma:shape=10,mean=0.01",
                 "--dry-run", "--workers", "2"])
    assert code == 0, capsys.readouterr().err
    assert '"compute_mean_s": 0.01' in capsys.readouterr().out
