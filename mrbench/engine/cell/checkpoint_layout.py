"""Which files of a training checkpoint hold the model and the optimizer state, in each layout
transformers' ``Trainer`` writes under the cell's ``--distributed`` preset.

A ``checkpoint-<step>/`` folder always has ``scheduler.pt``, ``trainer_state.json`` and one
``rng_state[_<rank>].pth`` per process; the weights and the optimizer state depend on how the
model was trained (transformers 5.24 ``Trainer._save_checkpoint``, accelerate 1.16
``save_fsdp_model``/``save_fsdp_optimizer``, DeepSpeed's ``save_checkpoint``):

- **one process, DDP**: ``optimizer.pt``; the model in ``model.safetensors`` (or its index, or
  ``pytorch_model.bin``).
- **FSDP, FULL_STATE_DICT** (the ``fsdp`` preset): ``optimizer.bin`` and ``pytorch_model_fsdp.bin``,
  each whole, written by rank 0; ``model.safetensors`` too.
- **FSDP, SHARDED_STATE_DICT**: ``optimizer_0/`` and ``pytorch_model_fsdp_0/``, each torch's
  distributed checkpoint: ``.metadata`` and one ``__<rank>_0.distcp`` per process; no
  ``model.safetensors``.
- **DeepSpeed ZeRO** (the ``zero3`` preset): ``global_step<step>/`` with one
  ``[bf16_]zero_pp_rank_<rank>_mp_rank_00_optim_states.pt`` and one
  ``zero_pp_rank_<rank>_mp_rank_00_model_states.pt`` per process (below stage 3 a single
  ``mp_rank_00_model_states.pt``), ``latest`` naming that folder and ``zero_to_fp32.py``;
  ``model.safetensors`` only when the weights are gathered on save (``zero3_save_16bit_model``).

:func:`state_problem` says why the files a checkpoint's marker lists do not make a whole training
state of one of these layouts; :func:`has_optimizer_state` whether a folder on disk holds one;
:func:`training_only` what a kept (``save every:N``) checkpoint drops to become model-only.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
"""A checkpoint's consolidated weights (what ``from_pretrained`` loads)."""
FSDP_SHARDED = ("optimizer_0", "pytorch_model_fsdp_0")
DEEPSPEED_TAG = "global_step{step}"
_OPTIMIZER = ("optimizer.pt", "optimizer.bin", FSDP_SHARDED[0])  # files or folders
_DEEPSPEED_DIR = re.compile(r"global_step\d+")
_DEEPSPEED_OPTIM = re.compile(r"(bf16_)?zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt")
_DEEPSPEED_MODEL = re.compile(r"(zero_pp_rank_(\d+)_)?mp_rank_\d+_model_states\.pt")


def state_problem(files: Collection[str], step: int, processes: int) -> str | None:
    """Why ``files`` (paths relative to a ``checkpoint-<step>/`` folder written by ``processes``
    processes) hold no complete model and optimizer state of any layout above; None if they do."""
    names = set(files)
    if "optimizer.pt" in names:
        return None if any(w in names for w in WEIGHTS) else "its model weights are missing"
    if "optimizer.bin" in names:
        return None if "pytorch_model_fsdp.bin" in names else "pytorch_model_fsdp.bin is missing"
    if any(n.startswith(f"{FSDP_SHARDED[0]}/") for n in names):
        for folder in FSDP_SHARDED:
            shards = [f"{folder}/.metadata", *(f"{folder}/__{r}_0.distcp" for r in range(processes))]
            missing = [s for s in shards if s not in names]
            if missing:
                return f"its sharded state is incomplete ({', '.join(missing)} missing)"
        return None
    tag = DEEPSPEED_TAG.format(step=step)
    inside = [n.removeprefix(f"{tag}/") for n in names if n.startswith(f"{tag}/")]
    if inside:
        optim = {int(m.group(2)) for n in inside if (m := _DEEPSPEED_OPTIM.fullmatch(n))}
        models = [m for n in inside if (m := _DEEPSPEED_MODEL.fullmatch(n))]
        lacking = [r for r in range(processes) if r not in optim]
        if lacking:
            return f"{tag}/ has no optimizer state of rank(s) {', '.join(map(str, lacking))}"
        per_rank = {int(m.group(2)) for m in models if m.group(2) is not None}
        if not models or (per_rank and per_rank != set(range(processes))):
            return f"{tag}/ has no model state of every rank"
        return None
    return "its optimizer state is missing (optimizer.pt, optimizer.bin, optimizer_0/ or global_step<N>/)"


def _deepspeed_dirs(path: Path) -> list[Path]:
    return sorted(d for d in path.iterdir() if d.is_dir() and _DEEPSPEED_DIR.fullmatch(d.name))


def has_optimizer_state(path: Path) -> bool:
    """Whether the folder ``path`` holds an optimizer state of any layout (a training checkpoint,
    not a model-only one)."""
    if not path.is_dir():
        return False
    if any((path / name).exists() for name in _OPTIMIZER):
        return True
    return any(_DEEPSPEED_OPTIM.fullmatch(f.name) for d in _deepspeed_dirs(path) for f in d.iterdir())


def training_only(path: Path) -> list[Path]:
    """What of the checkpoint ``path`` only resuming needs (its RNG states aside): the optimizer
    state and scheduler of every layout and, when the checkpoint has consolidated weights
    (:data:`WEIGHTS`), the sharded copies of the model. Without them (ZeRO-3 not gathering 16-bit
    weights) DeepSpeed's model states are the only weights and stay, with ``latest`` and
    ``zero_to_fp32.py`` that turn them into a state dict; only their optimizer files go."""
    found = [path / name for name in (*_OPTIMIZER, "scheduler.pt", "scaler.pt") if (path / name).exists()]
    if any((path / w).exists() for w in WEIGHTS):
        copies = ("pytorch_model_fsdp.bin", FSDP_SHARDED[1], "latest", "zero_to_fp32.py")
        found += [path / name for name in copies if (path / name).exists()]
        found += _deepspeed_dirs(path)
    else:
        for folder in _deepspeed_dirs(path):
            found += sorted(f for f in folder.iterdir() if _DEEPSPEED_OPTIM.fullmatch(f.name))
    return found
