"""``mrbench eval`` works offline on the tiny model and on a trained cell's checkpoint for every
offline dataset of every task: tool-calling embedded and every BFCL category (when ``bfcl-eval`` is
installed), code-generation embedded and HumanEval, agent-security embedded and AgentDojo.

Slow (``-m slow``): one real training cell, then two evaluations per dataset (about 5 minutes on 2
cores). The tiny preset comes from the machine's model cache when it has one (the cache is keyed
by content, so it is the model a fresh build would give), else it is built here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from collections.abc import Iterator

import pytest
from mlflow.tracking import MlflowClient

import mrbench.core.layout as layout
from mrbench.cli import app as cli_app
from mrbench.store.local import results_dir
from mrbench.tasks.tool_calling.bfcl import INSTALL_HINT
from mrbench.tasks.tool_calling.task import DATASETS as TOOL_DATASETS

pytestmark = pytest.mark.slow

OFFLINE: dict[str, tuple[str, ...]] = {
    "tool-calling": ("embedded", *(d for d in TOOL_DATASETS if d.startswith("bfcl"))),
    "code-generation": ("embedded", "humaneval"),
    "agent-security": ("embedded", "agentdojo"),
}
CASES = [(task, dataset) for task, datasets in OFFLINE.items() for dataset in datasets]
LIMIT = "2"
HAS_BFCL = importlib.util.find_spec("bfcl_eval") is not None


@pytest.fixture(scope="module")
def offline_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(tracking URI, run id of a trained tiny cell)``, with the hub unreachable for the module."""
    from mrbench.engine.cell.runner import run_cell
    from mrbench.engine.config import resolve_spec

    root = tmp_path_factory.mktemp("offline-eval")
    cache = results_dir() / "models"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRBENCH_RESULTS", str(root / "results"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_ENDPOINT", "https://hub.invalid")
        (root / "results").mkdir()
        if cache.is_dir():
            os.symlink(cache, root / "results" / "models")
        uri = f"sqlite:///{root / 'mlflow.db'}"
        spec = resolve_spec(
            "grpo",
            "tool-calling",
            "tiny",
            0,
            task_params={"n_train": 8, "n_eval": 2},
            train={"steps": 1, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 1},
        )
        cell = run_cell(spec, tracking_uri=uri, experiment="cells", progress=False)
        assert cell.status == "FINISHED" and cell.checkpoint_dir
        yield uri, cell.run_id


def _eval(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["mrbench", "eval", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main(cli_app.app)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.mark.parametrize("model", ["tiny", "checkpoint"])
@pytest.mark.parametrize(("task", "dataset"), CASES, ids=[f"{t}/{d}" for t, d in CASES])
def test_eval_works_offline_on_every_offline_dataset(
    offline_store, capsys, monkeypatch, model: str, task: str, dataset: str
) -> None:
    if dataset.startswith("bfcl") and not HAS_BFCL:
        pytest.skip(f"BFCL needs the optional 'bfcl-eval' package: {INSTALL_HINT}")
    uri, cell_run = offline_store
    name = "tiny" if model == "tiny" else f"run:{cell_run}"
    args = ["--model", name, "--task", task, "--dataset", dataset, "--limit", LIMIT]
    code, out, err = _eval(capsys, monkeypatch, *args, "--tracking-uri", uri, "--json")
    assert code == 0, err[-3000:]
    report = json.loads(out)
    assert (report["task"], report["dataset"]) == (task, dataset) and report["n"] >= 1
    metrics = report["metrics"]
    run = MlflowClient(tracking_uri=uri).get_run(report["run_id"])
    primary = layout.read_tag(run.data.tags, layout.PRIMARY_METRIC)
    assert primary in metrics and metrics[primary] is not None and math.isfinite(metrics[primary])
    assert all(v is None or math.isfinite(v) for v in metrics.values())
    assert run.info.status == "FINISHED"
    assert run.data.params[layout.EVAL_PARAM + "dataset"] == dataset
    logged = {layout.strip_prefix(layout.EVAL, k) for k in run.data.metrics if k.startswith(layout.EVAL)}
    assert {k for k, v in metrics.items() if v is not None} <= logged
    if model == "checkpoint":
        assert layout.read_tag(run.data.tags, layout.EVAL_OF) == cell_run
        assert layout.read_tag(run.data.tags, layout.METHOD) == "grpo"
    else:
        assert layout.tag(layout.EVAL_OF) not in run.data.tags
