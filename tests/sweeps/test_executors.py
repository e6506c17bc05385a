"""The one choice of a sweep's executor, and what each tells the orchestrator."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mrbench.sweeps.executors import Processes, RayTasks, Sequential, executor_for


def _spec(executor: str = "local", processes: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        executor=executor, processes_per_cell=processes, ray_address="ray://head:10001", gpus_per_cell=1.0,
        cpus_per_cell=4.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "workers", "expected"),
    [
        (_spec(), 1, Sequential()),
        (_spec(), 3, Processes(3)),
        (_spec(processes=2), 1, Processes(1)),  # a multi-process cell starts from a worker
        (_spec("ray"), 1, RayTasks("ray://head:10001", 1.0, 4.0)),
        (_spec("ray", processes=2), 4, RayTasks("ray://head:10001", 1.0, 4.0)),
    ],
)
def test_the_settings_choose_the_executor(spec: SimpleNamespace, workers: int, expected: object) -> None:
    assert executor_for(spec, workers) == expected


def test_only_ray_cells_check_their_own_gpus_and_only_sequential_cells_run_here() -> None:
    assert (Sequential().elsewhere, Sequential().on_this_machine) == (False, True)
    assert (Processes(2).elsewhere, Processes(2).on_this_machine) == (True, True)
    ray = RayTasks(None, 0.0, 1.0)
    assert (ray.elsewhere, ray.on_this_machine) == (True, False)
