"""The report's lab section reads the sweep's lab runs back from the store: the latest FINISHED one of
this sweep per scenario of its config, the lab's own numbers, the differences in words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import synthetic_sweep

from mrbench.core import layout
from mrbench.core.records import LabRecord
from mrbench.lab.in_sweep import plan, run_jobs
from mrbench.reporting.context import ReportContext, load_context
from mrbench.reporting.lab_section import Compared, _words, lab_section, score_label
from mrbench.reporting.render import fmt
from mrbench.reporting.stats import Interval
from mrbench.store.reader import Reader, open_reader

SWEEP = "rep-lab"


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('lab-section') / 'mlflow.db'}"
    synthetic_sweep(
        uri, SWEEP, methods=("grpo", "gdpo"), tasks=("tool-calling",), models=("tiny",), seeds=(0, 1)
    )
    quiet = lambda line: None  # noqa: E731
    for seeds in (3, 4):  # the later run is the one the report uses
        run_jobs(plan(["scale"], ["grpo", "gdpo"], {}, seeds), sweep=SWEEP, tracking_uri=uri, say=quiet)
    run_jobs(plan(["scale"], ["grpo", "gdpo"], {}, 5), sweep="another", tracking_uri=uri, say=quiet)
    store = open_reader(uri)
    yield store
    store.close()


def _context(reader: Reader, lab: list[str]) -> ReportContext:
    experiment_id = reader.experiment_id(SWEEP)
    ctx = load_context(SWEEP, reader, reader.runs(experiment_id), command="mrbench report x", store_note="s")
    ctx.sweep_record.config["lab"] = lab  # what a sweep with these scenarios records
    return ctx


def test_the_latest_lab_run_of_this_sweep_is_shown_with_the_labs_own_numbers(reader: Reader) -> None:
    ctx = _context(reader, ["scale", "anti"])
    text = "\n".join(lab_section(ctx, reader))
    assert text.startswith("## Estimator lab: where the estimators differ")
    assert "| `scale` | 4 × 200 | `grpo` | `small` (final, normalised) |" in text
    assert "5 × 200" not in text and "3 × 200" not in text  # another sweep's run; an older run
    # The IQMs and P are the ones mrbench simulate computed (same statistics, resamples and seed).
    experiment_id = reader.experiment_id(layout.lab_experiment("scale"))
    parents = [
        r
        for r in reader.runs(experiment_id)
        if layout.read_tag(r.tags, layout.SWEEP) == SWEEP and layout.read_tag(r.tags, layout.ROLE) == "lab"
    ]
    latest = max(parents, key=lambda r: r.end_time or 0)
    gdpo = LabRecord.from_json(reader.read_json_artifact(latest, layout.LAB_ARTIFACT)).methods["gdpo"]
    point, low, high = gdpo.iqm["final/small"]
    p_point, p_low, p_high = gdpo.poi["final/small"]
    assert (
        f"| `gdpo` | | {fmt(point)} [{fmt(low)}, {fmt(high)}] | "
        f"{fmt(p_point)} [{fmt(p_low)}, {fmt(p_high)}] |" in text.replace("|  |", "| |")
    )
    assert "Reproduce with figures: `mrbench simulate --scenario scale --methods grpo,gdpo --seeds 4`" in text
    assert "No lab result of this sweep in the store for `anti`" in text


def test_no_section_when_the_sweep_ran_no_lab(reader: Reader) -> None:
    assert lab_section(_context(reader, []), reader) == []


def test_differences_are_said_where_the_interval_of_p_excludes_one_half() -> None:
    def compared(low: float, high: float) -> Compared:
        return Compared(Interval(0.5, 0.4, 0.6), Interval((low + high) / 2, low, high))

    directions = [compared(0.6, 0.9).direction, compared(0.1, 0.4).direction, compared(0.4, 0.6).direction]
    assert directions == [1, -1, 0]

    class Lab:
        key_score = "final/small"

    table = {
        "gdpo": {"final/small": compared(0.8, 1.0), "objective": compared(0.0, 0.1)},
        "corrgrpo": {"final/small": compared(0.3, 0.7), "objective": compared(0.45, 0.55)},
    }
    said = _words(Lab(), table)  # type: ignore[arg-type]
    assert said.startswith(
        "`small` (final, normalised): higher than grpo's for gdpo (P = 0.900 [0.800, 1.000])"
    )
    assert "objective (normalised): lower than grpo's for gdpo" in said and "corrgrpo" not in said
    assert score_label("steps_to_90") == "steps to 90 %"


def test_a_report_opens_with_the_lab_before_the_findings(reader: Reader, tmp_path: Path) -> None:
    from mrbench.reporting.build import write_report

    ctx = _context(reader, ["scale"])
    path, _ = write_report(ctx, tmp_path / "out", workers=1, opening=lab_section(ctx, reader))
    sections = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Estimator lab: where the estimators differ", "## Findings"]
