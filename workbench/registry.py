"""Name → component registries. Targets, attacks, partitioners and datasets register here so
that a suite can refer to them by name and an unknown name gets the list of valid ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from workbench.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str, field: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            where = f"{field}: " if field else ""
            raise ConfigError(
                f"{where}unknown {self.kind} '{name}'; valid choices: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
