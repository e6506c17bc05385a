"""A toy mrbench plugin: the ``toy-centred`` estimator and the ``toy-add`` task (a test fixture)."""
