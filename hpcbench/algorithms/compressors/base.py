"""What a compression of the workers' all-reduce is: a ``Compressor`` subclass registered by name, with
its options, that knows its worker and declares the messages it sends.

A compressor averages a float32 vector over the workers (``mean``, the piece of a worker program that
``allreduce`` and ``local-sgd`` call) by yielding collectives (``Allreduce``, ``Allgather``) of its own
making. It writes two methods: ``reduce`` (the mean, through its messages) and ``messages`` (each
message's operation and size, without computing it). The simulator without numerics runs on a stand-in
vector a few floats long: there ``mean`` sends the declared messages instead, at the real model's sizes,
so every compression scales to thousands of simulated workers.

Its options become the algorithm's, prefixed by its name (``PowerSgd.Options.rank`` is
``allreduce.powersgd_rank``); ``error_feedback`` is shared by the compressions that keep an error.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpcbench.algorithms.api import NoOptions, Sub
from hpcbench.algorithms.ops import Allgather, Allreduce, Workers
from hpcbench.registry import Registry


@dataclass(frozen=True)
class Message:
    """One collective of a compressor's call: ``Allreduce`` or ``Allgather``, and each worker's bytes in it."""

    op: type
    nbytes: int
    bf16: bool = False


class Compressor:
    """One worker's compressed mean over the workers, and whatever state it keeps between calls.

    Subclasses set ``name``, ``summary``, ``Options`` (a frozen dataclass of its own options, with
    defaults), ``keeps_error`` (the shared ``error_feedback`` option acts on it), ``whole_vectors``,
    and write ``reduce`` and ``messages``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    keeps_error: ClassVar[bool] = False
    # Every message is the whole vector in some type: a stand-in's then counts as the model's (and as
    # sim.message_params'), and the simulator needs no declaration. Otherwise its declared messages go.
    whole_vectors: ClassVar[bool] = False

    def __init__(self, rank: int, options: Any, size: int, bounds: Sequence[int],
                 shapes: Sequence[tuple[int, ...]], seed: int = 0) -> None:
        """``rank``: its worker; ``options``: the algorithm's (its own are taken from them); ``size``: the
        vector's; ``bounds``, ``shapes``: the model's parameters in the model's own elements (the vector
        is a stand-in when ``size`` is not the model's); ``seed``: the run's."""
        self.rank, self.size, self.seed = rank, size, seed
        self.bounds, self.shapes = tuple(bounds), tuple(shapes)
        self.model_size = self.bounds[-1] if len(self.bounds) > 1 else size
        self.stand_in = size != self.model_size
        self.opts = own_options(type(self), options)
        self.error_feedback = bool(getattr(options, "error_feedback", True)) and self.keeps_error
        self.calls = 0  # calls of ``mean`` so far, this one included while it runs

    # --- what a compression writes -------------------------------------------------------------
    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        """The mean of ``vector`` over ``members`` (float32, a new array), through the collectives
        ``summed`` and ``gathered``; None, with no state changed, when one of them finds the members
        changed (the caller begins it again among the survivors)."""
        raise NotImplementedError

    def messages(self, workers: int) -> list[Message]:
        """The collectives this call of ``reduce`` makes among ``workers``, in order, at the real model's
        sizes (``self.calls`` says which call it is)."""
        raise NotImplementedError

    # --- given ---------------------------------------------------------------------------------
    def mean(self, vector: np.ndarray) -> Sub[np.ndarray]:
        """The workers' mean of ``vector`` (float32) through this compression; → a new array. When
        workers fail during it, the survivors begin it again among themselves (at the same call, so all
        of them do), with its state as it was."""
        self.calls += 1
        while True:
            members = yield Workers()
            declared = self.stand_in and not self.whole_vectors
            out = yield from (self.declared(vector, members) if declared else self.reduce(vector, members))
            if out is not None:
                return out

    def declared(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        """A stand-in's mean: the declared messages sent at their sizes, the vector handed back as it is
        (a stand-in's values mean nothing)."""
        for message in self.messages(len(members)):
            part = np.zeros(1, np.uint16 if message.bf16 else np.float32)
            yield (Allreduce(part, message.bf16, message.nbytes) if message.op is Allreduce
                   else Allgather(part, message.nbytes))
            if (yield Workers()) != members:
                return None
        return vector.copy()

    def shared_rng(self) -> np.random.Generator:
        """Random draws the same on every worker at this call, and again when the call is begun again
        after a failure (drawn from the run's seed and the call's number, never from kept state)."""
        return np.random.default_rng([self.seed, 0xC0DE, self.calls])

    def summed(self, part: np.ndarray, members: tuple[int, ...], bf16: bool = False) -> Sub[np.ndarray | None]:
        """``part`` summed over ``members`` in its own type; None if some of them failed meanwhile."""
        total = yield Allreduce(part, bf16)
        return total if (yield Workers()) == members else None

    def gathered(self, part: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        """Every member's ``part`` (all of one size and type), as rows in member order; None if some of
        them failed meanwhile."""
        rows = yield Allgather(part)
        return rows.reshape(len(members), part.size) if (yield Workers()) == members else None


COMPRESSORS: Registry[type[Compressor]] = Registry("compression")


def register(cls: type[Compressor]) -> type[Compressor]:
    """Add a compression; its options' names in the algorithms' tables may not be another's."""
    taken = {prefixed(name) + f.name for name, other in COMPRESSORS.items() for f in dataclasses.fields(other.Options)}
    for f in dataclasses.fields(cls.Options):
        if prefixed(cls.name) + f.name in taken:
            raise TypeError(f"{cls.__name__}'s option {prefixed(cls.name) + f.name} is another compression's")
    return COMPRESSORS.register(cls.name)(cls)


def kept(size: int, ratio: float) -> int:
    """How many of ``size`` elements a share ``ratio`` of them is: ⌈ratio·size⌉, at least one."""
    return min(size, max(1, math.ceil(ratio * size)))


def prefixed(name: str) -> str:
    """The prefix of a compression's options in the algorithm's table: ``powersgd_``."""
    return f"{name.replace('-', '_')}_"


def own_options(cls: type[Compressor], options: Any) -> Any:
    """A compression's own options out of the algorithm's (defaults where they lack them)."""
    prefix = prefixed(cls.name)
    return cls.Options(**{f.name: getattr(options, prefix + f.name) for f in dataclasses.fields(cls.Options)
                          if hasattr(options, prefix + f.name)})


def acts_only_with() -> dict[str, tuple[str, ...]]:
    """Each option of the compressions → the ``compress`` values it acts with: a compression's own
    (``powersgd_rank`` → powersgd), ``error_feedback`` → those that keep an error."""
    out: dict[str, tuple[str, ...]] = {prefixed(name) + f.name: (name,) for name, cls in COMPRESSORS.items()
                                       for f in dataclasses.fields(cls.Options)}
    out["error_feedback"] = tuple(name for name, cls in COMPRESSORS.items() if cls.keeps_error)
    return out


@register
class Plain(Compressor):
    name = "none"
    summary = "the float32 sum divided by the workers: no compression"
    whole_vectors = True

    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        total = yield from self.summed(vector, members)
        return None if total is None else total * np.float32(1.0 / len(members))

    def messages(self, workers: int) -> list[Message]:
        return [Message(Allreduce, 4 * self.model_size)]
