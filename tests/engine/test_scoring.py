"""The generic ``mrbench score`` machinery and command, with a minimal scorable task and the real one."""

from __future__ import annotations

import doctest
import json
from typing import Any

import pytest
import typer
from fakes import EmptyTask
from typer.testing import CliRunner

import mrbench.engine.evaluation.scoring
import mrbench.tasks as tasks
from mrbench.cli.commands.score import register
from mrbench.core.contracts import ScoredItem
from mrbench.core.errors import UserError
from mrbench.core.registry import Entry
from mrbench.engine.evaluation.scoring import read_items, score_task, summarize


class _PlainTask(EmptyTask):
    """The least a task implements: no scoring hooks, so `mrbench score` refuses it."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class _EchoTask(_PlainTask):
    """Scores a completion by its length; knows ids a, b, c of dataset "toy"."""

    name = "echo"

    def score_datasets(self) -> list[str]:
        return ["toy"]

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        return [{"dataset": dataset, "id": i, "completion": "gold"} for i in ("a", "b", "c")]

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        out = []
        for item in items:
            if item["id"] not in ("a", "b", "c"):
                out.append(ScoredItem(item["id"], {}, "unknown_id", f"unknown id {item['id']!r}"))
            else:
                length = float(len(item["completion"]))
                out.append(ScoredItem(item["id"], {"length": length, "nonempty": float(length > 0)}, "ok"))
        return out


BUILT: list[_PlainTask] = []


def _build(cls: type[_PlainTask]) -> _PlainTask:
    BUILT.append(cls())
    return BUILT[-1]


@pytest.fixture
def toy_tasks(monkeypatch):
    """Register two throwaway tasks for the duration of a test."""
    BUILT.clear()
    monkeypatch.setitem(tasks.TASKS._entries, "toy-echo", Entry("toy-echo", lambda: _build(_EchoTask)))
    monkeypatch.setitem(tasks.TASKS._entries, "toy-plain", Entry("toy-plain", lambda: _build(_PlainTask)))


def _write(tmp_path, lines: list[str]) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_doctests():
    assert doctest.testmod(mrbench.engine.evaluation.scoring).failed == 0


def test_read_items_reports_each_bad_line_and_keeps_the_rest(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps({"dataset": "toy", "id": "a", "completion": "x"}),
            "{not json",
            json.dumps([1, 2]),
            json.dumps({"dataset": "toy", "completion": "x"}),
            json.dumps({"dataset": "toy", "id": 7, "completion": "y"}),
            "",
            json.dumps({"dataset": 3, "id": "b", "completion": "y"}),
            json.dumps({"dataset": "toy", "id": True, "completion": "y"}),
            json.dumps({"dataset": "toy", "id": "c", "completion": None}),
        ],
    )
    items, errors = read_items(path)
    assert [(n, item["id"]) for n, item in items] == [(1, "a"), (5, "7")]
    assert [e["line"] for e in errors] == [2, 3, 4, 7, 8, 9]
    assert "not valid JSON" in errors[0]["error"] and "'id'" in errors[2]["error"]
    with pytest.raises(UserError, match="does not exist"):
        read_items(tmp_path / "missing.jsonl")


def test_score_task_summary_counts_and_errors(tmp_path, toy_tasks):
    path = _write(
        tmp_path,
        [
            json.dumps({"dataset": "toy", "id": "a", "completion": "abcd"}),
            json.dumps({"dataset": "toy", "id": "zzz", "completion": "x"}),
            "oops",
            json.dumps({"dataset": "toy", "id": "b", "completion": ""}),
        ],
    )
    report = score_task("toy-echo", input_path=path)
    data = report.to_dict()
    assert list(data) == ["task", "dataset", "n", "summary", "status_counts", "wall_s", "items", "errors"]
    assert data["task"] == "toy-echo" and data["dataset"] == "toy" and data["n"] == 2
    assert data["summary"] == {"length": 2.0, "nonempty": 0.5}  # unknown ids are not averaged in
    assert data["status_counts"] == {"ok": 2, "unknown_id": 1, "malformed_input": 1}
    assert [item["id"] for item in data["items"]] == ["a", "zzz", "b"]
    assert data["items"][1]["error"] == "unknown id 'zzz'" and data["items"][1]["line"] == 2
    assert [e["line"] for e in data["errors"]] == [2, 3]
    gold = score_task("toy-echo", dataset="toy", gold=True).to_dict()
    assert gold["n"] == 3 and gold["summary"]["length"] == 4.0 and gold["errors"] == []
    assert [t.closed for t in BUILT] == [1, 1]  # every task built for scoring is closed once


def test_score_task_rejects_bad_arguments(tmp_path, toy_tasks):
    path = _write(tmp_path, [json.dumps({"dataset": "toy", "id": "a", "completion": ""})])
    with pytest.raises(UserError, match="either --input"):
        score_task("toy-echo")
    with pytest.raises(UserError, match="either --input"):
        score_task("toy-echo", input_path=path, dataset="toy", gold=True)
    with pytest.raises(UserError, match="add --gold"):
        score_task("toy-echo", dataset="toy")
    with pytest.raises(UserError, match="no dataset 'nope'; choose from toy"):
        score_task("toy-echo", dataset="nope", gold=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    for kwargs in ({"input_path": path}, {"input_path": str(empty)}, {"dataset": "toy", "gold": True}):
        with pytest.raises(UserError, match=r"task 'plain' cannot be scored with `mrbench score`"):
            score_task("toy-plain", **kwargs)
    with pytest.raises(UserError, match=r"unknown task 'toy-ech'.*Did you mean 'toy-echo'"):
        score_task("toy-ech", input_path=path)
    assert all(t.closed == 1 for t in BUILT)  # closed on the error paths too
    plain = _PlainTask()
    for hook in (plain.score_datasets, lambda: plain.gold_items("toy"), lambda: plain.score_items([])):
        with pytest.raises(UserError, match="implements no score_datasets / gold_items / score_items"):
            hook()


def test_summarize_ignores_unscorable_values():
    items = [ScoredItem("a", {"x": None}, "s"), ScoredItem("b", {"x": float("nan")}, "s")]
    assert summarize(items) == {"x": None}


@pytest.fixture
def cli():
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the app into `score`
        pass

    return app


def test_command_json_output_and_exit_codes(tmp_path, toy_tasks, cli):
    runner = CliRunner()
    good = _write(tmp_path, [json.dumps({"dataset": "toy", "id": "a", "completion": "ab"})])
    result = runner.invoke(cli, ["score", "--task", "toy-echo", "--input", good, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["n"] == 1 and data["items"] == [
        {"id": "a", "rewards": {"length": 2.0, "nonempty": 1.0}, "status": "ok", "line": 1}
    ]
    bad = _write(tmp_path, ["garbage", json.dumps({"dataset": "toy", "id": "b", "completion": "x"})])
    result = runner.invoke(cli, ["score", "--task", "toy-echo", "--input", bad])
    assert result.exit_code == 1  # the good line is still scored and printed
    assert "1 scored" in result.output and "error: line 1: not valid JSON" in result.output
    result = runner.invoke(cli, ["score", "--task", "toy-echo", "--dataset", "toy"])
    assert isinstance(result.exception, UserError)  # mrbench.cli.app turns it into exit code 2
    result = runner.invoke(
        cli, ["score", "--task", "toy-echo", "--dataset", "toy", "--gold", "--task-param", "x"]
    )
    assert isinstance(result.exception, UserError) and "key=value" in str(result.exception)


def test_command_scores_code_generation(tmp_path, cli):
    lines = [
        json.dumps(
            {
                "dataset": "embedded",
                "id": "add_3",
                "completion": "```python\ndef add_3(x):\n    return x + 3\n```",
            }
        ),
        json.dumps(
            {
                "dataset": "embedded",
                "id": "add_3",
                "completion": "```python\ndef add_3(x):\n    return 3\n```",
            }
        ),
        json.dumps({"dataset": "embedded", "id": "no_such_problem", "completion": ""}),
    ]
    result = CliRunner().invoke(
        cli, ["score", "--task", "code-generation", "--input", _write(tmp_path, lines), "--json"]
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["dataset"] == "embedded" and data["n"] == 2
    assert [item["status"] for item in data["items"]] == ["passed", "failed", "unknown_id"]
    assert set(data["summary"]) == {
        "format",
        "syntax",
        "compile",
        "runtime",
        "accuracy",
        "ast_similarity",
        "efficiency",
    }
    assert data["summary"]["accuracy"] == 0.5 and data["summary"]["runtime"] == 1.0
