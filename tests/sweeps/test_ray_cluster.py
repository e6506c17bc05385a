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
anything. Needs root (``unshare`` and ``ip``); skips, naming what is missing, without.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_testing import (
    NETNS_ENV,
    NETNS_IP,
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
