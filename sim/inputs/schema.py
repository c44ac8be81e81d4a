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
import difflib
import math
import numbers
import re
import stat
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from servesim.errors import (DIGITS_RULE, InputError, clip, did_you_mean, misgrouped_number, non_ascii_number,
                             prefixed_number, shown, shown_data, shown_path)
from servesim.inputs.files import decode_utf8, loads_json, resolve_path


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
MAX_YAML_BYTES = 8 << 20  # a scenario, GPU or calibration file is a few kB; this bounds the parse time
MAX_DEPTH = 50  # nesting of a YAML document, aliases expanded (a scenario nests ~6 deep)
MAX_NODES = 200_000  # scalars, lists and mappings of a YAML document, aliases expanded


_LONG_LIST = "(a scenario holds a few hundred; long lists of values belong in a trace or lengths file)"


class YamlLimit(yaml.YAMLError):
    """A YAML document servesim will not read (too deep, too large expanded, a key given twice,
    a number too long): ``problem`` says why, ``problem_mark`` where (or None)."""

    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(yaml.SafeLoader):
    """Safe YAML that also reads ``1e15`` (no dot) as a number, as YAML 1.2 does; PyYAML's YAML 1.1
    rules take it for a string, and a GPU's ``peak_flops: 989e12`` should mean what it says.

    Also refuses what would make a small file expensive or ambiguous: nesting deeper than
    ``MAX_DEPTH`` or more than ``MAX_NODES`` nodes once aliases are expanded (an alias bomb: a few
    hundred bytes whose anchors multiply into billions of nodes), recursive aliases, and a key
    given twice in one mapping (YAML leaves it undefined; PyYAML would keep the last silently)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlLimit(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        # (counted as they are composed, each alias once: a long list is refused at its 200,001st
        # value, not after minutes composing the megabytes past it; _expanded_size counts aliases)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlLimit(f"more than {MAX_NODES} values {_LONG_LIST}", self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # unhashable: the base class says so
                    continue
                if first is not key_node.start_mark:
                    raise YamlLimit(f"key {shown(key)} is given twice in one mapping (lines {first.line + 1} and "
                                    f"{key_node.start_mark.line + 1}); keep one", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _expanded_size(root) -> int:
    """Nodes of a composed YAML document with every alias expanded (each distinct node visited
    once: a DAG's shared parts are counted as often as they are reached, in linear time); a
    ``YamlLimit`` beyond ``MAX_NODES`` or ``MAX_DEPTH``, or for an alias inside its own anchor."""
    memo: dict = {}
    active: set = set()

    aliased = []  # (an alias met: a count past the limit is then likely a bomb, else a long list)

    def size(node, depth: int) -> tuple:
        key = id(node)
        if key in memo:
            aliased.append(True)
            n, d = memo[key]
            if depth + d > MAX_DEPTH:
                raise YamlLimit(f"nested deeper than {MAX_DEPTH} levels once aliases are expanded", node.start_mark)
            return n, d
        if key in active:
            raise YamlLimit("an alias refers to a node that contains it (a recursive structure)", node.start_mark)
        if depth > MAX_DEPTH:
            raise YamlLimit(f"nested deeper than {MAX_DEPTH} levels once aliases are expanded", node.start_mark)
        active.add(key)
        n, d = 1, 0
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [x for pair in node.value for x in pair]
        else:
            children = ()
        for child in children:
            cn, cd = size(child, depth + 1)
            n += cn
            d = max(d, cd + 1)
            if n > MAX_NODES:
                why = "once aliases are expanded (an alias bomb?)" if aliased else _LONG_LIST
                raise YamlLimit(f"more than {MAX_NODES} values {why}", node.start_mark)
        active.discard(key)
        memo[key] = (n, d)
        return n, d

    return size(root, 1)[0]


# copy the resolver lists: add_implicit_resolver appends to lists shared with SafeLoader
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_FLOAT_E = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")  # 1e15 (YAML 1.1 wants 1.0e+15)


# Integers in base 10 only, as every other input reads a number (DIGITS_RULE: a trace cell, a flag):
# YAML 1.1 (PyYAML's default) reads 0144 as octal 100 and 1:40 (and 1:40.5) as base 60, and YAML
# 1.2 0x10 as 16 and 0o17 as 15, which a trace cell or a flag refused; here 0144 is 144, and 1:40,
# 0x10, 0o17, 0b1 are text (an error naming the field where a number belongs). '_' groups digits
# as Python's int() takes it (1_000; not 1__0 or 10_).
_INT = re.compile(r"^[-+]?[0-9]+(?:_[0-9]+)*$")
# What either YAML 1.1 or 1.2 reads as an integer: the writer quotes such a string (0x1F, 1:40), for
# any reader of the file to take it as text.
_ANY_INT = re.compile(r"^[-+]?(?:0b[01_]*[01][01_]*|0o[0-7_]*[0-7][0-7_]*"
                      r"|0x[0-9a-fA-F_]*[0-9a-fA-F][0-9a-fA-F_]*|[0-9][0-9_]*)$")
# YAML 1.1's floats less its base-60 form (1:40.5 read as 100.5), and a sign before a leading dot
# (-.5, +.5: YAML 1.2 reads them, as a trace cell and a flag do; 1.1 read text, "write it without quotes")
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X)


# What the loader reads as a float: the forms above with '_' grouping digits as Python's float()
# takes it (1_000.5), as a trace cell and a flag read a number; 1__0.5 and 10_.5, which YAML 1.1
# reads as 10.5, are text (an error naming DIGITS_RULE where a number belongs). The writer quotes
# by the wider forms above, for any YAML reader of the file.
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_FLOAT_READ = re.compile(rf"""^(?:[-+]?{_DIGITS}\.(?:{_DIGITS})?(?:[eE][-+][0-9]+)?
                         |[-+]?\.{_DIGITS}(?:[eE][-+][0-9]+)?
                         |[-+]?\.(?:inf|Inf|INF)
                         |\.(?:nan|NaN|NAN))$""", re.X)
_FLOAT_E_READ = re.compile(rf"^[-+]?{_DIGITS}(?:\.(?:{_DIGITS})?)?[eE][-+]?[0-9]+$")


def _construct_int(loader, node) -> int:
    return int(loader.construct_scalar(node), 10)


# Booleans as YAML 1.2 has them: true and false (True, TRUE, False, FALSE) only. YAML 1.1 (PyYAML's
# default) also reads yes, no, on and off (any of three casings) as booleans: a name or a GPU
# written no was refused as "must be a string, got false", a key on: became True, and a field that
# takes a boolean took yes; now they are text, and a field that wants true or false says so
# (``_YAML11_BOOLS``).
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_YAML11_BOOLS = ("yes", "no", "on", "off")


def _yaml12_ints(loader) -> None:
    for first, resolvers in loader.yaml_implicit_resolvers.items():
        loader.yaml_implicit_resolvers[first] = [(t, r) for t, r in resolvers if t not in (
            "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
    loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
    loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
    loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_READ, list("-+0123456789."))
    loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_E_READ, list("-+0123456789"))
    loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


_yaml12_ints(_Loader)


class _Dumper(yaml.SafeDumper):
    """Writes YAML that ``load_yaml`` reads back as written: a string that either YAML 1.1 or the
    1.2 integers above would read as a number (``08``, ``0o17``) is quoted."""


# (a plain scalar is written only when neither reading resolves it: YAML 1.1's resolvers, and the
# loader's own on top of them, 1e15 floats and 1.2 integers)
_Dumper.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeDumper.yaml_implicit_resolvers.items()}
_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_E, list("-+0123456789"))
_Dumper.add_implicit_resolver("tag:yaml.org,2002:int", _ANY_INT, list("-+0123456789"))
_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))  # (text -.5 quoted)


def dump_yaml(data, **kw) -> str:
    """``yaml.safe_dump`` whose output ``load_yaml`` reads back as the same data."""
    return yaml.dump(data, Dumper=_Dumper, **kw)


class _PackagedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The same reading as ``_Loader`` (``1e15`` a number) through libyaml's C parser when PyYAML
    has it, without the guards against hostile files: for files shipped in the package only."""


_PackagedLoader.yaml_implicit_resolvers = {k: list(v) for k, v in _Loader.yaml_implicit_resolvers.items()}
_PackagedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_packaged_yaml(text: str):
    """``text`` of a file shipped with servesim, parsed as ``load_yaml`` would (a test checks they
    agree on every packaged file) at C speed: the calibration files are read by every run."""
    return yaml.load(text, Loader=_PackagedLoader)


def load_yaml(text: str):
    """``text`` parsed as safe YAML (with ``1e15`` a number): for files and ``--set`` values alike.
    Every failure is a ``yaml.YAMLError`` (a ``YamlLimit`` for what the loader refuses)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        raise
    except RecursionError:
        raise YamlLimit(f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as e:  # e.g. an integer of more than 4300 digits
        raise YamlLimit(f"cannot read a value: {shown(str(e), 120)}") from None


def read_file_bytes(path: str | Path, what: str, lead: str = "", limit: int | None = None) -> bytes:
    """The bytes of a regular file (not a device or pipe, which may never end), at most ``limit``
    bytes; errors name the file as given and ``what`` it is."""
    p = resolve_path(path)
    named = shown_path(path)
    try:
        st = p.stat()
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise InputError(f"{lead}{what} {named} does not exist") from None
        raise InputError(f"{lead}cannot read {what} {named}: {e.strerror or type(e).__name__}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{lead}{what} {named} is not a regular file")
    if limit is not None and st.st_size > limit:
        raise InputError(f"{lead}{what} {named} is {st.st_size} bytes; at most {limit} are read")
    try:
        return p.read_bytes()
    except OSError as e:
        raise InputError(f"{lead}cannot read {what} {named}: {e.strerror or type(e).__name__}") from None


def read_mapping(path: str | Path, what: str, where: str = "", fmt: str | None = None) -> dict:
    """The mapping a YAML or JSON file holds (``fmt``: ``yaml`` | ``json``; None: JSON for a
    ``.json`` file). Errors name the file (``what`` says which kind, e.g. ``GPU file``), and line
    and column for a syntax error (never a line of the file: it may be anything, e.g. a system
    file named by mistake); ``where`` (an option or field, e.g. ``hardware.gpu``) leads them
    when given. The file must be UTF-8 (else: the byte offset), at most ``MAX_YAML_BYTES``."""
    lead = f"{where}: " if where else ""
    p = Path(str(path))
    text = decode_utf8(path, read_file_bytes(path, what, lead, MAX_YAML_BYTES))
    if (fmt or ("json" if p.suffix == ".json" else "yaml")) == "json":
        data = loads_json(text, f"{lead}{path}", commas=True)
        kind = "JSON object"
    else:
        try:
            data = load_yaml(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise InputError(f"{lead}{path}:{at} malformed YAML: {clip(problem, 200)}") from None
        kind = "YAML mapping"
    if not isinstance(data, dict):
        got = type(data).__name__
        if data is None:  # (an empty file, or one of comments only, reads as YAML's null: "got NoneType")
            got = "an empty document (no fields)" if kind == "YAML mapping" else "null"
        raise InputError(f"{lead}{path}: a {what} must be a {kind}, got {got}")
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


def _num(b) -> str:
    """A bound as people write it (1e+09, not 1000000000.0; ints whole)."""
    if isinstance(b, float) and float(f"{b:g}") == b:
        return f"{b:g}"
    return str(b)


def _range_text(meta: dict) -> str:
    """`` > 0 and <= 1``: the bounds of a field, for a message."""
    parts = [f"{op} {_num(meta[k])}" for k, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
             if meta.get(k) is not None]
    return (" " + " and ".join(parts)) if parts else ""


def _bad(path: str, meta: dict, what: str, value) -> InputError:
    """``path must be <what>, got value``, or the field's own ``valid`` text when it has one (the
    value cut short: ``shown``)."""
    return InputError(f"{path} must be {meta.get('valid') or what}, got {shown_data(value)}")


MAX_TEXT = 4096  # characters of any text field (names, paths): enough for a path, not a document
MAX_ITEMS = 100_000  # entries of any list field


def check_value(tp, value, path: str, meta: dict = _NO_BOUNDS):
    """``value`` converted to type ``tp`` and checked against the bounds in ``meta``; an
    ``InputError`` naming ``path`` otherwise."""
    given = value
    value = _convert(tp, value, path, meta)
    if value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok, op in (("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
                            ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
            b = meta.get(key)
            if b is not None and not ok(value, b):
                # the whole range, lower bound first; the value as written (an integer field given
                # 1e300 showed int(1e300), 301 digits cut short, not 1e+300)
                shown_value = given if isinstance(given, float) and isinstance(value, int) and \
                    len(repr(given)) < len(str(value)) else value
                raise _bad(path, meta, _range_text(meta).strip(), shown_value)
    return value


def is_finite(value) -> bool:
    """``math.isfinite`` of a real number, False for an integer beyond a float's range (on which
    ``math.isfinite`` raises OverflowError and numpy's ``isfinite`` a TypeError: YAML, JSON and
    ``--set`` give integers of any size)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _text_number(value: str, path: str, meta: dict, what: str) -> None:
    """Text where a number belongs that reads as one: the error says so (``--set x=inf`` gives
    the text 'inf', as YAML spells infinity .inf; a quoted '5' is text; 0x10 is text, as in a
    trace cell: DIGITS_RULE; so are digits that '_' groups otherwise than Python's int() takes:
    1__0, 10_, _10). Other text is left to the caller's error."""
    if prefixed_number(value) or misgrouped_number(value):
        plain = "a number" if what == "a finite number" else what
        raise InputError(f"{path} must be {plain} written in {DIGITS_RULE}, got {shown(value)}")
    try:
        f = float(value)
    except ValueError:
        return
    plain = "a number" if what == "a finite number" else what
    if non_ascii_number(value):  # (１０: float() reads it; YAML, and so servesim, does not)
        raise InputError(f"{path} must be {plain} written in {DIGITS_RULE}, got the text {shown(value)}")
    if not math.isfinite(f):
        raise _bad(path, meta, what + _range_text(meta), value)
    raise InputError(f"{path} must be {plain}, got the text {shown(value)} (write it without quotes)")


def _plain_scalar(value):
    """A numpy scalar as the Python int, float or str it holds. Scenario data built in Python
    holds them (a loop over ``np.arange(...)`` gives ``np.int64``): refused, they read "seed must
    be an integer, got np.int64(3)"; kept, a scenario's YAML could not be written."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, str):  # (np.str_)
        return str(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):  # (np.bool_: no Integral)
        return bool(value)
    return value


def _convert(tp, value, path, meta=_NO_BOUNDS):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    value = _plain_scalar(value)
    if origin is Union or origin is types.UnionType:
        non_none = [a for a in args if a is not type(None)]
        if value is None and type(None) in args:
            return None
        if len(non_none) == 1:
            return _convert(non_none[0], value, path, meta)
        return _build_tagged(non_none, value, path)
    if origin is Literal:
        try:
            ok = value in args
        except TypeError:  # an unhashable or incomparable value is no choice
            ok = False
        if not ok:
            raise InputError(f"{path}: {shown(value)} is not valid;{did_you_mean(value, [str(a) for a in args])}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{path} must be a list, got {shown(value)}")
        if len(value) > MAX_ITEMS:
            raise InputError(f"{path} must have at most {MAX_ITEMS} entries, got {len(value)}")
        if dataclasses.is_dataclass(args[0]) and None in value:  # (an entry of null read as {}: "name is missing")
            at = f"{path}[{value.index(None)}]"
            raise InputError(f"{at} must be a mapping, got null{_mapping_hint(args[0], None, at)}")
        # a list field's bounds apply to each number in it
        return tuple(check_value(args[0], v, f"{path}[{i}]", meta) for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, str) and value.lower() in _YAML11_BOOLS:
            raise InputError(f"{path} must be true or false, got the text {shown(value)} (YAML 1.2, as servesim reads "
                             f"YAML, takes only true and false as booleans: write "
                             f"{'true' if value.lower() in ('yes', 'on') else 'false'})")
        if not isinstance(value, bool):
            raise _bad(path, meta, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, str):
            _text_number(value, path, meta, "an integer")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and not math.isfinite(value)) or int(value) != value:
            raise _bad(path, meta, "an integer", value)
        return int(value)
    if tp is float:
        if isinstance(value, str):
            _text_number(value, path, meta, "a finite number")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(path, meta, "a number", value)
        if not (isinstance(value, int) and abs(value) < 2**1000 or isinstance(value, float) and math.isfinite(value)):
            raise _bad(path, meta, "a finite number" + _range_text(meta), value)
        return float(value) + 0.0  # -0.0 becomes 0.0 (numpy refuses a scale of -0.0 as negative)
    if tp is str:
        if not isinstance(value, str):
            e = _bad(path, meta, "a string", value)
            if isinstance(value, type) or callable(value):  # (a policy or router class handed over from Python)
                name = getattr(value, "__qualname__", "Name")
                e = InputError(f"{e}: a class or function is named as 'module:{name}' (one defined in a notebook or "
                               f"the script run: '__main__:{name}')")
            elif isinstance(value, dict) and len(value) == 1 and None in value.values():
                key = next(iter(value))  # (policy.name: my_module: -- the class left out, or a trailing colon)
                plugin = path.endswith("router") or (path.startswith("policy") and path.endswith(".name"))
                e = InputError(f"{e}: YAML reads the text {shown(str(key) + ':')} ending in a colon as a mapping; "
                               + ("write module:Class for a plug-in" if plugin else "quote it if it is text"))
            raise e
        if len(value) > MAX_TEXT or not value.isprintable():
            raise _bad(path, meta, f"text of at most {MAX_TEXT} characters, without line breaks or other control "
                                   "characters", value)
        return value
    raise TypeError(f"unsupported field type {tp} at {path}")  # a bug in the schema, not input


# Names another tool gives a setting (vLLM's engine arguments): name -> (the field that sets it here,
# the hint, with {target} for that field). An unknown field of that name is answered with the hint,
# the target being the field of the same last name in that section when it has one (a P/D pool's
# tp). ``servesim.inputs.scenario`` fills it.
FIELD_HINTS: dict[str, tuple[str, str]] = {}


def _check_colon_keys(data: dict, path: str) -> None:
    """A key such as ``process:poisson``: YAML reads ``key:value`` without a space after the colon
    (``{process:poisson}``, as a ``--set`` value is easily typed) as one key with no value; say so,
    rather than that a field is missing or unknown."""
    for key in data:
        if isinstance(key, str) and data[key] is None and ":" in key and key.isprintable():
            name, _, value = key.partition(":")
            if name and value and not value.startswith(" "):
                where = f"{path}.{clip(key, 60)}" if path else clip(key, 60)
                raise InputError(f"{where}: YAML reads {clip(key, 60)!r} as one key without a value (no space after "
                                 f"the colon); write '{clip(name, 40)}: {clip(value, 40)}'")


def _build_tagged(options, value, path):
    """A union of dataclasses told apart by a tag: the first field whose type is a one-value
    ``Literal`` (``dist``, ``process``)."""
    hints = typing.get_type_hints(options[0])
    tag_field = next(f.name for f in dataclasses.fields(options[0])
                     if typing.get_origin(hints[f.name]) is Literal and len(typing.get_args(hints[f.name])) == 1)
    by_tag = {typing.get_args(typing.get_type_hints(o)[tag_field])[0]: o for o in options}
    if not isinstance(value, dict):
        name, hint = path.rsplit(".", 1)[-1], ""
        if isinstance(value, str) and value in by_tag:  # (``process: poisson`` one level up)
            hint = f"; write {name}: {{{tag_field}: {value}, ...}}"
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and "fixed" in by_tag:
            rest = [f.name for f in dataclasses.fields(by_tag["fixed"]) if f.name != tag_field]
            if len(rest) == 1:  # (a bare number: most likely the fixed case's one figure)
                hint = f"; e.g. {name}: {{{tag_field}: fixed, {rest[0]}: {value}}}"
        raise InputError(f"{path} must be a mapping with a {tag_field!r} key (valid: {', '.join(by_tag)}), got "
                         f"{shown(value)}{hint}")
    if tag_field not in value:
        _check_colon_keys(value, path)
        # a key no option has that reads as the tag misspelled (dst: fixed) is named as such
        known = {f.name for o in options for f in dataclasses.fields(o)}
        typo = difflib.get_close_matches(tag_field, [k for k in value if isinstance(k, str) and k not in known], n=1)
        if typo:
            raise InputError(f"{path}.{typo[0]}: unknown field (did you mean {tag_field!r}?); valid {tag_field}: "
                             f"{', '.join(by_tag)}")
        raise InputError(f"{path}.{tag_field} is missing; valid: {', '.join(by_tag)}")
    tag = value[tag_field]
    if not isinstance(tag, str) or tag not in by_tag:
        raise InputError(f"{path}.{tag_field}: {tag!r} is not valid;{did_you_mean(str(tag), by_tag)}")
    return build(by_tag[tag], value, path)


# ---------------------------------------------------------------- dataclasses
def _mapping_hint(cls, value, path: str) -> str:
    """What a mapping for ``cls`` holds, for the error on a value that is none: the one field a
    lone scalar most likely meant (``trace: t.csv`` -> ``trace: {path: t.csv}``), else the
    fields (required ones first)."""
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if len(required) == 1 and path and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        # (only a value of the field's kind: shared_prefix: abc is no prefix length)
        tp = typing.get_type_hints(cls)[required[0]]
        kinds = {str: (str,), int: (int,), float: (int, float)}.get(tp, (str, int, float))
        if isinstance(value, kinds):
            return f"; write {path.rsplit('.', 1)[-1]}: {{{required[0]}: {shown(value)}}}"
    names = required + [f.name for f in fields if f.name not in required]
    listed = ", ".join(f"{n} (required)" if n in required else n for n in names[:12])
    return f"; its fields: {listed}{', ...' if len(names) > 12 else ''}"


def build(cls, data, path: str, root: str = "scenario"):
    """Build dataclass ``cls`` from plain data, checking types, bounds and unknown keys.

    ``path`` is the field path of ``data`` ("" at the top of a file; ``root`` then names it in
    the one message that has no field to name: the file's content is not a mapping).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{path or root} must be a mapping, got {shown(data)}{_mapping_hint(cls, data, path)}")
    if hasattr(cls, "expand"):
        data = cls.expand(data, path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if not isinstance(key, str) or key not in fields:
            _check_colon_keys(data, path)
            name = clip(key, 60) if isinstance(key, str) and key.isprintable() else shown(key, 60)
            where = f"{path}.{name}" if path else name
            known = FIELD_HINTS.get(key) if isinstance(key, str) else None
            if known:
                target, text = known
                last = target.rsplit(".", 1)[-1]
                if last in fields:  # (the same setting is a field of this section: a P/D pool's tp)
                    target = f"{path}.{last}" if path else last
                hint = f" ({text.replace('{target}', target)}) valid: {', '.join(sorted(fields))}"
            else:
                hint = did_you_mean(str(key)[:200], fields)
            raise InputError(f"{where}: unknown field;{hint}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = check_value(hints[name], data[name], where, f.metadata or _NO_BOUNDS)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            doc = (f.metadata or _NO_BOUNDS).get("doc") or ""
            raise InputError(f"{where} is missing: expected {_type_name(hints[name])}"
                             + (f", {doc}" if doc and len(doc) <= 80 else ""))
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
