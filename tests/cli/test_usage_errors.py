"""Through the installed `mrbench` script: usage errors exit 2 with one readable message and no
traceback; hyper-parameters and settings that would do harm exit 2 naming the value; files,
folders and stores that cannot be used give a one-line `error: …`; `mrbench --traceback` / MRBENCH_TRACEBACK
show the traceback of an unexpected error, and only then."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from cli_procs import mrbench_script, run_mrbench

from mrbench.cli.app import main

HERE = Path(__file__).resolve().parent


def assert_clean_error(proc: subprocess.CompletedProcess, code: int = 2) -> None:
    """Exit ``code``, no traceback, and an error message on stderr."""
    assert proc.returncode == code, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.stderr.strip(), "no message"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--steps", "abc"], "'--steps'"),
        (["run", "--seed", "abc"], "'--seed'"),
        (["run", "--bogus-flag", "1"], "No such option: --bogus-flag"),
        (["run", "--steps"], "'--steps' requires an argument"),
        (["score"], "Missing option '--task'"),
        (["report"], "Missing argument"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["ui", "--port", "abc"], "'--port'"),
        (["sweep", "--workers", "x"], "'--workers'"),
        (["advantages", "--group-size", "x"], "'--group-size'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_usage_error_exits_2_with_one_message(args: list[str], says: str) -> None:
    proc = run_mrbench(*args)
    assert_clean_error(proc)
    assert says in proc.stderr
    assert proc.stderr.count("Error:") == 1


def test_bare_mrbench_prints_help_and_exits_2() -> None:
    # click's convention for a group without a command (no_args_is_help): the help, exit code 2.
    proc = run_mrbench()
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    shown = proc.stdout + proc.stderr  # typer's rich help goes to stdout, plain click's to stderr
    assert "Usage: mrbench" in shown and " run " in shown and " sweep " in shown


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--param", "eps=-1"], "bad value -1.0 for parameter 'eps' of 'grpo': must be >= 0"),
        (
            ["run", "--method", "corrgrpo", "--param", "eps=0"],
            "bad value 0.0 for parameter 'eps' of 'corrgrpo'",
        ),
        (["run", "--param", "eps=nan"], "bad value nan for parameter 'eps'"),
        (["run", "--train", "learning_rate=inf"], "learning_rate=inf (must be a finite number)"),
        (["run", "--train", "learning_rate=0"], "learning_rate=0.0 (must be > 0)"),
        (
            ["advantages", "--method", "corrgrpo-guarded", "--rewards", "1;2", "--param", "min_corr_sum=-1"],
            "bad value -1.0 for parameter 'min_corr_sum' of 'corrgrpo-guarded': must be >= 0",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_harmful_values_exit_2_naming_the_value(args: list[str], says: str, tmp_path: Path) -> None:
    proc = run_mrbench(*args, env={"MRBENCH_RESULTS": str(tmp_path / "results")})
    assert_clean_error(proc)
    assert says in proc.stderr
    assert not (tmp_path / "results").exists()  # refused before any store or model is touched


def test_huge_rewards_give_one_warning_line_and_meaningful_advantages() -> None:
    proc = run_mrbench("advantages", "--method", "grpo", "--rewards", "1e300;2e300;0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["advantages"] == pytest.approx([0.0, 1.0, -1.0])  # not all zero
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: rewards reach 2e+300 (largest |r| or |w·r|)")


def test_non_utf8_rewards_file(tmp_path: Path) -> None:
    path = tmp_path / "rewards.csv"
    path.write_bytes(b"\xff\xfe1,2\n2,1\n")
    proc = run_mrbench("advantages", "--method", "grpo", "--rewards-file", str(path))
    assert_clean_error(proc)
    assert proc.stderr.strip() == (
        f"error: rewards file {str(path)!r} is not UTF-8 text (byte 0xff at offset 0): "
        "save it as UTF-8 CSV or JSON"
    )


def test_results_folder_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    proc = run_mrbench("run", env={"MRBENCH_RESULTS": str(tmp_path / "afile")})
    assert_clean_error(proc)
    assert (
        proc.stderr.strip()
        == f"error: results folder {tmp_path / 'afile'} (MRBENCH_RESULTS) cannot be used: it is a file"
    )


def test_report_out_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    for out in ("afile", "afile/sub"):
        proc = run_mrbench("report", "x", "--out", str(tmp_path / out))
        assert_clean_error(proc)
        assert proc.stderr.strip() == (
            f"error: --out {str(tmp_path / out)!r} cannot be a folder: {str(tmp_path / 'afile')!r} is a file"
        )


def test_report_unknown_tracking_scheme() -> None:
    proc = run_mrbench("report", "x", "--tracking-uri", "foo://bar")
    assert_clean_error(proc)
    assert proc.stderr.startswith("error: cannot reach the MLflow tracking store 'foo://bar'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_score_empty_input_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    proc = run_mrbench("score", "--task", "code-generation", "--input", str(empty))
    assert_clean_error(proc)
    assert proc.stderr.startswith(f"error: input file {str(empty)!r} has no items")


def test_unknown_hub_model_fails_in_seconds(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = run_mrbench(
        "run", "--model", "nosuchorg/nosuchmodel", env={"MRBENCH_RESULTS": str(tmp_path / "results")}
    )
    assert_clean_error(proc)
    assert proc.stderr.startswith("error: cannot load model 'nosuchorg/nosuchmodel'")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()  # checked before the tracking store is touched
    # Offline (no DNS) or online (the hub says 404): one request, no minute of retries. The
    # bound leaves room for the command's own start on a loaded machine.
    assert time.monotonic() - started < 45


def _read_only_runner() -> list[str] | None:
    """A command prefix that makes ``$RO`` read-only for the command it runs: a private read-only
    bind mount as root (where file modes do not stop writes), nothing for other users (chmod is
    enough); None if neither works here."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    return [
        "unshare",
        "-m",
        "sh",
        "-c",
        'mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" && exec "$@"',
        "sh",
    ]


def test_read_only_results_store(tmp_path: Path, new_store) -> None:
    prefix = _read_only_runner()
    if prefix is None:
        pytest.skip("cannot make a folder read-only here (root without mount namespaces)")
    results = tmp_path / "results"
    uri = new_store(results)  # a store that answers reads (reachable) but cannot be written
    if not prefix:
        results.chmod(0o555)
        (results / "mlflow.db").chmod(0o444)
    try:
        proc = subprocess.run(
            [*prefix, mrbench_script(), "run", "--tracking-uri", uri],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MRBENCH_RESULTS": str(results), "RO": str(results)},
        )
    finally:
        results.chmod(0o755)
    assert_clean_error(proc)
    assert proc.stderr.strip().startswith(f"error: the MLflow tracking store {uri!r} cannot be written")
    assert len(proc.stderr.strip().splitlines()) == 1


def _boom_app() -> typer.Typer:
    cli = typer.Typer()

    @cli.command()
    def boom() -> None:
        raise RuntimeError("something broke\nsecond line")

    @cli.command()
    def other() -> None:  # a second command keeps `boom` a subcommand
        """Unused."""

    return cli


def test_unexpected_error_is_one_line_unless_asked(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["mrbench", "boom"])
    monkeypatch.delenv("MRBENCH_TRACEBACK", raising=False)
    monkeypatch.setenv("MRBENCH_VERBOSE", "1")  # live library output: not the traceback switch
    with pytest.raises(SystemExit) as info:
        main(_boom_app())
    err = capsys.readouterr().err
    assert info.value.code == 1
    assert err == (
        "error: unexpected RuntimeError: something broke "
        "(mrbench --traceback prints the traceback for a bug report)\n"
    )
    monkeypatch.setenv("MRBENCH_TRACEBACK", "1")
    with pytest.raises(SystemExit) as info:
        main(_boom_app())
    err = capsys.readouterr().err
    assert info.value.code == 1
    assert "Traceback (most recent call last)" in err and 'raise RuntimeError("something broke' in err


def test_traceback_flag_of_the_installed_script(tmp_path: Path) -> None:
    # A method plugin that fails inside: an unexpected error, not a user error.
    (tmp_path / "boom_method.py").write_text(
        "def boom(rewards, weights):\n    raise RuntimeError('kaboom')\n", encoding="utf-8"
    )
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env["MRBENCH_TRACEBACK"] = ""
    args = ["advantages", "--method", "boom_method:boom", "--rewards", "1;2"]
    quiet = run_mrbench(*args, env=env)
    assert_clean_error(quiet, code=1)
    assert quiet.stderr.strip().splitlines() == [
        "error: unexpected RuntimeError: kaboom (mrbench --traceback prints the traceback for a bug report)"
    ]
    loud = run_mrbench("--traceback", *args, env=env)
    assert loud.returncode == 1 and "Traceback (most recent call last)" in loud.stderr
    assert "raise RuntimeError('kaboom')" in loud.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [("MRBENCH_THREADS", "two"), ("MRBENCH_KEEP_LOGS", "-1"), ("MRBENCH_CELL_SERVER", "maybe")],
)
def test_a_bad_environment_value_stops_the_command_before_it_opens_a_run(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Checked at the start of every command, not where a cell reads it (after its run opened)."""
    results = tmp_path / "results"
    monkeypatch.setenv("MRBENCH_RESULTS", str(results))
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(sys, "argv", ["mrbench", "run", "--steps", "1"])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith(f"error: {variable}={value!r} must be ") and err.count("\n") == 1, err
    assert not results.exists()  # no store, no run, no cell folder
