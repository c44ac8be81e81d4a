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


def chrome_trace(requests: dict, steps: dict, sim_time_s: float, num_replicas: int | None = None,
                 decisions: dict | None = None) -> dict:
    """The trace as a dict ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` from result columns
    (``decisions``: the decision trace's spans, ``servesim.outputs.decision_trace``)."""
    if num_replicas is None:
        num_replicas = count_replicas(requests, steps)
    ev = []
    for r in range(num_replicas):
        pid = r + 1
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"replica {r}"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "steps"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "requests"}})
    if "bound" in steps:
        bound = steps["bound"]
    else:
        bound = np.where(steps["compute_bound"], "compute", "memory")
    cols = [steps[c].tolist() for c in ("replica", "start_s", "duration_s", "num_seqs", "prefill_tokens",
                                         "decode_tokens", "context_tokens", "flops", "bytes")]
    for (rep, start, dur, seqs, p, d, ctx, fl, by), b in zip(zip(*cols), bound.tolist()):
        name = "mixed" if p and d else ("prefill" if p else "decode")
        ev.append({"ph": "X", "name": name, "cat": "step", "pid": rep + 1, "tid": 1, "ts": _us(start),
                   "dur": _us(dur), "args": {"num_seqs": seqs, "prefill_tokens": p, "decode_tokens": d,
                                             "context_tokens": ctx, "flops": fl, "bytes": by, "bound": b}})
    waits = {}
    if decisions is not None:
        from servesim.outputs.decision_trace import wait_events

        more, waits = wait_events(decisions, lambda rep: max(int(rep), 0) + 1)
        ev += more
    rq = requests
    rows = zip(rq["request_id"].tolist(), rq["arrival_s"].tolist(), rq["scheduled_s"].tolist(),
               rq["first_token_s"].tolist(), rq["finish_s"].tolist(), rq["prompt_tokens"].tolist(),
               rq["output_tokens"].tolist(), rq["replica"].tolist(), rq["status"].tolist(), rq["reason"].tolist(),
               rq["kv_transfer_s"].tolist() if "kv_transfer_s" in rq else [math.nan] * len(rq["request_id"]),
               rq["decode_replica"].tolist() if "decode_replica" in rq else [-1] * len(rq["request_id"]))
    for rid, arr, sch, first, fin, prompt, out, rep, status, reason, xfer, drep in rows:
        pid = max(int(rep), 0) + 1
        if status == "rejected":
            ev.append({"ph": "i", "name": f"rejected {rid}", "cat": "request", "pid": pid, "tid": 2, "s": "t",
                       "ts": _us(arr), "args": {"reason": reason, "prompt_tokens": prompt, "output_tokens": out}})
            continue
        end = fin if not math.isnan(fin) else sim_time_s
        base = {"cat": "request", "id": int(rid), "pid": pid, "tid": 2}
        args = {"prompt_tokens": prompt, "output_tokens": out, "status": status}
        if drep is not None and drep >= 0:
            args["decode_replica"] = int(drep)
        if rid in waits:
            args["waits"] = waits[rid]
        ev.append({**base, "ph": "b", "name": f"request {rid}", "ts": _us(arr), "args": args})
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
            ev.append({**base, "ph": "b", "name": name, "ts": _us(a)})
            ev.append({**base, "ph": "e", "name": name, "ts": _us(b)})
        ev.append({**base, "ph": "e", "name": f"request {rid}", "ts": _us(end)})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"generator": "servesim", "time": "simulated seconds shown as trace time"}}


def write_trace(results, path: str | Path) -> Path:
    """Write the Chrome trace of a ``Results`` to ``path`` (JSON)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    trace = chrome_trace(results.requests, results.steps, results.summary["sim_time_s"],
                         decisions=getattr(results, "decisions", None))
    with p.open("w") as fh:
        json.dump(trace, fh, separators=(",", ":"))
    return p
