"""How every kind of extension is registered: a class decorator in a module of its own,
found by importing every module of its package the first time its registry is asked.

Plugins (`load_plugins`) are imported then too, before any registry answers: the modules
named by the entry points of the group `tapt.plugins` of every installed distribution, and
those named in the environment variable TAPT_PLUGINS (comma-separated module names), so a
user's own extensions reach `tapt` itself and every process that reads an index.

Selection methods (`tapt.retriever.methods`), corpus formats (`tapt.indexer.reading.formats`),
executors (`tapt.indexer.building.executors`) and the command line's commands (`tapt.commands`)
each keep one `Registry`; their `register` decorators add to it, and a class registered from
any other module (a user's own) counts the same once that module is imported. Listings are in
`order`, then by name.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Callable, Collection, Generic, Iterator, TypeVar

from tapt.errors import PluginError

T = TypeVar("T")
PLUGIN_GROUP = "tapt.plugins"
PLUGINS_VARIABLE = "TAPT_PLUGINS"
_PLUGINS = {"state": "new"}     # new, loading (a plugin asked a registry), or loaded


def plugin_modules() -> list[tuple[str, str]]:
    """The plugins to import: (what names it, the module) for each entry point of the group
    `tapt.plugins` (its value is a module, or `module:attribute`), then each module named in
    TAPT_PLUGINS."""
    from importlib.metadata import entry_points

    found = [(f"entry point {ep.name} ({PLUGIN_GROUP})", ep.value.partition(":")[0].strip())
             for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)]
    named = os.environ.get(PLUGINS_VARIABLE, "")
    found += [(PLUGINS_VARIABLE, name.strip()) for name in named.split(",") if name.strip()]
    return found


def load_plugins() -> None:
    """Import every plugin (`plugin_modules`) once; their class decorators register them.

    Raises:
        PluginError: a plugin failed to import (named, with its error's first line); the next
            call tries again.
    """
    if _PLUGINS["state"] != "new":
        return
    _PLUGINS["state"] = "loading"
    try:
        for source, module in plugin_modules():
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - whatever it raised, the plugin is named
                lines = str(exc).strip().splitlines()
                raise PluginError(f"plugin {module} ({source}) failed to import: "
                                  f"{type(exc).__name__}: {lines[0] if lines else ''}") from exc
    except BaseException:
        _PLUGINS["state"] = "new"
        raise
    _PLUGINS["state"] = "loaded"


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
        """Import every extension module of the package (once), then the plugins
        (`load_plugins`).

        Raises:
            PluginError: a plugin failed to import.
        """
        if not self.loaded:
            package = importlib.import_module(self.package) if self.package else None
            for module in pkgutil.iter_modules(package.__path__ if package else []):
                if module.name not in self.infrastructure and not module.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{module.name}")
            self.loaded = True
        load_plugins()

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
