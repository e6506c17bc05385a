"""The paper's seven reward components for code, all in [0, 1], from one sandbox run per completion.

=================  =========================================================================
component          value
=================  =========================================================================
``format``         1 if the reply has a closed fenced python block defining the entry point
``syntax``         1 if the extracted code parses (``ast.parse``)
``compile``        1 if the parsed code compiles (catches e.g. ``return`` outside a function,
                   which parses)
``runtime``        1 if the program ran to completion or failed only on a test assertion
``accuracy``       1 if every test passed
``ast_similarity`` ``difflib`` ratio between the AST node-type sequences (pre-order, with a
                   closing marker per node so the sequence encodes the tree's shape) of the code
                   and of the reference solution; 0 if either does not parse
``efficiency``     ``clip(1 − w_gen / w_ref, 0, 1)`` when the tests passed, else 0; ``w`` is the
                   work the tests' calls executed in the program's own code (line events,
                   counted in the sandbox), ``w_ref`` the reference's (counted once per problem)
=================  =========================================================================

The code is the first fenced python block that defines the entry point (else the longest one);
without a closed block, the text after an opening fence (a truncated answer), else the whole
reply. Only code that compiles is run.

Why work and not time: the paper's efficiency compares timed test runs, which makes a reward,
and so a training run, depend on the machine's load (a timing differs between two runs of one
program). The line events a program executes are the same in every run (see
:mod:`mrbench.kit.sandbox.candidate`), so the reward is reproducible, and they still rank an
``O(n²)`` loop below a builtin. Code that calls ``sys.settrace`` has unknown work and gets 0.

Weights: by default every component weighs 1 (``"equal"``) for every method. The paper's
launcher (CorrGRPO ``code_rl/run.sh``) gave **GRPO** one scalar, the weighted sum
``0.05 format + 0.05 syntax + 0.05 compile + 0.25 runtime + 0.60 accuracy + 0.30 ast_similarity
+ 0.20 efficiency`` (not normalised), while **CorrGRPO** took the seven components *unweighted*.
The ``"paper"`` preset reproduces that weighting (use it with ``grpo`` to reproduce the paper's
baseline; our estimators all see the same weights, so the comparison stays fair by default).

Each of the seven reward functions is a TRL reward function named after its component. TRL
calls them one after another on the same batch; the first one runs the batch (concurrently, in
the sandbox) and fills a small thread-safe LRU memo keyed by (dataset, problem id, completion),
from which the other six read — so each completion runs once, not seven times.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from mrbench.core.contracts import RewardComponent, completion_text
from mrbench.kit.sandbox import Job, Limits, Result, Sandbox
from mrbench.tasks.code_generation.problems import Problem

COMPONENTS: tuple[str, ...] = (
    "format",
    "syntax",
    "compile",
    "runtime",
    "accuracy",
    "ast_similarity",
    "efficiency",
)
PAPER_WEIGHTS: dict[str, float] = {
    "format": 0.05,
    "syntax": 0.05,
    "compile": 0.05,
    "runtime": 0.25,
    "accuracy": 0.60,
    "ast_similarity": 0.30,
    "efficiency": 0.20,
}
WEIGHT_PRESETS: dict[str, dict[str, float]] = {
    "equal": dict.fromkeys(COMPONENTS, 1.0),
    "paper": PAPER_WEIGHTS,
}
_MAX_CODE_CHARS = 100_000  # longer replies are not parsed or run (scored 0 from syntax on)
_MAX_AST_TOKENS = 4_000  # difflib is quadratic; cap each sequence


def resolve_weights(spec: str) -> dict[str, float]:
    """Weights from a preset name or ``"component=value,…"`` (unlisted components keep 1.0).

    >>> resolve_weights("paper")["accuracy"]
    0.6
    >>> resolve_weights("accuracy=2, format=0")["accuracy"], resolve_weights("accuracy=2")["syntax"]
    (2.0, 1.0)
    """
    text = str(spec).strip()
    if text in WEIGHT_PRESETS:
        return dict(WEIGHT_PRESETS[text])
    if "=" not in text:
        raise ValueError(
            f"unknown weights {spec!r}: give a preset ({', '.join(WEIGHT_PRESETS)}) "
            f"or 'component=value,…' over {', '.join(COMPONENTS)}"
        )
    weights = dict.fromkeys(COMPONENTS, 1.0)
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in weights:
            raise ValueError(
                f"unknown reward component {name!r} in weights {spec!r}; known: {', '.join(COMPONENTS)}"
            )
        try:
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"weight for {name!r} must be a number, got {value.strip()!r}") from None
        if not math.isfinite(weights[name]):
            raise ValueError(f"weight for {name!r} must be finite, got {value.strip()!r}")
    return weights


# --------------------------------------------------------------------------------------------
# Static components (no execution)
# --------------------------------------------------------------------------------------------

_CLOSED_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*)\Z", re.DOTALL | re.IGNORECASE)


def defines_entry_point(code: str, entry_point: str) -> bool:
    """Whether ``code`` defines ``entry_point`` at top level (a ``def``, class or assignment;
    for ``Solution().method`` the class ``Solution``).

    >>> defines_entry_point("def add(a, b):\\n    return a + b", "add")
    True
    >>> defines_entry_point("    def add(a, b): pass", "add")
    False
    >>> defines_entry_point("class Solution: pass", "Solution().f")
    True
    """
    name = re.split(r"[.(]", entry_point, maxsplit=1)[0]
    if not name.isidentifier():
        return False
    n = re.escape(name)
    if name != entry_point:
        return re.search(rf"^class\s+{n}\b", code, re.MULTILINE) is not None
    pattern = rf"^(?:(?:async\s+)?def\s+{n}\s*\(|class\s+{n}\b|{n}\s*=)"
    return re.search(pattern, code, re.MULTILINE) is not None


def extract_code(text: str, entry_point: str = "") -> tuple[str, bool]:
    """(code, closed_fence): the code to judge in a reply and whether it came from a closed block.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    ('def f():\\n    return 1', True)
    >>> extract_code("```python\\ndef f():\\n    return")
    ('def f():\\n    return', False)
    >>> extract_code("def f(): return 1")
    ('def f(): return 1', False)
    """
    blocks = _CLOSED_BLOCK.findall(text)
    if blocks:
        best = max(blocks, key=lambda b: (bool(entry_point) and defines_entry_point(b, entry_point), len(b)))
        return best.strip("\n").rstrip(), True
    match = _OPEN_BLOCK.search(text)
    if match:
        return match.group(1).strip("\n").rstrip(), False
    return text.strip(), False


def _parse(code: str) -> ast.Module | None:
    if not code.strip() or len(code) > _MAX_CODE_CHARS:
        return None
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _compiles(tree: ast.Module) -> bool:
    """Whether the parsed code compiles: catches what parsing allows but the compiler rejects
    (``return``/``await`` outside a function, ``break`` outside a loop, misplaced ``nonlocal``)."""
    try:
        compile(tree, "<candidate>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def _tokens(tree: ast.AST) -> tuple[str, ...]:
    tokens: list[str] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack and len(tokens) < _MAX_AST_TOKENS:
        node, leaving = stack.pop()
        name = type(node).__name__
        if leaving:
            tokens.append("/" + name)
            continue
        tokens.append(name)
        stack.append((node, True))
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]
        stack.extend((child, False) for child in reversed(children))
    return tuple(tokens)


def ast_tokens(code: str) -> tuple[str, ...] | None:
    """Pre-order AST node types with a closing ``/Type`` after each node's children; None if
    unparsable. Expression contexts (Load/Store) are left out: they repeat what the parent says.

    >>> ast_tokens("x = 1")
    ('Module', 'Assign', 'Name', '/Name', 'Constant', '/Constant', '/Assign', '/Module')
    """
    tree = _parse(code)
    return None if tree is None else _tokens(tree)


@functools.lru_cache(maxsize=2048)
def _reference_tokens(reference: str) -> tuple[str, ...] | None:
    return ast_tokens(reference)  # one parse per problem, not per completion


def _similarity(tree: ast.Module | None, code: str, reference: str) -> float:
    if tree is None or not reference:
        return 0.0
    if code.strip() == reference.strip():
        return 1.0  # the code parsed, so the reference does too
    ref = _reference_tokens(reference)
    if not ref:
        return 0.0
    return float(difflib.SequenceMatcher(None, _tokens(tree), ref, autojunk=False).ratio())


def ast_similarity(code: str, reference: str) -> float:
    """``difflib`` ratio of the two AST token sequences, in [0, 1]; 0 without a parsable pair.

    >>> ast_similarity("def f(a):\\n    return a + 1", "def g(b):\\n    return b + 2")
    1.0
    >>> 0 < ast_similarity("def f(a):\\n    return a", "def f(a):\\n    return [x for x in a]") < 1
    True
    """
    return _similarity(_parse(code), code, reference)


def efficiency(work: float | None, reference_work: float | None, passed: bool) -> float:
    """``clip(1 − w_gen / w_ref, 0, 1)`` for a passing program, else 0 (also when either work is
    unknown or ``w_ref`` is not positive).

    >>> efficiency(50, 200, True), efficiency(300, 200, True), efficiency(50, 200, False)
    (0.75, 0.0, 0.0)
    """
    if not passed or work is None or reference_work is None or work < 0 or reference_work <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - work / reference_work)))


# --------------------------------------------------------------------------------------------
# Scoring with the sandbox
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """Everything scoring one completion produced: the seven rewards (None = unscorable), the
    sandbox status (``"syntax_error"`` when it did not compile, ``"unknown_problem"`` when the
    problem id is not known), the work counted (line events; see :func:`efficiency`) and the
    tests' time in seconds (for information: no reward uses it)."""

    rewards: dict[str, float | None]
    status: str
    detail: str = ""
    test_time_s: float | None = None
    work: int | None = None
    reference_work: int | None = None
    code: str = field(default="", repr=False)


def job_for(problem: Problem, code: str) -> Job:
    """The sandbox job testing ``code`` on ``problem``."""
    return Job(
        code=problem.runnable(code),
        tests=problem.tests,
        entry_point=problem.entry_point,
        prelude=problem.prelude,
        check=problem.check,
        names=problem.names,
    )


Resolver = Callable[[str, str], "Problem | None"]
"""``resolve(dataset, problem_id)`` → the problem, or None when unknown."""


class CodeScorer:
    """Scores completions of :class:`Problem` s; thread-safe; owns a lazily started sandbox.

    Args:
        resolve: maps (dataset, problem id) columns to problems, for the reward functions.
        limits: sandbox limits per run (default: the paper's 5 s and 1 GB).
        workers: concurrent sandbox runs (default: the sandbox's, cores + 2).
        cache_size: completions memoised (LRU); must exceed the largest batch for the seven
            reward functions to share one run per completion.
    """

    def __init__(
        self,
        resolve: Resolver,
        *,
        limits: Limits | None = None,
        workers: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self.resolve = resolve
        self.limits = limits or Limits()
        self.workers = workers
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str, str], Outcome] = OrderedDict()
        self._inflight: dict[tuple[str, str, str], Future[Outcome]] = {}
        self._reference_work: dict[tuple[str, str], int | None] = {}
        self._sandbox: Sandbox | None = None
        self.runs = 0  # sandbox executions of completions (not counting reference calibration)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox, started on first use (building a task starts no process)."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = Sandbox(self.limits, workers=self.workers)
            return self._sandbox

    def close(self) -> None:
        """Stop the sandbox's worker processes (they restart on next use)."""
        with self._lock:
            sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    # -- batch scoring -----------------------------------------------------------------------
    def score(self, items: Sequence[tuple[Problem, str]]) -> list[Outcome]:
        """Outcomes for (problem, completion text) pairs, in order; runs only what is not memoised."""
        keys = [(p.dataset, p.id, text) for p, text in items]
        results: list[Outcome | None] = [None] * len(items)
        todo: dict[tuple[str, str, str], tuple[Problem, str, Future[Outcome]]] = {}
        waits: list[tuple[int, Future[Outcome]]] = []
        with self._lock:
            for i, key in enumerate(keys):
                if key in self._cache:
                    self._cache.move_to_end(key)
                    results[i] = self._cache[key]
                elif key in todo:
                    waits.append((i, todo[key][2]))
                elif key in self._inflight:  # another thread is scoring it right now
                    waits.append((i, self._inflight[key]))
                else:
                    future: Future[Outcome] = Future()
                    self._inflight[key] = future
                    todo[key] = (items[i][0], items[i][1], future)
        if todo:
            try:
                computed = self._compute([(p, text) for p, text, _ in todo.values()])
            except BaseException as exc:
                with self._lock:
                    for key, (_, _, future) in todo.items():
                        self._inflight.pop(key, None)
                        future.set_exception(exc)
                raise
            with self._lock:
                for (key, (_, _, future)), outcome in zip(todo.items(), computed, strict=True):
                    self._cache[key] = outcome
                    self._inflight.pop(key, None)
                    future.set_result(outcome)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            by_key = dict(zip(todo, computed, strict=True))
            for i, key in enumerate(keys):
                if results[i] is None and key in by_key:
                    results[i] = by_key[key]
        for i, future in waits:
            results[i] = future.result()
        return [r for r in results if r is not None]

    def _compute(self, items: list[tuple[Problem, str]]) -> list[Outcome]:
        from concurrent.futures import ThreadPoolExecutor

        sandbox = self.sandbox
        static: list[dict[str, Any]] = []
        pending: dict[int, Future[Result]] = {}
        # Each program starts running as soon as its static checks are done, so the sandbox
        # works while the rest of the batch is still being parsed.
        with ThreadPoolExecutor(max_workers=sandbox.workers) as pool:
            for i, (problem, text) in enumerate(items):
                static.append(self._static(problem, text))
                if static[i]["compile"]:
                    job = job_for(problem, static[i]["code"])
                    pending[i] = pool.submit(sandbox.run, job, check_syntax=False)  # compiled above
            runs = {i: future.result() for i, future in pending.items()}
        with self._lock:
            self.runs += len(runs)
        # w_ref is needed only where a program passed; the reference itself is its own w_ref.
        passing = {i for i, r in runs.items() if r.passed}
        self._calibrate(
            [items[i][0] for i in passing if static[i]["code"].strip() != items[i][0].reference.strip()]
        )
        outcomes = []
        for i, (problem, _) in enumerate(items):
            s = static[i]
            rewards: dict[str, float | None] = {
                "format": s["format"],
                "syntax": s["syntax"],
                "compile": s["compile"],
                "runtime": 0.0,
                "accuracy": 0.0,
                "ast_similarity": s["ast_similarity"],
                "efficiency": 0.0,
            }
            result = runs.get(i)
            if result is None:
                detail = "no code parses" if not s["syntax"] else "the code does not compile"
                outcomes.append(Outcome(rewards, "syntax_error", detail, code=s["code"]))
                continue
            w_ref: int | None = None
            if result.status == "sandbox_error":  # our fault, not the model's: unscorable
                rewards.update(runtime=None, accuracy=None, efficiency=None)
            else:
                rewards["runtime"] = float(result.ran)
                rewards["accuracy"] = float(result.passed)
                if result.passed:
                    if s["code"].strip() == problem.reference.strip():
                        w_ref = result.work
                    else:
                        with self._lock:
                            w_ref = self._reference_work.get((problem.dataset, problem.id))
                    rewards["efficiency"] = efficiency(result.work, w_ref, True)
            outcomes.append(
                Outcome(
                    rewards, result.status, result.detail, result.test_time_s, result.work, w_ref, s["code"]
                )
            )
        return outcomes

    @staticmethod
    def _static(problem: Problem, text: str) -> dict[str, Any]:
        code, fenced = extract_code(text, problem.entry_point)
        tree = _parse(code)
        return {
            "code": code,
            "format": float(fenced and (problem.program or defines_entry_point(code, problem.entry_point))),
            "syntax": float(tree is not None),
            "compile": float(tree is not None and _compiles(tree)),
            "ast_similarity": _similarity(tree, code, problem.reference),
        }

    def _calibrate(self, problems: list[Problem]) -> None:
        """Count ``w_ref`` (the reference's work; one run, as it is deterministic) where missing."""
        with self._lock:
            missing = {
                (p.dataset, p.id): p for p in problems if (p.dataset, p.id) not in self._reference_work
            }
        if not missing:
            return
        order = list(missing.values())
        results = self.sandbox.run_many([job_for(p, p.reference) for p in order])
        with self._lock:
            for problem, result in zip(order, results, strict=True):
                work = result.work if result.passed else None
                self._reference_work[(problem.dataset, problem.id)] = work

    # -- TRL reward functions ----------------------------------------------------------------
    def score_columns(
        self, completions: Sequence[Any], problem_id: Sequence[str], dataset: Sequence[str]
    ) -> list[Outcome | None]:
        """Outcomes for a TRL batch (None where the problem is unknown)."""
        if len(problem_id) != len(completions) or len(dataset) != len(completions):
            raise ValueError(
                f"reward columns do not align: {len(completions)} completions, "
                f"{len(problem_id)} problem ids, {len(dataset)} datasets"
            )
        known: list[tuple[int, Problem, str]] = []
        for i, (completion, pid, ds) in enumerate(zip(completions, problem_id, dataset, strict=True)):
            problem = self.resolve(str(ds), str(pid))
            if problem is not None:
                known.append((i, problem, completion_text(completion)))
        outcomes: list[Outcome | None] = [None] * len(completions)
        for (i, _, _), outcome in zip(known, self.score([(p, t) for _, p, t in known]), strict=True):
            outcomes[i] = outcome
        return outcomes

    def reward_function(self, component: str) -> Callable[..., list[float | None]]:
        """The TRL reward function of one component (``__name__`` = the component's name)."""
        if component not in COMPONENTS:
            raise ValueError(f"unknown reward component {component!r}; known: {', '.join(COMPONENTS)}")

        def reward(
            prompts: Sequence[Any],
            completions: Sequence[Any],
            problem_id: Sequence[str] | None = None,
            dataset: Sequence[str] | None = None,
            **_: Any,
        ) -> list[float | None]:
            if problem_id is None or dataset is None:
                raise ValueError(
                    "code-generation rewards need the dataset columns 'problem_id' and 'dataset'"
                )
            outcomes = self.score_columns(completions, problem_id, dataset)
            return [None if o is None else o.rewards[component] for o in outcomes]

        reward.__name__ = reward.__qualname__ = component
        reward.__doc__ = f"The {component!r} reward component (see mrbench.tasks.code_generation.rewards)."
        return reward

    def reward_components(self, weights: dict[str, float]) -> list[RewardComponent]:
        """The seven components in :data:`COMPONENTS` order with the given weights, range [0, 1]."""
        return [
            RewardComponent(name, self.reward_function(name), float(weights[name])) for name in COMPONENTS
        ]
