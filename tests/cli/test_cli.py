"""CLI contracts: JSON shapes other tools rely on, and exit code 2 with a named bad value."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer

from mrbench.cli.app import main
from mrbench.core.errors import PluginError, RegistryError, UnknownNameError, UnknownParamError, UserError


def mrbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrbench", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_methods_json_shape():
    proc = mrbench("methods", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    builtin = {"grpo", "dr-grpo", "gdpo", "gdpo-nobn", "corrgrpo", "gdpo-corr"}
    assert builtin <= {row["name"] for row in rows}
    for row in rows:
        if row["name"] in builtin:
            assert set(row) == {"name", "source", "params", "ranges", "summary", "available"}
            assert row["source"] == "built-in" and row["available"]
            assert isinstance(row["params"], dict) and row["summary"]
            assert set(row["ranges"]) == set(row["params"])  # every built-in hyper-parameter has one
    ranges = {row["name"]: row["ranges"] for row in rows}
    assert ranges["grpo"] == {"eps": {"ge": 0}} and ranges["corrgrpo"] == {"eps": {"gt": 0}}
    assert ranges["dr-grpo"] == {}
    assert ranges["corrgrpo-guarded"]["min_corr_sum"] == {"ge": 0}


def test_methods_table_shows_ranges():
    proc = mrbench("methods")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("corrgrpo-guarded "))
    assert "eps=1e-06 (> 0), min_corr_sum=1.0 (>= 0)" in line


def test_tasks_json_shape():
    proc = mrbench("tasks", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    tool = rows["tool-calling"]
    assert tool["available"] and tool["version"] and tool["source"] == "built-in"
    assert set(tool["weights"]) == set(tool["rewards"]) and len(tool["rewards"]) == 4


def test_advantages_json_paper_example():
    rewards = "0.1,0.18,0.8;0.18,0.1,7.28;0.82,0.9,8.0;0.9,0.82,1.52"
    proc = mrbench("advantages", "--method", "corrgrpo", "--rewards", rewards, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == "corrgrpo"
    assert out["advantages"] == pytest.approx([-1.861, 0.930, 1.861, -0.930], abs=2e-3)
    assert "mean_offdiag_corr" in out["diagnostics"]


def test_advantages_groups_weights_params_and_nan():
    proc = mrbench(
        "advantages",
        "--method",
        "grpo",
        "--rewards",
        "1,0;0,1;nan,nan;1,1",
        "--group-size",
        "2",
        "--weights",
        "2,1",
        "--param",
        "eps=1e-4",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    adv = json.loads(proc.stdout)["advantages"]
    assert (
        len(adv) == 4 and adv[2] == 0.0 and adv[3] == 0.0
    )  # unscorable row, and a group of one scorable row
    assert adv[0] > 0 > adv[1]


def test_advantages_rewards_file(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("a,b\n1,0\n0,1\n")
    proc = mrbench("advantages", "--method", "gdpo-nobn", "--rewards-file", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["advantages"]) == 2


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["advantages", "--method", "grpoo", "--rewards", "1,2;3,4"], "grpoo"),
        (["advantages", "--method", "grpo", "--rewards", "1,2;3"], "row"),
        (["advantages", "--method", "grpo", "--rewards", "1,x;3,4"], "'x'"),
        (["advantages", "--method", "grpo", "--rewards", "1;2;3", "--group-size", "2"], "group size"),
        (["advantages", "--method", "grpo", "--rewards", "1;2", "--param", "epz=1"], "epz"),
        (
            ["advantages", "--method", "grpo", "--rewards", "1;2", "--param", "eps=1", "--param", "eps=2"],
            "twice",
        ),
        (["advantages", "--method", "no_such_module_xyz:fn", "--rewards", "1;2"], "no_such_module_xyz"),
        (["run", "--method", "json:dumps"], "method 'json:dumps' does not fit"),
        (["run", "--param", "eps"], "--param expects key=value, got 'eps'"),
        (["run", "--steps", "3", "--train", "steps=4"], "give one of them"),
        (["run", "--method", "gdpoo"], "gdpoo"),
        (["run", "--task", "tool-caling"], "tool-caling"),
        (["run", "--model", "tiny-xxl"], "tiny-xxl"),
        (["run", "--train", "stepz=3"], "stepz"),
        (
            ["run", "--task", "agent-security", "--task-param", "n_eval=-1"],
            "parameter 'n_eval' of 'agent-security': must be >= 0",
        ),
        (["run", "--task", "agent-security", "--task-param", "attacks=jailbreak"], "jailbreak"),
    ],
)
def test_bad_input_exits_2_naming_the_value(args, named):
    proc = mrbench(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert named.lower() in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_more_code_problems_than_the_split_holds_exit_2_before_any_run(tmp_path):
    """n_eval beyond the eval split is refused when the task is built: no store, no FAILED run."""
    results = tmp_path / "results"
    env = {**os.environ, "MRBENCH_RESULTS": str(results)}
    proc = mrbench("run", "--task", "code-generation", "--task-param", "n_eval=1000", "--steps", "1", env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "n_eval=1000 but the eval split of 'embedded' has only 42 problems" in proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()


def test_unreachable_tracking_store_fails_before_training(tmp_path):
    proc = mrbench("run", "--tracking-uri", f"sqlite:///{tmp_path}/missing/dir/mlflow.db")
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


@pytest.mark.parametrize(
    "error",
    [
        UserError("input file 'x.jsonl' does not exist"),
        RegistryError("bad value 'x' for parameter 'eps': expected float"),
        UnknownNameError("method", "grpoo", ["grpo", "gdpo"]),
        UnknownParamError("unknown parameter 'epz' for 'grpo'."),
        PluginError(
            "method plugin 'p' (entry point 'p = m:f' in group mrbench.methods, from d) cannot be loaded"
        ),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_user_error_prints_its_message_and_exits_2(error, monkeypatch, capsys):
    cli = typer.Typer()

    @cli.command()
    def fail() -> None:
        raise error

    @cli.command()
    def other() -> None:  # a second command keeps `fail` a subcommand
        """Unused."""

    monkeypatch.setattr(sys, "argv", ["mrbench", "fail"])
    with pytest.raises(SystemExit) as info:
        main(cli)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"error: {error}\n"
