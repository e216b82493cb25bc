"""Build the book: run every notebook with papermill, then render with Jupyter Book.

``python -m probeguard_core.book.build --release data/simulated-v1 --jobs 2``

1. Reads ``notebooks/registry.yml`` (the notebooks in the paper's order) and checks that it
   agrees with ``notebooks/*.md`` and ``_toc.yml``.
2. Converts each ``notebooks/<name>.md`` (jupytext MyST) to a notebook and executes it with
   papermill in parallel (``--jobs`` processes, kernel ``python3`` of this interpreter, the
   heaviest notebooks by registry ``weight`` first, BLAS / OpenMP pools at one thread unless
   set), injecting ``release``, ``output_dir = book/_generated/<name>`` and ``--params-json``.
   Each kernel is forked from a process that has already imported what the notebooks import
   (:mod:`probeguard_core.book.kernels`; ``PROBEGUARD_FORK_KERNELS=0`` starts fresh kernels)
   and is stopped at once when its last cell has run.
3. Tags papermill's injected-parameters cell ``remove-cell`` so the book hides it and writes
   the executed notebook to ``book/_generated/<name>.ipynb``.
4. Runs ``jupyter-book build . -W -n --keep-going`` (execution is off in ``_config.yml``)
   into ``_build/html``, with the release's provenance banner, summary and scorecard substituted
   into the landing and method pages (``book/*.md``). Every other page of ``_toc.yml`` is an
   executed notebook. A failing notebook fails the build with its name and the error.

Paths (the repository root, the release resolver) live in :mod:`probeguard_core.book.paths`;
:func:`repo_root` and :func:`resolve` are re-exported here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from probeguard_core.book.paths import (  # noqa: F401  (_root_from: tests clear its cache)
    BuildError,
    _root_from,
    repo_relative,
    repo_root,
    resolve,
    resolve_release,
)

__all__ = [
    "KERNEL_THREAD_VARS",
    "BuildError",
    "NotebookEntry",
    "NotebookResult",
    "build_book",
    "check_registry",
    "execute_notebook",
    "load_registry",
    "main",
    "page_links",
    "page_title",
    "read_source",
    "repo_root",
    "resolve",
    "resolve_release",
    "check_release",
    "run_notebooks",
]

GENERATED = Path("book") / "_generated"
REGISTRY = Path("notebooks") / "registry.yml"
KERNEL = "python3"


# --------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class NotebookEntry:
    """One entry of ``notebooks/registry.yml``."""

    name: str
    test_params: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    weight: float = 0.0  # measured cold run time (s): the parallel build starts the heaviest first
    #: why ``results.json`` may carry no consistency check (a reference page that shows no number
    #: computed from the release, or one whose checked table can be empty on a small release);
    #: empty = at least one check is required (tests/test_notebooks.py)
    no_checks: str = ""
    #: the page reads the per-question tables of the release's main cells that several pages share
    #: (:func:`probeguard_core.tables.warm.warm_cell_tables`): when two or more such pages are
    #: built, the build computes those tables once, first (:func:`run_notebooks`)
    cell_tables: bool = False

    @property
    def source(self) -> Path:
        return Path("notebooks") / f"{self.name}.md"


def load_registry(root: Path | None = None) -> list[NotebookEntry]:
    """Read ``notebooks/registry.yml`` (a list of ``{name, test_params, outputs, weight, no_checks, cell_tables}``)."""
    root = root or repo_root()
    path = root / REGISTRY
    if not path.is_file():
        raise BuildError(f"{path}: the notebook registry is missing")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(data, list):
        raise BuildError(f"{path}: expected a list of notebook entries")
    entries: list[NotebookEntry] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "name" not in item:
            raise BuildError(f"{path}: entry {i} needs at least 'name'")
        unknown = set(item) - {"name", "test_params", "outputs", "weight", "no_checks", "cell_tables"}
        if unknown:
            raise BuildError(f"{path}: entry {i} ({item['name']}): unknown field(s) {sorted(unknown)}")
        name = str(item["name"])
        if name in seen:
            raise BuildError(f"{path}: notebook {name!r} is registered twice")
        seen.add(name)
        tp = item.get("test_params") or {}
        if not isinstance(tp, dict):
            raise BuildError(f"{path}: entry {name}: test_params must be a mapping")
        outs = item.get("outputs") or []
        if not isinstance(outs, list) or not all(isinstance(o, str) for o in outs):
            raise BuildError(f"{path}: entry {name}: outputs must be a list of file names")
        weight = item.get("weight", 0.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise BuildError(f"{path}: entry {name}: weight must be a non-negative number of seconds, got {weight!r}")
        no_checks = item.get("no_checks", "")
        if not isinstance(no_checks, str):
            raise BuildError(f"{path}: entry {name}: no_checks must be the reason, as text")
        cell_tables = item.get("cell_tables", False)
        if not isinstance(cell_tables, bool):
            raise BuildError(f"{path}: entry {name}: cell_tables must be true or false, got {cell_tables!r}")
        entries.append(NotebookEntry(name, dict(tp), tuple(outs), float(weight), no_checks, cell_tables))
    return entries


def _toc_files(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        if "file" in node:
            out.append(str(node["file"]))
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                out.extend(_toc_files(child))
    elif isinstance(node, list):
        for child in node:
            out.extend(_toc_files(child))
    return out


def check_registry(root: Path | None = None, strict: bool = True) -> list[NotebookEntry]:
    """Check that the registry, ``notebooks/*.md`` and ``_toc.yml`` agree (every registered notebook is
    listed as ``book/_generated/<name>``, and nothing else under it); return the entries.

    With ``strict=False`` (``--only`` builds) a notebook on disk that is not registered yet is
    reported on stderr instead of failing the build."""
    root = root or repo_root()
    entries = load_registry(root)
    names = [e.name for e in entries]
    on_disk = sorted(p.stem for p in (root / "notebooks").glob("*.md") if p.name != "README.md")
    problems: list[str] = []
    for n in on_disk:
        if n not in names:
            msg = f"notebooks/{n}.md is not registered in {REGISTRY}"
            if strict:
                problems.append(msg)
            else:
                print(f"book.build: warning: {msg}", file=sys.stderr)
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    toc_files = [f.removesuffix(".md").removesuffix(".ipynb") for f in [toc.get("root", ""), *_toc_files(toc)]]
    for e in entries:
        if not (root / e.source).is_file():
            problems.append(f"{REGISTRY}: {e.name}: {e.source} does not exist")
        if (GENERATED / e.name).as_posix() not in toc_files:
            problems.append(f"_toc.yml: {GENERATED.as_posix()}/{e.name} is not listed")
    for f in toc_files:
        if f.startswith(GENERATED.as_posix() + "/") and f.split("/")[-1] not in names:
            problems.append(f"_toc.yml lists {f} but no notebook of that name is registered")
    if problems:
        raise BuildError("notebook registry mismatch:\n  " + "\n  ".join(problems))
    return entries


# --------------------------------------------------------------------------- execution
@dataclass
class NotebookResult:
    name: str
    ok: bool
    wall_s: float
    output: Path
    error: str = ""


def read_source(path: Path) -> Any:
    """A jupytext source as a notebook with stable cell ids; it must have a ``parameters`` cell."""
    import jupytext

    nb = jupytext.read(path)
    # Stable cell ids (jupytext assigns random ones) keep executed notebooks diffable.
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise BuildError(f"{path}: no cell tagged 'parameters'")
    return nb



def _hide_injected(nb: Any) -> None:
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell["metadata"]["tags"] = [*tags, "remove-cell"]


#: Thread pools of the kernels' numerical libraries: one thread each unless the user set them.
#: The build already runs ``--jobs`` kernels side by side; BLAS / OpenMP pools on top of that
#: oversubscribe the cores (scikit-learn's many small fits run ~20x slower on a shared 2-core machine).
KERNEL_THREAD_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextmanager
def _kernel_env() -> Iterator[None]:
    """Set :data:`KERNEL_THREAD_VARS` to 1 where unset while a kernel starts (it inherits the
    environment); restore the environment afterwards."""
    added = [v for v in KERNEL_THREAD_VARS if v not in os.environ]
    for v in added:
        os.environ[v] = "1"
    try:
        yield
    finally:
        for v in added:
            os.environ.pop(v, None)


def _ipc_kernel_manager() -> type:
    """An ``AsyncKernelManager`` whose kernel talks over unix sockets in a private temporary
    folder, so kernels started at once by parallel builds (and parallel test workers) never
    race for the same TCP ports or socket names."""
    import shutil
    import tempfile

    from jupyter_client import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return os.path.join(tempfile.mkdtemp(prefix="probeguard-kernel-"), "k")

        def cleanup_ipc_files(self) -> None:
            super().cleanup_ipc_files()
            shutil.rmtree(os.path.dirname(self.ip), ignore_errors=True)

    from probeguard_core.book import kernels

    return kernels.manager_class(IPCKernelManager)


#: Errors after which a notebook is run once more on a fresh kernel (a lost kernel message or a
#: dead kernel, not an error in the notebook's code).
_RETRYABLE = ("CellTimeoutError", "DeadKernelError", "TimeoutError", "RuntimeError: Kernel died")


def _run_papermill(source: Path, output: Path, parameters: dict[str, Any], cwd: Path, timeout_s: int) -> str:
    """One papermill run of a freshly read source; returns "" on success, else the error line."""
    import papermill as pm

    nb = read_source(source)
    try:
        with _kernel_env():
            pm.execute_notebook(
                nb,
                str(output),
                parameters=parameters,
                kernel_name=KERNEL,
                cwd=str(cwd),
                progress_bar=False,
                log_output=False,
                execution_timeout=timeout_s,
                report_mode=False,
                kernel_manager_class=_ipc_kernel_manager(),
                shutdown_kernel="immediate",  # every output is in: no graceful wait (about 1 s a notebook)
                # the executed notebook is written once, at the end or at a failing cell, not after
                # every cell (the certification page's 1.2 MB notebook: 42 writes, 0.9 s)
                request_save_on_cell_execute=False,
            )
    except pm.PapermillExecutionError as exc:
        return f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except Exception as exc:  # a setup failure (bad source, kernel did not start), a timeout
        return f"{type(exc).__name__}: {exc}"
    return ""


def execute_notebook(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    parameters: dict[str, Any],
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: int | None = None,
) -> NotebookResult:
    """Run one jupytext notebook with papermill; write the executed ``.ipynb`` to ``output``.

    Never raises for a failing cell: the result carries ``ok=False`` and the error line
    (``ExceptionName: message`` and the failing cell's number).  A cell that exceeds
    ``timeout_s`` (default: ``$PROBEGUARD_CELL_TIMEOUT`` or 600 s) or a kernel that dies is
    retried once on a fresh kernel."""
    import nbformat

    source, output = Path(source), Path(output)
    name = source.stem
    output.parent.mkdir(parents=True, exist_ok=True)
    if timeout_s is None:
        timeout_s = int(os.environ.get("PROBEGUARD_CELL_TIMEOUT", "600"))
    t0 = time.perf_counter()
    try:
        read_source(source)
    except Exception as exc:  # a bad source is not worth a retry
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = _run_papermill(source, output, parameters, Path(cwd or repo_root()), timeout_s)
        if error.startswith(_RETRYABLE):
            print(f"  {name}: {error.splitlines()[0]}; retrying once on a fresh kernel", flush=True)
            error = _run_papermill(source, output, parameters, Path(cwd or repo_root()), timeout_s)
    wall = time.perf_counter() - t0
    if output.exists():
        executed = nbformat.read(output, as_version=4)
        _hide_injected(executed)
        pm_meta = executed.metadata.get("papermill", {})
        for key in ("input_path", "output_path"):  # no build-machine path in the executed notebook
            if isinstance(pm_meta.get(key), str) and pm_meta[key].startswith("/"):
                pm_meta[key] = repo_relative(pm_meta[key], Path(cwd or repo_root()))
        nbformat.write(executed, output)
    return NotebookResult(name, not error, wall, output, error)


def _worker(args: tuple[str, str, dict[str, Any], str]) -> NotebookResult:
    source, output, params, cwd = args
    os.environ.setdefault("PROBEGUARD_REPO_ROOT", cwd)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return execute_notebook(source, output, params, cwd=cwd)


def run_notebooks(
    release: str | os.PathLike[str],
    *,
    jobs: int = 2,
    only: Sequence[str] | None = None,
    params: dict[str, Any] | None = None,
    generated: str | os.PathLike[str] | None = None,
    root: Path | None = None,
    per_notebook: dict[str, dict[str, Any]] | None = None,
    warm_report: list[tuple[str, float, str | None]] | None = None,
) -> list[NotebookResult]:
    """Execute the registered notebooks (all, or ``only`` those) in parallel; return their results
    in registry order. Each gets ``release``, ``output_dir = <generated>/<name>`` and ``params``
    (then ``per_notebook[name]``).  When two or more of them read the main cells' shared tables,
    those are computed first (:func:`_warm_tasks`); ``warm_report`` receives ``(cell, seconds,
    error)`` for each."""
    root = root or repo_root()
    entries = load_registry(root)
    known = [e.name for e in entries]
    if only:
        bad = [n for n in only if n not in known]
        if bad:
            raise ValueError(f"--only: unknown notebook(s) {bad}; registered: {known}")
        entries = [e for e in entries if e.name in only]
    rel_path = resolve_release(release, root)
    gen = Path(generated) if generated else root / GENERATED
    gen.mkdir(parents=True, exist_ok=True)
    tasks = []
    for e in entries:
        # repository-relative paths (when inside it), so executed notebooks hold no build-machine path
        p = {"release": repo_relative(rel_path, root), **(params or {}), **((per_notebook or {}).get(e.name, {}))}
        p["output_dir"] = repo_relative(gen / e.name, root)
        tasks.append((str(root / e.source), str(gen / f"{e.name}.ipynb"), p, str(root)))
    # Heaviest first (registry ``weight``, stable): the pool then finishes sooner (longest-processing-time
    # order); results are still returned in registry order.
    weight = {e.name: e.weight for e in entries}
    tasks.sort(key=lambda t: -weight[Path(t[0]).stem])
    results: dict[str, NotebookResult] = {}
    # RUN_LAST notebooks read what the others wrote: a second batch, after the first finished
    batches = [[t for t in tasks if Path(t[0]).stem not in RUN_LAST], [t for t in tasks if Path(t[0]).stem in RUN_LAST]]
    warm = _warm_tasks(rel_path, entries, params or {}) if jobs > 1 else []  # serial: the first page stores them
    _run_batches([b for b in batches if b], jobs, results, warm, warm_report)
    return [results[e.name] for e in entries]


def _warm_tasks(rel_path: Path, entries: Sequence[NotebookEntry], params: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """``(release, dataset, backbone, seed)`` per main cell when two or more of ``entries`` read the
    shared per-question tables (registry ``cell_tables``) and the artifact cache is on; else none.

    Those pages run at the same time in a parallel build; computing the tables first, in one
    worker of the same pool (:func:`_warm_all`), means each cell's records are read once instead
    of once per page (the cache's lock makes a page that gets there first wait for, not redo, a
    cell's tables)."""
    from probeguard_core import SEED, cache
    from probeguard_core.release import load_release

    if sum(e.cell_tables for e in entries) < 2 or not cache.cache_enabled():
        return []
    rel = load_release(rel_path, verify=False)  # only the cell list; the tables are keyed by the files' own sha256
    seed = int(params.get("seed", SEED))
    return [(str(rel_path), c.dataset, c.backbone, seed) for c in rel.main_cells()]


def _warm_worker(task: tuple[str, str, str, int]) -> tuple[str, float, str | None]:
    """Compute one cell's shared tables into the artifact cache (:func:`tables.warm.warm_cell_tables`);
    returns ``(cell, seconds, error or None)``.  A failure is reported, not raised: the pages that
    need the cell read it themselves and show the error where the reader sees it."""
    for v in KERNEL_THREAD_VARS:  # a worker process of the build: one BLAS / OpenMP thread, as in the kernels
        os.environ.setdefault(v, "1")
    release, dataset, backbone, seed = task
    t0 = time.perf_counter()
    try:
        from probeguard_core.release import load_release
        from probeguard_core.tables.warm import warm_cell_tables

        warm_cell_tables(load_release(release, verify=False).cell(dataset, backbone), seed=seed)
    except Exception as exc:  # noqa: BLE001 - reported; the notebooks raise it again in context
        return f"{dataset}/{backbone}", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
    return f"{dataset}/{backbone}", time.perf_counter() - t0, None


#: Notebooks that read the other notebooks' outputs (the departures page): run after them.
RUN_LAST: tuple[str, ...] = ("departures",)


def _warm_all(tasks: Sequence[tuple[str, str, str, int]]) -> list[tuple[str, float, str | None]]:
    """:func:`_warm_worker` for every task, one after the other, in one worker: the tables' imports
    (pandas, scikit-learn, the readers) are paid once, and the other workers start the pages
    that need none of these tables meanwhile.  After the first cell, what it imported is frozen
    out of the garbage collector (as in the kernels' zygote): the full collections each cell's
    records set off then walk only that cell's objects, not every imported module (about 3 s of
    the eight main cells' 23 s).  The worker's environment is restored afterwards (scikit-learn's
    import sets ``KMP_*`` variables): the kernels it starts next get what they would have got
    without these tables, and share the other workers' zygote."""
    import gc

    env = dict(os.environ)
    done = []
    try:
        for i, t in enumerate(tasks):
            done.append(_warm_worker(t))
            if i == 0:
                gc.collect()
                gc.freeze()
    finally:
        os.environ.clear()
        os.environ.update(env)
    return done


def _run_batches(batches: list[list[tuple[str, str, dict[str, Any], str]]], jobs: int,
                 results: dict[str, NotebookResult], warm: Sequence[tuple[str, str, str, int]] = (),
                 warm_report: list[tuple[str, float, str | None]] | None = None) -> None:
    """Run the ``warm`` tasks (:func:`_warm_tasks`, together in one worker: :func:`_warm_all`), then
    the batches one after the other, each in parallel, on one pool of worker processes (the
    workers share one warm kernel zygote, :mod:`probeguard_core.book.kernels`, for all).  The first
    batch is queued behind the warm tasks, not after them: the other workers start notebooks."""
    if jobs <= 1 or max(map(len, batches), default=0) <= 1:
        for t in (t for batch in batches for t in batch):
            r = _worker(t)
            results[r.name] = r
            _report(r)
        return
    import multiprocessing as mp
    import shutil
    import tempfile

    from probeguard_core.book import kernels

    # the workers share one kernel zygote (kernels.share_zygotes): its imports are paid once
    share = tempfile.mkdtemp(prefix="probeguard-zygote-")
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=kernels.share_zygotes,
                                 initargs=(share,)) as pool:
            warming = [pool.submit(_warm_all, list(warm))] if warm else []
            for i, batch in enumerate(batches):
                futures = [pool.submit(_worker, t) for t in batch]
                for f in as_completed([*warming, *futures] if i == 0 else futures):
                    if f in warming:
                        for w in f.result():
                            _report_warm(*w)
                            if warm_report is not None:
                                warm_report.append(w)
                        continue
                    r = f.result()
                    results[r.name] = r
                    _report(r)
    finally:
        shutil.rmtree(share, ignore_errors=True)


def _report_warm(label: str, wall_s: float, error: str | None) -> None:
    status = "ok" if error is None else f"not stored ({error}); the pages compute it"
    print(f"  {'tables of ' + label:<28s} {wall_s:7.1f} s  {status}", flush=True)


def _report(r: NotebookResult) -> None:
    status = "ok" if r.ok else f"FAILED: {r.error}"
    print(f"  {r.name:<28s} {r.wall_s:7.1f} s  {status}", flush=True)


# --------------------------------------------------------------------------- jupyter-book
def _banner_markdown(release_path: Path) -> str:
    """The banner of the landing and method pages (``{{ provenance_banner }}``): Release.describe's
    wording, as on a notebook page that shows numbers of the release."""
    from probeguard_core.release import load_release

    rel = load_release(release_path, verify=False)
    kind = "warning" if rel.is_simulated else "note"
    title = ("Simulated release: " if rel.is_simulated else "Release: ") + rel.name
    return f"```{{admonition}} {title}\n:class: {kind} probeguard-provenance\n\n{rel.describe('numbers')}\n```\n"


def page_title(root: Path, name: str) -> str:
    """The title of notebook ``name``'s page: the first ``# `` heading of ``notebooks/<name>.md``."""
    for line in (root / "notebooks" / f"{name}.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise BuildError(f"notebooks/{name}.md: no '# ' heading, so its page has no title")


def page_links(root: Path, built: Sequence[str] | None = None) -> dict[str, str]:
    """``{{ link.<name> }}`` for the landing page: a link to notebook ``name``'s page (``{doc}``, its
    title as the text) when this build has the page, else its title as plain text, so a build of
    only some notebooks (``--only``) leaves no dead link on the landing page."""
    names = [e.name for e in load_registry(root)]
    keep = set(names if built is None else built)
    return {n: f"{{doc}}`/{GENERATED.as_posix()}/{n}`" if n in keep else f"*{page_title(root, n)}* (not in this build)"
            for n in names}


def _filtered_toc(toc: dict[str, Any], keep: set[str]) -> dict[str, Any]:
    """Drop the notebook pages (``book/_generated/<name>``) not in ``keep``, and the parts left empty."""

    def walk(items: list[Any]) -> list[Any]:
        out = []
        for item in items:
            f = str(item.get("file", ""))
            if f.startswith(GENERATED.as_posix() + "/") and f.split("/")[-1] not in keep:
                continue
            out.append(dict(item))
        return out

    new = dict(toc)
    if "chapters" in toc:
        new["chapters"] = walk(toc["chapters"])
    if "parts" in toc:
        parts = [{**p, "chapters": walk(p.get("chapters", []))} for p in toc["parts"]]
        new["parts"] = [p for p in parts if p["chapters"]]  # an empty part is a malformed toc
    return new


def build_book(
    release: str | os.PathLike[str],
    *,
    root: Path | None = None,
    only: Sequence[str] | None = None,
    quiet: bool = True,
) -> Path:
    """``jupyter-book build`` with warnings as errors, execution off, into ``_build/html``."""
    root = root or repo_root()
    build = root / "_build"
    build.mkdir(exist_ok=True)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    subs = config.setdefault("parse", {}).setdefault("myst_substitutions", {})
    subs["provenance_banner"] = _banner_markdown(resolve(release, root))
    from probeguard_core.release import load_release

    subs["release_summary"] = load_release(resolve(release, root), verify=False).summary()
    # {{ ours.<notebook>.<key> }} on the landing page: the number that notebook wrote to results.json
    from probeguard_core.book.prose import results_substitutions

    subs["ours"] = results_substitutions(root, root / GENERATED)
    subs["link"] = page_links(root, only)
    cfg_path = build / "_config.generated.yml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    cmd = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(root),
        "--config", str(cfg_path), "-W", "-n", "--keep-going", "--all",
    ]
    if only:
        toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
        toc_path = build / "_toc.generated.yml"
        toc_path.write_text(yaml.safe_dump(_filtered_toc(toc, set(only)), sort_keys=False), encoding="utf-8")
        cmd += ["--toc", str(toc_path)]
    if quiet:
        cmd.append("-q")
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise BuildError(f"jupyter-book build failed (exit {proc.returncode}):\n{tail}")
    return build / "html"


def _pdf(root: Path, html: Path, only: Sequence[str] | None) -> None:
    """The PDF of the book (probeguard_core.book.pdf); a missing Chromium is a warning, not an error."""
    from probeguard_core.book import pdf

    if pdf.find_chromium() is None:
        print(f"book.build: warning: Chromium not found, {pdf.PDF_NAME} not built (the landing page shows no PDF link "
              "until `python -m probeguard_core.book.pdf` runs with chromium installed)", file=sys.stderr)
        return
    t0 = time.perf_counter()
    try:
        out = pdf.build_pdf(root, html, toc=root / "_build" / "_toc.generated.yml" if only else None)
    except pdf.PDFError as exc:
        raise BuildError(str(exc)) from exc
    print(f"pdf: {time.perf_counter() - t0:.1f} s -> {out}", flush=True)


def check_release(release: str | os.PathLike[str], root: Path | None = None) -> Path:
    """Validate the book's input before any notebook runs (issue 25): the release's manifest,
    every cell folder, the sha256 of every file and no file outside the manifest
    (:func:`probeguard_core.release.load_release` with ``verify``).  A fault raises one
    ``ValueError`` naming it (``book.build: error: ...``, exit 2), before ``book/_generated`` is touched."""
    from probeguard_core.release import load_release

    path = resolve_release(release, root)
    load_release(path, verify=True)
    return path


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.book.build", description=__doc__.split("\n")[0])
    ap.add_argument("--release", required=True, help="release folder (absolute or relative to the repo root)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="notebooks run in parallel")
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this notebook (repeatable)")
    ap.add_argument("--params-json", default=None, help='extra parameters for every notebook, e.g. \'{"n_splits": 3}\'')
    ap.add_argument("--no-html", action="store_true", help="execute the notebooks but skip jupyter-book")
    ap.add_argument("--no-pdf", action="store_true", help="skip the PDF of the whole book (probeguard_core.book.pdf)")
    args = ap.parse_args(argv)
    try:
        params = json.loads(args.params_json) if args.params_json else {}
        if not isinstance(params, dict):
            raise ValueError("--params-json must be a JSON object")
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        root = repo_root()
        check_registry(root, strict=not args.only)
        release = resolve(args.release)
        check_release(release, root)
        t0 = time.perf_counter()
        print(f"executing notebooks ({args.jobs} in parallel) on {release}", flush=True)
        results = run_notebooks(release, jobs=args.jobs, only=args.only, params=params, root=root)
        t_nb = time.perf_counter() - t0
        failed = [r for r in results if not r.ok]
        print(f"notebooks: {len(results) - len(failed)} ok, {len(failed)} failed, {t_nb:.1f} s wall", flush=True)
        if failed:
            lines = "\n".join(f"  {r.name}: {r.error} (see {r.output})" for r in failed)
            raise BuildError(f"{len(failed)} notebook(s) failed:\n{lines}")
        if not args.no_html:
            t1 = time.perf_counter()
            html = build_book(release, root=root, only=args.only)
            print(f"jupyter-book: {time.perf_counter() - t1:.1f} s -> {html}/index.html", flush=True)
            if not args.no_pdf:
                _pdf(root, html, args.only)
        print(f"total {time.perf_counter() - t0:.1f} s", flush=True)
    except (BuildError, ValueError, json.JSONDecodeError) as exc:
        print(f"book.build: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
