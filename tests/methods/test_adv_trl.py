"""``grpo`` and ``gdpo`` equal TRL 1.16's built-in multi-objective aggregations.

The reference here is TRL's own code, executed: the block of
``GRPOTrainer._generate_and_score_completions`` that turns ``rewards_per_func`` into
``advantages`` (trl/trainer/grpo_trainer.py, lines ~2755-2812 in TRL 1.16.0, from
``unscorable_mask = …`` to ``advantages = torch.nan_to_num(advantages, nan=0.0)``) and
``trl.trainer.utils.nanstd`` (utils.py ~line 1021). Both are read from the installed sources and
run on a stand-in ``self`` carrying the attributes the block reads. Reading the source instead of
importing ``trl`` keeps this test fast (importing ``trl.trainer`` pulls in transformers, ~5 s);
if TRL's code moves, the markers are not found and the test fails loudly rather than passing.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from adv_inputs import random_rewards, random_weights

from mrbench.methods import compute_advantages

TRL_EPS = 1e-4
START = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"
END = "advantages = torch.nan_to_num(advantages, nan=0.0)"


def _trl_dir() -> Path:
    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.submodule_search_locations, "trl is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def _function_source(path: Path, name: str) -> str:
    text = path.read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            segment = ast.get_source_segment(text, node)
            assert segment is not None
            return segment
    raise AssertionError(f"{name} not found in {path}")


def _aggregation_block(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, f"TRL's aggregation block moved in {path}"
    start = text.rindex("\n", 0, text.index(START)) + 1
    end = text.index(END) + len(END)
    return textwrap.dedent(text[start:end])


@pytest.fixture(scope="module")
def trl_advantages():
    """``f(rewards[P, G, K], weights[K], aggregation) -> [P, G]`` running TRL's own code."""
    assert importlib.metadata.version("trl") == "1.16.0", "this cross-check pins TRL 1.16.0's code"
    trl_dir = _trl_dir()
    namespace: dict = {"torch": torch}
    exec(_function_source(trl_dir / "trainer" / "utils.py", "nanstd"), namespace)
    block = compile(_aggregation_block(trl_dir / "trainer" / "grpo_trainer.py"), "trl-aggregation", "exec")

    def run(rewards: torch.Tensor, weights: torch.Tensor, aggregation: str) -> torch.Tensor:
        p, g, k = rewards.shape
        fake_self = SimpleNamespace(
            multi_objective_aggregation=aggregation,
            scale_rewards="group",
            reward_weights=weights,
            reward_funcs=[None] * k,
        )
        scope = {
            **namespace,
            "self": fake_self,
            "rewards_per_func": rewards.reshape(p * g, k).clone(),
            "num_generations": g,
            "device": rewards.device,
        }
        exec(block, scope)
        return scope["advantages"].reshape(p, g)

    return run


@pytest.mark.parametrize(
    ("name", "aggregation"), [("grpo", "sum_then_normalize"), ("gdpo", "normalize_then_sum")]
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_trl(trl_advantages, name: str, aggregation: str, dtype: torch.dtype) -> None:
    for seed in range(10):
        r = random_rewards(seed, shape=(8, 6, 4), scale_exp=(-2, 3), nan_frac=0.1, unscorable_frac=0.1)
        # TRL keeps a group's lone scorable rollout in GDPO's batch statistics (with S = 0) where
        # we drop it; give every group at least two scorable rollouts so the two agree.
        r[:, :2] = torch.nan_to_num(r[:, :2], nan=0.5)
        r = r.to(dtype)
        w = random_weights(seed, 4, dtype)
        ours = compute_advantages(name, r, w, eps=TRL_EPS)
        theirs = trl_advantages(r, w, aggregation)
        # TRL's nanstd computes Bessel's factor count / (count − 1) from integer counts, i.e. in
        # float32 (torch's default dtype), so even on float64 input it is off by ~1e-8 relative.
        tol = 1e-6 if dtype == torch.float64 else 1e-4
        assert torch.allclose(ours, theirs, rtol=tol, atol=tol), (name, seed, (ours - theirs).abs().max())


def test_grpo_matches_trl_with_tiny_groups(trl_advantages) -> None:
    # For GRPO, TRL also yields 0 for groups with < 2 scorable rollouts (its nanstd is NaN there).
    r = random_rewards(3, shape=(6, 4, 3), scale_exp=(0, 2))
    r[0, 1:] = torch.nan
    r[1] = torch.nan
    r[2, :, 0] = torch.nan
    w = random_weights(3, 3)
    assert torch.allclose(
        compute_advantages("grpo", r, w, eps=TRL_EPS), trl_advantages(r, w, "sum_then_normalize")
    )


def test_constant_group_at_large_scale_is_exactly_zero_unlike_trl(trl_advantages) -> None:
    # A constant group whose float32 mean is off by one ulp: TRL centres every rollout to the same
    # nonzero residual and divides by an equally tiny std, handing the whole group an advantage
    # of ~+0.97. Here the group is recognised as constant and gets exactly 0.
    r = torch.tensor([123456789.0, 0.3, 987654.321]).expand(1, 16, 3).clone()
    w = torch.ones(3)
    assert torch.all(compute_advantages("grpo", r, w, eps=TRL_EPS) == 0)
    assert torch.all(trl_advantages(r, w, "sum_then_normalize") > 0.5)
