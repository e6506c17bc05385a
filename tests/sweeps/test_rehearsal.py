"""The rehearsal (``mrbench sweep --rehearse``): what it changes in a sweep and what it keeps, the
stand-in models' families, the data stand-ins, the rehearsed crash's guard, and the paper's tables
of the report. The rehearsal itself, end to end, is the slow test at the bottom."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.core.records import SweepRecord
from mrbench.engine.models.standin import FAMILIES, MEAN_TOKENS, _config, eos_pull, family_of, standin_name
from mrbench.reporting.context import ReportContext
from mrbench.reporting.paper_table import paper_tables
from mrbench.reporting.select import ordered, select_runs, task_info
from mrbench.store.reader import RunRecord
from mrbench.sweeps import rehearsal
from mrbench.sweeps.rehearsal import EVAL_LIMIT, STEPS, rehearsal_spec
from mrbench.sweeps.spec import PRESETS, SweepSpec

ROOT = Path(__file__).resolve().parents[2]


def nothing_missing(spec: SweepSpec) -> list[tuple[str, str, str]]:
    return []


def test_every_paper_cell_keeps_its_configuration_except_model_steps_and_eval_limit() -> None:
    paper = PRESETS["paper"]
    r = rehearsal_spec(paper, missing=nothing_missing)
    spec = r.spec
    assert spec.name == "paper-rehearsal" and spec.seeds == paper.seeds[:1]
    assert (spec.methods, spec.tasks, spec.method_params) == (paper.methods, paper.tasks, paper.method_params)
    assert spec.task_params == paper.task_params and spec.eval == paper.eval
    assert spec.checkpoint_every == paper.checkpoint_every and spec.workers == 2
    assert spec.kill_after_checkpoint is None and not spec.rehearse
    n_cells = 0
    for task in paper.tasks:
        assert spec.models_for(task) == tuple(standin_name(m) for m in paper.models_for(task))
        for model in paper.models_for(task):
            n_cells += len(paper.methods)
            real, rehearsed = paper.train_for(task, model), spec.train_for(task, standin_name(model))
            assert rehearsed.pop("steps") == STEPS and rehearsed.pop("eval_limit") == EVAL_LIMIT
            real.pop("steps", None), real.pop("eval_limit", None)
            assert rehearsed == real, (task, model)  # budget, batches, generations, beta, precision, ...
    assert n_cells == 30
    assert any("stand-ins" in note for note in r.notes) and any(f"steps: {STEPS}" in n for n in r.notes)


def test_stand_in_families_follow_the_model_names() -> None:
    assert family_of("Qwen/Qwen2.5-Coder-0.5B-Instruct") == "qwen2"
    assert family_of("Qwen/Qwen2.5-7B-Instruct") == "qwen2"
    assert family_of("Qwen/Qwen3-4B-Thinking-2507") == "qwen3"
    assert family_of("standin:Qwen/Qwen3-8B") == "qwen3"
    with pytest.raises(UserError, match="no stand-in for model 'meta-llama/Llama-3-8B'"):
        rehearsal_spec(replace(PRESETS["smoke"], models=("meta-llama/Llama-3-8B",)), missing=nothing_missing)

    class Tok:  # what _config reads of a tokenizer
        pad_token_id = 0

        def __len__(self) -> int:
            return 300

        def convert_tokens_to_ids(self, token: str) -> int:
            return {"<|endoftext|>": 0, "<|im_end|>": 2}[token]

    assert type(_config(FAMILIES["qwen3"], Tok())).__name__ == "Qwen3Config"
    assert type(_config(FAMILIES["qwen2"], Tok())).__name__ == "Qwen2Config"
    # The end-of-sequence pull gives 1/MEAN_TOKENS per token: e^{a√H} / (e^{a√H} + V - 1) = 1/MEAN_TOKENS.
    import math

    a = eos_pull(FAMILIES["qwen2"], 300)
    root_h = math.sqrt(FAMILIES["qwen2"].hidden_size)
    p = math.exp(a * root_h) / (math.exp(a * root_h) + 299)
    assert abs(p - 1 / MEAN_TOKENS) < 1e-9


def test_missing_data_gets_the_bundled_stand_ins_and_says_so() -> None:
    paper = replace(
        PRESETS["paper"],
        task_params={
            "code-generation": {"dataset": "leetcode", "eval_dataset": "humaneval", "data_path": "/nowhere"},
            "tool-calling": {"dataset": "toolrl", "data_path": "/nowhere"},
        },
        eval={"code-generation": ("mbpp", "livecodebench"), "tool-calling": ("bfcl",)},
    )
    seen: list[SweepSpec] = []

    def missing(spec: SweepSpec) -> list[tuple[str, str, str]]:
        seen.append(spec)
        if len(seen) > 1:
            return []  # the stand-ins load
        return [
            ("code-generation", "leetcode", "task_params.code-generation.dataset"),
            ("code-generation", "mbpp", "eval.code-generation"),
            ("code-generation", "livecodebench", "eval.code-generation"),
            ("tool-calling", "toolrl", "task_params.tool-calling.dataset"),
        ]

    r = rehearsal_spec(paper, missing=missing)
    code, tools = r.spec.task_params["code-generation"], r.spec.task_params["tool-calling"]
    assert code["dataset"] == "humaneval" and code["data_path"] == str(rehearsal.DATA)
    assert tools == {"dataset": "toolrl", "data_path": str(rehearsal.DATA)}
    assert r.spec.eval == {
        "code-generation": ("livecodebench",),
        "tool-calling": ("bfcl",),
    }  # mbpp → humaneval: own
    assert (rehearsal.DATA / "toolrl" / "rlla_rl.json").is_file()  # package data, not tests/fixtures
    said = "\n".join(r.notes)
    assert "leetcode" in said and "mbpp" in said and "sweeps/rehearsal_data/toolrl" in said
    assert seen[1].task_params["code-generation"]["dataset"] == "humaneval"  # checked again

    with pytest.raises(UserError, match="no stand-in for it"):
        rehearsal_spec(paper, missing=lambda s: [("tool-calling", "secret-set", "eval.tool-calling")])


def test_the_rehearsed_crash_refuses_a_process_group_it_does_not_own() -> None:
    """``kill_after_checkpoint`` SIGKILLs the cell's process group: refused in a process whose group
    is not a session of its own (a shell's job, the sweep's own process)."""
    code = "from mrbench.engine.cell.resume import check_can_kill_group as c; c(); print('ok')"
    own = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, start_new_session=True)
    assert own.stdout.strip() == "ok", own.stderr
    inside = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=lambda: os.setpgid(0, 0)
    )
    assert "kills the cell's process group" in inside.stderr


# ------------------------------------------------------------------------------ the paper's tables


def _run(method: str, task: str, model: str, metrics: dict[str, float], params: dict[str, str]) -> RunRecord:
    tags = layout.cell_tags(
        method=method,
        task=task,
        task_version="1",
        model=model,
        seed=0,
        run_key=f"{method}-{task}-{model}",
        git_sha="abc",
        sweep="s",
        primary_metric=next(iter(metrics)).split("/")[-1],
        lower_is_better=frozenset({"asr"}),
        reward_components=["a"],
    )
    return RunRecord(f"id-{method}-{task}-{model}", "FINISHED", 1, 2, "", tags, params, metrics)


def _context(runs: list[RunRecord], preset: str) -> ReportContext:
    sel = select_runs(runs)
    methods = ordered({m for per in sel.cells.values() for m in per}, ["grpo", "corrgrpo"])
    tasks = ordered({t for t, _ in sel.cells}, ["code-generation", "agent-security"])
    infos = {
        t: task_info([r for (tt, _), ms in sel.cells.items() if tt == t for rs in ms.values() for r in rs])
        for t in tasks
    }
    record = SweepRecord("s", "mrbench sweep", {"preset": preset})
    models = sorted({m for _, m in sel.cells})
    return ReportContext("s", "cmd", "store", sel, None, record, methods, tasks, infos, models)


def test_paper_tables_lay_out_methods_by_models_on_the_headline_metrics() -> None:
    code = {"task.dataset": "leetcode", "task.eval_dataset": "humaneval"}
    m = layout.eval_metric
    x, xb, p1, lcb = (
        layout.extra_eval_metric,
        layout.extra_eval_before_metric,
        "sampled_pass_at_1",
        "livecodebench",
    )
    runs = [
        _run("grpo", "code-generation", "standin:Qwen/Qwen2.5-Coder-7B-Instruct",
             {m("sampled_pass_at_1"): 0.4, layout.eval_before_metric("sampled_pass_at_1"): 0.2,
              x(lcb, p1): 0.2, xb(lcb, p1): 0.1}, code),
        _run("corrgrpo", "code-generation", "standin:Qwen/Qwen2.5-Coder-7B-Instruct",
             {m("sampled_pass_at_1"): 0.6, layout.eval_before_metric("sampled_pass_at_1"): 0.2,
              x(lcb, p1): 0.4, xb(lcb, p1): 0.1}, code),
        _run("grpo", "agent-security", "Qwen/Qwen3-8B",
             {m("joint"): 0.5, m("asr"): 0.25, m("utility"): 0.75}, {"task.dataset": "agentdojo"}),
    ]  # fmt: skip
    text = "\n".join(paper_tables(_context(runs, "paper")))
    assert "| model | method | humaneval pass@1 | livecodebench pass@1 | avg pass@1 |" in text
    assert "| Qwen/Qwen2.5-Coder-7B-Instruct (stand-in) | *before* | 0.200 | 0.100 | 0.150 |" in text
    assert "|  | grpo | 0.400 | 0.200 | 0.300 |" in text
    assert "|  | corrgrpo | 0.600 | 0.400 | 0.500 |" in text
    assert text.index("| grpo | 0.400") < text.index("| corrgrpo | 0.600")  # the sweep's method order
    assert "| model | method | agentdojo joint | agentdojo ASR ↓ | agentdojo utility |" in text
    assert "|  | grpo | 0.500 | 0.250 | 0.750 |" in text
    assert "Rehearsal" in text
    assert paper_tables(_context(runs, "smoke")) == []  # only for the paper preset


# ------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_rehearsal_of_one_task_and_model_end_to_end(tmp_path: Path) -> None:
    """``mrbench sweep --preset paper --rehearse`` on one task, model and method: the cell is
    killed after its first checkpoint, resumed, FINISHED once, and the report has the paper's table."""
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")}
    command = [
        sys.executable, "-m", "mrbench", "sweep", "--preset", "paper", "--rehearse", "--no-lab",
        "--tasks", "tool-calling", "--models", "Qwen/Qwen3-8B", "--methods", "corrgrpo",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "rehearsal passed: 1 cells trained, killed after checkpoint 1, resumed" in out
    assert "rehearsal passed" in out.split("pass 2:")[1]  # checked after pass 2 resumed it
    reports = list((tmp_path / "reports").glob("*-rehearsal/report.md"))
    assert len(reports) == 1
    report = reports[0].read_text()
    assert "## The paper's tables" in report and "| Qwen/Qwen3-8B (stand-in) | *before* |" in report
