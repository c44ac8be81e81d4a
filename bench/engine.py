"""Engine speed benchmark: simulated requests per wall-second and peak RSS.

Cases (Llama-3-8B on H100, continuous batching, Poisson arrivals at ~70% of capacity):
  (a) 10,000 requests on 1 replica;  (b) 100,000 requests on 8 replicas.
Capacity is measured first by a saturation probe (2,000 requests offered far above what one
replica can serve; its completed-requests-per-second is the capacity). Each case runs in a fresh
process so its peak RSS is its own.

    python bench/engine.py [--cases a,b] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BASE = {
    "name": "bench-engine",
    "seed": 0,
    "model": "meta-llama/Meta-Llama-3-8B",
    "hardware": {"gpu": "h100-sxm"},
    "policy": {"name": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
    "workload": {
        "arrival": {"process": "poisson", "rate_rps": 1.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 1024, "sigma": 0.8, "max": 6144},
        "output_tokens": {"dist": "lognormal", "mean": 192, "sigma": 0.7, "max": 1024},
    },
}


def scenario(num_requests: int, replicas: int, rate_rps: float):
    import copy

    from servesim.inputs.scenario import scenario_from_dict

    d = copy.deepcopy(BASE)
    d["workload"]["num_requests"] = num_requests
    d["workload"]["arrival"]["rate_rps"] = rate_rps
    d["cluster"] = {"replicas": replicas, "router": "round_robin"}
    return scenario_from_dict(d)


def _child(args, queue):
    num_requests, replicas, rate = args
    from servesim.simulation import simulate

    t0 = time.perf_counter()
    res = simulate(scenario(num_requests, replicas, rate))
    wall = time.perf_counter() - t0
    queue.put({
        "requests": num_requests, "replicas": replicas, "rate_rps": rate, "wall_s": wall,
        "sim_requests_per_wall_s": num_requests / wall,
        "steps": res.summary["phases"]["steps"], "steps_per_wall_s": res.summary["phases"]["steps"] / wall,
        "completed": res.summary["completed"], "busy_fraction": res.summary["utilization"]["busy_fraction"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    })


def run_isolated(num_requests, replicas, rate):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=((num_requests, replicas, rate), q))
    p.start()
    out = q.get()
    p.join()
    return out


def capacity_rps() -> float:
    from servesim.simulation import simulate

    res = simulate(scenario(2000, 1, 1000.0))  # everything arrives in ~2 s: the replica saturates
    return res.summary["throughput_rps"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="a,b")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    cap = capacity_rps()
    print(f"capacity of one replica (saturation probe): {cap:.2f} req/s; "
          f"runs at 70%: {0.7 * cap:.2f} req/s per replica")
    cases = {"a": (10_000, 1), "b": (100_000, 8)}
    results = {"capacity_rps_per_replica": cap}
    for name in args.cases.split(","):
        n, reps = cases[name]
        r = run_isolated(n, reps, 0.7 * cap * reps)
        results[name] = r
        print(f"({name}) {n:>7,} requests x {reps} replica(s): wall {r['wall_s']:.2f} s, "
              f"{r['sim_requests_per_wall_s']:,.0f} sim req/s, {r['steps_per_wall_s']:,.0f} steps/s, "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB, busy {r['busy_fraction'] * 100:.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
