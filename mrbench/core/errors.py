"""User-facing errors, one hierarchy: the CLI prints the message of any :class:`UserError` as
``error: <message>`` and exits with code 2, so code raises the most specific class below and
never translates one into another.

::

    UserError                    a problem the user can fix (bad name, bad value, bad file)
    └── RegistryError            a registry lookup or a plugin's parameters (also a ValueError)
        ├── UnknownNameError     a name no registry knows, with "did you mean" suggestions
        ├── UnknownParamError    a hyper-parameter or setting the plugin does not declare
        └── PluginError          a plugin (entry point, ``module:attr`` name) that cannot be loaded
"""

from __future__ import annotations

import difflib


class UserError(Exception):
    """A problem the user can fix (bad name, bad value, bad file); the message says what and how."""


class RegistryError(UserError, ValueError):
    """A user-facing error about a registry lookup or a plugin's parameters.

    Also a ``ValueError``: a bad name or value is a bad argument to the functions that look it up.
    """


class UnknownNameError(RegistryError):
    """Raised for a name that is not registered; carries close matches.

    >>> str(UnknownNameError("method", "grpoo", ["grpo", "gdpo"]))
    "unknown method 'grpoo'. Did you mean 'grpo', 'gdpo'? Known: gdpo, grpo."
    """

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(s) for s in self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}.")


class UnknownParamError(RegistryError):
    """Raised for a hyper-parameter that the plugin does not declare."""


class PluginError(RegistryError):
    """A plugin that cannot be loaded or does not fit its protocol; the message names where it came
    from (the entry point and its distribution, or the ``module:attr`` name)."""
