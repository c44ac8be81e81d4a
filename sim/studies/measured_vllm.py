"""Measured vLLM V1 runs replayed through servesim: ``../shared/data/vllm-h100`` (vLLM v0.15.1
serving Llama-2-7B on one H100-SXM, measured per request at the client by inference-perf; from
inference-sim/training c4f0340; see that folder's README). The files are read at run time, never
copied; only derived numbers (means, percentiles, errors) leave this module.

What is replayed (each run as recorded, ``replay``): every request's arrival, prompt tokens
(``input_tokens``) and output tokens (``max_tokens``: the runs ignore EOS), on the runs' vLLM
configuration (chunked prefill with a 2,048-token budget, max_num_seqs 128, 7,462 KV blocks of 16
tokens, prefix caching, fp16). inference-perf's shared-prefix workloads send the same 100 prompts
again and again, in order (``prompt_ids``); each request's whole prompt is its prefix group, so
after a prompt's first use its full blocks hit the prefix cache, as in vLLM.

Used by ``servesim reproduce vllm-h100`` (``errors``) and ``tools/calibrate_vllm_h100.py`` (the fit).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

WORKLOADS = ("general", "codegen", "roleplay")
# load stages as (first request, end, label): the runs' constant rates x durations (data README;
# inference-perf's stage files count the same: 4,800 + 12,000, 3,000 + 6,000, 7,200)
STAGES = {"general": ((0, 4800, "8 req/s"), (4800, 16800, "20 req/s")),
          "codegen": ((0, 3000, "5 req/s"), (3000, 9000, "10 req/s")),
          "roleplay": ((0, 7200, "6 req/s"),)}
NUM_PROMPTS = 100  # inference-perf shared_prefix: 10 groups x 10 prompts, sent in turn
METRICS = ("ttft", "tpot", "e2e")


def data_dir(arg: str | None = None) -> Path:
    """The ``vllm-h100`` folder: under ``arg``, else ``$SERVESIM_SHARED_DATA``, else the first
    ``shared/data`` found beside the working directory or beside the source checkout."""
    if arg:
        return Path(arg) / "vllm-h100"
    env = os.environ.get("SERVESIM_SHARED_DATA")
    if env:
        return Path(env) / "vllm-h100"
    for base in (Path.cwd().parent, Path(__file__).resolve().parents[2].parent):
        if (base / "shared" / "data" / "vllm-h100").is_dir():
            return base / "shared" / "data" / "vllm-h100"
    return Path.cwd().parent / "shared" / "data" / "vllm-h100"


def available(data: Path) -> bool:
    return all((data / f"llama-2-7b-tp1-{w}.csv").is_file() for w in WORKLOADS)


# ---------------------------------------------------------------- data
def load(workload: str, data: Path) -> dict:
    """One run's columns (numpy arrays, in send order); ``prompt_id`` added."""
    raw = np.genfromtxt(data / f"llama-2-7b-tp1-{workload}.csv", delimiter=",", names=True)
    d = {k: raw[k] for k in raw.dtype.names}
    if np.any(d["has_error"] != 0):
        raise ValueError(f"{workload}: the run has failed requests; the replay expects none")
    d["prompt_id"] = prompt_ids(d["input_tokens"].astype(np.int64))
    return d


def prompt_ids(tokens: np.ndarray) -> np.ndarray:
    """Which of the 100 prompts each row sent: row % 100 (inference-perf sends them in turn), put
    right where concurrent senders swapped neighbours (the row's length is another nearby
    prompt's); a row matching none gets a prompt of its own (it never hits the cache)."""
    base = np.arange(len(tokens)) % NUM_PROMPTS
    canon = np.array([np.bincount(tokens[base == k]).argmax() for k in range(NUM_PROMPTS)])
    pid = base.copy()
    for i in np.flatnonzero(canon[base] != tokens):
        for step in (1, -1, 2, -2, 3, -3):
            k = (base[i] + step) % NUM_PROMPTS
            if canon[k] == tokens[i]:
                pid[i] = k
                break
        else:
            pid[i] = NUM_PROMPTS + i
    return pid


def specs_for(d: dict):
    from servesim.inputs.workload import RequestSpecs

    prompt = d["input_tokens"].astype(np.int64)
    return RequestSpecs(arrival_s=(d["arrival_ms"] - d["arrival_ms"][0]) / 1e3, prompt_tokens=prompt,
                        output_tokens=d["max_tokens"].astype(np.int64), prefix_group=d["prompt_id"].astype(np.int64),
                        prefix_tokens=prompt.copy())


def replay_scenario(n: int, cost: dict):
    """The runs' vLLM configuration as a scenario (the requests come from ``specs_for``)."""
    from servesim.inputs.scenario import scenario_from_dict

    return scenario_from_dict({
        "name": "vllm-h100-llama2-7b-replay", "model": "meta-llama/Llama-2-7b-hf",
        "hardware": {"gpu": "h100-sxm", "tp": 1, "dtype": "fp16"},
        "memory": {"block_size": 16, "num_gpu_blocks": 7462},
        "policy": {"name": "chunked_prefill", "max_num_seqs": 128, "max_num_batched_tokens": 2048,
                   "prefix_caching": True},
        "workload": {"num_requests": n, "arrival": {"process": "poisson", "rate_rps": 1.0},  # placeholders
                     "prompt_tokens": {"dist": "fixed", "value": 16}, "output_tokens": {"dist": "fixed", "value": 16}},
        "cost": {"engine": "vllm-v1", **cost}})


def replay(workload: str, d: dict, cost: dict) -> tuple:
    """Simulated (TTFT, E2E) per request in ms, in the data's row order."""
    from servesim.simulation import simulate

    res = simulate(replay_scenario(len(d["arrival_ms"]), cost), specs=specs_for(d))
    rq = res.requests
    if not np.all(rq["status"] == "completed"):
        raise RuntimeError(f"{workload}: not every request completed")
    order = np.argsort(rq["request_id"])
    arr = rq["arrival_s"][order]
    return (rq["first_token_s"][order] - arr) * 1e3, (rq["finish_s"][order] - arr) * 1e3


# ---------------------------------------------------------------- metrics
def stats(x: np.ndarray) -> dict:
    return {"mean": float(np.mean(x)), "p99": float(np.percentile(x, 99))}


def metrics(ttft_ms, e2e_ms, max_tokens) -> dict:
    return {"ttft": stats(ttft_ms), "tpot": stats((e2e_ms - ttft_ms) / (max_tokens - 1)), "e2e": stats(e2e_ms)}


def units(runs: dict, workloads=WORKLOADS) -> list:
    """(workload, label, slice) of every load stage, then (workload, "all", whole run)."""
    out = [(w, lab, slice(lo, hi)) for w in workloads for lo, hi, lab in STAGES[w]]
    return out + [(w, "all", slice(None)) for w in workloads]


def table(meas: dict, sim: dict, runs: dict, workloads=WORKLOADS) -> tuple:
    """Per stage and whole run: (rows of measured / simulated / error, {unit: {metric: {stat: err}}})."""
    rows, errs = [], {}
    for w, lab, s in units(runs, workloads):
        n = runs[w]["max_tokens"][s]
        m = metrics(meas[w][0][s], meas[w][1][s], n)
        p = metrics(sim[w][0][s], sim[w][1][s], n)
        e = {k: {q: p[k][q] / m[k][q] - 1 for q in ("mean", "p99")} for k in METRICS}
        errs[(w, lab)] = e
        rows.append(f"| {w} | {lab} | " + " | ".join(
            f"{m[k][q]:.1f} / {p[k][q]:.1f} ({e[k][q] * 100:+.1f}%)" for k in METRICS for q in ("mean", "p99")) + " |")
    head = ("| run | stage | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | E2E mean | E2E p99 |\n"
            "|---|---|---|---|---|---|---|---|")
    return head + "\n" + "\n".join(rows), errs


def errors(data: Path) -> tuple:
    """The shipped default (``vllm-v1`` profile, the H100 calibration) replayed on the three runs,
    client-side: (table text, {(run, stage): {metric: {stat: relative error}}}, per run
    {metric: {stat: (measured, simulated)}} over the whole run)."""
    runs = {w: load(w, data) for w in WORKLOADS}
    meas = {w: (runs[w]["ttft_ms"], runs[w]["e2e_ms"]) for w in WORKLOADS}
    sim = {w: replay(w, runs[w], {}) for w in WORKLOADS}
    text, errs = table(meas, sim, runs)
    whole = {}
    for w in WORKLOADS:
        n = runs[w]["max_tokens"]
        m, p = metrics(*meas[w], n), metrics(*sim[w], n)
        whole[w] = {k: {q: (m[k][q], p[k][q]) for q in ("mean", "p99")} for k in METRICS}
    return text, errs, whole
