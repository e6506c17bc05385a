"""The four reward components on hand-written completions: maxima, minima, partial credit, robustness."""

from __future__ import annotations

import doctest
import importlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrbench.tasks.tool_calling import rewards
from mrbench.tasks.tool_calling.rewards import COMPONENTS, RANGES, reward_components, score_answer

MAXIMA = {"format": 1.0, "function_name": 0.5, "parameter": 1.0, "values": 1.5}
MINIMA = {"format": 0.0, "function_name": -0.5, "parameter": -1.0, "values": -1.5}
FLIGHT = {"name": "search_flights", "parameters": {"origin": "Lima", "destination": "Oslo", "date": "May 3"}}
WEATHER = {"name": "get_weather", "parameters": {"city": "Paris"}}
STOCK = {"name": "get_stock_price", "parameters": {"symbol": "AAPL"}}


def answer(*calls: dict) -> str:
    lines = "\n".join(json.dumps(c) for c in calls)
    return f"<think></think>\n<tool_call>\n{lines}\n</tool_call>"


def components(completion: object, gold: list[dict]) -> dict[str, float]:
    scores = score_answer(completion, json.dumps(gold))
    assert scores is not None
    return {k: scores[k] for k in COMPONENTS}


def test_exact_match_hits_every_maximum() -> None:
    assert components(answer(FLIGHT), [FLIGHT]) == MAXIMA
    assert score_answer(answer(FLIGHT), json.dumps([FLIGHT]))["exact_match"] == 1.0


def test_parallel_exact_match_in_any_order() -> None:
    assert components(answer(STOCK, WEATHER), [WEATHER, STOCK]) == MAXIMA
    rome = {"name": "get_weather", "parameters": {"city": "Rome"}}
    assert components(answer(WEATHER, rome), [rome, WEATHER]) == MAXIMA


@pytest.mark.parametrize(
    "completion",
    [
        '<think></think>\n<tool_call>\n{"name": "search_flights", "parameters": {"origin": "L"\n</tool_call>',
        '<think></think>\n<tool_call>\n{"name": "search_flights", "parameters": {"origin": "L"',  # truncated
        "<think></think>\n<tool_call>\nsearch_flights(origin='Lima')\n</tool_call>",
        "<think></think>\n<tool_call>\n</tool_call>",
        "<think></think>\n<response>Here are your flights.</response>",  # answered without calling
        "",
        "complete nonsense",
    ],
)
def test_unparsable_or_missing_call_hits_every_minimum(completion: str) -> None:
    scores = score_answer(completion, json.dumps([FLIGHT]))
    assert {k: scores[k] for k in COMPONENTS} == MINIMA
    assert scores["exact_match"] == 0.0


def test_one_wrong_value_costs_only_values() -> None:
    wrong = {
        "name": "search_flights",
        "parameters": {"origin": "Lima", "destination": "Rome", "date": "May 3"},
    }
    got = components(answer(wrong), [FLIGHT])
    assert got["format"] == 1.0 and got["function_name"] == 0.5 and got["parameter"] == 1.0
    assert got["values"] == pytest.approx(-1.5 + 3 * 2 / 3)
    assert score_answer(answer(wrong), json.dumps([FLIGHT]))["exact_match"] == 0.0


def test_missing_and_extra_parameter_names() -> None:
    missing = {"name": "search_flights", "parameters": {"origin": "Lima", "destination": "Oslo"}}
    got = components(answer(missing), [FLIGHT])
    assert got["parameter"] == pytest.approx(-1 + 2 * 2 / 3)
    assert got["values"] == pytest.approx(-1.5 + 3 * 2 / 3)
    extra = {"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}
    got = components(answer(extra), [WEATHER])
    assert got["parameter"] == pytest.approx(0.0)  # Jaccard {city} vs {city, unit} = 1/2
    assert got["values"] == 1.5  # the gold value itself is right


def test_wrong_tool_keeps_format_only() -> None:
    got = components(answer({"name": "get_news", "parameters": {"city": "Paris"}}), [WEATHER])
    assert got == {**MINIMA, "format": 1.0}


def test_half_of_a_parallel_answer() -> None:
    got = components(answer(WEATHER), [WEATHER, STOCK])
    assert got == pytest.approx({"format": 1.0, "function_name": 0.0, "parameter": 0.0, "values": 0.0})


def test_extra_call_costs_function_name_only() -> None:
    got = components(answer(WEATHER, STOCK), [WEATHER])
    assert got == pytest.approx({"format": 1.0, "function_name": 0.0, "parameter": 1.0, "values": 1.5})


def test_missing_think_costs_format_only() -> None:
    got = components(f"<tool_call>\n{json.dumps(WEATHER)}\n</tool_call>", [WEATHER])
    assert got == {**MAXIMA, "format": 0.0}


def test_numbers_compare_by_value_but_not_as_strings() -> None:
    gold = [{"name": "convert_currency", "parameters": {"amount": 250, "from": "USD", "to": "EUR"}}]
    as_float = {"name": "convert_currency", "parameters": {"amount": 250.0, "from": "USD", "to": "EUR"}}
    as_text = {"name": "convert_currency", "parameters": {"amount": "250", "from": "USD", "to": "EUR"}}
    assert components(answer(as_float), gold)["values"] == 1.5
    assert components(answer(as_text), gold)["values"] == pytest.approx(0.5)


def test_no_gold_call() -> None:
    reply = score_answer("<think></think>\n<response>Hello Anna!</response>", "[]")
    assert reply == {"format": 1.0, "function_name": 0.0, "parameter": 0.0, "values": 0.0, "exact_match": 1.0}
    called = score_answer(answer(WEATHER), "[]")  # a call where none was needed: format 0
    assert called == {
        "format": 0.0,
        "function_name": 0.0,
        "parameter": 0.0,
        "values": 0.0,
        "exact_match": 0.0,
    }
    assert score_answer("rubbish", "[]")["format"] == 0.0


def test_bfcl_style_gold_accepts_alternatives_and_optional_arguments() -> None:
    gold = [
        {
            "name": "area",
            "parameters": {"base": 10, "city": "New York"},
            "accept": {"base": [10], "city": ["New York", "NYC"]},
            "optional": {"unit": ["units", "u"]},
        }
    ]
    base = {"name": "area", "parameters": {"base": 10, "city": "new york"}}
    assert components(answer(base), gold) == MAXIMA  # optional omitted, lenient string
    alt = {"name": "area", "parameters": {"base": 10.0, "city": "NYC", "unit": "u"}}
    assert components(answer(alt), gold) == MAXIMA
    wrong_optional = {"name": "area", "parameters": {"base": 10, "city": "NYC", "unit": "cm"}}
    got = components(answer(wrong_optional), gold)
    assert got["parameter"] == 1.0 and got["values"] == pytest.approx(-1.5 + 3 * 2 / 3)


def test_reward_functions_follow_trl_signature() -> None:
    comps = reward_components()
    assert [c.name for c in comps] == ["format", "function_name", "parameter", "values"]
    assert [(c.low, c.high) for c in comps] == [RANGES[c.name] for c in comps]
    assert all(c.weight == 1.0 and c.fn.__name__ == c.name for c in comps)
    gold = json.dumps([WEATHER])
    completions = [answer(WEATHER), "junk", [{"role": "assistant", "content": answer(WEATHER)}]]
    prompts = [[{"role": "user", "content": "q"}]] * 3
    by_name = {c.name: c.fn(prompts, completions, gold_calls=[gold] * 3, kind=["single"] * 3) for c in comps}
    assert by_name["values"] == [1.5, -1.5, 1.5]
    assert by_name["format"] == [1.0, 0.0, 1.0]


def test_unusable_gold_is_unscorable_not_a_crash() -> None:
    fn = reward_components()[1].fn
    out = fn([None] * 4, ["x"] * 4, gold_calls=["not json", float("nan"), None, '[{"name": "f"}]'])
    assert out == [None, None, None, None]


def test_missing_gold_column_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="gold_calls"):
        reward_components()[0].fn(["p"], ["c"], kind=["single"])
    with pytest.raises(ValueError, match="completions"):
        reward_components()[0].fn(["p"], ["c"], gold_calls=[])


def test_score_sample_adds_total_and_flags_bad_gold() -> None:
    from mrbench.core.contracts import Sample

    sample = Sample("s", [{"role": "user", "content": "q"}], {"gold_calls": json.dumps([WEATHER])})
    scores = rewards.score_sample(sample, answer(WEATHER))
    assert scores["reward_total"] == 4.0 and scores["exact_match"] == 1.0
    broken = Sample("b", [{"role": "user", "content": "q"}], {"gold_calls": "{"})
    assert all(math.isnan(v) for v in rewards.score_sample(broken, "x").values())


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(alphabet='<>/think_cal{}":,response \n[]0123', max_size=200),
        st.builds(lambda s: f"<think></think>\n<tool_call>\n{s}\n</tool_call>", st.text(max_size=80)),
    ),
    st.sampled_from([[WEATHER], [FLIGHT], [WEATHER, STOCK], []]),
)
def test_every_component_stays_in_range(completion: str, gold: list[dict]) -> None:
    scores = score_answer(completion, json.dumps(gold))
    for name in COMPONENTS:
        low, high = RANGES[name]
        assert low <= scores[name] <= high
    assert scores["exact_match"] in (0.0, 1.0)


@pytest.mark.parametrize(
    "module",
    [
        "mrbench.tasks.tool_calling.catalog",
        "mrbench.tasks.tool_calling.data",
        "mrbench.tasks.tool_calling.parse",
        "mrbench.tasks.tool_calling.rewards",
        "mrbench.tasks.tool_calling.bfcl",
        "mrbench.kit.lm_eval_bridge",
    ],
)
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
