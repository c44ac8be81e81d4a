"""One way to read and validate every input file: plain data -> frozen dataclasses.

A schema is a dataclass whose type hints say what each field holds (``int``, ``float``, ``str``,
``bool``, ``Literal[...]``, ``tuple[X, ...]``, ``Optional[X]``, another dataclass, a union of
dataclasses told apart by a one-value ``Literal`` tag such as ``dist`` or ``process``, or ``Any``
for data the schema does not look into) and whose ``field_`` metadata gives numeric bounds.
``build`` checks types, bounds and unknown keys and raises ``InputError`` naming the field path,
what is valid and, for an unknown key or choice, the closest valid one. A schema class may define
``expand(data, path) -> data`` (fill or pre-check the raw mapping) and ``check(self, path)``
(rules across fields), both called by ``build``.

Files are read with ``read_mapping`` (YAML or JSON), whose errors name the file, and line and
column for a syntax error. The scenario, GPU YAML, calibration YAML and Hugging Face config.json
readers all use this module.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from servesim.errors import InputError, did_you_mean


def field_(default=dataclasses.MISSING, *, gt=None, ge=None, le=None, lt=None, valid=None, doc="", **kw):
    """A dataclass field with bounds that ``build`` checks (gt: >, ge: >=, le: <=, lt: <).

    ``valid``: how to say what is valid when the value is not (e.g. ``"in (0, 1]"``); without it
    the message names the bound that failed.
    """
    meta = bounds(gt=gt, ge=ge, le=le, lt=lt, valid=valid, doc=doc)
    if default is dataclasses.MISSING:
        return field(metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


def bounds(gt=None, ge=None, le=None, lt=None, valid=None, doc="") -> dict:
    """Field metadata as ``field_`` stores it (for ``check_value`` on a value outside a dataclass)."""
    return {"gt": gt, "ge": ge, "le": le, "lt": lt, "valid": valid, "doc": doc}


_NO_BOUNDS = bounds()


# ---------------------------------------------------------------- reading files
class _Loader(yaml.SafeLoader):
    """Safe YAML that also reads ``1e15`` (no dot) as a number, as YAML 1.2 does; PyYAML's YAML 1.1
    rules take it for a string, and a GPU's ``peak_flops: 989e12`` should mean what it says."""


# copy the resolver lists: add_implicit_resolver appends to lists shared with SafeLoader
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


def load_yaml(text: str):
    """``text`` parsed as safe YAML (with ``1e15`` a number): for files and ``--set`` values alike."""
    return yaml.load(text, Loader=_Loader)


def read_mapping(path: str | Path, what: str, where: str = "", fmt: str | None = None) -> dict:
    """The mapping a YAML or JSON file holds (``fmt``: ``yaml`` | ``json``; None: JSON for a
    ``.json`` file). Errors name the file (``what`` says which kind, e.g. ``GPU file``), and line
    and column for a syntax error; ``where`` (an option or field, e.g. ``hardware.gpu``) leads them
    when given."""
    p = Path(path)
    lead = f"{where}: " if where else ""
    if not p.exists():
        raise InputError(f"{lead}{what} {str(p)!r} does not exist")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{lead}cannot read {what} {str(p)!r}: {getattr(e, 'strerror', None) or e}") from None
    if (fmt or ("json" if p.suffix == ".json" else "yaml")) == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{lead}{p}: line {e.lineno}, column {e.colno}: malformed JSON: {e.msg}") from None
        kind = "JSON object"
    else:
        try:
            data = load_yaml(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise InputError(f"{lead}{p}:{at} malformed YAML: {problem}") from None
        kind = "YAML mapping"
    if not isinstance(data, dict):
        raise InputError(f"{lead}{p}: a {what} must be a {kind}, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- values
def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if origin is tuple:
        return "a list"
    if tp is bool:
        return "true or false"
    return "a mapping"


def _range_text(meta: dict) -> str:
    """`` > 0 and <= 1``: the bounds of a field, for a message."""
    parts = [f"{op} {meta[k]}" for k, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
             if meta.get(k) is not None]
    return (" " + " and ".join(parts)) if parts else ""


def _bad(path: str, meta: dict, what: str, value) -> InputError:
    """``path must be <what>, got value``, or the field's own ``valid`` text when it has one."""
    return InputError(f"{path} must be {meta.get('valid') or what}, got {value!r}")


def check_value(tp, value, path: str, meta: dict = _NO_BOUNDS):
    """``value`` converted to type ``tp`` and checked against the bounds in ``meta``; an
    ``InputError`` naming ``path`` otherwise."""
    value = _convert(tp, value, path, meta)
    if value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok, op in (("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
                            ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
            b = meta.get(key)
            if b is not None and not ok(value, b):
                raise _bad(path, meta, f"{op} {b}", value)
    return value


def _convert(tp, value, path, meta=_NO_BOUNDS):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        non_none = [a for a in args if a is not type(None)]
        if value is None and type(None) in args:
            return None
        if len(non_none) == 1:
            return _convert(non_none[0], value, path, meta)
        return _build_tagged(non_none, value, path)
    if origin is Literal:
        if value not in args:
            raise InputError(f"{path}: {value!r} is not valid;{did_you_mean(value, [str(a) for a in args])}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{path} must be a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise _bad(path, meta, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and not math.isfinite(value)) or int(value) != value:
            raise _bad(path, meta, "an integer", value)
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(path, meta, "a number", value)
        if value != value or value in (float("inf"), float("-inf")):
            raise _bad(path, meta, "a finite number" + _range_text(meta), value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(path, meta, "a string", value)
        return value
    raise TypeError(f"unsupported field type {tp} at {path}")  # a bug in the schema, not input


def _build_tagged(options, value, path):
    """A union of dataclasses told apart by a tag: the first field whose type is a one-value
    ``Literal`` (``dist``, ``process``)."""
    hints = typing.get_type_hints(options[0])
    tag_field = next(f.name for f in dataclasses.fields(options[0])
                     if typing.get_origin(hints[f.name]) is Literal and len(typing.get_args(hints[f.name])) == 1)
    by_tag = {typing.get_args(typing.get_type_hints(o)[tag_field])[0]: o for o in options}
    if not isinstance(value, dict):
        raise InputError(f"{path} must be a mapping with a {tag_field!r} key, got {value!r}")
    if tag_field not in value:
        raise InputError(f"{path}.{tag_field} is missing; valid: {', '.join(by_tag)}")
    tag = value[tag_field]
    if not isinstance(tag, str) or tag not in by_tag:
        raise InputError(f"{path}.{tag_field}: {tag!r} is not valid;{did_you_mean(str(tag), by_tag)}")
    return build(by_tag[tag], value, path)


# ---------------------------------------------------------------- dataclasses
def build(cls, data, path: str, root: str = "scenario"):
    """Build dataclass ``cls`` from plain data, checking types, bounds and unknown keys.

    ``path`` is the field path of ``data`` ("" at the top of a file; ``root`` then names it in
    the one message that has no field to name: the file's content is not a mapping).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{path or root} must be a mapping, got {data!r}")
    if hasattr(cls, "expand"):
        data = cls.expand(data, path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            raise InputError(f"{where}: unknown field;{did_you_mean(str(key), fields)}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = check_value(hints[name], data[name], where, f.metadata or _NO_BOUNDS)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(f"{where} is missing: expected {_type_name(hints[name])}")
    obj = cls(**kwargs)
    if hasattr(obj, "check"):
        obj.check(path or root)
    return obj


def build_file(cls, data, where: str, root: str):
    """``build`` at the top of a file, each error led by ``where`` (the option or field that named
    the file, and the file)."""
    try:
        return build(cls, data, "", root)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
