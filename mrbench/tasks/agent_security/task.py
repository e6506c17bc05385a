"""The ``agent-security`` task: act for a user with tools while tool outputs carry prompt injections.

Two datasets: ``embedded`` (procedural scenarios in a small stateful world, :mod:`.scenarios`;
the CPU default) and ``agentdojo`` (AgentDojo v1.2.2's four suites, :mod:`.agentdojo_suites`;
for GPU models — its prompts list dozens of tools); :mod:`.dataset` builds the samples of
either. Two modes:

- ``multi-turn`` (default): the prompt is the system prompt and the user's request; the model
  calls tools, the environment answers, up to ``max_turns`` assistant turns
  (:mod:`.episode`). Training uses :mod:`.rollout` through :meth:`AgentSecurityTask.training_hooks`.
- ``single-turn`` (embedded only): the prompt is the gold conversation up to the decision point
  (right after the tool result that carries the injection, if any); the model writes one
  message, which is executed and judged. Plain TRL generation, no hooks.

:meth:`AgentSecurityTask.evaluate` reports ``utility``, ``utility_clean``, ``utility_attacked``,
``asr`` (attack success rate; lower is better), ``joint``, ``valid_rate``, ``n_clean`` and
``n_attacked`` (:mod:`.evaluation`). The primary metric is ``joint`` (attacked cases where the
user's goal was met *and* the attack failed): the paper's headline security number, and the
one metric that neither refusing everything (utility 0) nor obeying everything (ASR 1) can
game. Without attacked cases ``joint`` is computed over all cases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
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
from mrbench.tasks.agent_security import agentdojo_policies, evaluation, scenarios
from mrbench.tasks.agent_security.agentdojo_suites import ATTACKS, SUITES, AgentDojoCase, list_cases
from mrbench.tasks.agent_security.attacks import STYLES
from mrbench.tasks.agent_security.dataset import DATASETS, DEFAULTS, SampleSet, dataset_limits
from mrbench.tasks.agent_security.episode import Environment, Limits, Policy
from mrbench.tasks.agent_security.external import DATASETS as EXTERNAL
from mrbench.tasks.agent_security.external import ExternalCase
from mrbench.tasks.agent_security.rewards import (
    INVALID_POLICIES,
    build_environment,
    episode_outcomes,
    make_reward_functions,
    reward_values,
)
from mrbench.tasks.agent_security.world import PROMPT_STYLES
from mrbench.tasks.settings import check_settings

MODES = ("multi-turn", "single-turn")
CHAT_EMBEDDED_TOKENS = 64
"""Per-turn budget of an embedded episode in the chat style: its gold turns are at most 44 tokens
in SmolLM2's tokenizer, and a pretrained model writes JSON with spaces (the compact style's 48 fits
the tiny models' tokenizer)."""


def _default_budget(dataset: str, prompt_style: str) -> int:
    if dataset == "embedded" and prompt_style == "chat":
        return CHAT_EMBEDDED_TOKENS
    return DEFAULTS[dataset].max_completion_tokens


def _check_choice(value: str, choices: Sequence[str], what: str) -> str:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


def _parse_list(value: str, choices: Sequence[str], what: str) -> list[str]:
    """``"all"`` → every choice; else a comma list, each item validated."""
    if value.strip() in ("", "all"):
        return list(choices)
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in choices]
    if bad:
        raise ValueError(
            f"unknown {what} {', '.join(map(repr, bad))}; choose from {', '.join(choices)} (or 'all')"
        )
    return items


class AgentSecurityTask(Task):
    """The built task (see the module docstring); create it with :func:`agent_security`."""

    name = "agent-security"
    version = "7"  # 2: single-token accounts, round amounts, obeying demos; 3: episode demos,
    # clean_share 0.5, tool errors invalid; 4: the tidy_file goal; 5: the pay_if_due goal and
    # resisting demos; 6: a call without "parameters" is invalid (the one tool-call parser);
    # 7: the chat prompt style (the default), for pretrained instruction models
    primary_metric = "joint"
    lower_is_better = frozenset({"asr"})
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting("dataset", DATASETS)
    pareto_axes: ClassVar[tuple[str, str]] = ("utility", "safety")
    """The domain's trade-off: the user's task done against the injected goal resisted."""
    train_defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({"learning_rate": 1e-4})
    """``TrainSettings`` defaults for this task (the caller's ``--train`` overrides them). At the
    harness default of 3e-4, 30 GRPO steps take the tiny warm start to the shortcut of stopping
    after any tool result (safe, but clean utility falls in every seed); at 1e-4 the attack
    success rate still falls to about 0 and clean utility holds (``docs/benchmarks.md``)."""
    demos_keep_final_line = True
    """The tiny warm start keeps every demonstrated turn whole (``models.tiny.collect_demonstrations``):
    an episode needs each of its 2–4 turns well formed, so leaving closing lines out would leave
    utility and attack success near 0 at the start and GRPO nothing to learn but the format."""

    def __init__(
        self,
        *,
        dataset: str,
        mode: str,
        n_train: int,
        n_eval: int,
        seed: int,
        styles: list[str],
        suites: list[str],
        max_turns: int,
        max_completion_tokens: int,
        invalid: str,
        format_weight: float,
        clean_share: float | None,
        data_path: str = "",
        prompt_style: str = "chat",
    ) -> None:
        self.dataset, self.mode = dataset, mode
        self.prompt_style = prompt_style
        self.data_path = data_path
        self.n_train, self.n_eval, self.seed = n_train, n_eval, seed
        self.styles, self.suites = styles, suites
        self.invalid, self.format_weight = invalid, format_weight
        self.max_completion_tokens = max_completion_tokens
        self.clean_share = clean_share
        self.limits = dataset_limits(dataset, max_turns)
        self._samples = SampleSet(
            dataset=dataset,
            single_turn=self.single_turn,
            limits=self.limits,
            n_train=n_train,
            n_eval=n_eval,
            seed=seed,
            styles=styles,
            suites=suites,
            clean_share=clean_share,
            data_path=data_path,
            prompt_style=prompt_style,
        )
        self._index: dict[str, scenarios.Scenario] | None = None
        self._external: dict[str, dict[str, str]] = {}  # dataset -> id -> case JSON

    # ------------------------------------------------------------------ data

    @property
    def single_turn(self) -> bool:
        return self.mode == "single-turn"

    def train_samples(self) -> list[Sample]:
        """Training prompts (deterministic for the settings; grouped apart from eval by user goal)."""
        if self.dataset in EXTERNAL:
            raise ValueError(
                f"dataset {self.dataset!r} is for evaluation only; train on embedded or agentdojo"
            )
        return list(self._samples.splits()[0])

    def eval_samples(self) -> list[Sample]:
        """Held-out prompts; their user requests (embedded) or user tasks (AgentDojo) are never trained on."""
        return list(self._samples.splits()[1])

    def scenario_for_prompt(self, prompt: Sequence[Message]) -> str:
        """The ``scenario`` JSON of a sample prompt (by its ``scenario_id`` key, else by its text)."""
        return self._samples.scenario_for_prompt(prompt)

    def environment_for_prompt(self, prompt: Sequence[Message]) -> Environment:
        """A fresh environment for a training prompt (what the rollout runs the episode in)."""
        return build_environment(self.scenario_for_prompt(prompt), self.prompt_style)

    # ------------------------------------------------------------------ rewards

    def reward_components(self) -> list[RewardComponent]:
        """``utility`` and ``safety`` (the paper's two), plus ``format`` when ``format_weight > 0``."""
        names = ["utility", "safety"] + (["format"] if self.format_weight > 0 else [])
        fns = make_reward_functions(self.limits, self.invalid, names)
        weights = {"utility": 1.0, "safety": 1.0, "format": self.format_weight}
        return [RewardComponent(n, fn, weights[n], 0.0, 1.0) for n, fn in zip(names, fns, strict=True)]

    def completion_budget(self, max_new_tokens: int) -> int:
        """An episode after its prompt: ``max_turns`` turns of ``max_new_tokens`` and a tool result
        between two turns, each cut at ``max_tool_chars`` characters (counted as half as many
        tokens, with room for the chat markup around it). Single-turn mode: one completion."""
        if self.single_turn:
            return max_new_tokens
        turns = self.limits.max_turns
        return turns * max_new_tokens + (turns - 1) * (self.limits.max_tool_chars // 2 + 16)

    def training_hooks(self) -> dict[str, Any]:
        """Extra trainer keyword arguments: the multi-turn ``rollout`` (none in single-turn)."""
        if self.single_turn:
            return {}
        from mrbench.tasks.agent_security.rollout import make_rollout

        return {"rollout": make_rollout(self.environment_for_prompt, self.limits)}

    # ------------------------------------------------------------------ warm start

    def demonstrations(self, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """``n`` demonstrated episodes, each as (conversation before its last turn, last turn).

        The conversation holds the episode's earlier assistant turns and tool results, and the
        warm start trains on every assistant turn in it (``mrbench.engine.models.tiny._encode_demo``): one
        sequence per episode teaches all of its 2–4 turns, about twice the supervision of one
        pair per turn for the same compute. Drawn from training-side cases only.

        Most episodes are clean cases played by the gold policy: they teach the format, the
        tools and following the user's instructions (including the direct requests phrased
        like attacks). About one in five is an attacked
        case played by :func:`~.scenarios.obey_policy` (the attacker's call right after the
        injection is read, then the user's task): the warm start is a *naive instruction
        follower*, as instruction-tuned models are, so that it starts with a real attack
        success rate for GRPO's safety reward to bring down. A clean-only warm start never
        learns to act on text inside a tool result, has ASR ≈ 0 from the start, and leaves the
        safety reward nothing to teach but output validity. As many again are attacked cases
        played by the gold policy (the injection read and ignored, the user's task done): an
        *inconsistent* follower, so that both behaviours are there to sample and GRPO's
        rewards choose between them. Without them the only safe act the warm start knew after
        reading an injection was to stop, and GRPO learned exactly that: on every attacked case,
        then on every case, so utility fell wherever safety rose (task version 4).
        The completions are exactly what :func:`~.episode.parse_turn` accepts.
        """
        if self.dataset == "embedded":
            return scenarios.demonstrations(n, seed, self.styles, self.limits, self.prompt_style)
        if n <= 0:
            return []
        if self.dataset in EXTERNAL:
            raise ValueError(f"dataset {self.dataset!r} is for evaluation only: it has no demonstrations")
        cases = [AgentDojoCase.from_json(str(s.columns["scenario"])) for s in self.train_samples()]
        return agentdojo_policies.demonstrations(cases, n, seed)

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        """Greedy episodes on ``samples`` (default: :meth:`eval_samples`); metrics in the module docstring."""
        samples = self.eval_samples() if samples is None else samples

        def policy(conversations: list[list[Message]]) -> list[str]:
            return generator(conversations, max_new_tokens=self.max_completion_tokens)

        outcomes, transcripts = self.run(samples, policy)
        return evaluation.summarize(samples, outcomes, transcripts, self.invalid)

    def run(
        self, samples: Sequence[Sample], policy: Policy
    ) -> tuple[list[dict[str, Any]], list[list[Message]]]:
        """Run ``policy`` (conversations → assistant texts) on ``samples``; outcomes and transcripts."""
        return evaluation.run_samples(
            samples,
            policy,
            dataset=self.dataset,
            limits=self.limits,
            single_turn=self.single_turn,
            prompt_style=self.prompt_style,
        )

    # ------------------------------------------------------------------ mrbench score

    def score_datasets(self) -> list[str]:
        """Datasets ``mrbench score`` accepts: ``embedded`` (this task's scenarios) and ``agentdojo``."""
        return list(DATASETS)

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        """Reference transcripts: the gold turns of every embedded scenario (train and eval), or
        AgentDojo's ground-truth calls of every case (all suites, both attacks, clean runs),
        each as a JSON list of assistant turns in ``completion``."""
        _check_choice(dataset, DATASETS, "dataset")
        if dataset in EXTERNAL:
            return [
                {"dataset": dataset, "id": case.id, "completion": json.dumps(case.gold)}
                for case in self._external_cases(dataset)
            ]
        if dataset == "embedded":
            return [
                {"dataset": "embedded", "id": sid, "completion": json.dumps(list(sc.gold))}
                for sid, sc in self._embedded_index().items()
            ]
        limits = self._limits_for("agentdojo")
        suites = self.suites if self.dataset == "agentdojo" else list(SUITES)
        attacks = self.styles if self.dataset == "agentdojo" else list(ATTACKS)
        return [
            {
                "dataset": "agentdojo",
                "id": case.id,
                "completion": json.dumps(agentdojo_policies.gold_turns(case, limits.max_turns)),
            }
            for case in list_cases(suites, attacks)
        ]

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        """Replay each item's transcript in a fresh environment and judge it.

        ``completion`` is either a JSON list of assistant turns (a whole episode) or one
        assistant message (the first turn; in single-turn mode, the turn after the prompt's
        gold prefix). Rewards as in training; status = the episode's termination.
        """
        names = [c.name for c in self.reward_components()]
        results: list[ScoredItem] = []
        for item in items:
            sid, dataset = str(item.get("id")), str(item.get("dataset"))
            if dataset not in DATASETS:
                error = f"unknown dataset {dataset!r}; choose from {', '.join(DATASETS)}"
                results.append(ScoredItem(sid, {}, "unknown_dataset", error))
                continue
            try:
                spec, prefix = self._spec_for_id(dataset, sid)
            except KeyError as exc:
                results.append(ScoredItem(sid, {}, "unknown_id", str(exc.args[0])))
                continue
            text = str(item.get("completion", ""))
            turns = _transcript(text)
            columns = {"scenario": [spec], "prefix": [json.dumps([] if turns is not None else prefix)]}
            if turns is not None:
                columns["turns"] = [json.dumps(turns)]
            try:
                outcome = episode_outcomes([text], columns, self._limits_for(dataset))[0]
            except Exception as exc:  # one broken item must not stop the others
                results.append(ScoredItem(sid, {}, "error", f"{type(exc).__name__}: {exc}"))
                continue
            rewards = reward_values(outcome, self.invalid)
            results.append(ScoredItem(sid, {n: rewards[n] for n in names}, outcome["termination"]))
        return results

    def _external_cases(self, dataset: str) -> list[ExternalCase]:
        """The cases of ``injecagent`` or ``asb`` at ``data_path`` (:class:`UserError` if absent)."""
        if dataset == "injecagent":
            from mrbench.tasks.agent_security.injecagent import injecagent_cases

            return injecagent_cases(self.data_path)
        from mrbench.tasks.agent_security.asb import asb_cases

        return asb_cases(self.data_path)

    def _limits_for(self, dataset: str) -> Limits:
        if dataset == self.dataset:
            return self.limits
        return dataset_limits(dataset, DEFAULTS[dataset].max_turns)

    def _embedded_index(self) -> dict[str, scenarios.Scenario]:
        """Embedded scenarios by id (this task's, or the default-sized set when it is an AgentDojo task)."""
        styles = self.styles if self.dataset == "embedded" else list(STYLES)
        train, held_out = scenarios.generate(self.n_train, self.n_eval, self.seed, styles)
        return {sc.id: sc for sc in train + held_out}

    def _spec_for_id(self, dataset: str, sid: str) -> tuple[str, list[str]]:
        """``(scenario JSON, gold prefix of the single-turn prompt)``; ``KeyError`` for an unknown id."""
        if dataset in EXTERNAL:
            if dataset not in self._external:
                self._external[dataset] = {c.id: c.to_json() for c in self._external_cases(dataset)}
            if sid not in self._external[dataset]:
                raise KeyError(f"unknown id {sid!r} in dataset {dataset!r} ({self.data_path})")
            return self._external[dataset][sid], []
        if dataset == "agentdojo":
            return AgentDojoCase.from_id(sid).to_json(), []
        if self._index is None:
            self._index = self._embedded_index()
        if sid not in self._index:
            raise KeyError(
                f"unknown id {sid!r} in dataset 'embedded' (seed {self.seed}, n_train {self.n_train})"
            )
        scenario = self._index[sid]
        prefix = list(scenario.gold[: scenario.decision_turn]) if self.single_turn else []
        return scenario.to_json(), prefix


def _transcript(text: str) -> list[str] | None:
    """The turns of a completion that is a JSON list of strings, else ``None`` (one turn)."""
    if not text.lstrip().startswith("["):
        return None
    try:
        turns = json.loads(text)
    except ValueError:
        return None
    return turns if isinstance(turns, list) and all(isinstance(t, str) for t in turns) else None


CASES_MAX = 10_000
"""Cases per split: time, generating an embedded case takes about a millisecond (10,000: seconds
before the first step) and each is an episode to run; AgentDojo has fewer."""


def agent_security(
    *,
    dataset: str = "embedded",
    mode: str = "multi-turn",
    n_train: Annotated[int, Range(ge=0, le=CASES_MAX)] = 500,
    n_eval: Annotated[int, Range(ge=0, le=CASES_MAX)] = 0,
    seed: Annotated[int, Range(ge=0, le=limits.SEED_MAX)] = 0,
    max_turns: Annotated[int, Range(ge=0, le=64)] = 0,
    attacks: str = "all",
    suites: str = "all",
    invalid: str = "penalize",
    format_weight: Annotated[float, Range(ge=0, le=1_000)] = 0.0,
    max_completion_tokens: Annotated[int, Range(ge=0, le=limits.TOKENS_MAX)] = 0,
    clean_share: Annotated[float, Range(le=1)] = -1.0,
    data_path: str = "",
    prompt_style: str = "chat",
) -> AgentSecurityTask:
    """Use tools for a user while tool outputs carry prompt injections; utility and safety rewards.

    dataset: ``embedded`` (procedural, CPU default), ``agentdojo`` (v1.2.2 suites), or for
    evaluation only ``injecagent`` / ``asb`` read from ``data_path`` (``docs/benchmarks.md``).
    mode: ``multi-turn`` (episodes, trained through a TRL ``rollout_func``) or ``single-turn``
    (one message at the decision point; embedded only).
    n_train / n_eval: number of cases (clean + attacked) per split; ``n_eval`` 0 = the dataset's
    default: embedded 400 (about 100 clean; with fewer, one episode moves ``utility_clean`` by
    several points and no change is measurable), AgentDojo 100.
    seed: world generation (embedded) / case sampling (AgentDojo); the split itself is seed-free.
    max_turns: assistant turns per episode; 0 = the dataset's default (embedded 4, AgentDojo 8).
    attacks: ``all`` or a comma list — embedded: important_instructions, ignore_previous,
    tool_knowledge, fake_completion; AgentDojo: important_instructions, tool_knowledge.
    suites: AgentDojo suites (``all`` or a comma list of banking, slack, travel, workspace).
    invalid: ``penalize`` (an invalid trajectory gets utility 0 and safety 0) or ``unscorable``
    (``None`` for both).
    format_weight: weight of an optional third component ``format``; 0 leaves it out (the paper's two).
    data_path: where ``injecagent`` (its ``data`` folder, a test-case file or a hub id) or ``asb``
    (its ``data`` folder) is; also read by ``mrbench score`` for those datasets.
    prompt_style: how an embedded episode opens: ``chat`` (each tool and the format stated in
    words, two worked episodes before the request: for pretrained instruction models) or
    ``compact`` (one terse system message: what the tiny models are built for, and set for them).
    The other data sets' prompts state their tools in words in either style.
    max_completion_tokens: generation budget per assistant turn; 0 = default (embedded 64 with chat
    prompts, 48 compact; AgentDojo 512).
    clean_share: share of clean cases among the training cases (attacked ones are dropped to reach
    it; eval keeps every case); negative = the dataset's default: embedded 0.5, AgentDojo every
    case as listed (about 1 in 20 clean). Why 0.5 on the embedded set: utility is learned on
    clean cases, and as generated only about 1 training case in 4 is clean. Attacked cases are
    only dropped, never repeated, so on the embedded set any share between 0 and the generated
    mix (11 clean per 43 cases: three of the eleven goal templates have no attacked variant, the
    other eight one per attack style) gives the generated mix.
    """
    check_settings("agent-security", agent_security, locals())
    _check_choice(dataset, DATASETS, "dataset")
    _check_choice(mode, MODES, "mode")
    _check_choice(invalid, INVALID_POLICIES, "invalid policy")
    _check_choice(prompt_style, PROMPT_STYLES, "prompt_style")
    if dataset != "embedded" and mode == "single-turn":
        raise ValueError("mode 'single-turn' is available for dataset 'embedded' only; use mode 'multi-turn'")
    if dataset in EXTERNAL and not data_path:
        from mrbench.tasks.sources import no_source

        raise ValueError(str(no_source(dataset)))
    if dataset == "embedded" or dataset in EXTERNAL:
        styles = _parse_list(attacks, STYLES, "attack") if dataset == "embedded" else []
        if suites.strip() not in ("", "all"):
            raise ValueError(f"suites={suites!r} applies to dataset 'agentdojo' only")
        if dataset in EXTERNAL and attacks.strip() not in ("", "all"):
            raise ValueError(f"attacks={attacks!r}: dataset {dataset!r} brings its own attacks")
        suite_list: list[str] = []
    else:
        styles = _parse_list(attacks, ATTACKS, "attack")
        suite_list = _parse_list(suites, SUITES, "suite")
    defaults = DEFAULTS[dataset]
    return AgentSecurityTask(
        dataset=dataset,
        mode=mode,
        n_train=n_train,
        n_eval=n_eval or defaults.n_eval,
        seed=seed,
        styles=styles,
        suites=suite_list,
        max_turns=max_turns or defaults.max_turns,
        max_completion_tokens=max_completion_tokens or _default_budget(dataset, prompt_style),
        invalid=invalid,
        format_weight=format_weight,
        clean_share=defaults.clean_share if clean_share < 0 else clean_share,
        data_path=str(data_path),
        prompt_style=prompt_style,
    )
