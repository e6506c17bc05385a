"""BFCL's own AST checker (from the installed ``bfcl-eval``) as the judge of BFCL answers.

**Loading the checker.** The checker is ``bfcl_eval/eval_checker/ast_eval/ast_checker.py``. Its
functions are pure Python, but the module's first lines import
``bfcl_eval.constants.model_config``, which imports every model handler and with them every
API client (openai, anthropic, cohere, boto3, …, and tree-sitter for Java/JavaScript parsing)
— none of which the Python categories need and none of which a ``--no-deps`` install has. The
checker reads that import in one place only: ``convert_func_name(name, model_name)`` looks up
``MODEL_CONFIG_MAPPING[model].underscore_to_dot`` to learn whether the model under test was
shown ``math_factorial`` instead of ``math.factorial`` (APIs that forbid dots in names).

So :func:`load_checker` imports that one file by path with :mod:`importlib`, through a loader
(:class:`_CheckerLoader`) that compiles the file's own source with that single import statement
left out, and gives the module, in its place, the model configuration for the one model it
will ever be asked about: this task's, whose prompt shows every function name as BFCL wrote it
(``underscore_to_dot`` false). Every other line runs as shipped, including its imports of
``bfcl_eval.constants.enums``, ``…type_mappings`` and the Java/JavaScript type converters
(plain modules without third-party imports). The module is kept out of ``sys.modules``, and
nothing is read from or written to the package's ``__pycache__`` (whose bytecode is of the
unmodified file). No tree-sitter parser is needed: the checker compares decoded values, and
decoding our answers is this task's own parser's job (:mod:`.parse`). If a later bfcl-eval
moves that import, loading fails with an error naming the pinned version.

**Decoding.** BFCL runs its checker on the calls a model handler decoded from the raw output;
here the decoder is this task's format: an answer is decoded only when it is a well-formed
message (``<think>…</think>`` then one ``<tool_call>`` block of JSON calls, or one
``<response>`` block). Anything else fails to decode and is invalid, as BFCL's
``ast_decoder:decoder_failed``.

**Categories.** Call categories (simple, multiple, parallel, parallel_multiple and their live
versions) go to the checker's ``ast_checker`` with BFCL's category name and ``Language.PYTHON``.
Irrelevance categories have no possible answer: BFCL counts an item right when no call could
be decoded. This format has an explicit way to make no call, so the answer must be a
well-formed ``<response>`` — the one deliberate difference from BFCL, whose free-form
prompt models give it no such signal and where a garbled output therefore counts as declining.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling.bfcl import INSTALL_HINT, PINNED, bfcl_package_dir
from mrbench.tasks.tool_calling.parse import parse_answer

CHECKER_FILE = Path("eval_checker") / "ast_eval" / "ast_checker.py"
_LEFT_OUT_IMPORT = "bfcl_eval.constants.model_config"
_MODEL = "mrbench"
"""The model name we hand the checker (it only uses it to look up the configuration below)."""


@dataclass(frozen=True)
class _NamesAsPrompted:
    """This task's entry of BFCL's model configuration: function names are shown as BFCL wrote
    them, dots included, so the checker must not expect ``_`` for ``.``."""

    underscore_to_dot: bool = False


@dataclass(frozen=True)
class Verdict:
    """The checker's verdict on one answer: ``valid``, and BFCL's ``error_type`` when invalid."""

    valid: bool
    error_type: str = ""
    error: str = ""

    @property
    def value(self) -> float:
        """1.0 or 0.0 (the ``bfcl_valid`` field)."""
        return 1.0 if self.valid else 0.0


class _CheckerLoader(importlib.abc.Loader):
    """Executes ``ast_checker.py`` without its import of the model configuration (see the module
    docstring); compiles from source every time, so no bytecode cache is read or written."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        tree = ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))
        kept = [node for node in tree.body if not _imports_model_config(node)]
        if len(kept) != len(tree.body) - 1:
            raise UserError(
                f"{self.path} does not import {_LEFT_OUT_IMPORT} the way this loader expects; "
                f"install the pinned version: {INSTALL_HINT}"
            )
        tree.body = kept
        module.MODEL_CONFIG_MAPPING = {_MODEL: _NamesAsPrompted()}  # type: ignore[attr-defined]
        exec(compile(tree, str(self.path), "exec"), module.__dict__)  # the checker's own code, as shipped


def _imports_model_config(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == _LEFT_OUT_IMPORT


@functools.cache
def load_checker() -> ModuleType:
    """bfcl-eval's ``ast_checker`` module, loaded once (see the module docstring)."""
    path = bfcl_package_dir() / CHECKER_FILE
    if not path.is_file():
        raise UserError(f"the installed bfcl-eval has no {CHECKER_FILE}; install {PINNED}")
    loader = _CheckerLoader(path)
    spec = importlib.util.spec_from_file_location("mrbench_bfcl_ast_checker", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(module)
    except ImportError as exc:
        raise UserError(f"cannot load BFCL's checker from {path}: {exc}; install {PINNED}") from None
    return module


def is_irrelevance(category: str) -> bool:
    """Whether a BFCL category expects no call (``irrelevance``, ``live_irrelevance``)."""
    return "irrelevance" in category


def check_calls(
    category: str, functions: list[dict[str, Any]], calls: list[dict[str, Any]], ground_truth: list[Any]
) -> Verdict:
    """The checker's verdict on decoded calls (``[{"name", "parameters"}]``) for one BFCL item.

    ``category`` is BFCL's test category (``simple_python``, ``live_multiple``, …),
    ``functions`` the item's function schemas as BFCL ships them, ``ground_truth`` its possible
    answer. An exception inside the checker (an input its authors did not foresee) is an
    invalid answer, never a crash.
    """
    if is_irrelevance(category):
        if calls:
            return Verdict(False, "irrelevance_error:decoder_success", "a call where none is right")
        return Verdict(True)
    checker = load_checker()
    model_output = [{call["name"]: call["parameters"]} for call in calls]
    try:
        result = checker.ast_checker(
            functions, model_output, ground_truth, checker.Language.PYTHON, category, _MODEL
        )
    except Exception as exc:  # the checker's own bug on an odd input: graded as invalid
        return Verdict(False, "checker_error", f"{type(exc).__name__}: {exc}")
    if result["valid"]:
        return Verdict(True)
    return Verdict(False, str(result.get("error_type", "invalid")), _first_error(result.get("error")))


def _first_error(errors: Any) -> str:
    if isinstance(errors, list) and errors:
        return str(errors[0])[:300]
    return str(errors or "")[:300]


def check_answer(completion: Any, check: str | dict[str, Any]) -> Verdict:
    """The verdict on one completion in this task's format.

    ``check`` is the ``bfcl_check`` column of a BFCL sample (JSON, or its decoded dict
    ``{"category", "functions", "ground_truth"}``).
    """
    spec = json.loads(check) if isinstance(check, str) else check
    category = spec["category"]
    answer = parse_answer(completion)
    if answer.structure == "malformed":
        return Verdict(False, "ast_decoder:decoder_failed", "not a well-formed answer in the task's format")
    if answer.structure == "response":
        calls: list[dict[str, Any]] = []
        if not is_irrelevance(category):
            return Verdict(False, "ast_decoder:decoder_failed", "a <response> where a call is needed")
    else:
        calls = list(answer.calls or [])
    return check_calls(category, spec["functions"], calls, spec["ground_truth"])
