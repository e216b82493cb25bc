"""Session-wide test settings."""

from __future__ import annotations

import os

import pytest

# Notebook cells run with small parameters in the tests and take seconds; a kernel that stops
# answering (a lost message under load) is cut off after this and retried once on a fresh kernel
# by probeguard_core.book.build.execute_notebook, instead of stalling the suite.
os.environ.setdefault("PROBEGUARD_CELL_TIMEOUT", "240")

# The artifact cache (probeguard_core.cache) of this test session lives in a fresh folder,
# never the user's ~/.cache: a test never sees an entry it did not make.
if "PROBEGUARD_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["PROBEGUARD_CACHE_DIR"] = tempfile.mkdtemp(prefix="probeguard-test-cache-")


# --------------------------------------------------------------------------- xdist balance
# `make test` runs `pytest -n JOBS --dist loadgroup`.  A module's tests stay on one worker
# (its module-scoped fixtures run once), except in the modules below, whose tests are
# independent units (one notebook each) or carry their own `xdist_group` per release; their
# expensive inputs are made once per session across workers (book_fixtures.once_per_session).
_SPREAD = {"test_notebooks.py", "test_book_foreign_release.py"}


#: Modules whose groups take minutes (a real-model regeneration, book builds, browser visits):
#: collected first, so the scheduler hands them out first and shorter work fills in around them
#: (longest first; the order of tests within a module is kept).
_HEAVY_FIRST = ("test_real_release.py", "test_book_foreign_release.py", "test_book_browser.py",
                "test_pipeline_resume.py", "test_binder.py")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist sorts loadscope / loadgroup units by their number of tests, largest first
    # (--loadscope-reorder, on by default): the one-test, three-minute regeneration was handed
    # out last and set the suite's wall time.  Keep the order _HEAVY_FIRST gives the collection.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and item.path.name not in _SPREAD:
            item.add_marker(pytest.mark.xdist_group(f"module-{item.path.stem}"))
    rank = {name: i for i, name in enumerate(_HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: module order kept
    _name_the_groups(config, items)


def _group_of(item: pytest.Item) -> str:
    """The ``@group`` suffix pytest-xdist's loadgroup gives a test id (its own rule)."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names))


def _name_the_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test's group into its id, as pytest-xdist's loadgroup means to.

    pytest-xdist 3.8 appends ``@group`` to ``item._nodeid`` on the workers, but pytest 9.2 reads a
    test's id from ``item._id``, so the suffix never reached the scheduler: every test was its own
    unit, a release's notebook runs were waited for on both workers and module fixtures (the
    browser tests' book build) ran twice. ``tests/test_xdist_groups.py`` checks the grouping."""
    if not getattr(config.option, "loadgroup", False) or not items or not hasattr(items[0], "_id"):
        return
    from _pytest.nodes import coerce_node_id

    for item in items:
        group = _group_of(item)
        if group and not item.nodeid.endswith("@" + group):
            item._id = coerce_node_id(f"{item.nodeid}@{group}")
