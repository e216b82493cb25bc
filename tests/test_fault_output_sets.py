"""Output sets (issue 25): a kill or an error at any instant leaves the old set of files or the new one.

Every command with several outputs (``certify``: certificate, report, dossiers; ``apply``:
decisions and dossiers; ``monitor``: monitor.json, the timeline and the recalibrated
certificate's set; ``claims``) writes them with :func:`probeguard_core.fileio.write_files_atomically`.
Two fault models, at every step of a write:

* an exception (an I/O error, Ctrl-C) at the k-th ``os.replace``, for every k: the clean-up runs,
  and the files are byte for byte the old set, with no temporary, backup or journal left;
* a kill (SIGKILL) at the k-th call that changes a folder, for every k: nothing after it runs.
  The reader (:func:`~probeguard_core.fileio.check_output_set`, the certificate reader's first
  step) refuses exactly the mixed sets, as ``file: output set: reason``, and the next write rolls
  the set back first and leaves only the new set.

The kill is simulated in-process (every later call that changes a folder raises, as in a dead
process, so no clean-up runs); one test kills a real ``certify`` with SIGKILL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_certify import build_cell, certify_argv
from test_fault_suite import one_error_line, run

from probeguard_core import deploy, fileio
from probeguard_core.cli import main


class Killed(BaseException):
    """The process died here (not an Exception: nothing catches it)."""


#: The os functions that change a folder's names (``open`` only with ``O_CREAT``).
MUTATING = ("replace", "rename", "link", "unlink", "remove", "rmdir", "mkdir", "open")


class Dying:
    """Count the calls in ``ops`` (default: every call that changes a folder); the call numbered
    ``at`` (0-based) and every mutating call after it raise :class:`Killed`, as in a process killed
    at that instant.  With ``once``, only that call raises ``once`` and the rest run (clean-up works)."""

    def __init__(self, mp: pytest.MonkeyPatch, at: int | None = None, ops: tuple[str, ...] = MUTATING,
                 once: BaseException | None = None) -> None:
        self.n, self.at, self.dead, self.once = 0, at, False, once
        for name in MUTATING:
            mp.setattr(os, name, self._wrap(name, getattr(os, name), name in ops))

    def _wrap(self, name: str, real: Callable[..., Any], counted: bool) -> Callable[..., Any]:
        def op(*a: Any, **k: Any) -> Any:
            if name == "open" and not ((a[1] if len(a) > 1 else k.get("flags", 0)) & os.O_CREAT):
                return real(*a, **k)  # opening a folder to lock it, or a file to read: changes nothing
            if self.dead:
                raise Killed
            if counted:
                if self.n == self.at:
                    if self.once is not None:
                        self.n += 1
                        raise self.once
                    self.dead = True
                    raise Killed
                self.n += 1
            return real(*a, **k)

        return op


def snapshot(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders`` (names relative to their common parent), with its bytes."""
    root = folders[0].parent
    return {str(p.relative_to(root)): p.read_bytes() for f in folders if f.is_dir()
            for p in sorted(f.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------
# the helper itself, at every step: a set of three files over two folders, one shared
# --------------------------------------------------------------------------------------------

def _layout(root: Path, old: bool) -> tuple[dict[Path, bytes], dict[Path, bytes]]:
    """Folders ``a`` (shared with the user's ``notes.txt``) and ``b``; the old set (two files in
    ``a``, ``b/c.jsonl`` absent) and the new set (all three)."""
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    (a / "notes.txt").write_bytes(b"the user's own file")
    new = {a / "x.json": b'{"run": 2}\n', a / "y.html": b"<p>run 2</p>\n", b / "c.jsonl": b'{"q": 2}\n'}
    olds = {a / "x.json": b'{"run": 1}\n', a / "y.html": b"<p>run 1</p>\n"} if old else {}
    for p, data in olds.items():
        p.write_bytes(data)
    return olds, new


def _state(olds: dict[Path, bytes], new: dict[Path, bytes]) -> str:
    now = {p: p.read_bytes() if p.exists() else None for p in new}
    if now == {p: olds.get(p) for p in new}:
        return "old"
    return "new" if now == new else "mixed"


def _count(tmp: Path, old: bool, monkeypatch: pytest.MonkeyPatch, ops: tuple[str, ...]) -> int:
    """How many calls of ``ops`` a successful write makes."""
    _olds, new = _layout(tmp, old)
    with monkeypatch.context() as mp:
        d = Dying(mp, ops=ops)
        fileio.write_files_atomically(new)
    return d.n


@pytest.mark.parametrize("old", [True, False], ids=["over-an-old-set", "fresh"])
@pytest.mark.parametrize("fault", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["ENOSPC", "Ctrl-C"])
def test_an_error_at_every_rename_leaves_the_old_set(old: bool, fault: BaseException, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Before issue 25 the files renamed before the failure were deleted: the old set was lost."""
    n = _count(tmp_path / "count", old, monkeypatch, ("replace",))
    assert n == 3
    for k in range(n):
        root = tmp_path / f"k{k}"
        olds, new = _layout(root, old)
        before = snapshot(root / "a", root / "b")
        with monkeypatch.context() as mp:
            Dying(mp, at=k, ops=("replace",), once=fault)
            with pytest.raises(type(fault)):
                fileio.write_files_atomically(new)
        assert snapshot(root / "a", root / "b") == before, k  # no temporary, backup or journal
        assert not (root / "b").exists()  # the folder this write created is removed again
        assert _state(olds, new) == "old"


@pytest.mark.parametrize("old", [True, False], ids=["over-an-old-set", "fresh"])
def test_a_kill_at_every_step_is_refused_when_mixed_then_rolled_back(old: bool, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    n = _count(tmp_path / "count", old, monkeypatch, MUTATING)
    seen: set[str] = set()
    for k in range(n):
        root = tmp_path / f"k{k}"
        olds, new = _layout(root, old)
        with monkeypatch.context() as mp:
            Dying(mp, at=k)
            with pytest.raises(Killed):
                fileio.write_files_atomically(new)
        state = _state(olds, new)
        seen.add(state)
        for target in new:  # every file of the set, read by the reader
            if state == "mixed":
                with pytest.raises(fileio.AtomicWriteError) as exc:
                    fileio.check_output_set(target)
                msg = str(exc.value)
                assert msg.startswith(f"{target}: output set: written only in part") and "\n" not in msg, msg
                assert "rerun the command" in msg
            else:
                fileio.check_output_set(target)  # a whole set reads
        # the next write's first step: the set is whole again (old, or new if every rename was done)
        for target in new:
            fileio.recover_output_set(target)
        assert _state(olds, new) == ("new" if state == "new" else "old"), (k, state)
        # and the next write leaves exactly the new set, nothing else
        again = {p: data + b"3" for p, data in new.items()}
        fileio.write_files_atomically(again)
        assert snapshot(root / "a", root / "b") == {
            "a/notes.txt": b"the user's own file", **{str(p.relative_to(root)): d for p, d in again.items()}}, k
    assert "mixed" in seen and "old" in seen and "new" in seen, seen  # the kills reach every case


def test_a_set_changed_by_hand_after_a_kill_is_not_overwritten(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    olds, new = _layout(tmp_path, True)
    with monkeypatch.context() as mp:
        Dying(mp, at=1, ops=("replace",))  # killed after the first rename
        with pytest.raises(Killed):
            fileio.write_files_atomically(new)
    target = next(iter(new))
    target.write_bytes(b"edited by hand")
    with pytest.raises(fileio.AtomicWriteError, match=r"output set: .*x\.json changed since an interrupted write"):
        fileio.write_files_atomically(new)
    assert target.read_bytes() == b"edited by hand"


def test_two_writers_of_one_set_do_not_interleave(tmp_path: Path) -> None:
    """Two threads rewrite the same set: each write holds the folders' lock, so every write
    finishes (no temporary of one removed by the other) and the set is one writer's, whole."""
    _olds, new = _layout(tmp_path, False)
    sets = [{p: data + bytes([w]) * 3 for p, data in new.items()} for w in range(2)]
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for _ in range(25):
                fileio.write_files_atomically(sets[w])
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    now = {p: p.read_bytes() for p in new}
    assert now in sets
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["notes.txt", "x.json", "y.html"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["c.jsonl"]


# --------------------------------------------------------------------------------------------
# the commands: certify, apply and monitor, at every rename
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_cell(tmp_path_factory.mktemp("cell"), n_s1=120, n_s2=80, n_s3=10)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_cell(tmp_path_factory.mktemp("batch"), n_s1=130, n_s2=70, n_s3=15, seed=1001, qid_prefix="b1")


def _commands(cell: dict[str, Path], batch: dict[str, Path], tmp: Path) -> dict[str, Any]:
    """Per command: (argv of the old run, argv of the new run, the folders of its outputs, the
    certificate its set holds or None)."""
    cert, cert2 = tmp / "cal" / "certificate.json", tmp / "cal2" / "certificate.json"
    assert main([str(a) for a in certify_argv(cell, cert.parent, 0.2)]) == 0
    assert main([str(a) for a in certify_argv(cell, cert2.parent, 0.12)]) == 0
    mon = ["--logs", batch["logs"], "--probe", batch["probe"], "--nli", batch["nli"]]
    app = ["--logs", batch["logs"], "--probe", batch["probe"], "--nli", batch["nli"], "--out", tmp / "o" / "d.csv"]
    return {
        "certify": (certify_argv(cell, tmp / "o", 0.2), certify_argv(cell, tmp / "o", 0.15), [tmp / "o"],
                    tmp / "o" / "certificate.json"),
        "apply": (["apply", "--certificate", cert, *app], ["apply", "--certificate", cert2, *app], [tmp / "o"], None),
        "monitor": (["monitor", "--certificate", cert, *mon, "--recalibrate-window", "200", "--out", tmp / "o"],
                    ["monitor", "--certificate", cert2, *mon, "--recalibrate-window", "150", "--out", tmp / "o"],
                    [tmp / "o"],
                    tmp / "o" / "recalibrated" / "certificate.json"),
    }


N_OUTPUTS = {"certify": 3, "apply": 2, "monitor": 6}


@pytest.mark.parametrize("command", list(N_OUTPUTS))
def test_a_command_failing_at_every_rename_keeps_its_old_outputs(command: str, cell: dict[str, Path],
                                                                  batch: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    old_argv, new_argv, folders, _cert = _commands(cell, batch, tmp_path)[command]
    assert run(old_argv, capsys)[0] == 0
    before = snapshot(*folders)
    assert len(before) == N_OUTPUTS[command], sorted(before)
    for k in range(N_OUTPUTS[command]):
        with monkeypatch.context() as mp:
            Dying(mp, at=k, ops=("replace",), once=OSError(28, "No space left on device"))
            rc, _, err = run(new_argv, capsys)
        assert rc == 2 and "No space left on device" in one_error_line(err, command), (k, err)
        assert snapshot(*folders) == before, k
    assert run(new_argv, capsys)[0] == 0
    after = snapshot(*folders)
    same = sorted(n for n in after if after[n] == before.get(n))
    assert set(after) == set(before) and not same, f"{same}: the new run must change every file (two different sets)"


@pytest.mark.parametrize("command", list(N_OUTPUTS))
def test_a_command_killed_at_every_rename_is_refused_when_mixed(command: str, cell: dict[str, Path],
                                                                 batch: dict[str, Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A kill between two renames of ``monitor`` used to leave a monitor.json that disagreed with
    the timeline beside it, and one of ``certify`` a certificate beside another run's report."""
    old_argv, new_argv, folders, cert = _commands(cell, batch, tmp_path)[command]
    assert run(old_argv, capsys)[0] == 0
    before = snapshot(*folders)
    assert run(new_argv, capsys)[0] == 0
    new = snapshot(*folders)
    for k in range(N_OUTPUTS[command]):
        fileio.write_files_atomically({tmp_path / n: b for n, b in before.items()})  # the old set again
        with monkeypatch.context() as mp:
            Dying(mp, at=k, ops=("replace",))
            with pytest.raises(Killed):
                main([str(a) for a in new_argv])
        capsys.readouterr()
        now = {n: b for n, b in snapshot(*folders).items() if not n.split("/")[-1].startswith(".")}
        mixed = now not in (before, new)
        assert mixed == (k > 0), k  # killed at the first rename: nothing renamed yet
        if cert is not None:  # a reader of the set: apply with its certificate
            rc, _, err = run(["apply", "--certificate", cert, "--logs", batch["logs"], "--probe", batch["probe"],
                              "--nli", batch["nli"], "--out", tmp_path / f"dec{k}.csv"], capsys)
            if mixed:
                line = one_error_line(err, "apply")
                assert rc == 2 and f"{cert}: output set: written only in part" in line, line
                assert not (tmp_path / f"dec{k}.csv").exists()
            else:
                assert rc == 0, err
        assert run(new_argv, capsys)[0] == 0  # the next run rolls back, then writes
        assert snapshot(*folders) == new, k  # only the new set: no journal, backup or temporary


def test_a_real_sigkill_between_renames_is_refused_then_repaired(cell: dict[str, Path], batch: dict[str, Path],
                                                                 tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL ``certify`` at its second rename (certificate.json new, report.html not yet): ``apply``
    refuses the certificate; re-running ``certify`` leaves its three files and nothing else."""
    out = tmp_path / "o"
    code = (
        "import os, signal, sys\n"
        "real, n = os.replace, [0]\n"
        "def replace(a, b):\n"
        "    n[0] += 1\n"
        "    if n[0] == 2:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(a, b)\n"
        "os.replace = replace\n"
        "from probeguard_core.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = [str(a) for a in certify_argv(cell, out, 0.2)]
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ), check=False)
    assert r.returncode == -9, r.stderr
    assert (out / "certificate.json").is_file() and not (out / "report.html").exists()
    rc, _, err = run(["apply", "--certificate", out / "certificate.json", "--logs", batch["logs"],
                      "--probe", batch["probe"], "--nli", batch["nli"], "--out", tmp_path / "d.csv"], capsys)
    line = one_error_line(err, "apply")
    assert rc == 2 and "certificate.json: output set: written only in part" in line, line
    assert "certificate.json new" in line and "report.html" in line
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json", "dossiers.jsonl", "report.html"]
    deploy.load_certificate(out / "certificate.json")
