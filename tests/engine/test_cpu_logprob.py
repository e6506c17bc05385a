"""mrbench's CPU folds for TRL's chunked log-prob kernel give TRL's own results bit for bit
(mrbench/engine/training/cpu_logprob.py): fold by fold on adversarial tiles, through the autograd function
with several token and vocabulary chunks, and over real GRPO training steps."""

from __future__ import annotations

import itertools

import pytest
import torch
from trl.kernels import chunked_logprob as ck

from mrbench.core.errors import UserError
from mrbench.engine.training import cpu_logprob


@pytest.fixture(autouse=True)
def _trl_folds(monkeypatch):
    """Every test starts and ends with TRL's own folds in TRL's module."""
    monkeypatch.delenv("MRBENCH_CPU_FOLD", raising=False)
    cpu_logprob.uninstall()
    yield
    cpu_logprob.uninstall()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, zeros' signs included; a NaN only where the other has one."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False
    bits_a = a.contiguous().view(torch.int32)[~nan_a]
    bits_b = b.contiguous().view(torch.int32)[~nan_b]
    return torch.equal(bits_a, bits_b)


def _tile(n: int, n_cols: int, width: int, gen: torch.Generator, spread: float) -> torch.Tensor:
    """Logits ``[n, n_cols]`` as a view of a ``[n, width]`` buffer (strided when width > n_cols),
    as TRL's tiles are; a few rows far below the rest so their probabilities underflow to 0."""
    buf = torch.randn(n, width, generator=gen) * spread
    buf[::7, : n_cols // 3] -= 200.0
    return buf[:, :n_cols]


CASES = list(
    itertools.product(
        [(1, 64), (37, 2051), (300, 2048)],  # n tokens, n_cols (odd widths: exp's scalar tail)
        [0, 11],  # buffer columns beyond the tile: contiguous or strided
        [0, 1000],  # vocab_start: targets inside and outside the tile
        [(1.0, 1.0), (0.5, 1 / 0.7)],  # logit_scale, inverse temperature
    )
)


@pytest.mark.parametrize(("shape", "pad", "vocab_start", "scales"), CASES)
def test_the_backward_fold_equals_trls_bit_for_bit(shape, pad, vocab_start, scales) -> None:
    n, n_cols = shape
    gen = torch.Generator().manual_seed(n * 7 + pad + vocab_start)
    tile = _tile(n, n_cols, n_cols + pad, gen, spread=4.0)
    targets = torch.randint(0, vocab_start + n_cols + 50, (n,), generator=gen)
    log_z = torch.logsumexp(tile * scales[0] * scales[1], -1) + 0.25
    grad = torch.randn(n, generator=gen)
    grad[::5] = 0.0
    grad[1::9] = -0.0
    args = dict(
        targets=targets, log_z=log_z, entropy=log_z, grad_logprobs=grad, grad_entropy=log_z,
        vocab_start=vocab_start, n_cols=n_cols, logit_scale=scales[0], softcap=1.0, inv_t=scales[1],
        HAS_SOFTCAP=False, HAS_LOGPROB_GRAD=True, HAS_ENTROPY_GRAD=False, BLOCK_SIZE=1024,
    )  # fmt: skip
    theirs, ours = tile.clone(), tile.clone()  # clones are contiguous: test strided views too
    theirs_t = theirs if not pad else _restride(theirs, pad)
    ours_t = ours if not pad else _restride(ours, pad)
    ck._backward_tile(theirs_t, theirs_t.stride(0), **args)
    cpu_logprob.fold_backward(ours_t, ours_t.stride(0), **args)
    assert same_bits(theirs_t, ours_t)
    assert (theirs_t == 0).any() and torch.signbit(theirs_t[theirs_t == 0]).logical_not().all()


def _restride(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t`` copied into a wider buffer: a strided view with ``t``'s values."""
    buf = torch.full((t.shape[0], t.shape[1] + pad), float("nan"))
    buf[:, : t.shape[1]] = t
    return buf[:, : t.shape[1]]


@pytest.mark.parametrize(("shape", "pad", "vocab_start", "scales"), CASES)
@pytest.mark.parametrize("flags", [(True, False, False), (True, True, True), (False, False, True)])
def test_the_forward_fold_equals_trls_bit_for_bit(shape, pad, vocab_start, scales, flags) -> None:
    entropy, sq, mean = flags
    n, n_cols = shape
    gen = torch.Generator().manual_seed(n * 3 + pad + vocab_start)
    targets = torch.randint(0, vocab_start + n_cols + 50, (n,), generator=gen)
    # Two tiles folded one after the other: the running statistics' rescaling is exercised.
    tiles = [_tile(n, n_cols, n_cols + pad, gen, spread=s) for s in (3.0, 6.0)]
    stats = {}
    for who in ("theirs", "ours"):
        state = [torch.full((n,), float("-inf"))] + [torch.zeros(n) for _ in range(4)]
        state += [torch.full((n,), float("-inf")), torch.zeros(n)]
        for tile in tiles:
            work = _restride(tile.clone(), pad) if pad else tile.clone()
            kwargs = dict(
                vocab_start=vocab_start, n_cols=n_cols, logit_scale=scales[0], softcap=1.0,
                inv_t=scales[1], HAS_SOFTCAP=False, HAS_ENTROPY=entropy, HAS_LOG_SUM_SQ_PROBS=sq,
                HAS_MEAN_LOGITS=mean, HAS_IS_TOP1=False, BLOCK_SIZE=1024,
            )  # fmt: skip
            if who == "theirs":
                ck._forward_tile(work, work.stride(0), targets, *state, **kwargs)
            else:
                cpu_logprob.fold_forward(work, work.stride(0), targets, *state, **kwargs)
        stats[who] = state
    for theirs, ours in zip(stats["theirs"], stats["ours"], strict=True):
        assert same_bits(theirs, ours)


def test_calls_the_folds_do_not_cover_go_to_trls_own(monkeypatch) -> None:
    calls = []
    fakes = {
        "_forward_tile": lambda *a, **k: calls.append("forward"),
        "_backward_tile": lambda *a, **k: calls.append("backward"),
    }
    monkeypatch.setattr(cpu_logprob, "_trl_fold", fakes.__getitem__)
    tile = torch.zeros(2, 4)
    vec = torch.zeros(2)
    common = dict(vocab_start=0, n_cols=4, logit_scale=1.0, softcap=30.0, inv_t=1.0, BLOCK_SIZE=1024)
    fwd = dict(HAS_ENTROPY=True, HAS_LOG_SUM_SQ_PROBS=False, HAS_MEAN_LOGITS=False)
    cpu_logprob.fold_forward(
        tile, 4, vec.long(), *[vec] * 7, HAS_SOFTCAP=True, HAS_IS_TOP1=False, **fwd, **common
    )
    cpu_logprob.fold_forward(
        tile, 4, vec.long(), *[vec] * 7, HAS_SOFTCAP=False, HAS_IS_TOP1=True, **fwd, **common
    )
    cpu_logprob.fold_forward(
        tile.double(), 4, vec.long(), *[vec] * 7, HAS_SOFTCAP=False, HAS_IS_TOP1=False, **fwd, **common
    )
    bwd = dict(targets=vec.long(), log_z=vec, entropy=vec, grad_logprobs=vec, grad_entropy=vec)
    for softcap, logprob_grad, entropy_grad in [
        (True, True, False),
        (False, True, True),
        (False, False, False),
    ]:
        cpu_logprob.fold_backward(
            tile, 4, **bwd, HAS_SOFTCAP=softcap, HAS_LOGPROB_GRAD=logprob_grad,
            HAS_ENTROPY_GRAD=entropy_grad, **common,
        )  # fmt: skip
    assert calls == ["forward"] * 3 + ["backward"] * 3


def _scored(monkeypatch, *, install: bool, outputs: tuple[str, ...]) -> list[torch.Tensor]:
    """Log-probs (and entropy) of random hidden states through TRL's autograd function, with several
    token chunks and vocabulary chunks (so strided tiles), and the gradients of a loss of them."""
    monkeypatch.setattr(ck, "TOKEN_CHUNK_SIZE", 64)
    if install:
        assert cpu_logprob.install()
    else:
        cpu_logprob.uninstall()
    gen = torch.Generator().manual_seed(0)
    hidden = (torch.randn(150, 24, generator=gen) * 2).requires_grad_()
    weight = (torch.randn(130, 24, generator=gen)).requires_grad_()
    targets = torch.randint(0, 130, (150,), generator=gen)
    logprobs, entropy, *_ = ck.ChunkedLogProbFunction.apply(
        hidden, weight, None, targets, 0.7, 50, None, 1.0, outputs
    )
    weights = torch.randn(150, generator=gen)
    weights[::4] = 0.0  # masked positions: zero gradient, as TRL's padding
    (logprobs * weights).sum().backward()
    out = [logprobs.detach(), hidden.grad, weight.grad]
    return out + ([entropy.detach()] if entropy is not None else [])


@pytest.mark.parametrize("outputs", [("log_probs",), ("log_probs", "entropy")])
def test_the_autograd_function_gives_the_same_bits_with_mrbench_folds(monkeypatch, outputs) -> None:
    theirs = _scored(monkeypatch, install=False, outputs=outputs)
    ours = _scored(monkeypatch, install=True, outputs=outputs)
    assert ck._backward_tile is cpu_logprob.fold_backward
    for a, b in zip(theirs, ours, strict=True):
        assert same_bits(a, b)


def test_install_needs_the_known_trl_and_can_be_refused(monkeypatch) -> None:
    assert cpu_logprob.trl_digest() == cpu_logprob.KNOWN_TRL_DIGEST, (
        "TRL's chunked log-prob kernel changed: check mrbench/engine/training/cpu_logprob.py against it, "
        "then update KNOWN_TRL_DIGEST"
    )
    monkeypatch.setenv("MRBENCH_CPU_FOLD", "trl")
    assert cpu_logprob.install() is False and ck._forward_tile is not cpu_logprob.fold_forward
    monkeypatch.setenv("MRBENCH_CPU_FOLD", "mrbench")
    monkeypatch.setattr(cpu_logprob, "KNOWN_TRL_DIGEST", "0" * 16)
    assert cpu_logprob.install() is False and ck._backward_tile is not cpu_logprob.fold_backward
    monkeypatch.undo()
    assert cpu_logprob.install() is True
    assert (ck._forward_tile, ck._backward_tile) == (cpu_logprob.fold_forward, cpu_logprob.fold_backward)
    assert cpu_logprob.trl_digest() == cpu_logprob.KNOWN_TRL_DIGEST  # TRL's code, not ours
    cpu_logprob.uninstall()
    assert ck._forward_tile is not cpu_logprob.fold_forward


def test_the_setting_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("MRBENCH_CPU_FOLD", "fast")
    with pytest.raises(UserError, match=r"MRBENCH_CPU_FOLD='fast' must be 'mrbench' or 'trl'"):
        cpu_logprob.install()


def _trained(model_dir, tmp_path, *, install: bool) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Three real GRPO steps of plain TRL on the micro model: its final weights and step logs."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mrbench.engine.models.catalog import load_model, load_tokenizer

    if install:
        assert cpu_logprob.install()
    torch.manual_seed(0)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=8, num_generations=4,
        max_completion_length=16, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, disable_tqdm=True, seed=0,
    )  # fmt: skip
    rows = [{"prompt": [{"role": "user", "content": f"add {i} {i + 1}"}]} for i in range(8)]
    trainer = GRPOTrainer(
        model=load_model(str(model_dir)),
        reward_funcs=[lambda completions, **kw: [len(c[0]["content"]) / 10 for c in completions]],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(str(model_dir)),
    )
    trainer.train()
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return weights, [e for e in trainer.state.log_history if "loss" in e]


def test_grpo_training_is_bit_for_bit_the_same_with_mrbench_folds(micro_model_dir, tmp_path) -> None:
    theirs, theirs_log = _trained(micro_model_dir, tmp_path / "trl", install=False)
    ours, ours_log = _trained(micro_model_dir, tmp_path / "mrbench", install=True)
    assert ck._backward_tile is cpu_logprob.fold_backward
    assert theirs.keys() == ours.keys()
    assert all(same_bits(theirs[k], ours[k]) for k in theirs)
    assert not all(same_bits(theirs[k], _initial(micro_model_dir)[k]) for k in theirs)  # it trained
    drop = ("step_time",)  # wall-clock entries differ from run to run
    strip = [{k: v for k, v in e.items() if not any(d in k for d in drop)} for e in theirs_log]
    assert strip == [{k: v for k, v in e.items() if not any(d in k for d in drop)} for e in ours_log]


def _initial(model_dir) -> dict[str, torch.Tensor]:
    from mrbench.engine.models.catalog import load_model

    return load_model(str(model_dir)).state_dict()
