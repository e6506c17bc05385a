"""Where runs are kept: finding, opening, re-rooting, talking to and reading an MLflow store.

One room below the training engine, so that the engine (which writes runs), the report and the lab
(which read them) all reach a store the same way:

- :mod:`.uri` — the one parser of tracking URIs and artifact locations, and the store's file names;
- :mod:`.local` — the results folder, writability, re-rooting a moved results folder, the lock
  that guards a new sqlite store;
- :mod:`.client` — the reachability check, :class:`~.client.RetryingClient` (rides out an outage),
  :func:`~.client.tracking_client` (the one way a command gets a client), experiments;
- :mod:`.reader` — bulk reads of an experiment's runs (SQL for sqlite stores, the client otherwise);
- :mod:`.runs` — searching an experiment's runs page by page (by status, run key, parent), ending runs;
- :mod:`.claims` — who owns a RUNNING run: liveness by host, pid and heartbeat, claims of run keys,
  ending a dead owner's runs (never a live owner's).

It stands on :mod:`mrbench.core` and MLflow only.
"""
