"""CLI commands, one module each: the command is a module-level function (``run_cmd``,
``sweep_command``, …) that reads as its phases, and ``register(app)`` adds it to the app.

Heavy libraries (torch, TRL, MLflow) are imported inside the phase functions that use them, so
that ``mrbench --help`` and ``mrbench methods`` stay fast.
"""
