"""The lm-eval bridge end to end: a tiny randomly initialised Qwen2 and a locally trained tokenizer."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from mrbench.core.contracts import Sample
from mrbench.core.errors import UserError
from mrbench.engine.evaluation.generation import HFGenerator
from mrbench.kit.lm_eval_bridge import GenerationRun, export_lm_eval_task, run_generation_task, sample_to_row


@pytest.fixture(scope="module")
def gen(random_generator: Any) -> HFGenerator:
    """A 2-layer random Qwen2 with a tokenizer trained on two strings."""
    from mrbench.engine.models.tiny import train_tokenizer

    tok = train_tokenizer(["def add(a, b): return a + b", "What is the weather in Paris?"], vocab_size=300)
    return random_generator(tok, max_positions=512, seed=1)


def make_samples() -> list[Sample]:
    return [
        Sample("a", [{"role": "user", "content": "Write add."}], {"answer": "x"}),
        Sample(
            "b",
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"}],
            {"answer": "y"},
        ),
        Sample("c", [{"role": "user", "content": "a much longer prompt " * 5}]),
        Sample("d", [{"role": "user", "content": "x"}], {"answer": 3}),
    ]


def length_score(sample: Sample, completion: str) -> dict[str, float]:
    """A task-agnostic score: how long the completion is and whether it names the sample's id."""
    return {
        "chars": float(len(completion)),
        "has_id": float(sample.id in completion),
        "n_cols": len(sample.columns),
    }


def direct_greedy(gen: HFGenerator, sample: Sample, max_new_tokens: int) -> str:
    text = gen.tokenizer.apply_chat_template(sample.prompt, add_generation_prompt=True, tokenize=False)
    enc = gen.tokenizer(text, return_tensors="pt", add_special_tokens=False)
    out = gen.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    return gen.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def test_one_greedy_generation_per_sample_in_order(gen: HFGenerator) -> None:
    samples = make_samples()
    metrics = ["chars", "has_id", "n_cols"]
    run = run_generation_task(
        gen,
        samples,
        task_name="bridge_test",
        score_fn=length_score,
        metric_names=metrics,
        max_new_tokens=12,
        batch_size=3,
    )
    assert isinstance(run, GenerationRun)
    assert len(run.completions) == len(run.scores) == len(samples)
    # Sample order survives lm-eval's length-sorted batching, and the chat template (with the
    # system message) was applied exactly as a plain greedy `generate` would.
    assert run.completions == [direct_greedy(gen, s, 12) for s in samples]
    assert len(set(run.completions)) > 1  # the random model does react to its prompt
    assert [s["n_cols"] for s in run.scores] == [1.0, 1.0, 0.0, 1.0]
    assert [s["chars"] for s in run.scores] == [float(len(c)) for c in run.completions]
    assert run.metrics["chars"] == pytest.approx(sum(len(c) for c in run.completions) / 4)
    assert run.lm_eval["chars,none"] == pytest.approx(run.metrics["chars"])
    assert 0.0 <= run.metrics["has_id"] <= 1.0


def test_token_budget_and_model_mode(gen: HFGenerator) -> None:
    gen.model.train()
    samples = make_samples()[:2]
    run = run_generation_task(
        gen,
        samples,
        task_name="bridge_budget",
        score_fn=length_score,
        metric_names=["chars"],
        max_new_tokens=1,
    )
    assert gen.model.training
    assert all(len(gen.tokenizer(c, add_special_tokens=False)["input_ids"]) <= 1 for c in run.completions)


def test_nan_scores_are_left_out_of_the_means(gen: HFGenerator) -> None:
    def score(sample: Sample, completion: str) -> dict[str, float]:
        return {"m": math.nan if sample.id == "a" else 1.0}

    run = run_generation_task(
        gen, make_samples(), task_name="bridge_nan", score_fn=score, metric_names=["m"], max_new_tokens=2
    )
    assert run.metrics["m"] == 1.0 and math.isnan(run.scores[0]["m"])


def test_exported_task_folder_gives_the_same_results(gen: HFGenerator, tmp_path: Path) -> None:
    """The YAML + utils module for `lm_eval --include_path` run the very same evaluation."""
    from mrbench.tasks.tool_calling import tool_calling
    from mrbench.tasks.tool_calling.task import EVAL_METRICS

    samples = tool_calling(n_eval=4).eval_samples()
    common = dict(
        task_name="bridge_tc",
        score_fn="mrbench.tasks.tool_calling.rewards:score_sample",
        metric_names=EVAL_METRICS,
        max_new_tokens=10,
    )
    inline = run_generation_task(gen, samples, **common)
    exported = run_generation_task(gen, samples, export_dir=tmp_path, **common)
    assert exported.completions == inline.completions and exported.scores == inline.scores
    assert {p.name for p in tmp_path.iterdir()} >= {"bridge_tc.yaml", "bridge_tc.jsonl", "bridge_tc_utils.py"}
    yaml_text = (tmp_path / "bridge_tc.yaml").read_text()
    assert "output_type: generate_until" in yaml_text and "do_sample: false" in yaml_text
    assert "custom_dataset: !function bridge_tc_utils.load_dataset" in yaml_text
    rows = [json.loads(line) for line in (tmp_path / "bridge_tc.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [s.id for s in samples]


def _with_shots(sample: Sample, shots: list[tuple[str, str]]) -> Sample:
    """``sample`` with worked examples as user/assistant turns before its request."""
    head = [m for m in sample.prompt if m["role"] == "system"]
    turns = [{"role": r, "content": c} for u, a in shots for r, c in (("user", u), ("assistant", a))]
    return Sample(sample.id, [*head, *turns, sample.prompt[-1]], sample.columns)


def test_worked_examples_become_lm_evals_few_shot_turns(gen: HFGenerator, tmp_path: Path) -> None:
    """Prompts with the same earlier user/assistant turns: lm-eval renders them as its few-shot
    examples, and the prompt the model sees is exactly the sample's (inline and exported)."""
    shots = [("Weather in Oslo?", "<tool_call>oslo</tool_call>"), ("Thanks!", "<response>ok</response>")]
    samples = [_with_shots(s, shots) for s in make_samples()]
    common = dict(score_fn=f"{__name__}:length_score", metric_names=["chars"])
    inline = run_generation_task(gen, samples, task_name="bridge_shots", max_new_tokens=8, **common)
    assert inline.completions == [direct_greedy(gen, s, 8) for s in samples]
    # The examples change what the model writes: they are in the prompt, not dropped.
    assert inline.completions != [direct_greedy(gen, s, 8) for s in make_samples()]
    exported = run_generation_task(
        gen, samples, task_name="bridge_shots", max_new_tokens=8, export_dir=tmp_path, **common
    )
    assert exported.completions == inline.completions
    assert "num_fewshot: 2" in (tmp_path / "bridge_shots.yaml").read_text()


def test_bad_input_is_rejected_with_the_bad_value(gen: HFGenerator, tmp_path: Path) -> None:
    for roles in (["user", "assistant"], ["user", "tool", "user"], ["assistant", "user"], ["system"]):
        turns = [{"role": r, "content": r[0]} for r in roles]
        with pytest.raises(ValueError, match=r"'m'.*roles"):
            sample_to_row(0, Sample("m", turns))
    one, other = (_with_shots(make_samples()[0], [("q", a)]) for a in ("a1", "a2"))
    with pytest.raises(ValueError, match="other worked examples"):
        run_generation_task(
            gen,
            [one, Sample("z", other.prompt)],
            task_name="t",
            score_fn=length_score,
            metric_names=["chars"],
            max_new_tokens=2,
        )
    kwargs = dict(score_fn=length_score, metric_names=["chars"], max_new_tokens=4)
    with pytest.raises(ValueError, match="no samples"):
        run_generation_task(gen, [], task_name="t", **kwargs)
    with pytest.raises(ValueError, match="task_name"):
        run_generation_task(gen, make_samples(), task_name="a/b", **kwargs)
    with pytest.raises(ValueError, match="module:attr"):
        run_generation_task(gen, make_samples(), task_name="t", export_dir=tmp_path, **kwargs)
    with pytest.raises(ValueError, match="max_new_tokens"):
        run_generation_task(
            gen,
            make_samples(),
            task_name="t",
            score_fn=length_score,
            metric_names=["chars"],
            max_new_tokens=0,
        )
    with pytest.raises(UserError, match=r"cannot load 'no_such_module:f': ModuleNotFoundError"):
        export_lm_eval_task(
            make_samples(),
            tmp_path,
            task_name="t",
            score_fn="no_such_module:f",
            metric_names=["x"],
            max_new_tokens=4,
        )


def test_generation_keeps_the_callers_autocast(gen: HFGenerator) -> None:
    """lm-eval runs ``generate`` under its own ``torch.autocast``, off unless given a dtype: the
    bridge passes the caller's, so a cell evaluating under bfloat16 autocast computes in bfloat16,
    and one in float32 stays float32 (finding 7 of issue 33)."""
    import torch

    seen: list[torch.dtype] = []
    layer = next(m for m in gen.model.modules() if isinstance(m, torch.nn.Linear))
    handle = layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    kwargs: dict[str, Any] = {
        "task_name": "bridge_precision",
        "score_fn": length_score,
        "metric_names": ["chars"],
        "max_new_tokens": 2,
    }
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            run_generation_task(gen, make_samples()[:1], **kwargs)
        mixed, seen[:] = set(seen), []
        run_generation_task(gen, make_samples()[:1], **kwargs)
    finally:
        handle.remove()
    assert mixed == {torch.bfloat16}
    assert set(seen) == {torch.float32}
