import inspect
import sys

import pytest

from mrbench.core.errors import PluginError, RegistryError, UnknownNameError, UnknownParamError, UserError
from mrbench.core.registry import BUILT_IN, Registry, coerce_value


def make_registry() -> Registry:
    reg: Registry = Registry("widget")

    @reg.register("alpha", aliases=("a",))
    def alpha(x, *, eps: float = 1e-6, n: int = 3, flag: bool = False):
        """Alpha does things.

        More text."""
        return x

    return reg


def test_register_records_params_and_summary():
    entry = make_registry().get("alpha")
    assert entry.params == {"eps": 1e-6, "n": 3, "flag": False}
    assert entry.summary == "Alpha does things."


def test_alias_resolves_to_same_entry():
    reg = make_registry()
    assert reg.get("a") is reg.get("alpha")
    assert reg.names() == ["alpha"]


def test_unknown_name_suggests_close_match():
    with pytest.raises(UnknownNameError) as err:
        make_registry().get("alpah")
    assert err.value.suggestions == ["alpha"]
    assert "did you mean 'alpha'" in str(err.value).lower()


def test_duplicate_name_or_alias_refused():
    reg = make_registry()
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("alpha")(lambda x: x)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("beta", aliases=("a",))(lambda x: x)


def test_resolve_params_coerces_strings_and_rejects_unknown():
    entry = make_registry().get("alpha")
    assert entry.resolve_params({"eps": "0.5", "n": "7", "flag": "true"}) == {
        "eps": 0.5,
        "n": 7,
        "flag": True,
    }
    with pytest.raises(UnknownParamError, match="Did you mean 'eps'"):
        entry.resolve_params({"esp": "1"})
    with pytest.raises(RegistryError, match="expected int"):
        entry.resolve_params({"n": "seven"})


def test_keyword_only_params_need_defaults():
    reg: Registry = Registry("widget")

    def bad(x, *, eps):
        return x

    # Refused when the decorator runs, i.e. when the plugin's module is imported.
    with pytest.raises(TypeError, match="needs a default"):
        reg.register("bad")(bad)
    assert "bad" not in reg


def test_lazy_entry_imports_on_first_use():
    reg: Registry = Registry("thing")
    reg.register_lazy("dumps", "json:dumps")
    entry = reg.get("dumps")
    assert isinstance(entry.target, str)
    assert entry.obj([1]) == "[1]"
    assert not isinstance(entry.target, str)
    with pytest.raises(RegistryError, match="module:attr"):
        reg.register_lazy("bad", "json.dumps")


def test_coerce_value_keeps_non_strings():
    assert coerce_value(3, 1.0, key="x") == 3
    assert coerce_value("2", None, key="x") == 2
    assert coerce_value("abc", None, key="x") == "abc"


# ----------------------------------------------------------------------------------- plugins
# A distribution is a `<name>-<version>.dist-info` folder on sys.path: importlib.metadata finds
# its entry points exactly as for one that pip installed (tests/test_plugins.py installs one).

PLUGIN_MODULE = '''
def good(x, *, eps: float = 0.5):
    """Good widget."""
    return x


def positional(x, y, z):
    return x
'''


@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    """``make(dist, module_source, entry_points)`` → a group name whose entry points are those given
    (``{name: value}``), served by a distribution ``dist`` with one module; unique per call."""
    made: list[str] = []

    def make(dist: str, source: str, eps: dict[str, str]) -> tuple[str, str]:
        n = len(made)
        module, group = (
            f"widget_plugin_{tmp_path.name}_{n}".replace("-", "_"),
            f"test.widgets.{tmp_path.name}.{n}",
        )
        site = tmp_path / f"site{n}"
        info = site / f"{dist}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = [f"{name} = {value.replace('MOD', module)}" for name, value in eps.items()]
        (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
        (site / f"{module}.py").write_text(source.replace("MOD", module))
        monkeypatch.syspath_prepend(str(site))
        made.append(module)
        return group, module

    yield make
    for module in made:
        sys.modules.pop(module, None)


def test_entry_points_are_found_lazily_with_their_source(plugin_site):
    group, module = plugin_site("widget-pack", PLUGIN_MODULE, {"good": "MOD:good"})
    reg: Registry = Registry("widget", group=group)
    assert "good" not in reg  # nothing is discovered before a name is missed or the registry listed
    entry = reg.get("good")
    assert entry.source == "entry point widget-pack" and not entry.loaded
    assert module not in sys.modules  # discovery reads metadata only
    assert entry.params == {"eps": 0.5} and entry.summary == "Good widget."
    assert entry.obj(3) == 3 and module in sys.modules
    assert reg.builtin_names() == []


def test_broken_entry_point_named_in_error_and_listed_beside_the_others(plugin_site):
    group, _ = plugin_site(
        "widget-pack",
        PLUGIN_MODULE,
        {"good": "MOD:good", "gone": "MOD:missing", "nomod": "no_such_module_xyz:fn"},
    )
    reg: Registry = Registry("widget", group=group)

    def builtin(x, *, n: int = 1):
        return x

    builtin.__module__ = "mrbench.fake"  # what mrbench registers itself counts as built-in
    reg.register("builtin")(builtin)
    with pytest.raises(
        PluginError, match=r"widget plugin 'nomod' \(entry point 'nomod = no_such_module_xyz:fn'"
    ):
        _ = reg.get("nomod").obj
    with pytest.raises(PluginError, match=r"from widget-pack\) cannot be loaded: AttributeError"):
        _ = reg.get("gone").obj
    entries, problems = reg.catalog()
    assert [e.name for e in entries] == ["builtin", "good"]
    assert [e.source for e in entries] == [BUILT_IN, "entry point widget-pack"]
    assert {p.name: p.source for p in problems} == {
        "gone": "entry point widget-pack",
        "nomod": "entry point widget-pack",
    }
    assert all(p.name in p.reason and "widget-pack" in p.reason for p in problems)
    assert reg.builtin_names() == ["builtin"]


def test_check_refuses_a_plugin_that_does_not_fit(plugin_site):
    group, _ = plugin_site("widget-pack", PLUGIN_MODULE, {"pos": "MOD:positional"})

    def one_positional(fn):
        inspect.signature(fn).bind(None)

    reg: Registry = Registry("widget", group=group, check=one_positional)
    with pytest.raises(PluginError, match=r"'pos'.*does not fit: missing a required argument"):
        _ = reg.get("pos").obj
    with pytest.raises(TypeError):  # the decorator refuses it at once
        reg.register("direct")(lambda: None)


def test_entry_point_may_not_shadow_a_registered_name(plugin_site):
    group, _ = plugin_site("widget-pack", PLUGIN_MODULE, {"alpha": "MOD:good", "bad value": "MOD"})
    reg = make_registry()
    reg.group = group
    entries, problems = reg.catalog()
    assert [e.name for e in entries] == ["alpha"] and entries[0].params["n"] == 3  # the original
    reasons = {p.name: p.reason for p in problems}
    assert "already registered" in reasons["alpha"] and "must look like 'module:attr'" in reasons["bad value"]


def test_decorator_in_an_entry_point_module_registers_once(plugin_site):
    source = '''
from mrbench.core.registry import Registry
import sys

REG = sys.modules["__test_registry__"]


@REG.register("decorated")
def decorated(x, *, k: int = 2):
    """Decorated widget."""
    return x


@REG.register("extra")
def extra(x):
    """Only the decorator names this one."""
    return x
'''
    group, module = plugin_site("deco-pack", source, {"decorated": "MOD:decorated"})
    reg: Registry = Registry("widget", group=group)
    sys.modules["__test_registry__"] = reg  # type: ignore[assignment]
    try:
        # "extra" is no entry point: a miss loads the plugins, whose decorators register it.
        extra = reg.get("extra")
        assert extra.source == f"module {module}" and extra.loaded
        entry = reg.get("decorated")
        assert entry.source == "entry point deco-pack" and entry.params == {"k": 2}
        assert reg.names() == ["decorated", "extra"]
        with pytest.raises(UnknownNameError, match="Did you mean 'extra'"):
            reg.get("extr")
    finally:
        del sys.modules["__test_registry__"]


def test_module_attr_names_resolve_under_the_given_string():
    reg: Registry = Registry("widget")
    entry = reg.get("json:dumps")
    assert entry.name == "json:dumps" and entry.source == "module json" and entry.obj([1]) == "[1]"
    assert reg.get("json:dumps") is entry
    assert reg.get("os.path:join").obj("a", "b") == "a/b"
    with pytest.raises(
        PluginError, match=r"widget 'no_such_module_xyz:fn' cannot be loaded: ModuleNotFoundError"
    ):
        reg.get("no_such_module_xyz:fn")
    with pytest.raises(PluginError, match=r"widget 'json:nope' cannot be loaded: AttributeError"):
        reg.get("json:nope")
    with pytest.raises(PluginError, match="expected a registered name or 'module:attr'"):
        reg.get(":dumps")
    assert "json:nope" not in reg


def test_registry_errors_are_user_errors_and_value_errors():
    for cls in (RegistryError, UnknownNameError, UnknownParamError, PluginError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError)


NOISY_MODULE = '''
print("imported, and said so")


def registered(a, b):
    """Registered under another signature."""
    return a


def unregistered(a, b):
    return a


def fits(rewards, weights, *, eps: float = 0.5):
    return rewards
'''


def _estimator_names(fn):
    """The path check of a method registry: the estimator's parameter names."""
    if list(inspect.signature(fn).parameters)[:2] != ["rewards", "weights"]:
        raise TypeError("is not an estimator")


def test_a_module_path_must_fit_the_path_check_unless_registered(plugin_site, capsys):
    _, module = plugin_site("noisy-dist", NOISY_MODULE, {})
    reg: Registry = Registry("widget", path_check=_estimator_names)
    with pytest.raises(
        PluginError, match=f"widget '{module}:unregistered' does not fit: is not an estimator"
    ):
        reg.get(f"{module}:unregistered")
    assert reg.get(f"{module}:fits").params == {"eps": 0.5}
    reg.register("known")(sys.modules[module].registered)
    assert reg.get(f"{module}:registered").obj is sys.modules[module].registered  # registered: accepted
    # What the module printed while it was imported stays off the terminal.
    assert "said so" not in capsys.readouterr().out


def test_a_module_path_to_something_not_callable_is_refused_in_one_short_line():
    reg: Registry = Registry("widget")
    with pytest.raises(PluginError) as info:
        reg.get("string:ascii_letters")
    message = str(info.value)
    assert message == "widget 'string:ascii_letters' does not fit: it is a str, not a function"
