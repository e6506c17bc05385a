"""Run untrusted Python functions against trusted tests, isolated from the host and from each other.

Any task can use this module: give it the candidate's code, the test code and the name (or
expression) of the function under test, and get back a :class:`Result` whose ``status`` the
candidate cannot forge.

How a run works
---------------
The harness keeps one **zygote** per worker: a small, single-threaded Python process started
once (``python -I -S harness/sandbox.py --zygote``) that loads the standard-library modules
programs commonly import and forks a persistent **tester** process. For every run it compiles
the code and forks a fresh **candidate** process:

* the candidate runs the prelude (trusted helper code such as HumanEval's prompt) and the
  untrusted code, evaluates the entry point, then serves function calls it reads from a pipe,
  replying with the return value (or the exception's type and message);
* the tester runs the trusted tests with ``candidate`` bound to a proxy that sends each call
  over that pipe. Arguments and results cross the boundary as plain data (numbers, strings,
  lists, tuples, dicts, sets, bytes, and objects of classes the prelude defines), so an object
  with a rigged ``__eq__`` cannot come back. Only after the tests finish does the tester send
  its verdict, prefixed with the run's random nonce, over a socket only it and the zygote hold.

The zygote waits for the verdict until the wall-clock deadline, kills every process of the
candidate, reaps them, removes the run's files and answers the harness with the :class:`Result`.
Forking a warm zygote instead of starting interpreters keeps a run to a few milliseconds of CPU.

Isolation, when the harness runs as root (as in CI and on the development machines)
-------------------------------------------------------------------------------------
* Users: each zygote leases three dedicated unprivileged uids (candidate, tester, reaper) from a
  range no account uses (``uid_base``; leases are ``flock``-ed files so concurrent harnesses never
  share one). Processes of the candidate uid can only be signalled by that uid, so they cannot
  touch the tester, the zygote or the harness; ``RLIMIT_NPROC`` (which root ignores) bounds
  fork bombs.
* Cleanup without cgroups: after every run a reaper child with real uid *reaper* and effective
  uid *candidate* calls ``kill(-1, SIGKILL)``. The kernel delivers that to every process of the
  uid while holding the task list, and a fork racing with it fails, so nothing escapes — not
  daemons that called ``setsid``, not double-forked children. The candidate cannot kill the
  reaper (its real and saved uids differ). The zygote is a child subreaper, so every orphan is
  re-parented to it; a run returns only when the tester is the zygote's only child left (when
  the candidate ended by itself and left nothing behind, the sweep is skipped).
* Namespaces: the zygote unshares its mount, network and IPC namespaces once at start. The new
  network namespace has only a loopback device that is down: no connection can be made, not
  even to the host's ``127.0.0.1``. Private tmpfs mounts cover every world-writable directory
  (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``) and are emptied after each run, so a
  candidate cannot change any host file (its uid owns nothing and can write nowhere else).
  :attr:`Result.network_isolated` / ``filesystem_isolated`` say whether this was in force.
* Limits (per process): ``RLIMIT_CPU``, ``RLIMIT_AS`` (default 1 GB), ``RLIMIT_FSIZE`` (which
  also caps captured output: stdout/stderr go to files), ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``,
  no core dumps; wall-clock deadline; ``PR_SET_NO_NEW_PRIVS`` (no set-uid escalation);
  parent-death signal. Each run has an empty working directory owned by the candidate uid and
  removed afterwards, stdin is ``/dev/null``, the environment is scrubbed (the zygote starts
  from an empty environment), and the interpreter runs in isolated mode without ``site``.

Threat model
------------
The candidate is arbitrary code from a model being optimised against these tests, so we assume
it will eventually try everything: exhaust CPU, memory, processes, disk or output; outlive the
run; read secrets from the environment or files; reach the network; kill or trace other
processes; and above all **fake success**. Success is decided only by the zygote, from a
verdict that (1) comes from the tester, which the candidate cannot signal, trace or read
(different uid; the tester is also non-dumpable), (2) arrives on a socket only the tester and
the zygote hold (the candidate's process never inherits it), (3) carries a nonce the zygote
draws *after* forking the candidate, so no copy of it ever exists in the candidate's memory,
and (4) is sent only after the test code returned without an exception. Exiting early
(``sys.exit``/``os._exit`` with any code), printing "passed", writing to stray file
descriptors, monkey-patching builtins or closing the channel therefore can only make the run
fail. The tests never enter the candidate's process: the harness writes them to a file in the
tester's inbox (a directory only the tester uid can open), the tester reads and deletes it,
and the zygote — whose memory each candidate is a copy of — never reads them; so a candidate
cannot look up the expected answers either.

Not covered: kernel exploits (use a VM or gVisor for hostile-by-design inputs); timing side
channels; a fork bomb's total memory is bounded by ``max_processes × memory_mb`` rather than by
one budget (cgroups would give one); candidates may import any standard-library module.

Without root (e.g. a laptop) the sandbox degrades openly: candidate and tester share the
user's uid (the tester is still non-dumpable and the nonce still required), processes are
cleaned up by walking the zygote's descendants, and namespaces are used only if unprivileged
user namespaces are allowed. ``Result.user_isolated`` is then False.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, ClassVar

STATUSES = (
    "passed",  # every test passed
    "failed",  # a test assertion failed (the program ran; the answer was wrong)
    "error",  # an exception in the candidate's code, or one it caused in the tests
    "timeout",  # no verdict before the wall-clock deadline
    "killed",  # the candidate died from a signal (CPU, file-size or memory limit, crash)
    "exited",  # the candidate ended itself (sys.exit / os._exit) before the tests finished
    "syntax_error",  # the code does not compile
    "sandbox_error",  # a fault of the harness or of the test data, not of the candidate
)
"""Every value :attr:`Result.status` can take."""

_FRAME = struct.Struct(">I")
_MAX_FRAME = 64 * 1024 * 1024
_MAX_REPLY = 16 * 1024 * 1024  # largest value a candidate may return to the tests, in bytes
_SLOTS = 128  # uid-triple slots available to concurrent zygotes on one machine


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; every field's unit is in its name."""

    timeout_s: float = 5.0  # wall-clock deadline for the whole run (load + tests)
    memory_mb: int = 1024  # address space of each process (RLIMIT_AS)
    file_size_mb: int = 16  # largest file a process may write, stdout/stderr included
    max_processes: int = 16  # processes + threads of the candidate's uid (RLIMIT_NPROC)
    max_open_files: int = 64  # file descriptors per process (RLIMIT_NOFILE)
    output_bytes: int = 4096  # tail of stdout/stderr kept in the result

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "max_processes", "max_open_files"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.max_open_files < 16:
            raise ValueError(f"Limits.max_open_files must be at least 16, got {self.max_open_files!r}")
        if self.output_bytes < 0:
            raise ValueError(f"Limits.output_bytes must be >= 0, got {self.output_bytes!r}")


@dataclass(frozen=True)
class Job:
    """One program to test.

    ``code`` is untrusted. ``prelude`` (trusted: imports, helper functions and classes the
    tests or answers rely on) runs first in both processes. ``tests`` (trusted) runs in the
    tester with ``candidate`` bound to the function ``entry_point`` names in the candidate's
    namespace — a name (``"add"``) or an expression (``"Solution().twoSum"``); a plain name is
    also bound under itself, as are the extra ``names`` (tests that call functions directly,
    MBPP style). ``check`` is the statement that runs the tests.
    """

    code: str
    tests: str
    entry_point: str = ""
    prelude: str = ""
    check: str = "check(candidate)"
    names: tuple[str, ...] = ()

    def exports(self) -> list[tuple[str, str]]:
        """(name in the tests, expression in the candidate's namespace) pairs."""
        pairs: list[tuple[str, str]] = []
        if self.entry_point:
            pairs.append(("candidate", self.entry_point))
            if self.entry_point.isidentifier():
                pairs.append((self.entry_point, self.entry_point))
        pairs += [(name, name) for name in self.names if name not in dict(pairs)]
        return pairs


@dataclass(frozen=True)
class Result:
    """Outcome of one run.

    ``test_time_s``: seconds the tests spent waiting on the candidate's functions (measured by
    the tester around each call, so IPC is included and module loading is not); None unless
    the tests ran. ``wall_s``: seconds from fork to verdict. ``stdout``/``stderr``: the last
    ``Limits.output_bytes`` of the candidate's output, decoded leniently.
    """

    status: str
    detail: str = ""
    test_time_s: float | None = None
    n_calls: int = 0
    wall_s: float = 0.0
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: int | None = None
    network_isolated: bool = False
    user_isolated: bool = False
    filesystem_isolated: bool = False

    @property
    def passed(self) -> bool:
        """Every test passed."""
        return self.status == "passed"

    @property
    def ran(self) -> bool:
        """The program ran to completion or failed only on a test assertion."""
        return self.status in ("passed", "failed")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --------------------------------------------------------------------------------------------
# Framing and value encoding (shared by harness, zygote, tester and candidate)
# --------------------------------------------------------------------------------------------


def _write_frame(fd: int, obj: Any) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass")
    payload = _FRAME.pack(len(data)) + data
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, max_bytes: int = _MAX_FRAME) -> Any:
    """The next framed JSON value, or None at end of file; ValueError for a malformed frame."""
    head = _read_exact(fd, _FRAME.size)
    if head is None:
        return None
    (size,) = _FRAME.unpack(head)
    if size > max_bytes:
        raise ValueError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body.decode("utf-8", "surrogatepass"))


class _Unsupported(Exception):
    """A value that cannot cross the process boundary as data."""


def _encode(value: Any, shared: frozenset[str], depth: int = 0) -> Any:
    """Plain-data JSON form of ``value``; containers are tagged one-key dicts.

    Types are checked exactly; subclasses of builtins are converted to the builtin so that no
    candidate-defined method (``__eq__``, ``__hash__``, …) survives the trip.
    """
    if depth > 900:
        raise _Unsupported("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int or t is float:
        return value
    if t is list:
        return {"L": [_encode(v, shared, depth + 1) for v in value]}
    if t is tuple:
        return {"T": [_encode(v, shared, depth + 1) for v in value]}
    if t is dict:
        return {
            "D": [[_encode(k, shared, depth + 1), _encode(v, shared, depth + 1)] for k, v in value.items()]
        }
    if t is set or t is frozenset:
        return {"S" if t is set else "F": [_encode(v, shared, depth + 1) for v in value]}
    if t is bytes or t is bytearray:
        return {"B" if t is bytes else "A": value.hex()}
    if t is complex:
        return {"C": [value.real, value.imag]}
    if t is range:
        return {"R": [value.start, value.stop, value.step]}
    if t.__name__ in shared and hasattr(value, "__dict__"):
        attrs = vars(value)
        if type(attrs) is not dict:
            raise _Unsupported(f"object of type {t.__name__} has no plain attribute dict")
        return {"O": [t.__name__, {str(k): _encode(v, shared, depth + 1) for k, v in attrs.items()}]}
    for base in (bool, int, float, str, tuple, list, dict, set, frozenset, bytes):
        if isinstance(value, base):
            converted = base(value)
            if type(converted) is not base:
                raise _Unsupported(f"cannot convert {t.__name__} to {base.__name__}")
            return _encode(converted, shared, depth + 1)
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):
        # Generators, map/filter/zip objects: the tests see a one-shot iterator over the items.
        items = []
        for item in value:
            items.append(_encode(item, shared, depth + 1))
            if len(items) > 10_000_000:
                raise _Unsupported("iterator too long")
        return {"I": items}
    raise _Unsupported(f"values of type {t.__name__} cannot be passed between processes")


def _decode(data: Any, shared: dict[str, type], depth: int = 0) -> Any:
    """Inverse of :func:`_encode`; never runs code of the sender's choosing."""
    if depth > 1000:
        raise _Unsupported("value nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if not (isinstance(data, dict) and len(data) == 1):
        raise _Unsupported("malformed value")
    ((tag, body),) = data.items()
    d = depth + 1
    if tag == "L":
        return [_decode(v, shared, d) for v in body]
    if tag == "T":
        return tuple(_decode(v, shared, d) for v in body)
    if tag == "D":
        return {_decode(k, shared, d): _decode(v, shared, d) for k, v in body}
    if tag == "S":
        return {_decode(v, shared, d) for v in body}
    if tag == "F":
        return frozenset(_decode(v, shared, d) for v in body)
    if tag == "B":
        return bytes.fromhex(body)
    if tag == "A":
        return bytearray.fromhex(body)
    if tag == "C":
        return complex(float(body[0]), float(body[1]))
    if tag == "R":
        return range(int(body[0]), int(body[1]), int(body[2]))
    if tag == "I":
        return iter([_decode(v, shared, d) for v in body])
    if tag == "O":
        name, attrs = body
        cls = shared.get(name)
        if cls is None:
            raise _Unsupported(f"unknown shared class {name!r}")
        obj = cls.__new__(cls)
        obj.__dict__.update({str(k): _decode(v, shared, d) for k, v in attrs.items()})
        return obj
    raise _Unsupported(f"unknown tag {tag!r}")


def _tail(path: str, n: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            data = fh.read(n)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# Harness side
# --------------------------------------------------------------------------------------------


def _default_uid_base() -> int:
    raw = os.environ.get("MRBENCH_SANDBOX_UID_BASE", "")
    if raw:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"MRBENCH_SANDBOX_UID_BASE must be an integer, got {raw!r}") from None
    return 61000  # 61000–61383: above distro system users, below systemd's dynamic range


class _Lease:
    """An exclusive claim on a uid triple, held as an ``flock`` on a root-only lock file."""

    def __init__(self, base: int) -> None:
        import fcntl
        import pwd

        lock_dir = "/tmp/mrbench-sandbox-locks"
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        os.chmod(lock_dir, 0o700)
        for slot in range(_SLOTS):
            uids = (base + 3 * slot, base + 3 * slot + 1, base + 3 * slot + 2)
            if any(_uid_has_account(pwd, u) for u in uids):
                continue
            fd = os.open(f"{lock_dir}/slot-{base}-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd: int | None = fd
            self.uids = uids
            return
        raise RuntimeError(f"no free sandbox uid slot from uid {base} (all {_SLOTS} in use)")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _uid_has_account(pwd: Any, uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


_PYTHON_CACHE: dict[tuple[str | None, int | None], str] = {}


def _find_python(preferred: str | None, uid: int | None) -> str:
    """An interpreter the sandbox uid can run (root's pyenv under a 0700 home is not one)."""
    import shutil
    import subprocess

    key = (preferred, uid)
    if key in _PYTHON_CACHE:
        return _PYTHON_CACHE[key]
    candidates = [preferred] if preferred else []
    if not preferred:
        env_python = os.environ.get("MRBENCH_SANDBOX_PYTHON")
        candidates += [env_python] if env_python else []
        candidates += [sys.executable, os.path.realpath(sys.executable)]
        candidates += [getattr(sys, "_base_executable", "")]
        candidates += ["/usr/local/bin/python3", "/usr/bin/python3", shutil.which("python3") or ""]
    tried = []
    for python in dict.fromkeys(c for c in candidates if c):
        tried.append(python)
        kwargs: dict[str, Any] = {}
        if uid is not None:
            kwargs = {"user": uid, "group": uid, "extra_groups": []}
        try:
            probe = subprocess.run(
                [python, "-I", "-S", "-c", "import json, ctypes, resource, fcntl"],
                env={},
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
                **kwargs,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            _PYTHON_CACHE[key] = python
            return python
    who = f"uid {uid}" if uid is not None else "this user"
    raise RuntimeError(
        f"no Python interpreter that {who} can execute was found (tried {', '.join(tried)}); "
        "pass Sandbox(python=...) or set MRBENCH_SANDBOX_PYTHON to a world-readable interpreter"
    )


class _Zygote:
    """Harness-side handle on one zygote process (used by one thread at a time)."""

    def __init__(self, python: str | None, uid_base: int, tmpfs_mb: int) -> None:
        import subprocess

        self.lease = _Lease(uid_base) if os.geteuid() == 0 else None
        uids = list(self.lease.uids) if self.lease else None
        try:
            interpreter = _find_python(python, uids[0] if uids else None)
            config = {"uids": uids, "tmpfs_mb": tmpfs_mb}
            self.proc = subprocess.Popen(
                [interpreter, "-I", "-S", os.path.abspath(__file__), "--zygote", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},  # nothing of the harness's environment (tokens, keys) reaches a candidate
                cwd="/",
                start_new_session=True,
            )
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.in_fd = self.proc.stdin.fileno()
            self.out_fd = self.proc.stdout.fileno()
            ready = self._receive(60.0)
            if not (isinstance(ready, dict) and ready.get("ready")):
                raise RuntimeError(f"sandbox zygote failed to start: {ready!r}")
        except BaseException:
            self.close()
            raise
        self.pid = int(ready["pid"])
        self.jobs_dir = str(ready["jobs_dir"])
        self.isolation = {
            k: bool(ready[k]) for k in ("user_isolated", "network_isolated", "filesystem_isolated")
        }
        self.counter = 0
        self.alive = True

    def _receive(self, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        buf = b""
        need = _FRAME.size
        size = None
        while len(buf) < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("sandbox zygote did not answer in time")
            ready, _, _ = select.select([self.out_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.out_fd, 1 << 20)
            if not chunk:
                raise EOFError("sandbox zygote exited")
            buf += chunk
            if size is None and len(buf) >= _FRAME.size:
                (size,) = _FRAME.unpack(buf[: _FRAME.size])
                need = _FRAME.size + size
        return json.loads(buf[_FRAME.size : need].decode("utf-8", "surrogatepass"))

    def run(self, job: Job, limits: Limits) -> dict[str, Any]:
        self.counter += 1
        job_name = f"{self.counter}.job"
        # The tests go straight to the tester: a file in its private inbox (in the zygote's
        # private /tmp, reached through the zygote's root link), readable by the tester's uid
        # only. The zygote, whose memory every candidate is forked from, never reads it.
        path = f"/proc/{self.pid}/root{self.jobs_dir}/{job_name}"
        payload = {"tests": job.tests, "prelude": job.prelude, "exports": job.exports(), "check": job.check}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if self.lease is not None:
                os.fchown(fd, self.lease.uids[1], self.lease.uids[1])
            os.write(fd, json.dumps(payload).encode("utf-8", "surrogatepass"))
        finally:
            os.close(fd)
        request = {
            "code": job.code,
            "prelude": job.prelude,
            "exports": job.exports(),
            "job_file": job_name,
            "limits": {
                "timeout_s": float(limits.timeout_s),
                "memory_mb": int(limits.memory_mb),
                "file_size_mb": int(limits.file_size_mb),
                "max_processes": int(limits.max_processes),
                "max_open_files": int(limits.max_open_files),
                "output_bytes": int(limits.output_bytes),
            },
        }
        _write_frame(self.in_fd, request)
        return self._receive(limits.timeout_s + 30.0)

    def close(self) -> None:
        self.alive = False
        proc = getattr(self, "proc", None)
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()  # EOF: the zygote cleans up and exits
                proc.wait(timeout=5)
            except Exception:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self.lease is not None:
            self.lease.release()
            self.lease = None


class Sandbox:
    """A pool of zygotes running :class:`Job` s concurrently (one per worker; cores + 2 by default).

    Thread-safe. Zygotes start lazily on first use and stop in :meth:`close` (also called at
    interpreter exit and by ``with Sandbox() as sb: ...``).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        workers: int | None = None,
        python: str | None = None,
        uid_base: int | None = None,
        tmpfs_mb: int = 64,
    ) -> None:
        import queue
        import threading

        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self.limits = limits or Limits()
        # A run waits on IPC between the tester and the program as much as it computes, so a
        # couple of workers more than cores keep the cores busy (measured: ~10-15% faster).
        self.workers = workers or (os.cpu_count() or 1) + 2
        self.python = python
        self.uid_base = _default_uid_base() if uid_base is None else uid_base
        self.tmpfs_mb = tmpfs_mb
        self._idle: queue.SimpleQueue[_Zygote] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._all: list[_Zygote] = []
        self._closed = False
        self._isolation: dict[str, bool] | None = None
        _LIVE.add(self)

    # -- worker pool -------------------------------------------------------------------------
    def _acquire(self) -> _Zygote:
        import queue

        with self._lock:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                start = self._started < self.workers
                if start:
                    self._started += 1
        if not start:
            return self._idle.get()
        try:
            zygote = _Zygote(self.python, self.uid_base, self.tmpfs_mb)
        except BaseException:
            with self._lock:
                self._started -= 1
            raise
        with self._lock:
            self._all.append(zygote)
            self._isolation = zygote.isolation
        return zygote

    def _release(self, zygote: _Zygote) -> None:
        if zygote.alive:
            self._idle.put(zygote)
            return
        with self._lock:
            self._started -= 1
            if zygote in self._all:
                self._all.remove(zygote)

    def uids(self, role: str = "candidate") -> tuple[int, ...]:
        """The unprivileged uids this sandbox's zygotes hold for ``role`` (``candidate``: untrusted
        code; ``tester``: the persistent test runners; ``all``); empty when not running as root."""
        index = {"candidate": (0,), "tester": (1,), "all": (0, 1, 2)}
        if role not in index:
            raise ValueError(f"unknown role {role!r}; choose from {', '.join(index)}")
        with self._lock:
            return tuple(z.lease.uids[i] for z in self._all if z.lease is not None for i in index[role])

    def isolation(self) -> dict[str, bool]:
        """Protections in force: ``user_isolated``, ``network_isolated``, ``filesystem_isolated``."""
        if self._isolation is None:
            self._release(self._acquire())
        assert self._isolation is not None
        return dict(self._isolation)

    # -- running -----------------------------------------------------------------------------
    def run(self, job: Job, limits: Limits | None = None, *, check_syntax: bool = True) -> Result:
        """Run one job; never raises for anything the candidate does.

        ``check_syntax``: compile the code here first and answer ``syntax_error`` without a run
        (callers that already compiled it pass False; the run then reports an ``error``).
        """
        limits = limits or self.limits
        if not job.exports():
            raise ValueError("Job needs an entry_point or names to call from the tests")
        if check_syntax:
            try:
                compile(job.code, "<candidate>", "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
                return Result(
                    "syntax_error", detail=f"{type(exc).__name__}: {exc}"[:500], **(self._isolation or {})
                )
        zygote = self._acquire()
        try:
            response = zygote.run(job, limits)
        except Exception as exc:  # the zygote died or hung: replace it, report a harness fault
            zygote.close()
            return Result("sandbox_error", detail=f"sandbox worker failed: {type(exc).__name__}: {exc}")
        finally:
            self._release(zygote)
        fields = {k: response[k] for k in Result.__dataclass_fields__ if k in response}
        fields.update(zygote.isolation)
        return Result(**fields)

    def run_many(self, jobs: list[Job], limits: Limits | None = None) -> list[Result]:
        """Run ``jobs`` concurrently on all workers; results in input order."""
        from concurrent.futures import ThreadPoolExecutor

        if len(jobs) <= 1:
            return [self.run(job, limits) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs))) as pool:
            return list(pool.map(lambda job: self.run(job, limits), jobs))

    def close(self) -> None:
        """Stop every zygote (killing anything still running) and release the uid leases."""
        with self._lock:
            self._closed = True
            zygotes, self._all = self._all, []
        for zygote in zygotes:
            zygote.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LiveSandboxes:
    """Closes every open sandbox at interpreter exit (zygotes would otherwise linger briefly)."""

    def __init__(self) -> None:
        import weakref

        self._refs: weakref.WeakSet[Sandbox] = weakref.WeakSet()
        self._registered = False

    def add(self, sandbox: Sandbox) -> None:
        if not self._registered:
            import atexit

            atexit.register(self.close_all)
            self._registered = True
        self._refs.add(sandbox)

    def close_all(self) -> None:
        for sandbox in list(self._refs):
            sandbox.close()


_LIVE = _LiveSandboxes()


# --------------------------------------------------------------------------------------------
# Zygote side: everything below runs in the zygote and its children (stdlib only)
# --------------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
_SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_PRELOAD = (
    # What programs and tests commonly import (all HumanEval imports among them): loaded once
    # here instead of once per run. Kept short: every page of the zygote is copied per fork.
    "bisect collections copy functools hashlib heapq itertools json math operator random re string typing"
    " array fcntl resource socket traceback"  # used by the zygote and its children themselves
).split()

# Fixed descriptor numbers inside the children.
_FD_CALLS_IN, _FD_REPLIES_OUT = 3, 4  # candidate
_FD_TESTER_SOCKET = 3  # tester: jobs in (with the channel's descriptors), verdicts out
_TESTER_MAX_RUNS = 1000  # a fresh tester now and then bounds whatever the tests leave behind


class _Zygote_:
    """The zygote's state: isolation set up once, a persistent tester, then one :meth:`run` per request.

    Per run only the candidate is forked. The tester is forked once (and again whenever it had
    to be killed or after ``_TESTER_MAX_RUNS`` runs); for each run it receives the job file's
    name, the run's nonce and its ends of the candidate's channel over a socket only it holds.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.uids: list[int] | None = config.get("uids")
        self.root = os.geteuid() == 0 and bool(self.uids)
        self.tmpfs_mb = int(config.get("tmpfs_mb", 64))
        self.network_isolated = False
        self.filesystem_isolated = False
        self.nproc_base = 0
        self.tester_pid: int | None = None
        self.tester_sock: Any = None
        self.tester_key: tuple[int, ...] = ()
        self.tester_runs = 0

    # -- setup ---------------------------------------------------------------------------------
    def _prctl(self, option: int, value: int) -> int:
        import ctypes

        return int(self.libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))

    def setup(self) -> None:
        self._prctl(_PR_SET_CHILD_SUBREAPER, 1)  # orphans of a run come back to us to be reaped
        flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC
        unshared = False
        if os.geteuid() == 0:
            unshared = self.libc.unshare(flags) == 0
        else:
            uid, gid = os.getuid(), os.getgid()
            if self.libc.unshare(flags | _CLONE_NEWUSER) == 0:
                unshared = True
                for name, text in (
                    ("setgroups", "deny"),
                    ("uid_map", f"{uid} {uid} 1"),
                    ("gid_map", f"{gid} {gid} 1"),
                ):
                    try:
                        with open(f"/proc/self/{name}", "w") as fh:
                            fh.write(text)
                    except OSError:
                        pass
        if unshared:
            self.network_isolated = _only_loopback()
            self.filesystem_isolated = self._private_tmp()
        os.umask(0o077)
        # Prepared once here so that each forked child has less to do (every page it writes
        # costs a copy-on-write fault, the main cost of a run).
        os.environ.clear()
        os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
        if hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(0)
        # spool/ (traversable, not listable) holds root-only run dirs, the tester's job inbox
        # and home (tester uid only) and the tester's log.
        self.spool = _mkdtemp("/tmp", "mrbench-zygote-")
        os.chmod(self.spool, 0o711)
        self.jobs_dir = os.path.join(self.spool, "jobs")
        self.tester_home = os.path.join(self.spool, "tester")
        self.tester_log = os.path.join(self.spool, "tester.log")
        for path in (self.jobs_dir, self.tester_home):
            os.mkdir(path, 0o700)
            if self.root:
                assert self.uids is not None
                os.chown(path, self.uids[1], self.uids[1])
        self.children_file = f"/proc/self/task/{os.getpid()}/children"
        if not self.root:
            # RLIMIT_NPROC counts every process of the user; leave room for what already runs.
            self.nproc_base = _count_user_processes(os.getuid())
        if self.root:
            reaper = self._kill_uids(candidate=True, tester=True)  # leftovers of a crashed zygote
            os.waitpid(reaper, 0)
        for name in _PRELOAD:
            try:
                __import__(name)
            except Exception:  # a speed-up only: a module that fails here is imported per run instead
                pass
        import gc

        # Children would otherwise touch (and so copy) every page of these objects on their
        # first collection; freezing keeps the fork copy-on-write cheap.
        gc.collect()
        gc.freeze()

    def _private_tmp(self) -> bool:
        if self.libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            return False
        ok = True
        for path in _SHARED_TMP:
            if os.path.isdir(path) and not os.path.islink(path):
                opts = f"size={self.tmpfs_mb}m,mode=1777".encode()
                if self.libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
                    ok = False
        return ok

    # -- the tester ----------------------------------------------------------------------------
    def _ensure_tester(self, limits: dict[str, Any]) -> None:
        key = (int(limits["memory_mb"]), int(limits["file_size_mb"]), int(limits["max_open_files"]))
        if self.tester_pid is not None and (key != self.tester_key or self.tester_runs >= _TESTER_MAX_RUNS):
            self._stop_tester()
        if self.tester_pid is not None:
            return
        import socket

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = os.open(self.tester_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        pid = os.fork()
        if pid == 0:
            self._child(
                role="tester",
                fds={0: None, 1: log, 2: log, _FD_TESTER_SOCKET: theirs.fileno()},
                cwd=self.tester_home,
                limits=limits,
                body=lambda: _tester_serve(self.jobs_dir),
            )
        theirs.close()
        os.close(log)
        self.tester_pid, self.tester_sock, self.tester_key, self.tester_runs = pid, ours, key, 0

    def _stop_tester(self) -> int | None:
        """Kill the tester, reap it and return its wait status."""
        pid, self.tester_pid = self.tester_pid, None
        if self.tester_sock is not None:
            self.tester_sock.close()
            self.tester_sock = None
        if pid is None:
            return None
        if self.root:
            os.waitpid(self._kill_uids(candidate=False, tester=True), 0)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return None

    def _await_tester(self, nonce: str, deadline: float) -> tuple[Any, bool, bool, bool]:
        """The tester's verdict for this run: (verdict or None, timed_out, harness_gone, tester_gone).

        Records carrying another nonce are late verdicts of an earlier, timed-out run: skipped.
        """
        sock = self.tester_sock
        if sock is None:
            return None, False, False, True
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, True, False, False
            ready, _, _ = select.select([sock, 0], [], [], remaining)
            if 0 in ready:
                return None, True, True, False  # the harness closed our stdin: it is gone, stop now
            if sock in ready:
                try:
                    data = sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    return None, False, False, True
                verdict = _parse_verdict(data, nonce)
                if isinstance(verdict, dict):
                    return verdict, False, False, False

    # -- one run -------------------------------------------------------------------------------
    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        import array
        import socket

        limits = req["limits"]
        self._ensure_tester(limits)
        run_dir = _mkdtemp(self.spool, "run-")
        work = os.path.join(run_dir, "work")
        os.mkdir(work, 0o700)
        if self.root:
            assert self.uids is not None
            os.chown(work, self.uids[0], self.uids[0])
        job_path = os.path.join(self.jobs_dir, os.path.basename(req["job_file"]))
        out_path, err_path = os.path.join(run_dir, "out"), os.path.join(run_dir, "err")
        files = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for p in (out_path, err_path)]
        calls_r, calls_w = os.pipe()
        replies_r, replies_w = os.pipe()
        started = time.monotonic()
        deadline = started + float(limits["timeout_s"])

        compiled = _Compiled(req)
        job_line = os.path.basename(job_path).encode() + b"\n"
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [replies_r, calls_w]))]
        cand_pid = os.fork()
        if cand_pid == 0:
            self._child(
                role="candidate",
                fds={0: None, 1: files[0], 2: files[1], _FD_CALLS_IN: calls_r, _FD_REPLIES_OUT: replies_w},
                cwd=work,
                limits=limits,
                body=lambda: _candidate_main(compiled),
            )
        # Drawn only now, so the candidate (a copy of our memory at fork time) never holds it.
        # (Little else happens while the candidate lives: every page we write now costs a
        # copy-on-write fault, so the message to the tester was prepared before the fork.)
        nonce = os.urandom(16).hex()
        tester_gone = False
        try:
            self.tester_sock.sendmsg([job_line, nonce.encode()], ancillary)
        except OSError:
            tester_gone = True
        for fd in (calls_r, calls_w, replies_r, replies_w, *files):
            os.close(fd)

        verdict, timed_out, harness_gone = None, False, False
        if not tester_gone:
            verdict, timed_out, harness_gone, tester_gone = self._await_tester(nonce, deadline)
        verdict_at = time.monotonic()
        # When the tests lost the program, give its exit a moment to land so we can say how it
        # ended; normally it ends by itself right after the verdict (the tests hang up).
        lost = isinstance(verdict, dict) and verdict.get("v") in ("gone", "error")
        ended = _wait_exits((cand_pid,), 0.0 if timed_out or tester_gone else 0.05 if lost else 0.02)
        cand_status = ended.get(cand_pid)
        self._cleanup(cand_pid, fast=cand_pid in ended)
        if timed_out and not harness_gone and not tester_gone:
            # The tester may still be waiting on the killed program or stuck in the tests:
            # let it report (the late verdict is ignored), else replace it.
            _, still_waiting, harness_gone, tester_gone = self._await_tester(nonce, time.monotonic() + 1.0)
            tester_gone = tester_gone or still_waiting
        test_status = self._stop_tester() if tester_gone else None
        self.tester_runs += 1

        out_tail = _tail(out_path, int(limits["output_bytes"]))
        err_tail = _tail(err_path, int(limits["output_bytes"]))
        log_tail = _tail(self.tester_log, 2000) if verdict is None or verdict.get("v") == "harness" else ""
        try:
            os.truncate(self.tester_log, 0)
        except OSError:
            pass
        _rmtree(run_dir)
        _rmtree(job_path)
        self._empty_tmp()
        if harness_gone:
            raise SystemExit(0)

        result: dict[str, Any] = {
            "wall_s": round(verdict_at - started, 6),
            "stdout": out_tail,
            "stderr": err_tail,
        }
        if cand_status is not None:  # it ended by itself, before we killed anything
            if os.WIFSIGNALED(cand_status):
                result["signal"] = os.WTERMSIG(cand_status)
            elif os.WIFEXITED(cand_status):
                result["exit_code"] = os.WEXITSTATUS(cand_status)
        result.update(_classify(verdict, timed_out, cand_status, test_status, log_tail))
        return result

    def _child(
        self, *, role: str, fds: dict[int, int | None], cwd: str, limits: dict[str, Any], body: Any
    ) -> None:
        """Finish isolating a freshly forked child, then run ``body``; never returns."""
        code = 70
        try:
            os.setsid()
            import fcntl

            devnull = os.open("/dev/null", os.O_RDONLY)
            moved = [
                (dst, fcntl.fcntl(devnull if src is None else src, fcntl.F_DUPFD, 64))
                for dst, src in fds.items()
            ]
            for dst, src in moved:
                os.dup2(src, dst)
            os.closerange(max(fds) + 1, 1 << 20)
            os.chdir(cwd)
            self._limit(role, limits)
            if self.root:
                assert self.uids is not None
                uid = self.uids[0] if role == "candidate" else self.uids[1]
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            else:
                self._drop_capabilities()  # a user namespace gave us some; the candidate gets none
            self._prctl(_PR_SET_NO_NEW_PRIVS, 1)
            self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if role == "tester":
                self._prctl(_PR_SET_DUMPABLE, 0)  # /proc/<pid>/{fd,mem} closed even to its own uid
            # The rest of the environment was set once in setup(); sys.std* already wrap fds 0-2.
            os.environ["HOME"] = os.environ["TMPDIR"] = cwd
            code = 0
            body()
        except BaseException:
            code = 71
            try:
                import traceback

                os.write(2, traceback.format_exc().encode("utf-8", "replace"))
            except BaseException:
                pass
        finally:
            os._exit(code)

    def _drop_capabilities(self) -> None:
        import ctypes

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

        header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (Data * 2)()
        self.libc.capset(ctypes.byref(header), ctypes.byref(data))

    def _limit(self, role: str, limits: dict[str, Any]) -> None:
        import resource

        mb = 1024 * 1024
        nproc = int(limits["max_processes"]) if role == "candidate" else 4
        if not self.root:
            nproc += self.nproc_base + 8
        settings = [
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb, int(limits["memory_mb"]) * mb),
            (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mb, int(limits["file_size_mb"]) * mb),
            (resource.RLIMIT_NOFILE, int(limits["max_open_files"]), int(limits["max_open_files"])),
            (resource.RLIMIT_NPROC, nproc, nproc),
        ]
        if role == "candidate":  # the persistent tester is bounded by each run's deadline instead
            cpu = math.ceil(float(limits["timeout_s"])) + 1
            settings.append((resource.RLIMIT_CPU, cpu, cpu + 1))  # SIGXCPU first, then SIGKILL
        for res, soft, hard in settings:
            resource.setrlimit(res, (soft, hard))

    # -- cleanup -------------------------------------------------------------------------------
    def _kill_uids(self, *, candidate: bool, tester: bool) -> int:
        """Fork the reaper: SIGKILL to every process of the candidate and/or tester uid."""
        assert self.uids is not None
        cand, test, reaper = self.uids
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(reaper, reaper, reaper)
                # real=reaper, effective=candidate, saved=tester: the candidate cannot signal us
                # (it matches neither our real nor saved uid), and we may switch to the tester's.
                os.setresuid(reaper, cand, test)
                if candidate:
                    os.kill(-1, signal.SIGKILL)
                if tester:
                    os.setresuid(-1, test, -1)
                    os.kill(-1, signal.SIGKILL)
                os._exit(0)
            except BaseException:
                os._exit(1)
        return pid

    def _children(self) -> set[int]:
        try:
            with open(self.children_file) as fh:
                return {int(p) for p in fh.read().split()}
        except OSError:
            return _child_pids(os.getpid())

    def _cleanup(self, cand_pid: int, *, fast: bool) -> None:
        """Kill everything of the run (all but the tester) and reap it.

        ``fast``: the candidate is already reaped. Every orphan of a run is re-parented to us
        (we are a subreaper), so if our only child left is the tester, nothing of the run is
        alive and no sweep is needed.
        """
        spare = {self.tester_pid} if self.tester_pid is not None else set()
        if fast and not (self._children() - spare):
            return
        try:
            os.killpg(cand_pid, signal.SIGKILL)  # it leads its own session
        except OSError:
            pass
        if self.root:
            _, status = os.waitpid(self._kill_uids(candidate=True, tester=False), 0)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                # Everything of the candidate's uid is doomed; reap it as it dies (orphans keep
                # arriving as their parents die, hence the loop).
                for _ in range(100_000):
                    left = self._children() - spare
                    if not left:
                        return
                    for pid in left:
                        try:
                            os.waitpid(pid, 0)
                        except ChildProcessError:
                            pass
        _kill_descendants(os.getpid(), spare)

    def _empty_tmp(self) -> None:
        if not self.filesystem_isolated:
            return  # shared with the host: never delete what we did not create
        for base in _SHARED_TMP:
            try:
                entries = os.listdir(base)
            except OSError:
                continue
            for name in entries:
                path = os.path.join(base, name)
                if path != self.spool:
                    _rmtree(path)

    def shutdown(self) -> None:
        self._stop_tester()
        if self.root:
            reaper = self._kill_uids(candidate=True, tester=True)
            os.waitpid(reaper, 0)
        _kill_descendants(os.getpid(), set())
        _rmtree(self.spool)


def _mkdtemp(parent: str, prefix: str) -> str:
    for _ in range(100):
        path = os.path.join(parent, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise OSError(f"could not create a directory under {parent}")


def _rmtree(path: str) -> None:
    import shutil

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _only_loopback() -> bool:
    import socket

    try:
        return {name for _, name in socket.if_nameindex()} <= {"lo"}
    except OSError:
        return False


def _count_user_processes(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _child_pids(parent: int) -> set[int]:
    """Children of ``parent`` from ``/proc/*/stat`` (when ``/proc/<pid>/task/*/children`` is missing)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if int(stat[stat.rfind(b")") + 2 :].split()[1]) == parent:
            found.add(int(entry))
    return found


def _kill_descendants(root: int, spare: set[int]) -> None:
    """SIGKILL every descendant of ``root`` except the ``spare`` subtrees until none is left,
    reaping as we go (the slow path, without dedicated uids)."""
    for _ in range(2000):
        parents: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            parents.setdefault(int(fields[1]), []).append(int(entry))
        found, stack = [], [p for p in parents.get(root, []) if p not in spare]
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack += parents.get(pid, [])
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in found:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.0005)


def _wait_exits(pids: tuple[int, ...], wait_s: float) -> dict[int, int]:
    """Reap those of ``pids`` that end within ``wait_s`` seconds; their wait statuses by pid."""
    statuses: dict[int, int] = {}
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass
    end = time.monotonic() + wait_s
    try:
        while True:
            for pid in pids:
                if pid in statuses:
                    continue
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                if done:
                    statuses[pid] = status
            remaining = end - time.monotonic()
            pending = [p for p in pids if p not in statuses]
            if not pending or remaining <= 0:
                return statuses
            waitable = [fds[p] for p in pending if p in fds]
            if len(waitable) == len(pending):
                select.select(waitable, [], [], remaining)  # a pidfd turns readable at exit
            else:
                time.sleep(min(remaining, 0.0005))
    finally:
        for fd in fds.values():
            os.close(fd)


_SIGNAL_REASONS = {
    signal.SIGXCPU: "CPU time limit",
    signal.SIGXFSZ: "file size / output limit",
    signal.SIGSEGV: "segmentation fault (e.g. stack overflow)",
    signal.SIGKILL: "killed (limit or itself)",
    signal.SIGABRT: "aborted",
}


def _parse_verdict(raw: bytes, nonce: str) -> dict[str, Any] | str | None:
    """The tester's verdict dict; None when there is none; ``"forged"`` without the nonce."""
    if not raw:
        return None
    prefix = nonce.encode()
    if not raw.startswith(prefix):
        return "forged"
    try:
        verdict = json.loads(raw[len(prefix) :].decode("utf-8"))
    except ValueError:
        return "forged"
    return verdict if isinstance(verdict, dict) else "forged"


def _classify(
    verdict: dict[str, Any] | str | None,
    timed_out: bool,
    cand_status: int | None,
    test_status: int | None,
    log_tail: str,
) -> dict[str, Any]:
    """Map the verdict and exit statuses to the ``status``/``detail``/timing fields of a Result."""
    if verdict == "forged":
        return {"status": "error", "detail": "verdict without the run's nonce (forged?)"}
    if not isinstance(verdict, dict):
        if timed_out:
            return {"status": "timeout", "detail": "no verdict before the wall-clock deadline"}
        if test_status is not None and os.WIFSIGNALED(test_status):
            sig = os.WTERMSIG(test_status)
            return {
                "status": "killed",
                "detail": f"test process died: {_SIGNAL_REASONS.get(sig, f'signal {sig}')}",
            }
        return {
            "status": "sandbox_error",
            "detail": f"test process ended without a verdict: {log_tail[-500:]}",
        }
    kind = verdict.get("v")
    out: dict[str, Any] = {"detail": str(verdict.get("d", ""))[:500], "n_calls": int(verdict.get("n", 0))}
    if kind in ("passed", "failed"):
        out["test_time_s"] = float(verdict.get("t", 0.0))
        out["status"] = kind
    elif kind == "error" and verdict.get("k") == "CompileError":
        out["status"] = "syntax_error"
    elif kind == "error" and verdict.get("k") == "SystemExit":
        out.update(status="exited", detail=out["detail"] or "the program raised SystemExit")
    elif kind == "gone":
        if cand_status is not None and os.WIFSIGNALED(cand_status):
            sig = os.WTERMSIG(cand_status)
            out.update(status="killed", detail=_SIGNAL_REASONS.get(sig, f"signal {sig}"))
        elif cand_status is not None and os.WIFEXITED(cand_status):
            code = os.WEXITSTATUS(cand_status)
            out.update(
                status="exited", detail=f"the program exited with code {code} before the tests finished"
            )
        else:
            out.update(status="error", detail="the program closed its channel to the tests")
    elif kind == "error":
        out["status"] = "error"
    else:
        out["status"] = "sandbox_error"
    return out


# -- candidate process -------------------------------------------------------------------------


def _describe(exc: BaseException) -> tuple[str, str]:
    try:
        message = str(exc)[:300]
    except BaseException:
        message = "<unprintable>"
    return type(exc).__name__, message


class _Compiled:
    """A job's code compiled by the zygote before forking (the child only executes it).

    Compiling is the same work wherever it happens, but done in the zygote it allocates in
    pages the zygote owns instead of copy-on-write pages of a short-lived child; preludes are
    cached, since a training batch runs the same problem many times.
    """

    _preludes: ClassVar[dict[str, Any]] = {}

    def __init__(self, req: dict[str, Any]) -> None:
        self.error: tuple[str, str] | None = None
        self.prelude: Any = None
        self.code: Any = None
        self.exports: list[tuple[str, Any]] = []
        try:
            text = req["prelude"]
            self.prelude = self._preludes.get(text)
            if self.prelude is None:
                self.prelude = compile(text, "<prelude>", "exec", dont_inherit=True)
                if len(self._preludes) >= 64:
                    self._preludes.pop(next(iter(self._preludes)))
                self._preludes[text] = self.prelude
            self.code = compile(req["code"], "<candidate>", "exec", dont_inherit=True)
            self.exports = [
                (name, compile(expr, "<entry point>", "eval", dont_inherit=True))
                for name, expr in req["exports"]
            ]
        except BaseException as exc:  # SyntaxError, or the compiler giving up (RecursionError, …)
            self.error = ("CompileError", "{}: {}".format(*_describe(exc)))


def _candidate_main(job: _Compiled) -> None:
    """Run the compiled code and serve calls from the tester until it hangs up."""
    import builtins

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    ns: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": builtins}
    functions: dict[str, Any] = {}
    shared: dict[str, type] = {}
    load_error = job.error
    if load_error is None:
        try:
            exec(job.prelude, ns)
            shared = {k: v for k, v in ns.items() if isinstance(v, type)}
            exec(job.code, ns)
            for name, expr in job.exports:
                functions[name] = eval(expr, ns)
        except BaseException as exc:
            load_error = _describe(exc)
    names = frozenset(shared)
    _write_frame(_FD_REPLIES_OUT, {"ready": load_error is None, "e": load_error})
    while True:
        try:
            call = _read_frame(_FD_CALLS_IN)
        except ValueError:
            break
        if call is None:
            break
        try:
            fn = functions[call["f"]]
            args = _decode(call["a"], shared)
            kwargs = _decode(call["k"], shared)
            value = fn(*args, **kwargs)
            reply: dict[str, Any] = {"v": _encode(value, names)}
        except _Unsupported as exc:
            reply = {"e": ["UnsupportedValue", str(exc)]}
        except BaseException as exc:
            reply = {"e": list(_describe(exc))}
        try:
            _write_frame(_FD_REPLIES_OUT, reply)
        except (_Unsupported, ValueError, TypeError, RecursionError) as exc:
            _write_frame(_FD_REPLIES_OUT, {"e": ["UnsupportedValue", str(exc)[:300]]})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


# -- tester process ----------------------------------------------------------------------------


class _CandidateGone(BaseException):
    """The candidate process ended or broke the protocol (BaseException: tests cannot swallow it)."""


class _CandidateBrokeProtocol(_CandidateGone):
    """The candidate wrote something other than a well-formed reply to its channel."""


class _HarnessFault(BaseException):
    """The tests asked for something the sandbox cannot do (e.g. pass a lambda)."""


class CandidateError(Exception):
    """An exception raised by the candidate's code, re-raised in the tests by type name."""

    kind = "Exception"


_ERROR_TYPES: dict[str, type] = {}


def _candidate_error(kind: str, message: str) -> CandidateError:
    """An instance of ``CandidateError`` that also is the builtin exception ``kind`` when one
    exists (tests may expect ``ValueError``), except ``AssertionError``: an assertion raised by
    the candidate must not look like a failed test."""
    import builtins

    cls = _ERROR_TYPES.get(kind)
    if cls is None:
        base = getattr(builtins, kind, None)
        cls = CandidateError
        if isinstance(base, type) and issubclass(base, Exception) and base is not AssertionError:
            try:
                cls = type(kind, (CandidateError, base), {"kind": kind})
            except TypeError:
                cls = CandidateError
        _ERROR_TYPES[kind] = cls
    try:
        exc = cls(message)
    except Exception:
        exc = CandidateError(message)
    exc.kind = kind
    return exc


class _Channel:
    """The tester's end of the candidate's channel (replies in, calls out)."""

    def __init__(self, shared: dict[str, type], replies_fd: int, calls_fd: int) -> None:
        self.replies_fd = replies_fd
        self.calls_fd = calls_fd
        self.shared = shared
        self.names = frozenset(shared)
        self.loaded: bool | None = None
        self.load_error: tuple[str, str] | None = None
        self.gone = False
        self.calls = 0
        self.elapsed = 0.0

    def _receive(self) -> Any:
        try:
            message = _read_frame(self.replies_fd, _MAX_REPLY)
        except (ValueError, UnicodeDecodeError) as exc:
            self.gone = True
            raise _CandidateBrokeProtocol(f"the program wrote garbage to its channel: {exc}") from None
        if message is None:
            self.gone = True
            raise _CandidateGone("the program ended")
        if not isinstance(message, dict):
            self.gone = True
            raise _CandidateBrokeProtocol("the program wrote garbage to its channel")
        return message

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.gone:
            raise _CandidateGone("the program ended")
        if self.loaded is None:
            ready = self._receive()
            self.loaded = bool(ready.get("ready"))
            err = ready.get("e")
            if not self.loaded:
                self.load_error = (
                    (str(err[0]), str(err[1])) if isinstance(err, list) and len(err) == 2 else ("Error", "")
                )
        if not self.loaded:
            assert self.load_error is not None
            raise _candidate_error(*self.load_error)
        try:
            request = {"f": name, "a": _encode(args, self.names), "k": _encode(kwargs, self.names)}
        except _Unsupported as exc:
            raise _HarnessFault(f"test argument cannot be passed to the program: {exc}") from None
        self.calls += 1
        started = time.perf_counter()
        try:
            _write_frame(self.calls_fd, request)
        except OSError:
            self.gone = True
            raise _CandidateGone("the program ended") from None
        reply = self._receive()
        self.elapsed += time.perf_counter() - started
        if "v" in reply:
            try:
                return _decode(reply["v"], self.shared)
            except (_Unsupported, ValueError, TypeError, KeyError, RecursionError) as exc:
                raise _candidate_error("UnsupportedValue", str(exc)) from None
        err = reply.get("e")
        if isinstance(err, list) and len(err) == 2:
            raise _candidate_error(str(err[0]), str(err[1]))
        self.gone = True
        raise _CandidateBrokeProtocol("the program wrote garbage to its channel")


class _Proxy:
    """Stands in for the candidate's function inside the tests."""

    def __init__(self, channel: _Channel, name: str) -> None:
        self._channel = channel
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<candidate function {self._name}>"


def _tester_serve(jobs_dir: str) -> None:
    """The tester's loop: for each run, read the job file, test, send the verdict (nonce first)."""
    import socket

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    sock = socket.socket(fileno=_FD_TESTER_SOCKET)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return  # the zygote hung up
        job, _, nonce_bytes = message.partition(b"\n")  # "<job file name>\n<nonce>"
        nonce = nonce_bytes.decode("ascii", "replace")
        try:
            if len(fds) != 2:
                raise ValueError(f"expected 2 descriptors, got {len(fds)}")
            verdict = _tester_run(os.path.join(jobs_dir, os.path.basename(job.decode())), fds[0], fds[1])
        except Exception as exc:
            verdict = {"v": "harness", "d": f"tester: {type(exc).__name__}: {exc}"[:500]}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.send((nonce + json.dumps(verdict)).encode("utf-8", "replace"))
        except OSError:
            return


_TESTER_CODE: dict[tuple[str, str], Any] = {}


def _tester_compile(source: str, filename: str) -> Any:
    """Compiled test code, cached (the persistent tester sees the same problem many times)."""
    key = (source, filename)
    code = _TESTER_CODE.get(key)
    if code is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        if len(_TESTER_CODE) >= 256:
            _TESTER_CODE.pop(next(iter(_TESTER_CODE)))
        _TESTER_CODE[key] = code
    return code


def _tester_run(job_path: str, replies_fd: int, calls_fd: int) -> dict[str, Any]:
    """Run one job's tests against proxies of the candidate's functions; the verdict dict."""
    import builtins

    with open(job_path, "rb") as fh:
        job = json.loads(fh.read().decode("utf-8", "surrogatepass"))
    os.unlink(job_path)
    ns: dict[str, Any] = {"__name__": "__tests__", "__builtins__": builtins}
    verdict: dict[str, Any]
    channel = _Channel({}, replies_fd, calls_fd)
    try:
        exec(_tester_compile(job["prelude"], "<prelude>"), ns)
        channel = _Channel({k: v for k, v in ns.items() if isinstance(v, type)}, replies_fd, calls_fd)
        for name, _ in job["exports"]:
            ns[name] = _Proxy(channel, name)
        exec(_tester_compile(job["tests"], "<tests>"), ns)
        for name, _ in job["exports"]:
            ns[name] = _Proxy(channel, name)  # the tests' module code may have rebound a name
        exec(_tester_compile(job["check"], "<check>"), ns)
        if channel.calls == 0 and channel.loaded is None:
            verdict = {"v": "harness", "d": "the tests never called the program"}
        elif channel.gone:
            verdict = {"v": "gone"}
        else:
            verdict = {"v": "passed"}
    except _CandidateBrokeProtocol as exc:
        verdict = {"v": "error", "k": "ProtocolError", "d": str(exc)}
    except _CandidateGone as exc:
        verdict = {"v": "gone", "d": str(exc)}
    except _HarnessFault as exc:
        verdict = {"v": "harness", "d": str(exc)}
    except CandidateError as exc:
        verdict = {"v": "error", "k": exc.kind, "d": f"{exc.kind}: {exc}"}
    except AssertionError as exc:
        verdict = {"v": "failed", "d": f"AssertionError: {exc}"[:300]}
    except BaseException as exc:
        kind, message = _describe(exc)
        verdict = {"v": "error", "k": kind, "d": f"{kind} in the tests: {message}"}
    if channel.gone and verdict["v"] == "passed":
        verdict = {"v": "gone"}
    verdict.update(n=channel.calls, t=round(channel.elapsed, 9))
    return verdict


# -- zygote main loop --------------------------------------------------------------------------


def _zygote_main(config_json: str) -> None:
    zygote = _Zygote_(json.loads(config_json))
    zygote.setup()
    _write_frame(
        1,
        {
            "ready": True,
            "pid": os.getpid(),
            "jobs_dir": zygote.jobs_dir,
            "user_isolated": zygote.root,
            "network_isolated": zygote.network_isolated,
            "filesystem_isolated": zygote.filesystem_isolated,
        },
    )
    while True:
        try:
            request = _read_frame(0)
        except (ValueError, OSError):
            break
        if request is None:
            break
        try:
            response = zygote.run(request)
        except SystemExit:
            break
        except Exception as exc:
            import traceback

            response = {"status": "sandbox_error", "detail": f"{exc!r}: {traceback.format_exc()[-800:]}"}
        _write_frame(1, response)
    zygote.shutdown()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--zygote":
    _zygote_main(sys.argv[2])
