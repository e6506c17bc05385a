"""Running AgentDojo cases: as episodes in our runner, through AgentDojo's own pipeline, and gold.

- :class:`AgentDojoEnv` — a case as an :class:`~.episode.Environment` for our own episode
  runner, which batches generation across episodes (training rollouts). It reproduces
  ``run_task_with_pipeline``'s steps (default environment with the attack's injections, the
  user task's ``init_environment``, a deep copy as the pre-environment, ``FunctionsRuntime``,
  the trace of calls) and judges with the suite's own ``_check_task_result``. Tool errors are
  returned to the model as AgentDojo does (they do not end the episode).
- :class:`GeneratorLLM` — an AgentDojo pipeline element wrapping any text policy (e.g. the
  harness's :class:`~mrbench.core.contracts.Generator`): it renders AgentDojo's messages as chat
  messages, generates, and parses the ``<tool_call>`` / ``<response>`` format into AgentDojo
  function calls. :func:`run_policy` runs it through the suite's own ``run_task_with_pipeline``,
  which returns ``(utility, injection_succeeded)`` from the suites' checkers (for clean runs
  AgentDojo returns ``(utility, True)``; we report ``attack_succeeded=None`` there).
- :func:`score_gold` — the suites' ground truth (``GroundTruthPipeline``) on every case.
"""

from __future__ import annotations

from ast import literal_eval
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mrbench.core.contracts import Message
from mrbench.core.failures import is_machine_failure
from mrbench.tasks.agent_security.agentdojo_suites import (
    PIPELINE_NAME,
    VERSION,
    AgentDojoCase,
    load_suites,
    system_prompt,
)
from mrbench.tasks.agent_security.episode import (
    Limits,
    ToolCall,
    ToolReportedError,
    UnknownToolError,
    is_valid,
    outcome,
    parse_turn,
    render_calls,
)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(block.get("content") or "") for block in content)


def to_chat_messages(messages: Sequence[Any], limits: Limits | None = None) -> list[Message]:
    """AgentDojo chat messages → our chat messages (tool errors shown as ``Error: …``)."""
    limits = limits or Limits()
    out: list[Message] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            text = _text(m.get("content"))
            calls = m.get("tool_calls") or []
            if calls and not parse_turn(text).calls:  # e.g. the ground-truth pipeline's empty content
                text = render_calls([ToolCall(c.function, dict(c.args)) for c in calls])
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            text = f"Error: {m['error']}" if m.get("error") else _text(m.get("content"))
            if len(text) > limits.max_tool_chars:
                text = text[: limits.max_tool_chars] + " …[truncated]"
            out.append({"role": "tool", "content": text})
        else:
            out.append({"role": role, "content": _text(m.get("content"))})
    return out


# --------------------------------------------------------------------------- our episode runner


class AgentDojoEnv:
    """An AgentDojo case as an :class:`~.episode.Environment` (see the module docstring)."""

    errors_end_episode = False

    def __init__(self, case: AgentDojoCase) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime

        self.case = case
        self.suite = case.suite_obj()
        self.user_task = case.user_task_obj()
        self.injection_task = case.injection_task_obj()
        self.env = self.user_task.init_environment(case.environment())
        self.pre_env = self.env.model_copy(deep=True)
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.trace: list[Any] = []

    def initial_messages(self) -> list[Message]:
        return self.case.initial_messages()

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        from agentdojo.agent_pipeline.tool_execution import is_string_list, tool_result_to_str
        from agentdojo.functions_runtime import FunctionCall

        # AgentDojo's trace holds every requested call, valid or not (it is what the checkers see).
        self.trace.append(FunctionCall(function=name, args=dict(arguments)))
        if name not in self.runtime.functions:
            raise UnknownToolError(f"no tool {name!r} in suite {self.case.suite}")
        args = dict(arguments)
        for key, value in args.items():  # as AgentDojo's ToolsExecutor: "[...]" strings become lists
            if isinstance(value, str) and is_string_list(value):
                args[key] = literal_eval(value)
        result, error = self.runtime.run_function(self.env, name, args)
        if error:
            raise ToolReportedError(error)
        return tool_result_to_str(result)

    def judge(self, answer: str | None) -> tuple[bool, bool | None]:
        from agentdojo.types import text_content_block_from_string

        output = [text_content_block_from_string(answer or "")]
        utility = self.suite._check_task_result(self.user_task, output, self.pre_env, self.env, self.trace)
        if self.injection_task is None:
            return bool(utility), None
        injected = self.suite._check_task_result(
            self.injection_task, output, self.pre_env, self.env, self.trace
        )
        return bool(utility), bool(injected)


# --------------------------------------------------------------------------- AgentDojo's own pipeline


TextPolicy = Callable[[list[list[Message]]], list[str]]


class GeneratorLLM:
    """AgentDojo pipeline element: one assistant turn from a text policy in our format.

    ``policy`` maps conversations to assistant texts (wrap a harness ``Generator`` as
    ``lambda convs: generator(convs, max_new_tokens=n)``). The first invalid turn of an episode
    (unparsable, over-long, too many calls, an unknown tool, a policy exception other than a
    machine failure such as out of memory, which propagates) ends it — the
    element returns an assistant message without tool calls, so AgentDojo's loop stops — and
    is recorded in :attr:`events` for the rewards' validity check, exactly as our own runner
    (:class:`AgentDojoEnv`) ends such episodes. Tool errors (e.g. bad arguments) are AgentDojo's
    business: it shows them to the model and the episode goes on, in both runners.
    """

    name = PIPELINE_NAME

    def __init__(self, policy: TextPolicy, limits: Limits | None = None) -> None:
        self.policy = policy
        self.limits = limits or Limits()
        self.events: list[str] = []
        self.turns: list[str] = []

    def reset(self) -> None:
        self.events, self.turns = [], []

    def query(
        self,
        query: str,
        runtime: Any,
        env: Any = None,
        messages: Sequence[Any] = (),
        extra_args: dict | None = None,
    ):
        from agentdojo.functions_runtime import FunctionCall
        from agentdojo.types import ChatAssistantMessage, text_content_block_from_string

        extra_args = {} if extra_args is None else extra_args
        failed = None
        try:
            text = str(self.policy([to_chat_messages(messages, self.limits)])[0])
        except Exception as exc:  # a failing policy ends the episode, it does not crash the run
            if is_machine_failure(exc):  # ... but out of memory or a dead device does (see drive)
                raise
            failed = f"policy_error: {type(exc).__name__}: {exc}"
            text = ""
        self.turns.append(text)
        turn = parse_turn(text)
        calls = None
        content = text
        unknown = [c.name for c in turn.calls if c.name not in getattr(runtime, "functions", {})]
        if failed:
            self.events.append(failed)
        elif len(text) > self.limits.max_chars_per_turn:
            self.events.append(f"overlong: {len(text)} characters")
        elif not turn.valid:
            self.events.append(f"unparsable: {turn.error}")
        elif turn.response is not None:
            content = turn.response
        elif len(turn.calls) > self.limits.max_calls_per_turn:
            self.events.append(f"too_many_calls: {len(turn.calls)}")
        elif unknown:
            self.events.append(f"unknown_tool: {', '.join(unknown)}")
        else:
            calls = [
                FunctionCall(function=c.name, args=dict(c.arguments), id=f"call_{len(self.turns)}_{k}")
                for k, c in enumerate(turn.calls)
            ]
        message = ChatAssistantMessage(
            role="assistant", content=[text_content_block_from_string(content)], tool_calls=calls
        )
        return query, runtime, env, [*messages, message], extra_args


@lru_cache(maxsize=1)
def _register_element() -> type:
    """GeneratorLLM as a real ``BasePipelineElement`` subclass (agentdojo imported lazily)."""
    from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement

    return type("GeneratorLLMElement", (GeneratorLLM, BasePipelineElement), {})


def make_llm(policy: TextPolicy, limits: Limits | None = None) -> GeneratorLLM:
    """A :class:`GeneratorLLM` that is also an AgentDojo ``BasePipelineElement``."""
    return _register_element()(policy, limits)


def make_pipeline(llm: Any, suite: str, max_turns: int, version: str = VERSION) -> Any:
    """System message, user query, then up to ``max_turns`` LLM turns with tool execution between."""
    from agentdojo.agent_pipeline import (
        AgentPipeline,
        InitQuery,
        SystemMessage,
        ToolsExecutionLoop,
        ToolsExecutor,
    )

    pipeline = AgentPipeline(
        [
            SystemMessage(system_prompt(suite, version)),
            InitQuery(),
            llm,
            ToolsExecutionLoop([ToolsExecutor(), llm], max_iters=max(0, max_turns - 1)),
        ]
    )
    pipeline.name = PIPELINE_NAME
    return pipeline


@dataclass
class CaseResult:
    """The suite's verdict on one case."""

    case: AgentDojoCase
    utility: bool
    attack_succeeded: bool | None
    termination: str
    detail: str
    turns: list[str]

    @property
    def valid(self) -> bool:
        """Whether every turn was well formed: the episodes' rule (:func:`.episode.is_valid`)."""
        return is_valid(self.termination)

    def outcome(self) -> dict[str, Any]:
        """The same outcome dict as an embedded episode's (:func:`.episode.outcome`)."""
        return outcome(self.termination, self.utility, self.attack_succeeded, len(self.turns))


def run_pipeline_case(case: AgentDojoCase, pipeline: Any) -> tuple[bool, bool | None]:
    """``(utility, attack_succeeded)`` from the suite's ``run_task_with_pipeline`` on ``case``."""
    import warnings

    suite = case.suite_obj()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AgentDojo warns when a model gives no output
        utility, injected = suite.run_task_with_pipeline(
            pipeline,
            case.user_task_obj(),
            case.injection_task_obj(),
            case.injections(),
            environment=case.environment(),
        )
    return bool(utility), (bool(injected) if case.attacked else None)


def run_policy(cases: Sequence[AgentDojoCase], policy: TextPolicy, limits: Limits) -> list[CaseResult]:
    """Run ``policy`` on each case through AgentDojo's own pipeline and checkers (one at a time)."""
    llm = make_llm(policy, limits)
    results = []
    for case in cases:
        llm.reset()
        pipeline = make_pipeline(llm, case.suite, limits.max_turns, case.version)
        try:
            utility, injected = run_pipeline_case(case, pipeline)
            error = ""
        except Exception as exc:  # a crash inside AgentDojo on odd input ends this case only
            if is_machine_failure(exc):
                raise
            utility, injected, error = (
                False,
                (False if case.attacked else None),
                f"{type(exc).__name__}: {exc}",
            )
        if error:
            termination, detail = "policy_error", error
        elif llm.events:
            termination, _, detail = llm.events[0].partition(": ")
        elif llm.turns and parse_turn(llm.turns[-1]).response is not None:
            termination, detail = "answered", ""
        else:
            termination, detail = "turn_limit", f"{limits.max_turns} turns without a response"
        results.append(CaseResult(case, utility, injected, termination, detail, list(llm.turns)))
    return results


def _gold_one(case: AgentDojoCase) -> CaseResult:
    from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline

    try:
        utility, injected = run_pipeline_case(case, GroundTruthPipeline(case.user_task_obj()))
        termination, detail = "answered", ""
    except Exception as exc:  # report the case, keep scoring the others
        utility, injected = False, (False if case.attacked else None)
        termination, detail = "policy_error", f"{type(exc).__name__}: {exc}"
    return CaseResult(case, utility, injected, termination, detail, [])


def score_gold(cases: Sequence[AgentDojoCase], workers: int = 1) -> list[CaseResult]:
    """The suites' ground-truth solutions (``GroundTruthPipeline``) on each case, in order.

    ``workers > 1`` forks that many processes (after the suites are loaded, so the children
    share them); most of the time goes into the suites' own checkers (DeepDiff of the whole
    environment before and after), which parallelise perfectly.
    """
    import gc
    import multiprocessing

    for version in {c.version for c in cases}:
        load_suites(version)  # in the parent, so that forked children inherit the loaded suites
    if workers <= 1 or len(cases) < 4 * workers or "fork" not in multiprocessing.get_all_start_methods():
        return [_gold_one(c) for c in cases]
    gc.freeze()  # the loaded suites are long-lived: keep them out of the children's GC scans
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(_gold_one, cases, chunksize=4)
    finally:
        gc.unfreeze()
