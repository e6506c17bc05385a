"""Code generation: Python functions tested in a hardened sandbox, the paper's seven reward components.

Public API (the registry entry ``code-generation`` points at :func:`code_generation`)::

    from mrbench.tasks.code_generation import code_generation, embedded_problems, pass_at_k

Importing this package loads no data and starts no process.
"""

from mrbench.tasks.code_generation.evaluation import (
    EVAL_METRICS,
    SAMPLED_METRICS,
    pass_at_k,
    pass_at_k_by_problem,
)
from mrbench.tasks.code_generation.humaneval import humaneval_problems
from mrbench.tasks.code_generation.problems import Problem, embedded_problems, embedded_split
from mrbench.tasks.code_generation.rewards import (
    COMPONENTS,
    PAPER_WEIGHTS,
    WEIGHT_PRESETS,
    CodeScorer,
    Outcome,
)
from mrbench.tasks.code_generation.task import DATASETS, CodeGenerationTask, code_generation

__all__ = [
    "COMPONENTS",
    "DATASETS",
    "EVAL_METRICS",
    "PAPER_WEIGHTS",
    "SAMPLED_METRICS",
    "WEIGHT_PRESETS",
    "CodeGenerationTask",
    "CodeScorer",
    "Outcome",
    "Problem",
    "code_generation",
    "embedded_problems",
    "embedded_split",
    "humaneval_problems",
    "pass_at_k",
    "pass_at_k_by_problem",
]
