"""Cells for the tests of the cell server (``server_cells:facts_cell``): each records where and how
it runs, then ends as its seed says. Standard library only, so that a cell started without the
server's preload starts fast too.

Imported by a cell server, this module can also misbehave on purpose (``$MRBENCH_TEST_SERVER``):
``die`` exits the server while it preloads, ``thread`` starts a thread in it, ``garbage`` writes a
line that is no reply on its reply pipe.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RECORD_ENV = "MRBENCH_TEST_CELL_RECORD"
"""The folder where each cell writes ``<seed>.json`` (what it saw) and ``<seed>.end`` (how it ended)."""
SECONDS_ENV = "MRBENCH_TEST_CELL_SECONDS"
MISCHIEF_ENV = "MRBENCH_TEST_SERVER"
CRASH_SEEDS = {1: "exit", 2: "sigkill"}
ENV_SEEN = ("OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES", "JE_ARROW_MALLOC_CONF")


def _in_cell_server() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") == "mrbench.sweeps.cell_server"


if _in_cell_server():
    if os.environ.get(MISCHIEF_ENV) == "die":
        os._exit(7)
    if os.environ.get(MISCHIEF_ENV) == "thread":
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    if os.environ.get(MISCHIEF_ENV) == "garbage":  # argv: the server's path, SWEEP_PID, REPLY_FD
        os.write(int(sys.argv[2]), b"garbage\n")


@dataclass(frozen=True)
class TinySpec:
    """Just what an executor reads of a spec."""

    method: str = "grpo"
    task: str = "tool-calling"
    model: str = "tiny"
    seed: int = 0

    def run_key(self) -> str:
        return f"key{self.seed:04d}"

    def label(self) -> str:
        return f"{self.method}|{self.task}|{self.model}|s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TinySpec:
        return cls(**data)


def _facts() -> dict[str, Any]:
    ppid = os.getppid()
    torch = sys.modules.get("torch")
    return {
        "entered": time.time(),
        "pid": os.getpid(),
        "ppid": ppid,
        "sid": os.getsid(0),
        "parent_cmdline": Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(),
        "parent_threads": len(os.listdir(f"/proc/{ppid}/task")),
        "torch_loaded": torch is not None,
        # what a real cell imports later, when it trains and logs to a local store
        "trainer_loaded": "trl.trainer.grpo_trainer" in sys.modules,
        "store_loaded": "mlflow.store.tracking.sqlalchemy_store" in sys.modules,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "env": {k: os.environ.get(k) for k in ENV_SEEN},
    }


def facts_cell(
    spec: TinySpec,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
) -> Any:
    """Record what the cell sees, print a line (to its log), then finish, crash or wait to be stopped."""
    record = Path(os.environ[RECORD_ENV])
    (record / f"{spec.seed}.json").write_text(json.dumps(_facts()))
    print(f"cell s{spec.seed} says hello", flush=True)
    crash = CRASH_SEEDS.get(spec.seed)
    if crash == "exit":
        os._exit(3)
    if crash == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        end = time.monotonic() + float(os.environ.get(SECONDS_ENV, "0") or 0)
        while time.monotonic() < end:
            time.sleep(0.05)
    except KeyboardInterrupt:
        (record / f"{spec.seed}.end").write_text("KILLED")
        raise
    (record / f"{spec.seed}.end").write_text("FINISHED")
    return None
