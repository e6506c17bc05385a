"""Disk and database faults, in words: what the user must fix when a store's files cannot be used.

A full disk, a file size limit (``ulimit -f``) or a damaged ``mlflow.db`` reach mrbench as whatever
the library that hit them raises (``MlflowException: disk I/O error``, SQLAlchemy's
``DatabaseError``, ``OSError``). :func:`fault_cause` finds the fault in an exception (or in what it
was raised from) and says it in words; :func:`describe_fault` makes the one line the command line
prints for it. The store code (:mod:`mrbench.store.client`, :mod:`mrbench.store.reader`) raises
:class:`~mrbench.store.client.StoreFault` with these words where it knows the store.

Every writer a cell uses is recognised: an ``OSError`` (``json``, ``shutil``) by its errno,
sqlite by its error name, safetensors and tokenizers by their text ("No space left on device (os
error 28)"), and
torch's zip writer, whose ``RuntimeError`` (``[enforce fail at inline_container.cc:…] unexpected
pos …``) says no cause at all, by what the file system says then: the file size limit this
process has, or the free space left where it wrote. A fault that is a lack of room (not a damaged
database) is :func:`room_fault`: the run it hit ends KILLED, not FAILED, so that its last training
checkpoint is resumed once there is room (:mod:`mrbench.engine.runs.run_guard`). :func:`require_room`
checks before a large write (a checkpoint) that it fits, and raises :class:`OutOfRoom` if not.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from mrbench.core import env
from mrbench.store.uri import sqlite_path

_FULL_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded"}
_TOO_LARGE = "the file size limit is reached"
# What libraries that do not raise an OSError (safetensors, torch's writer) say for the same faults.
_TEXT_MARKERS = {
    "no space left on device": _FULL_ERRNOS[errno.ENOSPC],
    "disk quota exceeded": _FULL_ERRNOS[errno.EDQUOT],
    "file too large": _TOO_LARGE,
    "filetoolarge": _TOO_LARGE,
    "storagefull": _FULL_ERRNOS[errno.ENOSPC],
}
# torch.save's zip writer: its error names neither the errno nor the file.
_TORCH_WRITER = ("inline_container.cc", "pytorchstreamwriter failed")
_LOW_SPACE_BYTES = 16 * 1024 * 1024


class OutOfRoom(OSError):
    """A write that does not fit: the disk's free space or the file size limit is too small.
    ``OSError(errno, detail, filename)``: ENOSPC or EFBIG, the sizes in words, and the file or
    folder that was to be written."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (``__cause__``, ``__context__``, and
    SQLAlchemy's ``orig``)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (current.__cause__, current.__context__, getattr(current, "orig", None)):
            if isinstance(inner, BaseException):
                todo.append(inner)


def _size_limit() -> str:
    """``" (ulimit -f: N KiB)"`` when this process has a file size limit, else ``""``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return "" if soft == resource.RLIM_INFINITY else f" (ulimit -f: {soft // 1024} KiB)"


def _existing(path: Path) -> Path:
    """``path`` or its nearest folder that exists (what ``shutil.disk_usage`` can ask about)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _io_error_cause(path: Path | None) -> str:
    """What a write error that names no cause (sqlite's "disk I/O error", torch's writer) most
    likely is, for the file or folder at ``path``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return _TOO_LARGE + _size_limit()
    if path is not None:
        try:
            if shutil.disk_usage(_existing(path)).free < _LOW_SPACE_BYTES:
                return _FULL_ERRNOS[errno.ENOSPC]
        except OSError:
            pass
    return "disk I/O error (a full disk, a file size limit or a failing disk)"


def _sqlite_cause(exc: sqlite3.Error, path: Path | None) -> str | None:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        return f"the database is damaged ({exc})"
    if name == "SQLITE_FULL" or "database or disk is full" in text:
        return _FULL_ERRNOS[errno.ENOSPC]
    if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
        return _io_error_cause(path)
    return None


def fault_cause(exc: BaseException, path: Path | None = None) -> str | None:
    """The disk or database fault behind ``exc`` in words ("the disk is full", "the database is
    damaged (…)"); None when ``exc`` is no such fault. ``path``: the file being written, if known
    (to tell a full disk from a failing one)."""
    for current in exception_chain(exc):
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return _FULL_ERRNOS[current.errno]
        if isinstance(current, OSError) and current.errno == errno.EFBIG:
            return _TOO_LARGE + _size_limit()
        if isinstance(current, sqlite3.Error):
            cause = _sqlite_cause(current, path)
            if cause is not None:
                return cause
    for current in exception_chain(exc):
        name = type(current).__name__  # tokenizers raises a bare Exception
        text = str(current).lower().replace(" ", "") if "Error" in name or name == "Exception" else ""
        for marker, cause in _TEXT_MARKERS.items():
            if marker.replace(" ", "") in text:
                return cause + (_size_limit() if cause == _TOO_LARGE else "")
        if any(marker.replace(" ", "") in text for marker in _TORCH_WRITER):
            return _io_error_cause(path)
    return None


def room_fault(exc: BaseException, path: Path | None = None) -> str | None:
    """:func:`fault_cause` when it is a lack of room (a full disk, a quota, the file size limit, or a
    write error that may be one), None otherwise (no fault, or a damaged database)."""
    cause = fault_cause(exc, path)
    return None if cause is None or is_damage(cause) else cause


def require_room(path: Path, need_bytes: int, *, largest_file: int = 0, what: str = "the write") -> None:
    """:class:`OutOfRoom` unless ``need_bytes`` fit in the free space of the disk that holds
    ``path`` (a file or folder, which may not exist yet) and a file of ``largest_file`` bytes fits
    under this process's file size limit (``ulimit -f``); ``what`` names the write in the message."""
    free = shutil.disk_usage(_existing(path)).free
    if need_bytes > free:
        detail = f"{what} needs about {_mb(need_bytes)} and the disk has {_mb(free)} free"
        raise OutOfRoom(errno.ENOSPC, detail, str(path))
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and largest_file > soft:
        detail = f"{what} writes a file of about {_mb(largest_file)}, over the limit of {_mb(soft)}"
        raise OutOfRoom(errno.EFBIG, detail, str(path))


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB"


def is_damage(cause: str) -> bool:
    """Whether :func:`fault_cause`'s ``cause`` is a damaged database (not a disk that is full)."""
    return cause.startswith("the database is damaged")


def store_fault_message(uri: str, cause: str) -> str:
    """The one line for ``cause`` (:func:`fault_cause`) in the store at ``uri``."""
    db = sqlite_path(uri)
    where = f"the MLflow store {db}" if db is not None else f"the MLflow store {uri}"
    if is_damage(cause):
        return (
            f"{where} cannot be read: {cause}; restore it from a backup, or move it aside to start a "
            f"new store (--tracking-uri, {env.RESULTS.name})"
        )
    return f"{where} cannot be written: {cause}; make room (or lift the limit) and run the command again"


def _oserror_file(exc: BaseException) -> str | None:
    for current in exception_chain(exc):
        if isinstance(current, OSError) and current.filename:
            return os.fsdecode(current.filename)
    return None


def describe_fault(exc: BaseException, store_uri: str | None = None) -> str | None:
    """One line naming the file and the disk or database fault behind ``exc``, or None when ``exc``
    is no such fault. The file is the one the ``OSError`` names, else the store ``store_uri`` (the
    store this process uses) when the fault came from sqlite."""
    filename = _oserror_file(exc)
    db = sqlite_path(store_uri) if store_uri else None
    cause = fault_cause(exc, Path(filename) if filename else db)
    if cause is None:
        return None
    room = next((e for e in exception_chain(exc) if isinstance(e, OutOfRoom)), None)
    if room is not None and room.strerror:
        cause = f"{cause} ({room.strerror})"
    if filename is not None:
        return f"cannot write {filename}: {cause}; make room (or lift the limit) and run the command again"
    if store_uri is not None and any(isinstance(e, sqlite3.Error) for e in exception_chain(exc)):
        return store_fault_message(store_uri, cause)
    return f"a file could not be written: {cause}; make room (or lift the limit) and run the command again"
