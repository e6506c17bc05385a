"""``mrbench score``'s text summary: a header over aligned columns, whatever the component names."""

from __future__ import annotations

import subprocess
import sys

from mrbench.engine.evaluation.scoring import ScoreReport, format_report


def _report(summary: dict[str, float | None]) -> ScoreReport:
    return ScoreReport("t", "d", summary, {"answered": 2}, 0.5, items=[{"id": "a"}, {"id": "b"}])


def _table(text: str) -> list[str]:
    """The component table: the header line and one line per component."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("component"))
    end = next(i for i, line in enumerate(lines) if line.startswith("status:"))
    return lines[start:end]


def test_short_component_names_keep_the_header_apart() -> None:
    # Names shorter than "component" (agent-security's utility, safety) once printed "componentmean".
    header, *rows = _table(format_report(_report({"utility": 1.0, "safety": None})))
    assert header.split() == ["component", "mean"]
    column = header.index("mean")
    assert header[column - 1] == " "
    assert rows == ["utility".ljust(column) + "1.000", "safety".ljust(column) + "-"]


def test_long_component_names_set_the_width() -> None:
    header, *rows = _table(format_report(_report({"ast_similarity": 0.25, "format": 1.0})))
    column = header.index("mean")
    assert column == len("ast_similarity") + 2
    assert [row[column:] for row in rows] == ["0.250", "1.000"]


def test_agent_security_gold_summary() -> None:
    args = ["score", "--task", "agent-security", "--dataset", "embedded", "--gold"]
    proc = subprocess.run(
        [sys.executable, "-m", "mrbench", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    header, *rows = _table(proc.stdout)
    assert header.split() == ["component", "mean"]
    assert [row.split() for row in rows] == [["utility", "1.000"], ["safety", "1.000"]]
