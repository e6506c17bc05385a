"""Several invocations of one sweep: cells are claimed in the store, so each runs once between them.

The claim protocol (:mod:`mrbench.store.claims`, which :mod:`mrbench.sweeps.claims` hands the
cells) is raced by threads on a real sqlite store, then two real ``mrbench sweep`` processes (fake
cells, :mod:`fake_sweep_cli`) are started together, several times over; a slow test does the same
with real training cells.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fakes import fake_cell, fake_resolve_spec
from mlflow.tracking import MlflowClient
from rich.console import Console
from sweep_testing import (
    HOST,
    PID,
    REPO,
    ROLE,
    RUN_KEY,
    SWEEP,
    cli_sweep,
    parent_runs,
    small,
)

from mrbench.core import layout
from mrbench.store.claims import STALE_AFTER_S, Heartbeat, is_alive
from mrbench.store.client import ensure_experiment
from mrbench.sweeps.cell import Cell
from mrbench.sweeps.claims import CellClaims
from mrbench.sweeps.grid import expand_grid
from mrbench.sweeps.orchestrator import run_sweep

HEARTBEAT = layout.tag(layout.HEARTBEAT)


def claim_tag(cell: Cell) -> str:
    return layout.tag(layout.CLAIM + cell.key)


def fake_parent(
    client: Any,
    experiment_id: str,
    name: str,
    *,
    host: str | None = None,
    pid: int | None = None,
    **tags: str,
) -> str:
    """A parent run standing in for another invocation (this host and a live pid unless told)."""
    values = {
        ROLE: layout.ROLE_SWEEP,
        SWEEP: name,
        HOST: host or socket.gethostname(),
        PID: str(os.getppid() if pid is None else pid),
        **tags,
    }
    return client.create_run(experiment_id, tags=values).info.run_id


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def cells_of(seeds: range) -> list[Cell]:
    spec = small("cells", methods=("grpo", "gdpo", "corrgrpo"), seeds=tuple(seeds))
    return expand_grid(spec, fake_resolve_spec).cells


# ------------------------------------------------------------------------------------ the protocol


@pytest.mark.parametrize("round_", range(3))
def test_racing_claimants_each_cell_is_won_exactly_once(store: str, round_: int) -> None:
    experiment_id = ensure_experiment("race", store)
    client = MlflowClient(tracking_uri=store)
    cells = cells_of(range(4 * round_, 4 * round_ + 4))  # 12 cells, new ones each round
    finished = cells[5]  # done by an earlier invocation: nobody claims it
    client.set_terminated(client.create_run(experiment_id, tags={RUN_KEY: finished.key}).info.run_id)
    parents = [fake_parent(client, experiment_id, "race", pid=os.getpid()) for _ in range(4)]
    won: dict[str, list[str]] = {p: [] for p in parents}
    barrier = threading.Barrier(len(parents))

    def claimant(parent: str, order: list[Cell]) -> None:
        claims = CellClaims(MlflowClient(tracking_uri=store), experiment_id, parent)
        barrier.wait()
        won[parent] = [c.key for c in order if claims(c) is None]

    # Two claim in the grid's order (they collide on every cell), two in the reverse order.
    orders = [cells, cells, cells[::-1], cells[::-1]]
    threads = [threading.Thread(target=claimant, args=(p, o)) for p, o in zip(parents, orders, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    winners = Counter(key for keys in won.values() for key in keys)
    assert winners == Counter({c.key: 1 for c in cells if c is not finished}), won
    # A claimant that lost withdrew its tag: each cell's claim is on its winner's parent run only.
    for parent in parents:
        tags = client.get_run(parent).data.tags
        assert {c.key for c in cells if claim_tag(c) in tags} == set(won[parent])
    for parent in parents:  # these invocations are over: their claims lapse for the next round
        client.set_terminated(parent)


class CollidingClient:
    """A store client through which another invocation claims the same cell at the same moment,
    once: it writes its claim as ours is written and withdraws it as ours is withdrawn."""

    def __init__(self, client: Any, other_parent: str, cell: Cell) -> None:
        self.client, self.other, self.tag = client, other_parent, claim_tag(cell)
        self.collided = False
        self.withdrawn: list[str] = []

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)
        if not self.collided:
            self.client.set_tag(self.other, self.tag, value)
            self.collided = True

    def delete_tag(self, run_id: str, key: str) -> None:
        self.withdrawn.append(run_id)
        self.client.delete_tag(run_id, key)
        self.client.delete_tag(self.other, self.tag)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_collision_makes_both_withdraw_and_the_next_round_decides(store: str) -> None:
    experiment_id = ensure_experiment("collide", store)
    client = MlflowClient(tracking_uri=store)
    cell = cells_of(range(1))[0]
    ours, other = (fake_parent(client, experiment_id, "collide") for _ in range(2))
    colliding = CollidingClient(client, other, cell)
    assert CellClaims(colliding, experiment_id, ours)(cell) is None
    assert colliding.withdrawn == [ours]  # the first round collided and both withdrew
    assert claim_tag(cell) in client.get_run(ours).data.tags
    assert claim_tag(cell) not in client.get_run(other).data.tags
    # Now the other invocation finds the cell held, and by whom.
    holder = CellClaims(client, experiment_id, other)(cell)
    assert holder == f"pid {os.getppid()} on host {socket.gethostname()} (MLflow run {ours})"


def test_a_dead_holder_is_taken_over_and_its_runs_marked_killed(store: str) -> None:
    experiment_id = ensure_experiment("dead-holder", store)
    client = MlflowClient(tracking_uri=store)
    cell = cells_of(range(1))[0]
    dead = fake_parent(client, experiment_id, "dead-holder", pid=dead_pid(), **{claim_tag(cell): cell.label})
    child = client.create_run(experiment_id, tags={RUN_KEY: cell.key, layout.PARENT_RUN_TAG: dead})
    ours = fake_parent(client, experiment_id, "dead-holder")
    assert CellClaims(client, experiment_id, ours)(cell) is None
    assert client.get_run(dead).info.status == "KILLED"
    assert client.get_run(child.info.run_id).info.status == "KILLED"


def test_liveness_by_pid_here_and_by_heartbeat_elsewhere(store: str) -> None:
    experiment_id = ensure_experiment("liveness", store)
    client = MlflowClient(tracking_uri=store)
    now = time.time()

    def alive(run_id: str) -> bool:
        return is_alive(client.get_run(run_id), now=now)

    assert alive(fake_parent(client, experiment_id, "l"))
    assert not alive(fake_parent(client, experiment_id, "l", pid=dead_pid()))
    remote = {"host": "another-machine"}
    assert alive(fake_parent(client, experiment_id, "l", **remote, **{HEARTBEAT: f"{now - 60:.0f}"}))
    stale = f"{now - STALE_AFTER_S - 1:.0f}"
    assert not alive(fake_parent(client, experiment_id, "l", **remote, **{HEARTBEAT: stale}))
    assert not alive(fake_parent(client, experiment_id, "l", **remote))  # no heartbeat at all
    ended = fake_parent(client, experiment_id, "l")
    client.set_terminated(ended)
    assert not alive(ended)

    beating = fake_parent(client, experiment_id, "l", **remote, **{HEARTBEAT: stale})
    heartbeat = Heartbeat(store, beating, interval=0.05)
    heartbeat.start()
    try:
        deadline = time.monotonic() + 30
        while not is_alive(client.get_run(beating)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        heartbeat.stop()
    assert is_alive(client.get_run(beating))


# ------------------------------------------------------------------------- beside another invocation


def test_a_sweep_beside_a_live_invocation_runs_only_the_cells_nobody_holds(store: str) -> None:
    spec = small("beside")
    cells = expand_grid(spec, fake_resolve_spec).cells
    experiment_id = ensure_experiment("beside", store)
    client = MlflowClient(tracking_uri=store)
    # Another invocation, alive on this host (this test's parent process stands in for it), holds
    # the first cell (running) and the third (it failed there; it is not retried while it lives).
    live = fake_parent(
        client, experiment_id, "beside", **{claim_tag(cells[0]): "x", claim_tag(cells[2]): "x"}
    )
    running = client.create_run(experiment_id, tags={RUN_KEY: cells[0].key, layout.PARENT_RUN_TAG: live})
    failed = client.create_run(experiment_id, tags={RUN_KEY: cells[2].key, layout.PARENT_RUN_TAG: live})
    client.set_terminated(failed.info.run_id, "FAILED")
    # And a remote invocation whose heartbeat stopped long ago: dead, its cell is taken over.
    stale = f"{time.time() - STALE_AFTER_S - 60:.0f}"
    remote = fake_parent(
        client, experiment_id, "beside", host="gone", **{HEARTBEAT: stale, claim_tag(cells[1]): "x"}
    )

    peek = Console(record=True, width=300)
    run_sweep(spec, tracking_uri=store, dry_run=True, resolve=fake_resolve_spec, console=peek)
    assert peek.export_text().count(f"held by pid {os.getppid()}") == 2

    console = Console(record=True, width=300)
    outcome = run_sweep(
        spec, tracking_uri=store, resolve=fake_resolve_spec, cell_fn=fake_cell, console=console
    )
    text = console.export_text()
    assert outcome.exit_code == 0 and outcome.stale_killed == 1
    assert sorted(o.cell.key for o in outcome.outcomes) == sorted([cells[1].key, cells[3].key])
    assert [o.cell.key for o in outcome.held] == [cells[0].key, cells[2].key]
    assert all(f"pid {os.getppid()}" in (o.error or "") and live in (o.error or "") for o in outcome.held)
    assert f"sweep 'beside' is also running as pid {os.getppid()}" in text
    assert "2 held by another invocation, 2 to run" in text
    assert f"skipped {cells[0].label}: held by pid {os.getppid()}" in text
    # The live invocation's runs are left alone; the dead one's are not.
    assert client.get_run(live).info.status == "RUNNING"
    assert client.get_run(running.info.run_id).info.status == "RUNNING"
    assert client.get_run(remote).info.status == "KILLED"
    ours = next(r for r in parent_runs(store, "beside") if r.info.run_id not in (live, remote))
    claimed = {k for k in ours.data.tags if k.startswith(layout.tag(layout.CLAIM))}
    assert claimed == {claim_tag(cells[1]), claim_tag(cells[3])}
    assert ours.data.tags[HEARTBEAT]


# ------------------------------------------------------------------- two real sweep processes at once

FINISHED_LINE = re.compile(r"^FINISHED (\S+) in ", re.MULTILINE)
SKIPPED_LINE = re.compile(
    r"^skipped (\S+): held by (pid \d+ on host .+|FINISHED in MLflow run \w+)", re.MULTILINE
)
ALREADY_DONE = re.compile(r"(\d+) already FINISHED \(skipped\)")


def start_two(store: str, name: str, *extra: str) -> list[tuple[int, str]]:
    """Start two `mrbench sweep` processes of the same spec (6 cells) at the same moment; their
    exit codes and outputs."""
    env = {**os.environ, "MRBENCH_FAKE_CELL_SECONDS": "0.25", "COLUMNS": "400"}
    procs = [
        subprocess.Popen(
            cli_sweep(store, name, "--seeds", "0,1", *extra),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    return [(proc.wait(timeout=300), proc.communicate()[0]) for proc in procs]


def check_claims_partition_the_cells(uri: str, name: str, n_cells: int) -> None:
    """Each of the ``n_cells`` cells has one run, FINISHED, under the one parent run that claimed it."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    children = [r for r in runs if r.data.tags.get(RUN_KEY)]
    assert sorted(r.info.status for r in children) == ["FINISHED"] * n_cells
    assert len({r.data.tags[RUN_KEY] for r in children}) == n_cells
    parents = {r.info.run_id: r.data.tags for r in runs if r.data.tags.get(ROLE) == layout.ROLE_SWEEP}
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in runs)
    for child in children:
        claimed_by = [
            p for p, tags in parents.items() if layout.tag(layout.CLAIM + child.data.tags[RUN_KEY]) in tags
        ]
        assert claimed_by == [child.data.tags[layout.PARENT_RUN_TAG]], (child.data.tags, parents)


def check_each_cell_ran_once(store: str, name: str, results: list[tuple[int, str]]) -> bool:
    """Both exited 0, each of the 6 cells has one run, FINISHED, made by the one that claimed it,
    and each process accounts for every cell: run, skipped naming who holds it, or FINISHED before
    it started. Returns whether both ran cells (the two overlapped)."""
    for code, output in results:
        assert code == 0 and "Traceback" not in output, output
    check_claims_partition_the_cells(store, name, 6)
    ran = [FINISHED_LINE.findall(output) for _code, output in results]
    assert len(ran[0]) + len(ran[1]) == 6 and not set(ran[0]) & set(ran[1]), ran
    for (_code, output), own in zip(results, ran, strict=True):
        skipped = [label for label, _holder in SKIPPED_LINE.findall(output)]
        done_before = int(ALREADY_DONE.search(output).group(1))
        assert len(own) + len(skipped) + done_before == 6 and not set(own) & set(skipped), output
    return bool(ran[0] and ran[1])


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_two_sweeps_started_together_run_each_cell_once(store: str) -> None:
    names = [f"together-{i}" for i in range(3)]
    overlapped = [check_each_cell_ran_once(store, name, start_two(store, name)) for name in names]
    assert any(overlapped), "the two sweeps never overlapped: nothing was shared"


@pytest.mark.slow
def test_two_sweeps_with_worker_processes_started_together_run_each_cell_once(store: str) -> None:
    overlapped = [
        check_each_cell_ran_once(store, f"workers-{i}", start_two(store, f"workers-{i}", "--workers", "2"))
        for i in range(3)
    ]
    assert any(overlapped), "the two sweeps never overlapped: nothing was shared"


# --------------------------------------------------------------------------------- with real cells


@pytest.mark.slow
def test_two_real_sweeps_started_together_train_each_cell_once(micro_model_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "real pair.yaml"
    config.write_text(
        "methods: [grpo, gdpo]\n"
        "tasks: [tool-calling]\n"
        f"models: ['{micro_model_dir}']\n"
        "seeds: [0, 1]\n"
        "task_params: {tool-calling: {n_train: 16, n_eval: 4}}\n"
        "train: {steps: 2, num_generations: 2, prompts_per_step: 2, eval_limit: 4}\n"
        "report: false\n"
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()  # create the store before the race
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "mrbench", "sweep", "--config", str(config), "--tracking-uri", uri]
    procs = [
        subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=1200)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert not any("Traceback" in output for output in outputs), outputs
    check_claims_partition_the_cells(uri, "real-pair", 4)  # the sweep is named after its file
