"""The old module paths of the book machinery (``probeguard_core.book_build`` and friends)
forward to ``probeguard_core.book``; patching through them and undoing the patch leaves the
target as it was (a patch undone by deletion once deleted the target's own function)."""

from __future__ import annotations

import pytest


def test_monkeypatch_through_an_old_path_is_undone_on_the_target() -> None:
    from probeguard_core import book_build as old
    from probeguard_core.book import build as new

    orig = new._worker
    mp = pytest.MonkeyPatch()
    mp.setattr(old, "_worker", lambda args: None)
    assert new._worker is not orig and old._worker is new._worker
    mp.setattr(old, "brand_new_name", 1, raising=False)
    assert new.brand_new_name == 1
    mp.undo()
    assert new._worker is orig and old._worker is orig
    assert not hasattr(new, "brand_new_name")
