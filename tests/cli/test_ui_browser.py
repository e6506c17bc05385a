"""`mrbench ui SWEEP` in a real browser: headless Chromium loads the URL it prints and the rendered
runs table shows every cell of the sweep with its primary metric; SIGINT then stops the server.

Needs Debian's ``chromium`` (``.ci/run`` installs it); skipped without it.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cli_procs import alive, default_stop_signals, descendants, listening, mrbench_script, wait_until
from fakes import synthetic_sweep
from mlflow.tracking import MlflowClient

from mrbench.core import layout

INSTALL = "apt-get update && apt-get install -y chromium"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN_NAME_COLUMN = "attributes.`Run Name`"  # the runs table's column ids (MLflow 3.17)
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=f"no chromium binary; install it: {INSTALL}")


class _GridCells(HTMLParser):
    """The text of every cell of the page's AG Grid tables, keyed by ``(row-index, col-id)``.

    The runs table draws its pinned columns (run name) and its scrolled columns (metrics) in
    separate containers; a row's cells share the row's ``row-index`` attribute across them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], str] = {}
        self._stack: list[tuple[str, str | None, str | None]] = []  # (tag, row-index, col-id)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        row, col = self._stack[-1][1:] if self._stack else (None, None)
        row = found.get("row-index", row)
        col = found.get("col-id", col)
        if tag not in VOID:
            self._stack.append((tag, row, col))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1][1] is not None and self._stack[-1][2] is not None:
            key = (self._stack[-1][1], self._stack[-1][2])
            self.cells[key] = self.cells.get(key, "") + data


def grid_rows(dom: str) -> list[dict[str, str]]:
    """The rendered table rows of ``dom``: for each row, its cells' text by column id."""
    parser = _GridCells()
    parser.feed(dom)
    rows: dict[str, dict[str, str]] = {}
    for (row, col), text in parser.cells.items():
        rows.setdefault(row, {})[col] = text.strip()
    return list(rows.values())


def js_number(value: float) -> str:
    """``value`` as the browser prints a number (shortest round-trip digits, like Python's repr)."""
    return str(int(value)) if value.is_integer() else repr(value)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_ui_page_shows_the_cells_and_their_primary_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))  # artifacts, also the server's
    uri = f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}"
    synthetic_sweep(
        uri,
        "ui-sweep",
        methods=["grpo", "corrgrpo"],
        tasks=["tool-calling", "code-generation"],
        models=["tiny"],
        seeds=[0, 1],
        steps=4,
    )
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("ui-sweep").experiment_id
    cells = client.search_runs([experiment_id], f"tags.`{layout.tag(layout.RUN_KEY)}` LIKE '%'")
    expected = {}  # cell label (run name) -> (primary-metric column, value after training)
    for run in cells:
        metric = layout.eval_metric(layout.read_tag(run.data.tags, layout.PRIMARY_METRIC))
        expected[run.info.run_name] = (f"metrics.`{metric}`", js_number(run.data.metrics[metric]))
    assert len(expected) == 8

    port = free_port()
    proc = subprocess.Popen(
        [mrbench_script(), "ui", "ui-sweep", "--port", str(port), "--tracking-uri", uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_stop_signals,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    server: list[int] = []
    try:

        def printed_url() -> str | None:
            ready = [line for line in lines if line.startswith("ready: ")]
            return ready[0].removeprefix("ready: ").strip() if ready else None

        url = wait_until(printed_url, 120, "`mrbench ui` to print its URL")
        assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs?")
        assert "workflowType=machine_learning" in url  # the Model-training pages, not GenAI's
        server = descendants(proc.pid)
        assert server, "`mrbench ui` started no server process"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1920,1200"]
        browser = subprocess.run(
            [CHROMIUM, *flags, "--virtual-time-budget=30000", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=180,
        )
        dom = browser.stdout
        assert "<title>Runs - " in dom, f"not the runs page: {dom[:300]!r} {browser.stderr[-500:]}"
        rows = grid_rows(dom)
        for label, (column, value) in expected.items():
            row = next((r for r in rows if r.get(RUN_NAME_COLUMN) == label), None)
            assert row is not None, (
                f"cell {label} not in the page; rows: {[r.get(RUN_NAME_COLUMN) for r in rows]}"
            )
            assert row.get(column) == value, f"{label}: {column} shows {row.get(column)!r}, expected {value}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C: stops the server it started
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    reader.join(timeout=10)
    assert "stopping the MLflow UI" in "".join(lines)
    wait_until(lambda: not alive(server), 30, "the MLflow server processes to exit")
    assert not listening(port)
