"""Reading the files servesim is given: paths, bytes, UTF-8 text and JSON, each failure an
``InputError`` that names the file as the user wrote it.

Paths in scenario fields may use ``~`` and ``$VARS`` (``resolve_path`` expands them); messages
and outputs show the path as written (``${DATA}/t.csv``), never what it expanded to, so a value
held in an environment variable is not printed. Text must be UTF-8: a file that is not fails
with the first bad byte's offset and line, or as UTF-16 or compressed when it begins as such a
file does (``not_utf8``). JSON is parsed with a depth limit and
refuses duplicate keys (``loads_json``).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from servesim.errors import InputError, shown, shown_path

MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: longer is no file name
MAX_JSON_DEPTH = 100  # nesting of a JSON document (Python's parser would recurse until it crashes)


def resolve_path(path: str) -> Path:
    """``~`` and ``$VARS`` expanded; relative paths are relative to the current directory. A
    path holding a NUL byte or longer than any file name is an ``InputError`` (the OS would
    raise ValueError / ENAMETOOLONG)."""
    text = str(path)
    if "\x00" in text or len(text) > MAX_PATH_CHARS:
        raise InputError(f"{shown(text)}: not a file path (a NUL byte, or more than {MAX_PATH_CHARS} characters)")
    return Path(os.path.expandvars(os.path.expanduser(text)))


def regular_file(path, what: str = "file") -> Path:
    """``path`` resolved, checked to be a regular file (a device or a pipe may never end); an
    ``InputError`` naming it (as written) otherwise."""
    p = resolve_path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise InputError(f"cannot read {what} {shown_path(path)}: {e.strerror or type(e).__name__}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"cannot read {what} {shown_path(path)}: not a regular file")
    return p


def read_bytes(path, what: str = "file") -> bytes:
    """The bytes of a regular file; an ``InputError`` naming it (as written) when it cannot be read."""
    p = regular_file(path, what)
    try:
        return p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what} {shown_path(path)}: {e.strerror or type(e).__name__}") from None


# the leading bytes of compressed files (a trace is often kept gzipped): named, not read as text
COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip"), (b"BZh", "bzip2", "bunzip2"), (b"\xfd7zXZ\x00", "xz", "unxz"),
              (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"), (b"PK\x03\x04", "zip", "unzip"))


def not_utf8(path, data: bytes) -> InputError:
    """The error for a file that is not UTF-8: the first bad byte's offset and line (a compressed
    file: which compression, to decompress it first)."""
    for magic, kind, tool in COMPRESSED:
        # (bzip2: "BZh", a block size 1-9, then a block's or the end's first byte; text may begin "BZh")
        if data.startswith(magic) and (kind != "bzip2" or (data[3:4].isdigit() and data[4:5] in (b"1", b"\x17"))):
            return InputError(f"{path}: a {kind}-compressed file, not text: decompress it first (e.g. {tool}) and "
                              "give the decompressed file")
    for bom, kind in ((b"\xff\xfe", "UTF-16 (little-endian)"), (b"\xfe\xff", "UTF-16 (big-endian)")):
        if data.startswith(bom):  # (what Windows tools call "Unicode")
            return InputError(f"{path}: a {kind} text file (it begins with the byte-order mark 0x{bom.hex()}), not "
                              "UTF-8: save the file as UTF-8")
    try:
        data.decode("utf-8")
        at = len(data)
    except UnicodeDecodeError as e:
        at = e.start
    line = data.count(b"\n", 0, at) + 1
    byte = f" (0x{data[at]:02x})" if at < len(data) else ""
    return InputError(f"{path} line {line}: not UTF-8 text: byte offset {at}{byte} is not valid UTF-8; "
                      f"save the file as UTF-8")


def decode_utf8(path, data: bytes) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); ``not_utf8`` otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path, data) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_utf8(path, what: str = "file") -> str:
    """The text of a UTF-8 file; InputError for a file that cannot be read or is not UTF-8."""
    return decode_utf8(path, read_bytes(path, what))


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise _Duplicate(k)
        seen[k] = v
    return seen


class _Duplicate(ValueError):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _depth_error(text: str, limit: int) -> int | None:
    """The offset where ``text``'s brackets nest deeper than ``limit`` (strings skipped), or None."""
    depth, in_str, esc = 0, False, False
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return i
        elif c in "]}":
            depth -= 1
    return None


def loads_json(text: str, where: str, max_depth: int = MAX_JSON_DEPTH, commas: bool = False, parse_int=None):
    """``text`` parsed as JSON; an ``InputError`` led by ``where`` (the file) and the line for
    malformed JSON, a number too long to read, nesting deeper than ``max_depth`` or a key given
    twice in one object. ``commas``: positions as ``FILE: line N, column M:`` (the style of
    ``read_mapping``), else ``FILE line N column M:``. ``parse_int``: as ``json.loads``'s."""
    def at(line, col=None):
        if commas:
            return f"{where}: line {line}" + (f", column {col}" if col else "")
        return f"{where} line {line}" + (f" column {col}" if col else "")

    if text.count("[") + text.count("{") > max_depth:  # cheap test first: most texts are shallow
        off = _depth_error(text, max_depth)
        if off is not None:
            raise InputError(f"{at(text.count(chr(10), 0, off) + 1)}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_int=parse_int)
    except json.JSONDecodeError as e:
        raise InputError(f"{at(e.lineno, e.colno)}: malformed JSON: {e.msg}") from None
    except _Duplicate as e:
        raise InputError(f"{where}: key {shown(e.key)} is given twice in one object") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of more than 4300 digits
        raise InputError(f"{where}: cannot read the JSON: {shown(str(e), 120)}") from None
