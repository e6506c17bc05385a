"""One process at a time runs a cell, and the attempts of a cell that died are ended KILLED.

:func:`~mrbench.engine.cell.runner.run_cell` (``mrbench run``, a sweep's cell) holds a
:class:`CellClaim` of its run key for the whole cell. Two things make it, for two reaches:

1. **The cell folder's lock** (one machine, or a results folder that several share):
   ``<results>/checkpoints/<run key>/cell.lock``, an ``flock`` lock with the holder (host, pid,
   cell, since when) written in the file. The kernel drops it when its process ends, however it
   ends (``kill -9`` included), so a dead holder never blocks a rerun. No child keeps it past its
   parent: the descriptor is closed on ``exec`` and in a child forked from Python
   (``os.register_at_fork``). (Not ``lockf``: a POSIX lock is dropped as soon as anything in the
   process opens and closes the file, even to read who holds it.) The file is removed when the
   cell ends (a new holder checks that the file it locked is still the one in the folder). A
   second run of the cell while it is held is refused at once with :class:`CellHeld`, a
   :class:`~mrbench.core.errors.UserError` (exit 2) that names the holder: it does not wait,
   since once the first ended it would only train the cell again.
2. **The store** (another results folder or another machine logging to the same tracking
   server): a cell's run carries its process's ``host``, ``pid`` and ``heartbeat`` tags, the
   heartbeat refreshed every 30 s while the cell runs (:mod:`mrbench.store.claims`). Holding the
   lock, before it opens its run, the cell looks at the RUNNING runs of its run key in its
   experiment (:meth:`CellClaim.settle`): one whose process is alive
   (:func:`mrbench.store.claims.is_alive`: its pid on this host, a heartbeat younger than 300 s
   on another) holds the cell, which is refused as above; one whose process is gone (``kill -9``,
   a power loss) is ended KILLED, so that the UI tells the truth. Then the cell opens its run: the
   run of its newest complete training checkpoint, reopened and resumed (a KILLED run resumes,
   :mod:`mrbench.engine.cell.resume`), else a new one. A RUNNING run without a ``pid`` tag (written
   before cells' runs carried one) is left alone: nothing says whether it is alive.

Sweeps also claim their cells among their invocations, in the store (:mod:`mrbench.sweeps.claims`),
before a cell starts; this claim is the cell's own and holds whoever started it. In a multi-process
cell rank 0 claims for all its ranks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.results_layout import CELL_LOCK
from mrbench.engine.cell.checkpoints import CellFolder
from mrbench.store.claims import Heartbeat, describe, settle_key

log = logging.getLogger(__name__)

LOCK_NAME = CELL_LOCK
"""The lock file in a cell's folder while a process runs the cell (see the module docstring)."""
_HELD: dict[Path, int] = {}  # the cell locks this process holds, and their descriptors


def _close_in_child() -> None:
    """In a child forked from this process: let go of the locks' descriptors (the lock stays the
    parent's, and goes when the parent ends)."""
    for fd in (fd for fd in _HELD.values() if fd >= 0):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


class CellHeld(UserError):
    """The cell is being run by another process (its host and pid named); exit 2."""


def _message(label: str, holder: str) -> str:
    return (
        f"cell {label} is already running: {holder}. Wait for it to end, or stop it and run the "
        "cell again (it resumes from that run's last training checkpoint, if any)"
    )


def _holder_of(path: Path) -> str:
    """Who holds the lock ``path``, as its file says (a moment to write it is allowed)."""
    for _ in range(20):
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["since"]))
            return f"pid {info['pid']} on host {info['host']} (since {since}; {path})"
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return f"another process holds {path}"


def _lock(path: Path, label: str) -> int | None:
    """The descriptor of the lock ``path``, taken; :class:`CellHeld` when another process holds
    it; None (with a warning) on a file system without locks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CellHeld(_message(label, _holder_of(path))) from None
            log.warning("cannot lock %s (%s): a second run of this cell at once is not stopped", path, exc)
            return None
        try:
            same = os.fstat(fd).st_ino == path.stat().st_ino
        except FileNotFoundError:
            same = False
        if same:  # else its holder removed it as we opened it: lock the new one
            break
        os.close(fd)
    info = {"host": socket.gethostname(), "pid": os.getpid(), "cell": label, "since": time.time()}
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(info).encode())
    return fd


def check_free(folder: Path, label: str) -> None:
    """:class:`CellHeld` when another process holds the cell whose folder is ``folder``, else nothing
    (a probe: the lock is released at once). For what must not happen before the claim, such as
    opening the cell's log, which would empty the running holder's log."""
    path = folder / LOCK_NAME
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise CellHeld(_message(label, _holder_of(path))) from None
    finally:
        os.close(fd)


class CellClaim:
    """This process's claim of the cell whose folder is ``folder`` (label ``label``, for messages),
    from ``with`` to its end; ``active=False`` (ranks > 0 of a multi-process cell) claims nothing."""

    def __init__(self, folder: CellFolder, label: str, *, active: bool = True) -> None:
        self.path, self.label, self.active = folder.root / LOCK_NAME, label, active
        self._fd: int | None = None
        self._heartbeat: Heartbeat | None = None

    def __enter__(self) -> CellClaim:
        if not self.active:
            return self
        if self.path in _HELD:
            raise CellHeld(_message(self.label, f"this process (pid {os.getpid()}) runs it"))
        self._fd = _lock(self.path, self.label)
        _HELD[self.path] = -1 if self._fd is None else self._fd
        return self

    def settle(self, client: Any, experiment_id: str, run_key: str) -> list[str]:
        """End KILLED the RUNNING runs of ``run_key`` in the experiment whose process is gone, and
        return their ids; :class:`CellHeld` if one's process is alive (see the module docstring;
        the rules are :func:`mrbench.store.claims.settle_key`'s)."""
        if not self.active:
            return []
        settled = settle_key(client, experiment_id, run_key)
        for run_id in settled.ended:
            log.warning("run %s of cell %s was left RUNNING by a process that is gone: marked KILLED",
                        run_id, self.label)  # fmt: skip
        if settled.holder is not None:
            raise CellHeld(_message(self.label, describe(settled.holder)))
        return settled.ended

    def opened(self, tracking_uri: str, run_id: str) -> None:
        """The cell's run ``run_id`` is open: refresh its heartbeat until the claim ends."""
        if self.active and self._heartbeat is None:
            self._heartbeat = Heartbeat(tracking_uri, run_id)
            self._heartbeat.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if not self.active or self.path not in _HELD:
            return
        del _HELD[self.path]
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: see _lock
            os.close(self._fd)
            with contextlib.suppress(OSError):  # a folder the lock alone kept (CellFolder.clear_pending)
                self.path.parent.rmdir()
