"""The messages between a sweep and its cell server (:mod:`mrbench.sweeps.cell_server`), as typed
records: one JSON object per line, a pipe in each direction, written and read only here.

Sweep → server, on the server's stdin:

- :class:`Init` ``{"preload", "path"}``: the first line; modules to import once, the sweep's ``sys.path``.
- :class:`ForkRequest` ``{"id", "payload", "env", "cwd", "log"}``: one per cell; fork a child to run it.

Server → sweep, on ``REPLY_FD``:

- :class:`Ready` ``{"ready": pid, "threads", "failed"}``: preloaded (its threads, the failed imports).
- :class:`Started` ``{"id", "started": pid}``: the child of request ``id`` runs as ``pid``.
- :class:`Refused` ``{"id", "refused": why}``: request ``id`` got no child (unsafe to fork, or malformed).
- :class:`Exited` ``{"exited": pid, "code"}``: child ``pid`` ended with ``code`` (negative: a signal).

Each class has ``to_line()``; :func:`parse_init`, :func:`parse_request` and :func:`parse_reply`
read a line back and check every field, raising :class:`WireError` naming the message and the
field. Keys a reader does not know are ignored. The JSON shapes are those the server has always
used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mrbench.core.json_fields import RecordError, optional, required


class WireError(ValueError):
    """A line on a cell server pipe that is not the message it should be. ``request_id``: the id of
    a malformed fork request, when it had a readable one (the server refuses that id)."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True)
class Init:
    """The sweep's first line: what the server preloads, and the sweep's ``sys.path`` (where the
    cell function's module may be found)."""

    preload: tuple[str, ...]
    path: tuple[str, ...]

    def to_line(self) -> bytes:
        return _line({"preload": list(self.preload), "path": list(self.path)})


@dataclass(frozen=True)
class ForkRequest:
    """Fork a child for one cell: its payload file, environment, working directory, and log file
    (None: the child writes to the server's output)."""

    id: int
    payload: str
    env: Mapping[str, str]
    cwd: str
    log: str | None = None

    def to_line(self) -> bytes:
        fields = {"id": self.id, "payload": self.payload, "env": dict(self.env), "cwd": self.cwd}
        return _line({**fields, "log": self.log})


@dataclass(frozen=True)
class Ready:
    """The server has preloaded: its pid, its thread count, and ``"module: error"`` per failed import."""

    pid: int
    threads: int
    failed: tuple[str, ...] = ()

    def to_line(self) -> bytes:
        return _line({"ready": self.pid, "threads": self.threads, "failed": list(self.failed)})


@dataclass(frozen=True)
class Started:
    """The child of fork request ``id`` runs as ``pid``."""

    id: int
    pid: int

    def to_line(self) -> bytes:
        return _line({"id": self.id, "started": self.pid})


@dataclass(frozen=True)
class Refused:
    """Fork request ``id`` got no child, because of ``why``."""

    id: int
    why: str

    def to_line(self) -> bytes:
        return _line({"id": self.id, "refused": self.why})


@dataclass(frozen=True)
class Exited:
    """Child ``pid`` ended with ``code`` (:func:`os.waitstatus_to_exitcode`: negative for a signal)."""

    pid: int
    code: int

    def to_line(self) -> bytes:
        return _line({"exited": self.pid, "code": self.code})


Reply = Ready | Started | Refused | Exited
"""What the server says to the sweep."""


def parse_init(line: bytes) -> Init:
    """The init line ``line``; :class:`WireError` when it is not one."""
    what = "init line"
    data = _object(line, what)
    return Init(_strings(data, "preload", what), _strings(data, "path", what))


def parse_request(line: bytes) -> ForkRequest:
    """The fork request ``line``; :class:`WireError` (with ``request_id`` when the id was readable)
    when it is not one."""
    what = "fork request"
    data = _object(line, what)
    request_id = _int(data, "id", what)
    try:
        env = _field(data, "env", object, what)
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise WireError(f"{what}: 'env' should be an object of strings, not {_short(env)}")
        log = _optional_str(data, "log", what)
        return ForkRequest(request_id, _str(data, "payload", what), dict(env), _str(data, "cwd", what), log)
    except WireError as exc:  # the id is good: the server can refuse this request by it
        raise WireError(str(exc), request_id) from None


_REPLY_KINDS = ("ready", "started", "refused", "exited")  # the key that tells a reply's kind


def parse_reply(line: bytes) -> Reply:
    """The server's reply ``line``, of the kind its key says; :class:`WireError` when it is none."""
    data = _object(line, "reply")
    kinds = [kind for kind in _REPLY_KINDS if kind in data]
    if len(kinds) != 1:
        raise WireError(f"reply: should hold one of {', '.join(map(repr, _REPLY_KINDS))}, not {_short(data)}")
    kind = kinds[0]
    what = f"{kind} reply"
    if kind == "ready":
        return Ready(_pid(data, "ready", what), _int(data, "threads", what), _strings(data, "failed", what))
    if kind == "started":
        return Started(_int(data, "id", what), _pid(data, "started", what))
    if kind == "refused":
        return Refused(_int(data, "id", what), _str(data, "refused", what))
    return Exited(_pid(data, "exited", what), _int(data, "code", what))


# ------------------------------------------------------------------------------------- helpers


def _line(message: dict[str, Any]) -> bytes:
    # json.dumps escapes newlines inside strings, so the message stays one line
    return json.dumps(message).encode() + b"\n"


def _object(line: bytes, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both
        raise WireError(f"{what}: not a line of JSON: {_short(line)}") from None
    if not isinstance(data, dict):
        raise WireError(f"{what}: should be a JSON object, not {_short(data)}")
    return data


def _field(data: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    """``data[key]``, a ``kind``, read as every JSON record of mrbench is (json_fields.required:
    absent or null is missing; JSON true is no int), as a :class:`WireError`."""
    try:
        return required(data, key, kind, what)
    except RecordError as exc:
        raise WireError(str(exc)) from None


def _optional_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    """``data[key]``, a str, or None when absent or null (json_fields.optional), as a :class:`WireError`."""
    try:
        return optional(data, key, str, what, None)
    except RecordError as exc:
        raise WireError(str(exc)) from None


def _int(data: Mapping[str, Any], key: str, what: str) -> int:
    return _field(data, key, int, what)


def _pid(data: Mapping[str, Any], key: str, what: str) -> int:
    # Checked because the sweep signals it: os.kill(0, …) or os.kill(-1, …) would reach a group.
    value = _int(data, key, what)
    if value <= 0:
        raise WireError(f"{what}: {key!r} should be a process id above 0, not {value}")
    return value


def _str(data: Mapping[str, Any], key: str, what: str) -> str:
    return _field(data, key, str, what)


def _strings(data: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    value = _field(data, key, object, what)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WireError(f"{what}: {key!r} should be a list of str, not {_short(value)}")
    return tuple(value)


def _short(value: Any) -> str:
    """``value`` for an error message, cut short (a garbled line may be long)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
