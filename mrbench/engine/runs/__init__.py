"""A run as mrbench shows and keeps it: what a cell or an evaluation logs to its MLflow run
(:class:`~mrbench.engine.runs.tracking.RunLog`, which rides out a store outage), how the run ends
when its work raises, the progress of its long phases, and the terminal (what libraries print goes
to the run's log file)."""
