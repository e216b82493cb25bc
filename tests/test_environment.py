"""environment.yml stays in step with pyproject.toml and the lock that `make` installs."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("sync_env", ROOT / "tools" / "sync_env.py")
sync_env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync_env)


def test_environment_files_are_generated_from_pyproject_and_lock():
    for path, text in sync_env.targets().items():
        assert path.read_text() == text, f"{path.name} is stale: run python tools/sync_env.py"


def test_environment_lists_every_direct_dependency_at_its_locked_version():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed: dict[str, str] = {}
    for dep in env["dependencies"]:
        entries = dep["pip"] if isinstance(dep, dict) else [dep]
        for entry in entries:
            m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==(\S+)", entry)
            if m:
                listed[m.group(1).lower()] = m.group(2)
    conda_to_pypi = {v: k for k, v in sync_env.CONDA_NAMES.items()}
    listed = {conda_to_pypi.get(k, k): v for k, v in listed.items()}
    pins = sync_env.locked_versions()
    for name in sync_env.direct_dependencies():
        assert name in listed, f"{name} is in pyproject.toml but not in environment.yml"
        assert listed[name] == pins[name], f"{name}: environment.yml {listed[name]} != lock {pins[name]}"


def test_lock_pins_cpu_torch_and_never_vllm():
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    assert re.search(r"^torch==2\.13\.0(\+cpu)?$", lock, re.M)
    assert "vllm" not in lock.lower()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("vllm") for r in project["optional-dependencies"]["gpu"])
    assert not any("vllm" in r for r in project["optional-dependencies"]["test"])
