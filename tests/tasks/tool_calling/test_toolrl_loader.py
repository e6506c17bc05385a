"""ToolRL's data set (RLLA) as tool-calling train and eval data: fixture files in ToolRL's own
formats (``rlla_rl.json`` and verl parquet rows), its train/test splits, gold scoring,
``mrbench score`` / ``eval`` / ``run`` on them, and a one-line error naming the dataset for every
bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.evaluation.scoring import score_task
from mrbench.tasks.tool_calling import tool_calling
from mrbench.tasks.tool_calling.data import split_of
from mrbench.tasks.tool_calling.toolrl import load_items, load_split

TRAIN_SIDE = ["0", "1", "2", "6", "7"]
TEST_SIDE = ["3", "4", "5"]
"""Positions in ``rlla_rl.json`` on each side of the hash split (its user turn, 20% test)."""


@pytest.fixture
def raw(fixtures_dir: Path) -> Path:
    return fixtures_dir / "toolrl" / "rlla_rl.json"


def _verl_rows(raw: Path, split: str, positions: list[int]) -> list[dict]:
    """Rows of ToolRL's ``rlla_4k/<split>.parquet`` (as its ``rlla.py`` writes them)."""
    records = json.loads(raw.read_text())
    return [
        {
            "data_source": "rlla",
            "prompt": [
                {"role": "system", "content": records[p]["instruction"]},
                {"role": "user", "content": records[p]["input"]},
            ],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": records[p]["output"]},
            "extra_info": {"split": split, "index": i, **records[p]},
        }
        for i, p in enumerate(positions)
    ]


def _parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _rlla_4k(raw: Path, folder: Path) -> Path:
    """ToolRL's ``dataset/rlla_4k``: ``train.parquet`` (5 rows) and ``test.parquet`` (3 rows)."""
    _parquet(_verl_rows(raw, "train", [int(p) for p in TRAIN_SIDE]), folder / "train.parquet")
    _parquet(_verl_rows(raw, "test", [int(p) for p in TEST_SIDE]), folder / "test.parquet")
    return folder


def test_raw_json_maps_prompt_and_gold_calls(raw: Path) -> None:
    items = load_items("toolrl", str(raw))
    assert [i.id for i in items] == [str(p) for p in range(8)]
    assert [i.kind for i in items[:3]] == ["toolrl", "toolrl", "toolrl_no_call"]
    first = items[0].sample()
    assert [m["role"] for m in first.prompt] == ["system", "user"]
    assert first.prompt[0]["content"].startswith("You are a helpful multi-turn dialogue assistant")
    assert "Alex Ferguson" in first.prompt[1]["content"]
    assert json.loads(first.columns["gold_calls"]) == [
        {"name": "Search Managers", "parameters": {"name": "Alex Ferguson"}}
    ]
    assert [c["name"] for c in json.loads(items[1].gold_calls())] == ["is_palindrome", "count_vowels"]
    assert json.loads(items[2].gold_calls()) == []


def test_a_single_raw_file_is_split_by_the_hash_of_its_user_turn(raw: Path) -> None:
    train, test = load_split(str(raw), "train"), load_split(str(raw), "test")
    assert [i.id for i in train] == TRAIN_SIDE and [i.id for i in test] == TEST_SIDE
    assert all(split_of(str(i.prompt[-1]["content"])) == "train" for i in train)
    task = tool_calling(dataset="toolrl", data_path=str(raw), n_train=3, n_eval=2)
    assert [s.id for s in task.eval_samples()] == TEST_SIDE[:2]
    drawn = [s.id for s in task.train_samples()]
    assert len(drawn) == 3 and set(drawn) <= set(TRAIN_SIDE)
    # Deterministic for a seed, another draw for another seed, never a test item.
    again = tool_calling(dataset="toolrl", data_path=str(raw), n_train=3, n_eval=2)
    assert [s.id for s in again.train_samples()] == drawn
    seeds = {
        tuple(
            s.id
            for s in tool_calling(dataset="toolrl", data_path=str(raw), n_train=3, seed=k).train_samples()
        )
        for k in range(6)
    }
    assert len(seeds) > 1
    every = tool_calling(dataset="toolrl", data_path=str(raw), n_train=100).train_samples()
    assert sorted(s.id for s in every) == sorted(TRAIN_SIDE)
    assert {s.columns["kind"] for s in every} == {"toolrl", "toolrl_no_call"}
    gold = {i.id: i.gold_calls() for i in load_items("toolrl", str(raw))}
    assert all(s.columns["gold_calls"] == gold[s.id] for s in every)


def test_the_rlla_4k_folder_trains_on_train_parquet_and_evaluates_test_parquet(
    raw: Path, tmp_path: Path
) -> None:
    folder = _rlla_4k(raw, tmp_path / "rlla_4k")
    task = tool_calling(dataset="toolrl", data_path=str(folder), n_train=10, n_eval=10)
    assert [s.id for s in task.eval_samples()] == ["test-0", "test-1", "test-2"]
    assert sorted(s.id for s in task.train_samples()) == [f"train-{i}" for i in range(5)]
    by_text = {i.prompt[-1]["content"]: i.gold_calls() for i in load_items("toolrl", str(raw))}
    for sample in task.train_samples() + task.eval_samples():
        assert sample.columns["gold_calls"] == by_text[sample.prompt[-1]["content"]]
    # `mrbench score` reads the folder's test split, as before.
    assert [i.id for i in load_items("toolrl", str(folder))] == ["test-0", "test-1", "test-2"]


def test_a_single_verl_parquet_keeps_the_split_its_rows_name(raw: Path, tmp_path: Path) -> None:
    # Rows tagged against the hash split: the tag decides.
    rows = _verl_rows(raw, "train", [3, 4]) + _verl_rows(raw, "test", [0])
    rows[2]["extra_info"]["index"] = 9
    file = _parquet(rows, tmp_path / "mixed.parquet")
    assert [i.id for i in load_split(str(file), "train")] == ["train-0", "train-1"]
    assert [i.id for i in load_split(str(file), "test")] == ["test-9"]
    test_only = _parquet(_verl_rows(raw, "test", [0, 1]), tmp_path / "test.parquet")
    task = tool_calling(dataset="toolrl", data_path=str(test_only))
    assert [s.id for s in task.eval_samples()] == ["test-0", "test-1"]
    with pytest.raises(UserError, match=r"'toolrl': test.parquet holds no train-split item"):
        task.train_samples()


def test_gold_scores_exact_and_a_wrong_call_does_not(raw: Path, tmp_path: Path) -> None:
    gold = score_task("tool-calling", dataset="toolrl", gold=True, task_params={"data_path": str(raw)})
    assert gold.n == 8 and gold.status_counts == {"exact": 8} and gold.summary["exact_match"] == 1.0
    call = '{"name":"Search Managers","parameters":{"name":"Matt Busby"}}'
    wrong = f"<think></think>\n<tool_call>\n{call}\n</tool_call>"
    file = tmp_path / "in.jsonl"
    file.write_text(json.dumps({"dataset": "toolrl", "id": "0", "completion": wrong}) + "\n")
    report = score_task("tool-calling", input_path=file, task_params={"data_path": str(raw)})
    assert report.items[0]["status"] == "mismatch" and report.items[0]["rewards"]["exact_match"] == 0.0


def test_score_and_eval_through_the_cli(
    raw: Path, tmp_path: Path, mrbench_cli, eval_two, micro_model_dir: Path
) -> None:
    param = f"data_path={raw}"
    code, out, err = mrbench_cli(
        "score", "--task", "tool-calling", "--dataset", "toolrl", "--gold", "--task-param", param, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["summary"]["exact_match"] == 1.0
    report = eval_two(micro_model_dir, "tool-calling", "toolrl", param)
    assert (report["dataset"], report["n"]) == ("toolrl", 2) and "exact_match" in report["metrics"]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda tmp: "", "--task-param data_path="),
        (lambda tmp: str(tmp / "absent.json"), "does not exist"),
        (
            lambda tmp: _write(
                tmp / "t.jsonl",
                '{"instruction": "s", "input": "u", "output": "<response>x</response>"}\n{oops\n',
            ),
            "t.jsonl line 2: not valid JSON",
        ),
        (
            lambda tmp: _write(tmp / "t.json", '[{"instruction": "s", "input": "u"}]'),
            "t.json item 0: missing field 'output'",
        ),
        (
            lambda tmp: _write(tmp / "t.json", '[{"instruction": "s", "input": 3, "output": ""}]'),
            "field 'input' must be str",
        ),
        (
            lambda tmp: _write(tmp / "t.json", '[{"instruction": "s", "input": "u", "output": "no tags"}]'),
            "no <tool_call> and no <response>",
        ),
        (lambda tmp: _write(tmp / "t.txt", "x"), "is not a .jsonl, .json, .parquet file"),
    ],
    ids=["no-path", "missing", "bad-line", "missing-field", "wrong-type", "bad-gold", "wrong-suffix"],
)
def test_bad_input_is_one_user_error_naming_the_dataset(tmp_path: Path, make, says: str) -> None:
    with pytest.raises((UserError, ValueError)) as info:
        tool_calling(dataset="toolrl", data_path=make(tmp_path)).eval_samples()
    message = str(info.value)
    assert "'toolrl'" in message and says in message and "\n" not in message


def test_a_folder_without_a_split_file_names_it(raw: Path, tmp_path: Path) -> None:
    folder = tmp_path / "rlla_4k"
    _parquet(_verl_rows(raw, "test", [3]), folder / "test.parquet")
    task = tool_calling(dataset="toolrl", data_path=str(folder))
    assert [s.id for s in task.eval_samples()] == ["test-0"]
    with pytest.raises(UserError, match=r"'toolrl': folder .* has no train.parquet") as info:
        task.train_samples()
    assert "\n" not in str(info.value)


def test_unavailable_data_exits_2_through_the_cli(mrbench_cli, tmp_path: Path) -> None:
    code, _, err = mrbench_cli("score", "--task", "tool-calling", "--dataset", "toolrl", "--gold")
    assert code == 2 and "'toolrl'" in err and "data_path" in err
    code, _, err = mrbench_cli(
        "score",
        "--task",
        "tool-calling",
        "--dataset",
        "toolrl",
        "--gold",
        "--task-param",
        f"data_path={tmp_path / 'x'}",
    )
    assert code == 2 and "does not exist" in err


def test_a_hub_id_while_the_hub_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    from mrbench.tasks import sources

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: False)
    with pytest.raises(UserError, match=r"'toolrl'.*hub is unreachable") as info:
        tool_calling(dataset="toolrl", data_path="someone/rlla-4k").eval_samples()
    assert "data_path" in str(info.value)


def test_mrbench_run_trains_on_the_train_split_and_finishes(
    raw: Path, tmp_path: Path, mrbench_cli, micro_model_dir: Path
) -> None:
    """A real (micro) GRPO cell on the rlla_4k layout: trains on train.parquet, evaluates test.parquet."""
    from mlflow.tracking import MlflowClient

    folder = _rlla_4k(raw, tmp_path / "rlla_4k")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = {"dataset": "toolrl", "data_path": str(folder), "n_train": "4", "n_eval": "2"}
    settings["max_completion_tokens"] = "8"
    train = {"steps": "1", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "2"}
    args = ["run", "--model", str(micro_model_dir), "--task", "tool-calling", "--quiet"]
    args += ["--tracking-uri", uri, "--experiment", "toolrl", "--save", "none"]
    args += [x for k, v in settings.items() for x in ("--task-param", f"{k}={v}")]
    args += [x for k, v in train.items() for x in ("--train", f"{k}={v}")]
    code, out, err = mrbench_cli(*args)
    assert code == 0, err[-3000:]
    assert "FINISHED" in out
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("toolrl").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["task.dataset"] == "toolrl" and "eval/exact_match" in run.data.metrics
    local = Path(client.download_artifacts(run.info.run_id, "samples/completions.jsonl", str(tmp_path)))
    trained = {json.loads(line)["prompt"] for line in local.read_text().splitlines()}
    train_texts = {s.prompt[-1]["content"] for s in load_split(str(folder), "train")}
    assert trained and trained <= train_texts
