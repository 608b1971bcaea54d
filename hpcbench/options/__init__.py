"""Option tables: every ``[NAME]`` table of a config file and ``--set NAME.KEY=VALUE``, in one registry.

A table is a frozen dataclass (fields with defaults, each number with its range: ``ranges.bounded``;
``validate()`` for rules between fields) and what it goes with: an algorithm's own (``ga-asgd``), a
model's (``payload``), a dataset's (``teacher``) or a command's (``sim``, simulate's virtual
cluster). ``--set`` and config files take their names from here, ``runtime.plan`` resolves a run's tables once into its
``Plan``, ``hpcbench
list`` shows them, and the result file records the ones a run used.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpcbench.errors import UsageError, one_of, unknown_key
from hpcbench.options.sim import SimConfig
from hpcbench.ranges import check_ranges
from hpcbench.registry import Registry
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.payload import PayloadOptions

COMMANDS = ("simulate",)  # a table a command reads itself, never part of a run's configuration


@dataclass(frozen=True)
class OptionTable:
    """One table: its options and what it goes with, as ``KIND=NAME`` (``algo=ga-asgd``,
    ``model=payload``, ``dataset=teacher``) or a command (``simulate``)."""

    name: str
    options: type
    goes_with: str
    # Fields that are also simulate's (``sim``), one value for both: ``--model payload`` computes as the
    # simulator models it, so ``payload.compute_*`` and ``--compute`` are the same numbers.
    shares: tuple[str, ...] = ()

    @property
    def by_command(self) -> bool:
        return self.goes_with in COMMANDS

    def applies(self, cfg: Any) -> bool:
        """Whether a run of ``cfg`` (a ``RunConfig``) uses this table."""
        kind, _, name = self.goes_with.partition("=")
        return bool(name) and getattr(cfg, kind) == name

    @property
    def algorithm(self) -> bool:
        return self.goes_with.startswith("algo=")

    def refuse_unless_applies(self, cfg: Any) -> None:
        """A table given for a run it does not go with is a mistake: another model's, dataset's or
        algorithm's (a study's commands give each algorithm's runs its own, ``RunConfig.for_algo``)."""
        kind, _, name = self.goes_with.partition("=")
        if name and not self.applies(cfg):
            raise UsageError(f"{self.name}.* options go with --{kind} {name} (the {kind} is {getattr(cfg, kind)!r})")

    def build(self, values: Mapping[str, Any]) -> Any:
        """The table's options from ``values`` (defaults for the rest), checked."""
        built = build_options(self.options, values, f"{self.name}.")
        if not self.by_command:  # a command checks its own table when it runs
            check_ranges(built, f"{self.name}.")
            getattr(built, "validate", lambda: None)()
        return built


TABLES: Registry[OptionTable] = Registry("option table")  # the tables that are not an algorithm's


def register(table: OptionTable) -> None:
    TABLES.register(table.name)(table)


def option_tables() -> dict[str, OptionTable]:
    """Every table: each registered algorithm's, then the others, by name."""
    from hpcbench.algorithms import ALGORITHMS

    found = {name: OptionTable(name, cls.Options, f"algo={name}") for name, cls in ALGORITHMS.items()}
    return {**found, **dict(TABLES.items())}


def table(name: str) -> OptionTable:
    tables = option_tables()
    if name not in tables:
        raise one_of("option table", name, list(tables))
    return tables[name]


def resolve(cfg: Any) -> dict[str, Any]:
    """A run's tables, built once: every table its configuration gives, then the defaults of each
    table the run uses and did not give (its algorithm's, its model's, its dataset's)."""
    out: dict[str, Any] = {}
    for name, values in cfg.options.items():
        found = table(name)
        found.refuse_unless_applies(cfg)
        out[name] = found.build(values)
    for name, found in option_tables().items():
        if name not in out and found.applies(cfg):
            out[name] = found.build({})
    return out


def check_value(owner: str, name: str, value: Any, hint: Any) -> Any:
    """Coerce a TOML/CLI value to a dataclass field's type, or raise one clear line. A field whose type
    parses text (``Stragglers``, ``Fault``: a ``parse`` class method) takes that text."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return check_value(owner, name, value, inner)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            value = [value]
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(check_value(owner, name, v, item_hint) for v in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise UsageError(f"{owner}{name} = {value!r} is not a finite number")
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(hint, type) and hasattr(hint, "parse"):
        if isinstance(value, hint):
            return value
        if isinstance(value, str):
            return hint.parse(value)
    else:
        return value
    kind = hint.__name__
    raise UsageError(f"{owner}{name} = {value!r} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}")


def build_options(cls: type, values: Mapping[str, Any], owner: str) -> Any:
    """Instantiate an options dataclass from a mapping, refusing unknown keys."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    typed = {}
    for key, value in values.items():
        if key not in names:
            raise unknown_key("option", key, names, "hpcbench list shows every option", owner=owner)
        typed[key] = check_value(owner, key, value, hints[key])
    return cls(**typed)


register(OptionTable("payload", PayloadOptions, "model=payload", shares=("compute_shape", "compute_mean_s")))
for _name, _spec in DATASETS.items():  # a dataset's own table is named as the dataset (teacher)
    if _spec.options is not None:
        register(OptionTable(_name, _spec.options, f"dataset={_name}"))
register(OptionTable("sim", SimConfig, "simulate"))
