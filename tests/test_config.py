"""Configuration sources, precedence and validation messages."""
import numpy as np
import pytest

from hpcbench.algorithms import ALGORITHMS
from hpcbench.config import (
    DEFAULT_STEPS,
    Fault,
    Faults,
    RunConfig,
    Stragglers,
    load_toml,
    make_config,
    merge_sources,
    parse_set_value,
    toml_literal,
)
from hpcbench.errors import UsageError
from hpcbench.runtime import plan

TABLES = ALGORITHMS.names()


def config(toml=None, flags=None, sets=()):
    run, options = merge_sources(toml or {}, flags or {}, list(sets), TABLES)
    return make_config(run, options)


def test_precedence_toml_then_flags_then_set():
    cfg = config({"lr": 0.1, "batch_size": 16, "model": "cnn"}, {"lr": 0.2, "model": None}, ["lr=0.3"])
    assert cfg.lr == 0.3 and cfg.batch_size == 16 and cfg.model == "cnn"


def test_set_parses_toml_literals_and_bare_strings():
    assert parse_set_value("0.5") == 0.5
    assert parse_set_value("true") is True
    assert parse_set_value("[30, 60]") == [30, 60]
    assert parse_set_value("cnn") == "cnn"
    cfg = config(sets=["lr_decay_epochs=[30, 60]", "model=resnet20", "nesterov=true"])
    assert cfg.lr_decay_epochs == (30.0, 60.0) and cfg.model == "resnet20" and cfg.nesterov is True


@pytest.mark.parametrize("value", [0.1, np.float64(0.0004011336491454), np.int64(7), 3, True, "pull", 'a "b"',
                                   [1.0, 2], (30, 60.0), np.float32(0.25)])
def test_a_toml_literal_reads_back_as_the_same_value(value):
    back = parse_set_value(toml_literal(value))
    assert back == (list(value) if isinstance(value, tuple) else value)
    assert isinstance(back, str) == isinstance(value, str)


def test_algorithm_option_tables_from_toml_and_set():
    cfg = config({"ga-asgd": {"beta": 0.99}}, sets=["ga-asgd.history=50"])
    assert cfg.options == {"ga-asgd": {"beta": 0.99, "history": 50}}
    opts = plan.validate(cfg.with_updates(algo="ga-asgd")).options
    assert opts.beta == 0.99 and opts.history == 50 and opts.eps == 1e-8


def test_an_unknown_key_is_one_short_line_with_the_closest_valid_keys():
    """Not every key on one line: the closest (a misspelling, another separator), else where to find them all."""
    for sets, said in ((["lrr=0.1"], "--set: unknown key 'lrr'; did you mean 'lr'? (hpcbench list shows every key)"),
                       (["ga_asgd.history=4"], "--set: unknown key 'ga_asgd'; did you mean 'ga-asgd.*'? (hpcbench list "
                                               "shows every key)"),
                       (["bogus=1"], "--set: unknown key 'bogus'; hpcbench list shows every key")):
        with pytest.raises(UsageError) as refused:
            config(sets=sets)
        assert str(refused.value) == said and len(f"hpcbench: error: {said}") <= 120
    with pytest.raises(UsageError, match=r"^config file: unknown key 'batchsize'; did you mean 'batch_size'\?"):
        config({"batchsize": 3})
    with pytest.raises(UsageError, match=r"^unknown option 'ga-asgd\.histroy'; did you mean 'ga-asgd\.history'\?"):
        plan.validate(config(sets=["ga-asgd.histroy=5"], flags={"algo": "ga-asgd"}))


def test_a_config_file_may_hold_other_algorithms_tables_and_the_chosen_one_applies(tmp_path):
    """A study's file holds every algorithm's table: a run of one takes its own and leaves the others; on
    the command line, another algorithm's option is a mistake and refused."""
    from hpcbench.config import from_sources

    path = tmp_path / "study.toml"
    path.write_text('epochs = 2\n[dana-ga]\nhistory = 64\n[easgd]\ntau = 8\nalpha = 0.1\n')
    cfg, _ = from_sources(str(path), {"algo": "dana-ga"}, [], {})
    assert cfg.options == {"dana-ga": {"history": 64}} and plan.validate(cfg).options.history == 64
    cfg, _ = from_sources(str(path), {"algo": "easgd"}, [], {})
    assert plan.validate(cfg).options == ALGORITHMS.get("easgd").Options(tau=8, alpha=0.1)
    cfg, _ = from_sources(str(path), {}, [], {})  # no algorithm yet (a sweep's, a tune's): every table kept
    assert set(cfg.options) == {"dana-ga", "easgd"}
    cfg, _ = from_sources(str(path), {"algo": "dana-ga"}, ["easgd.tau=4"], {})
    with pytest.raises(UsageError, match=r"^easgd\.\* options go with --algo easgd \(the algo is 'dana-ga'\)$"):
        plan.validate(cfg)
    # the others are left, not unread: a typo or an impossible value in one is said whichever algorithm runs
    path.write_text('[dana-ga]\nhistory = 64\n[easgd]\ntua = 8\n')
    for flags in ({"algo": "dana-ga"}, {}):  # a run of another, and a study's, sweep's or tune's read of it
        with pytest.raises(UsageError, match=r"unknown option 'easgd\.tua'; valid: easgd\.alpha, easgd\.tau; did "
                                             r"you mean 'easgd\.tau'\?"):
            from_sources(str(path), flags, [], {})
    path.write_text('[dana-ga]\nhistory = 64\n[easgd]\ntau = -8\n')
    with pytest.raises(UsageError, match=r"^easgd\.tau must be >= 1 local steps, got -8$"):
        from_sources(str(path), {"algo": "dana-ga"}, [], {})
    path.write_text('[teacher]\nnoise = 0.2\n')  # a dataset's table still goes with its dataset only
    cfg, _ = from_sources(str(path), {"algo": "asgd"}, [], {})
    with pytest.raises(UsageError, match=r"^teacher\.\* options go with --dataset teacher"):
        plan.validate(cfg)


def test_unknown_algorithm_option_names_the_valid_ones():
    cfg = config(sets=["ga-asgd.gamma=1"], flags={"algo": "ga-asgd"})
    with pytest.raises(UsageError, match=r"unknown option 'ga-asgd.gamma'; valid: ga-asgd.beta, ga-asgd.eps"):
        plan.validate(cfg)


def test_wrong_types_are_refused():
    with pytest.raises(UsageError, match="batch_size = 'many' is not an int"):
        config(sets=["batch_size=many"])
    with pytest.raises(UsageError, match="lr = True is not a float"):
        config(sets=["lr=true"])
    with pytest.raises(UsageError, match="steps = 'few' is not an int"):  # an optional field: the type inside
        config(sets=["steps=few"])
    with pytest.raises(UsageError, match="lr_decay_epochs = 'x' is not a float"):  # every item of a tuple
        config(sets=['lr_decay_epochs=[30, "x"]'])
    assert config(sets=["lr_decay_epochs=30"]).lr_decay_epochs == (30.0,)  # one value for a tuple: a tuple of one


def test_set_without_equals_sign():
    with pytest.raises(UsageError, match="--set 'lr' is not key=value"):
        config(sets=["lr"])


def test_malformed_toml_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("lr = = 3\n")
    with pytest.raises(UsageError, match="is not valid TOML"):
        load_toml(str(bad))
    with pytest.raises(UsageError, match="does not exist"):
        load_toml(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("sets, message", [
    (["steps=0"], "steps must be >= 1 steps, got 0"),
    (["steps=-3"], "steps must be >= 1 steps, got -3"),
    (["batch_size=0"], "batch_size must be >= 1 samples, got 0"),
    (["epochs=0"], "epochs must be > 0 epochs, got 0.0"),
    (["momentum=1.0"], r"momentum must be in \[0, 1\)"),
    (["steps=5", "epochs=2"], "either steps or epochs"),
    (["stragglers=half"], "is not FRACTION:FACTOR"),
    (["stragglers=0.5:0.5"], "1 <= FACTOR <= 1,000,000"),
    (["stragglers=0.5:1e308"], "1 <= FACTOR <= 1,000,000"),
])
def test_impossible_values(sets, message):
    with pytest.raises(UsageError, match=message):
        plan.validate(config(flags={"algo": "asgd"}, sets=sets))


@pytest.mark.parametrize("key, value, kind", [("algo", "nope", "algorithm"), ("model", "vgg", "model"),
                                              ("dataset", "imagenet", "dataset")])
def test_unknown_names_list_valid_choices(key, value, kind):
    cfg = config(flags={"algo": "asgd", key: value})
    with pytest.raises(UsageError, match=f"unknown {kind} '{value}'; valid: "):
        plan.validate(cfg)


def test_missing_algorithm_lists_choices():
    with pytest.raises(UsageError, match="choose an algorithm with --algo; valid: allreduce, asgd"):
        plan.validate(config())


def test_straggler_spec_is_parsed_once_into_a_typed_value_that_round_trips():
    cfg = config(flags={"algo": "asgd", "stragglers": "0.25:3"})
    assert cfg.stragglers == Stragglers(0.25, 3.0)
    assert cfg.to_dict()["stragglers"] == "0.25:3" and config().to_dict()["stragglers"] == ""
    assert make_config({"stragglers": cfg.to_dict()["stragglers"]}, {}).stragglers == cfg.stragglers


def test_budget_and_warmup_defaults():
    asgd, allreduce = ALGORITHMS.get("asgd"), ALGORITHMS.get("allreduce")
    cfg = config(flags={"algo": "asgd"})
    assert plan.steps_per_worker(cfg, 4, 1000) == DEFAULT_STEPS
    assert plan.steps_per_worker(cfg.with_updates(epochs=2.0), 4, 1000) == 16  # ceil(2000 / 128)
    assert plan.schedule_for(cfg, asgd, 4, 1000).warmup_epochs == 5.0
    assert plan.schedule_for(cfg, allreduce, 4, 1000).warmup_epochs == 5.0
    assert plan.schedule_for(cfg.with_updates(warmup_epochs=1.0), asgd, 4, 1000).warmup_epochs == 1.0


def test_straggler_choice_is_seeded_and_sized():
    cfg = config(flags={"algo": "asgd", "stragglers": "0.25:3"})
    chosen = plan.straggler_ranks(cfg.stragglers, 8, cfg.seed)
    assert len(chosen) == 2 and set(chosen) <= set(range(1, 9))
    assert chosen == plan.straggler_ranks(cfg.stragglers, 8, cfg.seed)
    assert chosen != plan.straggler_ranks(cfg.stragglers, 8, 1) or chosen != plan.straggler_ranks(cfg.stragglers, 8, 2)


@pytest.mark.parametrize("time_limit_s, environ, limit", [
    (3600.0, {"SLURM_JOB_END_TIME": "2000"}, (3600.0, "time_limit_s")),  # the setting wins
    (0.0, {"SLURM_JOB_END_TIME": "1000", "SLURM_JOB_ID": "77"}, (600.0, "the Slurm job's end (job 77)")),
    (0.0, {"SLURM_JOB_END_TIME": "1000"}, (600.0, "the Slurm job's end (job ?)")),
    (0.0, {"SLURM_JOB_END_TIME": "300"}, (0.0, "the Slurm job's end (job ?)")),  # already past
    (0.0, {"SLURM_JOB_END_TIME": "soon"}, (7 * 24 * 3600.0, "the default time_limit_s of 7 days")),
    (0.0, {}, (7 * 24 * 3600.0, "the default time_limit_s of 7 days")),
])
def test_the_time_a_run_may_take_and_where_that_limit_comes_from(time_limit_s, environ, limit):
    cfg = RunConfig(algo="asgd", time_limit_s=time_limit_s)
    assert plan.limit_of(cfg, environ).at(400.0) == limit


def test_a_budget_that_cannot_end_in_time_is_refused_before_it_starts():
    plan.check_duration(3600, 1.0, (3600.0, "time_limit_s"))  # exactly on time: runs
    with pytest.raises(UsageError) as refused:
        plan.check_duration(3601, 1.0, (3600.0, "time_limit_s"))
    assert str(refused.value) == ("3601 steps per worker would take about 1 h at the 1e+03 ms per gradient the "
                                  "warm-up measured, more than 1 h allowed by time_limit_s; lower --steps or "
                                  "--epochs, or raise --set time_limit_s=SECONDS")
    with pytest.raises(UsageError, match=r"about 0.278 h at the 5 ms per gradient .* more than 0.167 h allowed by "
                                         r"the Slurm job's end \(job 9\)"):
        plan.check_duration(200_000, 0.005, (600.0, "the Slurm job's end (job 9)"))


@pytest.mark.parametrize("fraction, workers, count", [(0.0, 8, 0), (0.25, 8, 2), (0.2, 4, 1), (0.1, 4, 0), (1.0, 3, 3)])
def test_straggler_ranks_are_round_fraction_times_n_distinct_sorted_workers(fraction, workers, count):
    chosen = plan.straggler_ranks(Stragglers(fraction, 3.0), workers, seed=5)
    assert len(chosen) == count and list(chosen) == sorted(set(chosen))
    assert all(1 <= r <= workers for r in chosen)


@pytest.mark.parametrize("run, options, line", [
    ({}, {"payload": {"params": 10}}, "payload.* options go with --model payload (the model is 'mlp')"),
    ({}, {"teacher": {"features": 10}}, "teacher.* options go with --dataset teacher (the dataset is 'digits')"),
    ({"model": "payload"}, {"payload": {"size": 10}}, "unknown option 'payload.size'; valid: payload.params"),
    ({"dataset": "teacher"}, {"teacher": {"size": 10}}, "unknown option 'teacher.size'; valid: teacher."),
])
def test_payload_and_teacher_options_are_checked_where_they_belong(run, options, line):
    with pytest.raises(UsageError) as refused:
        plan.validate(RunConfig(algo="asgd", options=options, **run))
    assert str(refused.value).startswith(line)


def test_the_budget_and_evaluation_interval_at_their_edges():
    cfg = RunConfig(algo="asgd", batch_size=1, steps=2**53, evals=20)
    ctx = plan.make_context(plan.validate(cfg), 1, np.zeros(2, np.float32),
                            train_size=100)  # 2^53 samples: exact, allowed
    assert ctx.budget == 2**53
    with pytest.raises(UsageError) as refused:
        plan.make_context(plan.validate(cfg.with_updates(steps=2**53 + 2)), 1, np.zeros(2, np.float32), train_size=100)
    assert str(refused.value) == ("a budget of 9.01e+15 samples (9.01e+15 steps per worker x 1 workers x batch 1) "
                                  "cannot be counted exactly (at most 2^53) nor run; lower --steps or --epochs")
    tiny = plan.make_context(plan.validate(cfg.with_updates(steps=3, evals=20)), 2, np.zeros(2, np.float32),
                             train_size=100)
    assert tiny.eval_every == 1  # more evaluations than samples: one per sample


def test_steps_per_worker_from_epochs_rounds_up_and_max_steps_caps():
    cfg = RunConfig(algo="asgd", steps=None, epochs=0.001, batch_size=32)
    assert plan.steps_per_worker(cfg, 4, 1000) == 1  # a sliver of an epoch is still one step
    assert plan.steps_per_worker(cfg.with_updates(epochs=2.0), 4, 1000) == 16
    assert plan.steps_per_worker(cfg.with_updates(epochs=2.0, max_steps=5), 4, 1000) == 5
    assert plan.steps_per_worker(cfg.with_updates(epochs=2.0, max_steps=0), 4, 1000) == 16  # 0: no cap


def test_the_schedule_records_the_scaling_that_made_its_rate():
    cfg = RunConfig(algo="allreduce", lr=0.1, lr_scaling="linear", warmup_epochs=0.0)
    schedule = plan.schedule_for(cfg, ALGORITHMS.get("allreduce"), 4, 1000)
    assert schedule.lr == pytest.approx(0.4) and schedule.describe() == "lr 0.4 (linear scaling)"


def test_the_duration_refusal_states_its_hours_and_milliseconds_to_three_figures():
    with pytest.raises(UsageError) as refused:
        plan.check_duration(3_602_157, 0.00123456, (4447.0, "time_limit_s"))
    # 3,602,157 × 1.23456 ms = 4447.08 s = 1.2353 h (1.24); 4447 s = 1.2353 h (1.24); 1.23456 ms (1.23)
    assert str(refused.value).startswith("3602157 steps per worker would take about 1.24 h at the 1.23 ms per "
                                         "gradient the warm-up measured, more than 1.24 h allowed by time_limit_s")


@pytest.mark.parametrize("spec, fault", [
    ("term:0@final", Fault("term", 0, phase="final")),
    ("term:2@1.5", Fault("term", 2, 1.5)),
    ("raise:1@gather", Fault("raise", 1, phase="gather")),
    ("slow:1@0.5:3", Fault("slow", 1, 0.5, 3.0)),
    ("stop:2@1.5:30", Fault("stop", 2, 1.5, lasts=30.0)),  # stopped 30 s, then continued
    ("stop:2@1.5", Fault("stop", 2, 1.5)),  # for good
])
def test_a_fault_spec_parses_into_its_parts_and_prints_back(spec, fault):
    assert Fault.parse(spec) == fault and str(fault) == spec


@pytest.mark.parametrize("spec", ["term:0@final:2", "slow:1@final", "term:-1@2", "term:1@later", "hang:1@2",
                                  "stop:2@1:0", "stop:2@1:-3", "stop:2@1:inf", "stop:2@1:nan", "stop:2@setup:3",
                                  "kill:2@1:3", "stop:2@1:x"])
def test_a_malformed_fault_spec_names_the_forms(spec):
    with pytest.raises(UsageError, match=r"is not one of kill:RANK@SECONDS, stop:RANK@SECONDS\[:FOR_SECONDS\], "
                                         r"term:RANK@SECONDS"):
        Fault.parse(spec)


def test_every_run_key_belongs_to_exactly_one_group_and_the_keys_are_as_flat_as_before():
    """RunConfig is the experiment, its operations and the faults injected: each key in one group, and
    the command line, --set and the result file still see one flat set of keys."""
    import dataclasses

    from hpcbench.config import GROUPS, RUN_KEYS, Experiment, FaultInjection, Operations

    owners = [[g.__name__ for g in GROUPS if key in {f.name for f in dataclasses.fields(g)}] for key in RUN_KEYS]
    assert all(len(o) == 1 for o in owners)
    assert set(RUN_KEYS) | {"options"} == {f.name for f in dataclasses.fields(RunConfig)}
    assert set(RunConfig().to_dict()) == set(RUN_KEYS) | {"options"}
    assert "lr" in RUN_KEYS and issubclass(RunConfig, (Experiment, Operations, FaultInjection))
    cfg = RunConfig(algo="asgd", lr=0.2, timeout_s=5.0, fault=Faults.parse("kill:2@3"))
    assert merge_sources({}, {}, cfg.to_argv()[1::2], ["asgd"])[0] == {"algo": "asgd", "lr": 0.2, "timeout_s": 5.0,
                                                                   "fault": "kill:2@3"}


CRAFTED_TOML = {  # → words of the one line
    "an array nested 5,000 deep": ("lr_decay_epochs = " + "[" * 5000 + "]" * 5000, "nested too deeply to read"),
    "inline tables nested 5,000 deep": ("x = " + "{a = " * 5000 + "1" + "}" * 5000, "nested too deeply to read"),
    "an integer of 5,000 digits": ("steps = " + "1" * 5000, "an integer of more than"),
}


@pytest.mark.parametrize("name", CRAFTED_TOML)
def test_a_crafted_config_file_is_one_line_naming_the_file_for_run_and_simulate(tmp_path, name):
    from conftest import cli

    text, says = CRAFTED_TOML[name]
    path = tmp_path / "crafted.toml"
    path.write_text(text + "\n")
    for command in (("simulate", "--algo", "asgd"), ("run", "--algo", "asgd", "--dry-run", "--workers", "2")):
        code, out, err = cli(*command, "--config", str(path), "--out", str(tmp_path / "never.h5"))
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (command, code, err[-2000:])
        assert f"config file '{path}'" in lines[0] and says in lines[0] and len(lines[0]) < 300, lines[0]
        assert not list(tmp_path.glob("never*"))


@pytest.mark.parametrize("value, says", [("[" * 5000 + "]" * 5000, "nested too deeply to read"),
                                         ("1" * 5000, "an integer of more than")])
def test_a_crafted_set_value_is_one_short_line(tmp_path, value, says):
    from conftest import cli

    code, _, err = cli("simulate", "--algo", "asgd", "--set", f"lr_decay_epochs={value}",
                       "--out", str(tmp_path / "never.h5"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err[-2000:])
    assert "--set lr_decay_epochs=" in lines[0] and says in lines[0] and len(lines[0]) < 300, lines[0]
