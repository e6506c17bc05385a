"""A cell's result read back from JSON (a pending record's, a multi-process cell's rank 0 answer)."""

from __future__ import annotations

import dataclasses

import pytest

from mrbench.core.records import RecordError
from mrbench.engine.cell.cell_result import CellResult
from mrbench.engine.config import resolve_spec

SPEC = resolve_spec("gdpo", "tool-calling", "tiny", 3, task_params={"n_train": "16", "n_eval": "4"})

GOOD_RESULT = {
    "run_id": "r1",
    "run_key": "k1",
    "status": "FINISHED",
    "metrics_before": {"exact_match": 0.25},
    "metrics_after": {"exact_match": 1},
    "wall_s": 3,
    "primary_metric": "exact_match",
    "checkpoint_dir": "/c/final",
    "recovered": False,
}


def test_cell_result_from_a_mapping_round_trips() -> None:
    result = CellResult.from_mapping(GOOD_RESULT, "rank 0's result")
    assert result == CellResult(
        "r1", "k1", "FINISHED", {"exact_match": 0.25}, {"exact_match": 1.0}, 3.0, "exact_match", "/c/final"
    )
    assert CellResult.from_mapping(dataclasses.asdict(result), "again") == result
    minimal = CellResult.from_mapping({"run_id": "r", "run_key": "k", "status": "KILLED"}, "src")
    assert minimal.metrics_after == {} and minimal.wall_s == 0.0 and not minimal.recovered


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"extra": 1}, r"^rank 0's result: unknown field\(s\) 'extra'$"),
        ({"run_key": None}, r"^rank 0's result: 'run_key' is missing$"),
        ({"wall_s": "3"}, r"^rank 0's result: 'wall_s' should be int or float, not '3'$"),
        ({"recovered": "no"}, r"^rank 0's result: 'recovered' should be bool, not 'no'$"),
        ({"status": 1}, r"^rank 0's result: 'status' should be str, not 1$"),
        ({"metrics_after": {"m": "x"}}, r"'metrics_after' gives 'm' the value 'x', not a number"),
        ({"metrics_before": [1]}, r"'metrics_before' should be dict, not \[1\]"),
    ],
)
def test_cell_result_from_a_mapping_names_the_source_and_the_field(change, says) -> None:
    data = {k: v for k, v in (GOOD_RESULT | change).items() if v is not None}
    with pytest.raises(RecordError, match=says):
        CellResult.from_mapping(data, "rank 0's result")


def test_cell_result_from_something_not_a_mapping() -> None:
    with pytest.raises(RecordError, match=r"^rank 0's result is not a JSON object"):
        CellResult.from_mapping(["r1"], "rank 0's result")


def test_a_multi_process_cells_bad_result_is_a_record_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """``mrbench run --processes N`` reads rank 0's answer through :meth:`CellResult.from_mapping`."""
    import mrbench.engine.processes.distributed as distributed
    from mrbench.cli.commands import run as run_command

    monkeypatch.setattr(distributed, "launch_cell", lambda spec, **kw: {"run_id": "r", "status": "FINISHED"})
    launch = run_command.CellLaunch("sqlite:///x.db", "e", "final", None, 1.0, 2, "ddp", True)
    with pytest.raises(RecordError, match=r"^the result of the 2-process cell: 'run_key' is missing$"):
        run_command.run_cell_or_launch(SPEC, launch)
    monkeypatch.setattr(distributed, "launch_cell", lambda spec, **kw: dict(GOOD_RESULT))
    assert run_command.run_cell_or_launch(SPEC, launch).run_id == "r1"
