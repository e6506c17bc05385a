"""The names of stand-in models (``standin:<model>``): data only, read by the engine, which builds
them (:mod:`mrbench.engine.models.standin`), and by the report, which names the model stood for."""

from __future__ import annotations

PREFIX = "standin:"


def is_standin(name: str) -> bool:
    """Whether ``name`` names a stand-in (``standin:<model>``)."""
    return name.startswith(PREFIX)


def stood_for(name: str) -> str:
    """The model a stand-in stands for (``name`` itself when it is not one).

    >>> stood_for("standin:Qwen/Qwen3-8B"), stood_for("tiny")
    ('Qwen/Qwen3-8B', 'tiny')
    """
    return name.removeprefix(PREFIX)
