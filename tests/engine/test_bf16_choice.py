"""``precision: auto`` trains in bfloat16 mixed precision only on a GPU that computes in it (Ampere
or newer), not on an older one where torch only emulates bfloat16 (finding 6 of issue 33).

torch 2.13's ``torch.cuda.is_bf16_supported()`` counts emulation by default, so it says yes on a
V100 or T4; no GPU is needed to check which question mrbench asks: torch's two answers for such a
GPU stand in for it.
"""

from __future__ import annotations

import pytest
import torch

from mrbench.engine.models.catalog import bf16_supported, mixed_precision


def _gpu(monkeypatch: pytest.MonkeyPatch, *, ampere: bool) -> None:
    """torch's answers on a GPU of compute capability 8.x (``ampere``) or 7.x, which emulates bf16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: ampere or including_emulation
    )


def test_auto_is_float32_on_a_gpu_that_only_emulates_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, ampere=False)
    assert torch.cuda.is_bf16_supported()  # torch's default question: emulation counts
    assert not bf16_supported() and not mixed_precision("auto")
    assert mixed_precision("bf16")  # asked for: mixed precision anyway


def test_auto_is_bf16_on_ampere_or_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, ampere=True)
    assert bf16_supported() and mixed_precision("auto") and not mixed_precision("fp32")
