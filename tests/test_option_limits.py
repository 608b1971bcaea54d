"""Every algorithm's limits, at their edges: the last value it accepts runs, the first it refuses
gets one exact line naming the option, its limit and the value given. The messages are the
contract a user meets (README, "Bad input"), so they are compared whole."""
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
    ("ga-asgd", 2, {"history": 0}), ("ga-asgd", 2, {"history": 8192}), ("ga-asgd", 2, {"beta": 0.0, "eps": 1e-30}), ("dana-ga", 2, {"beta": 0.9999}),
]


@pytest.mark.parametrize("algo, workers, options", ACCEPTED)
def test_the_edge_values_are_accepted(algo, workers, options):
    check(algo, workers, **options)


def test_nesterov_is_accepted_where_no_look_ahead_is_published():
    for algo in ("asgd", "ga-asgd", "allreduce", "easgd"):
        check(algo, 2, nesterov=True)


REFUSED = [
    ("asgd", 0, {}, "asgd needs at least 1 worker(s) besides rank 0: launch 2 or more ranks (got 1)"),
    ("gossip", 1, {}, "gossip needs at least 2 worker(s) besides rank 0: launch 3 or more ranks (got 2)"),
    ("sgp", 1, {}, "sgp needs at least 2 worker(s) besides rank 0: launch 3 or more ranks (got 2)"),
    ("osgp", 1, {}, "osgp needs at least 2 worker(s) besides rank 0: launch 3 or more ranks (got 2)"),
    ("osgp", 2, {"tau": -1}, "osgp.tau must be >= 0 iterations, got -1"),
    ("easgd", 4, {"tau": 0}, "easgd.tau must be >= 1 local steps, got 0"),
    ("easgd-sync", 4, {"tau": 0}, "easgd-sync.tau must be >= 1 local steps, got 0"),
    ("easgd", 3, {"alpha": 1.0}, "easgd.alpha must be in (0, 1), got 1.0"),
    ("easgd", 3, {"alpha": -0.5}, "easgd.alpha must be in (0, 1), got -0.5"),
    ("easgd-sync", 4, {"alpha": 0.25}, "easgd-sync is unstable unless workers × alpha < 1 (got 4 × 0.25)"),
    ("easgd-sync", 2, {"alpha": 0.75}, "easgd-sync is unstable unless workers × alpha < 1 (got 2 × 0.75)"),
    ("local-sgd", 2, {"period": 0}, "local-sgd.period must be >= 1 local steps, got 0"),
    ("allreduce", 2, {"bucket_mb": 0.0}, "allreduce.bucket_mb must be > 0 MiB, got 0"),
    ("allreduce", 2, {"bucket_mb": float("nan")}, "allreduce.bucket_mb = nan is not a finite number"),
    ("gossip", 3, {"variant": "pul"}, "unknown gossip.variant 'pul'; valid: pull, push"),
    ("ga-asgd", 2, {"history": -1}, "ga-asgd.history must be between 0 and 8192 versions (0: 2·workers + 4), got -1"),
    ("dana-ga", 2, {"history": -1}, "dana-ga.history must be between 0 and 8192 versions (0: 2·workers + 4), got -1"),
    ("ga-asgd", 2, {"history": 8193},
     "ga-asgd.history must be between 0 and 8192 versions (0: 2·workers + 4), got 8193"),
    ("ga-asgd", 2, {"beta": 1.0}, "ga-asgd.beta must be in [0, 1), got 1.0"),
    ("ga-asgd", 2, {"beta": -0.1}, "ga-asgd.beta must be in [0, 1), got -0.1"),
    ("dana-ga", 2, {"eps": 0.0}, "dana-ga.eps must be > 0, got 0.0"),
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
    assert "forgetful" not in ALGORITHMS.names()
    assert {name: ALGORITHMS.get(name).asynchronous for name in ALGORITHMS.names()} == {
        "allreduce": False, "asgd": True, "sa-asgd": True, "ga-asgd": True, "dana": True, "dana-ga": True,
        "easgd": True, "easgd-sync": False, "gossip": True, "sgp": False, "osgp": True, "local-sgd": False}
