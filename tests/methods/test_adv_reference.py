"""Every registered method equals its plain per-group loop in ``methods/reference.py``."""

from __future__ import annotations

import pytest
import torch
from adv_inputs import random_rewards, random_weights

from mrbench.methods import METHODS, compute_advantages
from mrbench.methods.reference import REFERENCES


def test_every_method_has_a_reference() -> None:
    assert set(REFERENCES) == set(METHODS.names())


def _cases(n: int):
    gen = torch.Generator().manual_seed(1234)
    for seed in range(n):
        p, g, k = (int(x) for x in torch.randint(1, 9, (3,), generator=gen))
        r = random_rewards(seed, (p, g, k), nan_frac=0.15, unscorable_frac=0.15)
        if seed % 3 == 0 and p > 1:
            r[1] = r[1, 0]  # a constant group
        if seed % 4 == 1:
            r[..., 0] = torch.round(r[..., 0] / r[..., 0].nanmean().abs().clamp_min(1e-30))  # ties
        if seed % 5 == 2:
            r[0, :, -1] = 3.0  # a constant component in group 0
        yield seed, r, random_weights(seed, k)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_vectorised_equals_loop(name: str) -> None:
    ref = REFERENCES[name]
    for seed, r, w in _cases(25):
        fast = compute_advantages(name, r, w)
        slow = ref(r, w)
        scale = float(slow.abs().max()) if slow.numel() else 0.0
        assert torch.allclose(fast, slow, rtol=1e-9, atol=1e-9 * max(scale, 1e-30)), (
            name,
            seed,
            tuple(r.shape),
            float((fast - slow).abs().max()),
        )


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_vectorised_equals_loop_float32_and_params(name: str) -> None:
    ref = REFERENCES[name]
    params = {"eps": 1e-3} if "eps" in METHODS.get(name).params else {}
    for seed, r, w in _cases(8):
        r32, w32 = r.float(), w.float()
        fast = compute_advantages(name, r32, w32, **params)
        slow = ref(r32, w32, **params)
        assert fast.dtype == torch.float32
        scale = float(slow.abs().max()) if slow.numel() else 0.0
        assert torch.allclose(fast, slow, rtol=1e-5, atol=1e-5 * max(scale, 1e-30)), (name, seed)
