"""Each per-request latency metric, defined once, from the request columns (``requests.csv``'s,
or ``Results.requests``), and the names of metrics and statistics the commands accept.

Definitions (also in docs/outputs.md, "Metric definitions"), per request, in seconds:
- TTFT = first_token_s - arrival_s: the first token exists at the end of the step that
  finishes the prompt;
- TPOT = (finish_s - first_token_s) / (output_tokens - 1), for completed requests with more
  than one output token (NaN otherwise: a single token has no time per output token);
- E2E = finish_s - arrival_s; queue = scheduled_s - arrival_s (the start of the first step that
  scheduled it).
A time that never happened is NaN, and so is a metric made from it. TBT (every gap between
consecutive tokens) is recorded per step, not per request: ``Results.tbt``.

Distributions are over completed requests (``latency_samples``); SLO attainment counts every
arrived request, those not completed as misses (``slo_met``).
"""

from __future__ import annotations

import math
import re

import numpy as np

from servesim.errors import InputError, did_you_mean
from servesim.outputs.stats import DIST_STATS

LATENCY_METRICS = ("ttft", "tpot", "tbt", "e2e", "queue")  # summary.json: <metric>_s
# results.csv's distributions: itl is vLLM's name for the token gaps (tbt's statistics)
RESULT_METRICS = (*LATENCY_METRICS, "itl")
PER_REQUEST = ("ttft", "tpot", "e2e", "queue")  # one value per request (TBT: per token gap)
SLO_STATS = ("mean", "p50", "p90", "p95", "p99", "max")  # what ``servesim capacity --slo`` may limit
assert set(DIST_STATS) <= set(SLO_STATS)


def summary_dist(summary: dict, metric: str) -> dict:
    """A summary's statistics of ``metric`` (one of ``RESULT_METRICS``); itl from tbt_s in
    summaries written before itl_s."""
    if metric == "itl":
        return summary.get("itl_s") or summary["tbt_s"]
    return summary[f"{metric}_s"]


def is_completed(req: dict) -> np.ndarray:
    return req["status"] == "completed"


def ttft_s(req: dict) -> np.ndarray:
    return req["first_token_s"] - req["arrival_s"]


def e2e_s(req: dict) -> np.ndarray:
    return req["finish_s"] - req["arrival_s"]


def queue_s(req: dict) -> np.ndarray:
    return req["scheduled_s"] - req["arrival_s"]


def decode_s(req: dict) -> np.ndarray:
    """From the first token to the last: the time its output_tokens - 1 later tokens took."""
    return req["finish_s"] - req["first_token_s"]


def multi_token(req: dict) -> np.ndarray:
    """Completed with more than one output token: the requests that have a TPOT."""
    return is_completed(req) & (req["output_tokens"] > 1)


def tpot_s(req: dict) -> np.ndarray:
    out = req["output_tokens"]
    multi = multi_token(req)
    tpot = np.full(len(out), np.nan)
    tpot[multi] = (req["finish_s"][multi] - req["first_token_s"][multi]) / (out[multi] - 1)
    return tpot


PER_REQUEST_METRIC = {"ttft": ttft_s, "tpot": tpot_s, "e2e": e2e_s, "queue": queue_s}


def latency_samples(req: dict, metric: str) -> np.ndarray:
    """The values of ttft | tpot | e2e | queue over completed requests (tpot: those that have one)."""
    if metric not in PER_REQUEST_METRIC:
        raise ValueError(f"unknown per-request metric {metric!r}; valid: {', '.join(PER_REQUEST)}")
    sel = multi_token(req) if metric == "tpot" else is_completed(req)
    return PER_REQUEST_METRIC[metric](req)[sel]


def slo_met(ttft: np.ndarray, tpot: np.ndarray, ttft_limit, tpot_limit) -> np.ndarray:
    """Per request: TTFT and TPOT within their limits (NaN TPOT, a single-token output, meets any)."""
    with np.errstate(invalid="ignore"):
        return (ttft <= ttft_limit) & ~(tpot > tpot_limit)


MAX_LIMIT_S = 1e9  # the longest SLO limit, as the scenario's slo fields have it (inputs.scenario.MAX_SECONDS)


def parse_slo(text: str) -> dict:
    """``ttft_p99=0.5,tpot_p99=50ms`` -> {("ttft", "p99"): 0.5, ("tpot", "p99"): 0.05} (seconds)."""
    if not text:
        raise InputError("--slo: give at least one METRIC_STAT=SECONDS, e.g. ttft_p99=0.5,tpot_p99=0.05")
    out = {}
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"([a-z][a-z0-9]*)_([a-z0-9]+)\s*=\s*([0-9._eE+-]+)\s*(ms|s)?", item)
        if not m:
            raise InputError(f"--slo {item!r}: expected METRIC_STAT=SECONDS (METRIC: {', '.join(LATENCY_METRICS)}; "
                             f"STAT: {', '.join(SLO_STATS)}), e.g. ttft_p99=0.5 or tpot_p99=50ms")
        metric, stat, value, unit = m.groups()
        if metric not in LATENCY_METRICS:
            hint = " (the summary's ITL, the gap between tokens, is tbt here)" if metric == "itl" else ""
            raise InputError(f"--slo {item!r}: unknown metric {metric!r};{did_you_mean(metric, LATENCY_METRICS)}{hint}")
        if stat not in SLO_STATS:
            raise InputError(f"--slo {item!r}: unknown statistic {stat!r};{did_you_mean(stat, SLO_STATS)}")
        try:
            v = float(value) * (1e-3 if unit == "ms" else 1.0)
        except ValueError:
            raise InputError(f"--slo {item!r}: {value!r} is not a number") from None
        if not v > 0:
            raise InputError(f"--slo {item!r}: the limit must be > 0")
        if not v <= MAX_LIMIT_S:  # (1e400 reads as inf: a limit nothing can miss; 1e308 printed as inf ms)
            raise InputError(f"--slo {item!r}: the limit must be at most {MAX_LIMIT_S:g} seconds")
        if (metric, stat) in out:  # (the last one silently won)
            raise InputError(f"--slo {text!r}: {metric}_{stat} is given twice; give each limit once")
        out[(metric, stat)] = v
    return out


KEEP_UP = 0.9  # the keep-up share of capacity, plan and slowdown searches by default, and of the run warning
KEEP_UP_SD = 2.0  # standard deviations of a no-queue run's leaving count that keep_up_warmup allows for


def leave_s(req: dict) -> np.ndarray:
    """When each request left the deployment: its finish time if it completed, or was rejected
    while decoding (its sequence outgrew the KV cache), its arrival time if it was rejected at
    once, inf if it never left (still in flight at a cut-off)."""
    rejected = req["status"] == "rejected"
    done = (is_completed(req) | rejected) & ~np.isnan(req["finish_s"])
    return np.where(done, req["finish_s"], np.where(rejected, req["arrival_s"], math.inf))


def keep_up_window(arrival_s: np.ndarray, period_s: float | None = None) -> tuple[float, float] | None:
    """(t0, t1): the window ``keep_up_ratio`` counts over, from the middle arrival (by arrival
    time) to the last one; None with fewer than four arrivals. (A partition, not a sort: linear
    in the requests, once per run.)

    ``period_s``: the period of a periodic arrival rate (``arrival_period_s``). The ratio is
    left / arrived = 1 + (in flight at t0 - in flight at t1) / arrived, so it reads a backlog only
    when the two ends see the same load: with a rate that repeats, the last arrival and the
    middle one fall at phases set by how many requests a cycle holds (e.g. the end of a burst,
    its queue not yet drained, against the middle of one), and the ratio swung with the rate
    below capacity. So the window is instead the whole periods, ending at the last arrival,
    nearest the second half (at least one; the middle arrival when the arrivals span less)."""
    a = np.asarray(arrival_s)
    if len(a) < 4:
        return None
    mid = len(a) // 2
    t0, t1 = float(np.partition(a, mid)[mid]), float(a.max())
    if period_s is not None and period_s > 0:
        whole = math.floor((t1 - float(a.min())) / period_s)  # whole periods the arrivals span
        k = min(max(1, round((t1 - t0) / period_s)), whole)
        if k >= 1:
            t0 = t1 - k * period_s
    return t0, t1


def arrival_period_s(arrival) -> float | None:
    """The period of an arrival process whose rate repeats on a fixed cycle (``keep_up_window``):
    a sinusoid's ``period_s``, an on/off process's on + off (fixed durations), a piecewise
    schedule's segments in all; None for any other (a constant rate, exponential on/off periods,
    which repeat at no fixed time, closed loops)."""
    name = getattr(arrival, "process", None)
    if name == "sinusoidal":
        return float(arrival.period_s)
    if name == "on_off" and arrival.durations == "fixed":
        return float(arrival.on_s + arrival.off_s)
    if name == "piecewise":
        return float(sum(seg.duration_s for seg in arrival.segments))
    return None


def keep_up_ratio(arrival_s: np.ndarray, leave_s: np.ndarray, window=False) -> float:
    """Requests that leave per request that arrives, over the second half of the arrivals: from
    the arrival of the middle request (by arrival time) to the last arrival (``keep_up_window``;
    ``window``: that window when the caller has it already). ``leave_s``: finish time, arrival
    time for a rejected request, inf for one that never left. NaN with fewer than two arrivals in
    that window (too short to tell)."""
    w = keep_up_window(arrival_s) if window is False else window
    if w is None:
        return math.nan
    t0, t1 = w
    arrived = int(np.count_nonzero((arrival_s > t0) & (arrival_s <= t1)))
    if arrived < 2 or not t1 > t0:
        return math.nan
    left = int(np.count_nonzero((leave_s > t0) & (leave_s <= t1)))
    return left / arrived


def keep_up_warmup(arrival_s: np.ndarray, service_s: np.ndarray, window) -> float:
    """The shortfall of ``keep_up_ratio`` that a run can make with no queue at all, each request
    leaving a service time after it arrived (``service_s``: first scheduled to finish of each
    request, 0 for one rejected at once, NaN for one that did not complete, left out): the larger
    of two counterfactuals over the window (``window``: ``(t0, t1)``, ``keep_up_window``), each
    1 - the ratio it reads, clipped to [0, 1]. NaN where the ratio is (fewer than two arrivals in
    the window) or no request was served.

    The ratio is 1 + (in flight at t0 - in flight at t1) / arrivals in the window, and the
    requests in flight at an instant are those being served plus those queued. Being served
    makes a shortfall with no backlog two ways:

    - requests served in longer than the window cannot leave within it (a run too short for its
      requests): with arrivals spread evenly over two windows of length W, the shortfall is the
      mean of ``clip((S - W) / W, 0, 1)`` over the service times ``S``;
    - the arrivals' own pattern: more of them in the last service time before t1 than before t0.
      On a short run that is chance (600 requests of the chat scenario on 4 replicas at 30 req/s,
      under 40% of what they keep up with, read 0.86, 0.97 and 1.13 on seeds 0-2), and a rate that
      rises through the run (multi-turn sessions: the turns of the sessions started so far) leaves
      more in flight at its end. The counterfactual takes the run's own arrivals, each leaving a
      service time drawn from the run's own service times (independent of when it arrived),
      which covers long service too. The run's ratio is one draw of the count that leaves, not
      its mean: the shortfall is that of the mean less ``KEEP_UP_SD`` standard deviations.

    Each request's service is drawn from the run's rather than taken as its own because service
    times that lengthen through the window, as the batch (or its preemptions) grows with the
    backlog, are a backlog too: above capacity a continuous batch takes in what arrives until it
    is full, and its own service times then explain the whole shortfall. What neither
    counterfactual holds, a queue or a batch that grew, is what the ratio is there to catch: a
    ratio under the keep-up share that this shortfall could explain does not show a backlog; the
    run is too short to tell."""
    if window is None:
        return math.nan
    t0, t1 = window
    a = np.asarray(arrival_s, dtype=float)
    arrived = int(np.count_nonzero((a > t0) & (a <= t1)))
    s = np.asarray(service_s, dtype=float)
    s = np.sort(np.maximum(s[~np.isnan(s)], 0.0))
    if arrived < 2 or not t1 > t0 or not len(s):
        return math.nan
    w = t1 - t0
    even = float(np.clip((s - w) / w, 0.0, 1.0).mean())
    a = a[a <= t1]  # (one arriving later leaves later)
    # per arrival, the share of the service times that would have it leave within (t0, t1]: the
    # chance p it leaves there; the count that leaves is a sum of such draws, mean sum(p) and
    # variance sum(p (1 - p)), and the run's ratio is one draw of it, so the shortfall allowed is
    # that of the mean less KEEP_UP_SD standard deviations (the mean alone: a no-queue run of 60
    # requests fell short of it about half the time)
    p = (np.searchsorted(s, t1 - a, side="right") - np.searchsorted(s, t0 - a, side="right")) / len(s)
    left = float(p.sum()) - KEEP_UP_SD * math.sqrt(float((p * (1.0 - p)).sum()))
    return max(even, float(min(1.0, max(0.0, 1.0 - left / arrived))))


def keep_up_arrived(arrival_s: np.ndarray, window, rate_rps: float | None, period_s: float | None = None) -> float:
    """The arrivals in the keep-up window (``window``: ``(t0, t1)``, ``keep_up_window``) per arrival
    the nominal mean rate ``rate_rps`` brings over it: the rate that actually arrived, as a share
    of the one the run stands for. NaN where that is not known: no rate (None), no window, or a
    periodic rate (``period_s``) whose window is not whole periods (part of a cycle has its own
    mean).

    A run whose ratio is read keeps up with the requests that arrived in its window; when they
    came slower than the nominal rate (by chance: a short run's window holds few arrivals, 50 of a
    Poisson process come 14% slower or faster at one standard deviation), it has shown nothing
    about the nominal rate: an overloaded deployment keeps up with a lull. ``keeps_up`` holds the
    ratio to the requests the nominal rate brings where fewer arrived."""
    if window is None or rate_rps is None or not rate_rps > 0 or not math.isfinite(rate_rps):
        return math.nan
    t0, t1 = window
    w = t1 - t0
    if not w > 0:
        return math.nan
    if period_s is not None and period_s > 0:
        k = w / period_s
        if round(k) < 1 or abs(k - round(k)) > 1e-6 * max(1.0, k):
            return math.nan
    a = np.asarray(arrival_s, dtype=float)
    return int(np.count_nonzero((a > t0) & (a <= t1))) / (rate_rps * w)


def keeps_up(ratio: float, arrived: float | None, share: float = KEEP_UP) -> bool:
    """Whether a run keeps up: its keep-up ``ratio`` (``keep_up_ratio``) is at least ``share``,
    and, where its window's arrivals came slower than the nominal rate (``arrived`` < 1,
    ``keep_up_arrived``; None or NaN: not known), so is the ratio counted against the arrivals
    that rate brings, ``ratio x arrived``: the requests that left are then as many as the rate
    would have to leave, not only as many as a lull brought. Failing only that, the run is too
    short to tell (``too_short_to_tell``: the ratio itself is at least the share): a longer run's
    window holds more arrivals, and they come nearer the nominal rate."""
    if ratio is None or math.isnan(ratio) or not ratio >= share:
        return False
    return arrived is None or math.isnan(arrived) or ratio * min(1.0, arrived) >= share


def too_short_to_tell(ratio: float, warmup: float | None, share: float = KEEP_UP) -> bool:
    """Whether a keep-up ``ratio`` under ``share`` could be all shortfall that the run's own
    arrivals and service times make by themselves, without queueing (``warmup``,
    ``keep_up_warmup``; None or NaN: unknown, so no): the run is then too short to tell whether the
    deployment keeps up, rather than falling behind."""
    return warmup is not None and ratio + warmup >= share


def keep_up_queued(req: dict, window) -> float:
    """``keep_up_ratio`` counted on the queue alone: 1 + (requests waiting at the window's start -
    those waiting at its end) / the window's arrivals, where a request waits from its arrival until
    it is first scheduled (``scheduled_s``; never, for one that was not) unless it left first
    (rejected). NaN where the ratio is (no window, fewer than two arrivals in it) or the run has no
    ``scheduled_s`` column.

    A request being served can make a short window's ratio read low with no backlog (its service
    outlasts the window, or the batch is still filling); one that waits is a backlog, whatever the
    window's length: a queue that grew by more than the rule's slack is falling behind."""
    start = req.get("scheduled_s")
    if window is None or start is None:
        return math.nan
    t0, t1 = window
    a = np.asarray(req["arrival_s"], dtype=float)
    arrived = window_arrivals(a, window)
    if arrived < 2 or not t1 > t0:
        return math.nan
    start = np.where(np.isnan(start), math.inf, start)
    gone = leave_s(req)
    waiting = lambda t: int(np.count_nonzero((a <= t) & (start > t) & (gone > t)))  # noqa: E731
    return 1.0 + (waiting(t0) - waiting(t1)) / arrived


def window_arrivals(arrival_s: np.ndarray, window) -> int | None:
    """The arrivals in the keep-up window (t0, t1] (None: no window)."""
    if window is None:
        return None
    a = np.asarray(arrival_s, dtype=float)
    return int(np.count_nonzero((a > window[0]) & (a <= window[1])))


def queue_growth(ev: dict) -> tuple[float, float] | None:
    """(growth, allowance) of a run's waiting queue over its keep-up window, from
    ``keep_up_check``'s fields, where it grew by more than chance allows, else None. growth:
    arrivals in the window x (1 - ``keep_up_queued``), the requests waiting to be first
    scheduled at its end less those at its start; allowance: ``KEEP_UP_SD`` standard deviations
    of the Poisson noise of the window's arrivals and departures, sqrt(2 x arrivals).

    Why: under a steady overload (served mu < offered lambda) the keep-up ratio tends to mu/lambda
    at any run length, so every rate up to mu / share passes the rule, while the queue grows
    without bound (chat on 4 replicas serves ~82 req/s; 89 req/s read 0.91-0.93 left per arrival
    over 5,000-40,000 requests, its queue growing by 1,400-1,700 and its p99 TTFT 3.4 / 20 / 37 s
    at 5k / 20k / 40k). A queue that grew past the noise shows the rate is not sustained."""
    q, arrived = ev.get("keep_up_queued"), ev.get("keep_up_window_arrivals")
    if q is None or not arrived or math.isnan(q):
        return None
    growth = arrived * (1.0 - q)
    allowance = KEEP_UP_SD * math.sqrt(2.0 * arrived)
    return (growth, allowance) if growth > allowance else None


def window_too_short(window_s: float, service_p99_s: float, queued: float, share: float = KEEP_UP) -> bool:
    """Whether a keep-up window of ``window_s`` is too short to tell a backlog from requests
    still being served: it is shorter than the run's own p99 service time (``service_p99_s``,
    first scheduled to finish), so a request that arrived in it, or a batch filling through it,
    need not have left by its end with no queue at all, and the queue alone
    (``queued``, ``keep_up_queued``; NaN: not known) did not grow by more than the rule's slack
    (``share``). The run is then too short to tell, whatever its ratio reads; a run whose window
    lasts the p99 service time is judged on the ratio."""
    return (window_s < service_p99_s and not (queued < share)
            and math.isfinite(service_p99_s) and not math.isnan(window_s))


def served_s(req: dict) -> np.ndarray:
    """Per request, the service time ``keep_up_warmup`` draws from: first scheduled to finish for
    a completed one, 0 for one rejected at once (it left on arrival, ``leave_s``), NaN for any
    other (rejected while decoding, unfinished; no ``scheduled_s`` column: NaN for all but those)."""
    done = is_completed(req)
    start = req.get("scheduled_s")
    service = req["finish_s"] - start if start is not None else np.full(len(done), np.nan)
    at_once = ~done & (leave_s(req) == req["arrival_s"])
    return np.where(done, service, np.where(at_once, 0.0, np.nan))


def keep_up_check(req: dict, share: float, period_s: float | None = None, rate_rps: float | None = None,
                  meets_otherwise: bool = True) -> dict:
    """The keep-up rule of the capacity, plan and slowdown searches, applied to a run's request
    columns ``req`` (``arrival_s``, ``finish_s``, ``status``, ``scheduled_s``): {"keep_up": the
    ``keep_up_ratio`` over ``keep_up_window`` (None: too few arrivals to tell), "keep_up_arrived":
    the window's arrivals per arrival the nominal mean rate ``rate_rps`` brings
    (``keep_up_arrived``; None: not known), "keeps_up": ``keeps_up`` at ``share``,
    "keep_up_window_s", "keep_up_warmup": the shortfall the run's own arrivals and service times
    make with no queue (``keep_up_warmup``, over ``served_s``), "too_short": the run meets every
    other check (``meets_otherwise``) and falls short by no more than that (a longer run tells),
    "service_p99_s": the p99 of the completed requests' service times, "keep_up_queued": the ratio
    counted on the queue alone (``keep_up_queued``), "keep_up_window_arrivals": the window's
    arrivals (``window_arrivals``; None: no window)}. A run is also too short to tell when its window
    is shorter than its own p99 service time and the queue alone did not fall behind
    (``window_too_short``), whichever way its ratio reads ("keeps_up" is then false): a batch can
    still be filling there with no backlog, and a probe just below capacity read as falling behind,
    while one just above it read as keeping up. ``period_s``: the arrival rate's period, which the window
    spans whole (``arrival_period_s``)."""
    arrival = req["arrival_s"]
    w = keep_up_window(arrival, period_s)
    ratio = keep_up_ratio(arrival, leave_s(req), w)
    arrived = keep_up_arrived(arrival, w, rate_rps, period_s)
    keeps = keeps_up(ratio, arrived, share)
    service = served_s(req)
    warm = keep_up_warmup(arrival, service, w)
    served = service[is_completed(req) & ~np.isnan(service)]
    p99 = float(np.percentile(served, 99)) if len(served) else math.nan
    span = math.nan if w is None else w[1] - w[0]
    queued = keep_up_queued(req, w)
    # (a window shorter than the service times tells neither way: a probe that kept up over one
    # can fall behind over a longer one, the default scenario's seed 1 at 27.06 req/s 0.94 left per
    # arrival over 25 s with a 43 s p99 service, 0.90 over 99 s; it is too short to tell, not kept up)
    unsure = meets_otherwise and keeps and window_too_short(span, p99, queued, share)
    keeps = keeps and not unsure
    return {"keep_up": None if math.isnan(ratio) else ratio,
            "keep_up_arrived": None if math.isnan(arrived) else arrived,
            "keeps_up": keeps,
            "keep_up_window_s": span,
            "keep_up_warmup": warm,
            "keep_up_queued": None if math.isnan(queued) else queued,
            "keep_up_window_arrivals": window_arrivals(arrival, w),
            # (only a run that meets every other check: one that fails another is no closer for length)
            # (an unsure pass is among them: its keeps is now false, and its window too short)
            "too_short": bool(meets_otherwise and not keeps and not math.isnan(ratio)
                              and (too_short_to_tell(ratio, warm, share)
                                   or window_too_short(span, p99, queued, share))),
            "service_p99_s": p99}


def window_output_tokens(first_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray, t0: float,
                         t1: float) -> float:
    """Output tokens emitted in ``(t0, t1]`` by completed requests (``first_s``, ``finish_s``,
    ``output_tokens`` of each), their first at ``first_s`` and the rest spread evenly over
    ``(first_s, finish_s]`` (a request's TPOT is its mean gap). Over the keep-up window this is a
    run's throughput at its load: unlike the whole run's, it leaves out the drain after the last
    arrival, when the batch empties."""
    f = np.asarray(first_s, dtype=float)
    e = np.asarray(finish_s, dtype=float)
    n = np.asarray(output_tokens, dtype=float)
    first = np.count_nonzero((f > t0) & (f <= t1))
    span = e - f
    overlap = np.clip(np.minimum(e, t1) - np.maximum(f, t0), 0.0, None)
    later = np.where(span > 0, (n - 1) * overlap / np.where(span > 0, span, 1.0), 0.0)
    return float(first + later.sum())
