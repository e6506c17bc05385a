"""The ``mrbench`` command line (Typer). Commands live in :mod:`mrbench.cli.commands`.

Exit codes and messages (:func:`main`):

- 0 done; 1 a command's own failure (a cell failed, an item could not be scored) or an unexpected
  error, printed as one line ``error: unexpected <type>: …``;
- 2 a usage error (a bad option value, an unknown option or command, a missing option; bare
  ``mrbench`` prints the help) or any :class:`mrbench.core.errors.UserError` (unknown names, bad
  values, bad files, plugins that cannot be loaded), and a disk or database fault (a full disk, a
  file size limit, a damaged store: the file and the cause), printed as ``error: …``, never a
  traceback;
- 128 + signal when stopped: 130 Ctrl-C (SIGINT), 143 SIGTERM (``timeout``, SLURM, ``docker
  stop``, Kubernetes), 129 SIGHUP (:mod:`mrbench.core.interrupts`).

``mrbench --traceback COMMAND`` or ``MRBENCH_TRACEBACK=1`` prints the traceback of an unexpected
error, for a bug report. (A command's own ``--verbose``, ``$MRBENCH_VERBOSE``, is another switch:
it shows the libraries' output live instead of only in the log file.)
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
import warnings
from typing import Annotated, Any

import typer

from mrbench.core import env
from mrbench.core.errors import UserError
from mrbench.core.interrupts import exit_code, received, stop_signals_interrupt

app = typer.Typer(
    name="mrbench",
    help="Benchmark harness for multi-reward GRPO: compare advantage estimators across tasks, models, seeds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _help_lists_flags_bare() -> None:
    """Help lists a flag (``--json``, ``--gold``, ``--report/--no-report``) without a value, as
    click's plain help does: typer 0.29's rich help gives every option its type, so that flags read
    ``--json <bool>`` as if they took one. Options that take a value keep their type."""
    from typer.core import TyperOption

    typed = getattr(TyperOption, "display_type_rich", None)  # absent: a typer whose help shows flags bare
    if typed is None or getattr(typed, "mrbench_flags_bare", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else typed(self, ctx)

    display_type_rich.mrbench_flags_bare = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_help_lists_flags_bare()

COMMAND_MODULES = (
    "mrbench.cli.commands.catalog",
    "mrbench.cli.commands.advantages",
    "mrbench.cli.commands.run",
    "mrbench.cli.commands.score",
    "mrbench.cli.commands.sweep",
    "mrbench.cli.commands.report",
    "mrbench.cli.commands.ui",
    "mrbench.cli.commands.simulate",
    "mrbench.cli.commands.eval",
    "mrbench.cli.commands.export",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def show_tracebacks() -> bool:
    """True when ``--traceback`` was given or ``$MRBENCH_TRACEBACK`` is a true value."""
    return env.TRACEBACK.get()


@app.callback()
def _options(
    traceback_: Annotated[
        bool,
        typer.Option(
            "--traceback", help=f"Print tracebacks of unexpected errors (or set {env.TRACEBACK.name}=1)."
        ),
    ] = False,
) -> None:
    if traceback_:
        os.environ[env.TRACEBACK.name] = "1"  # read by main(), and inherited by worker processes


def _click_exception() -> type[Exception]:
    """The ``ClickException`` class of the click that typer parses with: its bundled copy
    (``typer._click``, typer ≥ 0.20) or the ``click`` package (older typer), found through typer's
    public ``BadParameter`` so that either pair works."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _say(message: str) -> None:
    """Print ``message`` on stderr; a terminal that went away (SIGHUP) must not turn it into a traceback."""
    try:
        typer.echo(message, err=True)
    except OSError:
        pass


def _run(cli: typer.Typer) -> int | str | None:
    """Run ``cli`` on ``sys.argv``; every outcome as an exit code (a string exits 1 printing it)."""
    usage_error = _click_exception()
    try:
        # Every $MRBENCH_* value checked before the command runs: a malformed one is a UserError
        # here (not in the handler below, not in a cell's run after it opened).
        env.check_all()
        # Non-standalone click *returns* the exit code of typer.Exit instead of raising it.
        code = cli(standalone_mode=False)
        return code if isinstance(code, int) else 0
    except SystemExit as exc:
        return exc.code
    except UserError as exc:  # every user-facing error (mrbench.core.errors)
        _say(f"error: {exc}")
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        _say("aborted")
        return 130
    except KeyboardInterrupt as exc:  # typer turns it into exit code 130 itself; older typer may not
        return exit_code(getattr(exc, "signum", signal.SIGINT))
    except BrokenPipeError:  # e.g. `mrbench methods | head -1`
        sys.stdout = open(os.devnull, "w")  # the interpreter's final flush would fail again
        return 1
    except Exception as exc:
        if isinstance(exc, usage_error):  # bad option value, unknown option or command, bare `mrbench`
            exc.show()  # type: ignore[attr-defined]
            return int(exc.exit_code)  # type: ignore[attr-defined]
        if show_tracebacks():
            traceback.print_exc()
        fault = _disk_or_database_fault(exc)
        if fault is not None:  # a full disk, a file size limit, a damaged store: the user's to fix
            _say(f"error: {fault}")
            return 2
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
        hint = "" if show_tracebacks() else " (mrbench --traceback prints the traceback for a bug report)"
        _say(f"error: unexpected {type(exc).__name__}: {first}{hint}")
        return 1


def _disk_or_database_fault(exc: Exception) -> str | None:
    """One line naming the file and the cause when ``exc`` is a disk or database fault (a full disk,
    a file size limit, a damaged ``mlflow.db``: :mod:`mrbench.store.faults`), else None."""
    from mrbench.store.client import store_in_use
    from mrbench.store.faults import describe_fault

    return describe_fault(exc, store_in_use())


def _one_line_warnings(previous: Any) -> Any:
    """A ``warnings.showwarning`` that prints mrbench's own warnings (e.g. rewards beyond the
    supported magnitude) as one line ``warning: …`` and passes every other one to ``previous``."""

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if category.__module__.startswith("mrbench."):
            _say(f"warning: {message}")
        else:
            previous(message, category, *args, **kwargs)

    return show


def main(cli: typer.Typer = app) -> None:
    """Entry point of ``cli`` (default: the ``mrbench`` app): runs it with stop signals handled
    like Ctrl-C and exits with the codes of the module docstring."""
    # Before anything loads the OpenMP runtime: idle threads wait passively instead of spinning on
    # cores other processes need (mrbench.engine.processes.threads).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    previous = warnings.showwarning
    warnings.showwarning = _one_line_warnings(previous)
    try:
        with stop_signals_interrupt():
            code = _run(cli)
    finally:
        warnings.showwarning = previous
    signum = received()
    if signum is not None:
        # However the command ended after it (typer returns 130 for any interrupt, a sweep
        # returns 130 after ending its runs KILLED), the exit code names the signal.
        _say(f"interrupted by {signal.Signals(signum).name}")
        code = exit_code(signum)
    sys.exit(code)


if __name__ == "__main__":
    main()
