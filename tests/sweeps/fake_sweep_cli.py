"""``mrbench sweep`` with fake cells: ``python tests/sweeps/fake_sweep_cli.py sweep --name … [flags]``.

The real command (its options, :func:`mrbench.cli.commands.sweep.sweep`, ``run_sweep``, the
executors) and the real entry point (:func:`mrbench.cli.app.main`: exit codes, Ctrl-C), with
:func:`fakes.fake_cell` and :func:`fakes.fake_resolve_spec` injected in place of training, so that
tests can interrupt or kill a whole sweep process in seconds. ``$MRBENCH_FAKE_*`` script the fake
cells (see :mod:`fakes`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

TESTS = Path(__file__).resolve().parents[1]
# This process and its worker processes (which import the cell function as "fakes:fake_cell").
sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))

from fakes import fake_cell, fake_resolve_spec  # noqa: E402

from mrbench.cli.app import main  # noqa: E402
from mrbench.cli.commands.sweep import register  # noqa: E402


def fake_sweep_app() -> typer.Typer:
    """An app with the one command ``sweep``, running fake cells."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def group() -> None:
        """Keeps ``sweep`` a subcommand, spelled as on the real command line."""

    register(app, cell_fn=fake_cell, resolve=fake_resolve_spec)
    return app


if __name__ == "__main__":
    main(fake_sweep_app())
