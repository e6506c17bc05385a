"""The cell server's pipe messages (:mod:`mrbench.sweeps.server_wire`): each one survives its line,
keeps the JSON shape the server has always used, and a malformed line names the message and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mrbench.sweeps.server_wire import (
    Exited,
    ForkRequest,
    Init,
    Ready,
    Refused,
    Started,
    WireError,
    parse_init,
    parse_reply,
    parse_request,
)

REQUEST = {"id": 4, "payload": "/tmp/p.json", "env": {"OMP_NUM_THREADS": "2"}, "cwd": "/work", "log": None}


def line(data: Any) -> bytes:
    return json.dumps(data).encode() + b"\n"


def test_init_and_requests_round_trip_in_their_json_shape() -> None:
    init = Init(("torch", "server_cells"), ("/a", "/b"))
    assert parse_init(init.to_line()) == init
    assert json.loads(init.to_line()) == {"preload": ["torch", "server_cells"], "path": ["/a", "/b"]}
    for log in (None, "/tmp/cell.log"):
        request = ForkRequest(4, "/tmp/p.json", {"OMP_NUM_THREADS": "2"}, "/work", log)
        assert parse_request(request.to_line()) == request
        assert json.loads(request.to_line()) == {**REQUEST, "log": log}


@pytest.mark.parametrize(
    ("reply", "shape"),
    [
        (
            Ready(100, 1, ("trl: ImportError: no",)),
            {"ready": 100, "threads": 1, "failed": ["trl: ImportError: no"]},
        ),
        (Started(3, 101), {"id": 3, "started": 101}),
        (
            Refused(3, "the server runs 2 threads\nreally"),
            {"id": 3, "refused": "the server runs 2 threads\nreally"},
        ),
        (Exited(101, -9), {"exited": 101, "code": -9}),
    ],
)
def test_each_reply_round_trips_as_one_line(reply: Any, shape: dict[str, Any]) -> None:
    written = reply.to_line()
    assert written.endswith(b"\n") and written.count(b"\n") == 1  # a newline in a field stays escaped
    assert json.loads(written) == shape
    assert parse_reply(written) == reply
    assert parse_reply(written.rstrip(b"\n")) == reply  # as the readers split lines


def test_a_request_without_log_reads_as_none() -> None:
    assert parse_request(line({k: v for k, v in REQUEST.items() if k != "log"})).log is None


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"path": []}, "init line: 'preload' is missing"),
        ({"preload": "torch", "path": []}, "init line: 'preload' should be a list of str"),
        ({"preload": [], "path": [1]}, "init line: 'path' should be a list of str"),
        ([1, 2], "init line: should be a JSON object"),
    ],
)
def test_a_malformed_init_line_names_its_field(data: Any, named: str) -> None:
    with pytest.raises(WireError, match=named.replace("(", r"\(")):
        parse_init(line(data))


@pytest.mark.parametrize(
    ("change", "named", "request_id"),
    [
        ({"id": "4"}, "fork request: 'id' should be int", None),
        ({"id": True}, "fork request: 'id' should be int", None),
        ({"payload": None}, "fork request: 'payload' is missing", 4),
        ({"env": {"A": 1}}, "fork request: 'env' should be an object of strings", 4),
        ({"env": ["A=1"]}, "fork request: 'env' should be an object of strings", 4),
        ({"cwd": 7}, "fork request: 'cwd' should be str", 4),
        ({"log": 7}, "fork request: 'log' should be str, not 7", 4),
    ],
)
def test_a_malformed_request_names_its_field_and_keeps_a_readable_id(
    change: dict[str, Any], named: str, request_id: int | None
) -> None:
    with pytest.raises(WireError, match=named) as caught:
        parse_request(line({**REQUEST, **change}))
    assert caught.value.request_id == request_id  # the server refuses by it, or reports and skips


def test_a_request_missing_a_field_says_so() -> None:
    with pytest.raises(WireError, match="fork request: 'cwd' is missing"):
        parse_request(line({k: v for k, v in REQUEST.items() if k != "cwd"}))


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"garbage\n", "reply: not a line of JSON"),
        (b"\xff\xfe\n", "reply: not a line of JSON"),
        (b"", "reply: not a line of JSON"),
        (line("ready"), "reply: should be a JSON object"),
        (line({"id": 1}), "reply: should hold one of 'ready', 'started', 'refused', 'exited'"),
        (line({"id": 1, "started": 5, "refused": "no"}), "reply: should hold one of"),
        (line({"ready": 5, "threads": 1}), "ready reply: 'failed' is missing"),
        (line({"ready": 5, "threads": "1", "failed": []}), "ready reply: 'threads' should be int"),
        (
            line({"ready": 0, "threads": 1, "failed": []}),
            "ready reply: 'ready' should be a process id",
        ),
        (line({"id": 1, "started": "5"}), "started reply: 'started' should be int"),
        (line({"id": 1, "started": -1}), "started reply: 'started' should be a process id above 0"),
        (line({"started": 5}), "started reply: 'id' is missing"),
        (line({"id": 1, "refused": None}), "refused reply: 'refused' is missing"),
        (line({"exited": 5, "code": 1.5}), "exited reply: 'code' should be int"),
        (line({"exited": True, "code": 0}), "exited reply: 'exited' should be int"),
    ],
)
def test_a_malformed_reply_names_the_message_and_field(raw: bytes, named: str) -> None:
    with pytest.raises(WireError, match=named):
        parse_reply(raw)


def test_a_wire_error_is_a_value_error_and_cuts_a_long_line_short() -> None:
    with pytest.raises(ValueError) as caught:
        parse_reply(b"x" * 10_000)
    assert isinstance(caught.value, WireError) and len(str(caught.value)) < 200
