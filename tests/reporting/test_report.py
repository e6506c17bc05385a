"""Reports from real MLflow stores: sections, numbers traced to the logged runs, determinism,
both readers agreeing, run selection rules, lower-is-better metrics and the CLI."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes import synthetic_sweep
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.reporting.build import build_report
from mrbench.reporting.figures import MANIFEST
from mrbench.store.client import ensure_experiment


@dataclass
class Store:
    uri: str
    root: Path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = tmp_path_factory.mktemp("report-store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRBENCH_RESULTS", str(root))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        MlflowClient(tracking_uri=uri).search_experiments()
        yield Store(uri, root)


@dataclass
class Built:
    parent: str
    out: Path
    text: str


@pytest.fixture(scope="module")
def synthetic(store: Store) -> Built:
    parent = synthetic_sweep(
        store.uri,
        "rep",
        methods=["grpo", "gdpo", "corrgrpo"],
        tasks=["code-generation", "tool-calling", "agent-security"],
        models=["tiny"],
        seeds=[0, 1, 2],
        steps=8,
        command="mrbench sweep --name rep",
        failed=["gdpo|tool-calling|tiny|s2"],
        unavailable={"toy": "ModuleNotFoundError: No module named 'tasks.toy'"},
    )
    out = store.root / "reports" / "rep"
    path = build_report("rep", tracking_uri=store.uri, out=out)
    return Built(parent, out, path.read_text())


def test_report_has_every_section(synthetic: Built) -> None:
    text = synthetic.text
    for fragment in [
        "# Sweep report: `rep`",
        "| sweep command | `mrbench sweep --name rep` |",
        "| git sha | `fake0000` (26 runs) |",
        "| packages | ",
        "mlflow 3.17.2",
        "| CPU (the sweeping machine's) | ",  # a row of its own, not among the packages
        "| seeds per cell | 3 seeds: 8 cells, 2 seeds: 1 cell |",
        "2000 resamples, numpy seed 0",
        "sweep config (latest invocation",
        "## Warnings",
        "**Few seeds**",
        "**Failed cells** (1, never FINISHED; not in the statistics): `gdpo|tool-calling|tiny|s2` FAILED",
        "**Unavailable task** `toy`: ModuleNotFoundError",
        "### code-generation · tiny",
        "### tool-calling · tiny",
        "### agent-security · tiny",
        "| method | seeds | mean | IQM | 95 % CI | per seed |",
        "| method | P(method > grpo) | 95 % CI |",
        "## Probability of improvement over grpo, all tasks and models",
        "## Trade-offs between reward components (Pareto)",
        "## Findings",
        "| rank | method | mean | Δ vs grpo | compared with grpo | seeds for 80 % power |",
        "## Why methods differ: reward correlations, advantage shares and shadow estimators",
        "| method in use | own resolution | grpo | gdpo | corrgrpo |",
        "## Did training improve the primary eval metric?",
        "asr ↓",
    ]:
        assert fragment in text, fragment
    assert not re.search(r"^\| packages \|.* cpu ", text, re.M), "the CPU kind is listed as a package"
    assert re.search(
        r"Every number and figure below is produced by `mrbench report rep --out \S+` from the MLflow store "
        r"alone \(the default store, experiment `rep`\)",
        text,
    )


def test_findings_come_right_after_the_header_table(synthetic: Built) -> None:
    text = synthetic.text
    table_end = text.index("| statistics |")
    assert text.index("## Findings") < text.index("## Warnings") < text.index("sweep config (latest")
    assert text[table_end:].split("\n", 2)[2].startswith("## Findings")  # after the table's last row
    for task in ("code-generation", "tool-calling", "agent-security"):
        assert f"**{task}** · tiny — `" in text
    # The fake gains: corrgrpo ranks first on every task (its seeds beat grpo's on code generation).
    assert "| 1 | corrgrpo |" in text and "corrgrpo > grpo: P = 1.00 [1.00, 1.00]" in text


def test_shadow_tables_show_each_method_in_use_against_the_others(synthetic: Built) -> None:
    lines = synthetic.text.splitlines()
    header = "| method in use | own resolution | grpo | gdpo | corrgrpo |"
    assert lines.count(header) == 3  # one per task
    start = lines.index(header)
    grpo, gdpo = lines[start + 2], lines[start + 3]
    # Fake values: GRPO's resolution is 0.6, the others' 0.9; a method is not its own shadow.
    assert grpo.startswith("| grpo | 0.600 | – | ") and grpo.endswith(" / 0.900 |")
    assert gdpo.startswith("| gdpo | 0.900 | ") and " / 0.600 | – | " in gdpo


def test_figures_exist_and_are_all_linked(synthetic: Built) -> None:
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", synthetic.text))
    on_disk = {p.name for p in synthetic.out.glob("*.png")}
    assert linked == on_disk
    assert {
        "curves-tool-calling-tiny.png",
        "pareto-code-generation.png",
        "corr-agent-security.png",
        "share-tool-calling.png",
    } <= on_disk


def test_table_numbers_are_the_logged_eval_metrics(store: Store, synthetic: Built) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment = client.get_experiment_by_name("rep")
    runs = [
        r
        for r in client.search_runs([experiment.experiment_id], max_results=100)
        if layout.read_tag(r.data.tags, layout.METHOD) == "corrgrpo"
        and layout.read_tag(r.data.tags, layout.TASK) == "tool-calling"
    ]
    values = sorted(
        (int(layout.read_tag(r.data.tags, layout.SEED)), r.data.metrics[layout.eval_metric("exact_match")])
        for r in runs
    )
    row = next(
        line
        for line in synthetic.text.splitlines()
        if line.startswith("| corrgrpo | 3 |") and all(f"s{s}: {v:.3f}" in line for s, v in values)
    )
    mean = sum(v for _, v in values) / 3
    assert f"| {mean:.3f} |" in row


def test_report_is_logged_to_the_parent_run(store: Store, synthetic: Built) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    logged = {a.path for a in client.list_artifacts(synthetic.parent, layout.REPORT_DIR)}
    assert f"{layout.REPORT_DIR}/report.md" in logged
    assert {f"{layout.REPORT_DIR}/{p.name}" for p in synthetic.out.glob("*.png")} <= logged


def test_regeneration_is_byte_identical_with_either_reader(store: Store, synthetic: Built) -> None:
    before = {p.name: p.read_bytes() for p in synthetic.out.iterdir()}
    build_report("rep", tracking_uri=store.uri, out=synthetic.out, reader="client", log_to_parent=False)
    after = {p.name: p.read_bytes() for p in synthetic.out.iterdir()}
    assert before.keys() == after.keys()
    assert [name for name in before if before[name] != after[name]] == []


def log_run(
    client: MlflowClient,
    experiment_id: str,
    *,
    method: str,
    seed: int,
    before: float,
    after: float,
    key: str | None = None,
    status: str = "FINISHED",
    params: dict[str, str] | None = None,
    task: str = "attacks",
    primary: str = "asr",
    components: str = "safety",
    curves: dict[str, list[float]] | None = None,
    evals: dict[str, float] | None = None,
) -> str:
    """A minimal cell run: tags, eval before/after of a lower-is-better primary metric (and the
    final value of each other eval metric in ``evals``), and training curves only if ``curves``
    (metric key → value per step) is given."""
    values = {
        layout.METHOD: method,
        layout.TASK: task,
        layout.MODEL: "tiny",
        layout.SEED: str(seed),
        layout.RUN_KEY: key or f"{method}-{seed}-{task}",
        layout.GIT_SHA: "abc",
        layout.PRIMARY_METRIC: primary,
        layout.LOWER_IS_BETTER: "asr",
        layout.REWARD_COMPONENTS: components,
    }
    tags = {layout.tag(name): value for name, value in values.items()}
    run_id = client.create_run(experiment_id, tags=tags).info.run_id
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[
            Metric(layout.eval_before_metric(primary), before, now, 0),
            Metric(layout.eval_metric(primary), before, now, 0),
            Metric(layout.eval_metric(primary), after, now + 1, 10),
            *[Metric(layout.eval_metric(k), v, now + 1, 10) for k, v in (evals or {}).items()],
            *[
                Metric(k, v, now, step)
                for k, values in (curves or {}).items()
                for step, v in enumerate(values)
            ],
        ],
        params=[Param(layout.METHOD_PARAM + k, v) for k, v in (params or {}).items()],
    )
    time.sleep(0.005)  # distinct end times: "latest FINISHED" must be well defined
    client.set_terminated(run_id, status)
    return run_id


def test_lower_is_better_primary_metric_decides_winner_and_improvement(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("lower", store.uri)
    for seed, (g, c) in enumerate([(0.50, 0.10), (0.52, 0.12), (0.51, 0.11)]):
        log_run(client, experiment_id, method="grpo", seed=seed, before=0.6, after=g)
        log_run(client, experiment_id, method="corrgrpo", seed=seed, before=0.6, after=c)
    log_run(client, experiment_id, method="gdpo", seed=0, before=0.6, after=0.7)  # got worse
    text = build_report("lower", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert "Primary metric `asr` (lower is better)" in text
    assert "own resolution" not in text and "Shadow estimators:" not in text  # runs without shadows
    assert "## Why methods differ: reward correlations and advantage shares" in text
    assert "No winner named: it needs at least 2 methods with 2+ seeds each." in text  # gdpo has one seed
    assert "| corrgrpo | 1.000 | [1.000, 1.000] |" in text  # P(corrgrpo better than grpo) on lower-is-better
    assert "| gdpo | 0.000 | [0.000, 0.000] |" in text
    assert "| attacks | tiny | corrgrpo | 0.600 | 0.110 | 3/3 |" in text
    assert "`gdpo|attacks|tiny|s0`: asr 0.600 → 0.700; no training reward was logged" in text
    assert "No learning curves were logged for this cell." in text
    assert "`attacks` has fewer than two reward components: no Pareto plot." in text


def test_not_improved_runs_show_each_component_moving(store: Store, tmp_path: Path) -> None:
    # The summed reward falls while utility rises: the report must say both.
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("components", store.uri)
    # 40 steps: the report averages 10 at each end (10 % would be 4, below its minimum window).
    curves = {
        layout.REWARD: [1.0] * 20 + [0.8] * 20,
        layout.reward_mean("utility"): [0.1] * 20 + [0.3] * 20,
        layout.reward_mean("safety"): [0.9] * 20 + [0.5] * 20,
    }
    log_run(
        client,
        experiment_id,
        method="grpo",
        seed=0,
        before=0.1,
        after=0.2,
        components="utility,safety",
        curves=curves,
    )
    text = build_report("components", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert (
        "`grpo|attacks|tiny|s0`: asr 0.100 → 0.200; the training reward did not rise (1.000 → 0.800); "
        "per component: utility 0.100 → 0.300 (rose), safety 0.900 → 0.500 (fell)"
    ) in text


def test_winner_is_named_only_when_intervals_separate(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("winner", store.uri)
    for seed, (g, c) in enumerate([(0.50, 0.10), (0.52, 0.12), (0.51, 0.11)]):
        log_run(client, experiment_id, method="grpo", seed=seed, before=0.6, after=g)
        log_run(client, experiment_id, method="corrgrpo", seed=seed, before=0.6, after=c)
    text = build_report("winner", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert "**Winner: corrgrpo**" in text
    for seed, (g, c) in enumerate([(0.1, 0.5), (0.9, 0.12)]):  # two more noisy seeds: overlap
        log_run(client, experiment_id, method="grpo", seed=seed + 3, before=0.6, after=g)
        log_run(client, experiment_id, method="corrgrpo", seed=seed + 3, before=0.6, after=c)
    text = build_report("winner", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert "No winner: no method's 95 % CI is separated from every other's." in text
    assert "compares each method with `grpo` run by run" in text and "**Few seeds**" not in text


def test_run_selection_latest_finished_recovered_and_superseded(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("select", store.uri)
    log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.9, status="FAILED", key="k0")
    log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.4, key="k0")
    log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.3, key="k0")  # latest wins
    log_run(client, experiment_id, method="grpo", seed=1, before=0.6, after=0.2, key="k1-old-settings")
    log_run(client, experiment_id, method="grpo", seed=1, before=0.6, after=0.25, key="k1")
    log_run(client, experiment_id, method="grpo", seed=2, before=0.6, after=0.5, key="k2", status="KILLED")
    text = build_report("select", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert "| grpo | 2 | 0.275 |" in text and "s0: 0.300, s1: 0.250" in text
    assert "1 failed or interrupted attempt(s) were re-run and FINISHED later" in text
    assert "`grpo|attacks|tiny|s2` KILLED" in text
    assert (
        "**Several settings for one cell**: 1 cell(s)" in text and "grpo|attacks|tiny|s1 (2 settings)" in text
    )


def test_duplicate_finished_runs_are_warned_about_with_the_run_used(store: Store, tmp_path: Path) -> None:
    # Two sweeps raced on one cell: two FINISHED runs of one run key; the later-finished one counts.
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("raced", store.uri)
    log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.4, key="k0")
    used = log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.3, key="k0")
    log_run(client, experiment_id, method="grpo", seed=1, before=0.6, after=0.2, key="k1")
    text = build_report("raced", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert (
        "**Duplicate runs**: 1 cell(s) have more than one FINISHED run of the same run key (e.g. two "
        "sweeps ran it at once); each uses its latest finished run (latest end time, then start time, "
        f"then run id) and leaves the others out: `grpo|attacks|tiny|s0` (2 FINISHED, uses run `{used}`)"
    ) in text
    assert "s0: 0.300, s1: 0.200" in text


def test_counts_are_integers_and_shadows_fall_back_to_logged_curves(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("counts", store.uri)
    shadow = {  # per-step shadow metrics without a diagnostics.json (log_run writes none)
        layout.ADV_RESOLUTION: [0.4, 0.6],
        layout.shadow_metric("gdpo", "sign_agree"): [0.8, 1.0],
        layout.shadow_metric("gdpo", "rank_corr"): [0.5, 0.7],
        layout.shadow_metric("gdpo", "resolution"): [0.9, 0.9],
    }
    for seed, n_clean in enumerate([102.0, 102.0]):
        evals = {"n_clean": n_clean, "n_attacked": 298.0 + seed, "utility": 0.5}
        log_run(
            client, experiment_id, method="grpo", seed=seed, before=0.6, after=0.5, evals=evals, curves=shadow
        )
    text = build_report("counts", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert (
        "Counts (n_attacked, n_clean) are shown as the integer per run (a range where runs differ)." in text
    )
    assert "| n_attacked | 298–299 |" in text and "| n_clean | 102 |" in text and "n_clean ↑" not in text
    assert "| utility ↑ | 0.500 [0.500, 0.500] |" in text
    assert "| grpo | 0.500 | 0.900 / 0.600 / 0.900 |" in text  # curve means over steps, then runs


def test_method_variants_with_different_params_are_reported_apart(store: Store, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("variants", store.uri)
    for seed in range(2):
        for floor in ("1.0", "2.0"):
            log_run(
                client,
                experiment_id,
                method="corrgrpo-guarded",
                seed=seed,
                before=0.6,
                after=0.2,
                params={"eps": "1e-06", "min_corr_sum": floor},
                key=f"v{floor}-{seed}",
            )
    text = build_report("variants", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).read_text()
    assert "| corrgrpo-guarded(min_corr_sum=1.0) | 2 |" in text
    assert "| corrgrpo-guarded(min_corr_sum=2.0) | 2 |" in text


def test_unknown_sweep_and_missing_store_are_user_errors(store: Store, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no sweep named 'nope'"):
        build_report("nope", tracking_uri=store.uri, out=tmp_path)
    with pytest.raises(UserError, match="no tracking store"):
        build_report("rep", tracking_uri=f"sqlite:///{tmp_path / 'missing.db'}", out=tmp_path)


def test_report_command_line(store: Store, tmp_path: Path) -> None:
    from mrbench.cli.app import app

    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = ensure_experiment("cli", store.uri)
    log_run(client, experiment_id, method="grpo", seed=0, before=0.6, after=0.5)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    MlflowClient(tracking_uri=other).search_experiments()
    result = CliRunner().invoke(
        app, ["report", "cli", "--tracking-uri", store.uri, "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    assert "report: " in result.output and (tmp_path / "r" / "report.md").exists()
    # A sweep missing from the store named on the command line: a user error naming both.
    result = CliRunner().invoke(app, ["report", "cli", "--tracking-uri", other])
    assert isinstance(result.exception, UserError) and "no sweep named 'cli'" in str(result.exception)


def test_runs_carry_the_layout_version_and_a_later_one_is_refused(store: Store, tmp_path: Path) -> None:
    parent = synthetic_sweep(
        store.uri, "layouts", methods=["grpo"], tasks=["tool-calling"], models=["tiny"], seeds=[0], steps=2
    )
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = client.get_experiment_by_name("layouts").experiment_id
    runs = client.search_runs([experiment_id])
    assert {r.data.tags.get("mrbench.schema") for r in runs} == {str(layout.SCHEMA_VERSION)}
    cell = next(r for r in runs if r.info.run_id != parent)
    # A run written before the layout was versioned (no tag), with the records of that time
    # (diagnostics.json before the shadow estimators, sweep.json before versions and the lab),
    # reads as it always did.
    client.delete_tag(cell.info.run_id, "mrbench.schema")
    early_diagnostics = {"components": ["a"], "corr_matrix": [[1.0]], "share": [1.0], "steps": 2}
    client.log_dict(cell.info.run_id, early_diagnostics, layout.DIAGNOSTICS_ARTIFACT)
    early_sweep = {"name": "layouts", "config": {"methods": ["grpo"]}, "cells": []}
    client.log_dict(parent, early_sweep, layout.SWEEP_ARTIFACT)
    assert build_report("layouts", tracking_uri=store.uri, out=tmp_path, log_to_parent=False).exists()
    # A record that is not what its name says is refused, naming the artifact and its run.
    client.log_dict(cell.info.run_id, {"share": "x"}, layout.DIAGNOSTICS_ARTIFACT)
    with pytest.raises(UserError, match=rf"diagnostics\.json of run {cell.info.run_id}"):
        build_report("layouts", tracking_uri=store.uri, out=tmp_path, log_to_parent=False)
    client.log_dict(cell.info.run_id, early_diagnostics, layout.DIAGNOSTICS_ARTIFACT)
    # A run of a later layout is refused, naming its version, before any of its names is read.
    client.set_tag(cell.info.run_id, "mrbench.schema", str(layout.SCHEMA_VERSION + 1))
    with pytest.raises(UserError, match=rf"newer mrbench \(run layout {layout.SCHEMA_VERSION + 1};"):
        build_report("layouts", tracking_uri=store.uri, out=tmp_path, log_to_parent=False)


def test_a_report_deletes_only_the_figures_its_predecessor_listed(store: Store, tmp_path: Path) -> None:
    # Issue 36, item 1: it deleted every curves-*.png (and the like) it found in its folder.
    uri = store.uri
    synthetic_sweep(
        uri, "manifest", methods=["grpo"], tasks=["tool-calling"], models=["tiny"], seeds=[0], steps=2
    )
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "curves-mine.png"  # looks like a figure, but no report wrote it
    mine.write_bytes(b"user's")
    build_report("manifest", tracking_uri=uri, out=out, log_to_parent=False)
    listed = (out / MANIFEST).read_text(encoding="utf-8").split()
    assert listed and all((out / name).is_file() for name in listed) and "curves-mine.png" not in listed
    assert sorted(p.name for p in out.glob("*.png")) == sorted([*listed, "curves-mine.png"])
    stale = out / "pareto-gone.png"  # a figure the previous report drew and this one will not
    stale.write_bytes(b"old")
    (out / MANIFEST).write_text(
        "\n".join([*listed, stale.name, "../escape.png", str(mine.parent / "x")]) + "\n"
    )
    (tmp_path / "escape.png").write_bytes(b"outside")
    build_report("manifest", tracking_uri=uri, out=out, log_to_parent=False)
    assert not stale.exists() and mine.read_bytes() == b"user's" and (tmp_path / "escape.png").exists()


def test_paths_inside_the_package_are_written_portably_in_the_config():
    from mrbench.reporting.render import PACKAGE_DIR, portable

    bundled = f"{PACKAGE_DIR}/sweeps/rehearsal_data/toolrl"
    config = {"task_params": {"tool-calling": {"data_path": bundled, "n_eval": 8}}, "seeds": [0, PACKAGE_DIR]}
    assert portable(config) == {
        "task_params": {"tool-calling": {"data_path": "<mrbench>/sweeps/rehearsal_data/toolrl", "n_eval": 8}},
        "seeds": [0, "<mrbench>"],
    }
    # A user's own folder, and one that merely starts with the package's name, stay as they are.
    assert portable({"data_path": "/data/toolrl", "x": PACKAGE_DIR + "-old/a"}) == {
        "data_path": "/data/toolrl",
        "x": PACKAGE_DIR + "-old/a",
    }
