"""Model and GPU specifications, their catalogs, and a Hugging Face ``config.json`` loader.

Everything here is plain, frozen data. Units are in the names: ``*_bytes``, ``*_flops``,
``*_bytes_per_s``. Catalog figures are datasheet numbers (sources in comments); measured
efficiencies live in ``sim/cost/efficiency.py``, not here.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional

from servesim.errors import InputError, did_you_mean, shown_path
from servesim.inputs.schema import build_file, field_, read_mapping

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def tp_error(model: "ModelSpec", tp: int, expert_parallel: bool = False) -> str | None:
    """Why ``model`` cannot be split over ``tp`` GPUs (vLLM's checks), or None: the attention heads
    and the MLP widths must divide by it, and the KV heads must divide by it or it by them (fewer
    KV heads than GPUs are replicated); with expert parallelism the experts must divide by it
    instead of their width."""
    if tp < 1:
        return "must be >= 1"
    if model.num_heads % tp:
        return f"must divide the model's {model.num_heads} attention heads"
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        return f"must divide the model's {kv} KV heads, or be a multiple of them"
    if expert_parallel and model.is_moe:
        if model.num_experts % tp:
            return f"must divide the model's {model.num_experts} experts (hardware.expert_parallel)"
    elif model.intermediate_size % tp:
        return f"must divide the model's MLP width {model.intermediate_size}"
    for width in (model.dense_intermediate_size, model.num_shared_experts * model.intermediate_size):
        if width % tp:
            return f"must divide the model's MLP width {width}"
    return None


def activation_dtype(dtype: str) -> str:
    """The 16-bit dtype a model whose linear weights are ``dtype`` computes in: fp16 for fp16, else
    bf16. Its embedding and LM head stay in it (FP8, AWQ and GPTQ checkpoints leave them
    unquantized), and so does its KV cache unless ``kv_dtype`` says otherwise (vLLM's
    ``kv_cache_dtype: auto``)."""
    return "fp16" if dtype == "fp16" else "bf16"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shape (what the cost model and KV sizing need).

    Mixture of experts (``num_experts > 0``): every layer but the first ``first_dense_layers``
    (which have a dense MLP of ``dense_intermediate_size``) routes each token to
    ``experts_per_token`` of ``num_experts`` experts of width ``intermediate_size`` and runs
    ``num_shared_experts`` more of that width on every token (DeepSeek). Multi-head latent
    attention (``kv_lora_rank > 0``, DeepSeek-V2/V3): queries of ``head_dim`` (nope + rope) per
    head, values of ``v_head_dim``; the KV cache holds one ``kv_lora_rank + qk_rope_head_dim``
    latent per token and layer, shared by all heads."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # MLP hidden size (per branch when gated; MoE: per expert)
    vocab_size: int
    gated_mlp: bool = True  # SwiGLU (gate + up) vs plain up + GELU
    tied_embeddings: bool = False
    max_context_tokens: int = 4096
    num_experts: int = 0  # MoE: experts per layer (0: a dense MLP)
    experts_per_token: int = 0  # MoE: top-k experts each token is routed to
    # sliding-window attention (Mistral-7B-v0.1: 4096): each token attends to the last this-many
    # tokens only, and KV blocks wholly out of the window are freed (sim/core/kv.py); None: full
    sliding_window_tokens: int | None = None
    rotary: bool = True  # rotary position embeddings (False: learned positions or ALiBi, no rotary kernel)
    num_shared_experts: int = 0  # MoE: experts every token runs besides its routed ones
    first_dense_layers: int = 0  # MoE: leading layers with a dense MLP
    dense_intermediate_size: int = 0  # MoE: those layers' MLP width
    kv_lora_rank: int = 0  # MLA: the compressed KV latent (0: no MLA)
    q_lora_rank: int = 0  # MLA: the compressed query (0: queries projected directly)
    qk_rope_head_dim: int = 0  # MLA: the rotary key part shared by all heads (cached with the latent)
    v_head_dim: int = 0  # value head size where it differs from head_dim (MLA); 0: head_dim
    # a window on only some layers (Gemma-2: every other one): ``partial_window_layers`` of the
    # layers attend to the last ``partial_window_tokens`` tokens, the others to all of them. Their
    # attention follows it (``Batch.windowed``); the KV cache keeps every layer's KV for the whole
    # sequence, as vLLM V0 does (V1's hybrid KV cache frees the window layers' blocks): more KV,
    # never less. ``sliding_window_tokens`` stays None for such a model.
    partial_window_tokens: int | None = None
    partial_window_layers: int = 0
    # which layers those are (indices, ascending; their count is ``partial_window_layers``): they
    # place the window's cheaper attention on pipeline stages (``CostModel.stage_times``); ():
    # not known (a spec built by hand), the stages share it by their layer counts
    partial_window_at: tuple = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def kv_elements_per_token_layer(self) -> int:
        """What the KV cache holds per token and layer (before TP): K and V of every KV head, or
        with MLA the latent and the rotary key, shared by all heads."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 2 * self.kv_dim

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    def attention_params(self) -> int:
        """Parameters of one layer's attention projections (MLA: q down/up, the latent's down
        projection with the rotary key, its up projection to K and V, and the output)."""
        h, H = self.hidden_size, self.num_heads
        if not self.is_mla:
            return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        q = h * self.q_lora_rank + self.q_lora_rank * self.q_dim if self.q_lora_rank else h * self.q_dim
        nope = self.head_dim - self.qk_rope_head_dim
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * H * (nope + self.value_head_dim)
        return q + kv + H * self.value_head_dim * h

    def layer_weight_params(self, i: int = -1) -> int:
        """Parameters of layer ``i`` (default: the last, an MoE layer in an MoE model): attention +
        MLP (experts, shared experts and router) + its two norms."""
        h = self.hidden_size
        per = (3 if self.gated_mlp else 2) * h
        if not self.is_moe or i % self.num_layers < self.first_dense_layers:
            mlp = per * (self.dense_intermediate_size if self.is_moe else self.intermediate_size)
        else:
            mlp = per * self.intermediate_size * (self.num_experts + self.num_shared_experts) + h * self.num_experts
        return self.attention_params() + mlp + 2 * h

    def layers_params(self, start: int = 0, stop: int | None = None) -> int:
        """Parameters of layers ``start .. stop - 1`` (default: all)."""
        stop = self.num_layers if stop is None else stop
        dense = max(0, min(stop, self.first_dense_layers) - start) if self.is_moe else 0
        rest = stop - start - dense
        return (dense * self.layer_weight_params(0) if dense else 0) + rest * self.layer_weight_params()

    def expected_experts_hit(self, tokens: float) -> float:
        """Expected distinct experts a layer uses for ``tokens`` tokens routed uniformly to top-k of
        E: ``E * (1 - (1 - k/E)^tokens)`` (each expert is missed by a token with prob. 1 - k/E)."""
        E, k = self.num_experts, self.experts_per_token
        if tokens <= 0:
            return 0.0
        return E * (1.0 - (1.0 - k / E) ** tokens)

    def total_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else emb
        return self.layers_params() + emb + head + self.hidden_size

    def active_params(self) -> int:
        """Parameters one token uses: the routed experts it goes to, not all of them."""
        if not self.is_moe:
            return self.total_params()
        idle = (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size * (
            self.num_experts - self.experts_per_token)
        return self.total_params() - self.num_moe_layers * idle

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """KV bytes one token occupies across all layers of a replica (before TP; an MLA latent
        once, though every TP rank keeps a copy of it)."""
        return self.num_layers * self.kv_elements_per_token_layer * DTYPE_BYTES[kv_dtype]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Datasheet figures for one GPU (dense, no sparsity)."""

    name: str
    peak_flops: float  # dense BF16/FP16 tensor FLOP/s
    fp8_flops: float  # dense FP8 FLOP/s (0 when unsupported)
    mem_bytes: float  # HBM capacity
    mem_bw_bytes_per_s: float  # HBM bandwidth
    link_bw_bytes_per_s: float  # intra-node GPU-GPU bandwidth, one direction (NVLink / IF / PCIe)
    pcie_bw_bytes_per_s: float  # host <-> device, one direction
    link_latency_s: float = 5e-6  # per collective / send latency
    mem_kind: str = "hbm"  # hbm | gddr: picks the closest calibrated GPU for uncalibrated ones
    # GPUs of a node all connected by the peer link (NVLink through NVSwitch: 8; NVLink-bridged
    # pairs: 2; none: 1): tensor parallelism beyond it communicates over PCIe
    nvlink_domain: int = 8
    # what a GPU costs and draws (``GPU_ECONOMICS`` below; sim/cost/economics.py prices a run with
    # them): an on-demand list price per GPU-hour in USD and the board power (TDP) in watts;
    # None: not known (a scenario's cost.gpu_hour_usd / cost.gpu_power_w, or a GPU YAML, gives it)
    price_per_gpu_hour_usd: float | None = None
    power_w: float | None = None
    # single-thread speed of the host CPU the GPU is deployed with (its DGX / HGX server), relative to
    # the DGX-A100's AMD EPYC 7742: scales the CPU-side figures of engine profiles measured on a
    # known host (``EngineProfile.cpu_host_speed``, sim/cost/engines.py)
    host_cpu_speed: float = 1.0
    # False: a GPU file without ``base`` that gave no ``fp8_flops`` (its FP8 tensor cores are not
    # known; FP8 weights on it are refused, ``dtype_error``, rather than priced at the 16-bit peak)
    fp8_flops_known: bool = True

    @property
    def peer_link(self) -> bool:
        """Whether the GPUs of a node have a link faster than PCIe (NVLink, Infinity Fabric)."""
        return self.link_bw_bytes_per_s > self.pcie_bw_bytes_per_s

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the roofline turns from memory- to compute-bound."""
        return self.peak_flops / self.mem_bw_bytes_per_s


T = 1e12
G = 1e9
GIB = 2**30
MIB = 2**20

# Datasheet numbers (dense, i.e. without 2:4 sparsity). Sources:
# FP8 is 0 where the GPU has no FP8 tensor cores (Ampere); fp8 weights then run at the BF16 peak.
#  a100-*: NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TF BF16, 40GB/1555 GB/s, 80GB/2039 GB/s
#          (SXM), NVLink 600 GB/s total (300 GB/s per direction), PCIe Gen4 32 GB/s per direction.
#  a40:    NVIDIA A40 datasheet: 149.7 TF BF16 dense, 48 GB GDDR6 at 696 GB/s, NVLink bridge
#          112.5 GB/s total, PCIe Gen4.
#  h100-*: NVIDIA H100 Tensor Core GPU datasheet: SXM 989 TF BF16 / 1979 TF FP8 dense,
#          80 GB at 3.35 TB/s, NVLink 900 GB/s total; PCIe 756 TF / 1513 TF, 80 GB at 2.0 TB/s,
#          NVLink bridge 600 GB/s, PCIe Gen5 64 GB/s per direction.
#  h200:   NVIDIA H200 datasheet: same compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
#  b200:   NVIDIA HGX B200 datasheet: 2.25 PF BF16 / 4.5 PF FP8 dense per GPU, 180 GB at 7.7 TB/s
#          (HGX figure), NVLink 5 1.8 TB/s total.
#  l40s:   NVIDIA L40S datasheet: 362 TF BF16 / 733 TF FP8 dense, 48 GB GDDR6 at 864 GB/s,
#          no NVLink (PCIe Gen4).
#  mi300x: AMD Instinct MI300X datasheet: 1307 TF BF16 / 2615 TF FP8 dense, 192 GB at 5.3 TB/s,
#          Infinity Fabric 896 GB/s aggregate (7 links x 128 GB/s; one peer ~64 GB/s per direction
#          is the worst case, we use the aggregate ring figure / 2).
# HBM capacities are binary: an "80GB" A100 or H100 holds 80 GiB (nvidia-smi: 81920 / 81559 MiB),
# a "40GB" A100 40 GiB, and vLLM's gpu_memory_utilization is a share of that (the vLLM paper's
# OPT-13B on an A100-40GB: 26 GB of weights leave 12 GiB = 15.7K tokens of KV). GDDR boards with
# ECC on show about their decimal figure (A40, L40S: 46068 MiB = 48.3e9 bytes), kept as 48e9.
# H200 and B200 as nvidia-smi reports them (143771 MiB = "141 GB"; 183359 MiB = "180 GB").
# nvlink_domain: SXM / OAM boards connect all 8 GPUs (NVSwitch; MI300X: Infinity Fabric mesh); the
# A40 and H100 PCIe connect pairs with an NVLink bridge; the L40S has no NVLink.
# host_cpu_speed: DGX H100 and DGX H200 ship the same host (2 x Intel Xeon Platinum 8480C; DGX A100:
# 2 x AMD EPYC 7742, NVIDIA's datasheets): 1.3, the speed-up of the same vLLM v0.2 build's
# CPU-bound decode steps on a DGX-H100 over a DGX-A100 (Splitwise's profiling data, Llama-2-70B
# and BLOOM-176B at TP 2-8, batch 1-8; fitted by tools/fit_vllm_v02.py). Other GPUs: 1.0 (no
# measurement of their hosts; the A100's host is the reference).
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("a100-40g", 312 * T, 0.0, 40 * GIB, 1555 * G, 300 * G, 32 * G),
        GpuSpec("a100-80g", 312 * T, 0.0, 80 * GIB, 2039 * G, 300 * G, 32 * G),
        GpuSpec("a40", 149.7 * T, 0.0, 48 * G, 696 * G, 56.25 * G, 32 * G, mem_kind="gddr", nvlink_domain=2),
        GpuSpec("h100-sxm", 989 * T, 1979 * T, 80 * GIB, 3350 * G, 450 * G, 64 * G, host_cpu_speed=1.3),
        GpuSpec("h100-pcie", 756 * T, 1513 * T, 80 * GIB, 2000 * G, 300 * G, 64 * G, nvlink_domain=2),
        GpuSpec("h200", 989 * T, 1979 * T, 143771 * MIB, 4800 * G, 450 * G, 64 * G, host_cpu_speed=1.3),
        GpuSpec("b200", 2250 * T, 4500 * T, 183359 * MIB, 7700 * G, 900 * G, 64 * G),
        GpuSpec("l40s", 362 * T, 733 * T, 48 * G, 864 * G, 32 * G, 32 * G, mem_kind="gddr", nvlink_domain=1),
        GpuSpec("mi300x", 1307 * T, 2615 * T, 192 * GIB, 5300 * G, 448 * G, 64 * G),
    ]
}

# Price and power of each catalog GPU: (USD per GPU-hour on demand, board power W). These change
# often; override them per run (scenario cost.gpu_hour_usd / cost.gpu_power_w, servesim plan
# --price) rather than trusting them for a purchase.
# Prices: RunPod on-demand Pods, Secure Cloud (runpod.io/pricing), one provider for as many GPUs as
# it lists. The figures were taken from third-party transcriptions of that page (the page itself
# was not read): a100-80g 1.59, a40 0.44, h100-sxm 3.29, h100-pcie 2.89, b200 6.79 (Secure Cloud, read
# 2026-08-19, Hugging Face dataset privum/ai-compute-prices); a100-40g 1.00 (Community Cloud, the
# only tier listing it, same read); h200 4.59 (Pods, read 2026-10-07, api-evangelist/runpod
# plans/runpod-plans-pricing.yml); l40s 0.86 (RunPod on-demand as listed in Modal's "How much does
# it cost to run NVIDIA L40S GPUs" table, 2025-08-12). RunPod lists no MI300X price: mi300x 1.85 is
# Vultr's on-demand price (gpu.blog MI300X listing, 2025). For scale, hyperscalers charge about
# twice as much (AWS p5.48xlarge, 8 x H100 SXM, us-east-1: $55.04/h = $6.88 per GPU-hour).
# Board power (TDP, datasheets): A100 SXM 400 W (A100 datasheet), A40 300 W, H100 SXM 700 W and
# PCIe 350 W (H100 datasheet), H200 SXM 700 W, B200 1000 W (HGX B200), L40S 350 W, MI300X 750 W
# (AMD Instinct MI300X datasheet).
GPU_ECONOMICS: dict[str, tuple[float, float]] = {
    "a100-40g": (1.00, 400.0),
    "a100-80g": (1.59, 400.0),
    "a40": (0.44, 300.0),
    "h100-sxm": (3.29, 700.0),
    "h100-pcie": (2.89, 350.0),
    "h200": (4.59, 700.0),
    "b200": (6.79, 1000.0),
    "l40s": (0.86, 350.0),
    "mi300x": (1.85, 750.0),
}
GPUS = {name: dataclasses.replace(g, price_per_gpu_hour_usd=GPU_ECONOMICS[name][0], power_w=GPU_ECONOMICS[name][1])
        if name in GPU_ECONOMICS else g for name, g in GPUS.items()}

# Shapes from each model's Hugging Face config.json. More catalog models ship as their config.json
# (``packaged_configs``): Llama-3.1 8B/70B/405B, Llama-3.3-70B, Qwen2.5-72B, Qwen3-30B-A3B and
# 235B-A22B, DeepSeek-V3, Mistral-7B-Instruct-v0.2, OPT-13B/66B/175B, Yi-34B, Llama-2-13B,
# LLaMA-13B, BLOOM, Falcon-7B/40B, Gemma-7B, Gemma-2-9B, Phi-3-mini.
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 128, 11008, 32000, max_context_tokens=4096),
        ModelSpec("meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 128, 28672, 32000, max_context_tokens=4096),
        ModelSpec("meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 128, 14336, 128256, max_context_tokens=8192),
        ModelSpec("meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 128, 28672, 128256, max_context_tokens=8192),
        # Mistral-7B-v0.1: every layer attends to the last 4096 tokens (config.json sliding_window 4096)
        ModelSpec("mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 128, 14336, 32000, max_context_tokens=32768,
                  sliding_window_tokens=4096),
        ModelSpec("codellama/CodeLlama-34b-Instruct-hf", 48, 8192, 64, 8, 128, 22016, 32000, max_context_tokens=16384),
        ModelSpec("internlm/internlm-20b", 60, 5120, 40, 40, 128, 13824, 103168, max_context_tokens=4096),
        # Qwen-72B's config says intermediate_size 49152: two halves of 24576 (gate and up).
        ModelSpec("Qwen/Qwen-72B", 80, 8192, 64, 64, 128, 24576, 152064, max_context_tokens=32768),
        ModelSpec("microsoft/phi-2", 32, 2560, 32, 32, 80, 10240, 51200, gated_mlp=False, max_context_tokens=2048),
        ModelSpec("Qwen/Qwen2.5-7B-Instruct", 28, 3584, 28, 4, 128, 18944, 152064, max_context_tokens=32768),
        # a typical speculative-decoding draft for the Llama-3 family
        ModelSpec("meta-llama/Llama-3.2-1B", 16, 2048, 32, 8, 64, 8192, 128256, tied_embeddings=True,
                  max_context_tokens=131072),
        # Mixtral: 8 SwiGLU experts of 14336 per layer, top-2 routing (config.json: num_local_experts,
        # num_experts_per_tok); sliding window off in v0.1's config.
        ModelSpec("mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 128, 14336, 32000, max_context_tokens=32768,
                  num_experts=8, experts_per_token=2),
    ]
}


# Hugging Face ids of fine-tunes and renamed repositories whose config.json describes the same
# architecture as a catalog entry (layers, widths, heads, vocabulary, context length, RoPE base,
# sliding window; only the chat template, tokens like eos or the repository name differ): the
# chat / instruct variants of the catalog's base models and the other way round, and Llama 3.1's
# ids from before Meta renamed the repositories (meta-llama/Meta-Llama-3.1-* -> Llama-3.1-*).
# Each is priced as the entry it names (that model, its measured profiles); a variant whose
# config differs in any of those (Qwen2.5's base models: 131,072 positions against the instruct
# models' 32,768; Mistral-7B-v0.3's larger vocabulary) is no alias: give its config.json.
MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Llama-2-7b-chat-hf": "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-chat-hf": "meta-llama/Llama-2-13b-hf",
    "meta-llama/Llama-2-70b-chat-hf": "meta-llama/Llama-2-70b-hf",
    "codellama/CodeLlama-34b-hf": "codellama/CodeLlama-34b-Instruct-hf",
    "codellama/CodeLlama-34b-Python-hf": "codellama/CodeLlama-34b-Instruct-hf",
    "meta-llama/Meta-Llama-3-8B-Instruct": "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B-Instruct": "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Llama-3.1-405B",
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-405B": "meta-llama/Llama-3.1-405B",
    "meta-llama/Meta-Llama-3.1-405B-Instruct": "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-3.2-1B-Instruct": "meta-llama/Llama-3.2-1B",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistralai/Mistral-7B-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "google/gemma-7b-it": "google/gemma-7b",
    "google/gemma-2-9b-it": "google/gemma-2-9b",
    "tiiuae/falcon-7b-instruct": "tiiuae/falcon-7b",
    "tiiuae/falcon-40b-instruct": "tiiuae/falcon-40b",
}


def dtype_error(gpu: GpuSpec, dtype: str, where: str) -> str | None:
    """Why weights of ``dtype`` cannot be priced on ``gpu`` (``where`` names the setting), or None:
    FP8 on a GPU file that gives no ``fp8_flops`` (it would run at the 16-bit peak as on a GPU
    without FP8 tensor cores, whether or not this one has them)."""
    if dtype == "fp8" and not gpu.fp8_flops_known:
        return (f"{where}: fp8 on GPU {gpu.name!r}, whose file gives no fp8_flops; give fp8_flops (its dense FP8 "
                "FLOP/s; fp8_flops: 0 if it has no FP8 tensor cores, FP8 weights then run at its 16-bit peak), "
                "or base: a catalog GPU")
    return None


def _is(test, name: str, path: str) -> bool:
    """``test(Path(name))`` (is_file, is_dir, exists); a name no file system takes (too long, a
    NUL byte) is an input error naming ``path``."""
    try:
        return test(Path(str(name)))
    except (OSError, ValueError):
        raise InputError(f"{path}: {shown_path(name)} is no catalog name and no readable path") from None


def get_gpu(name: str, path: str = "hardware.gpu") -> GpuSpec:
    """A catalog GPU by name, or one read from a YAML file (``*.yaml`` / ``*.yml`` path)."""
    if name in GPUS:
        return GPUS[name]
    if str(name).endswith((".yaml", ".yml")) or _is(Path.is_file, name, path):
        return load_gpu_yaml(Path(name), path)
    raise InputError(f"{path}: unknown GPU {name!r}; give a catalog name or a path to a GPU YAML "
                     f"file;{did_you_mean(name, GPUS)}")


def check_gpu_names(gpus, where: str, why: str) -> None:
    """Refuse two GPUs that differ but go by one name: two GPU files with ``base:`` and no
    ``name:`` are both ``<base>-custom``, and a file may take a catalog GPU's name with a price of
    its own. ``gpus``: (shown, value, field) triples, ``shown`` naming it in the message, ``value``
    the catalog name or file, ``field`` the setting it came from (for ``get_gpu``'s errors);
    ``where`` begins the message and ``why`` says what the one name would confuse (``servesim plan``
    refuses ``--gpus`` so, a run a P/D split's two pools)."""
    seen: dict = {}
    for shown, g, path in gpus:
        spec = get_gpu(g, path)
        # (in any letter case: 'my-gpu' and 'MY-GPU' read as one GPU in a table)
        other = seen.setdefault(spec.name.casefold(), (shown, spec))
        differ = [f.name for f in fields(spec)
                  if f.name != "name" and getattr(spec, f.name) != getattr(other[1], f.name)]
        if differ:
            named = (repr(spec.name) if spec.name == other[1].name
                     else f"{other[1].name!r} and {spec.name!r} differing only in letter case")
            raise InputError(
                f"{where}: {other[0]} and {shown} are different GPUs ({', '.join(differ)} "
                f"{'differs' if len(differ) == 1 else 'differ'}) of one name, "
                f"{named} (a GPU file with base: and no name: is named <base>-custom): {why}, so one would "
                "be taken for the other; give each file a name: of its own")


@dataclass(frozen=True)
class GpuFile:
    """A GPU YAML file (``hardware.gpu: my-gpu.yaml``): ``GpuSpec`` fields, SI units as named, e.g.::

        name: my-gpu
        base: h100-sxm              # optional: start from a catalog GPU, override the rest
        peak_flops: 989e12          # dense BF16/FP16 FLOP/s
        fp8_flops: 1979e12          # dense FP8 FLOP/s (0: none; needed for dtype fp8 without base)
        mem_bytes: 80e9
        mem_bw_bytes_per_s: 3.35e12
        link_bw_bytes_per_s: 450e9  # one direction
        pcie_bw_bytes_per_s: 64e9
        link_latency_s: 5e-6        # optional
        mem_kind: hbm               # optional: hbm | gddr
        nvlink_domain: 8            # optional: GPUs all on the peer link (default 8; 1 without base)
        price_per_gpu_hour_usd: 2.5 # optional: on-demand USD per GPU-hour (cost per token in summaries)
        power_w: 700                # optional: board power (TDP), watts (energy per token)
        host_cpu_speed: 1.3         # optional: host CPU single-thread speed, DGX-A100's = 1 (default 1)

    Without ``base``, ``REQUIRED`` must be given; the rest default as in ``spec``.
    """

    name: Optional[str] = field_(None, doc="default: <base>-custom, or the file's name")
    base: Any = field_(None, doc="a catalog GPU whose figures the other fields override")
    # bounds: a millionth of the slowest GPU to a million times the fastest (the cost model's
    # times stay finite and meaningful)
    peak_flops: Optional[float] = field_(None, ge=1e9, le=1e21)
    fp8_flops: Optional[float] = field_(None, ge=0, le=1e21)
    mem_bytes: Optional[float] = field_(None, ge=1e6, le=1e16)
    mem_bw_bytes_per_s: Optional[float] = field_(None, ge=1e6, le=1e16)
    link_bw_bytes_per_s: Optional[float] = field_(None, ge=1e6, le=1e16)
    pcie_bw_bytes_per_s: Optional[float] = field_(None, ge=1e6, le=1e16)
    link_latency_s: Optional[float] = field_(None, ge=0, le=1)
    mem_kind: Optional[Literal["hbm", "gddr"]] = None
    nvlink_domain: Optional[int] = field_(None, ge=1, le=1 << 20,
                                           doc="GPUs all connected by the peer link (TP beyond: PCIe)")
    # price and power: the range of the scenario's cost.gpu_hour_usd / cost.gpu_power_w (OVERRIDE_MIN to
    # OVERRIDE_MAX, a price also 0: free); a price of 1e-300 made tokens per $ 1e300 (check)
    price_per_gpu_hour_usd: Optional[float] = field_(None, ge=0, le=1e6, doc="on-demand USD per GPU-hour")
    power_w: Optional[float] = field_(None, ge=1e-6, le=1e6, doc="board power (TDP), watts")
    # (0.01 to 100 times DGX-A100's: 1e-300 scaled an engine's CPU figures by 1e300, a run of 6.9e300
    # simulated seconds with cost.engine vllm-v0.2)
    host_cpu_speed: Optional[float] = field_(None, ge=0.01, le=100,
                                             doc="single-thread speed of the host CPU, DGX-A100's = 1")

    REQUIRED = ("peak_flops", "mem_bytes", "mem_bw_bytes_per_s")

    def check(self, path):
        from servesim.cost.economics import OVERRIDE_MIN
        from servesim.errors import shown

        # (a name is what summaries, prices and calibrations look the GPU up by: an empty one printed
        # '1 x  at $...'; fp8_flops: 0 is none, else FLOP/s in peak_flops' range: fp8_flops: 3 ran FP8
        # steps for 1e13 s; a price below a millionth of a dollar an hour made tokens per $ 1e300)
        if self.name is not None and not self.name.strip():
            raise InputError(f"name must be a GPU's name (text that is not blank), got {shown(self.name)}")
        if self.fp8_flops is not None and 0 < self.fp8_flops < 1e9:
            raise InputError(f"fp8_flops must be 0 (no FP8 tensor cores) or dense FP8 FLOP/s from 1e+09 to 1e+21, got "
                             f"{self.fp8_flops:g}")
        if self.price_per_gpu_hour_usd is not None and 0 < self.price_per_gpu_hour_usd < OVERRIDE_MIN:
            raise InputError(f"price_per_gpu_hour_usd must be 0 (free) or from {OVERRIDE_MIN:g} to 1e+06 USD per "
                             f"GPU-hour, got {self.price_per_gpu_hour_usd:g}")
        if self.base is not None and (not isinstance(self.base, str) or self.base not in GPUS):
            raise InputError(f"base: unknown GPU {self.base!r};{did_you_mean(str(self.base), GPUS)}")
        missing = [k for k in self.REQUIRED if getattr(self, k) is None] if self.base is None else []
        if missing:
            raise InputError(f"lacks {', '.join(missing)} (give them, or base: a catalog GPU to start from; "
                             "optionally fp8_flops, link_bw_bytes_per_s, pcie_bw_bytes_per_s, link_latency_s, "
                             "mem_kind, nvlink_domain, host_cpu_speed)")

    def spec(self, default_name: str) -> GpuSpec:
        """The GPU: the base's figures (or the defaults: FP8 unknown, 32 GB/s links) with the file's over them."""
        if self.base is not None:
            kw = {f.name: getattr(GPUS[self.base], f.name) for f in fields(GpuSpec)}
            kw["name"] = f"{self.base}-custom"
        else:
            kw = {"name": default_name, "fp8_flops": 0.0, "link_bw_bytes_per_s": 32 * G, "pcie_bw_bytes_per_s": 32 * G,
                  "nvlink_domain": 1, "fp8_flops_known": self.fp8_flops is not None}
        kw.update({f.name: getattr(self, f.name) for f in fields(GpuSpec) if getattr(self, f.name, None) is not None})
        return GpuSpec(**kw)


def load_gpu_yaml(p: Path, path: str = "hardware.gpu") -> GpuSpec:
    """A GPU from a YAML file (``GpuFile``); errors name ``path``, the file and the field."""
    data = read_mapping(p, "GPU file", path)
    gpu = build_file(GpuFile, data, f"{path}: {p}", "a GPU file").spec(p.stem)
    # (names compare case-sensitively everywhere, a catalog name in another case refused with "did you
    # mean": a file named H100-SXM printed as the H100 did, whatever its figures)
    near = next((k for k in GPUS if k.casefold() == gpu.name.casefold() and k != gpu.name), None)
    if near is not None:
        raise InputError(f"{path}: {p}: name: {gpu.name!r} is the catalog GPU {near!r} in other letter case (GPU "
                         f"names are matched exactly, so it would be a GPU of its own printed as that one); write "
                         f"name: {near} (with base: {near}, and only a price or power of its own) or a name of "
                         "its own")
    cat = GPUS.get(gpu.name)
    if cat is not None:  # (calibrations and runs look a GPU up by name: an other GPU must not take one)
        own = ("name", "price_per_gpu_hour_usd", "power_w")
        differ = [f.name for f in fields(GpuSpec) if f.name not in own and getattr(gpu, f.name) != getattr(cat, f.name)]
        if differ:
            raise InputError(f"{path}: {p}: name: {gpu.name!r} is a catalog GPU's name, and this file's figures differ "
                             f"from it ({', '.join(differ)}); give the file a name of its own (the catalog's "
                             f"{gpu.name} calibration would price it), or base: {gpu.name} and only a price or power")
    return gpu


@functools.lru_cache(maxsize=1)
def packaged_configs() -> dict:
    """Hugging Face id -> the packaged ``config.json`` of a catalog model that ships as one
    (``sim/inputs/configs/<org>__<name>.json``; where each comes from: ``configs/sources.json``)."""
    d = resources.files("servesim.inputs") / "configs"
    return {Path(str(f)).stem.replace("__", "/", 1): Path(str(f)) for f in d.iterdir()
            if str(f).endswith(".json") and Path(str(f)).stem != "sources"}


@functools.lru_cache(maxsize=64)
def _packaged_model(name: str) -> ModelSpec:
    from servesim.inputs.hf_config import model_from_hf_config

    p = packaged_configs()[name]
    return model_from_hf_config(read_mapping(p, "config file", fmt="json"), f"packaged {name}", name)


def catalog_names() -> list:
    """Every catalog model's Hugging Face id: the Python entries and the packaged config.json files."""
    return sorted(set(MODELS) | set(packaged_configs()))


def get_model(name_or_path: str, path: str = "model") -> ModelSpec:
    """A catalog model by its Hugging Face id (a ``MODELS`` entry or a packaged config.json, or a
    ``MODEL_ALIASES`` variant of one: that entry), or a model read from a ``config.json`` path."""
    if isinstance(name_or_path, str):
        name_or_path = MODEL_ALIASES.get(name_or_path, name_or_path)
    if name_or_path in MODELS:
        return MODELS[name_or_path]
    if name_or_path in packaged_configs():
        return _packaged_model(name_or_path)
    if not str(name_or_path).strip():
        raise InputError(f"{path}: empty; give a catalog id (e.g. meta-llama/Meta-Llama-3-8B) or a path to a "
                         "Hugging Face config.json")
    p = Path(name_or_path)
    if _is(Path.is_dir, p, path):
        p = p / "config.json"
    if p.suffix == ".json" or _is(Path.exists, p, path):
        if not _is(Path.exists, p, path):
            raise InputError(f"{path}: config file {str(p)!r} does not exist")
        return load_hf_config(p, path)
    raise InputError(
        f"{path}: unknown model {name_or_path!r}; give a catalog id or a path to a Hugging Face "
        f"config.json;{_model_hint(str(name_or_path), catalog_names())}"
    )


def model_note(name_or_path: str, path: str = "model", dtype: str | None = None,
               dtype_field: str = "hardware.dtype") -> str | None:
    """A note on how a model given as a ``config.json`` was read, where it was read generically
    (``hf_config.generic_reading_note``: a ``model_type`` of no family servesim knows) or its
    sliding window covers only some layers, read as full attention (``partial_window_note``, also
    for a packaged catalog config), or its ``layer_types`` names a type other than sliding_attention /
    full_attention, priced as full attention (``layer_types_note``), or, given the weight ``dtype``
    priced (set by ``dtype_field``), its checkpoint is published in another
    (``checkpoint_dtype_note``), for ``run``, ``validate``
    and ``cost`` to print; None otherwise. Call after ``get_model`` accepted it."""
    from servesim.inputs.hf_config import (checkpoint_dtype_note, generic_reading_note, layer_types_note,
                                           partial_window_note)

    read = _model_config(name_or_path, path)
    if read is None:
        return None
    cfg, where, packaged = read
    # (a packaged config, Gemma-2-9B: its windows on every other layer; its reading is no guess)
    notes = [partial_window_note(cfg, where)] if packaged else [generic_reading_note(cfg, where),
                                                                 partial_window_note(cfg, where)]
    notes.append(layer_types_note(cfg, where))  # (a layer_types value it does not model: priced as full)
    if dtype is not None:  # (DeepSeek-V3's checkpoint is FP8)
        notes.append(checkpoint_dtype_note(cfg, where, dtype, dtype_field))
    return "; ".join(n for n in notes if n) or None


def checkpoint_note(name_or_path, dtype: str, dtype_field: str = "hardware.dtype",
                    path: str = "model") -> tuple[str, str] | None:
    """(the published weight dtype, ``model_note``'s line on it) of a checkpoint published in
    another weight dtype than the ``dtype`` priced (``hf_config.checkpoint_dtype_note``:
    DeepSeek-V3's FP8), for the error of a model that does not fit in ``dtype``, where the
    published one may; None otherwise."""
    from servesim.inputs.hf_config import checkpoint_dtype_note, published_dtype

    read = _model_config(name_or_path, path)
    note = None if read is None else checkpoint_dtype_note(read[0], read[1], dtype, dtype_field)
    return None if note is None else (published_dtype(read[0]), note)


def _model_config(name_or_path, path: str):
    """(config mapping, where, packaged) of a model given as a packaged catalog config or a
    ``config.json`` (a file or its folder), or None (a built-in spec, or a file that cannot be read:
    ``get_model`` says why)."""
    if not isinstance(name_or_path, str):
        return None
    name_or_path = MODEL_ALIASES.get(name_or_path, name_or_path)
    if name_or_path in MODELS:
        return None
    if name_or_path in packaged_configs():
        return read_mapping(packaged_configs()[name_or_path], "config file", fmt="json"), \
            f"{path}: {name_or_path}", True
    p = Path(name_or_path)
    try:
        if p.is_dir():
            p = p / "config.json"
        return read_mapping(p, "config file", path, fmt="json"), f"{path}: {p}", False
    except (InputError, OSError, ValueError):
        return None


def _model_hint(value: str, names) -> str:
    """``did_you_mean`` over catalog ids, also matching the name without its organisation and in
    any case (llama-2-7b -> meta-llama/Llama-2-7b-hf), which spelling alone does not find."""
    import difflib

    hint = did_you_mean(value, names)
    if hint.startswith(" (did you mean"):
        return hint
    import re

    keys: dict = {}
    for n in sorted(names):
        base = n.lower().rsplit("/", 1)[-1]
        # (also without the suffixes people leave out: -hf, -instruct, -chat, -v0.1, -4k-instruct)
        bare = re.sub(r"(-(hf|instruct|chat|it|\d+k|v\d+(\.\d+)*))+$", "", base)
        for k in (n.lower(), base, bare):
            keys.setdefault(k, n)
    v = value[:200].lower()
    close = []
    for k in difflib.get_close_matches(v.rsplit("/", 1)[-1], list(keys), n=4, cutoff=0.7):
        if keys[k] not in close:
            close.append(keys[k])
    if not close:
        return hint
    shown = " or ".join(repr(c) for c in close[:2])
    return f" (did you mean {shown}?){hint}"


def load_hf_config(p: Path, path: str = "model") -> ModelSpec:
    """A model from a Hugging Face ``config.json`` (``sim/inputs/hf_config.py``)."""
    from servesim.inputs.hf_config import load_hf_config as load

    return load(p, path)
