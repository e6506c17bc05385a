import pytest

from mrbench.core.registry import Registry, RegistryError, UnknownNameError, UnknownParamError, coerce_value


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

    @reg.register("bad")
    def bad(x, *, eps):
        return x

    with pytest.raises(TypeError, match="needs a default"):
        _ = reg.get("bad").params


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
