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
  within [lo x 0.75, hi x 1.25]).
* "matches" when both hold; otherwise the figure says which mechanism is missing (``missing``).

One calibration for all experiments: the shipped cost calibration and defaults, each paper's
configuration as published, nothing tuned per experiment. Each experiment prices its steps with the
engine profile of the paper's engine (``ENGINES``, as ``cost.engine``). Where a paper defines its
figure by its own measurement protocol (DistServe's goodput: short runs at a grid of rates), the
experiment follows that protocol (``ae_goodput``).
"""

from __future__ import annotations

import bisect
import json
import math
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

from servesim.cost.engines import PROFILES
from servesim.errors import InputError
from servesim.inputs.overrides import with_values
from servesim.inputs.scenario import Cost, read_yaml, scenario_from_dict
from servesim.outputs.intervals import format_value
from servesim.outputs.writer import json_text
from servesim.studies.capacity import CapacityOptions, find_capacity
from servesim.studies.executors import ExecutorOptions, check_numbers
from servesim.studies.replicates import seeds_for

TOLERANCE = 0.25  # a simulated figure within +-25% of the published one matches

# How each published figure is known (``Figure.confidence``, shown beside it), so that a reader can
# weigh a miss by it: the labels a figure may carry and what each means (docs/fidelity.md lists them)
CONFIDENCE = {
    "text": "a number the paper's text states",
    "text + artifact": "a number the text states, and the paper's artifact prints",
    "artifact": "a number the paper's artifact prints (its notebook's output), not the text",
    "figure label": "a value printed on one of the paper's figures",
    "figure": "a figure whose bars cannot be read as numbers: only its direction is taken",
    "3rd-party": "read off one of the paper's plots, approximately: a number the paper does not state",
    "measured": "a measurement, not a paper (the `vllm-h100` runs)",
}


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
    confidence: str  # how the published figure is known: a label of ``CONFIDENCE``
    unit: str = "x"
    direction: bool | None = None
    missing: str = ""  # the mechanism that would close the gap, when the figure does not match
    # with ``simulated`` None: what the simulation still bounds it to (``gain_text``: "over 9.09x (...)");
    # its ``direction`` is then the side of 1 the bound settles
    bound: str = ""

    def __post_init__(self):
        if self.confidence not in CONFIDENCE:
            raise ValueError(f"Figure {self.label!r}: confidence {self.confidence!r} is none of "
                             f"{', '.join(map(repr, CONFIDENCE))}")

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
    def ratio_text(self) -> str:
        """The ratio to 2 decimals, or 3 where 2 would read as the tolerance's edge on the wrong side
        (0.747 printed "0.75" next to a verdict of -25% off; 0.757 "0.76", matches)."""
        r = self.ratio
        if r is None:
            return "-"
        text = f"{r:.2f}"
        return f"{r:.3f}" if float(text) in (1 - TOLERANCE, 1 + TOLERANCE) else text

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
            if self.bound and self.direction is not None:
                return f"{'direction right' if self.direction else 'wrong direction'} ({self.bound})"
            return "not simulated"
        if self.direction is False:
            return "wrong direction"
        if self.published is None:
            return "direction right (no published figure)"
        if self.within:
            return "matches"
        r = self.ratio
        off = f"{(r - 1) * 100:+.0f}%"
        if abs(round((r - 1) * 100)) == round(TOLERANCE * 100):  # "-25% off" against +-25%: say by how much
            off = f"{(r - 1) * 100:+.1f}%"
        return f"direction right, {off} off" if self.direction else f"{off} off"

    def to_dict(self) -> dict:
        return {"label": self.label, "published": list(self.published) if isinstance(self.published, tuple)
                else self.published, "simulated": self.simulated, "unit": self.unit, "ratio": self.ratio,
                "direction": self.direction, "within_25pct": self.within, "matches": self.matches,
                "verdict": self.verdict, "citation": self.citation, "confidence": self.confidence,
                "missing": "" if self.matches else self.missing, "bound": self.bound}


@dataclass
class Experiment:
    name: str
    title: str
    setup: str  # the configuration, as the paper gives it, and what servesim runs
    figures: list
    notes: list = field(default_factory=list)  # deviations from the paper's setup, assumptions
    engine: str = ""  # the engine profile the paper's engine corresponds to (ENGINES)
    wall_s: float = 0.0
    plots: list = field(default_factory=list)  # (plots.reproduce function name, data): out/<name>.png

    @property
    def matched(self) -> int:
        return sum(f.matches for f in self.figures)


@dataclass(frozen=True)
class Options:
    quick: bool = False  # smaller probes and looser search: a few seconds per experiment
    seed: int | None = None  # replaces every scenario's seed (None: the files' own)
    workers: int | None = 1  # capacity probes in parallel (None: all cores)

    def __post_init__(self):
        check_numbers(self, ("seed", "workers"))


# ---------------------------------------------------------------- engine profiles
# The engine each paper measured, as a profile name of ``cost.engine``. The 2023 papers ran vLLM
# 0.1-0.2 (the vLLM paper, Splitwise, DistServe's baseline v0.2.3): Ray workers, no CUDA graphs, NCCL
# all-reduce (vllm-v0.2). Sarathi-Serve (2024) runs both of its sides, its vLLM scheduler and its
# own, on its artifact's vLLM-derived runtime (sarathi-serve: vllm-v0's CPU figures, which are
# Vidur's profile of that runtime, with no CUDA graphs and NCCL all-reduce);
# DistServe's own engine (SwiftTransformer's C++ kernels under a Python scheduler) is priced as
# vllm-v0: DistServe's profile of it (sim/cost/published_profiles.py) is within 8% of vllm-v0's
# OPT-13B decode steps at TP1 and 12-33% slower on its TP2 prefills of 256-2000 tokens.
# FasterTransformer is NVIDIA's C++ engine, TensorRT-LLM's predecessor.
# DistServe's baseline, v0.2.3, is vllm-v0.2 with its prompt batches padded to the longest prompt
# (vllm-v0.2.3: from v0.2.2; the vLLM paper's vLLM 0.1 packed them). v0.2.3 is the version the
# artifact names (evaluation/0-test-single-forward-performance/INSTRUCTIONS.md), yet the branch its
# image builds, interestingLSY/vllm distserve-baseline-vllm, is as published v0.1.7 with the
# timestamp patch (v0.2.3's is distserve-baseline-vllm-v0.2.3): docs/fidelity.md, DistServe.
ENGINES = {"vllm-2023": "vllm-v0.2", "vllm-v0.2.3": "vllm-v0.2.3", "fastertransformer": "trt-llm",
           "distserve": "vllm-v0", "sarathi": "sarathi-serve"}
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


def _search(name: str, slo: str, overrides: dict, opts: Options, attainment: float | None, requests: int,
            seeds: int | None):
    """One capacity search of ``scenarios/reproduce/<name>.yaml`` with ``overrides`` (``seeds``
    None: ``find_capacity`` on one seed; else ``capacity_interval`` on exactly that many, as
    ``servesim capacity --seeds``); a search with no confirmed answer is noted in ``UNCONFIRMED``."""
    from servesim.studies.capacity import SeedOptions, capacity_interval

    s = Search.of(opts, requests)
    sets = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    co = CapacityOptions(attainment=attainment, probe_requests=s.probe_requests, tol=s.tol, max_probes=s.max_probes)
    ex = ExecutorOptions(workers=opts.workers, progress=False)
    with tempfile.TemporaryDirectory(prefix="servesim-reproduce-") as tmp:
        if seeds is None:
            res = find_capacity(scenario_path(name), slo, co, Path(tmp), sets, opts.seed, ex)
        else:
            res = capacity_interval(scenario_path(name), slo, co, SeedOptions(seeds=seeds), Path(tmp), sets,
                                    opts.seed, ex)
    if res.error:
        UNCONFIRMED.append(f"{name} {overrides}: {res.error}")
    return res


def capacity_seeds(name: str, slo: str, overrides: dict, opts: Options, seeds: int,
                   requests: int = 1000) -> list:
    """Each seed's capacity (req/s; None: that search found none) of ``scenarios/reproduce/<name>.yaml``
    with ``overrides``, in seed order: the scenario's seed (or ``opts.seed``) and the ``seeds - 1``
    after it, one search each. The seeds stop at a search with no confirmed answer."""
    if seeds == 1:
        return [capacity(name, slo, overrides, opts, requests=requests)[0] or None]
    return [r.capacity_rps or None for r in _search(name, slo, overrides, opts, None, requests, seeds).per_seed]


def capacity(name: str, slo: str, overrides: dict, opts: Options, attainment: float | None = None,
             requests: int = 1000) -> tuple[float, float]:
    """(capacity req/s, per GPU) of ``scenarios/reproduce/<name>.yaml`` with ``overrides``, by
    ``find_capacity`` (``slo`` as ``servesim capacity --slo``). When the probes run out before the
    answer is confirmed (noisy short probes), the highest rate that met, noted in ``UNCONFIRMED``."""
    res = _search(name, slo, overrides, opts, attainment, requests, None)
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
    # DistServe's decoding scheduler swaps the newest request out to host memory when the batch
    # outgrows the KV blocks (distserve/decoding_stage_scheduler.py, get_next_batch; swap space 16 GiB)
    "policy.preemption": "swap",
}


# The AE's measurement behind the 4.6x (evaluation/2-benchmark-serving/plot.ipynb, its printed
# output): vLLM's SLO attainment (%) at these per-GPU rates (req/s); DistServe crosses 90% at 2.3 req/s
# per GPU (4.6 x vLLM's 0.5)
DISTSERVE_AE_VLLM_ATTAINMENT = {0.25: 90, 0.5: 90, 1: 85, 1.5: 81, 2: 71, 2.25: 70, 2.5: 68, 3: 55}
DISTSERVE_AE_GOODPUT_PER_GPU = 2.3
DISTSERVE_AE_VLLM_GOODPUT = 0.5
# How the AE measured goodput (evaluation/ae-scripts/e2e/opt-13b-{vllm,distllm}-client.sh and
# plot.ipynb): at each per-GPU rate of this grid, one run of 100 requests per GPU (vLLM 100 on its
# GPU, DistServe 300 on its 3), Poisson arrivals; the share of requests meeting both SLOs; goodput is
# where the curve first falls through 90%, linear between grid points (find_intersection). Short runs
# measure a transient: a decode side slower than the arrivals still meets the SLO for 300 requests.
DISTSERVE_AE_RATES = (0.25, 0.5, 1, 1.5, 2, 2.25, 2.5, 3)
DISTSERVE_AE_REQUESTS_PER_GPU = 100


def attainment_at(name: str, overrides: dict, rate: float, opts: Options, slo=(0.25, 0.1), requests: int = 1000):
    """(SLO attainment, the run's results) of ``name`` at ``rate`` req/s: the share of requests with
    TTFT and TPOT (per request) within ``slo``."""
    res = run(name, {**overrides, "workload.arrival.rate_rps": rate}, opts, requests)
    return res.summary["slo_attainment"], res


def crossing(rates, attainments, target: float) -> float | None:
    """The rate where the curve ``attainments`` (over increasing ``rates``) first falls through
    ``target``, linear between grid points, as the AE's ``find_intersection`` reads it; None when it
    never does (the AE's notebook then answered its first rate with a warning)."""
    for (x0, y0), (x1, y1) in zip(zip(rates, attainments), zip(rates[1:], attainments[1:])):
        if (y0 < target) != (y1 < target):
            return x0 + (target - y0) * (x1 - x0) / (y1 - y0)
    return None


@dataclass
class Goodput:
    """A goodput measured as the DistServe AE does (``ae_goodput``): per-GPU req/s (None: the curve
    never crosses the target on the grid), the mean curve, each seed's own crossing, and at each
    rate the lowest and highest attainment of a seed (``band``: the spread of the AE's single runs)."""

    per_gpu: float | None
    rates: tuple
    attainment: list
    per_seed: list
    band: list = field(default_factory=list)  # [(min, max) over the seeds] per rate

    def curve(self) -> str:
        return ", ".join(f"{r:g}: {a:.0%}" for r, a in zip(self.rates, self.attainment))

    def text(self, target: float = 0.9) -> str:
        """The goodput, or where the curve lies when it never crosses ``target``."""
        if self.per_gpu is not None:
            return f"{self.per_gpu:.3g}"
        if self.attainment and self.attainment[0] < target:
            return f"under {self.rates[0]:g} (below {target:.0%} from the first rate)"
        return f"over {self.rates[-1]:g} (above {target:.0%} to the last rate)"


def ae_goodput(name: str, overrides: dict, gpus: int, opts: Options, target: float = 0.9) -> Goodput:
    """Per-GPU goodput of ``name`` with ``overrides`` on ``gpus`` GPUs by the AE's protocol
    (``DISTSERVE_AE_RATES``, 100 requests per GPU a run). The AE ran one seed a rate; the attainment
    here is the mean over several seeds (8; 3 with ``--quick``), so the crossing is that of the
    expected curve; each seed's own crossing gives the spread a single run has. The grid goes on
    past 3 req/s (steps of 0.5, to 8) while the curve stays above ``target``."""
    base = opts.seed if opts.seed is not None else int(read_yaml(scenario_path(name)).get("seed", 0))
    seeds = seeds_for(base, 3 if opts.quick else 8)
    n = DISTSERVE_AE_REQUESTS_PER_GPU * gpus

    def at(rate: float) -> list:  # each seed's attainment at this per-GPU rate
        return [attainment_at(name, overrides, rate * gpus, replace(opts, seed=s), requests=n)[0] for s in seeds]

    rates = list(DISTSERVE_AE_RATES)
    per_seed = [at(r) for r in rates]
    mean = [sum(a) / len(a) for a in per_seed]
    while min(mean) >= target and rates[-1] < 8:
        rates.append(rates[-1] + 0.5)
        per_seed.append(at(rates[-1]))
        mean.append(sum(per_seed[-1]) / len(seeds))
    seed_x = [crossing(rates, [a[k] for a in per_seed], target) for k in range(len(seeds))]
    return Goodput(crossing(rates, mean, target), tuple(rates), mean, seed_x, [(min(a), max(a)) for a in per_seed])


def decode_rates(res, measured) -> tuple:
    """From a P/D run: (output tokens/s its arrivals ask of the decode side, tokens/s its decode
    steps emitted while busy, tokens/s ``measured`` (a ``StepModel``) gives at the run's mean batch
    and context, that batch, the mean context per sequence)."""
    import numpy as np

    q, st = res.requests, res.steps
    need = q["output_tokens"].sum() / (q["arrival_s"].max() - q["arrival_s"].min())
    dec = (st["prefill_tokens"] == 0) & (st["decode_tokens"] > 0)
    got = st["decode_tokens"][dec].sum() / st["duration_s"][dec].sum()
    seqs = float(np.mean(st["num_seqs"][dec]))
    ctx = float(st["context_tokens"][dec].sum() / st["num_seqs"][dec].sum())
    n = round(seqs)
    return need, got, n / measured.decode_ms(n, n * ctx) * 1e3, seqs, ctx


def prefill_gap_split(profiles: dict, model: str = "facebook/opt-13b") -> tuple:
    """DistServe's profiles of vLLM v0.2.3 and of its own engine (``published_profiles.DISTSERVE``):
    at each TP of ``model``, vLLM's prefill time per prompt token less its engine's (us), fitted by
    least squares as ``cpu + gpu / tp``. Returns (cpu, gpu, largest residual): ``cpu`` is the part
    the same at every TP (host work per prompt token), ``gpu`` the part at TP 1 that the GPUs
    share. The two harnesses time different things (evaluation/0-test-single-forward-performance):
    vLLM's whole ``LLMEngine.step`` (sut/sut_vllm.py: ``LLM.generate(timing=True)``, which the
    artifact's fork times around ``llm_engine.step()``), DistServe's a Ray call of the model's
    forward (sut/sut_distserve.py, ``Worker.step``). Only vLLM's step detokenizes, and v0.2.3
    detokenizes the whole prompt with its first token (vllm/transformers_utils/tokenizer.py
    L134, ``convert_ids_to_tokens(all_input_ids, skip_special_tokens)``; transformers 4.34.0, pinned
    by the fork, recomputes ``all_special_ids`` for every token, tokenization_utils_fast.py L358 and
    tokenization_utils_base.py L1382), after the first token's timestamp
    (vllm/engine/llm_engine.py L374, ``_decode_sequence`` at L417; interestingLSY/vllm
    distserve-baseline-vllm-v0.2.3): in the profile, not in the artifact's TTFT."""
    import numpy as np

    tps = sorted(tp for (m, tp) in profiles["vllm"] if m == model and (m, tp) in profiles["distserve"])
    if len(tps) < 3:  # two points fit any line: no residual to check the split against
        raise ValueError(f"prefill_gap_split: {model} has profiles at TP {tps}; the split needs three or more")
    gap = np.array([(profiles["vllm"][(model, tp)].prefill[1] - profiles["distserve"][(model, tp)].prefill[1]) * 1e3
                    for tp in tps])
    a = np.column_stack([np.ones(len(tps)), 1.0 / np.array(tps, dtype=float)])
    (cpu, gpu), *_ = np.linalg.lstsq(a, gap, rcond=None)
    return float(cpu), float(gpu), float(np.abs(a @ (cpu, gpu) - gap).max())


def gain_bound(num: Goodput, den: Goodput, target: float = 0.9) -> tuple:
    """``num``'s goodput over ``den``'s as (relation, value): ("=", gain) when both curves cross
    ``target``, else the bound the grid gives (a curve below from its first rate: its goodput is under
    that rate; above to its last: over it), ("over", x) or ("under", x); (None, None) when both are
    off the grid on the same side."""
    def side(g: Goodput) -> tuple:  # (value, +1: the goodput is over it, -1: under it, 0: it)
        if g.per_gpu is not None:
            return g.per_gpu, 0
        below = bool(g.attainment) and g.attainment[0] < target
        return (g.rates[0], -1) if below else (g.rates[-1], 1)

    (a, sa), (b, sb) = side(num), side(den)
    if sa == 0 and sb == 0:
        return "=", a / b
    if (sa, sb) in ((1, 0), (0, -1), (1, -1)):
        return "over", a / b
    if (sa, sb) in ((-1, 0), (0, 1), (-1, 1)):
        return "under", a / b
    return None, None


def bound_direction(word: str | None, x: float | None) -> bool | None:
    """The side of 1 a ``gain_bound`` settles: True above, False below, None unsettled."""
    if word == "=":
        return x > 1
    return True if word == "over" and x >= 1 else False if word == "under" and x <= 1 else None


def gain_text(num: Goodput, den: Goodput, target: float = 0.9) -> str:
    """``gain_bound`` in words: "0.742x", or "over 9.09x (a bound from the grid's ends, so above 1)";
    "undefined" only when no value or bound follows."""
    word, x = gain_bound(num, den, target)
    if word == "=":
        return f"{format_value(x)}x"
    if word is None:
        return "undefined (both goodputs off the grid on the same side)"
    side_of_1 = ("so above 1" if x >= 1 else "its side of 1 not settled") if word == "over" else (
        "so below 1" if x <= 1 else "its side of 1 not settled")
    return f"{word} {format_value(x)}x (a bound from the grid's ends, {side_of_1})"


def _spread(g: Goodput) -> str:
    """Each seed's own crossing: the spread of the AE's single runs."""
    xs = sorted(g.per_seed, key=lambda x: (x is None, x or 0.0))
    return ("one run a rate, as the AE ran, crosses at " + ", ".join("-" if x is None else f"{x:.2g}" for x in xs)
            + (" by seed; -: not between the grid's first and last rate" if None in xs else " by seed"))


def exp_distserve(opts: Options) -> Experiment:
    from servesim.cost.published_profiles import DISTSERVE

    eng = ENGINES["vllm-v0.2.3"]
    colo_ov = {**VLLM_V0_SCHEDULER, **engine_overrides(eng)}
    pd_ov = {**PD_DISTSERVE, **engine_overrides(ENGINES["distserve"])}
    colo = ae_goodput("distserve-opt13b", colo_ov, 1, opts)
    pd = ae_goodput("distserve-opt13b", pd_ov, 3, opts)
    gain = pd.per_gpu / colo.per_gpu if pd.per_gpu and colo.per_gpu else None
    relation, bounded = gain_bound(pd, colo)  # a curve off the grid still bounds the gain
    notes = [f"goodput as the AE measures it (per-GPU rates {', '.join(f'{r:g}' for r in DISTSERVE_AE_RATES)} "
             f"req/s, {DISTSERVE_AE_REQUESTS_PER_GPU} requests per GPU a run, the 90% crossing; mean attainment over "
             f"{len(colo.per_seed)} seeds): vLLM "
             f"{colo.text()} req/s ({_spread(colo)}), DistServe {pd.text()} per GPU ({_spread(pd)})",
             f"the attainment curves (per-GPU req/s: share): vLLM {colo.curve()}; DistServe {pd.curve()}; the "
             "artifact's vLLM " + ", ".join(f"{r:g}: {a}%" for r, a in DISTSERVE_AE_VLLM_ATTAINMENT.items())]
    # vLLM v0.2.3's prefill per token against DistServe's engine on the same GPUs (DistServe's profiles)
    dp = DISTSERVE["distserve"][("facebook/opt-13b", 1)].prefill
    slow = {k: DISTSERVE["vllm"][k].prefill[1] / DISTSERVE["distserve"][k].prefill[1] for k in DISTSERVE["vllm"]}
    # of that gap per prompt token, the part the same at every TP is host work inside vLLM's profiled step
    # (the whole prompt detokenized after the first token's timestamp: prefill_gap_split); the part the
    # GPUs share is what a request's TTFT waits for
    host_us, gpu_us, fit_us = prefill_gap_split(DISTSERVE)
    gap = {"cost.per_token_overhead_s": round(gpu_us * 1e-6, 8)}
    slowed = None
    if not opts.quick:
        # the evidence: vLLM with its prefill slowed by the GPU part of the measured gap (as CPU time
        # per scheduled token); the steady state (1,000 requests, keeping up)
        slowed = ae_goodput("distserve-opt13b", {**colo_ov, **gap}, 1, opts)
        slo = "ttft_p90=0.25,tpot_p90=0.1"  # per request with --attainment: both met by >= 90%
        s_colo = capacity("distserve-opt13b", slo, colo_ov, opts, attainment=0.9)[1]
        s_pd = capacity("distserve-opt13b", slo, pd_ov, opts, attainment=0.9)[1]
        att, res = attainment_at("distserve-opt13b", pd_ov, 3 * DISTSERVE_AE_GOODPUT_PER_GPU, opts)
        need, got, theirs, nseq, ctx = decode_rates(res, DISTSERVE["distserve"][("facebook/opt-13b", 1)])
        us = gap["cost.per_token_overhead_s"] * 1e6
        notes += [f"vLLM with its prefill slowed by the GPU part of the gap DistServe measured ({us:.1f} us per "
                  "prompt token): "
                  f"{slowed.curve()}; goodput {slowed.text()}; DistServe's gain against it: "
                  f"{gain_text(pd, slowed)}",
                  f"the steady state instead (servesim capacity --attainment 0.9: 1,000 requests a probe, the server "
                  f"keeping up): vLLM {s_colo:.3g} req/s, DistServe {s_pd:.3g} per GPU ({s_pd / s_colo:.2f}x): over a "
                  "long run DistServe's TP1 decode instance cannot keep up with "
                  f"{3 * DISTSERVE_AE_GOODPUT_PER_GPU:.3g} req/s (attainment {att:.0%} over 1,000 requests): it must "
                  f"emit {need:,.0f} tokens/s; with its KV full it runs {nseq:.0f} sequences of {ctx:.0f} context "
                  f"tokens and emits {got:,.0f} tokens/s, where DistServe's own profile of its engine gives "
                  f"{theirs:,.0f} at that batch ({res.summary['preemptions']} swaps); the AE's 300-request runs end "
                  "before that backlog costs 10% of the requests"]
    missing = [
        "vLLM v0.2.3's slower prompts: DistServe's profiles put its prefill at "
        f"{'/'.join(f'{slow[k]:.2f}' for k in sorted(slow))}x the per-token time of DistServe's own engine on the "
        "same GPUs (OPT-13B at TP 1/2/4, OPT-66B at TP 2/4/8), where servesim prices both at its roofline (within 5% "
        f"of DistServe's engine). On OPT-13B the gap per prompt token is {host_us:.1f} us at every TP plus "
        f"{gpu_us:.1f} us at TP 1 that the GPUs share (fitted within {fit_us:.1f} us): the first is host work that "
        "only vLLM's profiled step holds (v0.2.3 detokenizes the whole prompt there, after the first token's "
        "timestamp: not in the artifact's TTFT), the second makes vLLM's prompt GPU time "
        f"{1 + gpu_us / (dp[1] * 1e3):.2f}x DistServe's, for a cause no source names (Splitwise's profile of the "
        "same-era vLLM on Llama-2-70B shows no such gap), so it is not modelled; it sets how many long prompts miss "
        "the 0.25 s TTFT at low load (the artifact's vLLM: 90% attainment already at 0.25 req/s), hence vLLM's goodput",
    ]
    series = [{"label": f"vLLM, servesim (goodput {colo.text()})", "rates": list(colo.rates),
               "attainment": colo.attainment, "band": colo.band, "goodput": colo.per_gpu},
              {"label": f"vLLM, the artifact's runs (goodput {DISTSERVE_AE_VLLM_GOODPUT:g})",
               "rates": list(DISTSERVE_AE_VLLM_ATTAINMENT),
               "attainment": [a / 100 for a in DISTSERVE_AE_VLLM_ATTAINMENT.values()], "measured": True,
               "goodput": DISTSERVE_AE_VLLM_GOODPUT},
              {"label": f"DistServe, servesim (goodput {pd.text()}; the artifact: {DISTSERVE_AE_GOODPUT_PER_GPU:g})",
               "rates": list(pd.rates), "attainment": pd.attainment, "band": pd.band, "goodput": pd.per_gpu}]
    if slowed is not None:
        g = "never reaches 90%" if slowed.per_gpu is None else f"goodput {slowed.per_gpu:.3g}"
        series.insert(1, {"label": f"vLLM, servesim, prompt GPU time as DistServe measured it ({g})",
                          "rates": list(slowed.rates), "attainment": slowed.attainment, "band": slowed.band,
                          "goodput": slowed.per_gpu})
    plot = {"title": "OPT-13B chatbot on A100-80GB: DistServe (prefill TP2 + decode TP1, 3 GPUs) vs vLLM (TP1, "
                     "1 GPU)\n"
                     f"SLO TTFT 0.25 s and TPOT 0.1 s; each point {DISTSERVE_AE_REQUESTS_PER_GPU} requests per GPU, "
                     f"Poisson, mean of {len(colo.per_seed)} seeds (shaded: the seeds' lowest to highest)",
            "target": 0.9, "series": series}
    cite = "DistServe (Zhong et al., OSDI'24) §6.2 Fig. 8"
    ae = "the AE notebook's output, evaluation/2-benchmark-serving/plot.ipynb"
    ds_fig = Figure("DistServe goodput per GPU (prefill TP2 + decode TP1)", DISTSERVE_AE_GOODPUT_PER_GPU, pd.per_gpu,
                    f"{cite}, OPT-13B chatbot ({ae})", "artifact", "req/s", None,
                    "" if pd.per_gpu is not None else f"the attainment curve never crosses 90%: {pd.text()} req/s")
    vl_fig = Figure("vLLM goodput (TP1, 1 GPU)", DISTSERVE_AE_VLLM_GOODPUT, colo.per_gpu, f"{cite} ({ae})",
                    "artifact", "req/s", None, "; ".join(missing))
    return Experiment(
        "distserve", "DistServe: per-GPU goodput of prefill/decode disaggregation vs colocated vLLM, OPT-13B chatbot",
        "OPT-13B fp16 on A100-80GB SXM; ShareGPT conversation rounds built as DistServe builds them (prompt = the "
        "turns so far, < 2048 tokens), Poisson arrivals; SLO TTFT <= 0.25 s and TPOT <= 0.1 s for >= 90% of "
        "requests (Table 1); goodput = the per-GPU rate where the share meeting it falls through 90%, measured as the "
        "AE measures it (runs of 100 requests per GPU at per-GPU rates 0.25-3 req/s, linear between them). vLLM "
        "v0.2.3 (AE flags): TP1, 1 GPU, block 16, memory utilization 0.95, 16,384 batched tokens, 1,024 sequences, "
        "prompts first (no chunking). DistServe (Table 5): one prefill instance at TP2 (max batch 128, 8,192 "
        "tokens) and one decode instance at TP1 (max batch 1,024; swaps out when its KV is full), 3 GPUs, KV over "
        "NVLink.",
        [Figure("per-GPU goodput, DistServe / vLLM", 4.6, gain,
                f"{cite}: 2.0x-4.6x across OPT-13B/66B/175B; 4.6x is OPT-13B ({ae})", "text + artifact", "x",
                bound_direction(relation, bounded), "; ".join(missing) if gain is not None else
                f"a goodput that never crosses 90% on the grid: vLLM {colo.text()}, DistServe {pd.text()}",
                "" if gain is not None else gain_text(pd, colo)),
         ds_fig, vl_fig],
        notes + ["the workload: see scenarios/reproduce/distserve-opt13b.yaml for how it is rebuilt (means 652 / "
                 "262 tokens, 9.7% of prompts above 1440 tokens)",
                 "the paper's A100s are SXM; the per-request TPOT excludes the first token, as in the paper",
                 "vLLM v0.2.3 pads a batch of prompts to the longest (cost.engine vllm-v0.2.3: count x longest "
                 "against the budget, at most 256 padded tokens, the padding computed); it matters only when prompts "
                 "queue, not at the low loads where the artifact's vLLM already misses 10%",
                 engine_note(eng) + "; DistServe: " + engine_note(ENGINES["distserve"])], eng,
        plots=[("attainment_curves", plot)])


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


def _mean_found(capacities: list) -> float:
    """The mean of the seeds' capacities that were found (none: 0, as a search with no answer)."""
    found = [c for c in capacities if c]
    return sum(found) / len(found) if found else 0.0


def exp_sarathi(opts: Options) -> Experiment:
    eng = ENGINES["sarathi"]
    figs, notes = [], []
    # capacities are means over seeds (each a search of 1,000-request probes): one seed's gain moves
    # by about +-5% (Yi-34B strict: 2.62-2.93x over seeds 0-3), enough to flip a verdict near +-25%
    seeds = 1 if opts.quick else 4
    # (vLLM V0's prefill-only steps are modelled: the baseline runs with policy.prefill_first, and
    # both sides with cost.engine sarathi-serve, the artifact's runtime; what is left is the paper's GPU)
    missing = ("the paper's A100-80GB PCIe (lower memory bandwidth and power limit than the catalog's a100-80g, "
               "the SXM part, which these runs use)")
    for model, (name, strict, relaxed, mov) in SARATHI.items():
        mov = {k: packaged(v) for k, v in mov.items()}
        for slo_name, tbt, budget in (("strict", strict, 512), ("relaxed", relaxed, 2048)):
            slo = f"tbt_p99={tbt},queue_p50=2"
            bases = capacity_seeds(name, slo, {**mov, **VLLM_V0_SCHEDULER, **engine_overrides(eng)}, opts, seeds)
            sss = capacity_seeds(name, slo, {**mov, **sarathi_variant(budget), **engine_overrides(eng)}, opts, seeds)
            base, ss = _mean_found(bases), _mean_found(sss)
            gain = ss / base if base else math.inf
            pub, cite, conf = SARATHI_PUBLISHED[model, slo_name]
            figs.append(Figure(f"{model}, {slo_name} (P99 TBT {tbt:g} s, budget {budget}): capacity gain", pub, gain,
                               cite, conf, "x", gain > 1, missing))
            each = [x / b for x, b in zip(sss, bases) if x and b]  # (the same seed on both sides)
            spread = (f"; seed by seed {min(each):.2f}-{max(each):.2f}x" if len(each) > 1 else "")
            notes.append(f"{model} {slo_name}: vLLM {base:.3g} req/s, Sarathi-Serve {ss:.3g} req/s (mean of "
                         f"{len(bases)} seed{'s' if len(bases) > 1 else ''}{spread})")
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
# the vLLM paper's Orca reimplementation: KV reserved at admission, a buddy allocator; prompts batched
# with the decodes (iteration-level scheduling: prefill_first false, which the vLLM V0 engine profile
# it is priced with would otherwise turn on)
_ORCA = {"policy.reserve_allocator": "buddy", "policy.prefill_first": False}
ORCA = {
    "Orca (Max)": {"policy.reserve": "max", **_ORCA},
    "Orca (Pow2)": {"policy.reserve": "pow2", **_ORCA},
    "Orca (Oracle)": {"policy.reserve": "oracle", **_ORCA},
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
# Llama-2-70B's config with 8,192 positions: Splitwise's vLLM ran prompts up to 8,192 tokens on it
# (its profile, splitwise-sim data/perf_model.csv, has Llama-2-70B rows of 4,096- and 8,192-token
# prompts at TP 2, 4 and 8), where config.json's 4,096 would shorten the coding trace's longer
# prompts to 4,095 tokens and one output token (Table IV's P50 E2E over TTFT and TBT gives 12.9
# decode steps on both machines: the trace's median output of 13 tokens, unshortened)
SPLITWISE_LLAMA = "llama-2-70b-max-model-len-8192.json"
SPLITWISE_LLAMA_OWN_CONTEXT = 4096  # meta-llama/Llama-2-70b-hf config.json max_position_embeddings


def table_iv_overrides(trace: str, gpu: str) -> dict:
    """The overrides of ``splitwise-llama70b`` for one of Table IV's (trace, machine) runs."""
    return {"hardware.gpu": gpu, "workload.preset": PRESETS[trace], "model": packaged(SPLITWISE_LLAMA),
            **engine_overrides(ENGINES["vllm-2023"])}


def shortened_share(trace: str, context: int, n: int = 20000) -> tuple[float, float, float]:
    """Of ``n`` draws of ``trace``'s preset lengths, the share a ``context``-token model shortens
    (``workload.clip_to_context``), and the median output length before and after."""
    import numpy as np

    from servesim.inputs.workload import clip_to_context, sample_lengths

    w = scenario_from_dict(scenario_data("splitwise-llama70b", table_iv_overrides(trace, "a100-80g"))).workload
    rng = np.random.default_rng(0)
    p, o = sample_lengths(w.prompt_tokens, n, rng), sample_lengths(w.output_tokens, n, rng)
    _, o_cut, cut = clip_to_context(p, o, context)
    return float(cut.mean()), float(np.median(o)), float(np.median(o_cut))


# Splitwise's cluster results (§6.2-6.3, Fig. 18a/b): BLOOM-176B, one instance per DGX (TP8), the
# conversation trace. Budgets are counted in machines of the same provisioned power or price.
DGX_GPUS = 8
H100_MACHINES = 40  # Baseline-H100: the unit both budgets are stated in (§6.2)
PAPER_A100_MACHINES = {"iso-power": 70, "iso-cost": 86}  # §6.2: 40 DGX-H100 = 70 / 86 DGX-A100
TABLE_I_USD_PER_MACHINE_HOUR = {"a100-80g": 17.6, "h100-sxm": 38.0}  # Splitwise Table I
# Splitwise-AA for the conversation trace, (prompt, token) DGX-A100 machines: the artifact's
# plots.ipynb provisioning (iso-power 45P + 25T; iso-cost 51P + 35T)
SPLITWISE_AA = {"iso-power": (45, 25), "iso-cost": (51, 35)}
TABLE_VI = {  # SLO: slowdown of each request against itself alone on a DGX-A100 (Table VI)
    ("ttft", "p50"): 2.0, ("ttft", "p90"): 3.0, ("ttft", "p99"): 6.0,
    ("tbt", "p50"): 1.25, ("tbt", "p90"): 1.5, ("tbt", "p99"): 5.0,
    ("e2e", "p50"): 1.25, ("e2e", "p90"): 1.5, ("e2e", "p99"): 5.0,
}
SPLITWISE_IB_GBPS = 200  # DGX-A100 InfiniBand per GPU (Table I), the KV hand-off's link
SPLITWISE_PROMPT_TOKENS = 2048  # prompt machines batch at most 2048 prompt tokens (artifact config)
SPLITWISE_MAX_BATCH = 512  # token machines batch up to memory, at most 512 (artifact config)
SPLITWISE_BLOOM = "bloom-176b-max-model-len-16384.json"  # BLOOM-176B's config with 16,384 positions


def catalog(gpu: str, per: str) -> float:
    """The GPU catalog's per-GPU ``per`` (``power_w``: board power; ``price_per_gpu_hour_usd``)."""
    from servesim.inputs.specs import get_gpu

    return getattr(get_gpu(gpu), per)


def splitwise_sim_token_ms(x: float) -> float:
    """Splitwise's simulator's token time (ms) at ``x`` on its BLOOM-176B DGX-A100 curve
    (``SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS``, keyed by sequences x prompt tokens): linear between
    the keys and extended along the end segments beyond them, as its ``interp1d(...,
    fill_value="extrapolate")``. Its notebook looks a lone request's TBT up at its prompt
    (``notebooks/perf_model.py``, ``add_baseline_perf``); its simulator looks a decode-only step
    up at its number of sequences, one token each (``performance_model.py``,
    ``get_iteration_duration``)."""
    from servesim.cost.published_profiles import SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS as curve

    xs = sorted(curve)
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    return curve[x0] + (curve[x1] - curve[x0]) * (x - x0) / (x1 - x0)


def iso_machines(n: int, gpu: str, per: str, other: str) -> float:
    """DGX machines of ``other`` with the budget of ``n`` of ``gpu`` (``per``: ``power_w`` for
    provisioned power, ``price_per_gpu_hour_usd`` for price), from the catalog."""
    return n * catalog(gpu, per) / catalog(other, per)


def splitwise_baseline(gpu: str, machines: int) -> dict:
    """A Baseline-A100 / -H100 cluster: ``machines`` DGX, each batching prompts with the decodes."""
    return {"hardware.gpu": gpu, "cluster.replicas": machines}


def splitwise_pd(prompt: int, token: int) -> dict:
    """Splitwise-AA: ``prompt`` DGX-A100 prompt machines and ``token`` token machines; the KV goes over
    each GPU's InfiniBand, layer by layer during the prompt's last step (§4.2)."""
    return {"policy.name": "pd_split", "cluster.replicas": 1,
            "policy.prefill": {"replicas": prompt, "policy": "chunked_prefill", "max_num_seqs": SPLITWISE_MAX_BATCH,
                               "max_num_batched_tokens": SPLITWISE_PROMPT_TOKENS},
            "policy.decode": {"replicas": token, "policy": "continuous", "max_num_seqs": SPLITWISE_MAX_BATCH,
                              "max_num_batched_tokens": SPLITWISE_PROMPT_TOKENS},
            "policy.link": {"type": "inter_node", "bandwidth_gbps": SPLITWISE_IB_GBPS, "overlap": True}}


@dataclass
class SplitwiseClusters:
    figures: list
    notes: list
    capacity_rps: dict  # deployment label -> req/s meeting Table VI's SLOs


def splitwise_clusters(opts: Options) -> SplitwiseClusters:
    """Fig. 18a/b: the highest Poisson rate at which each cluster meets Table VI's nine slowdown
    limits (``servesim.studies.slowdown``), the slowdowns taken against each request alone on one
    DGX-A100, and the throughput ratios the paper states."""
    import numpy as np

    from servesim.inputs.presets import PRESETS as PRESETS_LENGTHS
    from servesim.simulation import simulate
    from servesim.studies.slowdown import slowdown_capacity, uncontended

    eng = ENGINES["vllm-2023"]
    common = {"model": packaged(SPLITWISE_BLOOM), **engine_overrides(eng)}
    n = 1500 if opts.quick else 6000
    tol, max_probes = (0.05, 24) if opts.quick else (0.02, 40)
    alone_sc = scenario_from_dict(scenario_data("splitwise-bloom176b", {
        **common, "cluster.replicas": 1, "policy.name": "continuous", "policy.max_num_seqs": 1,
        "policy.max_num_batched_tokens": 16384}, opts))
    cache = {}

    def base(res):
        q = res.requests
        order = q["request_id"].argsort(kind="stable")
        p, o = q["prompt_tokens"][order], q["output_tokens"][order]
        key = p.tobytes() + o.tobytes()
        if key not in cache:
            cache[key] = uncontended(alone_sc, p, o)
        return cache[key]

    a100, h100 = "a100-80g", "h100-sxm"
    power = iso_machines(H100_MACHINES, h100, "power_w", a100)
    price = iso_machines(H100_MACHINES, h100, "price_per_gpu_hour_usd", a100)
    table_i = H100_MACHINES * TABLE_I_USD_PER_MACHINE_HOUR[h100] / TABLE_I_USD_PER_MACHINE_HOUR[a100]
    n_power = math.floor(power + 1e-9)
    deployments = {  # label -> (overrides, DGX machines)
        f"Baseline-A100 ({n_power} DGX-A100)": (splitwise_baseline(a100, n_power), n_power),
        f"Baseline-H100 ({H100_MACHINES} DGX-H100)": (splitwise_baseline(h100, H100_MACHINES), H100_MACHINES),
    }
    for budget, (p, t) in SPLITWISE_AA.items():
        deployments[f"Splitwise-AA {budget} ({p}P + {t}T DGX-A100)"] = (splitwise_pd(p, t), p + t)
    cap, batch, unconfirmed, ran_longer = {}, {}, [], {}
    for label, (ov, machines) in deployments.items():
        seen = {}  # rate -> mean requests in a decode-only step (what bounds TBT)

        def probe(rate, requests=n, ov=ov, seen=seen):  # (requests: more for one too short to tell)
            data = scenario_data("splitwise-bloom176b", {**common, **ov, "workload.arrival.rate_rps": rate}, opts)
            data["workload"]["num_requests"] = requests
            res = simulate(scenario_from_dict(data))
            st = res.steps
            dec = (st["prefill_tokens"] == 0) & (st["decode_tokens"] > 0)
            seen[float(f"{rate:.6g}")] = float(st["num_seqs"][dec].mean()) if dec.any() else 0.0
            return res
        cap[label], done, search = slowdown_capacity(probe, base, TABLE_VI, float(machines), tol, max_probes)
        ran = [e["requests"] for e in search.results.values() if e.get("requests", n) > n]
        if ran:
            ran_longer[label] = ran
        batch[label] = seen.get(cap[label], 0.0)
        if not done:
            unconfirmed.append(label)
    labels = list(deployments)
    ratio = lambda a, b: cap[a] / cap[b] if cap[b] else math.inf  # noqa: E731
    iso_power = ratio(labels[2], labels[0])
    iso_cost = ratio(labels[3], labels[1])
    missing = ("Splitwise's simulator prices a decode-only iteration by its number of sequences alone: it looks the "
               "step up on its profile's token-time curve, keyed by sequences x prompt tokens, at one token a sequence "
               "(splitwise-sim performance_model.py: get_iteration_duration; the notes give the figures), so its token "
               "machines batch up to memory within the 1.25x P50 TBT limit; servesim charges each step its KV reads "
               "(BLOOM-176B's MHA: 4 MB a context token), as that profile's own rows of 32 and 64 sequences grow with "
               "them, so DGX-A100 token machines reach that limit at small batches (the notes give the batch at each "
               "capacity) while DGX-H100's faster steps leave it headroom against the A100-relative limits. Also "
               "missing: Splitwise's mixed pool (prompt and token machines taking each other's work when their pool is "
               "overloaded: its CLS mixed_pool scheduler), whole prompts up to 2048 tokens a batch with a longer one "
               "alone (servesim chunks prompts at 2048 tokens), at most 4 preemptions per request")
    figs = [Figure("iso-power throughput, Splitwise-AA / Baseline-A100 (BLOOM-176B, conversation)", 2.15, iso_power,
                   "Splitwise §6.2, Fig. 18a", "text", "x", iso_power > 1, missing),
            Figure("iso-cost throughput, Splitwise-AA / Baseline-H100 (BLOOM-176B, conversation)", 1.4, iso_cost,
                   "Splitwise §6.3, Fig. 18b", "text", "x", iso_cost > 1, missing)]
    usd = {g: catalog(g, "price_per_gpu_hour_usd") for g in (a100, h100)}
    aa_cost = sum(SPLITWISE_AA["iso-cost"]) * DGX_GPUS * usd[a100]
    h_cost = H100_MACHINES * DGX_GPUS * usd[h100]
    h_kw = H100_MACHINES * DGX_GPUS * catalog(h100, "power_w") / 1e3
    aa70 = ratio(labels[2], labels[1])
    cheaper = 1 - sum(SPLITWISE_AA["iso-power"]) / table_i
    conv = PRESETS_LENGTHS["azure_conv"]["prompt_tokens"]
    longer = 1 - float(np.interp(2048, conv["tokens"], conv["p"]))  # share of prompts BLOOM's 2048 would cut
    notes = [
        "throughput meeting Table VI's nine slowdown limits (Poisson, " + f"{n:,} requests a probe): "
        + ", ".join(f"{k} {v:.3g} req/s" for k, v in cap.items()) + "; requests in a decode-only step at those "
        "rates: " + ", ".join(f"{k.split(' (')[0]} {v:.1f}" for k, v in batch.items()),
        f"budgets from the GPU catalog: 40 DGX-H100 provision {h_kw:.0f} kW = {power:.1f} DGX-A100 at "
        f"{catalog(a100, 'power_w'):.0f} W a GPU (the paper: {PAPER_A100_MACHINES['iso-power']}); "
        f"they cost ${h_cost:,.0f} an hour at the catalog's prices (${usd[h100]:.2f} / ${usd[a100]:.2f} per "
        f"GPU-hour) = {price:.1f} DGX-A100, where Table I's machine prices (${TABLE_I_USD_PER_MACHINE_HOUR[a100]:g} / "
        f"${TABLE_I_USD_PER_MACHINE_HOUR[h100]:g} an hour) give {table_i:.1f} (the paper: "
        f"{PAPER_A100_MACHINES['iso-cost']}). The iso-cost Splitwise-AA runs the paper's "
        f"{'P + '.join(map(str, SPLITWISE_AA['iso-cost']))}T: ${aa_cost:,.0f} an hour at catalog prices, "
        f"{aa_cost / h_cost - 1:+.0%} on Baseline-H100; throughput per dollar at catalog prices: "
        f"{iso_cost * h_cost / aa_cost:.2f}x Baseline-H100's",
        "slowdowns are per request, as Splitwise's simulator computes them: the request's TTFT, mean TBT and E2E "
        "over the same request alone on one DGX-A100 (servesim runs those requests one at a time: whole prompt, "
        "batch 1); percentiles over every request of a probe (an unfinished one infinitely slowed), and the probe "
        "must keep up with its rate (servesim capacity's rule: one too short to tell runs again longer)",
        "which comparison gives the abstract's '1.4x throughput at 20% lower cost' and '2.35x at the same cost and "
        "power' is not stated (notes: the mapping is uncertain); the figures here are the ones §6.2-6.3 tie to "
        f"Fig. 18. Splitwise-AA at iso-power ({sum(SPLITWISE_AA['iso-power'])} DGX-A100, {cheaper:.0%} cheaper than "
        f"40 DGX-H100 at Table I's prices) over Baseline-H100: {aa70:.2f}x",
        f"BLOOM-176B runs with 16,384 positions (the trace's prompts reach {max(conv['tokens']):,.0f} tokens; "
        f"BLOOM's own 2048 would shorten {longer:.0%} of them; Splitwise's performance model was profiled up to "
        "8,192-token prompts); prompts are "
        "chunked at 2048 tokens on prompt and baseline machines (the artifact batches whole prompts up to 2048 "
        "tokens, a longer one alone); KV hand-offs over 200 Gbit/s InfiniBand per GPU, layer by layer",
    ]
    from servesim.core.batch import model_batch
    from servesim.cost.published_profiles import SPLITWISE_CONTEXT
    from servesim.simulation import prepare

    cm = prepare(alone_sc).cost_model
    ours = {k: cm.step_time(model_batch(cm.model, decode_contexts=[SPLITWISE_CONTEXT] * k)).time_s * 1e3
            for k in (32, 64)}
    b, ref = batch[labels[3]], splitwise_sim_token_ms(1020)
    notes.append(
        "Splitwise's simulator on DGX-A100 (splitwise-sim data/perf_model.csv: BLOOM-176B's token_time, keyed by "
        f"sequences x prompt tokens): a decode-only step of {b:.1f} sequences (Splitwise-AA iso-cost's at its capacity "
        f"here) costs {splitwise_sim_token_ms(b):.1f} ms whatever their context (at most "
        f"{splitwise_sim_token_ms(SPLITWISE_MAX_BATCH):.1f} ms up to the {SPLITWISE_MAX_BATCH} sequences a token "
        f"machine takes), against the {ref:.1f} ms its notebook takes as the TBT of a lone 1,020-token request (the "
        "conversation trace's median prompt); the same curve puts 32 and 64 sequences of 512-token prompts "
        f"at {splitwise_sim_token_ms(32 * 512):.1f} and {splitwise_sim_token_ms(64 * 512):.1f} ms, servesim's "
        f"DGX-A100 step at {ours[32]:.1f} and {ours[64]:.1f} ms ({SPLITWISE_CONTEXT} context tokens a sequence, the "
        "rows' mean). Hand-offs go to the token machine with the least KV in use in both (the artifact's mixed_pool "
        "scheduler, find_best_token_instance: the least scheduled memory; servesim: the most free KV blocks)")
    notes += [f"slowdown capacity not confirmed within the probes (the bracket's floor is used): {u}"
              for u in unconfirmed]
    if ran_longer:
        notes.append("probes too short to tell whether they keep up (servesim capacity's rule), run again longer: "
                     + ", ".join(f"{k.split(' (')[0]} {len(v)} (up to {max(v):,} requests)"
                                 for k, v in ran_longer.items()))
    return SplitwiseClusters(figs, notes, cap)


def context_note() -> str:
    """What Llama-2-70B's own 4,096 positions would do to Table IV's lengths (the experiment runs 8,192)."""
    own = SPLITWISE_LLAMA_OWN_CONTEXT
    cut = {t: shortened_share(t, own) for t in PRESETS}
    code = cut["coding"]
    # decode steps in Table IV's coding P50s: (E2E - TTFT) / TBT, per machine
    steps = " and ".join(f"{(e - t) / b:.1f}" for (tr, _), (t, b, e) in TABLE_IV.items() if tr == "coding")
    return (f"Llama-2-70B runs with 8,192 positions ({SPLITWISE_LLAMA}), as Splitwise's vLLM ran it: its profile "
            "(splitwise-sim data/perf_model.csv) prefills Llama-2-70B prompts of 4,096 and 8,192 tokens, and "
            f"Table IV's coding P50s hold {steps} decode steps (E2E less TTFT, over TBT; DGX-A100 and DGX-H100), "
            f"the coding trace's median output of {code[1]:.0f} tokens unshortened. With config.json's {own:,} "
            "positions, servesim would shorten "
            + " and ".join(f"{v[0]:.1%} of the {t} requests" for t, v in cut.items())
            + f" to fit (the prompt to at most {own - 1:,} tokens, the output to what is left: one token after a "
            f"{own - 1:,}-token prompt), the coding median output from {code[1]:.0f} to {code[2]:.0f} tokens and "
            "its P50 E2E with it")


def exp_splitwise(opts: Options) -> Experiment:
    import numpy as np

    eng = ENGINES["vllm-2023"]
    # requests per trace and GPU: a P50 of a few hundred heavy-tailed lengths moves by 10-20% from one
    # sample to the next (400 coding requests, seed 0: median prompt 1,713 where the trace's is 1,469)
    n = 400 if opts.quick else 4000
    sim, med_prompt = {}, {}
    for (trace, gpu) in TABLE_IV:
        res = run("splitwise-llama70b", table_iv_overrides(trace, gpu), opts, n)
        s = res.summary
        sim[trace, gpu] = (s["ttft_s"]["p50"] * 1e3, s["tpot_s"]["p50"] * 1e3, s["e2e_s"]["p50"] * 1e3)
        med_prompt[trace] = float(np.median(res.requests["prompt_tokens"]))
    cite = "Splitwise (Patel et al., ISCA'24), §3.7 Table IV"
    # Splitwise's own profile of its vLLM (perf_model.csv) at the coding trace's median prompt and batch 1
    from servesim.cost.published_profiles import SPLITWISE_DECODE_MS, SPLITWISE_PREFILL_MS

    med = 1469  # the Azure code trace's median prompt (preset azure_code)
    prof = {g: (float(np.interp(med, list(d), list(d.values()))),
                SPLITWISE_DECODE_MS[("meta-llama/Llama-2-70b-hf", g, 8)][1]) for g, d in SPLITWISE_PREFILL_MS.items()}
    pa, da = prof["a100-80g"]
    missing = (f"nothing servesim can take from the engine: Splitwise's own profile of its vLLM (splitwise-sim "
               f"perf_model.csv, Llama-2-70B TP8, DGX-A100) prefills the coding trace's median {med:,}-token prompt in "
               f"{pa:.0f} ms ({pa / 185 - 1:+.0%} on Table IV's P50 TTFT) and decodes at batch 1 in {da:.0f} ms a step "
               f"({da / 52 - 1:+.0%} on the coding P50 TBT, {da / 40 - 1:+.0%} on the conversation one: Table IV's TBT "
               "differs by trace by 30% where a batch-1 step cannot: Llama-2-70B's KV of 1,469 or 1,020 tokens changes "
               "it by under 1%); servesim's TTFT also carries the API server's "
               f"{PROFILES[eng].api_request_s * 1e3:.1f} ms")
    figs = []
    for trace in ("coding", "conversation"):
        for k, metric in enumerate(("TTFT", "TBT", "E2E")):
            faster = sim[trace, "h100-sxm"][k] < sim[trace, "a100-80g"][k]  # Table IV: H100 is faster everywhere
            for gpu in ("a100-80g", "h100-sxm"):
                figs.append(Figure(f"{trace}, {MACHINE[gpu]}: P50 {metric}", TABLE_IV[trace, gpu][k],
                                   sim[trace, gpu][k], cite, "text", "ms", faster, missing))
    clusters = splitwise_clusters(opts)
    figs += clusters.figures
    return Experiment(
        "splitwise", "Splitwise: Llama-70B request latencies on DGX-A100 vs DGX-H100 (Table IV); BLOOM-176B cluster "
        "throughput at iso-power and iso-cost (Fig. 18)",
        "Llama-2-70B at TP8 on 8 x A100-80GB and 8 x H100 SXM, vLLM, no batching (one request at a time: a closed loop "
        "of one client, max batch 1), with 8,192 positions as Splitwise's vLLM ran it (its profile prefills prompts of "
        "up to 8,192 tokens), not its config.json's 4,096, which would cut the coding trace's longer prompts to 4,095 "
        "tokens and one output token; lengths of the Azure LLM inference traces 2023 (the presets fitted to them: "
        "azure_code, azure_conv); P50 over requests of TTFT, TBT (a request's mean time between tokens) and E2E. "
        "Direction: H100 faster than A100 for each metric, as in the paper. Cluster results (Fig. 18, conversation "
        "trace): BLOOM-176B, one instance per DGX (TP8); Baseline-A100 = 70 DGX-A100 (the power of 40 DGX-H100 by the "
        "GPU catalog's board power), Baseline-H100 = 40 DGX-H100, Splitwise-AA = 45 prompt + 25 token DGX-A100 "
        "machines (iso-power) or 51 + 35 (iso-cost: 86 DGX-A100, the paper's price ratio); baselines batch prompts "
        "(2048 tokens a step) with the decodes, Splitwise prompt machines batch 2048 prompt tokens, token machines up "
        "to 512 requests; JSQ by outstanding tokens; Poisson arrivals with azure_conv lengths. Throughput = the "
        "highest rate meeting Table VI's nine limits on per-request slowdown (P50 / P90 / P99 of TTFT 2 / 3 / 6x, TBT "
        "and E2E 1.25 / 1.5 / 5x) against the same request alone on one DGX-A100.",
        figs, ["the Azure traces are the paper's; the presets match their means and quantiles, not row by row",
               context_note(),
               f"P50s over {n:,} requests per trace and machine; their median prompts: coding "
               f"{med_prompt['coding']:,.0f} tokens, conversation {med_prompt['conversation']:,.0f} (the traces': "
               "1,469 and 1,020)",
               "vLLM of late 2023 (vllm-v0.2): a decode step at TP8 is bound by Python launching 80 layers and 160 "
               "NCCL all-reduces; the DGX-H100's host CPU does that 1.3x faster (GpuSpec.host_cpu_speed, fitted to "
               "Splitwise's profile of the engine: the H100 TBT figures are not independent of it; the A100 ones "
               "are, its CPU figures coming from DistServe's profile)",
               engine_note(eng)] + clusters.notes, eng)


def exp_vllm_h100(opts: Options) -> Experiment:
    """The shipped default replayed on measured vLLM V1 runs (``servesim.studies.measured_vllm``):
    per run, mean and p99 of client-side TTFT, TPOT and E2E, measured against simulated. The
    measurements are the "published" figures; there is no direction, only the +-25% rule."""
    from servesim.studies import measured_vllm as mv

    data = mv.data_dir()
    cite = "vLLM v0.15.1 on H100-SXM, measured per request by inference-perf (shared/data/vllm-h100)"
    setup = ("Each measured run in the folder replayed request by request (arrival, prompt and output tokens; the "
             "same 100 prompts again and again, so later uses hit the prefix cache) on the runs' vLLM configuration "
             "(chunked prefill, 2,048-token budget, max_num_seqs 128, prefix caching, fp16; the KV blocks vLLM "
             "logged where the data says them, 7,462 for Llama-2-7B, else servesim's sizing) with servesim's "
             "defaults: the vllm-v1 engine profile and the H100 calibration. The three Llama-2-7B runs (general: 8 "
             "then 20 req/s, 16,800 requests; codegen: 5 then 10 req/s, 9,000; roleplay: 6 req/s, 7,200) are named "
             "by their workload; any other run of the study in the folder (<model>-tp<N>-<workload>.csv) by model, "
             "TP and workload. TPOT is (E2E - TTFT) / (output tokens - 1), as the data's README advises; all three "
             "client-side.")
    if not mv.discover(data):
        why = (f"the measured runs are not on this machine ({data}; set SERVESIM_SHARED_DATA to the folder "
               "holding vllm-h100/)")
        return Experiment("vllm-h100", "Measured vLLM V1 runs on H100, replayed", setup,
                          [Figure("replay of the measured vLLM V1 runs", None, None, cite, "measured", "ms", None,
                                  why)], [why], "vllm-v1")
    _, _, whole, run_notes = mv.errors(data)
    v1 = PROFILES["vllm-v1"]
    api = f"{v1.api_request_s * 1e3:.1f} ms + {v1.api_per_token_s * 1e6:.0f} us per output token"
    tails = (f"the API server's time is a constant per request and token ({api}, vllm-v1's fit): the measured "
             "tail has its jitter, and in general one 490 ms stall, which a constant does not make")
    figs = []
    for w, per in whole.items():
        extra = "; ".join(run_notes.get(w, []))
        for q in ("mean", "p99"):
            for k, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
                measured, simulated = per[k][q]
                why = tails if k == "ttft" else ("nothing named: the replay is the run's own configuration "
                                                 "(tools/calibrate_vllm_h100.py prints every load stage)")
                if k == "ttft" and q == "p99":
                    why = f"{why}; {late_note(per['late'])}"
                if not (math.isfinite(measured) and math.isfinite(simulated)):  # (TPOT of one-token outputs)
                    measured = simulated = None
                    why = "no request of more than one output token: no time per output token"
                figs.append(Figure(f"{w}: {q} {name}", measured, simulated, cite, "measured", "ms", None,
                                   f"{why}; {extra}" if extra else why))
    for w, notes in run_notes.items():
        if w not in whole:  # (not replayed: its model is unknown)
            figs.append(Figure(f"{w}: replay", None, None, cite, "measured", "ms", None, "; ".join(notes)))
    held = sorted(w for w in whole if w not in mv.WORKLOADS)
    return Experiment(
        "vllm-h100", "Measured vLLM V1 runs on H100, replayed", setup, figs,
        [f"the vllm-v1 profile's overlap ({v1.overlap:g}) and API-server time ({api}) and the H100 attention "
         f"kernels' HBM share ({h100_attention_memory():g}) were fitted to the three Llama-2-7B runs "
         "(tools/calibrate_vllm_h100.py; left out one workload at a time, each run's mean errors stay within 7% "
         "TTFT and 2% TPOT/E2E): for them this is a calibration check, not a held-out result",
         (f"held out (no constant fitted to them): {', '.join(held)}" if held else
          "only the calibration runs are in the folder; runs of CodeLlama-34B TP2, Mixtral-8x7B TP2 and "
          "Llama-2-70B TP4 from the same study, held out, are checked by tools/check_vllm_public.py "
          "(docs/cost-model.md, engine profiles)")],
        "vllm-v1")


def late_note(late: dict) -> str:
    """What a p99 TTFT figure says of the requests late on their own (``measured_vllm.late_rows``)."""
    from servesim.studies.measured_vllm import NEIGHBOURS

    (m, s), (pm, ps) = late["share"], late["p99_without"]
    err = f" ({ps / pm - 1:+.0%})" if pm and math.isfinite(pm) and math.isfinite(ps) else ""
    tm, ts = late["threshold_ms"]
    return (f"requests late on their own (TTFT above the median of the {NEIGHBOURS} sent around them by more than "
            f"half the run's own median: {tm:.0f} ms measured, {ts:.0f} ms simulated): {m:.1%} measured, "
            f"{s:.1%} simulated; without the measured ones, p99 TTFT {pm:.1f} ms measured, {ps:.1f} simulated{err}")


def h100_attention_memory() -> float:
    """The H100 calibration's attention HBM-bandwidth share (the vLLM V1 fit's)."""
    from servesim.cost.calibration import efficiencies_for
    from servesim.inputs.specs import get_gpu

    return efficiencies_for(get_gpu("h100-sxm")).attention.memory


EXPERIMENTS = {
    "distserve": exp_distserve,
    "sarathi": exp_sarathi,
    "vllm": exp_vllm,
    "splitwise": exp_splitwise,
    "vllm-h100": exp_vllm_h100,
}


def run_reproduce(names=None, opts: Options = Options(), progress=None, starting=None) -> list[Experiment]:
    """Run the named experiments (all when None), in registry order; ``starting(name, k, n)`` is
    called before each (the k-th of n), ``progress(experiment)`` after."""
    names = list(EXPERIMENTS) if not names else list(dict.fromkeys(names))
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad:
        raise InputError(f"unknown experiment {bad[0]!r}; valid: {', '.join(EXPERIMENTS)}")
    out = []
    todo = [n for n in EXPERIMENTS if n in names]
    for k, n in enumerate(todo, 1):
        if starting:
            starting(n, k, len(todo))
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
def _num(x, unit: str = "", simulated: bool = False) -> str:
    """A figure as the tables print it: tokens and from 1,000 up whole, with thousands separators;
    else a simulated figure as ``format_value`` prints every other number (three significant
    digits, trailing zeros kept: "2.90x", where it read "2.9x"), a published one to at most three
    (the paper's own digits: "3.7x" is what it states, not "3.70x")."""
    if x is None:
        return "-"
    if isinstance(x, tuple):
        return f"{_num(x[0], '', simulated)}-{_num(x[1], '', simulated)}"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if unit == "tokens" or abs(x) >= 1000:
        return f"{x:,.0f}"
    return format_value(x) if simulated else f"{x:.3g}"


def _cell(x, unit: str, simulated: bool = False) -> str:
    s = _num(x, unit, simulated)
    return s if s == "-" else f"{s} {unit}" if unit not in ("x", "") else f"{s}{unit}"


def simulated_text(x) -> str:
    """A simulated figure as the tables print it (``_num``), for the progress lines."""
    return _num(x, simulated=True)


def figure_rows(experiments) -> list[tuple]:
    rows = []
    for e in experiments:
        for f in e.figures:
            rows.append((f"`{e.name}`", f.label, f"{_cell(f.published, f.unit)} ({f.confidence})",
                         _cell(f.simulated, f.unit, True) if f.simulated is not None or not f.bound
                         else f.bound.split(" (")[0], f.ratio_text,
                         {True: "right", False: "wrong", None: "-"}[f.direction], f"**{f.verdict}**"))
    return rows


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


HEADER = ("experiment", "figure", "published", "simulated", "sim / published", "direction", "verdict")
# --quick's short probes and coarse searches move capacities enough to turn verdicts (docs/fidelity.md)
QUICK_NOTE = "quick run: short probes, coarse searches; its verdicts are rough, the full run's can differ"
ROUGH = "verdict (rough: --quick)"


def fidelity_table(experiments, quick: bool = False) -> str:
    """The one-line-per-figure Markdown table (the fidelity guide and the top of reproduce.md); a
    quick run's verdict column says they are rough."""
    return _md_table(HEADER[:-1] + ((ROUGH,) if quick else HEADER[-1:]), figure_rows(experiments))


def summary_line(experiments, quick: bool) -> str:
    figs = [f for e in experiments for f in e.figures]
    sim = [f for f in figs if f.simulated is not None]
    # (an absolute figure with no ordering to show has no direction: it is not counted as one right)
    # (a figure not simulated but bounded, as a gain whose goodput never crosses the target on the grid,
    # has the direction its bound settles)
    directed = [f for f in figs if f.direction is not None and (f.simulated is not None or f.bound)]
    # (as the verdict says it: a bound that settles no side of 1, or "undefined", is not simulated)
    unsimulated = sum(f.simulated is None and not (f.bound and f.direction is not None) for f in figs)
    right = sum(bool(f.direction) for f in directed)
    within = sum(bool(f.within) for f in sim)
    rated = sum(f.within is not None for f in sim)
    # the measured vLLM runs are the ones the default calibration was fitted to: counted apart, so
    # the headline does not pass a fit's own residuals off as reproduced papers
    fitted = [f for f in figs if f.confidence == "measured"]
    papers = [f for f in figs if f.confidence != "measured"]
    split = (f"; matched apart: the papers' {sum(f.matches for f in papers)} of {len(papers)}, the measured vLLM "
             f"runs the calibration was fitted to {sum(f.matches for f in fitted)} of {len(fitted)}"
             if fitted and papers else "")
    if fitted and not papers:  # (vllm-h100 alone: no paper among them)
        split = "; all of them the measured vLLM runs the calibration was fitted to, not papers"
    # (no figure with a direction, as vllm-h100's measured latencies: "direction right for 0 of 0")
    dirs = f"direction right for {right} of {len(directed)} with a direction, " if directed else ""
    return (f"{sum(f.matches for f in figs)} of {len(figs)} published figures matched (direction right and "
            f"within +-{TOLERANCE:.0%}; direction right alone where no number is published); {dirs}"
            f"within +-{TOLERANCE:.0%} for "
            f"{within} of {rated} with a published number; {unsimulated} not simulated{split}"
            + (f" ({QUICK_NOTE})" if quick else ""))


def reproduce_markdown(experiments, opts: Options, files: dict | None = None) -> str:
    """The report; ``files``: experiment name -> its figure's file name (``draw_plots``)."""
    parts = ["# servesim reproduce", "", summary_line(experiments, opts.quick) + ".", "",
             "Verdicts: direction right (a gain on the same side of 1 as published, or the paper's ordering of "
             f"absolute figures) and simulated / published within 1 +- {TOLERANCE:g} (a published range: within "
             f"[lo x {1 - TOLERANCE:g}, hi x {1 + TOLERANCE:g}]). One calibration for every experiment; each "
             "paper's configuration as published.", "", fidelity_table(experiments, opts.quick), ""]
    for e in experiments:
        parts += [f"## `{e.name}`: {e.title}", "", f"**Setup.** {e.setup}", ""]
        parts += [_md_table(("figure", "published", "simulated", "sim / published", "direction",
                             ROUGH if opts.quick else "verdict", "citation"),
                            [(f.label, _cell(f.published, f.unit), _cell(f.simulated, f.unit, True),
                              f.ratio_text,
                              {True: "right", False: "wrong", None: "-"}[f.direction], f.verdict,
                              f"{f.citation} ({f.confidence})") for f in e.figures]), ""]
        gaps = sorted({f.missing for f in e.figures if not f.matches and f.missing})
        if gaps:
            parts += ["**Not matched; missing:**", ""] + [f"- {g}" for g in gaps] + [""]
        parts += ["**Notes.**", ""] + [f"- {n}" for n in e.notes] + [""]
        if files and e.name in files:
            parts += [f"![{e.title}]({files[e.name]})", ""]
        parts += [f"_({e.wall_s:.1f} s wall)_", ""]
    return "\n".join(parts)


def draw_plots(experiments, out: Path) -> dict:
    """Render each experiment's plot panels side by side into ``out/<name>.png``; name -> file. An
    experiment's PNG from an earlier run that this one does not draw is removed (it would sit beside
    a report that does not show it)."""
    import servesim.plots.reproduce as pr
    from servesim.plots.figures import panels_png

    files = {}
    for e in experiments:
        if e.plots:
            panels_png(pr, e.plots, out / f"{e.name}.png", (7, 4.5))
            files[e.name] = f"{e.name}.png"
    for name in EXPERIMENTS:
        if name not in files:
            (out / f"{name}.png").unlink(missing_ok=True)
    return files


def write_reproduce(experiments, out: Path, opts: Options) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = draw_plots(experiments, out)
    (out / "reproduce.md").write_text(reproduce_markdown(experiments, opts, files))
    (out / "reproduce.json").write_text(json_text(
        {"quick": opts.quick, "seed": opts.seed, "tolerance": TOLERANCE,
         "summary": summary_line(experiments, opts.quick),
         "experiments": [{"name": e.name, "title": e.title, "setup": e.setup, "engine": e.engine,
                          "notes": e.notes, "wall_s": e.wall_s, "figures": [f.to_dict() for f in e.figures],
                          "plots": [{"kind": fn, "data": data} for fn, data in e.plots]}
                         for e in experiments]}, indent=1))


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
    block = f"{BEGIN}\n{summary_line(experiments, opts.quick)}.\n\n{fidelity_table(experiments, opts.quick)}\n{END}"
    path.write_text(text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):])
