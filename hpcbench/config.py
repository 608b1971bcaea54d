"""Run configuration: defaults ← TOML file ← command-line flags ← ``--set key=value``, validated."""
from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcbench.algorithms.schedule import SCALINGS
from hpcbench.errors import UsageError, unknown_key
from hpcbench.options import TABLES, build_options, option_tables
from hpcbench.ranges import bounded, check_ranges, choice
from hpcbench.registry import rule
from hpcbench.workload.datasets import DATASETS, file_datasets

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


MAX_SLOWDOWN = 1e6  # a straggler a million times slower than the others has as good as failed


@dataclass(frozen=True)
class Stragglers:
    """``--stragglers FRACTION:FACTOR``, parsed once: that fraction of the workers computes FACTOR× slower.

    Which workers is resolved per run (``runtime.plan.straggler_ranks``), from the seed.
    """

    fraction: float = 0.0
    factor: float = 1.0

    @classmethod
    def parse(cls, spec: str) -> Stragglers:
        """``"0.1:3"`` → Stragglers(0.1, 3.0); ``""`` → none."""
        if not spec:
            return cls()
        try:
            fraction_text, factor_text = spec.split(":")
            fraction, factor = float(fraction_text), float(factor_text)
        except ValueError:
            raise UsageError(f"stragglers {spec!r} is not FRACTION:FACTOR (for example 0.1:3)") from None
        if not 0.0 <= fraction <= 1.0 or not 1.0 <= factor <= MAX_SLOWDOWN:
            raise UsageError(f"stragglers {spec!r}: need 0 <= FRACTION <= 1 and 1 <= FACTOR <= {MAX_SLOWDOWN:,.0f}")
        return cls(fraction, factor)

    def __str__(self) -> str:
        return "" if self == Stragglers() else f"{self.fraction:g}:{self.factor:g}"


FAULT_KINDS = ("kill", "stop", "term", "raise", "slow")
FAULT_FORMS = ("kill:RANK@SECONDS, stop:RANK@SECONDS[:FOR_SECONDS], term:RANK@SECONDS, raise:RANK@STEP, "
               "slow:RANK@SECONDS:FACTOR "
               "(kill, stop, term and raise also @setup, @gather or @final; several, one a rank, joined by commas)")
# Outside training: during set-up, at the final gather, in the final window (rank 0 scoring the
# evaluations and writing the file).
FAULT_PHASES = ("setup", "gather", "final")


@dataclass(frozen=True)
class Fault:
    """``--set fault=KIND:RANK@WHEN[:FACTOR]``, parsed once: a fault injected into a real run.

    kill: SIGKILL at ``at`` seconds into the timed window · stop: SIGSTOP then (for ``lasts`` seconds, then
    SIGCONT; 0: for good) · term: SIGTERM then (what
    Slurm's time limit and scancel send) · raise: an exception at
    the rank's step ``at`` · slow: every compute from ``at`` seconds on lasts ``factor`` times as long.
    ``phase`` "setup", "gather" or "final": kill, stop, term or raise there instead of during training.
    """

    kind: str = ""
    rank: int = -1
    at: float = 0.0
    factor: float = 1.0
    phase: str = ""
    lasts: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Fault:
        if not spec:
            return cls()
        wrong = UsageError(f"fault {spec!r} is not one of {FAULT_FORMS}")
        kind, _, rest = spec.partition(":")
        rank_text, at_sign, when = rest.partition("@")
        if kind not in FAULT_KINDS or not at_sign:
            raise wrong
        when, _, factor_text = when.partition(":")
        if when in FAULT_PHASES and kind != "slow" and rank_text.isdigit() and not factor_text:
            return cls(kind, int(rank_text), phase=when)
        try:
            rank, at = int(rank_text), float(when)
            factor = float(factor_text) if kind == "slow" else 1.0
            lasts = float(factor_text) if kind == "stop" and factor_text else 0.0
        except ValueError:
            raise wrong from None
        third = {"slow": (True,), "stop": (False, True)}.get(kind, (False,))  # may a third number come, or must it
        if bool(factor_text) not in third or rank < 0 or not (math.isfinite(at) and at >= 0) \
                or not (math.isfinite(factor) and factor >= 1) or (kind == "raise" and at != int(at)) \
                or not (math.isfinite(lasts) and (lasts > 0) == (kind == "stop" and bool(factor_text))):
            raise wrong
        return cls(kind, rank, at, factor, lasts=lasts)

    def __bool__(self) -> bool:
        return bool(self.kind)

    def __str__(self) -> str:
        if not self.kind:
            return ""
        if self.phase:
            return f"{self.kind}:{self.rank}@{self.phase}"
        when = f"{int(self.at)}" if self.kind == "raise" else f"{self.at:g}"
        return f"{self.kind}:{self.rank}@{when}" + (f":{self.factor:g}" if self.kind == "slow" else "") \
            + (f":{self.lasts:g}" if self.lasts else "")


@dataclass(frozen=True)
class Faults:
    """``--set fault=SPEC[,SPEC...]``: faults on several ranks at once, one a rank (each a ``Fault``),
    e.g. ``kill:2@3,kill:5@8``: rank 2 killed 3 s into the run, rank 5 at 8 s."""

    items: tuple[Fault, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Faults:
        if not spec:
            return cls()
        parts = spec.split(",")
        if not all(parts):
            raise UsageError(f"fault {spec!r} is not one of {FAULT_FORMS}")
        items = tuple(Fault.parse(part) for part in parts)
        ranks = [f.rank for f in items]
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        if twice:
            raise UsageError(f"fault {spec!r}: rank {twice[0]} has more than one fault; give each rank one")
        return cls(items)

    def for_rank(self, rank: int) -> Fault:
        return next((f for f in self.items if f.rank == rank), Fault())

    def kills(self) -> dict[int, float]:
        """Each rank killed during training, and when (seconds into the timed window)."""
        return {f.rank: f.at for f in self.items if f.kind == "kill" and not f.phase}

    def killed(self) -> set[int]:
        """Every rank killed, during training or at a phase (set-up, the final gather, rank 0's last write)."""
        return {f.rank for f in self.items if f.kind == "kill"}

    def __bool__(self) -> bool:
        return bool(self.items)

    def __str__(self) -> str:
        return ",".join(str(f) for f in self.items)


DEFAULT_STEPS = 100  # steps per worker where neither steps nor epochs says


def asked_steps(steps: int | None, epochs: float | None, batch_size: int, workers: int, train_size: int) -> float:
    """Each worker's share of the sample budget in batches, before any ``max_steps`` cap: ``steps``, else
    ``epochs`` over ``train_size`` samples (inf where too many to count), else DEFAULT_STEPS."""
    if steps is not None:
        return steps
    if epochs is not None:
        exact = epochs * train_size / (workers * batch_size)
        return max(1, math.ceil(exact)) if math.isfinite(exact) else exact
    return DEFAULT_STEPS


def cut_by_cap(config: Mapping[str, Any], workers: int) -> bool:
    """Whether ``max_steps`` cut the run a result file's resolved ``config`` describes: the budget it asked for
    is more steps per worker than the cap (a file without the sizes to tell: whenever a cap was set)."""
    cap = int(config.get("max_steps") or 0)
    if not cap or not all(k in config for k in ("train_size", "batch_size")):
        return cap > 0
    return asked_steps(config.get("steps"), config.get("epochs"), int(config["batch_size"]), workers,
                       int(config["train_size"])) > cap


MAX_VAL_FRACTION = 0.5
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class Experiment:
    """What a run measures, the same under ``run`` and ``simulate``: the algorithm and its option tables,
    the model and data, the sample budget, the learning-rate recipe, the evaluations and the stragglers.
    A study varies these; two runs that differ only elsewhere measured the same thing."""

    algo: str = rule("", "required (--algo)")
    model: str = "mlp"
    dataset: str = "digits"
    data_dir: str = rule("", "none (only cifar10 reads files)")
    steps: int | None = bounded(None, low=1, unit="steps", resolves="from epochs, else 100")  # steps per worker
    # passes over the training set, in samples over all workers
    epochs: float | None = bounded(None, above=0, unit="epochs", resolves="unset (steps decide)")
    # At most this many steps per worker, whatever steps or epochs say: a smoke test of a command
    # (HPCBENCH_MAX_STEPS sets it for every run a command starts); recorded, so never mistaken for a measurement.
    max_steps: int = bounded(0, low=0, unit="steps", resolves="no cap (HPCBENCH_MAX_STEPS=N sets it)")
    batch_size: int = bounded(32, low=1, unit="samples")
    lr: float = bounded(0.05, low=0, high=1e4)  # beyond, float32 updates overflow at the first step
    momentum: float = bounded(0.0, low=0, below=1)
    nesterov: bool = False
    weight_decay: float = bounded(0.0, low=0, high=1e4)
    # linear warm-up from 1/n of the rate, the same for every algorithm
    warmup_epochs: float = bounded(5.0, low=0, unit="epochs")
    # synchronous methods only: none | linear | sqrt in the number of workers
    lr_scaling: str = choice("none", SCALINGS)
    lr_decay_epochs: tuple[float, ...] = bounded((), low=0, unit="epochs")  # in increasing order
    lr_decay_factor: float = bounded(0.1, above=0, high=1)
    seed: int = bounded(0, low=0, high=MAX_SEED)  # torch's and numpy's seeds are at most 2^63 - 1
    evals: int = bounded(20, low=1, unit="evaluations")  # evaluations of the global model spread over the sample budget
    # of the test set (and of the validation split unless val_eval_samples says), each evaluation but the last
    # (it reads all)
    eval_samples: int = bounded(2000, low=1, unit="samples")
    # of the validation split at each evaluation but the last (0: the last only, where a choice reads it)
    val_eval_samples: int | None = bounded(None, low=0, unit="samples", resolves="eval_samples")
    # training samples held out as the validation split, the same for every seed
    val_fraction: float = bounded(0.0, low=0, high=MAX_VAL_FRACTION)
    target_accuracy: float = bounded(0.9, above=0, high=1)
    stragglers: Stragglers = rule(Stragglers(), "none")  # from "FRACTION:FACTOR"
    # the option tables by name (an algorithm's, a model's, a dataset's): ``--set NAME.KEY=VALUE``
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def eval_limits(self) -> tuple[int, int]:
        """Samples of the test set and of the validation split scored at each evaluation but the last."""
        return self.eval_samples, self.eval_samples if self.val_eval_samples is None else self.val_eval_samples


@dataclass(frozen=True)
class Operations:
    """How a run is carried out and kept, never what it measures: its deadlines, flushes and progress
    lines, the untimed warm-up, torch's threads, and where its result file goes."""

    # longest any blocking wait may last before the run fails
    timeout_s: float = bounded(120.0, above=0, unit="seconds")
    # a worker silent this long (no heartbeat), then heard again, is recorded as a stall (at most timeout_s / 2)
    stall_s: float = bounded(10.0, above=0, unit="seconds")
    # rank 0 rewrites the result file (status "incomplete") this often (less when large)
    flush_s: float = bounded(10.0, above=0, unit="seconds")
    # longest the run may take
    time_limit_s: float = bounded(0.0, low=0, unit="seconds", resolves="the Slurm job's end, else 7 days")
    # seconds between rank 0's progress lines when its output is not a terminal
    progress_s: float = bounded(30.0, above=0, unit="seconds")
    # untimed gradient computations per worker before the timed window (never applied)
    warmup_steps: int = bounded(2, low=0, unit="steps")
    # torch threads per rank
    threads: int = bounded(0, low=0, unit="threads", resolves="this node's cores shared among its ranks")
    out: str = rule("", "results/ALGO-DATASET-MODEL-MODE-wWORKERS-sSEED-TIME-ID.h5")
    overwrite: bool = False  # replace an existing result file at ``out`` (regular files only)


@dataclass(frozen=True)
class FaultInjection:
    """Faults injected into a real run on purpose (``--set fault=...``): the fault matrix and the
    resilience study's."""

    fault: Faults = rule(Faults(), "none")  # from "KIND:RANK@WHEN[:FACTOR][,...]"


@dataclass(frozen=True)
class RunConfig(FaultInjection, Operations, Experiment):
    """Everything that defines a run, identical for ``run`` (real MPI) and ``simulate``: the experiment,
    its operations and any faults injected, as one flat set of keys (the command line's, ``--set``'s,
    a TOML file's and the result file's config record; ``GROUPS`` says which key is whose)."""

    def with_updates(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def for_algo(self, name: str) -> RunConfig:
        """This configuration for a run of algorithm ``name``, without the other algorithms' option
        tables (one study's configuration may hold the tables of every algorithm it compares)."""
        tables = option_tables()
        return dataclasses.replace(self, algo=name, options={
            t: v for t, v in self.options.items() if t == name or t not in tables or not tables[t].algorithm})

    def to_argv(self) -> list[str]:
        """The command-line options (``--set KEY=VALUE``, TOML literals) that give this configuration
        back, every value that differs from its default: what crosses a process boundary."""
        given, defaults = self.to_dict(), RunConfig().to_dict()
        out = [f"{key}={set_literal(value)}" for key, value in given.items()
               if key != "options" and value != defaults[key]]
        out += [f"{table}.{key}={set_literal(value)}" for table, values in self.options.items()
                for key, value in values.items()]
        return [a for item in out for a in ("--set", item)]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["lr_decay_epochs"] = list(self.lr_decay_epochs)
        d["stragglers"] = str(self.stragglers)
        d["fault"] = str(self.fault)
        d["options"] = {k: dict(v) for k, v in self.options.items()}
        return d


def set_literal(value: Any) -> str:
    """``value`` as ``--set`` reads it back: text bare where it reads back as itself (``model=cnn``),
    everything else as a TOML literal."""
    if isinstance(value, str) and value and parse_set_value(value) == value:
        return value
    return toml_literal(value)


def table_argv(table: str, options: Any, defaults: Any) -> list[str]:
    """``--set TABLE.KEY=VALUE`` for every field of the ``options`` dataclass that differs from ``defaults``."""
    return [a for f in dataclasses.fields(options) if getattr(options, f.name) != getattr(defaults, f.name)
            for a in ("--set", f"{table}.{f.name}={set_literal(getattr(options, f.name))}")]


RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name != "options")
GROUPS = (Experiment, Operations, FaultInjection)  # each run key in exactly one (a test holds it)


def toml_literal(value: Any) -> str:
    """``value`` as a TOML literal: what ``--set`` and a config file read back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):  # numpy's integers too
        return str(int(value))
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no TOML literal in hpcbench's options")
        return repr(float(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def parse_set_value(text: str, where: str = "a --set value") -> Any:
    """A ``--set`` value is a TOML literal (``0.1``, ``true``, ``[30, 60]``); anything else is a string."""
    try:
        return read_toml(f"v = {text}", where)["v"]
    except tomllib.TOMLDecodeError:
        return text


def read_toml(text: str, where: str) -> dict[str, Any]:
    """``text`` as TOML, with one line naming ``where`` for what a crafted text does to the parser (which
    recursed without limit and converted integers of any length); its ``TOMLDecodeError`` is the caller's."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to read (hpcbench's options nest a few levels)") from None
    except ValueError as exc:
        if isinstance(exc, tomllib.TOMLDecodeError) or "digits" not in str(exc):
            raise
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise UsageError(f"{where} holds an integer of more than {limit:,} digits, too long to read (hpcbench's "
                         "whole numbers have at most 19)") from None


def load_toml(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"config file {path!r} does not exist")
    if not p.is_file():
        raise UsageError(f"config file {path!r} is not a regular file (a directory, fifo or device)")
    try:
        return read_toml(p.read_text(encoding="utf-8"), f"config file {path!r}")
    except UnicodeDecodeError as exc:
        raise UsageError(f"config file {path!r} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path!r} is not valid TOML: {exc}") from None


def merge_sources(
    toml: Mapping[str, Any], flags: Mapping[str, Any], sets: list[str], option_tables: list[str]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Merge the sources into (run keys, per-algorithm option tables), later sources winning."""
    run: dict[str, Any] = {}
    options: dict[str, dict[str, Any]] = {}

    def put(key: str, value: Any, where: str) -> None:
        if key in option_tables:
            if not isinstance(value, dict):
                raise UsageError(f"{where}: [{key}] must be a table of options")
            options.setdefault(key, {}).update(value)
        elif key in RUN_KEYS:
            run[key] = value
        else:
            raise unknown_key("key", key, [*RUN_KEYS, *(f"{t}.*" for t in option_tables)],
                              "hpcbench list shows every key", f"{where}: ")

    for key, value in toml.items():
        put(key.replace("-", "_") if key not in option_tables else key, value, "config file")
    for key, value in flags.items():
        if value is not None:
            run[key] = value
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r} is not key=value")
        table, dot, sub = key.partition(".")
        value = parse_set_value(text, f"--set {key}=...")
        if dot:
            put(table, {sub.replace("-", "_"): value}, "--set")
        else:
            put(key.replace("-", "_"), value, "--set")
    return run, options


def environment_sets(environ: Mapping[str, str]) -> list[str]:
    """``--set`` items from the environment: ``HPCBENCH_MAX_STEPS=N`` caps every run at N steps per
    worker, including the runs a demo, sweep, tune or reproduce starts (they inherit it)."""
    text = environ.get("HPCBENCH_MAX_STEPS", "").strip()
    if not text:
        return []
    if not text.isdigit():
        raise UsageError(f"HPCBENCH_MAX_STEPS must be a whole number of steps per worker (0: no cap), got {text!r}")
    return [f"max_steps={int(text)}"]


def from_sources(config_path: str | None, flags: Mapping[str, Any], sets: list[str],
                 sim_flags: Mapping[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """defaults ← TOML file ← flags ← ``--set``; → (run configuration, the simulator's values).

    The simulator's values are the ``[sim]`` table with ``simulate``'s own flags on top, except
    where a ``--set sim.KEY=...`` names the same key (the last source wins, as everywhere).
    """
    toml = load_toml(config_path) if config_path else {}
    tables = option_tables()
    run, options = merge_sources(toml, flags, sets, list(tables))
    algo = run.get("algo")
    for name in [t for t in options if t in toml and tables[t].algorithm]:  # every one the file gives is checked:
        tables[name].build(options[name])  # a typo in one is said whichever runs (a tune's recipe copies them all)
    if algo:  # a file may hold a study's every algorithm's table: a run of one takes its own, and leaves the rest
        named = {item.partition("=")[0].partition(".")[0] for item in sets}  # (another's in --set is refused)
        for name in [t for t in options if t != algo and t in toml and t not in named and tables[t].algorithm]:
            del options[name]
    sim = options.pop("sim", {})
    overridden = {item.partition("=")[0][len("sim."):] for item in sets if item.startswith("sim.")}
    sim.update({k: v for k, v in sim_flags.items() if k not in overridden})
    cfg = make_config(run, options)
    for name, table in TABLES.items():  # a model's or dataset's table that shares fields with [sim]
        if table.shares and table.applies(cfg):
            share(options.setdefault(name, {}), sim, table.shares)
    return make_config(run, options), sim


def share(table: dict[str, Any], sim: dict[str, Any], keys: tuple[str, ...]) -> None:
    """One value for the ``keys`` a table shares with the simulator's (``--model payload`` computes as
    the simulator models it, in ``run`` and ``simulate`` alike): the table's where given, else the
    simulator's (``--compute``, ``[sim]``)."""
    for key in keys:
        if key in table:
            sim[key] = table[key]
        elif key in sim:
            table[key] = sim[key]


def make_config(run: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]) -> RunConfig:
    cfg = build_options(RunConfig, run, "")
    return dataclasses.replace(cfg, options={k: dict(v) for k, v in options.items()})


def validate_numbers(cfg: RunConfig) -> None:
    """Impossible sizes and values, each named with what would be valid: every number within the range
    its field declares, then the rules between fields."""
    check_ranges(cfg, "")
    if cfg.steps is not None and cfg.epochs is not None:
        raise UsageError("give either steps or epochs, not both")
    if list(cfg.lr_decay_epochs) != sorted(cfg.lr_decay_epochs):
        raise UsageError(f"lr_decay_epochs must be in increasing order, got {[float(e) for e in cfg.lr_decay_epochs]}")
    if cfg.data_dir and not DATASETS.get(cfg.dataset).reads_files:
        raise UsageError(f"--data-dir goes with a dataset read from files ({', '.join(file_datasets())}); "
                         f"{cfg.dataset} needs none")
    if cfg.stall_s > cfg.timeout_s / 2 and cfg.stall_s != Operations.stall_s:  # the default is held to it quietly
        raise UsageError(f"stall_s = {cfg.stall_s:g} is more than half of timeout_s = {cfg.timeout_s:g}: a worker "
                         f"silent that long has failed the run before it could be a stall (at most "
                         f"{cfg.timeout_s / 2:g})")
