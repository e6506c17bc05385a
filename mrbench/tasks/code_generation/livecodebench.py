"""LiveCodeBench code-generation problems (``code_generation_lite``) from a local path or a hub id.

Each record (one JSON object per line of ``test.jsonl`` … ``test6.jsonl``; v6's 175 problems are
``test6.jsonl``) has ``question_id``, ``question_title``, ``question_content``, ``platform``
(leetcode, atcoder, codeforces), ``starter_code``, ``difficulty``, ``public_test_cases`` (a JSON
string: a list of ``{"input", "output", "testtype"}``), ``private_test_cases`` (the same list,
either as JSON or — as the hub release ships it — base64 of zlib of a pickled JSON string) and
``metadata`` (a JSON string; ``func_name`` for LeetCode problems).

The pickle is never unpickled: it is read opcode by opcode (:mod:`pickletools`, which only
parses) and accepted only when it is a single string; anything else is refused with an error
naming the record. Compressed JSON (without pickle) is accepted too.

Two kinds of test, as LiveCodeBench grades them:

- ``functional`` (LeetCode): the answer defines ``class Solution`` with the method
  ``func_name``; each test's ``input`` is one JSON value per line (the arguments) and
  ``output`` the JSON of the return value, compared with ``==`` (tuples as lists).
- ``stdin`` (AtCoder, Codeforces): the answer is a program reading stdin (a ``program``
  problem, see :meth:`.problems.Problem.runnable`); its output is compared with the expected
  one line by line, stripped, tokens that differ compared as decimals.

LiveCodeBench ships no reference solutions, so ``ast_similarity`` and ``efficiency`` are 0 and
``mrbench score`` takes ``--input`` only. The set is for evaluation (``eval_dataset``).
"""

from __future__ import annotations

import base64
import binascii
import json
import pickletools
import zlib
from typing import Any

from mrbench.core.errors import UserError
from mrbench.tasks.code_generation.problems import ANSWER_INSTRUCTION, PROGRAM_VARIABLE, Problem
from mrbench.tasks.sources import field, read_records

NAME = "livecodebench"
MAX_TEST_BYTES = 256 * 2**20
"""Largest decompressed private-test payload accepted (the biggest in the release is ~100 MB)."""
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})
_HARMLESS_OPS = frozenset({"PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT", "STOP"})

IMPORTS = (
    "import bisect, collections, functools, heapq, itertools, math, re, string, sys\n"
    "from collections import Counter, defaultdict, deque\n"
    "from functools import cache, lru_cache, reduce\n"
    "from heapq import heappop, heappush\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from math import ceil, floor, gcd, inf, isqrt, sqrt\n"
    "from typing import *\n"
)
"""The standard-library names LiveCodeBench's own harness puts before a solution."""

PROGRAM_RUNNER = f"""
def __run_program__(stdin_text):
    import io, sys
    saved = sys.stdin, sys.stdout
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin_text.encode()), encoding="utf-8")
    sys.stdout = out = io.StringIO()
    try:
        exec(compile({PROGRAM_VARIABLE}, "<program>", "exec"), {{"__name__": "__main__"}})
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved
    return out.getvalue()
"""
"""Prelude of a stdin problem: runs the program's source on ``stdin_text``, returns its output."""

FUNCTIONAL_TESTS = """
import json

def check(candidate):
    for number, (arguments, expected) in enumerate(CASES):
        args = [json.loads(line) for line in arguments.split("\\n") if line.strip()]
        got = candidate(*args)
        got = list(got) if isinstance(got, tuple) else got
        assert got == json.loads(expected), f"test {number}: wrong return value"
"""

STDIN_TESTS = """
from decimal import Decimal, InvalidOperation

def _lines(text):
    return [line.strip() for line in text.strip().splitlines()]

def _same_line(got, expected):
    if got == expected:
        return True
    a, b = got.split(), expected.split()
    if len(a) != len(b):
        return False
    try:
        return all(x == y or Decimal(x) == Decimal(y) for x, y in zip(a, b))
    except InvalidOperation:
        return False

def check(candidate):
    for number, (stdin_text, expected) in enumerate(CASES):
        got, want = _lines(candidate(stdin_text)), _lines(expected)
        assert len(got) == len(want) and all(map(_same_line, got, want)), f"test {number}: wrong output"
"""


def decode_tests(value: Any, where: str, key: str) -> list[dict[str, Any]]:
    """A test-case field (JSON, or base64 of zlib of JSON or of a pickled JSON string) as a list of tests."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise UserError(
            f"dataset {NAME!r}: {where}: field {key!r} must be a string, got {type(value).__name__}"
        )
    try:
        return _test_list(json.loads(value), where, key)
    except json.JSONDecodeError:
        pass
    stream = zlib.decompressobj()
    try:
        raw = stream.decompress(base64.b64decode(value, validate=True), MAX_TEST_BYTES)
    except (binascii.Error, ValueError, zlib.error):
        raise UserError(
            f"dataset {NAME!r}: {where}: field {key!r} is neither JSON nor base64 of zlib-compressed data"
        ) from None
    if stream.unconsumed_tail:
        raise UserError(
            f"dataset {NAME!r}: {where}: field {key!r} decompresses to over {MAX_TEST_BYTES} bytes"
        )
    text = _pickled_string(raw, where, key) if raw[:1] == b"\x80" else raw.decode("utf-8", "replace")
    try:
        return _test_list(json.loads(text), where, key)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"dataset {NAME!r}: {where}: field {key!r} decodes to invalid JSON: {exc.msg}"
        ) from None


def _pickled_string(raw: bytes, where: str, key: str) -> str:
    """The one string a pickle holds, read without unpickling; :class:`UserError` for anything else."""
    strings: list[str] = []
    try:
        for opcode, arg, _ in pickletools.genops(raw):
            if opcode.name in _STRING_OPS:
                strings.append(str(arg))
            elif opcode.name not in _HARMLESS_OPS:
                raise UserError(
                    f"dataset {NAME!r}: {where}: field {key!r} is a pickle of something other than a "
                    f"string (opcode {opcode.name}); refusing to unpickle it"
                )
    except ValueError as exc:  # truncated or corrupt pickle stream
        raise UserError(f"dataset {NAME!r}: {where}: field {key!r} is a broken pickle: {exc}") from None
    if len(strings) != 1:
        raise UserError(
            f"dataset {NAME!r}: {where}: field {key!r} pickle holds {len(strings)} strings, not 1"
        )
    return strings[0]


def _test_list(value: Any, where: str, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise UserError(f"dataset {NAME!r}: {where}: field {key!r} must be a list of test objects")
    return value


def problem_from_record(where: str, record: dict[str, Any]) -> Problem:
    """One record as a :class:`Problem` (functional or stdin by its tests' ``testtype``)."""
    qid = str(field(NAME, where, record, "question_id", (str, int)))
    content = field(NAME, where, record, "question_content")
    starter = record.get("starter_code") or ""
    metadata = _metadata(where, record)
    cases, kind = _test_cases(where, record)
    cases_literal = f"CASES = {json.dumps(cases)!r}\nCASES = json.loads(CASES)\n"
    intro = (
        "You will be given a question (problem specification) and will generate a correct Python "
        f"program that matches the specification and passes all tests.\n\nQuestion: {content.strip()}\n\n"
    )
    if kind == "functional":
        fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise UserError(f"dataset {NAME!r}: {where}: functional tests need metadata 'func_name'")
        prompt = (
            f"{intro}Use this starter code and complete the method:\n```python\n{starter.strip()}\n```\n"
            f"{ANSWER_INSTRUCTION}"
        )
        return Problem(
            id=qid,
            dataset=NAME,
            entry_point=f"Solution().{fn_name}",
            prompt=prompt,
            tests="import json\n" + cases_literal + FUNCTIONAL_TESTS,
            reference="",
            prelude=IMPORTS,
        )
    prompt = (
        f"{intro}Read the input from stdin, solve the problem and write the answer to stdout.\n"
        f"{ANSWER_INSTRUCTION}"
    )
    return Problem(
        id=qid,
        dataset=NAME,
        entry_point="__run_program__",
        prompt=prompt,
        tests="import json\n" + cases_literal + STDIN_TESTS,
        reference="",
        prelude=IMPORTS + PROGRAM_RUNNER,
        program=True,
    )


def _metadata(where: str, record: dict[str, Any]) -> Any:
    """The record's ``metadata`` (a JSON string in the dataset's files), decoded; ``{}`` when absent."""
    metadata = record.get("metadata") or "{}"
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise UserError(f"dataset {NAME!r}: {where}: field 'metadata' is not valid JSON") from None
    return metadata


def _test_cases(where: str, record: dict[str, Any]) -> tuple[list[tuple[str, str]], str]:
    """The record's public and private tests as ``(input, output)`` pairs, and their one
    ``testtype`` (``stdin`` or ``functional``)."""
    tests = decode_tests(
        field(NAME, where, record, "public_test_cases", (str, list)), where, "public_test_cases"
    )
    if "private_test_cases" in record:
        tests += decode_tests(record["private_test_cases"], where, "private_test_cases")
    if not tests:
        raise UserError(f"dataset {NAME!r}: {where}: no test cases")
    cases = []
    for i, test in enumerate(tests):
        label = f"{where} test {i}"
        cases.append((str(field(NAME, label, test, "input")), str(field(NAME, label, test, "output"))))
    kinds = {str(t.get("testtype", "stdin")) for t in tests}
    if kinds - {"stdin", "functional"} or len(kinds) != 1:
        raise UserError(
            f"dataset {NAME!r}: {where}: testtype must be all 'stdin' or all 'functional', got {kinds}"
        )
    return cases, kinds.pop()


def livecodebench_problems(data_path: str) -> list[Problem]:
    """Every problem at ``data_path`` (a ``.jsonl`` file, a folder of them, or a hub id; split ``test``)."""
    problems = [problem_from_record(where, record) for where, record in read_records(NAME, data_path)]
    ids = [p.id for p in problems]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise UserError(f"dataset {NAME!r}: question ids occur twice in {data_path!r}: {duplicates[:5]}")
    return problems
