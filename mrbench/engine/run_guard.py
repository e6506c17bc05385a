"""How a cell's or an evaluation's run ends when its work raises: KILLED on Ctrl-C, FAILED otherwise.

The one place both :func:`mrbench.engine.runner.run_cell` and
:func:`mrbench.engine.evaluation.run_eval` say it, so that a resumed sweep or a reader of the store
knows exactly which runs did not complete.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from mrbench.engine.tracking import end_run_quietly
from mrbench.store.client import RetryingClient


@contextlib.contextmanager
def ends_run_on_error(
    client: RetryingClient, run_id: str, *, cleanup: Callable[[], None] | None = None
) -> Iterator[None]:
    """Run the body; if it raises, end run ``run_id`` KILLED (``KeyboardInterrupt``) or FAILED with
    an ``error`` tag naming the exception (any other), call ``cleanup``, and re-raise."""
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            end_run_quietly(client, run_id, "KILLED")
        else:
            end_run_quietly(client, run_id, "FAILED", error=f"{type(exc).__name__}: {exc}")
        if cleanup is not None:
            cleanup()
        raise
