"""Sweep reports from MLflow alone (``mrbench report SWEEP``; entry point :func:`build.build_report`).

store (bulk reads) → select (which runs count) → context (the selection and its curves and
diagnostics) → results / diagnosis / render (markdown sections, over stats) and figures (figure
data, drawn by plots) → build (the report folder, logged to the sweep's parent run).
"""
