"""A sweep runs its ``lab`` scenarios once, before its report, which opens with their table; a resumed
sweep finds them in the store; ``lab: []`` turns them off; unknown names are user errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fakes import fake_cell, fake_resolve_spec
from mlflow.tracking import MlflowClient
from rich.console import Console
from sweep_testing import small

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.lab.presets import PRESETS as LAB_PRESETS
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.spec import PRESETS, SweepSpec, build_sweep_spec

SCENARIOS = ("scale", "collapse")


def _sweep(spec: SweepSpec, uri: str, **kwargs) -> str:
    """Run ``spec`` with fake cells; return what it printed."""
    out = io.StringIO()
    run_sweep(
        spec,
        tracking_uri=uri,
        resolve=fake_resolve_spec,
        cell_fn=fake_cell,
        console=Console(file=out, width=300),
        **kwargs,
    )
    return out.getvalue()


def _lab_parents(uri: str, scenario: str, sweep: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(layout.lab_experiment(scenario))
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    return [
        r
        for r in runs
        if r.data.tags.get(layout.tag(layout.ROLE)) == layout.ROLE_LAB
        and r.data.tags.get(layout.tag(layout.SWEEP)) == sweep
    ]


def test_every_preset_runs_every_lab_scenario_and_yaml_can_turn_it_off(tmp_path: Path) -> None:
    for preset in PRESETS:
        assert build_sweep_spec(preset=preset).lab == tuple(LAB_PRESETS)
    assert SweepSpec(name="x", methods=("grpo",), tasks=("t",), models=("m",), seeds=(0,)).lab == ()
    off = tmp_path / "off.yaml"
    off.write_text("lab: []\n", encoding="utf-8")
    assert build_sweep_spec(config=off).lab == ()
    some = tmp_path / "some.yaml"
    some.write_text("lab: [anti, scale]\nlab_seeds: 7\n", encoding="utf-8")
    spec = build_sweep_spec(config=some)
    assert (spec.lab, spec.lab_seeds) == (("anti", "scale"), 7)
    again = tmp_path / "again.yaml"
    import yaml

    again.write_text(yaml.safe_dump(spec.to_dict()), encoding="utf-8")
    assert build_sweep_spec(config=again) == spec  # to_dict gives the settings back


def test_unknown_scenarios_and_bad_seed_counts_are_user_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("lab: [scale, scael]\n", encoding="utf-8")
    with pytest.raises(UserError, match="scael") as caught:  # names the file and the key
        build_sweep_spec(config=bad)
    assert str(bad) in str(caught.value) and "'lab'" in str(caught.value)
    seeds = tmp_path / "seeds.yaml"
    seeds.write_text("lab_seeds: 0\n", encoding="utf-8")
    with pytest.raises(UserError, match="lab_seeds"):
        build_sweep_spec(config=seeds)


def test_dry_run_says_what_the_lab_would_run(store: str) -> None:
    spec = small("lab-dry", lab=SCENARIOS, lab_seeds=4, report=True)
    printed = _sweep(spec, store, dry_run=True)
    assert "lab: 2 scenario(s) (scale, collapse) × 2 methods (grpo, gdpo) × 4 seeds" in printed
    assert _lab_parents(store, "scale", "lab-dry") == []  # a dry run runs nothing
    assert "not run: the report is off" in _sweep(small("lab-dry", lab=SCENARIOS), store, dry_run=True)
    assert "lab: off" in _sweep(small("lab-dry"), store, dry_run=True)


def test_the_sweep_runs_its_lab_once_and_its_report_opens_with_the_table(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # reports/<sweep> is relative to the working directory
    # No grpo among the sweep's methods: the lab adds it as its reference.
    spec = small("labbed", methods=("gdpo", "corrgrpo"), lab=SCENARIOS, lab_seeds=4, report=True)
    printed = _sweep(spec, store)
    for scenario in SCENARIOS:
        (parent,) = _lab_parents(store, scenario, "labbed")
        assert parent.info.status == "FINISHED"
        assert parent.data.tags[layout.tag(layout.LAB_KEY)]
        assert parent.data.tags[layout.tag(layout.COMMAND)] == (
            f"mrbench simulate --scenario {scenario} --methods grpo,gdpo,corrgrpo --seeds 4"
        )
        assert f"lab {scenario}: 3 methods × 4 seeds" in printed
    # Then the scenario fitted to each task's cells' rewards, which these fake cells did not keep.
    assert "no lab on the cells' rewards: --like sweep:labbed: none of its 4 finished cells has" in printed
    report = (tmp_path / "reports" / "labbed" / "report.md").read_text(encoding="utf-8")
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Estimator lab: where the estimators differ"
    assert "| `scale` | 4 × 200 | `grpo` | `small` (final, normalised) |" in report
    assert "| `collapse` | 4 × 200 | `grpo` | advantage resolution |" in report
    assert "Reproduce with figures: `mrbench simulate --scenario scale --methods grpo,gdpo,corrgrpo" in report

    # Resumed: the same lab is in the store, so it is not simulated again.
    printed = _sweep(spec, store)
    assert "lab scale: already in the store" in printed
    assert len(_lab_parents(store, "scale", "labbed")) == 1
    # A change to what the lab depends on runs it again; the report shows the latest.
    _sweep(small("labbed", methods=("gdpo", "corrgrpo"), lab=("scale",), lab_seeds=5, report=True), store)
    assert len(_lab_parents(store, "scale", "labbed")) == 2
    report = (tmp_path / "reports" / "labbed" / "report.md").read_text(encoding="utf-8")
    assert "| `scale` | 5 × 200 |" in report and "`collapse`" not in report


def test_no_lab_without_the_report_or_with_an_empty_list(store: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _sweep(small("lab-noreport", lab=("scale",), lab_seeds=3, report=False), store)
    assert _lab_parents(store, "scale", "lab-noreport") == []
    _sweep(small("lab-empty", lab=(), report=True), store)
    report = (tmp_path / "reports" / "lab-empty" / "report.md").read_text(encoding="utf-8")
    assert "Estimator lab" not in report


def _cell_runs(uri: str, sweep: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(sweep)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    return [r for r in runs if r.data.tags.get(layout.tag(layout.ROLE)) != layout.ROLE_SWEEP]


@pytest.mark.slow  # two worker processes and a lab (~11 s); CI's slow stage runs it
def test_with_worker_processes_the_lab_runs_beside_the_cells_and_speaks_after_them(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MRBENCH_FAKE_CELL_SECONDS", "2")
    spec = small("beside", lab=SCENARIOS, lab_seeds=4, report=True, workers=2)
    printed = _sweep(spec, store)
    cells = _cell_runs(store, "beside")
    assert len(cells) == 4 and {c.info.status for c in cells} == {"FINISHED"}
    last_cell_end = max(c.info.end_time for c in cells)
    for scenario in SCENARIOS:
        (parent,) = _lab_parents(store, scenario, "beside")
        assert parent.info.status == "FINISHED"
        assert parent.info.start_time < last_cell_end  # simulated while the cells ran
    lines = printed.splitlines()
    lab_lines = [i for i, line in enumerate(lines) if line.startswith("lab ")]
    cell_lines = [i for i, line in enumerate(lines) if "|tool-calling|tiny|" in line]
    assert len(lab_lines) == 2 and min(lab_lines) > max(cell_lines)  # printed once the cells are done
    report = (tmp_path / "reports" / "beside" / "report.md").read_text(encoding="utf-8")
    assert "| `scale` | 4 × 200 | `grpo` |" in report and "| `collapse` | 4 × 200 | `grpo` |" in report


@pytest.mark.slow
def test_an_interrupted_sweep_leaves_no_lab_run_open(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import _thread
    import signal
    import threading

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MRBENCH_FAKE_CELL_SECONDS", "3")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(1.5, _thread.interrupt_main).start()  # while the first two cells run
        spec = small("beside-int", lab=tuple(LAB_PRESETS), lab_seeds=4, report=True, workers=2)
        outcome = run_sweep(
            spec,
            tracking_uri=store,
            resolve=fake_resolve_spec,
            cell_fn=fake_cell,
            console=Console(file=io.StringIO(), width=300),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert outcome.interrupted and outcome.exit_code == 130
    lab_runs = [r for scenario in LAB_PRESETS for r in _lab_parents(store, scenario, "beside-int")]
    assert {r.info.status for r in lab_runs} <= {"FINISHED"}  # none left RUNNING
    assert not (tmp_path / "reports" / "beside-int").exists()  # no report after Ctrl-C


def test_a_stopped_lab_starts_no_further_scenario(store: str) -> None:
    import threading

    from mrbench.lab.in_sweep import plan, run_jobs

    stop = threading.Event()
    stop.set()
    jobs = plan(SCENARIOS, ("grpo",), {}, 4)
    assert run_jobs(jobs, sweep="stopped", tracking_uri=store, say=lambda line: None, stop=stop) == []
    assert _lab_parents(store, "scale", "stopped") == []
