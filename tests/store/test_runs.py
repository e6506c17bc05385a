"""The runs of an experiment (:mod:`mrbench.store.runs`), on a real sqlite store: every result
page is read, the RUNNING runs of a run key (and of a parent) are found, runs are ended."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.store.runs import (
    MAX_ERROR_CHARS,
    end_runs,
    filter_literal,
    find_runs,
    iter_runs,
    running_runs,
    runs_filter,
    search_all,
)

RUN_KEY = layout.tag(layout.RUN_KEY)


@pytest.fixture
def store(tmp_path: Path, new_store: Callable[[Path], Path]) -> tuple[MlflowClient, str]:
    """A client of an empty sqlite store, and a new experiment in it."""
    client = MlflowClient(tracking_uri=f"sqlite:///{new_store(tmp_path / 'results')}")
    return client, client.create_experiment("runs", artifact_location=(tmp_path / "artifacts").as_uri())


class CountingClient:
    """A client that counts its ``search_runs`` calls (one per result page)."""

    def __init__(self, client: MlflowClient) -> None:
        self.client, self.searches = client, 0

    def search_runs(self, *args: Any, **kwargs: Any) -> Any:
        self.searches += 1
        return self.client.search_runs(*args, **kwargs)


def _run(client: MlflowClient, experiment_id: str, status: str = "RUNNING", **tags: str) -> str:
    run_id = client.create_run(experiment_id, tags=tags).info.run_id
    if status != "RUNNING":
        client.set_terminated(run_id, status)
    return run_id


def test_every_page_is_read(store: tuple[MlflowClient, str]) -> None:
    client, experiment_id = store
    keys = ["k0", "k1", "k2", "k3", "k4", "z0", "z1"]
    made = {_run(client, experiment_id, **{RUN_KEY: key}) for key in keys}
    counting = CountingClient(client)
    found = search_all(counting, experiment_id, page_size=3)
    assert sorted(r.info.run_id for r in found) == sorted(made)  # each once, none left out
    assert counting.searches == 3  # 3 + 3 + 1
    # A filter is kept from page to page.
    counting.searches = 0
    ks = iter_runs(counting, experiment_id, f"tags.`{RUN_KEY}` LIKE 'k%'", page_size=2)
    assert sorted(r.data.tags[RUN_KEY] for r in ks) == keys[:5]
    assert counting.searches == 3  # 2 + 2 + 1
    assert len(search_all(client, experiment_id)) == 7  # the default page size: one page


def test_the_running_runs_of_a_run_key(store: tuple[MlflowClient, str]) -> None:
    client, experiment_id = store
    parent = _run(client, experiment_id, **{layout.tag(layout.ROLE): layout.ROLE_SWEEP})
    alone = {_run(client, experiment_id, **{RUN_KEY: "k"}) for _ in range(4)}
    child = _run(client, experiment_id, **{RUN_KEY: "k", layout.PARENT_RUN_TAG: parent})
    other_child = _run(client, experiment_id, **{RUN_KEY: "other", layout.PARENT_RUN_TAG: parent})
    _run(client, experiment_id, "FINISHED", **{RUN_KEY: "k"})
    _run(client, experiment_id, "KILLED", **{RUN_KEY: "k", layout.PARENT_RUN_TAG: parent})
    _run(client, experiment_id, **{RUN_KEY: "k2"})  # a key that starts like it

    def ids(runs: list[Any]) -> set[str]:
        return {r.info.run_id for r in runs}

    assert ids(running_runs(client, experiment_id, "k", page_size=2)) == alone | {child}
    assert ids(running_runs(client, experiment_id, "k", parent_run_id=parent)) == {child}
    assert ids(running_runs(client, experiment_id, parent_run_id=parent)) == {child, other_child}
    assert running_runs(client, experiment_id, "nobody") == []
    finished = find_runs(client, experiment_id, status="FINISHED", run_key="k")
    assert [r.data.tags[RUN_KEY] for r in finished] == ["k"]
    assert ids(find_runs(client, experiment_id, role=layout.ROLE_SWEEP)) == {parent}


def test_runs_are_ended_with_a_status_and_an_error(store: tuple[MlflowClient, str]) -> None:
    client, experiment_id = store
    runs = [client.get_run(_run(client, experiment_id, **{RUN_KEY: "k"})) for _ in range(2)]
    ended = end_runs(client, runs, "FAILED", "x" * (MAX_ERROR_CHARS + 10))
    assert ended == [r.info.run_id for r in runs]
    for run_id in ended:
        run = client.get_run(run_id)
        assert run.info.status == "FAILED"
        assert run.data.tags[layout.tag(layout.ERROR)] == "x" * MAX_ERROR_CHARS
    (plain,) = end_runs(client, [client.get_run(_run(client, experiment_id))], "KILLED")
    assert client.get_run(plain).info.status == "KILLED"
    assert layout.tag(layout.ERROR) not in client.get_run(plain).data.tags


def test_a_value_with_a_quote_is_searched_for_as_it_is(store: tuple[MlflowClient, str]) -> None:
    """MLflow's filters have no escapes: a value holding ' is quoted with ", one holding both is refused."""
    client, experiment_id = store
    quoted = {key: _run(client, experiment_id, **{RUN_KEY: key}) for key in ("it's", 'say "k"', "k")}
    for key, run_id in quoted.items():
        assert [r.info.run_id for r in find_runs(client, experiment_id, run_key=key)] == [run_id]
    assert runs_filter(run_key="it's", role='a"b') == (
        f"tags.`{RUN_KEY}` = \"it's\" and tags.`{layout.tag(layout.ROLE)}` = 'a\"b'"
    )
    with pytest.raises(UserError, match=r"""cannot search the tracking store for 'it\\'s "k"'"""):
        find_runs(client, experiment_id, run_key='it\'s "k"')


@pytest.mark.parametrize(
    ("value", "literal"), [("k1", "'k1'"), ("", "''"), ("a'b", '"a\'b"'), ('a"b', "'a\"b'")]
)
def test_filter_literal(value: str, literal: str) -> None:
    assert filter_literal(value) == literal
