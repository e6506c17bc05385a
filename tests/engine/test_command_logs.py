"""``<results>/logs`` does not grow without end: a command's log, as it starts, deletes the oldest
command logs past the newest ``$MRBENCH_KEEP_LOGS`` (100), never one younger than a day, and
never a sweep's own folder of cell logs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.runs import console


def test_the_oldest_command_logs_go_as_a_new_one_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    monkeypatch.setenv("MRBENCH_KEEP_LOGS", "3")
    logs = tmp_path / console.LOGS_DIR
    (logs / "my-sweep").mkdir(parents=True)
    sweep_log = logs / "my-sweep" / "cell-abc.log"
    sweep_log.write_text("a cell")
    now = time.time()
    days = {f"eval-{d}.log": now - d * 86400 for d in (2, 3, 4, 5, 6)} | {"ui-young.log": now - 3600}
    for name, mtime in days.items():
        (logs / name).write_text(name)
        os.utime(logs / name, (mtime, mtime))
    os.utime(sweep_log, (now - 30 * 86400, now - 30 * 86400))

    new = console.command_log_path("eval")

    kept = sorted(p.name for p in logs.glob("*.log"))
    # the newest three (one of them the young one); the new log is not written yet
    assert kept == ["eval-2.log", "eval-3.log", "ui-young.log"], kept
    assert sweep_log.is_file() and new.parent == logs


def test_young_logs_are_kept_past_the_count_and_zero_keeps_all(tmp_path: Path, monkeypatch) -> None:
    for n in range(4):
        (tmp_path / f"eval-{n}.log").write_text("x")  # all written just now
    monkeypatch.setenv("MRBENCH_KEEP_LOGS", "1")
    assert console.prune_command_logs(tmp_path) == []
    old = time.time() - 2 * 86400
    for path in tmp_path.glob("*.log"):
        os.utime(path, (old, old))
    monkeypatch.setenv("MRBENCH_KEEP_LOGS", "0")
    assert console.prune_command_logs(tmp_path) == []
    monkeypatch.setenv("MRBENCH_KEEP_LOGS", "2")
    assert len(console.prune_command_logs(tmp_path)) == 2 and len(list(tmp_path.glob("*.log"))) == 2
    monkeypatch.setenv("MRBENCH_KEEP_LOGS", "many")
    with pytest.raises(UserError, match="MRBENCH_KEEP_LOGS='many' must be an integer"):
        console.prune_command_logs(tmp_path)
