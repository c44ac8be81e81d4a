"""``servesim plan``'s search space: deployment shapes, and what the cost model says about each
before anything is simulated.

A *shape* is a deployment without its size: GPU type, TP, PP and a colocated policy
(continuous batching, chunked prefill at a chunk size, or a plug-in policy named as
``module:Class`` or by its registered name, run with the scenario's budgets), or a P/D split (prefill GPU and TP,
decode GPU and TP, and a prefill:decode replica ratio). A *unit* is one replica of a colocated
shape, or ``p`` prefill + ``d`` decode replicas of a P/D shape; a deployment is ``k`` units. With
``cluster.class_replicas`` (the class_aware router's replica positions per request class) a unit
is ``block`` times that: the scenario's layout of the replicas the router chooses among, reduced to
its smallest block with the same share of replicas per set of classes (``class_layout``), which a
deployment of ``k`` units repeats ``k`` times (``p k`` times over a P/D split's prefill
replicas), so every class keeps its share of the replicas at every size.

Before simulating, each shape is checked three ways (``assess``):

1. **Memory fit**: ``prepare`` sizes the KV cache of every pool (``sim/core/kv.py`` ``size_kv``,
   the checks ``servesim validate`` runs): a shape whose weights leave no room for KV, or whose
   TP does not divide the model's heads, is pruned with that message.
2. **Latency floors**: each request's TTFT is at least its prompt's prefill alone on an idle
   replica (chunk by chunk at the token budget), its TPOT at least one decode step of a batch of
   one, its E2E their sum over its output, each with the API server's time as the client sees it
   (the entry pool's engine profile). If the SLO cannot hold even then (a percentile of the
   floors above its limit, or under ``--attainment`` too few requests within every limit), no
   replica count helps: pruned.
3. **Throughput bound**: an upper bound on the requests per second one unit can serve, from the
   cost model's step times: a step of the full token budget is the most tokens per second any
   step reaches (``token_tps``); a decode step of the largest batch the KV cache holds at the
   mean prompt length (or ``max_num_seqs``, or the token budget if smaller: each decode takes one
   of its tokens) the most output tokens per second (``decode_tps``).
   A colocated replica spends at least ``max((P + O - 1) / token_tps, O / decode_tps)`` seconds
   per request (P, O: mean prompt and output tokens; the last output token is never computed on,
   and the request holds a batch slot in O steps); a P/D unit serves at most
   ``min(p token_tps_prefill / P, d decode_tps_decode / (O - 1))`` (its prefill step samples each
   request's first token). So ``R`` needs at least
   ``ceil(R / bound)`` units; a shape needing more GPUs than ``--max-gpus`` is pruned.

The bounds assume the step costs grow with their tokens and sequences (they do in the roofline
model) and that a sequence's decode context is at least its prompt; with prefix caching the
prompt tokens of shared prefixes are taken as free, and with speculative decoding the decode
bound is dropped (a step then emits several tokens per sequence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servesim.core.batch import model_batch
from servesim.errors import InputError
from servesim.inputs.overrides import with_values
from servesim.outputs.plandoc import describe_shape, limit_text
from servesim.outputs.writer import name_part

POLICIES = ("continuous", "chunked_prefill", "pd_split")


@dataclass(frozen=True)
class Shape:
    """A deployment shape (see the module docstring); ``units`` sizes it."""

    kind: str  # "colocated" | "pd"
    gpu: str  # colocated: the GPU; P/D: the prefill pool's
    tp: int
    pp: int = 1
    policy: str = "continuous"  # colocated: continuous | chunked_prefill | a plug-in policy's name
    chunk: int | None = None  # chunked_prefill: the token budget per step
    decode_gpu: str | None = None  # P/D
    decode_tp: int | None = None
    ratio: tuple = (1, 1)  # P/D: prefill and decode replicas per unit
    block: int = 1  # replicas (P/D: of each pool's ratio) per unit: the class layout's block
    classes: tuple = ()  # ((class, positions in one block), ...): cluster.class_replicas of one block

    @property
    def key(self) -> str:
        """A stable name for folders and plan.json (one folder name: a GPU given as a YAML path,
        ``/data/my-gpu.yaml``, has its separators replaced, or its folders would land outside --out)."""
        gpu, decode_gpu = name_part(self.gpu), name_part(self.decode_gpu or "")
        if self.kind == "pd":
            p, d = self.ratio
            return f"pd-{gpu}-tp{self.tp}-x{p}-{decode_gpu}-tp{self.decode_tp}-x{d}"
        pol = ("cont" if self.policy == "continuous" else f"chunk{self.chunk}" if self.policy == "chunked_prefill"
               else name_part(self.policy))
        return f"{gpu}-tp{self.tp}" + (f"-pp{self.pp}" if self.pp > 1 else "") + f"-{pol}"

    def describe(self, units: int | None = None) -> str:
        """E.g. ``2 x h100-sxm TP4, continuous`` or ``P/D 1 x h100-sxm TP4 : 2 x a100-80g TP8``
        (``plandoc.describe_shape``, which plan.json's readers use on its shapes)."""
        return describe_shape(vars(self), units)

    def gpu_counts(self, units: int = 1) -> dict:
        """{GPU name: GPUs} of ``units`` units."""
        units *= self.block
        if self.kind == "pd":
            p, d = self.ratio
            out = {self.gpu: p * units * self.tp}
            out[self.decode_gpu] = out.get(self.decode_gpu, 0) + d * units * self.decode_tp
            return out
        return {self.gpu: units * self.tp * self.pp}

    def gpus(self, units: int = 1) -> int:
        return sum(self.gpu_counts(units).values())

    def fleet(self, units: int) -> str:
        """GPU type x count, e.g. ``8 x h100-sxm`` or ``4 x h100-sxm + 8 x a100-80g``."""
        return " + ".join(f"{n} x {g}" for g, n in self.gpu_counts(units).items())

    def overrides(self, units: int, base_policy: dict) -> dict:
        """The scenario fields (dotted keys) that make ``units`` units of this shape. ``base_policy``:
        the scenario's policy block (continuous, and a P/D split's whole-prompt prefill pool, keep its
        token budget unless it was a chunk size)."""
        # the scenario's budget was a chunk size: whole-prompt admission gets the schema's default
        chunk_budget = base_policy.get("name") == "chunked_prefill" or base_policy.get("preset")
        # the class layout repeated once per block of the replicas the router chooses among
        blocks = units * (self.ratio[0] if self.kind == "pd" else 1)
        layout = ({"cluster.class_replicas": [{"name": n, "replicas": [u * self.block + i for u in range(blocks)
                                                                        for i in pos]} for n, pos in self.classes]}
                  if self.classes else {})
        units *= self.block
        if self.kind == "pd":
            p, d = self.ratio
            out = {"policy.name": "pd_split", "hardware.gpu": self.gpu, "hardware.tp": self.tp, "hardware.pp": 1,
                   "cluster.replicas": 1, "policy.prefill.replicas": p * units, "policy.prefill.gpu": self.gpu,
                   "policy.prefill.tp": self.tp, "policy.decode.replicas": d * units,
                   "policy.decode.gpu": self.decode_gpu, "policy.decode.tp": self.decode_tp, **layout}
            # the prefill pool takes policy's budget where it sets none of its own; a whole-prompt
            # one (its default policy) rejects every prompt over a chunk size. (The decode pool's
            # steps are sized by max_num_seqs whatever its budget: simulation._prepare.)
            pool = base_policy.get("prefill") or {}
            if (chunk_budget and pool.get("max_num_batched_tokens") is None
                    and pool.get("policy", "continuous") != "chunked_prefill"):
                out["policy.prefill.max_num_batched_tokens"] = CONTINUOUS_BUDGET
            return out
        out = {"policy.name": self.policy, "hardware.gpu": self.gpu, "hardware.tp": self.tp, "hardware.pp": self.pp,
               "cluster.replicas": units, **layout}
        if self.policy == "chunked_prefill":
            out["policy.max_num_batched_tokens"] = self.chunk
        elif self.policy != "continuous":  # (a plug-in: the scenario's budgets, whatever they are)
            pass
        elif chunk_budget:
            out["policy.max_num_batched_tokens"] = CONTINUOUS_BUDGET
        return out


CONTINUOUS_BUDGET = 8192  # Policy.max_num_batched_tokens' default


def class_layout(class_replicas, routed: int) -> tuple[int, tuple]:
    """(block, ((class, positions), ...)): the scenario's ``cluster.class_replicas`` over its
    ``routed`` replicas (those the router chooses among) as its smallest block: replicas differ
    only in which classes may use them, so the layout is how many replicas each class set has,
    and ``b`` is ``routed`` over those counts' greatest common divisor (batch on [2, 3] of 4: two
    replicas batch may use and two it may not, a block of 2 with batch on [1]; batch on [3] of 4:
    a block of all 4). In a block, a class set's replicas keep their order in the scenario. A
    deployment of k blocks gives each class the same share of its replicas as the scenario
    (``Shape.overrides``)."""
    sig = [frozenset(c.name for c in class_replicas if i in c.replicas) for i in range(routed)]
    count: dict = {}
    for x in sig:
        count[x] = count.get(x, 0) + 1
    g = math.gcd(*count.values())
    kept: dict = {}
    order = []  # one block: the first count / g replicas of each class set, in the scenario's order
    for x in sig:
        if kept.get(x, 0) < count[x] // g:
            kept[x] = kept.get(x, 0) + 1
            order.append(x)
    return routed // g, tuple((c.name, tuple(i for i, x in enumerate(order) if c.name in x)) for c in class_replicas)


def enumerate_shapes(gpus, tps, pps, policies, chunks, ratios, mixed_pd: bool) -> list[Shape]:
    """Every shape of the search space once, in a fixed order (a value given twice, ``--tp 1,1``,
    made each shape twice: one key, both simulated and ranked, two identical rows)."""
    out = []
    for g in gpus:
        for tp in tps:
            for pp in pps:
                if "continuous" in policies:
                    out.append(Shape("colocated", g, tp, pp, "continuous"))
                if "chunked_prefill" in policies:
                    out += [Shape("colocated", g, tp, pp, "chunked_prefill", c) for c in chunks]
                out += [Shape("colocated", g, tp, pp, p) for p in policies if p not in POLICIES]  # plug-ins
    if "pd_split" in policies:
        for gp in gpus:
            for gd in (gpus if mixed_pd else [gp]):
                for tpp in tps:
                    for tpd in tps:
                        out += [Shape("pd", gp, tpp, 1, decode_gpu=gd, decode_tp=tpd, ratio=tuple(r)) for r in ratios]
    first: dict = {}
    for s in out:
        first.setdefault(s.key, s)
    return list(first.values())


# ---------------------------------------------------------------- the workload as the bounds see it
@dataclass(frozen=True)
class WorkloadStats:
    """Per-request token counts of the scenario's workload draw."""

    prompt: np.ndarray  # prompt tokens the prefill computes (shared prefixes left out with prefix caching)
    output: np.ndarray
    prompt_total: np.ndarray  # whole prompts (what the KV cache must hold)

    @property
    def mean_prompt(self) -> float:
        return float(self.prompt.mean())

    @property
    def mean_output(self) -> float:
        return float(self.output.mean())


def workload_stats(scenario) -> WorkloadStats:
    """The requests the scenario (a resolved ``Scenario``) generates with its seed."""
    from servesim.inputs.specs import get_model
    from servesim.inputs.workload import RequestSpecs, generate

    ctx = get_model(scenario.model).max_context_tokens
    specs = generate(scenario.workload, np.random.default_rng(scenario.seed), ctx, scenario.memory.block_size)
    if not isinstance(specs, RequestSpecs) or not len(specs):
        raise InputError("servesim plan needs an open-loop workload with requests (an arrival process with a rate; "
                         "not closed_loop or sessions)")
    return stats_from_specs(scenario, specs)


def stats_from_specs(scenario, specs) -> WorkloadStats:
    """``WorkloadStats`` of drawn requests (``RequestSpecs``) under ``scenario``'s prefix caching."""
    total = specs.prompt_tokens.astype(float)
    prompt = total
    if scenario.policy.prefix_caching and specs.prefix_tokens is not None:
        prompt = np.maximum(total - specs.prefix_tokens, 1.0)  # a cached shared prefix costs no prefill
    return WorkloadStats(prompt, specs.output_tokens.astype(float), total)


# ---------------------------------------------------------------- bounds from the cost model
def _step_s(cm, batch) -> float:
    """Time a step holds its replica's busiest resource: the step, or with overlapping pipeline
    stages its longest stage (the stages then work on other micro-batches meanwhile)."""
    cost = cm.step_time(batch)
    return max(cm.stage_times(cost, batch)) if cm.pp > 1 else cost.time_s


@dataclass(frozen=True)
class PoolBound:
    token_tps: float  # tokens per second of a full-budget step (any step's best)
    decode_tps: float  # output tokens per second of the largest decode batch (inf: not bounded)
    decode_batch: int  # that batch


def pool_bound(pool, mean_prompt: float, spec: bool, overlap: bool) -> PoolBound:
    """Upper bounds on one replica's token rates (see the module docstring). ``pool``: a
    ``PoolSetup``; ``overlap``: pipeline stages overlap (``hardware.pp_overlap``)."""
    cm = pool.cost_model
    step = _step_s if overlap else (lambda m, b: m.step_time(b).time_s)
    budget = pool.max_num_batched_tokens
    q = max(1, min(budget, int(round(mean_prompt))))  # sequences of the mean prompt, no context yet
    seqs = [(q, 0)] * (budget // q) + ([(budget % q, 0)] if budget % q else [])
    model = cm.model
    token_tps = budget / step(cm, model_batch(model, prefill=seqs))
    if spec:
        return PoolBound(token_tps, math.inf, 0)
    ctx = max(0, int(mean_prompt))
    engines = cm.pp if overlap else 1  # PP virtual engines each schedule up to max_num_seqs
    # (a decode takes one token of its step's budget: a budget below max_num_seqs caps the batch)
    seqs_per_step = min(pool.max_num_seqs, budget)
    # the KV a sequence holds: under a sliding window on every layer no more than the window's
    # (blocks wholly out of it are freed, ``kv.window_blocks``; the window's tokens, at least)
    held = ctx + 1 if model.sliding_window_tokens is None else min(ctx + 1, model.sliding_window_tokens)
    b = int(max(1, min(seqs_per_step * engines, pool.capacity.num_tokens // held)))
    return PoolBound(token_tps, b / step(cm, model_batch(model, decode_contexts=[ctx] * b)), b)


def unit_rate_bound(shape: Shape, setup, stats: WorkloadStats) -> tuple[float, dict]:
    """(upper bound on the requests per second one unit serves, the figures behind it)."""
    sc = setup.scenario
    spec = sc.policy.spec is not None
    overlap = sc.hardware.pp_overlap
    prompt, output = stats.mean_prompt, stats.mean_output
    pools = setup.pools_by_name
    if shape.kind == "pd":
        bp = pool_bound(pools["prefill"], prompt, spec, overlap)
        bd = pool_bound(pools["decode"], prompt, spec, overlap)
        p, d = shape.ratio
        # the prefill step samples each request's first token: the decode pool makes the other O - 1
        # (a bound over O undercounts it: 2x at O = 2, and plan then asks for units it does not need)
        decoded = output - 1
        rate = min(p * bp.token_tps / prompt, d * bd.decode_tps / decoded if decoded > 0 else math.inf)
        return rate * shape.block, {"prefill_token_tps": bp.token_tps, "decode_tps": bd.decode_tps,
                                    "decode_batch": bd.decode_batch}
    b = pool_bound(pools["colocated"], prompt, spec, overlap)
    # tokens computed: the prompt and every output token but the last (sampled, never fed back);
    # steps holding the request: O (its prefill step samples the first token)
    per_request_s = max((prompt + output - 1) / b.token_tps, output / b.decode_tps)
    return shape.block / per_request_s, {"token_tps": b.token_tps, "decode_tps": b.decode_tps,
                                         "decode_batch": b.decode_batch}


def _prefill_floor_s(cm, budget: int, prompt: int, cache: dict) -> float:
    """A prompt's prefill alone on an idle replica: chunks of ``budget`` tokens, one step each.
    Every prompt longer than m chunks starts with the same m full chunks: their running sums
    (``cache[None]``) are shared, so a prompt costs one step's price (its last chunk), not one per
    chunk (120,000-token prompts in 512-token chunks made validate take minutes)."""
    hit = cache.get(prompt)
    if hit is None:
        full = cache.setdefault(None, [0.0])  # full[m]: the first m full chunks, none of them sampling
        m = (prompt - 1) // budget  # full chunks before the last one (which samples the first token)
        while len(full) <= m:
            k = len(full) - 1
            b = model_batch(cm.model, prefill=[(budget, k * budget)])._replace(num_sampled=0)
            full.append(full[-1] + cm.step_time(b).time_s)
        last = model_batch(cm.model, prefill=[(prompt - m * budget, m * budget)])
        hit = cache[prompt] = full[m] + cm.step_time(last).time_s
    return hit


def latency_floors(kind: str, setup, stats: WorkloadStats) -> dict:
    """Per-request floors (seconds) on an idle deployment of ``kind`` ("colocated" | "pd", as
    ``Shape.kind``): {"ttft", "tpot", "e2e"} arrays over the workload draw, inf for a request no
    replica can take (rejected at arrival, ``Cluster.rejection_reason``: its KV needs more blocks
    than a replica has, its prompt exceeds a whole-prompt token budget, ...), the share of such
    requests and the commonest reason ("rejected_reason", None without any)."""
    pools = setup.pools_by_name
    pf = pools["prefill" if kind == "pd" else "colocated"]
    dc = pools["decode" if kind == "pd" else "colocated"]
    cache: dict = {}
    # (per distinct prompt length: a Python call per request took validate 9 s on 10 million)
    prompts, inverse = np.unique(np.asarray(stats.prompt, dtype=np.int64), return_inverse=True)
    ttft = np.array([_prefill_floor_s(pf.cost_model, pf.max_num_batched_tokens, p, cache) for p in prompts.tolist()],
                    dtype=np.float64)[np.ravel(inverse)]
    # a request's decode steps are each at least one step of it alone, at its shortest context (its
    # prompt), priced as the model attends (``model_batch``: its window); per distinct prompt length
    n = len(stats.prompt_total)
    totals, inverse = np.unique(np.asarray(stats.prompt_total, dtype=np.int64), return_inverse=True)
    cm = dc.cost_model
    tpot = np.array([cm.step_time(model_batch(cm.model, decode_contexts=[c])).time_s for c in totals.tolist()],
                    dtype=np.float64)[np.ravel(inverse)]
    step = float(tpot.min()) if n else 0.0
    if setup.scenario.policy.spec is not None:
        tpot, step = np.zeros(n), 0.0  # several tokens a step: no floor from one step
    # rejected at arrival: by the replicas' own rules (``Cluster.rejection_reason``: the KV blocks its
    # lengths need, a sliding window's at most, a P/D decode pool's; a whole-prompt budget below
    # the prompt; the context), asked once per distinct (prompt, output) pair
    from servesim.predictions import rejection_reasons

    by_pair, which, _ = rejection_reasons(setup, stats.prompt_total, stats.output)
    rejected = np.array([r is not None for r in by_pair], dtype=bool)[which] if n else np.zeros(0, dtype=bool)
    counts = np.bincount(which, minlength=len(by_pair)) if n else np.zeros(0, dtype=np.int64)
    top = max((i for i, r in enumerate(by_pair) if r is not None), key=lambda i: counts[i], default=None)
    # TTFT and TPOT are the client's: the API server (the entry pool's engine, as ``add_api_server``)
    # delays the first token by api_request_s and each later one by api_per_token_s more, so the
    # E2E below carries its api_s
    api = setup.pools[0].engine
    ttft = ttft + api.api_request_s
    tpot = tpot + api.api_per_token_s
    e2e = ttft + np.maximum(stats.output - 1, 0) * tpot
    tpot_arr = np.where(stats.output > 1, tpot, np.nan)
    inf = NEVER  # a large number, not inf: percentiles interpolate between neighbours
    # a rejected request never completes: every per-request limit misses it, as a run's verdict
    # (``capacity.evaluate``) and its SLO attainment count it, the queue's too (0 s alone otherwise)
    return {"ttft": np.where(rejected, inf, ttft), "tpot": np.where(rejected & (stats.output > 1), inf, tpot_arr),
            "e2e": np.where(rejected, inf, e2e), "queue": np.where(rejected, inf, 0.0), "rejected": rejected,
            "rejected_share": float(rejected.mean()) if len(rejected) else 0.0,
            "rejected_reason": None if top is None else by_pair[top], "decode_step_s": step}


def floor_violation(floors: dict, slo: dict, attainment: float | None) -> str | None:
    """Why the SLO cannot hold at any load (the floors alone break it), or None."""
    from servesim.outputs.metrics import PER_REQUEST
    from servesim.studies.capacity import _stat

    per = {m: floors[m] for m in PER_REQUEST if m in floors}
    rej = floors.get("rejected_share", 0.0)
    why = floors.get("rejected_reason")
    rejected = f"{rej:.1%} of requests are rejected" + (f" (e.g. {why})" if why else "")
    note = f" ({rejected})" if rej else ""
    if attainment is not None:
        # a rejected request is within no SLO, whatever its limits (a run's attainment counts only
        # completed requests within them): with only a tbt limit, or a TPOT one and one output
        # token, the floors counted it within
        within = ~floors["rejected"] if "rejected" in floors else np.ones(len(per["ttft"]), dtype=bool)
        for (metric, _), limit in slo.items():
            if metric in per:
                within &= ~(per[metric] > limit)
        share = float(within.mean()) if len(within) else 0.0
        if share < attainment:
            return (f"even unloaded only {share:.1%} of requests are within the limits (prefill alone and one decode "
                    f"step per token), below --attainment {attainment:g}{note}")
        return None
    for (metric, stat), limit in slo.items():
        if metric in per:
            v = _stat(per[metric], stat)
            if v >= NEVER / 10:
                return f"{rejected}, so {metric}_{stat} <= {limit_text(limit)} cannot hold"
            if v > limit:
                return (f"{metric}_{stat} is at least {_s(v)} unloaded (prefill alone, one decode step per token) "
                        f"> {limit_text(limit)}{note}")
        elif metric == "tbt" and stat != "mean" and floors["decode_step_s"] > limit:
            return (f"every token gap is at least one decode step, {_s(floors['decode_step_s'])} > tbt_{stat} "
                    f"limit {limit_text(limit)}")
    return None


NEVER = 1e18  # seconds: a request that is never served (as servesim capacity counts it)


def _s(v: float) -> str:
    if v >= NEVER / 10:
        return "never"
    return f"{v * 1e3:.0f} ms" if v < 10 else f"{v:.1f} s"


@dataclass
class Assessment:
    """What ``assess`` found for one shape."""

    status: str  # "ok" | "pruned-memory" | "pruned-latency" | "pruned-bound"
    reason: str = ""
    unit_rate_bound: float = 0.0  # req/s one unit can serve at most
    min_units: int = 0  # units R needs at least (the bound)
    bound: dict | None = None
    unit_usd_per_hour: float | None = None
    unit_power_w: float | None = None  # provisioned (TDP) power of one unit


def assess(shape: Shape, base: dict, rate: float, slo: dict, attainment, stats: WorkloadStats, max_gpus: int,
           prices: dict, powers: dict) -> Assessment:
    """Memory fit, latency floors and the throughput bound of ``shape`` for rate ``rate``."""
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import prepare

    counts = shape.gpu_counts(1)
    usd = sum(n * prices[g] for g, n in counts.items()) if all(prices.get(g) is not None for g in counts) else None
    watts = sum(n * powers[g] for g, n in counts.items()) if all(powers.get(g) is not None for g in counts) else None
    a = Assessment("ok", unit_usd_per_hour=usd, unit_power_w=watts)
    try:
        setup = prepare(scenario_from_dict(with_values(base, shape.overrides(1, base.get("policy") or {}), "plan")))
    except InputError as e:
        a.status, a.reason = "pruned-memory", str(e)
        return a
    why = floor_violation(latency_floors(shape.kind, setup, stats), slo, attainment)
    if why:
        a.status, a.reason = "pruned-latency", why
        return a
    a.unit_rate_bound, a.bound = unit_rate_bound(shape, setup, stats)
    a.min_units = max(1, math.ceil(rate / a.unit_rate_bound * (1 - 1e-9)))
    need = a.min_units * shape.gpus(1)
    if need > max_gpus:
        a.status = "pruned-bound"
        a.reason = (f"one unit serves at most {a.unit_rate_bound:.3g} req/s (cost-model bound), so {rate:g} req/s "
                    f"needs >= {a.min_units} units = {need} GPUs > --max-gpus {max_gpus}")
    return a
