"""The report's model-size scaling section: per task run on several models, the primary metric
against the logged parameter count, in a table and a figure."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FAKE_SIZES, synthetic_sweep
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.reporting.build import build_report
from mrbench.reporting.scaling import human_size


@pytest.fixture
def uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _section(text: str) -> str:
    start = text.index("## Model-size scaling")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_scaling_table_and_figure_ordered_by_size(uri: str, tmp_path: Path) -> None:
    # Sweep order puts the larger model first: the table still goes smallest first.
    synthetic_sweep(
        uri,
        "ladder",
        methods=["grpo", "gdpo"],
        tasks=["tool-calling"],
        models=["tiny-s", "tiny"],
        seeds=[0, 1],
    )
    out = tmp_path / "report"
    text = build_report("ladder", tracking_uri=uri, out=out, log_to_parent=False).read_text()
    section = _section(text)
    rows = [line for line in section.splitlines() if line.startswith("| tiny")]
    assert [r.split(" | ")[0] for r in rows] == ["| tiny", "| tiny-s"]
    assert rows[0].split(" | ")[1] == human_size(FAKE_SIZES["tiny"]) == "560K"
    assert "| model | parameters | grpo | gdpo |" in section
    assert (out / "scaling-tool-calling.png").stat().st_size > 1000
    assert "![model-size scaling tool-calling](scaling-tool-calling.png)" in section

    # The numbers are each cell's mean of the final primary metric over its seeds.
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("ladder").experiment_id],
        filter_string="tags.`mrbench.model` = 'tiny' and tags.`mrbench.method` = 'gdpo'",
    )
    values = [r.data.metrics[layout.eval_metric("exact_match")] for r in runs]
    assert len(values) == 2
    mean = f"{sum(values) / 2:.3f}"
    assert rows[0].split(" | ")[3].startswith(mean)


def test_no_section_for_one_model_and_unknown_sizes_listed(uri: str, tmp_path: Path) -> None:
    synthetic_sweep(uri, "one", methods=["grpo"], tasks=["tool-calling"], models=["tiny"], seeds=[0, 1])
    text = build_report("one", tracking_uri=uri, out=tmp_path / "a", log_to_parent=False).read_text()
    assert "## Model-size scaling" not in text

    # A model whose runs log no size (an older run, here a hub id the fakes give no size) is listed
    # as unknown and left out of the figure; one model with a size is not enough for a line.
    models = ["tiny", "org/model"]
    synthetic_sweep(uri, "mixed", methods=["grpo"], tasks=["tool-calling"], models=models, seeds=[0])
    out = tmp_path / "b"
    section = _section(build_report("mixed", tracking_uri=uri, out=out, log_to_parent=False).read_text())
    assert "| org/model | unknown |" in section
    assert "No figure: fewer than two models with a logged parameter count." in section
    assert not (out / "scaling-tool-calling.png").exists()
