"""Why requests missed the SLO, computed from the request and step columns alone (requests.csv and
steps.csv hold them), so the diagnosis agrees with the files.

Every arrived request that did not complete within its limits is a miss, in one or more groups:
``rejected`` (with their reasons), ``unfinished`` (still queued or running at the cut-off),
``ttft`` (completed, TTFT over its limit) and ``tpot`` (completed, TPOT over its limit; a request
can miss both). Each latency group gets a cause:

TTFT misses: their TTFT splits into waiting (arrival -> first scheduled) and prefill (the rest).
- waiting >= half: ``queueing``; ``kv_capacity`` instead when the replica's KV was >= 95% full for
  most of the step time while they waited (admission blocked by memory, not compute);
  ``decode_backpressure`` instead when, on a P/D prefill replica idle most of that time, hand-offs
  not yet landed (waiting for decode-side room or the link) held KV there for most of it: the
  prefill replica could not take them because the decode pool did not take its requests. The line
  says how busy the replica was while they waited (near 100%: load above capacity there).
- otherwise ``prefill``: their own prompts' prefill (with the mean prompt).

TPOT misses: the time from each one's first token to its last, on the replica that decoded it,
splits into the KV hand-off (P/D split), steps that carried prefill tokens (prefill-only or mixed:
another request's prompt stalling the decodes) and decode-only steps. In order:
- ``kv_capacity``: at least half of them were preempted (their KV evicted and recomputed);
- ``kv_transfer``: the hand-off took at least half of their decode time;
- ``prefill_interference``: at least half of them would have been within the TPOT limit had each
  prefill-carrying step in their decode time taken as long as the replica's mean decode-only step;
- ``decode_memory`` / ``decode_compute``: otherwise the decode steps themselves are too slow, by
  the bound most of those steps hit.
The run's bottleneck is the cause of the largest group (rejections and unfinished are their own).
"""

from __future__ import annotations

import re

import numpy as np

from servesim.outputs import metrics
from servesim.outputs.wording import plural

KV_FULL = 0.95
SHARE = 0.5


def reason_key(reason: str) -> str:
    """A rejection reason with the request's own token and block counts replaced by N, so the
    reasons of one rule group together; admission control's, also the queue it found, the replica
    and the predicted TTFT (each shed request's own: the rule and its limit are kept)."""
    key = re.sub(r"(= |needs |prompt of |output of |after |of its )\d+", r"\1N", str(reason))
    if key.startswith("admission: "):
        key = re.sub(r"\d+ (requests|prompt tokens) already wait on replica \d+", r"N \1 already wait on a replica",
                     key)
        key = re.sub(r", \d+ more exceed ", ", N more exceed ", key)
        key = re.sub(r"predicted TTFT \S+ s", "predicted TTFT N s", key)
    return key


def top_reasons(reasons, k: int = 3, counted: bool = False) -> list:
    """[[reason (grouped by ``reason_key``), count], ...], the ``k`` most common first (ties: the
    first seen first). ``counted``: ``reasons`` holds (reason, how many times) pairs."""
    counts: dict = {}
    for r in reasons:
        r, n = r if counted else (r, 1)
        key = reason_key(r)
        counts[key] = counts.get(key, 0) + n
    return [[r, n] for r, n in sorted(counts.items(), key=lambda x: -x[1])[:k]]


class _Windows:
    """Per replica, the step time (in all, carrying prefill, with KV >= 95% full, compute-bound
    decode-only) of the steps that ended within (a, b]: cumulative sums over steps sorted by end."""

    def __init__(self, steps: dict, kv_blocks: list):
        rep = np.asarray(steps["replica"], dtype=np.int64)
        dur = np.asarray(steps["duration_s"], dtype=float)
        end = np.asarray(steps["start_s"], dtype=float) + dur
        pf = np.asarray(steps["prefill_tokens"]) > 0
        dc = np.asarray(steps["decode_tokens"]) > 0
        if "compute_bound" in steps:
            comp = np.asarray(steps["compute_bound"]).astype(bool)
        else:
            comp = np.asarray(steps["bound"]) == "compute"
        blocks = np.asarray([max(int(b or 0), 1) for b in kv_blocks] or [1], dtype=float)
        kv = np.asarray(steps["kv_blocks_used"], dtype=float) / blocks[np.clip(rep, 0, len(blocks) - 1)]
        self.by = {}
        self.decode_step_s = {}  # replica -> its mean decode-only step
        for r in np.unique(rep):
            sel = np.flatnonzero(rep == r)
            o = sel[np.argsort(end[sel], kind="stable")]
            d = dur[o]
            only = dc[o] & ~pf[o]
            cols = {"all": d, "prefill": d * pf[o], "prefill_n": pf[o].astype(float), "decode_only": d * only,
                    "decode_only_n": only.astype(float), "kv_full": d * (kv[o] >= KV_FULL),
                    "decode_compute": d * (only & comp[o])}
            self.by[int(r)] = (end[o], {k: np.concatenate(([0.0], np.cumsum(v))) for k, v in cols.items()})
            self.decode_step_s[int(r)] = float(d[only].mean()) if only.any() else np.nan

    @staticmethod
    def covered(replica: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        """``f(replicas, a, b)``: per window (a[i], b[i]] the time within it that replica[i] had at
        least one of the intervals [starts, ends) of its own (``replica``) open."""
        by = {}
        for r in np.unique(replica):
            sel = np.flatnonzero(replica == r)
            o = sel[np.argsort(starts[sel], kind="stable")]
            lo, hi = [], []
            for x, y in zip(starts[o].tolist(), ends[o].tolist()):
                if lo and x <= hi[-1]:
                    hi[-1] = max(hi[-1], y)
                else:
                    lo.append(x)
                    hi.append(y)
            lo, hi = np.array(lo), np.array(hi)
            by[int(r)] = (lo, hi, np.concatenate(([0.0], np.cumsum(hi - lo))))

        def upto(r: int, t: np.ndarray) -> np.ndarray:  # covered time before t
            lo, hi, cum = by[r]
            i = np.searchsorted(lo, t, side="right")
            j = np.maximum(i - 1, 0)
            return np.where(i > 0, cum[j] + np.clip(np.minimum(t, hi[j]) - lo[j], 0.0, None), 0.0)

        def f(reps: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.zeros(len(a))
            for r in by:
                sel = np.flatnonzero(reps == r)
                out[sel] = upto(r, b[sel]) - upto(r, a[sel])
            return out
        return f

    def sums(self, replica: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict:
        """{column: per-window step seconds} for windows (a[i], b[i]] on replica[i]."""
        out = {k: np.zeros(len(a)) for k in ("all", "prefill", "prefill_n", "decode_only", "decode_only_n",
                                              "kv_full", "decode_compute")}
        for r, (end, cum) in self.by.items():
            sel = np.flatnonzero(replica == r)
            if not len(sel):
                continue
            i0 = np.searchsorted(end, a[sel], side="right")
            i1 = np.searchsorted(end, b[sel], side="right")
            for k, c in cum.items():
                out[k][sel] = c[i1] - c[i0]
        return out


def _limit(v, n: int) -> np.ndarray:
    if v is None:
        return np.full(n, np.inf)
    return np.broadcast_to(np.asarray(v, dtype=float), (n,)).copy()


def slo_misses(req: dict, steps: dict, kv_blocks: list, ttft_limit=None, tpot_limit=None) -> dict:
    """Counts and causes of the SLO misses (module docstring). ``ttft_limit`` / ``tpot_limit``: a
    number, a per-request array (request classes) or None (no limit)."""
    status = np.asarray(req["status"])
    n = len(status)
    done = status == "completed"
    ttft, tpot, queue = metrics.ttft_s(req), metrics.tpot_s(req), metrics.queue_s(req)
    lt, lp = _limit(ttft_limit, n), _limit(tpot_limit, n)
    with np.errstate(invalid="ignore"):
        miss_ttft = done & (ttft > lt)
        miss_tpot = done & (tpot > lp)
    rejected, unfinished = status == "rejected", status == "unfinished"
    missed = rejected | unfinished | miss_ttft | miss_tpot
    out = {"requests": int(n), "has_limits": bool(np.isfinite(lt).any() or np.isfinite(lp).any()),
           "missed": int(missed.sum()), "rejected": int(rejected.sum()),
           "unfinished": int(unfinished.sum()), "ttft": {"missed": int(miss_ttft.sum())},
           "tpot": {"missed": int(miss_tpot.sum())}}
    if rejected.any() and "reason" in req:
        out["rejection_reasons"] = top_reasons(np.asarray(req["reason"])[rejected])
    if not (miss_ttft.any() or miss_tpot.any()):
        return out
    win = _Windows(steps, kv_blocks)
    replica = np.asarray(req["replica"], dtype=np.int64)
    if miss_ttft.any():
        m = miss_ttft
        wait, total = float(queue[m].sum()), float(ttft[m].sum())
        s = win.sums(replica[m], req["arrival_s"][m], req["scheduled_s"][m])
        span = float((req["scheduled_s"][m] - req["arrival_s"][m]).sum())
        busy = float(s["all"].sum())
        t = {"missed": int(m.sum()), "waiting_share": wait / total if total > 0 else 0.0,
             "busy_while_waiting": min(busy / span, 1.0) if span > 0 else 0.0,
             "kv_full_while_waiting": float(s["kv_full"].sum()) / busy if busy > 0 else 0.0,
             "mean_prompt_tokens": float(np.mean(req["prompt_tokens"][m]))}
        # P/D: how long, while they waited, their prefill replica held KV of hand-offs not yet landed
        held = 0.0
        if "kv_transfer_s" in req and "decode_replica" in req:
            sent = np.asarray(req["decode_replica"], dtype=np.int64) >= 0
            if sent.any():
                first = np.asarray(req["first_token_s"], dtype=float)[sent]
                until = first + np.nan_to_num(np.asarray(req["kv_transfer_s"], dtype=float)[sent])
                cover = _Windows.covered(replica[sent], first, until)
                held = float(cover(replica[m], np.asarray(req["arrival_s"], dtype=float)[m],
                                   np.asarray(req["scheduled_s"], dtype=float)[m]).sum())
        t["handoffs_held_while_waiting"] = min(held / span, 1.0) if span > 0 else 0.0
        if t["waiting_share"] >= SHARE:
            if t["kv_full_while_waiting"] >= SHARE:
                t["cause"] = "kv_capacity"
            elif t["busy_while_waiting"] < SHARE and t["handoffs_held_while_waiting"] >= SHARE:
                t["cause"] = "decode_backpressure"
            else:
                t["cause"] = "queueing"
        else:
            t["cause"] = "prefill"
        out["ttft"] = t
    if miss_tpot.any():
        m = miss_tpot
        transfer = np.nan_to_num(np.asarray(req["kv_transfer_s"], dtype=float)[m]) if "kv_transfer_s" in req \
            else np.zeros(int(m.sum()))
        dec_rep = replica[m]
        if "decode_replica" in req:
            d = np.asarray(req["decode_replica"], dtype=np.int64)[m]
            dec_rep = np.where(d >= 0, d, dec_rep)
        first, fin = req["first_token_s"][m], req["finish_s"][m]
        s = win.sums(dec_rep, first + transfer, fin)
        window = float((fin - first).sum())
        # TPOT had each prefill-carrying step in their decode time taken as long as the replica's mean
        # decode-only step (a replica without one: their TPOT as it was)
        typical = np.array([win.decode_step_s.get(int(r), np.nan) for r in dec_rep])
        steps_n = s["decode_only_n"] + s["prefill_n"]
        alone = np.where((steps_n > 0) & ~np.isnan(typical),
                         (s["decode_only"] + s["prefill_n"] * np.nan_to_num(typical)) / np.maximum(steps_n, 1), tpot[m])
        p = {"missed": int(m.sum()), "preempted": int((req["preemptions"][m] > 0).sum()),
             "transfer_share": float(transfer.sum()) / window if window > 0 else 0.0,
             "prefill_share": float(s["prefill"].sum()) / window if window > 0 else 0.0,
             "decode_only_share": float(s["decode_only"].sum()) / window if window > 0 else 0.0,
             "within_without_prefill": int((alone <= lp[m]).sum()),
             "decode_step_s": float(s["decode_only"].sum() / s["decode_only_n"].sum()) if s["decode_only_n"].sum()
             else float(np.nanmean(typical)) if not np.isnan(typical).all() else 0.0,
             "decode_compute_share": float(s["decode_compute"].sum() / s["decode_only"].sum())
             if s["decode_only"].sum() > 0 else 0.0}
        k = p["missed"]
        if p["preempted"] >= SHARE * k:
            p["cause"] = "kv_capacity"
        elif p["transfer_share"] >= SHARE:
            p["cause"] = "kv_transfer"
        elif p["within_without_prefill"] >= SHARE * k:
            p["cause"] = "prefill_interference"
        else:
            p["cause"] = "decode_compute" if p["decode_compute_share"] >= SHARE else "decode_memory"
        out["tpot"] = p
    return out


def _n(x: int) -> str:
    return f"{x:,}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s >= 0.1 else f"{s * 1e3:.1f} ms"


def _ttft_text(t: dict) -> str:
    c = t["cause"]
    if c == "prefill":
        return (f"TTFT by {_n(t['missed'])} (prefill: their own prompts, mean {t['mean_prompt_tokens']:.0f} tokens, "
                f"took {1 - t['waiting_share']:.0%} of their TTFT)")
    if c == "decode_backpressure":
        return (f"TTFT by {_n(t['missed'])} (decode back-pressure: {t['waiting_share']:.0%} of their TTFT waiting, "
                f"the prefill replica busy {t['busy_while_waiting']:.0%} of that time and holding the KV of hand-offs "
                f"not yet landed on the decode pool, waiting for room there or for the link, "
                f"{t['handoffs_held_while_waiting']:.0%} of it)")
    what = "KV capacity" if c == "kv_capacity" else "queueing"
    extra = (f", KV >= {KV_FULL:.0%} full for {t['kv_full_while_waiting']:.0%} of that time" if c == "kv_capacity"
             else "")
    return (f"TTFT by {_n(t['missed'])} ({what}: {t['waiting_share']:.0%} of their TTFT waiting, the replica busy "
            f"{t['busy_while_waiting']:.0%} of the time they waited{extra})")


def _tpot_text(p: dict, decode: dict | None) -> str:
    c, k = p["cause"], p["missed"]
    head = f"TPOT by {_n(k)}"
    if c == "kv_capacity":
        return f"{head} (KV capacity: {_n(p['preempted'])} of them were preempted and recomputed)"
    if c == "kv_transfer":
        return f"{head} (KV hand-off: {p['transfer_share']:.0%} of their decode time waiting for their KV)"
    if c == "prefill_interference":
        return (f"{head} (prefill interference: steps carrying prefill took {p['prefill_share']:.0%} of their decode "
                f"time; at the pace of decode-only steps {_n(p['within_without_prefill'])} of them would be within the "
                f"limit)")
    bound = "compute-bound" if c == "decode_compute" else "memory-bound"
    fig = ""
    if decode:
        fig = (f", batch {decode.get('mean_batch_size', 0):.1f}, "
               + (f"{decode.get('mfu', 0) * 100:.0f}% MFU" if c == "decode_compute" else
                  f"{decode.get('mbu', 0) * 100:.0f}% MBU"))
    return (f"{head} (decode {'compute' if c == 'decode_compute' else 'memory bandwidth'}: their decode-only steps "
            f"take {_ms(p['decode_step_s'])} on average, {bound}{fig})")


def miss_line(m: dict, decode: dict | None = None) -> tuple[str, str]:
    """(bottleneck, line) of ``slo_misses``' result: the groups largest first, each with its cause."""
    groups = []
    if m["rejected"]:
        top = m.get("rejection_reasons") or []
        # (the most common reason names them all only where it is every rejection's: a P/D split
        # behind a token bucket read "217 rejected: admission: token bucket empty", 135 of them the
        # bucket's, 82 its decode pool's)
        why = "" if not top else f": {top[0][0]}" if top[0][1] >= m["rejected"] else \
            f" ({_n(top[0][1])} of them: {top[0][0]})"
        groups.append((m["rejected"], "rejections", f"{_n(m['rejected'])} rejected{why}"))
    if m["unfinished"]:
        groups.append((m["unfinished"], "unfinished", f"{_n(m['unfinished'])} unfinished at the cut-off"))
    if m["tpot"]["missed"]:
        groups.append((m["tpot"]["missed"], m["tpot"]["cause"], _tpot_text(m["tpot"], decode)))
    if m["ttft"]["missed"]:
        groups.append((m["ttft"]["missed"], m["ttft"]["cause"], _ttft_text(m["ttft"])))
    groups.sort(key=lambda g: -g[0])
    line = (f"SLO missed by {_n(m['missed'])} of {plural(m['requests'], 'request', fmt=',')}: "
            + "; ".join(g[2] for g in groups))
    return groups[0][1], line
