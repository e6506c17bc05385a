"""The Ray executor for real: a local Ray running real micro cells (and, slow, fake cells one of
which fails). The two-node cluster tests are in :mod:`ray_cluster_cases`, run inside a network
namespace of their own by ``test_ray_cluster.py``.

Ray is part of the ``dev`` extra, so these run under the README's test command. The local Ray is
small (1 CPU, an 80 MB object store, no dashboard, no usage stats), has its own short temporary
directory (Ray's socket paths must fit in 107 bytes), and is shut down in a ``finally``; the
fixture then checks that none of its processes is left.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from fakes import fake_cell
from mlflow.tracking import MlflowClient
from ray_testing import OBJECT_STORE_BYTES, QUIET_RAY, alive, ray_pids, stop_ray, wait_gone
from sweep_testing import RUN_KEY, assert_exactly_once_finished, quiet, small, sweep

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.sweeps.executors.ray import fits_somewhere, task_env
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.spec import SweepSpec, build_sweep_spec

LOCAL_TOKEN = secrets.token_hex(16)  # one per test process: Ray caches the token it first reads


# ------------------------------------------------------------------------------ a local Ray


@pytest.fixture
def local_ray() -> Iterator[None]:
    """A local Ray in this process with 1 CPU, shut down (and checked gone) after the test."""
    temp_dir = tempfile.mkdtemp(prefix="mrb-ray-")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in QUIET_RAY.items():
            mp.setenv(key, value)
        # Ray turns token authentication on for a local Ray (the mode is read once per process, so
        # it is left to Ray) and would save a new token under ~/.ray: it gets this one instead.
        mp.setenv("RAY_AUTH_TOKEN", LOCAL_TOKEN)
        mp.delenv("RAY_AUTH_MODE", raising=False)
        mp.delenv("RAY_ADDRESS", raising=False)
        try:
            # address="local": a new Ray, even if a `ray start` cluster runs on this machine.
            ray.init(
                address="local",
                num_cpus=1,
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=int(OBJECT_STORE_BYTES),
                _temp_dir=temp_dir,
            )
            yield
        finally:
            pids = ray_pids(temp_dir)
            ray.shutdown()
            try:
                assert not wait_gone(pids, 30.0), f"Ray processes left behind: {sorted(alive(pids))}"
            finally:
                stop_ray(temp_dir)  # nothing to stop unless the check above failed
                shutil.rmtree(temp_dir, ignore_errors=True)


def test_task_env_forwards_plugins_and_mrbench_settings_only() -> None:
    env = {
        "PYTHONPATH": "/plugins",
        "MRBENCH_RESULTS": "/r",
        "MLFLOW_S3_ENDPOINT_URL": "http://s3",
        "HOME": "/",
    }
    assert task_env(env) == {
        "PYTHONPATH": "/plugins",
        "MRBENCH_RESULTS": "/r",
        "MLFLOW_S3_ENDPOINT_URL": "http://s3",
    }


def test_cpus_per_cell_is_a_sweep_setting(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("executor: ray\ngpus_per_cell: 1\ncpus_per_cell: 4\n")
    spec = build_sweep_spec(config=path)
    assert (spec.executor, spec.gpus_per_cell, spec.cpus_per_cell) == ("ray", 1.0, 4.0)
    assert build_sweep_spec().cpus_per_cell == 1.0
    path.write_text("cpus_per_cell: 0\n")
    with pytest.raises(UserError, match=r"'cpus_per_cell'.*a number > 0"):
        build_sweep_spec(config=path)


@pytest.mark.slow
def test_local_ray_runs_a_small_sweep_of_real_cells(
    local_ray: None, store: str, micro_model_dir: Path
) -> None:
    """Real training cells (micro model, 2 steps) as Ray tasks, then a rerun that skips them all."""
    assert fits_somewhere(ray.nodes(), 1, 0)
    assert not fits_somewhere(ray.nodes(), 2, 0) and not fits_somewhere(ray.nodes(), 1, 1)
    spec = SweepSpec(
        name="ray-real",
        methods=("grpo", "gdpo"),
        tasks=("tool-calling",),
        models=(str(micro_model_dir),),
        seeds=(0,),
        task_params={"tool-calling": {"n_train": 16, "n_eval": 4}},
        train={"steps": 2, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 4},
        executor="ray",
        report=False,
    )
    outcome = run_sweep(spec, tracking_uri=store, console=quiet())
    assert [(o.status, o.error) for o in outcome.outcomes] == [("FINISHED", None)] * 2
    keys = [c.key for c in outcome.grid.cells]
    assert_exactly_once_finished(store, "ray-real", keys)
    client = MlflowClient(tracking_uri=store)
    for result in outcome.outcomes:
        run = client.get_run(result.run_id)
        assert run.data.tags[RUN_KEY] == result.cell.key
        assert run.data.tags[layout.PARENT_RUN_TAG] == outcome.parent_run_id
        assert {layout.eval_metric("exact_match"), layout.REWARD} <= set(run.data.metrics)
    again = run_sweep(spec, tracking_uri=store, console=quiet())
    assert again.outcomes == [] and len(again.skipped) == 2
    assert_exactly_once_finished(store, "ray-real", keys)


@pytest.mark.slow
def test_local_ray_runs_fake_cells_and_reports_a_failing_one(local_ray: None, store: str) -> None:
    """One failing cell is reported FAILED with its error; the others finish."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRBENCH_FAKE_CELL_FAIL", "gdpo|*|s1")
        outcome = sweep(small("ray-fake", executor="ray"), store, cell_fn=fake_cell)
    by_label = {o.cell.label: o for o in outcome.outcomes}
    assert by_label["gdpo|tool-calling|tiny|s1"].status == "FAILED"
    assert "scripted failure" in (by_label["gdpo|tool-calling|tiny|s1"].error or "")
    assert sorted(o.status for o in outcome.outcomes) == ["FAILED", "FINISHED", "FINISHED", "FINISHED"]
    assert outcome.exit_code == 1
