"""``mrbench score`` for the tool-calling task: datasets, their gold answers, and per-item scores.

Datasets: ``embedded`` (the task's own train and eval items for its settings, ids
``train-00000`` …, ``eval-00000`` …) and ``bfcl-<category>`` for every category of
:data:`.bfcl.CATEGORY_FILES` (ids are BFCL's, e.g. ``simple_python_17``).

Each scored item's ``rewards`` holds the four components (:mod:`.rewards`) and ``exact_match``;
BFCL items also ``bfcl_valid``, the verdict of BFCL's own checker (:mod:`.bfcl_checker`), which
is their ``exact_match`` too. ``status``: for BFCL items ``valid`` or the checker's error type
(``simple_function_checker:missing_required``, ``type_error:simple``,
``ast_decoder:decoder_failed``, …); for embedded items ``exact``, ``mismatch`` (well formed,
not right) or ``malformed``. Any completion is graded; only an unknown dataset or id, or
BFCL's package missing, makes an item an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mrbench.core.contracts import ScoredItem
from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling import rewards
from mrbench.tasks.tool_calling.bfcl import CATEGORY_FILES, UNSATISFIABLE, BfclItem, load_bfcl_items
from mrbench.tasks.tool_calling.data import compact_json, generate_items
from mrbench.tasks.tool_calling.parse import parse_answer
from mrbench.tasks.tool_calling.toolrl import SOURCES, load_items

BFCL_PREFIX = "bfcl-"
SCORE_DATASETS: tuple[str, ...] = ("embedded", *(f"{BFCL_PREFIX}{c}" for c in CATEGORY_FILES), *SOURCES)
"""``toolrl`` and ``apibank`` read the task's ``data_path`` (see :mod:`.toolrl`)."""


@dataclass(frozen=True)
class GoldEntry:
    """What one item is scored against: gold calls (JSON), the reference answer, BFCL's item if any."""

    gold_calls: str
    completion: str
    bfcl: BfclItem | None = None


def bfcl_category(dataset: str) -> str | None:
    """``"simple"`` for ``"bfcl-simple"``; ``None`` for a dataset that is not a BFCL one."""
    return dataset[len(BFCL_PREFIX) :] if dataset.startswith(BFCL_PREFIX) else None


def embedded_index(n_train: int, n_eval: int, seed: int) -> dict[str, GoldEntry]:
    """The embedded items of these settings by sample id (the ids ``make_samples`` gives them)."""
    index: dict[str, GoldEntry] = {}
    for split, n in (("train", n_train), ("eval", n_eval)):
        for i, item in enumerate(generate_items(n, split=split, seed=seed)):
            index[f"{split}-{i:05d}"] = GoldEntry(compact_json(list(item.calls)), item.completion())
    return index


def bfcl_index(category: str) -> dict[str, GoldEntry]:
    """The items of a BFCL category by id (:class:`UserError` if the package is not installed)."""
    return {
        item.id: GoldEntry(compact_json(item.gold_calls()), item.gold_completion(), item)
        for item in load_bfcl_items(category)
    }


def score_entry(entry: GoldEntry, sample_id: str, completion: str) -> ScoredItem:
    """All rewards of one completion against its gold (never raises on the completion)."""
    scores = rewards.score_answer(completion, entry.gold_calls)
    assert scores is not None  # gold built here is always well formed
    values: dict[str, float | None] = {name: scores[name] for name in (*rewards.COMPONENTS, "exact_match")}
    if entry.bfcl is None:
        if scores["exact_match"] == 1.0:
            status = "exact"
        else:
            status = "malformed" if parse_answer(completion).structure == "malformed" else "mismatch"
        return ScoredItem(sample_id, values, status)
    from mrbench.tasks.tool_calling.bfcl_checker import check_answer

    item = entry.bfcl
    verdict = check_answer(
        completion,
        {
            "category": item.bfcl_category,
            "functions": list(item.functions),
            "ground_truth": list(item.ground_truth),
        },
    )
    values["exact_match"] = values["bfcl_valid"] = verdict.value
    return ScoredItem(sample_id, values, "valid" if verdict.valid else verdict.error_type)


class Scorer:
    """Scores items of any dataset for one task's settings; each dataset's index is built once."""

    def __init__(self, n_train: int, n_eval: int, seed: int, data_path: str = "") -> None:
        self.settings = (n_train, n_eval, seed)
        self.data_path = data_path
        self._indexes: dict[str, dict[str, GoldEntry]] = {}

    def index(self, dataset: str) -> dict[str, GoldEntry]:
        """Gold entries of ``dataset`` by id (``ValueError`` for an unknown dataset)."""
        if dataset not in SCORE_DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}; choose from {', '.join(SCORE_DATASETS)}")
        if dataset not in self._indexes:
            category = bfcl_category(dataset)
            if dataset in SOURCES:
                self._indexes[dataset] = {
                    item.id: GoldEntry(item.gold_calls(), item.gold_completion())
                    for item in load_items(dataset, self.data_path)
                }
            else:
                self._indexes[dataset] = (
                    embedded_index(*self.settings) if category is None else bfcl_index(category)
                )
        return self._indexes[dataset]

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        """The reference answer of every item of ``dataset`` as an input item."""
        return [
            {"dataset": dataset, "id": sid, "completion": entry.completion}
            for sid, entry in self.index(dataset).items()
        ]

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        """One :class:`ScoredItem` per item; a bad dataset or id is that item's error only."""
        results: list[ScoredItem] = []
        for item in items:
            dataset, sid = str(item.get("dataset")), str(item.get("id"))
            try:
                index = self.index(dataset)
            except ValueError as exc:
                results.append(ScoredItem(sid, {}, "unknown_dataset", str(exc)))
                continue
            except UserError as exc:  # BFCL's package is not installed, a source's data is missing
                results.append(ScoredItem(sid, {}, "unavailable_dataset", str(exc)))
                continue
            entry = index.get(sid)
            if entry is None:
                reason = UNSATISFIABLE.get(sid)
                why = f" (left out: no answer can pass BFCL's checker: {reason})" if reason else ""
                results.append(ScoredItem(sid, {}, "unknown_id", f"unknown id {sid!r} in {dataset!r}{why}"))
                continue
            completion = item.get("completion")
            results.append(score_entry(entry, sid, completion if isinstance(completion, str) else ""))
        return results
