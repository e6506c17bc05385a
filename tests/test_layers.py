"""The package's shape: imports point down between rooms, no import cycle, no module over 600 lines.

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
