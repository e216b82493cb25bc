"""Warm kernels forked from a zygote (probeguard_core.book.kernels, issue 15): a notebook runs
the same in a forked kernel as in a fresh one, kernels share no namespace, a dead kernel is
seen as dead, and a different environment gets its own zygote."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import nbformat
import pytest

from probeguard_core.book import build as bb
from probeguard_core.book import kernels

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not kernels.enabled(), reason="needs os.fork and os.pidfd_open")]

PROBE = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

```{code-cell} ipython3
:tags: [parameters]

tag = "none"
leave = False
die = False
```

```{code-cell} ipython3
import json, os, random, sys
seen_before = "left_behind" in globals()
if leave:
    left_behind = 1
if die:
    os._exit(3)
import matplotlib.pyplot as plt
import pandas as pd
from tqdm.auto import tqdm
backend = plt.get_backend()  # resolving it hooks matplotlib_inline into this kernel
hooks = sorted(getattr(f, "__qualname__", repr(f)) for f in get_ipython().events.callbacks["post_execute"])
wide = pd.DataFrame([range(30)], columns=[f"column_{i}" for i in range(30)])
print(json.dumps({"max_columns": pd.get_option("display.max_columns"), "tqdm": tqdm.__module__, "backend": backend,
                  "post_execute": hooks, "wide_repr": repr(wide), "tag": tag, "pid": os.getpid(), "ppid": os.getppid(), "seen_before": seen_before,
                  "random": random.random(), "cwd": os.getcwd(), "argv0": os.path.basename(sys.argv[0]),
                  "env": os.environ.get("PROBEGUARD_KERNEL_TEST", ""), "pgid_is_pid": os.getpgid(0) == os.getpid(),
                  "current_test": os.environ.get("PYTEST_CURRENT_TEST")}))
```
"""


def _run(tmp_path: Path, name: str, **params: object) -> tuple[bb.NotebookResult, dict]:
    src = tmp_path / "probe.md"
    src.write_text(textwrap.dedent(PROBE), encoding="utf-8")
    res = bb.execute_notebook(src, tmp_path / f"{name}.ipynb", {"tag": name, **params}, cwd=tmp_path, timeout_s=120)
    if not res.ok:
        return res, {}
    nb = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
    out = next(o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("name") == "stdout")
    return res, json.loads(out["text"])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A working folder whose zygote the tests that need only *a* zygote share (a start is about
    4 s; a zygote serves one folder): none left from an earlier module at the start, closed at the end."""
    kernels._close_current()
    kernels._current = None
    yield tmp_path_factory.mktemp("shared-zygote")
    kernels._close_current()
    kernels._current = None


@pytest.fixture
def fresh_zygote(monkeypatch):
    """No zygote left from an earlier test of this process; the one made here is closed after."""
    kernels._close_current()
    monkeypatch.setattr(kernels, "_current", None)
    yield
    kernels._close_current()
    kernels._current = None


def test_split_cmd_only_takes_the_ipykernel_launcher():
    py = "/x/python"
    assert kernels._split_cmd([py, "-m", "ipykernel_launcher", "-f", "c.json"]) == ([py], ["-f", "c.json"])
    assert kernels._split_cmd([py, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "c"]) == (
        [py, "-Xfrozen_modules=off"], ["-f", "c"])
    assert kernels._split_cmd([py, "-m", "other_kernel", "-f", "c"]) is None
    assert kernels._split_cmd([py, "-u", "-m", "ipykernel_launcher", "-f", "c"]) is None  # a flag we do not replay
    assert kernels._split_cmd(["/usr/bin/R", "--slave"]) is None


def test_forked_kernels_are_fresh_namespaces_of_one_zygote(shared):
    r1, a = _run(shared, "first", leave=True)
    r2, b = _run(shared, "second")
    assert r1.ok and r2.ok, (r1.error, r2.error)
    z = kernels._current
    assert z is not None and z.ready
    # both kernels are children of the one zygote, each its own process and process group
    assert a["ppid"] == b["ppid"] == z.proc.pid
    assert a["pid"] != b["pid"] and a["pgid_is_pid"] and b["pgid_is_pid"]
    # nothing of the first notebook's namespace in the second; the generators re-seeded per kernel
    assert not b["seen_before"]
    assert a["random"] != b["random"]
    # what ipykernel_launcher would have: the working folder and the launcher as argv[0]
    assert a["cwd"] == str(shared) and a["argv0"] == "ipykernel_launcher.py"


def test_forked_kernel_matches_a_fresh_kernel(shared, monkeypatch):
    r1, forked = _run(shared, "forked")
    monkeypatch.setenv("PROBEGUARD_FORK_KERNELS", "0")
    r2, fresh = _run(shared, "fresh")
    assert r1.ok and r2.ok
    assert forked["ppid"] == kernels._current.proc.pid
    assert fresh["ppid"] == os.getpid()  # the usual launch: a child of this process
    # and what libraries decide at import from running under a kernel
    keep = ("seen_before", "cwd", "argv0", "env", "pgid_is_pid", "max_columns", "tqdm", "backend", "post_execute",
            "wide_repr")
    assert {k: forked[k] for k in keep} == {k: fresh[k] for k in keep}


def test_a_dead_forked_kernel_is_seen_dead_and_retried(shared, capsys):
    res, _ = _run(shared, "dies", die=True)
    assert not res.ok
    assert "DeadKernelError" in res.error or "Kernel died" in res.error, res.error
    assert "retrying once on a fresh kernel" in capsys.readouterr().out
    # the zygote is still serving after its child died
    r, ok = _run(shared, "after")
    assert r.ok and ok["ppid"] == kernels._current.proc.pid


def test_waiting_for_a_forked_kernel_without_a_timeout(shared):
    import signal

    _run(shared, "waits")
    k = kernels._current.fork(["--version"], dict(os.environ))  # ipykernel prints its version and exits
    assert k.wait() == 0 and k.poll() == 0
    k2 = kernels._current.fork(["-f", str(shared / "never.json")], dict(os.environ))
    with pytest.raises(__import__("subprocess").TimeoutExpired):
        k2.wait(timeout=0.2)
    k2.send_signal(signal.SIGKILL)
    assert k2.wait() == -signal.SIGKILL


def test_another_environment_gets_another_zygote_but_not_another_test_name(shared, monkeypatch):
    """A changed variable gets a new zygote (an import-time setting is never stale); pytest's
    PYTEST_CURRENT_TEST, renamed for every test, does not, and each kernel sees its exact value."""
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::one (call)")
    _, a = _run(shared, "a")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::two (call)")
    _, b = _run(shared, "b")
    assert (a["current_test"], b["current_test"]) == ("tests/x.py::one (call)", "tests/x.py::two (call)")
    assert a["ppid"] == b["ppid"]
    monkeypatch.setenv("PROBEGUARD_KERNEL_TEST", "changed")
    _, c = _run(shared, "c")
    assert c["env"] == "changed"
    assert b["ppid"] != c["ppid"] == kernels._current.proc.pid


_BARRIER: object = None  # set in each build worker by _share


def _share(folder: str, barrier: object) -> None:
    """The pool initializer: what run_notebooks gives its workers, plus a barrier."""
    global _BARRIER
    kernels.share_zygotes(folder)
    _BARRIER = barrier


def _task(folder: str, name: str, env: dict[str, str] | None = None) -> tuple[int, int]:
    """A build worker's task: wait for the other worker (each takes one task), then run a
    notebook in ``folder``; returns (this process, the kernel's parent)."""
    _BARRIER.wait(timeout=120)  # type: ignore[attr-defined]
    os.environ.update(env or {})
    res, out = _run(Path(folder), name)
    assert res.ok, res.error
    return os.getpid(), out["ppid"]


@pytest.mark.parametrize("other_env", [False, True], ids=["same-env", "other-env"])
def test_the_build_workers_share_one_zygote(tmp_path, fresh_zygote, other_env):
    """Two worker processes of one build (kernels.share_zygotes, as run_notebooks sets it) fork
    their kernels from one zygote, which exits when both have gone; a worker whose kernels need
    another environment starts its own."""
    import multiprocessing as mp
    import shutil
    import tempfile
    import time
    from concurrent.futures import ProcessPoolExecutor

    share = Path(tempfile.mkdtemp(prefix="pgz-"))  # as run_notebooks makes it (a unix socket's path is short)
    try:
        (tmp_path / "nb").mkdir()
        ctx = mp.get_context("spawn")
        envs = [None, {"PROBEGUARD_KERNEL_TEST": "other"} if other_env else None]
        with ProcessPoolExecutor(2, mp_context=ctx, initializer=_share, initargs=(str(share), ctx.Barrier(2))) as pool:
            (w1, p1), (w2, p2) = pool.map(_task, [str(tmp_path / "nb")] * 2, ["w1", "w2"], envs)
        assert w1 != w2  # one task in each worker
        assert (p1 == p2) != other_env
        info = json.loads((share / "zygote.json").read_text())
        assert info["pid"] in (p1, p2) and info["cwd"] == str(tmp_path / "nb")
        deadline = time.monotonic() + 20  # the workers have exited: so has every zygote, and its socket is gone
        while time.monotonic() < deadline and any(_alive(p) for p in (p1, p2)):
            time.sleep(0.1)
        assert not any(_alive(p) for p in (p1, p2))
        assert not list(share.glob("*.sock"))
    finally:
        shutil.rmtree(share, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) has gone too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_closing_the_zygote_ends_it(tmp_path, fresh_zygote):
    _run(tmp_path, "one")
    z = kernels._current
    kernels._close_current()
    assert z.proc.poll() is not None


class _MissedWakeUps:
    """A kernel socket whose first ``polls`` waits miss a message that is already there (what
    nbclient issue #312 describes), then report it."""

    def __init__(self, polls: int | None):
        self.polls, self.waits = polls, []

    async def poll(self, timeout_ms: int) -> int:
        import asyncio

        self.waits.append(timeout_ms)
        await asyncio.sleep(timeout_ms / 1000)
        return 0 if self.polls is None or len(self.waits) <= self.polls else 1


def _channel(sock: _MissedWakeUps) -> kernels.SlicedPollChannel:
    ch = object.__new__(kernels.SlicedPollChannel)
    ch.socket = sock

    async def recv() -> dict:
        return {"msg_type": "execute_reply"}

    ch._recv = recv
    return ch


def test_a_missed_wake_up_costs_one_slice_not_the_timeout(monkeypatch):
    import asyncio
    import time
    from queue import Empty

    monkeypatch.setattr(kernels, "POLL_SLICE_S", 0.05)
    sock = _MissedWakeUps(polls=2)
    t = time.monotonic()
    assert asyncio.run(_channel(sock).get_msg(timeout=60))["msg_type"] == "execute_reply"
    assert time.monotonic() - t < 5 and sock.waits == [50, 50, 50]
    # no message at all: Empty once the whole timeout has passed, as before
    sock = _MissedWakeUps(polls=None)
    t = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(_channel(sock).get_msg(timeout=0.2))
    assert time.monotonic() - t >= 0.2 and len(sock.waits) >= 4


def test_book_kernels_use_the_sliced_poll_client():
    km = bb._ipc_kernel_manager()(kernel_name="python3")
    kc = km.client()
    assert isinstance(kc, kernels.SlicedPollClient)
    assert kc.shell_channel_class is kc.iopub_channel_class is kernels.SlicedPollChannel


def test_a_zygote_that_declined_is_not_tried_again_for_the_same_kernels():
    z = object.__new__(kernels.Zygote)
    z.prefix, z.cwd, z.env, z.ready = ["/py"], "/w", {"A": "1"}, False
    z.proc = type("Gone", (), {"poll": lambda self: 0})()  # its process has exited
    assert z.serves(["/py"], "/w", {"A": "1", "JPY_PARENT_PID": "7"})  # per-kernel variables aside
    assert not z.serves(["/py"], "/w", {"A": "2"})
    z.ready = True
    assert not z.serves(["/py"], "/w", {"A": "1"})  # a ready zygote that died is replaced
