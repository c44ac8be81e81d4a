"""FP8 on Hopper: servesim's maximum throughput against TensorRT-LLM's published tables.

    python tools/hopper_check.py [--overhead-s 0] [--requests 3000]

Each row runs ``--requests`` requests submitted at once (trtllm-bench's infinite request rate) with
fixed input / output lengths, FP8 weights and KV cache, memory utilization 0.95, chunked prefill
with an 8,192-token budget and up to 2,048 sequences (TensorRT-LLM's max_num_tokens default and
the max_batch_size of its benchmark), and prints output tokens/s against the published figure:

- T-7: TensorRT-LLM docs/source/performance/perf-overview.md (v1.0 era, PyTorch backend,
  trtllm-bench, FP8, CUDA-graph padding): Llama-3.1-8B TP1 H100 28,312 (128/128) and 9,305
  (2048/2048) tok/s, H200 27,911 / 12,194; Llama-3.3-70B H200 TP1 3,803 / 2,003, H100 TP2
  6,378 / 3,082.
- T-8: TensorRT-LLM blog H200launch.md (release 0.5.0, preliminary): Llama-2-70B FP8 TP1 H200,
  batch 512, 128/128: 3,014 tok/s (run with max_num_seqs 512).

The engine's per-step CPU overhead is set to ``--overhead-s`` (default 0: TensorRT-LLM overlaps its
scheduler with the GPU), so the rows check the kernels' efficiencies, not an engine profile.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (source, model, GPU, TP, input, output, max_num_seqs, published output tok/s)
ROWS = [
    ("T-7", "meta-llama/Llama-3.1-8B", "h100-sxm", 1, 128, 128, 2048, 28312),
    ("T-7", "meta-llama/Llama-3.1-8B", "h100-sxm", 1, 2048, 2048, 2048, 9305),
    ("T-7", "meta-llama/Llama-3.1-8B", "h200", 1, 128, 128, 2048, 27911),
    ("T-7", "meta-llama/Llama-3.1-8B", "h200", 1, 2048, 2048, 2048, 12194),
    ("T-7", "meta-llama/Llama-3.3-70B-Instruct", "h200", 1, 128, 128, 2048, 3803),
    ("T-7", "meta-llama/Llama-3.3-70B-Instruct", "h200", 1, 2048, 2048, 2048, 2003),
    ("T-7", "meta-llama/Llama-3.3-70B-Instruct", "h100-sxm", 2, 128, 128, 2048, 6378),
    ("T-7", "meta-llama/Llama-3.3-70B-Instruct", "h100-sxm", 2, 2048, 2048, 2048, 3082),
    ("T-8", "meta-llama/Llama-2-70b-hf", "h200", 1, 128, 128, 512, 3014),
]


def main() -> int:
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overhead-s", type=float, default=0.0)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--calibration", default="auto")
    args = ap.parse_args()
    print("| source | model | GPU x TP | in / out | servesim tok/s | published | ratio |")
    print("|---|---|---|---|---|---|---|")
    for src, model, gpu, tp, isl, osl, seqs, pub in ROWS:
        sc = scenario_from_dict({
            "name": "hopper-check", "model": model,
            "hardware": {"gpu": gpu, "tp": tp, "dtype": "fp8", "kv_dtype": "fp8"},
            "memory": {"gpu_memory_utilization": 0.95},
            "policy": {"name": "chunked_prefill", "max_num_seqs": seqs, "max_num_batched_tokens": 8192},
            "workload": {"num_requests": args.requests, "arrival": {"process": "all_at_once"},
                         "prompt_tokens": {"dist": "fixed", "value": isl},
                         "output_tokens": {"dist": "fixed", "value": osl}},
            "cost": {"step_overhead_s": args.overhead_s, "per_seq_overhead_s": 0.0, "calibration": args.calibration},
        })
        thr = simulate(sc).summary["output_tokens_per_s"]
        print(f"| {src} | {model.split('/')[1]} | {gpu} x {tp} | {isl} / {osl} | {thr:,.0f} | {pub:,} | "
              f"{thr / pub:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
