"""Fit the ``vllm-v0.2`` engine profile (vLLM of late 2023) to published step-time measurements of
that engine, and print how close it gets.

    python tools/fit_vllm_v02.py          # the fit and its per-row errors (a few seconds)

The engine: vLLM v0.2.x with Ray workers, no CUDA graphs (PR #1926, merged 2023-12-17) and NCCL
all-reduce (the custom all-reduce, PR #2192, came in 2024). Its decode step is modelled as
``step = step_s + per_seq_s x n + max(gpu, layers x (eager_layer_s + 2 x eager_collective_s))``
(the collective term only with TP): the CPU work of a synchronous step (scheduling, the Ray call
to every worker, input preparation, sampling, output processing) on the critical path, and the
GPU waiting for Python to launch each layer's kernels (and, with TP, its two all-reduces through
torch.distributed). ``gpu`` is servesim's roofline step with NCCL all-reduces and no CPU work.

Fitted (least squares of the relative errors, ``fit``): the four CPU figures, on DistServe's
profile of this vLLM (``DISTSERVE["vllm"]`` of ``sim/cost/published_profiles.py``: decode steps of
OPT-13B at TP 1/2/4 and OPT-66B at TP 2/4/8 on A100-80GB SXM). Held out
(``SPLITWISE_DECODE_MS``): Splitwise's profiling of its vLLM (Llama-2-70B
at TP 2/4/8 and BLOOM-176B at TP 8, batch 1-16) on DGX-A100; on DGX-H100 the same rows fix the
H100 host's CPU speed relative to the DGX-A100's (``host_speed``: the CPU figures divided by it),
``GpuSpec.host_cpu_speed``. Only derived numbers ship (the DistServe coefficients, the medians of
Splitwise's rows), with their sources, in ``published_profiles.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the grid DistServe's decode coefficients are evaluated on: (sequences, context tokens per
# sequence), kept inside each profile's range (batch 1-192, batch x prompt <= its tokens limit)
DISTSERVE_GRID = ((1, 100), (1, 1000), (16, 500), (64, 500), (128, 256))

FIELDS = ("step_s", "per_seq_s", "eager_layer_s", "eager_collective_s")


def rows():
    """(source, model, GPU, TP, sequences, context per sequence, measured ms) of every row."""
    from servesim.cost.published_profiles import DISTSERVE, SPLITWISE_CONTEXT, SPLITWISE_DECODE_MS

    out = []
    for (m, tp), prof in DISTSERVE["vllm"].items():
        out += [("DistServe", m, "a100-80g", tp, n, c, prof.decode_ms(n, n * c)) for n, c in DISTSERVE_GRID
                if n * c <= prof.tokens_limit]
    for (m, g, tp), d in SPLITWISE_DECODE_MS.items():
        out += [("Splitwise", m, g, tp, n, SPLITWISE_CONTEXT, ms) for n, ms in d.items()]
    return out


def kernels_ms(model: str, gpu: str, tp: int, n: int, ctx: int) -> tuple[float, int]:
    """(servesim's decode step without CPU work, no CUDA graph, NCCL all-reduce, ms; layers)."""
    from servesim.core.batch import synthetic_batch
    from servesim.cost import CostModel
    from servesim.cost.calibration import efficiencies_for
    from servesim.inputs.specs import get_gpu, get_model

    g, m = get_gpu(gpu), get_model(model)
    cm = CostModel(m, g, tp=tp, dtype="fp16", kv_dtype="fp16", step_overhead_s=0.0, per_seq_overhead_s=0.0,
                   eff=efficiencies_for(g, "auto"), allreduce="nccl")
    return cm.step_time(synthetic_batch(decode_contexts=[ctx] * n)).time_s * 1e3, m.num_layers


def predict_ms(figures, gpu_ms: float, layers: int, tp: int, n: int, speed: float = 1.0) -> float:
    """The modelled step (ms) with CPU figures ``figures`` (s, as ``FIELDS``) on a host ``speed``
    times the reference's."""
    step, seq, layer, coll = (x * 1e3 / speed for x in figures)
    launch = layers * (layer + (2 * coll if tp > 1 else 0.0))
    return step + seq * n + max(gpu_ms, launch)


def _table():
    return [(r, *kernels_ms(*r[1:6])) for r in rows()]


def fit(table=None) -> np.ndarray:
    """The CPU figures (s, as ``FIELDS``) fitted to the DistServe rows."""
    from scipy.optimize import least_squares

    table = table or _table()
    train = [(r, g, L) for r, g, L in table if r[0] == "DistServe"]

    def res(x):
        return [(predict_ms(x, g, L, r[3], r[4]) - r[6]) / r[6] for r, g, L in train]

    return least_squares(res, [5e-3, 5e-5, 3e-4, 5e-5], bounds=([0] * 4, [0.05, 1e-3, 2e-3, 1e-3]),
                         x_scale=[1e-3, 1e-5, 1e-4, 1e-5]).x


def host_speed(figures, gpu: str = "h100-sxm", table=None) -> float:
    """The host CPU speed (DGX-A100's = 1) that fits the Splitwise rows on ``gpu``."""
    from scipy.optimize import minimize_scalar

    table = table or _table()
    sub = [(r, g, L) for r, g, L in table if r[0] == "Splitwise" and r[2] == gpu]
    return minimize_scalar(lambda s: sum(((predict_ms(figures, g, L, r[3], r[4], s) - r[6]) / r[6]) ** 2
                                         for r, g, L in sub), bounds=(0.5, 3.0), method="bounded").x


def errors(figures, speeds: dict, table=None) -> list:
    """(row, predicted ms, relative error) of every row, with the hosts' ``speeds`` by GPU."""
    table = table or _table()
    out = []
    for r, g, L in table:
        p = predict_ms(figures, g, L, r[3], r[4], speeds.get(r[2], 1.0))
        out.append((r, p, p / r[6] - 1))
    return out


def main() -> None:
    table = _table()
    x = fit(table)
    s = host_speed(x, table=table)
    print("fitted (DistServe's vLLM v0.2.3 profile, A100-80GB):")
    print(f"  step_s={x[0]:.3g}, per_seq_s={x[1]:.3g}, eager_layer_s={x[2]:.3g}, eager_collective_s={x[3]:.3g}")
    print(f"  host_cpu_speed of the DGX-H100 (Splitwise's H100 rows): {s:.3g}")
    print(f"\n{'source':10s} {'model':26s} {'gpu':9s} tp  seqs  ctx  measured  model  error")
    by = {}
    for r, p, e in errors(x, {"h100-sxm": s}, table):
        print(f"{r[0]:10s} {r[1]:26s} {r[2]:9s} {r[3]:2d} {r[4]:5d} {r[5]:4d} {r[6]:8.1f} {p:6.1f} {e:+6.1%}")
        by.setdefault((r[0], r[2]), []).append(abs(e))
    for (src, g), v in by.items():
        role = "fitted" if src == "DistServe" else ("host speed fitted" if g == "h100-sxm" else "held out")
        print(f"{src} {g} ({role}): mean |error| {np.mean(v):.1%}, worst {np.max(v):.1%}")


if __name__ == "__main__":
    main()
