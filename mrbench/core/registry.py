"""A small name → plugin registry shared by methods and tasks.

A plugin is registered with a decorator, lazily as ``"module:attr"`` (the built-in tasks), from a
Python entry point of the registry's group, or on first use of a ``"module:attr"`` name. The
registry records the plugin's keyword-only parameters and their defaults from its signature, so
that hyper-parameters are declared once and flow from there into CLI validation, MLflow params and
the run key. Unknown names raise :class:`UnknownNameError` with "did you mean" suggestions.

A numeric hyper-parameter declares the values it accepts in its annotation, with :class:`Range`::

    def grpo(rewards, weights, *, eps: Annotated[float, Range(gt=0)] = 1e-6): ...

Every value given for it (command line, sweep YAML, Python) is checked before anything runs; a
float hyper-parameter must also be finite (unless its own default is not).

Entry points are discovered lazily: the first time a name is not found, or the registry is listed
(:meth:`Registry.catalog`). A plugin that cannot be loaded raises :class:`PluginError` naming its
entry point and distribution when it is used, and is reported beside (never instead of) the
others when listed.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Annotated, Any, Generic, TypeVar, get_args, get_origin

from mrbench.core.errors import PluginError, RegistryError, UnknownNameError, UnknownParamError, UserError

__all__ = [
    "BUILT_IN",
    "Entry",
    "PluginError",
    "PluginProblem",
    "Range",
    "Registry",
    "RegistryError",
    "UnknownNameError",
    "UnknownParamError",
    "coerce_value",
]

T = TypeVar("T", bound=Callable[..., Any])
Check = Callable[[Any], None]
"""A registry's protocol check on a plugin's object: raises ``TypeError`` saying what does not fit."""

BUILT_IN = "built-in"
"""The :attr:`Entry.source` of everything mrbench registers itself."""


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


@dataclass(frozen=True)
class Range:
    """The values a numeric hyper-parameter accepts: ``gt``/``lt`` exclude the bound, ``ge``/``le``
    include it, ``None`` leaves that side open. Declared as ``Annotated[float, Range(gt=0)]``.

    >>> str(Range(gt=0)), str(Range(ge=0, le=1)), Range(gt=0).admits(-1.0)
    ('> 0', '>= 0 and <= 1', False)
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def admits(self, value: Any) -> bool:
        """True for a real number (not a bool, not NaN) within every bound."""
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return False
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )

    def bounds(self) -> dict[str, float]:
        """The bounds that are set, e.g. ``{"gt": 0}`` (``mrbench methods --json``)."""
        return {
            k: v
            for k, v in (("gt", self.gt), ("ge", self.ge), ("lt", self.lt), ("le", self.le))
            if v is not None
        }

    def __str__(self) -> str:
        symbols = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
        return " and ".join(f"{symbols[k]} {_bound(v)}" for k, v in self.bounds().items()) or "any number"


def _bound(value: float) -> str:
    """A bound as written: a whole number in full (``4294967295``, not ``4.29497e+09``).

    >>> _bound(2**32 - 1), _bound(86400.0), _bound(1e-6), _bound(0.5)
    ('4294967295', '86400', '1e-06', '0.5')
    """
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}"


def _annotation(obj: Any, param: inspect.Parameter) -> Any:
    """The parameter's annotation, a string annotation (``from __future__ import annotations``)
    evaluated in the plugin's module; None when it cannot be evaluated (then it declares no range)."""
    annotation = param.annotation
    if isinstance(annotation, str):
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        try:
            annotation = eval(annotation, dict(vars(module)) if module else {})
        except Exception:  # e.g. a name imported only under TYPE_CHECKING
            return None
    return annotation


def _keyword_ranges(fn: Callable[..., Any]) -> dict[str, Range]:
    """The :class:`Range` of each keyword-only parameter that declares one in ``Annotated[...]``."""
    ranges: dict[str, Range] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.annotation is inspect.Parameter.empty:
            continue
        annotation = _annotation(fn, p)
        if get_origin(annotation) is Annotated:
            found = [m for m in get_args(annotation)[1:] if isinstance(m, Range)]
            if found:
                ranges[p.name] = found[0]
    return ranges


def check_value(value: Any, default: Any, bound: Range | None, *, key: str, owner: str) -> None:
    """:class:`RegistryError` naming ``value`` unless it is finite (for a float whose ``default``
    is finite) and within ``bound``."""
    where = f"parameter {key!r} of {owner!r}"
    if bound is not None and not bound.admits(value):
        raise RegistryError(f"bad value {value!r} for {where}: must be {bound}")
    finite_default = not isinstance(default, float) or math.isfinite(default)
    if isinstance(value, float) and not math.isfinite(value) and finite_default:
        raise RegistryError(f"bad value {value!r} for {where}: must be a finite number")


def source_of(module: str) -> str:
    """Where an object defined in ``module`` comes from: :data:`BUILT_IN` or ``"module <name>"``."""
    return BUILT_IN if module == "mrbench" or module.startswith("mrbench.") else f"module {module}"


def path_of(obj: Any) -> str:
    """The ``"module:qualname"`` path of a function or class (a lazy target is its own path)."""
    if isinstance(obj, str):
        return obj
    return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"


def import_target(target: str) -> Any:
    """The object ``"module:attr"`` names (``attr`` may be dotted, e.g. ``Class.factory``): the one
    loader of such names (plugins, cell functions, ranks' payloads, lm-eval score functions).

    Importing the module runs its import-time code. :class:`UserError` naming ``target`` when it is
    not of that form, or its module or attribute does not exist; an error raised by the module's
    own code while it is imported propagates as it is.

    >>> import_target("os.path:join.__name__")
    'join'
    >>> import_target("os.path")
    Traceback (most recent call last):
    ...
    mrbench.core.errors.UserError: expected 'module:attr', got 'os.path'
    """
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise UserError(f"expected 'module:attr', got {target!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {target!r}: {type(exc).__name__}: {exc}") from exc
    return obj


def _quiet_import(target: str) -> Any:
    """:func:`import_target`, keeping what the module prints while it is imported off the terminal:
    it is logged (logger ``mrbench.core.registry``, level INFO) instead. A plugin is named by the
    user, and its module's import-time code runs; its output must not pass for mrbench's own."""
    import contextlib
    import io
    import logging

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return import_target(target)
    finally:
        printed = (out.getvalue() + err.getvalue()).strip()
        if printed:
            logging.getLogger(__name__).info("importing %s printed:\n%s", target, printed)


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
    """One registered plugin: its name, the callable, its hyper-parameters and a summary.

    ``source`` says where it came from: :data:`BUILT_IN`, ``"entry point <distribution>"`` or
    ``"module <module>"``. ``origin`` is set for plugins only: it names the plugin in the
    :class:`PluginError` raised when its target cannot be loaded or does not fit ``check``; a
    built-in's ``ImportError`` propagates as is (a task whose package is missing is unavailable).
    """

    name: str
    target: T | str
    summary: str = ""
    aliases: tuple[str, ...] = ()
    source: str = BUILT_IN
    origin: str | None = None
    check: Check | None = field(default=None, repr=False)
    _params: dict[str, Any] | None = field(default=None, repr=False)
    _ranges: dict[str, Range] | None = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        """False while the target is still a lazy ``"module:attr"`` string."""
        return not isinstance(self.target, str)

    @property
    def obj(self) -> T:
        """The callable, importing a lazy ``"module:attr"`` target on first use."""
        if isinstance(self.target, str):
            if self.origin is None:
                loaded = import_target(self.target)
                _verify(loaded, self.check)
            else:
                loaded = self._load_plugin(self.target, self.origin)
            self.target = loaded
            if not self.summary:
                self.summary = _summary(loaded)
        return self.target  # type: ignore[return-value]

    def _load_plugin(self, target: str, origin: str) -> T:
        try:
            loaded = _quiet_import(target)
        except Exception as exc:  # any failure in the plugin's own import names the plugin
            cause = exc.__cause__ if isinstance(exc, UserError) and exc.__cause__ else exc
            raise PluginError(f"{origin} cannot be loaded: {type(cause).__name__}: {cause}") from exc
        try:
            _verify(loaded, self.check)
        except TypeError as exc:
            raise PluginError(f"{origin} does not fit: {exc}") from None
        return loaded  # type: ignore[no-any-return]

    @property
    def params(self) -> dict[str, Any]:
        """Keyword-only hyper-parameters and their defaults."""
        if self._params is None:
            self._params = _keyword_params(self.obj)
        return dict(self._params)

    @property
    def ranges(self) -> dict[str, Range]:
        """The declared :class:`Range` of each hyper-parameter that has one."""
        if self._ranges is None:
            self._ranges = _keyword_ranges(self.obj)
        return dict(self._ranges)

    def resolve_params(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults updated by ``overrides`` (strings coerced to each default's type).

        Raises :class:`UnknownParamError` naming any key the plugin does not declare, and
        :class:`RegistryError` naming a value outside its declared :class:`Range` or not finite.
        """
        import difflib

        params = self.params
        ranges = self.ranges
        for key, raw in (overrides or {}).items():
            if key not in params:
                close = difflib.get_close_matches(key, list(params), n=1, cutoff=0.5)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                known = ", ".join(params) or "none"
                raise UnknownParamError(
                    f"unknown parameter {key!r} for {self.name!r}.{hint} Known parameters: {known}."
                )
            value = coerce_value(raw, params[key], key=key)
            check_value(value, params[key], ranges.get(key), key=key, owner=self.name)
            params[key] = value
        return params


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that cannot be used: its name, where it came from and why (listed, never raised)."""

    name: str
    source: str
    reason: str


def _verify(obj: Any, check: Check | None) -> None:
    """``TypeError`` unless ``obj`` is callable, its hyper-parameters have defaults and ``check`` passes."""
    if not callable(obj):
        raise TypeError(f"it is a {type(obj).__name__}, not a function")
    try:
        inspect.signature(obj)
    except (TypeError, ValueError) as exc:  # e.g. a C function without introspectable parameters
        raise TypeError(f"cannot read the parameters of {obj!r}: {exc}") from None
    defaults = _keyword_params(obj)
    for key, bound in _keyword_ranges(obj).items():
        if not bound.admits(defaults[key]):
            raise TypeError(f"the default {defaults[key]!r} of hyper-parameter {key!r} is not {bound}")
    if check is not None:
        check(obj)


class Registry(Generic[T]):
    """Maps names (and aliases) to plugins, refusing duplicates.

    ``group``: the entry-point group plugins from other distributions register in (e.g.
    ``mrbench.methods``). ``check``: the protocol every plugin's object must fit, run when it is
    registered or loaded. ``path_check``: what an object named by a ``"module:attr"`` path must
    also fit unless it is registered already (a method's declared signature: naming any function
    of any module must not make it a plugin).
    """

    def __init__(
        self,
        kind: str,
        *,
        group: str | None = None,
        check: Check | None = None,
        path_check: Check | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.check = check
        self.path_check = path_check
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}
        self._discovered = False
        self.problems: list[PluginProblem] = []
        """Entry points that were not registered (a bad value, a name already taken)."""

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
        """Decorator registering ``fn`` under ``name``; summary defaults to its docstring's first line.

        ``fn`` must fit the registry's protocol (``TypeError`` otherwise, when its module is
        imported). Used by plugin authors as ``mrbench.register_method`` / ``mrbench.register_task``.
        """

        def decorator(fn: T) -> T:
            _verify(fn, self.check)
            text = summary if summary is not None else _summary(fn)
            existing = self._entries.get(name)
            if existing is not None and existing.target == path_of(fn):
                # An entry point names this very function: loading it imported the module, which
                # ran this decorator. One plugin, registered once, keeping its entry-point source.
                existing.target, existing.summary = fn, existing.summary or text
                self._add_aliases(existing, aliases)
                return fn
            self._add(Entry(name, fn, text, aliases, source_of(getattr(fn, "__module__", ""))))
            return fn

        return decorator

    def _add_aliases(self, entry: Entry[T], aliases: tuple[str, ...]) -> None:
        for alias in aliases:
            if alias in self._entries or alias in self._aliases:
                raise RegistryError(f"{self.kind} {alias!r} is already registered")
            self._aliases[alias] = entry.name
        entry.aliases = (*entry.aliases, *aliases)

    def register_lazy(
        self, name: str, target: str, *, summary: str = "", aliases: tuple[str, ...] = ()
    ) -> None:
        """Register ``"module:attr"``, imported only when the entry is first used."""
        if ":" not in target:
            raise RegistryError(f"lazy target {target!r} must look like 'module:attr'")
        source = source_of(target.partition(":")[0])
        origin = None if source == BUILT_IN else f"{self.kind} {name!r} ({target})"
        self._add(Entry(name, target, summary, aliases, source, origin, self.check))

    def _lookup(self, name: str) -> Entry[T] | None:
        return self._entries.get(self._aliases.get(name, name))

    def get(self, name: str) -> Entry[T]:
        """The entry for ``name``, an alias, an entry point's name or a ``"module:attr"`` path.

        Raises :class:`UnknownNameError` (with suggestions) for an unknown name and
        :class:`PluginError` for a ``"module:attr"`` path that cannot be imported or does not fit.
        """
        entry = self._lookup(name)
        if entry is not None:
            return entry
        if ":" in name:
            return self._resolve_path(name)
        self.discover()
        entry = self._lookup(name)
        if entry is None:
            # A plugin module may register more names with the decorator when it is imported.
            self._load_plugins()
            entry = self._lookup(name)
        if entry is None:
            raise UnknownNameError(self.kind, name, list(self._entries) + list(self._aliases))
        return entry

    def _resolve_path(self, name: str) -> Entry[T]:
        """Register ``"module:attr"`` under that very string (the name its runs are recorded with)."""
        module, _, attr = name.partition(":")
        if not module.strip() or not attr.strip():
            raise PluginError(f"{self.kind} {name!r}: expected a registered name or 'module:attr'")
        entry: Entry[T] = Entry(name, name, source=f"module {module}", origin=f"{self.kind} {name!r}")
        entry.check = self._path_check
        entry.obj  # noqa: B018 - load now: a bad path fails here, naming itself
        self._entries[name] = entry
        return entry

    def _path_check(self, obj: Any) -> None:
        """The protocol, then :attr:`path_check` unless ``obj`` is a registered plugin already."""
        if self.check is not None:
            self.check(obj)
        registered = any(e.loaded and e.target is obj for e in self._entries.values())
        if self.path_check is not None and not registered:
            self.path_check(obj)

    def discover(self) -> None:
        """Register the entry points of :attr:`group` (once; nothing is imported here).

        An entry point whose value is not ``module:attr`` or whose name is already taken is left
        out and recorded in :attr:`problems`.
        """
        if self._discovered or self.group is None:
            return
        self._discovered = True
        for ep in entry_points(group=self.group):
            dist = ep.dist.name if ep.dist is not None else "an unknown distribution"
            source, label = f"entry point {dist}", f"entry point {ep.name!r} of {dist}"
            if not ep.attr:
                reason = f"{label}: value {ep.value!r} must look like 'module:attr'"
                self.problems.append(PluginProblem(ep.name, source, reason))
                continue
            target = f"{ep.module}:{ep.attr}"
            if ep.name in self._entries or ep.name in self._aliases:
                taken = self._lookup(ep.name)
                if taken is not None and path_of(taken.target) == target:
                    continue  # the same plugin, already registered by its decorator
                reason = f"{label} is ignored: {self.kind} {ep.name!r} is already registered"
                self.problems.append(PluginProblem(ep.name, source, reason))
                continue
            origin = (
                f"{self.kind} plugin {ep.name!r} (entry point '{ep.name} = {target}' "
                f"in group {self.group}, from {dist})"
            )
            self._add(Entry(ep.name, target, "", (), source, origin, self.check))

    def _load_plugins(self) -> list[PluginProblem]:
        """Load every plugin entry not loaded yet; the ones that fail, with their errors."""
        failed: list[PluginProblem] = []
        for entry in list(self._entries.values()):
            if entry.origin is not None and not entry.loaded:
                try:
                    entry.obj  # noqa: B018
                except PluginError as exc:
                    failed.append(PluginProblem(entry.name, entry.source, str(exc)))
        return failed

    def catalog(self) -> tuple[list[Entry[T]], list[PluginProblem]]:
        """Every usable entry in registration order (built-ins first; plugins loaded, the built-in
        lazy ones not) and the plugins that cannot be used; for ``mrbench methods`` / ``tasks``."""
        self.discover()
        failed = self._load_plugins()
        broken = {p.name for p in failed}
        return [e for e in self._entries.values() if e.name not in broken], [*self.problems, *failed]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[Entry[T]]:
        """The entries registered so far (no discovery: the built-ins, unless plugins were used)."""
        return iter(list(self._entries.values()))

    def names(self) -> list[str]:
        """Registered names in registration order (aliases excluded)."""
        return list(self._entries)

    def builtin_names(self) -> list[str]:
        """The names mrbench registers itself, whatever plugins are installed or were used: what
        must not depend on them (e.g. the tiny models' warm start) iterates these."""
        return [name for name, entry in self._entries.items() if entry.source == BUILT_IN]
