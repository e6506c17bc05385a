"""CLI commands, one module each; every module exposes ``register(app)``.

Modules import heavy libraries (torch, TRL, MLflow) inside the command functions, so that
``mrbench --help`` and ``mrbench methods`` stay fast.
"""
