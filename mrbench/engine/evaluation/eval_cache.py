"""The pre-training evaluation, computed once per (model, task, eval split) and reused.

Every method and seed of a sweep starts from the same policy and evaluates it on the same eval
split with deterministic decoding (greedy, or sampling at the task's fixed eval seed), so the
"before" numbers of a (model, task settings, eval limit) are one value, not one per cell. The
first cell to evaluate writes it here; later cells read it back, log the same metrics and
samples, and tag their run with the run that computed it (``layout.EVAL_BEFORE_FROM_TAG``), so
the report can say how often it was reused.

    <results>/eval_cache/<key>.json   {"metrics": ..., "samples": ..., "run_id": ...}
                                      (:class:`mrbench.core.cell_records.EvalCacheEntry`)

The key hashes the model's files (name, size and modification time of every file in the model
folder: a rebuilt model gets a new key), the task's name, version and settings, and the eval
limit. Only local model folders are cached: a hub id can resolve to new weights without its
name changing, so those cells evaluate as before. Cells that need the same key at once take
turns (:func:`computing`: a file lock beside the entry, released if its holder dies), so one
evaluates and the others read its entry, however the sweep schedules them; writes are atomic
(rename into place), so a reader never sees half an entry.

In a multi-process cell (:mod:`mrbench.engine.processes.distributed`) rank 0 alone takes the lock, reads
and writes: the other ranks take rank 0's answer (:func:`read` is then a collective), so every
rank of the cell evaluates, or none does (a sharded model's ``generate`` needs every rank), and
the entry names rank 0's run, never the empty run id of the ranks that do not log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mrbench.core.cell_records import EvalCacheEntry
from mrbench.core.results_layout import eval_cache_file
from mrbench.engine.processes.distributed import from_rank0, is_main_process
from mrbench.store.local import results_dir

CACHE_VERSION = 1


CachedEval = EvalCacheEntry
"""A pre-training evaluation read back from the cache (the entry's typed record)."""


def model_fingerprint(model_path: str) -> str | None:
    """A digest of a local model folder's files, or ``None`` for anything else (a hub id)."""
    folder = Path(model_path)
    if not folder.is_dir():
        return None
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        st = path.stat()
        entries.append([str(path.relative_to(folder)), st.st_size, st.st_mtime_ns])
    return hashlib.sha256(json.dumps([str(folder.resolve()), entries]).encode()).hexdigest()


def cache_key(
    model_path: str,
    task: str,
    version: str,
    task_params: dict[str, Any],
    eval_limit: int,
    *,
    mixed_precision: bool = False,
) -> str | None:
    """The cache key of one pre-training evaluation, or ``None`` when it must not be cached. An
    evaluation under bfloat16 autocast (``mixed_precision``) is another one than in float32."""
    fingerprint = model_fingerprint(model_path)
    if fingerprint is None:
        return None
    fields = {
        "cache_version": CACHE_VERSION,
        "model": fingerprint,
        "task": task,
        "task_version": version,
        "task_params": task_params,
        "eval_limit": eval_limit,
        **({"autocast": "bfloat16"} if mixed_precision else {}),  # float32 keys stay as they were
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _path(key: str) -> Path:
    return eval_cache_file(results_dir(), key)


@contextmanager
def computing(key: str | None) -> Iterator[None]:
    """Hold ``key`` while reading it and, when absent, evaluating and writing it: another process
    asking for the same key waits, then reads the entry instead of evaluating again. No-op for
    ``None`` (not cacheable) and on ranks > 0 of a multi-process cell (they follow rank 0's
    :func:`read`; taking the lock themselves, one could hold it while rank 0 waits for it)."""
    if key is None or not is_main_process():
        yield
        return
    from filelock import FileLock

    target = _path(key)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{key}.lock")):
        yield


def read(key: str | None) -> CachedEval | None:
    """The cached evaluation of ``key``; ``None`` when absent, unreadable or not cacheable.

    In a multi-process cell, rank 0's answer on every rank: a collective, which every rank calls
    at the same point (so they all evaluate, or all reuse the entry)."""
    if key is None:
        return None
    return from_rank0(_read_here(key) if is_main_process() else None)


def _read_here(key: str) -> CachedEval | None:
    return EvalCacheEntry.read(_path(key))  # None when absent or damaged: evaluate again (and overwrite it)


def write(key: str | None, metrics: dict[str, float], samples: list[dict[str, Any]], run_id: str) -> None:
    """Store one evaluation under ``key``, computed by run ``run_id``; atomic, so readers never see
    half. No-op for ``None`` and on ranks > 0 of a multi-process cell (rank 0 writes);
    ``ValueError`` for an empty ``run_id`` (an entry must name the run that computed it)."""
    if key is None or not is_main_process():
        return
    if not run_id:
        raise ValueError("an evaluation cache entry needs the run id that computed it, got ''")
    EvalCacheEntry(metrics, samples, run_id).write(_path(key))
