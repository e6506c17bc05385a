"""Isolation the zygote sets up: namespaces, private tmpfs mounts, prctl, uids, private directories.

The zygote calls :func:`unshare_namespaces` once at start (then :func:`only_loopback` and
:func:`private_tmp` say what that achieved); in each child it forks, :func:`move_fds`, then
:func:`become` (as root) or :func:`drop_capabilities`, and :func:`prctl`; its directories are
made by :func:`mkdtemp` and removed by :func:`rmtree` and :func:`empty_tmp`. ``libc`` is the
process's C library as ``ctypes.CDLL(None, use_errno=True)``. Loaded inside the zygote (see
:mod:`.zygote`): standard library only.
"""

from __future__ import annotations

import os
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""The world-writable directories: private tmpfs mounts cover them in the zygote's namespace."""


def prctl(libc: Any, option: int, value: int) -> int:
    """``prctl(option, value)``; 0 on success."""
    import ctypes

    return int(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


def unshare_namespaces(libc: Any) -> bool:
    """Move this process into new mount, network and IPC namespaces; whether that worked.

    As root directly; otherwise inside a new user namespace (when unprivileged user namespaces
    are allowed) that maps only our own uid and gid.
    """
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC
    if os.geteuid() == 0:
        return bool(libc.unshare(flags) == 0)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(flags | CLONE_NEWUSER) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        except OSError:
            pass
    return True


def only_loopback() -> bool:
    """Whether this network namespace has no device but ``lo`` (a new one's is even down)."""
    import socket

    try:
        return {name for _, name in socket.if_nameindex()} <= {"lo"}
    except OSError:
        return False


def private_tmp(libc: Any, tmpfs_mb: int) -> bool:
    """Mount a private ``tmpfs_mb``-MB tmpfs over each of :data:`SHARED_TMP`; whether all worked.

    Mounts are first made private, so that nothing mounted here propagates to the host.
    """
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    ok = True
    for path in SHARED_TMP:
        if os.path.isdir(path) and not os.path.islink(path):
            opts = f"size={tmpfs_mb}m,mode=1777".encode()
            if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
                ok = False
    return ok


def empty_tmp(keep: str) -> None:
    """Delete everything in the private :data:`SHARED_TMP` directories except ``keep``.

    Only call it when :func:`private_tmp` succeeded: otherwise they are the host's.
    """
    for base in SHARED_TMP:
        try:
            entries = os.listdir(base)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(base, name)
            if path != keep:
                rmtree(path)


def move_fds(fds: dict[int, int | None]) -> None:
    """Make the descriptor numbers ``fds`` name (``None``: ``/dev/null``) the only open ones.

    Sources are first copied above 64 so that no ``dup2`` overwrites a source still to move.
    """
    import fcntl

    devnull = os.open("/dev/null", os.O_RDONLY)
    moved = [
        (dst, fcntl.fcntl(devnull if src is None else src, fcntl.F_DUPFD, 64)) for dst, src in fds.items()
    ]
    for dst, src in moved:
        os.dup2(src, dst)
    os.closerange(max(fds) + 1, 1 << 20)


def become(uid: int) -> None:
    """Drop to ``uid`` (also as group, with no supplementary groups) for good."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def drop_capabilities(libc: Any) -> None:
    """Clear every capability (a user namespace gave us some; a candidate gets none)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    libc.capset(ctypes.byref(header), ctypes.byref(data))


def mkdtemp(parent: str, prefix: str) -> str:
    """A new directory ``parent/prefix<random>`` with mode 0700."""
    for _ in range(100):
        path = os.path.join(parent, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise OSError(f"could not create a directory under {parent}")


def rmtree(path: str) -> None:
    """Remove the file or directory tree at ``path`` (never following a link); errors ignored."""
    import shutil

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
