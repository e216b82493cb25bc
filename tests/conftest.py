"""Session-wide test settings."""

from __future__ import annotations

import os

# Notebook cells run with small parameters in the tests and take seconds; a kernel that stops
# answering (a lost message under load) is cut off after this and retried once on a fresh kernel
# by probeguard_core.book_build.execute_notebook, instead of stalling the suite.
os.environ.setdefault("PROBEGUARD_CELL_TIMEOUT", "240")
