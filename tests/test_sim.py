"""The virtual cluster runs the same algorithm code: trajectories, staleness, determinism, timing models."""
import contextlib
import dataclasses
import gc
import io
import json

import h5py
import numpy as np
import pytest

from hpcbench.cli import main
from hpcbench.errors import UsageError
from hpcbench.options.sim import SimConfig, parse_compute, parse_network
from hpcbench.results.store import read_run
from hpcbench.workload.compute import ComputeModel

from conftest import mpirun, ok, requires_mpi
from reference import union_batch_sgd

COMMON = ["--dataset", "digits", "--model", "mlp", "--batch-size", "16", "--lr", "0.05", "--momentum", "0.9",
          "--set", "evals=4"]


def simulate(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", *args]) == 0
    return out.getvalue()


@requires_mpi
@pytest.mark.timeout(300)
def test_allreduce_follows_the_same_trajectory_as_under_mpiexec(tmp_path):
    real, sim = tmp_path / "real.h5", tmp_path / "sim.h5"
    ok(mpirun(5, "run", "--algo", "allreduce", "--steps", "10", *COMMON, "--out", str(real)))
    simulate("--algo", "allreduce", "--workers", "4", "--steps", "10", *COMMON, "--out", str(sim))
    a, b = read_run(real), read_run(sim)
    assert b.mode == "sim" and a.mode == "mpi"
    np.testing.assert_allclose(b.final_params, a.final_params, rtol=1e-5, atol=1e-6)
    # Real rank 0 polls progress, so only the final evaluation is at the same point in both.
    assert a.evals["samples"][-1] == b.evals["samples"][-1] == 10 * 4 * 16
    assert abs(a.evals["accuracy"][-1] - b.evals["accuracy"][-1]) <= 1 / 360 + 1e-9


@pytest.mark.parametrize("scaling, factor", [("linear", 4.0), ("sqrt", 2.0)])
def test_allreduce_with_a_scaled_rate_is_union_batch_sgd_at_that_rate(tmp_path, scaling, factor):
    out = tmp_path / "a.h5"
    simulate("--algo", "allreduce", "--workers", "4", "--steps", "10", *COMMON, "--set", "warmup_epochs=0",
             "--set", f"lr_scaling={scaling}", "--out", str(out))
    rec = read_run(out)
    expected = union_batch_sgd("mlp", "digits", 4, steps=10, batch=16, lr=0.05 * factor, momentum=0.9, wd=0.0,
                               seed=0)
    np.testing.assert_allclose(rec.final_params, expected, rtol=1e-4, atol=2e-5)
    assert rec.attrs["config"]["schedule"]["lr"] == pytest.approx(0.05 * factor)
    assert rec.tables["learning_rate"]["lr"] == pytest.approx(0.05 * factor)  # the rate the workers applied


def test_asgd_with_one_simulated_worker_is_sequential_sgd(tmp_path):
    out = tmp_path / "a.h5"
    simulate("--algo", "asgd", "--workers", "1", "--steps", "20", *COMMON, "--out", str(out))
    expected = union_batch_sgd("mlp", "digits", 1, steps=20, batch=16, lr=0.05, momentum=0.9, wd=0.0, seed=0)
    np.testing.assert_allclose(read_run(out).final_params, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workers", [8, 32])
def test_staleness_settles_at_n_minus_1_with_equal_workers(tmp_path, workers):
    out = tmp_path / "s.h5"
    simulate("--algo", "asgd", "--workers", str(workers), "--steps", "30", "--numerics", "off",
             "--compute", "gamma:shape=1e6,mean=0.05", "--out", str(out))
    staleness = read_run(out).tables["updates"]["staleness"][3 * workers:]
    assert staleness.mean() == pytest.approx(workers - 1, rel=0.01)


def comparable(value):
    """Attribute and dataset values as plain, NaN-safe comparable Python objects."""
    if isinstance(value, np.ndarray):
        return [comparable(v) for v in value.tolist()] if value.dtype == object else value.tobytes()
    if isinstance(value, float) and np.isnan(value):
        return "nan"
    return value


def file_contents(path):
    """Every dataset and attribute, except wall-clock provenance and where the file was written."""
    out = {}
    with h5py.File(path) as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                if k not in ("created_utc", "sim_wall_s"):
                    out[f"{name}@{k}"] = comparable(v)
            if isinstance(obj, h5py.Dataset):
                out[name] = comparable(obj[()])
        f.visititems(visit)
        for k, v in f.attrs.items():
            if k == "config":
                config = json.loads(v)
                del config["out"]
                out["/@config"] = config
            elif k != "created_utc":
                out[f"/@{k}"] = comparable(v)
    return out


def test_same_seed_same_result_file(tmp_path):
    args = ["--algo", "ga-asgd", "--workers", "6", "--steps", "15", *COMMON, "--stragglers", "0.34:2",
            "--pauses", "0.1:0.02", "--heterogeneity", "0.2"]
    simulate(*args, "--out", str(tmp_path / "a.h5"))
    simulate(*args, "--out", str(tmp_path / "b.h5"))
    simulate(*args, "--seed", "1", "--out", str(tmp_path / "c.h5"))
    a, b, c = (file_contents(tmp_path / f) for f in ("a.h5", "b.h5", "c.h5"))
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a[k] != b.get(k)]
    assert a["model/final_params"] != c["model/final_params"]


@pytest.mark.parametrize("algo", ["asgd", "easgd", "gossip", "allreduce"])
def test_a_simulation_leaves_no_reference_cycles_behind(tmp_path, algo):
    """The engine runs with the cyclic collector paused; garbage in cycles made per operation would
    pile up and be collected all at once afterwards (1.8 s at 1,024 workers and 200k updates)."""
    def cycles_left(steps: int) -> int:
        gc.collect()
        gc.disable()
        try:
            simulate("--algo", algo, "--workers", "8", "--steps", str(steps), "--numerics", "off", "--out",
                     str(tmp_path / f"{steps}.h5"))
            return gc.collect()
        finally:
            gc.enable()

    cycles_left(2)  # imports and first-call caches
    assert cycles_left(40) <= cycles_left(4) + 10


def test_compute_model_means_and_straggler_factors():
    cfg = SimConfig(workers=4, compute_shape=100, compute_mean_s=0.2)
    model = ComputeModel(cfg, seed=0, slow={2: 3.0})
    assert type(model.sample(1)) is float  # not a numpy scalar, which would slow every sum the engine makes of it
    draws = {r: np.array([model.sample(r) for _ in range(4000)]) for r in (1, 2)}
    assert draws[1].mean() == pytest.approx(0.2, rel=0.01)
    assert draws[2].mean() == pytest.approx(0.6, rel=0.01)
    assert draws[1].std() / draws[1].mean() == pytest.approx(0.1, rel=0.1)  # shape 100: CV 0.1
    paused = ComputeModel(SimConfig(workers=1, compute_mean_s=0.2, pause_prob=0.1, pause_s=1.0), 0, {})
    assert np.mean([paused.sample(1) for _ in range(8000)]) == pytest.approx(0.2 + 0.1, rel=0.03)
    assert paused.mean(1) == pytest.approx(0.3)
    spread = ComputeModel(SimConfig(workers=4000, heterogeneity=0.3), 0, {}).speed[1:]
    assert spread.mean() == pytest.approx(1.0, rel=0.02) and spread.std() == pytest.approx(0.3, rel=0.1)


def test_stragglers_shift_simulated_compute_by_their_factor(tmp_path):
    out = tmp_path / "s.h5"
    simulate("--algo", "sgp", "--workers", "8", "--steps", "40", "--numerics", "off", "--stragglers", "0.25:3",
             "--out", str(out))
    rec = read_run(out)
    tl = rec.timeline
    compute = tl["phase"] == rec.phases.index("compute")
    means = np.array([(tl["t_end"] - tl["t_start"])[compute & (tl["rank"] == r)].mean() for r in range(1, 9)])
    slow = means > 0.1
    assert slow.sum() == 2
    assert means[slow].mean() == pytest.approx(3 * 0.05, rel=0.03)
    assert means[~slow].mean() == pytest.approx(0.05, rel=0.03)


@pytest.mark.parametrize("workers, algorithm, latencies, lengths", [
    (8, "rabenseifner", 6, 2 * 7 / 8),  # a power of two: halving and doubling, 3 steps each way
    (8, "ring", 14, 2 * 7 / 8),
    (6, "rabenseifner", 4 + 2, 2 * 3 / 4 + 2),  # over 4 ranks, the other 2 folded in and answered
    (6, "ring", 10, 2 * 5 / 6),
    (3, "rabenseifner", 2 + 2, 1 + 2),  # measured with MPICH over 100 Mbit/s links: 251 ms for 1 MB (3·80)
])
def test_allreduce_cost_follows_the_algorithm_mpi_runs(tmp_path, workers, algorithm, latencies, lengths):
    out = tmp_path / "r.h5"
    simulate("--algo", "allreduce", "--workers", str(workers), "--steps", "5", "--numerics", "off",
             "--set", "allreduce.overlap=false", "--set", f"sim.allreduce={algorithm}",
             "--compute", "gamma:shape=1e9,mean=0.01", "--network", "alpha=1e-4,bandwidth=1e8", "--out", str(out))
    rec = read_run(out)
    tl = rec.timeline
    comm = (tl["phase"] == rec.phases.index("communicate")) & (tl["rank"] == 1) & (tl["nbytes"] > 1000)
    durations = (tl["t_end"] - tl["t_start"])[comm]
    nbytes = 4 * rec.attrs["config"]["parameters"]
    assert durations.min() == pytest.approx(latencies * 1e-4 + lengths * nbytes / 1e8, rel=1e-3)
    assert rec.simulation["allreduce"] == algorithm and rec.simulation["workers"] == workers


def test_an_unknown_allreduce_algorithm_is_refused_naming_the_valid_ones(capsys):
    code = main(["simulate", "--algo", "allreduce", "--workers", "4", "--set", "sim.allreduce=tree"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["hpcbench: error: unknown sim.allreduce 'tree'; valid: rabenseifner, ring"]


def test_report_puts_real_and_simulated_runs_side_by_side(tmp_path):
    simulate("--algo", "asgd", "--workers", "2", "--steps", "5", "--numerics", "off", "--out",
             str(tmp_path / "s.h5"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(tmp_path)]) == 0
        assert main(["report", str(tmp_path), "--wide"]) == 0
    text = " ".join(out.getvalue().split())
    assert "Simulated runs (mode sim, named so where modes are mixed) run in virtual time" in text
    assert "asgd sim 1 2 1 " in text  # --wide: the mode column


@pytest.mark.parametrize("parse, text, message", [
    (parse_compute, "normal:shape=3", "the compute model is gamma"),
    (parse_compute, "gamma:shape=abc", "'abc' is not a number"),
    (parse_network, "latency=3", "expected KEY=VALUE with KEY one of alpha, bandwidth, jitter, noise"),
])
def test_bad_simulator_options(parse, text, message):
    with pytest.raises(UsageError, match=message):
        parse(text)


def test_bad_worker_count_is_one_line(tmp_path, capsys):
    assert main(["simulate", "--algo", "asgd", "--workers", "0", "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hpcbench: error: sim.workers must be between 1 and 4096 workers, got 0"]
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.slow  # 4,096 virtual workers: a few seconds
def test_timing_only_needs_no_data_so_any_dataset_takes_4096_workers(tmp_path, capsys):
    """Without numerics no sample is read: digits' 1,437 training samples do not bound the workers."""
    assert main(["simulate", "--algo", "asgd", "--workers", "4096", "--numerics", "off", "--steps", "2",
                 "--out", str(tmp_path / "wide.h5")]) == 0, capsys.readouterr().err
    rec = read_run(tmp_path / "wide.h5")
    assert rec.workers == 4096 and rec.summary["samples"] == 4096 * 2 * 32
    assert main(["simulate", "--algo", "asgd", "--workers", "2048", "--steps", "2", "--out",
                 str(tmp_path / "never.h5")]) == 2  # with numerics, each worker needs a sample of its own
    assert "2048 workers but only 1437 training samples in digits" in capsys.readouterr().err


def test_network_fit_recovers_latency_and_bandwidth():
    from hpcbench.runtime.sim.calibrate import fit_network

    sizes = np.repeat([1_000, 100_000, 1_000_000], 50)
    durations = 2e-5 + sizes / 5e8 + np.random.default_rng(0).normal(0, 1e-7, sizes.size)
    alpha, bandwidth = fit_network(sizes, durations)
    assert alpha == pytest.approx(2e-5, rel=0.05) and bandwidth == pytest.approx(5e8, rel=0.01)


def test_calibration_counts_a_publish_at_its_copy_not_its_wait_for_readers():
    """The simulator makes an owner's publish wait for the reads holding its window itself; a fit
    that also charged the real waits as rank 0's own time would count them twice."""
    from hpcbench.runtime.sim.calibrate import uncontended

    ranks = np.array([0, 0, 0, 0, 1, 1, 2, 0])
    durations = np.array([0.080, 0.0001, 0.075, 0.082, 0.002, 0.060, 0.0015, 0.5])
    locked = np.array([True, True, True, True, True, True, True, False])
    out = uncontended(durations, locked, ranks)
    # rank 0's publishes at its shortest, the workers' at theirs, anything else as it was
    np.testing.assert_array_equal(out, [0.0001] * 4 + [0.0015] * 3 + [0.5])


def test_jitter_adds_its_mean_to_each_transfer(tmp_path):
    def reads(jitter: str) -> np.ndarray:
        out = tmp_path / f"j{jitter}.h5"
        simulate("--algo", "asgd", "--workers", "1", "--steps", "2000", "--numerics", "off",
                 "--network", f"alpha=1e-4,bandwidth=1e9,jitter={jitter}", "--out", str(out))
        rec = read_run(out)
        tl = rec.timeline
        read = (tl["rank"] == 1) & (tl["op"] == rec.ops.index("Read"))
        return (tl["t_end"] - tl["t_start"])[read]

    plain, noisy = reads("0"), reads("0.002")
    assert plain.std() == pytest.approx(0, abs=1e-12)
    assert noisy.mean() - plain.mean() == pytest.approx(0.002, rel=0.05)
    assert noisy.std() == pytest.approx(0.002, rel=0.1)  # exponential: standard deviation = mean


def test_link_noise_spreads_each_transfer_around_its_time_on_the_wire(tmp_path):
    """noise = CV: a transfer's bytes count a gamma factor of mean 1, so a lone reader's 1 MB reads
    over 100 MB/s links take 10 ms on average with a standard deviation of CV·10 ms, and the same
    seed draws the same factors."""
    def reads(noise: str, seed: str = "0") -> np.ndarray:
        out = tmp_path / f"n{noise}-{seed}.h5"
        simulate("--algo", "asgd", "--workers", "1", "--steps", "1500", "--numerics", "off", "--seed", seed,
                 "--model", "payload", "--set", "payload.params=250000",
                 "--network", f"alpha=1e-6,bandwidth=1e8,noise={noise}", "--out", str(out), "--overwrite")
        rec = read_run(out)
        tl = rec.timeline
        read = (tl["rank"] == 1) & (tl["op"] == rec.ops.index("Read"))
        return (tl["t_end"] - tl["t_start"])[read]

    wire = 1_000_016 / 1e8  # the payload's window: a version either side of 250,000 float32
    plain, noisy = reads("0"), reads("0.2")
    np.testing.assert_allclose(plain, wire + 1e-6, rtol=1e-9)
    assert noisy.mean() == pytest.approx(wire, rel=0.03)
    assert noisy.std() == pytest.approx(0.2 * wire, rel=0.1)
    np.testing.assert_array_equal(reads("0.2"), noisy)
    assert not np.array_equal(reads("0.2", seed="1"), noisy)


def test_jitter_fit_recovers_the_jitter_of_a_known_run(tmp_path):
    from hpcbench.runtime.sim.calibrate import fit_jitter

    out = tmp_path / "known.h5"
    args = ("--algo", "asgd", "--workers", "4", "--steps", "300", "--numerics", "off",
            "--compute", "gamma:shape=20,mean=0.01", "--set", "sim.progress=polling")
    simulate(*args, "--network", "alpha=1e-5,bandwidth=1e8,jitter=0.001", "--out", str(out))
    known = read_run(out)
    base = SimConfig(**{k: v for k, v in known.simulation.items() if k in SimConfig.__dataclass_fields__})
    fitted = fit_jitter(known, dataclasses.replace(base, jitter_s=0.0), np.arange(1, 5))
    assert fitted == pytest.approx(0.001, rel=0.15)


@requires_mpi
@pytest.mark.timeout(300)
def test_calibrate_fits_a_real_run_and_prints_a_runnable_simulation(tmp_path):
    import shlex

    from hpcbench.runtime.sim.calibrate import as_toml, calibrate

    real = tmp_path / "real.h5"
    ok(mpirun(5, "run", "--algo", "asgd", "--steps", "20", "--model", "cnn", "--out", str(real)))
    rec = read_run(real)
    fit = calibrate(rec)
    tl, phases = rec.timeline, rec.phases
    step = np.isin(tl["phase"], [phases.index("data"), phases.index("compute")]) & (tl["rank"] > 0)
    per_step = np.bincount(tl["step"][step] * 8 + tl["rank"][step], weights=(tl["t_end"] - tl["t_start"])[step])
    assert fit["compute_mean_s"] == pytest.approx(per_step[per_step > 0].mean(), rel=1e-6)
    assert fit["workers"] == 4 and fit["compute_shape"] > 0 and fit["apply_s"] > 0 and fit["bandwidth"] > 0
    assert fit["jitter_s"] >= 0 and "jitter_s = " in as_toml(rec, fit)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["calibrate", str(real)]) == 0
    text = out.getvalue()
    assert "[sim]" in text and "compute_mean_s = " in text
    command = text[text.index("hpcbench simulate"):text.index("\n\n", text.index("hpcbench simulate"))]
    args = shlex.split(command.replace("\\\n", " "))[2:]  # after "hpcbench simulate"
    simulate(*args, "--out", str(tmp_path / "sim.h5"))
    sim = read_run(tmp_path / "sim.h5")
    assert sim.workers == 4 and sim.evals["samples"][-1] == rec.evals["samples"][-1]
    with pytest.raises(UsageError, match="is a sim run; calibrate needs a real"):
        calibrate(sim)


@requires_mpi
@pytest.mark.timeout(300)
def test_calibrate_fits_what_a_run_that_did_not_end_measured_or_says_in_one_line_why_it_cannot(tmp_path):
    """A run stopped as rank 0 began writing (SIGTERM after training: "aborted") kept every worker's
    rows, and calibrate fits them; one whose workers failed at their first step kept none of theirs,
    and calibrate says so in one line (no numpy warning about an empty mean before it)."""
    import warnings

    aborted, failed = tmp_path / "aborted.h5", tmp_path / "failed.h5"
    mpirun(3, "run", "--algo", "asgd", "--steps", "20", "--model", "payload", "--set", "fault=term:0@final",
           "--out", str(aborted))
    mpirun(3, "run", "--algo", "asgd", "--steps", "20", "--model", "payload", "--set",
           "fault=raise:1@0,raise:2@0", "--out", str(failed))
    assert read_run(aborted).attrs["status"] == "aborted" and read_run(failed).attrs["status"] == "failed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["calibrate", str(aborted)]) == 0
        assert "compute_mean_s = " in out.getvalue()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["calibrate", str(failed)]) == 2
    assert err.getvalue().count("\n") == 1 and "(failed)" in err.getvalue() and "no step" in err.getvalue()


@requires_mpi
@pytest.mark.timeout(300)
def test_calibrate_prints_a_command_and_a_config_that_simulate_the_run_as_it_was_set(tmp_path):
    import shlex

    import tomllib

    real = tmp_path / "allreduce.h5"  # allreduce.overlap is a boolean option
    ok(mpirun(3, "run", "--algo", "allreduce", "--model", "payload", "--set", "payload.params=1000", "--steps", "10",
              "--compute", "gamma:shape=100,mean=0.002", "--set", "warmup_epochs=0.5", "--set", "lr_decay_epochs=[1, "
                                                                                                "2]",
              "--set", "lr_scaling=sqrt", "--set", "evals=4", "--out", str(real)))
    settings = ("warmup_epochs", "lr_decay_epochs", "lr_scaling", "evals", "lr", "batch_size", "steps_per_worker",
                "schedule", "options")
    expected = {k: read_run(real).attrs["config"][k] for k in settings}  # and payload.params (its compute is fitted)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["calibrate", str(real)]) == 0
    text = out.getvalue()
    start = text.index("hpcbench simulate")
    command = text[start:text.index("\n\n", start)]
    assert "--set allreduce.overlap=true" in command
    simulate(*shlex.split(command.replace("\\\n", " "))[2:], "--out", str(tmp_path / "sim.h5"))
    assert {k: read_run(tmp_path / "sim.h5").attrs["config"][k] for k in settings} == expected
    assert read_run(tmp_path / "sim.h5").attrs["config"]["payload"]["params"] == 1000
    config = tmp_path / "sim.toml"
    config.write_text(text[text.index("# or, in a --config file:"):])
    assert tomllib.loads(config.read_text())["sim"]["batch_gradients"] is True
    simulate("--algo", "allreduce", "--config", str(config), "--out", str(tmp_path / "from-toml.h5"))
    from_toml = read_run(tmp_path / "from-toml.h5")
    assert from_toml.simulation["workers"] == 2
    assert {k: from_toml.attrs["config"][k] for k in settings} == expected
    assert from_toml.attrs["config"]["payload"]["params"] == 1000


@pytest.mark.parametrize("network, bandwidth", [
    ("emulated nodes=4,rate=100mbit,burst=256kb", 12.5e6), ("emulated nodes=2,rate=1gbit,burst=256kb", 1.25e8),
    ("emulated nodes=2,rate=2.5mbps,burst=1mb", 2.5e6), ("", None), ("emulated nodes=2,rate=9furlongs", None)])
def test_the_rate_of_emulated_links_is_read_from_the_network_a_run_recorded(network, bandwidth):
    from hpcbench.runtime.sim.costs import link_bandwidth

    assert link_bandwidth(network) == bandwidth


@requires_mpi
@pytest.mark.timeout(300)
def test_calibrate_takes_the_recorded_link_rate_instead_of_fitting_queued_reads(tmp_path):
    from hpcbench.runtime.sim.calibrate import calibrate

    real = tmp_path / "asgd.h5"
    ok(mpirun(4, "run", "--algo", "asgd", "--model", "payload", "--set", "payload.params=10000", "--steps", "10",
              "--compute", "gamma:shape=100,mean=0.002", "--out", str(real)))
    rec = read_run(real)
    fitted = calibrate(rec)["bandwidth"]  # this machine's shared memory, fitted from the reads
    rec.provenance["network"] = "emulated nodes=4,rate=100mbit,burst=256kb"
    assert fitted != 12.5e6 and calibrate(rec)["bandwidth"] == 12.5e6
