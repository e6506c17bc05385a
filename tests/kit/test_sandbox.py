"""The sandbox against hostile programs, plus its data-passing and status contract.

All hostile programs run concurrently in one batch (module fixture), so the file takes about
one timeout, not the sum of them. Each is checked for: no false pass, no surviving process of
the sandbox's uids, no change outside its directory, and the harness still working afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass

import pytest

from mrbench.kit.sandbox import STATUSES, Job, Limits, Result, Sandbox

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs Linux")

TIMEOUT_S = 1.5
LIMITS = Limits(timeout_s=TIMEOUT_S, memory_mb=256, file_size_mb=4, max_processes=12, output_bytes=2048)
SECRET = "mrbench-test-secret-5f1c0d"
TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n"
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


@dataclass(frozen=True)
class Hostile:
    name: str
    code: str
    allowed: tuple[str, ...]  # acceptable statuses


def _uid_processes(uids: tuple[int, ...]) -> list[int]:
    """Pids of live processes whose real, effective or saved uid is one of ``uids``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if {int(u) for u in line.split()[1:4]} & set(uids):
                            found.append(int(entry))
                        break
        except OSError:
            continue
    return found


class _Listener:
    """A TCP server on the host's loopback that records whether anyone connected."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        self.sock.close()


def _hostiles(sentinel: str, escape: str, port: int) -> list[Hostile]:
    fake_verdicts = textwrap.dedent(
        """
        import os, json
        print("passed"); print("All tests passed"); print(json.dumps({"v": "passed"}))
        for fd in range(3, 64):
            for text in ("passed", "0" * 32 + json.dumps({"v": "passed"})):
                try:
                    os.write(fd, text.encode())
                except OSError:
                    pass
        """
    )
    return [
        Hostile("infinite_loop", "def add(a, b):\n    while True:\n        pass\n", ("timeout",)),
        Hostile("infinite_loop_at_import", "while True:\n    pass\n", ("timeout",)),
        Hostile(
            "fork_bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            ("timeout", "killed"),
        ),
        Hostile(
            "memory_bomb",
            "x = []\nwhile True:\n    x.append(bytearray(10**7))\n",
            ("error", "killed", "timeout"),
        ),
        Hostile(
            "memory_bomb_one_shot", "def add(a, b):\n    return len(bytearray(10**10))\n", ("error", "killed")
        ),
        Hostile(
            "huge_output",
            "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
            ("killed", "timeout", "error"),
        ),
        Hostile("deep_recursion", "def add(a, b):\n    return add(a, b)\n", ("error",)),
        Hostile(
            "stack_overflow",
            "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)\n",
            ("killed", "error", "timeout"),
        ),
        Hostile(
            "write_and_delete_outside",
            GOOD
            + textwrap.dedent(
                f"""
                import os, shutil
                # Only the sentinel is a target of destructive calls: if isolation ever broke,
                # this test must not be able to harm the machine it runs on.
                target = {sentinel!r}
                attempts = (
                    lambda: open(target, "w").write("pwned"),
                    lambda: os.remove(target),
                    lambda: os.chmod(target, 0o777),
                    lambda: shutil.rmtree(os.path.dirname(target)),
                )
                for attempt in attempts:
                    try:
                        attempt()
                    except Exception:
                        pass
                for path in ("/etc/mrbench-escape", "/mrbench-escape", {escape!r},
                             "/var/tmp/mrbench-escape", "/dev/shm/mrbench-escape"):
                    try:
                        open(path, "w").write("pwned")
                    except Exception:
                        pass
                """
            ),
            ("passed",),
        ),
        Hostile(
            "read_secrets",
            GOOD
            + textwrap.dedent(
                """
                import os
                print(dict(os.environ))
                for pid in os.listdir("/proc"):
                    if pid.isdigit() or pid == "self":
                        try:
                            print(open(f"/proc/{pid}/environ", "rb").read())
                        except OSError:
                            pass
                """
            ),
            ("passed",),
        ),
        Hostile(
            "network",
            GOOD
            + textwrap.dedent(
                f"""
                import socket
                for address in (("127.0.0.1", {port}), ("8.8.8.8", 53), ("1.1.1.1", 443)):
                    try:
                        socket.create_connection(address, timeout=0.3).close()
                        print("CONNECTED", address)
                    except OSError as exc:
                        print("blocked", address, exc)
                """
            ),
            ("passed",),
        ),
        Hostile(
            "kill_parent_and_everyone",
            GOOD
            + textwrap.dedent(
                """
                import os, signal
                for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
                    for target in (os.getppid(), 1):
                        try:
                            os.kill(target, sig)
                        except OSError:
                            pass
                for pid in os.listdir("/proc"):
                    if pid.isdigit() and int(pid) != os.getpid():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
                """
            ),
            ("passed",),
        ),
        Hostile(
            "ignore_sigterm",
            "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
            ("timeout",),
        ),
        Hostile(
            "daemon_children",
            GOOD
            + textwrap.dedent(
                """
                import os, time
                for _ in range(3):
                    if os.fork() == 0:
                        os.setsid()
                        if os.fork() == 0:
                            time.sleep(1000)
                        os._exit(0)
                """
            ),
            ("passed",),
        ),
        Hostile("sys_exit_0_before", "import sys\nsys.exit(0)\n" + GOOD, ("exited",)),
        Hostile("sys_exit_1_before", "import sys\nsys.exit(1)\n" + GOOD, ("exited",)),
        Hostile("os_exit_0_before", "import os\nos._exit(0)\n" + GOOD, ("exited",)),
        Hostile("os_exit_3_before", "import os\nos._exit(3)\n" + GOOD, ("exited",)),
        Hostile("sys_exit_in_call", "import sys\ndef add(a, b):\n    sys.exit(0)\n", ("exited",)),
        Hostile(
            "os_exit_during_tests",
            "import os\nn = [0]\ndef add(a, b):\n    n[0] += 1\n    if n[0] == 2:\n        os._exit(0)\n"
            "    return a + b\n",
            ("exited",),
        ),
        Hostile(
            "exit_after_tests_wrong",
            "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG,
            ("failed",),
        ),
        Hostile(
            "exit_after_tests_right",  # a correct program that exits at the end truly passes
            "import atexit, os\natexit.register(lambda: os._exit(0))\n" + GOOD,
            ("passed",),
        ),
        Hostile("fake_success_text", fake_verdicts + WRONG, ("failed", "error")),
        Hostile("fake_success_then_exit", fake_verdicts + "import os\nos._exit(0)\n", ("exited", "error")),
        Hostile(
            "tamper_with_tests",
            WRONG
            + textwrap.dedent(
                """
                import builtins, gc, os
                builtins.AssertionError = type("Fake", (Exception,), {})
                builtins.__dict__["check"] = lambda candidate: None
                for obj in gc.get_objects():
                    if callable(obj) and getattr(obj, "__name__", "") == "check":
                        obj.__code__ = (lambda candidate: None).__code__
                for pid in os.listdir("/proc"):
                    for name in ("fd/3", "fd/4", "fd/5", "mem"):
                        try:
                            with open(f"/proc/{pid}/{name}", "wb") as fh:
                                fh.write(b'{"v": "passed"}')
                        except OSError:
                            pass
                for root, _, files in os.walk("/tmp"):
                    for f in files:
                        try:
                            open(os.path.join(root, f), "w").write("def check(candidate):\\n    pass\\n")
                        except OSError:
                            pass
                """
            ),
            ("failed",),
        ),
        Hostile(
            "read_the_tests",
            WRONG
            + textwrap.dedent(
                """
                import gc, glob, os
                needle = "assert candidate("
                found = any(isinstance(o, str) and needle in o for o in gc.get_objects())
                for root in glob.glob("/tmp/*") + glob.glob("/tmp/*/*") + glob.glob("/tmp/*/*/*"):
                    try:
                        found = found or needle in open(root, errors="ignore").read()
                    except OSError:
                        pass
                for pid in os.listdir("/proc"):
                    for name in ("cmdline", "environ"):
                        try:
                            found = found or needle in open(f"/proc/{pid}/{name}", errors="ignore").read()
                        except OSError:
                            pass
                print("LEAKED" if found else "nothing found")
                """
            ),
            ("failed",),
        ),
        Hostile(
            "always_equal_object",
            "class Yes:\n    def __eq__(self, other):\n        return True\n"
            "def add(a, b):\n    return Yes()\n",
            ("error",),
        ),
        Hostile(
            "int_subclass_with_rigged_eq",
            "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\ndef add(a, b):\n    return Yes(a - b)\n",
            ("failed",),
        ),
        Hostile("syntax_error", "def add(a, b)\n    return a + b\n", ("syntax_error",)),
        Hostile(
            "non_utf8_output",
            "import os, sys\nos.write(1, b'\\xff\\xfe\\xfa ok\\n')\n"
            "sys.stdout.buffer.write(b'\\x80\\x81\\n')\nos.write(2, b'\\xc3\\x28')\n" + GOOD,
            ("passed",),
        ),
        Hostile("stdin_read", "import sys\ndata = sys.stdin.read()\nassert data == ''\n" + GOOD, ("passed",)),
        Hostile("wrong_answer", WRONG, ("failed",)),
        Hostile("right_answer", GOOD, ("passed",)),
    ] + [
        Hostile(f"leak_{i}", "import os\nos.makedirs('/tmp/leak', exist_ok=True)\n" + GOOD, ("passed",))
        for i in range(2)
    ]


@pytest.fixture(scope="module")
def batch():
    """Run every hostile program once, concurrently; yield what the tests inspect."""
    os.environ["MRBENCH_TEST_SECRET"] = SECRET  # before the zygotes start: they must not inherit it
    sentinel_dir = tempfile.mkdtemp(prefix="mrbench-sentinel-", dir=os.path.expanduser("~"))
    os.chmod(sentinel_dir, 0o777)
    sentinel = os.path.join(sentinel_dir, "keep.txt")
    with open(sentinel, "w") as fh:
        fh.write("original")
    escape = f"/tmp/mrbench-escape-{os.getpid()}"
    listener = _Listener()
    sandbox = Sandbox(LIMITS, workers=max(4, os.cpu_count() or 1))
    try:
        hostiles = _hostiles(sentinel, escape, listener.port)
        jobs = [Job(h.code, TESTS, "add") for h in hostiles]
        started = time.monotonic()
        results = sandbox.run_many(jobs)
        elapsed = time.monotonic() - started
        after = Job(
            "import os\nprint(sorted(os.listdir('/tmp')), os.path.exists('/tmp/leak'))\n" + GOOD, TESTS, "add"
        )
        yield {
            "hostiles": hostiles,
            "results": dict(zip([h.name for h in hostiles], results, strict=True)),
            "elapsed": elapsed,
            "uids": sandbox.uids(),
            "sentinel": sentinel,
            "escape": escape,
            "listener": listener,
            "after": sandbox.run(after),
            "isolation": sandbox.isolation(),
        }
    finally:
        sandbox.close()
        listener.close()
        os.environ.pop("MRBENCH_TEST_SECRET", None)
        os.remove(sentinel)
        os.rmdir(sentinel_dir)


_NAMES = [h.name for h in _hostiles("/x", "/tmp/x", 1)]


@pytest.mark.parametrize("name", _NAMES)
def test_hostile_program_cannot_fake_success(batch, name):
    hostile = next(h for h in batch["hostiles"] if h.name == name)
    result: Result = batch["results"][name]
    assert result.status in hostile.allowed, (result.status, result.detail, result.stderr[-500:])
    assert result.status in STATUSES
    assert result.passed == (result.status == "passed")
    assert len(result.stdout.encode()) <= 3 * LIMITS.output_bytes  # tail only (replacement chars ≤ 3 bytes)


def test_no_process_survives_and_time_is_bounded(batch):
    if os.geteuid() == 0:
        assert batch["uids"], "running as root, the sandbox should hold dedicated uids"
        assert _uid_processes(batch["uids"]) == []
    # Everything ran concurrently: the batch takes a few timeouts at most, not the sum of them.
    assert batch["elapsed"] < 4 * TIMEOUT_S + 5


def test_no_file_outside_the_working_directory_changed(batch):
    with open(batch["sentinel"]) as fh:
        assert fh.read() == "original"
    for path in ("/etc/mrbench-escape", "/mrbench-escape", batch["escape"], "/var/tmp/mrbench-escape"):
        assert not os.path.exists(path), path
    if batch["uids"]:
        owned = [e.path for e in os.scandir("/tmp") if e.stat(follow_symlinks=False).st_uid in batch["uids"]]
        assert owned == []
    if batch["isolation"]["filesystem_isolated"]:
        # The private /tmp is emptied between runs: nothing leaks from one program to the next.
        assert "False" in batch["after"].stdout and "leak" not in batch["after"].stdout


def test_harness_keeps_running_after_hostile_programs(batch):
    assert batch["after"].status == "passed"


def test_the_tests_never_reach_the_program(batch):
    assert "nothing found" in batch["results"]["read_the_tests"].stdout


def test_secrets_do_not_reach_the_program(batch):
    result = batch["results"]["read_secrets"]
    assert "MRBENCH_TEST_SECRET" not in result.stdout and SECRET not in result.stdout
    assert SECRET not in result.stderr


def test_network_is_blocked_when_isolated(batch):
    result = batch["results"]["network"]
    assert result.network_isolated == batch["isolation"]["network_isolated"]
    if result.network_isolated:
        assert "CONNECTED" not in result.stdout
        assert batch["listener"].connections == 0


def test_limits_are_reported(batch):
    results = batch["results"]
    assert results["huge_output"].status != "passed"
    assert "fault" not in results["non_utf8_output"].stdout  # decoded leniently, not crashed
    assert "\ufffd" in results["non_utf8_output"].stdout
    assert results["os_exit_3_before"].detail.endswith("code 3 before the tests finished")
    if os.geteuid() == 0:
        assert results["right_answer"].user_isolated


# --------------------------------------------------------------------------------------------
# Data passing and the status contract (one small sandbox, sequential runs)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(Limits(timeout_s=3), workers=2) as sb:
        yield sb


def test_values_cross_the_boundary_as_data(sandbox):
    code = textwrap.dedent(
        """
        def f(xs, *, key=None):
            return {"list": xs, "tuple": tuple(xs), "set": set(xs), "frozen": frozenset(xs),
                    "bytes": bytes(xs), "nested": [(1, 2.5, None, True)], "key": key,
                    "complex": 1 + 2j, "inf": float("inf"), "big": 10 ** 5000, "range": range(3)}
        def g():
            return (i * i for i in range(4))
        """
    )
    tests = textwrap.dedent(
        """
        import math
        def check(candidate):
            out = candidate([1, 2, 3], key={"a": (1, 2)})
            assert out["list"] == [1, 2, 3] and out["tuple"] == (1, 2, 3)
            assert out["set"] == {1, 2, 3} and type(out["frozen"]) is frozenset
            assert out["bytes"] == b"\\x01\\x02\\x03" and out["nested"] == [(1, 2.5, None, True)]
            assert out["key"] == {"a": (1, 2)} and out["complex"] == 1 + 2j
            assert math.isinf(out["inf"]) and out["big"] == 10 ** 5000 and out["range"] == range(3)
            assert list(g()) == [0, 1, 4, 9]
        """
    )
    result = sandbox.run(Job(code, tests, "f", names=("g",)))
    assert result.status == "passed", result.detail
    assert result.n_calls == 2 and result.test_time_s is not None and result.test_time_s >= 0


def test_work_counts_the_candidates_own_lines_the_same_in_every_run(sandbox):
    code = textwrap.dedent(
        """
        import heapq
        def f(xs):
            def twice(v):
                return 2 * v
            out = [twice(x) for x in xs]
            return heapq.nsmallest(2, out)
        """
    )
    tests = "def check(candidate):\n    assert candidate([3, 1, 2]) == [2, 4]\n"
    first = sandbox.run(Job(code, tests, "f"))
    assert first.status == "passed", first.detail
    # f: 3 lines; the comprehension: its line on entry and once per element (4); twice: 1 per
    # call (3); heapq's pure-Python code is the standard library's work: not counted.
    assert first.work == 3 + 4 + 3
    with Sandbox(Limits(timeout_s=3), workers=1) as other:
        assert other.run(Job(code, tests, "f")).work == first.work


def test_the_hash_seed_is_fixed_so_set_order_is_the_same_in_every_sandbox(sandbox):
    code = "def f():\n    return [hash('mrbench'), list({'ab', 'cd', 'ef', 'gh'})]\n"
    tests = "def check(candidate):\n    global SEEN\n    SEEN = candidate()\n    assert SEEN[0] == {}\n"
    with Sandbox(Limits(timeout_s=3), workers=1) as other:
        for sb in (sandbox, other):
            result = sb.run(Job(code, tests.format(_hash_with_seed_0("mrbench")), "f"))
            assert result.status == "passed", result.detail


def _hash_with_seed_0(text: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", f"print(hash({text!r}))"],
        env={"PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def test_prelude_classes_and_expression_entry_points(sandbox):
    prelude = (
        "class ListNode:\n"
        "    def __init__(self, val=0, next=None):\n"
        "        self.val, self.next = val, next\n"
    )
    code = textwrap.dedent(
        """
        class Solution:
            def reverse(self, head):
                prev = None
                while head:
                    head.next, prev, head = prev, head, head.next
                return prev
        """
    )
    tests = textwrap.dedent(
        """
        def build(xs):
            head = None
            for x in reversed(xs):
                head = ListNode(x, head)
            return head
        def values(node):
            out = []
            while node:
                out.append(node.val)
                node = node.next
            return out
        def check(candidate):
            assert values(candidate(head=build([1, 2, 3]))) == [3, 2, 1]
            assert candidate(build([])) is None
        """
    )
    result = sandbox.run(Job(code, tests, "Solution().reverse", prelude=prelude))
    assert result.status == "passed", result.detail


def test_expected_exceptions_and_candidate_errors(sandbox):
    tests = textwrap.dedent(
        """
        def check(candidate):
            try:
                candidate(-1)
            except ValueError:
                pass
            else:
                raise AssertionError("expected ValueError")
            assert candidate(4) == 2
        """
    )
    good = "def root(x):\n    if x < 0:\n        raise ValueError('negative')\n    return int(x ** 0.5)\n"
    assert sandbox.run(Job(good, tests, "root")).status == "passed"
    # An AssertionError raised *by the program* is an error, not a failed test.
    asserting = "def root(x):\n    assert x > 100\n"
    result = sandbox.run(Job(asserting, tests, "root"))
    assert result.status == "error" and not result.ran
    # An exception the program causes inside the tests (None - 1) is an error too.
    tests_arith = "def check(candidate):\n    assert candidate(4) - 2 == 0\n"
    assert sandbox.run(Job("def root(x):\n    return None\n", tests_arith, "root")).status == "error"


def test_mbpp_style_tests_call_names_directly(sandbox):
    tests = "assert square(3) == 9\nassert square(-2) == 4\n"
    result = sandbox.run(Job("def square(x):\n    return x * x\n", tests, names=("square",), check="pass"))
    assert result.status == "passed", result.detail
    result = sandbox.run(Job("def square(x):\n    return x + x\n", tests, names=("square",), check="pass"))
    assert result.status == "failed"


def test_missing_entry_point_and_tests_that_never_call(sandbox):
    assert sandbox.run(Job("def other(a, b):\n    return a + b\n", TESTS, "add")).status == "error"
    result = sandbox.run(Job(GOOD, "def check(candidate):\n    pass\n", "add"))
    assert result.status == "sandbox_error" and "never called" in result.detail


def test_results_come_back_in_order(sandbox):
    jobs = [Job(GOOD if i % 3 else WRONG, TESTS, "add") for i in range(12)]
    statuses = [r.status for r in sandbox.run_many(jobs)]
    assert statuses == ["failed" if i % 3 == 0 else "passed" for i in range(12)]


def test_closing_leaves_no_process_behind():
    sandbox = Sandbox(Limits(timeout_s=1), workers=1)
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\n" + GOOD
    assert sandbox.run(Job(daemon, TESTS, "add")).status == "passed"
    uids = sandbox.uids("all")
    if os.geteuid() == 0:
        assert len(uids) == 3 and _uid_processes(sandbox.uids("candidate")) == []
        assert len(_uid_processes(sandbox.uids("tester"))) == 1  # the persistent tester
    sandbox.close()
    assert _uid_processes(uids) == []


def test_a_dead_worker_is_replaced():
    import signal

    with Sandbox(Limits(timeout_s=2), workers=1) as sandbox:
        assert sandbox.run(Job(GOOD, TESTS, "add")).status == "passed"
        (zygote,) = sandbox._all
        os.kill(zygote.proc.pid, signal.SIGKILL)
        zygote.proc.wait()
        first = sandbox.run(Job(GOOD, TESTS, "add"))
        assert first.status == "sandbox_error" and "worker failed" in first.detail
        assert sandbox.run(Job(GOOD, TESTS, "add")).status == "passed"  # a fresh zygote took over


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="workers"):
        Sandbox(workers=0)
    with pytest.raises(ValueError, match="entry_point"):
        Sandbox().run(Job(GOOD, TESTS))
    assert Limits().memory_mb == 1024 and Limits().timeout_s == 5.0  # the paper's settings
