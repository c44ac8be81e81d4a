"""Dotted-key overrides of plain scenario data: ``--set``, ``--grid``, compare's variants, the
lessons' and the tests' scenario tweaks all go through ``set_dotted``."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from servesim.errors import InputError
from servesim.inputs.schema import load_yaml


def override_texts(given, who: str) -> list[str]:
    """Overrides handed over from Python as the list of ``key=value`` texts they must be (None:
    none; any iterable of texts). One text given bare was taken character by character ("--set
    'w': expected dotted.key=value"), a mapping as its keys: a ``TypeError`` naming ``who`` instead."""
    texts = [] if given is None else list(given) if not isinstance(given, (str, bytes, Mapping)) \
        and hasattr(given, "__iter__") else None
    if texts is None or not all(isinstance(o, str) for o in texts):
        hint = ""
        if isinstance(given, str):
            hint = " (one override: put it in a list)"
        elif isinstance(given, Mapping) and given:  # (its keys alone read as "--set 'seed': expected key=value")
            key, value = next(iter(given.items()))
            text = value if isinstance(value, str) else json.dumps(value, default=str)  # (YAML: true, null)
            hint = f" (a mapping: write [{f'{key}={text}'!r:.60}])"
        raise TypeError(f"{who}: a list of 'dotted.key=value' strings, got {given!r:.80}{hint}")
    return texts


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed as a YAML scalar)."""
    parts, raw = _split_override(text)
    return parts, parse_value(raw)


def _split_override(text: str) -> tuple[list[str], str]:
    """``a.b.c=value`` -> (["a", "b", "c"], the value's text); an ``InputError`` when it is not
    of that form."""
    if "=" not in text:
        words = text.split()
        raise InputError(f"--set {text!r}: expected dotted.key=value, with no space around '=' (e.g. "
                         f"--set {words[0] if words else 'workload.num_requests'}=VALUE)")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise InputError(f"--set {text!r}: empty key segment")
    if not raw.strip():
        # (it read as null: "--set workload.num_requests=" said "give num_requests or duration_s", not
        # what was given, and "--set slo.ttft_s=" silently dropped the TTFT limit)
        raise InputError(f"--set {text!r}: no value after '=' for {key.strip()}; give its value, null to unset "
                         "the field, or '' for an empty text")
    return parts, raw


def parse_value(raw: str) -> Any:
    """A command-line value as YAML reads it (``8`` -> 8, ``null`` -> None, ``[1, 2]`` -> a
    list); text that is not valid YAML stays text; empty -> None (``--set`` and ``--grid`` refuse an
    empty value before it gets here)."""
    if not raw.strip():
        return None
    try:
        return load_yaml(raw)
    except yaml.YAMLError:
        return raw


_SEGMENT = re.compile(r"^([^.\[\]]+)((?:\[[0-9]+\])*)$")  # (ASCII digits: DIGITS_RULE; \d takes ١ as 1)


def _steps(key: str, flag: str) -> list:
    """``a.b[1].c`` -> ["a", "b", 1, "c"]: mapping keys and list indexes, in the notation the
    error messages use for a field path (``workload.classes[0].share``)."""
    steps = []
    for seg in key.split("."):
        m = _SEGMENT.match(seg)
        if not seg or m is None:
            raise InputError(f"{flag} {key!r}: " + ("empty key segment" if not seg else
                             f"{seg!r} is not a field name, optionally with list indexes (classes[0])"))
        steps.append(m.group(1))
        steps += [int(i) for i in re.findall(r"[0-9]+", m.group(2))]
    return steps


def _shown(steps) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else (f".{s}" if i else s) for i, s in enumerate(steps))


def set_dotted(data: dict, key: str, value, flag: str = "--set") -> dict:
    """Set ``a.b.c`` in a nested mapping, creating mappings on the way (and in place of nulls);
    ``a.b[1].c`` sets a field of a list's element (``workload.classes[0].share``; the element must
    exist). ``flag`` names the option in errors."""
    steps = _steps(key, flag)
    node = data
    for i, step in enumerate(steps[:-1]):
        nxt_is_index = isinstance(steps[i + 1], int)
        if isinstance(step, int):
            nxt = node[step]  # (checked below, when ``node`` was reached)
        else:
            nxt = node.get(step)
            if nxt is None and not nxt_is_index:
                nxt = node[step] = {}
        where = _shown(steps[: i + 1])
        if nxt_is_index:
            if not isinstance(nxt, list):
                raise InputError(f"{flag} {key!r}: {where} is not a list" + (" (it is not set)" if nxt is None else ""))
            if steps[i + 1] >= len(nxt):
                raise InputError(f"{flag} {key!r}: {where} has {len(nxt)} entries, so indexes 0 to {len(nxt) - 1}")
        elif not isinstance(nxt, dict):
            # (a list entered with a dot, workload.classes.0.share: its entries are indexed)
            hint = ""
            if isinstance(nxt, list):
                rest = list(steps[i + 1:])
                index = int(rest.pop(0)) if isinstance(rest[0], str) and rest[0].isdigit() else 0
                hint = f" but a list: index an entry, e.g. {where}[{index}]{_shown(['', *rest])}"
            raise InputError(f"{flag} {key!r}: {where} is not a mapping{hint}")
        node = nxt
    node[steps[-1]] = value
    return data


def check_overrides(overrides) -> None:
    """Each ``key=value`` text of ``overrides`` is well formed (``parse_override``): checked before
    the scenario file is read, so that ``--set key value`` (a space for '=') is named as such, not
    as a scenario file ``value`` that does not exist (argparse takes ``value`` as the scenario).
    The values are parsed once, when applied."""
    for text in overrides:
        _split_override(text)


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
