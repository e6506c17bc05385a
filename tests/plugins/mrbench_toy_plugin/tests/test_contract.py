"""The toy plugin's own test suite, as a plugin author writes it: mrbench's contract checks on its
task and estimators, one line each. ``tests/test_plugins.py`` runs it with the plugin installed;
mrbench's own test run, where the plugin is not installed, skips it."""

from __future__ import annotations

import pytest

pytest.importorskip("mrbench_toy_plugin", reason="the toy plugin is not installed here")

from mrbench.engine.contract import check_method, check_task


def test_the_task_keeps_the_contract() -> None:
    check_task("mrbench_toy_plugin.task:toy_add")
    check_task("toy-add", {"n_train": 3, "n_eval": 1})  # by its entry point's name, with settings
    check_task("toy-add", {"operands": "teens"})  # its other evaluation dataset


@pytest.mark.parametrize("method", ["mrbench_toy_plugin.methods:toy_centred", "toy-centred", "toy-signed"])
def test_the_estimators_keep_the_contract(method: str) -> None:
    check_method(method)
