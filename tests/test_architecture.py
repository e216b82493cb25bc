"""The shape of ``probeguard_core`` (issue 24): no import circle, deferred imports inside functions
included; no module over 800 lines unless its docstring says why it must be one file; the
deployment package's modules import only those above them, so a deployer's logs pass once down.

The import graph is read from the source (``ast``), not from ``sys.modules``: every ``import``
and ``from ... import`` anywhere in a module (at the top, inside functions, under
``TYPE_CHECKING``) is an edge, ``from . import x`` resolved against the module's package, and
``from pkg import name`` an edge to the submodule ``pkg.name`` when there is one, to the submodule
that defines ``name`` when ``pkg`` imports it lazily (its ``NAMES``), else to ``pkg``.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "probeguard_core"
#: Longest module (lines) that needs no word on why it is one file.
MAX_LINES = 800
#: How a module's docstring says why it must stay one file (a paragraph starting so).
ONE_FILE = "Why one file:"


def _modules(root: Path = PKG) -> dict[str, Path]:
    """Dotted name -> source file of every module of the package (a package by its ``__init__``)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a module of the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _lazy_names(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Package -> its ``NAMES`` (public name -> submodule imported on first use), for the packages
    whose ``__getattr__`` imports submodules lazily (``tables``, ``deploy``): ``from pkg import name``
    is then an edge to that submodule."""
    out = {}
    for mod, path in modules.items():
        if path.name == "__init__.py" and re.search(r"^NAMES\b", path.read_text(encoding="utf-8"), re.M):
            out[mod] = dict(importlib.import_module(mod).NAMES)
    return out


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source."""
    modules = _modules(root)
    lazy = _lazy_names(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules
                           else f"{source}.{lazy[source][a.name]}" if a.name in lazy.get(source, {})
                           else source for a in node.names]
            for t in targets:
                owner = _owner(t, modules)
                if owner is not None and owner != mod:
                    graph[mod].add(owner)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))
    return None


def test_the_graph_reader_sees_deferred_relative_and_from_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "probeguard_core"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from probeguard_core.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("import probeguard_core.a as A\nfrom probeguard_core import SEED\n")
    g = import_graph(pkg)
    assert g["probeguard_core.a"] == {"probeguard_core.sub.b"}
    assert g["probeguard_core.sub.b"] == {"probeguard_core.sub.c"}
    assert g["probeguard_core.sub.c"] == {"probeguard_core.a", "probeguard_core"}
    cycle = find_cycle(g)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {
        "probeguard_core.a", "probeguard_core.sub.b", "probeguard_core.sub.c"}
    (pkg / "sub" / "c.py").write_text("from probeguard_core import SEED\n")
    assert find_cycle(import_graph(pkg)) is None


def test_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_no_module_over_800_lines_unless_its_docstring_says_why() -> None:
    long = []
    for mod, path in _modules().items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and not re.search(rf"^{re.escape(ONE_FILE)}\s+\S", _docstring(path), re.M):
            long.append(f"{mod} ({n} lines)")
    assert not long, (f"modules over {MAX_LINES} lines: {long}; split them by concept, or start a paragraph "
                      f"of the module docstring with {ONE_FILE!r} and the reason")


# ------------------------------------------------------------------ the deployment package
DEPLOY = "probeguard_core.deploy"


def _deploy_order() -> list[str]:
    """The package's modules in the order of its docstring's table (lower rows build on upper ones)."""
    doc = _docstring(PKG / "deploy" / "__init__.py")
    return [f"{DEPLOY}.{m}" for m in re.findall(r"^``(\w+)``\s", doc, re.M)]


def test_the_deploy_docstring_lists_every_module_once() -> None:
    order = _deploy_order()
    mine = {m for m in _modules() if m.startswith(DEPLOY + ".")}
    assert len(order) == len(set(order)) and set(order) == mine


def test_deploy_modules_import_only_those_above_them() -> None:
    """validate -> score -> certify -> serialize, then apply, dossier, report, monitor: no module
    reaches down the table (or into the package's lazy names), so no step climbs back up."""
    graph = import_graph()
    order = _deploy_order()
    bad = []
    for i, mod in enumerate(order):
        for dep in sorted(graph[mod]):
            if dep == DEPLOY or (dep.startswith(DEPLOY + ".") and dep not in order[:i]):
                bad.append(f"{mod} imports {dep}")
    assert not bad, bad


def test_certification_steps_each_take_the_previous_steps_result() -> None:
    steps = [f"{DEPLOY}.{m}" for m in ("request", "scores", "ltt", "serialize")]
    graph = import_graph()
    for prev, step in zip(steps, steps[1:]):
        assert prev in graph[step], f"{step} does not build on {prev}"
    assert set(steps) <= graph[f"{DEPLOY}.certify"]


def test_deploy_names_map_to_their_modules() -> None:
    from probeguard_core import deploy

    for name, sub in deploy.NAMES.items():
        m = importlib.import_module(f"{DEPLOY}.{sub}")
        assert name in m.__all__ and getattr(deploy, name) is getattr(m, name), name
        assert sub not in deploy.NAMES  # a submodule is never shadowed by a name
    with pytest.raises(AttributeError):
        deploy.no_such_name  # noqa: B018
