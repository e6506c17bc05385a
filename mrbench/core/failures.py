"""Machine failures: errors that say the hardware or its runtime failed, not the code being scored.

An evaluation or rollout that turns every exception of its policy into an invalid episode must
not do that to these: a CUDA out-of-memory caught as ``policy_error`` ends a cell FINISHED with
deflated metrics (and the evaluation cache then hands that bogus "before" figure to every later
cell of the model), and under FSDP / ZeRO-3 the rank that swallowed it stops calling
``generate`` while the other ranks wait for it in a collective forever. So code that catches a
policy's exceptions re-raises those :func:`is_machine_failure` recognises; the cell then ends
FAILED with the cause, and nothing is cached.

Recognised (checked by class name and message, so this module imports no torch):

- ``MemoryError`` (host memory);
- ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` is the same class), and any class
  named ``OutOfMemoryError`` or ``AcceleratorError`` (torch's CUDA runtime errors);
- ``torch.distributed.DistError`` and its subclasses (a failed collective, a lost peer);
- vLLM's ``EngineDeadError`` (its engine process died);
- a ``RuntimeError`` whose message comes from the CUDA runtime or its libraries
  (``CUDA out of memory``, ``CUDA error: …``, ``CUBLAS_STATUS_…``, ``CUDNN_STATUS_…``,
  ``NCCL error``), as torch raises them from kernels that do not use the classes above.
"""

from __future__ import annotations

_CLASS_NAMES = frozenset({"OutOfMemoryError", "AcceleratorError", "DistError", "EngineDeadError"})
_RUNTIME_MESSAGES = ("CUDA out of memory", "CUDA error", "CUBLAS_STATUS_", "CUDNN_STATUS_", "NCCL error")


def is_machine_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the machine failed (memory, device, interconnect), not the policy.

    >>> is_machine_failure(MemoryError())
    True
    >>> is_machine_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    True
    >>> is_machine_failure(ValueError("policy returned 3 messages for 4 conversations"))
    False
    """
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ in _CLASS_NAMES for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _RUNTIME_MESSAGES)
