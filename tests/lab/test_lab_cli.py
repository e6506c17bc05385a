"""``mrbench simulate`` through its own ``register``: report folder, MLflow layout, JSON, exit code 2."""

from __future__ import annotations

import json
import sys

import pytest
from simulate_app import make_app
from typer.testing import CliRunner

from mrbench.cli.app import main
from mrbench.core import layout


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One sqlite store for the module: creating its tables is most of an MLflow test's time."""
    return f"sqlite:///{tmp_path_factory.mktemp('lab-store') / 'mlflow.db'}"


def test_simulate_writes_the_report_and_logs_like_a_sweep(tmp_path, monkeypatch, store):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = store
    out = tmp_path / "report"
    args = [
        "simulate",
        "--scenario",
        "anti",
        "--methods",
        "grpo,corrgrpo",
        "--methods",
        "corrgrpo-guarded",
        "--seeds",
        "3",
        "--steps",
        "12",
        "--group-size",
        "4",
        "--out",
        str(out),
        "--tracking-uri",
        uri,
        "--json",
    ]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["scenario"] == "anti" and payload["steps"] == 12 and payload["group_size"] == 4
    assert list(payload["methods"]) == ["grpo", "corrgrpo", "corrgrpo-guarded"]
    assert payload["methods"]["corrgrpo"]["iqm"]["max_abs_adv"][0] > 100
    assert set(payload["methods"]["corrgrpo"]["poi"]) == {"final/a", "final/b", "objective"}

    summary = (out / "summary.md").read_text()
    command = (
        "mrbench simulate --scenario anti --methods grpo,corrgrpo,corrgrpo-guarded --seeds 3 "
        f"--steps 12 --group-size 4 --out {out}"
    )
    assert f"Produced by `{command}`" in summary and "## Probability of improvement over `grpo`" in summary
    assert (out / "curves.png").stat().st_size > 0 and (out / "pareto.png").stat().st_size > 0

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(layout.lab_experiment("anti"))
    parent = client.get_run(payload["parent_run_id"])
    assert parent.info.experiment_id == experiment.experiment_id and parent.info.status == "FINISHED"
    assert layout.read_tag(parent.data.tags, layout.ROLE) == layout.ROLE_LAB
    assert layout.read_tag(parent.data.tags, layout.COMMAND) == command
    assert parent.data.params[layout.LAB_PARAM + "weights"] == "[2.0, 1.0]"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {layout.LAB_ARTIFACT, layout.REPORT_DIR} <= artifacts
    children = client.search_runs(
        [experiment.experiment_id], f"tags.`{layout.PARENT_RUN_TAG}` = '{parent.info.run_id}'"
    )
    by_method = {layout.read_tag(c.data.tags, layout.METHOD): c for c in children}
    assert set(by_method) == {"grpo", "corrgrpo", "corrgrpo-guarded"}
    child = by_method["corrgrpo-guarded"]
    assert child.data.params[layout.PARAM_METHOD] == "corrgrpo-guarded"
    assert child.data.params[layout.METHOD_PARAM + "min_corr_sum"] == "1.0"
    history = client.get_metric_history(child.info.run_id, layout.reward_mean("a"))
    assert [m.step for m in history] == list(range(13))
    assert layout.lab_metric("iqm/objective") in child.data.metrics
    assert layout.adv_metric("max_abs") in child.data.metrics


def test_config_file_and_text_output(tmp_path, monkeypatch, store):
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    config = tmp_path / "tiny-scale.yaml"
    config.write_text("base: scale\nscales: [3, 1]\nprompts: 2\nresponses: 4\n")
    uri = store
    args = [
        "simulate",
        "--config",
        str(config),
        "--methods",
        "grpo",
        "--seeds",
        "2",
        "--steps",
        "5",
        "--out",
        str(tmp_path / "out"),
        "--tracking-uri",
        uri,
    ]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    assert "lab tiny-scale: 2 seeds × 5 steps" in result.stdout and "summary:" in result.stdout


def test_several_scenarios_in_one_command(tmp_path, monkeypatch, store):
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "reports"
    args = ["simulate", "--scenario", "anti,scale", "--scenario", "anti", "--methods", "grpo,gdpo"]
    args += ["--seeds", "2", "--steps", "3", "--out", str(out), "--tracking-uri", store, "--json"]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    payloads = json.loads(result.stdout)
    assert [p["scenario"] for p in payloads] == ["anti", "scale"]  # in order, each once
    for name in ("anti", "scale"):
        # Each report names the command that reproduces its folder alone.
        command = (
            f"mrbench simulate --scenario {name} --methods grpo,gdpo --seeds 2 --steps 3 --out {out / name}"
        )
        assert f"Produced by `{command}`" in (out / name / "summary.md").read_text()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--scenario", "scal"], "unknown scenario 'scal'. Did you mean 'scale'?"),
        (["--scenario", "anti,scal"], "unknown scenario 'scal'. Did you mean 'scale'?"),
        (["--scenario", "scale", "--config", "{negative}"], "give exactly one of --scenario NAME"),
        (["--scenario", "scale", "--methods", "grpo,gdpoo"], "unknown method 'gdpoo'"),
        ([], "give exactly one of --scenario NAME"),
        # Bounds declared on the options: refused as usage errors naming the option.
        (["--scenario", "scale", "--seeds", "0"], "Invalid value for '--seeds'"),
        (["--scenario", "scale", "--group-size", "1"], "Invalid value for '--group-size'"),
        (["--config", "{negative}"], "scale of component 'b' must be a finite number > 0, got -1.0"),
        (["--config", "{not_psd}"], "corr is not positive semi-definite"),
        (["--config", "{mismatch}"], "weights has 3 entries"),
    ],
)
def test_bad_input_exits_2_naming_the_value(args, named, tmp_path, monkeypatch, capsys):
    configs = {
        "negative": "components: [a, b]\nscales: [1, -1]\n",
        "not_psd": "components: [a, b, c]\ncorr: [[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]]\n",
        "mismatch": "components: [a, b]\nweights: [1, 1, 1]\n",
    }
    paths = {}
    for key, text in configs.items():
        paths[key] = tmp_path / f"{key}.yaml"
        paths[key].write_text(text)
    argv = [a.format(**paths) for a in args]
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(
        sys, "argv", ["mrbench", "simulate", *argv, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    )
    with pytest.raises(SystemExit) as info:
        main(make_app())
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (err.startswith("error: ") or "Error: Invalid value for '--" in err) and named in err
    assert not (tmp_path / "m.db").exists()  # refused before the store is touched
