"""The sweep's console: the live table reads each running cell's progress file; finished cells get
one line with their primary metric before → after, failed ones name their log."""

from __future__ import annotations

import io
import re

from fakes import fake_cell, fake_resolve_spec
from rich.console import Console

from mrbench.engine.runs import console as cell_console
from mrbench.engine.runs import phases
from mrbench.sweeps.cell import Cell, CellOutcome
from mrbench.sweeps.progress import SweepProgress, cell_folder


def _cell(method: str, seed: int = 0) -> Cell:
    return Cell(fake_resolve_spec(method, "tool-calling", "tiny", seed))


def _text(screen: Console) -> str:
    return screen.file.getvalue()


def test_table_shows_the_step_a_running_cell_is_in(tmp_path, monkeypatch):
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(phases, "WRITE_EVERY_S", 0.0)  # every update reaches the file
    running, waiting = _cell("grpo"), _cell("gdpo")
    screen = Console(file=io.StringIO(), width=200, height=30)
    progress = SweepProgress(screen, total=2, workers=1, live=False)
    progress.start(running)
    with phases.progress_file(cell_folder(running) / phases.PROGRESS_NAME):
        train = phases.start("train", 30, "steps")
        train.update(12)
        screen.print(progress._table())
    text = _text(screen)
    assert "▶ cell 1/2" in text and waiting.label not in text
    assert "train 12/30 steps · ETA" in text and "1 waiting" in text
    assert not (cell_folder(running) / phases.PROGRESS_NAME).exists()  # removed when the cell ends


def test_finished_line_has_the_primary_metric_and_a_failure_names_the_log(tmp_path, monkeypatch, store):
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = store
    done, failed = _cell("grpo"), _cell("gdpo")
    result = fake_cell(done.spec, tracking_uri=uri, experiment="progress-test")
    log = cell_folder(failed) / cell_console.CELL_LOG_NAME
    log.parent.mkdir(parents=True)
    log.write_text("Traceback …")
    screen = Console(file=io.StringIO(), width=300)
    progress = SweepProgress(screen, total=2, workers=1, live=False, tracking_uri=uri)
    for cell in (done, failed):
        progress.start(cell)
    progress.finish(CellOutcome(done, "FINISHED", result.run_id, 28.0))
    progress.finish(CellOutcome(failed, "FAILED", None, 5.0, "RuntimeError: boom"))
    lines = _text(screen).splitlines()
    finished = next(line for line in lines if line.startswith("FINISHED"))
    before, after = result.metrics_before["exact_match"], result.metrics_after["exact_match"]
    assert finished == f"FINISHED {done.label} in 0:28 · exact_match {before:.3f} → {after:.3f}"
    failure = next(line for line in lines if line.startswith("FAILED"))
    assert failure == f"FAILED {failed.label} in 0:05 — RuntimeError: boom (log: {log})"


def test_plain_console_prints_a_running_cells_step_when_it_changes(tmp_path, monkeypatch):
    import time

    from mrbench.sweeps import progress as progress_module

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(phases, "WRITE_EVERY_S", 0.0)
    monkeypatch.setattr(progress_module, "PLAIN_POLL_S", 0.02)
    cell = _cell("grpo")
    screen = Console(file=io.StringIO(), width=200)
    progress = SweepProgress(screen, total=1, workers=1, live=False)

    def wait_for(pattern: str) -> None:
        """A line matching ``pattern``. The printer polls the file while the test writes it, so the
        line shows the count it first saw of the phase (0 when it looked between start and
        update): the contract is one line per phase change, not its count."""
        deadline = time.monotonic() + 10
        while not re.search(pattern, _text(screen), re.M) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert re.search(pattern, _text(screen), re.M), _text(screen)

    try:
        progress.start(cell)
        with phases.progress_file(cell_folder(cell) / phases.PROGRESS_NAME):
            build = phases.start("warm start", 1000, "steps")
            build.update(384)
            wait_for(rf"^  {re.escape(cell.label)}: warm start (0|384)/1000 steps")
            build.update(500)  # same step, within PLAIN_EVERY_S: no second line
            time.sleep(0.2)
            build.end()
            train = phases.start("train", 30, "steps")
            train.update(3)
            wait_for(rf"^  {re.escape(cell.label)}: train (0|3)/30 steps")
    finally:
        progress.close()
    assert "warm start 500/1000" not in _text(screen)
    assert sum(line.startswith(f"  {cell.label}: warm start") for line in _text(screen).splitlines()) == 1
