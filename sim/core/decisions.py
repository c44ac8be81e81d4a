"""The decision trace (opt-in: ``servesim run --decision-trace FILE``, ``simulate(...,
decision_trace=True)``): why each request waited, decision by decision.

At every scheduling decision of every replica, each request left in the waiting queue (on a
P/D decode replica, the landed ones too) gets a reason (``servesim.policies.queues.WAIT_REASONS``),
from where the policy's admission stopped (``Batch.stop``: the reason, the request it stopped at,
and the tokens, free KV blocks and sequence slots left then):

* the request admission stopped at: that reason (``budget``, ``kv``, ``watermark``,
  ``max_num_seqs``; ``swapped_first`` when swapped or landed requests could not all come back;
  ``preemption_step`` when the step preempted);
* a request behind it that would have fit what was left (its tokens, a slot and its KV blocks,
  tested as the policy admits: prefix-cache hits, a reservation and the watermark counted):
  ``head_of_line``, or ``priority`` when the one ahead has a higher priority; one that would not
  have fit: the resource it lacked itself (``watermark`` when its blocks fit only into the share
  the watermark keeps free) (with ``policy.skip_unfit_prompts``, prompts set aside
  for the budget, ahead of or behind that request, are ``budget``: nothing waits behind them);
* a request that arrived while a step ran waits for the next decision (``arrived``); one
  preempted waits out that step (``preempted``; swapped out: until swapped back in).

It is also a **priority inversion** while a running request has a lower priority (a larger
``priority`` value) than the waiting one. A request's consecutive decisions with the same reason
and inversion flag form one span (``rows``: request, replica, class, start, end, reason,
decisions, blocker, inversion, detail; the blocker is the one the span began with), so the trace
grows with the changes of reason, not with steps x queue length. Under overload a request deep in
the queue still changes reason often (``kv`` while the KV left would not hold it, ``head_of_line``
while it would, as the free blocks move step by step): rows and the time to classify the queue
at every decision grow with the queue's length; trace short runs. Requests rejected by admission
control are zero-length ``admission`` spans with the rule in ``detail``. Decisions fall at the
same times in the fast and the reference engine (with the trace on, nothing waits during a run
of decode steps: the fast engine decides each step while a request waits,
``Batch.until_completion`` aside), so the trace is the same in both.

Off (the default), the engine pays one ``is None`` test per decision and per arrival.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.outputs.columns import DECISION_COLUMNS as COLUMNS
from servesim.outputs.wording import plural
from servesim.policies.continuous import ContinuousPolicy, step_pending

_ROOM = ("budget", "kv", "watermark", "max_num_seqs")


class DecisionTracer:
    def __init__(self, class_names=("default",)):
        self.class_names = list(class_names)
        self._open: dict = {}  # id(request) -> [request, replica, start_s, reason, decisions, blocker, inversion]
        self._rows: list = []

    # ------------------------------------------------------------ events
    def arrive(self, replica, req) -> None:
        self._set(req, replica.index, replica.env.now, "arrived", -1, False, count=False)

    def rejected(self, req, reason: str) -> None:
        """Admission control turned ``req`` away at its arrival."""
        self._rows.append((req.request_id, req.replica, req.cls, req.arrival_s, req.arrival_s, "admission", 0, -1,
                           0, reason))

    def ended(self, req, now: float) -> None:
        """``req`` left the queue at ``now`` without being served further (ended rejected at its
        preemption, ``Replica._end_preempted``): its span closes there."""
        self._close(req, now)

    def decide(self, replica, now: float, batch) -> None:
        admitted = {id(r) for r in batch.admitted}
        for r in batch.swap_in:
            self._close(r, now)
        stop = batch.stop
        prio = replica.prio
        low = prio.lowest() if prio is not None else None
        kv = replica.kv
        chunked = getattr(replica.policy, "chunked", False)
        # (the policy's own test when it has one: ContinuousPolicy's counts prefix-cache hits, its
        # reservation and the watermark, as its admission does)
        lacks = getattr(replica.policy, "lacks", None)
        # (ContinuousPolicy's lacks counts the hits on shared blocks the step's requests map, as its
        # admission does: a request behind the head whose prefix one of them fills fits on fewer
        # blocks; computed once per decision, when a request behind the head is classified)
        same_step = kv.caching and type(replica.policy).lacks is ContinuousPolicy.lacks if lacks is not None \
            else False
        pending = None
        # (skip_unfit_prompts: prompts set aside for the budget are not the queue's head-of-line)
        skipping = getattr(replica.policy, "skips_unfit", False)
        head = stop[1] if stop is not None else None
        behind = False  # past the request admission stopped at
        for queue in (replica.landed, replica.waiting):
            for r in queue:
                if id(r) in admitted:
                    self._close(r, now)
                    continue
                blocker = -1
                if stop is None:
                    reason = "policy"
                elif stop[0] not in _ROOM or head is None:
                    reason = stop[0]
                    blocker = head.request_id if head is not None and head is not r else -1
                elif r is head:
                    reason = stop[0]
                    behind = True
                elif not behind:  # ahead of the head yet not admitted: a holder queue's order, or set aside
                    reason = "budget" if skipping and queue is replica.waiting else "swapped_first"
                else:
                    if lacks is None:
                        lack = _lacks(r, stop, kv, chunked)
                    elif same_step:
                        if pending is None:
                            pending = step_pending(kv, batch.items, batch.prefix_hits)
                        lack = lacks(kv, r, *stop[2:], pending=pending)
                    else:
                        lack = lacks(kv, r, *stop[2:])
                    if lack is None and skipping and stop[0] == "budget":
                        reason = "budget"  # (set aside too, once those admitted after the head took the tokens)
                    elif lack is None:
                        reason = "priority" if head.priority < r.priority else "head_of_line"
                        blocker = head.request_id
                    else:
                        reason = lack
                inverted = low is not None and r.priority < low
                self._set(r, replica.index, now, reason, blocker, inverted)
        for r in batch.preempted:
            self._set(r, replica.index, now, "preempted", -1, False, count=False)

    def finish(self, end_s: float) -> None:
        """Close the spans of requests still waiting when the run ended."""
        for entry in list(self._open.values()):
            self._close(entry[0], end_s)

    # ------------------------------------------------------------ spans
    def _set(self, r, replica: int, now: float, reason: str, blocker: int, inverted: bool, count: bool = True):
        cur = self._open.get(id(r))
        if cur is not None:
            # (one span while the reason holds: a head-of-line span keeps the blocker it began with, so
            # an overloaded queue, whose head changes at every admission, is not one row per waiting
            # request per admission)
            if cur[3] == reason and cur[6] == inverted and cur[1] == replica:
                cur[4] += count
                return
            self._close(r, now)
        self._open[id(r)] = [r, replica, now, reason, int(count), blocker, inverted]

    def _close(self, r, now: float) -> None:
        cur = self._open.pop(id(r), None)
        if cur is None:
            return
        _, replica, start, reason, decisions, blocker, inverted = cur
        if now > start:
            self._rows.append((r.request_id, replica, r.cls, start, now, reason, decisions, blocker, int(inverted), ""))

    # ------------------------------------------------------------ results
    def columns(self) -> dict:
        """The spans as columns (``COLUMNS``), ordered by request, then start."""
        rows = sorted(self._rows, key=lambda x: (x[0], x[3], x[4]))
        names = np.array(self.class_names, dtype=object)
        cols = {}
        for k, name in enumerate(COLUMNS):
            vals = [x[k] for x in rows]
            if name == "class":
                cols[name] = names[np.array(vals, dtype=np.int64)] if vals else np.zeros(0, dtype=object)
            elif name in ("start_s", "end_s"):
                cols[name] = np.array(vals, dtype=float)
            elif name in ("reason", "detail"):
                cols[name] = np.array(vals, dtype=object)
            else:
                cols[name] = np.array(vals, dtype=np.int64)
        return cols


def _lacks(r, stop, kv, chunked: bool) -> str | None:
    """What ``r`` lacks of what was left when admission stopped (None: it would have fit), for a
    policy without its own ``lacks``: its tokens, KV blocks and a slot."""
    _, _, budget, free, seats = stop
    if seats <= 0:
        return "max_num_seqs"
    left = r.num_tokens - r.num_computed_tokens
    q = min(left, budget) if chunked else left
    if q <= 0 or q > budget:
        return "budget"
    if kv.blocks_for(r.num_computed_tokens + q) - r.kv_blocks > free:
        return "kv"
    return None


def summarize_decisions(cols: dict) -> dict:
    """``summary.json`` ``decisions`` (with the trace on): per reason, the request-seconds spent
    waiting for it and the requests that did; head-of-line blocking (``head_of_line`` and
    ``priority`` spans: requests that would have fit but waited behind one that did not) and
    priority inversions (time waited while a lower-priority request ran)."""
    dur = cols["end_s"] - cols["start_s"]
    reason, rid = cols["reason"], cols["request_id"]
    wait_s, reqs = {}, {}
    for name in dict.fromkeys(reason.tolist()):
        sel = reason == name
        wait_s[name] = float(dur[sel].sum())
        reqs[name] = int(len(np.unique(rid[sel])))

    def part(sel) -> dict:
        return {"requests": int(len(np.unique(rid[sel]))), "request_s": float(dur[sel].sum()),
                "spans": int(sel.sum())}

    hol = (reason == "head_of_line") | (reason == "priority")
    return {"wait_s": wait_s, "requests": reqs, "head_of_line": part(hol),
            "priority_inversions": part(cols["inversion"] == 1),
            "rows": int(len(rid))}


def format_decisions(d: dict) -> list:
    """Lines for the printed summary."""
    if not d or not d["rows"]:
        return []
    top = sorted(((s, r) for r, s in d["wait_s"].items() if r != "admission"), reverse=True)[:4]
    waits = ", ".join(f"{r} {s:.1f} s" for s, r in top if s > 0 and not math.isnan(s))
    h, p = d["head_of_line"], d["priority_inversions"]
    return [f"decisions     request-seconds waited by reason: {waits or 'none'}",
            f"              head-of-line: {plural(h['requests'], 'request')} would have fit but waited behind one that "
            f"did not, {h['request_s']:.1f} s in all; priority inversions: {plural(p['requests'], 'request')} waited "
            f"{p['request_s']:.1f} s while a lower-priority request ran"]
