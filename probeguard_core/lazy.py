"""Packages whose public names import their submodules on first use (PEP 562).

``tables`` and ``deploy`` each keep a ``NAMES`` map (public name -> the submodule that defines
it) and get their module ``__getattr__`` and ``__dir__`` from :func:`lazy_names`, so importing
the package imports none of its submodules and ``package.name`` imports only the one it needs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``package.name`` is ``name`` of the submodule
    ``names[name]``, imported on first use; any other missing name raises AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *names])

    return __getattr__, __dir__
