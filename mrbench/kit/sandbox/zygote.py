"""The zygote: a small, single-threaded process that forks one candidate per run (stdlib only).

:mod:`.host` starts it as a script, ``python -s -S -P <this file> --zygote CONFIG`` (CONFIG: JSON
with the leased ``uids`` or null, and ``tmpfs_mb``), with an environment of one fixed
``PYTHONHASHSEED``. It sets up its isolation once (:mod:`.isolation`), preloads common
modules, answers ``{"ready": true, ...}``, then serves run requests framed on stdin
(:mod:`.wire`) with result dicts on stdout until stdin closes. Per run it forks the candidate
(:mod:`.candidate`) and hands the run to its persistent tester (:mod:`.tester`), waits for the
verdict (:mod:`.verdict`) until the deadline, then kills and reaps everything of the run
(:mod:`.processes`).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Started as a script: -s -S -P put neither site-packages nor this directory
    # on sys.path, so mrbench cannot be imported — and must not be: the zygote runs on the
    # standard library alone and every module it loads is copied into each candidate. Instead,
    # this directory becomes a bare package named _mrbench_sandbox (a module object whose
    # __path__ is the directory; its __init__.py, the host side, is never run) and this script
    # declares itself part of it (PEP 366), so that the relative imports below load the sibling
    # files (wire.py, limits.py, isolation.py, …) by path, and theirs resolve among themselves.
    _package = type(sys)("_mrbench_sandbox")
    _package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules[_package.__name__] = _package
    __package__ = _package.__name__

# Below the bootstrap on purpose: the relative imports need it when run as a script.
import json
import select
import signal
import time
from typing import Any

from . import isolation, processes
from .candidate import Compiled
from .candidate import serve as serve_candidate
from .limits import apply_rlimits
from .tester import serve as serve_tests
from .verdict import classify, parse_verdict
from .wire import FD_CALLS_IN, FD_REPLIES_OUT, FD_TESTER_SOCKET, read_frame, write_frame

_PRELOAD = (
    # What programs and tests commonly import (all HumanEval imports among them): loaded once
    # here instead of once per run. Kept short: every page of the zygote is copied per fork.
    "bisect collections copy functools hashlib heapq itertools json math operator random re string typing"
    " array fcntl resource socket traceback"  # used by the zygote and its children themselves
).split()
_TESTER_MAX_RUNS = 1000  # a fresh tester now and then bounds whatever the tests leave behind


class _Run:
    """One run's folders, files, pipes, clock, program and message to the tester (see
    :meth:`Zygote._prepare_run`). Plain slots: the zygote imports no more than it needs."""

    __slots__ = (
        "ancillary",
        "calls",
        "compiled",
        "deadline",
        "err_path",
        "files",
        "job_line",
        "job_path",
        "limits",
        "out_path",
        "replies",
        "run_dir",
        "started",
        "work",
    )
    ancillary: list[tuple[int, int, Any]]
    calls: tuple[int, int]  # (read, write): the candidate's calls to the tests
    compiled: Compiled
    deadline: float
    err_path: str
    files: list[int]  # the candidate's stdout and stderr
    job_line: bytes
    job_path: str
    limits: dict[str, Any]
    out_path: str
    replies: tuple[int, int]  # (read, write): the tests' replies to the candidate
    run_dir: str
    started: float
    work: str


class Zygote:
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
    def setup(self) -> None:
        isolation.prctl(self.libc, isolation.PR_SET_CHILD_SUBREAPER, 1)  # orphans of a run come back to us
        if isolation.unshare_namespaces(self.libc):
            self.network_isolated = isolation.only_loopback()
            self.filesystem_isolated = isolation.private_tmp(self.libc, self.tmpfs_mb)
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
        self.spool = isolation.mkdtemp("/tmp", "mrbench-zygote-")
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
            self.nproc_base = processes.count_user_processes(os.getuid())
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
                fds={0: None, 1: log, 2: log, FD_TESTER_SOCKET: theirs.fileno()},
                cwd=self.tester_home,
                limits=limits,
                body=lambda: serve_tests(self.jobs_dir),
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
                verdict = parse_verdict(data, nonce)
                if isinstance(verdict, dict):
                    return verdict, False, False, False

    # -- one run -------------------------------------------------------------------------------
    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        """Run one request (code, prelude, exports, job file name, limits); the Result's fields."""
        self._ensure_tester(req["limits"])
        run = self._prepare_run(req)
        cand_pid = self._fork_candidate(run)
        nonce, tester_gone = self._send_job(run)
        verdict, timed_out, harness_gone = None, False, False
        if not tester_gone:
            verdict, timed_out, harness_gone, tester_gone = self._await_tester(nonce, run.deadline)
        verdict_at = time.monotonic()
        cand_status = self._reap_candidate(cand_pid, verdict, quick=timed_out or tester_gone)
        if timed_out and not harness_gone and not tester_gone:
            harness_gone, tester_gone = self._after_timeout(nonce)
        test_status = self._stop_tester() if tester_gone else None
        self.tester_runs += 1
        out_tail, err_tail, log_tail = self._read_outputs(run, verdict)
        self._clear_run(run)
        if harness_gone:
            raise SystemExit(0)
        result: dict[str, Any] = {
            "wall_s": round(verdict_at - run.started, 6),
            "stdout": out_tail,
            "stderr": err_tail,
        }
        result.update(_exit_fields(cand_status))
        result.update(classify(verdict, timed_out, cand_status, test_status, log_tail))
        return result

    def _prepare_run(self, req: dict[str, Any]) -> _Run:
        """The run's folders, output files and pipes, its clock, and the program and the message to
        the tester made ready: all before the fork, as every page written later is copied."""
        import array
        import socket

        run = _Run()
        run.limits = limits = req["limits"]
        run.run_dir = isolation.mkdtemp(self.spool, "run-")
        run.work = os.path.join(run.run_dir, "work")
        os.mkdir(run.work, 0o700)
        if self.root:
            assert self.uids is not None
            os.chown(run.work, self.uids[0], self.uids[0])
        run.job_path = os.path.join(self.jobs_dir, os.path.basename(req["job_file"]))
        run.out_path, run.err_path = os.path.join(run.run_dir, "out"), os.path.join(run.run_dir, "err")
        run.files = [
            os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for p in (run.out_path, run.err_path)
        ]
        run.calls = os.pipe()
        run.replies = os.pipe()
        run.started = time.monotonic()
        run.deadline = run.started + float(limits["timeout_s"])

        run.compiled = Compiled(req)
        run.job_line = os.path.basename(run.job_path).encode() + b"\n"
        fds = array.array("i", [run.replies[0], run.calls[1]])
        run.ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
        return run

    def _fork_candidate(self, run: _Run) -> int:
        """Fork the candidate (which never returns from here); its pid."""
        cand_pid = os.fork()
        if cand_pid == 0:
            compiled = run.compiled
            self._child(
                role="candidate",
                fds={
                    0: None,
                    1: run.files[0],
                    2: run.files[1],
                    FD_CALLS_IN: run.calls[0],
                    FD_REPLIES_OUT: run.replies[1],
                },
                cwd=run.work,
                limits=run.limits,
                body=lambda: serve_candidate(compiled),
            )
        return cand_pid

    def _send_job(self, run: _Run) -> tuple[str, bool]:
        """Hand the run to the tester, then close our ends of the run's files and pipes:
        (the run's nonce, whether the tester is gone)."""
        # Drawn only now, so the candidate (a copy of our memory at fork time) never holds it.
        # (Little else happens while the candidate lives: every page we write now costs a
        # copy-on-write fault, so the message to the tester was prepared before the fork.)
        nonce = os.urandom(16).hex()
        tester_gone = False
        try:
            self.tester_sock.sendmsg([run.job_line, nonce.encode()], run.ancillary)
        except OSError:
            tester_gone = True
        for fd in (*run.calls, *run.replies, *run.files):
            os.close(fd)
        return nonce, tester_gone

    def _reap_candidate(self, cand_pid: int, verdict: Any, *, quick: bool) -> int | None:
        """Kill and reap everything of the run but the tester; the candidate's wait status when it
        ended by itself, else None. ``quick``: the run timed out or the tester is gone."""
        # When the tests lost the program, give its exit a moment to land so we can say how it
        # ended; normally it ends by itself right after the verdict (the tests hang up).
        lost = isinstance(verdict, dict) and verdict.get("v") in ("gone", "error")
        ended = processes.wait_exits((cand_pid,), 0.0 if quick else 0.05 if lost else 0.02)
        cand_status = ended.get(cand_pid)
        self._cleanup(cand_pid, fast=cand_pid in ended)
        return cand_status

    def _after_timeout(self, nonce: str) -> tuple[bool, bool]:
        """(harness_gone, tester_gone) after a run timed out.

        The tester may still be waiting on the killed program or stuck in the tests: let it
        report (the late verdict is ignored), else it is gone (to be replaced).
        """
        _, still_waiting, harness_gone, tester_gone = self._await_tester(nonce, time.monotonic() + 1.0)
        return harness_gone, tester_gone or still_waiting

    def _read_outputs(self, run: _Run, verdict: Any) -> tuple[str, str, str]:
        """The tails of the candidate's stdout and stderr, and of the tester's log when there is
        no verdict or it is the harness's (else ""); the log is emptied for the next run."""
        out_tail = _tail(run.out_path, int(run.limits["output_bytes"]))
        err_tail = _tail(run.err_path, int(run.limits["output_bytes"]))
        log_tail = _tail(self.tester_log, 2000) if verdict is None or verdict.get("v") == "harness" else ""
        try:
            os.truncate(self.tester_log, 0)
        except OSError:
            pass
        return out_tail, err_tail, log_tail

    def _clear_run(self, run: _Run) -> None:
        """Delete the run's folder and job file, and what it left in /tmp."""
        isolation.rmtree(run.run_dir)
        isolation.rmtree(run.job_path)
        if self.filesystem_isolated:  # else /tmp is the host's: never delete what we did not create
            isolation.empty_tmp(keep=self.spool)

    def _child(
        self, *, role: str, fds: dict[int, int | None], cwd: str, limits: dict[str, Any], body: Any
    ) -> None:
        """Finish isolating a freshly forked child, then run ``body``; never returns."""
        code = 70
        try:
            os.setsid()
            isolation.move_fds(fds)
            os.chdir(cwd)
            apply_rlimits(role, limits, nproc_extra=0 if self.root else self.nproc_base + 8)
            if self.root:
                assert self.uids is not None
                isolation.become(self.uids[0] if role == "candidate" else self.uids[1])
            else:
                isolation.drop_capabilities(self.libc)  # a user namespace gave us some
            isolation.prctl(self.libc, isolation.PR_SET_NO_NEW_PRIVS, 1)
            isolation.prctl(self.libc, isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
            if role == "tester":
                # /proc/<pid>/{fd,mem} closed even to its own uid
                isolation.prctl(self.libc, isolation.PR_SET_DUMPABLE, 0)
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

    # -- cleanup -------------------------------------------------------------------------------
    def _kill_uids(self, *, candidate: bool, tester: bool) -> int:
        """Fork the reaper for our uids (see :func:`.processes.kill_uids`); its pid."""
        assert self.uids is not None
        return processes.kill_uids(self.uids, candidate=candidate, tester=tester)

    def _children(self) -> set[int]:
        try:
            with open(self.children_file) as fh:
                return {int(p) for p in fh.read().split()}
        except OSError:
            return processes.child_pids(os.getpid())

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
        processes.kill_descendants(os.getpid(), spare)

    def shutdown(self) -> None:
        self._stop_tester()
        if self.root:
            reaper = self._kill_uids(candidate=True, tester=True)
            os.waitpid(reaper, 0)
        processes.kill_descendants(os.getpid(), set())
        isolation.rmtree(self.spool)


def _exit_fields(status: int | None) -> dict[str, int]:
    """``signal`` or ``exit_code`` of a candidate that ended by itself (wait ``status``), before we
    killed anything; nothing when it did not."""
    if status is None:
        return {}
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    if os.WIFEXITED(status):
        return {"exit_code": os.WEXITSTATUS(status)}
    return {}


def _tail(path: str, n: int) -> str:
    """The last ``n`` bytes of the file at ``path``, decoded leniently ("" when unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            data = fh.read(n)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def main(config_json: str) -> None:
    """Set up, report ready on stdout, then answer each request framed on stdin until it closes."""
    zygote = Zygote(json.loads(config_json))
    zygote.setup()
    write_frame(
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
            request = read_frame(0)
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
        write_frame(1, response)
    zygote.shutdown()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--zygote":
    main(sys.argv[2])
