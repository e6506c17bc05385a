"""The rollout contract: a batch whose parts disagree in size is refused when it is built."""

from __future__ import annotations

import pytest

from mrbench.core.rollout import RolloutBatch


def test_consistent_batch_is_accepted() -> None:
    batch = RolloutBatch([[1, 2], [3]], [[4, 5, 6], []], [[1, 0, 1], []], columns={"outcome": ["a", "b"]})
    assert batch.columns["outcome"] == ["a", "b"]
    assert RolloutBatch([], [], []).columns == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"completion_ids": [[4]], "env_mask": [[1]]}, "batch sizes differ"),
        ({"env_mask": [[1], [1, 1]]}, "episode 1: 1 completion tokens but 2 mask entries"),
        ({"columns": {"outcome": ["a"]}}, "column 'outcome' has 1 values for 2 episodes"),
    ],
)
def test_inconsistent_batch_is_refused(kwargs: dict, message: str) -> None:
    parts = {"prompt_ids": [[1], [2]], "completion_ids": [[3], [4]], "env_mask": [[1], [1]], **kwargs}
    with pytest.raises(ValueError, match=message):
        RolloutBatch(**parts)
