"""Simulator speed (issue 8): simulated requests per wall-second, wall time, peak RSS and
simulated steps per wall-second, each case in a fresh process.

Workload: conversation-trace-shaped lengths, lognormal fitted to prompt mean 1,155 / p99 4,142
and output mean 211 / p99 601 tokens (sigma solved from mean and p99 below), clipped to the
model's context; Llama-2-7B on one H100 per replica; Poisson arrivals.

  (a) 50,000 requests at 9 req/s, 1 replica, continuous batching
  (b) the same with chunked prefill (token budget 512)
  (c) 1,000,000 requests over 16 replicas (round robin) at 70% of their capacity
  (d) P/D split, 4 prefill + 12 decode replicas, 200,000 requests at 70% of the capacity of the
      decode pool (12 colocated replicas' capacity is the reference)
  scale: the (c) configuration at 10k / 100k / 1M requests (cost grows linearly)

Capacity (for c, d, scale) is measured by a saturation probe, as in ``bench/engine.py``: 2,000
requests offered far above what one replica serves; completed requests per second is the capacity.

Run it on one core:  taskset -c 0 python bench/speed.py [--cases a,b,c,d,scale]
                     [--engine fast|reference] [--write-readme] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Z99 = 2.3263478740408408  # standard normal 99th percentile


def sigma_from_mean_p99(mean: float, p99: float) -> float:
    """Lognormal sigma with the given mean and 99th percentile: ln(p99/mean) = z*s - s^2/2,
    the smaller root (the larger one puts most of the mass in a far tail)."""
    r = math.log(p99 / mean)
    return Z99 - math.sqrt(Z99 * Z99 - 2.0 * r)


PROMPT = {"dist": "lognormal", "mean": 1155.0, "sigma": sigma_from_mean_p99(1155.0, 4142.0)}
OUTPUT = {"dist": "lognormal", "mean": 211.0, "sigma": sigma_from_mean_p99(211.0, 601.0)}

BASE = {
    "name": "bench-speed",
    "seed": 0,
    "model": "meta-llama/Llama-2-7b-hf",
    "hardware": {"gpu": "h100-sxm"},
    "policy": {"name": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
    "workload": {"arrival": {"process": "poisson", "rate_rps": 9.0}, "prompt_tokens": PROMPT,
                 "output_tokens": OUTPUT, "clip_to_context": True},
}


def scenario_dict(case: str, num_requests: int, rate_rps: float, engine: str) -> dict:
    d = copy.deepcopy(BASE)
    d["workload"]["num_requests"] = num_requests
    d["workload"]["arrival"]["rate_rps"] = rate_rps
    d["engine"] = engine
    if case == "b":
        d["policy"] = {"name": "chunked_prefill", "max_num_seqs": 256, "max_num_batched_tokens": 512}
    elif case in ("c", "scale", "probe"):
        d["cluster"] = {"replicas": 16 if case != "probe" else 1, "router": "round_robin"}
    elif case == "d":
        d["policy"] = {"name": "pd_split", "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                       "prefill": {"replicas": 4}, "decode": {"replicas": 12}}
    return d


def _child(args, queue):
    case, n, rate, engine = args
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    sc = scenario_from_dict(scenario_dict(case, n, rate, engine))
    t0 = time.perf_counter()
    res = simulate(sc)
    wall = time.perf_counter() - t0
    steps = res.summary["phases"]["steps"]
    queue.put({
        "case": case, "requests": n, "rate_rps": rate, "engine": engine, "wall_s": wall,
        "sim_requests_per_wall_s": n / wall, "steps": steps, "steps_per_wall_s": steps / wall,
        "completed": res.summary["completed"], "rejected": res.summary["rejected"],
        "busy_fraction": res.summary["utilization"]["busy_fraction"],
        "mean_batch_size": res.summary["utilization"]["mean_batch_size"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    })


def run_isolated(case, n, rate, engine):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=((case, n, rate, engine), q))
    p.start()
    out = q.get()
    p.join()
    return out


def capacity_rps(engine: str) -> float:
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    res = simulate(scenario_from_dict(scenario_dict("probe", 2000, 1000.0, engine)))
    return res.summary["throughput_rps"]


def readme_table(results: dict) -> str:
    rows = ["| case | requests | engine | wall (s) | sim req / wall s | sim steps / wall s | peak RSS (MiB) |",
            "|---|---:|---|---:|---:|---:|---:|"]
    for key, r in results.items():
        if not isinstance(r, dict) or "wall_s" not in r:
            continue
        rows.append(f"| {key} | {r['requests']:,} | {r['engine']} | {r['wall_s']:.1f} | "
                    f"{r['sim_requests_per_wall_s']:,.0f} | {r['steps_per_wall_s']:,.0f} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(rows)


BEGIN, END = "<!-- speed-table:begin -->", "<!-- speed-table:end -->"


def write_readme(results: dict) -> None:
    path = ROOT / "README.md"
    text = path.read_text()
    block = f"{BEGIN}\n{readme_table(results)}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Performance\n\n`taskset -c 0 python bench/speed.py --write-readme` " \
               "(one core of a shared 2-core machine; figures are noisy):\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="a,b,c,d,scale")
    ap.add_argument("--engine", default="fast", choices=["fast", "reference"])
    ap.add_argument("--json", default=str(ROOT / "bench" / "results.json"), help="merge figures into this file")
    ap.add_argument("--write-readme", action="store_true", help="update the README performance table")
    args = ap.parse_args()
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    cases = args.cases.split(",")
    cap = None
    if any(c in ("c", "d", "scale") for c in cases):
        cap = capacity_rps(args.engine)
        results["capacity_rps_per_replica"] = cap
        print(f"capacity of one replica (saturation probe): {cap:.2f} req/s")
    plan = []
    for c in cases:
        if c == "a":
            plan.append(("a", "a", 50_000, 9.0))
        elif c == "b":
            plan.append(("b", "b", 50_000, 9.0))
        elif c == "c":
            plan.append(("c", "c", 1_000_000, 0.7 * cap * 16))
        elif c == "d":
            plan.append(("d", "d", 200_000, 0.7 * cap * 12))
        elif c == "scale":
            plan += [(f"scale_{n // 1000}k", "scale", n, 0.7 * cap * 16) for n in (10_000, 100_000)]
        else:
            raise SystemExit(f"unknown case {c!r}")
    for key, case, n, rate in plan:
        r = run_isolated(case, n, rate, args.engine)
        results[f"{key}_{args.engine}" if args.engine != "fast" else key] = r
        print(f"({key}) {n:>9,} requests [{args.engine}]: wall {r['wall_s']:.2f} s, "
              f"{r['sim_requests_per_wall_s']:,.0f} sim req/s, {r['steps_per_wall_s']:,.0f} steps/s, "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB, busy {r['busy_fraction'] * 100:.0f}%, "
              f"mean batch {r['mean_batch_size']:.1f}", flush=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
    if args.write_readme:
        write_readme(results)


if __name__ == "__main__":
    main()
