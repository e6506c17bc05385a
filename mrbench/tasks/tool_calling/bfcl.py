"""BFCL v4 questions and possible answers (from the installed ``bfcl-eval`` package) as tool-calling samples.

The Berkeley Function Calling Leaderboard ships, per category, a question file
(``data/BFCL_v4_<category>.json``: one JSON object per line with ``id``, ``question`` — a list
of turns, each a list of chat messages — and ``function``, the offered function schemas) and a
possible-answer file (``data/possible_answer/…``: ``ground_truth``, a list of calls
``{function_name: {arg: [acceptable values]}}`` where ``""`` among the values means the
argument may be left out).

Conversion to this task's gold format (see :mod:`mrbench.tasks.tool_calling.rewards`): an argument
whose acceptable values include ``""`` (or are empty) becomes ``optional``; every other
argument is required, its first acceptable value goes to ``parameters`` and all of them to
``accept``. For the
``values`` reward an argument counts as correct if it matches *one* of the acceptable values
(BFCL-style lenient string comparison). Functions are shown in the system prompt with their
full schema (BFCL's ``"dict"`` type renamed ``"object"``), because real models need the
descriptions; the tiny CPU models are not meant for BFCL.

The package is located without importing it (its ``__init__`` pulls in API clients); install it
with ``pip install bfcl-eval --no-deps``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from mrbench.core.contracts import Message, Sample
from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling.data import compact_json, system_prompt

CATEGORY_FILES: dict[str, str] = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "live_parallel": "live_parallel",
    "live_parallel_multiple": "live_parallel_multiple",
}
"""Supported categories → file stem after ``BFCL_v4_`` (single-turn, Python-typed categories)."""


def bfcl_data_dir() -> Path:
    """The ``data`` folder of the installed ``bfcl_eval`` package (:class:`UserError` if absent)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the BFCL dataset needs the 'bfcl-eval' package: pip install bfcl-eval --no-deps "
            "(--no-deps: its pins would downgrade numpy/pandas)"
        )
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if (data / "possible_answer").is_dir():
            return data
    raise UserError(
        f"bfcl_eval is installed at {list(spec.submodule_search_locations)} but has no data/ folder"
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _schema(fn: dict[str, Any]) -> dict[str, Any]:
    """BFCL's function description with JSON-schema type names (``dict`` → ``object``)."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: ("object" if k == "type" and v == "dict" else fix(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return fix(fn)


def _canonical(option: Any) -> Any:
    """A concrete value from one acceptable option (BFCL nests acceptable lists inside dicts).

    >>> _canonical({"school": ["Bluebird HS", "BHS"], "grade": ["", 9]})
    {'school': 'Bluebird HS'}
    """
    if isinstance(option, dict) and option and all(isinstance(v, list) for v in option.values()):
        return {k: _canonical(v[0]) for k, v in option.items() if v and v[0] != ""}
    if isinstance(option, list):
        return [_canonical(v) for v in option]
    return option


def convert_ground_truth(ground_truth: list[dict[str, dict[str, list[Any]]]]) -> list[dict[str, Any]]:
    """BFCL possible answers → gold calls (``parameters`` / ``accept`` / ``optional``).

    >>> convert_ground_truth([{"area": {"base": [10], "unit": ["units", ""]}}])
    [{'name': 'area', 'parameters': {'base': 10}, 'accept': {'base': [10]}, 'optional': {'unit': ['units']}}]
    """
    calls: list[dict[str, Any]] = []
    for entry in ground_truth:
        for name, args in entry.items():
            parameters: dict[str, Any] = {}
            accept: dict[str, list[Any]] = {}
            optional: dict[str, list[Any]] = {}
            for arg, options in args.items():
                options = options if isinstance(options, list) else [options]
                # "" marks an argument that may be left out; a few live items list no value at
                # all, which we read the same way (nothing can be right, so omission is).
                if "" in options or not options:
                    optional[arg] = [o for o in options if o != ""]
                else:
                    parameters[arg] = _canonical(options[0])
                    accept[arg] = options
            calls.append({"name": name, "parameters": parameters, "accept": accept, "optional": optional})
    return calls


def _prompt(question: list[list[Message]], functions: list[dict[str, Any]]) -> list[Message]:
    """Our system prompt (tools + format), BFCL's own system text appended, then the user turn(s)."""
    turn = question[0] if question else []
    extra = "\n".join(m["content"] for m in turn if m.get("role") == "system")
    system = system_prompt([_schema(f) for f in functions]) + (f"\n{extra}" if extra else "")
    return [{"role": "system", "content": system}] + [
        {"role": m["role"], "content": m["content"]} for m in turn if m.get("role") != "system"
    ]


def load_bfcl_samples(
    categories: tuple[str, ...] | list[str] = ("simple", "multiple", "parallel"), limit: int | None = None
) -> list[Sample]:
    """BFCL v4 items of ``categories`` as :class:`Sample` (first ``limit`` per category).

    Sample ids are BFCL's (e.g. ``simple_python_0``); columns: ``gold_calls`` (JSON),
    ``kind`` (``bfcl_<category>``). Unknown categories raise ``ValueError`` naming the choices.
    """
    unknown = [c for c in categories if c not in CATEGORY_FILES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {unknown}; choose from {', '.join(CATEGORY_FILES)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    data = bfcl_data_dir()
    samples: list[Sample] = []
    for category in categories:
        stem = f"BFCL_v4_{CATEGORY_FILES[category]}.json"
        questions = _read_jsonl(data / stem)
        answers = {row["id"]: row["ground_truth"] for row in _read_jsonl(data / "possible_answer" / stem)}
        for row in questions[:limit] if limit is not None else questions:
            if row["id"] not in answers:
                continue  # BFCL ships every answer; skip defensively rather than guess one
            samples.append(
                Sample(
                    id=row["id"],
                    prompt=_prompt(row["question"], row["function"]),
                    columns={
                        "gold_calls": compact_json(convert_ground_truth(answers[row["id"]])),
                        "kind": f"bfcl_{category}",
                    },
                )
            )
    return samples
