"""mrbench.kit.children: stopping real children, and children that die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mrbench.kit.children import PACKAGE_ROOT, Forked, child_env, group_alive, process_alive, stop

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups")

REPO = str(Path(__file__).resolve().parents[2])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}


def _python(code: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=_env(), **kwargs)  # type: ignore[call-overload]


def _ready(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the child's ``ready`` line (its handlers are installed)."""
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"


def _wait_for(check: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


IGNORES = """
    import signal, sys, time
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_child_that_obeys_the_first_signal_is_reaped_at_once() -> None:
    # Python's own Ctrl-C handler, set explicitly: a Python started with SIGINT ignored (pytest run
    # in the background of a non-interactive shell, whose children inherit that) installs none.
    obeys = "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
    proc = _python(obeys + "print('ready', flush=True); time.sleep(60)", stdout=subprocess.PIPE)
    _ready(proc)
    started = time.monotonic()
    stop(proc, signal.SIGINT, grace_s=10.0)
    assert time.monotonic() - started < 3.0
    assert proc.returncode == -signal.SIGINT  # Python's own Ctrl-C ending: no SIGKILL was needed
    proc.stdout.close()  # type: ignore[union-attr]


def test_a_child_that_ignores_the_signal_gets_sigkill_after_the_grace_period() -> None:
    proc = _python(IGNORES, stdout=subprocess.PIPE)
    _ready(proc)
    started = time.monotonic()
    stop(proc, signal.SIGTERM, grace_s=0.5)
    elapsed = time.monotonic() - started
    assert proc.returncode == -signal.SIGKILL
    assert 0.4 < elapsed < 3.0
    proc.stdout.close()  # type: ignore[union-attr]


def test_several_children_share_one_grace_period() -> None:
    procs = [_python(IGNORES, stdout=subprocess.PIPE) for _ in range(3)]
    for proc in procs:
        _ready(proc)
    started = time.monotonic()
    stop(procs, signal.SIGINT, grace_s=0.5)
    assert time.monotonic() - started < 2.5  # 0.5 s in all (and 0.1 s each at least), not 0.5 s each
    for proc in procs:
        assert proc.returncode == -signal.SIGKILL
        proc.stdout.close()  # type: ignore[union-attr]


def test_no_first_signal_waits_then_kills() -> None:
    proc = _python("import sys; sys.stdin.read()", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.close()  # EOF: it ends by itself
    stop(proc, None, grace_s=10.0)
    assert proc.returncode == 0
    proc = _python(IGNORES, stdout=subprocess.PIPE)
    _ready(proc)
    stop(proc, None, grace_s=0.3)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()  # type: ignore[union-attr]


def test_a_child_gone_already_is_no_error() -> None:
    proc = _python("pass")
    proc.wait()
    stop(proc, signal.SIGINT, grace_s=1.0)
    stop(proc, signal.SIGINT, grace_s=1.0, group=True)
    assert proc.returncode == 0


GROUP = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    worker = subprocess.Popen([sys.executable, "-c", {worker!r}])
    print(worker.pid, flush=True)
    if {leader_exits}:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    time.sleep(60)
"""
WORKER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


@pytest.mark.parametrize("leader_exits", [False, True])
def test_a_group_is_stopped_whole(leader_exits: bool) -> None:
    """Its leader and a worker that ignores the signal both end; with ``whole_group`` even when the
    leader itself obeys and leaves the worker behind (as ``mrbench ui`` stops ``mlflow ui``)."""
    code = GROUP.format(worker=WORKER, leader_exits=leader_exits)
    proc = _python(code, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    worker = int(proc.stdout.readline())
    time.sleep(0.2)  # the handlers are installed
    started = time.monotonic()
    stop(proc, signal.SIGTERM, grace_s=0.5, group=True, whole_group=True)
    assert time.monotonic() - started < 3.0
    assert proc.returncode == (0 if leader_exits else -signal.SIGKILL)
    assert _wait_for(lambda: not process_alive(worker))  # reaped by init once its parent is gone
    assert _wait_for(lambda: not group_alive(proc.pid))
    proc.stdout.close()


def test_forked_pids_are_stopped_and_reaped() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setsid()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            time.sleep(60)
        finally:
            os._exit(0)
    time.sleep(0.2)
    stop([pid], signal.SIGINT, grace_s=0.3, group=True)
    with pytest.raises(ChildProcessError):  # reaped already
        os.waitpid(pid, os.WNOHANG)
    assert Forked(pid).poll() == 0  # one reaped elsewhere reads as ended


GRANDCHILD = """
import os, signal, sys, time
from mrbench.kit.children import die_with_parent
def handler(signum, frame):
    open(sys.argv[1], "w").write(str(signum))
    os._exit(0)
signal.signal(signal.SIGINT, handler)
die_with_parent(int(sys.argv[2]))
print("ready", flush=True)
time.sleep(60)
"""
DIES_WITH_PARENT = """
import os, subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1], sys.argv[2], str(os.getpid())], stdout=subprocess.PIPE
)
assert child.stdout.readline().strip() == b"ready"
print(child.pid, flush=True)
os._exit(0)  # dies without stopping its child
"""


def test_the_grandchild_gets_sigint_when_its_parent_dies(tmp_path: Path) -> None:
    marker = tmp_path / "signalled"
    parent = subprocess.Popen(
        [sys.executable, "-c", DIES_WITH_PARENT, GRANDCHILD, str(marker)],
        env=_env(),
        stdout=subprocess.PIPE,
    )
    out, _ = parent.communicate(timeout=20)
    grandchild = int(out)
    assert _wait_for(marker.exists)
    assert marker.read_text() == str(int(signal.SIGINT))
    assert _wait_for(lambda: not process_alive(grandchild))


WATCHES = """
    import signal, sys, time
    from mrbench.kit.children import die_with_parent
    signal.signal(signal.SIGTERM, {handler})
    alive = die_with_parent(int(sys.argv[1]), signal.SIGTERM, is_parent=False, every_s=0.05,
                            give_up_s=0.3, exit_code=7)
    print("ready" if alive else "gone", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize(("handler", "code"), [("lambda *a: sys.exit(3)", 3), ("signal.SIG_IGN", 7)])
def test_a_watched_process_that_is_not_the_parent(handler: str, code: int) -> None:
    """``is_parent=False`` (a rank watching its launcher): the watch polls the pid, sends the signal
    when it is gone, and exits with ``exit_code`` ``give_up_s`` later if the signal did not end it."""
    watched = _python("import time; time.sleep(60)")
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WATCHES.format(handler=handler)), str(watched.pid)],
        env=_env(),
        stdout=subprocess.PIPE,
    )
    _ready(proc)
    watched.kill()
    watched.wait()
    assert proc.wait(timeout=5) == code
    proc.stdout.close()  # type: ignore[union-attr]


def test_without_a_watch_it_says_whether_the_parent_lives() -> None:
    code = """
        import os, signal, sys
        from mrbench.kit.children import die_with_parent, parent_alive
        assert die_with_parent(os.getppid(), watch=False)
        assert not die_with_parent(os.getppid() + 100000, watch=False)
        assert parent_alive(os.getppid())
        import threading
        assert threading.active_count() == 1  # no watch thread: the process may still fork
    """
    assert _python(code).wait(timeout=20) == 0


def test_off_linux_only_the_watch_remains(monkeypatch: pytest.MonkeyPatch) -> None:
    from mrbench.kit import children

    monkeypatch.setattr(children.sys, "platform", "darwin")
    assert children.death_signal(signal.SIGINT) is False


def test_a_python_child_imports_this_mrbench_whatever_its_environment_says(tmp_path: Path) -> None:
    # No PYTHONPATH and another working folder: the child would import whichever mrbench is
    # installed (a clone's tests run against the clone, an editable install may point elsewhere).
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-c", "import mrbench; print(mrbench.__file__)"]
    out = subprocess.run(command, env=child_env(bare), cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == str(Path(PACKAGE_ROOT) / "mrbench" / "__init__.py")
    assert child_env({"PYTHONPATH": f"/a{os.pathsep}{PACKAGE_ROOT}"})["PYTHONPATH"] == os.pathsep.join(
        [PACKAGE_ROOT, "/a"]
    )  # once, first
