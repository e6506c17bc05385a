"""Fixtures of the loader tests: the benchmark fixture files and ``mrbench`` run in-process."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    """``tests/fixtures``: small files in each external benchmark's own format."""
    return FIXTURES


@pytest.fixture
def mrbench_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> Callable[..., tuple[int, str, str]]:
    """``mrbench_cli(*args)`` → ``(exit code, stdout, stderr)`` of ``mrbench ARGS`` through its entry
    point; results and the tracking store (``sqlite`` under ``tmp_path``) stay in ``tmp_path``."""
    from mrbench.cli import app as cli_app

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))

    def call(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["mrbench", *args])
        with pytest.raises(SystemExit) as info:
            cli_app.main()
        out = capsys.readouterr()
        return int(info.value.code or 0), out.out, out.err

    return call


@pytest.fixture
def eval_two(mrbench_cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> Callable[..., dict]:
    """``eval_two(model_dir, task, dataset, data_param)`` → the ``--json`` report of ``mrbench eval``
    of ``model_dir`` on the first 2 items of ``dataset`` (16 completion tokens, a store in
    ``tmp_path``); fails the test unless it exits 0."""

    def call(model_dir: Path, task: str, dataset: str, data_param: str) -> dict:
        code, out, err = mrbench_cli(
            "eval", "--model", str(model_dir), "--task", task, "--dataset", dataset,
            "--task-param", data_param, "--task-param", "max_completion_tokens=16", "--limit", "2",
            "--json", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
        )  # fmt: skip
        assert code == 0, err[-2000:]
        return json.loads(out)

    return call
