"""What one cell logs to its MLflow run: :class:`RunLog`, which rides out a store outage, and helpers.

Finding, opening and re-rooting a store, and the retrying client, live below the engine in
:mod:`mrbench.store` (``reporting`` and ``lab`` use them too); this module is the training engine's
own use of them. A record of what an outage kept is :mod:`mrbench.engine.cell.checkpoints`'.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mrbench.core.cell_records import LogArtifact, LogBatch, PendingEntry
from mrbench.store.client import RetryingClient, TrackingUnavailable
from mrbench.store.runs import end_run

log = logging.getLogger(__name__)

_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON (``.json``) or JSON lines (``.jsonl``, obj a list of rows) at ``path``."""
    with path.open("w", encoding="utf-8") as fh:
        if path.name.endswith(".jsonl"):
            for row in obj:
                fh.write(json.dumps(row, default=_jsonable) + "\n")
        else:
            json.dump(obj, fh, indent=2, default=_jsonable)


class RunLog:
    """What one cell logs to its MLflow run, through a :class:`RetryingClient`.

    While the store answers, each call is sent at once. When one fails past the client's retry
    bound the log goes *offline*: that call and every later one are kept in :attr:`pending`
    (JSON-ready entries, see below; artifact files stay under ``spool`` at their artifact paths)
    and nothing more is sent until :meth:`flush`. A cell thus trains through an outage of any
    length. :meth:`flush` sends what is pending, in order, and raises :class:`TrackingUnavailable`
    while the store is still down, keeping the rest; a later process finishes the job with
    ``RunLog(client, run_id, spool, pending).flush()`` (see :mod:`mrbench.engine.cell.runner`).

    Pending entries: :class:`~mrbench.core.cell_records.LogBatch` (metrics, params, tags) and
    :class:`~mrbench.core.cell_records.LogArtifact` (an artifact path). Sending one twice is
    harmless (MLflow keeps a metric point once and accepts a param again with the same value),
    which is what happens when the store took a call but its answer was lost. Ending the run is the
    caller's (``client.set_terminated``), after :meth:`flush`.
    """

    def __init__(
        self, client: RetryingClient, run_id: str, spool: Path, pending: Iterable[PendingEntry] = ()
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.spool = spool
        self.pending: list[PendingEntry] = list(pending)

    @property
    def offline(self) -> bool:
        """True once something could not be sent (everything after it is kept too, in order)."""
        return bool(self.pending)

    def metrics(self, values: Mapping[str, float], step: int) -> None:
        """Log ``{name: value}`` at ``step``, stamped now."""
        if values:
            now = int(time.time() * 1000)
            self._send(LogBatch(metrics=tuple((k, float(v), now, step) for k, v in values.items())))

    def params(self, values: Mapping[str, str]) -> None:
        """Log params (values cut to MLflow's 6000 characters)."""
        if values:
            self._send(LogBatch(params={k: str(v)[:_MAX_PARAM_CHARS] for k, v in values.items()}))

    def tags(self, values: Mapping[str, str]) -> None:
        """Set tags."""
        if values:
            self._send(LogBatch(tags=dict(values)))

    def json_artifact(self, obj: Any, artifact_path: str) -> None:
        """Log ``obj`` as the JSON (``.json``) or JSON-lines (``.jsonl``) artifact ``artifact_path``."""
        path = self.spool / artifact_path
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, obj)
        self._send(LogArtifact(artifact_path))

    def file_artifact(self, artifact_path: str, write: Callable[[Path], None]) -> None:
        """Log the file that ``write(path)`` writes as the artifact ``artifact_path``."""
        path = self.spool / artifact_path
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
        self._send(LogArtifact(artifact_path))

    def flush(self) -> None:
        """Send everything pending, in order; :class:`TrackingUnavailable` (the rest kept) if the store
        is still unreachable past the bound."""
        while self.pending:
            self._apply(self.pending[0])
            self.pending.pop(0)

    def _send(self, entry: PendingEntry) -> None:
        if self.pending:
            self.pending.append(entry)
            return
        try:
            self._apply(entry)
        except TrackingUnavailable as exc:
            log.warning("%s; keeping run %s's log locally and going on", exc, self.run_id)
            self.pending.append(entry)

    def _apply(self, entry: PendingEntry) -> None:
        from mlflow.entities import Metric, Param, RunTag

        if isinstance(entry, LogArtifact):
            local, folder = self.spool / entry.path, entry.path.rpartition("/")[0]
            self.client.log_artifact(self.run_id, str(local), artifact_path=folder or None)
            return
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(k, v, ts, step) for k, v, ts, step in entry.metrics],
            params=[Param(k, v) for k, v in entry.params.items()],
            tags=[RunTag(k, v) for k, v in entry.tags.items()],
        )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def end_run_quietly(
    client: RetryingClient, run_id: str, status: str, error: str | None = None, *, retry_s: float = 10.0
) -> None:
    """End a failed or interrupted run ``status`` (with its ``error`` tag), trying an unreachable
    store for ``retry_s`` only: the caller's own exception is what the user must see. If the store
    stays away the run stays RUNNING, and a warning says so."""
    try:
        end_run(client.bounded(retry_s), run_id, status, error)
    except TrackingUnavailable as exc:
        log.warning("%s; run %s stays RUNNING in the store", exc, run_id)
