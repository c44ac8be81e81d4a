"""Kernel and step timings on one H200, written for servesim's calibration (device-side script).

    PYTHONUNBUFFERED=1 python3 tools/h200_measure.py OUT_DIR [SECTION ...]

Runs on a machine with an NVIDIA GPU and PyTorch only (no vLLM, no servesim, no weights: every
tensor is random, as vLLM's ``load_format="dummy"``). Sections (all by default):

``ops``
    Per-layer operators of four Llama-family shapes, each TP shard measured on this one GPU as
    Vidur's profiler does, at 26 token counts: the four linear layers (``F.linear``: cuBLAS, what
    vLLM runs for bf16 weights), RMSNorm (``F.rms_norm``), the residual add and the embedding
    lookup. Written in Vidur's ``mlp.csv`` columns (ms), so ``servesim calibrate`` fits them.
``attn`` (or ``attn:flash``, ``attn:cudnn``, ``attn:efficient``: one backend)
    Attention kernels in Vidur's ``attention.csv`` columns: causal prefill of one sequence and
    decode of B sequences over K cached tokens, for an MHA and a GQA shape at TP 1 and 2. Each
    row is the fastest of the SDPA backends that run it (flash, cuDNN, efficient), the proxy for
    an engine's tuned kernel; the backend is recorded.
``attn_chunks`` (or ``attn_chunks:<backend>``)
    Prefill chunks of 64-2,048 tokens after 1,024-16,384 cached ones (lower-right causal mask),
    the same two models at TP 1, in ``attention.csv`` rows.
``fp8``
    FP8 (e4m3, per-tensor scales, ``torch._scaled_mm``) against bf16 on the same GEMM shapes.
``steps``
    Whole forward steps of Llama-2-7B (32 layers, bf16): prefill of B x T tokens and decode of B
    sequences at context L, each eager (Python launching every kernel) and replayed from a CUDA
    graph, and the CPU time to launch one eager step.
``steps_fused``
    The same steps with the element-wise work around attention compiled (``torch.compile``), as
    vLLM V1's piecewise graphs run it: written to ``steps_fused.csv``.
``sustain``
    GEMMs timed in short bursts after idle (as ``ops``) and then replayed back to back for 10 s,
    with nvidia-smi sampling the SM clock and power: ``sustain.csv``, ``clocks.csv``.
``sustain_more``
    The same for an FP8 GEMM and a causal 8,192-token prefill attention: ``sustain_more.csv``.
``e2e``
    One static batch served end to end (32 requests, 512-token prompts, 128 output tokens, greedy,
    the host reading each step's tokens as an engine does), eager.

Each operator is timed as a model runs it in vLLM's CUDA graphs: calls of it back to back, replayed
from one graph (no Python launch in between), each over its own copy of the operands, rotated
through more than 300 MiB so that no call finds its weights in the 60 MiB L2 (in a model the other
layers' weights pass in between); the median of 5 replays over the calls per replay. (A first
version evicted L2 with a 256 MiB write before each call: the dirty lines written back during the
next kernel made a Llama-2-7B layer's four GEMMs 26-48% slower at 1-64 tokens, weight-read bound,
and left compute-bound ones within 4%.) Output (flat, for
the device tool): ``profiling.tar.gz`` (the Vidur layout: ``compute/h200/<org>/<model>/
{mlp,attention}.csv`` and ``compute/h200/fp8_gemm.csv``), ``steps.csv``, ``e2e.json``,
``env.json``. ``tools/fit_h200.py`` turns them into ``sim/cost/calibrations/h200.yaml``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import statistics
import sys
import tarfile
import time
import traceback

import torch
import torch.nn.functional as F

DEV = os.environ.get("MEASURE_DEVICE", "cuda")  # "cpu" with MEASURE_SMOKE=1: a tiny dry run of the script
SMOKE = os.environ.get("MEASURE_SMOKE") == "1"
BF16 = torch.bfloat16
REPS = 15 if not SMOKE else 2
WARM = 3 if not SMOKE else 1

# (org/model, n_head, n_kv_head, hidden, intermediate, vocab): gated-MLP Llama shapes
MODELS = [
    ("meta-llama/Llama-2-7b-hf", 32, 32, 4096, 11008, 32000),
    ("meta-llama/Meta-Llama-3-8B", 32, 8, 4096, 14336, 128256),
    ("codellama/CodeLlama-34b-Instruct-hf", 64, 8, 8192, 22016, 32000),
    ("meta-llama/Llama-2-70b-hf", 64, 8, 8192, 28672, 32000),
]
TOKENS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1536,
          2048, 3072, 4096, 6144, 8192]
TPS = [1, 2, 4, 8]
if SMOKE:
    MODELS = [(n, nh, nkv, h // 16, i // 16, v // 16) for n, nh, nkv, h, i, v in MODELS]
    TOKENS = [1, 16, 64]

def sync():
    if DEV != "cpu":
        torch.cuda.synchronize()


def time_kernel(fn, reps=REPS, warm=WARM):
    """Median seconds of ``fn()`` on the GPU (CUDA events around each call)."""
    for _ in range(warm):
        fn()
    if DEV == "cpu":
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    sync()
    return statistics.median(a.elapsed_time(b) for a, b in ev) * 1e-3


COPY_BYTES = 320 * 2**20  # rotate input copies until this many bytes: more than the 60 MiB L2


def copies_for(nbytes):
    """How many copies of an operand of ``nbytes`` to rotate through so that no call finds the
    previous call's data in L2 (as in a model, where the other layers' weights pass in between)."""
    return max(2, min(48, math.ceil(COPY_BYTES / max(nbytes, 1)))) if not SMOKE else 2


def time_replayed(calls, reps=5):
    """Median GPU seconds per call of the calls in ``calls`` (closures over distinct operand
    copies), run back to back from one CUDA graph, as a model's kernels run in vLLM's graphs: no
    Python launch in between, each call's operands cold in L2, no dirty-L2 flush before it."""
    t1 = time_kernel(calls[0], reps=1, warm=1)
    n = max(len(calls), min(32, math.ceil(2e-3 / max(t1, 1e-7))))
    seq = [calls[i % len(calls)] for i in range(n)]

    def run():
        for c in seq:
            c()

    g = graphed(run)
    per = time_kernel(g.replay, reps=reps, warm=2) / n
    del g
    return per


def ms(x):
    return "" if x is None else f"{x * 1e3:.6g}"


# ---------------------------------------------------------------- ops: Vidur mlp.csv
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "add",
       "post_attention_layernorm"]


def section_ops(files):
    for name, nh, nkv, h, inter, vocab in MODELS:
        hd = h // nh
        rows = []
        emb = torch.randn(vocab, h, dtype=BF16, device=DEV) * 0.02
        nw = torch.ones(h, dtype=BF16, device=DEV)
        for tp in TPS:
            if nh % tp:
                continue
            qd, kvd = nh // tp * hd, max(nkv // tp, 1) * hd
            shapes = {"attn_pre_proj": (h, qd + 2 * kvd), "attn_post_proj": (qd, h),
                      "mlp_up_proj": (h, 2 * inter // tp), "mlp_down_proj": (inter // tp, h)}
            W = {k: [torch.randn(n, kk, dtype=BF16, device=DEV) * 0.02 for _ in range(copies_for(2 * n * kk))]
                 for k, (kk, n) in shapes.items()}
            for T in TOKENS:
                t = {}
                for k, (kk, n) in shapes.items():
                    x = torch.randn(T, kk, dtype=BF16, device=DEV)
                    t[k] = time_replayed([lambda x=x, w=w: F.linear(x, w) for w in W[k]])
                x = torch.randn(T, h, dtype=BF16, device=DEV)
                r = torch.randn(T, h, dtype=BF16, device=DEV)
                ids = torch.randint(0, vocab, (T,), device=DEV)
                t["input_layernorm"] = time_replayed([lambda: F.rms_norm(x, (h,), nw, 1e-5)])
                t["post_attention_layernorm"] = t["input_layernorm"]
                t["add"] = time_replayed([lambda: x + r])
                t["emb"] = time_replayed([lambda e=emb: F.embedding(ids, e)])
                row = {}
                for op in OPS:
                    row[f"time_stats.{op}.median"] = ms(t[op])
                row.update(n_head=nh, n_kv_head=nkv, n_embd=h, n_expanded_embd=inter, vocab_size=vocab,
                           use_gated_mlp=True, num_tokens=T, num_tensor_parallel_workers=tp)
                rows.append(row)
            del W
            print(f"ops {name} tp{tp}: {len(TOKENS)} token counts; up_proj at 8192 {t['mlp_up_proj'] * 1e3:.3f} ms",
                  flush=True)
        files[f"compute/h200/{name}/mlp.csv"] = to_csv(rows)
        emb = None
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- attention: Vidur attention.csv
def sdpa_backends(only=None):
    from torch.nn.attention import SDPBackend
    all_ = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    return [b for b in all_ if only in (None, b[0])]


def best_sdpa(shape_q, shape_kv, gqa, only=None, **sdpa_kw):
    """(seconds, backend) of the fastest SDPA backend (of ``only``, or all) that runs this call
    (``sdpa_kw``: ``is_causal`` or ``attn_mask``), over rotated copies of q, k, v; (None, errors)
    if none runs it."""
    from torch.nn.attention import sdpa_kernel
    kv_bytes = 2 * math.prod(shape_kv) * 2
    ops = [tuple(torch.randn(*sh, dtype=BF16, device=DEV) for sh in (shape_q, shape_kv, shape_kv))
           for _ in range(copies_for(kv_bytes))]
    kw = {**sdpa_kw, **({"enable_gqa": True} if gqa else {})}
    best, errs = None, []
    for label, be in sdpa_backends(only):
        try:
            with sdpa_kernel([be]):
                s = time_replayed([lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, **kw)
                                   for q, k, v in ops])
            if best is None or s < best[0]:
                best = (s, label)
        except Exception as e:  # a backend that does not support the shape
            errs.append(f"{label}: {str(e).splitlines()[0][:80]}")
    return best if best else (None, "; ".join(errs))


def section_attn(files, only=None):
    for name, nh, nkv, h, inter, vocab in MODELS[:2]:
        hd = h // nh
        rows = []
        for tp in (1, 2):
            H, Hk = nh // tp, max(nkv // tp, 1)
            gqa = Hk != H
            for T in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
                s, be = best_sdpa((1, H, T, hd), (1, Hk, T, hd), gqa, only, is_causal=True)
                rows.append(attn_row(nh, nkv, h, tp, 1, T, 0, True, s, be))
            for B in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                for K in (128, 512, 1024, 2048, 4096, 8192):
                    if B * (K + 1) > 262144:
                        continue
                    s, be = best_sdpa((B, H, 1, hd), (B, Hk, K + 1, hd), gqa, only, is_causal=False)
                    rows.append(attn_row(nh, nkv, h, tp, B, 0, K, False, s, be))
            torch.cuda.empty_cache()
            print(f"attn {name} tp{tp}: {len(rows)} rows; backends "
                  f"{sorted(set(r['backend'] for r in rows))}", flush=True)
        rows = [r for r in rows if r["time_stats.attn_prefill.median"] or r["time_stats.attn_decode.median"]]
        if rows:
            files[f"compute/h200/{name}/attention.csv"] = to_csv(rows)


def section_attn_chunks(files, only=None):
    """Prefill chunks after cached tokens (``attention.csv`` rows with ``kv_cache_size`` > 0): the
    chunk's queries attend to the cache and, causally, to each other (a lower-right causal mask),
    as a chunked prefill runs them; the fastest backend of ``only`` (or all) per shape."""
    from torch.nn.attention.bias import causal_lower_right

    for name, nh, nkv, h, inter, vocab in MODELS[:2]:
        hd, H, Hk = h // nh, nh, nkv
        rows = []
        chunks, caches = ((64, 256, 512, 1024, 2048), (1024, 4096, 16384)) if not SMOKE else ((16, 64), (64,))
        for q in chunks:
            for kv in caches:
                s, be = best_sdpa((1, H, q, hd), (1, Hk, kv + q, hd), Hk != H, only,
                                  attn_mask=causal_lower_right(q, kv + q))
                rows.append(attn_row(nh, nkv, h, 1, 1, q, kv, True, s, be))
        print(f"attn_chunks {name}: {sum(1 for r in rows if r['time_stats.attn_prefill.median'])} of {len(rows)} "
              f"shapes; backends {sorted(set(r['backend'] for r in rows))}", flush=True)
        rows = [r for r in rows if r["time_stats.attn_prefill.median"]]
        if rows:
            files[f"compute/h200/{name}/attention.csv"] = to_csv(rows)


def attn_row(nh, nkv, h, tp, B, chunk, kv, pre, s, be):
    return {"n_embd": h, "n_q_head": nh, "n_kv_head": nkv, "num_tensor_parallel_workers": tp, "batch_size": B,
            "prefill_chunk_size": chunk, "kv_cache_size": kv, "is_prefill": pre,
            "time_stats.attn_prefill.median": ms(s) if pre else "",
            "time_stats.attn_decode.median": "" if pre else ms(s), "backend": be}


# ---------------------------------------------------------------- fp8 GEMMs
def section_fp8(files):
    rows = []
    one = torch.tensor(1.0, device=DEV, dtype=torch.float32)
    for name, nh, nkv, h, inter, vocab in (MODELS[0], MODELS[3]):
        hd = h // nh
        for tp in (1, 2):
            qd, kvd = nh // tp * hd, max(nkv // tp, 1) * hd
            shapes = {"attn_pre_proj": (h, qd + 2 * kvd), "attn_post_proj": (qd, h),
                      "mlp_up_proj": (h, 2 * inter // tp), "mlp_down_proj": (inter // tp, h)}
            for op, (K, N) in shapes.items():
                w16s = [torch.randn(N, K, dtype=BF16, device=DEV) * 0.02 for _ in range(copies_for(2 * N * K))]
                w8s = [w.to(torch.float8_e4m3fn) for w in w16s]
                for M in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
                    x16 = torch.randn(M, K, dtype=BF16, device=DEV)
                    x8 = x16.to(torch.float8_e4m3fn)
                    t16 = time_replayed([lambda w=w: F.linear(x16, w) for w in w16s])
                    res = {}
                    for fast in (False, True):
                        try:
                            res[fast] = time_replayed([
                                lambda w=w, fast=fast: torch._scaled_mm(x8, w.t(), scale_a=one, scale_b=one,
                                                                        out_dtype=BF16, use_fast_accum=fast)
                                for w in w8s])
                        except Exception as e:
                            res[fast] = None
                            print(f"fp8 {op} M={M} fast={fast}: {str(e).splitlines()[0][:100]}", flush=True)
                    rows.append({"model": name, "tp": tp, "op": op, "M": M, "K": K, "N": N, "bf16_ms": ms(t16),
                                 "fp8_ms": ms(res[False]), "fp8_fast_accum_ms": ms(res[True])})
        print(f"fp8 {name}: done", flush=True)
    files["compute/h200/fp8_gemm.csv"] = to_csv(rows)


# ---------------------------------------------------------------- sustained load
def burst_then_sustained(calls, seconds, fields, t_origin):
    """Rows of ``fields`` plus phase, t_s (since ``t_origin``) and s_per_call: ``calls`` timed as
    the operator profiles time them (short graph replays, after 2 s idle), then replayed back to
    back from one graph for ``seconds``, a sample of 5 replays at a time."""
    time.sleep(2.0)  # idle, as between the profiles' operators
    rows = [{**fields, "phase": "burst", "t_s": time.perf_counter() - t_origin, "s_per_call": time_replayed(calls)}]
    n = max(len(calls), 16)

    def run():
        for i in range(n):
            calls[i % len(calls)]()

    g = graphed(run)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        per = time_kernel(g.replay, reps=5, warm=0) / n
        rows.append({**fields, "phase": "sustained", "t_s": time.perf_counter() - t_origin, "s_per_call": per})
    del g
    return rows


def section_sustain_more(files, seconds=8.0):
    """``sustain`` for an FP8 GEMM and a causal 8,192-token prefill attention (cuDNN, 32 heads):
    burst vs steady back-to-back time, written to ``sustain_more.csv`` (t_s from each op's start)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    one = torch.tensor(1.0, device=DEV, dtype=torch.float32)
    rows = []
    M, K, N = (8192, 4096, 22016) if not SMOKE else (64, 64, 64)
    w8s = [(torch.randn(N, K, dtype=BF16, device=DEV) * 0.02).to(torch.float8_e4m3fn)
           for _ in range(copies_for(N * K))]
    x8 = torch.randn(M, K, dtype=BF16, device=DEV).to(torch.float8_e4m3fn)
    fp8 = [lambda w=w: torch._scaled_mm(x8, w.t(), scale_a=one, scale_b=one, out_dtype=BF16) for w in w8s]
    T, H = (8192, 32) if not SMOKE else (256, 2)
    qkv = [tuple(torch.randn(1, H, T, 128, dtype=BF16, device=DEV) for _ in range(3)) for _ in range(2)]
    att = [lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True) for q, k, v in qkv]
    for label, calls, flops in (("fp8_gemm", fp8, 2.0 * M * K * N), ("attn_prefill", att, 2.0 * H * 128 * T * T)):
        ctx = sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]) if label == "attn_prefill" \
            else contextlib.nullcontext()
        with ctx:
            got = burst_then_sustained(calls, seconds, {"op": label}, time.perf_counter() + 2.0)
        rows += got
        print(f"sustain {label}: burst {flops / got[0]['s_per_call'] / 1e12:.0f} TFLOPS, after {seconds:.0f} s "
              f"{flops / got[-1]['s_per_call'] / 1e12:.0f}", flush=True)
    files["sustain_more.csv"] = to_csv(rows)


def section_sustain(files, seconds=10.0):
    """A GEMM timed as the operator profiles time it (short graph replays after idle) and then
    replayed back to back for ``seconds``, with the SM clock and power sampled by nvidia-smi every
    100 ms: whether a GPU kept busy (a long prefill, a loaded server) runs GEMMs slower than the
    bursts the profiles measure."""
    import subprocess

    smi = None
    if DEV != "cpu":
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits", "-lms", "100"], stdout=subprocess.PIPE, text=True)
    t_start = time.perf_counter()
    rows = []
    shapes = [(8192, 4096, 22016), (4096, 8192, 57344), (16, 4096, 22016)] if not SMOKE else [(64, 64, 64)]
    for M, K, N in shapes:
        ws = [torch.randn(N, K, dtype=BF16, device=DEV) * 0.02 for _ in range(copies_for(2 * N * K))]
        x = torch.randn(M, K, dtype=BF16, device=DEV)
        got = burst_then_sustained([lambda w=w: F.linear(x, w) for w in ws], seconds, {"M": M, "K": K, "N": N},
                                   t_start)
        rows += got
        print(f"sustain {M}x{K}x{N}: burst {2 * M * K * N / got[0]['s_per_call'] / 1e12:.0f} TFLOPS, after "
              f"{seconds:.0f} s {2 * M * K * N / got[-1]['s_per_call'] / 1e12:.0f}", flush=True)
    files["sustain.csv"] = to_csv(rows)
    if smi is not None:
        smi.terminate()
        out = smi.communicate(timeout=5)[0]
        files["clocks.csv"] = "sm_mhz,power_w,temp_c\n" + out
        print("clocks (first, min, last):", out.splitlines()[:1], min(out.splitlines()), out.splitlines()[-1:],
              flush=True)


# ---------------------------------------------------------------- whole steps of Llama-2-7B
def attend(q, k, v, kv_cache, start):
    """Attention of the T new tokens (q, k, v [B, H, T, D]); with ``kv_cache`` (k, v [B, H, Lmax,
    D]) their keys and values are written at ``start`` and attention reads the first start + T."""
    T = q.shape[2]
    if kv_cache is not None:
        kc, vc = kv_cache
        kc[:, :, start:start + T] = k
        vc[:, :, start:start + T] = v
        k, v = kc[:, :, : start + T], vc[:, :, : start + T]
    return F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)


class Llama:
    """Llama-2-7B-shaped decoder with random bf16 weights; KV caches [B, H, Lmax, D] per layer."""

    def __init__(self, layers=32, h=4096, nh=32, inter=11008, vocab=32000):
        self.L, self.h, self.nh, self.hd, self.vocab = layers, h, nh, h // nh, vocab
        r = lambda *s: torch.randn(*s, dtype=BF16, device=DEV) * 0.02  # noqa: E731
        self.emb, self.lm = r(vocab, h), r(vocab, h)
        self.layers = [dict(qkv=r(3 * h, h), o=r(h, h), gu=r(2 * inter, h), d=r(h, inter),
                            n1=torch.ones(h, dtype=BF16, device=DEV), n2=torch.ones(h, dtype=BF16, device=DEV))
                       for _ in range(layers)]
        self.nf = torch.ones(h, dtype=BF16, device=DEV)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=DEV).float() / self.hd))
        ang = torch.outer(torch.arange(16384, device=DEV).float(), inv)
        self.cos, self.sin = ang.cos().to(BF16), ang.sin().to(BF16)

    def rope(self, x, pos):
        # x [B, H, T, D]; pos [T] positions: rotate-half form, as HF Llama
        c, s = self.cos[pos][None, None], self.sin[pos][None, None]
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def forward(self, ids, pos, cache=None, start=0):
        """ids [B, T]; pos [T]; with ``cache`` (list of (k, v) [B, H, Lmax, D]) the new keys are
        written at ``start``..``start+T`` and attention reads ``:start+T``. Returns next ids [B]."""
        B, T = ids.shape
        x = F.embedding(ids, self.emb)  # [B, T, h]
        for i, w in enumerate(self.layers):
            y = F.rms_norm(x, (self.h,), w["n1"], 1e-5)
            q, k, v = F.linear(y, w["qkv"]).view(B, T, 3, self.nh, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
            q, k = self.rope(q, pos), self.rope(k, pos)
            a = attend(q, k, v, cache and cache[i], start)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, self.h), w["o"])
            y = F.rms_norm(x, (self.h,), w["n2"], 1e-5)
            g, u = F.linear(y, w["gu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, w["d"])
        x = F.rms_norm(x[:, -1], (self.h,), self.nf, 1e-5)
        return F.linear(x, self.lm).argmax(dim=-1)

    def cache(self, B, Lmax):
        return [(torch.empty(B, self.nh, Lmax, self.hd, dtype=BF16, device=DEV),
                 torch.empty(B, self.nh, Lmax, self.hd, dtype=BF16, device=DEV)) for _ in range(self.L)]


# ---------------------------------------------------------------- the same model, fused as vLLM V1 runs it
# vLLM V1 compiles each layer with torch.compile and splits the graph at attention ("piecewise"):
# the element-wise work (RMSNorm, rotary, SiLU x up, residual adds) fuses into a few Triton kernels
# around cuBLAS GEMMs. These two pieces are that, with attention (SDPA) and the KV write between.
def _make_pre_attention(nh: int, hd: int):
    """The piece before attention for ``nh`` heads of ``hd`` (constants, not traced as sizes)."""
    def pre_attention(x, n1, wqkv, c, s):
        B, T, h = x.shape
        y = F.rms_norm(x, (h,), n1, 1e-5)
        q, k, v = F.linear(y, wqkv).view(B, T, 3, nh, hd).unbind(2)  # [B, T, H, D]
        c, s = c[None, :, None, :], s[None, :, None, :]

        def rot(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return torch.cat((t1 * c - t2 * s, t2 * c + t1 * s), dim=-1)

        return rot(q).transpose(1, 2), rot(k).transpose(1, 2), v.transpose(1, 2)

    return pre_attention


def _post_attention(x, a, wo, n2, wgu, wd):
    B, T, h = x.shape
    x = x + F.linear(a.transpose(1, 2).flatten(2), wo)
    g, u = F.linear(F.rms_norm(x, (h,), n2, 1e-5), wgu).chunk(2, dim=-1)
    return x + F.linear(F.silu(g) * u, wd)


_compiled = {}
OUT_DIR = None  # set by main: where files are written


def fused_forward(model, ids, pos, cache=None, start=0):
    """``Llama.forward`` with the pieces around attention compiled (one compile per piece, shapes
    dynamic)."""
    if not _compiled:
        import torch._dynamo as dynamo
        for knob in ("cache_size_limit", "recompile_limit"):  # batch 1 and one token are specialized
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, 64)
        _compiled["pre"] = torch.compile(_make_pre_attention(model.nh, model.hd), dynamic=True)
        _compiled["post"] = torch.compile(_post_attention, dynamic=True)
    pre, post = _compiled["pre"], _compiled["post"]
    B, T = ids.shape
    x = F.embedding(ids, model.emb)
    c, s = model.cos[pos], model.sin[pos]
    for i, w in enumerate(model.layers):
        q, k, v = pre(x, w["n1"], w["qkv"], c, s)
        a = attend(q, k, v, cache and cache[i], start)
        x = post(x, a, w["o"], w["n2"], w["gu"], w["d"])
    x = F.rms_norm(x[:, -1], (model.h,), model.nf, 1e-5)
    return F.linear(x, model.lm).argmax(dim=-1)


def wall_per_call(fn, n):
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n


def graphed(fn):
    if DEV == "cpu":
        return type("NoGraph", (), {"replay": staticmethod(fn)})()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def measure_step(fn, n_eager=10, n_graph=20):
    """(eager s/step back to back, CPU s to launch one eager step, graph-replay s/step, GPU s of one
    replay by CUDA events)."""
    for _ in range(3):
        fn()
    eager = wall_per_call(fn, n_eager)
    sync()
    t0 = time.perf_counter()
    fn()
    launch = time.perf_counter() - t0
    sync()
    g = graphed(fn)
    for _ in range(3):
        g.replay()
    graph = wall_per_call(g.replay, n_graph)
    ev = time_kernel(g.replay, reps=5, warm=1)
    del g
    return eager, launch, graph, ev


def section_steps(files, model, fused=False):
    fwd = (lambda *a: fused_forward(model, *a)) if fused else model.forward
    name = "steps_fused.csv" if fused else "steps.csv"
    rows = []

    def keep(row):  # written after every shape: a run stopped at its time limit keeps what it measured
        rows.append(row)
        files[name] = to_csv(rows)
        if OUT_DIR:
            write(OUT_DIR, files)

    def prefill():
        for B, T in ((1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 512), (16, 128), (8, 1024)):
            ids = torch.randint(0, model.vocab, (B, T), device=DEV)
            pos = torch.arange(T, device=DEV)
            e, la, gr, ev = measure_step(lambda: fwd(ids, pos), n_eager=5, n_graph=5)
            keep({"kind": "prefill", "batch": B, "tokens": T, "context": 0, "eager_s": e, "launch_s": la,
                  "graph_s": gr, "graph_gpu_s": ev})
            print(f"prefill {B}x{T}: eager {e * 1e3:.2f} ms graph {gr * 1e3:.2f} ms", flush=True)
        torch.cuda.empty_cache()

    def decode():
        for L in (128, 1024, 4096):
            for B in (1, 2, 4, 8, 16, 32, 64, 128, 256):
                if B * (L + 1) > 140000:
                    continue
                cache = model.cache(B, L + 1)
                ids = torch.randint(0, model.vocab, (B, 1), device=DEV)
                pos = torch.tensor([L], device=DEV)
                e, la, gr, ev = measure_step(lambda c=cache: fwd(ids, pos, c, L))
                keep({"kind": "decode", "batch": B, "tokens": B, "context": L, "eager_s": e, "launch_s": la,
                      "graph_s": gr, "graph_gpu_s": ev})
                print(f"decode B={B} L={L}: eager {e * 1e3:.2f} ms graph {gr * 1e3:.2f} ms launch {la * 1e3:.2f} ms",
                      flush=True)
                del cache
                torch.cuda.empty_cache()

    for part in ((decode, prefill) if fused else (prefill, decode)):  # fused: decode first
        part()


def section_e2e(files, model, B=32, prompt=512, out=128):
    cache = model.cache(B, prompt + out)
    ids = torch.randint(0, model.vocab, (B, prompt), device=DEV)
    model.forward(ids, torch.arange(prompt, device=DEV), cache, 0).tolist()  # warm-up
    sync()
    t0 = time.perf_counter()
    nxt = model.forward(ids, torch.arange(prompt, device=DEV), cache, 0)
    toks = [nxt.tolist()]  # the host reads each step's tokens (sampling, stop checks, streaming)
    marks = [time.perf_counter()]
    for i in range(1, out):
        nxt = model.forward(nxt[:, None], torch.tensor([prompt + i - 1], device=DEV), cache, prompt + i - 1)
        toks.append(nxt.tolist())
        marks.append(time.perf_counter())
    gaps = [b - a for a, b in zip(marks, marks[1:])]
    files["e2e.json"] = json.dumps({
        "batch": B, "prompt_tokens": prompt, "output_tokens": out, "engine": "eager PyTorch, static batch",
        "ttft_s": marks[0] - t0, "e2e_s": marks[-1] - t0, "tpot_mean_s": statistics.mean(gaps),
        "tpot_p50_s": statistics.median(gaps), "tpot_max_s": max(gaps), "tpot_min_s": min(gaps)}, indent=1)
    print(f"e2e: ttft {(marks[0] - t0) * 1e3:.1f} ms e2e {(marks[-1] - t0):.3f} s tpot "
          f"{statistics.mean(gaps) * 1e3:.2f} ms", flush=True)
    del cache
    torch.cuda.empty_cache()


# ---------------------------------------------------------------- output
def to_csv(rows):
    buf = io.StringIO()
    cols = list(rows[0])
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def write(out, files):
    prof = {k: v for k, v in files.items() if k.startswith("compute/")}
    if prof:
        with tarfile.open(os.path.join(out, "profiling.tar.gz"), "w:gz") as tar:
            for k, v in prof.items():
                data = v.encode()
                ti = tarfile.TarInfo(k)
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    for k, v in files.items():
        if not k.startswith("compute/"):
            with open(os.path.join(out, k), "w") as f:
                f.write(v)


def main():
    global OUT_DIR
    out = OUT_DIR = sys.argv[1]
    want = sys.argv[2:] or ["env", "ops", "attn", "fp8", "steps", "e2e"]
    # sections whose kernels may not survive CUDA-graph capture run in their own process
    # (attn:cudnn): a broken capture there cannot spoil another section's numbers
    os.makedirs(out, exist_ok=True)
    files = {}
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    p = torch.cuda.get_device_properties(0) if DEV != "cpu" else type("Cpu", (), {"name": "cpu",
                                                                                  "multi_processor_count": 0,
                                                                                  "total_memory": 0})
    files["env.json"] = json.dumps({"gpu": p.name, "sms": p.multi_processor_count, "memory_gib": p.total_memory / 2**30,
                                    "torch": torch.__version__, "cuda": torch.version.cuda,
                                    "cudnn": torch.backends.cudnn.version(), "sections": want}, indent=1)
    print(files["env.json"], flush=True)
    if "env" not in want:
        del files["env.json"]
    failed = []
    model = None
    for sec in want:
        if sec == "env":
            continue
        t0 = time.perf_counter()
        try:
            if sec in ("steps", "steps_fused", "e2e") and model is None:
                model = Llama() if not SMOKE else Llama(layers=2, h=256, nh=2, inter=688, vocab=1000)
            if sec == "ops":
                section_ops(files)
            elif sec == "attn_chunks" or sec.startswith("attn_chunks:"):
                section_attn_chunks(files, sec.partition(":")[2] or None)
            elif sec == "attn" or sec.startswith("attn:"):
                section_attn(files, sec.partition(":")[2] or None)
            elif sec == "fp8":
                section_fp8(files)
            elif sec == "sustain":
                section_sustain(files)
            elif sec == "sustain_more":
                section_sustain_more(files)
            elif sec == "steps":
                section_steps(files, model)
            elif sec == "steps_fused":
                section_steps(files, model, fused=True)
            elif sec == "e2e":
                section_e2e(files, model)
            else:
                raise ValueError(f"unknown section {sec!r}")
        except Exception:
            failed.append(sec)
            traceback.print_exc()
        print(f"== section {sec}: {time.perf_counter() - t0:.1f} s", flush=True)
        write(out, files)  # what is done so far comes back even if a later section hangs
    print("failed sections:", failed or "none", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
