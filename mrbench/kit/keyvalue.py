"""The one ``key=value`` parser for settings typed on the command line (``--param``, ``--train``,
``--task-param`` of ``mrbench run``, ``advantages`` and ``score``).

The rules, the same for every flag:

- an item is split at its first ``=``, so a value may itself contain ``=`` (``tag=a=b`` → ``a=b``);
- whitespace around the key and around the value is dropped (``" eps = 1e-4 "`` → ``eps``, ``1e-4``);
- an item without ``=``, with an empty key, or with whitespace inside the key is refused;
- a key given twice is refused, even with the same value: which one was meant is not ours to guess;
- the value may be empty (``eval_dataset=`` sets the empty string); a setting with a numeric or
  boolean default refuses it when the registry coerces it.

Values stay strings: the registry converts each to the type of the setting's default. Every
refusal is a :class:`~mrbench.core.errors.UserError` naming the flag and the bad item.

>>> parse_key_values(["eps=1e-4", " n_train = 16 ", "tag=a=b", "eval_dataset="], flag="--param")
{'eps': '1e-4', 'n_train': '16', 'tag': 'a=b', 'eval_dataset': ''}
>>> parse_key_values(["eps"], flag="--param")
Traceback (most recent call last):
...
mrbench.core.errors.UserError: --param expects key=value, got 'eps'
"""

from __future__ import annotations

from collections.abc import Iterable

from mrbench.core.errors import UserError


def parse_key_value(item: str, *, flag: str) -> tuple[str, str]:
    """One ``"key=value"`` item → ``(key, value)``, both stripped; :class:`UserError` otherwise."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep:
        raise UserError(f"{flag} expects key=value, got {item!r}")
    if not key:
        raise UserError(f"{flag} expects key=value, got {item!r} (empty key)")
    if any(ch.isspace() for ch in key):
        raise UserError(f"{flag} expects key=value, got {item!r} (whitespace inside the key {key!r})")
    return key, value.strip()


def parse_key_values(items: Iterable[str], *, flag: str) -> dict[str, str]:
    """``["key=value", …]`` → ``{key: value}`` in the order given, by the rules above."""
    out: dict[str, str] = {}
    for item in items:
        key, value = parse_key_value(item, flag=flag)
        if key in out:
            raise UserError(f"{flag} {key!r} given twice ({out[key]!r} and {value!r})")
        out[key] = value
    return out
