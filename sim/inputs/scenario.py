"""Scenario files: YAML -> frozen dataclasses, with validation errors that name the field path.

The field names are a contract (docs, tests and users rely on them): add fields, never rename.
Each field's ``_f(doc=...)`` is its line in the generated reference (docs/reference/scenario.md,
tools/gen_reference.py).
Each default is stated once, here, in the dataclass. ``load_scenario`` is the only entry point
that reads files; the dataclasses themselves do no I/O.
"""

from __future__ import annotations

import dataclasses
import math
import os
import weakref
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union


from servesim.errors import InputError, clip, did_you_mean
from servesim.inputs.overrides import apply_overrides, check_overrides, override_texts
from servesim.inputs.schema import FIELD_HINTS, build, dump_yaml, read_mapping
from servesim.inputs.schema import field_ as _f


# ---------------------------------------------------------------- bounds
# Every number a scenario gives has a lower and an upper bound (a test checks it): the limits of
# what the simulator can represent exactly and finish, far beyond any real deployment.
MAX_TOKENS = 2**31 - 1  # any length: a prompt, an output, a budget (int64 sums over requests stay exact)
MAX_SIGMA = 20.0  # lognormal sigma (log space): beyond it almost every draw is 1 or the clip
MAX_SECONDS = 1e9  # any time, duration or period (~31 years; doubles still resolve 0.1 us there)
MAX_TRACE_S = 1e12  # a trace window's bounds (a trace's own times reach this, sim/inputs/traces.py)
MIN_RATE_RPS, MAX_RATE_RPS = 1e-6, 1e9  # an arrival rate: one request in ~12 days .. one a nanosecond
RATE = {"ge": MIN_RATE_RPS, "le": MAX_RATE_RPS}
# a sinusoidal cycle: 2 pi / period_s must stay finite, with room to multiply the longest times (a
# period of 1e-320 s made it inf, and cos(inf) a traceback); cycles of a microsecond already
# average out within any step
MIN_PERIOD_S = 1e-6
MAX_REQUESTS = 10**12  # workload.num_requests (memory refuses far fewer: see sim/resources.py)
MAX_CLIENTS = 1_000_000  # closed-loop clients (each that can send is a process in the event loop;
# with fewer requests than clients the others are not started: sim/core/clients.py)
MAX_TURNS = 10_000  # turns of one session (sessions.turns draws are clipped to it)
MAX_PARALLEL = 4096  # tp, pp
MAX_SEQS = 1 << 20  # max_num_seqs
MAX_GIB = 1e6  # any memory size in GiB (a petabyte)


# ---------------------------------------------------------------- length distributions (tokens)
@dataclass(frozen=True)
class FixedDist:
    dist: Literal["fixed"]
    value: int = _f(gt=0, le=MAX_TOKENS, doc="the length of every request")


@dataclass(frozen=True)
class UniformDist:
    dist: Literal["uniform"]
    min: int = _f(gt=0, le=MAX_TOKENS)
    max: int = _f(gt=0, le=MAX_TOKENS)

    def check(self, path):
        if self.max < self.min:
            raise InputError(f"{path}.max must be >= {path}.min ({self.min}), got {self.max}")


@dataclass(frozen=True)
class LognormalDist:
    """Lognormal given by two of: mean (tokens), median (tokens), sigma (of the underlying normal,
    log space), p99 (tokens). Valid pairs: mean + sigma, median + sigma, median + p99."""

    dist: Literal["lognormal"]
    mean: Optional[float] = _f(None, gt=0, le=MAX_TOKENS, doc="mean length, tokens")
    sigma: Optional[float] = _f(None, gt=0, le=MAX_SIGMA, doc="standard deviation of the log length")
    max: Optional[int] = _f(None, gt=0, le=MAX_TOKENS, doc="clip samples to this many tokens")
    median: Optional[float] = _f(None, gt=0, le=MAX_TOKENS, doc="median length, tokens")
    p99: Optional[float] = _f(None, gt=0, le=MAX_TOKENS, doc="99th percentile, tokens (with median)")

    def check(self, path):
        given = tuple(k for k in ("mean", "median", "sigma", "p99") if getattr(self, k) is not None)
        if given not in (("mean", "sigma"), ("median", "sigma"), ("median", "p99")):
            raise InputError(f"{path}: give mean + sigma, median + sigma or median + p99; got "
                             f"{' + '.join(given) or 'none of them'}")
        if self.p99 is not None and not self.p99 > self.median:
            raise InputError(f"{path}.p99 must be > {path}.median ({self.median}), got {self.p99}")

    def log_params(self) -> tuple[float, float]:
        """(mu, sigma) of the underlying normal."""
        if self.p99 is not None:
            sigma = math.log(self.p99 / self.median) / Z99
            return math.log(self.median), sigma
        if self.median is not None:
            return math.log(self.median), self.sigma
        return math.log(self.mean) - self.sigma**2 / 2, self.sigma  # so that E[X] = mean


Z99 = 2.3263478740408408  # standard normal 99th percentile


@dataclass(frozen=True)
class NormalDist:
    dist: Literal["normal"]
    mean: float = _f(gt=0, le=MAX_TOKENS)
    std: float = _f(ge=0, le=MAX_TOKENS)
    min: int = _f(1, gt=0, le=MAX_TOKENS, doc="clip below")
    max: Optional[int] = _f(None, gt=0, le=MAX_TOKENS, doc="clip above")

    def check(self, path):
        if self.max is not None and self.max < self.min:
            raise InputError(f"{path}.max must be >= {path}.min ({self.min}), got {self.max}")


ZIPF_MAX_SPAN = 10_000_000  # zipf: max - min (one probability per length is tabulated)


@dataclass(frozen=True)
class ZipfDist:
    """Bounded Zipf on the integers min..max: P(k) proportional to k ** -s."""

    dist: Literal["zipf"]
    s: float = _f(gt=0, le=100, doc="exponent")
    max: int = _f(gt=0, le=MAX_TOKENS, doc=f"at most min + {ZIPF_MAX_SPAN:,} (the probabilities are tabulated)")
    min: int = _f(1, gt=0, le=MAX_TOKENS)

    def check(self, path):
        if self.max < self.min:
            raise InputError(f"{path}.max must be >= {path}.min ({self.min}), got {self.max}")
        if self.max - self.min > ZIPF_MAX_SPAN:
            raise InputError(f"{path}: max - min must be at most {ZIPF_MAX_SPAN}, got {self.max - self.min}")


@dataclass(frozen=True)
class EmpiricalDist:
    """Lengths drawn uniformly, with replacement, from a file: one integer per line, or the
    ``column`` of a CSV with a header. Relative paths are relative to the current directory."""

    dist: Literal["empirical"]
    path: str = _f(doc="file of lengths: one integer a line, or a CSV")
    column: Optional[str] = _f(None, doc="the CSV column to read; null: one integer per line")


@dataclass(frozen=True)
class QuantilesDist:
    """A piecewise-linear inverse CDF: tokens[i] is the p[i] quantile (p from 0 to 1, rising)."""

    dist: Literal["quantiles"]
    p: tuple[float, ...] = _f(ge=0, le=1, doc="probabilities, rising strictly from 0 to 1")
    tokens: tuple[float, ...] = _f(ge=1, le=MAX_TOKENS, doc="the length at each probability")

    def check(self, path):
        if len(self.p) != len(self.tokens) or len(self.p) < 2:
            raise InputError(f"{path}: p and tokens must have the same length, at least 2; got "
                             f"{len(self.p)} and {len(self.tokens)}")
        if self.p[0] != 0 or self.p[-1] != 1 or any(b <= a for a, b in zip(self.p, self.p[1:])):
            raise InputError(f"{path}.p must rise strictly from 0 to 1, got {list(self.p)}")
        if self.tokens[0] < 1 or any(b < a for a, b in zip(self.tokens, self.tokens[1:])):
            raise InputError(f"{path}.tokens must be >= 1 and non-decreasing, got {list(self.tokens)}")


LengthDist = Union[FixedDist, UniformDist, LognormalDist, NormalDist, ZipfDist, EmpiricalDist, QuantilesDist]


# ---------------------------------------------------------------- arrival processes
@dataclass(frozen=True)
class PoissonArrival:
    process: Literal["poisson"]
    rate_rps: float = _f(**RATE)


@dataclass(frozen=True)
class FixedArrival:
    """Evenly spaced arrivals, 1 / rate_rps apart."""

    process: Literal["fixed"]
    rate_rps: float = _f(**RATE)


@dataclass(frozen=True)
class GammaArrival:
    """Renewal process with gamma inter-arrival times: mean 1/rate_rps, coefficient of variation cv."""

    process: Literal["gamma"]
    rate_rps: float = _f(**RATE)
    cv: float = _f(ge=1e-3, le=1e3, doc="the gaps' coefficient of variation (1: Poisson; below 1e-3 use fixed)")


@dataclass(frozen=True)
class OnOffArrival:
    """Bursts: Poisson at rate_rps for on_s seconds, then off_rate_rps (default silence) for off_s,
    repeating. ``durations: exponential`` makes on_s and off_s the means of exponential periods
    (an interrupted / Markov-modulated Poisson process). The first period is an on period."""

    process: Literal["on_off"]
    rate_rps: float = _f(**RATE, doc="rate during on periods")
    on_s: float = _f(gt=0, le=MAX_SECONDS, doc="length of an on period (mean, with exponential durations)")
    off_s: float = _f(gt=0, le=MAX_SECONDS, doc="length of an off period (mean, with exponential durations)")
    off_rate_rps: float = _f(0.0, ge=0, le=MAX_RATE_RPS, doc="rate during off periods")
    durations: Literal["fixed", "exponential"] = _f("fixed", doc="fixed periods, or exponential ones (an interrupted "
                                                                 "Poisson process)")

    @property
    def mean_rate_rps(self) -> float:
        """The long-run mean rate: on and off periods weighted by their (mean) lengths."""
        return (self.rate_rps * self.on_s + self.off_rate_rps * self.off_s) / (self.on_s + self.off_s)


@dataclass(frozen=True)
class Segment:
    duration_s: float = _f(gt=0, le=MAX_SECONDS, doc="length of the segment")
    rate_rps: float = _f(ge=0, le=MAX_RATE_RPS, doc="Poisson rate during the segment")


@dataclass(frozen=True)
class PiecewiseArrival:
    """Poisson with a piecewise-constant rate: each segment in turn, the schedule repeating."""

    process: Literal["piecewise"]
    segments: tuple[Segment, ...] = _f(doc="the schedule, repeating")

    def check(self, path):
        if not self.segments:
            raise InputError(f"{path}.segments must list at least one segment")
        if not any(seg.rate_rps > 0 for seg in self.segments):
            raise InputError(f"{path}.segments: at least one segment needs rate_rps > 0")


@dataclass(frozen=True)
class SinusoidalArrival:
    """Poisson with rate rate_rps * (1 + amplitude * sin(2 pi (t - phase_s) / period_s)) (a diurnal
    cycle), drawn by thinning."""

    process: Literal["sinusoidal"]
    rate_rps: float = _f(**RATE, doc="mean rate")
    period_s: float = _f(ge=MIN_PERIOD_S, le=MAX_SECONDS, doc="length of one cycle")
    amplitude: float = _f(0.5, ge=0, le=1, doc="relative: the rate swings between (1 - a) and (1 + a) x rate_rps")
    phase_s: float = _f(0.0, ge=-MAX_SECONDS, le=MAX_SECONDS, doc="shift of the cycle")


@dataclass(frozen=True)
class ClosedLoopArrival:
    """``clients`` users; each sends its first request at a think time after 0, and each next
    request a think time after its previous one ends (completed or rejected; after a rejection
    ``reject_wait_s`` instead, when given; with ``workload.sessions`` each client runs one session
    after another, a think time before each, or ``reject_wait_s`` after a session a rejected turn
    ended): at most ``clients`` requests are ever outstanding (the ``max-concurrency`` of serving
    benchmarks)."""

    process: Literal["closed_loop"]
    clients: int = _f(gt=0, le=MAX_CLIENTS, doc="concurrent users: at most this many requests outstanding")
    think_time_s: float = _f(0.0, ge=0, le=MAX_SECONDS, doc="mean think time")
    think: Literal["exponential", "fixed"] = _f("exponential", doc="exponential think times (mean think_time_s) or "
                                                                   "fixed ones")
    reject_wait_s: Optional[float] = _f(None, ge=0, le=MAX_SECONDS,
                                        doc="a client whose request was rejected (HTTP 429/503) waits this long, "
                                            "instead of its think time, before its next request (a backoff; with "
                                            "sessions, before its next session: a rejected turn ends one); null: "
                                            "its think time, as serving benchmarks do (vLLM's benchmark_serving "
                                            "counts the failure and sends its next prompt)")


@dataclass(frozen=True)
class AllAtOnceArrival:
    """Every request arrives at time_s (an offline batch job)."""

    process: Literal["all_at_once"]
    time_s: float = _f(0.0, ge=0, le=MAX_SECONDS, doc="when the batch arrives")


Arrival = Union[PoissonArrival, FixedArrival, GammaArrival, OnOffArrival, PiecewiseArrival, SinusoidalArrival,
                ClosedLoopArrival, AllAtOnceArrival]


def mean_rate_at(arrival, rate_rps: float) -> float:
    """The long-run mean rate of ``arrival`` with its ``rate_rps`` set to ``rate_rps``: that rate,
    but for an on_off process, where ``rate_rps`` is the burst rate (``OnOffArrival.mean_rate_rps``).
    What capacity and plan size lengths in time by (S seconds of arrivals)."""
    return getattr(dataclasses.replace(arrival, rate_rps=rate_rps), "mean_rate_rps", rate_rps)


# ---------------------------------------------------------------- traces and request classes
@dataclass(frozen=True)
class TraceColumns:
    arrival: Optional[str] = _f(None, doc="arrival time column (default arrival_s)")
    prompt: Optional[str] = _f(None, doc="prompt length column (default prompt_tokens)")
    output: Optional[str] = _f(None, doc="output length column (default output_tokens)")


@dataclass(frozen=True)
class Trace:
    """Replay a trace file (formats in ``sim/inputs/traces.py``): its arrival times and lengths, row by
    row. With ``workload.arrival`` set, arrivals come from that process instead and the trace only
    gives lengths (in order, or drawn at random with ``sample: true``, keeping each row's prompt
    and output together)."""

    path: str = _f(doc="the trace file; ~ and $VARS expand; relative to the current directory")
    format: Literal["auto", "azure", "splitwise", "csv", "jsonl", "mooncake"] = _f(
        "auto", doc="auto: JSONL for *.jsonl or a first '{' (mooncake by the first row's keys), else by the CSV header")
    columns: Optional[TraceColumns] = _f(None, doc="column names for csv/jsonl (or to override a format's)")
    time_unit: Optional[Literal["s", "ms", "us", "ns"]] = _f(
        None, doc="null: the arrival column's name's suffix (arrival_ms: ms), else the format's "
                  "(ms for mooncake, else s); numbers only (timestamps carry their own unit)")
    hash_block_tokens: int = _f(512, gt=0, le=1 << 20, doc="tokens per block hash id (mooncake: 512)")
    speedup: float = _f(1.0, ge=1e-6, le=1e6, doc="divide the trace's times by this")
    start_s: Optional[float] = _f(None, ge=0, le=MAX_TRACE_S, doc="window start, seconds after the trace's first row")
    end_s: Optional[float] = _f(None, gt=0, le=MAX_TRACE_S, doc="window end (exclusive), seconds after the first row")
    loop: bool = _f(False, doc="repeat the trace (window) when more requests or time are asked for")
    sample: bool = _f(False, doc="draw rows at random (with replacement) instead of in order; needs workload.arrival")

    def check(self, path):
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise InputError(f"{path}.end_s must be > {path}.start_s ({self.start_s}), got {self.end_s}")


@dataclass(frozen=True)
class Dataset:
    """Prompts (and replies) from a dataset file, replayed in order (or drawn at random with
    ``sample``): ShareGPT JSON (conversations) or JSONL prompt files (sim/inputs/datasets.py).
    Token counts come from ``tokenizer`` (a Hugging Face ``tokenizer.json``, read with the
    ``tokenizers`` package), else from an estimate of ``chars_per_token`` characters a token."""

    path: str = _f(doc="ShareGPT JSON or JSONL file")
    format: Literal["auto", "sharegpt", "jsonl"] = _f("auto", doc="auto: jsonl for *.jsonl, else sharegpt")
    tokenizer: Optional[str] = _f(None, doc="path to a tokenizer.json; null: estimate from characters (warned)")
    chars_per_token: float = _f(4.0, ge=0.1, le=1e4, doc="the estimate without a tokenizer")
    prompt_key: str = _f("prompt", doc="jsonl: the key of the prompt (text, or an integer token count)")
    output_key: str = _f("output", doc="jsonl: the key of the reply (text or a token count); rows without it "
                                       "take workload.output_tokens")
    sample: bool = _f(False, doc="draw rows (conversations) at random, with replacement, instead of in order")
    loop: bool = _f(False, doc="start again from the first row when more requests are asked for")


@dataclass(frozen=True)
class Sessions:
    """Multi-turn conversations: ``workload.arrival`` starts sessions (or, closed_loop, each
    client runs one session after another); a session sends its next turn ``think_time_s`` after
    the previous reply ended, with the whole conversation so far as its prompt."""

    turns: Optional[LengthDist] = _f(None, doc="turns per session; null: a dataset's conversations")
    think_time_s: float = _f(0.0, ge=0, le=MAX_SECONDS, doc="mean time from a reply to the next turn")
    think: Literal["exponential", "fixed"] = _f("exponential", doc="exponential think times (mean think_time_s) or "
                                                                   "fixed ones")
    max_turns: Optional[int] = _f(None, gt=0, le=MAX_TURNS, doc="use at most this many turns of a conversation "
                                                               f"(at most {MAX_TURNS} in any case)")


@dataclass(frozen=True)
class ClassSlo:
    ttft_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="None: the scenario's slo.ttft_s")
    tpot_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="None: the scenario's slo.tpot_s")


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in a mixed workload. Either every class has a ``share`` of the
    workload's arrivals (relative weights, normalized), or every class has its own arrival
    process (``arrival``, or ``rate_rps`` for Poisson) and the streams are merged."""

    name: str = _f(doc="the class's name (requests.csv class column, summary.json classes)")
    prompt_tokens: Optional[LengthDist] = _f(None, doc="prompt length distribution (or from preset)")
    output_tokens: Optional[LengthDist] = _f(None, doc="output length distribution (or from preset)")
    share: Optional[float] = _f(None, gt=0, le=1e6, doc="relative weight")
    rate_rps: Optional[float] = _f(None, **RATE, doc="shorthand for arrival: {process: poisson, rate_rps}")
    arrival: Optional[Arrival] = _f(None, doc="the class's own arrival process")
    preset: Optional[str] = _f(None, doc="fills prompt_tokens and output_tokens from a preset (azure_conv azure_code "
                                         "arxiv_summarization: sim/inputs/presets.py)")
    shared_prefix: Optional[SharedPrefix] = _f(None, doc="this class's own shared prefixes (else "
                                                         "workload.shared_prefix)")
    slo: ClassSlo = _f(default_factory=ClassSlo, doc="the class's SLO; null fields fall back to the top-level slo")
    priority: int = _f(0, ge=-(2**63), le=2**63 - 1,
                       doc="scheduling priority (policy.queue.order: priority): lower is served first, as vLLM's")
    tenant: Optional[str] = _f(None, doc="who the requests are served for (fairness in summary.json); null: the "
                                         "class's name")

    @staticmethod
    def expand(data, path):
        from servesim.inputs.presets import expand_preset
        return expand_preset(data, path, ("prompt_tokens", "output_tokens"))

    def check(self, path):
        modes = [k for k in ("share", "rate_rps", "arrival") if getattr(self, k) is not None]
        if len(modes) != 1:
            raise InputError(f"{path}: give exactly one of share, rate_rps, arrival; got {', '.join(modes) or 'none'}")
        for k in ("prompt_tokens", "output_tokens"):
            if getattr(self, k) is None:
                raise InputError(f"{path}.{k} is missing: expected a length distribution (or a preset)")
        if isinstance(self.arrival, (ClosedLoopArrival, AllAtOnceArrival)):
            raise InputError(f"{path}.arrival: {self.arrival.process} is a workload-wide process: set it as "
                             f"workload.arrival and give the classes a share")


# ---------------------------------------------------------------- sections
@dataclass(frozen=True)
class Hardware:
    gpu: str = _f(doc="catalog GPU (a100-40g a100-80g a40 h100-sxm h100-pcie h200 b200 l40s mi300x) or a GPU YAML path")
    tp: int = _f(1, gt=0, le=MAX_PARALLEL, doc="tensor-parallel GPUs per replica")
    pp: int = _f(1, gt=0, le=MAX_PARALLEL, doc="pipeline-parallel stages per replica")
    pp_overlap: bool = _f(True, doc="with pp > 1: true: vLLM's virtual engines, pp schedulers per replica "
                                    "(each 1/pp of the KV) whose steps overlap in the stages "
                                    "(sim/core/pipeline.py); false: one step at a time crosses every stage")
    expert_parallel: bool = _f(False, doc="MoE models: spread the experts over the TP ranks (EP = TP, each rank "
                                          "holds experts / TP whole experts; vLLM's --enable-expert-parallel) "
                                          "instead of splitting each expert TP ways")
    dtype: Literal["bf16", "fp16", "fp8", "int4"] = _f("bf16", doc="weight dtype (fp8 at the GPU's FP8 peak, its "
                                                                   "16-bit peak without FP8 tensor cores, e.g. A100; "
                                                                   "a GPU file without base must give fp8_flops; "
                                                                   "int4 weight-only)")
    kv_dtype: Optional[Literal["bf16", "fp16", "fp8", "int8", "int4"]] = _f(
        None, doc="null: the 16-bit dtype the model computes in (bf16; fp16 for fp16), as vLLM's kv_cache_dtype auto")


@dataclass(frozen=True)
class Memory:
    gpu_memory_utilization: float = _f(0.9, gt=0, le=1, doc="share of GPU memory servesim may use (vLLM's meaning)")
    block_size: int = _f(16, gt=0, le=4096, doc="tokens per KV block")
    activation_reserve_gib: Optional[float] = _f(None, ge=0, le=MAX_GIB, doc="None: estimated from the token budget")
    num_gpu_blocks: Optional[int] = _f(None, gt=0, le=1 << 40, doc="override the computed KV block count (as vLLM's "
                                                                  "num_gpu_blocks_override)")
    swap_space_gib: float = _f(4.0, ge=0, le=MAX_GIB, doc="host memory per GPU for swapped-out KV (vLLM's swap_space)")
    swap_bandwidth_gb_per_s: Optional[float] = _f(None, ge=1e-3, le=1e6,
                                                  doc="host<->GPU copy bandwidth; null: the GPU's PCIe figure")


MAX_REPLICAS = 100_000  # each replica is a scheduler with its own KV pool: far beyond any real fleet


@dataclass(frozen=True)
class ClassReplicas:
    """The replicas (positions in the routed pool, from 0) that requests of class ``name`` may
    be routed to by the ``class_aware`` router."""

    name: str = _f(doc="a request class")
    replicas: tuple[int, ...] = _f(doc="replica indexes (from 0) it may be routed to")


@dataclass(frozen=True)
class Cluster:
    replicas: int = _f(1, gt=0, le=MAX_REPLICAS, doc="replicas of the model (each with its own scheduler and KV cache)")
    router: str = _f("round_robin", doc="a router of servesim.core.router.ROUTERS (round_robin random "
                                        "least_outstanding_tokens least_kv_usage prefix_aware power_of_two "
                                        "class_aware: docs/scheduling.md), an installed plug-in, or module:Class "
                                        "(servesim.plugins)")
    class_replicas: Optional[tuple[ClassReplicas, ...]] = _f(None, doc="class_aware router: per class, the "
                                                                       "replicas it may use (unlisted: all)")

    def check(self, path):
        from servesim.plugins import resolve

        resolve("router", self.router, f"{path}.router")
        from servesim.core.router import ROUTERS

        if self.class_replicas is not None and self.router in ROUTERS and self.router != "class_aware":
            # (a plug-in router may read it in configure(scenario); no built-in one but class_aware does)
            raise InputError(f"{path}.class_replicas: only the class_aware router reads it; {self.router} would "
                             f"send every class to every replica; set {path}.router: class_aware, or remove "
                             "class_replicas")
        for i, c in enumerate(self.class_replicas or ()):
            if not c.replicas:
                raise InputError(f"{path}.class_replicas[{i}].replicas must list at least one replica")
            if any(x < 0 for x in c.replicas):
                raise InputError(f"{path}.class_replicas[{i}].replicas must be >= 0, got {list(c.replicas)}")
            twice = next((x for j, x in enumerate(c.replicas) if x in c.replicas[:j]), None)
            if twice is not None:  # (taken once in silence, as plan's --tp 1,1 was)
                raise InputError(f"{path}.class_replicas[{i}].replicas: {twice} is listed twice, got "
                                 f"{list(c.replicas)}; list each replica once")


@dataclass(frozen=True)
class Spec:
    """Speculative decoding: a draft proposes k tokens, the target verifies k + 1 per step."""

    draft: str = _f("ngram", doc="a draft model (catalog id or config.json path), or ngram (no draft cost)")
    num_speculative_tokens: int = _f(4, gt=0, le=64, doc="k: draft tokens proposed per step")
    acceptance_rate: float = _f(0.8, ge=0, le=1, doc="probability each draft token is accepted")


@dataclass(frozen=True)
class Pool:
    """One pool of a P/D split: its replicas, GPU, TP and inner policy (null: the top-level value)."""

    replicas: int = _f(1, gt=0, le=MAX_REPLICAS, doc="replicas in this pool")
    gpu: Optional[str] = _f(None, doc="null: hardware.gpu")
    tp: Optional[int] = _f(None, gt=0, le=MAX_PARALLEL, doc="null: hardware.tp")
    policy: str = _f("continuous", doc="the pool's per-replica policy: a registered name or module:Class")
    max_num_seqs: Optional[int] = _f(None, gt=0, le=MAX_SEQS, doc="null: policy.max_num_seqs")
    max_num_batched_tokens: Optional[int] = _f(None, gt=0, le=MAX_TOKENS, doc="null: policy.max_num_batched_tokens")


@dataclass(frozen=True)
class Link:
    """The KV hand-off link of a P/D split (per GPU; TP ranks send their shards in parallel, but each
    needs a whole MLA latent: docs/how-it-works.md)."""

    type: Literal["inter_node", "intra_node"] = _f("inter_node", doc="inter_node (400 Gbit/s, 20 us per GPU) or "
                                                                     "intra_node (the GPU's NVLink figures; pools "
                                                                     "of two GPU types: the slower one's)")
    bandwidth_gbps: Optional[float] = _f(None, ge=1e-3, le=1e9,
                                         doc="Gbit/s; null: 400 across nodes, the GPU's NVLink within one")
    latency_s: Optional[float] = _f(None, ge=0, le=3600, doc="null: 20 us across nodes, the GPU's link latency "
                                                             "within one")
    overlap: bool = _f(False, doc="true: stream each layer's KV while the prompt's last prefill step computes it "
                                  "(Splitwise); false: send it all after the step (DistServe)")


@dataclass(frozen=True)
class Predictor:
    """What ``sjf_predicted`` believes a request's output length is (the scheduler never sees the
    true one): ``lognormal``: the true length times exp(sigma Z), Z standard normal (median
    unbiased; sigma 0: exact); ``buckets``: a classifier into the length ranges split at
    ``edges`` that names the true range with probability ``accuracy``, else another range drawn
    uniformly, the prediction being the range's middle (the last range, from the last edge up: 1.5
    times that edge).
    Seeded by the scenario's seed and the request's id: the same requests get the same
    predictions in every run and engine."""

    kind: Literal["lognormal", "buckets"] = _f("lognormal", doc="lognormal error or a bucket classifier")
    sigma: float = _f(0.5, ge=0, le=MAX_SIGMA, doc="lognormal: spread of the multiplicative error (log space)")
    edges: tuple[int, ...] = _f((64, 256, 1024), ge=1, le=MAX_TOKENS, doc="buckets: the length ranges' "
                                                                                  "edges: at least one, rising "
                                                                                  "strictly (whatever the kind)")
    accuracy: float = _f(0.8, ge=0, le=1, doc="buckets: probability the true range is named")

    def check(self, path):
        # (whatever the kind and the queue's order: edges=[] passed under fcfs and with kind lognormal,
        # and was an IndexError traceback once sjf_predicted built the predictor)
        if not self.edges or any(b <= a for a, b in zip(self.edges, self.edges[1:])) or self.edges[0] < 1:
            raise InputError(f"{path}.edges must list at least one edge, each >= 1, rising strictly (e.g. "
                             f"[64, 256, 1024]), got {list(self.edges)}")


QUEUE_ORDERS = ("fcfs", "priority", "sjf", "sjf_predicted", "edf")


@dataclass(frozen=True)
class Queue:
    """The waiting queue's order (``policies/queues.py``): ``fcfs`` (arrival order); ``priority``
    (the class's ``priority``, lower first, then arrival: vLLM's priority policy); ``sjf`` (shortest
    prompt first); ``sjf_predicted`` (shortest predicted output first, ``predictor``); ``edf``
    (earliest deadline first: arrival + the class's TTFT SLO; no SLO: last, in arrival order)."""

    order: Literal["fcfs", "priority", "sjf", "sjf_predicted", "edf"] = _f("fcfs", doc="fcfs | priority | sjf | "
                                                                                       "sjf_predicted | edf (see "
                                                                                       "above)")
    aging_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="priority: the wait worth one priority level; sjf, "
                                                  "sjf_predicted: the wait worth halving the job's length; "
                                                  "null: no aging")
    predictor: Predictor = _f(default_factory=Predictor, doc="sjf_predicted: the output-length predictor")
    preempt_running: bool = _f(True, doc="priority: a waiting request that finds max_num_seqs or the KV full "
                                         "preempts running requests of strictly lower priority")

    def check(self, path):
        if self.aging_s is not None and self.order in ("fcfs", "edf"):
            raise InputError(f"{path}.aging_s: {self.order} cannot starve a request (its keys already grow with "
                             f"arrival time); aging applies to priority, sjf and sjf_predicted")


@dataclass(frozen=True)
class TokenBucket:
    rate_rps: float = _f(**RATE, doc="requests admitted per second, on average")
    burst: float = _f(1.0, ge=1, le=MAX_REQUESTS,
                      doc="requests the bucket holds (admitted at once after a quiet spell)")


@dataclass(frozen=True)
class Admission:
    """Load shedding before a request is queued (``sim/core/gateway.py``): a rejected request is
    in requests.csv with status rejected and the rule in ``reason``."""

    token_bucket: Optional[TokenBucket] = _f(None, doc="a token bucket at the cluster's door; null: none")
    max_queue: Optional[int] = _f(None, ge=1, le=MAX_REQUESTS,
                                  doc="reject when this many requests already wait on the replica (at least 1: "
                                      "every request waits in the queue until a step admits it, so 0 would "
                                      "reject them all); null: no limit")
    max_queued_tokens: Optional[int] = _f(None, gt=0, le=MAX_REQUESTS * MAX_TOKENS,
                                          doc="reject when the prompts waiting on the replica plus this one would "
                                              "exceed this many tokens")
    ttft_slo: bool = _f(False, doc="reject when the predicted TTFT exceeds the request's class TTFT SLO")
    ttft_slo_share: float = _f(1.0, gt=0, le=1, doc="ttft_slo: reject above this share of the SLO (headroom for "
                                                    "the prediction's error)")
    classes: Optional[tuple[str, ...]] = _f(None, doc="the classes the rules apply to; null: every request")

    @property
    def active(self) -> bool:
        return (self.token_bucket is not None or self.max_queue is not None or self.max_queued_tokens is not None
                or self.ttft_slo)

    def check(self, path):
        # (options that would change nothing: refused rather than ignored)
        if self.ttft_slo_share != 1.0 and not self.ttft_slo:
            raise InputError(f"{path}.ttft_slo_share: it scales the TTFT rule's limit, and {path}.ttft_slo is off; "
                             f"set {path}.ttft_slo: true, or leave ttft_slo_share at 1")
        if self.classes is not None and not self.active:
            raise InputError(f"{path}.classes: it names the classes the rules apply to, and no rule is set; add "
                             f"one (token_bucket, max_queue, max_queued_tokens or ttft_slo), or remove classes")


@dataclass(frozen=True)
class Policy:
    name: str = _f("continuous", doc="continuous | chunked_prefill | static | pd_split (a deployment: two pools), "
                                     "an installed plug-in, or module:Class (servesim.plugins)")
    max_num_seqs: int = _f(256, gt=0, le=MAX_SEQS, doc="most sequences in one step (vLLM's name and meaning)")
    max_num_batched_tokens: int = _f(8192, gt=0, le=MAX_TOKENS, doc="per-step token budget (vLLM's; chunked_prefill: "
                                                                    "the chunk budget, e.g. 512 or 2048)")
    preemption: Literal["recompute", "swap"] = _f("recompute", doc="what a preempted request loses: recompute (its "
                                                                   "KV, re-prefilled later) or swap (KV copied to "
                                                                   "host memory while swap space lasts)")
    watermark: Optional[float] = _f(None, ge=0, lt=1, doc="share of KV blocks kept free when admitting (vLLM's); "
                                                          "null: the engine profile's (cost.engine): none for "
                                                          "vllm-v1, trt-llm, sglang and hf-eager (none in their "
                                                          "sources), 0.01 for the vLLM V0 profiles and "
                                                          "sarathi-serve (their block manager's)")
    prefix_caching: bool = _f(False, doc="block-hash prefix cache with LRU eviction (not with static)")
    batch_timeout_s: float = _f(0.1, ge=0, le=MAX_SECONDS,
                                doc="static: start a partial batch this long after its first request waited")
    max_output_tokens: Optional[int] = _f(None, gt=0, le=MAX_TOKENS,
                                          doc="static, and reserve: max: output tokens reserved per request; null: "
                                              "up to the context length")
    reserve: Literal["none", "max", "pow2", "oracle"] = _f(
        "none", doc="continuous / chunked_prefill: KV reserved at admission (Orca): none (paged, grows as it goes), "
                    "max (up to the context length, or prompt + max_output_tokens), pow2 (prompt + the true output "
                    "rounded up to a power of two) or oracle (prompt + the true output); reserved requests never "
                    "grow their KV")
    reserve_allocator: Literal["paged", "buddy"] = _f(
        "paged", doc="with a reserve: paged (the reservation in block_size blocks) or buddy (rounded up to a "
                     "power of two tokens: the contiguous buddy allocator of the vLLM paper's Orca)")
    prefill_first: Optional[bool] = _f(None, doc="continuous: vLLM V0's scheduler without chunked prefill: a step "
                                                 "that admits prompts carries no decodes (running requests stall "
                                                 "for it); false: prompts join the running decodes' step (Orca, "
                                                 "vLLM V1); null: the engine profile's (cost.engine): true for the "
                                                 "vLLM V0 profiles and sarathi-serve, false for the others")
    skip_unfit_prompts: bool = _f(False, doc="continuous: a waiting prompt that does not fit the token budget left "
                                             "next to the running decodes is skipped and the requests behind it "
                                             "are tried (vLLM V1 with chunked prefill off until vllm-project/vllm"
                                             "#28911, late 2025); false: it waits at the head of the queue, and "
                                             "the queue behind it too (vLLM V1 since)")
    full_prompt_admission: bool = _f(False, doc="chunked prefill: a waiting request is admitted only when the KV "
                                                "blocks of its whole prompt (prompt + output so far for a "
                                                "recompute; prefix-cache hits counted) are free above the "
                                                "watermark, though it takes only its first chunk's (vLLM V1's "
                                                "--scheduler-reserve-full-isl, vllm-project/vllm#37307, on by "
                                                "default in vLLM since, after the v0.15.1 servesim's vllm-v1 "
                                                "profile is fitted to); false: its first "
                                                "chunk's blocks suffice, and a later chunk that does not fit "
                                                "preempts. The vLLM V0 engine profiles take the whole prompt's "
                                                "blocks at admission anyway")
    spec: Optional[Spec] = _f(None, doc="speculative decoding (continuous, chunked_prefill); null: off")
    preset: Optional[str] = _f(None, doc="vllm_v1_serve | vllm_v1_offline: vLLM V1's scheduler defaults for the "
                                         "GPU and entry point (sim/inputs/presets.py), filling fields not given")
    prefill: Pool = _f(default_factory=Pool, doc="pd_split: the prefill pool")
    decode: Pool = _f(default_factory=Pool, doc="pd_split: the decode pool")
    link: Link = _f(default_factory=Link, doc="pd_split: the KV hand-off link")
    queue: Queue = _f(default_factory=Queue, doc="the waiting queue's order (not with static)")
    preemption_victim: Literal["auto", "newest", "lowest_priority", "largest_kv"] = _f(
        "auto", doc="which running request KV pressure preempts; auto: lowest_priority with queue.order "
                    "priority (vLLM), else newest")
    admission: Admission = _f(default_factory=Admission, doc="load shedding before a request queues")

    @property
    def is_deployment(self) -> bool:
        """Whether ``name`` is a deployment of two pools (a P/D split), not a per-replica policy."""
        from servesim.policies import DEPLOYMENTS

        return self.name in DEPLOYMENTS

    def runs_plugin(self) -> bool:
        """Whether a policy servesim does not ship decides (the deployment's, or a P/D pool's): a
        plug-in, which may read any field of this section."""
        from servesim.policies import POLICIES

        names = (self.prefill.policy, self.decode.policy) if self.is_deployment else (self.name,)
        return any(n not in POLICIES for n in names)

    def check(self, path):
        from servesim.plugins import resolve
        from servesim.policies import DEPLOYMENTS

        if self.name not in DEPLOYMENTS:
            resolve("policy", self.name, f"{path}.name", also=DEPLOYMENTS)
        else:
            for side in ("prefill", "decode"):
                inner = getattr(self, side).policy
                where = f"{path}.{side}.policy"
                if inner in DEPLOYMENTS or inner == "static":
                    raise InputError(f"{where}: {inner!r} cannot run inside a P/D pool (a pool's replicas take "
                                     "requests one step at a time: continuous, chunked_prefill or a plug-in)")
                resolve("policy", inner, where, without=("static",))
        if self.reserve != "none" and (self.name not in ("continuous", "chunked_prefill") or self.spec is not None):
            raise InputError(f"{path}.reserve: KV reservation at admission (Orca) works with continuous or "
                             f"chunked_prefill without speculative decoding, not {self.name}"
                             f"{' with policy.spec' if self.spec is not None else ''} (static batching always "
                             "reserves; set it to none)")
        if self.reserve_allocator != "paged" and self.reserve == "none":
            raise InputError(f"{path}.reserve_allocator: {self.reserve_allocator} allocates reservations; set "
                             f"{path}.reserve (max, pow2 or oracle) too, or leave it paged")
        if self.spec is not None and self.name not in ("continuous", "chunked_prefill"):
            raise InputError(f"{path}.spec: speculative decoding works with continuous or chunked_prefill, "
                             f"not {self.name}")
        if self.spec is not None and self.max_num_batched_tokens < self.spec.num_speculative_tokens + 1:
            # a decoding sequence verifies k + 1 tokens a step, all in one step's budget: below
            # that no decode is ever scheduled and the run could not go on
            k = self.spec.num_speculative_tokens
            raise InputError(f"{path}.max_num_batched_tokens={self.max_num_batched_tokens} is below the k + 1 = "
                             f"{k + 1} tokens a decoding sequence verifies in a step with speculative decoding "
                             f"({path}.spec.num_speculative_tokens={k}); raise the budget or lower k")
        if self.name == "static" and (self.queue.order != "fcfs" or self.preemption_victim != "auto"):
            # (the message names the field that is set: queue.order is fcfs when a victim is the culprit)
            where = f"{path}.queue.order" if self.queue.order != "fcfs" else f"{path}.preemption_victim"
            raise InputError(f"{where}: static batching takes its batch FCFS and never preempts; "
                             "queue orders and preemption victims apply to continuous, chunked_prefill and pd_split")
        if self.prefill_first and self.name in ("chunked_prefill", "static", *DEPLOYMENTS):
            # (it would be ignored: chunked prefill mixes chunks into the decodes' step by design,
            # static batching has no decodes running beside a prompt, and in a P/D split the
            # prefill pool runs no decodes while the decode pool recomputes in chunks)
            raise InputError(f"{path}.prefill_first: vLLM V0's prompt-only steps are a way to run continuous "
                             f"batching (whole prompts); {self.name} has no such steps, so it would change "
                             "nothing; set policy.name: continuous, or leave prefill_first null")
        if self.prefix_caching and self.name == "static":
            raise InputError(f"{path}.prefix_caching: static batching pads every prompt of a batch and reserves "
                             "its slots whole, so it never reuses cached blocks; use continuous, chunked_prefill or "
                             "pd_split, or set it to false")


@dataclass(frozen=True)
class SharedPrefix:
    """A share of requests start with one of ``groups`` common prefixes (e.g. system prompts) of
    ``tokens`` tokens; for them the prompt length drawn is what follows the prefix."""

    tokens: int = _f(gt=0, le=MAX_TOKENS, doc="prefix length, tokens (added to the prompts that have it)")
    fraction: float = _f(1.0, ge=0, le=1, doc="share of requests with a prefix")
    groups: int = _f(1, gt=0, le=1 << 40, doc="how many different prefixes (requests pick one uniformly)")


@dataclass(frozen=True)
class Workload:
    arrival: Optional[Arrival] = _f(None, doc="the arrival process (or filled by a preset)")
    prompt_tokens: Optional[LengthDist] = _f(None, doc="prompt length distribution, tokens (or filled by a preset)")
    output_tokens: Optional[LengthDist] = _f(None, doc="output length distribution, tokens (or filled by a preset)")
    num_requests: Optional[int] = _f(None, gt=0, le=MAX_REQUESTS, doc="requests to send (with sessions: turns); give "
                                                                      "this and/or duration_s")
    duration_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="arrivals stop and the run ends at this time")
    shared_prefix: Optional[SharedPrefix] = _f(None, doc="a share of requests start with a common prefix (prefix "
                                                         "caching)")
    preset: Optional[str] = _f(None, doc="fills arrival, prompt_tokens, output_tokens not given (azure_conv "
                                         "azure_code arxiv_summarization: sim/inputs/presets.py)")
    trace: Optional[Trace] = _f(None, doc="replay a trace file's arrivals and lengths")
    classes: Optional[tuple[RequestClass, ...]] = _f(None, doc="a mix of request classes, each with its own "
                                                               "lengths, share or rate, SLO and priority")
    clip_to_context: bool = _f(True, doc="shorten prompts/outputs that exceed the model's context length")
    dataset: Optional[Dataset] = _f(None, doc="prompt (and reply) lengths from a dataset file")
    sessions: Optional[Sessions] = _f(None, doc="multi-turn sessions (the prefix cache serves earlier turns)")

    @staticmethod
    def expand(data, path):
        from servesim.inputs.presets import expand_preset
        return expand_preset(data, path, ("arrival", "prompt_tokens", "output_tokens"))

    def check(self, path):
        self._check_fields(path)
        from servesim.inputs.arrivals import check_segments  # (arrivals imports this module)

        for where, arrival in self._arrivals(path):
            check_segments(arrival, self.num_requests, self.duration_s, where)
        a = self.arrival
        if isinstance(a, ClosedLoopArrival) and self.num_requests is not None and self.duration_s is None:
            span = a.think_time_s * self.num_requests / a.clients  # each client thinks before each request
            if span > MAX_SECONDS:
                raise InputError(f"{path}.arrival: {a.clients} clients thinking {a.think_time_s:g} s before each of "
                                 f"{self.num_requests} requests span ~{span:.3g} s of simulated time; at most "
                                 f"{MAX_SECONDS:.0e} s (beyond it times no longer resolve a step): shorten "
                                 "think_time_s, add clients or set workload.duration_s")

    def _arrivals(self, path):
        """(field path, process) of every arrival process the workload draws from."""
        if self.arrival is not None:
            yield f"{path}.arrival", self.arrival
        for i, c in enumerate(self.classes or ()):
            if c.arrival is not None:
                yield f"{path}.classes[{i}].arrival", c.arrival

    def _check_fields(self, path):
        if self.dataset is not None or self.sessions is not None:
            self._check_dataset_sessions(path)
            if isinstance(self.arrival, AllAtOnceArrival) and self.num_requests is None:
                raise InputError(f"{path}.num_requests is needed with arrival process all_at_once")
            return
        replay = self.trace is not None and self.arrival is None
        if self.num_requests is None and self.duration_s is None and not replay:
            raise InputError(f"{path}: give num_requests or duration_s (or both)")
        if self.trace is not None:
            for k in ("prompt_tokens", "output_tokens", "classes"):
                if getattr(self, k) is not None:
                    raise InputError(f"{path}.{k}: lengths come from {path}.trace; remove one of them")
            if self.trace.loop and self.num_requests is None and self.duration_s is None:
                raise InputError(f"{path}.trace.loop needs {path}.num_requests or {path}.duration_s")
            if self.trace.sample and self.arrival is None:
                raise InputError(f"{path}.trace.sample needs {path}.arrival (sampled rows have no arrival times)")
            # (options that would change nothing: refused rather than ignored)
            if isinstance(self.arrival, AllAtOnceArrival) and self.num_requests is None:
                # (as without a trace: duration_s does not say how many arrive at once; it read as
                # an endless batch, "the run needs at least inf GiB of memory")
                raise InputError(f"{path}.num_requests is needed with arrival process all_at_once (the trace gives "
                                 "only the lengths)")
            if self.trace.sample and self.trace.loop:
                raise InputError(f"{path}.trace.loop: sampled rows are drawn with replacement and never run out, so "
                                 "loop changes nothing; remove it")
            if self.trace.speedup != 1.0 and self.arrival is not None:
                raise InputError(f"{path}.trace.speedup: with {path}.arrival the arrival times come from that process "
                                 "and the trace gives only lengths, so speedup changes nothing; scale the process's "
                                 f"rate instead, or remove {path}.arrival to replay the trace's own times")
            for k in ("start_s", "end_s"):  # (the lengths were taken from every row, the window's or not)
                if getattr(self.trace, k) is not None and self.arrival is not None:
                    raise InputError(f"{path}.trace.{k}: with {path}.arrival the trace gives only lengths, from its "
                                     "rows in file order, so a window of its arrival times changes nothing; cut the "
                                     f"rows from the file instead, or remove {path}.arrival to replay the window")
            return
        if self.classes is not None:
            self._check_classes(path)
        elif self.arrival is None:
            raise InputError(f"{path}.arrival is missing: expected an arrival process (or a trace, or classes "
                             f"with their own rate_rps/arrival)")
        if isinstance(self.arrival, AllAtOnceArrival) and self.num_requests is None:
            raise InputError(f"{path}.num_requests is needed with arrival process all_at_once")
        if self.classes is None:
            for k in ("prompt_tokens", "output_tokens"):
                if getattr(self, k) is None:
                    raise InputError(f"{path}.{k} is missing: expected a length distribution (or a preset)")

    def _check_dataset_sessions(self, path):
        what = f"{path}.dataset" if self.dataset is not None else f"{path}.sessions"
        for k in ("trace", "classes"):
            if getattr(self, k) is not None:
                raise InputError(f"{path}.{k}: cannot be combined with {what}; remove one of them")
        if self.arrival is None:
            raise InputError(f"{path}.arrival is missing: {what} needs an arrival process "
                             f"({'of sessions' if self.sessions is not None else 'the dataset has no times'})")
        if self.num_requests is None and self.duration_s is None:
            raise InputError(f"{path}: give num_requests or duration_s (or both)")
        if self.dataset is not None and self.dataset.sample and self.dataset.loop:
            raise InputError(f"{path}.dataset.loop: sampled rows are drawn with replacement and never run out, so "
                             "loop changes nothing; remove it")
        if self.dataset is not None and self.prompt_tokens is not None:
            raise InputError(f"{path}.prompt_tokens: prompt lengths come from {path}.dataset; remove one of them")
        if self.sessions is not None:
            if self.shared_prefix is not None:
                raise InputError(f"{path}.shared_prefix: sessions already share their history through the prefix "
                                 f"cache; remove {path}.shared_prefix")
            if self.dataset is None:
                for k in ("prompt_tokens", "output_tokens"):
                    if getattr(self, k) is None:
                        raise InputError(f"{path}.{k} is missing: synthetic sessions draw each turn's new message "
                                         f"(prompt_tokens) and reply (output_tokens); or give {path}.dataset")
                if self.sessions.turns is None:
                    raise InputError(f"{path}.sessions.turns is missing: a length distribution of turns per session "
                                     f"(e.g. {{dist: uniform, min: 2, max: 8}}), or give {path}.dataset")

    def _check_classes(self, path):
        if not self.classes:
            raise InputError(f"{path}.classes must list at least one class")
        names = [c.name for c in self.classes]
        for i, n in enumerate(names):
            if n in names[:i]:
                raise InputError(f"{path}.classes[{i}].name: {n!r} is used twice")
        shared = [c.share is not None for c in self.classes]
        if any(shared) and not all(shared):
            raise InputError(f"{path}.classes: either every class has a share (of {path}.arrival) or every "
                             f"class has its own rate_rps/arrival")
        if all(shared) and self.arrival is None:
            raise InputError(f"{path}.arrival is missing: classes with a share split {path}.arrival")
        if not any(shared) and self.arrival is not None:
            raise InputError(f"{path}.arrival: classes have their own rate_rps/arrival; remove {path}.arrival")
        for k in ("prompt_tokens", "output_tokens"):
            if getattr(self, k) is not None:
                raise InputError(f"{path}.{k}: with classes, lengths are given per class")


@dataclass(frozen=True)
class Slo:
    ttft_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="None: no TTFT limit")
    tpot_s: Optional[float] = _f(None, gt=0, le=MAX_SECONDS, doc="None: no TPOT limit")


@dataclass(frozen=True)
class Cost:
    engine: str = _f("vllm-v1", doc="engine profile (hf-eager sarathi-serve sglang trt-llm vllm-v0 vllm-v0.2 "
                                    "vllm-v0.2.3 vllm-v1: sim/cost/engines.py): per-step CPU overhead and its "
                                    "overlap with the GPU, CUDA graphs, the API server's time per request, prompt "
                                    "padding (vllm-v0.2.3)")
    step_overhead_s: Optional[float] = _f(None, ge=0, le=60,
                                          doc="fixed per-step CPU time: scheduling, input preparation, sampling; "
                                              "None: the calibration's fit if it has one, else the engine profile's")
    per_seq_overhead_s: Optional[float] = _f(None, ge=0, le=1, doc="per-step CPU time per scheduled sequence; None: "
                                                            "the calibration's fit if it has one, else the profile's")
    per_token_overhead_s: Optional[float] = _f(None, ge=0, le=1, doc="per-step CPU time per scheduled token; None: the "
                                                              "engine profile's")
    overhead_overlap: Optional[float] = _f(None, ge=0, le=1, doc="share f of the CPU work that runs while the GPU "
                                                                "works: step = gpu + (1 - f) cpu + max(0, f cpu - "
                                                                "gpu); None: the engine profile's")
    api_server: bool = _f(True, doc="add the profile's API-server time to TTFT and E2E (client-side latencies); "
                                    "false: the engine's own")
    allreduce: Optional[Literal["custom", "nccl"]] = _f(
        None, doc="TP all-reduce inside the GPU's NVLink domain: custom (the engine's one-/two-shot kernels up to "
                  "8 MiB where faster, as vLLM, SGLang and TensorRT-LLM run them) or nccl (NCCL alone, e.g. HF eager); "
                  "null: the engine profile's (nccl for hf-eager, sarathi-serve, vllm-v0.2 and vllm-v0.2.3, else "
                  "custom)")
    calibration: str = _f("auto", doc="auto: shipped fit of the GPU (or the closest calibrated GPU's); "
                                      "none: v0 round figures; or a path to a calibration YAML")
    profiles: Optional[str] = _f(None, doc="a Vidur-format profiling folder (compute/<device>/<org>/<model>/mlp.csv, "
                                           "or a folder of mlp.csv files): price the per-layer kernels of this "
                                           "model and TP from its measured times (sim/cost/measured.py); "
                                           "None: the calibrated roofline")
    gpu_hour_usd: Any = _f(None, doc="USD per GPU-hour: a number for every GPU of the deployment, or a mapping "
                                     "{gpu name: number}, 0 (free) or from 1e-6 to 1e6; null: the catalog's "
                                     "on-demand list price (sim/cost/economics.py)")
    gpu_power_w: Any = _f(None, doc="board power (TDP) in watts: a number, or {gpu name: number}, from 1e-6 "
                                    "to 1e6; null: the catalog's datasheet figure")

    def check(self, path):
        from servesim.cost.economics import check_override
        from servesim.cost.engines import get_profile

        get_profile(self.engine, f"{path}.engine")
        check_override(self.gpu_hour_usd, f"{path}.gpu_hour_usd", positive=False)
        check_override(self.gpu_power_w, f"{path}.gpu_power_w", positive=True)


@dataclass(frozen=True)
class Scenario:
    """A scenario file's top level: the fields below. In Python a frozen dataclass (its sections
    too), made by ``servesim.load_scenario`` or ``servesim.scenario_from_dict``, which check every
    field; ``to_dict()`` gives it back as plain data, and one changed with ``dataclasses.replace``
    is checked the same way when ``servesim.simulate`` gets it."""

    model: str = _f(doc="catalog id (servesim.inputs.specs; a chat / instruct variant of a catalog model with the "
                             "same architecture is priced as it: MODEL_ALIASES), or a path to a Hugging Face "
                             "config.json (or its folder)")
    hardware: Hardware = _f(doc="the GPUs of one replica")
    workload: Workload = _f(doc="the requests: arrivals and lengths, or a trace, dataset, sessions or classes")
    name: str = _f("unnamed", doc="a label, written into summary.json")
    seed: int = _f(0, ge=0, le=2**63 - 1, doc="seeds the one random generator that draws the whole workload")
    memory: Memory = _f(default_factory=Memory, doc="KV cache sizing")
    cluster: Cluster = _f(default_factory=Cluster, doc="replicas and the router")
    policy: Policy = _f(default_factory=Policy, doc="the batching policy, its limits, queue order and admission "
                                                    "control")
    slo: Slo = _f(default_factory=Slo, doc="latency objectives (SLO attainment and goodput)")
    cost: Cost = _f(default_factory=Cost, doc="how steps are priced: engine profile, overheads, calibration")
    engine: Literal["fast", "reference"] = _f("fast", doc="fast: the event-skipping engine; reference: the plain "
                                                          "step-by-step loop (same results, slower)")

    @staticmethod
    def expand(data, path):
        from servesim.inputs.presets import expand_policy_preset
        return expand_policy_preset(data)

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    @property
    def prefill_first_steps(self) -> bool:
        """``policy.prefill_first`` as the run takes it: the scenario's, else (null) the engine
        profile's for a continuous policy (``servesim.cost.engines.prefill_first_for``)."""
        from servesim.cost.engines import prefill_first_for
        return prefill_first_for(self.policy.prefill_first, self.policy.name, self.cost.engine)

    def check(self, path):
        """Rules across sections: class names the policy and cluster refer to exist."""
        names = [c.name for c in self.workload.classes] if self.workload.classes else ["default"]
        refs = [(f"policy.admission.classes[{i}]", n) for i, n in enumerate(self.policy.admission.classes or ())]
        refs += [(f"cluster.class_replicas[{i}].name", c.name) for i, c in enumerate(self.cluster.class_replicas or ())]
        for where, n in refs:
            if n not in names:
                raise InputError(f"{where}: no request class {n!r};{did_you_mean(n, names)}")
        first: dict = {}
        for i, c in enumerate(self.cluster.class_replicas or ()):
            if c.name in first:  # (the router's table would keep only the last entry)
                raise InputError(f"cluster.class_replicas[{i}].name: {c.name!r} is listed twice "
                                 f"(cluster.class_replicas[{first[c.name]}] lists it); give each class one entry "
                                 "with all of its replicas")
            first[c.name] = i
        routed = self.policy.prefill.replicas if self.policy.name == "pd_split" else self.cluster.replicas
        for i, c in enumerate(self.cluster.class_replicas or ()):
            if max(c.replicas) >= routed:
                raise InputError(f"cluster.class_replicas[{i}].replicas: {max(c.replicas)} is not a replica; the "
                                 f"router chooses among {routed} (0 to {routed - 1})")
        if self.policy.admission.ttft_slo and self.slo.ttft_s is None and not any(
                c.slo.ttft_s is not None for c in self.workload.classes or ()):
            raise InputError("policy.admission.ttft_slo: no TTFT SLO to hold (set slo.ttft_s or a class's slo.ttft_s)")


def _plain(x):
    """Tuples (list fields of the frozen dataclasses) -> lists, so that safe YAML can write them."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def read_yaml(path: str | Path) -> dict:
    return read_mapping(path, "scenario")


# vLLM's engine arguments (``vllm serve --help``) by where the same setting lives in a scenario: a
# scenario written with vLLM's name gets this in schema.build's unknown-field error
VLLM_ARGUMENTS = {
    "tensor_parallel_size": "hardware.tp", "pipeline_parallel_size": "hardware.pp",
    "data_parallel_size": "cluster.replicas", "enable_expert_parallel": "hardware.expert_parallel",
    "enable_chunked_prefill": "policy.name: chunked_prefill", "enable_prefix_caching": "policy.prefix_caching",
    "preemption_mode": "policy.preemption", "scheduling_policy": "policy.queue.order",
    "num_speculative_tokens": "policy.spec.num_speculative_tokens", "speculative_config": "policy.spec",
    "kv_cache_dtype": "hardware.kv_dtype", "quantization": "hardware.dtype", "dtype": "hardware.dtype",
    "swap_space": "memory.swap_space_gib", "num_gpu_blocks_override": "memory.num_gpu_blocks",
    "gpu_memory_utilization": "memory.gpu_memory_utilization", "block_size": "memory.block_size",
    "max_num_seqs": "policy.max_num_seqs", "max_num_batched_tokens": "policy.max_num_batched_tokens",
}
# ... and ``vllm bench serve``'s: what the benchmark sends
VLLM_BENCH_ARGUMENTS = {
    "num_prompts": "workload.num_requests", "request_rate": "workload.arrival.rate_rps",
    "burstiness": "workload.arrival: {process: gamma, cv: 1/sqrt(burstiness)}",
    "max_concurrency": "workload.arrival: {process: closed_loop, clients: N}",
    "random_input_len": "workload.prompt_tokens", "random_output_len": "workload.output_tokens",
    "dataset_path": "workload.dataset.path",
}


def _hint(tool: str, name: str, where: str) -> tuple[str, str]:
    """``FIELD_HINTS``' entry for ``tool``'s ``name``, set here by ``where`` (a field, or a field and
    its value, "policy.name: chunked_prefill"): the field, and the hint with {target} for it."""
    target, colon, value = where.partition(":")
    return target, f"{tool}'s {name} is {{target}}{colon}{value} here"


FIELD_HINTS.update({k: _hint(tool, k, v) for tool, table in (("vLLM", VLLM_ARGUMENTS),
                                                               ("vllm bench serve", VLLM_BENCH_ARGUMENTS))
                    for k, v in table.items()})
FIELD_HINTS["max_model_len"] = ("model", "vLLM's max_model_len is the model's context here: max_position_embeddings "
                                "of its config.json (model: a path to one)")


def default_scenario_path() -> Path:
    return Path(str(resources.files("servesim.scenarios") / "default.yaml"))


def packaged_scenarios() -> list[str]:
    """The packaged scenarios' names (``chat``, ``lessons/offline``, ``reproduce/sarathi-mistral7b``)."""
    root = default_scenario_path().parent
    return sorted(str(f.relative_to(root).with_suffix("")).replace(os.sep, "/") for f in root.rglob("*.yaml"))


def packaged_scenario(name: str) -> Path | None:
    """The packaged scenario a name given on the command line means, or None: ``chat``,
    ``chat.yaml`` and ``scenarios/chat.yaml`` (the docs' paths, typed outside a checkout) are
    ``servesim.scenarios``' ``chat.yaml``; ``lessons/offline`` its lesson. Absolute paths and
    paths that leave the folder are never packaged ones."""
    rel = str(name).replace("\\", "/")
    while rel.startswith("./"):
        rel = rel[2:]
    if rel.startswith("scenarios/"):
        rel = rel[len("scenarios/"):]
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(x in ("", ".", "..") for x in parts):
        return None
    stem = rel[:-5] if rel.endswith(".yaml") else rel
    return default_scenario_path().parent / (stem + ".yaml") if stem in packaged_scenarios() else None


def scenario_file(path: str | Path) -> Path:
    """The file a scenario path given from Python means: the path when something is there, else
    the packaged scenario of that name as the command line finds it (``chat``, ``lessons/offline``,
    the docs' ``scenarios/chat.yaml`` outside a checkout: ``packaged_scenario``). A bare name that
    is neither is refused with the packaged names; any other path is returned for its reader's
    "does not exist"."""
    if os.path.lexists(path):
        return Path(path)
    packaged = packaged_scenario(str(path))
    if packaged is not None:
        return packaged
    given = str(path)
    if given.strip() and "/" not in given and os.sep not in given and not given.endswith((".yaml", ".yml")):
        raise InputError(f"scenario {given!r} does not exist: no such file here, and no packaged scenario of that "
                         f"name;{did_you_mean(given, packaged_scenarios())}")
    return Path(path)


def load_scenario(path: str | Path | None = None, overrides: list[str] = (), seed: int | None = None) -> Scenario:
    """Read, override and validate a scenario file (the packaged default when ``path`` is None; a
    packaged scenario's name, ``chat`` or ``scenarios/chat.yaml``, from any folder: ``scenario_file``).
    ``overrides``: a list of ``"dotted.key=value"`` strings (as ``--set`` takes them); ``seed``:
    the scenario's ``seed`` instead of the file's (a whole number >= 0, as ``--seed``). A bad file
    or value is an ``InputError`` naming the file and field; a path or overrides of the wrong type
    a ``TypeError``."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_scenario(path): a file path (str or pathlib.Path) or None for the packaged "
                        f"default, got {type(path).__name__}")
    overrides = override_texts(overrides, "load_scenario(overrides=...)")
    check_overrides(overrides)
    path = default_scenario_path() if path is None else scenario_file(path)
    data = apply_overrides(read_yaml(path), overrides)
    data.pop("sweep", None)  # a sweep: {grid: ...} block is read by servesim sweep (sim/studies/sweep.py)
    if seed is not None:
        data["seed"] = seed
    try:
        return scenario_from_dict(data)
    except InputError as e:
        raise InputError(f"{path}: {e}{_set_by(str(e), overrides)}") from None


def _set_by(message: str, overrides) -> str:
    """" (given by --set KEY=VALUE)" when the field an error names (its first words, a dotted path)
    is one an override set, lies inside one, or is refused for a value one set inside it (``--set
    workload.arrival.think_time_s.x=1`` made think_time_s a mapping: it was blamed on an earlier
    ``--set workload.arrival=...``): the file alone would not have the value."""
    import re

    m = re.match(r"[A-Za-z_][\w.\[\]]*", message)
    if not m:
        return ""
    field = m.group(0)
    for text in reversed(overrides):  # (the last --set of a key is the one that holds)
        key = text.split("=", 1)[0].strip()
        # (one inside the field: only for the field's value refused, "think_time_s must be a number,
        # got {'x': 1}"; "workload: ..." is not about every --set workload.* given)
        inside = key.startswith((field + ".", field + "[")) and message.startswith(field + " must be ")
        if key and (field == key or field.startswith((key + ".", key + "[")) or inside):
            return f" (given by --set {clip(text, 80)})"
    return ""


# The scenarios built here, checked field by field (by id, while they live). Any other, e.g. one
# made with dataclasses.replace, skipped every check: ``checked`` checks it before a run.
_CHECKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def scenario_from_dict(data: dict) -> Scenario:
    """A validated ``Scenario`` from a mapping shaped as a scenario file (``InputError`` naming the
    field otherwise). A ``sweep`` block (``servesim sweep``'s grid) is left out, as ``load_scenario``
    leaves it out of a file."""
    if not isinstance(data, dict):
        # (None is what an empty YAML file reads as: "got NoneType", as the CLI once said of one)
        got = "None: an empty document (no fields)" if data is None else type(data).__name__
        raise InputError(f"a scenario must be a mapping, got {got}")
    if "sweep" in data:
        data = {k: v for k, v in data.items() if k != "sweep"}
    scenario = build(Scenario, data, "")
    _CHECKED[id(scenario)] = scenario
    return scenario


# A scenario changed in Python, by id while it lives: (a weak reference to it, the scenario its data builds).
_REBUILT: dict = {}


def checked(scenario: Scenario, who: str) -> Scenario:
    """``scenario``, checked as a scenario file is unless this module built it: a field changed in
    Python (``dataclasses.replace(sc, seed=-1)``, ``replicas=0``) ran into numpy's or a
    ZeroDivisionError deep in the run, or into a silently wrong one; now an ``InputError`` naming
    the field, led by ``who``. Such a scenario is returned as its data builds it (the scenario the
    check accepted): a section given as a mapping (``slo={"ttft_s": 2}``) or a whole number given
    as a float (``num_requests=5.0``) passed the check and then failed deep in the run."""
    if _CHECKED.get(id(scenario)) is scenario:
        return scenario
    key = id(scenario)
    hit = _REBUILT.get(key)
    if hit is not None and hit[0]() is scenario:
        return hit[1]
    try:
        rebuilt = scenario_from_dict(scenario.to_dict())
    except InputError as e:
        raise InputError(f"{who}: {e}") from None
    _REBUILT[key] = (weakref.ref(scenario), rebuilt)
    weakref.finalize(scenario, _REBUILT.pop, key, None)
    return rebuilt


def scenario_to_yaml(s: Scenario) -> str:
    return dump_yaml(s.to_dict(), sort_keys=False)
