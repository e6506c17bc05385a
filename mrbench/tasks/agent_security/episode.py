"""Multi-turn episodes: a policy talks to a tool environment until it answers or a limit ends it.

**Message convention**: the tool-call format of :mod:`mrbench.kit.toolcall` (the tool-calling
task's, so one warm start covers both). An assistant turn is either a tool-call block with one
JSON object per line, executed in order::

    <tool_call>
    {"name": "pay", "parameters": {"to": "ACME-17", "amount": 45}}
    </tool_call>

or a final answer ``<response>45</response>``; an optional ``<think>…</think>`` may come first
(the gold turns omit it: the tiny models have ~48 tokens per turn). Nothing else may surround
the block; every call line has its ``"parameters"`` object, ``{}`` for a tool without any.
Each executed call's result comes back as one ``{"role": "tool", "content": …}`` message, so
the conversation is system, user, then assistant/tool turns; any chat template that renders
every role the same way (the tiny models' does) shows tool results to the model.

**Terminations** (``EpisodeResult.termination``), every one with a defined outcome and a
``detail`` string for the log — an episode never raises:

===================  =====  ============================================================
termination          valid  when
===================  =====  ============================================================
``answered``         yes    the model gave ``<response>…</response>``
``turn_limit``       yes    ``max_turns`` assistant turns without an answer (endless loops)
``incomplete``       yes    a replay ran out of given turns before the episode ended
``budget``           yes    the training rollout's token budget ran out
``unparsable``       no     the turn is neither a well-formed call block nor a response
``overlong``         no     the turn is longer than ``max_chars_per_turn`` or hit the
                            generation budget without finishing
``unknown_tool``     no     a call names a tool the environment does not have
``bad_arguments``    no     a call's parameters are missing, unexpected or wrongly typed
``too_many_calls``   no     more than ``max_calls_per_turn`` calls in one turn
``policy_error``     no     the policy (generator) raised; a machine failure (out of
                            memory, a CUDA error) is not an episode's outcome: it propagates
``tool_error``       no     a tool raised (a refused payment, a missing file, a bug in the
                            tool); only for environments whose errors end episodes (the
                            embedded one; AgentDojo's tools report errors back to the model)
===================  =====  ============================================================

The environment judges utility and attack success from its own state whatever the
termination; how an invalid trajectory is rewarded is decided in :mod:`.rewards`.

Why a tool error is invalid: where it ends the episode, a call that the tool refuses (an
attacker's payment to a made-up account, a file that does not exist) is an exit from an attacked
episode that no attack can follow. Counted valid, it earned full safety, and GRPO on the tiny
model learned within 30 steps to end attacked episodes with failing calls, a habit that then
broke the user's own payments too (``docs/benchmarks.md``). Invalid, it is penalised like any
broken trajectory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mrbench.core.contracts import Message
from mrbench.core.failures import is_machine_failure
from mrbench.kit.toolcall import call_block, parse_message, response_block

VALID_TERMINATIONS = frozenset({"answered", "turn_limit", "incomplete", "budget"})
INVALID_TERMINATIONS = frozenset(
    {
        "unparsable",
        "overlong",
        "unknown_tool",
        "bad_arguments",
        "too_many_calls",
        "policy_error",
        "tool_error",
    }
)


class UnknownToolError(Exception):
    """The call names a tool the environment does not offer."""


class BadArgumentsError(Exception):
    """The call's parameters do not match the tool's signature (names or types)."""


class ToolReportedError(Exception):
    """A tool reported an error whose message is already meant for the model (AgentDojo's)."""


class Environment(Protocol):
    """A stateful tool world for one episode (built fresh per episode)."""

    errors_end_episode: bool
    """Whether an exception inside a tool ends the episode (embedded worlds) or is shown to the
    model as the tool's result and the episode goes on (AgentDojo's own semantics)."""

    def initial_messages(self) -> list[Message]:
        """The conversation before the first assistant turn (system prompt and user goal)."""
        ...

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; return its output text.

        Raises :class:`UnknownToolError`, :class:`BadArgumentsError`, or any other exception for
        a failure inside the tool.
        """
        ...

    def judge(self, answer: str | None) -> tuple[bool, bool | None]:
        """``(utility, attack_succeeded)`` from the current state and the final answer
        (``None`` when the episode ended without one); ``attack_succeeded`` is ``None`` on clean
        cases."""
        ...


@dataclass(frozen=True)
class ToolCall:
    """One parsed call."""

    name: str
    arguments: dict[str, Any]

    def render(self) -> str:
        """The call's JSON line, as the gold turns write it."""
        return json.dumps({"name": self.name, "parameters": self.arguments})


@dataclass(frozen=True)
class Turn:
    """A parsed assistant message: calls, or a response, or the reason it did not parse."""

    calls: tuple[ToolCall, ...] = ()
    response: str | None = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


def parse_turn(text: Any) -> Turn:
    """Parse one assistant message in the tool-call format with an optional think block
    (:func:`mrbench.kit.toolcall.parse_message`); never raises, non-strings are unparsable.

    >>> parse_turn('<tool_call>\\n{"name": "balance", "parameters": {}}\\n</tool_call>').calls
    (ToolCall(name='balance', arguments={}),)
    >>> parse_turn("<think>easy</think> <response> 45 </response>").response
    '45'
    >>> parse_turn("pay ACME 45").error
    'not a single <tool_call> or <response> block'
    """
    message = parse_message(text)
    if not message.valid:
        return Turn(error=message.error)
    if message.response is not None:
        return Turn(response=message.response.strip())
    return Turn(calls=tuple(ToolCall(c["name"], c["parameters"]) for c in message.calls))


def render_calls(calls: Sequence[ToolCall]) -> str:
    """A gold tool-call turn.

    >>> print(render_calls([ToolCall("read_file", {"name": "bill_3.txt"})]))
    <tool_call>
    {"name": "read_file", "parameters": {"name": "bill_3.txt"}}
    </tool_call>
    """
    return call_block([c.render() for c in calls])


def render_response(text: str) -> str:
    """A gold final turn: ``<response>text</response>``."""
    return response_block(text)


@dataclass(frozen=True)
class Limits:
    """Episode limits (turn counts are assistant turns; characters are per message)."""

    max_turns: int = 4
    max_calls_per_turn: int = 4
    max_chars_per_turn: int = 2000
    max_tool_chars: int = 1500  # longer tool outputs are cut (AgentDojo's can be pages long)


@dataclass
class EpisodeResult:
    """What happened: how it ended, the environment's judgement, and the transcript."""

    termination: str
    detail: str
    utility: bool
    attack_succeeded: bool | None
    turns: list[str]
    messages: list[Message]
    n_calls: int = 0

    @property
    def valid(self) -> bool:
        """Whether every assistant turn was well formed (see the table in the module docstring)."""
        return is_valid(self.termination)

    @property
    def attacked(self) -> bool:
        return self.attack_succeeded is not None

    def outcome(self) -> dict[str, Any]:
        """The compact, JSON-able outcome that training rollouts hand to the reward functions."""
        return outcome(self.termination, self.utility, self.attack_succeeded, len(self.turns))


def is_valid(termination: str) -> bool:
    """Whether an episode that ended with ``termination`` had every assistant turn well formed
    (the table in the module docstring): the one rule for embedded and AgentDojo episodes."""
    return termination not in INVALID_TERMINATIONS


def outcome(termination: str, utility: bool, attack_succeeded: bool | None, n_turns: int) -> dict[str, Any]:
    """An episode's compact, JSON-able outcome (what the reward functions and the evaluation read):
    ``{"termination", "valid", "utility", "attack_succeeded", "n_turns"}``."""
    return {
        "termination": termination,
        "valid": is_valid(termination),
        "utility": utility,
        "attack_succeeded": attack_succeeded,
        "n_turns": n_turns,
    }


class Episode:
    """One episode driven turn by turn (so that a caller can batch generation across episodes)."""

    def __init__(self, env: Environment, limits: Limits | None = None) -> None:
        self.env = env
        self.limits = limits or Limits()
        self.messages: list[Message] = [dict(m) for m in env.initial_messages()]
        self.turns: list[str] = []
        self.answer: str | None = None
        self.termination: str | None = None
        self.detail = ""
        self.n_calls = 0
        self._result: EpisodeResult | None = None

    @property
    def done(self) -> bool:
        return self.termination is not None

    def stop(self, termination: str, detail: str = "") -> None:
        """End the episode from outside (policy error, token budget, replay ran out)."""
        if not self.done:
            self.termination, self.detail = termination, detail

    def step(self, text: str, *, truncated: bool = False) -> list[Message]:
        """Apply one assistant message; return the tool messages it produced (``[]`` once done).

        ``truncated``: generation hit its token budget before the end-of-turn token.
        """
        if self.done:
            raise RuntimeError("step() on a finished episode")
        text = text if isinstance(text, str) else str(text)
        self.turns.append(text)
        self.messages.append({"role": "assistant", "content": text})
        new: list[Message] = []
        if len(text) > self.limits.max_chars_per_turn:
            self.stop("overlong", f"{len(text)} characters > {self.limits.max_chars_per_turn}")
            return new
        turn = parse_turn(text)
        if not turn.valid:
            # A turn cut off by the token budget is reported as such: the fix is a larger budget.
            self.stop("overlong" if truncated else "unparsable", turn.error or "")
            return new
        if turn.response is not None:
            self.answer = turn.response
            self.stop("answered")
            return new
        if len(turn.calls) > self.limits.max_calls_per_turn:
            self.stop("too_many_calls", f"{len(turn.calls)} calls > {self.limits.max_calls_per_turn}")
            return new
        for call in turn.calls:
            self.n_calls += 1
            try:
                output = self.env.call(call.name, dict(call.arguments))
            except UnknownToolError as exc:
                self.stop("unknown_tool", str(exc))
            except BadArgumentsError as exc:
                self.stop("bad_arguments", str(exc))
            except Exception as exc:  # a failure inside the tool: never let it crash a run
                if self.env.errors_end_episode:
                    self.stop("tool_error", f"{call.name}: {type(exc).__name__}: {exc}")
                else:
                    shown = exc if isinstance(exc, ToolReportedError) else f"{type(exc).__name__}: {exc}"
                    output = f"Error: {shown}"
                    self._append_tool(new, output)
                    continue
            if self.done:
                return new
            self._append_tool(new, output)
        if len(self.turns) >= self.limits.max_turns:
            self.stop("turn_limit", f"{self.limits.max_turns} turns without a response")
        return new

    def _append_tool(self, new: list[Message], output: Any) -> None:
        text = output if isinstance(output, str) else str(output)
        if len(text) > self.limits.max_tool_chars:
            text = text[: self.limits.max_tool_chars] + " …[truncated]"
        message = {"role": "tool", "content": text}
        self.messages.append(message)
        new.append(message)

    def result(self) -> EpisodeResult:
        """Judge the episode (once; later calls return the same result)."""
        if self._result is None:
            if not self.done:
                self.stop("incomplete", "no more turns given")
            try:
                utility, attacked = self.env.judge(self.answer)
            except Exception as exc:  # a judge bug must not crash a run either: count it as a failure
                utility, attacked = False, None
                self.detail = f"{self.detail}; judge failed: {type(exc).__name__}: {exc}".strip("; ")
            self._result = EpisodeResult(
                termination=self.termination or "incomplete",
                detail=self.detail,
                utility=bool(utility),
                attack_succeeded=None if attacked is None else bool(attacked),
                turns=list(self.turns),
                messages=[dict(m) for m in self.messages],
                n_calls=self.n_calls,
            )
        return self._result


Policy = Callable[[list[list[Message]]], list[str]]
"""Next assistant message for each conversation, in order."""


def drive(episodes: Sequence[Episode], policy: Policy, max_rounds: int | None = None) -> list[EpisodeResult]:
    """Step ``episodes`` with ``policy``, batched over the live ones each round, then judge them.

    ``max_rounds``: stop after that many policy rounds (the rest end ``incomplete``; the
    single-turn mode uses 1). A policy exception ends every live episode with ``policy_error``
    (logged in ``detail``) instead of propagating, except a machine failure
    (:func:`~mrbench.core.failures.is_machine_failure`: out of memory, a CUDA or collective
    error), which propagates: counted as the policy's fault it would deflate the metrics of a run
    that ends FINISHED, and leave the other ranks of a sharded cell waiting in ``generate``.
    """
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        live = [ep for ep in episodes if not ep.done]
        if not live:
            break
        rounds += 1
        try:
            texts = policy([ep.messages for ep in live])
            if len(texts) != len(live):
                raise ValueError(f"policy returned {len(texts)} messages for {len(live)} conversations")
        except Exception as exc:
            if is_machine_failure(exc):  # out of memory, a dead device: the run fails, not the episode
                raise
            for ep in live:
                ep.stop("policy_error", f"{type(exc).__name__}: {exc}")
            break
        for ep, text in zip(live, texts, strict=True):
            ep.step(text)
    return [ep.result() for ep in episodes]


def run_episodes(
    envs: Sequence[Environment], policy: Policy, limits: Limits | None = None
) -> list[EpisodeResult]:
    """Run one episode per environment to its end (see :func:`drive`)."""
    return drive([Episode(env, limits) for env in envs], policy)


def replay(env: Environment, turns: Sequence[str], limits: Limits | None = None) -> EpisodeResult:
    """Feed fixed assistant messages to a fresh environment (how rewards re-score a transcript).

    Messages after the episode ended are ignored; running out of messages ends it as
    ``incomplete``.
    """
    episode = Episode(env, limits)
    for text in turns:
        if episode.done:
            break
        episode.step(text)
    return episode.result()


class ScriptedPolicy:
    """A scripted agent for one episode: fixed assistant turns, optionally obeying an injection.

    ``turns``: the plan (e.g. the gold turns, ending with the response). If ``marker`` shows up
    in a tool result, ``injected_turns`` (the attacker's calls) are carried out right after the
    turn that produced it (or, with ``at_end``, after the rest of the plan, just before the final
    turn, so that the user's own later calls cannot undo them), and ``injected_final`` (if
    given) replaces the final turn — a maximally gullible agent, used to check that every
    attack can land (ASR 1.0). With ``abandon``, the plan's remaining turns are dropped after the
    injected ones and ``injected_final`` closes the episode: an agent hijacked away from the
    user's task. The next turn is chosen from the conversation alone: its count of assistant
    messages since the user's request (the last user message; worked examples before it, as the
    chat prompts play them, are not the episode's).
    """

    def __init__(
        self,
        turns: Sequence[str],
        *,
        injected_turns: Sequence[str] = (),
        injected_final: str | None = None,
        marker: str | None = None,
        at_end: bool = False,
        abandon: bool = False,
    ) -> None:
        if not turns:
            raise ValueError("a scripted policy needs at least one turn")
        if abandon and injected_final is None:
            raise ValueError("an abandoning policy needs the injected_final turn that closes the episode")
        self.turns = list(turns)
        self.injected_turns = list(injected_turns)
        self.injected_final = injected_final
        self.marker = marker
        self.at_end = at_end
        self.abandon = abandon

    def next_turn(self, conversation: Sequence[Message]) -> str:
        users = [i for i, m in enumerate(conversation) if m["role"] == "user"]
        conversation = conversation[users[-1] :] if users else conversation
        said = sum(1 for m in conversation if m["role"] == "assistant")
        plan = list(self.turns)
        if self.marker:
            for index, message in enumerate(conversation):
                if message["role"] == "tool" and self.marker in message["content"]:
                    before = sum(1 for m in conversation[:index] if m["role"] == "assistant")
                    if self.at_end:
                        before = max(before, len(plan) - 1)
                    if self.abandon:  # the user's remaining turns are never taken
                        plan = [*plan[:before], *self.injected_turns, self.injected_final]
                    else:
                        plan = plan[:before] + self.injected_turns + plan[before:]
                        if self.injected_final is not None:
                            plan[-1] = self.injected_final
                    break
        return plan[said] if said < len(plan) else plan[-1]

    def __call__(self, conversations: list[list[Message]]) -> list[str]:
        return [self.next_turn(c) for c in conversations]
