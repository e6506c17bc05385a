"""Child processes, started and stopped the same way everywhere.

Two moves that mrbench makes wherever it runs a process of its own:

- :func:`die_with_parent`: a child that must not outlive the process that started it (a sweep's
  cell, the cell server, a rank of a multi-process cell) gets a stop signal when that process
  dies, even by ``kill -9``; :func:`process_alive` and :func:`parent_alive` are its checks.
- :func:`stop`: stop children (a process each, or the process group each leads): one signal,
  up to a grace period for them to end, SIGKILL for what is left, and every one reaped.

And what a Python child of ours is started with: :func:`module_command` (``python -m`` with this
interpreter) and :func:`child_env` (an environment in which it imports this very mrbench).

Standard library only (with :mod:`mrbench.core`, all that the kit may import).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

POLL_S = 0.05  # how often a wait that cannot block (a forked pid, a whole group) looks again
_PR_SET_PDEATHSIG = 1
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
"""The folder that holds the ``mrbench`` package this process runs."""


def module_command(module: str, *args: str) -> list[str]:
    """The command line of ``python -m module args`` with this process's interpreter."""
    return [sys.executable, "-m", module, *args]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with :data:`PACKAGE_ROOT` first on
    ``PYTHONPATH``, so that a Python child of ours imports the mrbench this process runs wherever
    that came from (a clone put on ``sys.path`` by hand, a notebook), not another one installed.

    >>> child_env({"PYTHONPATH": "/x"})["PYTHONPATH"] == os.pathsep.join([PACKAGE_ROOT, "/x"])
    True
    """
    env = dict(os.environ if env is None else env)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != PACKAGE_ROOT]
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return env


class Child(Protocol):
    """What :func:`stop` needs of a child: :class:`subprocess.Popen`, or a look-alike such as the
    cell server's :class:`~mrbench.sweeps.cell_server.ServerCell`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


# ------------------------------------------------------------------------------- die with parent


def death_signal(sig: int = signal.SIGINT) -> bool:
    """Ask the kernel for ``sig`` when this process's parent dies (Linux's ``PR_SET_PDEATHSIG``);
    False where that is not available (not Linux, no ``libc.so.6``), which nothing replaces: see
    :func:`die_with_parent` for the watch that does. The request holds for this process (a fork
    does not inherit it) and fires when the *thread* that forked it ends, in practice its parent."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return False
    return True


def parent_alive(parent_pid: int) -> bool:
    """Whether ``parent_pid`` is still this process's parent (an orphan is adopted by init or a
    subreaper, so its parent pid changes when its parent dies)."""
    return os.getppid() == parent_pid


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not one that ended and waits for its parent to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: the signal test above is all there is


def die_with_parent(
    parent_pid: int,
    sig: int = signal.SIGINT,
    *,
    is_parent: bool = True,
    watch: bool = True,
    every_s: float = 0.5,
    give_up_s: float = 30.0,
    exit_code: int = 130,
) -> bool:
    """Have ``sig`` delivered to this process when ``parent_pid`` dies; return whether it lives now.

    Two mechanisms, as neither covers every case alone:

    - on Linux, ``PR_SET_PDEATHSIG`` (:func:`death_signal`): the kernel sends ``sig`` at once when
      the parent dies, whatever this process is doing;
    - with ``watch``, a daemon thread that looks every ``every_s`` seconds whether the parent is
      still there: it covers a parent that died before the ``prctl`` took effect, and is all there
      is off Linux (macOS and the rest have no parent-death signal, so there the signal comes up
      to ``every_s`` late). When the parent is gone it sends ``sig`` to this process, and if this
      process has not ended ``give_up_s`` seconds later (its handler, e.g. ending a run KILLED,
      hangs) it leaves with ``os._exit(exit_code)``.

    ``is_parent=False``: ``parent_pid`` is a process to die with that is not this process's parent
    (a rank of ``accelerate launch`` dies with the cell process that ran the launcher, its
    grandparent): no ``prctl`` (it would fire on the wrong process's death) and the watch checks
    that pid's liveness (:func:`process_alive`) instead of this process's parent pid.

    ``watch=False``: no thread (a process that forks must stay single-threaded, as the cell
    server does); the caller acts on the return value and checks :func:`parent_alive` again
    where it can.
    """
    if is_parent:
        death_signal(sig)

    def alive() -> bool:
        return parent_alive(parent_pid) if is_parent else process_alive(parent_pid)

    if watch:
        name = "parent-watch" if is_parent else f"watch-{parent_pid}"
        _watch(alive, sig, name=name, every_s=every_s, give_up_s=give_up_s, exit_code=exit_code)
    return alive()


def _watch(
    alive: Callable[[], bool], sig: int, *, name: str, every_s: float, give_up_s: float, exit_code: int
) -> None:
    def run() -> None:
        while alive():
            time.sleep(every_s)
        os.kill(os.getpid(), sig)
        time.sleep(give_up_s)  # the process is stopping; if that hangs, give up hard
        os._exit(exit_code)

    threading.Thread(target=run, daemon=True, name=name).start()


# ----------------------------------------------------------------------------------------- stop


class Forked:
    """A :class:`Child` for a pid that this process forked itself (``os.fork``), reaped with
    ``waitpid``; one already reaped elsewhere reads as ended with code 0."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = 0
            else:
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None and self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(POLL_S)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def signal_group(pgid: int, sig: int) -> bool:
    """``sig`` to process group ``pgid``; False when it has no process left (or, its id reused,
    none of ours: PermissionError)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid: int) -> bool:
    """True while some process of group ``pgid`` exists (signal 0 checks without sending)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(
    children: Child | int | Iterable[Child | int],
    first: int | None = signal.SIGINT,
    *,
    grace_s: float,
    group: bool = False,
    whole_group: bool = False,
) -> None:
    """Stop ``children``: ``first`` to each, up to ``grace_s`` seconds (in all) for them to end,
    then SIGKILL to what is left, and reap every one.

    A child is a :class:`Child` (a :class:`subprocess.Popen`) or the pid of a process this one
    forked (see :class:`Forked`). ``first=None``: send nothing first (the child was asked to end
    another way, e.g. EOF on its stdin). ``group``: signal the process group each child leads (it
    was started in a session of its own), not only the child. ``whole_group`` (with ``group``):
    wait for every process of the group to end, not only its leader, and SIGKILL the group when
    any is left (a server whose workers outlive it would keep its port). A child or group already
    gone (ProcessLookupError) counts as stopped. Each child has at least 0.1 s after the first
    signal, even when an earlier one used up the grace period.
    """
    many = not isinstance(children, int) and not hasattr(children, "pid")
    given: list[Child | int] = list(children) if many else [children]  # type: ignore[arg-type,list-item]
    targets: list[Child] = [Forked(c) if isinstance(c, int) else c for c in given]
    live: list[Child] = []
    for child in targets:
        if first is None:
            live.append(child)
        elif group:
            if signal_group(child.pid, first):
                live.append(child)
            else:
                child.poll()  # gone already: reap the leader if it is ours to reap
        elif child.poll() is None:
            child.send_signal(first)
            live.append(child)
    deadline = time.monotonic() + grace_s
    left = [child for child in live if not _ended(child, deadline, whole_group and group)]
    for child in left:
        if group:
            signal_group(child.pid, signal.SIGKILL)
        else:
            child.send_signal(signal.SIGKILL)
    for child in left:
        child.wait()


def _ended(child: Child, deadline: float, whole_group: bool) -> bool:
    """Wait until ``deadline`` (at least 0.1 s) for ``child`` (with ``whole_group``: its process
    group) to end; whether it did."""
    if whole_group:
        while True:
            child.poll()  # reap the leader, so that an exited group reads as gone
            if not group_alive(child.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
    try:
        child.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True
