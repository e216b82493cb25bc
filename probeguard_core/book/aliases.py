"""Old module paths kept working after a move.

The book machinery moved from ``probeguard_core.{book_build, notebook_twins, sphinx_ext,
nbtools}`` into :mod:`probeguard_core.book`. Each old path is a tiny package whose
``__init__`` calls :func:`alias_module`, so that reading, setting or deleting an attribute of
the old module acts on the new one (``monkeypatch.setattr(book_build, ...)`` patches
``book.build``, and its undo restores the original), and ``python -m <old path>`` still runs (a ``__main__`` beside it). A package,
not a ``.py`` file, so that git records each move as a pure rename.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["alias_module"]


def alias_module(name: str, target: str) -> types.ModuleType:
    """Make the already-imported module ``name`` forward its attributes to module ``target``
    (imported here); dunder attributes (``__path__``, ``__spec__``, submodules set by the import
    system as ``__main__``) stay on ``name``. Returns ``target``."""
    impl = importlib.import_module(target)
    missing = object()
    # the target's own values of the attributes set through the alias: deleting such an
    # attribute restores that value (pytest's monkeypatch undoes a setattr on a module whose
    # __dict__ lacked the name by deleting it; it must not delete the target's function)
    shadowed: dict[str, Any] = {}

    class _Alias(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:
            return getattr(impl, attr)

        def __setattr__(self, attr: str, value: Any) -> None:
            if attr.startswith("__") and attr.endswith("__"):
                super().__setattr__(attr, value)
            else:
                shadowed.setdefault(attr, getattr(impl, attr, missing))
                setattr(impl, attr, value)

        def __delattr__(self, attr: str) -> None:
            old = shadowed.pop(attr, missing)
            if old is missing:
                delattr(impl, attr)
            else:
                setattr(impl, attr, old)

        def __dir__(self) -> list[str]:
            return sorted(set(dir(impl)))

    sys.modules[name].__class__ = _Alias
    return impl
