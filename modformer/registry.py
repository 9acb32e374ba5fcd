"""Name -> implementation registries for mixers, feed-forward modules, variants and tasks.

Adding a part is a new file with one decorated function or class; nothing else changes.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, key: str):
        self.kind = kind  # what is registered, for messages ("variant")
        self.key = key  # the config key that selects one, for messages ("model.variant")
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = item
            return item

        return add

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(
                f"{self.key}: unknown {self.kind} '{name}' (known: {', '.join(sorted(self._items))})"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)


MIXERS: Registry[Callable] = Registry("mixer", "model.mixer")
FFNS: Registry[Callable] = Registry("feed-forward module", "model.ffn")
VARIANTS: Registry = Registry("variant", "model.variant")
TASKS: Registry = Registry("task", "task.name")
