"""Who owns a RUNNING run (:mod:`mrbench.store.claims`), on a real sqlite store: a dead owner's
run is ended KILLED, a live owner's never; a run key is taken over from dead processes only; a dead
invocation's claims lapse; a claimed key is held."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.store.claims import (
    STALE_AFTER_S,
    KeyClaims,
    end_dead_invocation,
    end_if_dead,
    holder_tags,
    is_own,
    live_invocations,
    run_by_own_process,
    settle_key,
)

RUN_KEY, PID, HOST = layout.tag(layout.RUN_KEY), layout.tag(layout.PID), layout.tag(layout.HOST)
HEARTBEAT, ROLE = layout.tag(layout.HEARTBEAT), layout.tag(layout.ROLE)


@pytest.fixture
def store(tmp_path: Path, new_store: Callable[[Path], Path]) -> tuple[MlflowClient, str]:
    """A client of an empty sqlite store, and a new experiment in it."""
    client = MlflowClient(tracking_uri=f"sqlite:///{new_store(tmp_path / 'results')}")
    return client, client.create_experiment("claims", artifact_location=(tmp_path / "artifacts").as_uri())


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def live_here() -> dict[str, str]:
    """Owner tags of another live process of this host (pytest's parent, older than any run)."""
    return holder_tags() | {PID: str(os.getppid())}


def dead_here() -> dict[str, str]:
    return holder_tags() | {PID: str(dead_pid())}


def remote(beat_age_s: float) -> dict[str, str]:
    """Owner tags of a process on another host whose last heartbeat is ``beat_age_s`` old."""
    return {HOST: "another-machine", PID: "7", HEARTBEAT: f"{time.time() - beat_age_s:.0f}"}


def _run(client: MlflowClient, experiment_id: str, **tags: str) -> Any:
    return client.get_run(client.create_run(experiment_id, tags=tags).info.run_id)


def status(client: MlflowClient, run: Any) -> str:
    return client.get_run(run.info.run_id).info.status


def test_a_dead_owners_run_is_ended_killed_and_a_live_ones_left_alone(
    store: tuple[MlflowClient, str],
) -> None:
    client, experiment_id = store
    dead = _run(client, experiment_id, **{RUN_KEY: "k"}, **dead_here())
    stale_remote = _run(client, experiment_id, **{RUN_KEY: "k"}, **remote(STALE_AFTER_S + 60))
    no_owner = _run(client, experiment_id, **{RUN_KEY: "k"})  # names no process: nobody keeps it
    live = _run(client, experiment_id, **{RUN_KEY: "k"}, **live_here())
    mine = _run(client, experiment_id, **{RUN_KEY: "k"}, **holder_tags())
    beating_remote = _run(client, experiment_id, **{RUN_KEY: "k"}, **remote(60))

    for run in (dead, stale_remote, no_owner):
        assert end_if_dead(client, run)
        assert status(client, run) == "KILLED"
    for run in (live, mine, beating_remote):
        assert not end_if_dead(client, run)
        assert status(client, run) == "RUNNING"
    # An ended run is not ended again, and another status and an error can be given.
    assert not end_if_dead(client, client.get_run(dead.info.run_id))
    failed = _run(client, experiment_id, **dead_here())
    assert end_if_dead(client, failed, status="FAILED", error="worker exited with code -9")
    assert client.get_run(failed.info.run_id).data.tags[layout.tag(layout.ERROR)] == (
        "worker exited with code -9"
    )
    assert status(client, failed) == "FAILED"


def test_a_run_of_a_live_invocation_is_left_alone_even_if_its_process_is_gone(
    store: tuple[MlflowClient, str],
) -> None:
    client, experiment_id = store
    invocation = _run(client, experiment_id, **{ROLE: layout.ROLE_SWEEP}, **live_here())
    parent_tag = {layout.PARENT_RUN_TAG: invocation.info.run_id}
    child = _run(client, experiment_id, **{RUN_KEY: "k"}, **parent_tag, **dead_here())
    alone = _run(client, experiment_id, **{RUN_KEY: "k"}, **live_here())
    live = live_invocations([invocation, child, alone])
    assert list(live) == [invocation.info.run_id]
    assert not end_if_dead(client, child, live=live)
    assert not end_if_dead(client, invocation, live=live)
    assert status(client, child) == "RUNNING"
    # Who holds a run outside every live invocation: its own live process, named.
    assert run_by_own_process(child, live) is None
    assert run_by_own_process(alone, live) == f"pid {os.getppid()} on host {socket.gethostname()} " + (
        f"(MLflow run {alone.info.run_id})"
    )
    # Once the invocation is dead, its dead runs go.
    assert end_if_dead(client, child, live=())


def test_a_run_key_is_taken_over_from_dead_processes_only(store: tuple[MlflowClient, str]) -> None:
    client, experiment_id = store
    dead = _run(client, experiment_id, **{RUN_KEY: "k"}, **dead_here())
    mine = _run(client, experiment_id, **{RUN_KEY: "k"}, **holder_tags())  # an earlier attempt here
    unknown = _run(client, experiment_id, **{RUN_KEY: "k"})  # no pid tag: nothing tells
    other_key = _run(client, experiment_id, **{RUN_KEY: "k2"}, **dead_here())
    assert is_own(mine) and not is_own(dead)

    settled = settle_key(client, experiment_id, "k")
    assert settled.holder is None
    assert sorted(settled.ended) == sorted([dead.info.run_id, mine.info.run_id])
    assert (status(client, dead), status(client, mine)) == ("KILLED", "KILLED")
    assert (status(client, unknown), status(client, other_key)) == ("RUNNING", "RUNNING")

    live = _run(client, experiment_id, **{RUN_KEY: "k3"}, **live_here())
    held = settle_key(client, experiment_id, "k3")
    assert held.holder.info.run_id == live.info.run_id and held.ended == []
    assert status(client, live) == "RUNNING"


def test_a_dead_invocation_ends_killed_with_its_dead_runs_and_its_claims_lapse(
    store: tuple[MlflowClient, str],
) -> None:
    client, experiment_id = store
    claim = layout.tag(layout.CLAIM + "k")
    sweep = {ROLE: layout.ROLE_SWEEP}
    dead = _run(client, experiment_id, **sweep, **dead_here(), **{claim: "cell k"})
    dead_child = _run(client, experiment_id, **{RUN_KEY: "k", layout.PARENT_RUN_TAG: dead.info.run_id})
    live_child = _run(
        client, experiment_id, **{RUN_KEY: "j", layout.PARENT_RUN_TAG: dead.info.run_id}, **live_here()
    )
    assert sorted(end_dead_invocation(client, experiment_id, dead.info.run_id)) == sorted(
        [dead.info.run_id, dead_child.info.run_id]
    )
    assert status(client, live_child) == "RUNNING"  # a live worker goes on

    # Claims: a key claimed by a dead invocation is taken over (its runs ended on the way).
    again = _run(client, experiment_id, **sweep, **dead_here(), **{claim: "cell k"})
    ours = _run(client, experiment_id, **sweep, **holder_tags())
    claims = KeyClaims(client, experiment_id, ours.info.run_id)
    assert claims.claim("k", "cell k") is None
    assert client.get_run(ours.info.run_id).data.tags[claim] == "cell k"
    assert status(client, again) == "KILLED"
    # A live invocation's claim holds the key, named; a FINISHED key is held by its run.
    other = _run(client, experiment_id, **sweep, **live_here())
    assert KeyClaims(client, experiment_id, other.info.run_id).holder("k") == (
        f"pid {os.getpid()} on host {socket.gethostname()} (MLflow run {ours.info.run_id})"
    )
    done = _run(client, experiment_id, **{RUN_KEY: "done"})
    client.set_terminated(done.info.run_id, "FINISHED")
    assert claims.claim("done", "cell done") == f"FINISHED in MLflow run {done.info.run_id}"
    assert layout.tag(layout.CLAIM + "done") not in client.get_run(ours.info.run_id).data.tags
