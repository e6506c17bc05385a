"""The tester's side: run the trusted tests against proxies of the candidate's functions.

The zygote forks one persistent tester (its own uid when the host is root, non-dumpable) that
runs :func:`serve`: for each run it receives, on the socket at :data:`~.wire.FD_TESTER_SOCKET`,
the name of the job file in its inbox, the run's nonce and its ends of the candidate's channel;
it runs the tests with each exported name bound to a :class:`_Proxy` that sends calls over the
channel, then sends its verdict, prefixed with the nonce, back on the socket. A verdict is a
dict: ``v`` (``passed``, ``failed``, ``error``, ``gone``: the candidate ended or broke the
protocol, ``harness``: a fault of the tests or the sandbox), ``d`` (detail), ``k`` (the error's
type name), ``n`` (calls made), ``t`` (seconds spent in them) and ``w`` (line events they executed in the
candidate's code, summed from its replies; null when a reply lacked it). Loaded inside the zygote (see
:mod:`.zygote`): standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .wire import (
    FD_TESTER_SOCKET,
    MAX_REPLY,
    Unsupported,
    decode,
    describe_exception,
    encode,
    read_frame,
    write_frame,
)

_MAX_CACHED_CODE = 256


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
        self.work: int | None = 0

    def _receive(self) -> Any:
        try:
            message = read_frame(self.replies_fd, MAX_REPLY)
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
            request = {"f": name, "a": encode(args, self.names), "k": encode(kwargs, self.names)}
        except Unsupported as exc:
            raise _HarnessFault(f"test argument cannot be passed to the program: {exc}") from None
        self.calls += 1
        started = time.perf_counter()
        try:
            write_frame(self.calls_fd, request)
        except OSError:
            self.gone = True
            raise _CandidateGone("the program ended") from None
        reply = self._receive()
        self.elapsed += time.perf_counter() - started
        work = reply.get("w")
        if self.work is not None:  # bool is an int: refuse it too
            valid = isinstance(work, int) and not isinstance(work, bool) and work >= 0
            self.work = self.work + work if valid else None
        if "v" in reply:
            try:
                return decode(reply["v"], self.shared)
            except (Unsupported, ValueError, TypeError, KeyError, RecursionError) as exc:
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


def serve(jobs_dir: str) -> None:
    """The tester's loop: for each run, read the job file, test, send the verdict (nonce first)."""
    import socket

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    sock = socket.socket(fileno=FD_TESTER_SOCKET)
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
            verdict = _run(os.path.join(jobs_dir, os.path.basename(job.decode())), fds[0], fds[1])
        except Exception as exc:
            verdict = {"v": "harness", "d": f"tester: {type(exc).__name__}: {exc}"[:500]}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.send((nonce + json.dumps(verdict)).encode("utf-8", "replace"))
        except OSError:
            return


_CODE: dict[tuple[str, str], Any] = {}


def _compile(source: str, filename: str) -> Any:
    """Compiled test code, cached (the persistent tester sees the same problem many times)."""
    key = (source, filename)
    code = _CODE.get(key)
    if code is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        if len(_CODE) >= _MAX_CACHED_CODE:
            _CODE.pop(next(iter(_CODE)))
        _CODE[key] = code
    return code


def _run(job_path: str, replies_fd: int, calls_fd: int) -> dict[str, Any]:
    """Run one job's tests against proxies of the candidate's functions; the verdict dict."""
    import builtins

    with open(job_path, "rb") as fh:
        job = json.loads(fh.read().decode("utf-8", "surrogatepass"))
    os.unlink(job_path)
    ns: dict[str, Any] = {"__name__": "__tests__", "__builtins__": builtins}
    verdict: dict[str, Any]
    channel = _Channel({}, replies_fd, calls_fd)
    try:
        exec(_compile(job["prelude"], "<prelude>"), ns)
        channel = _Channel({k: v for k, v in ns.items() if isinstance(v, type)}, replies_fd, calls_fd)
        for name, _ in job["exports"]:
            ns[name] = _Proxy(channel, name)
        exec(_compile(job["tests"], "<tests>"), ns)
        for name, _ in job["exports"]:
            ns[name] = _Proxy(channel, name)  # the tests' module code may have rebound a name
        exec(_compile(job["check"], "<check>"), ns)
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
        kind, message = describe_exception(exc)
        verdict = {"v": "error", "k": kind, "d": f"{kind} in the tests: {message}"}
    if channel.gone and verdict["v"] == "passed":
        verdict = {"v": "gone"}
    verdict.update(n=channel.calls, t=round(channel.elapsed, 9), w=channel.work)
    return verdict
