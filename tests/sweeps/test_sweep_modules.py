"""The modules of mrbench.sweeps import each other as a DAG (no cycle), and each stays small."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import mrbench.sweeps

ROOT = Path(mrbench.sweeps.__file__).parent
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The ``mrbench.sweeps`` modules that ``path`` imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & known


def test_sweeps_import_graph_has_no_cycle() -> None:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {name: _imports(path, set(files)) - {name} for name, path in files.items()}
    assert graph["mrbench.sweeps.cell"] == set()  # the shared types depend on no sibling
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle in mrbench.sweeps: {exc.args[1]}") from None
    assert set(order) == set(files)


def test_sweeps_modules_are_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert max(sizes.values()) < MAX_LINES, sizes
