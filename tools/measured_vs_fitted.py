"""Whole runs priced by the fitted cost model vs from the measured profiles (``cost.profiles``).

    python tools/measured_vs_fitted.py [--data DIR]     # DIR defaults to $SERVESIM_SHARED_DATA or ../shared/data

Runs 1,500 requests of the ``azure_conv`` preset on four deployments the
profiles cover, once with the shipped fit and once with the per-layer kernels priced from Vidur's
measurements, and prints TTFT p50 / p99 and mean TPOT of both and their change (docs/cost-model.md's
table under "Pricing from measured profiles"). The measurements are read at run time, never copied.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (model, GPU, TP, arrival rate req/s)
CASES = [("meta-llama/Llama-2-7b-hf", "a100-80g", 1, 5.0), ("meta-llama/Meta-Llama-3-70B", "a100-80g", 4, 1.5),
         ("meta-llama/Llama-2-7b-hf", "a40", 8, 6.0), ("codellama/CodeLlama-34b-Instruct-hf", "a40", 4, 1.5)]


def main() -> int:
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("SERVESIM_SHARED_DATA", str(ROOT.parent / "shared" / "data")))
    ap.add_argument("--requests", type=int, default=1500)
    args = ap.parse_args()
    prof = Path(args.data) / "vidur" / "profiling"
    if not (prof / "compute").is_dir():
        print(f"no profiles at {prof} (give --data)", file=sys.stderr)
        return 2
    print("| deployment | rate | TTFT p50 fitted / measured | TTFT p99 | mean TPOT |")
    print("|---|---|---|---|---|")
    for model, gpu, tp, rate in CASES:
        res = []
        for profiles in (None, str(prof)):
            s = scenario_from_dict({"name": "measured-vs-fitted", "model": model, "hardware": {"gpu": gpu, "tp": tp},
                                    "workload": {"num_requests": args.requests, "preset": "azure_conv",
                                                 "arrival": {"process": "poisson", "rate_rps": rate}},
                                    "cost": {"profiles": profiles}})
            m = simulate(s).summary
            res.append((m["ttft_s"]["p50"], m["ttft_s"]["p99"], m["tpot_s"]["mean"]))
        cells = [f"{a * 1e3:.1f} / {b * 1e3:.1f} ms ({100 * (b / a - 1):+.1f}%)" for a, b in zip(*res)]
        print(f"| {model.split('/')[1]}, {tp} x {gpu} | {rate:g} req/s | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
