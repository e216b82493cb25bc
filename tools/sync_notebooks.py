"""Regenerate (or ``--check``) the unexecuted notebook twins ``notebooks/ipynb/<name>.ipynb``
from ``notebooks/<name>.md``: ``python tools/sync_notebooks.py [--check]``.
Same as ``python -m probeguard_core.book.twins`` (see that module)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probeguard_core.book.twins import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
