"""Fixtures shared by more than one file of the engine tests."""

from fsdp_world import fsdp_world  # noqa: F401  (session: the 2-process FSDP world on the CPU)
