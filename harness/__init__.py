"""mrbench's engine: CLI, configuration, registry, model building, trainer glue, tracking,
sweeps, statistics and reports. Kept import-light: submodules are imported where used."""

__version__ = "0.1.0"
