"""``simulate(scenario) -> Results``: the one entry point for the CLI and the Python API."""

from __future__ import annotations

import functools
import math
import os
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.pd_split import link_figures
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for
from servesim.cost.engines import DEFAULT_WATERMARK, EngineSetup, cost_model_for, prefill_first_for
from servesim.cost.economics import PoolUse, economics, gpu_price, gpu_tdp, phase_cost_shares
from servesim.cost.measured import load_measured
from servesim.core.router import make_router
from servesim.errors import InputError, PluginError, clip, did_you_mean, is_plugin, plugin_name, shown_path
from servesim.plugins import construct, plugin_warnings
from servesim.core.kv import GIB, KvCapacity, activation_reserve_bytes, size_kv
from servesim.core.clients import drive_closed_loop, drive_sessions
from servesim.core.cluster import Cluster
from servesim.core.instant import end_of_instant
from servesim.outputs.columns import REQUEST_COLUMNS, STEP_COLUMNS
from servesim.outputs.checks import run_warnings, slo_floor_text
from servesim.outputs.profile import profile_summary
from servesim.outputs.recorder import Recorder
from servesim.outputs.stats import WeightedSample, dist_stats, offered_rate
from servesim.outputs.summary import summarize, summarize_classes
from servesim.outputs.writer import OUTPUTS, Labels, check_format, parse_outputs, write_run
from servesim.core.decisions import DecisionTracer, summarize_decisions
from servesim.outputs.fairness import fairness_summary
from servesim.core.request import Request
from servesim.inputs.scenario import Scenario, checked, scenario_to_yaml
from servesim.inputs.specs import (activation_dtype, check_gpu_names, checkpoint_note, dtype_error, get_gpu, get_model,
                                   tp_error)
from servesim.inputs.sessions import Sessions
from servesim.inputs.workload import (ClosedLoop, RequestSpecs, check_files, check_specs, expected_requests,
                                     generate, match_classes, mean_output_tokens)
from servesim import resources


@dataclass(frozen=True)
class PoolSetup:
    """One pool of identical replicas: "colocated", or "prefill" / "decode" with a P/D split."""

    name: str
    replicas: int
    cost_model: CostModel
    capacity: KvCapacity
    policy_name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    policy_cfg: object
    spec: tuple | None  # (k, acceptance_rate, draft CostModel or None)
    swap: tuple  # (host blocks, bytes per block, host copy bytes/s)
    engine: EngineSetup | None = None  # the engine profile's figures the steps are priced with

    def make_policy(self):
        """A fresh policy for one replica (a policy may keep state between its steps)."""
        policy = construct("policy", self.policy_name, "policy.name" if self.name == "colocated" else
                           f"policy.{self.name}.policy", self._policy_cfg, self.cost_model.model)
        if self.name == "decode" and isinstance(policy, ContinuousPolicy) and not policy.chunked:
            # a request preempted on the decode side is recomputed there in chunks of the step's
            # budget (a whole-sequence recompute would need a budget of prompt + output tokens,
            # and whole-prompt admission would reject every request longer than the pool's
            # max_num_seqs-sized budget), once the KV of its whole sequence is free (its decodes
            # and hand-offs are scheduled alike either way): continuous batching, or a plug-in
            # built on it (a queue order of its own)
            policy = dataclasses.replace(policy, chunked=True, recompute_whole=True)
        if self.name == "prefill" and isinstance(policy, ContinuousPolicy) and not policy.chunked:
            # (its rejections name the field the budget came from: the pool's own, else the top-level one)
            own = getattr(self.policy_cfg.prefill, "max_num_batched_tokens", None) is not None
            policy = dataclasses.replace(policy, prefill_budget_path="policy.prefill.max_num_batched_tokens" if own
                                         else "policy.max_num_batched_tokens")
        prof = self.engine.profile if self.engine is not None else None
        if prof is not None and isinstance(policy, ContinuousPolicy):
            # the engine profile's scheduler rules, those it sets: prompt-only steps padded to the
            # longest (max_paddings, cost.engine vllm-v0.2.3); vLLM V0's block manager, where a
            # decoding request needs a free KV block at its turn (can_append_slot); vLLM V0's, where a
            # recompute is admitted above the watermark (can_allocate) and an admitted prompt takes
            # the blocks of its whole sequence at once, chunked or not (allocate); vLLM v0.4-v0.5's
            # chunked-prefill scheduler, where a running group mid-prompt needs a free block too and
            # prompts are admitted in a step that preempted, swapped-out requests left behind
            rules = {f: getattr(prof, f) for f in ("max_paddings", "decode_needs_free_block", "watermark_on_recompute",
                                                   "whole_prompt_blocks", "prefill_needs_free_block",
                                                   "admit_past_preemption")}
            rules = {f: v for f, v in rules.items() if v is not None and v is not False}
            if rules:
                policy = dataclasses.replace(policy, **rules)
        return policy

    @property
    def watermark(self) -> float:
        """The admission watermark the pool's policy keeps: the scenario's ``policy.watermark``, else
        (null) the engine profile's (``EngineProfile.watermark``: none for vllm-v1)."""
        given = self.policy_cfg.watermark
        if given is not None:
            return given
        return self.engine.profile.watermark if self.engine is not None else DEFAULT_WATERMARK

    @property
    def prefill_first(self) -> bool:
        """Whether the pool's continuous policy runs prompt-only steps: the scenario's
        ``policy.prefill_first``, else (null) the engine profile's (``prefill_first_for``: vLLM V0's
        and Sarathi-Serve's scheduler without chunked prefill) on a colocated pool."""
        given = self.policy_cfg.prefill_first
        if given is not None or self.name != "colocated":
            return bool(given)
        return prefill_first_for(None, self.policy_name,
                                 self.engine.profile.name if self.engine is not None else None)

    @functools.cached_property
    def _policy_cfg(self):
        return dataclasses.replace(self.policy_cfg, max_num_seqs=self.max_num_seqs,
                                   max_num_batched_tokens=self.max_num_batched_tokens, watermark=self.watermark,
                                   prefill_first=self.prefill_first)


@dataclass(frozen=True)
class Setup:
    """Everything resolved from a scenario before the run (what ``servesim validate`` checks)."""

    scenario: Scenario
    pools: tuple  # PoolSetup, ...
    link: tuple = (1.0, 0.0)  # P/D hand-off (bytes/s, latency_s)

    @property
    def pools_by_name(self) -> dict:
        return {p.name: p for p in self.pools}

    @property
    def cost_model(self) -> CostModel:
        return self.pools[0].cost_model

    @property
    def capacity(self) -> KvCapacity:
        return self.pools[0].capacity


def _pool(scenario: Scenario, name: str, model, gpu_name: str, gpu_path: str, tp: int, tp_path: str,
          policy_name: str, max_num_seqs: int, max_num_batched_tokens: int) -> PoolSetup:
    hw, mem, pol = scenario.hardware, scenario.memory, scenario.policy
    gpu = get_gpu(gpu_name, gpu_path)
    bad_dtype = dtype_error(gpu, hw.dtype, "hardware.dtype")
    if bad_dtype:
        raise InputError(bad_dtype)
    if model.num_layers < hw.pp:
        raise InputError(f"hardware.pp={hw.pp} exceeds the model's {model.num_layers} layers")
    bad_tp = tp_error(model, tp, hw.expert_parallel)
    if bad_tp:
        raise InputError(f"{tp_path}={tp} {bad_tp}")
    if hw.expert_parallel and not model.is_moe:
        raise InputError(f"hardware.expert_parallel: {model.name} is a dense model; expert parallelism needs a "
                         "mixture-of-experts model (set it to false)")
    kv_dtype = hw.kv_dtype or activation_dtype(hw.dtype)  # vLLM's kv_cache_dtype "auto"
    eff = efficiencies_for(gpu, scenario.cost.calibration)
    measured = None
    if scenario.cost.profiles is not None:
        measured = load_measured(scenario.cost.profiles, model, tp, gpu, hw.dtype)
    # TP all-reduce inside the NVLink domain: cost.allreduce, else the engine profile's
    cm, engine = cost_model_for(model, gpu, eff, tp, scenario.cost.engine, max_num_seqs, scenario.cost, pp=hw.pp,
                                dtype=hw.dtype, kv_dtype=kv_dtype, measured=measured,
                                expert_parallel=hw.expert_parallel)
    allreduce = cm.allreduce
    spec = None
    draft_bytes = draft_kv_bytes = 0.0
    if pol.spec is not None:
        draft = None
        if pol.spec.draft != "ngram":
            dm = get_model(pol.spec.draft, "policy.spec.draft")
            bad_draft = tp_error(dm, tp)
            if bad_draft:  # (the draft runs on the target's GPUs, split as many ways)
                raise InputError(f"policy.spec.draft: {dm.name} runs on the target's {tp} tensor-parallel GPUs, "
                                 f"and {tp_path}={tp} {bad_draft}; use a draft whose heads divide by it")
            # draft forwards run under CUDA graphs: a launch-sized overhead, not a scheduler step's
            draft = CostModel(dm, gpu, tp, 1, hw.dtype, kv_dtype, 3e-4, 0.0, eff, allreduce=allreduce)
            draft_bytes = draft.weight_bytes
            # vLLM sizes the cache for both models: each block holds the draft's KV of its
            # tokens too, so a token costs the target's KV plus the draft's (per GPU)
            draft_kv_bytes = draft.kv_bytes_per_token_per_gpu()
        spec = (pol.spec.num_speculative_tokens, pol.spec.acceptance_rate, draft)
    if mem.activation_reserve_gib is not None:
        reserve = mem.activation_reserve_gib * GIB
    else:
        reserve = activation_reserve_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    where = "hardware" if name == "colocated" else f"policy.{name}"
    try:
        cap = size_kv(cm, mem.gpu_memory_utilization, mem.block_size, reserve, mem.num_gpu_blocks, draft_bytes,
                      where, draft_kv_bytes)
    except InputError as e:
        # a checkpoint published in another dtype than the one priced (DeepSeek-V3's FP8, priced
        # bf16) may fit as vLLM loads it: say so, as run and validate do of a model that fits, and
        # whether it does
        note = checkpoint_note(scenario.model, hw.dtype)
        if note is None:
            raise
        raise InputError(f"{e} Note: {note[1]}{_published_fit(cm, gpu, note[0], mem, reserve, draft_bytes)}.") \
            from None
    # vLLM gives each GPU swap_space of host memory, counted in that GPU's own blocks (the stage with
    # the most layers); a block swaps what all the ranks hold: an MLA latent (or a KV head replicated
    # over more ranks than heads) once per rank, not once per replica
    gpu_block_bytes = cm.kv_bytes_per_token_per_gpu() * mem.block_size
    host_blocks = int(mem.swap_space_gib * GIB // gpu_block_bytes)
    block_bytes = gpu_block_bytes * cm.num_gpus
    if spec is not None and spec[2] is not None:
        # a swapped block carries the draft's KV of its tokens too (vLLM V0 gives the draft's
        # cache engine as many host blocks as the target's, beside swap_space)
        block_bytes += spec[2].kv_bytes_per_token_per_gpu() * mem.block_size * cm.num_gpus
    host_bw = mem.swap_bandwidth_gb_per_s * 1e9 if mem.swap_bandwidth_gb_per_s else gpu.pcie_bw_bytes_per_s
    swap_bw = host_bw * cm.num_gpus
    return PoolSetup(name, 0, cm, cap, policy_name, max_num_seqs, max_num_batched_tokens, pol, spec,
                     (host_blocks, block_bytes, swap_bw), engine)


def _published_fit(cm, gpu, dtype: str, mem, reserve: float, draft_bytes: float) -> str:
    """Whether ``cm``'s model fits its GPUs with its weights in ``dtype`` (its published
    checkpoint's), for the does-not-fit error: ", which fits: ..." or "; in fp8 it does not fit
    either: ..."; "" where ``dtype`` does not run on the GPU (``dtype_error`` says why on its own)."""
    if dtype_error(gpu, dtype, "hardware.dtype"):
        return ""
    pub = dataclasses.replace(cm, dtype=dtype)
    per_gpu = max(pub.stage_weight_bytes()) / pub.tp / GIB
    try:
        size_kv(pub, mem.gpu_memory_utilization, mem.block_size, reserve, None, draft_bytes)
    except InputError:
        return f"; with {dtype} weights ({per_gpu:.1f} GiB per GPU) it does not fit either"
    return f", with which it fits ({per_gpu:.1f} GiB of weights per GPU)"


def pd_split_replicas(replicas: int) -> tuple[int, int]:
    """(prefill, decode) replicas of a P/D split with the GPUs of ``replicas`` colocated ones: half
    each, the odd one to decode (where the KV of every running request lives)."""
    p = max(1, replicas // 2)
    return p, max(1, replicas - p)


def check_cost_gpus(mappings: dict, gpus, whose: str, where: str = "") -> None:
    """The GPU names of ``cost.gpu_hour_usd`` / ``cost.gpu_power_w`` (``mappings``: {field: its
    value}; a number for every GPU names none) are catalog GPUs or ``gpus``, which ``whose``
    describes in the message ("this deployment (h100-sxm)"); ``where`` leads it."""
    from servesim.inputs.specs import GPUS

    known = set(GPUS) | set(gpus)
    for key, value in mappings.items():
        for name in value if isinstance(value, dict) else ():
            if name not in known:
                raise InputError(f"{where}cost.{key}.{name}: not a GPU of the catalog or of {whose};"
                                 f"{did_you_mean(name, known)}")


def prepare(scenario: Scenario) -> Setup:
    model = get_model(scenario.model)
    hw, pol = scenario.hardware, scenario.policy
    check_prefix_caching(scenario, model)
    setup = _prepare(scenario, model, hw, pol)
    gpus = [p.cost_model.gpu.name for p in setup.pools]
    check_cost_gpus({k: getattr(scenario.cost, k) for k in ("gpu_hour_usd", "gpu_power_w")}, gpus,
                    f"this deployment ({', '.join(sorted(set(gpus)))})")
    return setup


def check_prefix_caching(scenario: Scenario, model) -> None:
    """Refuse ``policy.prefix_caching`` with a model that attends within a sliding window on every
    layer, whatever the deployment (``servesim plan`` asks once, not shape by shape)."""
    pol = scenario.policy
    if pol.prefix_caching and model.sliding_window_tokens is not None:
        # (a preset turns it on where the policy does not say: the scenario may not name it at all)
        by = f" (policy.preset={pol.preset} turns it on where the policy does not give it)" if pol.preset else ""
        # vLLM V0 refused the pair (CacheConfig._verify_prefix_caching: "Prefix caching is not
        # supported with sliding window"); V1 caches it (vllm/v1/core/single_type_kv_cache_manager.py,
        # SlidingWindowManager.find_longest_cache_hit: a hit needs the cached blocks of the window's
        # tokens before it, the blocks out of the window freed), which the KV model here does not do
        raise InputError(f"policy.prefix_caching: not modelled with sliding-window attention (model {model.name} "
                         f"attends within {model.sliding_window_tokens} tokens): vLLM V1 caches prefixes under a "
                         "sliding window (a hit keeps only the window's blocks before it; V0 refused the pair), "
                         f"servesim does not; set it to false{by}")


def _stalled_where(replicas) -> str:
    """Where the requests of a stalled run sit (for the error naming the plug-in policy)."""
    counts = {"waiting (state.waiting)": 0, "landed on a P/D decode replica (state.landed)": 0,
              "swapped out (state.swapped)": 0, "running": 0}
    for r in replicas:
        for what, n in zip(counts, (len(r.waiting) + len(r.incoming), len(r.landed), len(r.swapped),
                                    len(r.running) + len(r._members))):
            counts[what] += n
    return ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "none on a replica"


def _prepare(scenario: Scenario, model, hw, pol) -> Setup:
    if pol.name != "pd_split":
        pool = _pool(scenario, "colocated", model, hw.gpu, "hardware.gpu", hw.tp, "hardware.tp", pol.name,
                     pol.max_num_seqs, pol.max_num_batched_tokens)
        return Setup(scenario, (dataclasses.replace(pool, replicas=scenario.cluster.replicas),))
    if scenario.cluster.replicas != 1:
        n = scenario.cluster.replicas
        p, d = pd_split_replicas(n)
        raise InputError(f"cluster.replicas: with policy.name=pd_split, set policy.prefill.replicas and "
                         f"policy.decode.replicas instead; the same {n} replicas' GPUs as a split: "
                         f"cluster.replicas=1 policy.prefill.replicas={p} policy.decode.replicas={d}")
    pools = []
    for name in ("prefill", "decode"):
        p = getattr(pol, name)
        seqs = p.max_num_seqs or pol.max_num_seqs
        budget = p.max_num_batched_tokens or pol.max_num_batched_tokens
        if name == "decode":
            # a decode step carries one token per running sequence (and a preempted request's
            # recompute, chunked within the same budget): the pool's steps, and its activation
            # reserve, are sized by max_num_seqs, whatever prefill-sized budget was copied here
            budget = min(budget, seqs)
        # (a GPU or TP the pool leaves to the top-level value is named where it was written)
        pool = _pool(scenario, name, model, p.gpu or hw.gpu, f"policy.{name}.gpu" if p.gpu else "hardware.gpu",
                     p.tp or hw.tp, f"policy.{name}.tp" if p.tp else "hardware.tp", p.policy, seqs, budget)
        pools.append(dataclasses.replace(pool, replicas=p.replicas))
    pf, dc = pools
    # (a run labels each pool's GPU by its name, and cost.gpu_hour_usd / gpu_power_w map GPUs by
    # name: two files of one name would read as one GPU, as servesim plan refuses them in --gpus)
    named = [(k, getattr(pol, k).gpu) for k in ("prefill", "decode")]
    check_gpu_names([(f"policy.{k}.gpu={shown_path(g)}" if g else f"hardware.gpu={shown_path(hw.gpu)}", g or hw.gpu,
                      f"policy.{k}.gpu" if g else "hardware.gpu") for k, g in named],
                    "policy.name=pd_split",
                    "a run names each pool's GPU by its name (summary.json, figures, the economics line) and "
                    "cost.gpu_hour_usd / gpu_power_w map GPUs by name")
    # every GPU sends (or receives) its share of each token's KV in parallel, so the side whose GPUs
    # hold the most of it sets the pace: min(TP) ranks on each of the PP stages, unless TP ranks
    # keep copies (an MLA latent is whole on every rank, as is a KV head with fewer heads than ranks):
    # each decode GPU then needs all of its copy over its own link
    per_gpu = max(pf.cost_model.kv_bytes_per_token_per_gpu(), dc.cost_model.kv_bytes_per_token_per_gpu())
    # (within a node, pools of two GPU types: the KV crosses the slower GPU's links too)
    gpu = min((pf.cost_model.gpu, dc.cost_model.gpu), key=lambda g: (g.link_bw_bytes_per_s, -g.link_latency_s))
    link = link_figures(pol.link, gpu, model.kv_bytes_per_token(pf.cost_model.kv_dtype) / per_gpu)
    return Setup(scenario, tuple(pools), link)


@dataclass
class Results:
    """What ``simulate`` returns: one run's figures, as ``servesim run`` writes them (``write``).
    Times are seconds of simulated time from the run's start.

    - ``scenario``: the ``Scenario`` that ran (resolved; ``scenario.yaml``).
    - ``summary``: the ``summary.json`` contents (a dict of plain values; docs/outputs.md names
      every key), but for ``files``, which only a written folder has.
    - ``requests``: ``requests.csv``'s columns, name -> numpy array with one value per request in
      request-id order (times in seconds, NaN where the file's cell is empty; ``status``,
      ``reason`` and ``class`` as text).
    - ``steps``: ``steps.csv``'s columns, name -> numpy array with one value per step, but for the
      file's ``bound`` text: ``compute_bound``, True where the file says ``compute``.
    - ``tbt``: every gap between consecutive tokens of a request (seconds) as values with counts
      (``servesim.outputs.stats.WeightedSample``); ``tbt_s`` spells them out as one array.
    - ``kv_blocks_in_use``: per replica, the KV blocks still in use at the end (0 when every
      request there ended).
    - ``queue_samples``: ``(time_s, replica, waiting, running)`` tuples, every ``sample_every_s``
      of ``simulate``; empty unless it was given.
    - ``engine_stats``: per pool, what took the fast engine's path, summed over its replicas:
      ``steps`` decided one by one, ``set_steps`` of them with the decode set as one aggregate,
      ``runs`` of decode steps run as one event with the ``run_steps`` inside them, ``held_runs`` of
      those runs held until a completion (requests waiting for room: ``Batch.until_completion``).
    - ``decisions``: the decision trace's columns (``servesim.core.decisions.COLUMNS``) with
      ``simulate(decision_trace=True)``, else None.
    - ``write(folder)``: the run's files, as ``servesim run`` writes them.
    """

    scenario: Scenario
    summary: dict
    requests: dict  # column -> numpy array (REQUEST_COLUMNS)
    steps: dict  # column -> numpy array
    tbt: WeightedSample  # every gap between consecutive tokens (``tbt_s`` spells them out)
    kv_blocks_in_use: list  # per replica, at the end of the run (0 when every request ended)
    queue_samples: list  # (time_s, replica, waiting, running) when sampling was asked for
    # what took the engine's fast path, per pool, summed over its replicas (``Replica.stats``):
    # steps committed one by one, those with the decode set scheduled as one aggregate, runs of
    # decode steps and the steps inside them
    engine_stats: dict = dataclasses.field(default_factory=dict)
    # the decision trace's spans (``servesim.core.decisions.COLUMNS``), when asked for
    decisions: dict | None = None

    def __repr__(self) -> str:
        # (the dataclass's repr spelled out the scenario, the summary and every column: some 40,000
        # characters for a notebook cell that ends with ``res``)
        s = self.summary
        n = s.get("num_requests")
        return (f"<servesim.Results of {s.get('scenario')!r}: {n} request{'' if n == 1 else 's'}, {s.get('completed')} "
                f"completed, {s.get('rejected')} rejected, {s.get('unfinished')} unfinished in "
                f"{s.get('sim_time_s') or 0.0:.4g} s simulated; .summary, .requests, .steps, .write(folder)>")

    @property
    def tbt_s(self) -> np.ndarray:
        """Every TBT gap (order unspecified); large runs: prefer ``tbt`` (values with counts)."""
        return self.tbt.expand()

    def write(self, out_dir: str | Path, outputs=OUTPUTS, fmt: str = "csv", tbt: bool = False) -> Path:
        """Write the output contract into ``out_dir``, whole or not at all (``write_run``): of
        summary.json, requests.csv, steps.csv and scenario.yaml, those named in ``outputs``;
        ``fmt="parquet"``: requests.parquet and steps.parquet instead of the CSV files (needs
        pyarrow); ``tbt``: also tbt_s.npy, every TBT gap (sweeps keep it). Returns the folder.
        ``outputs`` may be a list of names or ``"summary,requests"`` as ``--outputs`` takes it;
        an unknown name or format is an ``InputError`` naming what is valid."""
        if not isinstance(out_dir, (str, os.PathLike)):
            raise TypeError(f"Results.write(out_dir): a folder path (str or pathlib.Path), "
                            f"got {type(out_dir).__name__}")
        if not isinstance(outputs, str):
            if not hasattr(outputs, "__iter__") or not all(isinstance(o, str) for o in outputs):
                raise TypeError(f"Results.write(outputs=...): names from {', '.join(OUTPUTS)}, got {outputs!r:.80}")
            outputs = ",".join(outputs)
        outputs = parse_outputs(outputs, "Results.write(outputs=...)")
        check_format(fmt, "Results.write(fmt=...)")
        out = Path(out_dir)
        bound = Labels(self.steps["compute_bound"].view(np.int8), ("memory", "compute"))
        steps = {c: bound if c == "bound" else self.steps[c] for c in STEP_COLUMNS}
        extra = {}
        if tbt:
            gaps = np.asarray(self.tbt_s, dtype=float)
            extra["tbt_s.npy"] = (len(gaps), lambda path: np.save(path, gaps))
        write_run(out, self.summary, {c: self.requests[c] for c in REQUEST_COLUMNS}, steps,
                  scenario_to_yaml(self.scenario), outputs, fmt, extra)
        return out


def _price_runs(replicas):
    """``Recorder.step_columns``' ``price_runs``: each decode-only step of a run of them priced
    by its replica's cost model (``CostModel.decode_rows``: element for element what
    ``step_time`` gave the engine), the rows grouped by model."""
    models: dict = {}  # id -> (index, cost model)
    model_of = np.full(max((r.index for r in replicas), default=0) + 1, -1)
    for r in replicas:
        model_of[r.index] = models.setdefault(id(r.cost_model), (len(models), r.cost_model))[0]

    def price(replica, seqs, ctx):
        n = len(replica)
        dur, flops, nbytes, comp = np.empty(n), np.empty(n), np.empty(n), np.empty(n, dtype=np.int8)
        for k, cm in models.values():
            rows = slice(None) if len(models) == 1 else np.flatnonzero(model_of[replica] == k)
            dur[rows], flops[rows], nbytes[rows], comp[rows] = cm.decode_rows(seqs[rows], ctx[rows])
        return dur, flops, nbytes, comp

    return price


def api_delay_s(engine: EngineSetup):
    """``f(request)``: how long after the engine ends a request its client hears of it (a closed-loop
    client thinks from then): the API server's time (``EngineSetup.api_s``); a rejection passes
    through the server too (``api_request_s``). None without an API server."""
    if not (engine.api_request_s or engine.api_per_token_s):
        return None
    return lambda req: engine.api_s(req.output_tokens) if req.status == "completed" else engine.api_request_s


def add_api_server(req_cols: dict, engine: EngineSetup, until_s: float | None = None) -> None:
    """Make the request columns client-side: the API server (the entry pool's engine profile)
    delays a request's first token by ``api_request_s`` and its last by ``api_s`` (``api_request_s``
    + ``api_per_token_s`` x each later token), as the client measures TTFT and E2E. Adds the
    ``api_s`` column: the time added to ``finish_s`` (completed), to ``first_token_s`` (unfinished
    after their first token; to ``finish_s`` too for those rejected while decoding, their
    sequence outgrowing the KV cache: the client hears of the error then), else empty. With a
    cut-off ``until_s`` (``workload.duration_s``), a request the engine finished (or ended rejected
    while decoding) whose response reaches the client after it is unfinished (the client has not
    heard of its end by then)."""
    status = req_cols["status"]
    first, fin = req_cols["first_token_s"], req_cols["finish_s"]
    api = np.full(len(status), np.nan)
    done = status == "completed"
    if until_s is not None and (engine.api_request_s or engine.api_per_token_s):
        late = done & (fin + engine.api_s(req_cols["output_tokens"].astype(float)) > until_s)
        if late.any():
            status[late] = "unfinished"
            fin[late] = np.nan
            done &= ~late
        # (rejected while decoding, its sequence outgrowing the KV: the client hears of the error
        # api_request_s after the engine ended it, and not by the cut-off either)
        late = (status == "rejected") & ~np.isnan(first) & (fin + engine.api_request_s > until_s)
        if late.any():
            status[late] = "unfinished"
            fin[late] = np.nan
            req_cols["reason"][late] = ""
    started = ~done & ~np.isnan(first)
    api[done] = engine.api_s(req_cols["output_tokens"][done].astype(float))
    api[started] = engine.api_request_s
    if engine.api_request_s or engine.api_per_token_s:
        req_cols["first_token_s"] = first + engine.api_request_s  # NaN stays NaN
        req_cols["finish_s"] = np.where(done | started, fin + api, fin)  # (started: NaN but those ended rejected)
    req_cols["api_s"] = api


def _economics(setup: Setup, summary: dict, steps: dict, infos: list, req: dict) -> dict:
    """``summary.json`` ``economics`` (``servesim.cost.economics``): each pool's GPUs at their
    price and power, its busy share, and the part of its GPU time that went to input tokens."""
    pool_of = np.array([i.pool for i in sorted(infos, key=lambda i: i.index)], dtype=object)
    shares = phase_cost_shares(steps, pool_of, [p.name for p in setup.pools])
    cost = setup.scenario.cost
    uses = [PoolUse(p.name, p.cost_model.gpu.name, p.replicas * p.cost_model.num_gpus,
                    gpu_price(p.cost_model.gpu, cost), gpu_tdp(p.cost_model.gpu, cost),
                    summary["pools"][p.name]["busy_fraction"], shares[p.name]) for p in setup.pools]
    done = req["status"] == "completed"
    return economics(uses, summary["sim_time_s"], float(req["prompt_tokens"][done].sum()),
                     float(req["output_tokens"][done].sum()))


def _classes(scenario: Scenario, specs, req_cols: dict):
    """Add the ``class`` column; return (class names, name -> (ttft_s, tpot_s) SLO, per-request
    SLO limit arrays or None when every request has the scenario's SLO)."""
    names = tuple(getattr(specs, "class_names", ("default",)))
    index = getattr(specs, "class_index", None)
    ids = req_cols["request_id"]
    idx = index[ids] if index is not None and len(ids) else np.zeros(len(ids), np.int64)
    req_cols["class"] = np.array(names, dtype=object)[idx] if len(ids) else np.zeros(0, dtype=object)
    slo = scenario.slo
    by_name = {c.name: c for c in scenario.workload.classes or ()}
    slo_by_class = {}
    for name in names:
        c = by_name.get(name)
        slo_by_class[name] = (c.slo.ttft_s if c is not None and c.slo.ttft_s is not None else slo.ttft_s,
                              c.slo.tpot_s if c is not None and c.slo.tpot_s is not None else slo.tpot_s)
    if all(v == (slo.ttft_s, slo.tpot_s) for v in slo_by_class.values()):
        return names, slo_by_class, None
    inf = lambda v: np.inf if v is None else v  # noqa: E731
    ttft = np.array([inf(slo_by_class[n][0]) for n in names])[idx]
    tpot = np.array([inf(slo_by_class[n][1]) for n in names])[idx]
    return names, slo_by_class, (ttft, tpot)


def observed_time(workload, req: dict, steps: dict, cut: bool, ended: bool = False) -> float:
    """``sim_time_s``, the time every rate is per: the run's window. ``workload.duration_s`` when
    the run was cut off there (a request still in flight, or still to arrive, ``cut``) or when arrivals went on until
    it (no ``num_requests``, or fewer arrived than it asked for); otherwise the end of the last
    thing that happened: the last step, completion or rejection. So a run whose requests all
    finished at 30 s reports 30 s, not its duration_s, and a closed loop ends with its last
    request, not after its clients' final think time (nor at a policy's idle timer). ``ended``: the
    source ran out before duration_s (a trace's last row, a closed loop's rows used up): arrivals
    did not go on until it, so, nothing cut, the window ends with the last thing that happened."""
    until = workload.duration_s
    if until is not None and (cut or ((workload.num_requests is None or len(req["status"]) < workload.num_requests)
                                      and not ended)):
        return float(until)
    end = 0.0
    if len(steps["start_s"]):
        end = float((steps["start_s"] + steps["duration_s"]).max())
    for col in ("finish_s", "arrival_s"):
        x = req[col]
        if len(x) and not np.isnan(x).all():
            end = max(end, float(np.nanmax(x)))
    return end


def keep_up(workload, req_cols) -> dict | None:
    """``{"ratio", "window_s", "median_e2e_s", "warmup", "output_tokens_per_s"}``: requests that
    left (completed, or rejected at arrival) per request that arrived over the second half of the arrivals (``ratio``,
    ``metrics.keep_up_ratio``: servesim capacity's keep-up rule), that window's length and the
    median E2E. Once the run is past its warm-up, the requests in flight at the window's end stand
    for those in flight at its start, so the ratio is about 1 when the deployment keeps up and
    about capacity / offered rate when the backlog grows; but the requests being served at the
    two ends differ too (a window shorter than the requests' service is not past the warm-up; on a
    short run the arrivals bunch by chance): ``warmup`` is how far the ratio falls short for those
    alone, with no queue at all, each request leaving a service time after it arrived
    (``metrics.keep_up_warmup``); ``output_tokens_per_s``, the
    output tokens emitted in that window per second (``metrics.window_output_tokens``: the
    throughput at the run's load, without the drain). None for arrivals that are not
    open-loop (closed-loop clients wait for their replies; all_at_once is one batch) or too few."""
    from servesim.inputs.scenario import AllAtOnceArrival, ClosedLoopArrival
    from servesim.outputs.metrics import (arrival_period_s, e2e_s, is_completed, keep_up_ratio, keep_up_warmup,
                                          keep_up_window, leave_s, window_output_tokens)

    if isinstance(workload.arrival, (ClosedLoopArrival, AllAtOnceArrival)):
        return None
    arrival = req_cols["arrival_s"]
    w = keep_up_window(arrival, arrival_period_s(workload.arrival))
    ratio = keep_up_ratio(arrival, leave_s(req_cols), w)
    if np.isnan(ratio):
        return None
    done = is_completed(req_cols)
    t0, t1 = w  # (a ratio was found: there are enough arrivals)
    window = t1 - t0
    served = np.where(done, req_cols["finish_s"] - req_cols["scheduled_s"],
                      np.where(req_cols["status"] == "rejected", 0.0, np.nan))  # (rejected: leaves at once)
    warm = keep_up_warmup(arrival, served, w)
    tokens = window_output_tokens(req_cols["first_token_s"][done], req_cols["finish_s"][done],
                                  req_cols["output_tokens"][done], t0, t1)
    return {"ratio": float(ratio), "window_s": window,
            "median_e2e_s": float(np.median(e2e_s(req_cols)[done])) if done.any() else None,
            "warmup": None if math.isnan(warm) else warm,
            "output_tokens_per_s": tokens / window if window > 0 else None}


def simulate(scenario: Scenario, progress=None, specs: RequestSpecs | None = None,
             sample_every_s: float | None = None, engine: str | None = None, decision_trace: bool = False) -> Results:
    """Run a scenario to the end (every request finished, or ``workload.duration_s``).

    ``progress(done, total, now_s)`` is called as requests complete (for a progress bar);
    ``specs`` replaces the generated workload (tests use it for hand-made requests);
    ``sample_every_s`` records (time, replica, waiting, running) every so often in
    ``Results.queue_samples`` (an independent observer of the queues, used to check Little's law);
    ``engine`` ("fast" | "reference") overrides ``scenario.engine``: the same results either way,
    the reference is the plain step-by-step loop. ``decision_trace``: also record why each
    request waited (``Results.decisions``, ``summary["decisions"]``; ``servesim.core.decisions``).
    """
    wall0 = time.perf_counter()
    if not isinstance(scenario, Scenario):  # (a dict or a path would fail deep inside with an AttributeError)
        raise TypeError(f"simulate() takes a Scenario (servesim.load_scenario(path) or "
                        f"servesim.scenario_from_dict(mapping)), got {type(scenario).__name__}")
    _check_call(engine, specs, progress, sample_every_s, decision_trace)
    scenario = checked(scenario, "simulate(scenario), a field set in Python")
    if engine is not None and engine != scenario.engine:
        scenario = dataclasses.replace(scenario, engine=engine)
    if isinstance(specs, RequestSpecs):
        # (the requests given are all there are: none arrive after the last, whatever the scenario's
        # num_requests; a run cut at duration_s before they all arrived has that window)
        specs = dataclasses.replace(match_classes(check_specs(specs), scenario.workload.classes), source_ended=True)
    setup, specs, fit = plan(scenario, specs)
    clients = specs.arrival.clients if isinstance(specs, ClosedLoop) or (
        isinstance(specs, Sessions) and specs.closed) else 0
    with resources.guard(fit.available), resources.CollectorPause(sum(p.replicas for p in setup.pools),
                                                                  clients) as gcp:
        return _simulate(scenario, setup, specs, progress, sample_every_s, wall0, decision_trace, gcp.built)


# queue samples (time, replica, waiting, running) one run may record: ~1 GB of tuples
MAX_QUEUE_SAMPLES = 10_000_000


def _too_many_samples(every_s: float, replicas: int) -> str:
    return (f"simulate(sample_every_s={every_s!r:.40}): more than {MAX_QUEUE_SAMPLES:,} queue samples (one per "
            f"replica, {replicas:,} of them, every {every_s:g} s of simulated time); sample less often")


def _check_call(engine, specs, progress, sample_every_s, decision_trace=False) -> None:
    """``simulate()``'s own arguments, checked up front: a wrong one would otherwise run the other
    engine silently, hang (a sampler every 0 s) or fail deep inside."""
    if engine is not None and engine not in ("fast", "reference"):
        raise ValueError(f"simulate(engine=...): 'fast' or 'reference' (None: the scenario's), got {engine!r:.80}")
    if specs is not None and not isinstance(specs, (RequestSpecs, ClosedLoop, Sessions)):
        raise TypeError(f"simulate(specs=...): a servesim.RequestSpecs (or None: the scenario's workload), got "
                        f"{type(specs).__name__}")
    if progress is not None and not callable(progress):
        raise TypeError(f"simulate(progress=...): a function (done, total, now_s), got {type(progress).__name__}")
    if sample_every_s is not None and (isinstance(sample_every_s, bool) or not isinstance(sample_every_s, (int, float))
                                       or not math.isfinite(sample_every_s) or sample_every_s <= 0):
        raise ValueError(f"simulate(sample_every_s=...): a finite number of seconds > 0 (or None), got "
                         f"{sample_every_s!r:.80}")
    if not isinstance(decision_trace, (bool, np.bool_)):
        # (any text was true: decision_trace="no" recorded the trace)
        raise TypeError(f"simulate(decision_trace=...): True or False, got {decision_trace!r:.80}")


def plan(scenario: Scenario, specs=None):
    """Everything before the event loop, and what ``servesim validate`` checks: the setup
    (``prepare``), the memory the run needs against what is available (``servesim.resources``:
    refused before anything is drawn when the scenario alone says it cannot fit), and the
    workload (``generate``, unless ``specs`` are given), its request count checked again.
    Returns (setup, specs, resources.Fit)."""
    setup = prepare(scenario)
    for pool in setup.pools:  # a policy and a router can be made from the names given (run makes them)
        pool.make_policy()
    make_router(scenario.cluster.router, np.random.default_rng(0))
    w = scenario.workload
    ctx = setup.cost_model.model.max_context_tokens
    n = expected_requests(w) if specs is None else float(len(specs))
    fit = resources.check(setup, n, mean_output_tokens(w, ctx))
    if specs is None:
        check_files(w)  # every file the workload names, also those read lazily (sessions' lengths)
        rng = np.random.default_rng(scenario.seed)
        specs = generate(w, rng, ctx, min(p.capacity.block_size for p in setup.pools), fit.max_requests)
        if isinstance(specs, RequestSpecs):
            resources.refuse_requests(setup, fit, float(len(specs)), "workload")
    return setup, specs, fit


def _simpy_original(e: BaseException) -> BaseException:
    """The exception a SimPy process raised: ``env.run`` re-raises a copy of it (same type, same
    args), the original its ``__cause__``."""
    while type(e.__cause__) is type(e) and e.__cause__.args == e.args:
        e = e.__cause__
    return e


def _failed_with_plugins(plugins: list, e: Exception) -> str:
    """Why a run with plug-ins in use stopped on an exception outside them: they were called
    through checks (``call_plugin``), so the likely cause is one that changed the engine's state
    (a policy or router must only read it). The exception and where it was raised are named, in
    case it is servesim's bug instead."""
    import traceback

    e = _simpy_original(e)
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}, line {frames[-1].lineno}" if frames else ""
    return (f"the run stopped on {type(e).__name__}: {clip(e, 200)}{where}, with plug-in "
            f"{', '.join(plugins)} in use. Policies and routers must only read what they are given (the "
            "replica state, the queues, the requests): one that changed it (added a request to a queue, "
            "set a request's fields) leaves the engine inconsistent. If yours only read, this is a servesim "
            "bug: please report it with the scenario")


def _slo_floor(scenario: Scenario, setup: Setup, specs, req: dict, limits) -> list:
    """The run's ``slo_floor`` warning (``outputs.checks``): ``validate``'s finding of requests no
    load lets meet the SLO (``predictions.predict_slo_floors``, the same sentence), priced only for
    the requests the run saw miss it (``limits``: per-request limits of request classes, else the
    scenario's SLO)."""
    from servesim.outputs.metrics import is_completed, slo_met, tpot_s, ttft_s

    if not isinstance(specs, RequestSpecs):
        return []
    if limits is None:
        if scenario.slo.ttft_s is None and scenario.slo.tpot_s is None:
            return []
        limits = tuple(np.inf if v is None else v for v in (scenario.slo.ttft_s, scenario.slo.tpot_s))
    tpot = tpot_s(req)
    met = is_completed(req) & slo_met(ttft_s(req), tpot, *limits)
    # a floor is a lower bound on what the run took: on TTFT of the request's own prefill, no more
    # than its first token after it was scheduled (the queueing before left out), with the API
    # server's time; on TPOT of its TPOT. Only a request over a limit by those can be over a floor
    # (pricing every request that missed cost a quarter of an overloaded run's time)
    api = setup.pools[0].engine.api_request_s
    with np.errstate(invalid="ignore"):
        own = req["first_token_s"] - req["scheduled_s"]
        maybe = ~(own + api <= limits[0]) | (tpot > limits[1])  # (no first token: maybe)
    from servesim.predictions import predict_slo_floors

    missed = req["request_id"][~met & maybe]
    if not len(missed):
        return []
    only = np.zeros(len(specs), dtype=bool)
    only[np.asarray(missed, dtype=np.int64)] = True
    floors = predict_slo_floors(scenario, setup, specs, only)
    if not floors or not floors["missed"]:
        return []
    admitted = int(np.count_nonzero(req["status"] != "rejected"))  # (completed or unfinished)
    return [{"code": "slo_floor", "message": slo_floor_text(floors, admitted)}]


def _simulate(scenario: Scenario, setup: Setup, specs, progress, sample_every_s, wall0,
              decision_trace=False, built=None) -> Results:
    total = len(specs) if not isinstance(specs, Sessions) else (specs.num_requests or 0)
    env = simpy.Environment()
    cb = None
    failed = []  # what the caller's progress function raised: raised as itself, not blamed on a plug-in
    if progress is not None:
        def cb(_req):
            try:
                progress(rec.completed, total, env.now)
            except Exception as e:
                failed.append(e)
                raise
    rec = Recorder(cb)
    cluster = Cluster(env, setup, rec, scenario.seed)
    tracer = None
    if decision_trace:
        tracer = cluster.tracer = DecisionTracer(getattr(specs, "class_names", ("default",)))
        for r in cluster.replicas:
            r.tracer = tracer
    replicas = cluster.replicas

    def arrivals():
        """Open-loop arrivals as a chain of timeouts, each calling the next (cheaper than a
        process resumed once per request).

        Requests arriving at an instant join once nothing else is due then (``env.peek()``; the
        end-of-instant queue's sends while something is, ``servesim.core.instant``, before any idle
        replica woken then decides): a step ending then has ended, and its replica has
        decided its next step without them. SimPy takes the events of one instant in the order
        they were scheduled, and the arrival's timeout was scheduled at the previous arrival, so
        it would otherwise go before a step that started later and ends at this very instant;
        the fast engine's runs of decode steps have no event per step and count such a step as
        ended (so its replica sees the request one decision later). Such instants coincide only
        when step times and arrival times both fall on a grid (fixed arrivals, fixed-length
        steps); otherwise nothing else is due and the request joins at once."""
        arr, pr, out = specs.arrival_s.tolist(), specs.prompt_tokens.tolist(), specs.output_tokens.tolist()
        cluster.arrival_times = arr
        grp = specs.prefix_group.tolist() if specs.prefix_group is not None else None
        pre = specs.prefix_tokens.tolist() if specs.prefix_tokens is not None else None
        tags, per = specs.block_tags, specs.tag_tokens
        cls = specs.class_index.tolist() if getattr(specs, "class_index", None) is not None else None
        nxt = 0
        instant = end_of_instant(env)

        def later() -> None:
            arrive(None)

        def arrive(_event) -> None:
            nonlocal nxt
            if env.peek() <= env.now:  # something else is due now: it goes first
                instant.send(later)
                return
            i = nxt
            while True:
                # env.now, not arr[i]: now + (arr[i] - now) can differ from arr[i] in the last bit,
                # and every other timestamp is taken from env.now
                if grp is None:
                    req = Request(i, env.now, pr[i], out[i])
                elif tags is None:
                    req = Request(i, env.now, pr[i], out[i], grp[i], pre[i])
                else:  # a trace's block hash ids name its cacheable blocks
                    req = Request(i, env.now, pr[i], out[i], grp[i], pre[i], (per, tags[i]) if tags[i] else None)
                if cls is not None:
                    req.cls = cls[i]
                cluster.next_arrival = i + 1
                cluster.submit(req)
                i += 1
                if i >= total:
                    return
                delay = arr[i] - env.now
                if delay > 0:
                    break
            nxt = i
            env.timeout(delay).callbacks.append(arrive)

        if total:
            env.timeout(max(arr[0], 0.0)).callbacks.append(arrive)

    if isinstance(specs, ClosedLoop):
        drive_closed_loop(env, specs, cluster.submit, rec, api_delay_s(setup.pools[0].engine))
    elif isinstance(specs, Sessions):
        drive_sessions(env, specs, cluster.submit, rec, api_delay_s(setup.pools[0].engine))
    else:
        arrivals()
    if built is not None:
        built()  # (resources.CollectorPause: a large cluster's objects, and its clients, frozen for the run)
    samples = []
    if sample_every_s is not None:
        # the run lasts at least until the last arrival (until duration_s at most): a sampler too
        # fine for that is refused before anything runs, not found out by filling the memory
        horizon = getattr(specs, "arrival_s", None)
        horizon = float(horizon[-1]) if horizon is not None and len(horizon) else 0.0
        if scenario.workload.duration_s is not None:
            horizon = min(horizon, scenario.workload.duration_s)
        if len(replicas) * (horizon / sample_every_s + 1) > MAX_QUEUE_SAMPLES:
            raise ValueError(_too_many_samples(sample_every_s, len(replicas)))

        def observe():
            while rec.completed + rec.rejected < len(specs):
                cluster.settle()  # fast engine: runs of decode steps up to now (completions included)
                if len(samples) + len(replicas) > MAX_QUEUE_SAMPLES:  # (a closed loop runs past its arrivals)
                    raise ValueError(_too_many_samples(sample_every_s, len(replicas)))
                for r in replicas:
                    samples.append((env.now, r.index, len(r.waiting) + len(r.incoming), r.num_running))
                yield env.timeout(sample_every_s)

        env.process(observe())
    until = scenario.workload.duration_s
    try:
        env.run(until=until)
    except (InputError, MemoryError) as e:
        # (the original, so that a PluginError's __cause__ is what the plug-in raised, as documented)
        e = _simpy_original(e)
        raise e from e.__cause__
    except Exception as e:  # noqa: BLE001
        if failed:
            raise failed[0] from None
        plugins = sorted({plugin_name(r.policy) for r in replicas if is_plugin(r.policy)}
                         | ({plugin_name(cluster.route)} if is_plugin(cluster.route) else set()))
        if not plugins:
            raise  # (servesim's own code alone: a bug, shown as one)
        raise PluginError(_failed_with_plugins(plugins, e)) from e
    cluster.settle(strict=True)  # fast engine: decode steps that ended before the cut-off
    stalled = 0
    for r in rec.requests:
        if r is not None and r.status == "pending":
            r.status = "unfinished"
            if r.outgrown:  # (its output cut where its sequence would outgrow the KV: the true length)
                r.output_tokens, r.reason = r.outgrown, ""
            stalled += 1
    if until is None and (stalled or len(rec.requests) != len(specs)):
        plugins = sorted({plugin_name(r.policy) for r in replicas if is_plugin(r.policy)})
        if plugins:
            raise PluginError(f"policy {', '.join(plugins)}: {stalled} requests were left in flight with nothing left "
                              f"to happen ({_stalled_where(replicas)}; the policy scheduled nothing while they waited, "
                              "and set no wake_at_s that is finite and later than its decision); a policy must "
                              "schedule the work it can fit: waiting requests (state.waiting; on the decode side of a "
                              "P/D split, state.landed), swapped-out and running ones")
        raise RuntimeError(f"simulation stalled with {stalled} requests in flight and nothing left to happen")
    req_cols = rec.request_columns()
    add_api_server(req_cols, setup.pools[0].engine, until)
    rec.release_request_rows()
    names, slo_by_class, limits = _classes(scenario, specs, req_cols)
    steps = rec.step_columns(price_runs=_price_runs(replicas))
    # (cut: a request still in flight at the cut-off, the engine's or, past add_api_server, the client's,
    # or one of the requests drawn that was still to arrive then)
    cut = bool((req_cols["status"] == "unfinished").any()) or (isinstance(specs, RequestSpecs)
                                                               and len(req_cols["status"]) < len(specs))
    sim_time = observed_time(scenario.workload, req_cols, steps, cut, bool(getattr(specs, "source_ended", False)))
    tbt = rec.tbt_sample()
    extra = {
        "kv_capacity": {p.name: {"replicas": p.replicas, "blocks_per_replica": p.capacity.num_blocks,
                                 "block_size": p.capacity.block_size, "tokens_per_replica": p.capacity.num_tokens,
                                 "kv_pool_gib_per_gpu": p.capacity.kv_pool_bytes / GIB} for p in setup.pools},
        "kv": {
            "swap_out_bytes": rec.swap_out_bytes,
            "swap_in_bytes": rec.swap_in_bytes,
            "recompute_tokens": rec.recompute_tokens,
            "prefix_cache_hit_tokens": rec.prefix_hit_tokens,
            "prefix_cache_query_tokens": rec.prefix_query_tokens,
            "prefix_cache_hit_rate": (rec.prefix_hit_tokens / rec.prefix_query_tokens
                                      if rec.prefix_query_tokens else 0.0),
        },
        # whole-prompt admission: waits of the queue's head for room in the token budget next to
        # the running decodes (its prompt fits the budget alone); everything behind it waits too
        "head_of_line": {"budget_blocked_requests": rec.budget_blocked_requests,
                         "budget_blocked_s": rec.budget_blocked_s},
    }
    if cluster.pipelines:
        # per stage, the share of the run it worked, averaged over the pool's replicas; with the
        # engines never out of work, the rest is pipeline bubble (micro-batches on other stages)
        extra["pipeline"] = {name: {"replicas": len(pipes), "stages": len(pipes[0].busy_s),
                                    "stage_busy_fraction": [float(np.mean([q.busy_s[k] for q in pipes])) / sim_time
                                                            if sim_time > 0 else 0.0
                                                            for k in range(len(pipes[0].busy_s))]}
                             for name, pipes in cluster.pipelines.items()}
    if cluster.decode:
        extra["kv_transfer"] = {"count": int(np.isfinite(req_cols["kv_transfer_s"]).sum()),
                                "bytes": rec.kv_transfer_bytes, "time_s": dist_stats(req_cols["kv_transfer_s"])}
    # how each pool's steps were priced: the efficiencies' provenance, and the profile that priced
    # its per-layer kernels (cost.profiles), if any
    # and the GPU figures of its roofline (one GPU's peak FLOP/s at the weights' dtype, its memory
    # bandwidth), which a report reads rather than the GPU file the scenario names
    extra["cost"] = {p.name: {"efficiencies": p.cost_model.eff.source,
                              "gpu": {"name": p.cost_model.gpu.name, "peak_flops": p.cost_model.peak_flops,
                                      "mem_bw_bytes_per_s": p.cost_model.gpu.mem_bw_bytes_per_s},
                              **p.engine.describe(),
                              "allreduce": p.cost_model.collectives(),
                              "measured_ops": (None if p.cost_model.measured is None else
                                               {"source": p.cost_model.measured.source, "tp": p.cost_model.measured.tp,
                                                "ops": list(p.cost_model.measured.ops)})} for p in setup.pools}
    clipped = getattr(specs, "clipped", None)
    arrivals = req_cols["arrival_s"]
    extra["workload"] = {"clipped_requests": int(clipped[req_cols["request_id"]].sum()) if clipped is not None else 0,
                         # what arrived per second, first to last arrival (on_off's rate_rps is its burst rate);
                         # every request at one instant (all_at_once, one request) has no rate: null, not 0
                         "offered_rps": offered_rate(arrivals),
                         "keep_up": keep_up(scenario.workload, req_cols)}
    extra["workload"].update(getattr(specs, "info", None) or {})  # the dataset, the sessions
    extra["api_server_s"] = dist_stats(req_cols["api_s"][req_cols["status"] == "completed"])
    extra["classes"] = summarize_classes(req_cols, sim_time, names, slo_by_class)
    extra["fairness"] = fairness_summary(req_cols, sim_time, names,
                                         {c.name: c.tenant for c in scenario.workload.classes or ()}, slo_by_class,
                                         extra["classes"])
    summary = summarize(scenario, req_cols, steps, tbt, sim_time, cluster.infos, extra, limits)
    pools = setup.pools_by_name
    summary["profile"] = profile_summary(summary, steps, cluster.infos,
                                         [pools[i.pool].cost_model for i in cluster.infos],
                                         pools.get("decode", setup.pools[0]).max_num_seqs, req_cols,
                                         limits or (scenario.slo.ttft_s, scenario.slo.tpot_s))
    summary["warnings"] = (run_warnings(summary, scenario, setup.pools) + _slo_floor(scenario, setup, specs, req_cols,
                                                                                    limits)
                           + plugin_warnings(scenario, setup.pools))
    decisions = None
    if tracer is not None:
        tracer.finish(sim_time)
        decisions = tracer.columns()
        summary["decisions"] = summarize_decisions(decisions)
    summary["economics"] = _economics(setup, summary, steps, cluster.infos, req_cols)
    summary["wall_time_s"] = time.perf_counter() - wall0
    engine_stats = {}
    for r in replicas:
        pool = engine_stats.setdefault(r.pool, dict.fromkeys(r.stats, 0))
        for k, v in r.stats.items():
            pool[k] += v
    return Results(scenario, summary, req_cols, steps, tbt, [r.kv.num_used for r in replicas], samples, engine_stats,
                   decisions)
