"""Help lists flags without a value (``--json``, not ``--json <bool>``) in every command."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from mrbench.cli.app import app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def _option_row(text: str, option: str) -> str:
    return next(line for line in text.splitlines() if re.search(rf"{option}\b", line))


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_flags_take_no_value_in_help(command: str) -> None:
    text = _help(*([command] if command else []))
    assert "<bool>" not in text
    assert re.search(r"--help\s+Show this message", text), text


def test_options_with_a_value_keep_their_type() -> None:
    text = _help("score")
    assert "<str>" in _option_row(text, "--task")
    assert _option_row(text, "--json").split("│")[1].split()[:2] == ["--json", "Print"]
