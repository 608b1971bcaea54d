"""Frames, the learning-rate schedule, momentum SGD against torch, summary and report arithmetic."""
import dataclasses
import math
import subprocess

import numpy as np
import pytest
import torch

from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.rules import sgd_step
from hpcbench.algorithms.schedule import Schedule
from hpcbench.report.metrics import RunRow, scaling, speedup_efficiency, spread
from hpcbench.telemetry.summary import phase_fractions, step_times, time_to_target, wait_after_budget
from hpcbench.telemetry.timeline import PHASE_CODE, Timeline, concat


def test_frame_fields_are_aligned_typed_views():
    f = Frame(version=(np.int64, 1), x=(np.float32, 3), w=(np.float64, 1))
    assert f.offset("x") == 8 and f.offset("w") == 24 and f.nbytes == 32
    buf = f.pack(version=7, x=[1, 2, 3], w=0.5)
    assert f.integer(buf, "version") == 7 and f.real(buf, "w") == 0.5
    f.view(buf, "x")[1] = 9
    assert list(f.view(buf, "x")) == [1, 9, 3]


def test_schedule_warms_up_then_decays():
    s = Schedule(lr=0.4, warmup_from=0.1, train_size=100, warmup_epochs=2, decay_epochs=(5, 8), decay_factor=0.1)
    assert s.at(0) == pytest.approx(0.1)
    assert s.at(100) == pytest.approx(0.25)  # halfway through warm-up
    assert s.at(200) == pytest.approx(0.4)
    assert s.at(500) == pytest.approx(0.04) and s.at(800) == pytest.approx(0.004)


def recipe(algo, workers, **run):
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.config import RunConfig
    from hpcbench.runtime.plan import schedule_for

    return schedule_for(RunConfig(algo=algo, lr=0.1, **run), ALGORITHMS.get(algo), workers, train_size=1000)


def test_every_algorithm_gets_the_same_recipe_by_default():
    from hpcbench.algorithms import ALGORITHMS

    schedules = {name: recipe(name, 8) for name in ALGORITHMS.names()}
    assert len({(s.lr, s.warmup_from, s.warmup_epochs) for s in schedules.values()}) == 1
    s = schedules["allreduce"]
    assert (s.lr, s.warmup_from, s.warmup_epochs) == (0.1, pytest.approx(0.1 / 8), 5.0)
    assert recipe("asgd", 1).at(0) == pytest.approx(0.1)  # one worker: nothing to warm up


def test_linear_scaling_follows_goyal_for_synchronous_methods_only():
    s = recipe("allreduce", 8, lr_scaling="linear", warmup_epochs=2.0)
    assert s.at(0) == pytest.approx(0.1)  # the single-worker rate ...
    assert s.at(1000) == pytest.approx(0.1 + (0.8 - 0.1) / 2)  # ... rising linearly ...
    assert s.at(2000) == pytest.approx(0.8)  # ... to n times it
    assert recipe("sgp", 4, lr_scaling="sqrt").lr == pytest.approx(0.2)
    for asynchronous in ("asgd", "ga-asgd", "easgd", "gossip", "osgp"):
        s = recipe(asynchronous, 8, lr_scaling="linear")
        assert s.lr == 0.1 and s.scaling == "none"  # every gradient applied at the single-worker rate


@pytest.mark.parametrize("momentum, nesterov, wd", [(0.0, False, 0.0), (0.9, False, 1e-2), (0.9, True, 1e-3)])
def test_sgd_step_matches_torch_optim_sgd(momentum, nesterov, wd):
    rng = np.random.default_rng(0)
    theta = rng.normal(size=50).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(theta.copy()))
    opt = torch.optim.SGD([p], lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd)
    buf = np.zeros_like(theta) if momentum else None
    for _ in range(6):
        g = rng.normal(size=50).astype(np.float32)
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        sgd_step(theta, g + np.float32(wd) * theta, buf, 0.1, momentum, nesterov)
    np.testing.assert_allclose(theta, p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_time_to_target():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    acc = np.array([0.1, 0.85, 0.92, 0.95])
    assert time_to_target(t, acc, 0.9) == 2.0
    assert np.isnan(time_to_target(t, acc, 0.99))


def test_phase_fractions_and_median_step_by_hand():
    tl = Timeline(1)
    for k in range(3):  # each 10 s step: 1 s data, 6 s compute, 3 s communicate
        t = 10.0 * k
        tl.add(k + 1, "data", t, t + 1)
        tl.add(k + 1, "compute", t + 1, t + 7)
        tl.add(k + 1, "communicate", t + 7, t + 10)
    cols = concat([tl.columns(), Timeline(0).columns()])
    fr = phase_fractions(cols, np.array([1]))
    assert fr["data_fraction"] == pytest.approx(0.1) and fr["compute_fraction"] == pytest.approx(0.6)
    assert fr["communicate_fraction"] == pytest.approx(0.3) and fr["wait_fraction"] == 0.0
    assert step_times(cols, np.array([1]))["median_step_s"] == pytest.approx(10.0)
    assert cols["phase"][0] == PHASE_CODE["data"]


def test_step_time_percentiles_and_the_spread_across_workers_by_hand():
    one, two = Timeline(1), Timeline(2)
    for k, t in enumerate((0.0, 10.0, 20.0)):  # steps of 10 s
        one.add(k + 1, "compute", t, t + 1)
    for k, t in enumerate((0.0, 4.0, 8.0, 12.0, 40.0)):  # steps of 4 s, then one of 28 s
        two.add(k + 1, "compute", t, t + 1)
    two.add(6, "communicate", 41.0, 42.0)
    steps = step_times(concat([one.columns(), two.columns(), Timeline(0).columns()]), np.array([1, 2]))
    # gaps 10, 10 and 4, 4, 4, 28: sorted 4 4 4 10 10 28, percentiles by linear interpolation
    assert steps["median_step_s"] == pytest.approx(7.0)
    assert steps["step_p90_s"] == pytest.approx(10 + 0.5 * 18) and steps["step_p99_s"] == pytest.approx(10 + 0.95 * 18)
    assert (steps["step_worker_min_s"], steps["step_worker_max_s"]) == (4.0, 10.0)


def test_speedup_and_efficiency_by_hand():
    assert speedup_efficiency(2, 100.0, 8, 300.0) == pytest.approx((3.0, 0.75))
    assert spread([1.0, 3.0, 2.0]) == (2.0, 1.0)


def row(algo, workers, rate, ttt=1.0):
    nan = float("nan")
    numbers = {f.name: nan for f in dataclasses.fields(RunRow) if f.type in ("float", float)}
    return RunRow(**{**numbers, "algorithm": algo, "mode": "mpi", "workers": workers, "nodes": 1, "evals": 20,
                     "path": "", "samples_per_s": rate, "final_accuracy": 0.9, "time_to_target_s": ttt})


def test_scaling_groups_repeats_against_the_smallest_size():
    points = scaling([row("a", 2, 100.0), row("a", 2, 120.0), row("a", 4, 150.0), row("a", 8, 220.0)])
    by_n = {p.workers: p for p in points}
    assert by_n[2].repeats == 2 and by_n[2].samples_per_s == 110.0 and by_n[2].samples_per_s_spread == 10.0
    assert by_n[4].speedup == pytest.approx(150 / 110) and by_n[8].efficiency == pytest.approx(220 / 110 / 4)


def test_time_to_target_speedup_is_the_ratio_of_times_against_the_smallest_size():
    points = scaling([row("a", 2, 100.0, ttt=12.0), row("a", 4, 150.0, ttt=4.0), row("a", 8, 220.0, ttt=float("nan"))])
    by_n = {p.workers: p for p in points}
    assert by_n[2].ttt_speedup == 1.0 and by_n[4].ttt_speedup == pytest.approx(3.0)
    assert by_n[4].ttt_efficiency == pytest.approx(1.5)  # 3× faster with 2× the workers
    assert math.isnan(by_n[8].ttt_speedup)  # never reached the target


def test_a_stop_signal_inside_a_deferred_section_is_raised_as_the_outermost_one_ends():
    import signal

    from hpcbench.errors import Stopped
    from hpcbench.signals import stop_on_signals, stops_deferred

    done = []
    with stop_on_signals():
        with pytest.raises(Stopped, match="stopped by SIGUSR1"):
            with stops_deferred():
                with stops_deferred():
                    signal.raise_signal(signal.SIGUSR1)
                    done.append("inner")
                done.append("outer")  # the inner section's end does not raise yet
        assert done == ["inner", "outer"]
        # A section ending with its own error raises that one, and the held-back stop is dropped.
        with pytest.raises(ValueError):
            with stops_deferred():
                signal.raise_signal(signal.SIGUSR1)
                raise ValueError("own")
        with stops_deferred():
            pass
        with pytest.raises(Stopped):  # outside any section, a signal raises at once
            signal.raise_signal(signal.SIGUSR1)


def test_every_column_of_a_scaling_point_by_hand_with_failed_repeats_and_points():
    def run(algo, workers, rate, result="ok", nodes=1, acc=0.5, stale=0.0, ttt=1.0):
        return dataclasses.replace(row(algo, workers, rate, ttt), result=result, nodes=nodes, final_accuracy=acc,
                                   staleness_mean=stale)

    points = scaling([
        run("a", 2, 100.0, acc=0.8, stale=2.0, ttt=1.0), run("a", 2, 120.0, acc=0.9, stale=4.0, ttt=1.4),
        run("a", 2, 999.0, result="timeout", acc=0.1, stale=99.0, ttt=0.01),  # counted, never averaged in
        run("a", 4, 150.0, nodes=2, acc=0.95, stale=3.0, ttt=0.5), run("a", 4, 170.0, nodes=2, acc=0.85, stale=5.0,
                                                                       ttt=0.7),
        run("a", 8, 500.0, result="timeout", nodes=3), run("a", 8, 600.0, result="aborted", nodes=3),
        run("b", 2, 50.0, result="failed"), run("b", 4, 200.0),  # b's base: its fewest workers that finished
    ])
    got = {(p.algorithm, p.workers): p for p in points}
    two, four, eight = got[("a", 2)], got[("a", 4)], got[("a", 8)]
    assert (two.repeats, two.failed, two.result, two.nodes) == (2, 1, "ok", 1)
    assert (two.samples_per_s, two.samples_per_s_spread, two.speedup, two.efficiency) == (110.0, 10.0, 1.0, 1.0)
    assert (two.time_to_target_s, two.final_accuracy, two.staleness_mean) == pytest.approx((1.2, 0.85, 3.0))
    assert (four.repeats, four.failed, four.result, four.nodes) == (2, 0, "ok", 2)
    assert four.samples_per_s == 160.0 and four.speedup == pytest.approx(160 / 110)
    assert four.efficiency == pytest.approx(160 / 110 / 2)
    assert (four.time_to_target_s, four.ttt_speedup, four.ttt_efficiency) == pytest.approx((0.6, 2.0, 1.0))
    assert (four.final_accuracy, four.staleness_mean) == pytest.approx((0.9, 4.0))
    assert (eight.repeats, eight.failed, eight.result, eight.nodes) == (0, 2, "aborted/timeout", 3)
    assert all(math.isnan(x) for x in (eight.samples_per_s, eight.speedup, eight.final_accuracy, eight.staleness_mean))
    assert (got[("b", 4)].speedup, got[("b", 4)].efficiency) == (1.0, 1.0)
    assert got[("b", 2)].result == "failed" and math.isnan(got[("b", 2)].speedup)


def unfinished(summary, config, tables=None):
    """A record of a run that did not finish, as far as ``how_far`` reads one."""
    from hpcbench.results.schema import RunRecord
    return RunRecord(attrs={"status": "incomplete", "config": config}, provenance={}, per_rank={}, timeline={},
                     phases=(), ops=(), clock_offsets=np.zeros(0), evals={}, tables=tables or {}, summary=summary,
                     final_params=np.zeros(0))


@pytest.mark.parametrize("summary, config, tables, text", [
    ({"samples": 200, "wall_s": 2.44}, {"budget_samples": 1000}, {}, "200 of 1000 samples (20%) in 2.4 s"),
    # a server's applied updates, one batch each, count when the summary is older
    ({"samples": 0, "wall_s": 10.0}, {"budget_samples": 1000, "batch_size": 32},
     {"updates": {"t": np.arange(5.0)}}, "160 of 1000 samples (16%) in 10.0 s"),
    # decentralized workers' progress reports: each worker's latest, summed
    ({"samples": 100, "wall_s": 1.0}, {"budget_samples": 400},
     {"learning_rate": {"worker": np.array([1, 2, 1, 3]), "samples": np.array([32, 64, 96, 16])}},
     "176 of 400 samples (44%) in 1.0 s"),  # 96 + 64 + 16
    ({"samples": 0, "wall_s": 1.0}, {"budget_samples": 400}, {"updates": {"t": np.arange(5.0)}},
     "0 of 400 samples (0%) in 1.0 s"),  # updates of an unknown batch size count nothing
    ({"samples": 990, "wall_s": 1.0}, {"budget_samples": 1000}, {}, "990 of 1000 samples (99%) in 1.0 s"),
    ({"samples": 390, "wall_s": 1.0}, {"budget_samples": 400, "batch_size": 32},
     {"updates": {"t": np.arange(2.0)}}, "390 of 400 samples (98%) in 1.0 s"),  # the summary is ahead
    ({"wall_s": 1.0}, {"budget_samples": 400}, {}, ""),  # what the file does not say is not made up
    ({"samples": 10, "wall_s": "1"}, {"budget_samples": 400}, {}, ""),
    ({"samples": 10, "wall_s": 1.0}, {}, {}, ""),
    ({"samples": 10, "wall_s": 1.0}, {"budget_samples": 0}, {}, ""),
])
def test_how_far_an_unfinished_run_got_by_hand(summary, config, tables, text):
    from hpcbench.report.metrics import how_far
    assert how_far(unfinished(summary, config, tables)) == text


def test_a_run_row_of_a_file_that_says_little_shows_no_numbers_and_no_made_up_text():
    """Older or unfinished files lack keys: each missing number is NaN, each missing text empty."""
    from hpcbench.report.metrics import run_row, setting
    rec = unfinished({"samples": 64, "wall_s": 2.0, "samples_per_s": 32.0}, {"budget_samples": 128, "lr": 0.1})
    rec = dataclasses.replace(rec, attrs={**rec.attrs, "algorithm": "asgd", "workers": 2, "mode": "mpi",
                                          "error": "rank 1 on a: stopped by SIGTERM"},
                              per_rank={"hostnames": ["a", "a", "b"]}, evals={"t": np.array([1.0]),
                                                                                "accuracy": np.array([0.99])})
    got = run_row(rec, target=0.5)
    assert (got.result, got.error, got.reached) == ("incomplete", "rank 1 on a: stopped by SIGTERM",
                                                    "64 of 128 samples (50%) in 2.0 s")
    assert got.nodes == 2 and got.evals == 0 and got.lr_recipe == ""
    assert math.isnan(got.samples_per_s) and math.isnan(got.time_to_target_s)  # not finished: no numbers
    assert math.isnan(got.peak_lr) and math.isnan(got.too_stale)
    assert setting(got, "lr") == "0.1" and setting(got, "momentum") == "-"
    assert dict(got.settings) == {"lr": "0.1"}  # no network setting where the file names none

    done = dataclasses.replace(rec, attrs={**rec.attrs, "status": "ok", "config": {"evals": 4,
                                                                                "schedule": {"lr": 0.4, "text": "x4"}}},
                               summary={"samples_per_s": 32.0, "median_step_s": None, "late_gradients": 0,
                                        "too_stale": 3},
                               provenance={"network": "emulated 100 Mbit/s"})
    got = run_row(done, target=0.5)
    assert (got.result, got.error, got.reached) == ("ok", "rank 1 on a: stopped by SIGTERM", "")
    assert got.samples_per_s == 32.0 and math.isnan(got.median_step_s) and got.time_to_target_s == 1.0
    assert (got.peak_lr, got.lr_recipe, got.evals, got.too_stale) == (0.4, "x4", 4, 3.0)
    assert dict(got.settings) == {"evals": "4", "network": "emulated 100 Mbit/s"}


def test_no_speedup_against_a_base_that_measured_nothing():
    for base in (0.0, -1.0, float("nan")):
        assert all(math.isnan(v) for v in speedup_efficiency(2, base, 8, 300.0))
    # A target reached at t = 0 (the initial model already good enough) has no rate to compare.
    points = scaling([row("a", 2, 100.0, ttt=0.0), row("a", 4, 150.0, ttt=2.0), row("b", 2, 1.0, ttt=2.0),
                      row("b", 4, 1.0, ttt=0.0)])
    by = {(p.algorithm, p.workers): p for p in points}
    assert math.isnan(by[("a", 4)].ttt_speedup) and math.isnan(by[("b", 4)].ttt_speedup)
    assert by[("b", 2)].ttt_speedup == 1.0


@pytest.mark.parametrize("schedule, text", [
    (Schedule(0.1, 0.1, 1000), "lr 0.1"),
    (Schedule(0.4, 0.1, 1000, warmup_epochs=5.0, scaling="linear"),
     "lr 0.4 (linear scaling), warm-up from 0.1 over 5 epochs"),
    (Schedule(0.1, 0.1, 1000, warmup_epochs=5.0), "lr 0.1"),  # a warm-up from the rate itself is none
    (Schedule(0.2, 0.1, 1000, warmup_epochs=0.0), "lr 0.2"),
    (Schedule(0.2, 0.05, 1000, warmup_epochs=0.5, decay_epochs=(30.0, 60.5), decay_factor=0.2, scaling="sqrt"),
     "lr 0.2 (sqrt scaling), warm-up from 0.05 over 0.5 epochs, ×0.2 at epochs 30, 60.5"),
])
def test_a_schedule_describes_itself_in_one_line(schedule, text):
    assert schedule.describe() == text


def test_the_training_meter_averages_what_the_workers_report_by_hand():
    from hpcbench.algorithms.meter import TrainingMeter
    meter = TrainingMeter()
    assert all(math.isnan(v) for v in meter.progress(0)[1:])
    meter.add(0.0, 0, 0)  # an empty report changes nothing
    assert math.isnan(meter.loss)
    meter.add(loss_sum=64.0, correct=16, samples=32)  # the first report is taken as it is: 2.0, 50%
    assert (meter.loss, meter.accuracy) == (2.0, 0.5)
    meter.add(loss_sum=16.0, correct=1, samples=1)  # then 0.9 of the old and 0.1 of the new: 3.4, 55%
    assert (meter.loss, meter.accuracy) == pytest.approx((0.9 * 2.0 + 0.1 * 16.0, 0.9 * 0.5 + 0.1 * 1.0))
    assert meter.progress(99) == (99, meter.loss, meter.accuracy)


def test_a_packed_frame_is_exactly_its_fields_at_8_byte_offsets_with_zeroed_gaps():
    import struct
    frame = Frame(a=(np.int32, 1), b=(np.float32, 3), c=(np.float64, 1))
    assert frame.nbytes == 32 and frame.new().tobytes() == bytes(32)
    expected = struct.pack("<i4x3f4xd", 7, 1.0, 2.0, 3.0, 0.5)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    assert frame.pack(a=7, b=b, c=0.5).tobytes() == expected  # every field given: gaps zeroed explicitly
    assert frame.pack(a=np.array([7], np.int32), b=b, c=np.float64(0.5)).tobytes() == expected  # arrays for scalars
    assert frame.pack(a=7, c=0.5).tobytes() == struct.pack("<i4x3f4xd", 7, 0.0, 0.0, 0.0, 0.5)  # missing: zero


def test_a_runs_own_error_line_is_found_among_open_mpis_notices():
    from hpcbench.launch.local import why_failed

    stderr = (  # as Open MPI 5's launcher wrote it around a run that failed (pids and host shortened)
        "hpcbench: error: rank 2 on vm: the run failed\n"
        "--------------------------------------------------------------------------\n"
        "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\n  with errorcode 1.\n"
        "--------------------------------------------------------------------------\n"
        "NBC_Progress: an error 75 was found during schedule 0x1 at row-offset 4 - aborting the schedule\n"
        "[vm:01234] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n"
        "[vm:01234] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages\n")
    assert why_failed(subprocess.CompletedProcess([], 1, "", stderr)) == "hpcbench: error: rank 2 on vm: the run failed"
    assert why_failed(subprocess.CompletedProcess([], 3, "", "\x00\n")) == "exit code 3"


@pytest.mark.parametrize("t, samples, wall, wait", [
    ([0.0, 1.0, 2.0, 3.0], [0, 10, 20, 20], 9.0, 7.0),  # the count last grew at 2 s: the rest of the 9 s waited
    ([0.0, 1.0, 2.0], [0, 10, 20], 2.0, 0.0),  # a run that ended with its last sample
    ([0.0, 1.0, 2.5], [0, 10, 20], 2.0, 0.0),  # the final evaluation noted after the end: no wait, never < 0
    ([], [], 5.0, math.nan),  # no evaluation: nothing to say
])
def test_the_wait_after_the_budget_is_the_time_after_the_sample_count_last_grew(t, samples, wall, wait):
    got = wait_after_budget(np.array(t), np.array(samples), wall)
    assert (math.isnan(got) and math.isnan(wait)) or got == pytest.approx(wait)
