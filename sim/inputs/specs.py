"""Model and GPU specifications, their catalogs, and a Hugging Face ``config.json`` loader.

Everything here is plain, frozen data. Units are in the names: ``*_bytes``, ``*_flops``,
``*_bytes_per_s``. Catalog figures are datasheet numbers (sources in comments); measured
efficiencies live in ``sim/cost/efficiency.py``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, Optional

from servesim.errors import InputError, did_you_mean, shown
from servesim.inputs.schema import bounds, build_file, check_value, field_, read_mapping

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def tp_error(model: "ModelSpec", tp: int) -> str | None:
    """Why ``model`` cannot be split over ``tp`` GPUs (vLLM's checks), or None: the attention heads
    and the MLP width must divide by it, and the KV heads must divide by it or it by them (fewer
    KV heads than GPUs are replicated)."""
    if tp < 1:
        return f"must be >= 1, got {tp}"
    if model.num_heads % tp:
        return f"must divide the model's {model.num_heads} attention heads"
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        return f"must divide the model's {kv} KV heads, or be a multiple of them"
    if model.intermediate_size % tp:
        return f"must divide the model's MLP width {model.intermediate_size}"
    return None


def activation_dtype(dtype: str) -> str:
    """The 16-bit dtype a model whose linear weights are ``dtype`` computes in: fp16 for fp16, else
    bf16. Its embedding and LM head stay in it (FP8, AWQ and GPTQ checkpoints leave them
    unquantized), and so does its KV cache unless ``kv_dtype`` says otherwise (vLLM's
    ``kv_cache_dtype: auto``)."""
    return "fp16" if dtype == "fp16" else "bf16"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shape (what the cost model and KV sizing need)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # MLP hidden size (per branch when gated)
    vocab_size: int
    gated_mlp: bool = True  # SwiGLU (gate + up) vs plain up + GELU
    tied_embeddings: bool = False
    max_context_tokens: int = 4096
    num_experts: int = 0  # MoE: experts per layer (0: a dense MLP)
    experts_per_token: int = 0  # MoE: top-k experts each token is routed to

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_weight_params(self) -> int:
        """Parameters of one transformer layer (attention + MLP; norms are negligible)."""
        h = self.hidden_size
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        if self.is_moe:
            mlp = mlp * self.num_experts + h * self.num_experts  # experts + router
        return attn + mlp + 2 * h

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
        return self.num_layers * self.layer_weight_params() + emb + head + self.hidden_size

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """KV bytes one token occupies across all layers and all GPUs of a replica (before TP)."""
        return self.num_layers * 2 * self.kv_dim * DTYPE_BYTES[kv_dtype]


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

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the roofline turns from memory- to compute-bound."""
        return self.peak_flops / self.mem_bw_bytes_per_s


T = 1e12
G = 1e9

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
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("a100-40g", 312 * T, 0.0, 40 * G, 1555 * G, 300 * G, 32 * G),
        GpuSpec("a100-80g", 312 * T, 0.0, 80 * G, 2039 * G, 300 * G, 32 * G),
        GpuSpec("a40", 149.7 * T, 0.0, 48 * G, 696 * G, 56.25 * G, 32 * G, mem_kind="gddr"),
        GpuSpec("h100-sxm", 989 * T, 1979 * T, 80 * G, 3350 * G, 450 * G, 64 * G),
        GpuSpec("h100-pcie", 756 * T, 1513 * T, 80 * G, 2000 * G, 300 * G, 64 * G),
        GpuSpec("h200", 989 * T, 1979 * T, 141 * G, 4800 * G, 450 * G, 64 * G),
        GpuSpec("b200", 2250 * T, 4500 * T, 180 * G, 7700 * G, 900 * G, 64 * G),
        GpuSpec("l40s", 362 * T, 733 * T, 48 * G, 864 * G, 32 * G, 32 * G, mem_kind="gddr"),
        GpuSpec("mi300x", 1307 * T, 2615 * T, 192 * G, 5300 * G, 448 * G, 64 * G),
    ]
}

# Shapes from each model's Hugging Face config.json.
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 128, 11008, 32000, max_context_tokens=4096),
        ModelSpec("meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 128, 28672, 32000, max_context_tokens=4096),
        ModelSpec("meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 128, 14336, 128256, max_context_tokens=8192),
        ModelSpec("meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 128, 28672, 128256, max_context_tokens=8192),
        # Mistral uses a 4096-token sliding window; v0 attends to the full context (conservative).
        ModelSpec("mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 128, 14336, 32000, max_context_tokens=32768),
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


def _is(test, name: str, path: str) -> bool:
    """``test(Path(name))`` (is_file, is_dir, exists); a name no file system takes (too long, a
    NUL byte) is an input error naming ``path``."""
    try:
        return test(Path(str(name)))
    except (OSError, ValueError):
        raise InputError(f"{path}: {shown(str(name))} is no catalog name and no readable path") from None


def get_gpu(name: str, path: str = "hardware.gpu") -> GpuSpec:
    """A catalog GPU by name, or one read from a YAML file (``*.yaml`` / ``*.yml`` path)."""
    if name in GPUS:
        return GPUS[name]
    if str(name).endswith((".yaml", ".yml")) or _is(Path.is_file, name, path):
        return load_gpu_yaml(Path(name), path)
    raise InputError(f"{path}: unknown GPU {name!r}; give a catalog name or a path to a GPU YAML "
                     f"file;{did_you_mean(name, GPUS)}")


@dataclass(frozen=True)
class GpuFile:
    """A GPU YAML file (``hardware.gpu: my-gpu.yaml``): ``GpuSpec`` fields, SI units as named, e.g.::

        name: my-gpu
        base: h100-sxm              # optional: start from a catalog GPU, override the rest
        peak_flops: 989e12          # dense BF16/FP16 FLOP/s
        fp8_flops: 1979e12          # dense FP8 FLOP/s (0: none)
        mem_bytes: 80e9
        mem_bw_bytes_per_s: 3.35e12
        link_bw_bytes_per_s: 450e9  # one direction
        pcie_bw_bytes_per_s: 64e9
        link_latency_s: 5e-6        # optional
        mem_kind: hbm               # optional: hbm | gddr

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

    REQUIRED = ("peak_flops", "mem_bytes", "mem_bw_bytes_per_s")

    def check(self, path):
        if self.base is not None and (not isinstance(self.base, str) or self.base not in GPUS):
            raise InputError(f"base: unknown GPU {self.base!r};{did_you_mean(str(self.base), GPUS)}")
        missing = [k for k in self.REQUIRED if getattr(self, k) is None] if self.base is None else []
        if missing:
            raise InputError(f"lacks {', '.join(missing)} (give them, or base: a catalog GPU to start from; "
                             "optionally fp8_flops, link_bw_bytes_per_s, pcie_bw_bytes_per_s, link_latency_s, "
                             "mem_kind)")

    def spec(self, default_name: str) -> GpuSpec:
        """The GPU: the base's figures (or the defaults: no FP8, 32 GB/s links) with the file's over them."""
        if self.base is not None:
            kw = {f.name: getattr(GPUS[self.base], f.name) for f in fields(GpuSpec)}
            kw["name"] = f"{self.base}-custom"
        else:
            kw = {"name": default_name, "fp8_flops": 0.0, "link_bw_bytes_per_s": 32 * G, "pcie_bw_bytes_per_s": 32 * G}
        kw.update({f.name: getattr(self, f.name) for f in fields(GpuSpec) if getattr(self, f.name) is not None})
        return GpuSpec(**kw)


def load_gpu_yaml(p: Path, path: str = "hardware.gpu") -> GpuSpec:
    """A GPU from a YAML file (``GpuFile``); errors name ``path``, the file and the field."""
    data = read_mapping(p, "GPU file", path)
    return build_file(GpuFile, data, f"{path}: {p}", "a GPU file").spec(p.stem)


def get_model(name_or_path: str, path: str = "model") -> ModelSpec:
    """A catalog model by its Hugging Face id, or a model read from a ``config.json`` path."""
    if name_or_path in MODELS:
        return MODELS[name_or_path]
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
        f"config.json;{did_you_mean(name_or_path, MODELS)}"
    )


_INT32 = 2**31 - 1  # sizes beyond int32 are not a real model (and overflow the arithmetic)
_SIZE = bounds(gt=0, le=_INT32, valid=f"a positive integer (at most {_INT32})")
_COUNT = bounds(ge=0, le=_INT32, valid="a non-negative integer")


def load_hf_config(p: Path, path: str = "model") -> ModelSpec:
    """Read the fields servesim needs from a Hugging Face ``config.json`` (Llama-style names; the
    others are ignored). Errors name ``path``, the file and the key."""
    cfg = read_mapping(p, "config file", path, fmt="json")

    def key(k):
        return f"{path}: {p}: field {k!r}"

    def need(*keys):
        """The first of ``keys`` the file has (they are one field's names in different families)."""
        for k in keys:
            if k in cfg:
                return check_value(int, cfg[k], key(k), _SIZE)
        raise InputError(f"{path}: {p} lacks {' / '.join(map(repr, keys))}")

    def optional(k, default):
        """A positive integer when present; absent or null: ``default``."""
        return default if cfg.get(k) is None else check_value(int, cfg[k], key(k), _SIZE)

    def count(*keys):
        """The first of ``keys`` set to something other than 0 / null, as a count; none: 0."""
        k = next((k for k in keys if cfg.get(k)), keys[0])
        return check_value(int, cfg.get(k) or 0, key(k), _COUNT)

    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv_heads = optional("num_key_value_heads", heads)
    if heads % kv_heads:
        raise InputError(f"{path}: {p}: num_attention_heads ({heads}) must be a multiple of "
                         f"num_key_value_heads ({kv_heads})")
    head_dim = optional("head_dim", hidden // heads)
    if head_dim < 1:
        raise InputError(f"{path}: {p}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}); "
                         "give head_dim")
    max_context = optional("max_position_embeddings", 4096)
    if max_context < 2:  # (a request is at least one prompt token and one output token)
        raise InputError(f"{key('max_position_embeddings')} must be >= 2 (a prompt token and an output token), "
                         f"got {max_context}")
    check_value(Optional[bool], cfg.get("tie_word_embeddings"), key("tie_word_embeddings"))
    for k in ("hidden_act", "activation_function", "_name_or_path"):
        check_value(Optional[str], cfg.get(k), key(k))
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or "silu")
    experts = count("num_local_experts", "num_experts")
    top_k = count("num_experts_per_tok", "num_experts_per_token")
    if experts and not 0 < top_k <= experts:
        raise InputError(f"{path}: {p}: mixture-of-experts model needs 0 < num_experts_per_tok <= "
                         f"{experts}, got {top_k!r}")
    inter_keys = ("moe_intermediate_size", "intermediate_size", "n_inner", "ffn_dim") if experts else \
        ("intermediate_size", "n_inner", "ffn_dim")
    return ModelSpec(
        name=cfg.get("_name_or_path") or str(p),
        num_layers=need("num_hidden_layers", "n_layer"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=need(*inter_keys),
        vocab_size=need("vocab_size"),
        gated_mlp=act in ("silu", "swiglu"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_context_tokens=max_context,
        num_experts=experts,
        experts_per_token=top_k if experts else 0,
    )
