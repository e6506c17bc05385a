"""A moved results folder keeps its artifacts: the report reads them at the new place, and what runs
after the move (a resumed sweep, a cell finishing what an outage kept) writes there, never to the old path.

Real parts throughout: the real ``mrbench sweep`` command line with :func:`fakes.fake_cell` (which writes
real MLflow runs and artifacts), the real ``mrbench report``, real sqlite stores; the whole results
folder is moved with ``shutil.move``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from fakes import synthetic_sweep
from mlflow.entities import Param
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.cell_records import LogArtifact, LogBatch, PendingRecord
from mrbench.engine.cell.checkpoints import CellFolder
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import RunSpec
from mrbench.store.client import check_tracking_reachable, ensure_experiment
from mrbench.store.local import reroot_moved_store, resolve_tracking_uri
from mrbench.store.reader import open_reader

TESTS = Path(__file__).resolve().parents[1]
FAKE_SWEEP_CLI = TESTS / "sweeps" / "fake_sweep_cli.py"
SWEEP = "moving"
FAILING = "gdpo|tool-calling|tiny|s0"  # fails in the first invocation: the resumed one reruns it
_FAKE_VARS = ("MRBENCH_FAKE_CELL_FAIL", "MRBENCH_FAKE_CELL_SECONDS", "MRBENCH_FAKE_UNAVAILABLE")


def _env(results: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", *_FAKE_VARS)}
    pythonpath = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return env | {"MRBENCH_RESULTS": str(results), "PYTHONPATH": pythonpath, **extra}


def _mrbench(argv: list[str], results: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=_env(results, **extra), capture_output=True, text=True, timeout=600
    )


def _sweep(results: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """``mrbench sweep`` on the default store of ``results`` (no --tracking-uri), with fake cells."""
    grid = ["--methods", "grpo,gdpo", "--tasks", "tool-calling", "--models", "tiny", "--seeds", "0,1"]
    argv = [
        sys.executable,
        str(FAKE_SWEEP_CLI),
        "sweep",
        "--name",
        SWEEP,
        *grid,
        "--steps",
        "3",
        "--no-report",
    ]
    return _mrbench(argv, results, cwd, **extra)


def _report(results: Path, cwd: Path) -> tuple[str, dict[str, bytes]]:
    """``mrbench report`` on the default store of ``results``: the report's text and its figures."""
    out = cwd / "reports" / SWEEP
    shutil.rmtree(out, ignore_errors=True)
    proc = _mrbench([sys.executable, "-m", "mrbench", "report", SWEEP], results, cwd)
    assert proc.returncode == 0, proc.stderr
    return (out / "report.md").read_text(encoding="utf-8"), {
        p.name: p.read_bytes() for p in out.glob("*.png")
    }


def _recorded_locations(results: Path) -> set[str]:
    """The artifact locations the store itself holds (experiments' and runs'), read with plain SQL."""
    with closing(sqlite3.connect(results / "mlflow.db")) as db:
        rows = db.execute("SELECT artifact_location FROM experiments WHERE name = ?", (SWEEP,)).fetchall()
        rows += db.execute("SELECT artifact_uri FROM runs").fetchall()
    return {value for (value,) in rows}


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_a_moved_results_folder_reports_and_resumes(tmp_path: Path) -> None:
    work = tmp_path / "work"  # the working directory: reports/<sweep> goes here
    work.mkdir()
    first, second, third = tmp_path / "a" / "results", tmp_path / "b" / "res", tmp_path / "c" / "out"
    failed = _sweep(first, work, MRBENCH_FAKE_CELL_FAIL=FAILING)
    assert failed.returncode == 1, failed.stderr  # one cell failed: the sweep is to be resumed
    text_before, figures_before = _report(first, work)
    assert "no correlation diagnostics logged" not in text_before  # diagnostics.json was read

    second.parent.mkdir()
    shutil.move(first, second)
    text_after, figures_after = _report(second, work)
    # (a) The same report, diagnostics included (a report without them differs).
    assert text_after == text_before.replace(str(first), str(second))
    assert figures_after == figures_before
    assert not first.exists()
    assert all(str(first) in loc for loc in _recorded_locations(second))  # the report wrote no store

    third.parent.mkdir()
    shutil.move(second, third)
    resumed = _sweep(third, work)
    assert resumed.returncode == 0, resumed.stderr
    assert f"results folder moved from {first}: re-rooted 1 experiment" in resumed.stderr
    # (b) Everything the store names is in the folder it is in now, and nothing went to an old path.
    assert not first.exists() and not second.exists()
    root = (third / "artifacts").as_uri()
    assert all(loc == root or loc.startswith(root + "/") for loc in _recorded_locations(third))
    client = MlflowClient(f"sqlite:///{third / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(SWEEP)
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    rerun = [r for r in runs if r.info.run_name == FAILING]
    assert [r.info.status for r in rerun] == ["FAILED", "FINISHED"]
    new_parent = [r for r in runs if r.data.tags.get(layout.tag(layout.ROLE)) == layout.ROLE_SWEEP][-1]
    for run_id, name in (
        (rerun[-1].info.run_id, layout.DIAGNOSTICS_ARTIFACT),
        (new_parent.info.run_id, "sweep.json"),
    ):
        assert (third / "artifacts" / run_id / "artifacts" / name).is_file()


@pytest.mark.parametrize("kind", ["sql", "client"])
def test_the_report_reads_a_moved_store_without_rewriting_it(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-rooting on read alone (a store nothing has re-rooted: e.g. one that cannot be written)."""
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("MRBENCH_RESULTS", str(first))
    synthetic_sweep(
        f"sqlite:///{first / 'mlflow.db'}",
        "read",
        methods=["grpo", "gdpo"],
        tasks=["tool-calling"],
        models=["tiny"],
        seeds=[0, 1],
        steps=4,
        failed=["gdpo|tool-calling|tiny|s1"],
    )
    shutil.move(first, second)
    reader = open_reader(f"sqlite:///{second / 'mlflow.db'}", kind)
    try:
        runs = reader.runs(reader.experiment_id("read"))
        diagnostics = reader.read_json_artifacts(runs, layout.DIAGNOSTICS_ARTIFACT)
    finally:
        reader.close()
    root = (second / "artifacts").as_uri() + "/"
    moved = {r.run_id for r in runs if r.artifact_uri.startswith(root)}
    assert len(runs) == 5 and len(moved) == 4  # all but the failed cell's, which logged no artifact
    assert len(diagnostics) == 3 and set(diagnostics) < moved  # every FINISHED cell's
    with closing(sqlite3.connect(second / "mlflow.db")) as db:
        assert all(str(first) in uri for (uri,) in db.execute("SELECT artifact_uri FROM runs"))


def _one_run_store(results: Path, experiment: str = "exp") -> tuple[str, str]:
    """A store at ``results`` with one run that has an artifact and a ``checkpoint_dir`` param;
    returns ``(experiment id, run id)``."""
    uri = f"sqlite:///{results / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = ensure_experiment(experiment, uri)
    run_id = client.create_run(experiment_id).info.run_id
    client.log_batch(
        run_id, params=[Param(layout.PARAM_CHECKPOINT_DIR, str(results / "checkpoints/k/final"))]
    )
    client.log_dict(run_id, {"ok": 1}, layout.DIAGNOSTICS_ARTIFACT)
    return experiment_id, run_id


def test_reroot_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved, copied, elsewhere = tmp_path / "moved", tmp_path / "copied", tmp_path / "elsewhere"
    monkeypatch.setenv("MRBENCH_RESULTS", str(moved))
    _, run_id = _one_run_store(moved)

    # Moved: experiments, runs and checkpoint_dir params follow the folder, once.
    shutil.move(moved, tmp_path / "new")
    new = tmp_path / "new"
    assert reroot_moved_store(new) == 1 and reroot_moved_store(new) == 0
    run = MlflowClient(f"sqlite:///{new / 'mlflow.db'}").get_run(run_id)
    assert run.info.artifact_uri == (new / "artifacts" / run_id / "artifacts").as_uri()
    assert run.data.params[layout.PARAM_CHECKPOINT_DIR] == str(new / "checkpoints/k/final")

    # Copied (the original still there): the copy names its own artifacts.
    shutil.copytree(new, copied)
    assert reroot_moved_store(copied) == 1
    assert (
        MlflowClient(f"sqlite:///{copied / 'mlflow.db'}")
        .get_run(run_id)
        .info.artifact_uri.startswith((copied / "artifacts").as_uri())
    )

    # An experiment whose artifacts live in another results folder that exists, and that this folder
    # does not hold, is left as it is (its runs' artifacts are there, not here).
    monkeypatch.setenv("MRBENCH_RESULTS", str(elsewhere))
    _, foreign_id = _one_run_store(new, "foreign")  # created with its artifacts under elsewhere/
    assert (elsewhere / "artifacts" / foreign_id).is_dir()
    assert reroot_moved_store(new) == 0

    # The same folder reached through another path (a symlink standing in for a second mount).
    link = tmp_path / "link"
    link.symlink_to(new)
    with closing(sqlite3.connect(new / "mlflow.db")) as db, db:
        db.execute(
            "UPDATE experiments SET artifact_location = ? WHERE name = 'exp'",
            ((link / "artifacts").as_uri(),),
        )
    assert reroot_moved_store(new) == 0


def test_a_record_left_by_an_outage_is_finished_after_a_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mrbench run`` again after the folder moved: the kept record, its checkpoint path and the run's
    artifacts all follow the folder (a model that does not exist proves nothing is trained)."""
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("MRBENCH_RESULTS", str(first))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = resolve_tracking_uri()
    spec = RunSpec(method="gdpo", task="tool-calling", model="/no/such/model", seed=0)
    run_id = MlflowClient(uri).create_run(ensure_experiment("rec", uri)).info.run_id
    folder = CellFolder.for_run_key(spec.run_key())
    (folder.final).mkdir(parents=True)
    (folder.final / "weights").write_text("policy")
    folder.pending.mkdir()
    (folder.pending / layout.DIAGNOSTICS_ARTIFACT).write_text('{"ok": 1}')
    pending = [
        LogBatch(params={layout.PARAM_CHECKPOINT_DIR: str(folder.final)}),
        LogArtifact(layout.DIAGNOSTICS_ARTIFACT),
    ]
    result = {
        "run_id": run_id,
        "run_key": spec.run_key(),
        "status": "FINISHED",
        "checkpoint_dir": str(folder.final),
    }
    folder.write_pending(PendingRecord(run_id, uri, result, tuple(pending)))

    shutil.move(first, second)
    monkeypatch.setenv("MRBENCH_RESULTS", str(second))
    uri = resolve_tracking_uri()
    check_tracking_reachable(uri)  # what `mrbench run` does first
    done = run_cell(spec, tracking_uri=uri, experiment="rec")

    final = second / "checkpoints" / spec.run_key() / "final"
    assert done.recovered and done.run_id == run_id and done.checkpoint_dir == str(final)
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params[layout.PARAM_CHECKPOINT_DIR] == str(final)
    assert (second / "artifacts" / run_id / "artifacts" / layout.DIAGNOSTICS_ARTIFACT).is_file()
    assert not first.exists()
