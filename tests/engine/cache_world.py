"""A rank of a gloo world for :mod:`test_eval_cache` (a module of its own, so that the spawned
processes import only what they use)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mrbench.engine.evaluation import eval_cache


def cache_on_rank(rank: int, world: int, rendezvous: str, root: str) -> None:
    """Rank ``rank`` of a gloo world, each with a results folder of its own: only rank 0's holds
    an entry. Writes what this rank read and whether its write left a file."""
    import torch.distributed as dist

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world)})
    os.environ["MRBENCH_RESULTS"] = f"{root}/results{rank}"
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    if rank == 0:
        eval_cache.write("k", {"m": 0.5}, [{"id": 1}], "run-of-rank-0")
    with eval_cache.computing("k"):
        cached = eval_cache.read("k")
    eval_cache.write("fresh", {"m": 1.0}, [], "" if rank else "run-of-rank-0")
    written = sorted(p.name for p in (Path(root) / f"results{rank}" / "eval_cache").glob("*.json"))
    result = {"run_id": cached.run_id if cached else None, "written": written}
    Path(root, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
