"""Session-wide test settings."""

from __future__ import annotations

import os

# Notebook cells run with small parameters in the tests and take seconds; a kernel that stops
# answering (a lost message under load) is cut off after this and retried once on a fresh kernel
# by probeguard_core.book_build.execute_notebook, instead of stalling the suite.
os.environ.setdefault("PROBEGUARD_CELL_TIMEOUT", "240")

# The artifact cache (probeguard_core.cache) of this test session lives in a fresh folder,
# never the user's ~/.cache: a test never sees an entry it did not make.
if "PROBEGUARD_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["PROBEGUARD_CACHE_DIR"] = tempfile.mkdtemp(prefix="probeguard-test-cache-")
