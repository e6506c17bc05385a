"""Fixtures of the loader tests: the benchmark fixture files and ``mrbench`` run in-process."""

from __future__ import annotations

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
