"""The package's shape: imports point down between rooms, no import cycle, no module over 600 lines,
no function body over 60 lines, and the run layout's names spelled only in its schema modules.

Every ``import`` and ``from … import`` of the product is read with :mod:`ast`, those inside
functions included (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "mrbench"

# Rooms and their rank: a room imports only rooms of a lower rank, or of the same rank where the
# pair is listed in SIDEWAYS (the cycle check below keeps those one-way).
RANK = {"core": 0, "kit": 1, "store": 2, "methods": 2, "tasks": 2, "engine": 3}
RANK |= {"sweeps": 4, "reporting": 4, "lab": 4}
RANK["cli"], RANK["__main__"] = 5, 6  # python -m mrbench sits on the CLI
SIDEWAYS = {("sweeps", "reporting"), ("lab", "reporting"), ("sweeps", "lab")}
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every mrbench module ``path`` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mrbench"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            if name.startswith("mrbench"):
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # Keep only names that are modules of ours ("from x import y" may name a function).
        graph[name] = {m for m in _imports(path) if m in modules and m != name}
    return graph


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_rooms_import_only_rooms_below_them() -> None:
    wrong = []
    for module, targets in _graph().items():
        room = _room(module)
        if room is None:  # mrbench/__init__.py re-exports lazily by name
            continue
        for target in targets:
            other = _room(target)
            if other is None or other == room:
                continue
            if RANK[other] < RANK[room] or (room, other) in SIDEWAYS:
                continue
            wrong.append(f"{module} imports {target} ({room} → {other})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(sorted(wrong))


def test_methods_and_tasks_stand_on_core_and_kit_only() -> None:
    allowed = {"core", "kit"}
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _room(module) in {"methods", "tasks"}
        for target in targets
        if _room(target) not in allowed | {_room(module)}
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_reporting_and_lab_read_stores_without_the_training_engine() -> None:
    # They find and read stores through mrbench.store; importing the engine would pull in torch,
    # transformers and TRL to read a few SQL rows, and tie the report to the trainer's internals.
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _room(module) in {"reporting", "lab"}
        for target in targets
        if _room(target) == "engine"
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle_in_product_code() -> None:
    graph = _graph()
    # Package __init__ modules are imported implicitly by their submodules; an explicit import of a
    # submodule from its own package's __init__ (a re-export) is not a cycle of behaviour, so the
    # check follows module → module edges between distinct, non-ancestor modules.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + ".") or nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


def test_no_product_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT.parent)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("old", ["harness", "methods", "tasks"])
def test_old_top_level_names_are_gone(old: str, tmp_path: Path) -> None:
    # Run from an empty folder so that the repository's own folders are not on sys.path.
    proc = subprocess.run(
        [sys.executable, "-c", f"import {old}"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


def test_import_mrbench_from_anywhere(tmp_path: Path) -> None:
    code = "import mrbench, mrbench.methods, mrbench.tasks, mrbench.cli.app; print(mrbench.__version__)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


# --- function length --------------------------------------------------------------------------

MAX_BODY_LINES = 60


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body without its docstring: what a reader follows top to bottom (the
    options a Typer command declares in its signature do not count)."""
    body = node.body
    first = body[0]
    is_doc = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    start = body[1] if is_doc and len(body) > 1 else first
    return (node.end_lineno or start.lineno) - start.lineno + 1


def test_no_product_function_body_over_60_lines() -> None:
    long = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({lines} lines)"
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := _body_lines(node)) > MAX_BODY_LINES
    )
    assert not long, (
        f"function bodies over {MAX_BODY_LINES} lines (split them into named phases):\n" + "\n".join(long)
    )


# --- the run layout is spelled in one place --------------------------------------------------

SCHEMA_MODULES = {"core/layout.py", "core/records.py"}
ELSEWHERE = [*(ROOT.parent / d for d in ("scripts", "benchmarks")), ROOT.parent / "tests" / "fakes.py"]


def _layout_literal(value: str) -> bool:
    """True for a string that spells a name of the run layout: a ``mrbench.*`` tag, a metric
    namespace, an artifact, MLflow's parent tag, or a record key only the records use."""
    from mrbench.core import layout

    tags = {
        layout.METHOD, layout.TASK, layout.TASK_VERSION, layout.MODEL, layout.SEED, layout.RUN_KEY,
        layout.GIT_SHA, layout.SWEEP, layout.PRIMARY_METRIC, layout.LOWER_IS_BETTER,
        layout.REWARD_COMPONENTS, layout.ERROR, layout.EVAL_BEFORE_FROM, layout.ROLE, layout.COMMAND,
        layout.HOST, layout.PID, layout.PRESET, layout.UNAVAILABLE_TASKS, layout.HEARTBEAT,
        layout.SCHEMA, layout.SCENARIO, layout.LAB_KEY, layout.EVAL_OF, layout.RESUMED_FROM,
    }  # fmt: skip
    tag_prefixes = (layout.VERSION, layout.CLAIM, layout.EVAL_EXTRA_SKIPPED)
    metric_prefixes = (
        layout.REWARDS, layout.ADV, layout.TRAIN, layout.EVAL, layout.EVAL_BEFORE, layout.PERF,
        layout.LAB, layout.EVAL_EXTRA, layout.EVAL_EXTRA_BEFORE,
    )  # fmt: skip
    artifacts = {
        layout.DIAGNOSTICS_ARTIFACT,
        layout.COMPLETIONS_ARTIFACT,
        layout.CELL_LOG_ARTIFACT,
        layout.SWEEP_ARTIFACT,
        layout.LAB_ARTIFACT,
        layout.PARENT_RUN_TAG,
    }  # fmt: skip (CONFIG_ARTIFACT is left out: a model folder's config.json has the same name)
    record_keys = {"corr_matrix", "key_score"}
    if value.startswith(layout.TAG_PREFIX):
        name = value.removeprefix(layout.TAG_PREFIX)
        return name in tags or name.startswith(tag_prefixes)
    return value.startswith(metric_prefixes) or value in artifacts or value in record_keys


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_layout_names_are_spelled_only_in_the_schema_modules() -> None:
    files = [p for p in ROOT.rglob("*.py") if str(p.relative_to(ROOT)) not in SCHEMA_MODULES]
    files += [p for place in ELSEWHERE for p in ([place] if place.is_file() else sorted(place.rglob("*.py")))]
    spelled = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.value!r}"
        for path in files
        for node in _strings(ast.parse(path.read_text(encoding="utf-8")))
        if _layout_literal(node.value)
    )
    assert not spelled, "layout names spelled outside mrbench/core/{layout,records}.py:\n" + "\n".join(
        spelled
    )


# --- the results folder is spelled in one place -----------------------------------------------

RESULTS_LAYOUT = "core/results_layout.py"
ALSO_SPELLING = {"core/layout.py"}  # MLflow artifact paths of the run layout (logs/cell.log)


def _results_names() -> tuple[set[str], set[str]]:
    """(file names spelled anywhere in a string, folder names spelled as a ``path / "name"`` join)."""
    from mrbench.core import results_layout as rl

    files = {rl.CELL_LOCK, rl.CELL_LOG, rl.PROGRESS, rl.PENDING_RECORD, rl.MODEL_MARKER, rl.RESUME_MARKER}
    files |= {rl.STORE_DB, rl.SWEEP_LOG}
    folders = {
        rl.CHECKPOINTS_DIR,
        rl.EVAL_CACHE_DIR,
        rl.MODELS_DIR,
        rl.LOGS_DIR,
        rl.FINAL_DIR,
        rl.PENDING_DIR,
    }
    return files, folders | {rl.ARTIFACTS_DIR}


def _results_spelled(tree: ast.AST) -> list[tuple[int, str]]:
    files, folders = _results_names()
    # A name, or a path ending in one (help text that mentions a path in prose is not a path).
    found = [
        (n.lineno, n.value)
        for n in _strings(tree)
        if any(n.value == name or (n.value.endswith("/" + name) and " " not in n.value) for name in files)
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.Constant) and right.value in folders:
                found.append((node.lineno, right.value))
    return found


def test_results_folder_names_are_spelled_only_in_its_layout_module() -> None:
    spelled = sorted(
        f"{path.relative_to(ROOT.parent)}:{line} {value!r}"
        for path in ROOT.rglob("*.py")
        if str(path.relative_to(ROOT)) not in {RESULTS_LAYOUT, *ALSO_SPELLING}
        for line, value in _results_spelled(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not spelled, f"results-folder names spelled outside mrbench/{RESULTS_LAYOUT}:\n" + "\n".join(
        spelled
    )


def test_the_check_of_results_folder_names_finds_a_spelled_path() -> None:
    tree = ast.parse(
        'def f(r):\n    """cell.lock in a docstring is fine."""\n    return r / "eval_cache" / "x.lock"\n'
    )
    assert _results_spelled(tree) == [(3, "eval_cache")]
    assert _results_spelled(ast.parse('LOCK = "cell.lock"')) == [(1, "cell.lock")]


# --- engine/: rooms, not one flat folder -------------------------------------------------------

ENGINE = ROOT / "engine"
MAX_ENGINE_MODULES = 12
# Rooms inside engine/ and their rank (a room imports only lower ones); the top-level modules
# config (the RunSpec, on models) and contract (on config) sit between models and training.
ENGINE_RANK = {"runs": 0, "models": 1, "config": 2, "processes": 3, "contract": 3}
ENGINE_RANK |= {"training": 4, "evaluation": 4, "cell": 5}


def test_engine_is_rooms_with_at_most_twelve_modules_at_its_top() -> None:
    top = sorted(p.name for p in ENGINE.glob("*.py"))
    assert len(top) <= MAX_ENGINE_MODULES, top
    rooms = sorted(p.name for p in ENGINE.iterdir() if (p / "__init__.py").is_file())
    assert set(rooms) <= set(ENGINE_RANK), f"a room of engine/ without a rank in ENGINE_RANK: {rooms}"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((ENGINE / room / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, (
            f"engine/{room}/__init__.py needs a paragraph saying what the room holds"
        )


def test_engine_rooms_import_downwards() -> None:
    wrong = []
    for module, targets in _graph().items():
        parts = module.split(".")
        if parts[:2] != ["mrbench", "engine"] or len(parts) < 3:
            continue
        for target in targets:
            other = target.split(".")
            if other[:2] != ["mrbench", "engine"] or len(other) < 3 or other[2] == parts[2]:
                continue
            if ENGINE_RANK[other[2]] >= ENGINE_RANK[parts[2]]:
                wrong.append(f"{module} imports {target} ({parts[2]} → {other[2]})")
    assert not wrong, "engine rooms importing sideways or up:\n" + "\n".join(sorted(wrong))


# --- the MRBENCH_* environment variables are named in one module -------------------------------

ENV_MODULE = "core/env.py"
ENV_PREFIX = "MRBENCH_"


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module's code, the parts of its f-strings included; docstrings and
    the other bare string statements (an attribute's doc) are prose, like comments, and left out."""
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
    ]


def _env_spelled(tree: ast.AST) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in _code_strings(tree) if ENV_PREFIX in node.value]


def test_environment_variables_are_named_only_in_core_env() -> None:
    # Read one through its declaration (env.THREADS.get()), set one by its name (env.VERBOSE.name).
    spelled = sorted(
        f"{path.relative_to(ROOT.parent)}:{line} {value!r}"
        for path in ROOT.rglob("*.py")
        if str(path.relative_to(ROOT)) != ENV_MODULE
        for line, value in _env_spelled(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not spelled, f"{ENV_PREFIX}* spelled outside mrbench/{ENV_MODULE}:\n" + "\n".join(spelled)


def test_the_check_of_environment_variable_names_finds_a_spelled_one() -> None:
    tree = ast.parse(
        'def f(name):\n    """$MRBENCH_THREADS in a docstring is fine."""\n'
        '    X = "1"\n    """Neither is MRBENCH_X in an attribute\'s doc."""\n'
        '    return os.environ.get("MRBENCH_THREADS"), f"{name}=MRBENCH_{X}"\n'
    )
    assert sorted(_env_spelled(tree)) == [(5, "=MRBENCH_"), (5, "MRBENCH_THREADS")]


# --- tracking clients are made in the store ---------------------------------------------------

STORE = ROOT / "store"


def _client_calls(tree: ast.AST) -> list[int]:
    """The lines of ``MlflowClient(...)`` calls (``MlflowClient(...)`` or ``x.MlflowClient(...)``)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "MlflowClient")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "MlflowClient")
        )
    )


def test_no_mlflow_client_is_made_outside_the_store() -> None:
    # Every command talks to a store through mrbench.store.client.tracking_client (a RetryingClient,
    # which rides out an outage); a plain MlflowClient made elsewhere would not.
    made = sorted(
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in ROOT.rglob("*.py")
        if STORE not in path.parents
        for line in _client_calls(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not made, "MlflowClient( outside mrbench/store/ (use store.client.tracking_client):\n" + "\n".join(
        made
    )


def test_the_check_of_mlflow_clients_finds_a_call() -> None:
    code = (
        "from mlflow.tracking import MlflowClient\n"
        "import mlflow\n"
        'def f(uri: str) -> MlflowClient:\n    """MlflowClient(uri) in a docstring is fine."""\n'
        "    a = MlflowClient(uri)\n    return mlflow.tracking.MlflowClient(tracking_uri=uri)\n"
    )
    assert _client_calls(ast.parse(code)) == [5, 6]
