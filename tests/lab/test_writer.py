"""The lab's MLflow writer process: the same runs as logging in-process, the store's errors as the
same user errors, an unexpected failure with the child's traceback, runs left open end KILLED, a
script without a ``__main__`` guard and a daemonic caller served alike."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.lab.metrics import summarise
from mrbench.lab.presets import get_scenario
from mrbench.lab.scenarios import with_settings
from mrbench.lab.simulate import simulate
from mrbench.lab.writer import LabWriter, LabWriterError
from mrbench.store.client import StoreFault


@pytest.fixture(scope="module")
def simulated():
    scenario = with_settings(get_scenario("anti"), steps=4, group_size=4)
    result = simulate(scenario, ["grpo", "gdpo"], range(2))
    summaries = summarise({m: run.scores for m, run in result.runs.items()}, reference="grpo", reps=50)
    return result, summaries


def _report(tmp_path: Path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "summary.md").write_text("# a report\n")
    return folder


def _runs(uri: str, experiment: str) -> dict[str, tuple[str, str | None]]:
    """run name -> (status, parent run id tag)."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return {
        r.info.run_name: (r.info.status, r.data.tags.get(layout.PARENT_RUN_TAG))
        for r in client.search_runs([exp.experiment_id])
    }


@pytest.mark.parametrize(
    "daemonic",
    [pytest.param(False, id="plain"), pytest.param(True, id="in a daemonic process", marks=pytest.mark.slow)],
)
def test_the_writer_logs_the_parent_its_children_and_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, simulated, daemonic: bool
) -> None:
    result, summaries = simulated
    if daemonic:  # which may not start multiprocessing children (a pool worker, say)
        monkeypatch.setitem(multiprocessing.current_process()._config, "daemon", True)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with LabWriter(uri) as writer:
        writer.wait_ready()
        writer.open(result, summaries, "mrbench simulate --scenario anti")
        logged = writer.close(result, _report(tmp_path))
    runs = _runs(uri, "lab-anti")
    assert runs == {
        "lab anti": ("FINISHED", None),
        "grpo": ("FINISHED", logged.parent_run_id),
        "gdpo": ("FINISHED", logged.parent_run_id),
    }
    client = MlflowClient(tracking_uri=uri)
    artifacts = {a.path for a in client.list_artifacts(logged.parent_run_id, layout.REPORT_DIR)}
    assert artifacts == {f"{layout.REPORT_DIR}/summary.md"}
    assert client.get_metric_history(logged.child_run_ids["gdpo"], layout.REWARD)


def test_a_run_left_open_ends_killed(tmp_path: Path, simulated) -> None:
    result, summaries = simulated
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with LabWriter(uri) as writer:
        writer.open(result, summaries, "mrbench simulate --scenario anti")
        # The command stops here (an error while drawing the figures, Ctrl-C): no close.
    runs = _runs(uri, "lab-anti")
    assert runs["lab anti"] == ("KILLED", None)
    assert {runs["grpo"][0], runs["gdpo"][0]} == {"FINISHED"}


def test_a_damaged_store_is_the_same_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not a database at all" * 100)
    with LabWriter(f"sqlite:///{db}") as writer, pytest.raises(StoreFault) as info:
        writer.wait_ready()
    assert str(db) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, UserError)


def test_an_unexpected_failure_carries_the_childs_traceback(tmp_path: Path, simulated) -> None:
    result, _ = simulated
    with LabWriter(f"sqlite:///{tmp_path / 'mlflow.db'}") as writer:
        writer.open(result, {"grpo": "not a summary"}, "mrbench simulate")  # returns at once
        with pytest.raises(LabWriterError, match="lab tracking writer: ") as info:
            writer.close(result, None)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "in the writer process" in notes and "open_lab_run" in notes


@pytest.mark.slow
def test_a_script_without_a_main_guard_can_run_the_lab(tmp_path: Path) -> None:
    # A multiprocessing child would re-import this script and fail ("bootstrapping phase").
    script = tmp_path / "my_lab.py"
    script.write_text(
        "from mrbench.lab.presets import get_scenario\n"
        "from mrbench.lab.runner import run_lab\n"
        "from mrbench.lab.scenarios import with_settings\n"
        "scenario = with_settings(get_scenario('anti'), steps=3, group_size=4)\n"
        "outcome = run_lab(scenario, methods=['grpo'], seeds=2, out=None, tracking_uri=None, command='x')\n"
        "print('parent', outcome.logged.parent_run_id)\n"
    )
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("parent ") == 1
    runs = _runs(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}", "lab-anti")
    assert (
        runs["lab anti"][0] == "FINISHED" and (tmp_path / "reports" / "lab" / "anti" / "summary.md").is_file()
    )


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
@pytest.mark.parametrize(
    ("sig", "group", "code"),
    [
        (signal.SIGINT, False, 130),
        (signal.SIGKILL, False, -signal.SIGKILL),
        # Ctrl-C in a terminal, a cluster's stop (SLURM, Kubernetes) to the whole job and a closed
        # terminal reach the whole group: the slow stage runs those.
        pytest.param(signal.SIGINT, True, 130, id="SIGINT to the group", marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, True, 143, id="SIGTERM to the group", marks=pytest.mark.slow),
        pytest.param(signal.SIGHUP, True, 129, id="SIGHUP to the group", marks=pytest.mark.slow),
    ],
    ids=["SIGINT", "SIGKILL", "SIGINT to the group", "SIGTERM to the group", "SIGHUP to the group"],
)
def test_a_stopped_simulate_leaves_no_writer_behind(
    tmp_path: Path, sig: signal.Signals, group: bool, code: int
) -> None:
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")}
    argv = [sys.executable, "-m", "mrbench", "simulate", "--scenario", "scale", "--seeds", "2000"]
    # The command must see Ctrl-C as a terminal gives it: a SIGINT ignored in this test process (the
    # disposition a child inherits, and which mrbench then keeps ignoring, as under nohup) would make
    # the test wait on a command that rightly ignores it. Seen twice in full default runs, never alone.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # handled: not inherited
    try:
        out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, start_new_session=True, **out)
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        deadline = time.monotonic() + 60
        while not (writers := _children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writers, "the writer process never started"
        time.sleep(1.0)  # inside the simulation
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        assert proc.wait(timeout=60) == code, f"SIGINT in the test process: {inherited}"
    finally:
        proc.kill()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{w}").exists() and "zombie" not in _state(w) for w in writers):
        assert time.monotonic() < deadline, "the writer outlived the command"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


@pytest.mark.slow
def test_creating_the_store_prints_no_mlflow_info_lines(tmp_path: Path) -> None:
    # An empty cache: the writer makes the empty store, and MLflow logs its migrations at INFO.
    env = {
        **os.environ,
        "MRBENCH_RESULTS": str(tmp_path / "results"),
        "MRBENCH_CACHE": str(tmp_path / "cache"),
    }
    argv = [sys.executable, "-m", "mrbench", "simulate", "--scenario", "anti", "--seeds", "2", "--steps", "3"]
    done = subprocess.run([*argv, "--methods", "grpo"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list((tmp_path / "cache").glob("mlflow-*-empty.db"))
    assert "INFO" not in done.stdout + done.stderr, done.stderr
