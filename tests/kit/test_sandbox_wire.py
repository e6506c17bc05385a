"""The sandbox's wire format (framing, values as plain data) and the zygote side's stdlib-only rule."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

import mrbench.kit.sandbox as sandbox_package
from mrbench.kit.sandbox import wire

# What the zygote loads (started with -I -S, it cannot import mrbench or anything installed).
ZYGOTE_SIDE = ("zygote", "wire", "limits", "isolation", "processes", "verdict", "candidate", "tester")


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


class RiggedInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def _round_trip(value: object, shared: dict[str, type] | None = None) -> object:
    shared = shared or {}
    return wire.decode(wire.encode(value, frozenset(shared)), shared)


def test_values_round_trip_with_their_exact_types():
    value = {
        "list": [1, 2.5, None, True],
        "tuple": (1, "two"),
        "set": {1, 2},
        "frozen": frozenset({3}),
        "bytes": b"\x00\xff",
        "bytearray": bytearray(b"ab"),
        "complex": 1 - 2j,
        "range": range(1, 9, 2),
        (1, 2): "tuple key",
        "surrogate": "\udcff",
    }
    back = _round_trip(value)
    assert back == value
    assert type(back["frozen"]) is frozenset and type(back["bytearray"]) is bytearray
    assert list(_round_trip(x * x for x in range(3))) == [0, 1, 4]


def test_prelude_classes_travel_as_attributes_and_builtin_subclasses_lose_their_methods():
    point = _round_trip(Point(1, 2), {"Point": Point})
    assert type(point) is Point and (point.x, point.y) == (1, 2)
    rigged = _round_trip(RiggedInt(5))
    assert type(rigged) is int and rigged != 6
    with pytest.raises(wire.Unsupported):
        wire.encode(Point(1, 2), frozenset())  # not a prelude class: no way across
    with pytest.raises(wire.Unsupported):
        wire.decode({"O": ["Point", {}]}, {})  # the receiver does not know the class


def test_frames_round_trip_and_oversized_frames_are_refused():
    read_fd, write_fd = os.pipe()
    try:
        wire.write_frame(write_fd, {"a": [1, "\udcff"]})
        assert wire.read_frame(read_fd) == {"a": [1, "\udcff"]}
        wire.write_frame(write_fd, "x" * 100)
        with pytest.raises(ValueError, match="exceeds the 50-byte limit"):
            wire.read_frame(read_fd, max_bytes=50)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_reading_a_frame_within_a_time_limit():
    read_fd, write_fd = os.pipe()
    try:
        with pytest.raises(TimeoutError):
            wire.read_frame_within(read_fd, 0.05)
        wire.write_frame(write_fd, {"ready": True})
        assert wire.read_frame_within(read_fd, 1.0) == {"ready": True}
        os.close(write_fd)
        write_fd = -1
        with pytest.raises(EOFError):
            wire.read_frame_within(read_fd, 1.0)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


@pytest.mark.parametrize("name", ZYGOTE_SIDE)
def test_zygote_side_imports_only_the_standard_library_and_its_siblings(name):
    path = Path(sandbox_package.__file__).with_name(f"{name}.py")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:  # a sibling the zygote loads too
            siblings = [node.module] if node.module else [alias.name for alias in node.names]
            assert node.level == 1 and set(siblings) <= set(ZYGOTE_SIDE), (name, siblings)
        elif isinstance(node, ast.ImportFrom):
            assert node.module.split(".")[0] in sys.stdlib_module_names | {"__future__"}, (name, node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in sys.stdlib_module_names, (name, alias.name)
