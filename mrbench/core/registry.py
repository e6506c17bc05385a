"""A small name → plugin registry shared by methods and tasks.

A plugin is registered with a decorator (or lazily as ``"module:attr"``). The registry records
the plugin's keyword-only parameters and their defaults from its signature, so that
hyper-parameters are declared once and flow from there into CLI validation, MLflow params and
the run key. Unknown names raise :class:`UnknownNameError` with "did you mean" suggestions.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Callable[..., Any])


class RegistryError(ValueError):
    """A user-facing error about a registry lookup or a plugin's parameters."""


class UnknownNameError(RegistryError):
    """Raised for a name that is not registered; carries close matches."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(s) for s in self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}.")


class UnknownParamError(RegistryError):
    """Raised for a hyper-parameter that the plugin does not declare."""


def _summary(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _keyword_params(fn: Callable[..., Any]) -> dict[str, Any]:
    """Keyword-only parameters with defaults: these are the plugin's hyper-parameters."""
    params: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            if p.default is inspect.Parameter.empty:
                raise TypeError(f"hyper-parameter {p.name!r} of {fn.__qualname__} needs a default")
            params[p.name] = p.default
    return params


def coerce_value(raw: Any, default: Any, *, key: str) -> Any:
    """Convert ``raw`` (often a CLI string) to the type of ``default``."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(default, bool):
            lowered = text.lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        raise RegistryError(
            f"bad value {raw!r} for parameter {key!r}: expected {type(default).__name__}"
        ) from None
    if default is None:
        # Untyped optional parameter: accept numbers where they parse, else the string.
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
    return text


@dataclass
class Entry(Generic[T]):
    """One registered plugin: its name, the callable, its hyper-parameters and a summary."""

    name: str
    target: T | str
    summary: str = ""
    aliases: tuple[str, ...] = ()
    _params: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def obj(self) -> T:
        """The callable, importing a lazy ``"module:attr"`` target on first use."""
        if isinstance(self.target, str):
            module, _, attr = self.target.partition(":")
            loaded = getattr(importlib.import_module(module), attr)
            self.target = loaded
            if not self.summary:
                self.summary = _summary(loaded)
        return self.target  # type: ignore[return-value]

    @property
    def params(self) -> dict[str, Any]:
        """Keyword-only hyper-parameters and their defaults."""
        if self._params is None:
            self._params = _keyword_params(self.obj)
        return dict(self._params)

    def resolve_params(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults updated by ``overrides`` (strings coerced to each default's type).

        Raises :class:`UnknownParamError` naming any key the plugin does not declare.
        """
        params = self.params
        for key, raw in (overrides or {}).items():
            if key not in params:
                close = difflib.get_close_matches(key, list(params), n=1, cutoff=0.5)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                known = ", ".join(params) or "none"
                raise UnknownParamError(
                    f"unknown parameter {key!r} for {self.name!r}.{hint} Known parameters: {known}."
                )
            params[key] = coerce_value(raw, params[key], key=key)
        return params


class Registry(Generic[T]):
    """Maps names (and aliases) to plugins, refusing duplicates."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}

    def _add(self, entry: Entry[T]) -> None:
        for key in (entry.name, *entry.aliases):
            if key in self._entries or key in self._aliases:
                raise RegistryError(f"{self.kind} {key!r} is already registered")
        self._entries[entry.name] = entry
        for alias in entry.aliases:
            self._aliases[alias] = entry.name

    def register(
        self, name: str, *, summary: str | None = None, aliases: tuple[str, ...] = ()
    ) -> Callable[[T], T]:
        """Decorator registering ``fn`` under ``name``; summary defaults to its docstring's first line."""

        def decorator(fn: T) -> T:
            self._add(Entry(name, fn, summary if summary is not None else _summary(fn), aliases))
            return fn

        return decorator

    def register_lazy(
        self, name: str, target: str, *, summary: str = "", aliases: tuple[str, ...] = ()
    ) -> None:
        """Register ``"module:attr"``, imported only when the entry is first used."""
        if ":" not in target:
            raise RegistryError(f"lazy target {target!r} must look like 'module:attr'")
        self._add(Entry(name, target, summary, aliases))

    def get(self, name: str) -> Entry[T]:
        """The entry for ``name`` or an alias; :class:`UnknownNameError` otherwise."""
        key = self._aliases.get(name, name)
        if key not in self._entries:
            raise UnknownNameError(self.kind, name, list(self._entries) + list(self._aliases))
        return self._entries[key]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())

    def names(self) -> list[str]:
        """Registered names in registration order (aliases excluded)."""
        return list(self._entries)
