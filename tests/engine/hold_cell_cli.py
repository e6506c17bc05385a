"""``python tests/engine/hold_cell_cli.py READY -- <mrbench arguments>``: a real ``mrbench`` command
whose cell, once its MLflow run is open, writes that run's id to the file READY and then holds the
cell (it sleeps where it would load the policy) until it is killed.

Stands in for a long training run in the claim tests: the command line, the run key, the store
and the cell folder are those of a real ``mrbench run``; only the work in the middle is missing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from mrbench.cli.app import main
from mrbench.engine.cell import runner

READY = Path(sys.argv[1])


def _hold(run: Any) -> None:
    partial = READY.with_name(READY.name + ".partial")
    partial.write_text(run.run_id)
    partial.replace(READY)
    time.sleep(600)
    raise AssertionError("held for 600 s: the test did not kill this process")


if __name__ == "__main__":
    runner._load_policy = _hold
    sys.argv = ["mrbench", *sys.argv[sys.argv.index("--") + 1 :]]
    main()
