"""Request traces and length files: readers that fail with the file and line of a bad row.

Formats (``workload.trace.format``):

- ``azure``: the Azure LLM inference traces (Azure/AzurePublicDataset; 2023, the trace of the
  Splitwise paper, ISCA 2024, and 2024's week-long ones): ``TIMESTAMP, ContextTokens,
  GeneratedTokens``, with timestamps such as ``2023-11-16 18:20:00.1234567`` or
  ``2024-05-10 00:00:00.0099300+00:00`` (7 fractional digits kept exactly; an offset taken to UTC).
- ``splitwise``: Vidur's processed traces (``data/processed_traces/*.csv``): ``arrived_at``
  (seconds), ``num_prefill_tokens``, ``num_decode_tokens``. ``arrived_at`` may be absent (the
  arxiv summarization file has lengths only), and then arrivals must come from
  ``workload.arrival``.
- ``csv`` / ``jsonl``: any table, with ``columns: {arrival, prompt, output}`` naming its columns
  (default ``arrival_s, prompt_tokens, output_tokens``, the names of servesim's own
  ``requests.csv``). Arrival values are numbers in ``time_unit`` (by default the unit the
  column's name ends with, ``_s`` / ``_ms`` / ``_us`` / ``_ns``, else seconds) or ISO timestamps.
- ``mooncake``: Mooncake's traces (kvcache-ai/Mooncake, FAST'25): JSONL with ``timestamp``
  (ms after the first request), ``input_length``, ``output_length`` and ``hash_ids``, the ids of
  the prompt's successive blocks of ``hash_block_tokens`` (512) tokens: equal ids mean equal
  tokens up to and including that block (a chain hash), so they drive the prefix cache.
  A ``jsonl`` file with a ``hash_ids`` key reads them too.
- ``auto`` (default): for ``*.jsonl`` or a file whose first character is ``{``, ``mooncake``
  when the first row has ``hash_ids`` and ``input_length``, else ``jsonl``; otherwise the CSV
  header decides (azure, splitwise, else csv).

Files must be UTF-8; a byte that is not fails with its byte offset and line. A JSONL line that gives a key
the trace reads twice fails with its line (JSON keeps the last value; which was meant cannot be told).

Arrival times are returned in seconds after the first row. Nothing here draws random numbers.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import functools
import itertools
import json
import re
from dataclasses import dataclass

import numpy as np

from servesim.errors import (DIGITS_RULE, InputError, misgrouped_number, non_ascii_number, prefixed_number, shown,
                             shown_data, shown_path)
from servesim.outputs.wording import plural
from servesim.inputs.files import (not_utf8, read_bytes, read_utf8, regular_file,  # noqa: F401 (re-exported)
                                   resolve_path)

AZURE_COLUMNS = {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
SPLITWISE_COLUMNS = {"arrival": "arrived_at", "prompt": "num_prefill_tokens", "output": "num_decode_tokens"}
GENERIC_COLUMNS = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}
MOONCAKE_COLUMNS = {"arrival": "timestamp", "prompt": "input_length", "output": "output_length"}
HASH_IDS_KEY = "hash_ids"
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class TraceData:
    """Rows of a trace in file order. ``arrival_s`` is None when the file has no times."""

    path: str
    arrival_s: np.ndarray | None  # float64, seconds after the first row, non-decreasing
    prompt_tokens: np.ndarray  # int64, each >= 1
    output_tokens: np.ndarray  # int64, each >= 1
    # per row, the prompt's block hash ids (a tuple of ints, maybe empty); None: the file has none
    hash_ids: tuple | None = None
    arrival_timestamps: bool = False  # the arrival column held timestamps (not numbers in a unit)
    # the arrival column's name when its numbers were read as seconds for want of a unit (a csv /
    # jsonl trace, no unit at the end of the name, no time_unit): a likely ms-as-s mix-up, warned
    unit_guessed: str | None = None
    # the arrival column's name when its numbers were read in a stated time_unit other than the one
    # its name ends with (time_unit: ms on arrival_s): the stated unit is read, and warned
    unit_conflict: str | None = None

    def __len__(self) -> int:
        return len(self.prompt_tokens)


def _open_text(path: str):
    """``path`` (as written: messages show it so) opened as UTF-8 text, a leading byte-order mark
    dropped (spreadsheets write one; it would stick to the first column's name)."""
    try:
        return regular_file(path).open(newline="", encoding="utf-8-sig")
    except OSError as e:
        raise InputError(f"cannot read {shown_path(path)}: {e.strerror or e}") from None


# a text file holding NUL bytes (valid UTF-8, but in no text): most likely UTF-16 saved without a byte-order mark
NUL_TEXT = "the line holds NUL bytes (0x00), as UTF-16 text does: save the file as UTF-8"

_NAME = re.compile(r"^[\w .()\[\]/#%+-]{1,40}$")


def header_text(header) -> str:
    """The columns of a header for a message: their names when they look like column names
    (at most 12 shown), else only how many there are (a file that is no table, e.g. a system
    file named by mistake, is not echoed)."""
    if any("\x00" in h for h in header):
        return NUL_TEXT
    if header and header[0].startswith(("{", "[")):  # (JSON lines read as a CSV: a format set to csv)
        return "the first line looks like JSON, not a CSV header"
    if header and all(_NAME.match(h) for h in header):
        more = f", ... ({len(header)} in all)" if len(header) > 12 else ""
        return "the header has: " + ", ".join(header[:12]) + more
    if len(header) == 1:  # one field: another separator, e.g. a spreadsheet's ';' export
        for sep, name in ((";", "';'"), ("\t", "tabs"), ("|", "'|'")):
            names = header[0].split(sep)
            if len(names) > 1 and all(_NAME.match(h.strip()) for h in names):
                return (f"the first line looks separated by {name} ({', '.join(h.strip() for h in names[:12])}); "
                        "the file must be comma-separated")
    return (f"the first line has {plural(len(header), 'field')} that {'does' if len(header) == 1 else 'do'} not "
            "look like column names")


def read_keys_once(keys):
    """A ``json.loads`` object hook refusing an object that gives one of ``keys`` twice (JSON
    parsers keep the last, so which value was meant cannot be told); other keys are not read."""
    def hook(pairs):
        obj = dict(pairs)
        if len(obj) != len(pairs):
            names = [k for k, _ in pairs]
            for k in keys:
                if names.count(k) > 1:
                    raise KeyTwice(k)
        return obj
    return hook


class KeyTwice(ValueError):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def jsonl_objects(path: str, lines, keys=()):
    """(line number, ``"PATH line N"``, object) of each non-blank line of a JSONL text; InputError naming the
    line (and column) of malformed JSON, of a line that is not an object, or of one that gives a key of
    ``keys`` (those the caller reads; a list it may change between lines) twice."""
    hook = read_keys_once(keys) if keys else None
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path} line {line}"
        try:
            obj = json.loads(text, object_pairs_hook=hook)
        except KeyTwice as e:
            raise InputError(f"{where}: key {shown(e.key)} is given twice; which value to read cannot be told: "
                             "keep one") from None
        except json.JSONDecodeError as e:
            if "\x00" in text:
                raise InputError(f"{where}: {NUL_TEXT}") from None
            raise InputError(f"{where} column {e.colno}: malformed JSON: {e.msg}") from None
        except (ValueError, RecursionError) as e:  # a number too long to read, nesting too deep
            raise InputError(f"{where}: cannot read the JSON: {shown(str(e), 120)}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield line, where, obj


# ---------------------------------------------------------------- timestamps
def _is_plain_timestamp(s: str) -> bool:
    """Whether ``s`` is laid out as ``YYYY-MM-DD[ T]HH:MM:SS...`` (never a number)."""
    return len(s) >= 19 and s[4] == "-" and s[7] == "-" and s[10] in " T" and s[13] == ":" and s[16] == ":"


_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", re.ASCII)


def _timestamp_ns(text: str, days: dict | None = None) -> int:
    """``YYYY-MM-DD[ T]HH:MM:SS[.digits][Z|+HH:MM|-HH:MM]`` -> integer nanoseconds, UTC when an
    offset is given (exact to 9 digits of the fraction: Azure's 2024 traces write 7 and an
    offset); other ISO forms through ``datetime.fromisoformat`` (to the microsecond), which also
    refuses what is out of range (hour 24, minute 60, an offset of a day). ``days``: a cache of
    the dates' day numbers (a trace's rows share a few dates)."""
    s = text.strip()
    m = _TIMESTAMP.fullmatch(s)
    if m is not None:
        y, mo, d, hh, mi, ss, frac, tz = m.groups()
        h, mm, sec = int(hh), int(mi), int(ss)
        off = 0
        if tz is not None and tz != "Z":
            oh, om = int(tz[1:3]), int(tz[4:6])
            off = (oh * 3600 + om * 60) * (1 if tz[0] == "+" else -1) if oh < 24 and om < 60 else None
        if h < 24 and mm < 60 and sec < 60 and off is not None:
            key = s[:10]
            day = days.get(key) if days is not None else None
            if day is None:
                try:
                    day = _dt.date(int(y), int(mo), int(d)).toordinal()
                except ValueError:
                    raise ValueError(s) from None
                if days is not None:
                    days[key] = day
            ns = int((frac + "000000000")[:9]) if frac else 0
            return ((day * 86400 + h * 3600 + mm * 60 + sec - off) * 1_000_000_000) + ns
    d = _dt.datetime.fromisoformat(s)
    if d.tzinfo is not None:
        d = d.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return ((d.toordinal() * 86400 + d.hour * 3600 + d.minute * 60 + d.second) * 1_000_000_000
            + d.microsecond * 1000)


MAX_TIME_S = 1e12  # ~30,000 years: anything beyond is a unit mix-up, and overflows the clock
MAX_TOKENS = 2**31 - 1  # no prompt or output is longer (and int64 sums stay exact)


def unit_in_name(column: str) -> str | None:
    """The time unit a column's name ends with (``_s``, ``_ms``, ``_us``, ``_ns``), or None: a
    column named ``arrival_ms`` holds milliseconds (read as seconds, a trace would run 1000x slower)."""
    return next((u for u in ("ms", "us", "ns", "s") if column.lower().endswith("_" + u)), None)


def _time_value(raw, unit_s: float, where: str, column: str):
    """A number (seconds after scaling) or a timestamp (integer ns). Returns (kind, value)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):  # (JSON true, null, a list, ...)
        got = shown_data(raw)
        raise InputError(f"{where}: {column} must be a number or a timestamp, got {got}")
    if isinstance(raw, (int, float)):
        try:
            v = float(raw)
        except OverflowError:  # (a JSON integer beyond a float's range)
            raise _too_late(raw, where, column) from None
    else:
        text = str(raw).strip()
        if non_ascii_number(text) or prefixed_number(text) or misgrouped_number(text):
            raise InputError(f"{where}: {column} must be a number written in {DIGITS_RULE} or a timestamp, got "
                             f"{shown(text)}")
        try:
            v = float(text)
        except ValueError:
            try:
                return "ts", _timestamp_ns(text)
            except ValueError:
                raise InputError(f"{where}: {column} must be a number or a timestamp, got {shown(text)}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise InputError(f"{where}: {column} must be finite, got {shown(raw)}")
    if abs(v * unit_s) > MAX_TIME_S:
        raise _too_late(raw, where, column)
    return "num", v * unit_s


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _too_late(raw, where: str, column: str) -> InputError:
    """A time past ``MAX_TIME_S`` (after the unit), or an integer past a float's range."""
    return InputError(f"{where}: {column} must be at most {MAX_TIME_S:g} s after time_unit (a unit mix-up?), "
                      f"got {shown(raw)}")


def _length(raw, where: str, column: str) -> int:
    if isinstance(raw, bool):
        raise InputError(f"{where}: {column} must be a positive integer, got {shown_data(raw)}")
    if non_ascii_number(raw) or prefixed_number(raw) or misgrouped_number(raw):
        raise InputError(f"{where}: {column} must be a positive integer written in {DIGITS_RULE}, got {shown(raw)}")
    try:
        v = float(raw) if not isinstance(raw, (int, float)) else raw
    except (TypeError, ValueError):  # (JSON's null shown as the file writes it, not as Python's None)
        raise InputError(f"{where}: {column} must be a positive integer, got "
                         f"{shown_data(raw)}") from None
    if v != v or v == float("-inf") or (v != float("inf") and int(v) != v):
        raise InputError(f"{where}: {column} must be a positive integer, got {shown(raw)}")
    if v < 1:
        raise InputError(f"{where}: {column} must be a positive integer (>= 1), got {int(v)}")
    if v > MAX_TOKENS:
        raise InputError(f"{where}: {column} must be at most {MAX_TOKENS} tokens, got {shown(raw)}")
    return int(v)


def data_rows(reader, width: int, path: str):
    """(line number, fields) of each data row of a CSV ``reader`` past its header: blank lines
    skipped, a row with other than ``width`` fields an InputError naming its line."""
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            raise InputError(f"{path} line {line}: expected {width} fields (as the header), got {len(row)}")
        yield line, row


# ---------------------------------------------------------------- traces
def _sniff_header(path: str) -> list[str]:
    with _open_text(path) as fh:
        row = next(csv.reader(fh), None)
    return [c.strip() for c in row] if row else []


def _sniff_jsonl(path: str) -> dict:
    """The first row of a JSONL file ({} when it is not an object)."""
    with _open_text(path) as fh:
        for text in fh:
            if text.strip():
                try:
                    obj = json.loads(text)
                except (ValueError, RecursionError):  # (malformed, a number too long, nesting too deep:
                    return {}                         # the row reader names the line)
                return obj if isinstance(obj, dict) else {}
    return {}


def _first_char(path: str) -> str:
    """The first character of the file that is not whitespace ('' for none in its first 4 kB)."""
    with _open_text(path) as fh:
        return fh.read(4096).lstrip()[:1]


def _detect(path: str, fmt: str, columns: dict | None) -> tuple[str, dict]:
    if fmt == "auto":
        # (JSONL by its name, or by its first character: a '{' begins no CSV header, and JSONL
        # files are often named *.json)
        if str(path).endswith(".jsonl") or _first_char(path) == "{":
            first = _sniff_jsonl(path)
            # (columns named or not: a Mooncake file's timestamps are ms whatever its columns are called)
            fmt = "mooncake" if {HASH_IDS_KEY, "input_length"} <= set(first) else "jsonl"
        else:
            header = {h.casefold() for h in _sniff_header(path)}  # (columns are found in any case)
            if columns is None and {AZURE_COLUMNS["prompt"].casefold(), AZURE_COLUMNS["output"].casefold()} <= header:
                fmt = "azure"
            elif columns is None and {SPLITWISE_COLUMNS["prompt"].casefold(),
                                      SPLITWISE_COLUMNS["output"].casefold()} <= header:
                fmt = "splitwise"
            else:
                fmt = "csv"
    base = {"azure": AZURE_COLUMNS, "splitwise": SPLITWISE_COLUMNS,
            "mooncake": MOONCAKE_COLUMNS}.get(fmt, GENERIC_COLUMNS)
    cols = dict(base)
    if columns:
        cols.update({k: v for k, v in columns.items() if v is not None})
    return fmt, cols


def _finish(path, rows_t, kinds, prompts, outputs, lines, arrival_col, hash_ids=None) -> TraceData:
    if not len(prompts):
        raise InputError(f"{path}: the trace has no data rows")
    arrival = None
    if rows_t is not None:
        if len(set(kinds)) > 1:
            raise InputError(f"{path}: column {shown(arrival_col)} mixes numbers and timestamps")
        if kinds[0] == "ts":
            t0 = rows_t[0]
            arrival = np.array([(t - t0) / 1e9 for t in rows_t], dtype=np.float64)
        else:
            arrival = np.array(rows_t, dtype=np.float64)
            arrival = arrival - arrival[0]
        bad = np.flatnonzero(np.diff(arrival) < 0)
        if len(bad):
            i = int(bad[0]) + 1
            raise InputError(f"{path} line {lines[i]}: {arrival_col} goes back in time (row before it is later); "
                             f"a trace must be sorted by arrival time")
    cols = [arrival, np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)]
    for c in cols:
        if c is not None:
            c.flags.writeable = False  # cached and shared between runs
    return TraceData(str(path), *cols, tuple(hash_ids) if hash_ids is not None else None,
                     rows_t is not None and kinds[0] == "ts")


def column_index(header: list, name: str, path=None) -> int | None:
    """Where column ``name`` is in ``header``: the exact name, else the one column that differs
    from it only in case (an Azure trace saved with ``timestamp`` for ``TIMESTAMP``); None if
    neither. A name the header has twice, or several that match it in case alone, are an input
    error naming ``path`` (which of them holds the figure cannot be told)."""
    if name in header:
        at = [j + 1 for j, h in enumerate(header) if h == name]
        if len(at) > 1:
            raise InputError(f"{path} line 1: column {shown(name)} appears {len(at)} times (columns "
                             f"{', '.join(map(str, at))}); which one to read cannot be told: rename or drop the others")
        return header.index(name)
    folded = [j for j, h in enumerate(header) if h.casefold() == name.casefold()]
    if len(folded) > 1:  # (said as such: 'no column' would deny what the header shows)
        raise InputError(f"{path} line 1: columns {', '.join(shown(header[j]) for j in folded)} (columns "
                         f"{', '.join(str(j + 1) for j in folded)}) each match {shown(name)} but for case; which one "
                         "to read cannot be told: name it exactly, in its case, or rename the others")
    return folded[0] if folded else None


# (a file of lengths alone, as Vidur's arxiv summarization trace, replays with arrivals drawn)
NO_TIMES = ", or, for a file without arrival times, give workload.arrival: the trace then gives only lengths"


def _csv_header(reader, path: str, cols: dict, need_arrival: bool) -> tuple[list, dict]:
    """The header row (names stripped) and where the arrival, prompt and output columns are
    (arrival left out when the trace's times are not needed: workload.arrival gives them)."""
    header = next(reader, None)
    if header is None:
        raise InputError(f"{path}: the trace is empty (no header, no rows)")
    header = [h.strip() for h in header]
    idx = {}
    for key in ("arrival", "prompt", "output"):
        if key == "arrival" and not need_arrival:  # (times come from workload.arrival: the column is not read,
            continue                               # so one out of order or blank does not stop the lengths)
        name = cols[key]
        j = column_index(header, name, path)
        if j is not None:
            idx[key] = j
        else:
            json_hint = " (a JSONL trace takes format: jsonl)" if header[0].startswith(("{", "[")) else ""
            raise InputError(f"{path} line 1: no column {shown(name)} for the {key} "
                             f"(set workload.trace.columns.{key}{NO_TIMES if key == 'arrival' else ''}); "
                             f"{header_text(header)}{json_hint}")
    return header, idx


CSV_CHUNK_ROWS = 1 << 16  # rows converted at a time by _read_csv_columns
# where the 14 digits of YYYY-MM-DD HH:MM:SS are (0-based), year to second
_TS_DIGITS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
_TS_MAX_DAYS = 100_000  # days between a trace's timestamps that int64 nanoseconds hold with room
_TS_MAX_CHARS = 64  # a longer cell goes to the row reader (Azure's stamps have 27 or 33 characters)


def _plain_timestamps(cells: list):
    """A column of cells each laid out exactly as ``YYYY-MM-DD[ T]HH:MM:SS[.digits][Z|+HH:MM|-HH:MM]``
    (ASCII, nothing around it): (day number, seconds of the day less the offset, nanoseconds)
    per cell as int64 arrays, what ``_timestamp_ns`` computes (the fraction cut to 9 digits);
    None if any cell is laid out otherwise or is out of range (a date that does not exist, hour
    24, minute 60, an offset of a day), for the row-by-row reader to read or to name."""
    n = len(cells)
    lens = np.fromiter(map(len, cells), np.int64, n)
    # (every cell is padded to the longest: one long cell, say a stray 100 kB field, would cost
    # its length times the rows)
    if lens.min() < 19 or lens.max() > _TS_MAX_CHARS:
        return None
    try:
        u = np.array(cells, dtype="S")  # (ASCII only: any other character is not plain)
    except (ValueError, TypeError):
        return None
    w = u.dtype.itemsize
    v = u.view(np.uint8).reshape(n, w)
    # (numpy drops trailing NULs and pads with them: a cell holding one is not plain)
    if not ((v != 0).sum(axis=1) == lens).all():
        return None
    d = v - np.uint8(48)  # digits as their values; any other character above 9 (wrapping)
    digits = d[:, _TS_DIGITS]
    if (digits > 9).any():
        return None
    if not ((v[:, 4] == 45) & (v[:, 7] == 45) & ((v[:, 10] == 32) | (v[:, 10] == 84))
            & (v[:, 13] == 58) & (v[:, 16] == 58)).all():
        return None
    rows = np.arange(n)
    ns = np.zeros(n, np.int64)
    end = np.full(n, 19, np.int64)  # where the fraction ends (the offset, if any, starts)
    if w > 19:
        dotted = v[:, 19] == 46
        if w > 20 and dotted.any():
            isdig = d[:, 20:] <= 9
            run = np.where(isdig.all(axis=1), w - 20, isdig.argmin(axis=1))  # fraction digits
            if (run[dotted] == 0).any():  # '.' and no digit
                return None
            end = np.where(dotted, 20 + run, 19)
            k = min(9, w - 20)  # (digits past the 9th are cut, as _timestamp_ns cuts them)
            frac = np.arange(20, 20 + k) < end[:, None]
            ns = np.where(frac, d[:, 20:20 + k], 0).astype(np.int64) @ (10 ** np.arange(8, 8 - k, -1))
        elif dotted.any():
            return None
    tail = lens - end  # what follows: nothing, Z, or +HH:MM / -HH:MM
    off = np.zeros(n, np.int64)
    if tail.any():
        if not np.isin(tail, (0, 1, 6)).all():
            return None
        z = tail == 1
        if z.any() and not (v[rows[z], end[z]] == 90).all():
            return None
        o = tail == 6
        if o.any():
            r, e = rows[o], end[o]
            sign = v[r, e]
            hd = d[r[:, None], e[:, None] + np.array([1, 2, 4, 5])]
            if not (((sign == 43) | (sign == 45)) & (v[r, e + 3] == 58)).all() or (hd > 9).any():
                return None
            hd = hd.astype(np.int64)
            oh, om = hd[:, 0] * 10 + hd[:, 1], hd[:, 2] * 10 + hd[:, 3]
            if (oh > 23).any() or (om > 59).any():
                return None
            off[o] = (oh * 3600 + om * 60) * np.where(sign == 43, 1, -1)
    digits = digits.astype(np.int64)
    f = lambda a, b: digits[:, a:b] @ (10 ** np.arange(b - a - 1, -1, -1))  # noqa: E731
    hh, mi, ss = f(8, 10), f(10, 12), f(12, 14)
    if (hh > 23).any() or (mi > 59).any() or (ss > 59).any():
        return None
    ymd = f(0, 4) * 10_000 + f(4, 6) * 100 + f(6, 8)
    keys, inverse = np.unique(ymd, return_inverse=True)
    try:
        ordinals = [_dt.date(k // 10_000, k // 100 % 100, k % 100).toordinal() for k in keys.tolist()]
    except ValueError:
        return None
    day = np.asarray(ordinals, np.int64)[inverse.reshape(-1)]
    sec = hh * 3600 + mi * 60 + ss - off
    return day, sec, ns


def _read_csv(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData:
    """A CSV trace: column by column when every row is plain (``_read_csv_columns``), else row by
    row (``_read_csv_rows``), whose checks name the line of anything wrong. Both give the same
    trace (tests/test_traces.py compares them)."""
    data = _read_csv_columns(path, cols, unit_s, need_arrival)
    return data if data is not None else _read_csv_rows(path, cols, unit_s, need_arrival)


def _read_csv_columns(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData | None:
    """The trace read a block of rows at a time, each column converted at once (Python's own
    ``int`` and ``float`` on each cell, without a Python line of ours per row: a few times faster
    than ``_read_csv_rows`` on millions of rows; timestamps laid out as Azure's traces have them,
    ``YYYY-MM-DD HH:MM:SS.f`` with or without a UTC offset, with numpy: ``_plain_timestamps``);
    None as soon as anything is not plain (a row of another width, a time that is neither a
    number nor such a timestamp, numbers and timestamps mixed, a length that is no integer or out
    of range, a time out of range or going back), for ``_read_csv_rows`` to read or to name."""
    from operator import itemgetter

    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header, idx = _csv_header(reader, path, cols, need_arrival)
        width = len(header)
        ia, ip, io = idx.get("arrival"), idx["prompt"], idx["output"]
        ts, prompts, outputs = [], [], []
        stamps = None  # timestamps (the first row's arrival is one): every row's must be
        while True:
            chunk = list(itertools.islice(reader, CSV_CHUNK_ROWS))
            if not chunk:
                break
            rows = [r for r in chunk if r and (len(r) != 1 or r[0].strip())]  # (blank lines: skipped)
            if not rows:
                continue
            if set(map(len, rows)) != {width}:
                return None
            n = len(rows)
            cp, co = list(map(itemgetter(ip), rows)), list(map(itemgetter(io), rows))
            ca = list(map(itemgetter(ia), rows)) if ia is not None else []
            if not all((j := "".join(c)).isascii() and "_" not in j for c in (cp, co, ca)):
                # (int() and float() take other scripts' digits, １０, and '_' in an exponent, 1e1_0 read
                # as 1e10: DIGITS_RULE refuses them; the row reader names the cell)
                return None
            try:
                prompts.append(np.fromiter(map(int, cp), np.int64, n))
                outputs.append(np.fromiter(map(int, co), np.int64, n))
                if ia is not None:
                    if stamps is None:
                        stamps = _is_plain_timestamp(rows[0][ia])
                    if stamps:
                        parsed = _plain_timestamps(ca)
                        if parsed is None:
                            return None
                        ts.append(parsed)
                    else:
                        ts.append(np.fromiter(map(float, ca), np.float64, n))
            except (ValueError, OverflowError):
                return None
    lengths = _lengths_in_range(prompts, outputs)
    if lengths is None:
        return None
    p, o = lengths
    t = None
    if ia is not None and stamps:
        # nanoseconds after the first row, exact in int64 (as _finish takes t - t0 in Python
        # integers), then seconds as _finish divides them
        day, sec, ns = (np.concatenate(c) for c in zip(*ts))
        if np.abs(day - day[0]).max() > _TS_MAX_DAYS:
            return None
        rel = ((day - day[0]) * 86400 + (sec - sec[0])) * 1_000_000_000 + (ns - ns[0])
        t = rel.astype(np.float64) / 1e9
        if (np.diff(t) < 0).any():  # (as _finish tests it)
            return None
    elif ia is not None:
        t = _seconds_in_range(ts, unit_s)
        if t is None:
            return None
    data = _finish(path, t, ("num",) if t is not None else None, p, o, None, cols.get("arrival"))
    return dataclasses.replace(data, arrival_timestamps=True) if t is not None and stamps else data


def _lengths_in_range(prompts: list, outputs: list):
    """The column readers' blocks of prompt and output lengths joined, or None when there are none
    or one is out of 1..MAX_TOKENS (for the row reader to name)."""
    if not prompts:
        return None
    p, o = np.concatenate(prompts), np.concatenate(outputs)
    if p.min() < 1 or o.min() < 1 or p.max() > MAX_TOKENS or o.max() > MAX_TOKENS:
        return None
    return p, o


def _seconds_in_range(ts: list, unit_s: float):
    """The column readers' blocks of numeric times in seconds, or None when one is out of range
    (NaN and inf too) or they go back in time (for the row reader to name)."""
    t = np.concatenate(ts) * unit_s  # (as _time_value scales each: the same product)
    with np.errstate(invalid="ignore"):
        if not (np.abs(t) <= MAX_TIME_S).all():  # (NaN and inf fail the test too)
            return None
    if (np.diff(t - t[0]) < 0).any():  # (as _finish tests it)
        return None
    return t


def _read_csv_rows(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData:
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header, idx = _csv_header(reader, path, cols, need_arrival)
        has_t = "arrival" in idx
        ts, kinds, prompts, outputs, lines = ([] if has_t else None), [], [], [], []
        width = len(header)
        ia, ip, io = idx.get("arrival"), idx["prompt"], idx["output"]
        days: dict = {}
        # (the usual row takes the fast paths: lengths as plain digits, a timestamp laid out as
        # YYYY-MM-DD HH:MM:SS; anything else, and every error, goes through the checks that name
        # the line)
        for line, row in data_rows(reader, width, path):
            if has_t:
                raw = row[ia]
                v = None
                if _is_plain_timestamp(raw):
                    try:
                        v = _timestamp_ns(raw, days)
                        kind = "ts"
                    except ValueError:
                        pass
                if v is None:  # a number, another timestamp form, or an error that names the line
                    kind, v = _time_value(raw, unit_s, f"{path} line {line}", cols["arrival"])
                kinds.append(kind)
                ts.append(v)
            p, o = row[ip], row[io]
            # (at most 10 digits: int() refuses a string of more than 4,300)
            if len(p) <= 10 and p.isdigit() and p.isascii() and 0 < (n := int(p)) <= MAX_TOKENS:
                prompts.append(n)
            else:
                prompts.append(_length(p.strip(), f"{path} line {line}", cols["prompt"]))
            if len(o) <= 10 and o.isdigit() and o.isascii() and 0 < (n := int(o)) <= MAX_TOKENS:
                outputs.append(n)
            else:
                outputs.append(_length(o.strip(), f"{path} line {line}", cols["output"]))
            lines.append(line)
    return _finish(path, ts, kinds, prompts, outputs, lines, cols.get("arrival"))


MAX_HASH_ID = 2**63 - 1  # a Mooncake block hash id (int64)


def _hash_ids(raw, where: str) -> tuple:
    # (ids are held as int64: a larger one cannot key a KV block)
    if not isinstance(raw, list) or any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_HASH_ID
                                        for v in raw):
        raise InputError(f"{where}: {HASH_IDS_KEY} must be a list of integers in [0, {MAX_HASH_ID}], got "
                         f"{shown(raw)}")
    return tuple(raw)


def _read_jsonl(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData:
    """A JSONL trace: column by column when every row is plain (``_read_jsonl_columns``), else
    row by row (``_read_jsonl_rows``), whose checks name the line of anything wrong. Both give the
    same trace (tests/test_traces.py compares them)."""
    data = _read_jsonl_columns(path, cols, unit_s, need_arrival)
    return data if data is not None else _read_jsonl_rows(path, cols, unit_s, need_arrival)


def _types(values) -> set:
    """The types of ``values`` (bool is not int here: JSON's true and false are refused as numbers)."""
    return set(map(type, values))


def _read_jsonl_columns(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData | None:
    """The trace read a block of lines at a time: each line parsed as ``json.loads`` parses it and
    each key's values taken and checked at once, without a Python line of ours per row (2-4x
    faster than ``_read_jsonl_rows``: ``bench/traces.py``). None as soon as anything is not
    plain (malformed JSON, a line that is no object, a key missing, a length that is no JSON
    integer in range, a time that is no JSON number or out of range or going back, hash ids that
    are no list of integers in range), for ``_read_jsonl_rows`` to read or to name."""
    from operator import itemgetter, methodcaller

    # json.loads is raw_decode between JSON's whitespace, which must be all there is around the
    # value: the same, without its wrapper's time per line (a fifth of the whole)
    decode, strip = json.JSONDecoder().raw_decode, methodcaller("strip", " \t\n\r")
    value, end = itemgetter(0), itemgetter(1)
    ka, kp, ko = cols["arrival"], cols["prompt"], cols["output"]

    def read_keys(has_t, has_h) -> set:
        return {kp, ko} | ({ka} if has_t else set()) | ({HASH_IDS_KEY} if has_h else set())

    ts, prompts, outputs, hashes = [], [], [], []
    has_t = has_h = None
    with _open_text(path) as fh:  # (lines split as ``_read_jsonl_rows`` splits them)
        while True:
            chunk = list(itertools.islice(fh, CSV_CHUNK_ROWS))
            if not chunk:
                break
            if not all(map(str.strip, chunk)):
                chunk = list(filter(str.strip, chunk))  # (blank lines: skipped)
            texts = list(map(strip, chunk))
            try:
                parsed = list(map(decode, texts))
            except (ValueError, RecursionError):
                return None
            if list(map(end, parsed)) != list(map(len, texts)):
                return None  # (something after the value)
            objs = list(map(value, parsed))
            if not objs:
                continue
            if _types(objs) != {dict}:
                return None
            if has_t is None:
                has_h = HASH_IDS_KEY in objs[0]
                has_t = need_arrival and ka in objs[0]
                if not has_t and need_arrival:
                    return None
            # a key read twice in a line (JSON keeps the last) is refused by the row reader: a block
            # that may hold one goes there. Without an escape (one could spell a key otherwise), a
            # key every line must give, found as often as there are lines, is in each line once
            # (a line without it fails below)
            joined = "\n".join(texts)
            if "\\" in joined or any(joined.count(f'"{k}"') != len(texts) for k in read_keys(has_t, has_h)):
                return None
            try:
                p = list(map(itemgetter(kp), objs))
                o = list(map(itemgetter(ko), objs))
                t = list(map(itemgetter(ka), objs)) if has_t else None
                h = list(map(itemgetter(HASH_IDS_KEY), objs)) if has_h else None
            except KeyError:
                return None
            if _types(p) != {int} or _types(o) != {int} or (has_t and not _types(t) <= {int, float}):
                return None  # (bool is a type of its own: true and false are refused too)
            try:
                prompts.append(np.fromiter(p, np.int64, len(p)))
                outputs.append(np.fromiter(o, np.int64, len(o)))
                if has_t:
                    ts.append(np.fromiter(map(float, t), np.float64, len(t)))
            except OverflowError:
                return None
            if has_h:
                if _types(h) != {list}:
                    return None
                flat = list(itertools.chain.from_iterable(h))
                if flat and (_types(flat) != {int} or min(flat) < 0 or max(flat) > MAX_HASH_ID):
                    return None
                hashes.extend(map(tuple, h))
    lengths = _lengths_in_range(prompts, outputs)
    if lengths is None:
        return None
    p, o = lengths
    t = None
    if has_t:
        t = _seconds_in_range(ts, unit_s)
        if t is None:
            return None
    return _finish(path, t, ("num",) if t is not None else None, p, o, None, ka, hashes if has_h else None)


def _read_jsonl_rows(path: str, cols: dict, unit_s: float, need_arrival: bool) -> TraceData:
    ts, kinds, prompts, outputs, lines = [], [], [], [], []
    hashes = []
    has_t = has_h = None
    with _open_text(path) as fh:
        # the keys read, each refused when a line gives it twice: hash ids only when the first row has them
        keys = [cols["prompt"], cols["output"], HASH_IDS_KEY] + ([cols["arrival"]] if need_arrival else [])
        for line, where, obj in jsonl_objects(path, fh, keys):
            if has_t is None:
                has_h = HASH_IDS_KEY in obj
                if not has_h:
                    keys.remove(HASH_IDS_KEY)
                has_t = need_arrival and cols["arrival"] in obj
                if not has_t and need_arrival:
                    raise InputError(f"{where}: no key {shown(cols['arrival'])} for the arrival "
                                     f"(set workload.trace.columns.arrival{NO_TIMES})")
            for key in ("prompt", "output") + (("arrival",) if has_t else ()):
                if cols[key] not in obj:
                    raise InputError(f"{where}: no key {shown(cols[key])} for the {key} "
                                     f"(set workload.trace.columns.{key})")
            if has_t:
                kind, v = _time_value(obj[cols["arrival"]], unit_s, where, cols["arrival"])
                kinds.append(kind)
                ts.append(v)
            prompts.append(_length(obj[cols["prompt"]], where, cols["prompt"]))
            outputs.append(_length(obj[cols["output"]], where, cols["output"]))
            if has_h:
                if HASH_IDS_KEY not in obj:
                    raise InputError(f"{where}: no key {HASH_IDS_KEY!r} (the first row has one, so every row needs it)")
                hashes.append(_hash_ids(obj[HASH_IDS_KEY], where))
            lines.append(line)
    return _finish(path, ts if has_t else None, kinds, prompts, outputs, lines, cols["arrival"],
                   hashes if has_h else None)


def read_trace(path: str, fmt: str = "auto", columns: dict | None = None, time_unit: str | None = None,
               need_arrival: bool = True) -> TraceData:
    """Read a trace file (see the module docstring for formats). ``time_unit`` None: the unit
    the arrival column's name ends with (``arrival_ms``), else the format's (ms for mooncake,
    else s). Raises InputError with file and line for anything
    malformed."""
    p = resolve_path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise InputError(f"cannot read trace {shown_path(path)}: {e.strerror or e}") from None
    key = (str(path), str(p), st.st_mtime_ns, st.st_size, fmt, tuple(sorted((columns or {}).items())), time_unit,
           need_arrival)
    return _read_trace_cached(*key)


@functools.lru_cache(maxsize=16)
def _read_trace_cached(path, _file, _mtime, _size, fmt, columns, time_unit, need_arrival) -> TraceData:
    from servesim.resources import collection_paused

    try:
        fmt, cols = _detect(path, fmt, dict(columns) or None)
        unit_s = TIME_UNITS[time_unit or unit_in_name(cols["arrival"]) or ("ms" if fmt == "mooncake" else "s")]
        with collection_paused():  # (millions of rows, no cycles)
            if fmt in ("jsonl", "mooncake"):
                data = _read_jsonl(path, cols, unit_s, need_arrival)
            else:
                data = _read_csv(path, cols, unit_s, need_arrival)
        if (fmt in ("csv", "jsonl") and time_unit is None and unit_in_name(cols["arrival"]) is None
                and data.arrival_s is not None and not data.arrival_timestamps):
            data = dataclasses.replace(data, unit_guessed=cols["arrival"])
        named = unit_in_name(cols["arrival"])
        if (time_unit is not None and named is not None and named != time_unit
                and data.arrival_s is not None and not data.arrival_timestamps):
            data = dataclasses.replace(data, unit_conflict=cols["arrival"])
        return data
    except UnicodeDecodeError:
        raise not_utf8(path, read_bytes(path)) from None
    except csv.Error as e:  # a field over csv's size limit, a stray quote
        raise InputError(f"{path}: not a CSV file servesim can read: {shown(str(e), 120)}") from None


# ---------------------------------------------------------------- length files
def read_lengths(path: str, column: str | None = None) -> np.ndarray:
    """Token counts from a file: one integer per line (a non-numeric first line is a header), or,
    with ``column``, that column of a CSV with a header. Each must be an integer >= 1."""
    p = resolve_path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise InputError(f"cannot read lengths file {shown_path(path)}: {e.strerror or e}") from None
    return _read_lengths_cached(str(path), str(p), st.st_mtime_ns, st.st_size, column)


@functools.lru_cache(maxsize=16)
def _read_lengths_cached(path, _file, _mtime, _size, column) -> np.ndarray:
    try:
        return _read_lengths(path, column)
    except UnicodeDecodeError:
        raise not_utf8(path, read_bytes(path)) from None
    except csv.Error as e:
        raise InputError(f"{path}: not a CSV file servesim can read: {shown(str(e), 120)}") from None


def _read_lengths(path, column) -> np.ndarray:
    out = []
    with _open_text(path) as fh:
        if column is not None:
            reader = csv.reader(fh)
            header = [h.strip() for h in (next(reader, None) or [])]
            j = column_index(header, column, path)
            if j is None:
                raise InputError(f"{path} line 1: no column {shown(column)}; {header_text(header)}")
            for row in reader:
                if not row:
                    continue
                where = f"{path} line {reader.line_num}"
                if j >= len(row):
                    raise InputError(f"{where}: expected {len(header)} fields, got {len(row)}")
                out.append(_length(row[j].strip(), where, column))
        else:
            for line, text in enumerate(fh, start=1):
                text = text.strip()
                if not text:
                    continue
                if line == 1 and not _is_number(text):
                    continue  # a header (a number of any spelling, 1e3 or nan too, is a length to check)
                try:
                    out.append(_length(text, f"{path} line {line}", "length"))
                except InputError as e:
                    if len(re.split(r"[,;\t ]+", text)) > 1:  # (a table: a CSV read without its column)
                        raise InputError(f"{e}: one length a line, or a CSV with a header and the length "
                                         "distribution's column: naming the lengths' column") from None
                    raise
    if not out:
        raise InputError(f"{path}: no lengths in the file")
    values = np.array(out, dtype=np.int64)
    values.flags.writeable = False  # cached and shared between runs
    return values
