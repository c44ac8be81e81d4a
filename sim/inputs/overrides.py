"""Dotted-key overrides of plain scenario data: ``--set``, ``--grid``, compare's variants, the
lessons' and the tests' scenario tweaks all go through ``set_dotted``."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from servesim.errors import InputError
from servesim.inputs.schema import load_yaml


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed as a YAML scalar)."""
    if "=" not in text:
        raise InputError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise InputError(f"--set {text!r}: empty key segment")
    return parts, parse_value(raw)


def parse_value(raw: str) -> Any:
    """A command-line value as YAML reads it (``8`` -> 8, ``null`` -> None, ``[1, 2]`` -> a
    list); text that is not valid YAML stays text; empty -> None."""
    if not raw.strip():
        return None
    try:
        return load_yaml(raw)
    except yaml.YAMLError:
        return raw


def set_dotted(data: dict, key: str, value, flag: str = "--set") -> dict:
    """Set ``a.b.c`` in a nested mapping, creating mappings on the way (and in place of nulls);
    ``flag`` names the option in errors."""
    parts = key.split(".")
    if not all(parts):
        raise InputError(f"{flag} {key!r}: empty key segment")
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if not isinstance(nxt, dict):
            raise InputError(f"{flag} {key!r}: {'.'.join(parts[: i + 1])} is not a mapping")
        node = nxt
    node[parts[-1]] = value
    return data


def apply_overrides(data: dict, overrides) -> dict:
    """A copy of ``data`` with each ``key=value`` text of ``overrides`` set."""
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        set_dotted(data, ".".join(parts), value)
    return data


def with_values(data: dict, values: dict, flag: str = "--set") -> dict:
    """A copy of ``data`` with each ``{dotted.key: value}`` of ``values`` set."""
    data = copy.deepcopy(data)
    for key, value in values.items():
        set_dotted(data, key, value, flag)
    return data
