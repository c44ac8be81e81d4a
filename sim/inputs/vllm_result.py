"""The result JSON of vLLM's serving benchmark (``vllm bench serve --save-result --save-detailed``,
or the older ``benchmarks/benchmark_serving.py --save-result``), read for ``servesim validate-run``.

Keys read (times in seconds, as the benchmark stores them): per request, ``input_lens``,
``output_lens``, ``ttfts``, ``itls`` (a list of gaps per request), and when present
``latencies`` (else E2E = TTFT + the gaps), ``start_times`` (when each request was sent,
``time.perf_counter()`` values; newer versions), ``errors`` (empty for a success); and the run's
``model_id``, ``request_rate`` (a number or ``"inf"``), ``burstiness``, ``max_concurrency``,
``duration``, ``request_throughput``, ``output_throughput``, ``total_token_throughput``. Newer
versions drop the per-request lists unless run with ``--save-detailed``: then this fails and
says so. Failed requests (an error, or no output) are left out of the comparison and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from servesim.errors import InputError, shown
from servesim.inputs.files import loads_json, read_utf8
from servesim.inputs.scenario import MAX_CLIENTS, MAX_RATE_RPS, MAX_SECONDS, MAX_TOKENS, MIN_RATE_RPS, GammaArrival
from servesim.inputs.schema import is_finite
from servesim.inputs.traces import MAX_TIME_S

PER_REQUEST = ("input_lens", "output_lens", "ttfts")
# burstiness is replayed as gamma gaps of CV 1/sqrt(burstiness): the range workload.arrival.cv takes
CV_MIN, CV_MAX = (next(f.metadata for f in fields(GammaArrival) if f.name == "cv")[k] for k in ("ge", "le"))
MIN_BURSTINESS, MAX_BURSTINESS = 1 / CV_MAX**2, 1 / CV_MIN**2


@dataclass(frozen=True)
class BenchResult:
    path: str
    model_id: str | None
    request_rate: float  # requests/s; inf: all sent at once (or as fast as max_concurrency allows)
    burstiness: float  # gamma shape of the inter-arrival times (1: Poisson)
    max_concurrency: int | None
    duration_s: float | None
    ok: np.ndarray  # bool per request: succeeded
    input_tokens: np.ndarray  # int64 per request
    output_tokens: np.ndarray  # int64 per request (0 for a failure)
    ttft_s: np.ndarray  # float per request
    e2e_s: np.ndarray  # float per request
    itl_s: list  # per request, its gaps between streamed chunks (np.ndarray)
    sent_s: np.ndarray | None  # per request, when it was sent, seconds after the first; None: not recorded
    throughput: dict  # what the file states: request_throughput, output_throughput, total_token_throughput
    # a table of requests (``servesim.inputs.request_log``): role -> the column read; None: a vLLM result
    columns: dict | None = None
    # per request, which prompt it sent (0, 1, ...: equal ids, the same prompt text; -1 unknown); None: not given
    prompt_id: np.ndarray | None = None
    # each failed request, in file order: where it is and why it failed ("request 5: Bad Request ...",
    # a table's "line 7: has_error = 1")
    failures: tuple = ()

    def __len__(self) -> int:
        return len(self.input_tokens)


def _numbers(raw, key: str, path: str, n: int | None, most: float = math.inf,
             what: str = "one value per request") -> np.ndarray:
    """One number >= 0 per request (at most ``most``: times are bounded as a trace's are, beyond
    which a value is a unit mix-up and its arithmetic overflows); ``what`` the list holds."""
    if not isinstance(raw, list):
        raise InputError(f"{path}: {key} must be a list with {what}, got {type(raw).__name__}")
    if n is not None and len(raw) != n:
        raise InputError(f"{path}: {key} has {len(raw)} values but input_lens has {n}: one per request")
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0:
            raise InputError(f"{path}: {key}[{i}] must be a finite number >= 0, got {shown(v)}")
        if v > most:
            raise InputError(f"{path}: {key}[{i}] must be at most {most:g} s (the benchmark stores seconds), got "
                             f"{shown(v)}")
    return np.array(raw, dtype=np.float64)


def _rate(raw, path: str) -> float:
    if raw in (None, "inf", "Infinity") or (isinstance(raw, float) and raw == math.inf):  # (-Infinity is no rate)
        return math.inf
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not MIN_RATE_RPS <= raw <= MAX_RATE_RPS:
        raise InputError(f"{path}: request_rate must be a number in [{MIN_RATE_RPS:g}, {MAX_RATE_RPS:g}] req/s or "
                         f"\"inf\", got {shown(raw)}")
    return float(raw)


def read_vllm_result(path: str) -> BenchResult:
    obj = loads_json(read_utf8(path, "benchmark result"), str(path))
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected the JSON object vLLM's serving benchmark writes, got {type(obj).__name__}")
    missing = [k for k in PER_REQUEST if k not in obj]
    if missing:
        raise InputError(f"{path}: no per-request {', '.join(missing)}: this is not a vLLM serving benchmark result "
                         "with request details; run `vllm bench serve` with --save-result --save-detailed")
    ins = _numbers(obj["input_lens"], "input_lens", path, None)
    n = len(ins)
    if n == 0:
        raise InputError(f"{path}: input_lens is empty: the benchmark recorded no requests")
    outs = _numbers(obj["output_lens"], "output_lens", path, n)
    ttft = _numbers(obj["ttfts"], "ttfts", path, n, MAX_TIME_S)
    for key, arr in (("input_lens", ins), ("output_lens", outs)):
        bad = np.flatnonzero(arr != np.rint(arr))
        if len(bad):
            raise InputError(f"{path}: {key}[{bad[0]}] must be a whole number of tokens, got {arr[bad[0]]}")
        big = np.flatnonzero(arr > MAX_TOKENS)  # (the replay's limit for any length)
        if len(big):
            raise InputError(f"{path}: {key}[{big[0]}] must be at most {MAX_TOKENS} tokens, got {arr[big[0]]:.0f}")
    empty = np.flatnonzero(ins < 1)  # (every prompt has a token; a replay cannot send none)
    if len(empty):
        raise InputError(f"{path}: input_lens[{empty[0]}] must be at least 1 token, got {ins[empty[0]]:.0f}")
    raw_itls = obj.get("itls")
    if raw_itls is None:
        itls = [np.zeros(0) for _ in range(n)]
    else:
        if not isinstance(raw_itls, list) or len(raw_itls) != n:
            raise InputError(f"{path}: itls must be a list with one list of gaps per request ({n})")
        itls = [_numbers(g, f"itls[{i}]", path, None, MAX_TIME_S, "the request's gaps between streamed tokens (s)")
                for i, g in enumerate(raw_itls)]
    if "latencies" in obj:
        e2e = _numbers(obj["latencies"], "latencies", path, n, MAX_TIME_S)
    elif raw_itls is not None:
        e2e = ttft + np.array([g.sum() for g in itls])
    else:
        raise InputError(f"{path}: neither latencies nor itls: no end-to-end latency to compare")
    errors = obj.get("errors")
    ok = (outs > 0) & (ttft > 0)
    if errors is not None:  # (a list the benchmark writes beside input_lens; anything else would hide failures)
        if not isinstance(errors, list) or len(errors) != n:
            got = f"a list of {len(errors)}" if isinstance(errors, list) else type(errors).__name__
            raise InputError(f"{path}: errors must be a list with one entry per request ({n}, empty for a "
                             f"success), got {got}")
        ok &= np.array([not e for e in errors], dtype=bool)
    short = np.flatnonzero(ok & (e2e < ttft))
    if len(short):
        i = short[0]  # (only given latencies can be: TTFT plus the gaps is never shorter)
        raise InputError(f"{path}: latencies[{i}] ({e2e[i]:g} s) is shorter than ttfts[{i}] ({ttft[i]:g} s): E2E "
                         "ends with the last token, after the first")
    sent = None
    if obj.get("start_times") is not None:
        st = _numbers(obj["start_times"], "start_times", path, n, MAX_TIME_S)
        sent = st - st[ok].min() if ok.any() else st - st.min()
        span = float(sent[ok].max()) if ok.any() else 0.0
        if span > MAX_SECONDS:  # (the replay's arrivals: past this the simulated clock no longer resolves a step)
            raise InputError(f"{path}: start_times span {span:.3g} s from the first successful request to the last; "
                             f"a replay takes at most {MAX_SECONDS:g} s (the benchmark stores seconds)")
    mc = obj.get("max_concurrency")
    if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or not 1 <= mc <= MAX_CLIENTS):
        raise InputError(f"{path}: max_concurrency must be an integer in [1, {MAX_CLIENTS}] or null (replayed as "
                         f"that many clients), got {shown(mc)}")
    burst = obj.get("burstiness", 1.0)
    if burst in ("inf", "Infinity"):
        burst = math.inf
    if isinstance(burst, bool) or not isinstance(burst, (int, float)) or not burst > 0 or not (
            burst == math.inf or is_finite(burst)):
        raise InputError(f"{path}: burstiness must be a positive number, got {shown(burst)}")
    if not math.isinf(burst) and not MIN_BURSTINESS <= burst <= MAX_BURSTINESS:
        raise InputError(f"{path}: burstiness must be in [{MIN_BURSTINESS:g}, {MAX_BURSTINESS:g}] or \"inf\" "
                         f"(replayed as gamma gaps of CV 1/sqrt(burstiness), which the scenario takes in "
                         f"[{CV_MIN:g}, {CV_MAX:g}]), got {shown(burst)}")
    failures = tuple(f"request {i}: " + (shown_error(errors[i]) if errors is not None and errors[i] else
                                         "no output" if outs[i] <= 0 else "no first token (TTFT 0)")
                     for i in np.flatnonzero(~ok).tolist())
    dur = obj.get("duration")
    thr = {k: float(obj[k]) for k in ("request_throughput", "output_throughput", "total_token_throughput")
           if isinstance(obj.get(k), (int, float)) and not isinstance(obj.get(k), bool) and is_finite(obj[k])}
    return BenchResult(str(path), obj.get("model_id"), _rate(obj.get("request_rate"), path), float(burst), mc,
                       float(dur) if isinstance(dur, (int, float)) and not isinstance(dur, bool) and is_finite(dur)
                       else None,
                       ok, ins.astype(np.int64), outs.astype(np.int64), ttft, e2e, itls, sent, thr,
                       failures=failures)


def shown_error(e) -> str:
    """A request's error as the report quotes it: its text, on one line, cut at 200 characters."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:199] + "…"
