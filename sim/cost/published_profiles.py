"""Published step-time measurements of the engines the 2023 papers ran, as derived numbers (fitted
coefficients, medians): what the ``vllm-v0.2`` engine profile is fitted to
(``tools/fit_vllm_v02.py``) and what ``servesim reproduce`` compares against.

* ``DISTSERVE``: DistServe's latency models (LLMServe/DistServe@82831f1, Apache-2.0,
  ``simdistserve/estimators/profile_data/profiler-a100-80g.{vllm,distserve}.json``), fitted by the
  authors to steps they measured on A100-80GB SXM (``evaluation/0-test-single-forward-performance``:
  batches of identical requests, 16 output tokens; vLLM v0.2.3 with ``worker_use_ray=True``).
  Times in ms: a prefill of prompts l_i takes ``a + b sum(l_i) + c sum(l_i^2)``; a decode step of n
  sequences with T context tokens in all ``a + b T + c n`` (the ``small`` coefficients below 95
  sequences, ``large`` from 95).
* ``SPLITWISE_DECODE_MS``: Splitwise's profiling of its vLLM (Mutinifni/splitwise-sim@8f99e7d, MIT,
  ``data/perf_model.csv``): ``token_time``, the mean time per output token of a batch of 512-token
  prompts and 128 output tokens, median over the file's repeats, by (model, GPU, TP) and batch.
* ``SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS``: the same file's ``token_time`` for BLOOM-176B on DGX-A100
  keyed as Splitwise's simulator keys it (what ``servesim reproduce splitwise`` explains its
  Fig. 18 with).
"""

from __future__ import annotations

from typing import NamedTuple


class StepModel(NamedTuple):
    """One engine's latency model for one (model, TP): (a, b, c) triples in ms (module docstring)."""

    prefill: tuple
    small: tuple
    large: tuple
    # profiled range: batch x prompt tokens at most this (main.py's num_tokens_limit; OPT-66B at TP 8
    # is not in its list: 40,000 assumed, its entry for OPT-175B at TP 8)
    tokens_limit: int

    def prefill_ms(self, prompts) -> float:
        a, b, c = self.prefill
        return a + b * sum(prompts) + c * sum(x * x for x in prompts)

    def decode_ms(self, n: int, context_tokens: int) -> float:
        a, b, c = self.small if n < 95 else self.large
        return a + b * context_tokens + c * n


DISTSERVE = {
    "vllm": {
        ("facebook/opt-13b", 1): StepModel((22.052205, 0.1405092, 8.07658e-6), (23.475041, 5.92934e-4, 0.0607269),
                                           (20.206356, 4.90773e-4, 0.1200031), 49152),
        ("facebook/opt-13b", 2): StepModel((27.440806, 0.0905453, 8.45205e-6), (24.540584, 2.24401e-4, 0.0871579),
                                           (17.947769, 4.57085e-4, 0.1117908), 98304),
        ("facebook/opt-13b", 4): StepModel((30.536323, 0.0515064, 4.23247e-7), (25.901144, 7.75363e-5, 0.0552809),
                                           (23.883885, 2.84002e-4, 0.0627652), 250000),
        ("facebook/opt-66b", 2): StepModel((58.382203, 0.3826408, -7.11415e-6), (57.073441, 3.646114e-3, 0.2249374),
                                           (26.983759, 6.200132e-3, 0.4482569), 8192),
        ("facebook/opt-66b", 4): StepModel((42.965489, 0.2128658, 4.60102e-5), (39.581789, 6.94572e-4, 0.1358087),
                                           (40.859718, 4.26487e-4, 0.1950837), 65000),
        ("facebook/opt-66b", 8): StepModel((38.931193, 0.1573682, 4.53168e-6), (31.176042, 2.75565e-4, 0.0679770),
                                           (29.087774, 6.02772e-4, 0.1389609), 40000),
    },
    "distserve": {
        ("facebook/opt-13b", 1): StepModel((18.102546, 0.1019123, 7.12226e-6), (19.934703, 6.26936e-4, 0.0385070),
                                           (7.166189, 5.79800e-4, 0.1583110), 49152),
        ("facebook/opt-13b", 2): StepModel((14.742974, 0.0685772, 2.44957e-6), (13.294796, 3.41092e-4, 0.0629639),
                                           (10.638742, 3.11834e-4, 0.0856291), 98304),
        ("facebook/opt-13b", 4): StepModel((12.062297, 0.0380814, 5.22625e-7), (10.256232, 1.87867e-4, 0.0326927),
                                           (10.483515, 1.71209e-4, 0.0456665), 250000),
        ("facebook/opt-66b", 2): StepModel((43.058813, 0.2742293, 2.24780e-5), (48.288015, 9.42434e-4, 0.1275502),
                                           (28.727694, 4.74485e-4, 0.2961779), 8192),
        ("facebook/opt-66b", 4): StepModel((29.441636, 0.1513522, 8.31745e-6), (30.760285, 4.51948e-4, 0.0632842),
                                           (27.470821, 4.04685e-4, 0.1248067), 65000),
        ("facebook/opt-66b", 8): StepModel((25.490662, 0.1065918, 3.39105e-6), (23.155111, 2.26915e-4, 0.0480064),
                                           (21.717728, 3.75809e-4, 0.0897861), 40000),
    },
}

SPLITWISE_DECODE_MS = {
    ("meta-llama/Llama-2-70b-hf", "a100-80g", 2): {1: 59.9, 2: 59.9, 4: 60.5, 8: 61.7, 16: 65.5},
    ("meta-llama/Llama-2-70b-hf", "a100-80g", 4): {1: 44.5, 2: 45.0, 4: 45.1, 8: 45.8, 16: 48.5},
    ("meta-llama/Llama-2-70b-hf", "a100-80g", 8): {1: 45.0, 2: 44.6, 4: 45.8, 8: 46.5, 16: 50.4},
    ("bigscience/bloom", "a100-80g", 8): {1: 49.3, 2: 50.0, 4: 51.0, 8: 53.0, 16: 57.3},
    ("meta-llama/Llama-2-70b-hf", "h100-sxm", 2): {1: 37.1, 2: 37.4, 4: 40.0, 8: 40.4, 16: 42.0},
    ("meta-llama/Llama-2-70b-hf", "h100-sxm", 4): {1: 29.4, 2: 30.0, 4: 29.9, 8: 31.4, 16: 32.8},
    ("meta-llama/Llama-2-70b-hf", "h100-sxm", 8): {1: 30.6, 2: 30.3, 4: 31.8, 8: 32.5, 16: 34.2},
    ("bigscience/bloom", "h100-sxm", 8): {1: 36.2, 2: 36.9, 4: 38.1, 8: 38.1, 16: 40.6},
}
SPLITWISE_CONTEXT = 512 + 64  # mean KV tokens per sequence over the rows' 128 output tokens
# the same file's prompt_time (ms) of one prompt of so many tokens, Llama-2-70B at TP 8, by GPU
SPLITWISE_PREFILL_MS = {
    "a100-80g": {512: 93.0, 1024: 154.5, 2048: 274.2},
    "h100-sxm": {512: 53.9, 1024: 77.9, 2048: 136.8},
}

# the same file's token_time curve for BLOOM-176B at TP 8 on DGX-A100 as splitwise-sim builds it
# (performance_model.py, DatabasePerformanceModel.init_predictor; notebooks/perf_model.py): the
# median over the rows of each prompt_size x batch_size (ms). Batch-1 rows of long prompts and
# batches of 512-token prompts share a key (8192: batch 1 x 8192 at 51.3, 16 x 512 at 57.3); from
# 16,384 on the rows are 32 and 64 sequences of 512-token prompts
SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS = {128: 47.61, 256: 47.71, 512: 49.31, 1024: 49.44, 2048: 50.19, 4096: 51.63,
                                       8192: 54.27, 16384: 65.38, 32768: 96.58}

__all__ = ["DISTSERVE", "SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS", "SPLITWISE_CONTEXT", "SPLITWISE_DECODE_MS",
           "SPLITWISE_PREFILL_MS", "StepModel"]
