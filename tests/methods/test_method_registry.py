"""Contract tests over every registered method, and the registry's user-facing errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from mrbench.core.errors import PluginError, RegistryError, UnknownNameError, UnknownParamError
from mrbench.core.registry import Entry
from mrbench.engine.contract import (
    METHOD_CHECKS,
    ContractError,
    check_method,
    method_shapes,
    method_signature,
    method_unscorable,
)
from mrbench.methods import METHODS, compute_advantages, get_method, register_method

EXPECTED = {"grpo", "dr-grpo", "gdpo", "gdpo-nobn", "corrgrpo", "corrgrpo-guarded", "gdpo-corr"}


def test_expected_names_registered() -> None:
    assert set(METHODS.names()) == EXPECTED


@pytest.mark.parametrize("check", METHOD_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_shipped_contract_checks(name: str, check: Callable[[Entry], None]) -> None:
    check(get_method(name))  # the checks a plugin runs on its own estimator (mrbench.engine.contract)


def test_check_method_in_one_line() -> None:
    check_method("gdpo")
    check_method("mrbench.methods.grpo:dr_grpo")


def _counts_unscorable(rewards, weights):  # pragma: no cover - only inspected
    """Centred total with NaN as 0: an unscorable rollout moves its group. [P, G, K], [K] -> [P, G]."""
    total = torch.nan_to_num(rewards, nan=0.0, posinf=0.0, neginf=0.0) @ weights
    return total - total.mean(dim=1, keepdim=True)


def _wrong_shape(rewards, weights):  # pragma: no cover - only inspected
    """One number per prompt. [P, G, K], [K] -> [P] (wrong)."""
    return rewards.sum(dim=(1, 2))


@pytest.mark.parametrize(
    ("fn", "check", "says"),
    [
        (_counts_unscorable, method_unscorable, "must get advantage 0 and leave its group's others"),
        (_wrong_shape, method_shapes, "rewards (3, 5, 2) gave (3,), expected (3, 5)"),
        (lambda r, w: r, method_signature, "must take (rewards, weights, *, <hyper-parameters>)"),
    ],
)
def test_the_checks_say_what_does_not_fit(fn: Callable, check: Callable[[Entry], None], says: str) -> None:
    with pytest.raises(ContractError, match=re.escape(says)):
        check(Entry("bad", fn, "summary"))


def test_unknown_name_suggests() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_method("grpoo")
    assert "grpo" in info.value.suggestions
    assert "did you mean" in str(info.value).lower()
    with pytest.raises(UnknownNameError):
        compute_advantages("corr-grpo", torch.zeros(1, 2, 1))


def test_duplicate_registration_refused() -> None:
    def again(rewards, weights):  # pragma: no cover - never called
        return rewards

    with pytest.raises(RegistryError, match="already registered"):
        register_method("grpo")(again)
    assert get_method("grpo").obj.__name__ == "grpo"


def test_method_signature_checked_when_registered() -> None:
    def one_input(rewards, *, eps: float = 1e-6):  # pragma: no cover - never called
        return rewards

    with pytest.raises(TypeError, match=r"a method takes \(rewards, weights, \*"):
        register_method("one-input")(one_input)
    assert "one-input" not in METHODS


def test_module_path_names_a_method_by_the_given_string() -> None:
    entry = get_method("mrbench.methods.grpo:dr_grpo")
    assert entry.name == "mrbench.methods.grpo:dr_grpo" and entry.obj is get_method("dr-grpo").obj
    r = torch.randn(2, 4, 3)
    assert torch.equal(
        compute_advantages("mrbench.methods.grpo:dr_grpo", r), compute_advantages("dr-grpo", r)
    )
    with pytest.raises(PluginError, match="method 'torch:cat' does not fit: cannot read the parameters"):
        get_method("torch:cat")
    with pytest.raises(PluginError, match="No module named 'no_such_module_xyz'"):
        get_method("no_such_module_xyz:fn")


def test_unknown_param_refused_and_strings_coerced() -> None:
    r = torch.randn(2, 4, 3)
    with pytest.raises(UnknownParamError, match=r"'epsilon'.*Did you mean 'eps'"):
        compute_advantages("grpo", r, epsilon=1e-4)
    with pytest.raises(UnknownParamError):
        compute_advantages("dr-grpo", r, eps=1e-4)
    assert torch.equal(compute_advantages("grpo", r, eps="1e-4"), compute_advantages("grpo", r, eps=1e-4))
    with pytest.raises(RegistryError, match="bad value"):
        compute_advantages("grpo", r, eps="tiny")


def test_bad_shapes_named() -> None:
    with pytest.raises(ValueError, match=r"\(4, 3\)"):
        compute_advantages("grpo", torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\).*\(2,\)"):
        compute_advantages("grpo", torch.zeros(1, 4, 3), torch.ones(2))
    with pytest.raises(ValueError, match="finite"):
        compute_advantages("grpo", torch.zeros(1, 4, 2), torch.tensor([1.0, float("nan")]))


def test_default_weights_are_ones() -> None:
    r = torch.randn(3, 4, 2, dtype=torch.float64)
    assert torch.equal(compute_advantages("gdpo", r), compute_advantages("gdpo", r, torch.ones(2)))


def test_import_does_no_work() -> None:
    # Importing methods must not pull in the heavy stack (TRL, transformers) or touch the disk.
    heavy = "('trl', 'transformers', 'mlflow')"
    code = f"import sys, mrbench.methods; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("builtins:exec", "method 'builtins:exec' does not fit: an estimator takes (rewards, weights, *"),
        ("this:s", "method 'this:s' does not fit: it is a str, not a function"),
    ],
)
def test_a_method_name_must_name_an_estimator(name: str, says: str, tmp_path) -> None:
    """Not any callable: `builtins:exec` used to give a 3-cell grid, and `this:s` printed the Zen of
    Python while the sweep was validated."""
    proc = subprocess.run(
        [sys.executable, "-m", "mrbench", "sweep", "--methods", name, "--tasks", "tool-calling", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")},
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Beautiful is better" not in proc.stdout + proc.stderr
