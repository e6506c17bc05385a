"""Reading a benchmark's own files for the task loaders: a local file or folder, or a hub id.

The paper's other benchmarks (ToolRL, API-Bank, LiveCodeBench, ASB, InjecAgent) ship nowhere
offline; a task names one with its ``dataset`` setting and says where the data is with its
``data_path`` setting. :func:`read_records` turns that place into ``(where, record)`` pairs,
``where`` being what an error names (``file.jsonl line 7``, ``file.json item 3``), and every
failure into one :class:`~mrbench.core.errors.UserError` naming the dataset:

- no ``data_path`` given, a path that does not exist, a folder without the expected files;
- a hub id while the hub is unreachable (or the hub load fails);
- a line that is not JSON, a JSON file that is not a list of objects, a record that is not an
  object, and (through :func:`field`) a missing or wrongly typed field.

Formats by suffix: ``.jsonl`` (one object per line), ``.json`` (a list of objects, or one
object), ``.parquet`` (rows). A hub id is ``owner/name`` that is not a local path; it is loaded
with ``datasets.load_dataset`` (``HF_HUB_OFFLINE=1`` uses the local cache).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mrbench.core.errors import UserError

DOCS = "docs/benchmarks.md"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SUFFIXES = (".jsonl", ".json", ".parquet")

Record = tuple[str, dict[str, Any]]
"""``(where, record)``: the place an error about the record names, and the record."""


def no_source(dataset: str) -> UserError:
    """The error for a dataset named without ``data_path``."""
    return UserError(
        f"dataset {dataset!r} is not shipped: give its data with --task-param data_path=PATH "
        f"(a file or folder in the source's own format) or data_path=OWNER/NAME (a hub id); see {DOCS}"
    )


def is_hub_id(source: str) -> bool:
    """``owner/name`` that is not an existing local path.

    >>> is_hub_id("livecodebench/code_generation_lite"), is_hub_id("/data/lcb.jsonl")
    (True, False)
    """
    return bool(_HUB_ID.match(source)) and not Path(source).exists()


LAYOUT: dict[str, tuple[str, ...]] = {
    "toolrl": ("ToolRL/dataset/rlla_4k", "toolrl/rlla_rl.json", "toolrl"),
    "apibank": ("ToolRL/benchmarks/API-Bank", "apibank"),
    "livecodebench": ("code_generation_lite/test6.jsonl", "livecodebench/test6.jsonl", "livecodebench"),
    "asb": ("ASB/data", "asb"),
    "injecagent": ("InjecAgent/data", "injecagent"),
}
"""Where each source lies inside a **data root**: a folder holding the benchmarks' repositories
(``ToolRL/``, ``ASB/``, ``InjecAgent/``, LiveCodeBench's ``code_generation_lite/``) or a folder per
dataset name (as ``tests/fixtures/`` does). A ``data_path`` that is such a root serves every source
of a task at once (the ``paper`` preset gives one root to every task); the first path that exists
is used."""


def in_root(dataset: str, source: str) -> str:
    """``source``, or the place of ``dataset`` inside it when ``source`` is a data root (:data:`LAYOUT`).

    >>> in_root("asb", "/nonexistent/root")
    '/nonexistent/root'
    """
    if not source:
        return source
    root = Path(source).expanduser()
    if root.is_dir():
        for relative in LAYOUT.get(dataset, ()):
            if (root / relative).exists():
                return str(root / relative)
    return source


def locate(dataset: str, source: str) -> Path:
    """The existing local path ``source`` names, inside it when it is a data root (:func:`in_root`);
    :class:`UserError` naming ``dataset`` if none."""
    if not source:
        raise no_source(dataset)
    path = Path(in_root(dataset, source)).expanduser()
    if not path.exists():
        raise UserError(f"dataset {dataset!r}: data_path {source!r} does not exist (a file or folder)")
    return path


def read_file(dataset: str, path: Path) -> list[Record]:
    """The records of one ``.jsonl``, ``.json`` or ``.parquet`` file."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(
            f"dataset {dataset!r}: {path} is not a {', '.join(SUFFIXES)} file; give the source's own files"
        )
    try:
        if suffix == ".parquet":
            return _read_parquet(dataset, path)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"dataset {dataset!r}: cannot read {path}: {exc}") from None
    if suffix == ".jsonl":
        records: list[Record] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            records.append((where, _object(dataset, where, _loads(dataset, where, line))))
        return records
    data = _loads(dataset, path.name, text)
    items = data if isinstance(data, list) else [data]
    return [
        (f"{path.name} item {i}", _object(dataset, f"{path.name} item {i}", x)) for i, x in enumerate(items)
    ]


def _loads(dataset: str, where: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"dataset {dataset!r}: {where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None


def _object(dataset: str, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"dataset {dataset!r}: {where}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_parquet(dataset: str, path: Path) -> list[Record]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own ArrowInvalid and OSError variants
        raise UserError(f"dataset {dataset!r}: {path} is not a readable parquet file: {exc}") from None
    return [(f"{path.name} row {i}", row) for i, row in enumerate(rows)]


def read_records(
    dataset: str, source: str, *, names: Sequence[str] = (), split: str = "test"
) -> list[Record]:
    """Every record of ``source``: a file, a folder, or a hub id (split ``split``).

    A folder is read through ``names`` (files the source ships, in order; those present are read,
    at least one must be) or, without ``names``, every ``.jsonl``/``.json``/``.parquet`` file in
    it, sorted by name.
    """
    if source and is_hub_id(source):
        return [(f"{source} row {i}", row) for i, row in enumerate(hub_rows(dataset, source, split))]
    path = locate(dataset, source)
    if path.is_file():
        return read_file(dataset, path)
    files = (
        [path / n for n in names if (path / n).is_file()]
        if names
        else sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
    )
    if not files:
        wanted = ", ".join(names) if names else f"{', '.join(SUFFIXES)} files"
        raise UserError(f"dataset {dataset!r}: folder {str(path)!r} holds none of {wanted}")
    return [record for file in files for record in read_file(dataset, file)]


def field(
    dataset: str, where: str, record: dict[str, Any], key: str, kind: type | tuple[type, ...] = str
) -> Any:
    """``record[key]``, checked to be a ``kind``; :class:`UserError` naming the record and field otherwise.

    >>> field("x", "f.jsonl line 2", {"a": "b"}, "a")
    'b'
    """
    if key not in record:
        raise UserError(f"dataset {dataset!r}: {where}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _types(kind)):
        names = "/".join(t.__name__ for t in _types(kind))
        raise UserError(
            f"dataset {dataset!r}: {where}: field {key!r} must be {names}, got {type(value).__name__}"
        )
    return value


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub's host (``$HF_ENDPOINT``) resolves within ``timeout_s``: a quick
    offline check before ``datasets`` would retry for minutes."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(previous)
    return True


def hub_rows(dataset: str, repo: str, split: str) -> list[dict[str, Any]]:
    """Rows of hub dataset ``repo`` (split ``split``); :class:`UserError` naming ``dataset`` if absent."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if not offline and not hub_reachable():
        raise UserError(
            f"dataset {dataset!r}: {repo!r} is no local path, and as a hub id it cannot be loaded: the "
            "Hugging Face hub is unreachable; "
            f"download the source's files and pass their path as data_path (or set HF_HUB_OFFLINE=1 "
            f"if {repo!r} is in your HF cache); see {DOCS}"
        )
    try:
        import datasets

        data = datasets.load_dataset(repo, split=split)
    except Exception as exc:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        raise UserError(
            f"dataset {dataset!r}: cannot load {repo!r} split {split!r} from the hub: "
            f"{type(exc).__name__}: {str(exc)[:200]}; pass a local data_path instead"
        ) from None
    return [dict(row) for row in data]
