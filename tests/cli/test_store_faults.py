"""The command line on a store that does not answer, a damaged database and a full disk: one line
naming the store and the cause, exit 2, within seconds; a dry run does not contact the store."""

from __future__ import annotations

import errno
import io
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from cli_procs import run_mrbench
from fakes import fake_resolve_spec
from hanging import HangingServer
from rich.console import Console

from mrbench.cli import app as cli_app
from mrbench.store.client import StoreFault, check_tracking_reachable
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.spec import SweepSpec


@pytest.fixture
def hanging() -> Iterator[HangingServer]:
    server = HangingServer()
    yield server
    server.close()


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert "unexpected" not in lines[0] and "bug report" not in lines[0], lines[0]
    return lines[0]


def test_a_dry_run_does_not_contact_the_tracking_server(hanging, monkeypatch) -> None:
    # Short MLflow settings, so that a dry run that did ask the server would end (and fail) quickly.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    spec = SweepSpec(name="dry", methods=("grpo",), tasks=("tool-calling",), models=("tiny",), seeds=(0,))
    console = Console(file=io.StringIO(), width=200)
    outcome = run_sweep(
        spec, tracking_uri=hanging.uri, dry_run=True, resolve=fake_resolve_spec, console=console
    )
    assert len(outcome.grid.cells) == 1 and "dry run: 1 cells" in console.file.getvalue()
    assert hanging.accepted == [], "the dry run connected to the tracking server"


def test_cli_dry_run_against_a_server_that_does_not_answer_returns_at_once(hanging) -> None:
    argv = ["sweep", "--methods", "grpo", "--tasks", "tool-calling", "--seeds", "0", "--no-lab"]
    start = time.monotonic()
    done = run_mrbench(*argv, "--tracking-uri", hanging.uri, "--dry-run", timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - start < 30 and hanging.accepted == []


@pytest.mark.slow
def test_cli_report_names_a_server_that_does_not_answer(hanging, tmp_path) -> None:
    start = time.monotonic()
    done = run_mrbench(
        "report", "smoke", "--tracking-uri", hanging.uri, "--out", str(tmp_path / "r"), timeout=60
    )
    line = _one_line_error(done.stderr)
    assert done.returncode == 2 and time.monotonic() - start < 25
    assert hanging.uri in line and "does not answer" in line, line


@pytest.fixture
def damaged_results(tmp_path: Path, new_store: Callable[[Path], str]) -> Path:
    """A results folder whose ``mlflow.db`` was cut short (a copy that stopped half-way)."""
    results = tmp_path / "results"
    new_store(results)
    os.truncate(results / "mlflow.db", 4096)
    return results


def test_cli_report_names_a_damaged_store(damaged_results: Path, tmp_path: Path) -> None:
    env = {"MRBENCH_RESULTS": str(damaged_results)}
    report = run_mrbench("report", "smoke", "--out", str(tmp_path / "r"), env=env, timeout=60)
    line = _one_line_error(report.stderr)
    assert report.returncode == 2 and str(damaged_results / "mlflow.db") in line and "damaged" in line, line


def test_a_sweep_names_a_damaged_store_not_an_unreachable_one(damaged_results: Path, monkeypatch) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(damaged_results))
    spec = SweepSpec(name="dmg", methods=("grpo",), tasks=("tool-calling",), models=("tiny",), seeds=(0,))
    console = Console(file=io.StringIO(), width=200)
    with pytest.raises(StoreFault) as err:
        run_sweep(spec, resolve=fake_resolve_spec, console=console)
    message = str(err.value)
    assert str(damaged_results / "mlflow.db") in message and "damaged" in message, message
    assert "cannot reach" not in message and "\n" not in message


def _run_failing(monkeypatch, capsys, exc: BaseException) -> tuple[int | str | None, str]:
    """``mrbench fail`` through the CLI's exit-code mapping, the command raising ``exc``."""
    app = typer.Typer()

    @app.command()
    def fail() -> None:
        raise exc

    @app.command()
    def other() -> None:  # two commands, so that `fail` is named on the command line
        pass

    monkeypatch.setattr(sys, "argv", ["mrbench", "fail"])
    code = cli_app._run(app)
    return code, _one_line_error(capsys.readouterr().err)


def test_a_disk_full_anywhere_is_a_user_error_naming_the_file(monkeypatch, capsys) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/data/results/checkpoints/x/model.safetensors")
    code, line = _run_failing(monkeypatch, capsys, full)
    assert code == 2 and "/data/results/checkpoints/x/model.safetensors" in line and "disk is full" in line, (
        line
    )


def test_a_store_write_fault_names_the_store_in_use(tmp_path, new_store, monkeypatch, capsys) -> None:
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = new_store(tmp_path / "results")
    check_tracking_reachable(uri)  # the store this process uses
    try:
        try:
            raise sqlite3.OperationalError("disk I/O error")
        except sqlite3.Error as inner:
            raise MlflowException("(sqlite3.OperationalError) disk I/O error") from inner
    except MlflowException as exc:
        fault = exc
    code, line = _run_failing(monkeypatch, capsys, fault)
    assert code == 2 and str(tmp_path / "results" / "mlflow.db") in line and "disk I/O error" in line, line


def test_a_cell_out_of_room_says_its_run_resumes_and_names_the_folder(tmp_path, monkeypatch, capsys) -> None:
    from mrbench.cli.commands import run as run_command
    from mrbench.store.faults import OutOfRoom

    def no_room(spec, launch):
        detail = "a training checkpoint needs about 2.0 MB and the disk has 0.3 MB free"
        raise OutOfRoom(errno.ENOSPC, detail, str(tmp_path / "results" / "checkpoints" / "key"))

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(run_command, "run_cell_or_launch", no_room)
    argv = ["mrbench", "run", "--method", "grpo", "--task", "tool-calling", "--model", "tiny", "--quiet"]
    monkeypatch.setattr(sys, "argv", argv)
    code = cli_app._run(cli_app.app)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, err
    assert err[0].startswith("the cell stopped: its MLflow run is marked KILLED and resumes"), err
    assert err[1] == (
        f"error: cannot write {tmp_path / 'results' / 'checkpoints' / 'key'}: the disk is full (a training "
        "checkpoint needs about 2.0 MB and the disk has 0.3 MB free); make room (or lift the limit) and run "
        "the command again"
    ), err
