"""Where a report is written and what it deletes (issue 36, item 1): the sweep's name is checked
before it becomes a folder, the default folder stays inside ``reports/``, and a report deletes only
the figures its predecessor in that folder listed in its manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrbench.cli.app import app
from mrbench.core.errors import UserError
from mrbench.reporting.build import build_report, report_folder


@pytest.mark.parametrize("sweep", ["/tmp/x/ABS", "../up", "a/b", "", "x" * 300, ".hidden"])
def test_a_sweep_name_that_is_not_a_name_is_refused_before_any_folder(
    sweep: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(app, ["report", sweep, "--tracking-uri", uri])
    assert isinstance(result.exception, UserError), result.output
    assert "is not a valid name" in str(result.exception) and str(result.exception).startswith("SWEEP: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no store, no folder, nothing written


def test_an_experiment_named_like_a_path_never_gets_a_report_outside_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe's case: `mrbench run --experiment /tmp/x/ABS` (now refused), or anyone with access
    # to a shared store creating that experiment, then `mrbench report /tmp/x/ABS`.
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # refused before the store is opened
    target = tmp_path / "x" / "ABS"
    target.mkdir(parents=True)
    (target / "curves-keep.png").write_bytes(b"not the report's")
    with pytest.raises(UserError, match="is not a valid name"):
        build_report(str(target), tracking_uri=uri)
    assert sorted(p.name for p in target.iterdir()) == ["curves-keep.png"]


def test_the_default_folder_must_resolve_inside_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "reports" / "linked").symlink_to(tmp_path / "elsewhere")
    assert report_folder("fine") == Path("reports") / "fine"
    rehearsal = "x" * 100 + "-rehearsal"  # a name mrbench derives from a valid one is read back
    assert report_folder(rehearsal) == Path("reports") / rehearsal
    with pytest.raises(UserError, match="outside"):
        report_folder("linked")
