"""A Typer app holding only ``mrbench simulate`` (through its own ``register``), for the lab CLI tests.

Imported by its module name (``from simulate_app import make_app``): ``tests/`` is no package, and
pytest puts each test file's folder on ``sys.path`` before importing it.
"""

from __future__ import annotations

import typer

from mrbench.cli.commands import simulate as simulate_command


def make_app() -> typer.Typer:
    app = typer.Typer()
    simulate_command.register(app)

    @app.command()
    def other() -> None:  # a second command keeps `simulate` a subcommand
        """Unused."""

    return app
