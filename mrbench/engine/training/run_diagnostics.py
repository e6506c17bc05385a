"""Run means of the per-step advantage diagnostics a cell writes to ``diagnostics.json``.

The trainer (:mod:`mrbench.engine.training.trainer`) adds one step's diagnostics
(:func:`mrbench.methods.diagnostics.diagnostics` and
:func:`~mrbench.methods.diagnostics.shadow_diagnostics`) after each scored batch; the runner writes
the summary at the end of the cell.
"""

from __future__ import annotations

from typing import Any

from mrbench.core import layout
from mrbench.core.records import BatchDiagnostics, Diagnostics, ShadowComparison, ShadowMeans


class _Mean:
    """Running mean of the values that were defined (None is skipped)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.count += 1

    def value(self) -> float | None:
        return self.total / self.count if self.count else None


class DiagnosticsAccumulator:
    """Running means over the run of the per-step diagnostics that go to ``diagnostics.json``:
    the matrices/vectors of :func:`~mrbench.methods.diagnostics.diagnostics` and the shadow
    comparisons of :func:`~mrbench.methods.diagnostics.shadow_diagnostics`."""

    def __init__(self) -> None:
        self.steps = 0
        self._corr_sum: list[list[float]] | None = None
        self._corr_count: list[list[int]] | None = None
        self._share_sum: list[float] | None = None
        self._share_count: list[int] | None = None
        self._resolution = _Mean()
        self._shadow: dict[str, dict[str, _Mean]] = {}
        self._shadow_steps: dict[str, int] = {}

    def add(self, diag: BatchDiagnostics, compared: ShadowComparison) -> None:
        """Add one training batch's diagnostics and shadow comparison (None values are skipped)."""
        k = len(diag.corr_matrix)
        if self._corr_sum is None:
            self._corr_sum = [[0.0] * k for _ in range(k)]
            self._corr_count = [[0] * k for _ in range(k)]
            self._share_sum = [0.0] * k
            self._share_count = [0] * k
        assert self._corr_count is not None and self._share_sum is not None and self._share_count is not None
        for i in range(k):
            for j in range(k):
                if diag.corr_matrix[i][j] is not None:
                    self._corr_sum[i][j] += diag.corr_matrix[i][j]
                    self._corr_count[i][j] += 1
        for i, value in enumerate(diag.share):
            if value is not None:
                self._share_sum[i] += value
                self._share_count[i] += 1
        self._resolution.add(compared.resolution)
        for name, stats in compared.shadow.items():
            means = self._shadow.setdefault(name, {stat: _Mean() for stat in layout.SHADOW_STATS})
            for stat in layout.SHADOW_STATS:
                means[stat].add(getattr(stats, stat))
            self._shadow_steps[name] = self._shadow_steps.get(name, 0) + 1
        self.steps += 1

    def record(self, components: list[str]) -> Diagnostics:
        """The run means as the cell's ``diagnostics.json`` (:class:`~mrbench.core.records.Diagnostics`).

        ``corr_matrix`` ``[K][K]`` and ``share`` ``[K]``: None where never defined; ``resolution``:
        mean ``adv/resolution`` of the method in use; ``shadow``: per shadow method, the means of
        its statistics and the number of steps it ran.
        """
        shadow = {
            name: ShadowMeans(
                **{stat: mean.value() for stat, mean in means.items()}, steps=self._shadow_steps[name]
            )
            for name, means in self._shadow.items()
        }
        if (
            self._corr_sum is None
            or self._corr_count is None
            or self._share_sum is None
            or self._share_count is None
        ):
            return Diagnostics(components, None, None, 0, self._resolution.value(), shadow)
        k = len(self._corr_sum)
        corr = [
            [
                self._corr_sum[i][j] / self._corr_count[i][j] if self._corr_count[i][j] else None
                for j in range(k)
            ]
            for i in range(k)
        ]
        share = [s / n if n else None for s, n in zip(self._share_sum, self._share_count, strict=True)]
        return Diagnostics(components, corr, share, self.steps, self._resolution.value(), shadow)

    def summary(self, components: list[str]) -> dict[str, Any]:
        """:meth:`record` as the JSON the cell writes."""
        return self.record(components).to_json()

    def to_json(self) -> Any:
        """The running sums as JSON-ready data (kept in a training checkpoint's resume marker)."""
        return _to_json(self)

    @staticmethod
    def from_json(data: Any) -> DiagnosticsAccumulator:
        """Inverse of :meth:`to_json`; ValueError on data that is not such a state."""
        accumulator = _from_json(data)
        if not isinstance(accumulator, DiagnosticsAccumulator):
            raise ValueError(f"not the state of a DiagnosticsAccumulator: {type(accumulator).__name__}")
        return accumulator


_CLASSES = {cls.__name__: cls for cls in (DiagnosticsAccumulator, _Mean)}
"""The classes an accumulator's state holds, by the name :func:`_to_json` writes."""


def _to_json(obj: Any) -> Any:
    """A plain object graph (dicts, lists, numbers, objects with a ``__dict__``) as JSON-ready data."""
    if isinstance(obj, dict):
        return {k: _to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_to_json(v) for v in obj]
    if hasattr(obj, "__dict__"):
        return {"__class__": type(obj).__name__, "state": _to_json(vars(obj))}
    return obj


def _from_json(data: Any) -> Any:
    """Inverse of :func:`_to_json`; classes are those of :data:`_CLASSES`."""
    if isinstance(data, dict) and "__class__" in data:
        if data["__class__"] not in _CLASSES:
            raise ValueError(
                f"not the state of a DiagnosticsAccumulator: unknown class {data['__class__']!r}"
            )
        obj = object.__new__(_CLASSES[data["__class__"]])
        obj.__dict__.update(_from_json(data["state"]))
        return obj
    if isinstance(data, dict):
        return {k: _from_json(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_from_json(v) for v in data]
    return data
