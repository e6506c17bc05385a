"""The process group of a multi-process cell waits 30 minutes for a slow rank, as
``TrainingArguments.ddp_timeout`` says (finding 8 of issue 33).

A cell's ranks start their group in :func:`mrbench.engine.processes.distributed.from_rank0`, before the
trainer: accelerate's ``PartialState`` created there without a timeout left torch's default (10
minutes for NCCL), and the trainer's ``ddp_timeout`` could no longer change it. The world of
:mod:`fsdp_world` is started that way; each rank records the timeout ``from_rank0`` handed
accelerate and the one its gloo group got.
"""

from __future__ import annotations

import json
from pathlib import Path

from fsdp_world import WORLD

from mrbench.engine.processes.distributed import process_group_timeout


def test_from_rank0_starts_the_group_with_the_trainers_timeout(fsdp_world: Path) -> None:
    assert process_group_timeout().total_seconds() == 1800  # TrainingArguments.ddp_timeout's default
    for r in range(WORLD):
        group = json.loads((fsdp_world / f"rank{r}.json").read_text())["group"]
        assert group == {"given": "0:30:00", "gloo": "0:30:00"}
