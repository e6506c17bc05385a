"""Sweeps: grid and run keys, resume from a real MLflow store, interrupts (Ctrl-C, SIGKILL), executors.

Cells are run by :func:`fakes.fake_cell`, which writes real MLflow runs in the layout of
``run_cell`` in milliseconds; everything else (store, resume logic, processes) is real.
"""

from __future__ import annotations

import _thread
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import fake_cell, fake_resolve_spec
from mlflow.tracking import MlflowClient
from rich.console import Console
from sweep_testing import (
    HOST,
    PID,
    REPO,
    ROLE,
    RUN_KEY,
    SWEEP,
    assert_exactly_once_finished,
    child_statuses,
    cli_sweep,
    parent_runs,
    quiet,
    small,
    sweep,
    wait_for,
)

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.engine.config import resolve_spec
from mrbench.sweeps.cell import Cell, CellContext, callable_path
from mrbench.sweeps.cell_process import cell_payload
from mrbench.sweeps.grid import expand_grid, print_grid
from mrbench.sweeps.orchestrator import run_sweep


def default_sigint() -> None:
    """Give SIGINT its default disposition (Python turns it into KeyboardInterrupt).

    A shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored, so under `.ci/run &` or nohup neither Ctrl-C nor `_thread.interrupt_main` would
    reach the code under test. Used as `preexec_fn` for child processes and directly in-process.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sigint_enabled() -> Iterator[None]:
    """In-process: make SIGINT raise KeyboardInterrupt for the duration of a test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# ------------------------------------------------------------------------------------------ grid


def test_grid_uses_the_real_resolver_and_its_run_keys() -> None:
    spec = small("grid", methods=("grpo", "corrgrpo"))
    grid = expand_grid(spec)  # the default resolver: mrbench.engine.config.resolve_spec
    assert [c.label for c in grid.cells] == [
        "grpo|tool-calling|tiny|s0",
        "corrgrpo|tool-calling|tiny|s0",
        "grpo|tool-calling|tiny|s1",
        "corrgrpo|tool-calling|tiny|s1",
    ]
    expected = resolve_spec("corrgrpo", "tool-calling", "tiny", 1, train={"steps": 3}).run_key()
    assert grid.cells[3].key == expected
    assert len({c.key for c in grid.cells}) == 4 and grid.unavailable == {}


def test_unknown_names_fail_before_anything_runs() -> None:
    with pytest.raises(UserError, match=r"corgrpo\|tool-calling\|tiny\|s0.*Did you mean 'corrgrpo'"):
        expand_grid(small("bad", methods=("grpo", "corgrpo")))
    with pytest.raises(UserError, match="unknown model 'tiny-xl'"):
        expand_grid(small("bad", models=("tiny-xl",)))
    with pytest.raises(UserError, match="unknown train setting 'stepz'"):
        expand_grid(small("bad", train={"stepz": 3}))


def test_unbuilt_task_is_reported_unavailable_not_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRBENCH_FAKE_UNAVAILABLE", "code-generation")
    spec = small("unavail", tasks=("code-generation", "tool-calling"), seeds=(0,))
    grid = expand_grid(spec, fake_resolve_spec)
    assert {c.spec.task for c in grid.cells} == {"tool-calling"}
    assert "No module named" in grid.unavailable["code-generation"]
    console = Console(file=io.StringIO(), width=200)
    print_grid(console, grid)
    text = console.file.getvalue()
    assert "'code-generation' is unavailable" in text
    assert all(c.key in text for c in grid.cells)


def test_cells_resolving_to_one_run_key_are_refused() -> None:
    spec = small("dup", seeds=(0,))

    def same(*args: Any, **kwargs: Any) -> Any:
        return fake_resolve_spec("grpo", "tool-calling", "tiny", 0)

    with pytest.raises(UserError, match="same run key"):
        expand_grid(spec, same)


def test_dry_run_prints_the_grid_and_touches_no_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'never.db'}"
    console = Console(file=io.StringIO(), width=200)
    calls: list[Any] = []
    outcome = run_sweep(
        small("dry"),
        tracking_uri=uri,
        dry_run=True,
        resolve=fake_resolve_spec,
        cell_fn=lambda *a, **k: calls.append(a),
        console=console,
    )
    text = console.file.getvalue()
    assert all(c.key in text for c in outcome.grid.cells) and "dry run: 4 cells" in text
    assert calls == [] and not (tmp_path / "never.db").exists()


def test_real_cli_dry_run_lists_the_real_cells(tmp_path: Path) -> None:
    # The product command line, with its default resolver (the fake driver covers running cells).
    argv = ["--methods", "grpo,gdpo", "--tasks", "tool-calling", "--models", "tiny", "--seeds", "0"]
    db = tmp_path / "never.db"
    proc = subprocess.run(
        [sys.executable, "-m", "mrbench", "sweep", "--dry-run", *argv, "--tracking-uri", f"sqlite:///{db}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    key = resolve_spec("gdpo", "tool-calling", "tiny", 0).run_key()
    assert "dry run: 2 cells" in proc.stdout and key in proc.stdout and not db.exists()


# ---------------------------------------------------------------------------------------- resume


def test_sweep_runs_every_cell_once_and_a_rerun_skips_all(store: str) -> None:
    first = sweep(small("full"), store)
    keys = [c.key for c in first.grid.cells]
    assert first.exit_code == 0 and [o.status for o in first.outcomes] == ["FINISHED"] * 4
    assert_exactly_once_finished(store, "full", keys)
    parent = parent_runs(store, "full")[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[SWEEP] == "full" and parent.data.params["methods"] == "grpo,gdpo"
    assert parent.data.tags[layout.tag(layout.VERSION + "mlflow")]

    t0 = time.perf_counter()
    again = sweep(small("full"), store)
    assert time.perf_counter() - t0 < 15
    assert again.outcomes == [] and len(again.skipped) == 4 and again.exit_code == 0
    assert_exactly_once_finished(store, "full", keys)


def test_failed_cell_is_rerun_and_others_are_not(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRBENCH_FAKE_CELL_FAIL", "gdpo|*|s1")
    first = sweep(small("fail"), store)
    assert first.exit_code == 1
    failed = [o for o in first.outcomes if o.status == "FAILED"]
    assert [o.cell.label for o in failed] == ["gdpo|tool-calling|tiny|s1"]
    assert "scripted failure" in (failed[0].error or "")
    assert parent_runs(store, "fail")[0].info.status == "FAILED"
    monkeypatch.delenv("MRBENCH_FAKE_CELL_FAIL")
    second = sweep(small("fail"), store)
    assert [o.cell.label for o in second.outcomes] == ["gdpo|tool-calling|tiny|s1"]
    assert second.exit_code == 0
    assert_exactly_once_finished(store, "fail", [c.key for c in first.grid.cells])
    assert child_statuses(store, "fail")[failed[0].cell.key] == ["FAILED", "FINISHED"]


def test_stale_running_and_killed_runs_are_marked_and_rerun(store: str) -> None:
    spec = small("stale")
    cells = expand_grid(spec, fake_resolve_spec).cells
    client = MlflowClient(tracking_uri=store)
    from mrbench.store.client import ensure_experiment

    experiment_id = ensure_experiment("stale", store)
    # What a kill -9 leaves behind: a parent and a child still RUNNING (their process is gone),
    # plus a child an earlier Ctrl-C ended KILLED.
    dead_parent = client.create_run(
        experiment_id,
        tags={ROLE: layout.ROLE_SWEEP, SWEEP: "stale", HOST: "elsewhere", PID: "1"},
    )
    client.create_run(
        experiment_id, tags={RUN_KEY: cells[0].key, layout.PARENT_RUN_TAG: dead_parent.info.run_id}
    )
    killed = client.create_run(experiment_id, tags={RUN_KEY: cells[1].key})
    client.set_terminated(killed.info.run_id, "KILLED")

    outcome = sweep(spec, store)
    assert outcome.stale_killed == 2 and outcome.exit_code == 0
    assert len(outcome.outcomes) == 4
    assert_exactly_once_finished(store, "stale", [c.key for c in cells])
    assert child_statuses(store, "stale")[cells[0].key] == ["KILLED", "FINISHED"]
    assert client.get_run(dead_parent.info.run_id).info.status == "KILLED"


def test_ctrl_c_marks_the_current_run_killed_and_resume_finishes(
    store: str, monkeypatch: pytest.MonkeyPatch, sigint_enabled: None
) -> None:
    monkeypatch.setenv("MRBENCH_FAKE_CELL_SECONDS", "0.5")
    calls: list[str] = []

    def interrupted_on_second_cell(spec: Any, **kwargs: Any) -> Any:
        calls.append(spec.label())
        if len(calls) == 2:
            # Ctrl-C arrives while the cell is training (KeyboardInterrupt in the main thread).
            threading.Timer(0.2, _thread.interrupt_main).start()
        return fake_cell(spec, **kwargs)

    first = sweep(small("ctrlc"), store, cell_fn=interrupted_on_second_cell)
    assert first.interrupted and first.exit_code == 130
    assert len(calls) == 2 and [o.status for o in first.outcomes] == ["FINISHED"]
    statuses = child_statuses(store, "ctrlc")
    assert sorted(s for v in statuses.values() for s in v) == ["FINISHED", "KILLED"]
    assert parent_runs(store, "ctrlc")[0].info.status == "KILLED"

    monkeypatch.delenv("MRBENCH_FAKE_CELL_SECONDS")
    second = sweep(small("ctrlc"), store)
    assert len(second.outcomes) == 3 and second.exit_code == 0
    assert_exactly_once_finished(store, "ctrlc", [c.key for c in second.grid.cells])


def test_unreachable_tracking_store_fails_before_any_cell(tmp_path: Path) -> None:
    calls: list[Any] = []

    def never(*args: Any, **kwargs: Any) -> None:
        calls.append(args)

    for uri in (f"sqlite:///{tmp_path / 'missing-dir' / 'mlflow.db'}", "http://127.0.0.1:9"):
        with pytest.raises(UserError, match="tracking store"):
            run_sweep(
                small("nowhere"), tracking_uri=uri, resolve=fake_resolve_spec, cell_fn=never, console=quiet()
            )
    assert calls == []


def test_report_is_written_and_logged_at_the_end(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # reports/<sweep> is relative to the working directory
    outcome = sweep(small("reported", seeds=(0,)), store, report=True)
    assert outcome.report_path == Path("reports/reported/report.md")
    assert (tmp_path / "reports/reported/report.md").read_text().startswith("# Sweep report: `reported`")
    parent = parent_runs(store, "reported")[0]
    logged = {a.path for a in MlflowClient(tracking_uri=store).list_artifacts(parent.info.run_id, "report")}
    assert "report/report.md" in logged and any(p.endswith(".png") for p in logged)


# ------------------------------------------------------------------------------------- executors


@pytest.mark.slow
def test_worker_processes_run_cells_in_parallel_once_each(store: str) -> None:
    outcome = sweep(small("workers", seeds=(0,), workers=2), store)
    assert [o.status for o in outcome.outcomes] == ["FINISHED", "FINISHED"]
    assert all(o.run_id for o in outcome.outcomes)
    assert_exactly_once_finished(store, "workers", [c.key for c in outcome.grid.cells])
    logs = list((Path(os.environ["MRBENCH_RESULTS"]) / "logs" / "workers").glob("*.log"))
    assert len(logs) == 2


@pytest.mark.slow
def test_sweep_workers_get_one_gpu_each(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two local workers on a machine with four GPUs: each cell process sees exactly one, and two
    cells that run together see different ones (mrbench.engine.processes.devices)."""
    record = tmp_path / "seen"
    record.mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("MRBENCH_FAKE_CELL_RECORD_ENV", str(record))
    monkeypatch.setenv("MRBENCH_FAKE_CELL_SECONDS", "1.0")
    outcome = sweep(small("gpus", seeds=(0,), workers=2), store)
    assert [o.status for o in outcome.outcomes] == ["FINISHED", "FINISHED"]
    seen = sorted(p.read_text() for p in record.iterdir())
    assert seen == ["0", "1"]


@pytest.mark.slow
def test_worker_process_failure_is_recorded(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRBENCH_FAKE_CELL_FAIL", "gdpo|*")
    outcome = sweep(small("workers-fail", seeds=(0,), workers=2), store)
    by_label = {o.cell.label: o for o in outcome.outcomes}
    assert by_label["grpo|tool-calling|tiny|s0"].status == "FINISHED"
    assert by_label["gdpo|tool-calling|tiny|s0"].status == "FAILED"
    assert "scripted failure" in (by_label["gdpo|tool-calling|tiny|s0"].error or "")


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_sigkill_mid_cell_then_rerun_finishes_each_cell_exactly_once(store: str) -> None:
    env = {**os.environ, "MRBENCH_FAKE_CELL_SECONDS": "1.5"}
    # One worker: the cells run one after another, in the sweep's own process.
    proc = subprocess.Popen(
        cli_sweep(store, "sigkill", "--workers", "1"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Kill while the second cell runs, after the first has FINISHED.
        before = wait_for(
            store,
            "sigkill",
            lambda s: (
                sum(v.count("FINISHED") for v in s.values()) == 1 and any("RUNNING" in v for v in s.values())
            ),
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished_key = next(k for k, v in before.items() if v == ["FINISHED"])
    done = subprocess.run(
        cli_sweep(store, "sigkill", "--workers", "1"),
        cwd=REPO,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    after = child_statuses(store, "sigkill")
    assert len(after) == 3 and all(v.count("FINISHED") == 1 for v in after.values())
    assert after[finished_key] == ["FINISHED"]  # nothing finished is redone
    assert sorted(s for v in after.values() for s in v) == ["FINISHED"] * 3 + ["KILLED"]
    assert "marked 2 stale RUNNING run(s) KILLED" in done.stdout  # the child and the parent


@pytest.mark.slow
def test_worker_hit_by_two_sigints_still_ends_its_run_killed(store: str, tmp_path: Path) -> None:
    # A worker often gets SIGINT twice (the parent-death signal and the parent watcher; a
    # Ctrl-C to the process group and the sweep's own signal). The second must not interrupt
    # the handler that ends the run KILLED.
    import json

    client = MlflowClient(tracking_uri=store)
    client.create_experiment("twice")
    cell = Cell(fake_resolve_spec("grpo", "tool-calling", "tiny", 0))
    ctx = CellContext(store, "twice", None, "twice", fake_cell, tmp_path)
    payload = cell_payload(cell, ctx, "fakes:fake_cell", 1, tmp_path / "result.json")
    payload["parent_pid"] = None  # no parent watcher: this test sends the signals itself
    (tmp_path / "payload.json").write_text(json.dumps(payload))
    env = {**os.environ, "MRBENCH_FAKE_CELL_SECONDS": "20"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrbench.sweeps.cell_process", str(tmp_path / "payload.json")],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    try:
        wait_for(store, "twice", lambda s: any("RUNNING" in v for v in s.values()))
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [s for v in child_statuses(store, "twice").values() for s in v] == ["KILLED"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "KILLED"


def test_sigint_exits_130_with_the_run_marked_killed(store: str) -> None:
    env = {**os.environ, "MRBENCH_FAKE_CELL_SECONDS": "5"}
    proc = subprocess.Popen(
        # One worker: with the default two, a second cell may or may not be RUNNING when the
        # signal lands, and this test is about the one that is.
        cli_sweep(store, "sigint", "--workers", "1"),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        wait_for(store, "sigint", lambda s: any("RUNNING" in v for v in s.values()))
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "interrupted" in output and "Run the same command again to resume" in output
    statuses = child_statuses(store, "sigint")
    assert [s for v in statuses.values() for s in v] == ["KILLED"]
    assert parent_runs(store, "sigint")[0].info.status == "KILLED"


@pytest.mark.slow
def test_sigkill_of_a_sweep_with_workers_leaves_no_orphan_to_finish_twice(store: str) -> None:
    # Cells long enough that both workers are surely inside one at the same time even when a
    # loaded machine starts the second worker seconds after the first (with 4 s cells a slow
    # start once meant two cells never overlapped and the wait below timed out).
    cell_seconds = 10
    env = {**os.environ, "MRBENCH_FAKE_CELL_SECONDS": str(cell_seconds)}
    proc = subprocess.Popen(
        cli_sweep(store, "orphans", "--workers", "2"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        running = wait_for(store, "orphans", lambda s: sum("RUNNING" in v for v in s.values()) == 2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The workers get SIGINT when their sweep dies and end their runs KILLED, well before their
    # cells could finish as orphans.
    ended = wait_for(store, "orphans", lambda s: not any("RUNNING" in v for v in s.values()), timeout_s=60)
    assert [ended[k] for k in running] == [["KILLED"], ["KILLED"]]
    done = subprocess.run(
        cli_sweep(store, "orphans", "--workers", "2"), cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    time.sleep(cell_seconds + 1)  # an orphan that survived would have finished its cell by now
    after = child_statuses(store, "orphans")
    assert len(after) == 3 and all(v.count("FINISHED") == 1 for v in after.values()), after


def test_ray_missing_or_local_cell_functions_give_clear_errors(store: str) -> None:
    with pytest.raises(UserError, match="module-level function"):
        callable_path(lambda spec: spec)
    assert callable_path(fake_cell) == "fakes:fake_cell"
    assert Cell(fake_resolve_spec("grpo", "tool-calling", "tiny", 0)).entry().method == "grpo"


def test_a_malformed_allocator_setting_stops_the_sweep_before_its_parent_run(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_MALLOC", "jemalloc")
    with pytest.raises(UserError, match="MRBENCH_MALLOC='jemalloc' must be"):
        sweep(small("malloc"), store)
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("malloc")
    assert experiment is None or parent_runs(store, "malloc") == []


def test_a_model_that_cannot_be_loaded_stops_the_sweep_before_its_parent_run(
    store: str, tmp_path: Path
) -> None:
    """As `mrbench run` does for its one model: a folder that holds no model (a misspelt path, a
    hub id that does not exist) stops the sweep with one line per model, not one FAILED run per cell;
    once its cells are FINISHED, the model is not needed (nor checked) to resume the sweep."""
    model = tmp_path / "my-model"
    model.mkdir()
    with pytest.raises(
        UserError, match=r"cannot start \(1 problem\(s\)\):\n  model '.*my-model'.*no config\.json"
    ):
        sweep(small("nomodel", models=(str(model),)), store)
    assert parent_runs(store, "nomodel") == [] and child_statuses(store, "nomodel") == {}
    console = quiet()  # a dry run names it too, and runs nothing
    run_sweep(small("nomodel", models=(str(model),)), tracking_uri=store, dry_run=True, console=console)
    assert re.search(
        r"dry run: sweep 'nomodel' cannot start \(1 problem\(s\)\):\n  model '.*my-model'",
        console.file.getvalue(),
    )
    assert parent_runs(store, "nomodel") == []

    (model / "config.json").write_text('{"model_type": "gpt2"}')
    (model / "model.safetensors").write_bytes(b"")
    assert sweep(small("nomodel", models=(str(model),)), store).exit_code == 0
    (model / "model.safetensors").unlink()  # the cells are done: resuming needs no model
    again = sweep(small("nomodel", models=(str(model),)), store)
    assert again.exit_code == 0 and again.outcomes == [] and len(again.skipped) == 4
