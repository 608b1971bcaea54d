"""Compressions of the workers' all-reduce by name. Every module of this package registers what it
defines (``base`` the default, ``none``); a new compression is a new module here.

``CompressOptions`` is the options table the compressing algorithms (``allreduce``, ``local-sgd``)
take theirs from: ``compress``, ``error_feedback`` and every compression's own options, prefixed by its
name, built from the registry."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpcbench.algorithms.compressors.base import COMPRESSORS, Compressor, Message, acts_only_with, prefixed
from hpcbench.ranges import choice

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def option_fields() -> list[tuple[str, Any, Any]]:
    """The compressing algorithms' shared options, then each compression's own, prefixed."""
    out: list[tuple[str, Any, Any]] = [
        ("compress", str, choice("none", COMPRESSORS.names)),
        # the compressions that keep an error (powersgd, topk) add it to the next call's vector
        ("error_feedback", bool, dataclasses.field(default=True)),
    ]
    for name, cls in COMPRESSORS.items():
        hints = typing.get_type_hints(cls.Options)
        out += [(prefixed(name) + f.name, hints[f.name], dataclasses.field(  # type: ignore[call-overload]
                    default=f.default, default_factory=f.default_factory, metadata=f.metadata))
                for f in dataclasses.fields(cls.Options)]
    return out


if TYPE_CHECKING:
    @dataclass(frozen=True)
    class CompressOptions:
        compress: str = "none"
        error_feedback: bool = True
else:
    CompressOptions = dataclasses.make_dataclass("CompressOptions", option_fields(), frozen=True)
    CompressOptions.__module__ = __name__


def make(options: Any, rank: int, size: int, bounds: Sequence[int], shapes: Sequence[tuple[int, ...]],
         seed: int = 0) -> Compressor:
    """Worker ``rank``'s compressor, of the kind ``options.compress`` names (see ``Compressor``)."""
    return COMPRESSORS.get(options.compress)(rank, options, size, bounds, shapes, seed)


__all__ = ["COMPRESSORS", "CompressOptions", "Compressor", "Message", "acts_only_with", "make"]
