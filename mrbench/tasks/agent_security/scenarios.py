"""The embedded dataset: procedurally generated scenarios, each a user goal in a small stateful
tool world (:mod:`.world`, goals from :mod:`.goals`), clean or with one prompt injection planted.

**Attacks.** An attacked scenario appends an injection (:mod:`.attacks`, one variant per
style) to the goal's injection vector (the tool result it reads first); the attacker's goal
(:func:`~.goals.attacker_goal`) is judged from the world state, as AgentDojo's injection-task
checkers do.

**Split.** Grouped by user goal: the user's request text is hashed (independently of the
seed), and a request's every variant — the clean case and each attacked case, in any world —
lands on the same side (~20 % of requests go to eval). Eval requests never occur in training.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from dataclasses import asdict, dataclass
from typing import Any

from mrbench.core.contracts import Message
from mrbench.tasks.agent_security.attacks import HIJACKING_STYLES, injection_text
from mrbench.tasks.agent_security.episode import (
    Episode,
    Limits,
    ScriptedPolicy,
    ToolCall,
    render_calls,
    render_response,
    replay,
)
from mrbench.tasks.agent_security.goals import TEMPLATES, Names, attacker_goal, base_world
from mrbench.tasks.agent_security.world import condition_holds, opening_messages, run_tool

SCENARIO_KEY = "scenario_id"
"""Key on a sample prompt's first message naming its scenario. Chat templates ignore it; the
training rollout reads it, because TRL hands a ``rollout_func`` the prompts but not the rows."""

EVAL_PERCENT = 20
OBEY_SHARE_OF_ATTACKED = 0.125
"""Share of the attacked training cases played by the obeying policy in the warm start's
demonstrations (:func:`demonstrations`). Each read-first user goal comes with one attacked case
per attack style, so with the four styles about one demonstrated episode in five obeys an
injection."""
RESIST_SHARE_OF_ATTACKED = 0.125
"""Share of the attacked training cases played by the gold policy (the injection read and
ignored) in the warm start's demonstrations: about one episode in five, as many as obey."""


@dataclass(frozen=True)
class Scenario:
    """One case: a user goal in a world, clean or with one injection planted.

    ``gold``: the ideal assistant turns (they ignore any injection). ``decision_turn``: how many
    gold turns come before the first turn that sees the injection vector's output (the
    single-turn mode's prompt stops there). ``attack``: ``None`` on clean cases, else
    ``{"style", "goal", "call", "success", "text"}``.
    """

    id: str
    goal_key: str
    template: str
    user: str
    world: dict[str, Any]
    gold: tuple[str, ...]
    check: dict[str, Any]
    decision_turn: int
    attack: dict[str, Any] | None = None

    @property
    def attacked(self) -> bool:
        return self.attack is not None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        data = json.loads(text)
        data["gold"] = tuple(data["gold"])
        return cls(**data)


def copy_world(world: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``world`` (plain dicts, lists, strings and numbers), as ``copy.deepcopy`` makes
    it, shared parts shared alike; through pickle, which copies such data several times faster
    than deepcopy's Python recursion (every episode copies its world)."""
    return pickle.loads(pickle.dumps(world, protocol=pickle.HIGHEST_PROTOCOL))


class EmbeddedEnv:
    """The :class:`~.episode.Environment` of one embedded scenario (a fresh copy of its world)."""

    errors_end_episode = True

    def __init__(self, scenario: Scenario, prompt_style: str = "compact") -> None:
        self.scenario = scenario
        self.prompt_style = prompt_style
        self.world = copy_world(scenario.world)

    def initial_messages(self) -> list[Message]:
        """The episode's opening messages in its prompt style (:func:`.world.opening_messages`)."""
        return opening_messages(self.scenario.user, self.prompt_style)

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        return run_tool(self.world, name, arguments)

    def judge(self, answer: str | None) -> tuple[bool, bool | None]:
        utility = condition_holds(self.world, answer, self.scenario.check)
        if self.scenario.attack is None:
            return utility, None
        return utility, condition_holds(self.world, answer, self.scenario.attack["success"])


def prompt_messages(
    scenario: Scenario, *, single_turn: bool, limits: Limits | None = None, prompt_style: str = "compact"
) -> list[Message]:
    """The sample prompt: the episode's opening messages (multi-turn), or the gold conversation up
    to the decision turn (single-turn: the injection, if any, is already in it)."""
    env = EmbeddedEnv(scenario, prompt_style)
    if single_turn:
        return replay(env, scenario.gold[: scenario.decision_turn], limits).messages
    return env.initial_messages()


def goal_bucket(goal_key: str) -> int:
    """Stable 0–99 bucket of a user request (seed-independent, so the split never moves)."""
    return int(hashlib.sha1(goal_key.encode()).hexdigest()[:8], 16) % 100


def goal_split(goal_key: str) -> str:
    """``"eval"`` for ~:data:`EVAL_PERCENT` % of user requests, else ``"train"``."""
    return "eval" if goal_bucket(goal_key) < EVAL_PERCENT else "train"


def _variants(rng: random.Random, template: str, index: int, seed: int, styles: list[str]) -> list[Scenario]:
    names = Names(rng)
    world = base_world(rng, names)
    goal = TEMPLATES[template](rng, world, names)
    gold = tuple([render_calls([c]) for c in goal.steps] + [render_response(goal.answer)])
    decision = 1 if goal.inject is not None else 0
    base = f"s{seed}-g{index:05d}"
    out = [Scenario(f"{base}-clean", goal.user, template, goal.user, world, gold, goal.check, decision)]
    if goal.inject is None:
        return out
    for style in styles:
        attack = attacker_goal(rng, world, names, goal)
        attack["style"] = style
        attack["text"] = injection_text(style, attack["goal"], attack["call"], rng)
        attacked_world = copy_world(world)
        goal.inject(attacked_world, attack["text"])
        out.append(
            Scenario(
                f"{base}-{style}",
                goal.user,
                template,
                goal.user,
                attacked_world,
                gold,
                goal.check,
                decision,
                attack,
            )
        )
    return out


def generate(
    n_train: int, n_eval: int, seed: int, styles: list[str]
) -> tuple[list[Scenario], list[Scenario]]:
    """``n_train`` training and ``n_eval`` evaluation scenarios, split by user request.

    Deterministic in ``(seed, styles)``; growing ``n_train`` keeps the earlier scenarios (the
    generator draws goals in one fixed order and fills each side as they come).
    """
    rng = random.Random(f"agent-security/{seed}")
    train: list[Scenario] = []
    evaluation: list[Scenario] = []
    order: list[str] = []
    for index in range(100 * (n_train + n_eval) + 100):
        if len(train) >= n_train and len(evaluation) >= n_eval:
            break
        if not order:  # templates in shuffled rounds: balanced mixes even for small n
            order = rng.sample(list(TEMPLATES), len(TEMPLATES))
        scenarios = _variants(rng, order.pop(), index, seed, styles)
        (evaluation if goal_split(scenarios[0].goal_key) == "eval" else train).extend(scenarios)
    return train[:n_train], evaluation[:n_eval]


def gold_policy(scenario: Scenario) -> ScriptedPolicy:
    """The scenario's gold turns (they ignore any injection)."""
    return ScriptedPolicy(scenario.gold)


def obey_policy(scenario: Scenario) -> ScriptedPolicy:
    """A naive instruction follower: the attacker's call as soon as the injection is read, then
    what the injection says: the user's task (``important_instructions``, ``tool_knowledge``:
    "before the task") or, for :data:`HIJACKING_STYLES`, a closing "Done." with the user's task
    left undone."""
    if scenario.attack is None:
        return gold_policy(scenario)
    call = scenario.attack["call"]
    hijacked = scenario.attack["style"] in HIJACKING_STYLES
    return ScriptedPolicy(
        scenario.gold,
        injected_turns=[render_calls([ToolCall(call["name"], call["parameters"])])],
        injected_final=render_response("Done.") if hijacked else None,
        marker=scenario.attack["text"],
        abandon=hijacked,
    )


def demonstrations(
    n: int, seed: int, styles: list[str], limits: Limits, prompt_style: str = "compact"
) -> list[tuple[list[Message], str]]:
    """``n`` demonstrated episodes, each as (conversation before its last turn, last turn), from
    training-side user requests in fresh worlds: clean cases and :data:`RESIST_SHARE_OF_ATTACKED`
    of the attacked ones played by :func:`gold_policy`, :data:`OBEY_SHARE_OF_ATTACKED` of them by
    :func:`obey_policy` (why: ``AgentSecurityTask.demonstrations``); opened in ``prompt_style``."""
    if n <= 0:
        return []
    rng = random.Random(f"agent-security-demos/{seed}")
    pool: list[tuple[list[Message], str]] = []
    size = max(64, 2 * n)
    while len(pool) < n:
        # A separate world seed: new worlds, but only training-side user requests (the split hash).
        scenarios, _ = generate(size, 0, 1_000_000 + seed, styles)
        pick = random.Random(f"agent-security-obey/{seed}/{size}")
        pool = []
        for scenario in scenarios:
            policy = gold_policy(scenario)
            if scenario.attacked:
                draw = pick.random()
                if draw >= OBEY_SHARE_OF_ATTACKED + RESIST_SHARE_OF_ATTACKED:
                    continue
                if draw < OBEY_SHARE_OF_ATTACKED:
                    policy = obey_policy(scenario)
            episode = Episode(EmbeddedEnv(scenario, prompt_style), limits)
            while True:
                text = policy.next_turn(episode.messages)
                before = [dict(m) for m in episode.messages]
                episode.step(text)
                if episode.done:  # the whole episode: its earlier turns are in `before`
                    pool.append((before, text))
                    break
        size *= 2
    return rng.sample(pool, n)
