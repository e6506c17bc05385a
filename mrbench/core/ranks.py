"""Which process of a multi-process cell this is, from the variables its launcher sets
(``torchrun``'s ``RANK`` and ``WORLD_SIZE``; ``accelerate launch`` and mrbench's forked ranks set
them too). Outside a multi-process cell: rank 0 of 1."""

from __future__ import annotations

import os


def world_size() -> int:
    """Processes of this cell (``$WORLD_SIZE``, set by the launcher; 1 outside a multi-process cell)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    """This process's rank in its cell (``$RANK``; 0 outside a multi-process cell)."""
    return int(os.environ.get("RANK", "0") or 0)


def is_main_process() -> bool:
    """True on rank 0, the only process that logs and writes the cell's folder."""
    return rank() == 0
