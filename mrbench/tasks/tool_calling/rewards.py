"""The four tool-calling reward components (ToolRL-style, the CorrGRPO paper's scales) and the eval score.

This module is the single source of scoring: the TRL reward functions, the evaluation metrics
and lm-eval's ``process_results`` all go through :func:`score_answer`.

Components (order = the K axis of the reward tensor):

=================  ============  ===========================================================
name               range         definition (``frac`` ∈ [0, 1], mapped linearly onto the range)
=================  ============  ===========================================================
``format``         {0, 1}        1 iff the answer is well formed (:mod:`.parse`) *in the shape
                                 the gold asks for*: tool calls when gold has calls, a
                                 ``<response>`` when it has none (as in the reference code).
``function_name``  [−0.5, 0.5]   frequency-aware Jaccard of called vs gold tool names
                                 (multiset intersection / multiset union).
``parameter``      [−1, 1]       mean over gold calls of the Jaccard of parameter names with the
                                 matched predicted call (0 for an unmatched gold call).
``values``         [−1.5, 1.5]   exactly matching argument values / gold arguments, summed over
                                 matched calls.
=================  ============  ===========================================================

Matching: each gold call in turn takes the unused predicted call *with the same name* that
maximises (parameter-name Jaccard + matching values), as in the reference implementation;
extra predicted calls only cost through ``function_name``'s union.

Interpretations (documented choices):

- Exact match gives every maximum; an unparsable tool-call block (unclosed, empty, non-JSON
  line) gives every minimum (format 0); answering with ``<response>`` when calls are needed
  also gives every minimum (no call matched).
- No gold call: the three correctness components are 0 whatever the model does (the reference
  rule); a tool call emitted anyway is penalised through ``format`` = 0.
- A gold call without arguments: ``values`` follows ``parameter`` (there is no content to get
  wrong, only whether the call also came without arguments).
- Numbers compare by value (``250 == 250.0``); booleans are not numbers.

Gold calls (the JSON list in the ``gold_calls`` column), one object per call::

    {"name": str, "parameters": {arg: value},      # the ideal call; every listed arg is required
     "accept": {arg: [acceptable values]},          # optional: any of these counts (BFCL)
     "optional": {arg: [acceptable values]}}        # optional: args that may be left out (BFCL)

Values in ``accept``/``optional`` compare leniently, with the string standardisation BFCL's
checker uses (lower-cased, without spaces and ``,./-_*^``; nested dicts of acceptable lists);
plain ``parameters`` values compare exactly. These components are a graded signal, not BFCL's
verdict: they do not check types against the function schema. For BFCL samples (those with a
``bfcl_check`` column) :func:`score_sample` also runs BFCL's own checker
(:mod:`.bfcl_checker`), reports its verdict as ``bfcl_valid`` and lets it decide
``exact_match``; the components stay as defined above.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from mrbench.core.contracts import RewardComponent, Sample, completion_text
from mrbench.kit.toolcall import Call
from mrbench.tasks.tool_calling.parse import parse_answer

COMPONENTS: tuple[str, ...] = ("format", "function_name", "parameter", "values")
RANGES: dict[str, tuple[float, float]] = {
    "format": (0.0, 1.0),
    "function_name": (-0.5, 0.5),
    "parameter": (-1.0, 1.0),
    "values": (-1.5, 1.5),
}
GOLD_COLUMN = "gold_calls"
BFCL_COLUMN = "bfcl_check"
"""Column of BFCL samples with the checker's inputs (see :meth:`.bfcl.BfclItem.check_column`)."""

_LOOSE_DROP = re.compile(r"[ ,./\-_*^]")
_CACHED_TEXT_CHARS = 16_384
"""Completions up to this length are memoised (GRPO scores each one once per component)."""


def multiset_jaccard(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Frequency-aware Jaccard: |a ∩ b| / |a ∪ b| over multisets; equal lists (even empty) give 1.

    >>> multiset_jaccard(["f", "f"], ["f"])
    0.5
    >>> multiset_jaccard(["f", "g"], ["g", "f"])
    1.0
    >>> multiset_jaccard([], []), multiset_jaccard(["f"], [])
    (1.0, 0.0)
    """
    ca, cb = Counter(a), Counter(b)
    if ca == cb:
        return 1.0
    inter = sum((ca & cb).values())
    union = sum((ca | cb).values())
    return inter / union if union else 0.0


def values_equal(pred: Any, gold: Any) -> bool:
    """Exact JSON equality, except that numbers compare by value and bools are not numbers.

    >>> values_equal(250, 250.0), values_equal(True, 1), values_equal("Paris", "paris")
    (True, False, False)
    >>> values_equal({"a": [1, 2]}, {"a": [1.0, 2]})
    True
    """
    if isinstance(gold, bool) or isinstance(pred, bool):
        return isinstance(gold, bool) and isinstance(pred, bool) and gold == pred
    if isinstance(gold, int | float) and isinstance(pred, int | float):
        return float(pred) == float(gold)
    if isinstance(gold, str) or isinstance(pred, str):
        return isinstance(gold, str) and isinstance(pred, str) and gold == pred
    if isinstance(gold, list | tuple) and isinstance(pred, list | tuple):
        return len(gold) == len(pred) and all(values_equal(p, g) for p, g in zip(pred, gold, strict=True))
    if isinstance(gold, dict) and isinstance(pred, dict):
        return gold.keys() == pred.keys() and all(values_equal(pred[k], gold[k]) for k in gold)
    return gold is None and pred is None


def _standardise(text: str) -> str:
    return _LOOSE_DROP.sub("", text).lower().replace("'", '"')


def loosely_equal(pred: Any, accepted: Any) -> bool:
    """One acceptable value matched with the string standardisation of BFCL's checker (no type check).

    Strings ignore case, spaces and ``,./-_*^``; a dict whose values are all lists is read as
    BFCL's nested form (each key's acceptable values, ``""`` = may be omitted).

    >>> loosely_equal("New York, NY", "new york ny"), loosely_equal(5, 5.0)
    (True, True)
    >>> loosely_equal({"width": 20}, {"width": [20], "unit": ["", "cm"]})
    True
    """
    if isinstance(accepted, str) and isinstance(pred, str):
        return _standardise(pred) == _standardise(accepted)
    if isinstance(accepted, dict) and accepted and all(isinstance(v, list) for v in accepted.values()):
        if not isinstance(pred, dict) or not set(pred) <= set(accepted):
            return False
        for key, options in accepted.items():
            if key not in pred:
                if "" not in options:
                    return False
            elif not any(loosely_equal(pred[key], o) for o in options if o != ""):
                return False
        return True
    if isinstance(accepted, list | tuple) and isinstance(pred, list | tuple):
        return len(accepted) == len(pred) and all(
            loosely_equal(p, a) for p, a in zip(pred, accepted, strict=True)
        )
    if isinstance(accepted, dict) and isinstance(pred, dict):
        return accepted.keys() == pred.keys() and all(loosely_equal(pred[k], accepted[k]) for k in accepted)
    return values_equal(pred, accepted)


def _value_ok(gold: dict[str, Any], key: str, value: Any) -> bool:
    accept = gold.get("accept") or {}
    if key in accept:
        return any(loosely_equal(value, a) for a in accept[key])
    optional = gold.get("optional") or {}
    if key in optional and key not in gold["parameters"]:
        return any(loosely_equal(value, a) for a in optional[key])
    return values_equal(value, gold["parameters"][key])


def _expected_keys(gold: dict[str, Any], pred_params: dict[str, Any]) -> list[str]:
    """Gold argument names for this prediction: required ones plus optional ones it supplied."""
    optional = gold.get("optional") or {}
    return list(gold["parameters"]) + [
        k for k in optional if k in pred_params and k not in gold["parameters"]
    ]


def _pair_score(gold: dict[str, Any], pred: Call) -> tuple[float, int, int]:
    """(parameter-name Jaccard, matching values, values expected) for one gold/predicted pair."""
    params = pred["parameters"]
    expected = _expected_keys(gold, params)
    name_score = multiset_jaccard(sorted(expected), sorted(params))
    hits = sum(1 for k in expected if k in params and _value_ok(gold, k, params[k]))
    return name_score, hits, len(expected)


def call_fractions(gold: list[dict[str, Any]], pred: list[Call] | None) -> tuple[float, float, float]:
    """(function-name, parameter, values) fractions in [0, 1] for a non-empty gold list.

    ``pred=None`` (unparsable) scores 0 everywhere.

    >>> g = [{"name": "f", "parameters": {"x": 1, "y": 2}}]
    >>> call_fractions(g, [{"name": "f", "parameters": {"x": 1, "y": 3}}])
    (1.0, 1.0, 0.5)
    >>> call_fractions(g, [{"name": "f", "parameters": {"x": 1}}, {"name": "g", "parameters": {}}])
    (0.5, 0.5, 0.5)
    >>> call_fractions(g, None)
    (0.0, 0.0, 0.0)
    """
    if not pred:
        return 0.0, 0.0, 0.0
    names = multiset_jaccard([g["name"] for g in gold], [p["name"] for p in pred])
    used: set[int] = set()
    param_sum, value_hits, value_total = 0.0, 0, 0
    for g in gold:
        best: tuple[float, int, int] | None = None
        best_index = -1
        for i, p in enumerate(pred):
            if i in used or p["name"] != g["name"]:
                continue
            score = _pair_score(g, p)
            if best is None or score[0] + score[1] > best[0] + best[1]:
                best, best_index = score, i
        if best is None:
            value_total += len(g["parameters"])
            continue
        used.add(best_index)
        param_sum += best[0]
        value_hits += best[1]
        value_total += best[2]
    params = param_sum / len(gold)
    values = value_hits / value_total if value_total else params
    return names, params, values


def _scale(name: str, frac: float) -> float:
    low, high = RANGES[name]
    return low + (high - low) * frac


def load_gold(raw: Any) -> list[dict[str, Any]] | None:
    """Gold calls from the JSON column; ``None`` if missing or malformed (the item is unscorable).

    >>> load_gold('[{"name": "f", "parameters": {"x": 1}}]')
    [{'name': 'f', 'parameters': {'x': 1}}]
    >>> load_gold(float("nan")) is None, load_gold('[{"name": 3}]') is None
    (True, True)
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return None
    if not isinstance(raw, list):
        return None
    for call in raw:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        if not isinstance(call.get("parameters"), dict):
            return None
    return raw


@functools.lru_cache(maxsize=8192)
def _score_cached(text: str, gold_json: str) -> tuple[float, ...] | None:
    gold = load_gold(gold_json)
    if gold is None:
        return None
    answer = parse_answer(text)
    if not gold:
        fmt = 1.0 if answer.structure == "response" else 0.0
        return fmt, 0.0, 0.0, 0.0, fmt
    fmt = 1.0 if answer.structure == "tool_call" else 0.0
    names, params, values = call_fractions(gold, answer.calls)
    exact = float(fmt == 1.0 and names == params == values == 1.0)
    return fmt, _scale("function_name", names), _scale("parameter", params), _scale("values", values), exact


def score_answer(completion: Any, gold_calls: Any) -> dict[str, float] | None:
    """All four components plus ``exact_match`` (1/0) for one completion; ``None`` if gold is unusable.

    ``gold_calls`` is the JSON string of the ``gold_calls`` column (or the decoded list).

    >>> gold = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    >>> call = '{"name":"get_weather","parameters":{"city":"Paris"}}'
    >>> score_answer(f"<think></think>\\n<tool_call>\\n{call}\\n</tool_call>", gold)
    {'format': 1.0, 'function_name': 0.5, 'parameter': 1.0, 'values': 1.5, 'exact_match': 1.0}
    >>> score_answer("<tool_call>oops", gold)
    {'format': 0.0, 'function_name': -0.5, 'parameter': -1.0, 'values': -1.5, 'exact_match': 0.0}
    """
    text = completion_text(completion) if completion is not None else ""
    if not isinstance(gold_calls, str):
        try:
            gold_calls = json.dumps(gold_calls)
        except (TypeError, ValueError):
            return None
    # Long texts (garbage, runaway generations) bypass the cache, which would otherwise hold them.
    score = _score_cached if len(text) <= _CACHED_TEXT_CHARS else _score_cached.__wrapped__
    scores = score(text, gold_calls)
    if scores is None:
        return None
    return dict(zip((*COMPONENTS, "exact_match"), scores, strict=True))


def score_sample(sample: Sample, completion: str) -> dict[str, float]:
    """Eval scoring of one sample (used by :meth:`ToolCallingTask.evaluate` and the lm-eval task).

    Returns the components, ``exact_match``, ``reward_total`` (sum of the components) and
    ``bfcl_valid``: BFCL's checker's verdict (1/0) on a BFCL sample, which is then also its
    ``exact_match``; NaN on other samples. NaN everywhere if the sample's gold is unusable, so
    that means skip it visibly.
    """
    scores = score_answer(completion, sample.columns.get(GOLD_COLUMN))
    if scores is None:
        return {name: math.nan for name in (*COMPONENTS, "exact_match", "reward_total", "bfcl_valid")}
    scores["reward_total"] = sum(scores[name] for name in COMPONENTS)
    scores["bfcl_valid"] = math.nan
    check = sample.columns.get(BFCL_COLUMN)
    if isinstance(check, str) and check:
        from mrbench.tasks.tool_calling.bfcl_checker import check_answer

        verdict = check_answer(completion_text(completion), check)
        scores["bfcl_valid"] = scores["exact_match"] = verdict.value
    return scores


def _component_fn(name: str) -> Any:
    def reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        if GOLD_COLUMN not in columns:
            raise ValueError(
                f"tool-calling reward {name!r} needs the {GOLD_COLUMN!r} column; "
                f"got columns {sorted(columns)}"
            )
        golds = columns[GOLD_COLUMN]
        if len(golds) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(golds)} {GOLD_COLUMN!r} values")
        out: list[float | None] = []
        for completion, gold in zip(completions, golds, strict=True):
            scores = score_answer(completion, gold)
            out.append(None if scores is None else scores[name])
        return out

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = f"Tool-calling reward component {name!r} in {list(RANGES[name])} (TRL reward signature)."
    return reward


format_reward = _component_fn("format")
function_name_reward = _component_fn("function_name")
parameter_reward = _component_fn("parameter")
values_reward = _component_fn("values")

_FUNCTIONS = {
    "format": format_reward,
    "function_name": function_name_reward,
    "parameter": parameter_reward,
    "values": values_reward,
}


def reward_components() -> list[RewardComponent]:
    """The components in the order format, function_name, parameter, values, all with weight 1.

    >>> [(c.name, c.low, c.high) for c in reward_components()][:2]
    [('format', 0.0, 1.0), ('function_name', -0.5, 0.5)]
    """
    return [RewardComponent(name, _FUNCTIONS[name], 1.0, *RANGES[name]) for name in COMPONENTS]
