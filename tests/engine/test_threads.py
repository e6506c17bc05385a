"""The thread policy: one intra-op thread for tiny models whatever the machine, a share otherwise,
``MRBENCH_THREADS`` over both, and a sweep worker keeping what its parent gave it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mrbench.core.errors import UserError
from mrbench.core.results_layout import MODEL_MARKER
from mrbench.engine.models.tiny import TINY_TASK_SETTINGS
from mrbench.engine.processes import threads


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("MRBENCH_THREADS", raising=False)
    monkeypatch.setattr(threads, "_given", [])
    for var in (*threads.THREAD_VARS, "OMP_WAIT_POLICY"):
        monkeypatch.delenv(var, raising=False)
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_tiny_model_gets_one_thread_whatever_the_cores_and_workers(monkeypatch, tmp_path):
    monkeypatch.setattr(threads, "available_cores", lambda: 64)
    trained = tmp_path / "checkpoint"
    trained.mkdir()
    (trained / MODEL_MARKER).write_text(json.dumps({"task_settings": TINY_TASK_SETTINGS}))
    for model in ("tiny", "tiny-l", str(trained)):
        assert [threads.threads_for(model, workers=w) for w in (1, 2, 8)] == [1, 1, 1], model


def test_another_model_gets_its_share_of_the_cores(monkeypatch, tmp_path):
    monkeypatch.setattr(threads, "available_cores", lambda: 16)
    other = tmp_path / "pretrained"
    other.mkdir()
    (other / MODEL_MARKER).write_text(json.dumps({"task_settings": {"prompt_style": "chat"}}))
    assert threads.threads_for("Qwen/Qwen2.5-0.5B-Instruct", workers=1) == 16
    assert threads.threads_for(str(other), workers=3) == 5
    assert threads.threads_for("smollm2-135m", workers=32) == 1


def test_the_environment_variable_overrides_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv("MRBENCH_THREADS", "3")
    assert threads.threads_for("tiny") == 3 and threads.threads_for("Qwen/Qwen3-8B", workers=4) == 3
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("MRBENCH_THREADS", bad)
        with pytest.raises(UserError, match=rf"MRBENCH_THREADS='{bad}' must be a positive integer"):
            threads.threads_for("tiny")


def test_applying_sets_torch_the_environment_and_passive_waits():
    import torch

    assert threads.use_threads_for("tiny") == 1
    assert torch.get_num_threads() == 1
    assert all(os.environ[var] == "1" for var in threads.THREAD_VARS)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_sweep_worker_keeps_the_threads_its_parent_gave_it():
    import torch

    threads.apply_threads(2, given=True)
    assert threads.use_threads_for("tiny") == 2 and torch.get_num_threads() == 2


def test_a_new_process_starts_with_the_policys_pool():
    env = {**os.environ, **threads.thread_env(1)}
    code = "import torch; print(torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_a_ray_task_gets_its_cpus_unless_the_model_is_tiny(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    assert threads.threads_for("Qwen/Qwen3-8B", share=8) == 8
    assert threads.threads_for("tiny", share=8) == 1
