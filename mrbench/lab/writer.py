"""The lab's MLflow writer, in a process of its own so that MLflow works beside the simulation.

``mrbench simulate`` spends about as long on MLflow (importing it, opening the store, logging some
five thousand metrics) as on torch, the simulation, its statistics and figures, and each of the two
keeps one core busy. :class:`LabWriter` starts a child process first thing; it imports MLflow while
the parent imports torch and checks the options, checks the store (:func:`~mrbench.store.client.
check_tracking_reachable`) when the parent asks (:meth:`LabWriter.check`: only once the options are
known to be good, so that bad input never touches the store) and imports the lab while the parent
simulates. Once the statistics exist the parent hands them over and draws the figures while the
child logs the runs; the report folder's files are logged last, and the parent run ends FINISHED
only then. One writer serves every scenario of a command.

What the user sees does not change: the same runs, metrics and artifacts (:mod:`mrbench.lab.tracking`),
and the same errors — a store that cannot be used raises the same :class:`UserError` (exit 2), now
when the first scenario's simulation ends, before its report is written; any other failure in the
child is raised in the parent with the child's traceback attached. If the parent dies the child
ends an open parent run KILLED.

The child is ``python -m mrbench.lab.writer`` talking over a socket pair, not a ``multiprocessing``
child: those re-import the caller's main module (a script calling :func:`~mrbench.lab.runner.run_lab`
without a ``__main__`` guard would fail) and may not be started from daemonic processes.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.kit import children


class LabWriterError(RuntimeError):
    """An unexpected failure in the writer process (its traceback in the exception's notes)."""


def _send(conn: Connection, obj: Any) -> None:
    """Plain pickle, not ``Connection.send``'s: that one lets torch share tensors by handing over
    file descriptors, which only a ``multiprocessing`` child can receive."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def _pack(exc: BaseException, uri: str) -> tuple[str, str, str]:
    """``exc`` as ``(kind, message, traceback)``: a user error by its class, a disk or database fault
    as one, anything else as unexpected."""
    from mrbench.store.client import StoreFault, TrackingUnavailable
    from mrbench.store.faults import describe_fault

    text = "".join(traceback.format_exception(exc))
    for cls in (StoreFault, TrackingUnavailable, UserError):
        if isinstance(exc, cls):
            return cls.__name__, str(exc), text
    fault = describe_fault(exc, uri) if isinstance(exc, Exception) else None
    if fault is not None:
        return StoreFault.__name__, fault, text
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    return "unexpected", f"{type(exc).__name__}: {first}", text


def _unpack(kind: str, message: str, text: str) -> Exception:
    from mrbench.store.client import StoreFault, TrackingUnavailable

    classes: dict[str, type[Exception]] = {
        StoreFault.__name__: StoreFault,
        TrackingUnavailable.__name__: TrackingUnavailable,
        UserError.__name__: UserError,
    }
    if kind in classes:
        return classes[kind](message)
    error = LabWriterError(f"lab tracking writer: {message}")
    error.add_note(f"in the writer process:\n{text}")
    return error


class _Work:
    """What the writer process does: check the store, open a lab run, close it."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.open_runs: dict[str, Any] = {}  # parent run id -> Logged

    def check(self) -> None:
        from mrbench.store.client import check_tracking_reachable

        check_tracking_reachable(self.uri)

    def open(self, result: Any, summaries: Mapping[str, Any], command: str) -> Any:
        from mrbench.lab.tracking import open_lab_run

        logged = open_lab_run(result, summaries, tracking_uri=self.uri, command=command)
        self.open_runs[logged.parent_run_id] = logged
        return logged

    def close(self, parent_run_id: str, report_dir: Path | None) -> None:
        from mrbench.lab.tracking import close_lab_run

        close_lab_run(self.open_runs.pop(parent_run_id), report_dir)

    def abandon(self) -> None:
        """End the runs still open KILLED (the parent went away before closing them)."""
        from mrbench.lab.tracking import end_lab_run

        for logged in self.open_runs.values():
            end_lab_run(logged, "KILLED")
        self.open_runs.clear()


def _serve(uri: str, conn: Connection) -> None:
    """The child: answer ``(name, args)`` requests until ``None`` or the parent's end (EOF). Every
    answer is ``("ok", value)`` or ``("error", packed)``.

    Ctrl-C, and a cluster's SIGTERM or SIGHUP, may reach the whole process group; the child leaves
    them to the parent, which then tells it to stop, so that runs still open end KILLED instead of
    being cut off mid-write. The parent's end, however it comes, ends the child (EOF)."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    work = _Work(uri)
    try:
        import mlflow.tracking  # noqa: F401 - the slow part of the check, before it is asked for

        # MLflow's INFO lines (creating a store's tables) are not the command's output; warnings
        # are. Set after the import, which configures MLflow's logger.
        logging.getLogger("mlflow").setLevel(logging.WARNING)

        while (request := _recv(conn)) is not None:
            name, args = request
            try:
                answer: tuple[str, Any] = ("ok", getattr(work, name)(*args))
            except BaseException as exc:
                answer = ("error", _pack(exc, uri))
            _send(conn, answer)
            if name == "check" and answer[0] == "ok":
                import mrbench.lab.tracking  # noqa: F401 - torch and the lab, while the parent simulates
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        try:
            work.abandon()
        except Exception as exc:  # the store itself may be what failed: say which runs stay open
            runs = ", ".join(work.open_runs) or "none"
            print(f"lab tracking writer: could not end open runs ({runs}) KILLED: {exc}", file=sys.stderr)


class LabWriter:
    """Logs lab runs to the store ``uri`` from a child process (see the module docstring).

    Use as a context manager; :meth:`wait_ready` raises the store's error, :meth:`open` starts
    logging a simulated scenario and returns at once, :meth:`close` logs its report folder and
    returns the :class:`~mrbench.lab.tracking.Logged`.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._check_sent = self._ready = False
        self._pending = False  # an open request whose answer is not read yet
        self._sender: threading.Thread | None = None
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                children.module_command("mrbench.lab.writer", str(theirs.fileno()), uri),
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=children.child_env(),  # the child imports this mrbench, wherever it came from
            )
        self._conn = Connection(ours.detach())

    def __enter__(self) -> LabWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _answer(self) -> Any:
        try:
            status, value = _recv(self._conn)
        except (EOFError, OSError):
            code = self._proc.poll()
            raise LabWriterError(f"lab tracking writer: the process ended (exit code {code})") from None
        if status == "error":
            raise _unpack(*value)
        return value

    def _join_sender(self) -> None:
        if self._sender is not None:
            self._sender.join()
            self._sender = None

    def check(self) -> None:
        """Ask the child to check the store (once); returns at once, :meth:`wait_ready` gets the answer."""
        if not self._check_sent:
            _send(self._conn, ("check", ()))
            self._check_sent = True

    def wait_ready(self) -> None:
        """Block until the store has been checked; raise its error if it cannot be used."""
        if not self._ready:
            self.check()
            self._answer()
            self._ready = True

    def open(self, result: Any, summaries: Mapping[str, Any], command: str) -> None:
        """Start logging ``result`` (the parent run, its children and metrics); returns at once."""
        self.wait_ready()
        request = ("open", (result, dict(summaries), command))
        # Sent from a thread: a few MB, which the child reads only once it has imported the lab.
        self._sender = threading.Thread(target=_send, args=(self._conn, request), daemon=True)
        self._sender.start()
        self._pending = True

    def close(self, result: Any, report_dir: Path | None) -> Any:
        """Log ``report_dir`` under the parent run that :meth:`open` started for ``result``, end it
        FINISHED and return its ``Logged``."""
        if not self._pending:
            raise RuntimeError("LabWriter.close without open")
        self._pending = False
        self._join_sender()
        logged = self._answer()
        _send(self._conn, ("close", (logged.parent_run_id, report_dir)))
        self._answer()
        return logged

    def shutdown(self) -> None:
        """Stop the child; runs it still has open end KILLED."""
        self._join_sender()
        try:
            _send(self._conn, None)
        except OSError:
            pass  # the child is gone
        # No signal first: the None sent asked it to end. It may finish a request first (its answer
        # goes unread); SIGKILL after 60 s.
        children.stop(self._proc, None, grace_s=60)
        self._conn.close()


def _main(argv: list[str]) -> None:
    """``python -m mrbench.lab.writer FD URI``: serve the parent on the socket ``FD``."""
    fd, uri = int(argv[0]), argv[1]
    _serve(uri, Connection(fd))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every write is committed; skip tearing down torch and MLflow (a few tenths of a s)


if __name__ == "__main__":
    _main(sys.argv[1:])
