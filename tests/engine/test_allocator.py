"""glibc's allocator in CPU compute processes: big blocks from the heap and kept after they are
freed (``MRBENCH_MALLOC=keep``, the default), glibc's own settings with ``default`` or a GPU."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.processes import allocator

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt: Linux only"
)

BLOCK = 64 << 20  # above glibc's largest adaptive mapping threshold (32 MiB)

# In a fresh interpreter (mallopt changes the whole process): apply the setting, allocate a block
# through torch, free it, and report glibc's own counters (mallinfo2) around it.
PROBE = f"""
import ctypes, json
from mrbench.engine.processes.allocator import keep_freed_blocks

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
kept = keep_freed_blocks()
import torch
before = libc.mallinfo2()
block = torch.empty({BLOCK}, dtype=torch.uint8)
block.fill_(1)
during = libc.mallinfo2()
del block
after = libc.mallinfo2()
print(json.dumps({{
    "kept": kept,
    "mapped": during.hblkhd - before.hblkhd,
    "free_heap_after": after.fordblks,
}}))
"""


def _probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("MRBENCH_MALLOC", "CUDA_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_cpu_process_takes_big_blocks_from_the_heap_and_keeps_them_when_freed() -> None:
    out = _probe(CUDA_VISIBLE_DEVICES="")
    assert out["kept"] is True
    assert out["mapped"] == 0  # glibc would map a 64 MiB block of its own
    assert out["free_heap_after"] >= BLOCK  # freed, but kept for the next block


def test_default_leaves_glibc_alone_and_its_block_is_mapped_and_returned() -> None:
    out = _probe(CUDA_VISIBLE_DEVICES="", MRBENCH_MALLOC="default")
    assert out["kept"] is False
    assert out["mapped"] >= BLOCK
    assert out["free_heap_after"] < BLOCK


def test_a_process_that_sees_a_gpu_leaves_glibc_alone() -> None:
    out = _probe(CUDA_VISIBLE_DEVICES="0")
    assert out["kept"] is False and out["mapped"] >= BLOCK


def test_the_setting_is_read_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MRBENCH_MALLOC", raising=False)
    assert allocator.malloc_setting() == "keep"
    monkeypatch.setenv("MRBENCH_MALLOC", " default ")
    assert allocator.malloc_setting() == "default"
    monkeypatch.setenv("MRBENCH_MALLOC", "jemalloc")
    with pytest.raises(UserError, match=r"MRBENCH_MALLOC='jemalloc' must be 'keep' or 'default'"):
        allocator.malloc_setting()


def test_only_the_first_call_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_state", [False])
    monkeypatch.setenv("MRBENCH_MALLOC", "jemalloc")  # not read again
    assert allocator.keep_freed_blocks() is False
