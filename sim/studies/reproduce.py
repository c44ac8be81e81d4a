"""``servesim reproduce``: published results rebuilt from each paper's own configuration.

Every experiment is a function ``(Options) -> Experiment`` that sets up the paper's model, GPU,
parallelism, scheduler settings, workload and SLO (``scenarios/reproduce/*.yaml`` plus the
variants written here), runs servesim (single runs, or capacity searches through
``servesim.studies.capacity.find_capacity``), and lists ``Figure``s: the published number with its
citation and confidence, the simulated one, their ratio and a computed verdict.

Verdicts (``Figure.verdict``), one rule for every figure:

* **direction**: for a comparison (a gain of A over B), the simulated figure is on the same side
  of 1 as the published one; for absolute figures, the ordering the paper shows (stated per
  experiment) holds in the simulation. Absolute figures without an ordering have no direction.
* **within +-25%**: 0.75 <= simulated / published <= 1.25 (a published range: the simulated figure
  within [lo / 1.25, hi x 1.25]).
* "matches" when both hold; otherwise the figure says which mechanism is missing (``missing``).

One calibration for all experiments: the shipped cost calibration and defaults, each paper's
configuration as published, nothing tuned per experiment. Each experiment names the engine profile
of the paper's engine (``ENGINES``); this build has no ``cost.engine`` field yet, so the profile is
recorded but the steps are priced with the default per-step overhead (``engine_overrides``).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

from servesim.errors import InputError
from servesim.inputs.overrides import with_values
from servesim.inputs.scenario import Cost, read_yaml, scenario_from_dict
from servesim.studies.capacity import CapacityOptions, find_capacity
from servesim.studies.executors import ExecutorOptions

TOLERANCE = 0.25  # a simulated figure within +-25% of the published one matches


# ---------------------------------------------------------------- figures and experiments
@dataclass
class Figure:
    """One published number next to its simulated counterpart.

    ``published``: a number, a (lo, hi) range, or None when the paper states only a direction;
    ``simulated``: None when servesim cannot compute it yet (``missing`` says why).
    ``direction``: whether the simulation shows the paper's direction (a gain on the same side of 1,
    or the paper's ordering of absolute figures); None when the figure has none."""

    label: str
    published: float | tuple | None
    simulated: float | None
    citation: str
    confidence: str  # text | figure label | inferred | 3rd-party (see /work/notes/published.md)
    unit: str = "x"
    direction: bool | None = None
    missing: str = ""  # the mechanism that would close the gap, when the figure does not match

    @property
    def ratio(self) -> float | None:
        """simulated / published (a range: / the nearest bound, 1 inside it)."""
        if self.simulated is None or self.published is None:
            return None
        if isinstance(self.published, tuple):
            lo, hi = self.published
            return 1.0 if lo <= self.simulated <= hi else self.simulated / (lo if self.simulated < lo else hi)
        return self.simulated / self.published if self.published else None

    @property
    def within(self) -> bool | None:
        r = self.ratio
        return None if r is None else 1 - TOLERANCE <= r <= 1 + TOLERANCE

    @property
    def matches(self) -> bool:
        if self.simulated is None:
            return False
        if self.published is None:
            return bool(self.direction)
        return bool(self.within) and self.direction is not False

    @property
    def verdict(self) -> str:
        if self.simulated is None:
            return "not simulated"
        if self.direction is False:
            return "wrong direction"
        if self.published is None:
            return "direction right (no published figure)"
        if self.within:
            return "matches"
        r = self.ratio
        off = f"{(r - 1) * 100:+.0f}%"
        return f"direction right, {off} off" if self.direction else f"{off} off"

    def to_dict(self) -> dict:
        return {"label": self.label, "published": list(self.published) if isinstance(self.published, tuple)
                else self.published, "simulated": self.simulated, "unit": self.unit, "ratio": self.ratio,
                "direction": self.direction, "within_25pct": self.within, "matches": self.matches,
                "verdict": self.verdict, "citation": self.citation, "confidence": self.confidence,
                "missing": "" if self.matches else self.missing}


@dataclass
class Experiment:
    name: str
    title: str
    setup: str  # the configuration, as the paper gives it, and what servesim runs
    figures: list
    notes: list = field(default_factory=list)  # deviations from the paper's setup, assumptions
    engine: str = ""  # the engine profile the paper's engine corresponds to (ENGINES)
    wall_s: float = 0.0

    @property
    def matched(self) -> int:
        return sum(f.matches for f in self.figures)


@dataclass(frozen=True)
class Options:
    quick: bool = False  # smaller probes and looser search: a few seconds per experiment
    seed: int | None = None  # replaces every scenario's seed (None: the files' own)
    workers: int | None = 1  # capacity probes in parallel (None: all cores)


# ---------------------------------------------------------------- engine profiles
# The engine each paper measured, as a profile name of ``cost.engine`` (issue 18's engine
# profiles: vllm-v1 | vllm-v0 | trt-llm | hf-eager). Papers of 2023-24 ran vLLM V0 (a Python
# scheduler, no CUDA graphs in 2023) or engines like it; FasterTransformer is NVIDIA's C++ engine,
# TensorRT-LLM's predecessor.
ENGINES = {"vllm-2023": "vllm-v0", "vllm-2024": "vllm-v0", "fastertransformer": "trt-llm",
           "distserve": "vllm-v0", "sarathi": "vllm-v0"}
ENGINE_FIELD = "engine"  # the Cost field the profiles branch adds (cost.engine)

# vLLM's scheduler before chunked prefill (V0, and vLLM 0.1 in the vLLM paper): a step that admits
# prompts carries no decodes; the running requests stall for it ("generation stalls", Sarathi-Serve
# §3; DistServe §2.2's prefill-decode interference). Orca batches prompts with the decodes.
VLLM_V0_SCHEDULER = {"policy.prefill_first": True}


def engine_overrides(profile: str) -> dict:
    """``{"cost.engine": profile}`` once the scenario schema has the field; until then nothing
    (the steps are priced with the calibration's per-step overhead, the default)."""
    if any(f.name == ENGINE_FIELD for f in fields(Cost)):
        return {f"cost.{ENGINE_FIELD}": profile}
    return {}


def engine_note(profile: str) -> str:
    applied = bool(engine_overrides(profile))
    return (f"engine profile {profile}" + ("" if applied else
            " (named, not applied: this build has no cost.engine; steps carry the default per-step overhead, "
            "2 ms + 10 us per sequence)"))


# ---------------------------------------------------------------- running scenarios
def packaged(file: str) -> str:
    """The path of a file shipped with the reproduce scenarios (a model's config.json)."""
    return str(resources.files("servesim.scenarios.reproduce") / file)


def scenario_path(name: str) -> Path:
    return Path(packaged(f"{name}.yaml"))


def scenario_data(name: str, overrides: dict | None = None, opts: Options = Options()) -> dict:
    data = with_values(read_yaml(scenario_path(name)), overrides or {})
    if opts.seed is not None:
        data["seed"] = opts.seed
    return data


def run(name: str, overrides: dict | None = None, opts: Options = Options(), num_requests: int | None = None):
    """Simulate ``scenarios/reproduce/<name>.yaml`` with ``{"dotted.key": value}`` overrides."""
    from servesim.simulation import simulate

    data = scenario_data(name, overrides, opts)
    if num_requests is not None:
        data["workload"]["num_requests"] = num_requests
    return simulate(scenario_from_dict(data))


@dataclass(frozen=True)
class Search:
    """How a capacity search runs (quick: short probes, a coarser bracket)."""

    probe_requests: int
    tol: float
    max_probes: int

    @staticmethod
    def of(opts: Options, requests: int = 1000) -> "Search":
        return Search(max(150, requests // 5), 0.05, 24) if opts.quick else Search(requests, 0.02, 40)


NO_LIMIT = "e2e_p50=1e9"  # an SLO that never binds: capacity is then where the server stops keeping up
UNCONFIRMED: list = []  # capacity searches whose answer is only a bracket's floor (probe noise)


def capacity(name: str, slo: str, overrides: dict, opts: Options, attainment: float | None = None,
             requests: int = 1000) -> tuple[float, float]:
    """(capacity req/s, per GPU) of ``scenarios/reproduce/<name>.yaml`` with ``overrides``, by
    ``find_capacity`` (``slo`` as ``servesim capacity --slo``). When the probes run out before the
    answer is confirmed (noisy short probes), the highest rate that met, noted in ``UNCONFIRMED``."""
    s = Search.of(opts, requests)
    sets = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    co = CapacityOptions(attainment=attainment, probe_requests=s.probe_requests, tol=s.tol, max_probes=s.max_probes)
    with tempfile.TemporaryDirectory(prefix="servesim-reproduce-") as tmp:
        res = find_capacity(scenario_path(name), slo, co, Path(tmp), sets, opts.seed,
                            ExecutorOptions(workers=opts.workers, progress=False))
    if res.error:
        UNCONFIRMED.append(f"{name} {overrides}: {res.error}")
    return res.capacity_rps, res.capacity_rps / res.num_gpus


# ---------------------------------------------------------------- DistServe
PD_DISTSERVE = {  # Table 5: OPT-13B ShareGPT, prefill TP2 + decode TP1, one instance each (3 GPUs)
    "policy.name": "pd_split",
    # AE engine settings: prefill FCFS, max batch 128, 8192 tokens; decode max batch 1024, 65,536 tokens
    "policy.prefill": {"replicas": 1, "tp": 2, "policy": "continuous", "max_num_seqs": 128,
                       "max_num_batched_tokens": 8192},
    "policy.decode": {"replicas": 1, "tp": 1, "policy": "continuous", "max_num_seqs": 1024,
                      "max_num_batched_tokens": 65536},
    "policy.link": {"type": "intra_node"},  # the low node-affinity placement keeps a pair on one node's NVLink
}


# DistServe's own latency profile of vLLM (simdistserve profiler-a100-80g.vllm.json, OPT-13B TP1):
# a decode step takes 23.48 ms + 5.93e-4 ms per context token + 0.0607 ms per sequence
DISTSERVE_VLLM_DECODE_FIXED_S = 23.48e-3


def exp_distserve(opts: Options) -> Experiment:
    slo = "ttft_p90=0.25,tpot_p90=0.1"  # per request with --attainment: both met by >= 90%
    eng = ENGINES["vllm-2024"]
    colo, colo_gpu = capacity("distserve-opt13b", slo, {**VLLM_V0_SCHEDULER, **engine_overrides(eng)}, opts,
                              attainment=0.9)
    pd, pd_gpu = capacity("distserve-opt13b", slo, {**PD_DISTSERVE, **engine_overrides(ENGINES["distserve"])}, opts,
                          attainment=0.9)
    gain = pd_gpu / colo_gpu
    notes = [f"goodput at 90% attainment: vLLM {colo:.3g} req/s on 1 GPU, DistServe {pd:.3g} req/s on 3 GPUs "
             f"({pd_gpu:.3g} per GPU)"]
    if not opts.quick:
        # diagnostic, not a verdict: the per-step overhead the paper's own vLLM profile implies (its
        # batch-1 decode step less servesim's roofline step), on both systems
        over = per_step_overhead_implied(DISTSERVE_VLLM_DECODE_FIXED_S)
        ov = {"cost.step_overhead_s": round(over, 4)}
        c2, _ = capacity("distserve-opt13b", slo, ov, opts, attainment=0.9)
        p2, p2_gpu = capacity("distserve-opt13b", slo, {**PD_DISTSERVE, **ov}, opts, attainment=0.9)
        notes.append(f"diagnostic (not the verdict): with the {over * 1e3:.1f} ms per-step overhead that DistServe's "
                     f"own vLLM profile implies (a batch-1 decode step of {DISTSERVE_VLLM_DECODE_FIXED_S * 1e3:.2f} ms "
                     f"against servesim's roofline step) on both systems, vLLM {c2:.3g} req/s, DistServe {p2:.3g} "
                     f"req/s: {p2_gpu / c2:.2f}x per GPU")
    dec_s, pre_s = opt13b_roofline_s()
    missing = ("the 2024 engines' per-step CPU overhead and slower prefill (cost.engine vllm-v0; DistServe's own "
               f"profile of vLLM: {DISTSERVE_VLLM_DECODE_FIXED_S * 1e3:.1f} ms a decode step at batch 1, "
               f"{DISTSERVE_VLLM_PREFILL_S(1500) * 1e3:.0f} ms a 1500-token prefill, where servesim's roofline gives "
               f"{dec_s * 1e3:.1f} ms and {pre_s * 1e3:.0f} ms): they make the TTFT SLO bind colocated at low rates; "
               "the workload is rebuilt from other ShareGPT traces, not DistServe's")
    return Experiment(
        "distserve", "DistServe: per-GPU goodput of prefill/decode disaggregation vs colocated vLLM, OPT-13B chatbot",
        "OPT-13B fp16 on A100-80GB SXM; ShareGPT conversation rounds built as DistServe builds them (prompt = the "
        "turns so far, < 2048 tokens), Poisson arrivals; SLO TTFT <= 0.25 s and TPOT <= 0.1 s for >= 90% of "
        "requests (Table 1); goodput = the highest rate meeting it (servesim capacity --attainment 0.9, keeping "
        "up), per GPU. vLLM: TP1, 1 GPU, block 16, memory utilization 0.95, 16,384 batched tokens, 1,024 sequences "
        "(AE flags). DistServe (Table 5): one prefill instance at TP2 (max batch 128, 8,192 tokens) and one decode "
        "instance at TP1 (max batch 1,024), 3 GPUs, KV over NVLink.",
        [Figure("per-GPU goodput, DistServe / vLLM", 4.6, gain,
                "DistServe (Zhong et al., OSDI'24) §6.2 Fig. 8: 2.0x-4.6x across OPT-13B/66B/175B; 4.6x is OPT-13B "
                "(the AE notebook's output, evaluation/2-benchmark-serving/plot.ipynb)", "text + artifact", "x",
                gain > 1, missing)],
        notes + ["the workload: DistServe's statistics are not published as numbers (Fig. 7); see "
                 "scenarios/reproduce/distserve-opt13b.yaml for how it is rebuilt",
                 "the paper's A100s are SXM; the per-request TPOT excludes the first token, as in the paper",
                 engine_note(eng)], eng)


def DISTSERVE_VLLM_PREFILL_S(tokens: int) -> float:  # noqa: N802 (a published formula)
    """DistServe's profile of vLLM's prefill, OPT-13B TP1: 22.05 + 0.1405 L + 8.08e-6 L^2 ms."""
    return (22.05 + 0.1405 * tokens + 8.08e-6 * tokens**2) * 1e-3


def opt13b_roofline_s() -> tuple[float, float]:
    """servesim's OPT-13B steps on one A100-80GB without per-step overhead: (a batch-1 decode step
    at one token of context, a 1500-token prefill)."""
    from servesim.core.batch import synthetic_batch
    from servesim.cost import CostModel
    from servesim.cost.calibration import efficiencies_for
    from servesim.inputs.specs import get_gpu, get_model

    gpu = get_gpu("a100-80g")
    cm = CostModel(get_model("facebook/opt-13b"), gpu, dtype="fp16", kv_dtype="fp16", step_overhead_s=0.0,
                   per_seq_overhead_s=0.0, eff=efficiencies_for(gpu, "auto"))
    return (cm.step_time(synthetic_batch(decode_contexts=[1])).time_s,
            cm.step_time(synthetic_batch(prefill=[(1500, 0)])).time_s)


def per_step_overhead_implied(measured_step_s: float) -> float:
    """The per-step CPU overhead a measured batch-1 decode step of OPT-13B on an A100-80GB implies:
    the measured time less servesim's step without overhead (at one token of context)."""
    return max(0.0, measured_step_s - opt13b_roofline_s()[0])


# ---------------------------------------------------------------- Sarathi-Serve
def sarathi_variant(budget: int) -> dict:
    return {"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": budget}


SARATHI = {  # model file, P99 TBT strict / relaxed (paper §5), model overrides
    "Mistral-7B": ("sarathi-mistral7b", 0.1, 0.5, {}),
    # the artifact runs Yi-34B with max_model_len 8192 (its config.json says 4096 positions)
    "Yi-34B TP2": ("sarathi-yi34b", 0.2, 1.0, {"model": "yi-34b-max-model-len-8192.json"}),
}
SARATHI_PUBLISHED = {  # (model, slo) -> (figure, citation, confidence)
    ("Mistral-7B", "strict"): (2.6, "Sarathi-Serve (Agrawal et al., OSDI'24), abstract and §1: up to 2.6x", "text"),
    ("Yi-34B TP2", "strict"): (3.7, "Sarathi-Serve §5.1, Fig. 10a: 3.7x vs vLLM, strict SLO", "text"),
    ("Yi-34B TP2", "relaxed"): (1.65, "Sarathi-Serve §5.2, Fig. 12: 1.65x at 1 s, budget 2048", "text"),
    ("Mistral-7B", "relaxed"): (None, "Sarathi-Serve Fig. 10 (bars not readable as text): Sarathi-Serve ahead",
                                "figure"),
}


def exp_sarathi(opts: Options) -> Experiment:
    eng = ENGINES["sarathi"]
    figs, notes = [], []
    missing = ("prefill-prioritizing vLLM V0 runs prefill-only steps (decodes skip them; servesim mixes the whole "
               "prompt into the decodes' step); the A100-80GB PCIe's lower bandwidth and power; the 2024 engine's "
               "per-step overhead (cost.engine vllm-v0)")
    for model, (name, strict, relaxed, mov) in SARATHI.items():
        mov = {k: packaged(v) for k, v in mov.items()}
        for slo_name, tbt, budget in (("strict", strict, 512), ("relaxed", relaxed, 2048)):
            slo = f"tbt_p99={tbt},queue_p50=2"
            base, _ = capacity(name, slo, {**mov, **VLLM_V0_SCHEDULER, **engine_overrides(eng)}, opts)
            ss, _ = capacity(name, slo, {**mov, **sarathi_variant(budget), **engine_overrides(eng)}, opts)
            gain = ss / base if base else math.inf
            pub, cite, conf = SARATHI_PUBLISHED[model, slo_name]
            figs.append(Figure(f"{model}, {slo_name} (P99 TBT {tbt:g} s, budget {budget}): capacity gain", pub, gain,
                               cite, conf, "x", gain > 1, missing))
            notes.append(f"{model} {slo_name}: vLLM {base:.3g} req/s, Sarathi-Serve {ss:.3g} req/s")
    return Experiment(
        "sarathi", "Sarathi-Serve: capacity gain of chunked prefill over vLLM (Mistral-7B, Yi-34B TP2)",
        "openchat_sharegpt4 lengths (prompt median 1730 / P90 5696, output median 415 / P90 834; Table 2), Poisson "
        "arrivals; capacity = the highest rate with P99 TBT <= the SLO and median scheduling delay <= 2 s (§5, "
        "servesim capacity --slo tbt_p99=...,queue_p50=2). vLLM: max batch 128, token budget 8192 (max_model_len), "
        "whole prompts, recompute; Sarathi-Serve: chunked prefill, budget 512 (strict) / 2048 (relaxed), max batch "
        "128 (artifact configs). Mistral-7B-Instruct-v0.2 on one A100-80GB, Yi-34B at TP2 on two; memory "
        "utilization 0.85. Strict / relaxed P99 TBT: 0.1 / 0.5 s (Mistral), 0.2 / 1.0 s (Yi).",
        figs, notes + ["the paper's A100s are PCIe; the catalog's a100-80g is the SXM part (2.04 vs 1.94 TB/s)",
                       "Yi-34B runs with 8192 positions, as the artifact's max_model_len (its config.json says 4096)",
                       engine_note(eng)], eng)


# ---------------------------------------------------------------- vLLM / PagedAttention
ORCA = {  # the vLLM paper's Orca reimplementation: KV reserved at admission, a buddy allocator
    "Orca (Max)": {"policy.reserve": "max", "policy.reserve_allocator": "buddy"},
    "Orca (Pow2)": {"policy.reserve": "pow2", "policy.reserve_allocator": "buddy"},
    "Orca (Oracle)": {"policy.reserve": "oracle", "policy.reserve_allocator": "buddy"},
}
FT = {  # FasterTransformer with a Triton-like dynamic batcher: up to B of the earliest requests, B as
    # large as KV reserved up to the context length allows, run to completion (§6.1)
    "policy.name": "static", "policy.batch_timeout_s": 0.0, "policy.max_num_seqs": 256,
}
BATCH_PUBLISHED = {"Orca (Max)": 7.00, "Orca (Pow2)": 9.81, "Orca (Oracle)": 13.62, "vLLM": 30.42}


def exp_vllm(opts: Options) -> Experiment:
    from servesim.simulation import prepare

    eng = ENGINES["vllm-2023"]
    ov = engine_overrides(eng)
    kv_tokens = prepare(scenario_from_dict(scenario_data("vllm-opt13b", ov, opts))).capacity.num_tokens
    n = 400 if opts.quick else 2000
    batch = {}
    for label, var in {**ORCA, "vLLM": VLLM_V0_SCHEDULER}.items():
        res = run("vllm-opt13b", {**var, **ov}, opts, n)
        batch[label] = res.summary["utilization"]["mean_batch_size"]
    order = list(BATCH_PUBLISHED)
    ordered = all(batch[a] < batch[b] for a, b in zip(order, order[1:]))
    cite_b = "vLLM (Kwon et al., SOSP'23), §6.2 Fig. 13a (values printed on the bars)"
    miss_b = {"vLLM": "the 2023 engine's per-step CPU overhead (cost.engine vllm-v0): vLLM's batch at 2 req/s is its "
                      "arrival rate x time in system, set by its step time (Orca's are capped by KV)",
              "Orca (Pow2)": "the buddy allocator's external fragmentation beyond rounding (Fig. 2: 41.6%)",
              "Orca (Oracle)": "the buddy allocator's external fragmentation beyond rounding (Fig. 2: 36.6%)",
              "Orca (Max)": ""}
    figs = [Figure("KV cache slots, OPT-13B on A100-40GB", 15_700, kv_tokens, "vLLM §6.1 Table 1", "text", "tokens",
                   None, "the activation reserve at vLLM 0.1's budget")]
    figs += [Figure(f"mean batched requests at 2 req/s: {label}", BATCH_PUBLISHED[label], batch[label], cite_b,
                    "figure label", "requests", ordered, miss_b[label]) for label in order]
    # sustainable rate: the highest rate the server keeps up with (find_capacity's keep-up rule),
    # where the paper's normalized latency explodes; no latency limit (a queueing-delay limit
    # would fail static batching at any rate: a request waits for the batch in flight)
    slo = NO_LIMIT
    rate = {}
    for label, var in {"vLLM": VLLM_V0_SCHEDULER, "Orca (Oracle)": ORCA["Orca (Oracle)"],
                       "Orca (Max)": ORCA["Orca (Max)"],
                       "FasterTransformer": FT}.items():
        e = engine_overrides(ENGINES["fastertransformer"]) if label == "FasterTransformer" else ov
        rate[label], _ = capacity("vllm-opt13b", slo, {**var, **e}, opts, requests=1000)
    cite_r = "vLLM §6.2, Fig. 12 (ShareGPT; ranges over OPT-13B/66B/175B)"
    miss_r = ("the 2023 engines' per-step overhead (cost.engine vllm-v0 for vLLM and Orca, trt-llm for "
              "FasterTransformer) and the buddy allocator's fragmentation")
    g = {k: rate["vLLM"] / rate[k] for k in ("Orca (Oracle)", "Orca (Max)", "FasterTransformer")}
    figs += [Figure("sustainable rate, vLLM / Orca (Oracle)", (1.7, 2.7), g["Orca (Oracle)"], cite_r + ": 1.7x-2.7x",
                    "text", "x", g["Orca (Oracle)"] > 1, miss_r),
             Figure("sustainable rate, vLLM / Orca (Max)", (2.7, 8.0), g["Orca (Max)"], cite_r + ": 2.7x-8x", "text",
                    "x", g["Orca (Max)"] > 1, miss_r),
             Figure("sustainable rate, vLLM / FasterTransformer", 6.3, g["FasterTransformer"],
                    "vLLM Fig. 12a read off the plot (FT ~0.3, vLLM ~1.9 req/s); text: up to 22x", "3rd-party", "x",
                    g["FasterTransformer"] > 1, miss_r)]
    return Experiment(
        "vllm", "vLLM: PagedAttention vs Orca's reservations and FasterTransformer-style static batching, OPT-13B",
        "OPT-13B fp16 on one A100-40GB, block size 16, memory utilization 0.9, vLLM 0.1's 256 sequences and 2,560 "
        "batched tokens; ShareGPT first rounds as quantiles of the paper's own trace (means 161 / 338 tokens), "
        "Poisson arrivals. Orca as the paper "
        "reimplements it: KV reserved at admission for 2048 tokens (Max), prompt + the output rounded up to a power "
        "of two (Pow2) or the true length (Oracle), in a buddy allocator (each reservation a power of two). "
        "FasterTransformer: static batches of the earliest requests, as many as KV reserved up to 2048 tokens "
        "allows, run to completion. Mean batched requests: per step at 2 req/s. Sustainable rate: the highest rate "
        "the server keeps up with (servesim capacity's keep-up rule, no latency limit): where the paper's normalized "
        "latency explodes (it fixes no threshold).",
        figs,
        ["sustainable rates: " + ", ".join(f"{k} {v:.3g} req/s" for k, v in rate.items()),
         "ShareGPT lengths: quantiles of the artifact's trace (sharegpt_opt_text_completion_length.pkl, the pairs "
         "with input + output < 2048); input and output drawn apart (their log-lengths correlate at 0.17)",
         engine_note(eng) + "; FasterTransformer: " + engine_note(ENGINES["fastertransformer"])], eng)


# ---------------------------------------------------------------- Splitwise
TABLE_IV = {  # Llama-70B, no batching, P50 (ms): (TTFT, TBT, E2E) per (trace, machine)
    ("coding", "a100-80g"): (185, 52, 856), ("coding", "h100-sxm"): (95, 31, 493),
    ("conversation", "a100-80g"): (155, 40, 4957), ("conversation", "h100-sxm"): (84, 28, 3387),
}
PRESETS = {"coding": "azure_code", "conversation": "azure_conv"}
MACHINE = {"a100-80g": "DGX-A100", "h100-sxm": "DGX-H100"}


def exp_splitwise(opts: Options) -> Experiment:
    eng = ENGINES["vllm-2023"]
    n = 60 if opts.quick else 400
    sim = {}
    for (trace, gpu) in TABLE_IV:
        res = run("splitwise-llama70b", {"hardware.gpu": gpu, "workload.preset": PRESETS[trace],
                                         **engine_overrides(eng)}, opts, n)
        s = res.summary
        sim[trace, gpu] = (s["ttft_s"]["p50"] * 1e3, s["tpot_s"]["p50"] * 1e3, s["e2e_s"]["p50"] * 1e3)
    cite = "Splitwise (Patel et al., ISCA'24), §3.7 Table IV"
    missing = ("the 2023 vLLM's per-step overhead and its kernels (cost.engine vllm-v0); TBT at TP8 is bound by 160 "
               "all-reduces per step (small-message collectives, issue 18 item 2)")
    figs = []
    for trace in ("coding", "conversation"):
        for k, metric in enumerate(("TTFT", "TBT", "E2E")):
            faster = sim[trace, "h100-sxm"][k] < sim[trace, "a100-80g"][k]  # Table IV: H100 is faster everywhere
            for gpu in ("a100-80g", "h100-sxm"):
                figs.append(Figure(f"{trace}, {MACHINE[gpu]}: P50 {metric}", TABLE_IV[trace, gpu][k],
                                   sim[trace, gpu][k], cite, "text", "ms", faster, missing))
    lacks = ("servesim has no cost or power model yet (issue 20): no per-machine $/hour or provisioned power, no "
             "iso-power / iso-cost cluster sizing, no SLOs as slowdown vs an uncontended DGX-A100, no overflow to a "
             "mixed pool; BLOOM-176B is not in this build's catalog")
    figs += [Figure("iso-power throughput, Splitwise-AA / Baseline-A100 (BLOOM-176B, conversation)", 2.15, None,
                    "Splitwise §6.2, Fig. 18a", "text", "x", None, lacks),
             Figure("iso-cost throughput, Splitwise-AA / Baseline-H100 (BLOOM-176B, conversation)", 1.4, None,
                    "Splitwise §6.3, Fig. 18b", "text", "x", None, lacks)]
    return Experiment(
        "splitwise", "Splitwise: Llama-70B request latencies on DGX-A100 vs DGX-H100 (Table IV); cluster results",
        "Llama-2-70B at TP8 on 8 x A100-80GB and 8 x H100 SXM, vLLM, no batching (one request at a time: a closed "
        "loop of one client, max batch 1); lengths of the Azure LLM inference traces 2023 (the presets fitted to "
        "them: azure_code, azure_conv); P50 over requests of TTFT, TBT (a request's mean time between tokens) and "
        "E2E. Direction: H100 faster than A100 for each metric, as in the paper. The cluster results (Fig. 18) "
        "need a cost and power model servesim does not have.",
        figs, ["the Azure traces are the paper's; the presets match their means and quantiles, not row by row",
               engine_note(eng)], eng)


EXPERIMENTS = {
    "distserve": exp_distserve,
    "sarathi": exp_sarathi,
    "vllm": exp_vllm,
    "splitwise": exp_splitwise,
}


def run_reproduce(names=None, opts: Options = Options(), progress=None) -> list[Experiment]:
    """Run the named experiments (all when None), in registry order."""
    names = list(EXPERIMENTS) if not names else list(dict.fromkeys(names))
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad:
        raise InputError(f"unknown experiment {bad[0]!r}; valid: {', '.join(EXPERIMENTS)}")
    out = []
    for n in [n for n in EXPERIMENTS if n in names]:
        t0 = time.perf_counter()
        UNCONFIRMED.clear()
        exp = EXPERIMENTS[n](opts)
        exp.wall_s = time.perf_counter() - t0
        exp.notes += [f"capacity not confirmed (the bracket's floor is used): {u}" for u in UNCONFIRMED]
        out.append(exp)
        if progress:
            progress(exp)
    return out


# ---------------------------------------------------------------- report
def _num(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, tuple):
        return f"{_num(x[0])}-{_num(x[1])}"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if unit == "tokens" or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _cell(x, unit: str) -> str:
    s = _num(x, unit)
    return s if s == "-" else f"{s} {unit}" if unit not in ("x", "") else f"{s}{unit}"


def figure_rows(experiments) -> list[tuple]:
    rows = []
    for e in experiments:
        for f in e.figures:
            r = f.ratio
            rows.append((f"`{e.name}`", f.label, f"{_cell(f.published, f.unit)} ({f.confidence})",
                         _cell(f.simulated, f.unit), "-" if r is None else f"{r:.2f}",
                         {True: "right", False: "wrong", None: "-"}[f.direction], f"**{f.verdict}**"))
    return rows


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


HEADER = ("experiment", "figure", "published", "simulated", "sim / published", "direction", "verdict")


def fidelity_table(experiments) -> str:
    """The one-line-per-figure Markdown table (the fidelity guide and the top of reproduce.md)."""
    return _md_table(HEADER, figure_rows(experiments))


def summary_line(experiments, quick: bool) -> str:
    figs = [f for e in experiments for f in e.figures]
    sim = [f for f in figs if f.simulated is not None]
    right = sum(f.direction is not False for f in sim)
    within = sum(bool(f.within) for f in sim)
    rated = sum(f.within is not None for f in sim)
    return (f"{sum(f.matches for f in figs)} of {len(figs)} published figures matched (direction right and within "
            f"+-{TOLERANCE:.0%}); direction right for {right} of {len(sim)} simulated, within +-{TOLERANCE:.0%} for "
            f"{within} of {rated} with a published number; {len(figs) - len(sim)} not simulated"
            + (" (quick run: short probes, coarse searches)" if quick else ""))


def reproduce_markdown(experiments, opts: Options) -> str:
    parts = ["# servesim reproduce", "", summary_line(experiments, opts.quick) + ".", "",
             "Verdicts: direction right (a gain on the same side of 1 as published, or the paper's ordering of "
             f"absolute figures) and simulated / published within 1 +- {TOLERANCE:g} (a published range: within "
             f"[lo / {1 + TOLERANCE:g}, hi x {1 + TOLERANCE:g}]). One calibration for every experiment; each "
             "paper's configuration as published.", "", fidelity_table(experiments), ""]
    for e in experiments:
        parts += [f"## `{e.name}`: {e.title}", "", f"**Setup.** {e.setup}", ""]
        parts += [_md_table(("figure", "published", "simulated", "sim / published", "direction", "verdict",
                             "citation"),
                            [(f.label, _cell(f.published, f.unit), _cell(f.simulated, f.unit),
                              "-" if f.ratio is None else f"{f.ratio:.2f}",
                              {True: "right", False: "wrong", None: "-"}[f.direction], f.verdict,
                              f"{f.citation} ({f.confidence})") for f in e.figures]), ""]
        gaps = sorted({f.missing for f in e.figures if not f.matches and f.missing})
        if gaps:
            parts += ["**Not matched; missing:**", ""] + [f"- {g}" for g in gaps] + [""]
        parts += ["**Notes.**", ""] + [f"- {n}" for n in e.notes] + ["", f"_({e.wall_s:.1f} s wall)_", ""]
    return "\n".join(parts)


def write_reproduce(experiments, out: Path, opts: Options) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "reproduce.md").write_text(reproduce_markdown(experiments, opts))
    (out / "reproduce.json").write_text(json.dumps(
        {"quick": opts.quick, "seed": opts.seed, "tolerance": TOLERANCE,
         "summary": summary_line(experiments, opts.quick),
         "experiments": [{"name": e.name, "title": e.title, "setup": e.setup, "engine": e.engine,
                          "notes": e.notes, "wall_s": e.wall_s, "figures": [f.to_dict() for f in e.figures]}
                         for e in experiments]}, indent=1) + "\n")


BEGIN, END = "<!-- reproduce-table:begin -->", "<!-- reproduce-table:end -->"


def write_readme(path: Path, experiments, opts: Options) -> None:
    """Replace the block between the reproduce-table markers of ``path`` (the fidelity guide,
    ``docs/fidelity.md``, by default: ``servesim reproduce --write-docs``) with this run's table and
    summary line."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"--write-docs {path}: cannot read it: {e.strerror or e}") from None
    if BEGIN not in text or END not in text:
        raise InputError(f"--write-docs {path}: no {BEGIN} ... {END} block to replace")
    block = f"{BEGIN}\n{summary_line(experiments, opts.quick)}.\n\n{fidelity_table(experiments)}\n{END}"
    path.write_text(text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):])
