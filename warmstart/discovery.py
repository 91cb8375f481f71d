"""Objects that register by existing: every module of a package is imported and the subclasses of a base it
defines are collected, so adding one (a node OS, a preload mode) is one new module, nothing to list elsewhere."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any


def subclasses_in(package: str, path: list[str], base: Any) -> list[Any]:
    """The concrete subclasses of `base` defined in the modules of `package`, by module name."""
    found: list[Any] = []
    for module_info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        module = importlib.import_module(f"{package}.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, base)
                and value is not base
                and value.__module__ == module.__name__
                and not getattr(value, "__abstractmethods__", None)
            ):
                found.append(value)
    names = [getattr(kind, "name", kind.__name__) for kind in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise TypeError(f"{package}: two {base.__name__} classes are named {', '.join(repeated)}")
    return found
