"""Reading what servesim wrote: a run folder (summary.json, requests and steps as CSV or Parquet,
scenario.yaml, tbt_s.npy) and a study's results.csv; and ``RunData``, a run's data for figures,
from a ``Results`` in memory or a run folder on disk (no matplotlib). Plots, studies and the CLI
read through here; every damaged or foreign file is an ``InputError`` naming it.

Derived series (all seconds of simulated time):
- TTFT, TPOT, E2E, queue per completed request, and every TBT gap (``tbt_s.npy`` when the folder
  has it: sweeps and comparisons write it; a plain ``servesim run`` folder has none);
- queue length per replica over time, derived from requests: waiting = arrived - scheduled,
  running = scheduled - finished (a preempted request that goes back to the queue still counts
  as running here: requests.csv keeps only its first scheduling time);
- the TTFT breakdown: queueing (arrival -> first scheduled), prefill (the rest of the engine's TTFT:
  the prefill steps, and with chunked prefill the steps between its chunks) and the API server's
  delay of the first token (client-side TTFT; ``summary.json`` ``cost``), plus the P/D split's KV
  transfer (the ``kv_transfer_s`` requests column: first token -> KV on the decode replica, so it
  delays the second token, not the first; 0 without the column);
- with a P/D split a request runs on its prefill replica until its KV has been handed off, then
  on its ``decode_replica``; replicas are numbered across pools in ``summary.kv_capacity`` order;
- step kind: prefill (prefill tokens only), decode (decode tokens only) or mixed.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from servesim.errors import InputError, shown, shown_data
from servesim.inputs.files import loads_json, read_utf8
from servesim.inputs.schema import is_finite, read_mapping
from servesim.outputs import metrics
from servesim.outputs.columns import INT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS, STR_COLUMNS
from servesim.outputs.verdicts import RATE_KEY
from servesim.outputs.writer import file_digest

# top-level keys of every run's summary.json (what figures and report.md read)
SUMMARY_KEYS = ("scenario", "num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s",
                "throughput_rps", "output_tokens_per_s", "ttft_s", "tpot_s", "tbt_s", "e2e_s", "queue_s",
                "slo_attainment", "goodput_rps", "phases", "utilization", "pools", "kv_capacity")


def _int_or_inf(text: str):
    """An integer's text (in JSON, or a results.csv cell) as an int, or beyond a float's range as
    inf (as 1e400 reads): servesim writes none, and its readers take numbers as floats (an edited
    10**400 once stopped them with OverflowError). ValueError for text that is no integer."""
    x = int(text)
    return x if is_finite(x) else float(text)


def read_json_dict(path: Path, what: str) -> dict:
    """A JSON object servesim wrote (``what`` names it in errors); a clear input error if the file
    is unreadable, malformed or not an object."""
    data = loads_json(read_utf8(path, what), str(path), parse_int=_int_or_inf)
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


def damaged(path, field: str, value, want: str, again: str, text: str | None = None) -> InputError:
    """The error for a field of a file servesim wrote that holds something else (an edited or
    damaged file): the field, its value (null, true, false as JSON writes them: it said "is None"),
    what servesim writes there, and ``again``, what to do. ``text``: the value in words instead
    (a CSV's empty cell is "empty", neither None nor null)."""
    return InputError(f"{path}: {field} is {text or shown_data(value)}, where servesim writes {want}; {again}")


def check_fields(path, doc: dict, table, again: str) -> None:
    """``damaged`` for the first key of ``table`` ((key, check, what servesim writes), ...) that
    ``doc`` holds and that fails its check."""
    for key, ok, want in table:
        if key in doc and not ok(doc[key]):
            raise damaged(path, key, doc[key], want, again)


STUDY_KINDS = ("sweep", "compare", "capacity", "plan")


def read_study_meta(path: Path) -> dict:
    """A study folder's sweep.json (``{}`` when it has none), with the fields the readers use
    checked: an edited one is a clear input error, never a traceback or a report that says
    something else than the study ran (``kind``, ``seeds``, ``scenario``, ``slo``, ``notes``)."""
    if not path.is_file():
        return {}
    meta = read_json_dict(path, "sweep.json")
    check_fields(path, meta, _STUDY_FIELDS, "the study folder is damaged (edited): run the study again")
    return meta


def _count(v, least: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


# (key, check, what servesim writes) for the fields the readers use
_STUDY_FIELDS = (  # sweep.json
    ("kind", lambda v: v in STUDY_KINDS, "one of " + ", ".join(STUDY_KINDS)),
    ("seeds", lambda v: v is None or _count(v, 1), "a count of seeds (>= 1, or null)"),
    ("scenario", lambda v: v is None or isinstance(v, str), "the scenario's name or path"),
    ("slo", lambda v: v is None or isinstance(v, str), "the SLO as --slo gives it (text)"),
    ("notes", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of texts"),
)
_RATE = (lambda v: v is None or (_number_or_null(v) and v >= 0), "a rate in req/s (or null)")
_CAPACITY_FIELDS = (  # capacity.json
    *((k, *_RATE) for k in ("capacity_rps", "capacity_rps_per_gpu", "capacity_ci95_rps", "check_above_rps")),
    ("num_gpus", lambda v: _count(v, 1), "a count of GPUs (>= 1)"),
    ("slo", lambda v: isinstance(v, str), "the SLO as --slo gives it (text)"),
    ("attainment", lambda v: v is None or (_number_or_null(v) and 0 < v <= 1), "a share in (0, 1] (or null)"),
    ("keep_up", lambda v: v is None or (_number_or_null(v) and v >= 0), "a share (or null)"),
    ("floor", lambda v: v is None or isinstance(v, str), "a reason (text, or null)"),
    ("bracket_rps", lambda v: v is None or (isinstance(v, list) and all(_number_or_null(x) for x in v)),
     "a list of rates (or null)"),
    ("interval", lambda v: v is None or (isinstance(v, dict) and _count(v.get("seeds"), 1)
                                         and (v.get("stopped_short") is None or isinstance(v["stopped_short"], str))),
     "a mapping with the count of seeds (and null or a reason for stopped_short)"),
    ("seeds", lambda v: v is None or (isinstance(v, list) and all(
        isinstance(x, dict) and _number_or_null(x.get("capacity_rps")) for x in v)),
     "a list of mappings, each with its seed's capacity_rps (a number or null)"),
)
_CAPACITY_REQUIRED = ("capacity_rps", "capacity_rps_per_gpu", "num_gpus", "slo")


def read_capacity(path: Path) -> dict:
    """A capacity search's capacity.json, with the fields the report reads checked (an edited one
    is an input error naming the field, never a traceback)."""
    cap = read_json_dict(path, "capacity.json")
    lacks = [k for k in _CAPACITY_REQUIRED if k not in cap]
    if lacks:
        raise InputError(f"{path}: no {', '.join(lacks)}: not a file servesim wrote")
    again = "the study folder is damaged (edited): run the search again"
    check_fields(path, cap, _CAPACITY_FIELDS, again)
    if (cap["capacity_rps"] is None) != (cap["capacity_rps_per_gpu"] is None):  # (the report states both)
        raise damaged(path, "capacity_rps_per_gpu", cap["capacity_rps_per_gpu"],
                      "a rate when capacity_rps is one, null when it is null", again)
    return cap


READ_BLOCK = 1 << 15  # rows converted at a time: a large table is never held as Python strings whole


def read_columns(path: Path, required=()) -> dict:
    """A CSV as column -> numpy array (ints with -1 for empty cells, floats with NaN, or strings:
    by ``columns``' kinds; other columns: floats, else strings); a clear input error if it is
    missing, lacks a ``required`` column, has a malformed row or a cell that is not of its
    column's kind (the line and column named). Rows are read and converted
    ``READ_BLOCK`` at a time (memory: the columns, and one block's text)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise InputError(f"{path}: empty file, expected servesim's header row")
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(f"{path}: missing column(s) {', '.join(missing)}: not a file servesim wrote")
            parts: list = [[] for _ in header]
            line = 2  # (the file's line of the block's first row: the header is line 1)
            while True:
                block = list(itertools.islice(reader, READ_BLOCK))
                if not block:
                    break
                for j, r in enumerate(block):
                    if len(r) != len(header):
                        raise InputError(f"{path}: line {line + j} has {len(r)} cells, the header {len(header)}")
                for i, cells in enumerate(zip(*block)):
                    parts[i].append(_cells_to_column(header[i], cells, path, line))
                line += len(block)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    cols = {}
    for name, blocks in zip(header, parts):
        if not blocks:
            cols[name] = np.array([], dtype=object if name in STR_COLUMNS else
                                  np.int64 if name in INT_COLUMNS else float)
            continue
        col = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        if name not in STR_COLUMNS and name not in INT_COLUMNS and name not in _FLOAT_COLUMNS:
            try:  # (a column servesim does not write: floats, else text, as a whole)
                col = np.array([float(v) if v else math.nan for v in col.tolist()], dtype=float)
            except ValueError:
                pass
        cols[name] = col
    return cols


def _cells_to_column(name: str, cells: tuple, path: Path, line: int) -> np.ndarray:
    """One block of a column's cells (``line``: the file line of the first) as ``read_columns``
    types it; a column it does not know stays text here (``read_columns`` tries floats on the
    whole column)."""
    if name in STR_COLUMNS:
        return np.array(cells, dtype=object)
    if name in INT_COLUMNS:
        try:
            return np.array([int(v) if v else -1 for v in cells], dtype=np.int64)
        except (ValueError, OverflowError):
            for j, v in enumerate(cells):
                try:
                    ok = not v or -2**63 <= int(v) < 2**63
                except ValueError:
                    ok = False
                if not ok:
                    raise InputError(f"{path}: line {line + j}: column {name!r} must be an integer, "
                                     f"got {shown(v)}") from None
            raise
    if name in _FLOAT_COLUMNS:
        try:
            return np.array([float(v) if v else math.nan for v in cells], dtype=float)
        except ValueError:
            for j, v in enumerate(cells):
                try:
                    float(v or "nan")
                except ValueError:
                    raise InputError(f"{path}: line {line + j}: column {name!r} must be a number (or empty), "
                                     f"got {shown(v)}") from None
            raise
    return np.array(cells, dtype=object)


# the columns servesim writes as floats (times, FLOPs, bytes): every other one it knows
_FLOAT_COLUMNS = frozenset(REQUEST_COLUMNS + STEP_COLUMNS) - INT_COLUMNS - STR_COLUMNS


def read_parquet_columns(path: Path, required=()) -> dict:
    """A Parquet table as ``read_columns`` gives a CSV (nulls: NaN, or -1 in integer columns)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:  # (pyarrow's errors derive from these)
        raise InputError(f"cannot read {path}: {e}") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}: not a file servesim wrote")
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if name in INT_COLUMNS and col.null_count:
            col = col.fill_null(-1)
        cols[name] = col.to_numpy(zero_copy_only=False)
        if name in STR_COLUMNS:
            cols[name] = cols[name].astype(object)
        elif name in INT_COLUMNS:
            cols[name] = cols[name].astype(np.int64)  # as from a CSV (the file may hold int32)
    return cols


TABLES = {"requests": REQUEST_COLUMNS, "steps": STEP_COLUMNS}


def has_table(run_dir: str | Path, name: str) -> bool:
    """Whether a run folder holds its ``requests`` or ``steps`` table (CSV or Parquet)."""
    p = Path(run_dir)
    return (p / f"{name}.csv").is_file() or (p / f"{name}.parquet").is_file()


def read_table(run_dir: str | Path, name: str, required=None) -> dict:
    """A run folder's ``requests`` or ``steps`` table, from ``<name>.csv`` or ``<name>.parquet``;
    ``required``: the columns it must have (default: all of the table's)."""
    p = Path(run_dir)
    required = TABLES[name] if required is None else required
    if not (p / f"{name}.csv").is_file() and (p / f"{name}.parquet").is_file():
        return read_parquet_columns(p / f"{name}.parquet", required)
    if not (p / f"{name}.csv").exists() and (p / "summary.json").is_file():
        # (a run written with ``servesim run --outputs`` leaving this table out)
        raise InputError(f"{p}: the run wrote no {name} table ({name}.csv); run it again with --outputs including "
                         f"{name} (servesim run --outputs summary,requests,steps), or without --outputs")
    return read_columns(p / f"{name}.csv", required)


def read_summary(run_dir: str | Path) -> dict:
    """A run folder's summary.json, checked for the keys every summary has."""
    p = Path(run_dir) / "summary.json"
    summary = read_json_dict(p, "a run's summary.json")
    lacks = [k for k in SUMMARY_KEYS if k not in summary]
    if lacks:
        raise InputError(f"{p}: no {', '.join(lacks)}: not a summary servesim wrote")
    # (the keys' types: an edited summary would otherwise be shown as it is, e.g. completed = "x"
    # in a report's table; the files it lists are checked by ``verify_run``)
    for k in SUMMARY_KEYS:
        v = summary[k]
        if k in _COUNT_KEYS:
            ok, want = _count(v), "a count (an integer >= 0)"
        elif k == "sim_time_s":  # (every run has a length, 0 at least)
            ok, want = _number(v) and v >= 0, "a number of seconds (>= 0)"
        elif k in _FIGURE_KEYS:
            ok, want = _number_or_null(v), "a number (or null)"
        elif k == "scenario":
            ok, want = isinstance(v, str), "a name"
        elif k in _ALWAYS_MAPPINGS:  # (every run has them: the report reads their figures)
            ok, want = isinstance(v, dict), "a mapping"
        else:
            ok, want = v is None or isinstance(v, dict), "a mapping (or null)"
        if not ok:
            raise damaged(p, k, v, want, _RUN_AGAIN)
    # (the headline figures' ranges and the requests' accounting, which reports state as they are:
    # an edited summary would read "0 requests" of a run of 30, or -100% of requests within the SLO)
    counted = sum(summary[k] for k in ("completed", "rejected", "unfinished"))
    if counted != summary["num_requests"]:
        raise InputError(f"{p}: completed + rejected + unfinished is {counted} requests, where servesim writes "
                         f"num_requests ({summary['num_requests']}); {_RUN_AGAIN}")
    att = summary["slo_attainment"]
    if att is not None and not 0 <= att <= 1:
        raise damaged(p, "slo_attainment", att, "a share between 0 and 1 (or null)", _RUN_AGAIN)
    for k in ("throughput_rps", "output_tokens_per_s", "goodput_rps"):
        if summary[k] is not None and summary[k] < 0:
            raise damaged(p, k, summary[k], "a rate >= 0 (or null)", _RUN_AGAIN)
    for k, figures in _FIGURES_IN.items():  # (the figures the readers index in those mappings)
        v = summary.get(k)
        if isinstance(v, dict):
            bad = next((f for f in figures if not (f in v and _number_or_null(v[f]))), None)
            if bad is not None:
                what = shown_data(v.get(bad)) if bad in v else "missing"
                raise InputError(f"{p}: {k}.{bad} is {what}, where servesim writes a number (or null); the run "
                                 "folder is damaged (edited): run it again")
    for k, v in summary.items():  # the other sections its readers take apart, when present
        want = dict if k in _SECTION_KEYS else list if k in _LIST_KEYS else None
        if want is not None and v is not None and not isinstance(v, want):
            raise damaged(p, k, v, "a mapping" if want is dict else "a list", _RUN_AGAIN)
    # one level further down, what the readers index (found by editing every field of a summary)
    for where, v, ok, want in _nested(summary):
        if not ok(v):
            raise damaged(p, where, v, want, _RUN_AGAIN)
    return summary


def _mapping(v) -> bool:
    return isinstance(v, dict)


def _mapping_or_null(v) -> bool:
    return v is None or isinstance(v, dict)


def _nested(summary: dict):
    """(field, value, check, what servesim writes) for the nested fields readers index: each pool's
    entry of the per-pool sections, the profile's phases and diagnosis, the workload's offered
    rate and keep-up figures, each warning."""
    for k in _PER_POOL_KEYS:
        sec = summary.get(k)
        if isinstance(sec, dict):
            for pool, v in sec.items():
                yield f"{k}.{pool}", v, _mapping, "a mapping (one pool's figures)"
                if isinstance(v, dict) and k in _POOL_FIGURES:
                    counts, figures = _POOL_FIGURES[k]
                    for f in counts:
                        if f in v:
                            yield f"{k}.{pool}.{f}", v[f], _count, "a count (an integer >= 0)"
                    for f in figures:
                        if f in v:
                            yield f"{k}.{pool}.{f}", v[f], _number_or_null, "a number (or null)"
    prof = summary.get("profile")
    if isinstance(prof, dict):
        for k in ("prefill", "decode", "mixed", "diagnosis"):  # (beside them: comm_s, comm_share)
            if k in prof:
                yield f"profile.{k}", prof[k], _mapping_or_null, "a mapping (or null)"
    work = summary.get("workload")
    if isinstance(work, dict):
        yield "workload.offered_rps", work.get("offered_rps"), _number_or_null, "a rate in req/s (or null)"
        yield "workload.keep_up", work.get("keep_up"), _mapping_or_null, "a mapping (or null)"
    for i, w in enumerate(summary.get("warnings") or ()):
        yield (f"warnings[{i}]", w, lambda x: isinstance(x, dict) and isinstance(x.get("message"), str),
               "a mapping with its message (text)")
    classes = summary.get("classes")
    if isinstance(classes, dict):  # (per class, the figures a run of that class alone would have)
        for name, c in classes.items():
            yield from _service_figures(f"classes.{name}", c)
            if isinstance(c, dict) and "slo" in c:
                yield f"classes.{name}.slo", c["slo"], _mapping_or_null, "a mapping (or null)"
                if isinstance(c["slo"], dict):
                    for f, v in c["slo"].items():
                        yield f"classes.{name}.slo.{f}", v, _number_or_null, "a limit in seconds (or null)"
    fair = summary.get("fairness")
    if isinstance(fair, dict):
        for k in ("tenants", "service_share", "jain"):
            if k in fair:
                yield f"fairness.{k}", fair[k], _mapping_or_null, "a mapping (or null)"
        tenants = fair.get("tenants")
        for name, t in (tenants.items() if isinstance(tenants, dict) else ()):
            yield from _service_figures(f"fairness.tenants.{name}", t)
        jain = fair.get("jain")
        for k, v in (jain.items() if isinstance(jain, dict) else ()):
            yield f"fairness.jain.{k}", v, _mapping_or_null, "a mapping (or null)"
            for f, x in (v.items() if isinstance(v, dict) else ()):
                yield f"fairness.jain.{k}.{f}", x, _number_or_null, "an index between 0 and 1 (or null)"


def _service_figures(where: str, c):
    """(field, value, check, what servesim writes) for one class's or tenant's service figures
    (``summarize_classes``): counts, numbers (0 for a class with no requests; its
    ``slo_attainment`` null) and latency distributions (mappings; their statistics null when
    nothing completed)."""
    yield where, c, _mapping, "a mapping (one class's figures)"
    if not isinstance(c, dict):
        return
    for f, v in c.items():
        if f in _COUNT_KEYS:
            yield f"{where}.{f}", v, _count, "a count (an integer >= 0)"
        elif f in _DIST_KEYS:
            yield f"{where}.{f}", v, _mapping, "a mapping"
            for q, x in (v.items() if isinstance(v, dict) else ()):
                yield f"{where}.{f}.{q}", x, _number_or_null, "a number (or null)"
        elif f == "slo_attainment" and c.get("num_requests") == 0:  # (null: the class drew no request)
            yield f"{where}.{f}", v, _number_or_null, "a number (or null: the class drew no request)"
        elif f not in ("slo", "classes"):
            yield f"{where}.{f}", v, _number, "a number"


def _number(v) -> bool:
    # (finite: servesim writes a figure that does not exist as null, never NaN or Infinity)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and is_finite(v)


def _number_or_null(v) -> bool:
    return v is None or _number(v)


_RUN_AGAIN = "the run folder is damaged (edited): run it again"
_COUNT_KEYS = ("num_requests", "completed", "rejected", "unfinished", "preemptions")
_ALWAYS_MAPPINGS = ("phases", "utilization", "pools", "kv_capacity", "ttft_s", "tpot_s", "tbt_s", "e2e_s", "queue_s")
_DIST = ("mean", "p50", "p90", "p99")
_FIGURES_IN = {"ttft_s": _DIST, "tpot_s": _DIST, "tbt_s": _DIST, "e2e_s": _DIST, "queue_s": _DIST, "itl_s": _DIST,
               "utilization": ("mean_batch_size", "mfu", "mbu")}
# summary sections beyond SUMMARY_KEYS (not in every summary: older ones, or only some runs)
_SECTION_KEYS = ("itl_s", "slo", "kv", "head_of_line", "cost", "workload", "api_server_s", "classes", "fairness",
                 "profile", "economics", "files", "decisions", "seeds")
_LIST_KEYS = ("warnings",)
_PER_POOL_KEYS = ("kv_capacity", "cost", "pools")  # {pool: {figures}}
_POOL_FIGURES = {  # per-pool section: (counts, numbers) its readers compute with
    "kv_capacity": (("replicas", "blocks_per_replica", "block_size", "tokens_per_replica"), ("kv_pool_gib_per_gpu",)),
    "pools": (("replicas",), ("busy_fraction", "mean_batch_size", "kv_usage_mean", "kv_usage_max", "mfu", "mbu")),
}
_FIGURE_KEYS = ("sim_time_s", "throughput_rps", "output_tokens_per_s", "slo_attainment", "goodput_rps")
_DIST_KEYS = tuple(k for k, v in _FIGURES_IN.items() if v is _DIST)  # the latency distributions


def verify_run(run_dir: str | Path, summary: dict | None = None) -> None:
    """An ``InputError`` naming the folder and the file when a run folder is damaged: a file its
    summary.json lists (``files``: rows, bytes, SHA-256, written by ``writer.write_run``) is
    missing, of another size, or has other content; a summary.json without ``files`` (servesim
    writes it into every run's summary.json: one without it was edited, and its tables were then
    taken as they were, a requests.csv cut to 7 of 20 rows reported as a run of 20), or whose
    ``files`` count other rows than its ``num_requests`` (requests) or ``phases.steps`` (steps)."""
    p = Path(run_dir)
    summary = read_summary(p) if summary is None else summary
    files = summary.get("files")
    if files is None:
        raise InputError(f"{p}/summary.json: no 'files' (each file of the run folder with its rows, bytes and "
                         f"SHA-256, which servesim writes into every run's summary.json): it was edited or not "
                         f"written by servesim: {_RUN_AGAIN}")
    if not isinstance(files, dict):
        raise InputError(f"{p}/summary.json: 'files' must map file names to their rows and digest")
    counts = {"requests": ("num_requests", summary.get("num_requests")),
              "steps": ("phases.steps", (summary.get("phases") or {}).get("steps"))}
    for name, info in files.items():
        rows, (key, want) = (info.get("rows") if isinstance(info, dict) else None), counts.get(
            str(name).rsplit(".", 1)[0], (None, None))
        if key is not None and want is not None and rows != want:
            raise InputError(f"{p}/summary.json: files.{name}.rows is {shown_data(rows)} where its {key} is {want}: "
                             f"{_RUN_AGAIN}")
    for name, info in files.items():
        f = p / str(name)
        if not isinstance(info, dict) or "/" in str(name) or str(name).startswith("."):
            raise InputError(f"{p}/summary.json: files.{shown(name)}: not what servesim writes")
        if not f.is_file():
            raise InputError(f"{f}: missing; its run folder is damaged (summary.json lists it): run it again")
        try:  # (a file that cannot be read, for its permissions or a disk error, is damaged too)
            size = f.stat().st_size
            digest = file_digest(f) if size == info.get("bytes") else None
        except OSError as e:
            raise InputError(f"{f}: cannot read it ({e.strerror or e}); its run folder is damaged: run it "
                             "again") from None
        if size != info.get("bytes"):
            raise InputError(f"{f}: {size} bytes where summary.json says {info.get('bytes')}; its run folder is "
                             "damaged (truncated or edited): run it again")
        if digest != info.get("sha256"):
            raise InputError(f"{f}: its content differs from what was written (SHA-256 mismatch); its run "
                             "folder is damaged: run it again")


def read_scenario(run_dir: str | Path) -> dict:
    """A run folder's resolved scenario.yaml as plain data ({} when the folder has none)."""
    p = Path(run_dir) / "scenario.yaml"
    if not p.is_file():
        return {}
    scenario = read_mapping(p, "resolved scenario")
    if not isinstance(scenario, dict):
        raise InputError(f"{p}: must hold a mapping (the resolved scenario)")
    return scenario


def read_tbt(run_dir: str | Path) -> np.ndarray | None:
    """Every TBT gap of the run (tbt_s.npy, which sweeps and comparisons keep), or None."""
    p = Path(run_dir) / "tbt_s.npy"
    if not p.is_file():
        return None
    try:
        return np.load(p)
    except (OSError, ValueError, EOFError) as e:  # (EOFError: an empty or truncated file)
        raise InputError(f"{p}: cannot read: {shown(str(e), 120)}") from None


def read_results(path: str | Path) -> list[dict]:
    """A study's results.csv (sweep, compare, capacity) as row dicts, numbers parsed (empty cells
    -> None); a clear input error if the file is unreadable or lacks the columns every
    results.csv has."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None) or []
            rows = [(reader.line_num, r) for r in reader if r]  # (blank lines skipped)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    missing = [c for c in ("point", "status", "hash", "dir") if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}: not a results.csv servesim wrote")
    # the run's figures: between status (and error) and hash; the point's own values come before status (a
    # failed point's may be anything it was given)
    figures = set(header[header.index("status") + 1:header.index("hash")]) - {"error"}
    out = []
    for line, r in rows:
        if len(r) != len(header):
            raise InputError(f"{path}: line {line} has {len(r)} cells, the header {len(header)}")
        d = {}
        for k, v in zip(header, r):
            if v == "":
                d[k] = None
                continue
            try:
                d[k] = _int_or_inf(v)
            except ValueError:
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
        for k, v in d.items():  # (the readers compute with these: an edited cell was a traceback)
            if (k in figures or k == "point") and isinstance(v, str):
                raise damaged(f"{path} line {line}", f"column {k}", v, "a number (or an empty cell)", _STUDY_AGAIN)
            if k == RATE_KEY and d.get("status") == "ok" and (v is None or isinstance(v, str)):
                raise damaged(f"{path} line {line}", f"column {k}", v, "a number where the run is ok", _STUDY_AGAIN,
                              "empty" if v is None else None)
            if k in ("status", "dir") and not (v is None or isinstance(v, str)):  # (a hash may read as a number)
                raise damaged(f"{path} line {line}", f"column {k}", v, "text", _STUDY_AGAIN)
        out.append(d)
    return out


_STUDY_AGAIN = "the study folder is damaged (edited): run the study again"


def num_gpus(data: dict) -> int:
    """GPUs a resolved scenario uses: replicas x tp x pp, or the sum over a P/D split's two pools."""
    hw = data.get("hardware", {})
    tp, pp = int(hw.get("tp", 1)), int(hw.get("pp", 1))
    pol = data.get("policy") or {}
    if pol.get("name") == "pd_split":
        return sum(int((pol.get(k) or {}).get("replicas", 1)) * int((pol.get(k) or {}).get("tp") or tp) * pp
                   for k in ("prefill", "decode"))
    return int((data.get("cluster") or {}).get("replicas", 1)) * tp * pp


def gpu_label(gpu) -> str:
    """A GPU as titles name it: the name the run gives it (summary.json's, the economics line's):
    its catalog name, or a GPU YAML's ``name:`` (else what the loader names it, ``<base>-custom``
    or the file's name); a file no longer readable (a run folder read elsewhere) by its file name
    without the folder and the ``.yaml``."""
    g = str(gpu)
    name = _loaded_gpu_name(g)
    return name if name is not None else re.sub(r"\.ya?ml$", "", g.replace("\\", "/").split("/")[-1])


def _loaded_gpu_name(gpu) -> str | None:
    """The name a run gives ``gpu`` (a catalog name, or a GPU YAML as the loader names it); None
    when it is a file that can no longer be read (a run folder read where the file is not)."""
    from servesim.errors import InputError
    from servesim.inputs.specs import GPUS, get_gpu

    if gpu in GPUS:
        return gpu
    try:
        return get_gpu(gpu).name
    except (InputError, OSError, ValueError):
        return None


def _pd_pools(data: dict) -> list[tuple[int, int, str]] | None:
    """A P/D split's (replicas, tp, GPU) for its prefill and decode pools (None: no split)."""
    hw = data.get("hardware", {})
    pol = data.get("policy") or {}
    if pol.get("name") != "pd_split":
        return None
    return [(int((pol.get(k) or {}).get("replicas", 1)), int((pol.get(k) or {}).get("tp") or hw.get("tp", 1)),
             gpu_label((pol.get(k) or {}).get("gpu") or hw.get("gpu", "?"))) for k in ("prefill", "decode")]


def gpu_types(data: dict) -> list[str]:
    """The GPU types a resolved scenario runs on (``gpu_label``): one, or a P/D split's two when its
    pools use different ones."""
    pools = _pd_pools(data)
    if pools and pools[0][2] != pools[1][2]:
        return [pools[0][2], pools[1][2]]
    return [gpu_label((data.get("hardware") or {}).get("gpu", "?"))]


def deployment_gpus(data: dict) -> str:
    """The GPUs a resolved scenario runs on, for "MODEL on ...": "2 x h100-sxm"; a P/D split whose
    pools use different GPU types is "3 GPUs" (``deployment_shape`` names each pool's)."""
    types = gpu_types(data)
    return f"{num_gpus(data)} x {types[0]}" if len(types) == 1 else f"{num_gpus(data)} GPUs"


def deployment_shape(data: dict) -> str:
    """How a resolved scenario splits its GPUs, for a title beside their count: "" for one GPU,
    "TP2", "2 replicas x TP1", "2 replicas x TP4 PP2", or a P/D split's pools ("P/D: 1 x TP2
    prefill + 2 x TP1 decode"; with each pool's GPU when they differ: "P/D: 1 x h100-sxm TP2
    prefill + 2 x a100-80g TP1 decode"). Two deployments of 2 GPUs (TP2, or 2 replicas) read
    alike without it."""
    hw = data.get("hardware", {})
    tp, pp = int(hw.get("tp", 1)), int(hw.get("pp", 1))

    def par(t: int) -> str:
        return f"TP{t}" + (f" PP{pp}" if pp > 1 else "")

    pools = _pd_pools(data)
    if pools:
        named = len(gpu_types(data)) > 1
        (pn, pt, pg), (dn, dt, dg) = pools
        return (f"P/D: {pn} x {pg + ' ' if named else ''}{par(pt)} prefill + "
                f"{dn} x {dg + ' ' if named else ''}{par(dt)} decode")
    n = int((data.get("cluster") or {}).get("replicas", 1))
    if n > 1:
        return f"{n} replicas x {par(tp)}"
    return par(tp) if tp * pp > 1 else ""


def _gpus_named(scenario: dict, summary: dict) -> dict:
    """A run folder's scenario with each GPU file that can no longer be read (the folder read
    where the file is not) replaced by the name the run gave it (summary.json
    ``cost.<pool>.gpu.name``), so that titles name the GPU as the run did, not by the file's name."""
    names = {k: (v.get("gpu") or {}).get("name") for k, v in (summary.get("cost") or {}).items()
             if isinstance(v, dict) and isinstance(v.get("gpu"), dict)}

    def gone(g) -> bool:
        return isinstance(g, str) and _loaded_gpu_name(g) is None

    hw, pol = scenario.get("hardware") or {}, scenario.get("policy") or {}
    # (where each pool's GPU is written: a P/D pool's own, else the top-level one)
    where = ([(pol[k], k) if isinstance(pol.get(k), dict) and pol[k].get("gpu") else (hw, k)
              for k in ("prefill", "decode")] if pol.get("name") == "pd_split" else [(hw, "colocated")])
    out = None
    for holder, pool in where:
        name = names.get(pool)
        if isinstance(name, str) and name and gone(holder.get("gpu")):
            if out is None:
                import copy

                out = copy.deepcopy(scenario)
                hw, pol = out.get("hardware") or {}, out.get("policy") or {}
            (hw if holder is scenario.get("hardware") else pol[pool])["gpu"] = name
    return scenario if out is None else out


@dataclass
class RunData:
    label: str
    scenario: dict  # the resolved scenario as plain data
    summary: dict
    requests: dict
    steps: dict
    tbt_s: np.ndarray | None  # None when the run folder did not keep TBT samples

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_results(cls, res, label: str | None = None) -> "RunData":
        if not all(hasattr(res, a) for a in ("steps", "requests", "summary", "scenario", "tbt_s")):
            # (a Scenario or a run folder here raised AttributeError: 'Scenario' object has no attribute 'steps')
            raise TypeError(f"RunData.from_results: a servesim.Results (servesim.simulate's; a run folder: "
                            f"RunData.from_dir), got {type(res).__name__}")
        st = dict(res.steps)
        if "bound" not in st:
            st["bound"] = np.where(st["compute_bound"], "compute", "memory").astype(object)
        return cls(label or res.scenario.name, res.scenario.to_dict(), res.summary, dict(res.requests), st,
                   np.asarray(res.tbt_s, dtype=float))

    @classmethod
    def from_dir(cls, path: str | Path, label: str | None = None) -> "RunData":
        summary = read_summary(path)
        verify_run(path, summary)
        return cls(label or str(summary["scenario"]), _gpus_named(read_scenario(path), summary), summary,
                   read_table(path, "requests"), read_table(path, "steps"), read_tbt(path))

    # ------------------------------------------------------------ per-request latencies
    @property
    def done(self) -> np.ndarray:
        return metrics.is_completed(self.requests)

    def latency(self, metric: str) -> np.ndarray:
        """Samples (seconds) of ttft | tpot | tbt | e2e | queue over completed requests (tbt: every gap)."""
        if metric == "tbt":
            return self.tbt_s if self.tbt_s is not None else np.zeros(0)
        return metrics.latency_samples(self.requests, metric)

    def api_request_s(self) -> float:
        """The API server's delay of each first token (the engine profile's ``api_request_s``, in
        ``summary.json`` ``cost``; 0 without one): the client-side TTFT less the engine's."""
        cost = self.summary.get("cost") or {}
        entry = next(iter(cost.values()), {}) if cost else {}
        return float((entry.get("api_server") or {}).get("request_s", 0.0))

    def ttft_breakdown(self) -> dict:
        """Mean seconds of queueing, prefill compute, the API server (client-side TTFT) and KV
        transfer in TTFT (completed requests); empty when no request completed (there is no mean)."""
        r, d = self.requests, self.done
        if not d.any():
            return {}
        ttft = metrics.ttft_s(r)[d]
        queue = metrics.queue_s(r)[d]
        api = self.api_request_s()
        transfer = np.nan_to_num(r["kv_transfer_s"][d].astype(float)) if "kv_transfer_s" in r else np.zeros(d.sum())
        return {"queueing": float(queue.mean()), "prefill": float((ttft - queue).mean()) - api, "api": api,
                "transfer": float(transfer.mean())}

    # ------------------------------------------------------------ pools and replicas
    def num_gpus(self) -> int:
        return num_gpus(self.scenario)

    def pools(self) -> list:
        """[(pool name, first replica index, replicas, blocks per replica)] in replica order."""
        kc = self.summary.get("kv_capacity") or {}
        if "blocks_per_replica" in kc:  # one pool (older summaries)
            kc = {"colocated": {**kc, "replicas": self.summary.get("replicas", self.num_replicas())}}
        out, first = [], 0
        for name, c in kc.items():
            n = int(c.get("replicas", 1))
            out.append((name, first, n, c.get("blocks_per_replica")))
            first += n
        return out

    def num_replicas(self) -> int:
        n = int(self.steps["replica"].max()) + 1 if len(self.steps["replica"]) else 1
        rq = self.requests
        for col in ("replica", "decode_replica"):
            if col in rq and len(rq[col]):
                n = max(n, int(np.max(rq[col])) + 1)
        return n

    def pool_of(self, replica: int):
        for name, first, n, blocks in self.pools():
            if first <= replica < first + n:
                return name, blocks
        return "colocated", None

    def pool_hardware(self, pool: str) -> tuple:
        """(gpu name, tp, pp, dtype) of a pool (a P/D pool may set its own gpu and tp)."""
        hw = self.scenario.get("hardware", {})
        p = (self.scenario.get("policy") or {}).get(pool) if pool in ("prefill", "decode") else None
        p = p or {}
        return (p.get("gpu") or hw.get("gpu", "h100-sxm"), int(p.get("tp") or hw.get("tp", 1)), int(hw.get("pp", 1)),
                hw.get("dtype", "bf16"))

    # ------------------------------------------------------------ steps
    def step_kind(self) -> np.ndarray:
        pf, dc = self.steps["prefill_tokens"], self.steps["decode_tokens"]
        return np.where((pf > 0) & (dc > 0), "mixed", np.where(pf > 0, "prefill", "decode")).astype(object)

    def roofline_pools(self) -> list:
        """The pools a roofline is drawn for, one each: [None] (every step, one roofline) when all
        pools share one hardware, else each pool's name (a P/D split whose pools differ in GPU or
        TP: each pool's steps under its own roofline)."""
        pools = self.pools() or [("colocated", 0, self.num_replicas(), None)]
        if len({self.pool_hardware(name) for name, *_ in pools}) <= 1:
            return [None]
        return [name for name, *_ in pools]

    def roofline_data(self, pool: str | None = None) -> dict:
        """Per-step FLOPs, bytes, duration and kind, with a replica's peak FLOP/s and bandwidth.

        ``pool``: that pool's steps under its hardware's roofline. Without it, every step when all
        pools share one hardware; otherwise the steps of the first pool only (``roofline_pools``
        names the pools to draw one by one).
        """
        from servesim.inputs.specs import get_gpu

        pools = self.pools() or [("colocated", 0, self.num_replicas(), None)]
        hws = {name: self.pool_hardware(name) for name, *_ in pools}
        chosen = next((p for p in pools if p[0] == pool), pools[0])
        gpu_name, tp, pp, dtype = hws[chosen[0]]
        st = self.steps
        sel = np.ones(len(st["flops"]), dtype=bool)
        if len(set(hws.values())) > 1 or pool is not None:
            _, first, n, _ = chosen
            sel = (st["replica"] >= first) & (st["replica"] < first + n)
        n = tp * pp
        # the figures the run was priced with (its summary's cost.<pool>.gpu); a folder written
        # before they were recorded: the GPU the scenario names, read again
        rec = ((self.summary.get("cost") or {}).get(chosen[0]) or {}).get("gpu")
        if rec:
            name, peak, bw = rec["name"], rec["peak_flops"], rec["mem_bw_bytes_per_s"]
        else:
            gpu = get_gpu(gpu_name)
            name, bw = gpu.name, gpu.mem_bw_bytes_per_s
            peak = gpu.fp8_flops if dtype == "fp8" and gpu.fp8_flops > 0 else gpu.peak_flops
        return {"flops": st["flops"][sel], "bytes": st["bytes"][sel], "duration_s": st["duration_s"][sel],
                "kind": self.step_kind()[sel], "peak_flops": peak * n, "mem_bw": bw * n,
                "hardware": f"{n} x {name}" if n > 1 else name}

    def timeline_data(self, replica: int = 0) -> dict:
        """Per-step series of one replica and its queue length (derived from requests)."""
        st = self.steps
        sel = st["replica"] == replica
        t = st["start_s"][sel]
        pool, blocks = self.pool_of(replica)
        kv = st["kv_blocks_used"][sel] / blocks if blocks else np.full(sel.sum(), np.nan)
        r = self.requests
        mine = (r["replica"] == replica) & (r["status"] != "rejected")
        handed = np.zeros(len(mine), dtype=bool)
        if "decode_replica" in r:
            handed = (r["decode_replica"] >= 0) & (r["decode_replica"] != r["replica"])
        transfer = np.nan_to_num(r["kv_transfer_s"].astype(float)) if "kv_transfer_s" in r else np.zeros(len(mine))
        # on this replica a request runs until it finishes, or until its KV has left (P/D hand-off);
        # the engine's times (the API server's delay of the client-side ones taken off)
        api = np.nan_to_num(r["api_s"].astype(float)) if "api_s" in r else 0.0
        fin = r["finish_s"] - api
        leaves = np.where(handed, r["first_token_s"] - self.api_request_s() + transfer, fin)
        arr = np.sort(r["arrival_s"][mine])
        sch = r["scheduled_s"][mine]
        starts = [sch[~np.isnan(sch)]]
        ends = [leaves[mine][~np.isnan(leaves[mine])]]
        if "decode_replica" in r:  # requests handed to this replica run from hand-off to finish
            inbound = handed & (r["decode_replica"] == replica)
            starts.append(leaves[inbound][~np.isnan(leaves[inbound])])
            ends.append(fin[inbound][~np.isnan(fin[inbound])])
        sch = np.sort(starts[0])
        started = np.sort(np.concatenate(starts))
        fin = np.sort(np.concatenate(ends))
        end = max(float(self.summary.get("sim_time_s", 0.0)), float(t[-1]) if len(t) else 0.0)
        grid = np.linspace(0.0, end, 600) if end > 0 else np.zeros(1)
        n_arr = np.searchsorted(arr, grid, side="right")
        n_sch = np.searchsorted(sch, grid, side="right")
        n_run = np.searchsorted(started, grid, side="right")
        n_fin = np.searchsorted(fin, grid, side="right")
        return {"replica": replica, "pool": pool, "t": t, "duration_s": st["duration_s"][sel],
                "num_seqs": st["num_seqs"][sel],
                "prefill_tokens": st["prefill_tokens"][sel],
                "decode_tokens": st["decode_tokens"][sel], "kv_usage": kv,
                "queue_t": grid, "waiting": n_arr - n_sch, "running": n_run - n_fin}
