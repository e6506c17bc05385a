"""``rewards.npz`` (:class:`~mrbench.core.rewards_record.RewardsRecord`) and the engine's
:class:`~mrbench.engine.training.reward_log.RewardLog` that fills it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mrbench.core.records import RecordError
from mrbench.core.rewards_record import RewardsRecord
from mrbench.engine.training.reward_log import RewardLog, group_prompt_ids, prompt_id


def _record(t: int = 3, p: int = 2, g: int = 4, k: int = 3) -> RewardsRecord:
    rng = np.random.default_rng(0)
    rewards = rng.random((t, p, g, k)).astype(np.float32)
    rewards[0, 0, 1] = np.nan  # an unscorable rollout
    rewards[1, 1, 2, 0] = np.nan  # a component not scored
    ids = rng.integers(0, 2**62, (t, p))
    return RewardsRecord(
        ("a", "b", "c")[:k], (1.0, 0.5, 2.0)[:k], rewards, ids, np.arange(t * p).reshape(t, p)
    )


def test_a_record_round_trips_in_float16_with_its_nans(tmp_path: Path) -> None:
    record = _record()
    record.save(tmp_path / "r.npz")
    back = RewardsRecord.load(tmp_path / "r.npz")
    assert back.components == ("a", "b", "c") and back.weights == (1.0, 0.5, 2.0)
    expected = np.asarray(record.rewards, dtype=np.float16).astype(np.float64)
    assert np.array_equal(back.rewards, expected, equal_nan=True)
    assert np.array_equal(back.prompt_ids, record.prompt_ids) and back.response_ids is None
    with np.load(tmp_path / "r.npz") as raw:
        assert raw["rewards"].dtype == np.float16


def test_rewards_beyond_float16_are_kept_in_float32(tmp_path: Path) -> None:
    record = _record()
    record.rewards[2, 0, 0, 0] = 1e6
    record.save(tmp_path / "r.npz")
    assert RewardsRecord.load(tmp_path / "r.npz").rewards[2, 0, 0, 0] == 1e6


def test_a_paper_cell_record_stays_a_few_megabytes(tmp_path: Path) -> None:
    """The paper preset: 1,238 steps × 32 groups × G 8 × 7 components (5 binary, 2 continuous in
    [0, 1], the worst case for compression: independent uniform values)."""
    rng = np.random.default_rng(0)
    rewards = np.empty((1238, 32, 8, 7), dtype=np.float32)
    rewards[..., :5] = rng.random((1238, 32, 8, 5)) < 0.5
    rewards[..., 5:] = rng.random((1238, 32, 8, 2))
    record = RewardsRecord(
        tuple("abcdefg"),
        (1.0,) * 7,
        rewards,
        rng.integers(0, 2**62, (1238, 32)),
        np.arange(1238 * 32).reshape(1238, 32),
    )
    record.save(tmp_path / "r.npz")
    assert (tmp_path / "r.npz").stat().st_size < 3e6


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: p.write_text("not a zip"), "is not a rewards file"),
        (lambda p: np.savez(p, rewards=np.zeros((2, 2, 2, 2))), "it lacks components, weights"),
        (
            lambda p: np.savez(
                p,
                components=np.array(["a"]),
                weights=np.ones(1),
                rewards=np.zeros((2, 2, 2, 1)),
                prompt_ids=np.zeros((2, 3), dtype=np.int64),
                group_ids=np.zeros((2, 2), dtype=np.int64),
            ),
            "prompt_ids has shape (2, 3), but rewards [2, 2, 2, 1] need (2, 2)",
        ),
        (
            lambda p: np.savez(
                p,
                components=np.array(["a"]),
                weights=np.ones(1),
                rewards=np.zeros((2, 2)),
                prompt_ids=np.zeros((2, 2), dtype=np.int64),
                group_ids=np.zeros((2, 2), dtype=np.int64),
            ),
            "rewards must be a float array [steps, prompts, G, K]",
        ),
    ],
)
def test_a_file_that_is_not_a_record_is_named(tmp_path: Path, write, message: str) -> None:
    path = tmp_path / "bad.npz"
    write(path)
    with pytest.raises(RecordError, match=r"bad\.npz") as err:
        RewardsRecord.load(path, str(path))
    assert message in str(err.value)


def test_the_log_pads_short_batches_and_survives_a_checkpoint(tmp_path: Path) -> None:
    log = RewardLog()
    log.add(np.ones((2, 3, 2)), [5, 6])
    log.add(np.zeros((1, 3, 2)), [7])  # a last batch with one group
    record = log.record(["x", "y"], [1.0, 1.0])
    assert record.rewards.shape == (2, 2, 3, 2)
    assert record.group_ids.tolist() == [[0, 1], [2, -1]] and record.prompt_ids.tolist() == [[5, 6], [7, -1]]
    assert np.isnan(record.rewards[1, 1]).all()
    log.save(tmp_path / "ckpt.npz")
    back = RewardLog.load(tmp_path / "ckpt.npz").record(["x", "y"], [1.0, 1.0])
    assert np.array_equal(back.rewards, record.rewards, equal_nan=True)
    assert back.prompt_ids.tolist() == record.prompt_ids.tolist()
    assert RewardLog.load(tmp_path / "none.npz").batches == []  # a checkpoint from before rewards were kept


def test_prompt_ids_are_one_per_group_and_stable() -> None:
    prompts = ["old"] * 4 + ["p"] * 2 + [[{"role": "user", "content": "q"}]] * 2
    ids = group_prompt_ids(prompts, groups=2, group_size=2)
    assert ids == [prompt_id("p"), prompt_id([{"role": "user", "content": "q"}])]
    assert prompt_id("p") == prompt_id("p") >= 0 and prompt_id("p") != prompt_id("q")
    assert group_prompt_ids(["p"] * 2, groups=2, group_size=2) == [-1, prompt_id("p")]
