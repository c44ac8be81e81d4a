"""Roofline cost model v0: per-operator FLOPs and HBM bytes for a decoder-only transformer.

Each operator's time is ``max(flops / (peak * eff.compute), bytes / (bw * eff.memory))`` on one
GPU of the replica; a step's time is the sum over operators and layers, plus communication
(TP all-reduce, PP send/recv) and a fixed + per-sequence overhead. With PP the step traverses
the stages one after another (no micro-batch overlap in v0), so its time is that of all layers.

All FLOPs and bytes reported are totals over the replica's GPUs; times are wall-clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from sim.batch import Batch
from sim.cost.comm import allreduce_time_s, send_time_s
from sim.cost.efficiency import DEFAULT_EFFICIENCIES, Efficiencies, OpEfficiency
from sim.specs import DTYPE_BYTES, GpuSpec, ModelSpec

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


@dataclass(frozen=True)
class CostModel:
    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    step_overhead_s: float = 0.002
    per_seq_overhead_s: float = 1e-5
    eff: Efficiencies = DEFAULT_EFFICIENCIES

    # ------------------------------------------------------------------ sizes
    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def weight_bytes(self) -> float:
        """Weights of the whole model (all GPUs of a replica together)."""
        return self.model.total_params() * DTYPE_BYTES[self.dtype]

    @property
    def kv_heads_per_gpu(self) -> float:
        # With fewer KV heads than TP ranks each rank keeps a replica of one head.
        return max(self.model.num_kv_heads / self.tp, 1.0)

    def kv_bytes_per_token_per_gpu(self) -> float:
        m = self.model
        layers = math.ceil(m.num_layers / self.pp)
        return layers * 2 * self.kv_heads_per_gpu * m.head_dim * DTYPE_BYTES[self.kv_dtype]

    @property
    def peak_flops(self) -> float:
        if self.dtype == "fp8" and self.gpu.fp8_flops > 0:
            return self.gpu.fp8_flops
        return self.gpu.peak_flops

    # ------------------------------------------------------------------ operators
    def _ops(self, T: int, pairs: float, ctx: int, S: int):
        """Per-operator (name, flops, bytes, efficiency, count) for ONE GPU: per layer, times count."""
        m, tp, e = self.model, self.tp, self.eff
        w = DTYPE_BYTES[self.dtype]
        a = ACT_BYTES
        h, I, L = m.hidden_size, m.intermediate_size, m.num_layers
        qd, kvd = m.q_dim / tp, self.kv_heads_per_gpu * m.head_dim
        n_up = 2 if m.gated_mlp else 1
        kv_tok = 2 * kvd * DTYPE_BYTES[self.kv_dtype]  # KV bytes per token per layer on one GPU
        return (
            ("qkv_proj", 2 * T * h * (qd + 2 * kvd), w * h * (qd + 2 * kvd) + a * T * (h + qd + 2 * kvd), e.gemm, L),
            ("attention", 4 * qd * pairs, kv_tok * ctx + a * T * 2 * qd, e.attention, L),
            ("o_proj", 2 * T * qd * h, w * qd * h + a * T * (qd + h), e.gemm, L),
            ("mlp_up", 2 * T * h * I * n_up / tp, w * h * I * n_up / tp + a * T * (h + n_up * I / tp), e.gemm, L),
            ("mlp_act", 5 * T * I / tp, a * T * (n_up + 1) * I / tp, e.elementwise, L),
            ("mlp_down", 2 * T * I * h / tp, w * I * h / tp + a * T * (I / tp + h), e.gemm, L),
            # two RMSNorms and two residual adds per layer
            ("norms", 10 * T * h, 2 * (2 * a * T * h + a * h), e.elementwise, L),
            ("residual", 2 * T * h, 2 * 3 * a * T * h, e.elementwise, L),
            ("embedding", 0.0, (w + a) * T * h, e.elementwise, 1),
            ("lm_head", 2 * S * h * m.vocab_size / tp,
             w * h * m.vocab_size / tp + S * (a * h + LOGIT_BYTES * m.vocab_size / tp), e.gemm, 1),
        )

    def _comm(self, T: int):
        """(name, time_s) of the step's communication."""
        g = self.gpu
        out = []
        if self.tp > 1:
            per = allreduce_time_s(ACT_BYTES * T * self.model.hidden_size, self.tp,
                                   g.link_bw_bytes_per_s * self.eff.link, g.link_latency_s)
            out.append(("allreduce", 2 * self.model.num_layers * per))
        if self.pp > 1:
            per = send_time_s(ACT_BYTES * T * self.model.hidden_size, g.link_bw_bytes_per_s * self.eff.link,
                              g.link_latency_s)
            out.append(("pp_send", (self.pp - 1) * per))
        return out

    def _overhead_s(self, num_seqs: int) -> float:
        return self.step_overhead_s + self.per_seq_overhead_s * num_seqs

    def step_time(self, batch: Batch) -> StepCost:
        """Time, FLOPs, bytes and bound of one step (the engine's hot path)."""
        T = batch.num_tokens + batch.padding_tokens
        if T == 0:
            return StepCost(0.0, 0.0, 0.0, "memory", 0.0, 0.0, 0.0, 0.0)
        peak, bw = self.peak_flops, self.gpu.mem_bw_bytes_per_s
        flops = nbytes = t = tc = tm = 0.0
        for _, f, b, eff, count in self._ops(T, batch.attn_pairs, batch.context_tokens, batch.num_sampled):
            c_s = f / (peak * eff.compute)
            m_s = b / (bw * eff.memory)
            t += (c_s if c_s > m_s else m_s) * count
            tc += c_s * count
            tm += m_s * count
            flops += f * count
            nbytes += b * count
        comm = sum(x for _, x in self._comm(T))
        over = self._overhead_s(batch.num_seqs)
        g = self.tp  # per-GPU figures -> replica totals (PP stages split the layers, not the work)
        return StepCost(t + comm + over, flops * g, nbytes * g, "compute" if tc >= tm else "memory",
                        tc, tm, comm, over)

    def breakdown(self, batch: Batch) -> dict[str, OpCost]:
        """Per-operator totals over all layers of one step (for ``servesim cost``)."""
        T = batch.num_tokens + batch.padding_tokens
        peak, bw = self.peak_flops, self.gpu.mem_bw_bytes_per_s
        ops = {}
        for name, f, b, eff, count in self._ops(T, batch.attn_pairs, batch.context_tokens, batch.num_sampled):
            c_s, m_s = f / (peak * eff.compute), b / (bw * eff.memory)
            ops[name] = OpCost(max(c_s, m_s) * count, f * count * self.tp, b * count * self.tp,
                               "compute" if c_s >= m_s else "memory")
        for name, x in self._comm(T):
            ops[name] = OpCost(x, 0.0, 0.0, "comm")
        ops["overhead"] = OpCost(self._overhead_s(batch.num_seqs), 0.0, 0.0, "overhead")
        return ops

    # ------------------------------------------------------------------ derived rates
    def mfu(self, cost: StepCost) -> float:
        return cost.flops / (cost.time_s * self.peak_flops * self.num_gpus) if cost.time_s else 0.0

    def mbu(self, cost: StepCost) -> float:
        return cost.bytes / (cost.time_s * self.gpu.mem_bw_bytes_per_s * self.num_gpus) if cost.time_s else 0.0


__all__ = ["CostModel", "StepCost", "OpCost", "OpEfficiency"]
