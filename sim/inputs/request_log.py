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
case; or, as in a vLLM result, a TTFT of 0 or no output tokens) is counted and left out, as
``validate-run`` leaves out a vLLM result's failed requests. Latency columns read as seconds only
for want of a unit in their names are refused when a median time per output token above
``MAX_PLAUSIBLE_TPOT_S`` says they hold milliseconds (the error names the columns and how to say
the unit).
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
            raw_o = row[idx["output"]].strip()
            o = 0 if _is_zero(raw_o) else _length(raw_o, where, names["output"])
            lat = []
            for r in ("ttft", "e2e"):
                kind_r, v = _time_value(row[idx[r]], scale[r], where, names[r])
                if kind_r != "num" or v < 0:
                    raise InputError(f"{where}: {names[r]} must be a duration >= 0, got {shown(row[idx[r]])}")
                lat.append(v)
            if not o or not lat[0]:  # (failed, as a vLLM result's request of no output or TTFT 0 is)
                failures.append(f"line {line}: " + (f"no output ({names['output']} = 0)" if not o else
                                                    "no first token (TTFT 0)"))
                rows.append((kind, sent, False, 0, 0, math.nan, math.nan, pid))
                continue
            if lat[1] < lat[0]:
                raise InputError(f"{where}: {names['e2e']} ({shown(row[idx['e2e']])}) is shorter than "
                                 f"{names['ttft']} ({shown(row[idx['ttft']])}): E2E ends with the last token, after "
                                 "the first" + _unit_hint(names, unit, time_unit))
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
    _plausible(path, rows, names, unit, time_unit)
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


def _is_zero(raw: str) -> bool:
    if not raw.isascii():  # (０ is no number here: DIGITS_RULE; _length names it)
        return False
    try:
        return float(raw) == 0
    except ValueError:
        return False


def _guessed(names: dict, time_unit: str | None) -> list:
    """The latency columns read as seconds for want of a unit (none in the name, no --time-unit)."""
    return [] if time_unit else [names[r] for r in ("ttft", "e2e") if unit_in_name(names[r]) is None]


def _unit_hint(names: dict, unit: dict, time_unit: str | None) -> str:
    """For E2E shorter than TTFT: when one of the two has its unit from its name and the other none
    (read as seconds), the mix-up is the likely cause; say so."""
    guessed = _guessed(names, time_unit)
    if len(guessed) != 1:
        return ""
    other = names["e2e"] if guessed[0] == names["ttft"] else names["ttft"]
    other_role = "e2e" if other == names["e2e"] else "ttft"
    return (f" ({guessed[0]} has no unit in its name and is read as seconds, {other} in {unit[other_role]}: name "
            f"its unit, e.g. {guessed[0]}_ms)")


# a median time per output token above this, in seconds, is no LLM server's: a 7B model on one
# old GPU decodes in tens of ms, a 405B across nodes under load in well under a second. Milliseconds
# read as seconds put it 1000x above the real one (tens of seconds); seconds read as seconds, below.
MAX_PLAUSIBLE_TPOT_S = 1.0


def _plausible(path: str, rows: list, names: dict, unit: dict, time_unit: str | None) -> None:
    """Latency columns read as seconds only because their names carry no unit (``ttft``, ``e2e``)
    are refused when their values make sense only in a smaller unit: a median time per output
    token ((E2E - TTFT) / (output tokens - 1), over the successful requests of 2+ tokens) above
    ``MAX_PLAUSIBLE_TPOT_S``. A unit stated (a suffix, --time-unit) is taken as given."""
    guessed = _guessed(names, time_unit)
    if not guessed:
        return
    tpot = [(r[6] - r[5]) / (r[4] - 1) for r in rows if r[2] and r[4] > 1]
    if not tpot:
        return
    med = float(np.median(tpot))
    if med <= MAX_PLAUSIBLE_TPOT_S:
        return
    cols = ", ".join(guessed)
    raise InputError(
        f"{path}: {cols} {'has' if len(guessed) == 1 else 'have'} no unit in "
        f"{'its name' if len(guessed) == 1 else 'their names'} and {'is' if len(guessed) == 1 else 'are'} read as "
        f"seconds, which makes the requests' median time per output token {med:.3g} s (E2E - TTFT over output "
        f"tokens - 1; no server decodes slower than {MAX_PLAUSIBLE_TPOT_S:g} s a token): if they hold "
        f"milliseconds, name the unit in the header ({guessed[0]}_ms) or pass --time-unit ms (every time "
        "column); if seconds is right, pass --time-unit s")


def _dense_ids(texts: list) -> np.ndarray:
    """Each distinct non-empty text as 0, 1, ... in order of first appearance; empty: -1."""
    index: dict = {}
    return np.array([index.setdefault(x, len(index)) if x else -1 for x in texts], dtype=np.int64)
