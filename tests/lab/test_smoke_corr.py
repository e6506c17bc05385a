"""The paper scenarios' correlations are the ones the committed smoke report shows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mrbench.lab.presets import CODE_CORR_6, SECURITY_CORR, TOOLS_CORR, paper_code
from mrbench.lab.smoke_corr import task_correlations

SMOKE = Path(__file__).resolve().parents[2] / "reports" / "smoke"


@pytest.mark.skipif(not (SMOKE / "corr-tool-calling.png").exists(), reason="no committed smoke report")
def test_presets_hold_the_correlations_decoded_from_the_smoke_heatmaps():
    decoded = task_correlations(SMOKE)
    expected = {"code-generation": CODE_CORR_6, "tool-calling": TOOLS_CORR, "agent-security": SECURITY_CORR}
    for task, matrix in expected.items():
        panels, found = decoded[task]
        assert panels == 3  # grpo, gdpo, corrgrpo
        assert np.allclose(found, np.array(matrix), atol=0.015), task


def test_efficiency_follows_accuracy_at_half_strength():
    s = paper_code()
    acc, eff = s.components.index("accuracy"), s.components.index("efficiency")
    assert s.corr[eff][acc] == 0.5
    assert np.allclose(np.array(s.corr)[eff, :6], 0.5 * np.array(CODE_CORR_6)[acc])
