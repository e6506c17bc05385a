"""Hub datasets for machines that can reach the Hugging Face hub: LeetCodeDataset and MBPP.

Offline (as on the development machines) they fail fast with :class:`HubUnavailableError`
naming the dataset and how to provide it, instead of retrying for half a minute. Datasets already
in the local HF cache load with ``HF_HUB_OFFLINE=1``. The task's factory loads the splits it will
use (:func:`require`), so an unavailable dataset is a one-line error when the task is built,
before a run exists.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from mrbench.core.errors import UserError
from mrbench.tasks.code_generation.problems import ANSWER_INSTRUCTION, Problem
from mrbench.tasks.sources import hub_reachable as _hub_reachable

LEETCODE_REPO = "newfacade/LeetCodeDataset"  # train 2,641 / test 228 (the paper's training set)
MBPP_REPO = "google-research-datasets/mbpp"  # "full" config: train 374 / test 500 / validation 90
HUB_SPLITS = {"leetcode": ("train", "test"), "mbpp": ("train", "test", "validation")}
_NAMES = {LEETCODE_REPO: "leetcode", MBPP_REPO: "mbpp"}
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class HubUnavailableError(UserError, RuntimeError):
    """A hub dataset could not be loaded (offline, not cached, or not found): a user error (exit 2,
    one line), and a ``RuntimeError`` for the callers that report it per item (``mrbench score``)."""


def load_hub_rows(repo: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of a hub dataset split, or :class:`HubUnavailableError` with a one-line message."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    what = f"code-generation dataset {_NAMES.get(repo, repo)!r} (hub {repo}, split {split})"
    how = (
        "download it into the Hugging Face cache on a machine with hub access and set HF_HUB_OFFLINE=1 "
        "here, or use dataset 'embedded' or 'humaneval' (they ship with mrbench)"
    )
    if not offline and not _hub_reachable():
        raise HubUnavailableError(f"cannot load {what}: the Hugging Face hub is unreachable; {how}")
    try:
        import datasets

        data = datasets.load_dataset(repo, config, split=split)
    except Exception as exc:  # datasets raises many types (ConnectionError, FileNotFoundError, …)
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise HubUnavailableError(f"cannot load {what} ({detail}); {how}") from None
    return [dict(row) for row in data]


def require(dataset: str, *, train: bool) -> None:
    """Load (and keep) the splits of hub ``dataset`` a task will use: its test split, and its train
    split when it trains on it; :class:`HubUnavailableError` now rather than inside a run."""
    loader = {"leetcode": leetcode_problems, "mbpp": mbpp_problems}[dataset]
    if train:
        loader("train")
    loader("test")


def _check_split(dataset: str, split: str) -> None:
    if split not in HUB_SPLITS[dataset]:
        raise ValueError(f"unknown {dataset} split {split!r}; choose from {', '.join(HUB_SPLITS[dataset])}")


def reference_from_response(response: str) -> str:
    """The solution code in a LeetCodeDataset response (the fenced block with ``class Solution``).

    >>> reference_from_response("Use a set.\\n```python\\nclass Solution:\\n    pass\\n```")
    'class Solution:\\n    pass'
    """
    blocks = _FENCE.findall(response)
    if blocks:
        return max(blocks, key=lambda b: ("class Solution" in b, len(b))).strip()
    start = response.find("class Solution")
    return (response[start:] if start >= 0 else response).strip()


@functools.lru_cache(maxsize=4)
def leetcode_problems(split: str = "train") -> tuple[Problem, ...]:
    """LeetCodeDataset problems: ``query`` as the prompt, its ``prompt`` field as the prelude."""
    _check_split("leetcode", split)
    problems = []
    for row in load_hub_rows(LEETCODE_REPO, None, split):
        problems.append(
            Problem(
                id=str(row["task_id"]),
                dataset="leetcode",
                entry_point=str(row["entry_point"]),
                prompt=str(row["query"]).strip(),
                tests=str(row["test"]),
                reference=reference_from_response(str(row["response"])),
                prelude=str(row["prompt"]),
            )
        )
    return tuple(problems)


def mbpp_entry_point(tests: list[str], code: str) -> str:
    """The function MBPP's asserts call (first ``assert name(``), else the reference's first def.

    >>> mbpp_entry_point(["assert  remove_Occ('hello','l') == 'heo'"], "")
    'remove_Occ'
    """
    for test in tests:
        match = re.search(
            r"assert\s+\(?\s*(?:not\s+)?(?:math\.isclose\(\s*)?(?:set\(\s*)?([A-Za-z_]\w*)\s*\(", test
        )
        if match:
            return match.group(1)
    match = re.search(r"^def\s+([A-Za-z_]\w*)", code, re.MULTILINE)
    if match:
        return match.group(1)
    raise ValueError(f"cannot find the function under test in {tests[:1]!r}")


@functools.lru_cache(maxsize=4)
def mbpp_problems(split: str = "test") -> tuple[Problem, ...]:
    """MBPP ("full") problems in the usual format: description plus the first test as an example."""
    _check_split("mbpp", split)
    problems = []
    for row in load_hub_rows(MBPP_REPO, "full", split):
        tests = [str(t) for t in row["test_list"]]
        entry = mbpp_entry_point(tests, str(row["code"]))
        problems.append(
            Problem(
                id=str(row["task_id"]),
                dataset="mbpp",
                entry_point=entry,
                prompt=f"{str(row['text']).strip()} Your code should pass this test:\n"
                f"{tests[0]}\n{ANSWER_INSTRUCTION}",
                tests="\n".join(tests) + "\n",
                reference=str(row["code"]).replace("\r\n", "\n"),
                prelude=str(row.get("test_setup_code") or ""),
                check="pass",  # MBPP's asserts run at module level and call the function by name
                names=(entry,),
            )
        )
    return tuple(problems)
