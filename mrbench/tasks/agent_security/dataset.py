"""Building the agent-security samples: per-dataset defaults, the clean/attacked mix of the
training cases, and the case behind each sample prompt.

A sample's columns: ``scenario`` (the case as JSON: an embedded :class:`~.scenarios.Scenario`
or an AgentDojo case), ``prefix`` (the gold turns already inside a single-turn prompt, JSON),
``goal`` (the user request), ``template`` (the goal's kind), ``style`` (the attack style or
``clean``) and ``attacked``. Its prompt's first message names the case under
:data:`~.scenarios.SCENARIO_KEY`, for the training rollout.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from mrbench.core.contracts import Message, Sample
from mrbench.tasks.agent_security.agentdojo_suites import AgentDojoCase, list_cases, split_cases
from mrbench.tasks.agent_security.episode import Limits
from mrbench.tasks.agent_security.external import DATASETS as EXTERNAL
from mrbench.tasks.agent_security.external import ExternalCase
from mrbench.tasks.agent_security.scenarios import SCENARIO_KEY, Scenario, generate, prompt_messages

T = TypeVar("T")
DATASETS = ("embedded", "agentdojo", *EXTERNAL)
"""``injecagent`` and ``asb`` are evaluation-only, read from the task's ``data_path`` (:mod:`.external`)."""


class DatasetDefaults(NamedTuple):
    """A dataset's default settings and episode caps."""

    max_turns: int
    max_completion_tokens: int  # per assistant turn
    max_chars_per_turn: int
    max_tool_chars: int
    n_eval: int  # embedded: about 100 clean cases, so one episode moves utility_clean by 1 point
    clean_share: float | None  # of the training cases; None = every case as listed


DEFAULTS = {
    "embedded": DatasetDefaults(4, 48, 2000, 1500, 400, 0.5),
    # The paper runs AgentDojo with ≤ 8 turns; its suites list each user task once clean and
    # once per (injection task, attack), so about 1 case in 20 is clean.
    "agentdojo": DatasetDefaults(8, 512, 8000, 8000, 100, None),
    # InjecAgent: one decision after the injected tool result (data stealing: two attacker calls);
    # ASB: the agent's few tools, then an answer. Both are evaluation sets only.
    "injecagent": DatasetDefaults(4, 512, 8000, 8000, 100, None),
    "asb": DatasetDefaults(6, 512, 8000, 8000, 100, None),
}


def dataset_limits(dataset: str, max_turns: int) -> Limits:
    """Episode limits: ``max_turns`` with the dataset's per-turn and tool-output caps."""
    d = DEFAULTS[dataset]
    return Limits(
        max_turns=max_turns, max_chars_per_turn=d.max_chars_per_turn, max_tool_chars=d.max_tool_chars
    )


def mix_clean_share(
    cases: Sequence[T], attacked: Sequence[bool], goals: Sequence[str], share: float | None, n: int, seed: int
) -> list[T]:
    """The first ``n`` of ``cases`` after dropping attacked ones down to a ``share`` of clean cases.

    ``attacked[i]`` and ``goals[i]`` (the user request) describe ``cases[i]``. Clean cases are
    all kept; an attacked case is kept while the attacked count stays within
    ``(1 - share) / share`` times the clean count so far. Each user goal's attacked variants are
    visited in a seeded random order, so every attack style keeps its share. The kept cases stay
    in the given order. ``share`` None keeps every case; 0 keeps attacked cases only, 1 clean
    ones only.

    >>> cases = [f"{g}-{s}" for g in "ab" for s in ("clean", "x", "y", "z")]
    >>> mix_clean_share(cases, [not c.endswith("clean") for c in cases], [c[0] for c in cases], 0.5, 10, 0)
    ['a-clean', 'a-z', 'b-clean', 'b-x']
    """
    if share is None:
        return list(cases[:n])
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"clean_share must be within [0, 1], got {share}")
    rng = random.Random(f"clean-share/{seed}")
    by_goal: dict[str, list[int]] = {}
    for i, goal in enumerate(goals):
        by_goal.setdefault(goal, []).append(i)
    kept: set[int] = set()
    n_clean = n_attacked = 0
    for indices in by_goal.values():
        hit = [i for i in indices if attacked[i]]
        rng.shuffle(hit)
        if share > 0:
            clean = [i for i in indices if not attacked[i]]
            kept.update(clean)
            n_clean += len(clean)
        for i in hit:
            if share == 0 or (n_attacked + 1) * share <= (1 - share) * n_clean:
                kept.add(i)
                n_attacked += 1
    return [case for i, case in enumerate(cases) if i in kept][:n]


def prompt_text(prompt: Sequence[Message]) -> str:
    """A prompt's roles and contents as one string (the key of the lookup by text)."""
    return json.dumps([[m.get("role"), m.get("content")] for m in prompt])


class SampleSet:
    """The train and eval samples of one task configuration (built on first use), and the case
    behind any of their prompts."""

    def __init__(
        self,
        *,
        dataset: str,
        single_turn: bool,
        limits: Limits,
        n_train: int,
        n_eval: int,
        seed: int,
        styles: list[str],
        suites: list[str],
        clean_share: float | None,
        data_path: str = "",
        prompt_style: str = "compact",
    ) -> None:
        self.dataset, self.single_turn, self.limits = dataset, single_turn, limits
        self.prompt_style = prompt_style
        self.data_path = data_path
        self.n_train, self.n_eval, self.seed = n_train, n_eval, seed
        self.styles, self.suites, self.clean_share = styles, suites, clean_share
        self._splits: tuple[list[Sample], list[Sample]] | None = None
        self._by_id: dict[str, str] = {}
        self._by_text: dict[str, list[str]] = {}

    def splits(self) -> tuple[list[Sample], list[Sample]]:
        """(train, eval) samples; deterministic for the settings, grouped apart by user goal."""
        if self._splits is None:
            if self.dataset in EXTERNAL:
                self._splits = ([], [self._external_sample(c) for c in self.external_cases()[: self.n_eval]])
            else:
                self._splits = self._embedded() if self.dataset == "embedded" else self._agentdojo()
        return self._splits

    def external_cases(self) -> list[ExternalCase]:
        """Every case of an external benchmark (``data_path``), in a seeded order: the first
        ``n_eval`` then mix the benchmark's kinds (agents, attack types) instead of taking one."""
        if self.dataset == "injecagent":
            from mrbench.tasks.agent_security.injecagent import injecagent_cases

            cases = injecagent_cases(self.data_path)
        else:
            from mrbench.tasks.agent_security.asb import asb_cases

            cases = asb_cases(self.data_path)
        random.Random(f"{self.dataset}/{self.seed}").shuffle(cases)
        return cases

    def _external_sample(self, case: ExternalCase) -> Sample:
        return self._sample(
            case.id, case.to_json(), case.initial_messages(), [], case.goal, case.style, case.goal
        )

    def scenario_for_prompt(self, prompt: Sequence[Message]) -> str:
        """The ``scenario`` JSON of a sample prompt (by its ``scenario_id`` key, else by its text)."""
        self.splits()
        for message in prompt:
            sid = message.get(SCENARIO_KEY) if isinstance(message, dict) else None
            if sid:
                if sid not in self._by_id:
                    raise ValueError(f"prompt names scenario {sid!r}, which this task did not build")
                return self._by_id[sid]
        matches = self._by_text.get(prompt_text(prompt), [])
        if len(set(matches)) != 1:
            raise ValueError(
                f"cannot tell which scenario this prompt belongs to ({len(set(matches))} match its text); "
                f"keep the {SCENARIO_KEY!r} key of the sample prompts' first message"
            )
        return matches[0]

    def _embedded(self) -> tuple[list[Sample], list[Sample]]:
        # Draw more cases until the clean/attacked mix has n_train of them (generate keeps its
        # earlier cases as n grows, so the mix is stable in n_train).
        n_drawn = self.n_train
        while True:
            drawn, evaluation = generate(n_drawn, self.n_eval, self.seed, self.styles)
            train = mix_clean_share(
                drawn,
                [sc.attacked for sc in drawn],
                [sc.goal_key for sc in drawn],
                self.clean_share,
                self.n_train,
                self.seed,
            )
            if len(train) >= self.n_train or len(drawn) < n_drawn or n_drawn > 64 * self.n_train:
                break
            n_drawn *= 2
        return [self._embedded_sample(s) for s in train], [self._embedded_sample(s) for s in evaluation]

    def _agentdojo(self) -> tuple[list[Sample], list[Sample]]:
        train_cases, eval_cases = split_cases(list_cases(self.suites, self.styles))
        rng = random.Random(f"agentdojo/{self.seed}")
        rng.shuffle(train_cases)
        rng.shuffle(eval_cases)
        train_cases = mix_clean_share(
            train_cases,
            [c.attack is not None for c in train_cases],
            [c.goal_key for c in train_cases],
            self.clean_share,
            self.n_train,
            self.seed,
        )
        return (
            [self._agentdojo_sample(c) for c in train_cases],
            [self._agentdojo_sample(c) for c in eval_cases[: self.n_eval]],
        )

    def _embedded_sample(self, scenario: Scenario) -> Sample:
        prompt = prompt_messages(
            scenario, single_turn=self.single_turn, limits=self.limits, prompt_style=self.prompt_style
        )
        prefix = list(scenario.gold[: scenario.decision_turn]) if self.single_turn else []
        return self._sample(
            scenario.id,
            scenario.to_json(),
            prompt,
            prefix,
            scenario.goal_key,
            scenario.attack["style"] if scenario.attack else "clean",
            scenario.template,
        )

    def _agentdojo_sample(self, case: AgentDojoCase) -> Sample:
        return self._sample(
            case.id,
            case.to_json(),
            case.initial_messages(),
            [],
            case.goal_key,
            case.attack or "clean",
            case.goal_key,  # each AgentDojo user task is its own kind of goal
        )

    def _sample(
        self,
        sid: str,
        spec: str,
        prompt: list[Message],
        prefix: list[str],
        goal: str,
        style: str,
        template: str,
    ) -> Sample:
        prompt = [dict(m) for m in prompt]
        prompt[0][SCENARIO_KEY] = sid  # read by the training rollout (see rollout.py)
        self._by_id[sid] = spec
        self._by_text.setdefault(prompt_text(prompt), []).append(spec)
        columns = {
            "scenario": spec,
            "prefix": json.dumps(prefix),
            "goal": goal,
            "template": template,
            "style": style,
            "attacked": style != "clean",
        }
        return Sample(id=sid, prompt=prompt, columns=columns)
