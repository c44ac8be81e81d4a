"""Deployment planner time (issue 20): ``servesim plan`` of Llama-3-70B for 2 GPU types x TP
{1, 2, 4, 8} x colocated (continuous, chunked prefill 512 / 2048) and P/D splits (per-pool TP,
prefill:decode 1:1, 1:2, 2:1, 1:3) at one rate, with 3 seeds, from an empty output folder (no
finished run to reuse), through the CLI, on the machine's cores (``--workers``, default 2).

    python bench/plan.py [--rate 10] [--workers 2] [--gpus h100-sxm,a100-80g] [--tp 1,2,4,8] [--seeds 3]
                         [--keep DIR] [--json bench/results.json]

Prints the wall time and the plan's answer; ``--json`` adds a ``plan`` entry to the results file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "plan-llama3-70b.yaml"
SLO = "ttft_p99=2,tpot_p99=100ms"
GPUS = "h100-sxm,a100-80g"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    # (the figure recorded is the defaults'; these make a smaller plan, e.g. to check the script runs)
    ap.add_argument("--gpus", default=GPUS, help=f"GPU types searched (default {GPUS})")
    ap.add_argument("--tp", default="1,2,4,8", help="tensor-parallel sizes searched (default 1,2,4,8)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    ap.add_argument("--keep", help="write the plan here (default: a temporary folder, removed)")
    ap.add_argument("--json", help="add the figures to this results file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="servesim-plan-bench-") as tmp:
        out = Path(args.keep) if args.keep else Path(tmp) / "plan"
        if (out / "plan.json").exists():
            print(f"{out} holds a plan already: its finished runs would be reused; give an empty folder")
            return 2
        cmd = [sys.executable, "-m", "servesim", "plan", str(SCENARIO), "--rate", str(args.rate), "--slo", SLO,
               "--gpus", args.gpus, "--tp", args.tp, "--seeds", str(args.seeds), "--workers", str(args.workers),
               "--quiet", "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        print(proc.stdout, end="")
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        doc = json.loads((out / "plan.json").read_text())
    counts: dict = {}
    for c in doc["candidates"]:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    row = {"rate_rps": args.rate, "workers": args.workers, "seeds": len(doc["seeds"]), "gpus": args.gpus, "tp": args.tp,
           "wall_s": wall,
           "shapes": len(doc["candidates"]), "statuses": counts, "answer": (doc.get("answer") or {}).get("label"),
           "answer_fleet": (doc.get("answer") or {}).get("fleet"), "usd_per_hour": (doc.get("answer") or {}).get(
               "objective")}
    print(f"\nplan wall time: {wall:.0f} s ({args.workers} workers, {row['shapes']} shapes, target <= 600 s)")
    if args.json:
        p = Path(args.json)
        data = json.loads(p.read_text()) if p.exists() else {}
        data["plan"] = row
        p.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
