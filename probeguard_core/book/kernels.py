"""Warm notebook kernels: each kernel is forked from a process that has already imported what
the notebooks import (issue 15: kernel start and imports were a third of the book's notebook time).

A fresh IPython kernel costs a Python start-up, ipykernel's imports and then the notebook's own
imports (numpy, pandas, matplotlib, ``probeguard_core``): 3-4 s per notebook on a quiet 2-core
machine, about 100 s over the book. Here the first kernel a process starts launches a *zygote*,
``python -m probeguard_core.book.kernels`` with the kernel spec's interpreter and flags, in the
kernel's working folder and environment; the zygote imports :data:`PRELOAD` once and then forks
one child per kernel. A child is a new process, with its own empty namespace and its own
session and process group, that becomes ``ipykernel_launcher`` with the connection file of the
kernel manager that asked; it shares only the imported modules (copy-on-write) with its siblings.

The worker processes of one build share one zygote (:func:`share_zygotes`, which
``probeguard_core.book.build`` passes to its process pool as the initializer): the first worker
that needs a kernel starts the zygote listening on a unix socket in the build's folder and
records what it serves (command, folder, environment); the others connect to it when it serves
their kernels exactly, and otherwise start their own. A zygote stops the kernels it forked for a
process when that process goes, and exits when the last one has gone.

What a forked kernel shares with the zygote that a fresh one would not: the modules' import-time
state (a warning shown once at import is not shown again) and the hash seed. Import-time
decisions that depend on running under a kernel are kept out or redone: ``matplotlib_inline``
(it registers its figure hooks with the running kernel when imported) and ``tqdm.auto`` are
not preloaded, and pandas' ``display.max_columns`` (0 in a terminal, 20 under a kernel) is set
as a kernel would have it (:func:`_as_imported_in_a_kernel`). The ``random`` and numpy legacy
global generators are re-seeded from the OS in each child, as in a fresh process.
``tests/test_book_kernels.py`` compares these with a fresh kernel.

A kernel is forked only when it is safe and faithful; otherwise it starts the usual way
(``subprocess.Popen``), which is always correct:

* the kernel command is ``<python> [flags] -m ipykernel_launcher ...`` (the spec's ``argv``),
* the working folder and the environment are those the zygote was started with (apart from
  the variables jupyter_client sets per kernel, :data:`PER_KERNEL_ENV`, and the value of
  pytest's current-test name, :data:`PRESENCE_ONLY_ENV`); a different one replaces the zygote,
* the zygote runs a single thread after its imports (a fork copies only the calling thread),
* ``os.pidfd_open`` exists (Linux >= 5.3), to watch a process that is not our child.

``PROBEGUARD_FORK_KERNELS=0`` turns it off. :func:`manager_class` mixes it into a kernel
manager class; ``probeguard_core.book.build`` uses it for every notebook it runs. Its clients
(:class:`SlicedPollClient`) wait on the kernel's sockets in short slices, so a missed socket
wake-up costs half a second, not the cell timeout.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from queue import Empty
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type, default

__all__ = [
    "PER_KERNEL_ENV", "POLL_SLICE_S", "PRELOAD", "PRESENCE_ONLY_ENV", "ForkedKernel", "SlicedPollChannel", "SlicedPollClient", "Zygote",
    "enabled", "manager_class", "share_zygotes", "zygote_for",
]

#: Imported by the zygote before it forks (each one only if installed): what the book's
#: notebooks import, directly or through ``probeguard_core``'s builders.
PRELOAD: tuple[str, ...] = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",  # imported by every kernel's start (debugpy: about 0.15 s a notebook)
    "numpy",
    "pandas",
    "scipy.special",
    "matplotlib",
    "matplotlib.pyplot",  # not matplotlib_inline: it hooks into the running kernel when imported
    "sklearn.linear_model",
    "sklearn.model_selection",
    "sklearn.pipeline",
    "sklearn.impute",
    "sklearn.metrics",
    "probeguard_core.tables",
    *(f"probeguard_core.tables.{m}" for m in ("appendices", "audits", "beside", "cases", "certification",
                                               "display", "picking", "scores", "signals", "unanimous")),
    "probeguard_core.book.page",
    "probeguard_core.paper",
)

#: Environment variables jupyter_client sets for each kernel; the rest must match the zygote's.
PER_KERNEL_ENV: frozenset[str] = frozenset({"JPY_PARENT_PID", "JPY_SESSION_NAME", "JPY_INTERRUPT_EVENT",
                                            "IPY_INTERRUPT_EVENT"})
#: Variables whose *value* changes under a running program with no bearing on imports (pytest
#: names the current test in ``PYTEST_CURRENT_TEST``): only whether they are set must match the
#: zygote's.  The child still gets the exact value.  Without this, every test that runs a
#: notebook replaced the zygote (about 4 s per test).
PRESENCE_ONLY_ENV: frozenset[str] = frozenset({"PYTEST_CURRENT_TEST"})

_LAUNCHER = "ipykernel_launcher"


def enabled() -> bool:
    """Forked kernels are on unless ``PROBEGUARD_FORK_KERNELS=0`` (or the OS lacks ``pidfd_open``)."""
    return os.environ.get("PROBEGUARD_FORK_KERNELS", "1") != "0" and hasattr(os, "pidfd_open") and hasattr(os, "fork")


def _split_cmd(cmd: list[str]) -> tuple[list[str], list[str]] | None:
    """``(interpreter and flags, launcher arguments)`` of ``<python> [flags] -m ipykernel_launcher
    ARGS``, or ``None`` for any other kernel command."""
    for i in range(1, len(cmd) - 1):
        if cmd[i] == "-m":
            if cmd[i + 1] != _LAUNCHER or not all(a.startswith("-X") for a in cmd[1:i]):
                return None
            return cmd[:i], cmd[i + 2:]
    return None


def _stable_env(env: dict[str, str]) -> dict[str, str]:
    """What of a kernel's environment the zygote must share (:data:`PER_KERNEL_ENV` left out,
    :data:`PRESENCE_ONLY_ENV` reduced to being set)."""
    return {k: ("<set>" if k in PRESENCE_ONLY_ENV else v) for k, v in env.items() if k not in PER_KERNEL_ENV}


def _serves(record: dict[str, Any], prefix: list[str], cwd: str, env: dict[str, str]) -> bool:
    """Whether the zygote of ``record`` (:meth:`Zygote.served`) is one for kernels of ``prefix``
    in ``cwd`` with ``env``: the same command, folder and stable environment."""
    return list(record["prefix"]) == list(prefix) and record["cwd"] == cwd and record["env"] == _stable_env(env)


# --------------------------------------------------------------------------- the worker side
class ForkedKernel:
    """A ``subprocess.Popen``-like handle on a kernel the zygote forked (jupyter_client's
    provisioner calls ``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``)."""

    stdin = stdout = stderr = None

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it has exited (and been reaped) already
            self._pidfd = None

    def _exited(self, timeout: float | None) -> bool:
        """Whether the kernel has exited, waiting up to ``timeout`` seconds (None: until it does)."""
        if self._pidfd is None:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0):
            self.returncode = self.zygote.exit_code(self.pid)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._exited(timeout):
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            self.poll()
        return self.returncode if self.returncode is not None else 0

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """A process that has imported :data:`PRELOAD` and forks kernels on request (JSON lines over a
    socket pair with the process that started it, and over a unix socket with the processes that
    connect to it, :meth:`connect`)."""

    def __init__(self, prefix: list[str], cwd: str, env: dict[str, str], listen: str | None = None):
        """Start a zygote for kernels of ``prefix`` in ``cwd`` with ``env``; with ``listen``, it
        also accepts connections from other processes on that unix socket path
        (:meth:`connect`), and runs until the last connection closes."""
        self.prefix, self.cwd, self.env = list(prefix), cwd, _stable_env(env)
        ours, theirs = socket.socketpair()
        argv = [*prefix, "-m", __name__, str(theirs.fileno()), *([listen] if listen else [])]
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            argv, cwd=cwd, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self.listen = listen
        self._attach(ours)
        self.pid = self.proc.pid

    @classmethod
    def connect(cls, info: dict[str, Any]) -> Zygote:
        """A client of a zygote another process started with ``listen`` (``info``: what
        :func:`zygote_for` recorded of it: ``path``, ``pid``, ``prefix``, ``cwd``, ``env``)."""
        z = cls.__new__(cls)
        z.prefix, z.cwd, z.env, z.proc, z.pid = list(info["prefix"]), info["cwd"], dict(info["env"]), None, int(info["pid"])
        z.listen = str(info["path"])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(info["path"])
            z._attach(sock)
        except (OSError, RuntimeError, ValueError):
            sock.close()
            raise
        return z

    def _attach(self, sock: socket.socket) -> None:
        self.sock, self.file = sock, sock.makefile("rwb")
        self.lock = threading.Lock()
        hello = self._read()
        self.ready = bool(hello.get("ready"))
        self.why_not = str(hello.get("why_not", ""))

    def _read(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise RuntimeError("the kernel zygote exited")
        return json.loads(line)

    def _ask(self, **request: Any) -> dict[str, Any]:
        with self.lock:
            self.file.write(json.dumps(request).encode() + b"\n")
            self.file.flush()
            return self._read()

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:  # a zygote this process connected to: another process's child
            os.kill(self.pid, 0)
        except OSError:
            return False
        return not self.file.closed

    def serves(self, prefix: list[str], cwd: str, env: dict[str, str]) -> bool:
        """Whether this zygote answers for that kernel command, folder and environment. One that
        declined (not ``ready``, its process gone) keeps answering for them, so kernels start the
        usual way without a new zygote being tried for each one."""
        return _serves(self.served(), prefix, cwd, env) and (not self.ready or self.alive())

    def served(self) -> dict[str, Any]:
        """The kernels this zygote is for: ``prefix``, ``cwd`` and the stable ``env``
        (:func:`_serves`; :func:`share_zygotes` records it with the socket's ``path`` and ``pid``)."""
        return {"prefix": self.prefix, "cwd": self.cwd, "env": self.env}

    def fork(self, launcher_args: list[str], env: dict[str, str]) -> ForkedKernel:
        answer = self._ask(op="fork", args=launcher_args, env=env)
        if "pid" not in answer:
            raise RuntimeError(f"the kernel zygote could not fork: {answer.get('error')}")
        return ForkedKernel(self, int(answer["pid"]))

    def exit_code(self, pid: int) -> int | None:
        return self._ask(op="status", pid=pid).get("code")

    def close(self) -> None:
        """Close this process's connection: the zygote stops the kernels forked for it, and exits
        once no connection is left.  The process that started a zygote waits for it to exit,
        unless it listens (other processes may still be using it)."""
        try:
            self.file.close()  # EOF (the file holds the socket open too)
            self.sock.close()
        except OSError:
            pass
        if self.proc is None or self.listen is not None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_current: Zygote | None = None
#: A folder where the processes of one build share one zygote (:func:`share_zygotes`), or None.
_share_dir: str | None = None
_serial = itertools.count()


def share_zygotes(folder: str | os.PathLike[str] | None) -> None:
    """Let this process share a zygote with the other processes given the same ``folder`` (the
    book build's worker processes: its pool initializer).  The first that needs one starts it,
    listening on a socket in ``folder``, and records what it serves; the others connect to it
    when it serves their kernels exactly (same command, folder and environment), else start
    their own.  Each zygote start costs a few seconds of imports; a build then pays one."""
    global _share_dir
    _share_dir = None if folder is None else os.fspath(folder)


def _shared_zygote(prefix: list[str], cwd: str, env: dict[str, str]) -> Zygote:
    """The zygote of :data:`_share_dir` that serves these kernels (connected to, or started and
    recorded there), under a lock held across the start: a second process waits for it."""
    import fcntl

    folder = _share_dir
    assert folder is not None
    info_path = os.path.join(folder, "zygote.json")
    with open(os.path.join(folder, "zygote.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(info_path, encoding="utf-8") as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            info = None
        if info and _serves(info, prefix, cwd, env):
            try:  # only a ready zygote is recorded, and it says so to every client
                return Zygote.connect(info)
            except (OSError, RuntimeError, ValueError):  # it has exited: start the next one
                pass
        path = os.path.join(folder, f"z-{os.getpid()}-{next(_serial)}.sock")
        if len(os.fsencode(path)) > 100:  # a unix socket path's limit (108 bytes on Linux): this process's own zygote
            return Zygote(prefix, cwd, env)
        z = Zygote(prefix, cwd, env, listen=path)
        if z.ready:
            tmp = info_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(z.served() | {"path": path, "pid": z.pid}, fh)
            os.replace(tmp, info_path)
        return z


def zygote_for(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[Zygote, list[str]] | None:
    """This process's zygote for a kernel command (started, connected to or replaced as needed)
    and the launcher arguments, or ``None`` when the kernel must start the usual way."""
    global _current
    split = _split_cmd(cmd)
    if split is None or not enabled():
        return None
    prefix, args = split
    if _current is not None and not _current.serves(prefix, cwd, env):
        _current.close()
        _current = None
    if _current is None:
        try:
            _current = _shared_zygote(prefix, cwd, env) if _share_dir else Zygote(prefix, cwd, env)
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"probeguard kernels: no warm kernels ({exc}); starting kernels the usual way", file=sys.stderr)
            return None
        if not _current.ready:
            print(f"probeguard kernels: no warm kernels ({_current.why_not}); starting kernels the usual way",
                  file=sys.stderr)
    return (_current, args) if _current.ready else None


def _close_current() -> None:
    if _current is not None:
        _current.close()


atexit.register(_close_current)


def manager_class(base: type) -> type:
    """``base`` (a jupyter_client ``AsyncKernelManager`` class) whose kernels are forked from
    this process's zygote when :func:`zygote_for` allows it, else launched as ``base`` does,
    and whose clients poll in slices (:class:`SlicedPollClient`)."""

    class ForkingKernelManager(base):  # type: ignore[misc, valid-type]
        @default("client_factory")
        def _sliced_poll_client(self) -> type:
            return SlicedPollClient

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            env = dict(kw.get("env") or os.environ)
            env.setdefault("JPY_PARENT_PID", str(os.getpid()))  # what jupyter_client's launcher sets
            cwd = str(kw.get("cwd") or os.getcwd())
            found = zygote_for(list(kernel_cmd), cwd, env)
            if found is None:
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            zygote, args = found
            prov = self.provisioner
            prov.process = zygote.fork(args, env)
            prov.pid = prov.pgid = prov.process.pid  # the child leads its own session and group
            prov.cwd = cwd
            self._reconcile_connection_info(prov.connection_info)

    ForkingKernelManager.__name__ = ForkingKernelManager.__qualname__ = f"Forking{base.__name__}"
    return ForkingKernelManager


# --------------------------------------------------------------------------- the client side
#: Longest single wait on a kernel socket (seconds); a wait for longer is made of such slices.
POLL_SLICE_S = 0.5


class SlicedPollChannel(AsyncZMQSocketChannel):
    """A kernel channel whose ``get_msg(timeout)`` re-polls its socket every
    :data:`POLL_SLICE_S` instead of awaiting one wake-up for the whole timeout.

    nbclient waits for a cell's ``execute_reply`` with one ``shell_channel.get_msg`` spanning the
    whole cell timeout; when the socket's wake-up is missed (seen when a cell opens ipywidgets
    comms, nbclient issue #312), the reply sits in the socket until the timeout: the test suite
    lost 240 s to it twice, both times in the certification page's alpha widget. Polling in
    slices finds the reply within one slice; a timeout still means no message for that long.
    """

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        assert self.socket is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE_S if deadline is None else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            if await self.socket.poll(int(left * 1000)):
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty


class SlicedPollClient(AsyncKernelClient):
    """``AsyncKernelClient`` whose shell, IOPub, stdin and control channels are :class:`SlicedPollChannel`."""

    shell_channel_class = Type(SlicedPollChannel)
    iopub_channel_class = Type(SlicedPollChannel)
    stdin_channel_class = Type(SlicedPollChannel)
    control_channel_class = Type(SlicedPollChannel)


# --------------------------------------------------------------------------- the zygote side
def _preload() -> list[str]:
    import importlib

    done = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
    return done


def _as_imported_in_a_kernel() -> None:
    """Redo what a preloaded module decided at import from not running under a kernel."""
    pd = sys.modules.get("pandas")
    if pd is not None and pd.get_option("display.max_columns") == 0:
        # pandas.core.config_init: 0 when is_terminal() (no kernel at import), else 20
        pd.set_option("display.max_columns", 20)


def _become_kernel(socks: list[socket.socket], args: list[str], env: dict[str, str]) -> None:
    """In a forked child: become ``python -m ipykernel_launcher ARGS``; never returns."""
    import random

    for sock in socks:  # the zygote's connections and listener are not the kernel's
        sock.close()
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    random.seed()  # a fresh process's entropy, not the zygote's state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    _as_imported_in_a_kernel()
    import ipykernel_launcher

    sys.argv = [ipykernel_launcher.__file__, *args]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    sys.exit(0)


class _Conn:
    """One client of the zygote (JSON lines over a socket) and the kernels forked for it."""

    def __init__(self, sock: socket.socket):
        self.sock, self.stream, self.kernels = sock, sock.makefile("rwb"), set()

    def say(self, **msg: Any) -> None:
        self.stream.write(json.dumps(msg).encode() + b"\n")
        self.stream.flush()

    def close(self) -> None:
        """The client has gone: stop its kernels."""
        for pid in self.kernels:
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                pass
        self.stream.close()
        self.sock.close()


def _serve(fd: int, listen: str | None = None) -> None:
    """The zygote: import :data:`PRELOAD`, say whether forking is safe, then fork kernels for
    its first client (``fd``) and, with ``listen``, for any process that connects to that unix
    socket; it exits when its last client has gone."""
    first = _Conn(socket.socket(fileno=fd))
    # as ipykernel_launcher does: the working folder is importable as '' (IPython's init_path)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    sys.path.insert(0, "")
    # as IPKernelApp.init_gui_pylab does before any user code: matplotlib reads it when imported
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    try:
        loaded = _preload()
    except Exception as exc:  # a module that fails to import: kernels start the usual way
        first.say(ready=False, why_not=f"preloading failed: {type(exc).__name__}: {exc}")
        return
    if threading.active_count() != 1:
        first.say(ready=False, why_not=f"{threading.active_count()} threads after the imports (a fork copies one)")
        return
    # The preloaded modules' objects live as long as any kernel: moved out of the collector's
    # generations, a kernel's full collections no longer walk them (about a tenth of the
    # simulator pages' time went to such collections), and the pages they sit on stay shared.
    import gc

    gc.collect()
    gc.freeze()
    listener = None
    if listen:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(listen)
            listener.listen(8)
        except OSError as exc:
            first.say(ready=False, why_not=f"cannot listen on {listen}: {exc}")
            return
    hello = {"ready": True, "preloaded": loaded, "pid": os.getpid()}
    first.say(**hello)
    clients: dict[socket.socket, _Conn] = {first.sock: first}
    codes: dict[int, int] = {}
    owner: dict[int, _Conn] = {}  # kernel pid -> the client it was forked for

    def reap() -> None:
        while owner:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            owner.pop(pid).kernels.discard(pid)
            codes[pid] = os.waitstatus_to_exitcode(status)

    try:
        while clients:
            ready, _, _ = select.select([*clients, *([listener] if listener else [])], [], [], 0.5)
            reap()
            for sock in ready:
                if sock is listener:
                    conn = _Conn(listener.accept()[0])
                    clients[conn.sock] = conn
                    conn.say(**hello)
                    continue
                client = clients[sock]
                line = client.stream.readline()
                if not line:  # that process has gone: stop its kernels
                    del clients[sock]
                    client.close()
                    continue
                req = json.loads(line)
                if req.get("op") == "fork":
                    pid = os.fork()
                    if pid == 0:
                        _become_kernel([*clients, *([listener] if listener else [])], list(req["args"]), dict(req["env"]))
                    owner[pid] = client
                    client.kernels.add(pid)
                    client.say(pid=pid)
                elif req.get("op") == "status":
                    pid = int(req["pid"])
                    if pid in owner:
                        _, status = os.waitpid(pid, 0)  # its pidfd said it exited: this does not block
                        owner.pop(pid).kernels.discard(pid)
                        codes[pid] = os.waitstatus_to_exitcode(status)
                    client.say(code=codes.pop(pid, None))
                else:
                    client.say(error=f"unknown request {req.get('op')!r}")
    finally:  # in the zygote only: a kernel forked inside this loop leaves through it too
        if listener is not None and os.getpid() == hello["pid"]:
            listener.close()
            try:
                os.unlink(listen)  # type: ignore[arg-type]
            except OSError:
                pass


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
