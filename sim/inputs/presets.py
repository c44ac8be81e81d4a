"""Built-in workload presets: synthetic shapes fitted to public traces, for users without the files.

``workload: {preset: azure_conv, num_requests: 2000}`` fills ``arrival``, ``prompt_tokens`` and
``output_tokens`` (each only where the scenario does not give it; a request class takes the
lengths). The written ``scenario.yaml`` shows the expanded values.

Every number below was computed by ``tools/fit_presets.py`` from the files in ``../shared/data``
(none of the trace rows are copied here; only percentiles and fitted parameters):

- ``azure_conv``, ``azure_code``: Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
  ``data/AzureLLMInferenceTrace_{conv,code}.csv``, CC BY 4.0; the trace of Patel et al.,
  "Splitwise", ISCA 2024). One hour each: conv 19,366 requests, 5.53 req/s, inter-arrival CV 1.09,
  prompt mean 1155 / output mean 211 tokens; code 8,819 requests, 2.57 req/s, CV 13.2, prompt mean
  2048 / output mean 28.
- ``arxiv_summarization``: lengths only (no arrival times) from microsoft/vidur
  ``data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv`` (MIT;
  Llama-2 tokenizer, filtered to <= 4096 total tokens); give an arrival process with it.

Lengths are quantile tables (``dist: quantiles``): the trace's percentiles at the levels ``P``,
joined linearly; drawn means are within 1.5% (prompts) and 4% (outputs) of the traces', and the
median, p90 and p99 within 1.5%. Prompt and output are drawn independently; their
Spearman rank correlation in the traces is +0.07 (conv), -0.02 (code) and -0.04 (arxiv).
Arrivals: conv is a gamma renewal process with the trace's rate and CV; code is an interrupted
Poisson process (bursts at 10.9 req/s lasting 13.5 s on average, idle gaps of 43.8 s on average)
fitted to the trace's mean gap (2.57 req/s), gap CV (13.2) and median gap (64 ms); see the fit
script for why not gamma.

What the arrival fits miss (count variance / mean per window, trace vs preset, printed by the fit
script): conv drifts in rate over the hour (60 s windows: 16.1 vs 1.3; use a piecewise or
sinusoidal process with the preset's lengths for that); code matches at 10 s and 60 s (71.6 vs
62.2, 164 vs 137) but lacks the trace's rare surges (500 requests in its busiest 20 s vs 258 in the
preset's first hour). Those surges drive tail latency: on CodeLlama-34B TP4 H100
(``scenarios/coding.yaml``, all 8,819 requests) replaying the code trace gives TTFT p50 / p99
0.72 s / 24.4 s, the preset 0.58 s / 2.89 s. Replay the trace to study tails.
"""

from __future__ import annotations

import copy

from servesim.errors import InputError, did_you_mean

# the quantile levels of every table below
P = [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0]

PRESETS: dict[str, dict] = {
    'azure_conv': {
        'arrival': {'process': 'gamma', 'rate_rps': 5.5301, 'cv': 1.0942},
        'prompt_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [2.0, 29.0, 181.0, 207.0, 387.0, 403.0, 703.0, 1020.0, 1071.0, 1130.0,
                       1315.0, 2734.5, 4075.0, 4083.0, 4090.0, 4098.0, 4142.0, 4831.0, 6179.2, 14050.0]},
        'output_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [7.0, 16.0, 41.0, 54.0, 77.0, 91.0, 103.0, 129.0, 177.0, 384.0,
                       400.0, 424.0, 430.0, 451.0, 509.0, 540.0, 601.0, 643.2, 954.0, 1000.0]},
    },
    'azure_code': {
        'arrival': {'process': 'on_off', 'rate_rps': 10.8975, 'on_s': 13.499, 'off_s': 43.822,
                    'durations': 'exponential'},
        'prompt_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [3.0, 17.0, 75.0, 147.0, 385.6, 770.0, 1075.0, 1469.0, 1909.0, 2433.0,
                       3192.4, 5187.6, 6097.0, 7303.3, 7435.0, 7436.0, 7436.0, 7436.0, 7437.0, 7437.0]},
        'output_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [6.0, 6.0, 6.0, 7.0, 8.0, 9.0, 11.0, 13.0, 16.0, 20.0,
                       29.0, 55.0, 69.0, 90.0, 128.0, 170.9, 251.5, 359.4, 825.3, 1899.0]},
    },
    'arxiv_summarization': {
        'prompt_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [1.0, 73.0, 748.6, 1242.0, 1802.0, 2150.0, 2453.0, 2730.0, 2996.0, 3249.0,
                       3490.0, 3702.0, 3759.0, 3813.0, 3863.0, 3892.0, 3933.4, 3963.0, 4011.7, 4054.0]},
        'output_tokens': {'dist': 'quantiles', 'p': P,
            'tokens': [5.0, 36.0, 60.0, 78.0, 104.0, 125.0, 145.0, 167.0, 192.0, 222.0,
                       268.0, 372.0, 438.0, 736.2, 2199.9, 2775.0, 3271.3, 3582.4, 3844.5, 4056.0]},
    },
}


def expand_preset(data: dict, path: str, keys: tuple[str, ...]) -> dict:
    """``data`` with the keys of its ``preset`` filled in where absent (or null). A mapping given
    without its kind (``process`` for the arrival, ``dist`` for a length) is laid over the
    preset's: ``arrival: {rate_rps: 20}`` keeps the preset's process and its other fields and
    changes the rate. A mapping that names its kind replaces the preset's whole."""
    name = data.get("preset")
    if name is None:
        return data
    if not isinstance(name, str) or name not in PRESETS:
        raise InputError(f"{path}.preset: {name!r} is not a preset;{did_you_mean(str(name), PRESETS)}")
    out = dict(data)
    for k in keys:
        if k not in PRESETS[name]:
            continue
        given, preset = out.get(k), PRESETS[name][k]
        if given is None:
            out[k] = copy.deepcopy(preset)
        elif isinstance(given, dict):
            if ("process" if k == "arrival" else "dist") not in given:
                out[k] = {**copy.deepcopy(preset), **given}
    return out


# ---------------------------------------------------------------- policy presets
# vLLM V1's scheduler defaults (EngineArgs.get_batch_defaults and _set_default_args_v1, vLLM
# >= 0.8; /work/notes/engine_profiles.md V1-5 to V1-7): chunked prefill always, prefix caching on,
# recompute preemption; the token budget and max_num_seqs depend on the GPU (>= 70 GiB and not
# an A100: the large defaults; A100s are excluded because large budgets lowered their throughput,
# vLLM PR #17885) and on the entry point: the OpenAI API server (`vllm serve`) or the offline
# `LLM` class.
GIB = 2**30
POLICY_PRESETS = {
    "vllm_v1_serve": {"large": (8192, 1024), "small": (2048, 256)},  # (max_num_batched_tokens, max_num_seqs)
    "vllm_v1_offline": {"large": (16384, 1024), "small": (8192, 256)},
}


def vllm_v1_policy(preset: str, gpu) -> dict:
    """The ``policy`` fields of a vLLM V1 preset on ``gpu`` (a ``GpuSpec``)."""
    size = "large" if gpu.mem_bytes >= 70 * GIB and "a100" not in gpu.name.lower() else "small"
    tokens, seqs = POLICY_PRESETS[preset][size]
    return {"name": "chunked_prefill", "max_num_batched_tokens": tokens, "max_num_seqs": seqs,
            "prefix_caching": True, "preemption": "recompute"}


def expand_policy_preset(data: dict) -> dict:
    """A scenario mapping with ``policy.preset``'s fields filled where the policy does not give
    them, resolved for ``hardware.gpu`` (so the written scenario.yaml shows what ran)."""
    pol = data.get("policy") if isinstance(data, dict) else None
    if not isinstance(pol, dict) or pol.get("preset") is None:
        return data
    name = pol["preset"]
    if not isinstance(name, str) or name not in POLICY_PRESETS:
        raise InputError(f"policy.preset: {name!r} is not a policy preset ({', '.join(POLICY_PRESETS)});"
                         f"{did_you_mean(str(name), POLICY_PRESETS)}")
    hw = data.get("hardware")
    gpu_name = hw.get("gpu") if isinstance(hw, dict) else None
    if not isinstance(gpu_name, str):
        return data  # the missing GPU is reported by the schema
    from servesim.inputs.specs import get_gpu

    filled = {k: v for k, v in vllm_v1_policy(name, get_gpu(gpu_name, "hardware.gpu")).items() if pol.get(k) is None}
    return {**data, "policy": {**pol, **filled}}
