"""The ``MRBENCH_*`` environment variables: one declaration each, one reading rule, one doc table."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest

from mrbench.core import env
from mrbench.core.errors import UserError

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
TABLE_HEADER = "| variable | default | what |"

DEFAULTS = {
    "MRBENCH_RESULTS": Path("results"),
    "MRBENCH_CACHE": None,
    "MRBENCH_THREADS": None,
    "MRBENCH_MALLOC": "keep",
    "MRBENCH_CPU_FOLD": "mrbench",
    "MRBENCH_RANK_LAUNCH": "fork",
    "MRBENCH_CELL_SERVER": True,
    "MRBENCH_CHECKPOINT_EVERY": None,
    "MRBENCH_TRACKING_RETRY_S": 300.0,
    "MRBENCH_VERBOSE": False,
    "MRBENCH_KEEP_LOGS": 100,
    "MRBENCH_TRACEBACK": False,
    "MRBENCH_SANDBOX_PYTHON": None,
    "MRBENCH_SANDBOX_UID_BASE": 61000,
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in env.VARIABLES:
        monkeypatch.delenv(var.name, raising=False)


def test_the_doc_table_is_generated_from_the_declarations() -> None:
    """docs/architecture.md holds :func:`markdown_table` verbatim; after changing a variable, paste
    ``python -c "from mrbench.core.env import markdown_table; print(markdown_table())"``."""
    text = DOC.read_text(encoding="utf-8")
    start = text.find(TABLE_HEADER)
    assert start >= 0, "docs/architecture.md lost its table of environment variables"
    end = text.find("\n\n", start)
    table = text[start : end if end >= 0 else None].rstrip("\n")
    assert table == env.markdown_table(), "docs/architecture.md's table differs from markdown_table()"


def test_every_variable_is_declared_once_and_listed() -> None:
    declared = [v for v in vars(env).values() if isinstance(v, env.EnvVar)]
    assert sorted(v.name for v in declared) == sorted(v.name for v in env.VARIABLES)
    names = [v.name for v in env.VARIABLES]
    assert len(set(names)) == len(names)
    assert all(name.startswith(env.PREFIX) and name.isupper() for name in names)
    assert all(v.doc and "\n" not in v.doc and "|" not in v.doc for v in env.VARIABLES)


@pytest.mark.parametrize("var", env.VARIABLES, ids=lambda v: v.name)
def test_unset_empty_and_blank_are_the_default(var: env.EnvVar, monkeypatch: pytest.MonkeyPatch) -> None:
    assert var.get() == DEFAULTS[var.name] == var.default
    assert not var.is_set()
    for blank in ("", "  ", "\t"):
        monkeypatch.setenv(var.name, blank)
        assert var.get() == var.default and not var.is_set()


def test_every_variable_has_its_default_checked() -> None:
    assert set(DEFAULTS) == {v.name for v in env.VARIABLES}


@pytest.mark.parametrize("text", ["1", "true", "yes", "on", "TRUE", " Yes ", "On"])
def test_a_switch_turned_on(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.VERBOSE.name, text)
    assert env.VERBOSE.get() is True
    assert env.switch(text) is True


@pytest.mark.parametrize("text", ["0", "false", "no", "off", "FALSE", " No ", "Off"])
def test_a_switch_turned_off(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.CELL_SERVER.name, text)
    assert env.CELL_SERVER.get() is False
    assert env.switch(text) is False


@pytest.mark.parametrize("text", ["2", "maybe", "y", "n", "enabled", "-1"])
def test_a_switch_refuses_anything_else_naming_the_variable_and_the_value(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env.TRACEBACK.name, text)
    with pytest.raises(UserError) as caught:
        env.TRACEBACK.get()
    assert str(caught.value) == (
        f"MRBENCH_TRACEBACK={text!r} must be a switch: 1, true, yes, on or 0, false, no, off"
    )


@pytest.mark.parametrize(
    ("var", "text", "expected"),
    [
        (env.THREADS, "0", "MRBENCH_THREADS='0' must be a positive integer up to 4096"),
        (env.THREADS, "1.5", "MRBENCH_THREADS='1.5' must be a positive integer up to 4096"),
        (env.THREADS, "4097", "MRBENCH_THREADS='4097' must be a positive integer up to 4096"),
        (env.KEEP_LOGS, "many", "MRBENCH_KEEP_LOGS='many' must be an integer ≥ 0 up to 1000000"),
        (env.KEEP_LOGS, "10000000", "MRBENCH_KEEP_LOGS='10000000' must be an integer ≥ 0 up to 1000000"),
        (env.SANDBOX_UID_BASE, "-5", "MRBENCH_SANDBOX_UID_BASE='-5' must be an integer ≥ 0 up to 2147483263"),
        (
            env.SANDBOX_UID_BASE,
            "4294967296",
            "MRBENCH_SANDBOX_UID_BASE='4294967296' must be an integer ≥ 0 up to 2147483263",
        ),
        (env.MALLOC, "jemalloc", "MRBENCH_MALLOC='jemalloc' must be 'keep' or 'default'"),
        (env.CPU_FOLD, "fast", "MRBENCH_CPU_FOLD='fast' must be 'mrbench' or 'trl'"),
        (env.RANK_LAUNCH, "torchrun", "MRBENCH_RANK_LAUNCH='torchrun' must be 'fork' or 'accelerate'"),
        (env.TRACKING_RETRY_S, "-1", "MRBENCH_TRACKING_RETRY_S='-1' must be a number of seconds ≥ 0"),
        (env.TRACKING_RETRY_S, "nan", "MRBENCH_TRACKING_RETRY_S='nan' must be a number of seconds ≥ 0"),
        (
            env.CHECKPOINT_EVERY,
            "often",
            "MRBENCH_CHECKPOINT_EVERY='often' must be auto or a number of steps from 0 (no checkpoints) "
            "to 100000",
        ),
    ],
)
def test_a_bad_value_names_the_variable_the_value_and_what_it_must_be(
    var: env.EnvVar, text: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(var.name, text)
    with pytest.raises(UserError) as caught:
        var.get()
    assert str(caught.value) == expected


def test_values_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [
        (env.RESULTS, "/data/results", Path("/data/results")),
        (env.CACHE, "/tmp/c", Path("/tmp/c")),
        (env.THREADS, " 3 ", 3),
        (env.KEEP_LOGS, "0", 0),
        (env.SANDBOX_UID_BASE, "70000", 70000),
        (env.MALLOC, " Default ", "default"),
        (env.CPU_FOLD, "trl", "trl"),
        (env.RANK_LAUNCH, "accelerate", "accelerate"),
        (env.CHECKPOINT_EVERY, "AUTO", None),
        (env.CHECKPOINT_EVERY, "5", 5),
        (env.TRACKING_RETRY_S, "1.5", 1.5),
        (env.SANDBOX_PYTHON, "/usr/bin/python3", "/usr/bin/python3"),
    ]
    for var, text, value in cases:
        monkeypatch.setenv(var.name, text)
        assert var.get() == value, var.name
        assert var.is_set() and var.raw() == text
    monkeypatch.setenv(env.TRACKING_RETRY_S.name, "inf")
    assert math.isinf(env.TRACKING_RETRY_S.get())


def test_core_env_imports_only_the_standard_library_and_core() -> None:
    tree = ast.parse(Path(env.__file__).read_text(encoding="utf-8"))
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    outside = [
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names
        and name != "__future__"
        and not name.startswith("mrbench.core.")
    ]
    assert not outside, outside
