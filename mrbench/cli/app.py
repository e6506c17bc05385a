"""The ``mrbench`` command line (Typer). Commands live in :mod:`mrbench.cli.commands`.

User errors (any :class:`mrbench.core.errors.UserError`: unknown names, bad values, bad files,
plugins that cannot be loaded) print ``error: …`` and exit with code 2.
"""

from __future__ import annotations

import importlib
import sys

import typer

from mrbench.core.errors import UserError

app = typer.Typer(
    name="mrbench",
    help="Benchmark harness for multi-reward GRPO: compare advantage estimators across tasks, models, seeds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "mrbench.cli.commands.catalog",
    "mrbench.cli.commands.advantages",
    "mrbench.cli.commands.run",
    "mrbench.cli.commands.score",
    "mrbench.cli.commands.sweep",
    "mrbench.cli.commands.report",
    "mrbench.cli.commands.ui",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main(cli: typer.Typer = app) -> None:
    """Entry point of ``cli`` (default: the ``mrbench`` app) with user errors turned into exit code 2
    and a one-line message."""
    try:
        # Non-standalone click *returns* the exit code of typer.Exit instead of raising it.
        code = cli(standalone_mode=False)
    except UserError as exc:  # every user-facing error (mrbench.core.errors)
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors raised in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
