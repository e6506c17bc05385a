"""The paper presets' correlations come from a sweep's ``diagnostics.json`` files in a real MLflow store,
selected as the report selects runs and printed in the presets' own Python form."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fakes import fake_resolve_spec, log_synthetic_run, synthetic_metrics, synthetic_sweep
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.records import Diagnostics
from mrbench.lab import presets
from mrbench.lab.correlation import EIGEN_FLOOR, nearest_correlation, printable_decimals
from mrbench.lab.presets import CODE_CORR_6, SECURITY_CORR, TOOLS_CORR, paper_code
from mrbench.reporting.select import cell_label
from mrbench.store.reader import open_reader

# The script lives outside the package (scripts/), so it is loaded from its file.
SCRIPT = Path(__file__).parents[2] / "scripts" / "smoke_corr.py"
_SPEC = importlib.util.spec_from_file_location("smoke_corr", SCRIPT)
smoke_corr = importlib.util.module_from_spec(_SPEC)
sys.modules["smoke_corr"] = smoke_corr  # dataclasses look their module up by name
_SPEC.loader.exec_module(smoke_corr)
PRESET_MATRICES, TaskCorrelation, main = (
    smoke_corr.PRESET_MATRICES,
    smoke_corr.TaskCorrelation,
    smoke_corr.main,
)
python_matrix, read_correlations, task_source = (
    smoke_corr.python_matrix,
    smoke_corr.read_correlations,
    smoke_corr.task_source,
)

METHODS = ("grpo", "gdpo", "corrgrpo")
TASKS = ("code-generation", "tool-calling", "agent-security")
SEEDS = (0, 1)
STEPS = 4
SWEEP = "smoke-test"


@dataclass
class Store:
    uri: str
    written: dict[tuple[str, str, int], list[list[float | None]]]  # (method, task, seed) → corr_matrix used
    components: dict[str, list[str]]  # task → the components the fake runs log, in their order


def _write_diagnostics(client: MlflowClient, run_id: str, components: list[str], corr: list) -> None:
    client.log_dict(run_id, Diagnostics(components, corr).to_json(), layout.DIAGNOSTICS_ARTIFACT)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A sweep of fake cells with the cases the selection must handle: a FAILED cell (its diagnostics
    must not count), a cell run twice (the later FINISHED run counts), a component constant in every
    group of every code-generation run (efficiency: None everywhere) and a pair undefined in one run."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('smoke-corr') / 'mlflow.db'}"
    synthetic_sweep(
        uri,
        SWEEP,
        methods=METHODS,
        tasks=TASKS,
        models=["tiny"],
        seeds=SEEDS,
        steps=STEPS,
        failed=["gdpo|tool-calling|tiny|s1"],
    )
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name(SWEEP).experiment_id

    def spec(method: str, task: str, seed: int):
        return fake_resolve_spec(method, task, "tiny", seed, train={"steps": STEPS})

    written, components = {}, {}
    for method in METHODS:
        for task in TASKS:
            for seed in SEEDS:
                diagnostics = synthetic_metrics(spec(method, task, seed))[3]
                written[(method, task, seed)] = diagnostics.corr_matrix
                components[task] = diagnostics.components
    del written[("gdpo", "tool-calling", 1)]

    reader = open_reader(uri)
    runs = {
        cell_label(r): r.run_id for r in reader.runs(experiment_id) if r.tags.get(layout.tag(layout.RUN_KEY))
    }
    reader.close()
    # The FAILED cell logged diagnostics before failing: extreme values that must not count.
    failed_k = len(components["tool-calling"])
    _write_diagnostics(
        client, runs["gdpo|tool-calling|tiny|s1"], components["tool-calling"], [[-1.0] * failed_k] * failed_k
    )
    # Code generation: efficiency constant in every group of every run (row and column None).
    code = components["code-generation"]
    eff = code.index("efficiency")
    for method in METHODS:
        for seed in SEEDS:
            corr = [list(row) for row in written[(method, "code-generation", seed)]]
            for i in range(len(code)):
                corr[i][eff] = corr[eff][i] = None
            if (method, seed) == ("gdpo", 0):  # format × syntax undefined in this run alone
                fmt, syn = code.index("format"), code.index("syntax")
                corr[fmt][syn] = corr[syn][fmt] = None
            _write_diagnostics(client, runs[f"{method}|code-generation|tiny|s{seed}"], code, corr)
            written[(method, "code-generation", seed)] = corr
    # A second FINISHED run of one cell (two sweeps raced): the later one is the one that counts.
    security = components["agent-security"]
    rerun = log_synthetic_run(
        client, experiment_id, spec("corrgrpo", "agent-security", 0), parent_run_id=None, sweep=SWEEP
    )
    redo = [[1.0, 0.9], [0.9, 1.0]]
    _write_diagnostics(client, rerun, security, redo)
    written[("corrgrpo", "agent-security", 0)] = redo
    return Store(uri, written, components)


def _expected(store: Store, task: str) -> np.ndarray:
    """Per method the NaN-aware mean over its seeds, then the mean over methods (None → NaN)."""

    def floats(corr: list[list[float | None]]) -> np.ndarray:
        return np.array([[math.nan if v is None else v for v in row] for row in corr])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # efficiency: NaN in every run
        per_method = [
            np.nanmean(
                np.stack([floats(c) for key, c in store.written.items() if key[:2] == (m, task)]), axis=0
            )
            for m in METHODS
        ]
        return np.nanmean(np.stack(per_method), axis=0)


def test_each_task_is_the_mean_of_what_its_selected_runs_wrote(store: Store) -> None:
    found = read_correlations(SWEEP, store.uri)
    assert set(found) == set(TASKS)
    for task in TASKS:
        assert found[task].components == store.components[task]
        assert found[task].methods == list(METHODS)
        expected = _expected(store, task)
        assert np.allclose(found[task].matrix, expected, equal_nan=True), task
    assert found["tool-calling"].runs == 5  # the FAILED cell is not selected
    assert found["agent-security"].runs == 6  # the cell run twice counts once
    code = found["code-generation"]
    eff = code.components.index("efficiency")
    assert np.isnan(code.matrix[eff]).all() and np.isnan(code.matrix[:, eff]).all()
    assert code.never_defined("efficiency") and not code.never_defined("format")
    fmt, syn = code.components.index("format"), code.components.index("syntax")
    gdpo_s1 = store.written[("gdpo", "code-generation", 1)][fmt][syn]  # gdpo's mean is its other seed's
    others = [
        np.mean([store.written[(m, "code-generation", s)][fmt][syn] for s in SEEDS])
        for m in ("grpo", "corrgrpo")
    ]
    assert code.matrix[fmt, syn] == pytest.approx(np.mean([gdpo_s1, *others]))
    # The rerun replaced its cell's first run: corrgrpo's security mean is 0.9 and seed 1's value.
    security = found["agent-security"].matrix[0, 1]
    per_method = [np.mean([store.written[(m, "agent-security", s)][0][1] for s in SEEDS]) for m in METHODS]
    assert per_method[2] == pytest.approx((0.9 + store.written[("corrgrpo", "agent-security", 1)][0][1]) / 2)
    assert security == pytest.approx(np.mean(per_method))


def test_the_command_prints_the_presets_python(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sweep", SWEEP, "--tracking-uri", store.uri]) == 0
    out = capsys.readouterr().out
    assert "# left out: efficiency (never defined: constant in every group)" in out
    assert "\nSECURITY_CORR = ((1.00, " in out  # short: one line, as in presets.py
    assert "\nCODE_CORR_6 = (\n    (1.0" in out  # long: a row per line
    assert max(map(len, out.splitlines())) <= 110  # pasted into presets.py, it stays ruff-clean
    namespace: dict[str, object] = {"math": math}
    exec(out, namespace)  # what a maintainer pastes must run
    found = read_correlations(SWEEP, store.uri)
    for task, (name, names) in PRESET_MATRICES.items():
        printed = np.array(namespace[name])
        index = [found[task].components.index(n) for n in names]  # the preset's order, not the runs'
        expected = _expected(store, task)[np.ix_(index, index)]
        assert printed.shape == np.array(getattr(presets, name)).shape
        assert np.linalg.eigvalsh(printed).min() >= 0, name  # a scenario accepts what is printed
        if np.linalg.eigvalsh(expected).min() >= EIGEN_FLOOR:  # printed as measured
            assert np.array_equal(printed, np.round(expected, printable_decimals(expected))), name
        else:  # the nearest correlation matrix, and the output says so
            nearest = nearest_correlation(expected)
            assert np.array_equal(printed, np.round(nearest, printable_decimals(nearest))), name
            comments = out.split(f"\n{name} = ")[0].rsplit("\n\n", 1)[-1]
            assert "projected to the nearest correlation" in comments, name


def test_preset_components_are_the_presets_rows() -> None:
    code, tools, security = (PRESET_MATRICES[t][1] for t in TASKS)
    assert code == paper_code().components[: len(CODE_CORR_6)]
    assert tools == presets.paper_tools().components and len(tools) == len(TOOLS_CORR)
    assert security == presets.paper_security().components and len(security) == len(SECURITY_CORR)


def test_undefined_cells_are_flagged_and_written_as_math_nan() -> None:
    matrix = np.array([[1.0, 0.5, math.nan], [0.5, 1.0, math.nan], [math.nan, math.nan, math.nan]])
    found = TaskCorrelation(["a", "b", "c"], ["grpo"], 1, matrix)
    lines = task_source("toy-task", found)
    assert (
        lines[-1]
        == "TOY_TASK_CORR = ((1.00, 0.50, math.nan), (0.50, 1.00, math.nan), (math.nan, math.nan, math.nan))"
    )
    assert any(line.startswith("# math.nan: never defined") for line in lines)
    assert python_matrix("X", np.array([[-0.001]])) == "X = ((0.00,),)"


def test_preset_task_lacking_a_component_prints_no_matrix() -> None:
    found = TaskCorrelation(["utility"], ["grpo"], 2, np.array([[1.0]]))
    (line,) = task_source("agent-security", found)
    assert line.endswith("the runs lack safety: no SECURITY_CORR")


def test_a_missing_store_or_sweep_is_exit_code_2(store: Store, tmp_path, capsys) -> None:
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "error: no tracking store at" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()  # reading never creates a store
    assert main(["--sweep", "nope", "--tracking-uri", store.uri]) == 2
    assert "error: no sweep named 'nope'" in capsys.readouterr().err


def test_efficiency_follows_accuracy_at_half_strength() -> None:
    s = paper_code()
    acc, eff = s.components.index("accuracy"), s.components.index("efficiency")
    assert s.corr[eff][acc] == 0.5
    assert np.allclose(np.array(s.corr)[eff, :6], 0.5 * np.array(CODE_CORR_6)[acc])


def test_an_edge_matrix_is_projected_and_printed_so_that_it_stays_positive_semi_definite() -> None:
    # Two exact copies (a, b) and a third component: PSD, smallest eigenvalue 0; at 2 decimals the
    # printed matrix would be indefinite, which is what pasting the smoke sweep's numbers gave.
    matrix = np.array([[1.0, 1.0, 0.744], [1.0, 1.0, 0.746], [0.744, 0.746, 1.0]])
    assert np.linalg.eigvalsh(matrix).min() < EIGEN_FLOOR
    lines = task_source("toy-task", TaskCorrelation(["a", "b", "c"], ["grpo"], 1, matrix))
    assert any("projected to the nearest correlation" in line for line in lines)
    namespace: dict[str, object] = {}
    exec(lines[-1], namespace)
    printed = np.array(namespace["TOY_TASK_CORR"])
    assert np.allclose(np.diag(printed), 1.0) and np.linalg.eigvalsh(printed).min() >= 0
    assert np.abs(printed - matrix).max() < 0.01


def test_a_matrix_with_margin_is_printed_as_measured_at_two_decimals() -> None:
    matrix = np.array([[1.0, 0.6], [0.6, 1.0]])
    lines = task_source("toy-task", TaskCorrelation(["a", "b"], ["grpo"], 1, matrix))
    assert not any("projected" in line for line in lines)
    assert lines[-1] == "TOY_TASK_CORR = ((1.00, 0.60), (0.60, 1.00))"


def test_the_presets_matrices_have_eigenvalues_off_zero() -> None:
    for name in ("CODE_CORR_6", "TOOLS_CORR", "SECURITY_CORR"):
        assert np.linalg.eigvalsh(np.array(getattr(presets, name))).min() > 0, name
