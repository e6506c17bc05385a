"""BFCL v4 items (from the installed ``bfcl-eval`` package) as tool-calling samples and gold answers.

The Berkeley Function Calling Leaderboard ships, per category, a question file
(``data/BFCL_v4_<category>.json``: one JSON object per line with ``id``, ``question`` — a list
of turns, each a list of chat messages — and ``function``, the offered function schemas) and,
for categories with a right call, a possible-answer file (``data/possible_answer/…``:
``ground_truth``, a list of calls ``{function_name: {arg: [acceptable values]}}`` where ``""``
among the values means the argument may be left out). Irrelevance categories have no possible
answer: no call is right.

Conversion to this task's gold format (see :mod:`mrbench.tasks.tool_calling.rewards`): an
argument is ``optional`` when its acceptable values include ``""`` *and* the function's schema
does not list it as required (BFCL's checker rejects a call that leaves out a required
argument, whatever the possible answer says); every other argument goes to ``parameters``
with its first acceptable value that is not ``""`` (``""`` itself when it is the only one) and
to ``accept`` with all of them. The four reward components compare against this gold;
whether an answer is *right* is decided by BFCL's own checker (:mod:`.bfcl_checker`), which
each sample carries the inputs for in its ``bfcl_check`` column.

Functions are shown in the system prompt with their full schema (BFCL's ``"dict"`` type
renamed ``"object"``), because real models need the descriptions; the tiny CPU models are not
meant for BFCL.

The package is located without importing it (its modules import API clients); install it
with the line in :data:`INSTALL_HINT`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrbench.core.contracts import Message, Sample
from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling.data import compact_json, gold_completion
from mrbench.tasks.tool_calling.prompts import build_prompt

PINNED = "bfcl-eval==2026.3.23"
INSTALL_HINT = f'pip install --no-deps "{PINNED}"'
"""The one install line of the optional BFCL part (``--no-deps``: its pins would downgrade numpy/pandas)."""

CATEGORY_FILES: dict[str, str] = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "live_parallel": "live_parallel",
    "live_parallel_multiple": "live_parallel_multiple",
    "live_irrelevance": "live_irrelevance",
}
"""Supported categories → BFCL's name for them (the file stem after ``BFCL_v4_``, and the test
category its checker is given): every single-turn, Python-typed category with a checkable answer.
Not here: ``live_relevance`` (no possible answer, any call counts: nothing to compare the
reward components with), Java/JavaScript (answers in those languages' syntax), and the
multi-turn, memory, web-search and format-sensitivity categories (they need BFCL's executors)."""

UNSATISFIABLE: dict[str, str] = {
    "live_simple_106-63-0": "required auto_loan_payment_start, bank_hours_start have no acceptable value",
    "live_simple_112-68-0": "five required arguments (acc_routing_start, …) have no acceptable value",
    "live_multiple_862-181-3": "the answer needs journey_start_time, which Trains_1_FindTrains does not take",
    "live_multiple_964-207-0": "the answer gives question, but transfer_to_human_agent requires statement",
}
"""Items no answer can pass under BFCL's own checker (errors in BFCL's data), left out of every
sample set and score dataset: they would teach nothing and cap accuracy below 1. BFCL's
leaderboard keeps them (live_simple 258 → 256 here, live_multiple 1053 → 1051)."""

IRRELEVANCE_RESPONSE = "None of the offered functions can do this."
"""The gold ``<response>`` of an irrelevance item (its words are not graded)."""


def bfcl_package_dir() -> Path:
    """The folder of the installed ``bfcl_eval`` package, found without importing it
    (:class:`UserError` naming the install line if it is absent)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"BFCL needs the optional 'bfcl-eval' package: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def bfcl_data_dir() -> Path:
    """The ``data`` folder of the installed ``bfcl_eval`` package (:class:`UserError` if absent)."""
    data = bfcl_package_dir() / "data"
    if not (data / "possible_answer").is_dir():
        raise UserError(f"bfcl_eval at {data.parent} has no data/possible_answer folder; {INSTALL_HINT}")
    return data


@dataclass(frozen=True)
class BfclItem:
    """One BFCL question with what grading it needs; ``ground_truth`` is ``[]`` for irrelevance."""

    id: str
    category: str
    turn: tuple[Message, ...]
    functions: tuple[dict[str, Any], ...]
    ground_truth: tuple[dict[str, Any], ...]

    @property
    def single_turn(self) -> bool:
        """Whether the item is one user request (5 live_irrelevance items hold an earlier exchange)."""
        return sum(m.get("role") != "system" for m in self.turn) == 1

    @property
    def bfcl_category(self) -> str:
        """BFCL's name of the category (e.g. ``simple_python``), as its checker expects it."""
        return CATEGORY_FILES[self.category]

    def gold_calls(self) -> list[dict[str, Any]]:
        """Gold calls in this task's format (``[]`` for irrelevance); see :func:`convert_ground_truth`."""
        return convert_ground_truth(list(self.ground_truth), list(self.functions))

    def gold_completion(self) -> str:
        """A reference answer in the task's format that BFCL's checker accepts."""
        calls = self.gold_calls()
        return gold_completion(calls, None if calls else IRRELEVANCE_RESPONSE)

    def check_column(self) -> str:
        """The ``bfcl_check`` column: what :func:`.bfcl_checker.check_answer` needs, as JSON."""
        return compact_json(
            {
                "category": self.bfcl_category,
                "functions": list(self.functions),
                "ground_truth": list(self.ground_truth),
            }
        )

    def sample(self, style: str = "compact") -> Sample:
        """The item as a :class:`Sample` in prompt ``style`` (columns ``gold_calls``, ``kind``,
        ``bfcl_check``)."""
        return Sample(
            id=self.id,
            prompt=_prompt(list(self.turn), list(self.functions), style),
            columns={
                "gold_calls": compact_json(self.gold_calls()),
                "kind": f"bfcl_{self.category}",
                "bfcl_check": self.check_column(),
            },
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


def _required(functions: list[dict[str, Any]]) -> dict[str, set[str]]:
    return {
        str(f.get("name")): set((f.get("parameters") or {}).get("required") or [])
        for f in functions
        if isinstance(f, dict)
    }


def convert_ground_truth(
    ground_truth: list[dict[str, dict[str, list[Any]]]], functions: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """BFCL possible answers → gold calls (``parameters`` / ``accept`` / ``optional``).

    ``functions`` (the item's schemas) says which arguments are required: those are never
    optional, even when their acceptable values include ``""``.

    >>> convert_ground_truth([{"area": {"base": [10], "unit": ["units", ""]}}])
    [{'name': 'area', 'parameters': {'base': 10}, 'accept': {'base': [10]}, 'optional': {'unit': ['units']}}]
    >>> schema = [{"name": "area", "parameters": {"required": ["base", "unit"]}}]
    >>> convert_ground_truth([{"area": {"base": [10], "unit": ["", "units"]}}], schema)[0]["parameters"]
    {'base': 10, 'unit': 'units'}
    """
    required = _required(functions or [])
    calls: list[dict[str, Any]] = []
    for entry in ground_truth:
        for name, args in entry.items():
            parameters: dict[str, Any] = {}
            accept: dict[str, list[Any]] = {}
            optional: dict[str, list[Any]] = {}
            for arg, raw in args.items():
                options = raw if isinstance(raw, list) else [raw]
                values = [o for o in options if o != ""]
                if ("" in options or not options) and arg not in required.get(name, ()):
                    optional[arg] = values
                    continue
                # A required argument whose only acceptable value is "" takes the empty string.
                values = values or [""]
                parameters[arg] = _canonical(values[0])
                accept[arg] = values
            calls.append({"name": name, "parameters": parameters, "accept": accept, "optional": optional})
    return calls


def _prompt(turn: list[Message], functions: list[dict[str, Any]], style: str) -> list[Message]:
    """Our prompt in ``style`` (tools + format), BFCL's own system text appended to the system message."""
    extra = "\n".join(m["content"] for m in turn if m.get("role") == "system")
    messages = [{"role": m["role"], "content": m["content"]} for m in turn if m.get("role") != "system"]
    return build_prompt([_schema(f) for f in functions], messages, style, extra_system=extra)


def check_categories(categories: tuple[str, ...] | list[str]) -> None:
    """``ValueError`` naming the choices if a category is not supported."""
    unknown = [c for c in categories if c not in CATEGORY_FILES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {unknown}; choose from {', '.join(CATEGORY_FILES)}")


def load_bfcl_items(category: str) -> tuple[BfclItem, ...]:
    """Every item of ``category`` in BFCL's order, :data:`UNSATISFIABLE` ones left out (read once)."""
    check_categories([category])
    return _read_category(bfcl_data_dir(), category)


@functools.lru_cache(maxsize=len(CATEGORY_FILES))
def _read_category(data: Path, category: str) -> tuple[BfclItem, ...]:
    stem = f"BFCL_v4_{CATEGORY_FILES[category]}.json"
    questions = _read_jsonl(data / stem)
    answer_file = data / "possible_answer" / stem
    answers = {r["id"]: r["ground_truth"] for r in _read_jsonl(answer_file)} if answer_file.is_file() else {}
    no_call = "irrelevance" in category
    items: list[BfclItem] = []
    for row in questions:
        if row["id"] in UNSATISFIABLE or (not no_call and row["id"] not in answers):
            continue  # BFCL ships every answer; skip defensively rather than guess one
        turn = row["question"][0] if row["question"] else []
        items.append(
            BfclItem(
                id=row["id"],
                category=category,
                turn=tuple(turn),
                functions=tuple(row["function"]),
                ground_truth=() if no_call else tuple(answers[row["id"]]),
            )
        )
    return tuple(items)


def load_bfcl_samples(
    categories: tuple[str, ...] | list[str] = ("simple", "multiple", "parallel"),
    limit: int | None = None,
    style: str = "compact",
) -> list[Sample]:
    """BFCL v4 items of ``categories`` as :class:`Sample` in prompt ``style`` (first ``limit`` per category).

    Sample ids are BFCL's (e.g. ``simple_python_0``); columns: ``gold_calls`` (JSON),
    ``kind`` (``bfcl_<category>``) and ``bfcl_check`` (the checker's inputs, JSON). Unknown
    categories raise ``ValueError`` naming the choices.
    """
    check_categories(categories)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    samples: list[Sample] = []
    for category in categories:
        items = load_bfcl_items(category)
        samples += [item.sample(style) for item in (items[:limit] if limit is not None else items)]
    return samples
