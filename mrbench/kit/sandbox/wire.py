"""What crosses process boundaries: framed JSON messages and the plain-data form of values.

Shared by every process of the sandbox: the host talks to its zygote in frames over the zygote's
stdin/stdout; the tester calls the candidate's functions in frames over two pipes, arguments
and return values encoded by :func:`encode`. A frame is a 4-byte big-endian length, then that
many bytes of UTF-8 JSON (lone surrogates pass through, so any ``str`` survives the trip).

Loaded inside the zygote (see :mod:`.zygote`): standard library only.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

FRAME = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
MAX_REPLY = 16 * 1024 * 1024  # largest value a candidate may return to the tests, in bytes

# Fixed descriptor numbers inside the zygote's children.
FD_CALLS_IN, FD_REPLIES_OUT = 3, 4  # candidate
FD_TESTER_SOCKET = 3  # tester: jobs in (with the channel's descriptors), verdicts out


# -- framing -----------------------------------------------------------------------------------


def write_frame(fd: int, obj: Any) -> None:
    """Write ``obj`` as one frame, all of it (``os.write`` may write less than asked)."""
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass")
    payload = FRAME.pack(len(data)) + data
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


def read_frame(fd: int, max_bytes: int = MAX_FRAME) -> Any:
    """The next framed JSON value, or None at end of file; ValueError for a malformed frame."""
    head = _read_exact(fd, FRAME.size)
    if head is None:
        return None
    (size,) = FRAME.unpack(head)
    if size > max_bytes:
        raise ValueError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body.decode("utf-8", "surrogatepass"))


def read_frame_within(fd: int, timeout_s: float) -> Any:
    """The next framed JSON value from ``fd`` (the zygote's stdout, which answers one request
    at a time); TimeoutError after ``timeout_s`` seconds, EOFError when the zygote exited."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    need = FRAME.size
    size = None
    while len(buf) < need:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("sandbox zygote did not answer in time")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise EOFError("sandbox zygote exited")
        buf += chunk
        if size is None and len(buf) >= FRAME.size:
            (size,) = FRAME.unpack(buf[: FRAME.size])
            need = FRAME.size + size
    return json.loads(buf[FRAME.size : need].decode("utf-8", "surrogatepass"))


# -- values ------------------------------------------------------------------------------------


class Unsupported(Exception):
    """A value that cannot cross the process boundary as data."""


def encode(value: Any, shared: frozenset[str], depth: int = 0) -> Any:
    """Plain-data JSON form of ``value``; containers are tagged one-key dicts.

    ``shared``: names of the classes the prelude defines (both sides have them), whose
    instances travel as their attribute dicts. Types are checked exactly; subclasses of
    builtins are converted to the builtin so that no candidate-defined method (``__eq__``,
    ``__hash__``, …) survives the trip.
    """
    if depth > 900:
        raise Unsupported("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int or t is float:
        return value
    if t is list:
        return {"L": [encode(v, shared, depth + 1) for v in value]}
    if t is tuple:
        return {"T": [encode(v, shared, depth + 1) for v in value]}
    if t is dict:
        return {"D": [[encode(k, shared, depth + 1), encode(v, shared, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"S" if t is set else "F": [encode(v, shared, depth + 1) for v in value]}
    if t is bytes or t is bytearray:
        return {"B" if t is bytes else "A": value.hex()}
    if t is complex:
        return {"C": [value.real, value.imag]}
    if t is range:
        return {"R": [value.start, value.stop, value.step]}
    if t.__name__ in shared and hasattr(value, "__dict__"):
        attrs = vars(value)
        if type(attrs) is not dict:
            raise Unsupported(f"object of type {t.__name__} has no plain attribute dict")
        return {"O": [t.__name__, {str(k): encode(v, shared, depth + 1) for k, v in attrs.items()}]}
    for base in (bool, int, float, str, tuple, list, dict, set, frozenset, bytes):
        if isinstance(value, base):
            converted = base(value)
            if type(converted) is not base:
                raise Unsupported(f"cannot convert {t.__name__} to {base.__name__}")
            return encode(converted, shared, depth + 1)
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):
        # Generators, map/filter/zip objects: the tests see a one-shot iterator over the items.
        items = []
        for item in value:
            items.append(encode(item, shared, depth + 1))
            if len(items) > 10_000_000:
                raise Unsupported("iterator too long")
        return {"I": items}
    raise Unsupported(f"values of type {t.__name__} cannot be passed between processes")


def decode(data: Any, shared: dict[str, type], depth: int = 0) -> Any:
    """Inverse of :func:`encode`; never runs code of the sender's choosing.

    ``shared``: the receiver's prelude classes by name (instances are rebuilt without calling
    ``__init__``).
    """
    if depth > 1000:
        raise Unsupported("value nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if not (isinstance(data, dict) and len(data) == 1):
        raise Unsupported("malformed value")
    ((tag, body),) = data.items()
    d = depth + 1
    if tag == "L":
        return [decode(v, shared, d) for v in body]
    if tag == "T":
        return tuple(decode(v, shared, d) for v in body)
    if tag == "D":
        return {decode(k, shared, d): decode(v, shared, d) for k, v in body}
    if tag == "S":
        return {decode(v, shared, d) for v in body}
    if tag == "F":
        return frozenset(decode(v, shared, d) for v in body)
    if tag == "B":
        return bytes.fromhex(body)
    if tag == "A":
        return bytearray.fromhex(body)
    if tag == "C":
        return complex(float(body[0]), float(body[1]))
    if tag == "R":
        return range(int(body[0]), int(body[1]), int(body[2]))
    if tag == "I":
        return iter([decode(v, shared, d) for v in body])
    if tag == "O":
        name, attrs = body
        cls = shared.get(name)
        if cls is None:
            raise Unsupported(f"unknown shared class {name!r}")
        obj = cls.__new__(cls)
        obj.__dict__.update({str(k): decode(v, shared, d) for k, v in attrs.items()})
        return obj
    raise Unsupported(f"unknown tag {tag!r}")


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """(type name, message) of ``exc`` as sent across: the message cut to 300 characters, and a
    placeholder when its ``__str__`` itself raises (candidate code may define it)."""
    try:
        message = str(exc)[:300]
    except BaseException:
        message = "<unprintable>"
    return type(exc).__name__, message
