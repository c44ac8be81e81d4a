"""Engine profiles (``cost.engine``): what a serving engine adds to its kernels' time, and what its
API server adds to the latencies a client measures.

A profile bundles, for one engine:

* **Per-step CPU work** (scheduling, input preparation, sampling, output processing):
  ``cpu = step_s + per_seq_s x sequences + per_token_s x tokens``, of which the share ``overlap``
  runs while the GPU works (the next step scheduled during this one: vLLM V1's async scheduling,
  TensorRT-LLM's and SGLang's overlap schedulers) and shows only where it outlasts the GPU's step;
  the rest is on the critical path:
  ``step = gpu + (1 - overlap) x cpu + max(0, overlap x cpu - gpu)`` (0: a synchronous loop,
  ``gpu + cpu``; 1: ``max(gpu, cpu)``). A step's reported ``overhead_s`` is that visible part.
* **CUDA graphs**: which steps replay a captured graph (``graphs``: ``all`` steps up to the
  largest capture size, as vLLM V1's piecewise graphs; ``decode``-only steps; ``none``), the
  capture sizes (a graphed step's token count is padded up to the next size: the linear layers,
  norms and activations run the padded tokens; attention and the LM head only the real ones),
  and a step without a graph paying the CPU's kernel launches: ``gpu = max(kernels, layers x
  eager_layer_s)`` (the CPU launching a layer's kernels one by one paces the GPU when the kernels
  are shorter than the launches); with TP, each of a layer's two all-reduces launched from Python
  adds ``eager_collective_s`` to it.
* **Collectives**: the engine's TP all-reduce inside the NVLink domain (``allreduce``: ``custom``
  one-/two-shot kernels, or ``nccl`` alone), unless the scenario's ``cost.allreduce`` says.
* **The host**: CPU figures measured on a known host (``cpu_host_speed``, the host's single-thread
  speed on ``GpuSpec.host_cpu_speed``'s scale) are scaled to the GPU's host: a faster CPU does the
  same per-step and launch work in proportionally less time.
* **Async scheduling**: the next step is scheduled while this one runs, so a request that arrives
  during a step joins the step after the next (``Replica``'s ``async_scheduling``).
* **Kernel efficiency** where the engine's kernels differ from the calibrated ones
  (``attention_scale``: multiplies the attention compute and memory efficiencies).
* **The API server** (HTTP, tokenization, detokenization, streaming): ``api_request_s`` delays a
  request's first token and everything after it, ``api_per_token_s`` each later token; the run's
  TTFT and E2E are then client-side (``requests.csv`` ``api_s``, ``summary.json``
  ``api_server_s``).

Every number has its source next to it. Rows of ``/work/notes/engine_profiles.md`` (a research
memo of the sources, with the arithmetic of the derived rows) are cited by their IDs (V0-6a,
V1-8, ...). The vLLM V1 figures that no publication gives are fitted to measured runs
(``tools/calibrate_vllm_h100.py``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Callable

from servesim.errors import InputError, did_you_mean

DEFAULT_ENGINE = "vllm-v1"
# the admission watermark of an engine without one of its own to cite (EngineProfile.watermark)
DEFAULT_WATERMARK = 0.01


# ---------------------------------------------------------------- CUDA-graph capture sizes
def _vllm_v1_sizes(max_num_seqs: int, tp: int) -> tuple:
    """vLLM V1 (``vllm/config/compilation.py``, V1-8): ``[1, 2, 4] + range(8, 256, 8) +
    range(256, max + 1, 16)`` with ``max_cudagraph_capture_size = min(2 x max_num_seqs, 512)``
    (sizes above it dropped); the batch's scheduled tokens are padded to the next size."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return tuple(s for s in sizes if s <= top)


def _vllm_v0_sizes(max_num_seqs: int, tp: int) -> tuple:
    """vLLM V0 (``model_runner.py``, V0-9): ``_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 i]``,
    captured up to the size ``max_num_seqs`` pads to (``_get_graph_batch_size``); decode-only."""
    sizes = [1, 2, 4]
    while sizes[-1] < max_num_seqs:
        sizes.append(8 * (len(sizes) - 2))
    return tuple(sizes)


def _trt_llm_sizes(max_num_seqs: int, tp: int) -> tuple:
    """TensorRT-LLM LLM API with ``enable_padding`` (T-2: ``[1, 2, 4] + 8..128 step 8``; 128 is the
    default largest graph batch); generation (decode) steps only."""
    return tuple([1, 2, 4] + list(range(8, 129, 8)))


def _sglang_sizes(max_num_seqs: int, tp: int) -> tuple:
    """SGLang (``server_args.py``, S-3/S-4): ``[1, 2, 4, 8, 12] + 16..256 step 8 + 272..<512 step 16 +
    512..max step 32``, ``cuda_graph_max_bs`` 256 below TP 4 and 512 from TP 4 (H100 defaults of
    recent versions); decode steps only, padded."""
    top = 256 if tp < 4 else 512
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, top + 1, 32))
    return tuple(s for s in sizes if s <= top)


# ---------------------------------------------------------------- profiles
@dataclass(frozen=True)
class EngineProfile:
    """One engine's step-time and API-server figures (see the module docstring)."""

    name: str
    summary: str  # one line for ``servesim validate`` and the docs
    step_s: float
    per_seq_s: float
    per_token_s: float
    overlap: float
    graphs: str  # "all" | "decode" | "none"
    capture_sizes: Callable[[int, int], tuple] | None  # (max_num_seqs, tp) -> sizes, ascending
    eager_layer_s: float
    api_request_s: float
    api_per_token_s: float
    # the next step is scheduled while this one runs: an arrival during a step waits for the
    # decision after the next (``Replica``'s ``async_scheduling``)
    async_scheduling: bool = False
    attention_scale: tuple = (1.0, 1.0)  # (compute, memory) multipliers of the attention efficiencies
    eager_collective_s: float = 0.0  # CPU time to launch one TP all-reduce eagerly (two a layer)
    allreduce: str = "custom"  # the TP all-reduce inside the NVLink domain: custom | nccl
    # single-thread speed of the host the CPU figures (step_s, per_seq_s, per_token_s, eager_layer_s,
    # eager_collective_s) were measured on, on GpuSpec.host_cpu_speed's scale; None: used as they
    # are on every host
    cpu_host_speed: float | None = None
    # vLLM v0.2's padded prompt batches: a prompt-only step (``policy.prefill_first``, whole prompts)
    # pads every prompt to the batch's longest; the padded tokens run through every layer (attention
    # causal over the padded length), the token budget counts sequences x the longest, and admission
    # stops where the padding would pass this many tokens (vLLM's ``--max-paddings``; vllm-v0.2.3).
    # None: no padding (the prompts packed end to end)
    max_paddings: int | None = None
    # vLLM V0's (v0.1-v0.6.1, and Sarathi-Serve's) ``can_append_slot``: a decoding request needs a free KV
    # block at its turn before a decode step, whether or not its next token opens one, else the
    # newest running request is preempted (``ContinuousPolicy.decode_needs_free_block``)
    decode_needs_free_block: bool = False
    # vLLM V0's (v0.1-v0.6, and Sarathi-Serve's) ``can_allocate``: the admission watermark holds back a
    # request preempted for recompute as it does a new one (``ContinuousPolicy.watermark_on_recompute``);
    # vLLM V1 lets it use the watermark's blocks
    watermark_on_recompute: bool = False
    # vLLM V0's (and Sarathi-Serve's) ``BlockSpaceManager.allocate``: a request is admitted only when
    # the blocks of its whole prompt (prompt + output so far, recomputed) are free above the
    # watermark, and takes them at admission, chunked prefill or not; vLLM V1 allocates a chunk's
    # blocks as it schedules the chunk (``ContinuousPolicy.whole_prompt_blocks``)
    whole_prompt_blocks: bool = False
    # vLLM V0's ``_schedule_running`` with chunked prefill (v0.4-v0.5): every running group, one
    # mid-way through its prompt too, needs a free KV block per sequence at its turn
    # (``_can_append_slots``), not only a decoding one (``ContinuousPolicy.prefill_needs_free_block``;
    # only with ``decode_needs_free_block``). Sarathi-Serve checks decodes only
    prefill_needs_free_block: bool = False
    # vLLM V0's ``_schedule_chunked_prefill`` (v0.4-v0.5): with chunked prefill, waiting prompts are
    # admitted in a step that preempted (from the queue as it stood: the step's victims join its
    # front after), and swapped-out requests that cannot come back do not hold them back
    # (``ContinuousPolicy.admit_past_preemption``). False: nothing is admitted in a step that
    # preempted, and swapped-out requests come back first
    admit_past_preemption: bool = False
    # vLLM V0's scheduler without chunked prefill (``_schedule_default`` at v0.4-v0.5: "Don't schedule
    # decodes if prefills are scheduled"; ``_schedule`` at v0.1-v0.3: prompts first, returning as
    # soon as one is scheduled), and Sarathi-Serve's copy of it: a step that schedules prompts carries
    # no decodes. What ``policy.prefill_first`` left null is for a colocated continuous policy
    # (``prefill_first_for``)
    prompt_only_steps: bool = False
    # the share of all KV blocks the engine keeps free when it admits a request, where the scenario's
    # policy.watermark is null: vLLM V0's BlockSpaceManager (watermark: float = 0.01, v0.1-v0.6);
    # vLLM V1 at v0.15.1 has none (``KVCacheManager.allocate_slots`` checks the blocks it allocates
    # against all the free ones); nor have TensorRT-LLM, SGLang and HF generate() (each profile
    # cites its source)
    watermark: float = DEFAULT_WATERMARK


# Launch-bound time per layer of a step run without a CUDA graph (vLLM's PyTorch model code,
# eager): Llama-3.1-8B decode at batch 1 on H100 takes 8.4 ms eager against 5.1 ms with graphs
# (H-5); the eager step is the CPU's launch time, 8.4 ms / 32 layers = 0.26 ms per layer. (An early
# vLLM prototype, V0-13, gives 12 ms per token eager for Llama-2-7B at batch 1, 0.38 ms a layer
# with its scheduler included.)
_VLLM_EAGER_LAYER_S = 0.26e-3

# vLLM V1 above the largest capture size runs its torch.compile'd layers without a graph: fewer,
# fused kernels. Per launched kernel ~17 us: full graphs cut 7% (0.53 ms over 32 layers) of Llama-8B's
# 7.63 ms TPOT against piecewise graphs, whose attention (1 kernel per layer) launches eagerly
# (V1-10, V1-10a); x 10 kernels per compiled Llama layer (fused add+RMSNorm, QKV GEMM, rotary, KV
# write, attention, O GEMM, fused add+RMSNorm, gate/up GEMM, SiLU-and-mul, down GEMM).
_VLLM_V1_COMPILED_LAYER_S = 10 * 17e-6

# --- vLLM V1. Its per-step CPU work has no published figure (V1-16); it does the phases Vidur
# measured in a vLLM V0-era runtime (schedule, prepare inputs, sample, process outputs: 2.0 ms per
# step + 171 us per sequence, V0-6a) and moved the per-sequence part out of the engine's loop
# (persistent batch; detokenization in the API server's process: V1-1, V1-4). So: the fixed
# 2.0 ms, no per-sequence term, and the share of it that overlaps the GPU fitted, with the API
# server's time, by tools/calibrate_vllm_h100.py to measured vLLM v0.15.1 serving Llama-2-7B on
# one H100-SXM (inference-perf runs general / codegen / roleplay: 33,000 requests replayed with
# their arrivals and lengths, 5 load stages from 5 to 20 req/s; data from inference-sim/training
# c4f0340, ../shared/data/vllm-h100). Fitted in two stages, jointly over the three runs: overlap
# from mean TPOT (0.8: 0.4 ms of each step on the critical path; 0.75-0.8 when one run is left
# out), then the API server from mean TTFT and E2E (7.1 ms per request, 6.9-7.2 leaving one run
# out; per output token 28 us, 0-23). Mean TTFT / TPOT / E2E within 8% / 2% / 2% on every run and
# stage (docs/cost-model.md, "Engine profiles"). Fitted with the H100's GEMMs measured on the same
# die (calibrations/h100-sxm.yaml); before that, with GEMMs argued from the A100 fit: overlap 0.75,
# 6.8 ms, 0 per token. Held out, 10 runs of CodeLlama-34B TP2, Mixtral-8x7B TP2 and Llama-2-70B
# TP4 from the same source (tools/check_vllm_public.py) come out at mean TPOT 3% and E2E 8% off on
# average. These runs cannot tell the CPU work from its overlap: only
# (1 - overlap) x 2 ms shows while the GPU's step is longer than the overlapped part (6.5 ms and
# more here); a visible per-sequence term above ~3 us is excluded (it breaks the 20 req/s stage).
_V1_STEP_S = 2.0e-3
_V1_PER_SEQ_S = 0.0
_V1_OVERLAP = 0.8
_V1_API_REQUEST_S = 7.1e-3
_V1_API_PER_TOKEN_S = 28e-6


# --- vLLM v0.2 (late 2023): the engine the 2023 papers measured (DistServe's baseline is v0.2.3,
# its AE scripts: --engine-use-ray --worker-use-ray; Splitwise ran vLLM in Nov 2023). Against
# vllm-v0 (2024) it had no CUDA graphs (PR #1926 "Optimize model execution with CUDA graph",
# merged 2023-12-17: every step launches its kernels from Python), NCCL all-reduce (the custom
# all-reduce, PR #2192, was merged in late Dec 2023 and off by default from PR #2808, Feb 2024,
# to #4040, Apr 2024) and a Ray call to every worker each step. Its CPU figures are fitted by
# tools/fit_vllm_v02.py to DistServe's latency model of this vLLM (simdistserve
# profiler-a100-80g.vllm.json, LLMServe/DistServe@82831f1: decode steps of OPT-13B at TP 1/2/4 and
# OPT-66B at TP 2/4/8, batch 1-128, A100-80GB SXM; mean error 8%) on servesim's kernels: 9.3 ms a
# step + 0.11 ms a sequence (scheduling, the Ray calls, input preparation, sampling, output
# processing), 0.28 ms to launch a layer + 47 us per all-reduce. From TP 2 a decode step is then
# bound by the launches (OPT-13B: 24.5 ms at TP 2 and 4; measured 24.7 / 26.0). Held out,
# Splitwise's profiling of its vLLM (splitwise-sim data/perf_model.csv: Llama-2-70B at TP 2/4/8
# and BLOOM-176B at TP 8, batch 1-16, DGX-A100) comes out within 9% on average (-18% worst); its
# DGX-H100 rows fix that host's speed (GpuSpec.host_cpu_speed 1.3: within 7% on average).
_V02 = {"step_s": 9.3e-3, "per_seq_s": 1.1e-4, "eager_layer_s": 2.8e-4, "eager_collective_s": 4.7e-5}


# What engines without a published figure of their own borrow from vLLM V1's fit: the API server's
# time (V1-17: no engine publishes it) and, for the overlap schedulers (no published per-step CPU
# time: TensorRT-LLM T-5, SGLang), the CPU work, fully overlapped (the next step scheduled while
# this one runs: one step of lag, as vLLM V1's async scheduling)
_V1_API = {"api_request_s": _V1_API_REQUEST_S, "api_per_token_s": _V1_API_PER_TOKEN_S}
_OVERLAP_SCHEDULER = {"step_s": _V1_STEP_S, "per_seq_s": _V1_PER_SEQ_S, "per_token_s": 0.0, "overlap": 1.0,
                      "graphs": "decode", "async_scheduling": True, **_V1_API}


PROFILES: dict[str, EngineProfile] = {p.name: p for p in (
    EngineProfile(
        name="vllm-v1",
        summary="vLLM V1 (v0.8+): async scheduling overlapped with the GPU, CUDA graphs for every step up to "
                "min(2 x max_num_seqs, 512) tokens, API server in its own process",
        # per-step CPU and its overlap: fitted (no published per-step figure for V1, V1-16); async
        # scheduling runs the scheduler one step ahead (V1-11, default-on since PR #27614)
        step_s=_V1_STEP_S, per_seq_s=_V1_PER_SEQ_S, per_token_s=0.0, overlap=_V1_OVERLAP,
        graphs="all", capture_sizes=_vllm_v1_sizes, eager_layer_s=_VLLM_V1_COMPILED_LAYER_S,
        # the API server's time per request and per output token: fitted (not published, V1-17)
        api_request_s=_V1_API_REQUEST_S, api_per_token_s=_V1_API_PER_TOKEN_S,
        # PR #19970: the scheduler runs one step ahead; default-on since PR #27614 (V1-11)
        async_scheduling=True,
        # no admission watermark: v0.15.1's KVCacheManager.allocate_slots (vllm/v1/core/kv_cache_manager.py,
        # read at v0.14.1 and v0.16.0, which bracket it) admits a request when the blocks it allocates
        # are free (num_blocks_to_allocate > block_pool.get_num_free_blocks(): None), new or resumed alike;
        # nothing in vllm/v1 or its config keeps blocks back. (vLLM 0.34.0 has
        # SchedulerConfig.watermark, default 0.0, held against waiting and preempted requests alike
        # when another request is already scheduled in the step: policy.watermark with this profile
        # holds it against new requests only)
        watermark=0.0),
    EngineProfile(
        name="vllm-v0",
        summary="vLLM V0 (v0.2-v0.5): synchronous Python scheduler and output processing, CUDA graphs for "
                "decode-only batches, eager prefill",
        # Vidur's profile of its vLLM-based runtime (Llama-2-7B, A100, batch 8-64: schedule,
        # prepare inputs, sampler, process outputs; means), fitted 2.0 ms + 171 us per sequence
        # (V0-6, V0-6a). It reproduces the v0.6 blog's split for v0.5.3 (V0-1: GPU 38% of the time,
        # so CPU ~1.6 x GPU): Llama-3-8B at batch 64 on H100, ~8 ms of GPU against 2 + 0.171 x 64 =
        # 12.9 ms of CPU. Synchronous (V0-1, V0-3): overlap 0.
        step_s=2.0e-3, per_seq_s=171e-6, per_token_s=0.0, overlap=0.0,
        graphs="decode", capture_sizes=_vllm_v0_sizes, eager_layer_s=_VLLM_EAGER_LAYER_S,
        # the same OpenAI-compatible FastAPI front end; its per-step share sits in step_s (in the
        # engine's process before v0.6, V0-1); per request: vLLM V1's fit (no V0 figure)
        **_V1_API,
        # a request preempted for recompute goes back to the front of the waiting queue
        # (_schedule_default: self.waiting.extendleft(running_scheduled.preempted); v0.3:
        # _preempt_by_recompute, self.waiting.insert(0, seq_group)) and is admitted as a new prompt
        # is, through BlockSpaceManager.can_allocate: num_free_gpu_blocks - num_required_blocks >=
        # watermark_blocks, its whole sequence so far (len(seq.logical_token_blocks)), and NEVER
        # (ignored, FINISHED_IGNORED) when even an empty cache would leave less than the watermark
        # (vllm/core/scheduler.py _schedule_prefills, vllm/core/block_manager_v1.py can_allocate,
        # v0.4-v0.5; block_manager.py at v0.3, SelfAttnBlockSpaceManager.can_allocate from v0.6)
        watermark_on_recompute=True,
        # before a decode, each running group in turn needs one free block per sequence, whether or
        # not its next token opens one (the "simple heuristic": num_seqs <= num_free_gpu_blocks,
        # BlockSpaceManager.can_append_slot, vllm/core/block_manager.py at v0.3.3;
        # BlockSpaceManagerV1.can_append_slots, vllm/core/block_manager_v1.py at v0.4.1 and
        # v0.5.3, the default block manager up to v0.6.1: use_v2_block_manager = False), else the
        # newest running group is preempted (Scheduler._schedule_running: while not
        # self._can_append_slots(seq_group), running_queue.pop(), v0.4-v0.5; _schedule at v0.3)
        decode_needs_free_block=True,
        # with chunked prefill too, a prompt's blocks are all allocated when it is admitted
        # (Scheduler._schedule_prefills: block_manager.can_allocate, then _allocate_and_set_running:
        # block_manager.allocate of the whole sequence, vllm/core/scheduler.py, v0.4-v0.6)
        whole_prompt_blocks=True,
        # without chunked prefill, a step that schedules prompts runs no decodes (_schedule_default:
        # "Don't schedule decodes if prefills are scheduled", vllm/core/scheduler.py at v0.4-v0.5;
        # _schedule at v0.2-v0.3 returns as soon as it has scheduled prompts)
        prompt_only_steps=True,
        # with chunked prefill (v0.4-v0.5, _schedule_chunked_prefill): _schedule_running asks
        # _can_append_slots of every running group, one mid-way through its prompt too (its
        # is_prefill forced False: "Appending slots only occurs in decoding"), so a prompt chunk
        # also needs a free block at its turn (vllm/core/scheduler.py, read at v0.4-era 0054e1f and
        # v0.5-era 0dce2b2; BlockSpaceManagerV1.can_append_slots: num_seqs <= num_free_gpu_blocks)
        prefill_needs_free_block=True,
        # and it schedules the running groups, then the swapped ones only "If preemption happens,
        # it means we don't have space for swap-in" (none swapped in after a preemption), then new
        # prompts in every case (_schedule_prefills on the blocks and tokens left, the waiting queue
        # as it stood: the step's victims are put at its front after, waiting.extendleft(preempted));
        # _schedule_swapped stops at the first swapped group that cannot come back, and the prompts
        # are still scheduled. (Without chunked prefill, _schedule_default: prompts only while none
        # are swapped out, in steps of their own: policy.prefill_first)
        admit_past_preemption=True),
    EngineProfile(
        name="vllm-v0.2",
        summary="vLLM v0.2 (late 2023): Ray workers, eager PyTorch (no CUDA graphs), NCCL all-reduce, synchronous "
                "Python scheduler, prompts packed end to end (v0.2.0-v0.2.1)",
        # CPU figures fitted to DistServe's profile of vLLM v0.2.3 on A100 hosts (tools/fit_vllm_v02.py)
        step_s=_V02["step_s"], per_seq_s=_V02["per_seq_s"], per_token_s=0.0, overlap=0.0,
        graphs="none", capture_sizes=None, eager_layer_s=_V02["eager_layer_s"],
        eager_collective_s=_V02["eager_collective_s"], allreduce="nccl",
        cpu_host_speed=1.0,  # measured on A100 hosts (DistServe's A100-80GB SXM servers)
        # the same FastAPI front end (no 2023 figure): vLLM V1's fit
        **_V1_API,
        # before a decode step, each running group in turn needs one free block per sequence
        # ("Simple heuristic", BlockSpaceManager.can_append_slot, vllm/core/block_manager.py
        # L143-148 at v0.2.3, L105-110 at v0.1.0), else the newest running one is preempted
        # (vllm/core/scheduler.py L217-230 at v0.2.3, L199-212 at v0.2.0)
        decode_needs_free_block=True,
        # a recompute's prompt run is admitted as any prompt is, above the watermark
        # (BlockSpaceManager.can_allocate, vllm/core/block_manager.py L103-120 at v0.2.3, L80-87 at v0.1.0)
        watermark_on_recompute=True,
        # (no chunked prefill in v0.2; its block manager allocates a prompt's blocks at admission)
        whole_prompt_blocks=True,
        # a step that schedules prompts runs no decodes: Scheduler._schedule schedules the waiting
        # prompts first and returns with them alone when there are any (vllm/core/scheduler.py at
        # v0.2.3: "if scheduled or ignored_seq_groups:", a SchedulerOutputs with prompt_run=True)
        prompt_only_steps=True),
    EngineProfile(
        name="trt-llm",
        summary="TensorRT-LLM (PyTorch backend): overlap scheduler, CUDA graphs for generation batches up to 128, "
                "padded",
        # overlap scheduler on by default: step n + 1 launched before step n's CPU work is done (T-1)
        capture_sizes=_trt_llm_sizes, eager_layer_s=_VLLM_V1_COMPILED_LAYER_S, **_OVERLAP_SCHEDULER,
        # no admission watermark: the capacity scheduler's default policy, GUARANTEED_NO_EVICT
        # (PyCapacityScheduler / GuaranteedNoEvictPolicy, tensorrt_llm/_torch/pyexecutor/scheduler/
        # scheduler.py, "C++ reference: capacityScheduler.cpp"), admits a context request when the blocks
        # it needs to completion (prompt + max_new_tokens, get_remaining_blocks_to_completion) fit the
        # free blocks left after every running request's remaining need (NoEvictScheduledBlocksManager);
        # no share of the blocks is kept back. (kv_cache_free_gpu_mem_fraction, 0.9, sizes the cache:
        # memory.gpu_memory_utilization's counterpart. Its reservation to completion is not modelled:
        # policy.reserve: max with policy.max_output_tokens is the closest.)
        watermark=0.0),
    EngineProfile(
        name="sglang",
        summary="SGLang: overlap (zero-overhead) scheduler, CUDA graphs for decode batches up to 256 (512 at TP 4+), "
                "padded; eager prefill",
        # overlap scheduler: "the scheduler runs one batch ahead" (S-1)
        capture_sizes=_sglang_sizes, eager_layer_s=_VLLM_EAGER_LAYER_S, **_OVERLAP_SCHEDULER,
        # no admission watermark: PrefillAdder (python/sglang/srt/managers/schedule_policy.py) admits
        # against the free + evictable tokens less an estimate of the running requests' future
        # tokens, their remaining max_new_tokens (clipped, CLIP_MAX_NEW_TOKENS_ESTIMATION) x
        # new_token_ratio (0.7 x --schedule-conservativeness, default 1, decaying to 0.14 of that
        # while nothing is retracted: Scheduler.__init__, global_config), a new request its prompt plus
        # its own clipped max_new_tokens; no fixed share of the blocks is kept back. That estimate of
        # the outputs is not modelled (policy.reserve: max with policy.max_output_tokens is the closest)
        watermark=0.0),
    EngineProfile(
        name="hf-eager",
        summary="Hugging Face transformers generate(), eager PyTorch: no CUDA graphs, a growing (torch.cat) KV "
                "cache, no API server",
        # the Python loop's own per-step work is inside the launch-bound layer time (H-1 measures
        # whole tokens)
        step_s=0.0, per_seq_s=0.0, per_token_s=0.0, overlap=0.0,
        # plain eager PyTorch Llama-2-7B decodes 25.5 tok/s at batch 1 on A100 ("heavily CPU
        # overhead bound", H-1); with CUDA graphs 104.9 tok/s (H-2): the eager token is the
        # CPU's launches, 39.2 ms / 32 layers = 1.2 ms per layer
        graphs="none", capture_sizes=None, eager_layer_s=39.2e-3 / 32,
        api_request_s=0.0, api_per_token_s=0.0,  # offline generate(): no server
        allreduce="nccl",  # torch.distributed: NCCL alone
        # DynamicCache (the default) appends each step's K and V with torch.cat
        # (transformers src/transformers/cache_utils.py, DynamicLayer.update): every step reads the
        # whole cache and writes it again besides attention's read, 3x the KV bytes; the prefill
        # runs PyTorch SDPA (flash kernels), so the compute efficiency stays
        attention_scale=(1.0, 1.0 / 3.0),
        # no admission watermark: generate() has no block pool to keep any of (the DynamicCache
        # grows by torch.cat until memory runs out)
        watermark=0.0),
)}

# --- vLLM v0.2.2-v0.3.x (DistServe's baseline is v0.2.3): vllm-v0.2's figures (fitted to that very
# v0.2.3) with its prompt batches padded to the longest prompt. v0.1.x-v0.2.1 (the vLLM paper's)
# packed a prompt batch end to end (sum of the prompts against max_num_batched_tokens,
# vllm/core/scheduler.py L160 at v0.2.1.post1; the tokens padded only to a multiple of 8,
# vllm/worker/worker.py L246): vllm-v0.2. From v0.2.2 (the sdists on PyPI, read at v0.2.3): the
# scheduler counts len(seq_lens) * max(seq_lens) against max_num_batched_tokens and stops at the
# first prompt that takes the padding past max_paddings (vllm/core/scheduler.py L170-186; default
# 256, vllm/engine/arg_utils.py L31); the model runner pads input tokens, positions and slots to
# the longest prompt (vllm/worker/model_runner.py L94-106), and xformers attends causally over
# [longest] x batch (BlockDiagonalCausalMask.from_seqlens([seq_len] * batch_size),
# vllm/model_executor/layers/attention.py L133-136). Still so at v0.3.3 (scheduler.py L233-244).
# Sarathi-Serve's vLLM baseline packs (microsoft/sarathi-serve sarathi/core/scheduler/vllm_scheduler.py:
# num_batched_tokens + num_prompt_tokens against the budget), as DistServe's engine does (both vllm-v0).
PROFILES["vllm-v0.2.3"] = replace(
    PROFILES["vllm-v0.2"], name="vllm-v0.2.3",
    summary="vLLM v0.2.2-v0.3 (DistServe's baseline v0.2.3): vllm-v0.2, with a prompt-only step's prompts padded "
            "to the longest (max_paddings 256)",
    max_paddings=256)

# --- Sarathi-Serve's runtime (microsoft/sarathi-serve, the OSDI'24 artifact), which runs both sides
# of the paper's comparison (its vLLM scheduler, sarathi/core/scheduler/vllm_scheduler.py, and its
# own): vllm-v0's CPU figures, which are Vidur's profile of this very runtime (V0-6:
# vidur/profiling/cpu_overhead/benchmark_runner.py drives sarathi's LLMEngine with
# scheduler_type "vllm"), but no CUDA graphs (sarathi/model_executor/model_runner.py, ModelRunner.run
# calls the model eagerly every step; nothing in the repository captures a graph) and NCCL
# all-reduce launched from Python (parallel_utils/tensor_parallel/mappings.py, _reduce:
# torch.distributed.all_reduce). The launches: vLLM's eager layer (0.26 ms, its PyTorch model code,
# from which sarathi's models are adapted) and vllm-v0.2's fitted 47 us per eager NCCL all-reduce.
PROFILES["sarathi-serve"] = replace(
    PROFILES["vllm-v0"], name="sarathi-serve",
    summary="Sarathi-Serve's runtime (OSDI'24 artifact, vLLM-derived): vllm-v0's CPU figures, eager PyTorch (no "
            "CUDA graphs), NCCL all-reduce launched from Python",
    graphs="none", capture_sizes=None, eager_collective_s=_V02["eager_collective_s"], allreduce="nccl",
    # vLLM V0's can_append_slot, kept: a decoding sequence needs a free block at its turn
    # (BaseBlockSpaceManager.can_append_slot: num_free_gpu_blocks > 0,
    # sarathi/core/block_space_manager/base_block_space_manager.py; checked for each decode in both
    # schedulers, sarathi/core/scheduler/vllm_scheduler.py and sarathi_scheduler.py)
    decode_needs_free_block=True,
    # and its can_allocate: the watermark for every admission, a recompute's included
    # (BaseBlockSpaceManager.can_allocate: num_free_gpu_blocks - num_required_blocks >= watermark_blocks)
    watermark_on_recompute=True,
    # and its allocate: the blocks of a sequence's whole prompt at admission, its chunks computed
    # into them (get_num_initial_blocks: len(seq.logical_token_blocks), vllm_block_space_manager.py;
    # sarathi_scheduler.py: "the memory for all these prefills has already been allocated")
    whole_prompt_blocks=True,
    # but a running request mid-way through its prompt needs no free block: SarathiScheduler._schedule
    # checks can_append_slot for the decodes only, then appends the running prefills' chunks
    # unchecked (sarathi_scheduler.py, Phase 1)
    prefill_needs_free_block=False,
    # and a victim goes to the front of the waiting queue at once (BaseScheduler._preempt:
    # waiting.insert(0, seq)), which Phase 2 tries first, against the blocks it has just freed (fewer
    # than its whole sequence plus the watermark's whenever the watermark keeps a block, so admission
    # stops there: nothing is admitted in a step that preempted, as servesim's default); no swapping
    admit_past_preemption=False,
    # its vLLM scheduler (sarathi/core/scheduler/vllm_scheduler.py, the paper's vLLM baseline) returns
    # the prompts it admits alone, as vLLM V0's does: prompt-only steps (kept from vllm-v0)
    prompt_only_steps=True)


def prefill_first_for(given: bool | None, policy_name: str, engine: str | None) -> bool:
    """A colocated pool's ``policy.prefill_first``: ``given`` where the scenario sets it, else
    (null) the engine profile's ``prompt_only_steps`` for a ``continuous`` policy (vLLM V0's
    scheduler without chunked prefill), and false for any other (chunked prefill, static batching,
    a P/D split, a plug-in: nothing to run prompts before)."""
    if given is not None:
        return bool(given)
    return policy_name == "continuous" and engine in PROFILES and PROFILES[engine].prompt_only_steps


def get_profile(name: str, where: str = "cost.engine") -> EngineProfile:
    """The profile called ``name``; an ``InputError`` naming ``where``, the valid names and the
    closest one otherwise."""
    if name not in PROFILES:
        raise InputError(f"{where}: {name!r} is not an engine profile;{did_you_mean(name, PROFILES)}")
    return PROFILES[name]


# ---------------------------------------------------------------- a pool's resolved figures
@dataclass(frozen=True)
class EngineSetup:
    """What one pool's steps are priced with: the profile's figures after the scenario's overrides
    and a calibration's measured overhead, with where the overhead came from."""

    profile: EngineProfile
    step_s: float
    per_seq_s: float
    per_token_s: float
    overlap: float
    overhead_source: str
    graph_sizes: tuple  # capture sizes, ascending; () = no CUDA graphs
    graph_mixed: bool  # graphs also for steps with prefill tokens (vLLM V1's piecewise graphs)
    eager_layer_s: float
    api_request_s: float  # 0 when the scenario turns the API server off
    api_per_token_s: float
    async_scheduling: bool
    eager_collective_s: float = 0.0
    allreduce: str = "custom"  # the TP all-reduce inside the NVLink domain (the scenario's, else the profile's)
    cpu_scale: float = 1.0  # the profile's CPU figures x this: its measuring host's speed / the GPU's host's

    def cost_model_kwargs(self) -> dict:
        """The ``CostModel`` fields this setup fixes."""
        return {"step_overhead_s": self.step_s, "per_seq_overhead_s": self.per_seq_s,
                "per_token_overhead_s": self.per_token_s, "overlap": self.overlap, "graph_sizes": self.graph_sizes,
                "graph_mixed": self.graph_mixed, "eager_layer_s": self.eager_layer_s,
                "eager_collective_s": self.eager_collective_s, "allreduce": self.allreduce}

    def scale_efficiencies(self, eff):
        """``eff`` with the profile's attention scale applied (the same object when it has none)."""
        sc, sm = self.profile.attention_scale
        if (sc, sm) == (1.0, 1.0):
            return eff
        a = eff.attention
        return replace(eff, attention=replace(a, compute=a.compute * sc, memory=a.memory * sm),
                       source=f"{eff.source}; attention x ({sc:.3g}, {sm:.3g}) for {self.profile.name}")

    def api_s(self, output_tokens):
        """The API server's time added to a request's finish (a number, or numpy arrays
        elementwise): ``api_request_s`` + ``api_per_token_s`` x (output tokens - 1)."""
        return self.api_request_s + self.api_per_token_s * (output_tokens - 1)

    def describe(self) -> dict:
        """``summary.json`` ``cost.<pool>``: the engine and the figures its steps used."""
        return {"engine": self.profile.name,
                "overhead": {"step_s": self.step_s, "per_seq_s": self.per_seq_s, "per_token_s": self.per_token_s,
                             "overlap": self.overlap, "source": self.overhead_source},
                "cuda_graphs": {"steps": "none" if not self.graph_sizes else ("all" if self.graph_mixed else "decode"),
                                "max_tokens": self.graph_sizes[-1] if self.graph_sizes else 0,
                                "sizes": len(self.graph_sizes), "eager_layer_s": self.eager_layer_s,
                                "eager_collective_s": self.eager_collective_s},
                "host_cpu_scale": self.cpu_scale,
                "async_scheduling": self.async_scheduling,
                "api_server": {"request_s": self.api_request_s, "per_output_token_s": self.api_per_token_s}}


def host_cpu_scale(profile: EngineProfile, gpu=None) -> float:
    """What the profile's CPU figures are multiplied by on ``gpu``'s host: the speed of the host
    they were measured on over that host's (``GpuSpec.host_cpu_speed``); 1 when either is unknown."""
    if profile.cpu_host_speed is None or gpu is None:
        return 1.0
    return profile.cpu_host_speed / gpu.host_cpu_speed


def resolve(name: str, eff, tp: int, max_num_seqs: int, cost=None, where: str = "cost.engine",
            gpu=None) -> EngineSetup:
    """A pool's ``EngineSetup``: the profile ``name`` at ``tp`` and ``max_num_seqs`` on ``gpu``.
    Each per-step figure is ``cost``'s (the scenario's ``cost`` section) where it sets one, else the
    calibration's measured overhead (``eff.overhead`` at ``tp``) for the fixed and per-sequence
    figures, else the profile's, scaled to the GPU's host (``host_cpu_scale``; the launch figures
    too). The all-reduce is ``cost.allreduce`` when set, else the profile's."""
    p = get_profile(name, where)
    scale = host_cpu_scale(p, gpu)
    fit = eff.overhead.at(tp) if eff.overhead is not None else None
    given = {} if cost is None else {"step": cost.step_overhead_s, "seq": cost.per_seq_overhead_s,
                                     "tok": cost.per_token_overhead_s}
    figures, src = [], []
    for key, k, own in (("step", 0, p.step_s * scale), ("seq", 1, p.per_seq_s * scale),
                        ("tok", None, p.per_token_s * scale)):
        if given.get(key) is not None:
            figures.append(float(given[key]))
            src.append("scenario")
        elif fit is not None and k is not None:
            figures.append(fit[k])
            src.append("calibration")
        else:
            figures.append(own)
            src.append(f"engine {p.name}")
    # the per-token figure is named only when the scenario sets it (no profile has one)
    named = list(zip(src, ("step", "per sequence", "per token")))[:3 if src[2] == "scenario" else 2]
    source = named[0][0] if len({s for s, _ in named}) == 1 else ", ".join(f"{s} ({what})" for s, what in named)
    overlap = p.overlap if cost is None or cost.overhead_overlap is None else float(cost.overhead_overlap)
    sizes = tuple(p.capture_sizes(max_num_seqs, tp)) if p.graphs != "none" else ()
    api_on = cost is None or cost.api_server
    allreduce = (cost.allreduce if cost is not None else None) or p.allreduce
    return EngineSetup(p, figures[0], figures[1], figures[2], overlap, source, sizes, p.graphs == "all",
                       p.eager_layer_s * scale, p.api_request_s if api_on else 0.0,
                       p.api_per_token_s if api_on else 0.0, p.async_scheduling, p.eager_collective_s * scale,
                       allreduce, scale)


def cost_model_for(model, gpu, eff, tp: int = 1, engine: str = DEFAULT_ENGINE, max_num_seqs: int = 256, cost=None,
                   where: str = "cost.engine", **kw):
    """(``CostModel``, ``EngineSetup``) of ``model`` on ``gpu`` priced as engine ``engine`` runs it
    (``kw``: the other ``CostModel`` fields: pp, dtype, kv_dtype, measured; ``allreduce`` None or
    absent: the engine's)."""
    from servesim.cost.roofline import CostModel

    eng = resolve(engine, eff, tp, max_num_seqs, cost, where, gpu)
    if kw.get("allreduce") is not None and kw["allreduce"] != eng.allreduce:
        eng = replace(eng, allreduce=kw["allreduce"])
    kw.pop("allreduce", None)
    return CostModel(model, gpu, tp=tp, eff=eng.scale_efficiencies(eff), **eng.cost_model_kwargs(), **kw), eng


def padded_tokens(sizes: tuple, tokens: int) -> int | None:
    """The capture size ``tokens`` pads to, or None above the largest."""
    if not sizes or tokens > sizes[-1]:
        return None
    return sizes[bisect.bisect_left(sizes, tokens)]


__all__ = ["DEFAULT_ENGINE", "DEFAULT_WATERMARK", "EngineProfile", "EngineSetup", "PROFILES", "cost_model_for",
           "get_profile", "host_cpu_scale", "padded_tokens", "prefill_first_for", "resolve"]
