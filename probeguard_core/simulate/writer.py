"""Write the simulated release (DESIGN 2.7): cells, manifest, datasheet.

``simulate_release(out)`` writes ``out/<dataset>/<backbone-slug>/{logs,probe,nli,self_report}.jsonl.gz``
for every cell of :data:`params.CELLS`, validates each file with the foundation's readers,
renders ``DATASHEET.md`` and writes ``manifest.json`` (sha256 of every file) with
:func:`probeguard_core.release.write_manifest`.  Everything is a function of the parameter
file and the seed, so the same command reproduces the release bit for bit.

The probe-pilot marker (DESIGN 2.1 ``probe_pilot``, §5.2) is drawn by :func:`mark_probe_pilot`
from its own random stream (``params.rng_for("probe_pilot", cell)``) after a cell is simulated,
so marking it changes no other simulated value.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core import logs as L
from probeguard_core.release import write_manifest
from probeguard_core.simulate import bank as B
from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import model as M
from probeguard_core.simulate import params as P

RELEASE_NAME = "simulated-v1"
COMMAND = "probeguard simulate --out data/simulated-v1"


@dataclass
class CellData:
    """One simulated cell: JSON-ready records plus the latent truth (never written)."""

    cell: str
    dataset: str
    backbone: str
    role: str
    logs: list[dict[str, Any]]
    probe: list[dict[str, Any]]
    nli: list[dict[str, Any]]
    self_report: list[dict[str, Any]] | None
    latent: list[dict[str, Any]]


def simulate_cell(cell: str, *, scale: float = 1.0, n: int | None = None, params: dict[str, Any] | None = None,
                  progress: bool = True) -> CellData:
    """Simulate one cell (``"medqa/qwen3-8b"``, ...): the first ``n`` (or ``scale`` x size) questions of its bank.

    Question ``i`` depends only on the seed, the cell and ``i``, so a scaled cell is a prefix of the full one.
    """
    params = params or P.load_params()
    path, dataset, backbone, role = P.cell_spec(cell)
    n = P.cell_size(cell, params, scale) if n is None else int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cal = CA.calibrate_cell(cell, params)
    cp = params["cells"][cell]
    augment = role == "augment"
    with_sr = bool(P.v(cp.get("self_report", {"value": False, "source": "-"})))
    labelled: frozenset[int] = frozenset()
    if dataset == "medqa" and not augment:
        labelled = B.labelled_indices(dataset, int(P.v(cp["n_questions"])), int(P.v(params["specialties"]["n_labelled"])))
    logs, probe, nli, srs, latent = [], [], [], [], []
    for i in tqdm(range(n), desc=f"simulate {cell}", disable=not progress, leave=False):
        q = B.make_question(dataset, i, params, labelled=i in labelled, pool="-augment" if augment else "")
        sim = M.simulate_question(q, cell, params, cal, rng=P.rng_for("simulate", cell, i), with_self_report=with_sr,
                                  dataset=dataset, backbone=backbone, condition_unanimous=augment)
        logs.append(sim.log)
        probe.extend(sim.probe)
        nli.extend(sim.nli)
        if sim.self_report is not None:
            srs.append(sim.self_report)
        latent.append({"qid": q.qid, **sim.latent})
    mark_probe_pilot(cell, logs, params, scale=n / max(P.cell_size(cell, params), 1))
    return CellData(cell, dataset, backbone, role, logs, probe, nli, srs if with_sr else None, latent)


def _unanimous_first_round(log: dict[str, Any]) -> bool:
    answers = {c["answer"] for c in log["rounds"][0]["candidates"]}
    return len(answers) == 1 and None not in answers


def mark_probe_pilot(cell: str, logs: list[dict[str, Any]], params: dict[str, Any], scale: float = 1.0) -> None:
    """Set DESIGN 2.1 ``probe_pilot`` on every log of a cell whose parameters name a pilot (§5.2).

    ``probe_pilot`` questions (``round(value x scale)``, at least 1) are drawn without
    replacement among the cell's first-round-unanimous questions (the ones the probe runs on) by
    ``params.rng_for("probe_pilot", cell)``, a stream no other simulated value reads; every
    other log of the cell gets ``probe_pilot = false``.  Cells without the parameter are left
    unmarked (the field is absent).
    """
    node = params["cells"][cell].get("probe_pilot")
    if node is None:
        return
    pool = [i for i, g in enumerate(logs) if _unanimous_first_round(g)]
    k = min(len(pool), max(1, int(round(int(P.v(node)) * scale))))
    chosen = set(P.rng_for("probe_pilot", cell).choice(len(pool), size=k, replace=False).tolist()) if pool else set()
    pilot = {pool[j] for j in chosen}
    for i, g in enumerate(logs):
        g["probe_pilot"] = i in pilot


def write_cell(out: str | Path, data: CellData) -> dict[str, Path]:
    """Write one cell's artifacts (gzip JSONL) and read every file back with the strict readers."""
    folder = Path(out) / data.cell
    paths = {"logs": L.write_jsonl(folder / "logs.jsonl.gz", data.logs)}
    if data.probe:
        paths["probe"] = L.write_jsonl(folder / "probe.jsonl.gz", data.probe)
    if data.nli:
        paths["nli"] = L.write_jsonl(folder / "nli.jsonl.gz", data.nli)
    if data.self_report is not None:
        paths["self_report"] = L.write_jsonl(folder / "self_report.jsonl.gz", data.self_report)
    logs = L.read_logs(paths["logs"])
    if "probe" in paths:
        L.read_probe(paths["probe"], logs=logs)
    if "nli" in paths:
        L.read_nli(paths["nli"], logs=logs)
    if "self_report" in paths:
        L.read_self_report(paths["self_report"])
    return paths


def _simulate_and_write(root: Path, cell: str, scale: float, progress: bool) -> str:
    """One cell, simulated and written (a worker of :func:`simulate_release`)."""
    write_cell(root, simulate_cell(cell, scale=scale, progress=progress))
    return cell


def simulate_release(out: str | Path, cells: list[str] | None = None, seed: int = SEED, scale: float = 1.0,
                     *, progress: bool = True, resume: bool = False, jobs: int | None = None) -> Path:
    """Generate the release into ``out``; returns the manifest path.

    ``cells`` restricts to some of :data:`params.CELLS` (paths such as ``"medqa/huatuogpt-o1-8b"``);
    ``resume`` keeps cells whose logs file already exists (an interrupted run continues).
    ``jobs`` cells are simulated at once in worker processes (default: every core); each cell
    depends only on the seed, its name and the parameters, so the bytes do not depend on ``jobs``.
    """
    if seed != SEED:
        raise ValueError(f"seed must be probeguard_core.SEED ({SEED}); the simulator derives every stream from it, got {seed}")
    params = P.load_params()
    chosen = [c[0] for c in P.CELLS] if cells is None else list(cells)
    for c in chosen:
        P.cell_spec(c)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    todo = [c for c in chosen if not (resume and (root / c / "logs.jsonl.gz").exists())]
    jobs = max(1, min(len(todo), jobs or os.cpu_count() or 1))
    bar = tqdm(total=len(todo), desc="cells", disable=not progress)
    if jobs == 1:
        for cell in todo:
            _simulate_and_write(root, cell, scale, progress)
            bar.update()
    else:
        # spawn, not fork: the parent may hold threads (progress bars), which fork does not copy safely
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_simulate_and_write, root, cell, scale, False) for cell in todo]
            try:
                for fut in as_completed(futures):
                    fut.result()
                    bar.update()
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    bar.close()
    from probeguard_core.simulate.datasheet import render_datasheet

    (root / "DATASHEET.md").write_text(render_datasheet(root, chosen, params, scale), encoding="utf-8")
    spec = []
    for cell in chosen:
        _, dataset, backbone, role = P.cell_spec(cell)
        spec.append({"dataset": dataset, "backbone": backbone, "path": cell, "role": role})
    command = COMMAND if (cells is None and scale == 1.0) else (
        "probeguard simulate --out OUT" + "".join(f" --cells {c}" for c in (cells or []))
        + (f" --scale {scale}" if scale != 1.0 else ""))
    name = RELEASE_NAME if (cells is None and scale == 1.0) else f"{RELEASE_NAME}-partial"
    return write_manifest(root, name=name, provenance="simulated", seed=SEED, cells=spec,
                          extra={"generator": "probeguard_core.simulate", "generator_version": params["generator_version"],
                                 "command": command, "scale": scale})
