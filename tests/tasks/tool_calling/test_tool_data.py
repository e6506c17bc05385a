"""Procedural data: determinism, coverage of the four kinds, disjoint splits, learnable requests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from mrbench.tasks.tool_calling.catalog import TOOLS, TOOLS_BY_NAME
from mrbench.tasks.tool_calling.data import (
    CHOOSE_OFFERED,
    generate_items,
    kind_counts,
    make_demonstrations,
    make_samples,
    split_of,
)


def users(samples: list) -> set[str]:
    return {s.prompt[-1]["content"] for s in samples}


def test_deterministic_for_given_settings() -> None:
    assert make_samples(64, split="train", seed=0) == make_samples(64, split="train", seed=0)
    assert make_samples(64, split="train", seed=0) != make_samples(64, split="train", seed=1)
    assert make_demonstrations(20, seed=5) == make_demonstrations(20, seed=5)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_eval_requests_never_appear_in_train(seed: int) -> None:
    train = make_samples(512, split="train", seed=seed)
    evals = make_samples(64, split="eval", seed=seed)
    assert not users(train) & users(evals)
    assert all(split_of(u) == "train" for u in users(train))
    assert all(split_of(u) == "eval" for u in users(evals))
    # Other seeds' eval sets are held out too: the split is a property of the request.
    assert not users(make_samples(64, split="eval", seed=seed + 100)) & users(train)


def test_demonstrations_come_from_the_train_side_only() -> None:
    demos = make_demonstrations(600, seed=0)
    demo_users = {prompt[-1]["content"] for prompt, _ in demos}
    assert all(split_of(u) == "train" for u in demo_users)
    assert not demo_users & users(make_samples(64, split="eval", seed=0))


def test_kinds_cover_single_choose_parallel_and_no_call() -> None:
    assert kind_counts(64) == {"single": 22, "choose": 19, "parallel": 13, "no_call": 10}
    for split in ("train", "eval"):
        counts = Counter(s.columns["kind"] for s in make_samples(64, split=split, seed=0))
        assert counts == kind_counts(64)


def test_items_are_well_formed_and_learnable() -> None:
    items = generate_items(400, split="train", seed=3)
    assert len({(tuple(t.name for t in i.tools), i.request) for i in items}) == len(items)
    for item in items:
        offered = {t.name for t in item.tools}
        assert {c["name"] for c in item.calls} <= offered
        for call in item.calls:
            tool = TOOLS_BY_NAME[call["name"]]
            assert list(call["parameters"]) == [p.name for p in tool.params]
            for value in call["parameters"].values():  # every argument can be copied from the request
                assert str(value) in item.request
        if item.kind == "single":
            assert len(item.tools) == 1 and len(item.calls) == 1
        elif item.kind == "choose":
            assert len(item.tools) == CHOOSE_OFFERED and len(item.calls) == 1
        elif item.kind == "parallel":
            assert len(item.calls) == 2 and item.calls[0] != item.calls[1]
        else:
            assert item.calls == () and item.response


def test_prompts_are_short_chat_messages_with_flat_columns() -> None:
    for sample in make_samples(200, split="train", seed=0):
        system, user = sample.prompt
        assert (system["role"], user["role"]) == ("system", "user")
        assert len(system["content"]) <= 700
        assert all(isinstance(v, str | int | float | bool) for v in sample.columns.values())
        gold = json.loads(sample.columns["gold_calls"])
        for call in gold:
            assert call["name"] in system["content"]


def test_sample_ids_are_unique() -> None:
    samples = make_samples(512, split="train", seed=0)
    assert len({s.id for s in samples}) == 512


def test_catalogue_has_the_everyday_tools() -> None:
    names = {t.name for t in TOOLS}
    assert {"get_weather", "convert_currency", "create_event", "send_email", "search_flights"} <= names
    assert {"convert_units", "get_stock_price", "set_reminder"} <= names
    for tool in TOOLS:
        schema = tool.schema()["parameters"]
        assert schema["type"] == "object" and schema["required"] == list(schema["properties"])


def test_bad_split_is_rejected() -> None:
    with pytest.raises(ValueError, match="validation"):
        generate_items(3, split="validation", seed=0)


def test_importing_the_task_does_no_heavy_work() -> None:
    code = (
        "import sys, mrbench.tasks.tool_calling, mrbench.tasks.tool_calling.task;"
        "print(sorted(m for m in ('torch', 'lm_eval', 'transformers', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
