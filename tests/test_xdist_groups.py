"""`make test` runs `pytest -n JOBS --dist loadgroup`: each test's group must be in its id, or
the scheduler spreads a group's tests over both workers (tests/conftest.py: _name_the_groups,
a fix for pytest-xdist 3.8 on pytest 9.2)."""

from __future__ import annotations

import pytest
from conftest import _group_of


def test_a_module_is_one_group(request: pytest.FixtureRequest) -> None:
    assert _group_of(request.node) == "module-test_xdist_groups"
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not running under pytest-xdist --dist loadgroup (make test does)")
    assert request.node.nodeid.endswith("@module-test_xdist_groups"), request.node.nodeid


@pytest.mark.xdist_group("release-example")
def test_an_explicit_group_replaces_the_module_group(request: pytest.FixtureRequest) -> None:
    assert _group_of(request.node) == "release-example"
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@release-example"), request.node.nodeid


def test_units_are_handed_out_in_the_collection_order(request: pytest.FixtureRequest) -> None:
    """conftest's _HEAVY_FIRST order reaches the scheduler: xdist's own reordering (by number of
    tests per unit) is off, or the longest single test would start last."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not running under pytest-xdist --dist loadgroup (make test does)")
    assert request.config.option.loadscopereorder is False
