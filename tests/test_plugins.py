"""Plugins from outside mrbench: a real distribution (tests/plugins/mrbench_toy_plugin), installed
with pip into a temporary folder that is on PYTHONPATH for every ``mrbench`` command below.

It brings the estimator ``toy-centred`` and the task ``toy-add`` as entry points, the estimator
``toy-signed`` through ``@register_method`` alone, and one broken entry point (``toy-broken``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

PLUGIN_SRC = Path(__file__).parent / "plugins" / "mrbench_toy_plugin"
DIST = "mrbench-toy-plugin"
METHOD_PATH = "mrbench_toy_plugin.methods:toy_signed"
TASK_PATH = "mrbench_toy_plugin.task:toy_add"


@pytest.fixture(scope="session")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for subprocesses with the toy plugin installed (``pip install --target``)."""
    root = tmp_path_factory.mktemp("toy-plugin")
    src = root / "src"  # a copy: building writes build/ and *.egg-info next to the sources
    shutil.copytree(PLUGIN_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    started = time.perf_counter()
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    print(f"toy plugin installed in {time.perf_counter() - started:.1f}s")  # shown with pytest -s
    assert (site / "mrbench_toy_plugin").is_dir() and list(site.glob("mrbench_toy_plugin-*.dist-info"))
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def mrbench(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrbench", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )


def test_catalog_lists_plugins_with_their_source(plugin_env):
    proc = mrbench(plugin_env, "methods", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["grpo"]["source"] == "built-in" and rows["grpo"]["available"]
    assert rows["toy-centred"] == {
        "name": "toy-centred",
        "source": f"entry point {DIST}",
        "params": {"scale": 1.0},
        "ranges": {},
        "summary": rows["toy-centred"]["summary"],
        "available": True,
    }
    assert rows["toy-centred"]["summary"].startswith("Centred weighted total")
    assert rows["toy-signed"]["source"] == "module mrbench_toy_plugin.methods"  # the decorator's
    broken = rows["toy-broken"]  # listed, with the reason, beside the others
    assert not broken["available"] and broken["source"] == f"entry point {DIST}"
    assert "toy-broken = mrbench_toy_plugin.missing:nothing" in broken["reason"]
    assert "No module named 'mrbench_toy_plugin.missing'" in broken["reason"]

    proc = mrbench(plugin_env, "methods")
    assert proc.returncode == 0, proc.stderr
    assert f"[entry point {DIST}]" in proc.stdout and "toy-broken         unavailable:" in proc.stdout

    proc = mrbench(plugin_env, "tasks", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    toy = rows["toy-add"]  # an entry point to a factory that also carries @register_task: one entry
    assert toy["source"] == f"entry point {DIST}" and toy["available"]
    assert toy["rewards"] == ["format", "args"] and toy["weights"] == {"format": 1.0, "args": 2.0}
    assert toy["params"] == {"n_train": 4, "n_eval": 2, "seed": 0, "operands": "digits"}
    assert rows["tool-calling"]["source"] == "built-in"
    proc = mrbench(plugin_env, "tasks")
    assert proc.returncode == 0 and "toy-add          v1      primary=exact_match" in proc.stdout


DECLARATIONS = """
import json, sys
from mrbench.engine.evaluation.evaluate import EvalSpec, task_settings
from mrbench.engine.evaluation.extra_evals import extra_eval_spec
from mrbench.reporting.figures import pareto_axes
from mrbench.tasks import task_class

_, settings, dataset = task_settings(EvalSpec("tiny", "toy-add", dataset="teens"))
extra = extra_eval_spec("toy-add", "teens", {"operands": "digits", "n_eval": 3})
print(json.dumps({
    "axes": pareto_axes("toy-add", ["format", "args"]),
    "path_axes": pareto_axes(sys.argv[1], ["format", "args"]),
    "undeclared": pareto_axes("toy-add", ["format", "valid"]),
    "class": task_class("toy-add").__name__,
    "operands": settings["operands"],
    "dataset": dataset,
    "extra": extra.task_params,
}))
"""


def test_a_plugin_tasks_declared_eval_data_and_pareto_axes_are_used(plugin_env, tmp_path):
    """``toy-add`` declares its eval datasets (the ``operands`` setting: digits, teens) and its
    Pareto axes (args, format: not its first two components) on its class; ``mrbench eval`` and
    a sweep's extra evaluations choose its data by them, a report plots them."""
    proc = subprocess.run(
        [sys.executable, "-c", DECLARATIONS, TASK_PATH],
        capture_output=True,
        text=True,
        timeout=300,
        env=plugin_env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["axes"] == out["path_axes"] == ["args", "format"]
    assert out["undeclared"] == ["format", "valid"]  # a run without both: the first two, as before
    assert out["class"] == "ToyAddTask" and out["operands"] == out["dataset"] == "teens"
    assert out["extra"] == {"n_eval": 3}  # the sweep's own dataset setting gives way to the dataset
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["eval", "--model", "tiny", "--task", "toy-add", "--dataset", "tens", "--tracking-uri", uri]
    proc = mrbench(plugin_env, *args, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown dataset 'tens' for task 'toy-add'; choose from digits, teens" in proc.stderr


@pytest.mark.parametrize(
    ("method", "param", "expected"),
    [
        ("toy-centred", "scale=1", [0.5, -0.5, 0.25, -0.25]),
        ("mrbench_toy_plugin.methods:toy_centred", "scale=2", [1.0, -1.0, 0.5, -0.5]),
        ("toy-signed", "margin=0", [1.0, -1.0, 1.0, -1.0]),
        (METHOD_PATH, "margin=0.5", [0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_advantages_with_plugin_estimator(plugin_env, method, param, expected):
    # Two groups of two rollouts, two components; the NaN of the last row counts as 0.
    rewards = "1,1;0,1;1,0;0.5,nan"
    args = ["advantages", "--method", method, "--rewards", rewards, "--group-size", "2", "--param", param]
    proc = mrbench(plugin_env, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == method and out["advantages"] == pytest.approx(expected)


def test_broken_and_unknown_plugins_exit_2_naming_them(plugin_env):
    proc = mrbench(plugin_env, "advantages", "--method", "toy-broken", "--rewards", "1;2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "entry point 'toy-broken = mrbench_toy_plugin.missing:nothing'" in proc.stderr
    assert f"from {DIST}) cannot be loaded: ModuleNotFoundError" in proc.stderr
    proc = mrbench(plugin_env, "advantages", "--method", "toy-centerd", "--rewards", "1;2")
    assert proc.returncode == 2 and "Did you mean 'toy-centred'" in proc.stderr
    proc = mrbench(plugin_env, "score", "--task", TASK_PATH, "--dataset", "x", "--gold")
    assert proc.returncode == 2 and "task 'toy-add' cannot be scored" in proc.stderr  # the Task's name


def _runs(uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_run_trains_a_plugin_method_on_a_plugin_task(plugin_env, micro_model_dir, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**plugin_env, "MRBENCH_RESULTS": str(tmp_path / "results")}
    args = ["run", "--method", "toy-centred", "--task", "toy-add", "--model", str(micro_model_dir)]
    args += ["--steps", "2", "--param", "scale=0.5", "--task-param", "n_eval=2"]
    proc = mrbench(env, *args, "--tracking-uri", uri, "--experiment", "plugin", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FINISHED" in proc.stdout and "exact_match" in proc.stdout
    (run,) = _runs(uri, "plugin")
    assert run.info.status == "FINISHED"
    assert run.data.tags["mrbench.method"] == "toy-centred" and run.data.tags["mrbench.task"] == "toy-add"
    assert run.data.tags["mrbench.reward_components"] == "format,args"
    params = run.data.params
    assert params["method.scale"] == "0.5" and params["task.n_train"] == "4"
    assert params["train.num_generations"] == "2"  # the plugin task's train_defaults
    assert "adv/abs_mean" in run.data.metrics and "eval/exact_match" in run.data.metrics


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_sweep_over_plugin_methods_and_tasks(plugin_env, micro_model_dir, tmp_path):
    """Entry-point names and ``module:attr`` paths as axes; every cell FINISHED, recorded by the
    name the user gave (run key included)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**plugin_env, "MRBENCH_RESULTS": str(tmp_path / "results")}
    args = ["sweep", "--methods", f"toy-centred,{METHOD_PATH}", "--tasks", f"toy-add,{TASK_PATH}"]
    args += ["--models", str(micro_model_dir), "--seeds", "0", "--steps", "2", "--name", "plugins"]
    # --no-lab: the lab over plugin methods is tests/sweeps/test_sweep_lab.py's; here it costs ~25 s.
    proc = mrbench(env, *args, "--no-lab", "--tracking-uri", uri, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = [r for r in _runs(uri, "plugins") if "mrbench.run_key" in r.data.tags]
    assert len(cells) == 4 and {r.info.status for r in cells} == {"FINISHED"}
    grid = {(r.data.tags["mrbench.method"], r.data.tags["mrbench.task"]) for r in cells}
    assert grid == {(m, t) for m in ("toy-centred", METHOD_PATH) for t in ("toy-add", TASK_PATH)}
    assert len({r.data.tags["mrbench.run_key"] for r in cells}) == 4
    report = (tmp_path / "reports" / "plugins" / "report.md").read_text()
    assert "## Estimator lab" not in report  # --no-lab


def test_sweep_yaml_names_plugins_by_module_path(plugin_env, micro_model_dir, tmp_path):
    config = tmp_path / "plugged.yaml"
    config.write_text(
        f"methods: [toy-signed, {METHOD_PATH}]\n"
        f"method_params: {{{METHOD_PATH}: {{margin: 0.25}}}}\n"
        f"tasks: [{TASK_PATH}]\n"
        f"task_params: {{{TASK_PATH}: {{n_train: 3}}}}\n"
        f"models: [{micro_model_dir}]\n"
        "seeds: [0]\n"
    )
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = mrbench(
        plugin_env, "sweep", "--config", str(config), "--dry-run", "--tracking-uri", uri, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 cells" in proc.stdout


def test_the_plugins_own_suite_runs_the_shipped_contract_checks(plugin_env, tmp_path):
    """A plugin's tests run mrbench's contract checks on its task and estimators in one line each
    (``tests/plugins/mrbench_toy_plugin/tests/test_contract.py``)."""
    suite = tmp_path / "tests"
    shutil.copytree(PLUGIN_SRC / "tests", suite, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        timeout=300,
        env=plugin_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout
