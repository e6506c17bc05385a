"""ToolRL's data set (RLLA) and API-Bank, as ToolRL ships them, read from a local path or a hub id.

Both use this task's answer format already (``<think>``, then ``<tool_call>`` with one
``{"name", "parameters"}`` JSON per line, or ``<response>``), so their prompts are kept as the
source wrote them (its own system prompt listing the tools) and only the gold answer is mapped
to the ``gold_calls`` column that the four reward components compare against.

``toolrl`` (``qiancheng0/ToolRL``):

- ``dataset/rlla_4k/{train,test}.parquet`` (verl rows: ``prompt`` = [system, user] messages,
  ``reward_model.ground_truth`` = the gold answer text, ``extra_info.split`` / ``index``);
- ``dataset/rlla_4k_raw/rlla_rl.json`` (a list of ``{"instruction", "input", "output"}``: system
  prompt, user turn, gold answer text), or the same objects one per line (``.jsonl``).

  The gold answer's calls become the gold calls; an answer with a ``<response>`` and no call is
  a ``no_call`` item (gold ``[]``). Ids: ``<split>-<index>`` for verl rows, else ``<position>``.

  Splits (:func:`load_split`): a folder is ToolRL's ``rlla_4k`` split, ``train.parquet`` and
  ``test.parquet``. A single file is split item by item: a verl row belongs to the split its
  ``extra_info.split`` names (``train`` or ``test``); any other item goes by the rule of the
  embedded data (:func:`.data.split_of` of its user turn: a stable hash, 20% ``test``), so the
  two sides never share a request. A hub id is loaded split by split.

``apibank`` (API-Bank levels 1–3 as processed by ToolRL, ``benchmarks/API-Bank/level-N-api_processed.json``):
a list of ``{"system", "user", "answer": [{"name", "parameters"}], "other"}``; a folder is read
through the three level files. Ids: ``level-<N>-<position>``; ``kind`` ``apibank_level-<N>``.
API-Bank is a test set only.

Scoring is the task's own (four components and ``exact_match``: the calls equal the gold calls,
as a multiset). API-Bank's own script counts an answer right when *any* of its calls equals the
single gold call; that looser count is not reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mrbench.core.contracts import Message, Sample
from mrbench.core.errors import UserError
from mrbench.tasks.sources import field, is_hub_id, locate, read_file, read_records
from mrbench.tasks.tool_calling.data import compact_json, gold_completion, split_of
from mrbench.tasks.tool_calling.parse import parse_answer

SOURCES: tuple[str, ...] = ("toolrl", "apibank")
FOLDER_FILES = {
    "toolrl": ("test.parquet",),
    "apibank": tuple(f"level-{n}-api_processed.json" for n in (1, 2, 3)),
}
SPLITS: tuple[str, ...] = ("train", "test")
"""ToolRL's splits: ``train`` trains, ``test`` evaluates."""
_LEVEL = re.compile(r"level-(\d+)")


@dataclass(frozen=True)
class SourceItem:
    """One item of a source: id, prompt as the source wrote it, gold calls and gold response."""

    id: str
    kind: str
    prompt: tuple[Message, ...]
    calls: tuple[dict[str, Any], ...]
    response: str | None = None
    split: str | None = None
    """The split the record itself names (verl rows' ``extra_info.split``), if any."""

    def gold_calls(self) -> str:
        """The ``gold_calls`` column (compact JSON list of ``{"name", "parameters"}``)."""
        return compact_json(list(self.calls))

    def gold_completion(self) -> str:
        """A reference answer in the task's format."""
        return gold_completion(list(self.calls), self.response)

    def sample(self) -> Sample:
        """The item as an eval :class:`Sample` (columns ``gold_calls`` and ``kind``)."""
        return Sample(
            id=self.id,
            prompt=[dict(m) for m in self.prompt],  # type: ignore[misc]
            columns={"gold_calls": self.gold_calls(), "kind": self.kind},
        )


def load_items(dataset: str, data_path: str) -> list[SourceItem]:
    """Every item of ``dataset`` (``toolrl`` or ``apibank``) at ``data_path`` (file, folder or hub id).

    What ``mrbench score`` reads: a ToolRL folder through its ``test.parquet``, a file whole.
    """
    if dataset not in SOURCES:
        raise ValueError(f"unknown tool-calling source {dataset!r}; choose from {', '.join(SOURCES)}")
    records = read_records(dataset, data_path, names=FOLDER_FILES[dataset])
    return _unique(dataset, data_path, _convert(dataset, records))


def load_split(data_path: str, split: str) -> list[SourceItem]:
    """ToolRL's ``split`` (``train`` or ``test``) at ``data_path``, in file order (see the module doc).

    :class:`UserError` if ``data_path`` holds no item of ``split`` (a folder without its
    ``<split>.parquet``, a file whose items all lie on the other side).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown ToolRL split {split!r}; choose from {', '.join(SPLITS)}")
    if data_path and is_hub_id(data_path):
        return _unique(
            "toolrl", data_path, _convert("toolrl", read_records("toolrl", data_path, split=split))
        )
    path = locate("toolrl", data_path)
    if path.is_dir():
        file = path / f"{split}.parquet"
        if not file.is_file():
            raise UserError(
                f"dataset 'toolrl': folder {str(path)!r} has no {file.name} "
                "(ToolRL's dataset/rlla_4k holds train.parquet and test.parquet)"
            )
        return _unique("toolrl", data_path, _convert("toolrl", read_file("toolrl", file)))
    items = _unique("toolrl", data_path, _convert("toolrl", read_file("toolrl", path)))
    mine = [item for item in items if _side(item) == split]
    if not mine:
        raise UserError(
            f"dataset 'toolrl': {path.name} holds no {split}-split item (a verl row keeps the split "
            "its extra_info.split names); give ToolRL's rlla_4k folder or rlla_rl.json"
        )
    return mine


def _side(item: SourceItem) -> str:
    """The split of an item read from a single file: its own, else the hash of its user turn."""
    if item.split in SPLITS:
        return item.split
    return "test" if split_of(str(item.prompt[-1]["content"])) == "eval" else "train"


def _convert(dataset: str, records: list[tuple[str, dict[str, Any]]]) -> list[SourceItem]:
    convert = _toolrl_item if dataset == "toolrl" else _apibank_item
    return [convert(where, record, i) for i, (where, record) in enumerate(records)]


def _unique(dataset: str, data_path: str, items: list[SourceItem]) -> list[SourceItem]:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise UserError(f"dataset {dataset!r}: id {item.id!r} occurs twice in {data_path!r}")
        seen.add(item.id)
    return items


def _gold(dataset: str, where: str, text: str) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """Calls and response of a gold answer text (:class:`UserError` if it holds neither)."""
    answer = parse_answer(text)
    calls = tuple({"name": c["name"], "parameters": c["parameters"]} for c in answer.calls)
    if not calls and answer.response is None:
        raise UserError(
            f"dataset {dataset!r}: {where}: the gold answer holds no <tool_call> and no <response>"
        )
    return calls, (None if calls else answer.response)


def _toolrl_item(where: str, record: dict[str, Any], position: int) -> SourceItem:
    if "prompt" in record:  # verl row
        prompt = field("toolrl", where, record, "prompt", (list, tuple))
        messages = tuple(_message("toolrl", where, m) for m in prompt)
        reward_model = field("toolrl", where, record, "reward_model", dict)
        gold = field("toolrl", f"{where} reward_model", reward_model, "ground_truth")
        extra = record.get("extra_info") if isinstance(record.get("extra_info"), dict) else {}
        split = extra.get("split") if isinstance(extra.get("split"), str) else None
        sid = f"{split or 'row'}-{extra.get('index', position)}"
    else:  # raw instruction / input / output
        system = field("toolrl", where, record, "instruction")
        user = field("toolrl", where, record, "input")
        gold = field("toolrl", where, record, "output")
        messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
        sid, split = str(position), None
    calls, response = _gold("toolrl", where, gold)
    return SourceItem(sid, "toolrl" if calls else "toolrl_no_call", messages, calls, response, split)


def _apibank_item(where: str, record: dict[str, Any], position: int) -> SourceItem:
    system = field("apibank", where, record, "system")
    user = field("apibank", where, record, "user")
    answer = field("apibank", where, record, "answer", (list, dict))
    calls = []
    for call in answer if isinstance(answer, list) else [answer]:
        if not isinstance(call, dict):
            raise UserError(f"dataset 'apibank': {where}: field 'answer' must hold call objects")
        name = field("apibank", f"{where} answer", call, "name")
        parameters = field("apibank", f"{where} answer", call, "parameters", dict)
        calls.append({"name": name, "parameters": parameters})
    match = _LEVEL.search(where)
    level = f"level-{match.group(1)}" if match else "level-0"
    index = where.rsplit(" ", 1)[-1]  # the item's position in its own file
    return SourceItem(
        f"{level}-{index}",
        f"apibank_{level}",
        ({"role": "system", "content": system}, {"role": "user", "content": user}),
        tuple(calls),
    )


def _message(dataset: str, where: str, message: Any) -> Message:
    if not isinstance(message, dict):
        raise UserError(f"dataset {dataset!r}: {where}: field 'prompt' must hold chat messages")
    role = field(dataset, f"{where} prompt", message, "role")
    content = field(dataset, f"{where} prompt", message, "content")
    return {"role": role, "content": content}
