"""One cell's life: :func:`~mrbench.engine.cell.runner.run_cell` claims the cell, resumes it from
its last training checkpoint, evaluates, trains, evaluates again, logs to its MLflow run (riding
out a store outage), keeps the trained policy, and ends the run FINISHED, FAILED or KILLED."""
