"""Writing the decision trace (``servesim.core.decisions``): ``decisions.csv`` and its events in
the Chrome / Perfetto trace.

In the Perfetto trace each request's wait spans are async slices of category ``wait`` (their own
track next to the request's, same id), named ``wait: <reason>``, with args ``decisions``,
``blocker`` (the request id it waited behind, or -1), ``inversion`` and ``detail``; the
request's own slice gets ``waits`` in its args, e.g. ``budget 0.120 s; head_of_line 0.300 s``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from servesim.outputs.columns import DECISION_COLUMNS as COLUMNS


def _cell(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_decision_csv(cols: dict, path: str | Path) -> Path:
    """``cols`` (``Results.decisions``) as a CSV with ``COLUMNS``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lists = [cols[c].tolist() for c in COLUMNS]
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for row in zip(*lists):
            w.writerow([_cell(v) for v in row])
    return p


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def wait_events(cols: dict, pid_of) -> tuple[list, dict]:
    """(trace events of every span, request id -> its ``waits`` text); ``pid_of(replica)`` is
    the span's process in the trace."""
    events, per = [], {}
    rows = zip(*(cols[c].tolist() for c in ("request_id", "replica", "start_s", "end_s", "reason", "decisions",
                                            "blocker", "inversion", "detail")))
    for rid, rep, start, end, reason, n, blocker, inv, detail in rows:
        per.setdefault(rid, {}).setdefault(reason, 0.0)
        per[rid][reason] += end - start
        if end <= start:
            continue
        base = {"cat": "wait", "id": int(rid), "pid": pid_of(rep), "tid": 2, "name": f"wait: {reason}"}
        events.append({**base, "ph": "b", "ts": _us(start),
                       "args": {"decisions": n, "blocker": blocker, "inversion": inv, "detail": detail}})
        events.append({**base, "ph": "e", "ts": _us(end)})
    text = {rid: "; ".join(f"{r} {s:.3f} s" for r, s in d.items()) for rid, d in per.items()}
    return events, text
