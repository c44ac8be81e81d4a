"""Chrome / Perfetto trace export (``servesim run --trace-events FILE``), loadable in ui.perfetto.dev.

The JSON Trace Event Format, times in microseconds of simulated time:
- each replica is a process (``pid`` = replica + 1) named "replica N";
- its thread 1 ("steps") holds one complete event (``ph: X``) per step, named prefill, decode or
  mixed, with args: num_seqs, prefill_tokens, decode_tokens, context_tokens, flops, bytes, bound;
- each request is an async slice (``ph: b`` / ``e``, ``cat: request``, ``id`` = request id) named
  "request N" from arrival to finish, on its (first) replica's process, with nested slices for
  its phases: queued (arrival -> first scheduled), prefill (-> first token), with a P/D split
  kv_transfer (-> KV landed on the decode replica, named in the args), and decode (-> finish,
  when it has more than one output token). A request still running when the run stopped ends
  at the end of the run; a rejected request is one instant event (``ph: i``) named "rejected N"
  with the reason;
- with the decision trace, each request's wait spans (``servesim.outputs.decision_trace``).

Event count: 3 metadata events per replica (process name, two thread names) + one per step +
for each request 2 x (1 + phases it reached), or 1 when rejected.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def count_replicas(requests: dict, steps: dict) -> int:
    n = int(steps["replica"].max()) + 1 if len(steps["replica"]) else 1
    for col in ("replica", "decode_replica"):
        if col in requests and len(requests[col]):
            n = max(n, int(np.max(requests[col])) + 1)
    return n


OTHER_DATA = {"generator": "servesim", "time": "simulated seconds shown as trace time"}


def chrome_trace(requests: dict, steps: dict, sim_time_s: float, num_replicas: int | None = None,
                 decisions: dict | None = None) -> dict:
    """The trace as a dict ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` from result columns
    (``decisions``: the decision trace's spans, ``servesim.outputs.decision_trace``)."""
    return {"traceEvents": list(trace_events(requests, steps, sim_time_s, num_replicas, decisions)),
            "displayTimeUnit": "ms", "otherData": dict(OTHER_DATA)}


def trace_events(requests: dict, steps: dict, sim_time_s: float, num_replicas: int | None = None,
                 decisions: dict | None = None):
    """``chrome_trace``'s events, one at a time, in its order (what ``write_trace`` streams: a large
    run's trace is never held whole)."""
    if num_replicas is None:
        num_replicas = count_replicas(requests, steps)
    for r in range(num_replicas):
        pid = r + 1
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"replica {r}"}}
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "steps"}}
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "requests"}}
    if "bound" in steps:
        bound = np.asarray(steps["bound"])
    else:
        bound = np.where(steps["compute_bound"], "compute", "memory")
    names = ("replica", "start_s", "duration_s", "num_seqs", "prefill_tokens", "decode_tokens", "context_tokens",
             "flops", "bytes", "bound")
    for rep, start, dur, seqs, p, d, ctx, fl, by, b in _rows({**steps, "bound": bound}, names):
        name = "mixed" if p and d else ("prefill" if p else "decode")
        yield {"ph": "X", "name": name, "cat": "step", "pid": rep + 1, "tid": 1, "ts": _us(start),
               "dur": _us(dur), "args": {"num_seqs": seqs, "prefill_tokens": p, "decode_tokens": d,
                                         "context_tokens": ctx, "flops": fl, "bytes": by, "bound": b}}
    waits = {}
    if decisions is not None:
        from servesim.outputs.decision_trace import wait_events

        more, waits = wait_events(decisions, lambda rep: max(int(rep), 0) + 1)
        yield from more
        del more
    rq = dict(requests)
    n = len(rq["request_id"])
    if "kv_transfer_s" not in rq:
        rq["kv_transfer_s"] = np.full(n, math.nan)
    if "decode_replica" not in rq:
        rq["decode_replica"] = np.full(n, -1)
    rows = _rows(rq, ("request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens",
                      "output_tokens", "replica", "status", "reason", "kv_transfer_s", "decode_replica"))
    for rid, arr, sch, first, fin, prompt, out, rep, status, reason, xfer, drep in rows:
        pid = max(int(rep), 0) + 1
        if status == "rejected":
            yield {"ph": "i", "name": f"rejected {rid}", "cat": "request", "pid": pid, "tid": 2, "s": "t",
                   "ts": _us(arr), "args": {"reason": reason, "prompt_tokens": prompt, "output_tokens": out}}
            continue
        end = fin if not math.isnan(fin) else sim_time_s
        base = {"cat": "request", "id": int(rid), "pid": pid, "tid": 2}
        args = {"prompt_tokens": prompt, "output_tokens": out, "status": status}
        if drep is not None and drep >= 0:
            args["decode_replica"] = int(drep)
        if rid in waits:
            args["waits"] = waits[rid]
        yield {**base, "ph": "b", "name": f"request {rid}", "ts": _us(arr), "args": args}
        if math.isnan(xfer) or math.isnan(first):
            marks = [("queued", arr, sch), ("prefill", sch, first), ("decode", first, fin)]
        else:
            landed = first + xfer
            marks = [("queued", arr, sch), ("prefill", sch, first), ("kv_transfer", first, landed),
                     ("decode", landed, fin)]
        for name, a, b in marks:
            if math.isnan(a):
                continue
            if math.isnan(b):
                b = end
            elif name == "decode" and b <= a:  # one output token: no decode phase
                continue
            yield {**base, "ph": "b", "name": name, "ts": _us(a)}
            yield {**base, "ph": "e", "name": name, "ts": _us(b)}
        yield {**base, "ph": "e", "name": f"request {rid}", "ts": _us(end)}


def _rows(columns: dict, names: tuple, block: int = 1 << 16):
    """Rows of the named columns as tuples of Python values (``tolist``), a block at a time: the
    values of a large run are never all held as Python objects at once."""
    n = len(columns[names[0]])
    for lo in range(0, n, block):
        yield from zip(*(columns[c][lo:lo + block].tolist() for c in names))


def write_trace(results, path: str | Path) -> Path:
    """Write the Chrome trace of a ``Results`` to ``path`` (JSON)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    events = trace_events(results.requests, results.steps, results.summary["sim_time_s"],
                          decisions=getattr(results, "decisions", None))
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    # the text json.dump(chrome_trace(...)) writes, byte for byte, written as the events come
    with p.open("w") as fh:
        fh.write('{"traceEvents":[')
        block: list = []
        first = True
        for e in events:
            block.append(dumps(e))
            if len(block) == 4096:
                fh.write(("" if first else ",") + ",".join(block))
                first = False
                block.clear()
        if block:
            fh.write(("" if first else ",") + ",".join(block))
        fh.write('],"displayTimeUnit":"ms","otherData":' + dumps(OTHER_DATA) + "}")
    return p
