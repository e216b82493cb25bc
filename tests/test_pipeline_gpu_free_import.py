"""Importing the pipeline and using its retrieval index touches no GPU (issue 26).

``import bm25s`` runs a JAX call when JAX is installed, and JAX's default backend preallocates
75 % of a GPU's memory; the retrieval module imports ``bm25s`` with JAX confined to the CPU
(:func:`probeguard_core.pipeline.retrieval._bm25s`).  Each check runs in a fresh interpreter, so
nothing imported by other tests hides a first import.  A stand-in ``jax`` package (which records
the ``JAX_PLATFORMS`` it was imported under) checks the mechanism on any machine; the real JAX
and CUDA checks run where those exist and say why not where they do not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# import every pipeline module, build and query a small BM25 index, then report
PROBE = textwrap.dedent("""
    import importlib, json, os, pkgutil, sys
    sys.path.insert(0, {tests!r})
    import probeguard_core.pipeline as pkg
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module("probeguard_core.pipeline." + m.name)
    from probeguard_core.pipeline.retrieval import BM25Index
    from probeguard_core.questions import load_corpus
    import tiny_models as tm
    index = BM25Index.build(load_corpus(tm.write_corpus({corpus!r}, 20)))
    index.save({index!r}); BM25Index.load({index!r}).search("fever cough")
    out = {{"env_after": os.environ.get("JAX_PLATFORMS"), "jax_imported": "jax" in sys.modules}}
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "SEEN_PLATFORMS"):  # the stand-in
        out["jax_saw"] = jax.SEEN_PLATFORMS
    elif jax is not None:  # the real JAX: which backends did the import initialise?
        from jax._src import xla_bridge
        out["jax_backends"] = sorted(getattr(xla_bridge, "_backends", {{}}))
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
        out["cuda_allocated"] = sys.modules["torch"].cuda.memory_allocated()
    print("RESULT " + json.dumps(out))
""")

FAKE_JAX = {
    "__init__.py": "import os\nSEEN_PLATFORMS = os.environ.get('JAX_PLATFORMS')\nfrom . import lax\n",
    "lax.py": "import numpy as np\n\ndef top_k(x, k):\n    x = np.asarray(x)\n    i = np.argsort(-x)[:k]\n"
              "    return x[i], i\n",
}


def _run(tmp_path: Path, extra_path: Path | None = None, env: dict[str, str] | None = None) -> dict:
    code = PROBE.format(tests=str(ROOT / "tests"), corpus=str(tmp_path / "corpus.jsonl"), index=str(tmp_path / "index"))
    e = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra_path) if extra_path else "", str(ROOT),
                                                   e.get("PYTHONPATH", "")) if p)
    res = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _fake_jax(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "jax").mkdir(parents=True)
    for name, text in FAKE_JAX.items():
        (site / "jax" / name).write_text(text, encoding="utf-8")
    return site


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="a real JAX is installed (the next test)")
def test_bm25s_imports_jax_confined_to_the_cpu(tmp_path):
    site = _fake_jax(tmp_path)
    out = _run(tmp_path, site)
    assert out["jax_imported"] and out["jax_saw"] == "cpu"  # bm25s imported JAX with JAX_PLATFORMS=cpu
    assert out["env_after"] is None  # and the variable is not left for child processes
    mine = _run(tmp_path, site, env={"JAX_PLATFORMS": "cuda"})
    assert mine["jax_saw"] == "cuda" and mine["env_after"] == "cuda"  # a user's explicit choice stands


def test_pipeline_import_initialises_no_gpu(tmp_path):
    out = _run(tmp_path)
    if "jax_backends" in out:
        assert all(b == "cpu" for b in out["jax_backends"]), out
    assert out["env_after"] is None
    if "cuda_allocated" not in out:
        pytest.skip("no CUDA device here: the torch.cuda.memory_allocated() == 0 check needs one "
                    f"(JAX {'checked' if 'jax_backends' in out else 'not installed'})")
    assert out["cuda_allocated"] == 0
