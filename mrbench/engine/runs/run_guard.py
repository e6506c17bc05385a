"""How a cell's or an evaluation's run ends when its work raises: KILLED on Ctrl-C or when a write
finds no room, FAILED otherwise.

The one place both :func:`mrbench.engine.cell.runner.run_cell` and
:func:`mrbench.engine.evaluation.evaluate.run_eval` say it, so that a resumed sweep or a reader of the store
knows exactly which runs did not complete. A full disk, a disk quota or the file size limit
(``ulimit -f``), hit by any writer (:func:`mrbench.store.faults.room_fault`), is no fault of the
cell: its run ends KILLED like an interrupted one, so that its last complete training checkpoint is
kept and the same command, run again once there is room, resumes from it. The error goes on as an
:class:`~mrbench.store.faults.OutOfRoom` naming the folder the cell writes to, which the command
line prints in one line (exit 2).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path

from mrbench.engine.runs.tracking import end_run_quietly
from mrbench.store.client import RetryingClient
from mrbench.store.faults import OutOfRoom, room_fault


@contextlib.contextmanager
def ends_run_on_error(
    client: RetryingClient,
    run_id: str,
    *,
    cleanup: Callable[[], None] | None = None,
    writes_to: Path | None = None,
) -> Iterator[None]:
    """Run the body; if it raises, end run ``run_id`` KILLED (``KeyboardInterrupt``, or a lack of
    room: see the module docstring) or FAILED (any other), with an ``error`` tag naming the
    exception unless it was Ctrl-C, call ``cleanup``, and re-raise. ``writes_to``: the folder the
    body writes to (the cell's checkpoint folder), named when it runs out of room."""
    try:
        yield
    except BaseException as exc:
        room = None if isinstance(exc, KeyboardInterrupt) else room_fault(exc, writes_to)
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KeyboardInterrupt):
            end_run_quietly(client, run_id, "KILLED")
        elif room is not None:
            end_run_quietly(client, run_id, "KILLED", error=f"{room}: {error}")
        else:
            end_run_quietly(client, run_id, "FAILED", error=error)
        if cleanup is not None:
            cleanup()
        if room is not None and writes_to is not None and not isinstance(exc, OutOfRoom):
            raise OutOfRoom(_errno(room), f"run {run_id} ended KILLED", str(writes_to)) from exc
        raise


def _errno(room: str) -> int:
    """The errno of :func:`~mrbench.store.faults.room_fault`'s ``room`` (EIO: a write error whose
    cause is not known, which the message then takes from the exception it was raised from)."""
    for code, start in (
        (errno.ENOSPC, "the disk is full"),
        (errno.EDQUOT, "the disk quota"),
        (errno.EFBIG, "the file size limit"),
    ):
        if room.startswith(start):
            return code
    return errno.EIO
