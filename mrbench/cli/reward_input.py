"""Parse reward vectors typed on the command line or read from a file (``mrbench advantages``).

Rows are rollouts in order, columns are reward components. ``nan``, ``none``, ``null`` and an
empty cell mark an unscorable value; ``inf`` parses (the methods treat it as unscorable). Every
problem a user can cause raises :class:`mrbench.core.errors.UserError` naming the value and its row.
(``--param key=value`` is parsed by :mod:`mrbench.kit.keyvalue`, like every other flag's settings.)

>>> parse_rewards_text("1,0.5; 0, nan").tolist()
[[1.0, 0.5], [0.0, nan]]
>>> to_groups(parse_rewards_text("1;2;3;4"), 2).shape
torch.Size([2, 2, 1])
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from mrbench.core.errors import UserError

_MISSING = {"", "nan", "none", "null", "na"}


def _cell(raw: Any, where: str) -> float:
    """One reward value: a number, or a missing marker → NaN. ``where`` names its position."""
    if raw is None:
        return math.nan
    if isinstance(raw, bool):  # bool is an int subclass; true/false is almost surely a mistake
        raise UserError(f"non-numeric reward {raw!r} at {where}: expected a number or nan")
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in _MISSING:
            return math.nan
        try:
            return float(text)
        except ValueError:
            pass
    raise UserError(f"non-numeric reward {raw!r} at {where}: expected a number or nan")


def _count(n: int) -> str:
    return f"{n} value" if n == 1 else f"{n} values"


def _to_tensor(rows: Sequence[Sequence[Any]], labels: Sequence[str]) -> Tensor:
    """Rows of raw cells → ``[N, K]`` float64; ``labels[i]`` names row i in messages."""
    if not rows:
        raise UserError("no reward rows given (--rewards, --rewards-file): expected rows like '1,0.5;0,nan'")
    width = len(rows[0])
    if width == 0:
        raise UserError(f"{labels[0]} has no reward values")
    values: list[list[float]] = []
    for row, label in zip(rows, labels, strict=True):
        if len(row) != width:
            raise UserError(
                f"{label} has {_count(len(row))} but {labels[0]} has {_count(width)}: "
                "every row needs one value per reward component (use nan for a missing one)"
            )
        values.append([_cell(v, f"{label}, column {j + 1}") for j, v in enumerate(row)])
    return torch.tensor(values, dtype=torch.float64)


def parse_rewards_text(text: str) -> Tensor:
    """Parse ``"r,r,r;r,r,r;…"`` (rows separated by ``;`` or newlines) into ``[N, K]`` float64.

    Blank rows (e.g. after a trailing ``;``) are ignored. Ragged rows or non-numeric values raise
    :class:`UserError` naming the value and its 1-based row.
    """
    rows = [row.strip() for row in re.split(r"[;\n]", text)]
    kept = [row for row in rows if row]
    return _to_tensor([row.split(",") for row in kept], [f"row {i + 1}" for i in range(len(kept))])


def _is_header(cells: Sequence[str]) -> bool:
    """A first CSV row is a header when none of its cells reads as a reward value."""
    for cell in cells:
        try:
            _cell(cell, "")
            return False
        except UserError:
            continue
    return True


def load_rewards_file(path: str | Path) -> Tensor:
    """Read rewards ``[N, K]`` (float64) from a ``.json`` file or a CSV file.

    JSON: a list of rows (``[[1, 0.5], [0, null]]``) or ``{"rewards": [[...], ...]}``; ``null``
    or ``"nan"`` = missing. CSV (any other suffix): one rollout per line, an optional header row
    of component names (detected when none of its cells is a number), blank lines ignored.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"rewards file {str(p)!r} does not exist or is not a file")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (Excel's UTF-8 CSV) is not a value
    except UnicodeDecodeError as exc:
        raise UserError(
            f"rewards file {str(p)!r} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}): save it as UTF-8 CSV or JSON"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot read rewards file {str(p)!r}: {exc.strerror or exc}") from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"rewards file {str(p)!r} is not valid JSON: {exc}") from None
        if isinstance(data, dict):
            if "rewards" not in data:
                raise UserError(
                    f"rewards file {str(p)!r}: a JSON object needs a 'rewards' key, got keys {sorted(data)}"
                )
            data = data["rewards"]
        if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
            raise UserError(
                f"rewards file {str(p)!r}: expected a list of rows (lists of numbers) or "
                '{"rewards": [[...], ...]}'
            )
        return _to_tensor(data, [f"row {i + 1}" for i in range(len(data))])

    lines = list(enumerate(csv.reader(text.splitlines()), start=1))
    lines = [(n, cells) for n, cells in lines if any(c.strip() for c in cells)]
    if lines and _is_header(lines[0][1]):
        lines = lines[1:]
    return _to_tensor(
        [cells for _, cells in lines], [f"row {i + 1} (line {n})" for i, (n, _) in enumerate(lines)]
    )


def to_groups(rows: Tensor, group_size: int | None) -> Tensor:
    """Split ``[N, K]`` rows into ``[N / group_size, group_size, K]`` consecutive groups.

    ``group_size=None`` makes all rows one group.
    """
    n = rows.shape[0]
    if group_size is None:
        return rows.unsqueeze(0)
    if group_size < 1:
        raise UserError(f"group size must be a positive integer, got {group_size}")
    if n % group_size:
        raise UserError(
            f"{n} reward rows are not divisible by group size {group_size}: "
            "each consecutive run of group-size rows is one group"
        )
    return rows.reshape(n // group_size, group_size, rows.shape[1])


def parse_weights(text: str | None, k: int) -> Tensor:
    """Parse ``"w,w,…"`` into ``[k]`` float64 weights; ``None`` → ones."""
    if text is None:
        return torch.ones(k, dtype=torch.float64)
    parts = [part.strip() for part in text.split(",")]
    weights: list[float] = []
    for i, part in enumerate(parts):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UserError(f"bad weight {part!r} (weight {i + 1} of {text!r}): expected a finite number")
        weights.append(value)
    if len(weights) != k:
        raise UserError(
            f"got {len(weights)} weights ({text!r}) for {k} reward components: give one per component"
        )
    return torch.tensor(weights, dtype=torch.float64)
