"""Sweep settings declared once (mrbench.sweeps.settings): the doc's table, the command's options,
and the cell options (checkpoint interval, store retry bound) that reach a cell with its spec."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fakes import fake_cell, fake_resolve_spec
from sweep_testing import small, sweep

from mrbench.core.errors import UserError
from mrbench.engine.config import CellOptions, RunSpec, TrainSettings
from mrbench.sweeps.grid import expand_grid
from mrbench.sweeps.settings import BY_KEY, SETTINGS, Switch, settings_table
from mrbench.sweeps.spec import build_sweep_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "sweep-yaml.md"


def _spec(**options: object) -> RunSpec:
    return RunSpec(
        "grpo", "tool-calling", "tiny", 0, {"eps": 1e-6}, {"n_train": 8}, TrainSettings(steps=3),
        options=CellOptions(**options),  # type: ignore[arg-type]
    )  # fmt: skip


# ---------------------------------------------------------------------------------- cell options


def test_cell_options_do_not_change_the_run_key() -> None:
    plain = _spec()
    for options in (
        {"checkpoint_every": 0},
        {"tracking_retry_s": 5.0},
        {"checkpoint_every": 7, "tracking_retry_s": 0.0},
    ):
        assert _spec(**options).run_key() == plain.run_key(), options  # type: ignore[arg-type]
    assert _spec(checkpoint_every=2) == plain  # equal as cells: options say how a cell runs


def test_a_spec_without_options_serialises_as_before() -> None:
    assert "options" not in _spec().to_dict()
    assert RunSpec.from_dict(_spec().to_dict()).options == CellOptions()


def test_cell_options_travel_with_the_spec_to_a_worker() -> None:
    spec = _spec(checkpoint_every=4, tracking_retry_s=1.5)
    data = json.loads(json.dumps(spec.to_dict()))  # as cell_process's payload carries it
    assert data["options"] == {"checkpoint_every": 4, "tracking_retry_s": 1.5}
    back = RunSpec.from_dict(data)
    assert back.options == CellOptions(checkpoint_every=4, tracking_retry_s=1.5)
    assert back.run_key() == spec.run_key() == _spec().run_key()


def test_sweep_settings_and_options_give_the_cell_options(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("checkpoint_every: 5\ntracking_retry_s: 30\n")
    spec = build_sweep_spec(config=path)
    assert (spec.checkpoint_every, spec.tracking_retry_s) == (5, 30.0)
    spec = build_sweep_spec(config=path, overrides={"checkpoint_every": "auto", "tracking_retry_s": 2.5})
    assert (spec.checkpoint_every, spec.tracking_retry_s) == (None, 2.5)
    assert build_sweep_spec(overrides={"checkpoint_every": "0"}).checkpoint_every == 0
    # Not given: left out of the sweep's config (its params and report are as before).
    assert "checkpoint_every" not in build_sweep_spec().to_dict()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "checkpoint_every: -1\n",
            "'checkpoint_every' in .*s.yaml: expected an integer >= 0 and <= 100000, got -1",
        ),
        ("checkpoint_every: often\n", "'checkpoint_every' in .*s.yaml: expected auto or an integer >= 0"),
        ("checkpoint_every: '100001'\n", "'checkpoint_every' in .*s.yaml: expected auto or an integer >= 0"),
        (
            "tracking_retry_s: -2\n",
            "'tracking_retry_s' in .*s.yaml: expected a number >= 0 and <= 86400, got -2",
        ),
        ("tracking_retry_s: soon\n", "'tracking_retry_s'"),
        ("cpus_per_cell: 0\n", "'cpus_per_cell' in .*s.yaml: expected a number > 0 and <= 1024, got 0"),
        # Issue 36, item 2: every count bounded where it is declared, refused before anything starts.
        ("n_seeds: 100000\n", "'n_seeds' in .*s.yaml: expected an integer >= 1 and <= 1000, got 100000"),
        ("workers: 1000\n", "'workers' in .*s.yaml: expected an integer >= 1 and <= 256, got 1000"),
        ("lab_seeds: 100000000\n", "'lab_seeds' in .*s.yaml: expected an integer >= 1 and <= 100000"),
        ("seeds: [4294967296]\n", "'seeds' in .*s.yaml: expected an integer >= 0 and <= 4294967295"),
        ("steps: 100000000\n", "'steps' in .*s.yaml: expected an integer >= 1 and <= 100000"),
    ],
)
def test_bad_cell_options_name_the_file_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=fragment):
        build_sweep_spec(config=path)


def options_cell(spec: RunSpec, **kwargs: Any) -> Any:
    """The fake cell, keeping the options its spec brought (worker processes import it by path)."""
    Path(os.environ["MRBENCH_TEST_OPTIONS"], spec.run_key()).write_text(json.dumps(spec.options.given()))
    return fake_cell(spec, **kwargs)


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
@pytest.mark.parametrize("workers", [1, 2])
def test_the_sweep_hands_each_cell_its_options(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setenv("MRBENCH_TEST_OPTIONS", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ["PYTHONPATH"]]))
    spec = small(f"options-{workers}", workers=workers, checkpoint_every=4, tracking_retry_s=7.0)
    outcome = sweep(spec, store, cell_fn=options_cell)
    assert outcome.exit_code == 0 and len(outcome.outcomes) == 4
    plain = expand_grid(small("plain"), fake_resolve_spec)
    assert [c.key for c in outcome.grid.cells] == [c.key for c in plain.cells]  # same run keys
    for cell in plain.cells:
        given = json.loads((tmp_path / cell.key).read_text())
        assert given == {"checkpoint_every": 4, "tracking_retry_s": 7.0}, cell.label


# ------------------------------------------------------------------------------ the declaration


def test_the_doc_table_is_generated_from_the_declaration() -> None:
    """docs/sweep-yaml.md holds :func:`settings_table` verbatim; after changing a setting, paste
    ``python -c "from mrbench.sweeps.settings import settings_table; print(settings_table())"``."""
    text = DOC.read_text(encoding="utf-8")
    table = settings_table()
    start = text.find("| key | default | option | meaning |")
    assert start >= 0, "docs/sweep-yaml.md lost its settings table"
    end = text.find("\n\n", start)
    assert text[start:end] == table, "docs/sweep-yaml.md's settings table differs from settings_table()"


def test_every_setting_is_a_spec_field_or_sets_several() -> None:
    from dataclasses import fields

    from mrbench.sweeps.spec import SweepSpec

    names = {f.name for f in fields(SweepSpec)}
    for setting in SETTINGS:
        assert setting.field is None or setting.field in names, setting.key
    flags = [s.option.flag for s in SETTINGS if s.option is not None]
    assert len(flags) == len(set(flags))
    assert isinstance(BY_KEY["report"].option, Switch) and BY_KEY["report"].option.sets is False


def test_the_command_has_an_option_per_setting_that_declares_one() -> None:
    import typer
    from typer.testing import CliRunner

    from mrbench.cli.commands.sweep import overrides_from_options, register

    app = typer.Typer()

    @app.callback()
    def group() -> None:
        """Keeps ``sweep`` a subcommand."""

    register(app)
    shown = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).output
    for setting in SETTINGS:
        if setting.option is not None:
            assert setting.option.flag in shown, setting.key
    for flag in ("--config", "--dry-run", "--tracking-uri", "--verbose"):
        assert flag in shown
    given = overrides_from_options({"no_report": True, "no_lab": False, "tracking_retry_s": 3.0})
    assert given["report"] is False and given["lab"] is None and given["tracking_retry_s"] == 3.0
    assert given["methods"] is None and set(given) == {s.key for s in SETTINGS if s.option is not None}
