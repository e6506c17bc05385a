"""Reward tensors (exact expectations match sampling; per-seed streams) and the analytic policy gradient."""

from __future__ import annotations

import torch

from mrbench.lab.generator import ComponentSpec, NoiseStream, draw_instance, expected_reward, sample_rewards
from mrbench.lab.policy import SoftmaxPolicy, logit_gradient, sample_actions, update
from mrbench.lab.scenarios import scenario_from_dict

MIXED = scenario_from_dict(
    {
        "name": "mixed",
        "components": ["clipped", "free", "flag", "exact"],
        "kinds": ["continuous", "continuous", "binary", "continuous"],
        "scales": [2.0, 0.5, 3.0, 1.0],
        "noise": [1.0, 0.7, 0.8, 0.0],
        "means": [0.3, -0.2, 0.5, 0.1],
        "lows": [-1.0, "-inf", 0, -0.5],
        "highs": [1.5, "inf", 1, 0.5],
        "corr": [[1, 0.6, -0.4, 0], [0.6, 1, 0, 0], [-0.4, 0, 1, 0], [0, 0, 0, 1]],
        "prompts": 3,
        "responses": 5,
        "group_size": 4,
    }
)


def test_expected_reward_matches_the_sampling_mean():
    spec = ComponentSpec.of(MIXED)
    level = torch.tensor([[0.3, -0.2, 0.5, 0.1], [-1.2, 0.9, -0.3, 2.0]], dtype=torch.float64)
    exact = expected_reward(level, spec)
    gen = torch.Generator().manual_seed(0)
    n = 400_000
    y = level.unsqueeze(1) + torch.randn(2, n, 4, generator=gen, dtype=torch.float64) @ spec.noise_factor.T
    sampled = spec.scale * torch.where(spec.binary, (y > 0).double(), torch.clamp(y, spec.low, spec.high))
    assert torch.allclose(sampled.mean(dim=1), exact, atol=6e-3)
    assert exact[1, 3] == 0.5  # noise 0: the clipped level itself (2.0 clipped to 0.5)


def test_noise_has_the_scenario_correlation():
    spec = ComponentSpec.of(MIXED)
    cov = spec.noise_factor @ spec.noise_factor.T
    sigma = torch.tensor(MIXED.noise, dtype=torch.float64)
    expected = torch.tensor(MIXED.corr, dtype=torch.float64) * sigma.outer(sigma)
    assert torch.allclose(cov, expected, atol=1e-12)


def test_each_seed_draws_the_same_numbers_whatever_runs_beside_it():
    spec = ComponentSpec.of(MIXED)
    both = draw_instance(MIXED, [3, 7], spec)
    alone = draw_instance(MIXED, [7], spec)
    p = MIXED.prompts
    assert torch.equal(both.level[p:], alone.level) and torch.equal(both.best[1], alone.best[0])
    s_both, s_alone = NoiseStream(MIXED, [3, 7]), NoiseStream(MIXED, [7])
    for _ in range(60):  # across a chunk boundary
        a, b = s_both.step(), s_alone.step()
        assert torch.equal(a.eps[p:], b.eps) and torch.equal(a.uniform[p:], b.uniform)


def test_sampled_rewards_follow_kinds_and_nan_rules():
    scenario = scenario_from_dict({**_dict(MIXED), "missing": [0.0, 0.3, 0.0, 0.0], "unscorable": 0.2})
    spec = ComponentSpec.of(scenario)
    inst = draw_instance(scenario, range(20), spec)
    stream = NoiseStream(scenario, range(20))
    actions = torch.zeros(inst.level.shape[0], scenario.group_size, dtype=torch.long)
    r = torch.cat([sample_rewards(inst, actions, stream.step(), spec) for _ in range(30)])
    unscorable = torch.isnan(r).all(dim=-1)
    assert 0.15 < unscorable.double().mean() < 0.25
    kept = r[~unscorable]
    assert 0.25 < torch.isnan(kept[:, 1]).double().mean() < 0.35
    assert set(kept[:, 2].unique().tolist()) <= {0.0, 3.0}
    assert kept[:, 0].min() >= -1.0 and kept[:, 0].max() <= 1.5


def _dict(s):
    data = s.to_dict()
    data.pop("missing")
    return data


def test_sample_actions_follows_the_policy():
    probs = torch.tensor([[0.1, 0.6, 0.3], [1.0, 0.0, 0.0]], dtype=torch.float64)
    u = torch.rand(2, 100_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    actions = sample_actions(probs, u)
    freq = torch.stack([(actions == i).double().mean(dim=1) for i in range(3)], dim=1)
    assert torch.allclose(freq, probs, atol=5e-3)


def test_logit_gradient_equals_autograd():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 6, (4, 5), generator=gen)
    coef = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    surrogate = (coef * torch.log_softmax(logits, -1).gather(1, actions)).mean(dim=1).sum()
    (auto,) = torch.autograd.grad(surrogate, logits)
    assert torch.allclose(logit_gradient(actions, coef, torch.softmax(logits, -1).detach()), auto)


def test_linear_policy_gradient_equals_autograd():
    gen = torch.Generator().manual_seed(3)
    s, p, n, d = 2, 3, 4, 5
    features = torch.randn(s, p, n, d, generator=gen, dtype=torch.float64)
    policy = SoftmaxPolicy("linear", seeds=s, prompts=p, responses=n, features=features, lr=1.0)
    w = torch.randn(s, d, generator=gen, dtype=torch.float64)
    policy.theta.copy_(w)
    actions = torch.randint(0, n, (s * p, 3), generator=gen)
    adv = torch.randn(s * p, 3, generator=gen, dtype=torch.float64)
    w_grad = w.clone().requires_grad_(True)
    logp = torch.log_softmax(torch.einsum("spnd,sd->spn", features, w_grad).reshape(-1, n), -1)
    # Per seed: mean over its prompts of the per-prompt mean over rollouts.
    objective = (adv * logp.gather(1, actions)).mean(dim=1).reshape(s, p).mean(dim=1).sum()
    (auto,) = torch.autograd.grad(objective, w_grad)
    update(policy, actions, adv, policy.probs(), epochs=1, clip=None)
    assert torch.allclose(policy.theta - w, auto)


def test_ppo_clip_stops_the_gradient_outside_the_trust_region():
    policy = SoftmaxPolicy("tabular", seeds=1, prompts=1, responses=2, features=torch.empty(0), lr=1.0)
    actions = torch.tensor([[0, 0]])
    adv = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    update(policy, actions, adv, policy.probs(), epochs=5, clip=0.2)
    clipped = policy.probs()[0, 0].item()
    policy_free = SoftmaxPolicy("tabular", seeds=1, prompts=1, responses=2, features=torch.empty(0), lr=1.0)
    update(policy_free, actions, adv, policy_free.probs(), epochs=5, clip=None)
    # One big first step leaves the region: clipped epochs add nothing, unclipped ones keep pushing.
    one = SoftmaxPolicy("tabular", seeds=1, prompts=1, responses=2, features=torch.empty(0), lr=1.0)
    update(one, actions, adv, one.probs(), epochs=1, clip=0.2)
    assert clipped == one.probs()[0, 0].item() < policy_free.probs()[0, 0].item()
