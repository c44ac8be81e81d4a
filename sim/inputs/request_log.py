"""Per-request measurements as a CSV table, for ``servesim validate-run``: one row per request with
when it was sent, its prompt and output tokens, and its TTFT and E2E as the client measured them
(optionally whether it failed). Any benchmark tool's per-request log turns into one easily
(``../shared/data/vllm-h100``'s files are such tables). Read into the ``BenchResult`` a vLLM
result file gives, without what a table does not hold: the gaps between streamed tokens (ITL)
and the tool's own throughput figures.

An optional ``prompt_id`` column says which requests sent the same prompt: the replay then maps
their prompts' full KV blocks to the same cache keys, so a scenario with prefix caching hits them
as vLLM's prefix cache did (without it, every prompt is computed whole).

Columns are found by name (``ROLES``: the first of a role's names the header has), or named with
``--columns ROLE=COLUMN,...``. A time column's unit is its name's suffix (``_s``, ``_ms``,
``_us``, ``_ns``; none: seconds) unless ``--time-unit`` gives one for all of them; send times may also be
timestamps (``YYYY-MM-DD HH:MM:SS[.fff]``, ISO 8601). Only successful rows need their lengths and
latencies; a failed one (its error column not empty, 0, false, no, none, nan or null, in any
case) is counted and left out, as ``validate-run`` leaves out a vLLM result's failed requests.
"""

from __future__ import annotations

import csv
import math

import numpy as np

from servesim.errors import InputError, did_you_mean, shown
from servesim.inputs.files import not_utf8, read_bytes
from servesim.inputs.scenario import MAX_SECONDS
from servesim.inputs.traces import (TIME_UNITS, _length, _open_text, _time_value, column_index, data_rows,
                                     header_text, unit_in_name)
from servesim.inputs.vllm_result import BenchResult, shown_error

# role -> the column names looked for, in order (when --columns does not name the role's column)
ROLES = {
    "sent": ("sent_s", "sent_ms", "arrival_s", "arrival_ms", "start_s", "start_ms", "timestamp"),
    "prompt": ("prompt_tokens", "input_tokens", "input_len", "prompt_len"),
    # (output_tokens before max_tokens: a tool's count of what was generated; a run with ignore_eos
    # generates max_tokens, which a re-tokenized count may miss by a few)
    "output": ("output_tokens", "max_tokens", "output_len"),
    "ttft": ("ttft_s", "ttft_ms", "ttft"),
    "e2e": ("e2e_s", "e2e_ms", "latency_s", "latency_ms", "e2e"),
    "error": ("has_error", "error", "failed"),
    # which prompt a request sent (any text; equal: the same prompt text, so vLLM's prefix cache
    # holds its full blocks after the first use; empty: unknown)
    "prompt_id": ("prompt_id", "prompt_hash"),
}
REQUIRED = ("sent", "prompt", "output", "ttft", "e2e")
UNITS = ("s", "ms", "us", "ns")  # what --time-unit takes (traces.TIME_UNITS: seconds each)
# an error cell that says there was none, in any case (a missing value written out: pandas' NaN as
# "nan" by Python's csv, JSON's null)
_OK = frozenset(("", "0", "0.0", "false", "no", "none", "nan", "null", "n/a"))


def parse_columns(text: str | None, flag: str = "--columns") -> dict:
    """``ROLE=COLUMN,...`` -> {role: column}; InputError naming the flag for an unknown role, a
    pair without ``=`` or an empty column name."""
    out: dict = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        role, eq, name = part.partition("=")
        role, name = role.strip(), name.strip()
        if not eq or not name:
            raise InputError(f"{flag}: {shown(part)} is not ROLE=COLUMN (e.g. sent=arrival_ms,output=max_tokens)")
        if role not in ROLES:
            raise InputError(f"{flag}: unknown role {shown(role)};{did_you_mean(role, ROLES)}")
        if role in out:
            raise InputError(f"{flag}: {role} is named twice ({out[role]} and {name}); one column per role")
        other = next((r for r, c in out.items() if c == name), None)
        if other is not None:  # (one column read as, say, both the send time and the prompt length)
            raise InputError(f"{flag}: column {shown(name)} is given to both {other} and {role}; one role per column")
        out[role] = name
    return out


def read_request_log(path: str, columns: dict | None = None, time_unit: str | None = None) -> BenchResult:
    """The table at ``path`` as a ``BenchResult`` (``sent_s`` from the first request sent;
    ``request_rate`` inf: the send times are the arrivals). ``columns``: {role: column name} over
    ``ROLES``' defaults; ``time_unit``: s, ms or us for every time column. A file that is no UTF-8
    text or no CSV is an ``InputError`` naming it (the first bad byte's offset and line)."""
    if time_unit is not None and time_unit not in UNITS:
        raise InputError(f"--time-unit: {shown(time_unit)} is no unit;{did_you_mean(time_unit, UNITS)}")
    try:
        return _read(path, columns, time_unit)
    except UnicodeDecodeError:
        raise not_utf8(path, read_bytes(path)) from None
    except csv.Error as e:  # a field over csv's size limit, a stray quote
        raise InputError(f"{path}: not a CSV file servesim can read: {shown(str(e), 120)}") from None


def _read(path: str, columns: dict | None, time_unit: str | None) -> BenchResult:
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise InputError(f"{path}: empty (a header row, then one row per request, expected)")
        header = [h.strip() for h in header]
        idx, names = {}, {}
        for role, tried in ROLES.items():
            name = (columns or {}).get(role)  # (a column is found in any case: column_index)
            if name is not None:
                j = column_index(header, name, path)
                if j is None:
                    raise InputError(f"{path} line 1: no column {shown(name)} (--columns {role}={name}); "
                                     f"{header_text(header)}")
            else:
                j = next((k for k in (column_index(header, n, path) for n in tried) if k is not None), None)
            if j is None:
                if role in REQUIRED:
                    raise InputError(f"{path} line 1: no column for the {role} (looked for {', '.join(tried)}; "
                                     f"name it with --columns {role}=COLUMN); {header_text(header)}")
                continue
            idx[role], names[role] = j, header[j]
        # each time column's unit: --time-unit, else its name's, else seconds
        unit = {r: time_unit or unit_in_name(names[r]) or "s" for r in ("sent", "ttft", "e2e")}
        scale = {r: TIME_UNITS[u] for r, u in unit.items()}
        rows, failures = [], []
        for line, row in data_rows(reader, len(header), path):
            where = f"{path} line {line}"
            kind, sent = _time_value(row[idx["sent"]], scale["sent"], where, names["sent"])
            ok = "error" not in idx or row[idx["error"]].strip().casefold() in _OK
            pid = row[idx["prompt_id"]].strip() if "prompt_id" in idx else ""
            if not ok:
                failures.append(f"line {line}: {names['error']} = {shown_error(row[idx['error']])}")
                rows.append((kind, sent, False, 0, 0, math.nan, math.nan, pid))
                continue
            p = _length(row[idx["prompt"]].strip(), where, names["prompt"])
            o = _length(row[idx["output"]].strip(), where, names["output"])
            lat = []
            for r in ("ttft", "e2e"):
                kind_r, v = _time_value(row[idx[r]], scale[r], where, names[r])
                if kind_r != "num" or v < 0:
                    raise InputError(f"{where}: {names[r]} must be a duration >= 0, got {shown(row[idx[r]])}")
                lat.append(v)
            if lat[1] < lat[0]:
                raise InputError(f"{where}: {names['e2e']} ({shown(row[idx['e2e']])}) is shorter than "
                                 f"{names['ttft']} ({shown(row[idx['ttft']])}): E2E ends with the last token, after "
                                 "the first")
            rows.append((kind, sent, True, p, o, lat[0], lat[1], pid))
    if not rows:
        raise InputError(f"{path}: no requests (only a header)")
    kinds = {r[0] for r in rows}
    if len(kinds) > 1:
        raise InputError(f"{path}: column {shown(names['sent'])} mixes numbers and timestamps")
    t = np.array([r[1] for r in rows], dtype=np.float64)
    t = (t - t.min()) / (1e9 if kinds == {"ts"} else 1.0)
    if t.max() > MAX_SECONDS:  # (the replay's arrivals: past this the simulated clock no longer resolves a step)
        raise InputError(f"{path}: the send times span {t.max():.3g} s, where a replay takes at most {MAX_SECONDS:g} s "
                         "(a unit mix-up? set --time-unit)")
    n = len(rows)
    used = {}  # role -> the column read (with its unit), for the report
    for r, name in names.items():
        timed = r in unit and not (r == "sent" and kinds == {"ts"})
        guessed = timed and time_unit is None and unit_in_name(name) is None
        used[r] = name + (f" ({unit[r]}" + (": no unit in its name; --time-unit sets one" if guessed else "") + ")"
                          if timed else "")
    return BenchResult(
        path=str(path), model_id=None, request_rate=math.inf, burstiness=1.0, max_concurrency=None,
        duration_s=None, ok=np.array([r[2] for r in rows], dtype=bool),
        input_tokens=np.array([r[3] for r in rows], dtype=np.int64),
        output_tokens=np.array([r[4] for r in rows], dtype=np.int64),
        ttft_s=np.array([r[5] for r in rows], dtype=np.float64), e2e_s=np.array([r[6] for r in rows], dtype=np.float64),
        itl_s=[np.zeros(0)] * n, sent_s=t, throughput={}, columns=used,
        prompt_id=_dense_ids([r[7] for r in rows]) if "prompt_id" in names else None, failures=tuple(failures))


def _dense_ids(texts: list) -> np.ndarray:
    """Each distinct non-empty text as 0, 1, ... in order of first appearance; empty: -1."""
    index: dict = {}
    return np.array([index.setdefault(x, len(index)) if x else -1 for x in texts], dtype=np.int64)
