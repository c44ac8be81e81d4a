"""Errors that mean "the user's input is wrong" (exit status 2), as opposed to bugs (exit 1), and
how a message shows what it quotes: ``shown`` (a value the input gave, cut short) and
``one_line`` (the whole message, on one line of bounded length)."""

import os
import re
import reprlib
import sys
import types


class InputError(Exception):
    """Bad user input: a scenario field, a file, a CLI value.

    The message is shown to the user as is, without a traceback, so it must name the field path
    or file (and line) and say what would be valid.
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a job scheduler, ``kill``) raised where the process was, as Ctrl-C is: a
    KeyboardInterrupt, so every clean-up that Ctrl-C gets (a study's workers stopped, its finished runs
    kept) runs for it too; ``servesim`` then says so and exits 143, as a process killed by it would."""


MAX_SHOWN = 80  # characters of an input value a message quotes
# characters of a file or folder path a message quotes: paths run longer than values (deep project
# folders, temporary folders), and a path cut short no longer leads back to the file
MAX_PATH_SHOWN = 400
MAX_MESSAGE = 1000  # characters of a whole error message


def _bounded_repr(limit: int) -> reprlib.Repr:
    """``reprlib``'s repr with strings and other values cut at ``limit`` characters, 8 items a
    container, 3 levels deep."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 8
    r.maxlevel = 3
    return r


_repr = _bounded_repr(MAX_SHOWN)


def shown(value, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` for a message, at most ``limit`` characters (bounded work, whatever the
    value: a 1 MB string or a deep structure is cut, not printed whole)."""
    try:
        # (a longer limit than the default's needs a repr that cuts strings there, not at 80)
        text = (_repr if limit <= MAX_SHOWN else _bounded_repr(limit)).repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int too long for str()
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text


class _DataRepr(reprlib.Repr):
    """``_bounded_repr``'s, with null, true and false as YAML and JSON write them, inside lists and
    mappings too ("interval is {'seeds': None}" of a JSON file that says null)."""

    def repr_NoneType(self, x, level):  # noqa: N802 - reprlib's name for the type's method
        return "null"

    def repr_bool(self, x, level):
        return "true" if x else "false"


def shown_data(value, limit: int = MAX_SHOWN) -> str:
    """``shown``, with null, true and false as YAML and JSON write them (not Python's None, True,
    False), at any depth: for a value read from a file or a ``--set``."""
    r = _DataRepr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 8
    r.maxlevel = 3
    try:
        text = r.repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int too long for str()
        text = f"<{type(value).__name__}>"
    return text[:limit - 3] + "..." if len(text) > limit else text


def shown_path(path) -> str:
    """A file or folder path for a message, quoted as ``shown`` quotes a value but whole up to
    ``MAX_PATH_SHOWN`` characters instead of 80; a longer one keeps its start and its end (the
    file's name), as ``shown`` cuts a string."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):  # (an OSError's filename can be bytes)
        path = path.decode("utf-8", "backslashreplace")
    return shown(path, MAX_PATH_SHOWN)


def clip(text, limit: int = MAX_SHOWN) -> str:
    """``text`` (not quoted) cut to at most ``limit`` characters."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clip_distinct(texts, limit: int = 40) -> dict:
    """{text: text as a table cell shows it}: one longer than ``limit`` keeps its start and its end
    around a visible "..." (labels often differ only at the end: "...-seqs8" and "...-seqs16"),
    and one whose cut would read as another's is shown whole: two cells never read the same
    unless their texts are the same (cut at 40 characters with no mark, two labels that differed
    after the 40th were one in the table)."""
    texts = list(dict.fromkeys(str(t) for t in texts))
    tail = max(1, limit // 4)
    cut = {t: t if len(t) <= limit else t[:limit - 3 - tail] + "..." + t[-tail:] for t in texts}
    seen: dict = {}
    for t, c in cut.items():
        seen.setdefault(c, []).append(t)
    return {t: t if len(seen[c]) > 1 else c for t, c in cut.items()}


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` on one line (line breaks and other control characters escaped) of at most
    ``limit`` characters: how every error is printed."""
    text = str(message)[:4 * limit]
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        text = text[:limit - 20] + f"... ({len(str(message))} chars)"
    return text


# One rule for a number written as text, in every input (scenario YAML and ``--set`` values, CLI
# flags, trace, lengths and request-log files): ASCII digits 0-9, which '_' may group (1_000), as
# YAML and Python read them. Python's int() and float() also take other scripts' digits (full-width
# １０, Arabic-Indic ٣): refused everywhere, so that a value reads the same wherever it is given
# (a scenario field read them as text while a flag or a trace cell read them as numbers).
# Base 10 only: YAML 1.2 reads 0x10 as 16 and 0o17 as 15, which Python's int() and float() (a flag,
# a trace cell) refuse; a scenario field read them while a trace refused them. Now none reads them.
DIGITS_RULE = ("ASCII digits 0-9 in base 10 ('_' may group them, as in 1_000, but not an exponent's digits; no 0x, "
               "0o or 0b prefix)")

_PREFIXED = re.compile(r"[-+]?0[xXoObB][0-9a-fA-F_]*")


def prefixed_number(text) -> bool:
    """Whether ``text`` is a string written as an integer in another base (``0x10``, ``-0o17``,
    ``0b1``): not a number under ``DIGITS_RULE``, for an error that says so."""
    return isinstance(text, str) and _PREFIXED.fullmatch(text.strip()) is not None


_DIGITS_UNDERSCORES = re.compile(r"[-+]?[0-9_.]*[0-9][0-9_.]*(?:[eE][-+]?[0-9_]+)?")


def misgrouped_number(text) -> bool:
    """Whether ``text`` is a number's digits that '_' groups otherwise than ``DIGITS_RULE`` lets
    it (``1__0``, ``10_``, ``_10``, ``1__0.5``), which Python's ``float`` refuses, or in an
    exponent (``1e1_0``), which Python's ``float`` reads (1e10) and a scenario reads as text
    (``servesim.inputs.schema``'s floats): not a number, for an error that names the rule, as
    ``0x10``'s does."""
    if not isinstance(text, str) or "_" not in text or _DIGITS_UNDERSCORES.fullmatch(text.strip()) is None:
        return False
    _, e, exponent = text.strip().lower().partition("e")
    if e and "_" in exponent:
        return True
    try:
        float(text)
    except ValueError:
        return True
    return False


def non_ascii_number(text) -> bool:
    """Whether ``text`` is a string that Python's ``float`` reads as a number only through
    characters outside ASCII (digits of another script, Unicode spaces): not a number under
    ``DIGITS_RULE``."""
    if not isinstance(text, str) or text.isascii():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def ascii_int(text: str) -> int:
    """``int(text)`` under ``DIGITS_RULE``: a ValueError for a number in other digits."""
    if non_ascii_number(text) or misgrouped_number(text):
        raise ValueError(f"{text!r} is not written in {DIGITS_RULE}")
    return int(text)


def ascii_float(text: str) -> float:
    """``float(text)`` under ``DIGITS_RULE``: a ValueError for a number in other digits (``1e1_0``
    too, which ``float`` reads as 1e10)."""
    if non_ascii_number(text) or misgrouped_number(text):
        raise ValueError(f"{text!r} is not written in {DIGITS_RULE}")
    return float(text)


class PluginError(InputError):
    """A policy or router loaded by name (a plug-in, ``module:Class``) broke its contract: it
    raised, returned something that is no decision, or left requests waiting with nothing left
    to happen. Shown like any input error (exit status 2, no traceback), naming the plug-in and,
    when it raised, where; from Python the original exception is the ``__cause__``."""


def _kind(obj):
    return obj if isinstance(obj, (types.FunctionType, types.MethodType, type)) else type(obj)


def plugin_name(obj) -> str:
    """``module:Name`` of a plug-in (its class's, or a function's own)."""
    kind = _kind(obj)
    return f"{getattr(kind, '__module__', '?')}:{getattr(kind, '__qualname__', type(obj).__name__)}"


def is_plugin(obj) -> bool:
    """Whether a policy or router comes from outside servesim's own modules."""
    return not str(getattr(_kind(obj), "__module__", "")).startswith("servesim.")


def plugin_failure(role: str, obj, method: str, e: BaseException) -> PluginError:
    """The ``PluginError`` for a plug-in whose ``method`` raised ``e``: the exception, and the
    innermost line outside servesim's own files it came from."""
    import os
    import traceback

    import servesim.policies

    own = tuple(os.path.dirname(m.__file__) + os.sep for m in (sys.modules["servesim"], servesim.policies))
    frames = traceback.extract_tb(e.__traceback__)
    outside = [f for f in frames if not f.filename.startswith(own)]
    frame = (outside or frames)[-1] if frames else None
    where = f" ({frame.filename}, line {frame.lineno})" if frame is not None else ""
    return PluginError(f"{role} {plugin_name(obj)}: {method} raised {type(e).__name__}: {clip(e, 300)}{where}")


def call_plugin(role: str, obj, method: str, fn, *args):
    """``fn(*args)``, a plug-in's ``method``: what it raises (``sys.exit`` too) becomes
    ``plugin_failure``'s ``PluginError``; an ``InputError`` passes as it is."""
    try:
        return fn(*args)
    except InputError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever the user's code raises
        raise plugin_failure(role, obj, method, e) from e


# what people call the policies in papers and servers -> our names
ALIASES = {"sarathi": "chunked_prefill", "sarathi-serve": "chunked_prefill", "chunked": "chunked_prefill",
           "orca": "continuous", "vllm": "continuous", "iteration": "continuous", "distserve": "pd_split",
           "splitwise": "pd_split", "disaggregated": "pd_split", "pd": "pd_split"}


def did_you_mean(value: str, choices) -> str:
    """A short hint listing valid choices, leading with the closest match when there is one."""
    import difflib

    choices = sorted(choices)
    value = str(value)[:200]  # a long value is no one's typo (and would only slow difflib down)
    alias = ALIASES.get(str(value).lower())
    if alias in choices:
        return f" (did you mean {alias!r}?) valid: {', '.join(choices)}"
    # a choice the value begins (h100 -> h100-pcie, h100-sxm) beats the closest spelling (h200)
    starts = [c for c in choices if value and str(c).lower().startswith(value.lower())]  # (any case: H100)
    close = starts[:2] if 1 <= len(starts) <= 3 else difflib.get_close_matches(str(value), choices, n=1)
    if len(close) == 2:
        return f" (did you mean {close[0]!r} or {close[1]!r}?) valid: {', '.join(choices)}"
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint} valid: {', '.join(choices)}"
