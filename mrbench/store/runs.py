"""The runs of an experiment: searched page by page, picked by status, run key or parent, and ended.

Every search of mrbench's runs goes through :func:`iter_runs`, the one loop over ``search_runs``'
result pages (a sweep may have more runs than one page holds); :func:`find_runs` spells the
filters mrbench uses (a status, a run key, a parent run, a role); :func:`end_run` ends a run with
a status and, for a failure, its ``error`` tag. Whether a RUNNING run may be ended, because its
owner is gone, is :mod:`mrbench.store.claims`' question, not this module's.

``client`` is an ``MlflowClient`` or a :class:`~mrbench.store.client.RetryingClient`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from mrbench.core import layout
from mrbench.core.errors import UserError

PAGE_SIZE = 1000
"""Runs per result page (MLflow's default limit for one ``search_runs`` call is 1000)."""
MAX_ERROR_CHARS = 4000
"""The longest ``error`` tag written (MLflow refuses longer tag values)."""


def iter_runs(
    client: Any, experiment_id: str, filter_string: str = "", *, page_size: int = PAGE_SIZE
) -> Iterator[Any]:
    """Every run of the experiment that matches ``filter_string``, page after page."""
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=page_size, page_token=token
        )
        yield from page
        token = page.token
        if not token:
            return


def search_all(
    client: Any, experiment_id: str, filter_string: str = "", *, page_size: int = PAGE_SIZE
) -> list[Any]:
    """Every run of the experiment that matches ``filter_string`` (all result pages), as a list."""
    return list(iter_runs(client, experiment_id, filter_string, page_size=page_size))


def filter_literal(value: str) -> str:
    """``value`` as a string literal of an MLflow ``search_runs`` filter: in single quotes, or in
    double quotes when it holds a single one. MLflow's filters have no escapes (it only strips the
    quotes around a literal), so a value holding both kinds cannot be searched for: a
    :class:`~mrbench.core.errors.UserError` naming it.

    >>> print(filter_literal("k1"), filter_literal("it's"))
    'k1' "it's"
    """
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise UserError(f"cannot search the tracking store for {value!r}: it holds both kinds of quote")


def runs_filter(
    *,
    status: str | None = None,
    run_key: str | None = None,
    parent_run_id: str | None = None,
    role: str | None = None,
) -> str:
    """The ``search_runs`` filter for runs with all the given properties ("" for every run).

    >>> runs_filter(status="RUNNING", run_key="k")
    "attributes.status = 'RUNNING' and tags.`mrbench.run_key` = 'k'"
    """
    terms = []
    if status is not None:
        terms.append(f"attributes.status = {filter_literal(status)}")
    for name, value in (
        (layout.tag(layout.RUN_KEY), run_key),
        (layout.PARENT_RUN_TAG, parent_run_id),
        (layout.tag(layout.ROLE), role),
    ):
        if value is not None:
            terms.append(f"tags.`{name}` = {filter_literal(value)}")
    return " and ".join(terms)


def find_runs(
    client: Any,
    experiment_id: str,
    *,
    status: str | None = None,
    run_key: str | None = None,
    parent_run_id: str | None = None,
    role: str | None = None,
    page_size: int = PAGE_SIZE,
) -> list[Any]:
    """The runs of the experiment with all the given properties (see :func:`runs_filter`)."""
    query = runs_filter(status=status, run_key=run_key, parent_run_id=parent_run_id, role=role)
    return search_all(client, experiment_id, query, page_size=page_size)


def running_runs(
    client: Any,
    experiment_id: str,
    run_key: str | None = None,
    *,
    parent_run_id: str | None = None,
    page_size: int = PAGE_SIZE,
) -> list[Any]:
    """The RUNNING runs of the experiment: of run key ``run_key``, children of ``parent_run_id``
    (each when given)."""
    return find_runs(
        client,
        experiment_id,
        status="RUNNING",
        run_key=run_key,
        parent_run_id=parent_run_id,
        page_size=page_size,
    )


def end_run(client: Any, run_id: str, status: str, error: str | None = None) -> None:
    """End run ``run_id`` with ``status`` (FINISHED, FAILED, KILLED), first tagging it with
    ``error`` when given; the run is ended even if the tag cannot be written."""
    try:
        if error is not None:
            client.set_tag(run_id, layout.tag(layout.ERROR), error[:MAX_ERROR_CHARS])
    finally:
        client.set_terminated(run_id, status)


def end_runs(client: Any, runs: Iterable[Any], status: str, error: str | None = None) -> list[str]:
    """End every run of ``runs`` (run objects) with ``status`` and ``error`` (:func:`end_run`);
    return their ids."""
    ended = []
    for run in runs:
        end_run(client, run.info.run_id, status, error)
        ended.append(run.info.run_id)
    return ended
