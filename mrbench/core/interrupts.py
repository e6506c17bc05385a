"""Stop signals handled like Ctrl-C: SIGTERM and SIGHUP raise :class:`Interrupted`, a
``KeyboardInterrupt``, so every path that already handles Ctrl-C (a run ending KILLED, a sweep
stopping its workers, ``mrbench ui`` stopping its server) handles them too.

SIGTERM is what ``timeout``, SLURM at the end of an allocation, ``docker stop`` and Kubernetes
send; SIGHUP comes when the terminal goes away. The process then exits with ``128 + signal``
(130 SIGINT, 129 SIGHUP, 143 SIGTERM), the shell's convention for "ended by that signal".

Only the first stop signal raises: a second one is ignored, so that it cannot interrupt the
cleanup the first one started (a run left RUNNING, a worker or server left behind); a third one
ends the process at once, for a cleanup that hangs. A signal the process inherited as ignored
(SIGHUP under ``nohup``, SIGINT in a background job) stays ignored.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
FORCE_AFTER = 3  # the third stop signal exits without cleanup

_received: list[int] = []


class Interrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` raised by stop signal ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) == 1:
        raise Interrupted(signum)
    if len(_received) >= FORCE_AFTER:
        os._exit(exit_code(_received[0]))


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` in this (main)
    thread, except the ones inherited as ignored; the previous handlers are restored after it."""
    _received.clear()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _on_stop_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def received() -> int | None:
    """The first stop signal received in the latest :func:`stop_signals_interrupt` block, if any."""
    return _received[0] if _received else None


def exit_code(signum: int) -> int:
    """``128 + signum``: how a process ended by a signal reports it (143 for SIGTERM)."""
    return 128 + int(signum)
