"""The method registry: ``@register_method("name")`` on a pure advantage function.

Every method has one signature::

    fn(rewards: Tensor[P, G, K], weights: Tensor[K], *, <hyper-parameters with defaults>) -> Tensor[P, G]

``rewards`` may hold NaN (unscorable); the result is always finite. Methods from other packages
register with the same decorator (``from mrbench import register_method``), through an entry
point in the group ``mrbench.methods`` (``name = "package.module:function"``), or are named
``package.module:function`` where a method name is expected.

A numeric hyper-parameter declares the values it accepts with
:class:`mrbench.core.registry.Range` (also ``from mrbench import Range``) in its annotation; values
outside it are refused, naming the value, before anything runs, and ``mrbench methods`` shows it::

    @register_method("my-adv")
    def my_adv(rewards, weights, *, eps: Annotated[float, Range(gt=0)] = 1e-6) -> Tensor: ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor

from mrbench.core.registry import Registry

MethodFn = Callable[..., Tensor]

ENTRY_POINT_GROUP = "mrbench.methods"


def check_method(fn: Any) -> None:
    """``TypeError`` unless ``fn`` can be called as ``fn(rewards, weights)`` (hyper-parameters
    keyword-only with defaults)."""
    signature = inspect.signature(fn)  # readable: the registry checks that first
    try:
        signature.bind(None, None)
    except TypeError:
        raise TypeError(
            f"a method takes (rewards, weights, *, <hyper-parameters with defaults>); "
            f"{getattr(fn, '__qualname__', fn)!s} takes {signature}"
        ) from None


def check_estimator_signature(fn: Any) -> None:
    """``TypeError`` unless ``fn`` declares an estimator's signature: its first two parameters named
    ``rewards`` and ``weights``, every other keyword-only. What a ``"module:function"`` name that is
    not registered must fit: naming ``builtins:exec`` (callable as ``exec(a, b)``) is no estimator."""
    params = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named = [p.name for p in params[:2]] == ["rewards", "weights"] and all(
        p.kind in positional for p in params[:2]
    )
    if not named or any(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params[2:]):
        raise TypeError(
            "an estimator takes (rewards, weights, *, <hyper-parameters with defaults>); "
            f"{getattr(fn, '__qualname__', type(fn).__name__)!s} takes {inspect.signature(fn)}"
        )


METHODS: Registry[MethodFn] = Registry(
    "method", group=ENTRY_POINT_GROUP, check=check_method, path_check=check_estimator_signature
)
register_method = METHODS.register
