"""Helpers of the Ray tests: the ``ray`` command, finding and stopping one Ray's processes (never
``ray stop``, which stops every Ray on the machine), a network namespace of the tests' own for the
two-node cluster, and a fake cell that records the Ray node it ran on.

``python tests/sweeps/ray_testing.py sweep --name … [flags]`` is the real ``mrbench sweep``
command (as :mod:`fake_sweep_cli`) with :func:`node_cell` as its cell function: each cell writes
the id of its Ray node to a file named after its run key in ``$MRBENCH_TEST_NODE_RECORD``.

This module is imported by Ray workers too (as ``ray_testing:node_cell``): standard library only
at the top.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

OBJECT_STORE_BYTES = str(80 * 1024 * 1024)
QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0"}

NETNS_IP = "10.99.0.1"
"""The address the tests' network namespace gives its loopback device, for the cluster's nodes."""
NETNS_ENV = "MRBENCH_TEST_RAY_NETNS_IP"
"""Set (to :data:`NETNS_IP`) in the processes that run inside that namespace."""
NODE_RECORD_ENV = "MRBENCH_TEST_NODE_RECORD"

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent


def ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment."""
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ray_pids(temp_dir: str, *also: str) -> set[int]:
    """The processes of the Ray whose temporary directory is ``temp_dir``: those with it (or one of
    the strings ``also``) on their command line (GCS, raylets, log monitor) and all their
    descendants (agents and workers, which retitle themselves ``ray::…``)."""
    pids: set[int] = set()
    for pattern in (temp_dir, *also):
        found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
        pids |= {int(pid) for pid in found.stdout.split()}
    pids -= {os.getpid()}
    todo = list(pids)
    while todo:
        children = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True)
        for child in map(int, children.stdout.split()):
            if child not in pids:
                pids.add(child)
                todo.append(child)
    return pids


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie counts as ended)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    """Wait up to ``timeout_s`` for ``pids`` to end; return those still alive."""
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate(pids: set[int], grace_s: float) -> None:
    """SIGTERM to ``pids``, then SIGKILL to those still alive after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pid in alive(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not wait_gone(pids, wait_s):
            return


def stop_ray(temp_dir: str, *also: str, grace_s: float = 10.0) -> None:
    """Stop the Ray of ``temp_dir`` (see :func:`ray_pids` for ``also``), and only it, as ``ray stop``
    does (the raylets first, then the agents and monitors, the GCS last; SIGTERM, then SIGKILL to
    what is left after ``grace_s``), then fail the test if any of its processes is still alive.
    ``ray stop`` itself would stop every Ray on the machine, such as another test run's."""
    pids = ray_pids(temp_dir, *also)
    raylets = {pid for pid in pids if "/raylet " in command_line(pid)}
    gcs = {pid for pid in pids if "gcs_server " in command_line(pid)}
    for stage in (raylets, pids - raylets - gcs, gcs):
        terminate(stage, grace_s)
    assert not alive(pids), f"Ray processes left behind: {sorted(alive(pids))}"


# ------------------------------------------------------------------- a network namespace


def netns_unavailable() -> str | None:
    """Why a network namespace with an address of its own cannot be made here, or None if it can.

    The namespace is made with ``unshare -n`` (util-linux) and given its address with ``ip``
    (iproute2); both need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)."""
    missing = [tool for tool in ("unshare", "ip") if netns_tool(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (util-linux unshare, iproute2 ip)"
    probe = subprocess.run(
        [*netns_prefix(), "true"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    if probe.returncode != 0:
        why = " ".join((probe.stderr or probe.stdout).split()) or f"exit code {probe.returncode}"
        return f"not permitted to make a network namespace with unshare -n and ip (needs root): {why}"
    return None


def netns_tool(name: str) -> str | None:
    """The path of ``name`` on ``$PATH`` or in the sbin folders (not on a user's ``$PATH``)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path)


def netns_prefix() -> list[str]:
    """A command prefix: run what follows in a new network namespace whose loopback device is up
    with :data:`NETNS_IP` as its address, and nothing else (no route out of it)."""
    ip = netns_tool("ip") or "ip"
    setup = f'{ip} link set lo up && {ip} addr add {NETNS_IP}/32 dev lo && exec "$@"'
    return [netns_tool("unshare") or "unshare", "--net", "--", "/bin/sh", "-c", setup, "netns"]


def net_namespace(pid: int) -> str | None:
    """The network namespace of ``pid`` (``net:[inode]``), or None if it has ended."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def pids_in_namespace(namespace: str) -> set[int]:
    """The live processes whose network namespace is ``namespace``."""
    pids = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    return alive({pid for pid in pids if net_namespace(pid) == namespace})


# ------------------------------------------------------------------ a node-recording cell


def node_cell(spec: Any, **kwargs: Any) -> Any:
    """:func:`fakes.fake_cell`, after writing the id of the Ray node it runs on to
    ``$MRBENCH_TEST_NODE_RECORD/<run key>``."""
    import ray
    from fakes import fake_cell

    record = os.environ.get(NODE_RECORD_ENV)
    if record:
        Path(record, spec.run_key()).write_text(ray.get_runtime_context().get_node_id())
    return fake_cell(spec, **kwargs)


if __name__ == "__main__":
    # This process and its Ray tasks import the cell as "ray_testing:node_cell" and fakes from tests/.
    sys.path[:0] = [str(TESTS), str(HERE)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(TESTS), str(HERE), os.environ.get("PYTHONPATH")])
    )
    import typer
    from fakes import fake_resolve_spec
    from ray_testing import node_cell as cell_fn  # by its module name, not as __main__

    from mrbench.cli.app import main
    from mrbench.cli.commands.sweep import register

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def group() -> None:
        """Keeps ``sweep`` a subcommand, spelled as on the real command line."""

    register(app, cell_fn=cell_fn, resolve=fake_resolve_spec)
    main(app)
