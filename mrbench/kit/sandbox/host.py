"""The host side: :class:`Sandbox`, a thread-safe pool of zygote processes, one per worker.

Each worker is a zygote (:mod:`.zygote`) started as a script with an empty environment; when
the host runs as root it first leases three unused uids for it (candidate, tester, reaper) with
an ``flock``-ed file per slot, so that concurrent harnesses on one machine never share one. A
run writes the tests straight into the tester's inbox and sends the zygote the code, the
exports and the limits; the zygote answers the :class:`~.job.Result`'s fields.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from mrbench.core.env import SANDBOX_PYTHON, SANDBOX_UID_BASE

from .job import Job, Result
from .limits import Limits
from .wire import read_frame_within, write_frame

_SLOTS = 128  # uid-triple slots available to concurrent zygotes on one machine
_ZYGOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")


def _default_uid_base() -> int:
    # 61000–61383 by default: above distro system users, below systemd's dynamic range
    return SANDBOX_UID_BASE.get()


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
        env_python = SANDBOX_PYTHON.get()
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
        f"pass Sandbox(python=...) or set {SANDBOX_PYTHON.name} to a world-readable interpreter"
    )


class _ZygoteHandle:
    """Host-side handle on one zygote process (used by one thread at a time)."""

    def __init__(self, python: str | None, uid_base: int, tmpfs_mb: int) -> None:
        import subprocess

        self.lease = _Lease(uid_base) if os.geteuid() == 0 else None
        uids = list(self.lease.uids) if self.lease else None
        try:
            interpreter = _find_python(python, uids[0] if uids else None)
            config = {"uids": uids, "tmpfs_mb": tmpfs_mb}
            self.proc = subprocess.Popen(
                # -s -S -P and an environment of one variable: isolated as by -I (no user site,
                # no site, no script folder on the path, no PYTHON* settings of ours) except for
                # the fixed hash seed, which -I would ignore: it makes set order, and so the
                # work counted in a candidate, the same in every run.
                [interpreter, "-s", "-S", "-P", _ZYGOTE_SCRIPT, "--zygote", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={"PYTHONHASHSEED": "0"},  # nothing of the harness's environment reaches a candidate
                cwd="/",
                start_new_session=True,
            )
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.in_fd = self.proc.stdin.fileno()
            self.out_fd = self.proc.stdout.fileno()
            ready = read_frame_within(self.out_fd, 60.0)
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
            "limits": limits.to_wire(),
        }
        write_frame(self.in_fd, request)
        return read_frame_within(self.out_fd, limits.timeout_s + 30.0)

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
        self._idle: queue.SimpleQueue[_ZygoteHandle] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._all: list[_ZygoteHandle] = []
        self._closed = False
        self._isolation: dict[str, bool] | None = None
        _LIVE.add(self)

    # -- worker pool -------------------------------------------------------------------------
    def _acquire(self) -> _ZygoteHandle:
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
            zygote = _ZygoteHandle(self.python, self.uid_base, self.tmpfs_mb)
        except BaseException:
            with self._lock:
                self._started -= 1
            raise
        with self._lock:
            self._all.append(zygote)
            self._isolation = zygote.isolation
        return zygote

    def _release(self, zygote: _ZygoteHandle) -> None:
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
