"""A store that does not answer, a full disk and a damaged database: user errors in one line that
name the store and the cause, within the retry budget, never a hang and never a bug report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mrbench.store import client as store_client
from mrbench.store.client import RetryingClient, StoreFault, TrackingUnavailable, check_tracking_reachable
from mrbench.store.reader import open_reader
from mrbench.store.uri import sqlite_uri


def _damaged(new_store: Callable[[Path], Path], folder: Path) -> Path:
    """A store cut short: what a copy that stopped half-way or a disk that filled up leaves."""
    db = new_store(folder)
    os.truncate(db, 4096)
    return db


def test_the_check_names_a_server_that_does_not_answer(hanging_server, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr(store_client, "CHECK_TIMEOUT_S", 1, raising=False)
    MlflowClient(tracking_uri=hanging_server.uri)  # MLflow's imports are not the check's time
    start = time.monotonic()
    with pytest.raises(TrackingUnavailable) as err:
        check_tracking_reachable(hanging_server.uri)
    message = str(err.value)
    assert time.monotonic() - start < 10
    assert hanging_server.uri in message and "does not answer" in message, message
    assert "\n" not in message and len(message) < 300, message


@pytest.mark.slow
def test_a_call_gives_up_within_its_budget_on_a_server_that_does_not_answer(
    hanging_server, monkeypatch
) -> None:
    # MLflow's own request timeout is 120 s: the retry budget must bound each request too.
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    client = RetryingClient(hanging_server.uri, retry_s=1)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            client.get_experiment_by_name("anything")
        except BaseException as exc:
            raised.append(exc)

    start = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "a call with a 1 s retry budget still waits after 20 s"
    assert time.monotonic() - start < 12
    assert raised and isinstance(raised[0], TrackingUnavailable), raised
    assert hanging_server.uri in str(raised[0])


def test_the_check_names_a_server_whose_host_name_does_not_resolve(monkeypatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(store_client, "CHECK_TIMEOUT_S", 1, raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: release.wait(30))  # a silent resolver
    start = time.monotonic()
    try:
        with pytest.raises(TrackingUnavailable, match="'MLFLOW_HOST' did not resolve within 1 s"):
            check_tracking_reachable("http://MLFLOW_HOST:5000")
    finally:
        release.set()
    assert time.monotonic() - start < 5


def test_a_damaged_store_is_named_as_damaged_not_unreachable(tmp_path, new_store, monkeypatch) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    db = _damaged(new_store, tmp_path)
    with pytest.raises(StoreFault) as err:
        check_tracking_reachable(sqlite_uri(db))
    message = str(err.value)
    assert str(db) in message and "damaged" in message and "cannot reach" not in message, message
    assert "\n" not in message


def test_the_reader_names_a_damaged_store(tmp_path, new_store) -> None:
    db = _damaged(new_store, tmp_path)
    with pytest.raises(StoreFault, match="damaged") as err:
        open_reader(sqlite_uri(db))
    assert str(db) in str(err.value)


_FILL_THE_STORE = """
import os, resource, sys
from mlflow.entities import Metric
from mrbench.store.client import RetryingClient, StoreFault

db = sys.argv[1]
client = RetryingClient(f"sqlite:///{db}", retry_s=0)
run_id = client.create_run(client.create_experiment("full")).info.run_id
limit = os.path.getsize(db) + 64 * 1024
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    for step in range(100_000):
        client.log_batch(run_id, metrics=[Metric(f"m{k}", 1.0, 0, step) for k in range(50)])
except StoreFault as exc:
    print(exc)
else:
    sys.exit(0)
# A cell's log goes offline on a store fault, as in an outage: what it could not log is kept.
from pathlib import Path
from mrbench.engine.runs.tracking import RunLog

run_log = RunLog(client, run_id, Path(db).parent / "spool")
for step in range(100_000, 101_000):  # (a small write may still fit in the file's free pages)
    run_log.metrics({f"m{k}": 2.0 for k in range(50)}, step)
    if run_log.offline:
        sys.exit(3)
sys.exit(4)
"""


def test_a_store_past_the_file_size_limit_is_a_store_fault(tmp_path, new_store) -> None:
    db = new_store(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FILL_THE_STORE), str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    message = done.stdout.strip()
    assert str(db) in message and "file size limit" in message, message
    assert "\n" not in message


def test_the_sweeps_own_client_honours_the_sweeps_retry_bound(tmp_path, new_store, monkeypatch) -> None:
    from mrbench.sweeps.grid import Grid
    from mrbench.sweeps.orchestrator import SweepOutcome, _open_store
    from mrbench.sweeps.spec import SweepSpec

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    uri = sqlite_uri(new_store(tmp_path))
    spec = SweepSpec(
        name="bound",
        methods=("grpo",),
        tasks=("tool-calling",),
        models=("tiny",),
        seeds=(0,),
        tracking_retry_s=7,
    )
    store = _open_store(spec, uri, SweepOutcome("bound", Grid([])))
    assert isinstance(store.client, RetryingClient) and store.client.retry_s == 7
    assert store.client.get_experiment(store.experiment_id).name == "bound"


# ------------------------------------------------------------------ no room, from every writer a cell uses

_WRITE_EVERYTHING = """
import json, os, resource, sqlite3, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from mrbench.store.faults import room_fault

folder, limit = Path(sys.argv[1]), int(sys.argv[2])
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
big = torch.zeros(2_000_000)  # 8 MB


def sqlite_rows():
    db = sqlite3.connect(folder / "s.db")
    db.execute("create table t (x blob)")
    for _ in range(1000):
        db.execute("insert into t values (?)", (os.urandom(64 * 1024),))
        db.commit()


writers = {
    "torch": lambda: torch.save({"t": big}, folder / "optimizer.pt"),
    "safetensors": lambda: save_file({"t": big}, str(folder / "model.safetensors")),
    "json": lambda: (folder / "c.json").write_text(json.dumps(list(range(2_000_000)))),
    "sqlite": sqlite_rows,
}
found = {}
for name, write in writers.items():
    try:
        write()
    except Exception as exc:
        found[name] = room_fault(exc, folder)
    else:
        found[name] = "no error"
    for path in folder.iterdir():
        path.unlink()
print(json.dumps(found))
"""


def _write_everything(folder: Path, limit: int = 0) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _WRITE_EVERYTHING, str(folder), str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_file_size_limit_is_recognised_from_every_writer(tmp_path) -> None:
    # Python ignores SIGXFSZ, so a write past `ulimit -f` is EFBIG; torch's writer says only
    # "[enforce fail at inline_container.cc:…] unexpected pos …".
    found = _write_everything(tmp_path, limit=1_000_000)
    assert set(found) == {"torch", "safetensors", "json", "sqlite"}
    for writer, cause in found.items():
        assert cause == "the file size limit is reached (ulimit -f: 976 KiB)", (writer, cause)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs (root only: skipped otherwise), unmounted after the test."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_is_recognised_from_every_writer(small_disk: Path) -> None:
    found = _write_everything(small_disk)
    assert found == dict.fromkeys(("torch", "safetensors", "json", "sqlite"), "the disk is full"), found


def test_require_room_refuses_a_write_that_does_not_fit_naming_the_sizes(tmp_path) -> None:
    import shutil

    from mrbench.store.faults import OutOfRoom, describe_fault, require_room

    free = shutil.disk_usage(tmp_path).free
    target = tmp_path / "not" / "yet" / "there"
    require_room(target, 1000, what="a checkpoint")  # fits
    with pytest.raises(OutOfRoom) as err:
        require_room(target, free + 10**9, what="a checkpoint")
    line = describe_fault(err.value)
    assert line is not None and line.startswith(
        f"cannot write {target}: the disk is full (a checkpoint needs"
    )
    assert "\n" not in line
