"""The two-node Ray cluster tests (:mod:`ray_cluster_cases`), run by pytest inside a network
namespace of their own.

Ray (2.60) binds the machine's routable address once a cluster can take a second node, and test
traffic stays on this machine. So each test here starts a second pytest on
``ray_cluster_cases.py`` under ``unshare -n``: a new network namespace with only a loopback device,
brought up with the address :data:`ray_testing.NETNS_IP` of its own, which the cluster's nodes are
given. Every process of the cluster, its drivers and their sockets are inside that namespace.

Nothing is left behind: the cases stop their Ray by its processes' ids (never ``ray stop``, which
would stop every Ray on the machine) and check that none is left; then this test kills whatever
still runs in the namespace (also when the inner run failed or timed out) and fails if there was
anything. If this pytest itself is killed (SIGKILL, where no ``finally`` runs), its reaper
(:func:`start_reaper`), a small process in a session of its own that waits on a pipe from it,
sees the pipe close and kills everything in the namespace. Needs root (``unshare`` and ``ip``);
skips, naming what is missing, without.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ray_testing import (
    NETNS_ENV,
    NETNS_IP,
    alive,
    command_line,
    net_namespace,
    netns_prefix,
    netns_unavailable,
    pids_in_namespace,
    wait_gone,
)
from sweep_testing import REPO

CASES = Path(__file__).with_name("ray_cluster_cases.py")
INNER_TIMEOUT_S = 480.0
REAPER = """
import os, signal, sys, time
namespace = sys.argv[1]
if sys.stdin.readline().strip() == "done":  # the test cleaned up itself
    sys.exit(0)
# The pipe closed without a word: the process that started this one is dead. Kill what runs in
# its namespace, a few times over (a process may be starting children as it goes).
for _ in range(5):
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == namespace:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.5)
"""


def start_reaper(namespace: str) -> subprocess.Popen[bytes]:
    """A process, in a session of its own, that kills everything in network namespace
    ``namespace`` once this process dies, however it dies; ``stop_reaper`` it when the namespace
    was cleaned up here."""
    return subprocess.Popen(
        [sys.executable, "-c", REAPER, namespace], stdin=subprocess.PIPE, start_new_session=True
    )


def stop_reaper(reaper: subprocess.Popen[bytes]) -> None:
    """Tell ``reaper`` that the namespace is cleaned up; it exits without killing anything."""
    assert reaper.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        reaper.stdin.write(b"done\n")
        reaper.stdin.close()
    reaper.wait(timeout=10)


def _run_cases_in_a_namespace(marker: str, tmp_path: Path) -> None:
    """Run the cases of ``ray_cluster_cases.py`` selected by ``marker`` (``-m``) in a new network
    namespace; fail unless they pass, or if any process is left in the namespace after them."""
    if os.environ.get(NETNS_ENV):
        pytest.skip("already inside the tests' network namespace")
    why = netns_unavailable()
    if why:
        pytest.skip(f"the two-node Ray cluster tests need a network namespace of their own: {why}")
    log_path = tmp_path / "cases.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {NETNS_ENV: NETNS_IP}
    env.pop("MRBENCH_TEST_RAY_CLUSTER", None)
    pytest_args = ["-m", marker, "-p", "no:cacheprovider", "-q", "-rs", "--basetemp", str(tmp_path / "inner")]
    command = [*netns_prefix(), sys.executable, "-m", "pytest", *pytest_args, str(CASES)]
    own = net_namespace(os.getpid())
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    namespace = None
    reaper = None
    timed_out = False
    left: dict[int, str] = {}
    try:
        # unshare enters the new namespace, then execs the shell and pytest in the same process.
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            namespace = net_namespace(proc.pid)
            if namespace is not None and namespace != own:
                break
            namespace = None
            time.sleep(0.05)
        if namespace is not None:
            reaper = start_reaper(namespace)
        try:
            proc.wait(timeout=INNER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if namespace is not None:
            # Whatever still runs there after pytest ended (Ray starts its nodes in sessions of
            # their own): a few seconds to finish exiting, then SIGKILL.
            deadline = time.monotonic() + 5
            while pids_in_namespace(namespace) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = {pid: command_line(pid) for pid in pids_in_namespace(namespace)}
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert not wait_gone(set(left), 10.0), f"cannot kill {sorted(left)} in {namespace}"
        if reaper is not None:
            stop_reaper(reaper)
    output = log_path.read_text(errors="replace")
    assert not timed_out, f"the cases did not end within {INNER_TIMEOUT_S:g} s:\n{output[-6000:]}"
    assert proc.returncode == 0, output[-6000:]
    assert " passed" in output and " skipped" not in output, output[-6000:]
    assert not left, f"processes left in the namespace after the cases: {left}\n{output[-3000:]}"


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_two_node_ray_cluster_in_a_network_namespace_of_its_own(tmp_path: Path) -> None:
    """The cluster's default cases: a sweep over both nodes, a Ray worker killed mid-cell."""
    _run_cases_in_a_namespace("not slow", tmp_path)


@pytest.mark.slow
def test_ctrl_c_on_a_two_node_ray_cluster_in_a_network_namespace_of_its_own(tmp_path: Path) -> None:
    """The cluster's slow case: Ctrl-C on a cluster sweep."""
    _run_cases_in_a_namespace("slow", tmp_path)


def test_a_killed_outer_test_leaves_nothing_in_its_namespace(tmp_path: Path) -> None:
    """What this module's test does when pytest is SIGKILLed mid-run: its reaper kills what it had
    started in the namespace (here a `sleep` standing for the inner pytest and its Ray)."""
    if os.environ.get(NETNS_ENV):
        pytest.skip("already inside the tests' network namespace")
    why = netns_unavailable()
    if why:
        pytest.skip(f"needs a network namespace of its own: {why}")
    here = Path(__file__).resolve().parent
    outer = textwrap.dedent(
        """
        import os, subprocess, sys, time
        from ray_testing import net_namespace, netns_prefix
        from test_ray_cluster import start_reaper

        own = net_namespace(os.getpid())
        sleeper = subprocess.Popen([*netns_prefix(), "sleep", "300"], start_new_session=True)
        while net_namespace(sleeper.pid) in (None, own):
            time.sleep(0.05)
        start_reaper(net_namespace(sleeper.pid))
        print(sleeper.pid, net_namespace(sleeper.pid), flush=True)
        time.sleep(300)
        """
    )
    env = {
        **os.environ,
        # test_ray_cluster imports modules of tests/ too
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(here), str(here.parent), os.environ.get("PYTHONPATH")])
        ),
    }
    proc = subprocess.Popen([sys.executable, "-c", outer], env=env, stdout=subprocess.PIPE, text=True)
    sleeper = 0
    try:
        assert proc.stdout is not None
        pid_text, namespace = proc.stdout.readline().split()
        sleeper = int(pid_text)
        assert alive({sleeper}) and pids_in_namespace(namespace)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not wait_gone({sleeper}, 10.0), "the namespace's process outlived the killed test"
        assert not pids_in_namespace(namespace)
    finally:
        proc.kill()
        if sleeper and alive({sleeper}):
            os.kill(sleeper, signal.SIGKILL)
