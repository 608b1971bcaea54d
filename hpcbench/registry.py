"""Name → object registries that refuse duplicates and list valid names for unknown ones, and the
placeholder defaults that options declare with what they resolve to."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import field
from typing import Any, Generic, TypeVar

from hpcbench.errors import one_of

T = TypeVar("T")


class Registry(Generic[T]):
    """A kebab-case name registry, filled by the ``register`` decorator."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if name != name.lower() or "_" in name or " " in name:
                raise ValueError(f"{self.kind} name {name!r} must be kebab-case")
            self._items[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise one_of(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return list(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items


def rule(default: Any, resolves: str) -> Any:
    """A dataclass field whose default is a placeholder (0, None, ""), with the rule it stands for, in
    words: what ``hpcbench list`` shows as its default."""
    return field(default=default, metadata={"resolves": resolves})
