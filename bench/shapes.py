"""Cost per request across scenario shapes, and whether it grows with the run (issue 16: speed on
scenarios beyond the bench cases). For each shape, ``simulate()``'s CPU time per request at N and
at 2N requests; a shape whose cost per request grows with N (queues, replicas or caches that
something scans per arrival) shows a ratio well above 1.

    taskset -c 0 python bench/shapes.py [--requests N] [--shapes NAME,...] [--json FILE]

Shapes (Llama-2-7B on H100, the conversation-shaped lengths of ``bench/speed.py``, Poisson):

  base            continuous batching, one replica at 9 req/s (bench case (a)'s shape)
  chunked_512     chunked prefill, token budget 512
  overload_ttft   3x what the replica serves (35 req/s), admission by predicted TTFT (FCFS queue)
  overload_tokens 3x, admission capped by queued prompt tokens (a cap never reached)
  sjf_ttft        3x, shortest-job-first queue, admission by predicted TTFT
  lot_256         256 replicas, least_outstanding_tokens (the cluster settles replicas per arrival)
  kv_256          256 replicas, least_kv_usage
  rr_256          256 replicas, round robin (the reference for the two above)
  pd_8_16         P/D split, 8 prefill + 16 decode replicas
  sessions_cache  multi-turn sessions (2-8 turns) with prefix caching
  pp2             pipeline parallel over 2 GPUs, overlapping micro-batches (virtual engines)
  kv_bound        above capacity on 3,000 KV blocks (12 req/s): requests wait for KV, preemptions
  spec4           speculative decoding, n-gram draft, k = 4
  static          static batching, batches of up to 32
  swap_kv         kv_bound with swap preemption (host copies out and back)
  prio_kv         kv_bound with two request classes and the priority queue (preempting lower ones)
  closed          a closed loop of 64 clients (1 s think time)

Each shape runs in this process, one after the other (figures on a shared machine: expect 10%
noise; the ratio is what the benchmark is for). Known linear but slow shapes, by design: pp2
(every step through the shared stages, no runs of decode steps), sessions_cache (a run ends at
each completion, which starts the next turn).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import BASE, OUTPUT, PROMPT  # noqa: E402  (the bench workload)

SHAPES: dict[str, dict] = {
    "base": {},
    "chunked_512": {"policy": {"name": "chunked_prefill", "max_num_seqs": 256, "max_num_batched_tokens": 512}},
    "overload_ttft": {"rate_rps": 35.0, "policy.admission": {"ttft_slo": True}, "slo": {"ttft_s": 6000.0}},
    "overload_tokens": {"rate_rps": 35.0, "policy.admission": {"max_queued_tokens": 10**9}},
    "sjf_ttft": {"rate_rps": 35.0, "policy.queue": {"order": "sjf"}, "policy.admission": {"ttft_slo": True},
                 "slo": {"ttft_s": 6000.0}},
    "lot_256": {"rate_rps": 9.0 * 256, "cluster": {"replicas": 256, "router": "least_outstanding_tokens"}},
    "kv_256": {"rate_rps": 9.0 * 256, "cluster": {"replicas": 256, "router": "least_kv_usage"}},
    "rr_256": {"rate_rps": 9.0 * 256, "cluster": {"replicas": 256, "router": "round_robin"}},
    "pd_8_16": {"rate_rps": 9.0 * 16, "policy": {"name": "pd_split", "max_num_seqs": 256,
                                                  "max_num_batched_tokens": 8192,
                                                  "prefill": {"replicas": 8}, "decode": {"replicas": 16}}},
    "sessions_cache": {"rate_rps": 2.0, "policy.prefix_caching": True,
                       "workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 8}, "think_time_s": 5}},
    "pp2": {"hardware": {"gpu": "h100-sxm", "pp": 2}},
    "kv_bound": {"rate_rps": 12.0, "memory.num_gpu_blocks": 3000},
    "spec4": {"policy.spec": {"draft": "ngram", "num_speculative_tokens": 4}},
    "static": {"policy": {"name": "static", "max_num_seqs": 32, "max_num_batched_tokens": 8192}},
    "swap_kv": {"rate_rps": 12.0, "memory.num_gpu_blocks": 3000, "policy.preemption": "swap"},
    "prio_kv": {"rate_rps": 12.0, "memory.num_gpu_blocks": 3000, "policy.queue": {"order": "priority"},
                "workload.classes": [{"name": "hi", "share": 1, "priority": 0, "prompt_tokens": PROMPT,
                                      "output_tokens": OUTPUT},
                                     {"name": "lo", "share": 3, "priority": 1, "prompt_tokens": PROMPT,
                                      "output_tokens": OUTPUT}]},
    "closed": {"workload.arrival": {"process": "closed_loop", "clients": 64, "think_time_s": 1.0}},
}


def scenario_dict(shape: str, num_requests: int) -> dict:
    d = copy.deepcopy(BASE)
    d["engine"] = "fast"
    d["workload"]["num_requests"] = num_requests
    for key, value in SHAPES[shape].items():
        if key == "rate_rps":
            d["workload"]["arrival"]["rate_rps"] = value
        elif key == "workload.classes":  # (lengths per class: the workload's go)
            d["workload"]["classes"] = value
            del d["workload"]["prompt_tokens"], d["workload"]["output_tokens"]
        elif "." in key:
            head, tail = key.split(".")
            d.setdefault(head, {})[tail] = value
        else:
            d[key] = value
    return d


def cpu_per_request_us(shape: str, n: int) -> tuple[float, dict]:
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    sc = scenario_from_dict(scenario_dict(shape, n))
    gc.collect()
    t0 = time.process_time()
    res = simulate(sc)
    cpu = time.process_time() - t0
    s = res.summary
    return cpu / n * 1e6, {"cpu_s": cpu, "steps": s["phases"]["steps"], "completed": s["completed"],
                           "rejected": s["rejected"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000, help="N (each shape also runs 2N; default 5000)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, from: " + ", ".join(SHAPES))
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {unknown}; choose from {', '.join(SHAPES)}")
    n = args.requests
    out = {}
    print(f"{'shape':16s} {'us/req at N':>12s} {'us/req at 2N':>13s} {'2N / N':>7s}  (N = {n:,})")
    for shape in shapes:
        a, ra = cpu_per_request_us(shape, n)
        b, rb = cpu_per_request_us(shape, 2 * n)
        out[shape] = {"requests": n, "us_per_request": a, "us_per_request_2n": b, "ratio": b / a, "at_n": ra,
                      "at_2n": rb}
        flag = "  <- grows with N" if b / a > 1.3 else ""
        print(f"{shape:16s} {a:12.0f} {b:13.0f} {b / a:7.2f}{flag}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
