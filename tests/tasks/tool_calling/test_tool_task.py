"""The ToolCallingTask: protocol, factory settings, demonstrations ↔ rewards, evaluation through lm-eval."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

import mrbench.tasks as tasks
from mrbench.core.contracts import EvalResult, Task
from mrbench.tasks.tool_calling import tool_calling
from mrbench.tasks.tool_calling.data import generate_items, gold_completion
from mrbench.tasks.tool_calling.rewards import COMPONENTS, RANGES, score_answer, score_sample


def test_conforms_to_the_task_protocol_and_registry() -> None:
    task = tasks.build_task("tool-calling", {"n_train": "16", "n_eval": 8})
    assert isinstance(task, Task)
    assert (task.name, task.primary_metric, task.max_completion_tokens) == (
        "tool-calling",
        "exact_match",
        128,
    )
    compact = tasks.build_task("tool-calling", {"prompt_style": "compact"})
    assert compact.max_completion_tokens == 64
    assert len(task.train_samples()) == 16 and len(task.eval_samples()) == 8
    params = tasks.get_task_entry("tool-calling").params
    assert params == {
        "n_train": 512,
        "n_eval": 64,
        "seed": 0,
        "dataset": "embedded",
        "max_completion_tokens": 0,
        "data_path": "",
        "prompt_style": "chat",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "toolbench"}, "toolbench.*embedded, bfcl"),
        ({"n_train": 0}, "n_train"),
        ({"n_eval": -1}, "n_eval"),
        ({"max_completion_tokens": -5}, "max_completion_tokens"),
        ({"prompt_style": "verbose"}, "verbose.*chat, compact"),
    ],
)
def test_bad_settings_name_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tool_calling(**kwargs)


def test_demonstrations_score_the_maximum_on_every_component() -> None:
    task = tool_calling()
    demos = task.demonstrations(300, seed=4)
    items = generate_items(300, split="demo", seed=4)  # the same draws, with their gold calls
    assert [prompt for prompt, _ in demos] == [item.messages("chat") for item in items]
    comps = task.reward_components()
    prompts = [prompt for prompt, _ in demos]
    completions = [completion for _, completion in demos]
    golds = [json.dumps(list(item.calls)) for item in items]
    for comp in comps:
        values = comp.fn(prompts, completions, gold_calls=golds)
        for value, item in zip(values, items, strict=True):
            # With no gold call the correctness parts are 0 by definition; format is still 1.
            expected = comp.high if (item.calls or comp.name == "format") else 0.0
            assert value == expected, (comp.name, item)


def test_gold_answers_of_train_and_eval_samples_are_exact_matches() -> None:
    task = tool_calling(n_train=128, n_eval=32)
    for sample in task.train_samples() + task.eval_samples():
        gold = sample.columns["gold_calls"]
        assert score_answer(gold_completion(json.loads(gold), "ok"), gold)["exact_match"] == 1.0


def test_max_completion_tokens_fits_every_gold_answer() -> None:
    # A byte-level BPE of the tiny presets' size, trained on the demonstrations as the warm start does.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    demos = tool_calling().demonstrations(600, seed=0)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    core.train_from_iterator(
        [m["content"] for p, _ in demos for m in p] + [c for _, c in demos], trainer=trainer
    )
    task = tool_calling(n_train=512)
    lengths = [
        len(core.encode(gold_completion(json.loads(s.columns["gold_calls"]), "x")).ids) + 1  # + end of turn
        for s in task.train_samples()
    ]
    assert max(lengths) <= task.max_completion_tokens


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
def test_bfcl_eval_set_keeps_embedded_training() -> None:
    task = tool_calling(dataset="bfcl", n_eval=6, n_train=8)
    assert task.max_completion_tokens == 256
    kinds = [s.columns["kind"] for s in task.eval_samples()]
    assert kinds == ["bfcl_simple", "bfcl_multiple", "bfcl_parallel"] * 2
    assert all(s.id.startswith("train-") for s in task.train_samples())
    assert all("bfcl_check" in s.columns for s in task.eval_samples())


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
@pytest.mark.parametrize("category", ["parallel_multiple", "live_simple", "live_irrelevance", "irrelevance"])
def test_one_bfcl_category_as_the_eval_set(category: str) -> None:
    task = tool_calling(dataset=f"bfcl-{category}", n_eval=300)
    samples = task.eval_samples()
    assert task.max_completion_tokens == 256 and 0 < len(samples) <= 300
    assert {s.columns["kind"] for s in samples} == {f"bfcl_{category}"}
    from mrbench.kit.lm_eval_bridge import shared_shots, split_prompt

    # lm-eval's shape: one request after the system message and the shared worked examples.
    assert len(shared_shots(samples)) == 2 and all(split_prompt(s)[2].startswith("Tools:\n") for s in samples)
    compact = tool_calling(dataset=f"bfcl-{category}", n_eval=300, prompt_style="compact").eval_samples()
    assert all([m["role"] for m in s.prompt] == ["system", "user"] for s in compact)


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
def test_eval_scoring_of_bfcl_samples_follows_the_checker() -> None:
    from mrbench.kit.lm_eval_bridge import process_results_from, sample_to_row
    from mrbench.tasks.tool_calling.task import EVAL_METRICS, _metric_names

    task = tool_calling(dataset="bfcl-simple", n_eval=20)
    sample = next(s for s in task.eval_samples() if s.id == "simple_python_17")
    names = _metric_names([sample])
    assert (
        names == (*EVAL_METRICS, "bfcl_valid")
        and _metric_names(tool_calling().eval_samples()) == EVAL_METRICS
    )
    # The exported lm-eval task's process_results, on a row as lm-eval hands it over.
    process = process_results_from("mrbench.tasks.tool_calling.rewards:score_sample", names)
    row = sample_to_row(0, sample)
    good = gold_completion(json.loads(sample.columns["gold_calls"]))
    assert process(row, [good])["bfcl_valid"] == process(row, [good])["exact_match"] == 1.0
    as_float = good.replace('"number":450', '"number":450.0')
    scores = process(row, [as_float])
    assert scores["values"] == RANGES["values"][1]  # the component sees the same number …
    assert scores["bfcl_valid"] == scores["exact_match"] == 0.0  # … the checker a wrong type
    assert math.isnan(score_sample(tool_calling().eval_samples()[0], good)["bfcl_valid"])


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
def test_evaluate_a_bfcl_category_through_lm_eval(random_generator) -> None:
    from mrbench.engine.models.tiny import train_tokenizer

    task = tool_calling(dataset="bfcl-live_parallel", n_eval=2, max_completion_tokens=4)
    samples = task.eval_samples()
    tok = train_tokenizer([m["content"] for s in samples for m in s.prompt], vocab_size=600)
    result = task.evaluate(random_generator(tok, max_positions=4096))
    assert result.metrics["bfcl_valid"] == result.metrics["exact_match"] == 0.0  # 4 random tokens
    assert "exact_match/bfcl_live_parallel" in result.metrics
    assert all(r["bfcl_valid"] == r["exact_match"] == 0.0 for r in result.samples)


def test_evaluate_through_lm_eval_with_a_tiny_random_model(tiny_generator) -> None:
    task = tool_calling(n_train=8, n_eval=8, prompt_style="compact")  # the tiny models' prompts
    tiny_generator.model.train()
    result = task.evaluate(tiny_generator)
    assert isinstance(result, EvalResult)
    assert tiny_generator.model.training  # evaluation restores the mode it found
    assert len(result.samples) == 8
    expected = {*COMPONENTS, "reward_total", "exact_match"}
    assert expected <= set(result.metrics)
    assert {k for k in result.metrics if k.startswith("exact_match/")} == {
        "exact_match/single", "exact_match/choose", "exact_match/parallel", "exact_match/no_call"
    }  # fmt: skip
    for name in COMPONENTS:
        low, high = RANGES[name]
        assert low <= result.metrics[name] <= high
    assert 0.0 <= result.metrics["exact_match"] <= 1.0
    for record, sample in zip(result.samples, task.eval_samples(), strict=True):
        assert record["id"] == sample.id and record["prompt"] == sample.prompt[-1]["content"]
        # The numbers lm-eval computed are exactly what the reward functions give.
        again = score_answer(record["completion"], sample.columns["gold_calls"])
        assert record["rewards"] == {k: again[k] for k in COMPONENTS}
        assert record["exact_match"] == again["exact_match"]
    # Greedy decoding through lm-eval equals the plain generator on the same prompts.
    direct = tiny_generator(
        [s.prompt for s in task.eval_samples()], max_new_tokens=task.max_completion_tokens
    )
    assert [r["completion"] for r in result.samples] == direct
    mean_values = sum(r["rewards"]["values"] for r in result.samples) / 8
    assert math.isclose(result.metrics["values"], mean_values)
