"""Every algorithm's limits, at their edges: the last value it accepts runs, the first it refuses
gets one exact line naming the option, its limit and the value given. The messages are the
contract a user meets (README, "Bad input"), so they are compared whole."""
import re

import pytest

from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.runtime import plan


def check(algo: str, workers: int, nesterov: bool = False, **options):
    cfg = RunConfig(algo=algo, nesterov=nesterov, options={algo: options} if options else {})
    validated = plan.validate(cfg)
    validated.algo.check(cfg, validated.options, workers)


ACCEPTED = [
    ("asgd", 1, {}), ("gossip", 2, {}), ("sgp", 2, {}), ("osgp", 2, {"tau": 0}),
    ("easgd", 4, {"tau": 1}), ("easgd", 1, {}), ("easgd", 3, {"alpha": 0.999}), ("easgd", 3, {"alpha": 1e-9}),
    ("easgd-sync", 4, {"alpha": 0.2499}), ("easgd-sync", 1, {}), ("easgd-sync", 64, {}),
    ("local-sgd", 2, {"period": 1}), ("allreduce", 2, {"bucket_mb": 1e-9}),
    ("gossip", 3, {"variant": "push"}), ("gossip", 3, {"variant": "pull"}),
    ("ga-asgd", 2, {"history": 0}), ("ga-asgd", 2, {"history": 8192}), ("ga-asgd", 2, {"beta": 0.0, "eps": 1e-30}),
    ("dana-ga", 2, {"beta": 0.9999}),
]


@pytest.mark.parametrize("algo, workers, options", ACCEPTED)
def test_the_edge_values_are_accepted(algo, workers, options):
    check(algo, workers, **options)


def test_nesterov_is_accepted_where_no_look_ahead_is_published():
    for algo in ("asgd", "ga-asgd", "allreduce", "easgd"):
        check(algo, 2, nesterov=True)


REFUSED = [
    ("asgd", 0, {}, "asgd needs at least 1 worker(s) besides rank 0 (got 0): "
     "launch 2 or more ranks, or simulate --workers 1 or more"),
    ("gossip", 1, {}, "gossip needs at least 2 worker(s) besides rank 0 (got 1): "
     "launch 3 or more ranks, or simulate --workers 2 or more"),
    ("sgp", 1, {}, "sgp needs at least 2 worker(s) besides rank 0 (got 1): "
     "launch 3 or more ranks, or simulate --workers 2 or more"),
    ("osgp", 1, {}, "osgp needs at least 2 worker(s) besides rank 0 (got 1): "
     "launch 3 or more ranks, or simulate --workers 2 or more"),
    ("osgp", 2, {"tau": -1}, "osgp.tau must be >= 0 iterations, got -1"),
    ("easgd", 4, {"tau": 0}, "easgd.tau must be >= 1 local steps, got 0"),
    ("easgd-sync", 4, {"tau": 0}, "easgd-sync.tau must be >= 1 local steps, got 0"),
    ("easgd", 3, {"alpha": 1.0}, "easgd.alpha must be in (0, 1) (0: 0.9 / workers), got 1.0"),
    ("easgd", 3, {"alpha": -0.5}, "easgd.alpha must be in (0, 1) (0: 0.9 / workers), got -0.5"),
    ("easgd-sync", 4, {"alpha": 0.25}, "easgd-sync is unstable unless workers × alpha < 1 (got 4 × 0.25)"),
    ("easgd-sync", 2, {"alpha": 0.75}, "easgd-sync is unstable unless workers × alpha < 1 (got 2 × 0.75)"),
    ("local-sgd", 2, {"period": 0}, "local-sgd.period must be >= 1 local steps, got 0"),
    ("allreduce", 2, {"bucket_mb": 0.0}, "allreduce.bucket_mb must be > 0 MiB, got 0.0"),
    ("allreduce", 2, {"bucket_mb": float("nan")}, "allreduce.bucket_mb = nan is not a finite number"),
    ("gossip", 3, {"variant": "pul"}, "unknown gossip.variant 'pul'; valid: pull, push; did you mean 'pull'?"),
    ("ga-asgd", 2, {"history": -1}, "ga-asgd.history must be between 0 and 8192 versions (0: 2·workers + 4), got -1"),
    ("dana-ga", 2, {"history": -1}, "dana-ga.history must be between 0 and 8192 versions (0: 2·workers + 4), got -1"),
    ("ga-asgd", 2, {"history": 8193},
     "ga-asgd.history must be between 0 and 8192 versions (0: 2·workers + 4), got 8193"),
    ("ga-asgd", 2, {"beta": 1.0}, "ga-asgd.beta must be in [0, 1), got 1.0"),
    ("ga-asgd", 2, {"beta": -0.1}, "ga-asgd.beta must be in [0, 1), got -0.1"),
    ("dana-ga", 2, {"eps": 0.0}, "dana-ga.eps must be in (0, 1], got 0.0"),
]


@pytest.mark.parametrize("algo, workers, options, line", REFUSED)
def test_the_first_value_past_each_edge_is_refused_in_one_exact_line(algo, workers, options, line):
    with pytest.raises(UsageError) as refused:
        check(algo, workers, **options)
    assert str(refused.value) == line


@pytest.mark.parametrize("algo", ["dana", "dana-ga"])
def test_a_look_ahead_method_refuses_nesterov(algo):
    with pytest.raises(UsageError) as refused:
        check(algo, 2, nesterov=True)
    assert str(refused.value) == f"{algo} already publishes a look-ahead; --set nesterov=true is not available"


def test_an_algorithm_that_does_not_say_whether_it_is_asynchronous_is_not_registered():
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.algorithms.api import SYNCHRONOUS, Algorithm, register

    class Forgetful(Algorithm):  # a synchronous method that forgot to say so would lose lr_scaling
        name, summary, family = "forgetful", "forgot", SYNCHRONOUS

    with pytest.raises(TypeError) as refused:
        register(Forgetful)
    assert str(refused.value) == ("Forgetful must say whether it is asynchronous (asynchronous = True or False): "
                                  "it decides the budget's split and whether lr_scaling applies")
    Forgetful.asynchronous, Forgetful.family = False, "lockstep"  # a family the README has no row for
    with pytest.raises(TypeError) as refused:
        register(Forgetful)
    assert str(refused.value).startswith("Forgetful.family must be one of synchronous, parameter server, ")
    assert "forgetful" not in ALGORITHMS.names()
    # the README's families are the split: every algorithm outside the synchronous family is asynchronous
    assert {name: ALGORITHMS.get(name).asynchronous for name in ALGORITHMS.names()} == {
        name: ALGORITHMS.get(name).family != SYNCHRONOUS for name in ALGORITHMS.names()}


def numeric_fields():
    """Every int and float (or tuple of them) option of every table and of the run itself."""
    import dataclasses
    import typing

    from hpcbench.options import option_tables
    owners = {f"{name}.": table.options for name, table in option_tables().items()} | {"": RunConfig}
    for owner, cls in owners.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            text = str(hints[f.name])
            if re.search(r"\b(int|float)\b", text) and "bool" not in text:
                yield owner, f


def test_every_numeric_option_declares_a_range_its_default_keeps():
    from hpcbench.ranges import range_of
    found = list(numeric_fields())
    assert len(found) > 50  # every table's, not an empty walk
    for owner, f in found:
        limits = range_of(f)
        assert limits is not None, f"{owner}{f.name} declares no range"
        if "resolves" not in f.metadata:  # a placeholder (0: "2·workers + 4") may sit outside its range
            for value in f.default if isinstance(f.default, tuple) else (f.default,):
                assert limits.contains(value), f"{owner}{f.name}'s default {f.default} is outside {limits.text()}"


@pytest.mark.parametrize("owner, options, line", [
    ("", {"batch_size": 0}, "batch_size must be >= 1 samples, got 0"),
    ("", {"target_accuracy": 0.0}, "target_accuracy must be in (0, 1], got 0.0"),
    ("", {"lr_decay_epochs": (3.0, -5.0)}, "lr_decay_epochs must be >= 0 epochs, got [3.0, -5.0]"),
    ("", {"max_steps": -1}, "max_steps must be >= 0 steps (0: no cap (HPCBENCH_MAX_STEPS=N sets it)), got -1"),
    ("", {"seed": 2**63}, "seed must be in [0, 9,223,372,036,854,775,807], got 9223372036854775808"),
    ("", {"seed": 10**400}, "seed must be in [0, 9,223,372,036,854,775,807], got 1" + "0" * 19 + "..." + "0" * 8
     + " (401 characters)"),
    ("sim.", {"apply_s": -2.0}, "sim.apply_s must be between 0 and 1000 seconds (-1: 2 ns per model parameter), "
                                "got -2.0"),
    ("sim.", {"bandwidth": 0.0}, "sim.bandwidth must be >= 1 bytes/s, got 0.0"),
    ("sim.", {"compute_mean_s": 1e308}, "sim.compute_mean_s must be in (0, 1,000,000] seconds, got 1e+308"),
    ("sim.", {"heterogeneity": 1e300}, "sim.heterogeneity must be in [0, 10], got 1e+300"),
    ("sim.", {"noise": float("inf")}, "sim.noise must be in [0, 10], got inf"),
    ("sim.", {"compute_shape": 0.0099}, "sim.compute_shape must be >= 0.01, got 0.0099"),
    ("sim.", {"compute_shape": 5e-324}, "sim.compute_shape must be >= 0.01, got 5e-324"),
    ("sim.", {"share_cv": 1.01}, "sim.share_cv must be in [0, 1], got 1.01"),
])
def test_a_value_outside_its_declared_range_is_refused_in_one_line(owner, options, line):
    import dataclasses

    from hpcbench.options.sim import SimConfig
    from hpcbench.ranges import check_ranges
    base = SimConfig() if owner else RunConfig(algo="asgd")
    with pytest.raises(UsageError) as refused:
        check_ranges(dataclasses.replace(base, **options), owner)
    assert str(refused.value) == line


def test_a_placeholder_default_is_accepted_and_values_at_the_edges_are_inside():
    import dataclasses

    from hpcbench.options.sim import SimConfig
    from hpcbench.ranges import check_ranges
    check_ranges(SimConfig(apply_s=-1.0, update_s=-1.0, pause_prob=1.0, heterogeneity=10.0, bandwidth=1.0,
                           compute_mean_s=1e6, alpha_s=1e3, compute_shape=0.01, share_cv=1.0), "sim.")
    check_ranges(dataclasses.replace(RunConfig(algo="asgd"), target_accuracy=1.0, val_fraction=0.5, momentum=0.0,
                                     seed=2**63 - 1, lr_decay_factor=1.0, steps=1), "")


@pytest.mark.parametrize("limits, text", [
    ({"low": 1, "unit": "local steps"}, ">= 1 local steps"), ({"above": 0}, "> 0"),
    ({"high": 5}, "<= 5"), ({"below": 5, "unit": "s"}, "< 5 s"), ({}, "a finite number"),
    ({"low": 0, "high": 8192, "unit": "versions"}, "between 0 and 8192 versions"),
    ({"low": 0, "high": 1}, "in [0, 1]"), ({"above": 0, "below": 1}, "in (0, 1)"),
    ({"low": 0, "below": 1}, "in [0, 1)"), ({"above": 0, "high": 1, "unit": "x"}, "in (0, 1] x"),
])
def test_a_range_says_itself_as_its_refusals_do(limits, text):
    from hpcbench.ranges import Range
    assert Range(**limits).text() == text


@pytest.mark.parametrize("value, text", [(9999, "9999"), (10_000, "10,000"), (-10_000, "-10,000"), (0.5, "0.5"),
                                         (1e-9, "1e-09"), (4096.0, "4096"), (2.0**53, "9.0072e+15"),
                                         (2.0**53 - 1, "9,007,199,254,740,991"),
                                         (2**63 - 1, "9,223,372,036,854,775,807")])
def test_a_limit_is_written_as_a_user_would_read_it(value, text):
    from hpcbench.ranges import number
    assert number(value) == text


@pytest.mark.parametrize("limits, inside, outside", [
    ({"low": 1}, [1, 1e300], [0.999, float("inf"), float("nan")]),
    ({"above": 0, "below": 1}, [1e-300, 0.999], [0, 1]),
    ({"high": 2}, [-1e300, 2], [2.001]),
])
def test_a_range_holds_its_edges_and_refuses_what_is_not_finite(limits, inside, outside):
    from hpcbench.ranges import Range
    assert all(Range(**limits).contains(v) for v in inside)
    assert not any(Range(**limits).contains(v) for v in outside)


@pytest.mark.parametrize("sets", [["sim.compute_shape=0.01", "sim.share_cv=1"], ["sim.compute_shape=1e300"]])
@pytest.mark.parametrize("algo", ["sgp", "asgd"])
def test_the_simulators_spreads_at_their_edges_run_to_finite_times(tmp_path, algo, sets):
    """At the edges, compute times with a coefficient of variation of 10 and links shared by exponential
    weights give a run of a plausible virtual time (beyond, weights near 0 are lost to rounding in a link's
    sum: share_cv 3 gave an sgp run of 5e13 s; compute_shape 5e-324 gave NaN times)."""
    import h5py

    from conftest import cli

    out = tmp_path / "edge.h5"
    code, _, err = cli("simulate", "--algo", algo, "--workers", "4", "--steps", "5", "--network", "bandwidth=1e6",
                       *(a for s in sets for a in ("--set", s)), "--out", str(out))
    assert code == 0, err
    with h5py.File(out) as f:
        assert 0 < f["summary"].attrs["wall_s"] < 100, f["summary"].attrs["wall_s"]


@pytest.mark.parametrize("setting, line", [
    ("sim.compute_shape=5e-324", "sim.compute_shape must be >= 0.01, got 5e-324"),
    ("sim.share_cv=4", "sim.share_cv must be in [0, 1], got 4.0"),
])
def test_a_simulator_spread_past_its_edge_is_refused_by_simulate_in_one_line(tmp_path, setting, line):
    from conftest import cli

    code, _, err = cli("simulate", "--algo", "sgp", "--workers", "4", "--steps", "5", "--set", setting,
                       "--out", str(tmp_path / "never.h5"))
    assert code == 2 and err.strip() == f"hpcbench: error: {line}", err
    assert not list(tmp_path.iterdir())


def test_a_value_thousands_of_characters_long_is_shown_cut_with_its_length():
    seed = int("9" * 4000)
    with pytest.raises(UsageError) as refused:
        plan.validate(RunConfig(algo="asgd", seed=seed))
    line = str(refused.value)
    assert line == ("seed must be in [0, 9,223,372,036,854,775,807], got 99999999999999999999...99999999 "
                    "(4,000 characters)")
