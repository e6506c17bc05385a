"""The sweep's cell server (:mod:`mrbench.sweeps.cell_server`): cells forked from one process that
imported the stack once, each still isolated, signalled and stopped as a new interpreter was.

Cells are :func:`server_cells.facts_cell`, which records what it sees. Most tests preload only that
module (the stack's import takes 8–20 s and is checked once, in the slow test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from server_cells import MISCHIEF_ENV, RECORD_ENV, SECONDS_ENV, TinySpec, facts_cell

from mrbench.sweeps import cell_server
from mrbench.sweeps import server_wire as wire
from mrbench.sweeps.cell import Cell, CellContext
from mrbench.sweeps.executors.local import run_processes

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc (Linux)")

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "cell_server_driver.py"


class Quiet:
    """What the executor needs of a progress display; keeps what it was told to print."""

    def __init__(self) -> None:
        self.printed: list[str] = []
        self.console = self

    def print(self, text: str, **kwargs: Any) -> None:
        self.printed.append(text)

    def start(self, cell: Any) -> None:
        pass

    def finish(self, outcome: Any) -> None:
        pass

    def skip(self, outcome: Any) -> None:
        pass


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "record"
    folder.mkdir()
    monkeypatch.setenv(RECORD_ENV, str(folder))
    monkeypatch.delenv("MRBENCH_CELL_SERVER", raising=False)
    # A cell started without the server imports server_cells by PYTHONPATH, as from a real sweep.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    return folder


@pytest.fixture
def light(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server preloads the cell module only."""
    monkeypatch.setattr(cell_server, "preload_modules", lambda fn: ["server_cells"])


def run(record: Path, seeds: range, workers: int = 2, progress: Quiet | None = None) -> dict[int, Any]:
    ctx = CellContext("unused", "e", None, "s", facts_cell, record / "logs")
    cells = [Cell(TinySpec(seed=s)) for s in seeds]
    return {o.cell.spec.seed: o for o in run_processes(cells, ctx, workers, progress or Quiet())}


def facts(record: Path, seed: int) -> dict[str, Any]:
    return json.loads((record / f"{seed}.json").read_text())


def gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]:
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow  # the real preload: 8 s on a quiet machine, 20 s on a loaded one
def test_cells_fork_from_one_server_with_the_stack_imported_and_a_thread_alone(
    record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    outcomes = run(record, [0, 3])
    assert [o.status for o in outcomes.values()] == ["FINISHED", "FINISHED"]
    seen = [facts(record, s) for s in (0, 3)]
    assert all(f["torch_loaded"] for f in seen)  # imported before the cell started, once
    assert all(f["trainer_loaded"] and f["store_loaded"] for f in seen)  # not paid again per cell
    assert {f["ppid"] for f in seen} != {os.getpid()} and len({f["ppid"] for f in seen}) == 1
    assert all("mrbench.sweeps.cell_server" in f["parent_cmdline"] for f in seen)
    assert all(f["parent_threads"] == 1 for f in seen)  # torch, mlflow and numpy started none
    assert all(f["sid"] == f["pid"] for f in seen)  # each in a session of its own
    assert all(f["torch_threads"] == 1 and f["env"]["OMP_NUM_THREADS"] == "1" for f in seen)  # tiny: 1
    assert all(f["env"]["TOKENIZERS_PARALLELISM"] == "false" for f in seen)
    assert all(f["env"]["JE_ARROW_MALLOC_CONF"] is None for f in seen)  # the server's own setting
    assert sorted(f["env"]["CUDA_VISIBLE_DEVICES"] for f in seen) == ["0", "1"]  # a GPU per slot


def test_cells_are_children_of_the_server_and_log_to_their_files(record: Path, light: None) -> None:
    outcomes = run(record, [0, 3])
    assert [o.status for o in outcomes.values()] == ["FINISHED", "FINISHED"]
    seen = [facts(record, s) for s in (0, 3)]
    assert len({f["ppid"] for f in seen}) == 1 and seen[0]["ppid"] != os.getpid()
    assert "mrbench.sweeps.cell_server" in seen[0]["parent_cmdline"]
    logs = sorted((record / "logs").glob("*.log"))
    assert [p.name for p in logs] == [
        "grpo_tool-calling_tiny_s0-key0000.log",
        "grpo_tool-calling_tiny_s3-key0003.log",
    ]
    assert logs[0].read_text() == "cell s0 says hello\n"
    assert gone([seen[0]["ppid"]], within_s=5)  # the server ends with the sweep's cells


def test_a_cell_that_exits_or_is_killed_fails_alone(record: Path, light: None) -> None:
    # Seed 1 leaves by os._exit(3), seed 2 by SIGKILL; the cells after them still run.
    outcomes = run(record, range(5))
    # (a crash FAILED, a signal KILLED: its run resumes from its checkpoint)
    assert [outcomes[s].status for s in range(5)] == ["FINISHED", "FAILED", "KILLED", "FINISHED", "FINISHED"]
    assert "code 3" in (outcomes[1].error or "") and "code -9" in (outcomes[2].error or "")
    assert len({facts(record, s)["ppid"] for s in range(5)}) == 1  # one server throughout


def test_without_the_server_each_cell_is_a_new_interpreter(
    record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_CELL_SERVER", "0")
    outcomes = run(record, [0])
    assert outcomes[0].status == "FINISHED"
    assert facts(record, 0)["ppid"] == os.getpid() and not facts(record, 0)["torch_loaded"]


@pytest.mark.parametrize("mischief", ["die", "thread", "garbage"])
def test_a_server_that_dies_holds_a_thread_or_talks_garbage_leaves_the_cells_to_new_interpreters(
    record: Path, light: None, monkeypatch: pytest.MonkeyPatch, mischief: str
) -> None:
    monkeypatch.setenv(MISCHIEF_ENV, mischief)
    progress = Quiet()
    outcomes = run(record, [0, 3], progress=progress)
    assert [o.status for o in outcomes.values()] == ["FINISHED", "FINISHED"]
    assert {facts(record, s)["ppid"] for s in (0, 3)} == {os.getpid()}
    said = {
        "die": "exited with code 7 while importing",
        "thread": "refused to fork: the server runs 2",
        "garbage": "sent a malformed reply (reply: not a line of JSON: b'garbage')",  # not a traceback
    }[mischief]
    assert len(progress.printed) == 1 and said in progress.printed[0], progress.printed


def serve(lines: list[bytes]) -> tuple[int, list[Any], str]:
    """Run a bare server (nothing to preload) on ``lines``, then close its stdin: its exit code,
    replies and stderr."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as replies:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mrbench.sweeps.cell_server", str(os.getpid()), str(write_fd)],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)  # the server has its copy: EOF here once it exits
        _, err = proc.communicate(b"".join(lines), timeout=60)
        return proc.returncode, [wire.parse_reply(line) for line in replies], err.decode()


def test_the_server_refuses_or_skips_a_malformed_request_and_keeps_serving() -> None:
    request = {"id": 9, "payload": "/nowhere.json", "env": {"A": 1}, "cwd": "/", "log": None}
    code, replies, err = serve(
        [wire.Init((), ()).to_line(), b"garbage\n", json.dumps(request).encode() + b"\n", b'{"id": "x"}\n']
    )
    assert code == 0 and isinstance(replies[0], wire.Ready)
    assert replies[1:] == [wire.Refused(9, replies[1].why)]  # by its id; the sweep waits for that
    assert "fork request: 'env' should be an object of strings" in replies[1].why
    assert err.count("cell server: skipped a malformed request (fork request:") == 2, err


def test_a_server_given_a_malformed_init_line_exits_2_naming_the_field() -> None:
    code, replies, err = serve([b'{"preload": ["torch"], "path": "/"}\n'])
    assert (code, replies) == (2, []) and "init line: 'path' should be a list of str" in err, err


def start_driver(record: Path, seeds: str) -> subprocess.Popen[str]:
    env = {**os.environ, SECONDS_ENV: "60"}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), str(record), seeds, "2", "--light"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored as under `&`
    )


def wait_for_cells(record: Path, seeds: list[int], proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while not all((record / f"{s}.json").exists() for s in seeds):
        assert proc.poll() is None and time.monotonic() < deadline, "the cells did not start"
        time.sleep(0.05)
    time.sleep(0.2)  # inside the cell function's wait
    return [facts(record, s) for s in seeds]


def test_sigint_to_the_sweep_ends_its_running_cells_killed(record: Path) -> None:
    proc = start_driver(record, "0,3")
    try:
        seen = wait_for_cells(record, [0, 3], proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        proc.kill()
    assert {p.stem: p.read_text() for p in record.glob("*.end")} == {"0": "KILLED", "3": "KILLED"}
    assert gone([seen[0]["pid"], seen[1]["pid"], seen[0]["ppid"]], within_s=5)


def test_kill_9_of_the_sweep_takes_its_server_and_cells_along(record: Path) -> None:
    proc = start_driver(record, "0,3")
    try:
        seen = wait_for_cells(record, [0, 3], proc)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    assert gone([seen[0]["pid"], seen[1]["pid"], seen[0]["ppid"]], within_s=5)
    # Each ended its run: SIGINT from the dying server, not a SIGKILL.
    assert {p.stem: p.read_text() for p in record.glob("*.end")} == {"0": "KILLED", "3": "KILLED"}
