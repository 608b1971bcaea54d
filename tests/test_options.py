"""One registry of option tables, read by --set, TOML, ``list``, the plan and the result file; and
``RunConfig.to_argv()``, the one way a configuration crosses a process boundary."""
from __future__ import annotations

import dataclasses

import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.config import Faults, RunConfig, Stragglers, from_sources
from hpcbench.errors import UsageError
from hpcbench.launch.arguments import parse_run
from hpcbench.options import TABLES, OptionTable, option_tables, resolve
from hpcbench.options.sim import SimConfig
from hpcbench.runtime.plan import validate
from hpcbench.workload.payload import PayloadOptions
from hpcbench.workload.teacher import TeacherOptions


def test_every_algorithm_and_every_other_table_is_in_the_registry_once():
    tables = option_tables()
    assert list(tables) == ALGORITHMS.names() + ["payload", "teacher", "sim"]
    assert tables["ga-asgd"].options is ALGORITHMS.get("ga-asgd").Options
    assert (tables["payload"].options, tables["teacher"].options, tables["sim"].options) == \
        (PayloadOptions, TeacherOptions, SimConfig)
    with pytest.raises(ValueError, match="option table 'teacher' is registered twice"):
        TABLES.register("teacher")(OptionTable("teacher", TeacherOptions, "dataset=teacher"))


def test_a_plan_resolves_the_tables_its_run_uses_with_defaults_and_those_it_gives():
    cfg = RunConfig(algo="ga-asgd", model="payload", dataset="teacher",
                    options={"payload": {"params": 10}, "sgp": {"init_spread": 0.5}})
    with pytest.raises(UsageError, match=r"^sgp\.\* options go with --algo sgp \(the algo is 'ga-asgd'\)$"):
        validate(cfg)
    plan = validate(cfg.for_algo("ga-asgd"))  # what a study gives each algorithm's runs
    assert set(plan.tables) == {"ga-asgd", "payload", "teacher"}
    assert validate(cfg.for_algo("sgp")).options == ALGORITHMS.get("sgp").Options(init_spread=0.5)
    assert plan.options == ALGORITHMS.get("ga-asgd").Options()
    assert plan.tables["payload"] == PayloadOptions(params=10) and plan.tables["teacher"] == TeacherOptions()
    assert set(validate(RunConfig(algo="asgd")).tables) == {"asgd"}


@pytest.mark.parametrize("options, line", [
    ({"payload": {"params": 0}}, "payload.params must be between 1 and"),  # the table's own limits
    ({"teacher": {"samples": 10}}, "teacher.* options go with --dataset teacher (the dataset is 'digits')"),
    ({"nope": {}}, "unknown option table 'nope'; valid: allreduce"),
    ({"asgd": {"beta": 1}}, "unknown option 'asgd.beta'; valid: (none)"),
])
def test_a_table_that_does_not_fit_is_refused_with_one_line(options, line):
    with pytest.raises(UsageError, match=r"^" + line.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
                       .replace(".", r"\.")):
        resolve(RunConfig(algo="asgd", model="payload", options=options))


def test_the_table_a_model_shares_with_the_simulator_is_one_value():
    assert TABLES.get("payload").shares == ("compute_shape", "compute_mean_s")
    assert TABLES.get("teacher").shares == ()  # teacher.noise is label noise, sim.noise the links': not one value
    cfg, sim = from_sources(None, {"dataset": "teacher"}, ["teacher.noise=0.2", "sim.noise=0.1"], {})
    assert cfg.options["teacher"] == {"noise": 0.2} and sim == {"noise": 0.1}
    cfg, sim = from_sources(None, {"model": "payload"}, ["sim.compute_shape=9"], {"compute_mean_s": 0.5})
    assert dict(cfg.options["payload"]) == {"compute_shape": 9, "compute_mean_s": 0.5} == \
        {k: sim[k] for k in ("compute_shape", "compute_mean_s")}
    cfg, sim = from_sources(None, {"model": "mlp"}, [], {"compute_mean_s": 0.5})  # no payload: nothing shared
    assert "payload" not in cfg.options and sim == {"compute_mean_s": 0.5}


CONFIGS = [
    RunConfig(),
    RunConfig(algo="ga-asgd", steps=7, lr=0.1, momentum=0.9, nesterov=True, lr_decay_epochs=(3.0, 6.5),
              stragglers=Stragglers(0.25, 3.0), fault=Faults.parse("slow:2@0.5:3,kill:3@2"), overwrite=True,
              options={"ga-asgd": {"beta": 0.9, "history": 4}, "sgp": {"init_spread": 0.5}}),
    RunConfig(algo="asgd", model="payload", dataset="teacher", epochs=2.5, out='a dir/with "quotes".h5',
              data_dir="1.5", options={"payload": {"params": 10, "compute_mean_s": 0.0}, "teacher": {"noise": 0.0}}),
    RunConfig(algo="allreduce", out="true", fault=Faults.parse("kill:1@setup"), max_steps=3, lr_scaling="linear"),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_to_argv_reads_back_as_the_same_configuration(cfg, monkeypatch):
    monkeypatch.delenv("HPCBENCH_MAX_STEPS", raising=False)
    assert parse_run(cfg.to_argv())[0] == cfg
    assert parse_run(cfg.to_argv(), simulate=True)[0] == cfg


def test_to_argv_says_only_what_differs_from_the_defaults_and_bare_where_it_can():
    assert RunConfig().to_argv() == []
    assert RunConfig(algo="sgp", model="cnn", stragglers=Stragglers(0.5, 2.0), out="true").to_argv() == \
        ["--set", "algo=sgp", "--set", "model=cnn", "--set", "stragglers=0.5:2", "--set", 'out="true"']


def test_a_studys_job_carries_its_run_and_its_cluster_across_the_process_boundary(tmp_path, monkeypatch):
    from hpcbench.tuning.execute import Job

    monkeypatch.delenv("HPCBENCH_MAX_STEPS", raising=False)
    job = Job.of("ga-asgd", 16, ["--network", "alpha=1e-05,bandwidth=1e8", "--set", "ga-asgd.beta=0.5",
                                 "--set", "seed=3"], tmp_path / "a.h5", "a")
    assert (job.algo, job.workers, job.cfg.seed, job.cfg.out, job.cfg.overwrite) == \
        ("ga-asgd", 16, 3, str(tmp_path / "a.h5"), True)
    argv = job.argv("sim")
    assert argv[:3] == ["simulate", "--workers", "16"]
    assert parse_run(argv[1:], simulate=True) == (job.cfg, job.sim)
    assert job.sim == dataclasses.replace(SimConfig(), workers=16, alpha_s=1e-5, bandwidth=1e8)
    assert job.argv("mpi") == ["run", *job.cfg.to_argv()]  # a real run has no virtual cluster
