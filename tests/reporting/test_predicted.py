"""The sweep report's "lab on these rewards": the sweep's lab step fits each task's cells' rewards
(``plan_like``), simulates the fitted scenario, and the findings set its predicted P beside the cells'
measured P, with one sentence on whether they agree."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from fakes import synthetic_sweep

from mrbench.core import layout
from mrbench.lab.fit import sample_rewards
from mrbench.lab.in_sweep import plan_like, run_jobs
from mrbench.lab.presets import get_scenario
from mrbench.reporting.context import load_context
from mrbench.reporting.findings import findings
from mrbench.reporting.predicted import Measured, Predicted, _sentence, read_predictions
from mrbench.reporting.stats import Interval
from mrbench.store.reader import Reader, open_reader

SWEEP = "rep-like"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Reader, list[str]]]:
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("predicted")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    synthetic_sweep(
        uri, SWEEP, methods=("grpo", "gdpo"), tasks=("tool-calling",), models=("tiny",), seeds=(0, 1)
    )
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(SWEEP).experiment_id
    cells = [r for r in client.search_runs([experiment]) if layout.read_tag(r.data.tags, layout.RUN_KEY)]
    for i, run in enumerate(cells):  # each cell kept its rewards (a cell's record: no response ids)
        record = replace(
            sample_rewards(get_scenario("paper-tools"), 8, prompts=16, seed=i), response_ids=None
        )
        path = folder / f"cell{i}" / layout.REWARDS_ARTIFACT
        path.parent.mkdir()
        record.save(path)
        client.log_artifact(run.info.run_id, str(path))
    said: list[str] = []
    jobs = plan_like(SWEEP, uri, ["grpo", "gdpo"], {}, 6, say=said.append)
    run_jobs(jobs, sweep=SWEEP, tracking_uri=uri, say=said.append)
    reader = open_reader(uri)
    yield uri, reader, said
    reader.close()


def test_the_findings_set_the_labs_prediction_beside_the_cells(store) -> None:
    _, reader, said = store
    assert said[-1].startswith("lab like-rep-like-tool-calling: 2 methods × 6 seeds")
    ctx = load_context(SWEEP, reader, reader.runs(reader.experiment_id(SWEEP)), command="c", store_note="s")
    predictions = read_predictions(ctx, reader)
    assert set(predictions) == {"tool-calling"}
    run = predictions["tool-calling"]
    lab_runs = reader.runs(reader.experiment_id(layout.lab_experiment("like-rep-like-tool-calling")))
    parent = next(r for r in lab_runs if r.run_id == run.run_id)
    command = "mrbench simulate --like sweep:rep-like --methods grpo,gdpo --seeds 6"
    assert layout.read_tag(parent.tags, layout.COMMAND) == command
    text = "\n".join(findings(ctx, predictions))
    assert (
        "*tool-calling: the lab on these rewards* (the scenario fitted to this task's cells' rewards, "
        f"6 seeds × 200 steps; lab run `{run.run_id}`)" in text
    )
    header = "| method | predicted P(> grpo), objective | seeds the lab needs | measured P(> grpo) |"
    assert header + " seeds for 80 % power |" in text
    row = next(line for line in text.splitlines() if line.startswith("| gdpo | "))
    assert "(2 seeds)" in row
    assert "They agree" in text or "They do not agree" in text
    assert findings(ctx) != findings(ctx, predictions)  # without predictions: the findings as before


def test_a_sweep_without_stored_rewards_gets_no_prediction(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic_sweep(
        uri, "old", methods=("grpo", "gdpo"), tasks=("tool-calling",), models=("tiny",), seeds=(0,)
    )
    said: list[str] = []
    assert plan_like("old", uri, ["grpo", "gdpo"], {}, 4, say=said.append) == []
    assert "has rewards.npz" in said[0] and "made before mrbench kept a cell's rewards" in said[0]


def _pair(
    lab: tuple[float, float, float], seeds_needed: int | None, cells: tuple[float, float, float], n: int
):
    direction = 1 if lab[1] > 0.5 else -1 if lab[2] < 0.5 else 0
    measured = 1 if cells[1] > 0.5 else -1 if cells[2] < 0.5 else 0
    return (
        "gdpo",
        Predicted(Interval(*lab), direction, seeds_needed),
        Measured(Interval(*cells), n, "3"),
        measured,
    )


def test_one_sentence_when_they_agree_and_one_when_they_do_not() -> None:
    none = _pair((0.5, 0.4, 0.6), None, (0.55, 0.3, 0.8), 3)
    assert _sentence([none], []) == (
        "They agree: on these rewards the estimators are predicted not to differ, and the cells resolve "
        "no difference either."
    )
    both = _pair((0.9, 0.8, 1.0), 5, (0.9, 0.7, 1.0), 5)
    assert (
        _sentence([both], []) == "They agree: the lab predicts gdpo > grpo, and the cells resolve the same."
    )
    few = _pair((0.9, 0.8, 1.0), 10, (0.6, 0.3, 0.9), 3)
    assert _sentence([], [few]) == (
        "They do not agree: gdpo: the lab predicts a difference (P = 0.90 [0.80, 1.00]) that 3 seeds of the "
        "cells do not resolve — too few seeds (the lab needs 10)."
    )
    enough = _pair(
        (0.0, 0.0, 0.0), 3, (0.7, 0.2, 1.0), 3
    )  # the lab's difference needs 3 seeds; the cells have 3
    assert _sentence([], [enough]) == (
        "They do not agree: gdpo: the lab predicts a difference (P = 0.00 [0.00, 0.00]) that 3 seeds of the "
        "cells do not resolve, though the lab resolves one of its size with 3 — on the cells' metric the "
        "difference is smaller or noisier than these rewards predict."
    )
    unexplained = _pair((0.5, 0.4, 0.6), None, (0.9, 0.7, 1.0), 5)
    assert (
        "the cells resolve a difference (P = 0.90 [0.70, 1.00]) that the lab does not predict"
        in _sentence([], [unexplained])
    )
