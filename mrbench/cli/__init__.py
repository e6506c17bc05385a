"""The ``mrbench`` command line: the Typer app and one module per command."""
