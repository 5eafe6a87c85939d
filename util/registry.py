"""How every kind of extension is registered: a class decorator in a module of its own,
found by importing every module of its package the first time its registry is asked.

Selection methods (`tapt.retriever.methods`), corpus formats (`tapt.indexer.reading.formats`),
executors (`tapt.indexer.building.executors`) and the command line's commands (`tapt.commands`)
each keep one `Registry`; their `register` decorators add to it, and a class registered from
any other module (a user's own) counts the same once that module is imported. Listings are in
`order`, then by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Collection, Generic, Iterator, TypeVar

T = TypeVar("T")


def _origin(item: object) -> str:
    """Where an extension's class was defined: a module imported again (a notebook cell run
    again) registers the same name anew, a different class under a taken name is refused."""
    cls = item if isinstance(item, type) else type(item)
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry(Generic[T]):
    """The extensions of one kind, by name.

    Args:
        kind: What they are, for messages ("method", "format", "executor").
        package: The package whose modules are the built-in extensions (None: there are
            none; every one is registered from a module of its own).
        infrastructure: Modules of that package that hold no extension (not imported by
            `load`; modules whose names start with `_` never are).
        origin: Where an extension was defined (default: its class's module and name), so
            that the same one registered again replaces itself and another under a taken name
            is refused.
    """

    def __init__(self, kind: str, package: str | None, infrastructure: Collection[str] = (),
                 origin: Callable[[T], str] = _origin) -> None:
        self.kind, self.package, self.origin = kind, package, origin
        self.infrastructure = frozenset(infrastructure)
        self.by_name: dict[str, T] = {}
        self.loaded = False

    def add(self, name: str, item: T) -> None:
        """Register `item` under `name`.

        Raises:
            ValueError: another class is registered under `name`.
        """
        if name in self.by_name and self.origin(self.by_name[name]) != self.origin(item):
            raise ValueError(f"two {self.kind}s are called {name!r}")
        self.by_name[name] = item

    def load(self) -> None:
        """Import every extension module of the package (once)."""
        if self.loaded:
            return
        package = importlib.import_module(self.package) if self.package else None
        for module in pkgutil.iter_modules(package.__path__ if package else []):
            if module.name not in self.infrastructure and not module.name.startswith("_"):
                importlib.import_module(f"{self.package}.{module.name}")
        self.loaded = True

    def __iter__(self) -> Iterator[T]:
        """Every registered extension, in `order` (a class attribute, 100 when absent), then
        by name."""
        return iter([item for _, item in self._listed()])

    def names(self) -> tuple[str, ...]:
        """The registered names, in listing order."""
        return tuple(name for name, _ in self._listed())

    def __getitem__(self, name: str) -> T:
        """The extension called `name`.

        Raises:
            KeyError: none is (the caller words the refusal, listing `names()`).
        """
        self.load()
        if not isinstance(name, str) or name not in self.by_name:
            raise KeyError(name)
        return self.by_name[name]

    def _listed(self) -> list[tuple[str, T]]:
        self.load()
        return sorted(self.by_name.items(), key=lambda kv: (getattr(kv[1], "order", 100), kv[0]))
