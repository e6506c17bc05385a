"""mrbench's one adjustment of accelerate for sharded (FSDP) cells: FSDP on a CPU, and float32 gradients.

accelerate 1.16 decides a process's distributed type once, in ``AcceleratorState.__init__``, and
there it has two properties a cell of ``--distributed fsdp`` cannot keep:

1. **On a machine without CUDA, FSDP is silently dropped.** ``accelerate launch`` with the ``fsdp``
   preset sets ``ACCELERATE_USE_FSDP``, and the ``Accelerator`` builds its FSDP plugin, but
   ``AcceleratorState`` switches to FSDP only from a GPU-like type (``MULTI_GPU``, ``MULTI_XPU``,
   ...). A CPU process is ``MULTI_CPU`` (gloo), so the cell would train as plain DDP. torch's own
   FSDP2 (``fully_shard``) runs on the CPU over gloo, and so does the rest of accelerate's FSDP2
   path (sharding, the full-state loading from rank 0, the FSDP checkpoint files).
2. **Under mixed precision, gradients are reduced in bfloat16**: the plugin's
   ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)``. mrbench's mixed precision keeps
   float32 gradients and masters (docs/cluster.md, "GPUs, bfloat16 and vLLM"), and a bfloat16
   reduce-scatter rounds every gradient to 8 bits of mantissa before the update.

:func:`adapt_accelerate` wraps ``AcceleratorState.__init__`` once per process (a cell's worker,
:func:`mrbench.engine.processes.distributed.main`, calls it before anything builds a state) and, after
accelerate's own initialisation, applies :func:`adjust_state`: a ``MULTI_CPU`` state that was
given an FSDP plugin becomes ``FSDP`` with that plugin (the mixed precision set on it as accelerate
does for a GPU), and an FSDP2 policy with a lower-precision ``reduce_dtype`` gets ``float32``
instead (``param_dtype`` stays: forward and backward compute in bfloat16, over float32 shards).
Nothing else of accelerate changes; a state without an FSDP plugin is left as it is.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

_ADAPTED = "_mrbench_adapted"


def adjust_state(state: Any, fsdp_plugin: Any) -> None:
    """Apply the two adjustments of the module docstring to ``state`` (an ``AcceleratorState`` just
    initialised with ``fsdp_plugin``, which may be None)."""
    import torch
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if fsdp_plugin is not None and state.distributed_type == DistributedType.MULTI_CPU:
        state.distributed_type = DistributedType.FSDP
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        if state._mixed_precision != "no":
            fsdp_plugin.set_mixed_precision(state._mixed_precision)
        state.fsdp_plugin = fsdp_plugin
    plugin = state.__dict__.get("fsdp_plugin")
    if plugin is None or getattr(plugin, "fsdp_version", 1) != 2:
        return
    policy = plugin.mixed_precision_policy
    # reduce_dtype None reduces in param_dtype (torch's rule).
    if policy is not None and (policy.reduce_dtype or policy.param_dtype) not in (None, torch.float32):
        plugin.mixed_precision_policy = dataclasses.replace(policy, reduce_dtype=torch.float32)


def adapt_accelerate() -> None:
    """Make every ``AcceleratorState`` this process builds go through :func:`adjust_state` (once)."""
    from accelerate.state import AcceleratorState

    original = AcceleratorState.__init__
    if getattr(original, _ADAPTED, False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        adjust_state(self, bound.arguments.get("fsdp_plugin"))

    setattr(init, _ADAPTED, True)
    AcceleratorState.__init__ = init  # type: ignore[method-assign]
