"""What an algorithm is: options, a window/channel layout, and server and worker programs."""
from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import numpy as np

from hpcbench.algorithms.ops import Op
from hpcbench.algorithms.schedule import Schedule
from hpcbench.errors import UsageError
from hpcbench.registry import Registry

T = TypeVar("T")
Program = Generator[Op, Any, None]
# A piece of a program that hands back a value: ``value = yield from piece(...)``.
Sub = Generator[Op, Any, T]
Role = Literal["server", "workers"]


def role_of(rank: int) -> Role:
    """Rank 0 is the server (or coordinator); every other rank a worker."""
    return "server" if rank == 0 else "workers"


@dataclass(frozen=True)
class WindowSpec:
    """An RMA window on rank 0 (``server``) or on every worker (``workers``).

    Owners write ``initial`` (zeros when None) before any program starts, so no program can
    read a window that was never published.
    """

    owner: Role
    nbytes: int
    initial: np.ndarray | None = field(default=None, compare=False)
    # "publish": the owner overwrites it and others read it; "accumulate": others add into it
    # (element-wise atomic), so every read of it must exclude the adders; "count": an int64 counter
    # others only fetch-and-add (no locks: in shared memory an add needs nothing from the owner).
    mode: Literal["publish", "accumulate", "count"] = "publish"


@dataclass(frozen=True)
class ChannelSpec:
    """Point-to-point messages of exactly ``nbytes`` from ``sender`` role to ``to`` role.

    Receives from rank 0, and rank 0's receives from every worker, are pre-posted before the run
    starts; receives between workers are posted on first use.
    """

    sender: Role
    to: Role
    nbytes: int


@dataclass(frozen=True)
class Layout:
    windows: Mapping[str, WindowSpec] = field(default_factory=dict)
    channels: Mapping[str, ChannelSpec] = field(default_factory=dict)
    tables: tuple[str, ...] = ()  # the tables it records on rank 0 (columns: hpcbench/results/schema.py)
    # columns it adds to those tables, after the schema's (only the updates table takes any: each a
    # per-update mean, ``NAME_mean``, summarised as NAME_mean, NAME_p50 and NAME_p99)
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """The run as an algorithm sees it: sizes, budget, hyper-parameters, its own options."""

    workers: int
    params: np.ndarray  # initial flat float32 parameters, identical on every rank
    batch_size: int
    steps: int  # per worker; the sample budget is steps × workers × batch_size
    train_size: int
    schedule: Schedule
    momentum: float
    nesterov: bool
    weight_decay: float
    eval_every: int  # samples between evaluations of the global model
    seed: int
    options: Any
    # Where each of the model's parameters starts in the flat vector, then its size (gradient buckets
    # are whole parameters); () for one parameter spanning the vector. In the model's own elements,
    # also when the algorithm runs on a stand-in vector (the simulator without numerics).
    bounds: tuple[int, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()  # each parameter's shape, as bounds (() : one vector)

    @property
    def model_bounds(self) -> tuple[int, ...]:
        return self.bounds or (0, self.size)

    @property
    def model_shapes(self) -> tuple[tuple[int, ...], ...]:
        return self.shapes or ((self.size,),)

    @property
    def budget(self) -> int:
        return self.steps * self.workers * self.batch_size

    @property
    def worker_ranks(self) -> tuple[int, ...]:
        return tuple(range(1, self.workers + 1))

    @property
    def size(self) -> int:
        return int(self.params.size)

    def rng(self, rank: int, purpose: int = 0) -> np.random.Generator:
        """A rank's own random stream for one purpose, derived from the run seed (never the global RNG)."""
        return np.random.default_rng([self.seed, 0xA160, rank, purpose])


class Settings(Protocol):
    """What ``Algorithm.check`` may read of the run configuration (a ``RunConfig``)."""

    @property
    def nesterov(self) -> bool: ...


@dataclass(frozen=True)
class NoOptions:
    pass


SYNCHRONOUS, PARAMETER_SERVER, DECENTRALIZED = FAMILIES = ("synchronous", "parameter server", "asynchronous "
                                                                                              "decentralized")


class Algorithm:
    """Base class: subclasses set the class attributes and write ``server`` and ``worker``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    family: ClassVar[str]  # one of FAMILIES, as the README groups the algorithms
    Options: ClassVar[type] = NoOptions
    min_workers: ClassVar[int] = 1
    # Asynchronous methods run until the global sample budget is spent (fast workers take more steps)
    # and apply every gradient at the single-worker rate; synchronous ones take equal steps and may
    # scale their rate (lr_scaling). No default: every algorithm says which it is (``register`` checks).
    asynchronous: ClassVar[bool]

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.opts = ctx.options

    @classmethod
    def check(cls, cfg: Settings, options: Any, workers: int) -> None:
        """Refuse, in one line, a configuration or world this algorithm cannot run.

        ``options``: an instance of ``cls.Options`` (subclasses name their own type)."""
        if workers < cls.min_workers:
            need = cls.min_workers + 1
            raise UsageError(f"{cls.name} needs at least {cls.min_workers} worker(s) besides rank 0 (got {workers}): "
                             f"launch {need} or more ranks, or simulate --workers {cls.min_workers} or more")

    def layout(self) -> Layout:
        raise NotImplementedError

    def server(self) -> Program:
        raise NotImplementedError

    def worker(self, rank: int) -> Program:
        raise NotImplementedError

    def state_bytes(self) -> int:
        """Memory the server keeps for this algorithm beyond one copy of the parameters."""
        return 0

    def check_state(self, size: int) -> None:
        """Refuse, in one line, state this algorithm would keep beyond the model's copies (a parameter server's
        history) that does not fit in this machine's memory for a model of ``size`` parameters: checked before
        it is made, and by ``run --dry-run``, which binds the algorithm to a stand-in vector."""

    def resolved_options(self) -> dict[str, Any]:
        """The options whose placeholder default this run resolved, with the values it used."""
        return {}


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


def register(cls: type[Algorithm]) -> type[Algorithm]:
    if getattr(cls, "family", None) not in FAMILIES:
        raise TypeError(f"{cls.__name__}.family must be one of {', '.join(FAMILIES)}: the README and `hpcbench list` "
                        "group the algorithms by it")
    if not isinstance(getattr(cls, "asynchronous", None), bool):
        raise TypeError(f"{cls.__name__} must say whether it is asynchronous (asynchronous = True or False): "
                        "it decides the budget's split and whether lr_scaling applies")
    return ALGORITHMS.register(cls.name)(cls)
