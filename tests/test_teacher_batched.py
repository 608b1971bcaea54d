"""The teacher task, the simulator's batched numerics and modeled message sizes."""
import contextlib
import io

import numpy as np
import pytest

from hpcbench.cli import main
from hpcbench.config import make_config
from hpcbench.options.sim import SimConfig
from hpcbench.results.store import read_run
from hpcbench.runtime import plan
from hpcbench.runtime.sim.session import simulated_record
from hpcbench.workload import teacher
from hpcbench.workload.datasets import load_dataset

SMALL = ["--dataset", "teacher", "--set", "teacher.samples=2000", "--set", "teacher.test_samples=500",
         "--batch-size", "16", "--lr", "0.05", "--momentum", "0.9", "--set", "evals=4"]


def simulate(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", *args]) == 0
    return out.getvalue()


def test_teacher_labels_are_the_teachers_but_for_the_stated_noise():
    d = load_dataset("teacher", options=teacher.TeacherOptions(samples=20_000, test_samples=20_000, noise=0.2))
    assert d.x_train.shape == (20_000, 1, 8, 8) and d.x_test.shape == (20_000, 1, 8, 8)
    # An independent reading of the rule: a 64-16-10 tanh network with the documented weights, in float64.
    w1, w2 = teacher.teacher_weights()
    clean = np.argmax(np.tanh(d.x_test.reshape(-1, 64).astype(np.float64) @ w1) @ w2, axis=1)
    agree = float((clean == d.y_test).mean())
    # A replaced label is still the teacher's with chance 1/10: agreement 1 - 0.2 * 0.9 = 0.82.
    assert abs(agree - 0.82) < 0.015
    assert len(np.unique(d.y_train)) == 10
    # The training and test samples are different draws.
    assert not np.array_equal(d.x_train[:10], d.x_test[:10])


def test_teacher_data_do_not_depend_on_the_run_seed_and_its_size_is_an_option(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    simulate("--algo", "asgd", "--workers", "2", "--steps", "3", *SMALL, "--seed", "1", "--out", str(a))
    simulate("--algo", "asgd", "--workers", "2", "--steps", "3", *SMALL, "--seed", "2", "--out", str(b))
    ra, rb = read_run(a), read_run(b)
    assert ra.attrs["config"]["train_size"] == 2000
    assert ra.attrs["config"]["teacher"] == {"samples": 2000, "test_samples": 500, "noise": 0.05}
    x1 = load_dataset("teacher", options=teacher.TeacherOptions(samples=2000, test_samples=500))
    x2 = load_dataset("teacher", options=teacher.TeacherOptions(samples=2000, test_samples=500))
    np.testing.assert_array_equal(x1.x_train, x2.x_train)
    np.testing.assert_array_equal(x1.y_test, x2.y_test)
    assert rb.attrs["config"]["seed"] == 2


@pytest.mark.parametrize("args, message", [
    (["--set", "teacher.samples=0"], "teacher.samples must be between 1 and 10,000,000 samples, got 0"),
    (["--set", "teacher.noise=1.5"], "teacher.noise must be in [0, 1], got 1.5"),
    (["--set", "teacher.size=3"], "unknown option 'teacher.size'; valid: teacher.samples, teacher.test_samples, "
                                  "teacher.noise"),
])
def test_bad_teacher_options_are_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "x.h5"
    assert main(["simulate", "--algo", "asgd", "--dataset", "teacher", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"hpcbench: error: {message}"]
    assert not out.exists()


def test_teacher_options_need_the_teacher_dataset(capsys):
    assert main(["simulate", "--algo", "asgd", "--dataset", "digits", "--set", "teacher.samples=10"]) == 2
    assert "teacher.* options go with --dataset teacher (the dataset is 'digits')" in capsys.readouterr().err


def sim_plan(algo: str, *extra: str):
    cfg = make_config({"algo": algo, "dataset": "teacher", "batch_size": 16, "lr": 0.05, "momentum": 0.9,
                       "steps": 12, "evals": 3}, {"teacher": {"samples": 2000, "test_samples": 500}})
    return plan.validate(cfg)


@pytest.mark.parametrize("algo", ["ga-asgd", "allreduce", "sgp", "easgd"])
def test_batched_and_one_at_a_time_numerics_agree(algo):
    """Same seed, same virtual schedule: gradients computed together give the same run, to float rounding."""
    runs = {}
    for batched in (True, False):
        sim = SimConfig(workers=6, batch_gradients=batched)
        rec, _ = simulated_record(sim_plan(algo), sim, show_progress=False)
        runs[batched] = rec
    a, b = runs[True], runs[False]
    assert a.simulation["gradients"] == "batched" and b.simulation["gradients"] == "one at a time"
    np.testing.assert_allclose(a.final_params, b.final_params, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.evals["loss"], b.evals["loss"], rtol=1e-4)
    np.testing.assert_array_equal(a.timeline["t_end"], b.timeline["t_end"])


def test_batched_gradients_equal_the_trainers_one_by_one():
    from hpcbench.workload.batched import BatchedGradients
    from hpcbench.workload.trainer import Trainer

    data = load_dataset("teacher", options=teacher.TeacherOptions(samples=500, test_samples=10))
    for model in ("mlp", "cnn"):
        t = Trainer(model, data, seed=0)
        rng = np.random.default_rng(1)
        params = [t.initial + 0.05 * rng.standard_normal(t.size).astype(np.float32) for _ in range(5)]
        batches = [rng.integers(0, 500, 16) for _ in range(5)]
        for p, b, (grad, loss, correct) in zip(params, batches, BatchedGradients(t).gradients(params, batches)):
            g1, l1, c1 = t.gradient(p, *t.batch(b))
            np.testing.assert_allclose(grad, g1, rtol=1e-4, atol=1e-6)
            assert abs(loss - l1) < 1e-5 and correct == c1


@pytest.mark.slow  # 3 s
def test_a_model_with_batchnorm_is_simulated_one_worker_at_a_time():
    cfg = make_config({"algo": "asgd", "dataset": "synthetic", "model": "resnet20", "batch_size": 8, "steps": 1,
                       "evals": 1, "eval_samples": 8}, {})
    rec, _ = simulated_record(plan.validate(cfg), SimConfig(workers=2), show_progress=False)
    assert rec.simulation["gradients"] == "one at a time"


def test_modeled_message_size_costs_its_bytes_over_full_duplex_links():
    """sgp over 2 workers: each step one message each way; with near-constant compute, the wait for a
    peer's message is α + its modeled bytes / bandwidth (not twice that: links are full duplex)."""
    params, bw, alpha = 2_000_000, 1e9, 1e-5
    cfg = make_config({"algo": "sgp", "dataset": "teacher", "batch_size": 16, "steps": 6, "evals": 1},
                      {"teacher": {"samples": 2000, "test_samples": 100}})
    sim = SimConfig(workers=2, compute_shape=1e9, compute_mean_s=0.01, alpha_s=alpha, bandwidth=bw,
                    message_params=params, update_s=0.0)
    rec, _ = simulated_record(plan.validate(cfg), sim, show_progress=False)
    tl = rec.timeline
    waits = (tl["rank"] == 1) & (tl["op"] == rec.ops.index("Recv")) & (tl["nbytes"] > params)
    assert waits.sum() >= 6  # one per step, and the last message drained at the end
    message = tl["nbytes"][waits]
    # The parameters counted at the modeled size, plus push-sum's few scalars.
    assert ((message >= 4 * params) & (message < 4 * params + 64)).all()
    durations = (tl["t_end"] - tl["t_start"])[waits]
    np.testing.assert_allclose(durations[:6], alpha + message[:6] / bw, rtol=1e-3)


def test_bucketed_allreduce_costs_the_modeled_size():
    params, bw, alpha, p = 3_000_000, 2e9, 2e-5, 4
    cfg = make_config({"algo": "allreduce", "dataset": "teacher", "batch_size": 16, "steps": 3, "evals": 1},
                      {"teacher": {"samples": 2000, "test_samples": 100}, "allreduce": {"overlap": False}})
    sim = SimConfig(workers=p, compute_shape=1e9, compute_mean_s=0.01, alpha_s=alpha, bandwidth=bw,
                    message_params=params, update_s=0.0)
    rec, _ = simulated_record(plan.validate(cfg), sim, show_progress=False)
    tl = rec.timeline
    rows = (tl["rank"] == 1) & (tl["op"] == rec.ops.index("Allreduce"))
    # MPICH's all-reduce over 4 workers: recursive halving then doubling, 2·log2(4) latencies and
    # 2·3/4 of the vector each way, at the modeled size.
    expected = 4 * alpha + 2 * (p - 1) / p * 4 * params / bw
    np.testing.assert_allclose((tl["t_end"] - tl["t_start"])[rows], expected, rtol=1e-3)


def test_message_params_must_not_be_negative(capsys):
    assert main(["simulate", "--algo", "asgd", "--set", "sim.message_params=-1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "hpcbench: error: sim.message_params must be >= 0 floats (0: the model's size), got -1")


def test_a_convolutional_model_goes_one_worker_at_a_time_where_batching_would_not_pay():
    """On the CPU vmap makes a convolution a grouped one, slower than the workers one by one; dense layers
    gain from it."""
    import dataclasses

    got = {}
    for model in ("mlp", "cnn-small"):
        validated = plan.validate(dataclasses.replace(sim_plan("asgd").cfg, model=model, steps=2))
        rec, _ = simulated_record(validated, SimConfig(workers=4), show_progress=False)
        got[model] = rec.simulation["gradients"]
    assert got == {"mlp": "batched", "cnn-small": "one at a time"}
