"""TRL's chunked log-probability kernel on the CPU, folded in place: the same bits in fewer passes.

TRL 1.16 scores a training batch with ``ChunkedLogProbFunction``
(``trl/kernels/chunked_logprob.py``): the LM head's logits in tiles of ``[4096 tokens, vocabulary
chunk]``, each folded into online log-sum-exp statistics (forward) or turned into the logits'
gradient (backward). Without Triton (on the CPU) the folds are whole-tile torch expressions,
``_forward_tile`` and ``_backward_tile``, that allocate a new tile-sized tensor for nearly every
operation: a dozen passes over 32 MiB per tile of the tiny models, a tenth of an agent-security
cell's time.

:func:`fold_forward` and :func:`fold_backward` compute every element with the same float32
operations in the same order, in place in the tile or in one buffer of the same layout as TRL's
temporaries, so they return TRL's results bit for bit. Multiplications by exactly 1.0 (the logit
scale and the inverse temperature of most models) are skipped, which changes no value; ``exp``,
whose vectorised and scalar code may round differently, runs on a contiguous tensor of TRL's
shape, so every element takes the code path it takes in TRL. They cover what a GRPO step asks
for (log-probabilities with their gradient, entropy and its sums without a gradient, no logit
soft-capping, float32 tiles); every other call goes to TRL's own fold.

:func:`install` puts them into TRL's module only when TRL's folds and the autograd function that
calls them are the code they were written against (the digest of their source): a TRL that
changed them keeps its own. ``MRBENCH_CPU_FOLD=trl`` keeps TRL's folds whatever the version.
Triton devices (GPUs) never call either fold.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from mrbench.core import env

KNOWN_TRL_DIGEST = "668a25c7e65b280c"
"""TRL 1.16.0's :func:`trl_digest`: the code these folds were written against and checked with."""

_original: dict[str, Any] = {}  # TRL's folds, once install() replaced them


def fold_setting() -> str:
    """``$MRBENCH_CPU_FOLD`` checked: ``mrbench`` when unset; :class:`UserError` otherwise."""
    return env.CPU_FOLD.get()


def trl_digest() -> str:
    """First 16 hex digits of the SHA-256 of TRL's two folds, its logit transform and the autograd
    function's forward and backward (the code :func:`fold_forward`/:func:`fold_backward` mirror)."""
    from trl.kernels import chunked_logprob as ck

    parts = (
        _trl_fold("_forward_tile"),
        _trl_fold("_backward_tile"),
        ck._torch_transform,
        ck.ChunkedLogProbFunction.forward,
        ck.ChunkedLogProbFunction.backward,
    )
    text = "\n".join(inspect.getsource(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def install() -> bool:
    """Replace TRL's CPU folds with :func:`fold_forward` and :func:`fold_backward` when its code is
    the known one and ``$MRBENCH_CPU_FOLD`` allows it; returns whether they are in place."""
    from trl.kernels import chunked_logprob as ck

    if _original:
        return True
    if fold_setting() != "mrbench" or trl_digest() != KNOWN_TRL_DIGEST:
        return False
    _original["_forward_tile"] = ck._forward_tile
    _original["_backward_tile"] = ck._backward_tile
    ck._forward_tile = fold_forward
    ck._backward_tile = fold_backward
    return True


def uninstall() -> None:
    """Put TRL's own folds back (tests)."""
    from trl.kernels import chunked_logprob as ck

    if _original:
        ck._forward_tile = _original.pop("_forward_tile")
        ck._backward_tile = _original.pop("_backward_tile")


def _trl_fold(name: str) -> Any:
    """TRL's own fold ``name`` (``_forward_tile`` or ``_backward_tile``), installed over or not."""
    from trl.kernels import chunked_logprob as ck

    return _original.get(name) or getattr(ck, name)


def _same_layout(tile: Any) -> Any:
    """``tile`` itself when contiguous, else a contiguous copy: the layout of TRL's temporaries."""
    return tile if tile.is_contiguous() else tile.contiguous()


def fold_forward(
    tile: Any,
    tile_stride: int,
    targets: Any,
    running_max: Any,
    sum_exp: Any,
    x_sum_exp: Any,
    sq_sum_exp: Any,
    z_sum: Any,
    max_before_target: Any,
    target_logit: Any,
    vocab_start: int,
    n_cols: int,
    logit_scale: float,
    softcap: float,
    inv_t: float,
    HAS_SOFTCAP: bool,  # TRL's keyword names, as its module calls the fold
    HAS_ENTROPY: bool,
    HAS_LOG_SUM_SQ_PROBS: bool,
    HAS_MEAN_LOGITS: bool,
    HAS_IS_TOP1: bool,
    BLOCK_SIZE: int,
) -> None:
    """TRL's ``_forward_tile``: fold logits ``tile [n, n_cols]`` (columns ``vocab_start …``) into the
    running statistics (each ``[n]``, updated in place). The tile's contents are left undefined,
    as TRL's caller overwrites them next."""
    import torch

    if HAS_SOFTCAP or HAS_IS_TOP1 or tile.dtype != torch.float32:
        _trl_fold("_forward_tile")(
            tile, tile_stride, targets, running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum,
            max_before_target, target_logit, vocab_start, n_cols, logit_scale, softcap, inv_t,
            HAS_SOFTCAP=HAS_SOFTCAP, HAS_ENTROPY=HAS_ENTROPY, HAS_LOG_SUM_SQ_PROBS=HAS_LOG_SUM_SQ_PROBS,
            HAS_MEAN_LOGITS=HAS_MEAN_LOGITS, HAS_IS_TOP1=HAS_IS_TOP1, BLOCK_SIZE=BLOCK_SIZE,
        )  # fmt: skip
        return
    z = _same_layout(tile)  # TRL: z = tile * logit_scale * inv_t, a new contiguous tensor
    if logit_scale != 1.0:
        z.mul_(logit_scale)
    if inv_t != 1.0:
        z.mul_(inv_t)
    local = targets - vocab_start
    if HAS_MEAN_LOGITS:
        z_sum += z.sum(-1)
    new_m = torch.maximum(running_max, z.amax(-1))
    rescale = torch.exp(running_max - new_m)
    e = torch.sub(z, new_m.unsqueeze(-1))  # [n, n_cols], contiguous
    e.exp_()
    sum_exp.mul_(rescale).add_(e.sum(-1))
    if HAS_LOG_SUM_SQ_PROBS:
        sq_sum_exp.mul_(rescale * rescale).add_((e * e).sum(-1))
    if HAS_ENTROPY:
        x_sum_exp.mul_(rescale).add_(e.mul_(z).sum(-1))
    running_max.copy_(new_m)
    in_tile = (local >= 0) & (local < n_cols)
    target_z = z.gather(-1, local.clamp(0, n_cols - 1).unsqueeze(-1)).squeeze(-1)
    target_logit.copy_(torch.where(in_tile, target_z, target_logit))


def fold_backward(
    tile: Any,
    tile_stride: int,
    targets: Any,
    log_z: Any,
    entropy: Any,
    grad_logprobs: Any,
    grad_entropy: Any,
    vocab_start: int,
    n_cols: int,
    logit_scale: float,
    softcap: float,
    inv_t: float,
    HAS_SOFTCAP: bool,  # TRL's keyword names, as its module calls the fold
    HAS_LOGPROB_GRAD: bool,
    HAS_ENTROPY_GRAD: bool,
    BLOCK_SIZE: int,
) -> None:
    """TRL's ``_backward_tile``: turn logits ``tile [n, n_cols]`` into the gradient of the loss with
    respect to them, in place, from ``log_z [n]`` and ``grad_logprobs [n]``:
    ``(1[j = target] - p_j) · grad_logprobs · inv_t · logit_scale``."""
    import torch

    if HAS_SOFTCAP or HAS_ENTROPY_GRAD or not HAS_LOGPROB_GRAD or tile.dtype != torch.float32:
        _trl_fold("_backward_tile")(
            tile, tile_stride, targets, log_z, entropy, grad_logprobs, grad_entropy, vocab_start,
            n_cols, logit_scale, softcap, inv_t, HAS_SOFTCAP=HAS_SOFTCAP,
            HAS_LOGPROB_GRAD=HAS_LOGPROB_GRAD, HAS_ENTROPY_GRAD=HAS_ENTROPY_GRAD, BLOCK_SIZE=BLOCK_SIZE,
        )  # fmt: skip
        return
    w = _same_layout(tile)
    if logit_scale != 1.0:
        w.mul_(logit_scale)
    if inv_t != 1.0:
        w.mul_(inv_t)
    w.sub_(log_z.unsqueeze(-1))  # log p
    w.exp_()  # p
    local = targets - vocab_start
    rows = ((local >= 0) & (local < n_cols)).nonzero().squeeze(-1)
    cols = local[rows]
    p_target = w[rows, cols]
    w.neg_()  # TRL: 0.0 - p; the same but for the sign of a zero, which the + 0.0 below evens out
    w[rows, cols] = 1.0 - p_target
    w.mul_(grad_logprobs.unsqueeze(-1))
    w.add_(0.0)  # TRL: zeros + ..., which turns -0.0 into +0.0
    if inv_t != 1.0:
        w.mul_(inv_t)
    if logit_scale != 1.0:
        w.mul_(logit_scale)
    if w is not tile:
        tile.copy_(w)
