"""From the tester's verdict and the exit statuses to a run's status (runs in the zygote).

The zygote accepts a verdict only with the run's nonce in front (:func:`parse_verdict`), then
maps it, with how the candidate and the tester ended, to the ``status``/``detail`` fields of a
:class:`~.job.Result` (:func:`classify`). Loaded inside the zygote (see :mod:`.zygote`):
standard library only.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

SIGNAL_REASONS = {
    signal.SIGXCPU: "CPU time limit",
    signal.SIGXFSZ: "file size / output limit",
    signal.SIGSEGV: "segmentation fault (e.g. stack overflow)",
    signal.SIGKILL: "killed (limit or itself)",
    signal.SIGABRT: "aborted",
}
"""Why a process that died from a signal most likely got it, by signal."""


def parse_verdict(raw: bytes, nonce: str) -> dict[str, Any] | str | None:
    """The tester's verdict dict; None when there is none; ``"forged"`` without the nonce."""
    if not raw:
        return None
    prefix = nonce.encode()
    if not raw.startswith(prefix):
        return "forged"
    try:
        verdict = json.loads(raw[len(prefix) :].decode("utf-8"))
    except ValueError:
        return "forged"
    return verdict if isinstance(verdict, dict) else "forged"


def classify(
    verdict: dict[str, Any] | str | None,
    timed_out: bool,
    cand_status: int | None,
    test_status: int | None,
    log_tail: str,
) -> dict[str, Any]:
    """Map the verdict and exit statuses to the ``status``/``detail``/timing fields of a Result."""
    if verdict == "forged":
        return {"status": "error", "detail": "verdict without the run's nonce (forged?)"}
    if not isinstance(verdict, dict):
        if timed_out:
            return {"status": "timeout", "detail": "no verdict before the wall-clock deadline"}
        if test_status is not None and os.WIFSIGNALED(test_status):
            sig = os.WTERMSIG(test_status)
            return {
                "status": "killed",
                "detail": f"test process died: {SIGNAL_REASONS.get(sig, f'signal {sig}')}",
            }
        return {
            "status": "sandbox_error",
            "detail": f"test process ended without a verdict: {log_tail[-500:]}",
        }
    kind = verdict.get("v")
    out: dict[str, Any] = {"detail": str(verdict.get("d", ""))[:500], "n_calls": int(verdict.get("n", 0))}
    if kind in ("passed", "failed"):
        out["test_time_s"] = float(verdict.get("t", 0.0))
        work = verdict.get("w")
        out["work"] = work if isinstance(work, int) and not isinstance(work, bool) else None
        out["status"] = kind
    elif kind == "error" and verdict.get("k") == "CompileError":
        out["status"] = "syntax_error"
    elif kind == "error" and verdict.get("k") == "SystemExit":
        out.update(status="exited", detail=out["detail"] or "the program raised SystemExit")
    elif kind == "gone":
        if cand_status is not None and os.WIFSIGNALED(cand_status):
            sig = os.WTERMSIG(cand_status)
            out.update(status="killed", detail=SIGNAL_REASONS.get(sig, f"signal {sig}"))
        elif cand_status is not None and os.WIFEXITED(cand_status):
            code = os.WEXITSTATUS(cand_status)
            out.update(
                status="exited", detail=f"the program exited with code {code} before the tests finished"
            )
        else:
            out.update(status="error", detail="the program closed its channel to the tests")
    elif kind == "error":
        out["status"] = "error"
    else:
        out["status"] = "sandbox_error"
    return out
