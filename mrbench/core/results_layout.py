"""The results folder's layout: the one place its file and folder names are spelled.

Everything mrbench keeps on disk outside the MLflow store's own tables lives under one results
folder (``results/`` by default; :func:`mrbench.store.local.results_dir` says which)::

    <results>/
        mlflow.db                    the local MLflow store, unless --tracking-uri names another
        artifacts/<run id>/          its artifacts
        models/<preset>/final/       presets built or converted here, each with mrbench_model.json
        eval_cache/<key>.json        pre-training evaluations, one per (model, task, eval split)
        logs/<command>-<time>-<pid>.log    what libraries printed in commands that run no cell
        logs/<sweep>/                a sweep's own log and its cells' launch logs
        checkpoints/<run key>/       one cell (:class:`CellPaths`):
            cell.lock                who runs the cell now (an flock that dies with its process)
            cell.log                 what the libraries printed (cell.rank<N>.log for rank N > 0)
            progress.json            the phase the cell is in, for the sweep's progress line
            final/                   the trained policy and its tokenizer
            checkpoint-<step>/       training checkpoints, each with mrbench-resume.json
            pending/record.json      what the run could not log while its store was down

A model folder mrbench made (a preset, a trained cell's ``final/``) carries ``mrbench_model.json``
(:data:`MODEL_MARKER`): the task settings the model was built for. Paths only: nothing here
touches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STORE_DB = "mlflow.db"
ARTIFACTS_DIR = "artifacts"
MODELS_DIR = "models"
EVAL_CACHE_DIR = "eval_cache"
LOGS_DIR = "logs"
CHECKPOINTS_DIR = "checkpoints"
SWEEP_LOG = "sweep.log"

MODEL_MARKER = "mrbench_model.json"  # in a model folder mrbench made: its task settings
RESUME_MARKER = "mrbench-resume.json"  # in a training checkpoint: the run it belongs to
STEP_PREFIX = "checkpoint-"  # transformers' name for a step checkpoint folder

CELL_LOCK = "cell.lock"
CELL_LOG = "cell.log"
PROGRESS = "progress.json"
FINAL_DIR = "final"
PENDING_DIR = "pending"
PENDING_RECORD = "record.json"


def models_dir(results: Path) -> Path:
    """``<results>/models``: presets built or converted here."""
    return results / MODELS_DIR


def eval_cache_file(results: Path, key: str) -> Path:
    """``<results>/eval_cache/<key>.json``."""
    return results / EVAL_CACHE_DIR / f"{key}.json"


def logs_dir(results: Path) -> Path:
    """``<results>/logs``: logs of commands that run no cell."""
    return results / LOGS_DIR


def sweep_logs_dir(results: Path, sweep_slug: str) -> Path:
    """``<results>/logs/<sweep>``: a sweep's log (:data:`SWEEP_LOG`) and its cells' launch logs."""
    return results / LOGS_DIR / sweep_slug


def store_db(results: Path) -> Path:
    """``<results>/mlflow.db``: the local MLflow store."""
    return results / STORE_DB


def run_artifacts_dir(results: Path, run_id: str) -> Path:
    """``<results>/artifacts/<run id>/artifacts``: one run's artifacts in the local store (MLflow's
    layout under its artifact root)."""
    return results / ARTIFACTS_DIR / run_id / "artifacts"


def step_dir_name(step: int) -> str:
    """``checkpoint-<step>``, the folder transformers writes a training checkpoint to."""
    return f"{STEP_PREFIX}{step}"


@dataclass(frozen=True)
class CellPaths:
    """The folder of one run key, ``<results>/checkpoints/<run key>`` (see the module docstring).

    >>> cell = CellPaths.of(Path("/r"), "abc")
    >>> str(cell.root), str(cell.record_path), cell.log_path(2).name, cell.progress_path().name
    ('/r/checkpoints/abc', '/r/checkpoints/abc/pending/record.json', 'cell.rank2.log', 'progress.json')
    """

    root: Path

    @classmethod
    def of(cls, results: Path, run_key: str) -> CellPaths:
        return cls(results / CHECKPOINTS_DIR / run_key)

    @property
    def results(self) -> Path:
        """The results folder this cell folder is in."""
        return self.root.parent.parent

    @property
    def final(self) -> Path:
        return self.root / FINAL_DIR

    @property
    def pending(self) -> Path:
        return self.root / PENDING_DIR

    @property
    def record_path(self) -> Path:
        return self.pending / PENDING_RECORD

    @property
    def lock_path(self) -> Path:
        return self.root / CELL_LOCK

    def log_path(self, rank: int = 0) -> Path:
        """``cell.log`` for rank 0, ``cell.rank<N>.log`` for rank N."""
        return self.root / (f"{Path(CELL_LOG).stem}.rank{rank}.log" if rank else CELL_LOG)

    def progress_path(self, rank: int = 0) -> Path:
        """``progress.json`` for rank 0, ``.rank<N>.progress.json`` (hidden) for rank N."""
        return self.root / (f".rank{rank}.{PROGRESS}" if rank else PROGRESS)
