"""Gradient buckets overlapped with the backward pass: the pure rules, the trainer's hooks, the
simulator's timing and the driver's result, each against what it must equal."""
from __future__ import annotations

import numpy as np
import pytest
from test_loopback import COMMON, run_threads
from test_sim import simulate

from hpcbench.algorithms.buckets import BACKWARD_SHARE, overlapped_end, plan_buckets, ready_fractions
from hpcbench.config import RunConfig
from hpcbench.results.store import read_run
from hpcbench.runtime.sim.costs import allreduce_s
from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.networks import build_model
from hpcbench.workload.trainer import Trainer

from reference import union_batch_sgd


def test_buckets_are_whole_parameters_last_first_and_at_least_the_cap():
    bounds = (0, 10, 30, 60, 100)  # parameters of 10, 20, 30 and 40 floats
    assert plan_buckets(bounds, 35 * 4) == ((60, 100), (10, 60), (0, 10))
    assert plan_buckets(bounds, 1) == ((60, 100), (30, 60), (10, 30), (0, 10))  # one per parameter
    assert plan_buckets(bounds, 40 * 4) == ((60, 100), (10, 60), (0, 10))  # exactly the cap closes a bucket
    assert plan_buckets(bounds, 25 * 2**20) == ((0, 100),)  # DDP's 25 MiB: a small model is one bucket
    for bad, why in [((5, 10), "rise from 0"), ((0, 10, 10), "rise from 0"), ((0,), "rise from 0")]:
        with pytest.raises(ValueError, match=why):
            plan_buckets(bad, 4)
    with pytest.raises(ValueError, match="positive"):
        plan_buckets(bounds, 0)


def test_ready_points_and_the_end_of_a_chain_of_bucket_all_reduces():
    # forward takes the first third; backward finishes 40, then 50, then 10 of 100 floats
    third = 1 - BACKWARD_SHARE
    assert ready_fractions(((60, 100), (10, 60), (0, 10))) == pytest.approx(
        [third + BACKWARD_SHARE * 0.4, third + BACKWARD_SHARE * 0.9, 1.0])
    assert overlapped_end([1.0, 2.0, 3.0], [5.0, 1.0, 1.0]) == 8.0  # a slow first bucket delays the rest
    assert overlapped_end([1.0, 5.0], [1.0, 1.0]) == 6.0  # the second waits to be ready
    assert overlapped_end([2.0], [0.0]) == 2.0


@pytest.mark.timeout(120)
def test_trainer_hands_over_each_bucket_in_order_while_the_backward_pass_goes_on():
    data = load_dataset("digits")
    trainer = Trainer("cnn", data, seed=0)
    x, y = trainer.batch(np.arange(32))
    plain, loss, correct = trainer.gradient(trainer.initial, x, y)
    buckets = plan_buckets(trainer.bounds, 1)  # one bucket per parameter
    assert len(buckets) == len(list(trainer.model.parameters())) > 2
    first = next(trainer.model.parameters())
    seen = []

    def ready(k: int, vector: np.ndarray) -> None:
        start, stop = buckets[k]
        seen.append((k, vector[start:stop].copy(), not first.grad.any()))  # gradients start each pass at zero

    grad, loss2, correct2 = trainer.gradient(trainer.initial, x, y, buckets, ready)
    assert [k for k, _, _ in seen] == list(range(len(buckets)))
    for k, part, _ in seen:  # what was handed over is already the final gradient
        start, stop = buckets[k]
        np.testing.assert_array_equal(part, plain[start:stop])
    # the last layer's bucket went out before the first layer's gradient was computed
    assert seen[0][2] and not seen[-1][2]
    np.testing.assert_array_equal(grad, plain)
    assert (loss2, correct2) == (loss, correct)


@pytest.mark.timeout(120)
def test_bucketed_allreduce_over_loopback_equals_union_batch_sgd():
    cfg = RunConfig(algo="allreduce", steps=10, options={"allreduce": {"bucket_mb": 0.001}}, **COMMON)
    logs, timelines, errors = run_threads(cfg, workers=3)
    assert errors == {}
    expected = union_batch_sgd("mlp", "digits", 3, steps=10, batch=16, lr=0.05, momentum=0.9, wd=0.001, seed=0)
    np.testing.assert_allclose(logs.last_params, expected, rtol=1e-4, atol=2e-5)


def step_times(path) -> np.ndarray:
    """Worker 1's step times: from one compute's start to the next's."""
    rec = read_run(path)
    tl = rec.timeline
    starts = tl["t_start"][(tl["rank"] == 1) & (tl["phase"] == rec.phases.index("compute"))]
    return np.diff(starts)


def test_simulated_overlap_hides_all_but_the_first_bucket_behind_the_backward_pass(tmp_path):
    # Nearly constant compute c and a network slow enough that the buckets' all-reduces run back to
    # back from the first one's ready point: a step lasts c·ready₀ + allreduce(all bytes) with α = 0,
    # against c + allreduce(all bytes) without overlap.
    c, bw, workers = 0.05, 2e7, 4
    net = ("--compute", f"gamma:shape=1e6,mean={c}", "--network", f"alpha=0,bandwidth={bw}", "--set", "sim.update_s=0")
    common = ("--algo", "allreduce", "--model", "resnet20", "--dataset", "synthetic", "--workers", str(workers),
              "--steps", "6", "--numerics", "off", *net)
    on, off = tmp_path / "on.h5", tmp_path / "off.h5"
    simulate(*common, "--set", "allreduce.bucket_mb=0.1", "--out", str(on))
    simulate(*common, "--set", "allreduce.overlap=false", "--out", str(off))
    data = load_dataset("synthetic")
    sizes = [p.numel() for p in build_model("resnet20", data.input_shape, data.classes, seed=0).parameters()]
    params = sum(sizes)
    assert read_run(on).attrs["config"]["parameters"] == params
    reduce = allreduce_s(4 * params, workers, 0.0, bw)
    assert reduce > c  # communication dominates: the chain of all-reduces never waits for a bucket
    first = 0  # the first bucket: the last parameters, until 0.1 MiB
    for n in reversed(sizes):
        first += n
        if first * 4 >= 0.1 * 2**20:
            break
    ready0 = (1 - BACKWARD_SHARE) + BACKWARD_SHARE * first / params
    np.testing.assert_allclose(step_times(on), c * ready0 + reduce, rtol=1e-3)
    np.testing.assert_allclose(step_times(off), c + reduce, rtol=1e-3)


def test_a_bucket_size_that_is_not_positive_is_one_error_line(tmp_path, capsys):
    from hpcbench.cli import main

    code = main(["simulate", "--algo", "allreduce", "--workers", "2", "--steps", "2", "--set", "allreduce.bucket_mb=0",
                 "--out", str(tmp_path / "x.h5")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "hpcbench: error: allreduce.bucket_mb must be > 0 MiB, got 0.0"
    assert not (tmp_path / "x.h5").exists()
