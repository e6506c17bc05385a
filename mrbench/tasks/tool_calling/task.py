"""The ``tool-calling`` task: factory, Task object and evaluation through lm-eval."""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
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
from mrbench.core.registry import Range
from mrbench.tasks.settings import check_settings
from mrbench.tasks.tool_calling import rewards
from mrbench.tasks.tool_calling.bfcl import CATEGORY_FILES
from mrbench.tasks.tool_calling.data import make_demonstrations, make_samples
from mrbench.tasks.tool_calling.prompts import PROMPT_STYLES
from mrbench.tasks.tool_calling.score import BFCL_PREFIX, SCORE_DATASETS, Scorer, bfcl_category
from mrbench.tasks.tool_calling.toolrl import SOURCES, load_items, load_split

DATASETS: tuple[str, ...] = ("embedded", "bfcl", *(f"{BFCL_PREFIX}{c}" for c in CATEGORY_FILES), *SOURCES)
"""Eval data: ``embedded``, ``bfcl`` (simple, multiple and parallel mixed), one BFCL category, or
``toolrl`` / ``apibank`` read from the ``data_path`` setting (:mod:`.toolrl`)."""
DEFAULT_MAX_COMPLETION_TOKENS = {
    name: 64 if name == "embedded" else 512 if name in SOURCES else 256 for name in DATASETS
}
"""Generation budgets. ``embedded``: the longest gold answer is 61 tokens (mean 39) with a
1024-token byte-level BPE trained on the demonstrations, so 64 never truncates a correct answer
(compact prompts; the chat prompts get :data:`CHAT_EMBEDDED_TOKENS`). BFCL: its calls have more
and longer arguments; raise it for models that think at length. ToolRL / API-Bank: their system
prompts ask for a reasoned ``<think>`` block first."""
CHAT_EMBEDDED_TOKENS = 128
"""The embedded budget with chat prompts: a gold answer with a one-line ``<think>`` as the worked
examples write it is at most 92 tokens (mean 56) in SmolLM2's tokenizer."""
EVAL_METRICS: tuple[str, ...] = (*rewards.COMPONENTS, "reward_total", "exact_match")
BFCL_METRIC = "bfcl_valid"
"""Also aggregated when the eval set holds BFCL samples: the mean verdict of BFCL's checker."""
LM_EVAL_TASK = "mrbench_tool_calling"


class ToolCallingTask(Task):
    """Tool calling with ``<tool_call>`` JSON, four reward components (see :mod:`.rewards`).

    Train prompts are the embedded procedural data, or ToolRL's train split for
    ``dataset="toolrl"``; eval prompts are the embedded held-out split, BFCL v4
    (``dataset="bfcl"`` or ``"bfcl-<category>"``, where BFCL's own checker decides
    ``exact_match``), ToolRL's test split or API-Bank. Data is generated or read on first use
    and cached.
    """

    name = "tool-calling"
    version = "2"  # 2: the chat prompt style (the default), for pretrained instruction models
    primary_metric = "exact_match"
    lower_is_better: frozenset[str] = frozenset()
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting("dataset", DATASETS)
    pareto_axes: ClassVar[tuple[str, str]] = ("values", "format")
    """The domain's trade-off: the arguments' values right against a well-formed call."""

    def __init__(
        self,
        *,
        n_train: int,
        n_eval: int,
        seed: int,
        dataset: str = "embedded",
        max_completion_tokens: int = 0,
        data_path: str = "",
        prompt_style: str = "chat",
    ) -> None:
        self.n_train = n_train
        self.prompt_style = prompt_style
        self.n_eval = n_eval
        self.seed = seed
        self.dataset = dataset
        chat_embedded = dataset == "embedded" and prompt_style == "chat"
        default = CHAT_EMBEDDED_TOKENS if chat_embedded else DEFAULT_MAX_COMPLETION_TOKENS[dataset]
        self.max_completion_tokens = max_completion_tokens or default
        self._train: list[Sample] | None = None
        self._eval: list[Sample] | None = None
        self.data_path = data_path
        self._scorer = Scorer(n_train, n_eval, seed, data_path)

    def __repr__(self) -> str:
        return (
            f"ToolCallingTask(n_train={self.n_train}, n_eval={self.n_eval}, seed={self.seed}, "
            f"dataset={self.dataset!r}, max_completion_tokens={self.max_completion_tokens}, "
            f"data_path={self.data_path!r}, prompt_style={self.prompt_style!r})"
        )

    def train_samples(self) -> list[Sample]:
        """``n_train`` training prompts (deterministic for the settings): procedurally generated,
        or for ``toolrl`` ``n_train`` items of ToolRL's train split drawn with ``seed`` (all of
        them when it holds fewer)."""
        if self._train is None:
            if self.dataset == "toolrl":
                items = load_split(self.data_path, "train")
                drawn = random.Random(self.seed).sample(items, min(self.n_train, len(items)))
                self._train = [item.sample() for item in drawn]
            else:
                self._train = make_samples(
                    self.n_train, split="train", seed=self.seed, style=self.prompt_style
                )
        return list(self._train)

    def eval_samples(self) -> list[Sample]:
        """``n_eval`` held-out prompts: embedded eval split, BFCL simple/multiple/parallel items,
        or the first ``n_eval`` items of one BFCL category (``bfcl-<category>``), of ToolRL's
        test split (``toolrl``) or of API-Bank (``apibank``).

        ``bfcl``: the first ``ceil(n_eval / 3)`` items of each category, interleaved, cut to
        ``n_eval`` (fewer if a category runs out: 400/200/200 items).
        """
        if self._eval is None:
            category = bfcl_category(self.dataset)
            if category is not None:
                from mrbench.tasks.tool_calling.bfcl import load_bfcl_items

                # The lm-eval bridge takes one user turn; 5 live_irrelevance items hold an earlier
                # exchange (user, assistant, user) and are left out of eval (`mrbench score` has them).
                items = [item for item in load_bfcl_items(category) if item.single_turn]
                self._eval = [item.sample(self.prompt_style) for item in items[: self.n_eval]]
            elif self.dataset == "toolrl":
                self._eval = [item.sample() for item in load_split(self.data_path, "test")[: self.n_eval]]
            elif self.dataset in SOURCES:
                self._eval = [
                    item.sample() for item in load_items(self.dataset, self.data_path)[: self.n_eval]
                ]
            elif self.dataset == "bfcl":
                from mrbench.tasks.tool_calling.bfcl import load_bfcl_samples

                categories = ("simple", "multiple", "parallel")
                # An even share per category, so the three kinds are all represented.
                per_category = math.ceil(self.n_eval / len(categories))
                by_category = [
                    load_bfcl_samples((c,), limit=per_category, style=self.prompt_style) for c in categories
                ]
                rounds = itertools.zip_longest(*by_category)
                interleaved = [s for group in rounds for s in group if s is not None]
                self._eval = interleaved[: self.n_eval]
            else:
                self._eval = make_samples(self.n_eval, split="eval", seed=self.seed, style=self.prompt_style)
        return list(self._eval)

    def reward_components(self) -> list[RewardComponent]:
        """format {0,1}, function_name [−0.5, 0.5], parameter [−1, 1], values [−1.5, 1.5]; weights 1."""
        return rewards.reward_components()

    def demonstrations(self, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """``n`` (prompt, gold completion) pairs whose requests lie on the train side of the split."""
        return make_demonstrations(n, seed=seed, style=self.prompt_style)

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        """Greedy generations through lm-eval, scored by :func:`.rewards.score_sample`.

        Metrics: ``exact_match`` (primary; on BFCL samples the verdict of BFCL's checker), the
        component means, ``reward_total``, ``exact_match/<kind>`` per item kind present
        (``single``, ``choose``, ``parallel``, ``no_call`` or ``bfcl_<category>``), and
        ``bfcl_valid`` when there are BFCL samples.
        """
        from mrbench.kit.lm_eval_bridge import run_generation_task

        samples = self.eval_samples() if samples is None else list(samples)
        run = run_generation_task(
            generator,
            samples,
            task_name=LM_EVAL_TASK,
            score_fn=rewards.score_sample,
            metric_names=_metric_names(samples),
            max_new_tokens=self.max_completion_tokens,
            version=self.version,
        )
        metrics = dict(run.metrics)
        per_kind: dict[str, list[float]] = defaultdict(list)
        records: list[dict[str, Any]] = []
        for sample, completion, scores in zip(samples, run.completions, run.scores, strict=True):
            kind = str(sample.columns.get("kind", "unknown"))
            per_kind[kind].append(scores["exact_match"])
            records.append(
                {
                    "id": sample.id,
                    "kind": kind,
                    "prompt": sample.prompt[-1]["content"],
                    "completion": completion,
                    "rewards": {name: scores[name] for name in rewards.COMPONENTS},
                    "reward_total": scores["reward_total"],
                    "exact_match": scores["exact_match"],
                    **({BFCL_METRIC: scores[BFCL_METRIC]} if rewards.BFCL_COLUMN in sample.columns else {}),
                }
            )
        for kind, values in sorted(per_kind.items()):
            finite = [v for v in values if math.isfinite(v)]
            metrics[f"exact_match/{kind}"] = sum(finite) / len(finite) if finite else math.nan
        return EvalResult(metrics=metrics, samples=records)

    def export_lm_eval(self, directory: str | Path, samples: list[Sample] | None = None) -> Path:
        """Write this task's eval set as an lm-eval task folder (for ``lm_eval --include_path``).

        Returns the YAML path; run e.g. ``lm_eval --model hf --model_args pretrained=PATH
        --include_path DIR --tasks mrbench_tool_calling --apply_chat_template --fewshot_as_multiturn``.
        """
        from mrbench.kit.lm_eval_bridge import export_lm_eval_task

        samples = self.eval_samples() if samples is None else list(samples)
        return export_lm_eval_task(
            samples,
            directory,
            task_name=LM_EVAL_TASK,
            score_fn="mrbench.tasks.tool_calling.rewards:score_sample",
            metric_names=_metric_names(samples),
            max_new_tokens=self.max_completion_tokens,
            version=self.version,
        )

    # -- mrbench score -------------------------------------------------------------------------
    def score_datasets(self) -> list[str]:
        """``embedded`` and ``bfcl-<category>`` for every BFCL category (see :mod:`.score`)."""
        return list(SCORE_DATASETS)

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        """The reference answer of every item of ``dataset`` (embedded: this task's train and eval items)."""
        return self._scorer.gold_items(dataset)

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        """The four components, ``exact_match`` and, on BFCL items, ``bfcl_valid`` (see :mod:`.score`)."""
        return self._scorer.score_items(items)


def _metric_names(samples: list[Sample]) -> tuple[str, ...]:
    """The metrics lm-eval aggregates: ``bfcl_valid`` too when some sample is a BFCL one."""
    has_bfcl = any(rewards.BFCL_COLUMN in s.columns for s in samples)
    return (*EVAL_METRICS, BFCL_METRIC) if has_bfcl else EVAL_METRICS


N_TRAIN_MAX = 8_000
"""The embedded generator's size: it draws about 11,000 distinct training requests for any seed
(ToolRL's train split, the other source of training items, is smaller)."""
N_EVAL_MAX = 2_000
"""The embedded generator's size: about 2,650 distinct held-out requests for any seed (beyond, it
cannot draw them); BFCL's and API-Bank's largest categories are smaller."""


def tool_calling(
    *,
    n_train: Annotated[int, Range(ge=1, le=N_TRAIN_MAX)] = 512,
    n_eval: Annotated[int, Range(ge=1, le=N_EVAL_MAX)] = 64,
    seed: Annotated[int, Range(ge=0, le=limits.SEED_MAX)] = 0,
    dataset: str = "embedded",
    max_completion_tokens: Annotated[int, Range(ge=0, le=limits.TOKENS_MAX)] = 0,
    data_path: str = "",
    prompt_style: str = "chat",
) -> ToolCallingTask:
    """Choose and call tools from a catalogue (<tool_call> JSON), four ToolRL-style reward components.

    Args:
        n_train: training prompts (procedural, embedded; ``toolrl``: at most this many items of
            ToolRL's train split, drawn with ``seed``).
        n_eval: evaluation prompts (held-out embedded split, or the first items of the dataset).
        seed: data seed (train and eval are disjoint for every seed).
        dataset: eval data, ``"embedded"``, ``"bfcl"`` (BFCL v4 simple/multiple/parallel from the
            installed ``bfcl-eval`` package), ``"bfcl-<category>"`` (one BFCL category, e.g.
            ``bfcl-parallel_multiple``, ``bfcl-live_simple``), ``"toolrl"`` or ``"apibank"``.
            Training stays embedded, except for ``"toolrl"``: ToolRL's train split trains and its
            test split evaluates.
        max_completion_tokens: generation budget; 0 = the dataset's default (embedded: 128 with chat
            prompts, 64 compact; 256 BFCL; 512 ToolRL / API-Bank).
        data_path: where ``toolrl`` or ``apibank`` is (a file or folder in ToolRL's format, or a hub
            id); see ``docs/benchmarks.md``. Also read by ``mrbench score`` for those datasets.
        prompt_style: ``"chat"`` (format stated in words, tools with the request, two worked
            examples as earlier turns: for pretrained instruction models) or ``"compact"`` (one
            terse system message: what the tiny models are built for, and set for them); see
            :mod:`.prompts`. ToolRL and API-Bank items keep their own prompts.
    """
    check_settings("tool-calling", tool_calling, locals())
    if dataset not in DATASETS:
        raise ValueError(f"unknown tool-calling dataset {dataset!r}; choose from {', '.join(DATASETS)}")
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt_style {prompt_style!r}; choose from {', '.join(PROMPT_STYLES)}")
    if dataset in SOURCES and not data_path:
        from mrbench.tasks.sources import no_source

        raise ValueError(str(no_source(dataset)))
    return ToolCallingTask(
        n_train=n_train,
        n_eval=n_eval,
        seed=seed,
        dataset=dataset,
        max_completion_tokens=max_completion_tokens,
        data_path=str(data_path),
        prompt_style=prompt_style,
    )
