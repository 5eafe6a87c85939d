"""Benchmarks that ship with tapt: recall against oracle selections, cluster purity, domain maps.

Installed with the package (unlike the scripts in the repository's `benchmarks/`), so that
`tapt bench ...` works from any directory.
"""

from importlib import import_module
from types import ModuleType

from tapt.errors import InputError


def optional(module: str) -> ModuleType:
    """Import a dependency of the `bench` extra, or say how to install it."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise InputError(f"this command needs {module.split('.')[0]}: "
                         "pip install 'tapt[bench]' (matplotlib, data-selection)") from exc
