"""The pre-training evaluation is computed once per (model, task settings, eval limit) and reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import resolve_spec
from mrbench.engine.evaluation import eval_cache

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
TRAIN = {"steps": "1", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results"
    monkeypatch.setenv("MRBENCH_RESULTS", str(path))
    return path


def _model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def test_key_depends_on_model_files_task_settings_and_limit(tmp_path: Path) -> None:
    model = _model(tmp_path)
    key = eval_cache.cache_key(str(model), "tool-calling", "3", {"n_eval": "4"}, 4)
    assert key is not None
    assert key == eval_cache.cache_key(str(model), "tool-calling", "3", {"n_eval": "4"}, 4)
    others = {
        eval_cache.cache_key(str(model), "code-generation", "3", {"n_eval": "4"}, 4),
        eval_cache.cache_key(str(model), "tool-calling", "4", {"n_eval": "4"}, 4),
        eval_cache.cache_key(str(model), "tool-calling", "3", {"n_eval": "8"}, 4),
        eval_cache.cache_key(str(model), "tool-calling", "3", {"n_eval": "4"}, 0),
    }
    assert key not in others and len(others) == 4
    (model / "model.safetensors").write_bytes(b"\1" * 17)  # a rebuilt model is a new key
    assert eval_cache.cache_key(str(model), "tool-calling", "3", {"n_eval": "4"}, 4) != key


def test_hub_ids_are_not_cached(tmp_path: Path, results: Path) -> None:
    assert eval_cache.cache_key("Qwen/Qwen2.5-0.5B", "tool-calling", "3", {}, 0) is None
    eval_cache.write(None, {"m": 1.0}, [], "run")  # a no-op, not an error
    assert eval_cache.read(None) is None and not (results / "eval_cache").exists()


def test_round_trip_and_damaged_entries(tmp_path: Path, results: Path) -> None:
    key = eval_cache.cache_key(str(_model(tmp_path)), "tool-calling", "3", {}, 0)
    assert eval_cache.read(key) is None
    eval_cache.write(key, {"exact_match": 0.25}, [{"id": "a", "completion": "x"}], "run-1")
    cached = eval_cache.read(key)
    assert cached == eval_cache.CachedEval({"exact_match": 0.25}, [{"id": "a", "completion": "x"}], "run-1")
    path = next((results / "eval_cache").glob("*.json"))
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    path.write_text('{"metrics": ')  # a truncated entry is evaluated again, never trusted
    assert eval_cache.read(key) is None


def test_second_cell_reuses_the_first_cells_evaluation(micro_model_dir, tmp_path, results) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    model = str(micro_model_dir)
    first = resolve_spec("grpo", "tool-calling", model, 0, task_params=TASK_PARAMS, train=TRAIN)
    second = resolve_spec("gdpo", "tool-calling", model, 1, task_params=TASK_PARAMS, train=TRAIN)
    a = run_cell(first, tracking_uri=uri, experiment="cache", progress=False, save="none")
    b = run_cell(second, tracking_uri=uri, experiment="cache", progress=False, save="none")
    assert a.metrics_before == b.metrics_before

    client = MlflowClient(uri)
    run_a, run_b = client.get_run(a.run_id), client.get_run(b.run_id)
    assert layout.tag(layout.EVAL_BEFORE_FROM) not in run_a.data.tags  # computed its own
    assert run_b.data.tags[layout.tag(layout.EVAL_BEFORE_FROM)] == a.run_id
    before = [layout.eval_before_metric(k) for k in a.metrics_before]
    assert {k: run_b.data.metrics[k] for k in before} == {k: run_a.data.metrics[k] for k in before}
    # The reused samples are logged in full, as if computed.
    paths_b = {f.path for f in client.list_artifacts(b.run_id, "eval")}
    assert layout.EVAL_SAMPLES_BEFORE in paths_b


HOLDER = """
import sys, time
from mrbench.engine.evaluation import eval_cache
key = sys.argv[1]
with eval_cache.computing(key):
    print("holding", flush=True)
    time.sleep(1.5)  # evaluating
    eval_cache.write(key, {"m": 0.5}, [], "holder-run")
"""


def test_a_cell_asking_for_a_key_being_evaluated_waits_and_reads_it(tmp_path: Path, results: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    key = eval_cache.cache_key(str(_model(tmp_path)), "tool-calling", "1", {}, 4)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, key], env={**os.environ}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        start = time.perf_counter()
        with eval_cache.computing(key):
            waited = time.perf_counter() - start
            cached = eval_cache.read(key)
        assert waited > 0.5  # it did not evaluate alongside the holder
        assert cached is not None and cached.run_id == "holder-run" and cached.metrics == {"m": 0.5}
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0
    with eval_cache.computing(None):  # not cacheable: nothing to hold
        pass


def test_a_holder_that_dies_releases_the_key(tmp_path: Path, results: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    key = eval_cache.cache_key(str(_model(tmp_path)), "tool-calling", "1", {}, 4)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace("time.sleep(1.5)", "time.sleep(600)"), key],
        env={**os.environ},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    with eval_cache.computing(key):
        assert eval_cache.read(key) is None  # the dead holder wrote nothing: this cell evaluates


def test_ranks_of_a_cell_take_rank_0s_entry_and_only_rank_0_writes(tmp_path: Path) -> None:
    """Finding 12 of issue 33: every rank follows rank 0's read (all evaluate or none), ranks > 0
    take no lock and write nothing, and no entry names the empty run id of a rank that does not log."""
    import json

    import torch.multiprocessing as mp
    from cache_world import cache_on_rank

    mp.spawn(cache_on_rank, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == {"run_id": "run-of-rank-0", "written": ["fresh.json", "k.json"]}
    assert ranks[1] == {"run_id": "run-of-rank-0", "written": []}


def test_an_entry_needs_the_run_that_computed_it(results: Path) -> None:
    with pytest.raises(ValueError, match="run id"):
        eval_cache.write("k", {"m": 1.0}, [], "")
    assert eval_cache.read("k") is None


def test_ranks_above_0_never_wait_for_the_key(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank > 0 holding or waiting for the lock while rank 0 waits for it (or for the rank in a
    collective) would hang the cell: only rank 0 takes it."""
    import threading

    from filelock import FileLock

    key = "k" * 32
    (results / "eval_cache").mkdir(parents=True)
    held = FileLock(str(results / "eval_cache" / f".{key}.lock"), thread_local=False)
    entered = threading.Event()

    def enter() -> None:
        with eval_cache.computing(key):
            entered.set()

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with held:
        waiter = threading.Thread(target=enter, daemon=True)
        waiter.start()
        assert entered.wait(10)
