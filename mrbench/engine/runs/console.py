"""The terminal belongs to mrbench: what libraries print goes to a log file instead.

TRL prints a dict per training step, tqdm draws bars, transformers and lm-eval warn on every
cell, MLflow logs its schema migrations, and a task's sandbox writes from child processes. Inside
:func:`capture_output` all of it goes to one file: file descriptors 1 and 2 are pointed at it
(which catches C code and child processes too), and ``sys.stdout``/``sys.stderr`` with them
(which catches Python code that replaced or wrapped them, e.g. a test runner's). Python warnings
and logging records go where ``sys.stderr`` goes, so into the file as well.

mrbench's own output (progress, tables, results) goes to :func:`terminal`: the stream stdout was
when the outermost capture began. With ``--verbose`` (``$MRBENCH_VERBOSE``) the captured output
is also copied there as it comes, or to stderr for a command whose stdout is its result alone
(``mrbench eval --json``: ``live_on_stderr``).

:func:`command_log_path` names the log of a command that runs no cell (``mrbench eval``, ``mrbench
ui``'s server), under ``<results>/logs``, which keeps the newest 100 of them (``$MRBENCH_KEEP_LOGS``;
0 keeps all) and every one younger than a day: older ones are deleted as a new one starts
(:func:`prune_command_logs`). ``mrbench eval``'s log is also attached to its run, as
:data:`mrbench.core.layout.EVAL_LOG_ARTIFACT` (:func:`attach_command_log`).

:func:`cell_output` is a cell's capture (:func:`mrbench.engine.cell.runner.run_cell`): the log is
``<results>/checkpoints/<run key>/cell.log`` (:func:`cell_log_path`), the progress of the cell's
long steps is kept beside it for a sweep's table (:mod:`mrbench.engine.runs.phases`), and the log is
attached to the cell's MLflow run as :data:`mrbench.core.layout.CELL_LOG_ARTIFACT` when the cell
ends, however it ends.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mrbench.core import env, layout, results_layout

log = logging.getLogger(__name__)

CELL_LOG_NAME = results_layout.CELL_LOG
UPLOAD_RETRY_S = 10.0  # the log is worth a short wait for the store, not the cell's full retry bound
LOGS_DIR = results_layout.LOGS_DIR  # the logs of commands that run no cell (command_log_path)
KEEP_LOGS_MIN_AGE_S = 24 * 3600.0  # a command log younger than this is never pruned
TEE_JOIN_S = 2.0  # a child process that keeps the pipe open must not hang the end of a capture


def verbose() -> bool:
    """True when ``--verbose`` was given or ``$MRBENCH_VERBOSE`` is a true value."""
    return env.VERBOSE.get()


def set_verbose() -> None:
    """Turn verbose on for this process and the worker processes it starts."""
    os.environ[env.VERBOSE.name] = "1"


def command_log_path(command: str) -> Path:
    """``<results>/logs/<command>-<time>-<pid>.log``: where the library output of a command that
    runs no cell goes (``mrbench eval``, the server of ``mrbench ui``); the folder is created and
    its oldest command logs pruned (:func:`prune_command_logs`), :class:`OSError` or
    :class:`~mrbench.core.errors.UserError` when it cannot be."""
    from mrbench.store.local import results_dir

    folder = results_layout.logs_dir(results_dir())
    folder.mkdir(parents=True, exist_ok=True)
    prune_command_logs(folder)
    return folder / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def kept_command_logs() -> int:
    """How many command logs ``<results>/logs`` keeps: ``$MRBENCH_KEEP_LOGS``, else 100."""
    return env.KEEP_LOGS.get()


def prune_command_logs(folder: Path, *, now: float | None = None) -> list[Path]:
    """Delete the oldest command logs (``*.log`` directly in ``folder``, by modification time) past
    the newest :func:`kept_command_logs`, except those written in the last :data:`KEEP_LOGS_MIN_AGE_S`
    (a command may still be writing one); return the deleted ones. A sweep's logs, in a folder of
    their own (one file per cell, replaced when the cell runs again), are not touched."""
    keep = kept_command_logs()
    if not keep:
        return []
    now = time.time() if now is None else now
    logs = []
    for path in folder.glob("*.log"):
        with contextlib.suppress(OSError):
            if path.is_file():
                logs.append((path.stat().st_mtime, path))
    deleted = []
    for mtime, path in sorted(logs, reverse=True)[keep:]:
        if now - mtime > KEEP_LOGS_MIN_AGE_S:
            with contextlib.suppress(OSError):
                path.unlink()
                deleted.append(path)
    return deleted


@contextlib.contextmanager
def command_output(
    command: str, artifact: str | None = None, *, live_on_stderr: bool = False
) -> Iterator[Path | None]:
    """:func:`capture_output` into :func:`command_log_path` (``command``) for the block; yields the
    log, or None when the results folder cannot hold it (then the output stays on the terminal).
    ``artifact``: the log's artifact path in the run that :func:`attach_command_log` names during
    the block (``mrbench eval``'s run), where it is sent when the block ends, however it ends.
    ``live_on_stderr``: the ``--verbose`` copy goes to stderr, not stdout (:func:`capture_output`)."""
    from mrbench.core.errors import UserError

    kept_command_logs()  # a bad $MRBENCH_KEEP_LOGS is the user's to fix, not a reason for no log
    with contextlib.ExitStack() as stack:
        try:
            path: Path | None = stack.enter_context(
                capture_output(command_log_path(command), live_on_stderr=live_on_stderr)
            )
        except (OSError, UserError):
            path = None
        out = CellOutput(path, artifact=artifact) if path is not None and artifact else None
        if out is not None:
            _commands.append(out)
        try:
            yield path
        finally:
            if out is not None:
                _commands.remove(out)
                stack.close()  # the capture ends first: the whole log goes
                if out.run is not None:
                    _upload(out)


def cell_log_path(run_key: str) -> Path:
    """``<results>/checkpoints/<run key>/cell.log``: where a cell's library output goes."""
    from mrbench.store.local import results_dir

    return results_layout.CellPaths.of(results_dir(), run_key).log_path()


@dataclass
class _Capture:
    path: Path
    saved_fds: tuple[int, int]
    saved_streams: tuple[Any, Any]
    stream: TextIO
    log_file: Any
    tee: threading.Thread | None = None
    live: TextIO | None = None  # the --verbose copy's stream when opened here (closed at the end)


_stack: list[_Capture] = []
_terminal: list[TextIO] = []  # [the stable terminal stream] while a capture is active
_owned_terminal: list[bool] = []


def terminal() -> TextIO:
    """Where mrbench's own output goes: stdout as it was before any capture began."""
    return _terminal[0] if _terminal else sys.stdout


def capturing() -> Path | None:
    """The log file output goes to now, or None."""
    return _stack[-1].path if _stack else None


def _stable_terminal() -> tuple[TextIO, bool]:
    """A stream on what stdout is now that keeps pointing there when fd 1 is redirected; and
    whether it was opened here (to be closed at the end)."""
    return _stable(sys.stdout)


def _stable(out: TextIO) -> tuple[TextIO, bool]:
    """A stream on what ``out`` (stdout or stderr) is now that keeps pointing there when fds 1 and
    2 are redirected; and whether it was opened here (to be closed at the end)."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return out, False  # an in-memory stream (a test runner's): fd 1 does not reach it
    if fd not in (1, 2):
        return out, False
    out.flush()
    encoding = getattr(out, "encoding", None) or "utf-8"
    return open(os.dup(fd), "w", buffering=1, encoding=encoding, errors="replace"), True


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _copy_out(read_fd: int, log_file: Any, out: TextIO) -> None:
    """The ``--verbose`` copier: everything written to the pipe goes to the log and to ``out``."""
    with contextlib.suppress(Exception):
        while chunk := os.read(read_fd, 65536):
            log_file.write(chunk)
            log_file.flush()
            with contextlib.suppress(Exception):
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
    os.close(read_fd)


@contextlib.contextmanager
def capture_output(
    path: Path, *, verbose: bool | None = None, live_on_stderr: bool = False
) -> Iterator[Path]:
    """Within the block, everything written to fds 1 and 2 (and ``sys.stdout``/``sys.stderr``)
    goes to the file ``path`` (truncated), and also to :func:`terminal` when ``verbose`` (default:
    :func:`verbose`), or to stderr as it was with ``live_on_stderr`` (stdout stays the command's
    own, e.g. ``mrbench eval --json``'s JSON alone). Nested captures go to their own file and
    restore the outer one; a nested capture of the file already in use changes nothing. Yields ``path``."""
    path = Path(path)
    if _stack and _stack[-1].path == path:
        yield path
        return
    show = globals()["verbose"]() if verbose is None else verbose
    path.parent.mkdir(parents=True, exist_ok=True)
    _flush_std()
    own = None
    if not _stack:
        stream, owned = _stable_terminal()
        _terminal[:] = [stream]
        _owned_terminal[:] = [owned]
        # mrbench's own warnings (a moved results folder, a tracking outage) still reach the user,
        # on stderr as it was; one handler for the outermost capture, so none is printed twice.
        own = _OwnWarnings(*_stable(sys.stderr))
    # O_APPEND: another process writing to the same file (the launcher of a multi-process cell,
    # whose rank 0 captures into it too) never leaves a gap of zero bytes behind a truncation.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    log_file = open(os.open(path, flags, 0o644), "wb", buffering=0)  # closed at the end
    saved_fds = (os.dup(1), os.dup(2))
    tee = live = None
    if show:
        out = terminal()
        if live_on_stderr:
            out, owned = _stable(sys.stderr)
            live = out if owned else None
        read_fd, write_fd = os.pipe()
        tee = threading.Thread(
            target=_copy_out, args=(read_fd, log_file, out), daemon=True, name="mrbench-tee"
        )
        tee.start()
        target = write_fd
    else:
        target = log_file.fileno()
    os.dup2(target, 1)
    os.dup2(target, 2)
    if show:
        os.close(target)  # fds 1 and 2 hold the pipe now; the copier ends when they let go
    stream = open(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
    capture = _Capture(path, saved_fds, (sys.stdout, sys.stderr), stream, log_file, tee, live)
    _stack.append(capture)
    sys.stdout = sys.stderr = stream
    if own is not None:
        logging.getLogger("mrbench").addHandler(own)
    try:
        yield path
    finally:
        if own is not None:
            logging.getLogger("mrbench").removeHandler(own)
            own.close()
        _stack.pop()
        _restore(capture)


def _restore(capture: _Capture) -> None:
    with contextlib.suppress(Exception):
        capture.stream.flush()
    sys.stdout, sys.stderr = capture.saved_streams
    os.dup2(capture.saved_fds[0], 1)
    os.dup2(capture.saved_fds[1], 2)
    for fd in capture.saved_fds:
        os.close(fd)
    with contextlib.suppress(Exception):
        capture.stream.close()
    if capture.tee is not None:
        capture.tee.join(TEE_JOIN_S)
    if capture.live is not None:
        with contextlib.suppress(Exception):
            capture.live.close()
    capture.log_file.close()
    if not _stack:
        if _owned_terminal and _owned_terminal[0]:
            with contextlib.suppress(Exception):
                _terminal[0].close()
        _terminal.clear()
        _owned_terminal.clear()


class _OwnWarnings(logging.Handler):
    """mrbench's own warnings (a tracking-store outage, a run kept locally) on the user's stderr
    (``target``, closed with the handler when ``owned``) as well as in the log."""

    def __init__(self, target: TextIO, owned: bool) -> None:
        super().__init__(logging.WARNING)
        self.target, self.owned = target, owned

    def emit(self, record: logging.LogRecord) -> None:
        line = f"warning: {record.getMessage()}\n"
        for out in (self.target, sys.stderr):  # sys.stderr: the log
            with contextlib.suppress(Exception):
                out.write(line)
                out.flush()

    def close(self) -> None:
        if self.owned:
            with contextlib.suppress(Exception):
                self.target.close()
        super().close()


@dataclass
class CellOutput:
    """A cell's (or a command's) capture: its log file, the run the log is attached to when the
    capture ends, and its artifact path there."""

    log_path: Path
    run: tuple[Any, str] | None = field(default=None)
    artifact: str = layout.CELL_LOG_ARTIFACT

    def attach(self, client: Any, run_id: str) -> None:
        """Attach the log to ``run_id`` (through ``client``, a :class:`RetryingClient`) at the end."""
        self.run = (client, run_id)


_cells: list[CellOutput] = []
_commands: list[CellOutput] = []


def attach_log(client: Any, run_id: str) -> None:
    """Attach the log of the cell running here (if any) to its run ``run_id`` when the cell ends."""
    if _cells:
        _cells[-1].attach(client, run_id)


def attach_command_log(client: Any, run_id: str) -> None:
    """Attach the log of the command running here (:func:`command_output` with an ``artifact``),
    if any, to its run ``run_id`` when the command's capture ends."""
    if _commands:
        _commands[-1].attach(client, run_id)


@contextlib.contextmanager
def cell_output(folder: Path) -> Iterator[CellOutput]:
    """A cell's capture into ``folder/cell.log`` with its progress kept in ``folder`` (see the
    module docstring); the log goes to the run named by :func:`attach_log` at the end."""
    from mrbench.core.ranks import rank
    from mrbench.engine.runs import phases

    replica = rank()  # > 0: another process of a multi-process cell, whose rank 0 logs
    paths = results_layout.CellPaths(Path(folder))
    out = CellOutput(paths.log_path(replica))
    progress = paths.progress_path(replica)
    try:
        with capture_output(out.log_path), phases.progress_file(progress):
            _cells.append(out)
            try:
                yield out
            except Exception:
                traceback.print_exc()  # into the log, which the run gets
                raise
            finally:
                _cells.remove(out)
    finally:  # a failed cell's log matters most
        if out.run is not None and not replica:
            _upload(out)


def _upload(out: CellOutput) -> None:
    """Attach the log to its run; a store that does not answer leaves it on disk, with a warning."""
    client, run_id = out.run  # type: ignore[misc]
    folder, _, name = out.artifact.rpartition("/")
    try:
        with tempfile.TemporaryDirectory(prefix="mrbench-log-") as tmp:
            path = out.log_path
            if name != path.name:  # the artifact's own name (eval.log), not the file's
                path = Path(shutil.copyfile(path, Path(tmp) / name))
            client.bounded(UPLOAD_RETRY_S).log_artifact(run_id, str(path), artifact_path=folder or None)
    except Exception as exc:
        log.warning("run %s: its log stays in %s only (%s)", run_id, out.log_path, exc)
