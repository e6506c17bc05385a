"""A cell for the executor tests that need the store (``store_cells:run_then_die``): it opens its
run as a real cell does (run key, parent run, its process's host and pid), then ends as its seed
says: seed 0 finishes its run, seed 1 exits with code 3 and seed 2 is killed with SIGKILL, both
leaving the run RUNNING."""

from __future__ import annotations

import os
import signal
from typing import Any

from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.store.claims import holder_tags


def run_then_die(
    spec: Any,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
) -> Any:
    client = MlflowClient(tracking_uri)
    tags = {layout.tag(layout.RUN_KEY): spec.run_key(), **holder_tags()}
    if parent_run_id:
        tags[layout.PARENT_RUN_TAG] = parent_run_id
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    run_id = client.create_run(experiment_id, tags=tags).info.run_id
    if spec.seed == 1:
        os._exit(3)
    if spec.seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    client.set_terminated(run_id, "FINISHED")
    return None
