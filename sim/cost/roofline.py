"""Roofline cost model: per-operator FLOPs and HBM bytes for a decoder-only transformer, with
operator time models whose efficiencies are fitted to measured kernel timings.

Per step and per GPU of the replica, each operator's time comes from its family's time model in
``sim/cost/efficiency.py`` (GEMMs: smooth roofline + tile quantization + kernel latency;
bandwidth-bound kernels: bytes / bandwidth + kernel latency; attention: plain roofline, separately
for the prefill and the decode sequences of a mixed step). A step's time is the sum over operators
and layers, plus communication (TP all-reduce, PP send/recv) and a fixed + per-sequence overhead.
With PP a step traverses the stages one after another, so its time is that of all layers;
``stage_times`` splits it per stage (each stage its layers; the embedding on the first, the LM
head on the last), for the engine's overlapping micro-batches (``sim/core/pipeline.py``).

MoE layers (``ModelSpec.num_experts``): a router GEMM, then each of the ``E_hit`` experts the step
is expected to touch (``E (1 - (1 - k/E)^T)``) runs its GEMMs on ``T k / E_hit`` tokens, so expert
weights are read once per step for the experts actually hit.

With ``measured`` (``cost.profiles``, ``sim/cost/measured.py``) the per-layer kernels the profile
covers take their time from the measurements instead; FLOPs, bytes and bounds stay the model's. The
measurements are short bursts, as the fits are: under a power cap (``gemm.sustained``) a measured
GEMM is slowed by the model's sustained over burst time at its shape.

All FLOPs and bytes reported are totals over the replica's GPUs; times are wall-clock.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from servesim.core.batch import Batch
from servesim.cost.comm import allgather_time_s, allreduce_time_s, send_time_s
from servesim.cost.efficiency import (DEFAULT_EFFICIENCIES, LOWBIT_TILE_M, V0_PER_SEQ_OVERHEAD_S,
                                      V0_STEP_OVERHEAD_S, Efficiencies, GemmEfficiency, MemEfficiency)
from servesim.cost.smoothmax import smooth_max
from servesim.inputs.specs import DTYPE_BYTES, GpuSpec, ModelSpec, activation_dtype

if TYPE_CHECKING:
    from servesim.cost.measured import MeasuredOps

ACT_BYTES = 2.0  # activations stay in bf16/fp16 whatever the weight dtype
LOGIT_BYTES = 4.0


class StepCost(NamedTuple):
    time_s: float
    flops: float
    bytes: float
    bound: str  # "compute" | "memory"
    compute_s: float  # sum of each operator's compute-roof time
    memory_s: float  # sum of each operator's memory-roof time
    comm_s: float
    overhead_s: float

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf


class OpCost(NamedTuple):
    time_s: float
    flops: float
    bytes: float
    bound: str  # compute | memory | comm | overhead


# ---------------------------------------------------------------- operator time models (scalars)
def gemm_cost(M: float, K: float, N: float, w: float, peak: float, bw: float, g: GemmEfficiency):
    """(time_s, flops, bytes, compute_s, memory_s) of one ``[M x K] @ [K x N]`` GEMM on one GPU.

    ``w`` bytes per weight element; activations in and out are ``ACT_BYTES``. The vectorized twin
    used for fitting is ``sim.cost.fitting.gemm_time_np`` (a test keeps them equal).
    """
    if M <= 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    f = 2.0 * M * N * K
    b = w * K * N + ACT_BYTES * M * (K + N)
    fe = f
    if g.tile_quant:
        tm = g.tile_m if w >= 2 else min(g.tile_m, LOWBIT_TILE_M)
        fe = f + g.tile_quant * (2.0 * math.ceil(M / tm) * tm * N * K - f)
    ec = g.compute * K / (K + g.k_half) if g.k_half else g.compute
    c = fe / (peak * ec)
    m = b / (bw * g.memory)
    return g.latency_s + smooth_max(c, m, g.smooth), f, b, c, m


def mem_cost(kernels: float, f: float, b: float, peak: float, bw: float, e: MemEfficiency):
    """(time_s, compute_s, memory_s) of bandwidth-bound kernels moving ``b`` bytes in total."""
    c = f / peak
    m = b / (bw * e.memory)
    return kernels * e.latency_s + (c if c > m else m), c, m


def _add_ops(acc, ops):
    """Add operators' (time, flops, bytes, compute_s, memory_s) to the running sums
    (time, compute_s, memory_s, flops, bytes), in order: every path that prices a step adds the
    same numbers in the same order, so they agree bit for bit (floats or numpy arrays alike)."""
    t, tc, tm, fl, nb = acc
    for ot, f, b, c, m in ops:
        t += ot
        tc += c
        tm += m
        fl += f
        nb += b
    return t, tc, tm, fl, nb


_ZERO = (0.0, 0.0, 0.0, 0.0, 0.0)


def _times(op, n):
    """An operator's (time, flops, bytes, compute_s, memory_s) run ``n`` times."""
    return tuple(x * n for x in op)


def _grouped(op, n, latency_s):
    """``n`` equal GEMMs ``op`` run as one grouped kernel: one kernel latency, ``n`` times the work
    (the smooth max is homogeneous: n GEMMs' compute and memory times scale it by n)."""
    t, f, b, c, m = op
    return latency_s + (t - latency_s) * n, f * n, b * n, c * n, m * n


def _sum(ops):
    """The sum of operators' (time, flops, bytes, compute_s, memory_s), in order."""
    t = f = b = c = m = 0.0
    for ot, of, ob, oc, om in ops:
        t, f, b, c, m = t + ot, f + of, b + ob, c + oc, m + om
    return t, f, b, c, m


# ---------------------------------------------------------------- the model
@dataclass(frozen=True)
class CostModel:
    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    step_overhead_s: float = V0_STEP_OVERHEAD_S
    per_seq_overhead_s: float = V0_PER_SEQ_OVERHEAD_S
    eff: Efficiencies = DEFAULT_EFFICIENCIES
    # measured per-kernel times of this model shape and TP (``sim/cost/measured.py``): when set,
    # the operators it covers take their time from it; FLOPs, bytes and bounds stay the model's
    measured: "MeasuredOps | None" = None
    # TP all-reduce inside the NVLink domain: ``custom`` (the engine's one-/two-shot kernels below
    # their size limit, as vLLM, SGLang and TensorRT-LLM run them) or ``nccl`` (NCCL alone)
    allreduce: str = "custom"
    # MoE: experts spread over the TP ranks (EP = TP, each rank holds E / TP whole experts; vLLM's
    # --enable-expert-parallel) instead of each expert split TP ways
    expert_parallel: bool = False
    # the engine's step-time terms (``sim/cost/engines.py``; the defaults: none of them): CPU time
    # per scheduled token; the share of the CPU work that runs while the GPU works; CUDA-graph capture
    # sizes (a graphed step's tokens padded up to the next; () = no graphs), whether steps with
    # prefill tokens are graphed too (else decode-only steps); a step without a graph takes at
    # least ``layers x eager_layer_s`` (the CPU launching its kernels), plus ``eager_collective_s`` for
    # each of a layer's two TP all-reduces launched from Python (torch.distributed) when tp > 1
    per_token_overhead_s: float = 0.0
    overlap: float = 0.0
    graph_sizes: tuple = ()
    graph_mixed: bool = True
    eager_layer_s: float = 0.0
    eager_collective_s: float = 0.0
    _c: tuple = field(init=False, repr=False, compare=False, default=())
    _moe: tuple = field(init=False, repr=False, compare=False, default=())
    _mla: tuple = field(init=False, repr=False, compare=False, default=())
    _g: GemmEfficiency = field(init=False, repr=False, compare=False, default=None)
    _g16: GemmEfficiency = field(init=False, repr=False, compare=False, default=None)  # 16-bit GEMMs (LM head)
    _att: tuple = field(init=False, repr=False, compare=False, default=())
    _memo_T: dict = field(init=False, repr=False, compare=False, hash=False, default=None)
    _memo_S: dict = field(init=False, repr=False, compare=False, hash=False, default=None)
    _memo_dec: dict = field(init=False, repr=False, compare=False, hash=False, default=None)
    _memo_emb: dict = field(init=False, repr=False, compare=False, hash=False, default=None)
    _memo_stage: dict = field(init=False, repr=False, compare=False, hash=False, default=None)
    _launch_s: float = field(init=False, repr=False, compare=False, default=0.0)
    _st: tuple = field(init=False, repr=False, compare=False, default=())  # step_time's constants

    def __post_init__(self):
        m, tp = self.model, self.tp
        h, inter = m.hidden_size, m.intermediate_size
        qd = m.q_dim / tp
        kvd = self.kv_heads_per_gpu * m.head_dim
        n_up = 2 if m.gated_mlp else 1
        # per-GPU shapes, computed once: (qkv N, o K, up N, down K, vocab/tp, kv bytes/token/layer, ...)
        kv_tok = (m.kv_elements_per_token_layer * DTYPE_BYTES[self.kv_dtype] if m.is_mla
                  else 2 * kvd * DTYPE_BYTES[self.kv_dtype])
        object.__setattr__(self, "_c", (
            float(h), qd, kvd, qd + 2 * kvd, n_up * inter / tp, inter / tp, m.vocab_size / tp,
            kv_tok, float(n_up), DTYPE_BYTES[self.dtype],
            DTYPE_BYTES[activation_dtype(self.dtype)],  # embedding and LM head weights: 16-bit
        ))
        if m.is_moe:
            # (ranks the experts are spread over, expert up N, expert down K, shared up N, shared
            # down K, dense-layer up N, dense-layer down K, MoE layers, dense layers), per GPU
            ep = tp if self.expert_parallel else 1
            etp = tp // ep  # TP ranks one expert is split over
            sh, dn = m.num_shared_experts * inter, m.dense_intermediate_size
            object.__setattr__(self, "_moe", (ep, n_up * inter / etp, inter / etp, n_up * sh / tp, sh / tp,
                                              n_up * dn / tp, dn / tp, m.num_moe_layers, m.first_dense_layers))
        elif self.expert_parallel:
            raise ValueError(f"expert_parallel needs a mixture-of-experts model; {m.name} is dense")
        vd = m.value_head_dim
        if m.is_mla:
            heads = m.num_heads / tp
            nope, rope, lora = m.head_dim - m.qk_rope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
            # the GEMMs of the attention projections ((K, N) per GPU; the down projections of q and
            # of the latent are replicated on every rank), the rotary width (query, key), the
            # attention FLOPs per query-key pair in prefill (up-projected K and V: multi-head) and
            # decode (absorbed weights: multi-query over the latent), its activations in and out
            # per query token, and the FLOPs of up-projecting one cached latent in a later chunk
            proj = ([(h, m.q_lora_rank), (m.q_lora_rank, heads * m.head_dim)] if m.q_lora_rank
                    else [(h, heads * m.head_dim)]) + [(h, lora + rope), (lora, heads * (nope + vd))]
            object.__setattr__(self, "_mla", (tuple(proj), heads * rope, float(rope), 2 * heads * (m.head_dim + vd),
                                              2 * heads * (lora + rope + lora), heads * (lora + rope + lora),
                                              2 * lora * heads * (nope + vd)))
        if self.allreduce not in ("custom", "nccl"):
            raise ValueError(f"allreduce must be custom or nccl, got {self.allreduce!r}")
        burst = g = self.eff.gemm
        # a serving GPU under load runs at its power cap: compute-bound GEMMs at the sustained rate
        # (the fits are short bursts at boost clocks); weight reads keep their rate
        g = replace(g, compute=g.compute * g.sustained) if g.sustained != 1.0 else g
        object.__setattr__(self, "_g16", g)
        if self.dtype == "fp8" and self.gpu.fp8_flops > 0:  # FP8 tensor cores: their own share of their peak
            g = self.eff.gemm_fp8.applied(g)
            burst = self.eff.gemm_fp8.applied(burst)
        object.__setattr__(self, "_g", g)
        # (the burst rates: measured GEMM timings, ``measured``, are bursts too)
        object.__setattr__(self, "_g_burst", burst if g.sustained != 1.0 else g)
        e = self.eff.attention
        # attention: FLOPs per query-key pair in prefill and decode, activation elements in and out
        # per query token, KV bytes per token, FLOPs per cached latent up-projected (MLA), rates
        fq_p, fq_d, qio, up = (self._mla[3], self._mla[4], self._mla[5], self._mla[6]) if m.is_mla else \
            (4 * qd, 4 * qd, 2 * qd, 0.0)
        object.__setattr__(self, "_att", (fq_p, fq_d, qio, self._c[7], self.gpu.peak_flops * e.compute,
                                          self.gpu.mem_bw_bytes_per_s * e.memory, 1 * e.latency_s, m.num_layers, up))
        object.__setattr__(self, "_memo_T", {})
        object.__setattr__(self, "_memo_S", {})
        object.__setattr__(self, "_memo_dec", {})
        object.__setattr__(self, "_memo_emb", {})
        object.__setattr__(self, "_memo_stage", {})
        coll = 2 * self.eager_collective_s if self.tp > 1 else 0.0  # a layer's two all-reduces
        object.__setattr__(self, "_launch_s", m.num_layers * (self.eager_layer_s + coll))
        object.__setattr__(self, "_st", (self.step_overhead_s, self.per_seq_overhead_s, self.per_token_overhead_s,
                                         self.overlap, self._launch_s, self.graph_sizes, self.graph_mixed))

    # ------------------------------------------------------------------ sizes
    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def weight_bytes(self) -> float:
        """Weights of the whole model (all GPUs of a replica together): the layers in ``dtype``,
        the embedding and LM head (and the final norm) in 16-bit."""
        m = self.model
        w16 = DTYPE_BYTES[activation_dtype(self.dtype)]
        layers = m.layers_params()
        outer = m.total_params() - layers
        return layers * DTYPE_BYTES[self.dtype] + outer * w16

    @property
    def kv_heads_per_gpu(self) -> float:
        # With fewer KV heads than TP ranks each rank keeps a replica of one head.
        return max(self.model.num_kv_heads / self.tp, 1.0)

    def kv_bytes_per_token_per_gpu(self, layers: int | None = None) -> float:
        """KV bytes a token takes on one GPU of the stage with ``layers`` layers (default: the
        most any stage has, ``ceil(L / pp)``). An MLA latent is not split by TP: every rank keeps
        all of it (vLLM caches it as one KV head)."""
        m = self.model
        if layers is None:
            layers = math.ceil(m.num_layers / self.pp)
        if m.is_mla:
            return layers * m.kv_elements_per_token_layer * DTYPE_BYTES[self.kv_dtype]
        return layers * 2 * self.kv_heads_per_gpu * m.head_dim * DTYPE_BYTES[self.kv_dtype]

    @property
    def peak_flops(self) -> float:
        if self.dtype == "fp8" and self.gpu.fp8_flops > 0:
            return self.gpu.fp8_flops
        return self.gpu.peak_flops

    # ------------------------------------------------------------------ operators
    def _ops(self, batch: Batch, tokens: int | None = None):
        """Yield (name, time_s, flops, bytes, compute_s, memory_s) per operator for ONE GPU,
        already multiplied by the number of layers (or kernels) it runs in one step. ``tokens``:
        what the layers run when a CUDA graph pads the step (attention and the LM head see the
        batch's own)."""
        T_real = batch.num_tokens + batch.padding_tokens
        T = T_real if tokens is None else tokens
        S = batch.num_sampled
        m, e = self.model, self.eff
        h, qd, kvd, qkv_n, up_n, down_k, vocab, kv_tok, n_up, w, w16 = self._c
        L = m.num_layers
        peak, bw = self.peak_flops, self.gpu.mem_bw_bytes_per_s
        a = ACT_BYTES
        peak16 = self.gpu.peak_flops  # elementwise and attention run in 16-bit
        ms = self.measured
        if ms is not None and m.num_experts:
            ms = None  # (refused when loaded; a MoE layer's GEMMs are not the profile's shapes)

        g, gb = self._g, self._g_burst

        def priced(name, op, x=T):
            """``op(x)``: (time, flops, bytes, compute_s, memory_s) of one kernel at ``x`` tokens;
            with measurements, its time is the measured one (the model's shape between them). A
            GEMM's is timed in a burst: under a power cap (``gemm.sustained``) it is scaled by the
            model's sustained over burst time at that shape, as the model's own is."""
            t, f, b, c, mm = op(x)
            if ms is not None:
                tm = ms.time_s(name, x, t, lambda y: op(y)[0])
                if tm is not t and gb is not g and getattr(op, "K", None) is not None:
                    tm *= t / gemm_cost(x, op.K, op.N, w, peak, bw, gb)[0]
                t = tm
            return t, f, b, c, mm

        def gemm(K, N):
            op = lambda x: gemm_cost(x, K, N, w, peak, bw, g)  # noqa: E731
            op.K, op.N = K, N  # (for a measured time's power-cap scaling)
            return op

        def mem(per_tok_flops, per_tok_bytes, fixed_bytes, eff):
            def op(x):
                f, b = per_tok_flops * x, per_tok_bytes * x + fixed_bytes
                t, c, mm = mem_cost(1, f, b, peak16, bw, eff)
                return t, f, b, c, mm
            return op

        if m.is_mla:  # the q and latent projections and the latent's up projection to K and V
            t, f, b, c, mm = _sum(gemm(K, N)(T) for K, N in self._mla[0])
        else:
            t, f, b, c, mm = priced("qkv_proj", gemm(h, qkv_n))
        yield "qkv_proj", t * L, f * L, b * L, c * L, mm * L

        # rotary on Q and K: read + write, ~6 FLOPs per element (MLA: the rotary part of each
        # query head and the one shared rotary key); none with learned positions or ALiBi
        rq, rk = (self._mla[1], self._mla[2]) if m.is_mla else (qd, kvd)
        t, f, b, c, mm = priced("rotary", mem(6 * (rq + rk), 2 * a * (rq + rk), 0.0, e.rotary)) if m.rotary else _ZERO
        yield "rotary", t * L, f * L, b * L, c * L, mm * L

        # attention: prefill sequences (FlashAttention FLOPs ~ query x key pairs, causal; KV of the
        # chunk and of earlier chunks re-read) and decode sequences (KV read per sequence) apart
        yield ("attention",) + self._attention(batch, T_real)

        t, f, b, c, mm = priced("o_proj", gemm(qd if not m.is_mla else m.num_heads / self.tp * m.value_head_dim, h))
        yield "o_proj", t * L, f * L, b * L, c * L, mm * L

        def act(width):
            return mem(5 * width, a * width * (n_up + 1), 0.0, e.activation)

        if m.num_experts:
            # each MoE layer: the router, the E_hit experts the step's tokens reach (with EP, the
            # 1/ep of them on this rank, whole), each on T k / E_hit tokens, and the shared experts on
            # every token; the leading dense layers: a dense MLP
            ep, ex_up, ex_down, sh_up, sh_down, d_up, d_down, Lm, Ld = self._moe
            t, f, b, c, mm = gemm_cost(T, h, m.num_experts, w, peak, bw, g)
            yield "moe_router", t * Lm, f * Lm, b * Lm, c * Lm, mm * Lm
            hit = m.expected_experts_hit(T)
            Tk = T * m.experts_per_token
            Mx = Tk / hit if hit else 0.0
            shared = (sh_up, sh_down, T, 1.0) if sh_up else None
            dense = (d_up, d_down, T, 1.0) if Ld else None
            # (up N, down K, tokens per expert, experts, layers); the experts of a layer run as one
            # grouped GEMM (vLLM's fused MoE kernel): one kernel latency for all of them
            parts = [(ex_up, ex_down, Mx, hit / ep, Lm)] + [x + (n,) for x, n in ((shared, Lm), (dense, Ld)) if x]
            yield ("mlp_up",) + _sum(_times(_grouped(gemm_cost(x, h, up, w, peak, bw, g), ne, g.latency_s), n)
                                     for up, _, x, ne, n in parts)
            acts = [(ex_down, Tk / ep, Lm)] + [(d, x, n) for _, d, x, _, n in parts[1:]]
            yield ("mlp_act",) + _sum(_times(act(d)(x), n) for d, x, n in acts)
            yield ("mlp_down",) + _sum(_times(_grouped(gemm_cost(x, d, h, w, peak, bw, g), ne, g.latency_s), n)
                                       for _, d, x, ne, n in parts)
        else:
            t, f, b, c, mm = priced("mlp_up", gemm(h, up_n))
            yield "mlp_up", t * L, f * L, b * L, c * L, mm * L
            t, f, b, c, mm = priced("mlp_act", act(down_k))
            yield "mlp_act", t * L, f * L, b * L, c * L, mm * L
            t, f, b, c, mm = priced("mlp_down", gemm(down_k, h))
            yield "mlp_down", t * L, f * L, b * L, c * L, mm * L

        # two RMSNorms per layer plus the final one: read + write activations, read the weight
        k = 2 * L + 1
        t, f, b, c, mm = priced("norms", mem(5 * h, 2 * a * h, a * h, e.norm))
        yield "norms", t * k, f * k, b * k, c * k, mm * k

        # two residual adds per layer: read two, write one
        k = 2 * L
        t, f, b, c, mm = priced("residual", mem(h, 3 * a * h, 0.0, e.residual))
        yield "residual", t * k, f * k, b * k, c * k, mm * k

        t, f, b, c, mm = priced("embedding", mem(0.0, (w16 + a) * h, 0.0, e.embedding))
        yield "embedding", t, f, b, c, mm

        yield ("lm_head",) + self._lm_head_row(S)

    def _lm_head_row(self, S: int):
        """The LM head on the last token of each of ``S`` sampled sequences, fp32 logits written:
        (time_s, flops, bytes, compute_s, memory_s). With TP the head is split by vocabulary and
        its time includes gathering the 16-bit logits of every rank (vLLM's logits gather)."""
        h, vocab, w16 = self._c[0], self._c[6], self._c[10]
        bw, e = self.gpu.mem_bw_bytes_per_s, self.eff
        t, f, b, c, mm = gemm_cost(S, h, vocab, w16, self.gpu.peak_flops, bw, self._g16)  # kept 16-bit
        b += S * LOGIT_BYTES * vocab
        mm += S * LOGIT_BYTES * vocab / (bw * e.gemm.memory)
        t += S * LOGIT_BYTES * vocab / (bw * e.gemm.memory)
        if self.tp > 1 and S:
            link_bw, lat, ce, _ = self.tp_link()
            t += allgather_time_s(ACT_BYTES * S * self.model.vocab_size, self.tp, link_bw, lat, ce)
        return t, f, b, c, mm

    def tp_link(self):
        """(bandwidth, per-step latency, NCCL efficiencies, custom all-reduce or None) of the TP
        group's collectives: the peer link (NVLink) when the TP group fits in the GPU's NVLink
        domain, else PCIe. The engine's custom all-reduce needs the NVLink domain and 2, 4, 6 or 8
        GPUs (vLLM's ``custom_all_reduce`` conditions)."""
        g, e = self.gpu, self.eff
        if g.peer_link and self.tp <= g.nvlink_domain:
            custom = e.allreduce_custom if self.allreduce == "custom" and self.tp in (2, 4, 6, 8) else None
            return g.link_bw_bytes_per_s, g.link_latency_s, e.allreduce, custom
        return g.pcie_bw_bytes_per_s, g.link_latency_s, e.allreduce_pcie, None

    def collectives(self) -> str:
        """How the TP group's all-reduces run, in words (for summaries): ``none`` without TP."""
        if self.tp == 1:
            return "none"
        _, _, _, custom = self.tp_link()
        if custom is not None:
            return f"custom one-/two-shot up to {custom.max_bytes / 2**20:g} MiB, else NCCL, over NVLink"
        return "NCCL over NVLink" if self.gpu.peer_link and self.tp <= self.gpu.nvlink_domain else "NCCL over PCIe"

    def _comm(self, T: int):
        """(name, time_s) of the step's communication."""
        g, e = self.gpu, self.eff
        out = []
        size = ACT_BYTES * T * self.model.hidden_size
        if self.tp > 1:
            per = allreduce_time_s(size, self.tp, *self.tp_link())
            out.append(("allreduce", 2 * self.model.num_layers * per))
        if self.pp > 1:
            per = send_time_s(size, g.link_bw_bytes_per_s, g.link_latency_s, e.send_recv)
            out.append(("pp_send", (self.pp - 1) * per))
        return out

    def _overhead_s(self, num_seqs: int, num_tokens: int = 0) -> float:
        """The step's CPU work (before any overlap with the GPU)."""
        return self.step_overhead_s + self.per_seq_overhead_s * num_seqs + self.per_token_overhead_s * num_tokens

    def _graphed(self, T: int, decode_only: bool):
        """(tokens the linear layers run, graphed): a step replaying a CUDA graph runs its tokens
        padded up to the next capture size."""
        gs = self.graph_sizes
        if gs and T <= gs[-1] and (decode_only or self.graph_mixed):
            return gs[bisect.bisect_left(gs, T)], True
        return T, False

    def _finish(self, gpu: float, cpu: float, graphed: bool):
        """(step time, visible overhead) from the GPU's time and the CPU's work: without a graph
        the GPU waits for the CPU's launches (``max(gpu, layers x eager_layer_s)``); then the CPU
        work on the step's critical path: the share ``1 - overlap`` always, and the overlapped
        share ``overlap x cpu`` where it outlasts the GPU's step:
        ``visible = (1 - f) cpu + max(0, f cpu - gpu)`` (f = 0: gpu + cpu; f = 1: max(gpu, cpu)).
        The one formula of every path that prices a step (``decode_rows`` spells it elementwise)."""
        if not graphed:
            launch = self._launch_s
            gpu = gpu if gpu > launch else launch
        hidden = self.overlap * cpu
        vis = (cpu - hidden) + (hidden - gpu if hidden > gpu else 0.0)
        return gpu + vis, vis

    def _by_tokens(self, T: int):
        """Every operator of a ``T``-token step but attention and the LM head, summed in
        ``_ops`` order: (time, compute_s, memory_s, flops, bytes), and the step's communication
        time; memoized (the engine meets the same token counts over and over)."""
        memo = self._memo_T
        hit = memo.get(T)
        if hit is None:
            acc = _add_ops(_ZERO, (op[1:] for op in self._ops(Batch(num_tokens=T))
                                   if op[0] not in ("attention", "lm_head")))
            comm = 0.0
            if self.tp > 1 or self.pp > 1:
                for _, x in self._comm(T):
                    comm += x
            if len(memo) >= 65_536:  # prefill steps bring new token counts: bound the memory
                memo.clear()
            hit = memo[T] = acc + (comm,)
        return hit

    def _lm_head(self, S: int):
        """The LM head's row of ``_ops`` for ``S`` sampled sequences (memoized)."""
        hit = self._memo_S.get(S)
        if hit is None:
            hit = self._memo_S[S] = self._lm_head_row(S)
        return hit

    def _fixed(self, T: int, S: int):
        """The operators of a step that depend only on its tokens ``T`` and sampled sequences
        ``S`` (all but attention), summed in ``_ops`` order, and the step's communication time:
        (time, compute_s, memory_s, flops, bytes, comm_s). A step's total is this sum, then
        attention, then communication and overhead: every path that prices a step adds in that
        order. (The LM head, the last operator, depends on S alone, the rest on T alone.)"""
        t, tc, tm, f, b, comm = self._by_tokens(T)
        ht, hf, hb, hc, hm = self._lm_head(S)
        return t + ht, tc + hc, tm + hm, f + hf, b + hb, comm

    def _attention(self, batch: Batch, T: int):
        """The attention row of ``_ops``: (time_s, flops, bytes, compute_s, memory_s) over all layers
        (the plain roofline ``max(flops / (peak x compute), bytes / (bw x memory))`` plus kernel
        latency, with the attention efficiencies; its constants computed once). With a window on
        only some layers (``Batch.windowed``), those layers are priced on the windowed batch."""
        wb = batch.windowed
        if wb is not None and self.model.partial_window_layers:
            Lw = self.model.partial_window_layers
            Lf = self.model.num_layers - Lw
            full, win = self._attention_layer(batch, T), self._attention_layer(wb, T)
            return tuple(x * Lf + y * Lw for x, y in zip(full, win))
        L = self._att[7]
        tt, ff, bb, cc, mmm = self._attention_layer(batch, T)
        return tt * L, ff * L, bb * L, cc * L, mmm * L

    def _attention_layer(self, batch: Batch, T: int):
        """``_attention`` of one layer attending as ``batch`` says."""
        fq_p, fq_d, qio, kv_tok, pc, bm, lat, L, up = self._att
        dctx = batch.decode_context_tokens
        dpairs = batch.decode_attn_pairs
        nd = batch.decode_tokens
        pf_tok = T - nd
        tt = ff = bb = cc = mmm = 0.0
        if pf_tok > 0:
            ff = fq_p * (batch.attn_pairs - dpairs)
            if up:  # MLA: the cached latents of earlier chunks are up-projected to K and V again
                ff += up * (batch.context_tokens - dctx - pf_tok)
            bb = kv_tok * (batch.context_tokens - dctx) + ACT_BYTES * pf_tok * qio
            cc, mmm = ff / pc, bb / bm
            tt = lat + (cc if cc > mmm else mmm)
        if nd > 0:
            f = fq_d * dpairs
            b = kv_tok * dctx + ACT_BYTES * nd * qio
            c, mm = f / pc, b / bm
            tt, ff, bb, cc, mmm = tt + (lat + (c if c > mm else mm)), ff + f, bb + b, cc + c, mmm + mm
        return tt, ff, bb, cc, mmm

    def step_time(self, batch: Batch) -> StepCost:
        """Time, FLOPs, bytes and bound of one step (the engine's hot path). Bit for bit
        ``step_time_reference``: every operator but attention (memoized by tokens and sampled
        sequences), then attention, then communication, then the engine's terms: ``_graphed``,
        ``_attention``, ``_overhead_s`` and ``_finish`` spelled inline (the same operations in the
        same order; a call each cost as much as their arithmetic)."""
        T = batch.num_tokens + batch.padding_tokens
        if T == 0:
            return StepCost(0.0, 0.0, 0.0, "memory", 0.0, 0.0, 0.0, 0.0)
        step_s, seq_s, tok_s, overlap, launch, gs, mixed = self._st
        if gs and T <= gs[-1] and (mixed or batch.prefill_tokens == 0):  # (_graphed)
            Tg, graphed = gs[bisect.bisect_left(gs, T)], True
        else:
            Tg, graphed = T, False
        t, tc, tm, flops, nbytes, comm = self._memo_T.get(Tg) or self._by_tokens(Tg)
        S = batch.num_sampled
        ht, hf, hb, hc, hm = self._memo_S.get(S) or self._lm_head(S)
        if batch.windowed is None:
            # (_attention)
            fq_p, fq_d, qio, kv_tok, pc, bm, lat, L, up = self._att
            dctx = batch.decode_context_tokens
            nd = batch.decode_tokens
            pf_tok = T - nd
            tt = ff = bb = cc = mmm = 0.0
            if pf_tok > 0:
                ff = fq_p * (batch.attn_pairs - batch.decode_attn_pairs)
                if up:
                    ff += up * (batch.context_tokens - dctx - pf_tok)
                bb = kv_tok * (batch.context_tokens - dctx) + ACT_BYTES * pf_tok * qio
                cc, mmm = ff / pc, bb / bm
                tt = lat + (cc if cc > mmm else mmm)
            if nd > 0:
                f = fq_d * batch.decode_attn_pairs
                b = kv_tok * dctx + ACT_BYTES * nd * qio
                c, mm = f / pc, b / bm
                tt, ff, bb, cc, mmm = tt + (lat + (c if c > mm else mm)), ff + f, bb + b, cc + c, mmm + mm
            # (as _fixed, then _add_ops with the attention row)
            t = t + ht + tt * L
            tc = tc + hc + cc * L
            tm = tm + hm + mmm * L
            flops = flops + hf + ff * L
            nbytes = nbytes + hb + bb * L
        else:  # (a window on some layers: _attention's blend of the two batches)
            at, af, ab, ac, am = self._attention(batch, T)
            t = t + ht + at
            tc = tc + hc + ac
            tm = tm + hm + am
            flops = flops + hf + af
            nbytes = nbytes + hb + ab
        # (_finish of the GPU's time and the CPU's work, _overhead_s)
        gpu = t + comm
        cpu = step_s + seq_s * batch.num_seqs + tok_s * batch.num_tokens
        if not graphed:
            gpu = gpu if gpu > launch else launch
        hidden = overlap * cpu
        over = (cpu - hidden) + (hidden - gpu if hidden > gpu else 0.0)
        g = self.tp  # per-GPU figures -> replica totals (PP stages split the layers, not the work)
        return StepCost(gpu + over, flops * g, nbytes * g, "compute" if tc >= tm else "memory",
                        tc, tm, comm, over)

    def decode_steps(self, n: int, dctx):
        """A run of decode-only steps of ``n`` sequences (one token each), step ``i`` touching
        ``dctx[i]`` KV tokens in all (sum of c + 1): numpy arrays (time_s, flops, bytes,
        compute_bound), each element bit for bit ``step_time`` of that step (same operations in
        the same order, elementwise)."""
        import numpy as np

        if len(dctx) <= 16:  # short runs: plain floats beat numpy's per-call overhead
            return self._decode_steps_scalar(n, dctx)
        return self.decode_rows(np.full(len(dctx), n, dtype=np.int64), dctx)

    def decode_step_times(self, n: int, dctx) -> list:
        """The times alone of ``decode_steps`` (a list; the engine's hot path: the FLOPs, bytes
        and bound of a run's steps are filled in afterwards, ``Recorder.step_columns``)."""
        k = self._memo_dec.get(n)
        if k is None:
            Tg, graphed = self._graphed(n, True)
            t0, _, _, _, _, comm = self._fixed(Tg, n)
            _, fq_d, qio, kv_tok, pc, bm, lat, L, _ = self._att
            k = self._memo_dec[n] = (t0, comm, self._overhead_s(n, n), fq_d, ACT_BYTES * n * qio, kv_tok, pc, bm, lat,
                                     L, graphed or not self._launch_s, self.overlap)
        t0, comm, cpu, fq, bq, kv_tok, pc, bm, lat, L, no_launch, f = k
        # attention is max(compute, memory) per step; both are affine in x, so when the ends of
        # the run agree with a margin far above rounding, every step between takes that branch
        # (the same operations as the per-step max)
        lo, hi = dctx[0], dctx[-1]
        c_lo, c_hi = fq * float(lo) / pc, fq * float(hi) / pc
        m_lo, m_hi = (kv_tok * lo + bq) / bm, (kv_tok * hi + bq) / bm
        tol = 1e-9 * max(c_lo, c_hi, m_lo, m_hi)
        # (_finish, with the CPU's shares computed once: the same operations per step)
        hid = f * cpu
        ex = cpu - hid
        # (the GPU time grows with x; when the CPU's hidden share is under it at the run's first
        # step, hid - g is never taken and each step is g + (ex + 0.0) = g + ex)
        if no_launch and m_lo - c_lo > tol and m_hi - c_hi > tol:
            if hid <= t0 + (lat + (kv_tok * lo + bq) / bm) * L + comm:
                return [t0 + (lat + (kv_tok * x + bq) / bm) * L + comm + ex for x in dctx]
            return [g + (ex + (hid - g if hid > g else 0.0))
                    for g in [t0 + (lat + (kv_tok * x + bq) / bm) * L + comm for x in dctx]]
        if no_launch and c_lo - m_lo > tol and c_hi - m_hi > tol:
            if hid <= t0 + (lat + fq * float(lo) / pc) * L + comm:
                return [t0 + (lat + fq * float(x) / pc) * L + comm + ex for x in dctx]
            return [g + (ex + (hid - g if hid > g else 0.0))
                    for g in [t0 + (lat + fq * float(x) / pc) * L + comm for x in dctx]]
        return self._decode_steps_scalar(n, dctx)[0]

    def decode_rows(self, n, dctx):
        """Time, FLOPs, bytes and compute-bound flag (numpy arrays) of decode-only steps given
        row by row: step i runs ``n[i]`` sequences touching ``dctx[i]`` KV tokens in all; each
        element bit for bit what ``decode_steps`` gives that step (the same operations
        elementwise, the per-``n`` terms looked up in tables)."""
        import numpy as np

        n = np.asarray(n, dtype=np.int64)
        dctx = np.asarray(dctx, dtype=np.int64)
        size = int(n.max()) + 1 if len(n) else 1
        t0, f0, b0, tc0, tm0, bq, comm, cpu, launch = (np.zeros(size) for _ in range(9))
        _, fq_d, qio, kv_tok, pc, bm, lat, L, _ = self._att
        a = ACT_BYTES
        for k in np.flatnonzero(np.bincount(n, minlength=size)).tolist():
            Tg, graphed = self._graphed(k, True)
            t, tc, tm, fl, nb, cm = self._fixed(Tg, k)
            t0[k], f0[k], b0[k], tc0[k], tm0[k], bq[k] = t, fl, nb, tc, tm, a * k * qio
            comm[k], cpu[k] = cm, self._overhead_s(k, k)
            launch[k] = 0.0 if graphed else self._launch_s
        f = fq_d * dctx.astype(np.float64)
        b = kv_tok * dctx + bq[n]
        c = f / pc
        m = b / bm
        at = lat + np.where(c > m, c, m)
        g = self.tp
        # _finish, elementwise (a graphed step's launch is 0, which no GPU time is below)
        gpu = t0[n] + at * L + comm[n]
        ln = launch[n]
        gpu = np.where(gpu > ln, gpu, ln)
        hid = self.overlap * cpu[n]
        vis = (cpu[n] - hid) + np.where(hid > gpu, hid - gpu, 0.0)
        return (gpu + vis, (f0[n] + f * L) * g, (b0[n] + b * L) * g, tc0[n] + c * L >= tm0[n] + m * L)

    def _decode_steps_scalar(self, n: int, dctx):
        """``decode_steps`` as lists, one step at a time (the same arithmetic)."""
        Tg, graphed = self._graphed(n, True)
        t0, tc0, tm0, f0, b0, comm = self._fixed(Tg, n)
        _, fq, qio, kv_tok, pc, bm, lat, L, _ = self._att
        bq = ACT_BYTES * n * qio
        cpu = self._overhead_s(n, n)
        finish = self._finish
        g = self.tp
        times, flops, nbytes, comp = [], [], [], []
        for x in dctx:
            x = int(x)
            f = fq * float(x)
            b = kv_tok * x + bq
            c = f / pc
            m = b / bm
            at = lat + (c if c > m else m)
            times.append(finish(t0 + at * L + comm, cpu, graphed)[0])
            flops.append((f0 + f * L) * g)
            nbytes.append((b0 + b * L) * g)
            comp.append(tc0 + c * L >= tm0 + m * L)
        return times, flops, nbytes, comp

    def step_time_reference(self, batch: Batch) -> StepCost:
        """``step_time`` without memoization: the plain sum over ``_ops`` (tests compare them), in
        the canonical order (every operator but attention, then attention), of the step's tokens
        padded as its CUDA graph runs them."""
        T = batch.num_tokens + batch.padding_tokens
        if T == 0:
            return StepCost(0.0, 0.0, 0.0, "memory", 0.0, 0.0, 0.0, 0.0)
        Tg, graphed = self._graphed(T, batch.prefill_tokens == 0)
        ops = list(self._ops(batch, Tg))
        acc = _add_ops(_ZERO, (op[1:] for op in ops if op[0] != "attention"))
        t, tc, tm, flops, nbytes = _add_ops(acc, (op[1:] for op in ops if op[0] == "attention"))
        comm = 0.0
        if self.tp > 1 or self.pp > 1:
            for _, x in self._comm(Tg):
                comm += x
        time_s, over = self._finish(t + comm, self._overhead_s(batch.num_seqs, batch.num_tokens), graphed)
        g = self.tp  # per-GPU figures -> replica totals (PP stages split the layers, not the work)
        return StepCost(time_s, flops * g, nbytes * g, "compute" if tc >= tm else "memory",
                        tc, tm, comm, over)

    def stage_layers(self) -> list:
        """Transformer layers on each of the ``pp`` stages, in order: ``L // pp`` each, the
        remainder one more each on the stages just before the last (vLLM's split: the last stage
        already carries the final norm and the LM head)."""
        p, L = self.pp, self.model.num_layers
        out = [L // p] * p
        for i in range(L % p):
            out[-2 - i] += 1
        return out

    def stage_weight_bytes(self) -> list:
        """Weights each stage holds (all of its ``tp`` GPUs together): its layers, the embedding
        on the first, the final norm and the LM head on the last (a tied LM head keeps its own
        copy of the embedding there, as vLLM does). Sums to ``weight_bytes`` when ``pp`` is 1."""
        m = self.model
        w, w16 = DTYPE_BYTES[self.dtype], DTYPE_BYTES[activation_dtype(self.dtype)]
        emb = m.vocab_size * m.hidden_size
        first = [sum(self.stage_layers()[:i]) for i in range(self.pp)]
        out = [m.layers_params(a, a + n) * w for a, n in zip(first, self.stage_layers())]
        out[0] += emb * w16
        head = 0 if m.tied_embeddings and self.pp == 1 else emb
        out[-1] += (head + m.hidden_size) * w16
        return out

    def _embedding_s(self, T: int) -> float:
        """The embedding lookup's time for ``T`` tokens (its row of ``_ops``; memoized)."""
        memo = self._memo_emb
        hit = memo.get(T)
        if hit is None:
            if len(memo) >= 65_536:
                memo.clear()
            hit = memo[T] = next(op[1] for op in self._ops(Batch(num_tokens=T)) if op[0] == "embedding")
        return hit

    def stage_times(self, cost: StepCost, batch: Batch) -> list:
        """How long ``batch``'s step (``cost``, from ``step_time``) holds each of the ``pp``
        pipeline stages, in order. The layers' work (every operator but the embedding and the LM
        head, with the TP all-reduces) is shared by the stages' layer counts (``stage_layers``);
        the first stage also does the embedding lookup, the last the LM head; each stage but the
        last then sends its activations to the next. The times add up to ``cost.time_s -
        cost.overhead_s`` (the scheduler's overhead is paid before the stages)."""
        p = self.pp
        if p == 1:
            return [cost.time_s - cost.overhead_s]
        T = self._graphed(batch.num_tokens + batch.padding_tokens, batch.prefill_tokens == 0)[0]
        # what does not depend on the step's time, by (tokens as graphed, sequences sampled)
        memo = self._memo_stage
        key = (T, batch.num_sampled)
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= 65_536:
                memo.clear()
            g = self.gpu
            send = send_time_s(ACT_BYTES * T * self.model.hidden_size, g.link_bw_bytes_per_s, g.link_latency_s,
                               self.eff.send_recv)
            hit = memo[key] = ((p - 1) * send, send, self._embedding_s(T), self._lm_head(batch.num_sampled)[0],
                               self.stage_layers(), self.model.num_layers)
        sends, send, emb, head, stages, L = hit
        layers = cost.time_s - cost.overhead_s - sends - emb - head
        wb = batch.windowed
        if wb is not None and self.model.partial_window_at:
            # a window on some layers: a stage's attention is its full layers' and its window
            # layers' (Gemma-2's alternate evenly; Qwen2's, from max_window_layers on, all sit on
            # the last stages), the rest of the layers' work shared by layer counts
            T_real = batch.num_tokens + batch.padding_tokens
            a_full, a_win = self._attention_layer(batch, T_real)[0], self._attention_layer(wb, T_real)[0]
            windowed = memo.get("window_layers")
            if windowed is None:
                windowed = memo["window_layers"] = self.stage_window_layers()
            rest = layers - a_full * (L - self.model.partial_window_layers) - a_win * self.model.partial_window_layers
            out = [rest * n / L + a_full * (n - w) + a_win * w + send for n, w in zip(stages, windowed)]
        else:
            out = [layers * n / L + send for n in stages]
        out[0] += emb
        out[-1] += head - send
        return out

    def stage_window_layers(self) -> list:
        """Layers of each stage (``stage_layers``) that attend within a window on only some
        layers (``ModelSpec.partial_window_at``); [] without one."""
        at = self.model.partial_window_at
        if not at:
            return []
        out, first = [], 0
        for n in self.stage_layers():
            out.append(sum(1 for i in at if first <= i < first + n))
            first += n
        return out

    def breakdown(self, batch: Batch) -> dict[str, OpCost]:
        """Per-operator totals over all layers of one step (for ``servesim cost``): the operators
        and communication at the tokens the step's CUDA graph runs, ``launch`` (the time a step
        without a graph waits for the CPU's kernel launches beyond its kernels) when there is any,
        and ``overhead``, the CPU work not hidden under the GPU."""
        T = batch.num_tokens + batch.padding_tokens
        Tg, graphed = self._graphed(T, batch.prefill_tokens == 0)
        ops = {}
        gpu = 0.0
        if T:
            for name, t, f, b, c, m in self._ops(batch, Tg):
                ops[name] = OpCost(t, f * self.tp, b * self.tp, "compute" if c >= m else "memory")
                gpu += t
        for name, x in self._comm(Tg):
            ops[name] = OpCost(x, 0.0, 0.0, "comm")
            gpu += x
        _, vis = self._finish(gpu, self._overhead_s(batch.num_seqs, batch.num_tokens), graphed)
        if not graphed and self._launch_s > gpu:  # (as _finish: the GPU waits for the launches)
            ops["launch"] = OpCost(self._launch_s - gpu, 0.0, 0.0, "overhead")
        ops["overhead"] = OpCost(vis, 0.0, 0.0, "overhead")
        return ops

    # ------------------------------------------------------------------ derived rates
    def mfu(self, cost: StepCost) -> float:
        return cost.flops / (cost.time_s * self.peak_flops * self.num_gpus) if cost.time_s else 0.0

    def mbu(self, cost: StepCost) -> float:
        return cost.bytes / (cost.time_s * self.gpu.mem_bw_bytes_per_s * self.num_gpus) if cost.time_s else 0.0


__all__ = ["CostModel", "StepCost", "OpCost", "gemm_cost"]
