"""CI prints each stage's time at its end (install, the default suite, the slow tests, the engine
tests on the transformers the vLLM extra pins), also when a stage fails, and names a total over
its budget of an hour."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("install", "default suite", "slow tests", "vllm-pin install", "vllm-pin engine tests")


def test_ci_runs_every_stage_through_the_stage_timer() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "source .ci/stages.sh" in ci
    named = re.findall(r'^stage "([^"]+)" ', ci, flags=re.MULTILINE)
    assert tuple(named) == STAGES, named
    assert subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")]).returncode == 0


def _run(script: str, budget_s: int = 3600) -> subprocess.CompletedProcess[str]:
    head = f"set -euo pipefail\nCI_BUDGET_S={budget_s}\nsource .ci/stages.sh\n"
    return subprocess.run(["bash", "-c", head + script], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_the_stage_times_are_printed_at_the_end_even_when_a_stage_fails() -> None:
    script = 'inner() { false; echo "not reached"; }\nstage one true\nstage "two words" sleep 1\n'
    done = _run(script + "stage three inner\nstage four true\n")
    assert done.returncode == 1 and "not reached" not in done.stdout  # set -e holds inside a stage
    lines = done.stdout.splitlines()
    assert lines[0] == "CI stage times:", done.stdout
    assert re.fullmatch(r"  one +0 s", lines[1]), lines
    assert re.fullmatch(r"  two words +[12] s", lines[2]), lines
    assert re.fullmatch(r"  three +\d+ s  \(failed: exit 1\)", lines[3]), lines
    assert re.fullmatch(r"  total +\d+ s", lines[4]) and len(lines) == 5, lines


def test_a_total_over_the_budget_is_named() -> None:
    done = _run("stage slow sleep 1\n", budget_s=0)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "  the total is over the budget of 0 s", done.stdout


LEFT_TO_PYTEST_M_SLOW = {
    # All 1,995 AgentDojo cases through AgentDojo's own pipeline: 4 minutes, on data that ships pinned.
    "tests/tasks/agent_security/test_security_agentdojo.py": "4 minutes",
}
"""Test files with slow tests that CI's slow stage leaves to ``pytest -m slow``, with the reason."""


SLOW_MARK = re.compile(
    r"^\s*@pytest\.mark\.slow\b|marks=pytest\.mark\.slow\b|^pytestmark\b.*\bslow\b", re.MULTILINE
)


def _slow_stage_files(ci: str) -> set[str]:
    command = re.search(
        r'^stage "slow tests" pytest -m slow (.*?)(?<!\\)\n', ci, flags=re.MULTILINE | re.DOTALL
    )
    assert command, "no slow-tests stage in .ci/run"
    return set(command.group(1).replace("\\\n", " ").split())


def test_every_file_with_slow_tests_is_in_the_slow_stage() -> None:
    """A slow test no stage runs would rot unseen: each test file marking one is in CI's slow stage
    (or named in :data:`LEFT_TO_PYTEST_M_SLOW`), and each file the stage names exists."""
    listed = _slow_stage_files((REPO / ".ci" / "run").read_text())
    marked = {
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if SLOW_MARK.search(path.read_text(encoding="utf-8"))
    }
    assert marked - listed - set(LEFT_TO_PYTEST_M_SLOW) == set()
    assert {name for name in listed if not (REPO / name).is_file()} == set()
    assert marked & set(LEFT_TO_PYTEST_M_SLOW) == set(LEFT_TO_PYTEST_M_SLOW)  # still slow, still left
