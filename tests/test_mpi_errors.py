"""Bad input: one clear line naming the valid choices, non-zero exit on every rank, no result file."""
import time

import pytest

from hpcbench.launch.local import own_lines
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.models import MODELS

from conftest import mpirun, requires_mpi

pytestmark = [requires_mpi, pytest.mark.both, pytest.mark.timeout(300)]


def assert_clean_failure(proc, out_path, message):
    lines = own_lines(proc.stderr)  # (Open MPI's launcher adds a notice that a rank exited non-zero)
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr  # one line, from rank 0 only: no traceback, no abort banner
    assert message in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out_path.exists() and not out_path.with_name(out_path.name + ".partial").exists()


@pytest.mark.parametrize("ranks, args, message", [
    (3, ["--algo", "nope"], "unknown algorithm 'nope'; valid: allreduce, asgd"),
    (3, ["--algo", "asgd", "--model", "vgg"], f"unknown model 'vgg'; valid: {', '.join(MODELS.names())}"),
    (3, ["--algo", "asgd", "--dataset", "imagenet"],
     f"unknown dataset 'imagenet'; valid: {', '.join(DATASETS.names())}"),
    (3, ["--algo", "asgd", "--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"],
     "cifar10 data dir '/nonexistent/cifar' lacks data_batch_1"),
    (1, ["--algo", "asgd"], "asgd needs at least 1 worker(s) besides rank 0 (got 0): "
     "launch 2 or more ranks, or simulate --workers 1 or more"),
    (3, ["--algo", "asgd", "--steps", "0"], "steps must be >= 1 steps, got 0"),
    (3, ["--algo", "asgd", "--batch-size", "-4"], "batch_size must be >= 1 samples, got -4"),
    (3, ["--algo", "asgd", "--set", "lrr=0.1"], "unknown key 'lrr'; did you mean 'lr'? (hpcbench list shows every "
                                                "key)"),
    (3, ["--algo", "ga-asgd", "--set", "ga-asgd.gamma=2"], "unknown option 'ga-asgd.gamma'; valid: ga-asgd.beta"),
])
def test_bad_input(tmp_path, ranks, args, message):
    out = tmp_path / "never.h5"
    t0 = time.monotonic()
    proc = mpirun(ranks, "run", *args, "--out", str(out), timeout=60)
    assert time.monotonic() - t0 < 60
    assert_clean_failure(proc, out, message)


def test_malformed_toml(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("algo = 'asgd'\nlr = = 0.1\n")
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--config", str(bad), "--out", str(out), timeout=60)
    assert_clean_failure(proc, out, f"config file '{bad}' is not valid TOML")


def test_bad_command_line_is_one_line(tmp_path):
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--algo", "asgd", "--steps", "many", "--out", str(out), timeout=60)
    assert_clean_failure(proc, out, "argument --steps: invalid int value: 'many'")
