"""Inputs each within range whose arithmetic is not: a product that overflows, arrays that would not fit
in memory, keys given twice, settings that do nothing for the chosen algorithm, and ``--dry-run`` held to
the checks of the real run. Each is one line (a warning where the run may go on) and never a traceback."""
from __future__ import annotations

import pytest

from hpcbench.cli import main
from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.runtime import plan
from hpcbench.runtime.assemble import assemble

DRY = ["run", "--workers", "2", "--dry-run"]


def said(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len([line for line in err.splitlines() if line.strip()]) == 1, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--algo", "asgd", "--workers", "2", "--epochs", "1e308"], "more than can be counted exactly"),
    (["simulate", "--algo", "asgd", "--workers", "2", "--network", "alpha=1e-5,bandwidth=1e9,noise=1e308"],
     "sim.noise must be in [0, 10], got 1e+308"),
    (["simulate", "--algo", "asgd", "--workers", "2", "--network", "alpha=1e-5,alpha=2e-5"], "gives alpha twice"),
    (["simulate", "--algo", "asgd", "--workers", "2", "--compute", "gamma:shape=2,shape=3"], "gives shape twice"),
    (["simulate", "--algo", "ga-asgd", "--workers", "2", "--model", "payload", "--set", "payload.params=20000000",
      "--set", "ga-asgd.history=8192", "--steps", "2"], "history of 8192 versions of 20000000 parameters needs about "
                                                         "610.4 GiB"),
    ([*DRY, "--algo", "asgd", "--set", "fault=kill:99@1"], "there is no rank 99 (ranks 0..2)"),
    ([*DRY, "--algo", "asgd", "--set", "threads=100000"], "threads = 100000 is more than the"),
    (["sweep", "--local", "--submit", "--algos", "asgd", "--out-dir", "OUT"], "give one of them"),
    (["sweep", "--algos", "asgd", "--repeats", "2", "--set", "seed=5", "--mpi", "pmi2", "--out-dir", "OUT"],
     "seed = 5 would be dropped"),
])
def test_a_product_beyond_what_can_be_counted_or_held_is_one_error_line(tmp_path, capsys, argv, words):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main([*argv, "--out" if argv[0] == "simulate" else "--set", str(tmp_path / "r.h5")
                 if argv[0] == "simulate" else "evals=2"]) == 2
    assert words in said(capsys)
    assert not (tmp_path / "r.h5").exists()


def test_the_models_copies_on_every_rank_of_a_machine_are_checked_against_its_memory():
    validated = plan.validate(RunConfig(algo="asgd", dataset="digits", model="mlp"))
    assemble(validated, 2, sharing=3)
    with pytest.raises(UsageError, match=r"10000000 rank\(s\) here, each with ~6 copies of \d+ parameters needs about "
                                         r"[\d.]+ GiB, more than this machine's"):
        assemble(validated, 2, sharing=10_000_000)


@pytest.mark.parametrize("flags, words", [
    (["--algo", "asgd", "--set", "lr_scaling=linear"], "lr_scaling = linear does nothing for asgd"),
    (["--algo", "allreduce", "--set", "allreduce.powersgd_rank=4"], "allreduce.powersgd_rank does nothing with "
                                                                     "allreduce.compress = none"),
    (["--algo", "local-sgd", "--set", "local-sgd.outer_lr=0.5"], "local-sgd.outer_lr does nothing with "
                                                                 "local-sgd.outer = none"),
    (["--algo", "asgd", "--set", "nesterov=true"], "nesterov = true does nothing with momentum 0"),
    (["--algo", "asgd", "--set", "sim.workers=16"], "sim.workers = 16: simulate's virtual workers"),
    (["--algo", "allreduce", "--set", "allreduce.compress=fp16", "--set", "allreduce.error_feedback=false"],
     "allreduce.error_feedback does nothing with allreduce.compress = fp16"),
    (["--algo", "local-sgd", "--set", "local-sgd.compress=powersgd", "--set", "local-sgd.topk_ratio=0.1"],
     "local-sgd.topk_ratio does nothing with local-sgd.compress = powersgd"),
])
def test_a_setting_that_does_nothing_for_the_algorithm_is_one_warning_and_the_run_goes_on(capsys, flags, words):
    assert main([*DRY, *flags]) == 0
    assert f"hpcbench: warning: {words}" in said(capsys)


def test_settings_that_act_give_no_warning(capsys):
    assert main([*DRY, "--algo", "allreduce", "--set", "lr_scaling=linear", "--set", "allreduce.compress=powersgd",
                 "--set", "allreduce.powersgd_rank=4", "--momentum", "0.9", "--set", "nesterov=true"]) == 0
    assert main([*DRY, "--algo", "allreduce", "--set", "allreduce.compress=topk", "--set", "allreduce.topk_ratio=0.1",
                 "--set", "allreduce.error_feedback=false"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # hpcbench in a process of its own
@pytest.mark.parametrize("name, flags", [("dc-asgd", ["--set", "dc-asgd.lam=1e4"]), ("ga-asgd", ["--lr", "1e4"]),
                                         ("dana", ["--lr", "1e4"])])
def test_a_model_that_diverges_is_said_once_in_the_run_line_not_in_numpys_warnings(tmp_path, name, flags):
    """Values inside their ranges can still make training diverge (the server's float32 overflows on
    the way to inf): the run ends as any other, and says so, without a warning per update."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", "--algo", name, "--workers", "4",
                           "--epochs", "3", "--momentum", "0.9", *flags, "--out", str(tmp_path / "d.h5")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and proc.stderr.strip() == "", proc.stderr
    assert "(the model diverged: its parameters are no longer finite)" in proc.stdout
