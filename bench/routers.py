"""Router speed (issue 16's targets): the simulate() CPU time of each router on 16 replicas, as a
multiple of round robin's, and a run with a huge cluster and few requests (what the routers'
per-request cost and the cluster's set-up cost, not the steps, decide).

  (r) 16 replicas of Llama-2-7B on one H100 each, 20,000 conversation-shaped requests (the
      ``bench/speed.py`` lengths) at 70% of the cluster's capacity (measured by a saturation
      probe), once per router
  (x) 100,000 replicas, 20 requests, with round_robin and least_kv_usage

Figures are process CPU time of ``simulate()`` (``time.process_time``; the machine's other load
does not count), the minimum of ``--repeat`` runs. Targets: every router within 2x of round robin
on (r); (x) under 10 s.

    python bench/routers.py [--requests 20000] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import BASE, capacity_rps  # noqa: E402

from servesim.inputs.scenario import scenario_from_dict  # noqa: E402
from servesim.plugins import names  # noqa: E402
from servesim.simulation import simulate  # noqa: E402


def scenario(router: str, replicas: int, n: int, rate: float) -> dict:
    d = copy.deepcopy(BASE)
    d["cluster"] = {"replicas": replicas, "router": router}
    d["workload"]["num_requests"] = n
    d["workload"]["arrival"]["rate_rps"] = rate
    return d


def cpu_s(data: dict, repeat: int) -> tuple[float, dict]:
    best, summary = float("inf"), {}
    for _ in range(repeat):
        sc = scenario_from_dict(data)
        t0 = time.process_time()
        res = simulate(sc)
        best = min(best, time.process_time() - t0)
        summary = res.summary
    return best, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the figures into this file")
    args = ap.parse_args()
    cap = capacity_rps("fast")
    rate = 0.7 * cap * 16
    print(f"capacity of one replica (saturation probe): {cap:.2f} req/s; (r) offers {rate:.0f} req/s to 16")
    out = {"capacity_rps_per_replica": cap, "r": {}, "x": {}}
    rr = None
    for router in ["round_robin", *(r for r in names("router") if r != "round_robin")]:
        if router == "class_aware":  # (needs per-class replica lists: not a drop-in router)
            continue
        t, s = cpu_s(scenario(router, 16, args.requests, rate), args.repeat)
        rr = rr or t
        out["r"][router] = {"cpu_s": t, "x_round_robin": t / rr, "steps": s["phases"]["steps"],
                            "ttft_p99_s": s["ttft_s"]["p99"]}
        print(f"(r) {router:26s} {t:6.2f} s CPU  {t / rr:4.2f}x round robin  ({s['phases']['steps']:,} steps, "
              f"TTFT p99 {s['ttft_s']['p99']:.2f} s); target <= 2x: {'met' if t <= 2 * rr else 'NOT MET'}",
              flush=True)
    for router in ("round_robin", "least_kv_usage"):
        t, s = cpu_s(scenario(router, 100_000, 20, 20.0), 1)
        out["x"][router] = {"cpu_s": t, "completed": s["completed"]}
        print(f"(x) 100,000 replicas x 20 requests, {router}: {t:.2f} s CPU; target < 10 s: "
              f"{'met' if t < 10 else 'NOT MET'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
