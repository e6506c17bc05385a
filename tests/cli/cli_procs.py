"""Helpers for tests that run the installed ``mrbench`` console script and signal real processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def mrbench_script() -> str:
    """The installed ``mrbench`` console script (``pip install -e .`` puts it beside the interpreter)."""
    beside = Path(sys.executable).with_name("mrbench")
    found = str(beside) if beside.exists() else shutil.which("mrbench")
    if not found:
        pytest.fail("the `mrbench` console script is not installed: run `pip install -e .`")
    return found


def run_mrbench(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``mrbench ARGS`` through the console script, output captured as text."""
    return subprocess.run(
        [mrbench_script(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def default_stop_signals() -> None:
    """``preexec_fn``: SIGINT, SIGTERM and SIGHUP at their defaults, whatever the test runner
    inherited (``nohup`` ignores SIGHUP, a background job SIGINT, and children keep that)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgid)`` of a process from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[2])


def live_processes(match: Callable[[int, int, int], bool]) -> list[int]:
    """Pids of processes that are alive (zombies excluded) and ``match(pid, ppid, pgid)``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] != "Z" and match(int(entry.name), stat[1], stat[2]):
                found.append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """Live child processes of ``pid``."""
    return live_processes(lambda p, ppid, pgid: ppid == pid)


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid``, whatever session or group they moved to."""
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def in_group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    return live_processes(lambda p, ppid, group: group == pgid)


def alive(pids: list[int]) -> list[int]:
    """The ones of ``pids`` still alive (zombies count as gone)."""
    return [pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] != "Z"]


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.3) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """True while something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0
