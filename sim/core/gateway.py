"""The cluster's door: what a request carries to the schedulers, and admission control.

``Gateway.annotate`` gives each arriving request what a scheduler may know of it besides its
prompt: its class's ``priority``, its deadline (arrival + the class's TTFT SLO, for ``edf``) and,
with ``policy.queue.order: sjf_predicted``, a predicted output length (``OutputPredictor``: the
true length seen through a seeded error model, as a length predictor in front of a real
scheduler would give it).

``Admission`` sheds load before a request is queued (``policy.admission``), for the classes it
applies to: a token bucket at the door (before routing), then, on the replica the router chose,
a cap on the requests or prompt tokens waiting there, and the TTFT rule: reject when the
predicted TTFT exceeds the class's TTFT SLO. The TTFT prediction (``predicted_ttft_s``) takes
the larger of two estimates, each what one bottleneck alone would impose, from state a real
scheduler has:

* compute: the time the replica needs, at its current load, to compute the prompt tokens ahead
  of the request (those of the waiting requests ranked before it in the queue's order, and what
  the running requests still have to prefill) plus its own prompt, in steps of at most
  ``max_num_batched_tokens`` tokens, each carrying one decode token for every running request,
  priced by the replica's cost model at their mean context;
* admission: the waiting requests ranked before it (plus itself when ``max_num_seqs`` requests
  run) divided by the rate at which the replica admitted requests recently (its last 32
  admissions, up to now), plus its own prefill step: what a replica bound by ``max_num_seqs`` or
  KV capacity, which admits only as running requests finish, imposes.

It does not foresee later arrivals that outrank the request, nor preemptions.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque

import numpy as np

from servesim.core.batch import model_batch


class OutputPredictor:
    """``predict(request) -> tokens``: a predicted output length (``policy.queue.predictor``, see
    ``servesim.inputs.scenario.Predictor``). Its noise is drawn per request id from generators
    seeded with (seed, block of 4096 ids), so a request gets the same prediction whatever order
    requests arrive in, in every engine."""

    BLOCK = 4096

    def __init__(self, cfg, seed: int):
        self.cfg = cfg
        self.seed = seed
        self._blocks: dict = {}
        self.edges = list(cfg.edges)
        lows = [1] + self.edges
        highs = self.edges + [2 * self.edges[-1]]
        self.middles = [max(1, round((lo + hi) / 2)) for lo, hi in zip(lows, highs)]

    def _noise(self, rid: int):
        b, i = divmod(rid, self.BLOCK)
        block = self._blocks.get(b)
        if block is None:
            rng = np.random.default_rng([self.seed, 7, b])
            block = self._blocks[b] = (rng.standard_normal(self.BLOCK).tolist() if self.cfg.kind == "lognormal"
                                       else rng.random((self.BLOCK, 2)).tolist())
        return block[i]

    def predict(self, req) -> int:
        cfg = self.cfg
        if cfg.kind == "lognormal":
            return max(1, round(req.output_tokens * math.exp(cfg.sigma * self._noise(req.request_id))))
        u, v = self._noise(req.request_id)
        true = bisect.bisect_right(self.edges, req.output_tokens)  # the range [edge, next edge) holding it
        n = len(self.middles)
        if u < cfg.accuracy or n == 1:
            b = true
        else:
            j = min(int(v * (n - 1)), n - 2)
            b = j if j < true else j + 1
        return self.middles[b]


class Gateway:
    """Per run: class attributes for arriving requests (``annotate``) and admission control
    (``admission``: an ``Admission`` or None)."""

    def __init__(self, scenario, seed: int):
        classes = scenario.workload.classes or ()
        slo = scenario.slo
        self.priority = [c.priority for c in classes] or [0]
        self.ttft_s = [c.slo.ttft_s if c.slo.ttft_s is not None else slo.ttft_s for c in classes] or [slo.ttft_s]
        self.names = [c.name for c in classes] or ["default"]
        q = scenario.policy.queue
        self.predictor = OutputPredictor(q.predictor, seed) if q.order == "sjf_predicted" else None
        adm = scenario.policy.admission
        self.admission = Admission(adm, self.names, self.ttft_s) if adm.active else None

    def watch(self, replicas) -> None:
        """Let the replicas remember their recent admissions (the TTFT rule reads them)."""
        if self.admission is not None and self.admission.reads_state:
            for r in replicas:
                r.admissions = deque(maxlen=ADMISSIONS_KEPT)

    @staticmethod
    def needed(scenario) -> bool:
        """Whether requests need anything set at the door (else the cluster skips it)."""
        classes = scenario.workload.classes or ()
        return (any(c.priority for c in classes) or scenario.policy.queue.order in ("edf", "sjf_predicted")
                or scenario.policy.admission.active)

    def annotate(self, req) -> None:
        c = req.cls
        req.priority = self.priority[c]
        ttft = self.ttft_s[c]
        if ttft is not None:
            req.deadline_s = req.arrival_s + ttft
        if self.predictor is not None:
            req.predicted_output_tokens = self.predictor.predict(req)


class Admission:
    """``policy.admission``'s rules; ``at_door`` (before routing) and ``at_replica`` (on the
    chosen replica) return the reason to reject, or None."""

    def __init__(self, cfg, class_names, ttft_s):
        self.cfg = cfg
        self.applies = None if cfg.classes is None else {class_names.index(n) for n in cfg.classes}
        tb = cfg.token_bucket
        self.rate, self.burst = (tb.rate_rps, tb.burst) if tb is not None else (None, None)
        self.tokens = self.burst
        self.last_s = 0.0
        self.ttft_s = ttft_s
        self.reads_state = cfg.ttft_slo  # the prediction reads the replica's running requests

    def applies_to(self, req) -> bool:
        return self.applies is None or req.cls in self.applies

    def at_door(self, req, now: float) -> str | None:
        if self.rate is None:
            return None
        self.tokens = min(self.burst, self.tokens + (now - self.last_s) * self.rate)
        self.last_s = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (f"admission: token bucket empty (policy.admission.token_bucket: {self.rate:g} req/s, "
                f"burst {self.burst:g})")

    def at_replica(self, req, replica, index: int) -> str | None:
        """``index``: the replica's number in requests.csv (with pipeline virtual engines, its first
        engine's)."""
        cfg = self.cfg
        engines = getattr(replica, "engines", None)
        name = f"replica {index}" if engines is None else \
            f"replica {index}, virtual engines {index}-{index + len(engines) - 1}"
        if cfg.max_queue is not None:
            n = len(replica.waiting) + len(getattr(replica, "incoming", ()))  # (async scheduling's too)
            if n >= cfg.max_queue:
                return (f"admission: {n} requests already wait on {name} "
                        f"(policy.admission.max_queue={cfg.max_queue})")
        if cfg.max_queued_tokens is not None:
            queued = replica.waiting_tokens  # (async scheduling's arrivals too)
            if queued + req.prompt_tokens > cfg.max_queued_tokens:
                return (f"admission: {queued} prompt tokens already wait on {name}, {req.prompt_tokens} "
                        f"more exceed policy.admission.max_queued_tokens={cfg.max_queued_tokens}")
        limit = self.ttft_s[req.cls] if cfg.ttft_slo else None
        if limit is not None:
            t = predicted_ttft_s(req, replica, req.arrival_s)
            if t > limit * cfg.ttft_slo_share:
                share = f" x policy.admission.ttft_slo_share={cfg.ttft_slo_share:g}" if cfg.ttft_slo_share < 1 else ""
                return f"admission: predicted TTFT {t:.3g} s exceeds the TTFT SLO {limit:g} s{share}"
        return None


def _engine(replica):
    """The scheduler that will take a request sent to ``replica`` (a replica, or the virtual
    engine a ``VirtualEngines`` group picks)."""
    engines = getattr(replica, "engines", None)
    if engines is None:
        return replica
    return min(engines, key=type(replica)._unfinished)


def requests_ahead(req, engine) -> tuple[int, int]:
    """(requests, prompt tokens) waiting on ``engine`` that it admits before ``req``: all of
    them under FCFS (the counters the replica keeps: O(1)), else those ranked before it in the
    queue's order (its equals too: they came first); those that arrived during its step in
    flight (async scheduling) included. A
    waiting request has computed nothing (a preempted one recomputes its prompt from scratch),
    so its tokens are all still to prefill."""
    waiting = engine.waiting
    key = getattr(waiting, "key", None)
    if key is None:
        return len(waiting) + len(engine.incoming), engine.waiting_tokens
    k = key(req)
    n, tokens = waiting.ranked_before(k)
    for r in engine.incoming:  # (arrivals during the step in flight: a few; before it, so its equals too)
        if key(r) <= k:
            n += 1
            tokens += r.num_tokens
    return n, tokens


def prefill_tokens_ahead(engine, queued_tokens: int) -> int:
    """Prompt tokens ``engine`` computes before a request's: ``queued_tokens`` of the waiting
    requests ranked before it (``requests_ahead``) and the rest of the prompts its running
    requests prefill."""
    tokens = queued_tokens
    for r in itertools.chain(engine.running, engine.admitting()):
        # (the decode set's members have no prompt left)
        left = r.num_tokens - r.num_computed_tokens
        if left > 1 or not r.num_output_done:
            tokens += left
    return tokens


ADMISSIONS_KEPT = 32  # admissions a replica remembers to measure its recent admission rate


def predicted_ttft_s(req, replica, now: float = 0.0) -> float:
    """The TTFT ``req`` would get on ``replica`` at time ``now`` (see the module docstring)."""
    e = _engine(replica)
    waits, queued = requests_ahead(req, e)
    n, ctx = e.decode_load()
    budget = getattr(e.policy, "max_num_batched_tokens", 8192)
    chunk = max(budget - n, 1)
    mean_ctx = ctx // n if n else 0
    priced: dict = {}
    model = e.cost_model.model

    def step_s(c: int) -> float:
        t = priced.get(c)
        if t is None:
            t = priced[c] = e.cost_model.step_time(model_batch(model, [(c, 0)], decode_set=(n, mean_ctx))).time_s
        return t

    def prefill_s(tokens: int) -> float:
        full, rest = divmod(tokens, chunk)
        return (full * step_s(chunk) if full else 0.0) + (step_s(rest) if rest else 0.0)

    compute = prefill_s(prefill_tokens_ahead(e, queued) + req.prompt_tokens)
    waits += n >= getattr(e.policy, "max_num_seqs", math.inf)
    times = e.admissions
    if not waits or not times or now <= times[0]:
        return compute
    rate = len(times) / (now - times[0])  # admissions per second, the dry spell up to now included
    return max(compute, waits / rate + prefill_s(req.prompt_tokens))
