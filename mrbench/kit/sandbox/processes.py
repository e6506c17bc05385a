"""Finding, reaping and killing the zygote's processes.

With dedicated uids (root), :func:`kill_uids` forks the reaper that kills every process of the
candidate's (and/or the tester's) uid at once; without them, :func:`kill_descendants` walks the
zygote's process tree instead. :func:`wait_exits` reaps children that end within a short wait.
Loaded inside the zygote (see :mod:`.zygote`): standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import time


def kill_uids(uids: list[int], *, candidate: bool, tester: bool) -> int:
    """Fork the reaper: SIGKILL to every process of the candidate and/or tester uid; its pid.

    ``uids``: (candidate, tester, reaper). The reaper exits 0 when its signals went out.
    """
    cand, test, reaper = uids
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(reaper, reaper, reaper)
            # real=reaper, effective=candidate, saved=tester: the candidate cannot signal us
            # (it matches neither our real nor saved uid), and we may switch to the tester's.
            os.setresuid(reaper, cand, test)
            if candidate:
                os.kill(-1, signal.SIGKILL)
            if tester:
                os.setresuid(-1, test, -1)
                os.kill(-1, signal.SIGKILL)
            os._exit(0)
        except BaseException:
            os._exit(1)
    return pid


def count_user_processes(uid: int) -> int:
    """How many processes ``uid`` runs (``RLIMIT_NPROC`` counts them all)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _children_by_parent() -> dict[int, list[int]]:
    """Every process's pid under its parent's, from ``/proc/*/stat`` (a process that ends while
    being read is left out)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The ppid is the second field after the command name, which may hold spaces and parens.
        children.setdefault(int(stat[stat.rfind(b")") + 2 :].split()[1]), []).append(int(entry))
    return children


def child_pids(parent: int) -> set[int]:
    """Children of ``parent`` from ``/proc/*/stat`` (when ``/proc/<pid>/task/*/children`` is missing)."""
    return set(_children_by_parent().get(parent, []))


def kill_descendants(root: int, spare: set[int]) -> None:
    """SIGKILL every descendant of ``root`` except the ``spare`` subtrees until none is left,
    reaping as we go (the slow path, without dedicated uids)."""
    for _ in range(2000):
        children = _children_by_parent()
        found, stack = [], [p for p in children.get(root, []) if p not in spare]
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack += children.get(pid, [])
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in found:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.0005)


def wait_exits(pids: tuple[int, ...], wait_s: float) -> dict[int, int]:
    """Reap those of ``pids`` that end within ``wait_s`` seconds; their wait statuses by pid."""
    statuses: dict[int, int] = {}
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass
    end = time.monotonic() + wait_s
    try:
        while True:
            for pid in pids:
                if pid in statuses:
                    continue
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                if done:
                    statuses[pid] = status
            remaining = end - time.monotonic()
            pending = [p for p in pids if p not in statuses]
            if not pending or remaining <= 0:
                return statuses
            waitable = [fds[p] for p in pending if p in fds]
            if len(waitable) == len(pending):
                select.select(waitable, [], [], remaining)  # a pidfd turns readable at exit
            else:
                time.sleep(min(remaining, 0.0005))
    finally:
        for fd in fds.values():
            os.close(fd)
