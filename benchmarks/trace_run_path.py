"""How far a RunSpec travels: the product files ``mrbench run`` passes through on its way to the stored run.

Runs ``mrbench run`` in this process (tool-calling, the tiny preset, 1 step of 2×2 completions,
2 eval samples) under a profile hook that records the first call of every product function
(``mrbench/**``) that is handed the cell's :class:`~mrbench.engine.config.RunSpec` as an argument
(the spec's path; ``--all`` records every product function), in call order, and reports:

- ``files``: distinct product files the path visits;
- ``returns``: how often the path comes back to a file it had left (each function counted once, at
  its first call, so a loop is not a return; consecutive calls in one file are one visit).

Class bodies (run when a module is first imported, which here happens lazily mid-path) and
comprehensions (part of the function around them) are not functions of the path and are left out.
``--scope engine/,cli/`` keeps only the product files under those prefixes (with ``--all``: e.g.
the engine's own share of the path).

    python benchmarks/trace_run_path.py [--models DIR] [--show] [--all] [--scope PREFIXES]

``--models`` reuses built presets (a folder with ``tiny/``, as ``<results>/models``), so only
the cell is traced; ``--show`` prints the sequence of visits.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from pathlib import Path

PKG = str(Path(__file__).resolve().parents[1] / "mrbench") + os.sep
ARGS = ["run", "--task", "tool-calling", "--model", "tiny", "--steps", "1", "--quiet", "--save", "none"]
ARGS += ["--train", "num_generations=2", "--train", "prompts_per_step=2", "--train", "eval_limit=2"]


def _holds_spec(frame, spec_type: type) -> bool:
    args = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
    return any(isinstance(frame.f_locals.get(name), spec_type) for name in args)


def _is_class_body(code) -> bool:
    # A class body's code object is neither optimized nor given new locals (a function's is).
    return not code.co_flags & inspect.CO_NEWLOCALS


def trace(argv: list[str], *, every: bool = False) -> list[str]:
    """The product file of each product function's first call (with the RunSpec, unless
    ``every``), in order."""
    from mrbench.cli.app import main
    from mrbench.engine.config import RunSpec

    seen: set[object] = set()
    order: list[str] = []

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code in seen or code.co_name.startswith("<") or not code.co_filename.startswith(PKG):
            return
        if _is_class_body(code):
            return
        if not every and not _holds_spec(frame, RunSpec):
            return
        seen.add(code)
        order.append(code.co_filename.removeprefix(PKG))

    sys.argv = ["mrbench", *argv]
    sys.setprofile(hook)
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
    return order


def visits(order: list[str]) -> list[str]:
    """Consecutive calls in one file as one visit."""
    return [f for i, f in enumerate(order) if i == 0 or order[i - 1] != f]


def returns(path: list[str]) -> int:
    """Visits to a file the path had already visited and left."""
    seen: set[str] = set()
    back = 0
    for f in path:
        back += f in seen
        seen.add(f)
    return back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, help="built presets to reuse (<results>/models)")
    parser.add_argument("--show", action="store_true")
    parser.add_argument("--all", action="store_true", help="every product function, not the spec's path")
    parser.add_argument("--scope", default="", help="comma-separated file prefixes to keep (engine/,cli/)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrbench-trace-") as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        if args.models:
            (results / "models").symlink_to(args.models.resolve())
        os.environ["MRBENCH_RESULTS"] = str(results)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        prefixes = tuple(p for p in args.scope.split(",") if p)
        path = visits([f for f in trace(ARGS, every=args.all) if not prefixes or f.startswith(prefixes)])
    if args.show:
        print("\n".join(path))
    print(f"`mrbench {' '.join(ARGS)}`" + (f" (files under {args.scope})" if args.scope else ""))
    print(f"files: {len(set(path))}  visits: {len(path)}  returns to a file left earlier: {returns(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
