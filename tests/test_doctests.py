"""Run the doctest examples in every module of the mrbench package."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("mrbench",)


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names.append(package)
        names.extend(info.name for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."))
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_module_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
