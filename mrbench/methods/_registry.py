"""The method registry: ``@register_method("name")`` on a pure advantage function.

Every method has one signature::

    fn(rewards: Tensor[P, G, K], weights: Tensor[K], *, <hyper-parameters with defaults>) -> Tensor[P, G]

``rewards`` may hold NaN (unscorable); the result is always finite.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from mrbench.core.registry import Registry

MethodFn = Callable[..., Tensor]

METHODS: Registry[MethodFn] = Registry("method")
register_method = METHODS.register
