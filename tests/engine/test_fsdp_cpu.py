"""``--distributed fsdp`` on the CPU: accelerate's FSDP2 path over gloo (:mod:`mrbench.engine.sharding`).

The default test builds accelerate's ``Accelerator`` in a real 2-process gloo world
(:mod:`fsdp_world`), with the environment ``accelerate launch`` gives an ``fsdp`` preset's worker,
and checks that it shards (FSDP2
``DTensor`` parameters, one AdamW step) and reduces gradients in float32 under bf16 mixed
precision. Without mrbench's adjustment accelerate keeps such a process ``MULTI_CPU`` (DDP) and its
policy reduces in bfloat16.

The slow test trains a real 2-process FSDP cell (``mrbench run --processes-per-cell 2
--distributed fsdp``), which checkpoints in FSDP's layout, kills it with SIGKILL, resumes it and
checks it ends bit for bit as the uninterrupted FSDP cell (the machinery of
``test_resume_distributed.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from fsdp_world import WORLD


def test_an_fsdp_worker_on_the_cpu_shards_and_reduces_gradients_in_float32(fsdp_world: Path) -> None:
    for r in range(WORLD):
        reports = json.loads((fsdp_world / f"rank{r}.json").read_text())
        assert reports["adapted"] == {
            "type": "DistributedType.FSDP",
            "param": "DTensor",  # FSDP2's sharded parameters
            "param_dtype": "torch.float32",  # the masters the update is applied to
            "reduce_dtype": "torch.float32",
            "compute_dtype": "torch.bfloat16",
        }
        # What mrbench.engine.sharding exists for (accelerate 1.16): plain DDP over gloo.
        assert reports["plain"]["type"] == "DistributedType.MULTI_CPU"
        assert reports["plain"]["param"] == "Parameter"
