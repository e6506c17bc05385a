"""Tool calling: a procedural tool catalogue, ToolRL-style rewards, eval through lm-eval (optionally on BFCL).

Public API (the registry entry ``tool-calling`` points at :func:`tool_calling`)::

    from mrbench.tasks.tool_calling import tool_calling, score_answer, load_bfcl_samples
"""

from mrbench.tasks.tool_calling.bfcl import load_bfcl_samples
from mrbench.tasks.tool_calling.rewards import (
    COMPONENTS,
    RANGES,
    reward_components,
    score_answer,
    score_sample,
)
from mrbench.tasks.tool_calling.task import ToolCallingTask, tool_calling

__all__ = [
    "COMPONENTS",
    "RANGES",
    "ToolCallingTask",
    "load_bfcl_samples",
    "reward_components",
    "score_answer",
    "score_sample",
    "tool_calling",
]
