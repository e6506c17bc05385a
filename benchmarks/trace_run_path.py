"""How far a RunSpec travels: the product files ``mrbench run`` passes through on its way to the stored run.

Runs ``mrbench run`` in this process (tool-calling, the tiny preset, 1 step of 2×2 completions,
2 eval samples) under a profile hook that sees every call of a product function
(``mrbench/**``), keeps the calls that make the path (below), each function once, in call order,
and reports:

- ``files``: distinct product files on the path;
- ``returns``: how often the path comes back to a file it had left (consecutive calls in one file
  are one visit; each function counted once, at its first call, so a loop is not a return).

Which calls make the path (``--measure``):

- ``entries`` (default): each function's first call made from another product file — the
  file-to-file entries of the run (a function calling its own file's helpers stays in its file;
  TRL calling a callback of ours counts as a call from the nearest product frame below it). With
  the default scope this is the measure of issue 35 ("visits 29 files and comes back to a file it
  had left 64 times"): 28 files and 64 returns at e394cd8, the commit the issue was filed against;
- ``all``: each function's first call;
- ``spec``: each function's first call, when it is handed the cell's
  :class:`~mrbench.engine.config.RunSpec` as an argument.

Class bodies (run when a module is first imported, which here happens lazily mid-path) and
comprehensions (part of the function around them) are not functions of the path and are left out.
``--scope`` keeps the product files under those prefixes (default ``engine/,cli/commands/run.py``:
the engine's share of the path and the command; ``--scope ''``: every product file).

    python benchmarks/trace_run_path.py [--measure entries|all|spec] [--scope PREFIXES]
        [--models DIR] [--show]

``--models`` reuses built presets (a folder with ``tiny/``, as ``<results>/models``), so only
the cell is traced; ``--show`` prints the visits (R: a return) and the files returned to most.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PKG = str(Path(__file__).resolve().parents[1] / "mrbench") + os.sep
ARGS = ["run", "--task", "tool-calling", "--model", "tiny", "--steps", "1", "--quiet", "--save", "none"]
ARGS += ["--train", "num_generations=2", "--train", "prompts_per_step=2", "--train", "eval_limit=2"]
DEFAULT_SCOPE = "engine/,cli/commands/run.py"


@dataclass(frozen=True)
class Call:
    """A call of one product function: its file and name (both relative to ``mrbench/``),
    the product file of the nearest product frame below it (None: called from outside), and
    whether it was handed the RunSpec."""

    file: str
    name: str
    caller: str | None
    holds_spec: bool


def _holds_spec(frame, spec_type: type) -> bool:
    args = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
    return any(isinstance(frame.f_locals.get(name), spec_type) for name in args)


def _is_class_body(code) -> bool:
    # A class body's code object is neither optimized nor given new locals (a function's is).
    return not code.co_flags & inspect.CO_NEWLOCALS


def _product_caller(frame) -> str | None:
    caller = frame.f_back
    while caller is not None and not caller.f_code.co_filename.startswith(PKG):
        caller = caller.f_back
    return caller.f_code.co_filename.removeprefix(PKG) if caller is not None else None


def trace(argv: list[str]) -> dict[str, list[Call]]:
    """The calls of ``mrbench <argv>`` that make each measure's path, in order: every product
    function's first call (``all``), those handed the RunSpec (``spec``), and every product
    function's first call from another product file (``entries``)."""
    from mrbench.cli.app import main
    from mrbench.engine.config import RunSpec

    called: set[object] = set()
    entered: set[object] = set()
    paths: dict[str, list[Call]] = {"all": [], "spec": [], "entries": []}

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code in entered or code.co_name.startswith("<") or not code.co_filename.startswith(PKG):
            return
        if _is_class_body(code):
            return
        file, caller = code.co_filename.removeprefix(PKG), _product_caller(frame)
        call = Call(file, code.co_qualname, caller, _holds_spec(frame, RunSpec))
        if code not in called:
            called.add(code)
            paths["all"].append(call)
            if call.holds_spec:
                paths["spec"].append(call)
        if caller != file:
            entered.add(code)
            paths["entries"].append(call)

    sys.argv = ["mrbench", *argv]
    sys.setprofile(hook)
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
    return paths


def visits(path: list[Call]) -> list[Call]:
    """Consecutive calls in one file as one visit (its first call)."""
    return [c for i, c in enumerate(path) if i == 0 or path[i - 1].file != c.file]


def returns(visited: list[Call]) -> list[bool]:
    """For each visit, whether it comes back to a file the path had already visited and left."""
    seen: set[str] = set()
    back = []
    for c in visited:
        back.append(c.file in seen)
        seen.add(c.file)
    return back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", choices=["entries", "all", "spec"], default="entries")
    parser.add_argument("--scope", default=DEFAULT_SCOPE, help="comma-separated file prefixes ('': all)")
    parser.add_argument("--models", type=Path, help="built presets to reuse (<results>/models)")
    parser.add_argument("--show", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrbench-trace-") as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        if args.models:
            (results / "models").symlink_to(args.models.resolve())
        os.environ["MRBENCH_RESULTS"] = str(results)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        paths = trace(ARGS)
    prefixes = tuple(p for p in args.scope.split(",") if p)
    visited = visits([c for c in paths[args.measure] if not prefixes or c.file.startswith(prefixes)])
    back = returns(visited)
    if args.show:
        for c, r in zip(visited, back, strict=True):
            print(f"{'R' if r else ' '} {c.file}  {c.name}  <- {c.caller}")
        most = Counter(c.file for c, r in zip(visited, back, strict=True) if r).most_common()
        print("returns by file:", ", ".join(f"{f} {n}" for f, n in most))
    scope = f", files under {args.scope}" if prefixes else ""
    print(f"`mrbench {' '.join(ARGS)}` ({args.measure}{scope})")
    files = len({c.file for c in visited})
    print(f"files: {files}  visits: {len(visited)}  returns to a file left earlier: {sum(back)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
