"""A clean terminal: ``mrbench run`` and ``mrbench sweep`` print their own output only; what the
libraries print goes to the cell's log (an MLflow artifact, named when the cell fails), live with
``--verbose``; without a terminal, plain lines and no control codes; on a terminal, the live table."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_procs import mrbench_script
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.engine.runs import console, phases

TESTS = Path(__file__).resolve().parents[1]
FAKE_SWEEP_CLI = TESTS / "sweeps" / "fake_sweep_cli.py"
ANSI = re.compile(r"\x1b\[")
NOISE = ("{'loss'", "pretrained` model kwarg", "Custom kwargs can be passed", "gradient_checkpointing")
SMALL = ["--task-param", "n_train=16", "--task-param", "n_eval=4", "--steps", "2"]
SMALL += ["--train", "num_generations=2", "--train", "prompts_per_step=2", "--train", "eval_limit=4"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1", **extra}
    env.pop("MRBENCH_VERBOSE", None)
    env.pop("FORCE_COLOR", None)
    return env


def _mrbench(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([mrbench_script(), *args], capture_output=True, text=True, timeout=600, env=env)


# ---------------------------------------------------------------------------------- mrbench run


@pytest.mark.slow  # a real cell in a subprocess (~9 s); CI's slow stage runs it
def test_run_without_terminal_prints_plain_progress_and_logs_library_output(micro_model_dir, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["run", "--model", str(micro_model_dir), "--tracking-uri", uri, "--save", "none", *SMALL]
    proc = _mrbench(args, _env(tmp_path))
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-3000:]
    assert not [n for n in NOISE if n in shown], shown
    assert "\r" not in shown and not ANSI.search(shown), repr(shown)
    for line in ("eval before: started (4 completions)", "train: started (2 steps)", "train: done"):
        assert line in proc.stdout, proc.stdout
    assert "FINISHED" in proc.stdout and "← primary" in proc.stdout

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mrbench-runs").experiment_id])
    local = client.download_artifacts(run.info.run_id, layout.CELL_LOG_ARTIFACT, str(tmp_path / "got"))
    logged = Path(local).read_text()
    assert "{'loss'" in logged and "pretrained` model kwarg" in logged, logged[-2000:]
    # The cell's folder keeps it too; its progress file is gone once the cell has ended.
    folder = tmp_path / "results" / "checkpoints" / run.data.tags[layout.tag(layout.RUN_KEY)]
    assert (folder / console.CELL_LOG_NAME).read_text() == logged
    assert not (folder / phases.PROGRESS_NAME).exists()


@pytest.mark.slow  # two cells in subprocesses (~7 s); CI's slow stage runs it
def test_failing_cell_names_its_log_and_verbose_shows_it_live(tmp_path):
    # It passes the folder check run makes before the store (a known model type, a weights file)
    # and fails inside the cell, where its files are read.
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text('{"model_type": "qwen2"}')
    (not_a_model / "model.safetensors").write_bytes(b"not safetensors")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["run", "--model", str(not_a_model), "--tracking-uri", uri, "--verbose", *SMALL]
    proc = _mrbench(args, _env(tmp_path))
    assert proc.returncode != 0
    named = re.search(r"library output and traceback: (\S+cell\.log)", proc.stderr)
    assert named, proc.stderr
    logged = Path(named.group(1)).read_text()
    assert "Traceback" in logged
    # --verbose: what went to the log was shown as it came.
    assert "Traceback" in proc.stdout + proc.stderr
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name("mrbench-runs")
    (run,) = MlflowClient(tracking_uri=uri).search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"
    artifacts = [a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id, "logs")]
    assert artifacts == [layout.CELL_LOG_ARTIFACT]


# ---------------------------------------------------------------------------------- mrbench sweep


def _fake_sweep(tmp_path: Path, *extra: str) -> list[str]:
    argv = [sys.executable, str(FAKE_SWEEP_CLI), "sweep", "--name", "term", "--methods", "grpo,gdpo"]
    argv += ["--tasks", "tool-calling", "--models", "tiny", "--seeds", "0", "--steps", "3", "--no-report"]
    return argv + list(extra)


@pytest.mark.slow  # a real 2-cell sweep in a subprocess (~12 s); CI's slow stage runs it
def test_sweep_without_terminal_prints_one_plain_line_per_cell(tmp_path):
    # An empty cache: MLflow creates its empty store (mrbench.store.empty_store) in this sweep and logs it.
    env = _env(tmp_path, MRBENCH_FAKE_CELL_FAIL="gdpo*", MRBENCH_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(_fake_sweep(tmp_path), capture_output=True, text=True, timeout=300, env=env)
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 1, shown
    assert not ANSI.search(shown) and "\r" not in shown, repr(shown)
    assert re.search(
        r"^FINISHED grpo\|tool-calling\|tiny\|s0 in \d+:\d\d · exact_match [\d.]+ → [\d.]+$",
        proc.stdout,
        re.M,
    ), proc.stdout
    assert re.search(r"^FAILED gdpo\|tool-calling\|tiny\|s0 in .*scripted failure", proc.stdout, re.M)
    # MLflow's own log lines (creating the store) went to the sweep's log, not here.
    assert "INFO" not in shown
    assert "Creating initial MLflow database tables" in (tmp_path / "results/logs/term/sweep.log").read_text()


def _in_terminal(argv: list[str], env: dict[str, str], timeout_s: float = 300) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its stdin/stdout/stderr; its exit code and output."""
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.execvpe(argv[0], argv, env)
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            out += data
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", errors="replace")


@pytest.mark.slow  # a real sweep under a pseudo-terminal (~12 s); CI's slow stage runs it
def test_sweep_on_a_terminal_draws_the_live_table(tmp_path):
    env = _env(tmp_path, MRBENCH_FAKE_CELL_SECONDS="1", COLUMNS="160", LINES="40")
    code, shown = _in_terminal(_fake_sweep(tmp_path), env)
    assert code == 0, shown
    text = ANSI.sub("", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown))
    assert "primary metric (before → after)" in text and "cells 2/2 done" in text, text
    assert re.search(
        r"gdpo\|tool-calling\|tiny\|s0\s+FINISHED\s+\d+:\d\d\s+exact_match [\d.]+ → [\d.]+", text
    )
    assert ANSI.search(shown)  # a terminal gets colours and redraws


# ---------------------------------------------------------------------------------- the capture


CAPTURING = """
import logging, os, subprocess, sys, warnings
from mrbench.engine.runs import console

with console.capture_output(sys.argv[1], verbose=False):
    print("from print")
    os.write(2, b"from fd 2\\n")
    subprocess.run([sys.executable, "-c", "import sys; print('from a child'); sys.stderr.write('child err')"])
    warnings.warn("a library warning", UserWarning)
    logging.getLogger("some.library").warning("a logging record")
    console.terminal().write("mrbench's own\\n")
print("after")
"""


def test_capture_takes_fd_level_python_warning_and_logging_output_and_restores(tmp_path):
    path = tmp_path / "cell.log"
    proc = subprocess.run(
        [sys.executable, "-c", CAPTURING, str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    logged = path.read_text()
    for text in (
        "from print",
        "from fd 2",
        "from a child",
        "child err",
        "a library warning",
        "a logging record",
    ):
        assert text in logged, logged
    assert "mrbench's own" not in logged and "after" not in logged
    assert proc.stdout == "mrbench's own\nafter\n" and proc.stderr == ""


def test_verbose_capture_copies_to_the_terminal_too(tmp_path, capfd):
    path = tmp_path / "cell.log"
    with console.capture_output(path, verbose=True):
        subprocess.run([sys.executable, "-c", "print('shown live')"])
        os.write(2, b"and from fd 2\n")
    logged = path.read_text()
    out, _ = capfd.readouterr()
    assert "shown live" in logged and "and from fd 2" in logged
    assert "shown live" in out and "and from fd 2" in out


def test_verbose_capture_on_stderr_keeps_stdout_for_the_result(tmp_path, capfd):
    """``mrbench eval --json --verbose``: the live copy goes to stderr; stdout is the JSON alone."""
    path = tmp_path / "eval.log"
    with console.capture_output(path, verbose=True, live_on_stderr=True):
        subprocess.run([sys.executable, "-c", "print('shown live')"])
        os.write(2, b"and from fd 2\n")
    print("{}")
    logged = path.read_text()
    out, err = capfd.readouterr()
    assert "shown live" in logged and "and from fd 2" in logged
    assert out == "{}\n"
    assert "shown live" in err and "and from fd 2" in err
