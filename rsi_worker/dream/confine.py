"""The sandbox's child side: confinement, the reduced builtins and the serving loop, and the zygote
(docs/dream/sandbox.md).

Standard library only (plus :mod:`rsi_worker.dream.view`, itself standard library only), so that the
zygote — a small interpreter started once per worker process with ``python -I -S`` — loads nothing
else: forking it for an episode is several times cheaper than forking the worker.

Zygote protocol (one request at a time over a Unix stream socket, the worker's end guarded by a
lock): a frame is ``>II`` (JSON length, blob length), the JSON header, the blob.

* ``{"op": "spawn", "cpu_s", "memory_bytes"}``, blob = ``marshal`` of the checked, compiled policy
  code, with two descriptors attached (``SCM_RIGHTS``: the child's read and write pipe ends) →
  ``{"pid"}``: the zygote forks; the child confines itself (:func:`confine`), says ready and serves.
* ``{"op": "reap", "pid", "kill"}`` → ``{"status"}``: SIGKILL first when ``kill``, else wait up to
  :data:`REAP_GRACE_S` for the child to exit on its own (then SIGKILL); the raw wait status (None
  when the pid is not a live child of the zygote).

On end of file (the worker closed its end or died) the zygote kills and reaps its children and exits.
"""

from __future__ import annotations

import bisect
import builtins
import collections
import collections.abc
import contextlib
import ctypes
import dataclasses
import enum
import fcntl
import functools
import heapq
import itertools
import json
import marshal
import math
import os
import resource
import signal
import socket
import statistics
import struct
import time
import types
import typing
from typing import Any

from rsi_worker.dream.view import view_from_data

__all__ = [
    "ALLOWED_IMPORTS",
    "REAP_GRACE_S",
    "child_main",
    "encode_msg",
    "enter_network_namespace",
    "load_libc",
    "load_namespace",
    "read_frame",
    "send_msg",
    "write_frame",
    "zygote_main",
]

ALLOWED_IMPORTS = frozenset(
    {
        "math",
        "itertools",
        "functools",
        "collections",
        "heapq",
        "bisect",
        "statistics",
        "dataclasses",
        "typing",
        "enum",
    }
)
_MODULES: dict[str, types.ModuleType] = {
    m.__name__: m
    for m in (math, itertools, functools, collections, heapq, bisect, statistics, dataclasses, typing, enum)
}
_MODULES["collections.abc"] = collections.abc
_SAFE_BUILTINS = (
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "hash",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "object",
    "pow",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "property",
    "staticmethod",
    "classmethod",
    "super",
    "type",
    "Exception",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "ZeroDivisionError",
    "ArithmeticError",
    "StopIteration",
    "RuntimeError",
    "AssertionError",
    "NotImplementedError",
    "True",
    "False",
    "None",
    "NotImplemented",
    "Ellipsis",
)
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
REAP_GRACE_S = 1.0
"""Seconds the zygote waits for a child that closed its pipe to exit before killing it."""


# -- the policy's namespace ----------------------------------------------------------------------------
def _guarded_import(
    name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
) -> types.ModuleType:
    if level or name not in _MODULES:
        raise ImportError(f"import of {name[:60]!r} is not allowed")
    return _MODULES[name]


def _builtins() -> dict[str, Any]:
    out = {name: getattr(builtins, name) for name in _SAFE_BUILTINS}
    out["__import__"] = _guarded_import
    out["__build_class__"] = builtins.__build_class__
    out["print"] = lambda *a, **k: None
    return out


def load_namespace(code: types.CodeType) -> dict[str, Any]:
    """Execute checked, compiled policy code with the reduced builtins in a fresh namespace.

    Raises:
        Exception: whatever the module body raises.
    """
    ns: dict[str, Any] = {"__builtins__": _builtins(), "__name__": "policy"}
    exec(code, ns)
    return ns


# -- confinement -----------------------------------------------------------------------------------------
_libc: Any = None


def load_libc() -> None:
    """Load libc for :func:`enter_network_namespace`; called before forking, so a child never runs
    the dynamic loader (a lock another thread of a worker may have held at the fork)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:  # pragma: no cover - no dynamic libc
            _libc = False


def enter_network_namespace() -> str:
    """``unshare(CLONE_NEWNET)``, else ``CLONE_NEWUSER | CLONE_NEWNET``; the barrier now in force:
    ``netns``, ``userns+netns`` or ``nofile`` (neither permitted, or libc not loaded by
    :func:`load_libc`: the descriptor limit alone)."""
    if not _libc:
        return "nofile"
    for flags, name in ((_CLONE_NEWNET, "netns"), (_CLONE_NEWUSER | _CLONE_NEWNET, "userns+netns")):
        if _libc.unshare(flags) == 0:
            return name
    return "nofile"


def _refuse(*_a: Any, **_k: Any) -> Any:
    raise PermissionError("network access is disabled in the policy sandbox")


def confine(rfd: int, wfd: int, cpu_s: int, memory_bytes: int) -> None:
    """Confine this (forked) process: ``rfd``/``wfd`` become fds 0/1, every other descriptor is
    closed, the socket constructors raise, and the limits are set (``RLIMIT_CPU`` ``cpu_s``,
    ``RLIMIT_AS`` = the address space now + ``memory_bytes``, ``RLIMIT_FSIZE``/``CORE``/``NPROC`` 0,
    ``RLIMIT_NOFILE`` 2), never above the ceilings already in force."""
    with open("/proc/self/statm", "rb") as f:
        vsz = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    try:
        inherited = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every number up to the descriptor limit
        inherited = list(range(2, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    a = fcntl.fcntl(rfd, fcntl.F_DUPFD, 10)
    b = fcntl.fcntl(wfd, fcntl.F_DUPFD, 10)
    os.dup2(a, 0)
    os.dup2(b, 1)
    # every inherited descriptor (sockets, database files of the worker) is closed, whatever its number
    for fd in {*inherited, a, b}:
        if fd > 1:
            with contextlib.suppress(OSError):
                os.close(fd)
    for attr in ("socket", "create_connection", "socketpair", "fromfd", "create_server"):
        setattr(socket, attr, _refuse)
    for lim, value in (
        (resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
        (resource.RLIMIT_AS, (vsz + memory_bytes,) * 2),
        (resource.RLIMIT_FSIZE, (0, 0)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NPROC, (0, 0)),
        (resource.RLIMIT_NOFILE, (2, 2)),
    ):
        _, ceiling = resource.getrlimit(lim)
        if ceiling != resource.RLIM_INFINITY:  # never above what the worker itself may use
            value = (min(value[0], ceiling), min(value[1], ceiling))
        resource.setrlimit(lim, value)


# -- the child's messages ----------------------------------------------------------------------------
def encode_msg(obj: Any) -> bytes:
    """Length-prefixed (``>I``) JSON."""
    data = json.dumps(obj, allow_nan=False, default=str).encode()
    return struct.pack(">I", len(data)) + data


def send_msg(fd: int, obj: Any | bytes) -> None:
    """:func:`encode_msg` of ``obj`` (or the already encoded bytes) on ``fd``."""
    data = obj if isinstance(obj, bytes) else encode_msg(obj)
    while data:
        data = data[os.write(fd, data) :]


def _read_all(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def _recv_msg(fd: int) -> Any:
    (size,) = struct.unpack(">I", _read_all(fd, 4))
    return json.loads(_read_all(fd, size))


def _serve(code: types.CodeType) -> None:
    ns = load_namespace(code)
    plan_fn, choose_fn = ns["plan_grid"], ns["choose"]
    while True:
        msg = _recv_msg(0)
        try:
            if msg["op"] == "plan":
                plan = plan_fn(types.SimpleNamespace(**msg["ctx"]))  # checked by the parent
                send_msg(1, {"ok": plan})
            else:
                send_msg(1, {"ok": choose_fn(view_from_data(msg["view"], fresh=True), msg["beta"])})
        except BaseException as exc:
            send_msg(1, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"})


def child_main(
    code: types.CodeType | None,
    rfd: int,
    wfd: int,
    cpu_s: int,
    memory_bytes: int,
    network: str | None,
    job: typing.Callable[[], Any] | None = None,
) -> None:
    """The forked child: enter a network namespace when ``network`` is None (else report ``network``,
    the barrier its parent already entered), confine, say ready, serve ``code`` or run ``job``; never
    returns."""
    try:
        if network is None:
            network = enter_network_namespace()
        confine(rfd, wfd, cpu_s, memory_bytes)
        if job is not None:
            send_msg(1, {"ready": network, "result": job()})
            return
        send_msg(1, {"ready": network})
        if code is not None:
            _serve(code)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            send_msg(1, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    finally:
        os._exit(0)


# -- the zygote's frames ---------------------------------------------------------------------------------
_FRAME = struct.Struct(">II")
MAX_FRAME_BYTES = 64 * 2**20


def write_frame(
    sock: socket.socket, header: dict[str, Any], blob: bytes = b"", fds: list[int] | None = None
) -> None:
    """One frame (module docstring), ``fds`` attached to its first byte."""
    head = json.dumps(header).encode()
    data = _FRAME.pack(len(head), len(blob)) + head + blob
    sent = socket.send_fds(sock, [data], fds) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def _recv_exact(sock: socket.socket, n: int, start: bytes = b"") -> bytes:
    out = start
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def read_frame(sock: socket.socket, maxfds: int = 0) -> tuple[dict[str, Any], bytes, list[int]]:
    """One frame: ``(header, blob, descriptors received)``.

    Raises:
        EOFError: the other end closed.
        ValueError: a frame over :data:`MAX_FRAME_BYTES` or a header that is not a JSON object.
    """
    fds: list[int] = []
    if maxfds:
        first, fds, _, _ = socket.recv_fds(sock, _FRAME.size, maxfds)
        if not first:
            raise EOFError
    else:
        first = b""
    hlen, blen = _FRAME.unpack(_recv_exact(sock, _FRAME.size, first))
    if hlen + blen > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {hlen + blen:,} bytes")
    body = _recv_exact(sock, hlen + blen)
    header = json.loads(body[:hlen])
    if not isinstance(header, dict):
        raise ValueError("a frame header that is not an object")
    return header, body[hlen:], fds


# -- the zygote ------------------------------------------------------------------------------------------
def _reap(pid: int, kill: bool) -> int | None:
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    else:
        deadline = time.monotonic() + REAP_GRACE_S
        while time.monotonic() < deadline:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if done:
                return status
            time.sleep(0.002)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def zygote_main(fd: int) -> None:
    """Serve spawn and reap requests on the Unix socket ``fd`` until end of file (module docstring).

    The network namespace is entered once, here, so every child starts inside it at no cost."""
    load_libc()
    network = enter_network_namespace()
    sock = socket.socket(fileno=fd)
    live: set[int] = set()
    try:
        while True:
            try:
                header, blob, fds = read_frame(sock, 2)
            except (EOFError, OSError, ValueError):
                return
            reply: dict[str, Any]
            if header.get("op") == "spawn" and len(fds) == 2:
                try:
                    cpu, mem = int(header["cpu_s"]), int(header["memory_bytes"])
                    code = marshal.loads(blob)
                    pid = os.fork()
                except (OSError, ValueError, EOFError, TypeError, KeyError) as exc:
                    reply = {"error": f"spawn failed: {type(exc).__name__}: {str(exc)[:200]}"}
                else:
                    if pid == 0:  # pragma: no cover - the child never returns
                        child_main(code, fds[0], fds[1], cpu, mem, network)
                    live.add(pid)
                    reply = {"pid": pid, "network": network}
            elif header.get("op") == "reap":
                pid = int(header.get("pid", 0))
                reply = {"status": _reap(pid, bool(header.get("kill"))) if pid in live else None}
                live.discard(pid)
            elif header.get("op") == "sync":
                reply = {}
            else:
                reply = {"status": None, "error": f"unknown request {str(header.get('op'))[:40]!r}"}
            for extra in fds:
                os.close(extra)
            if header.get("reply", True):
                write_frame(sock, reply)
    finally:
        for pid in live:
            _reap(pid, True)
