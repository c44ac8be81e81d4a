"""The scheduling evidence in docs/scheduling.md: three ``servesim compare`` studies of
``scenarios/interactive-batch.yaml`` (chat + batch summarization on one Llama-3-8B / H100), each
over several seeds, printed as Markdown tables (the seed-0 value, and the min-max over seeds).

    python tools/scheduling_evidence.py [--out out/scheduling] [--seeds 0,1,2] [--workers N] [--docs docs]

1. priority: the chat class's SLO attainment and p99 TTFT under FCFS and the priority order, as
   the load grows past the replica's capacity;
2. sjf: mean, p99 and max TTFT under FCFS, shortest-prompt-first and SJF with aging, at 13 req/s;
3. admission: goodput vs load with and without shedding by predicted TTFT.

Each study's seed-0 folder gets ``servesim report`` figures (``OUT/<study>-seed0/figures``). The
folders resume (a point already run is not run again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servesim.plots.report import build_report  # noqa: E402
from servesim.studies.compare import plan_compare, run_compare  # noqa: E402
from servesim.studies.executors import ExecutorOptions  # noqa: E402

SCENARIO = ROOT / "scenarios" / "interactive-batch.yaml"
RATE = "workload.arrival.rate_rps"
SHED = ["policy.admission.ttft_slo=true", "policy.admission.ttft_slo_share=0.6"]
STUDIES = {
    "priority": ([["fcfs", "policy.queue.order=fcfs"], ["priority", "policy.queue.order=priority"]],
                 "8,10,12,14,16"),
    "sjf": ([["fcfs", "policy.queue.order=fcfs"], ["sjf", "policy.queue.order=sjf"],
             ["sjf-aging-1s", "policy.queue.order=sjf", "policy.queue.aging_s=1"],
             ["sjf-aging-0.25s", "policy.queue.order=sjf", "policy.queue.aging_s=0.25"],
             ["sjf-predicted", "policy.queue.order=sjf_predicted", "policy.queue.predictor.sigma=0.5"]], "13"),
    "admission": ([["fcfs", "policy.queue.order=fcfs"], ["fcfs-shed", *SHED],
                   ["priority-shed", "policy.queue.order=priority", *SHED]], "8,12,16,20,24"),
}


def run_study(name: str, seed: int, out: Path, ex: ExecutorOptions) -> dict:
    """{(label, rate): summary} of one study at one seed."""
    variants, rates = STUDIES[name]
    folder = out / f"{name}-seed{seed}"
    plan = plan_compare(SCENARIO, None, variants, rates, seed=seed)
    rows = run_compare(plan, folder, ex)
    if seed == 0:
        build_report(folder)
    got = {}
    for r in rows:
        if r["status"] == "ok":
            got[r["label"], r[RATE]] = json.loads((folder / r["dir"] / "summary.json").read_text())
    return got


def cell(values: list, fmt) -> str:
    """``v0 (lo-hi)``: seed 0's value and the range over seeds."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return fmt(vals[0])
    return f"{fmt(vals[0])} ({fmt(min(vals))}-{fmt(max(vals))})"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def sec(x: float) -> str:
    return f"{x:.2f} s" if x >= 1 else f"{x * 1e3:.0f} ms"


def table(name: str, runs: list) -> str:
    keys = sorted(runs[0], key=lambda k: (k[1], list(dict.fromkeys(x[0] for x in runs[0])).index(k[0])))
    if name == "priority":
        head = "| rate (req/s) | order | chat SLO attainment | chat p99 TTFT | batch SLO attainment | batch p99 TTFT |"
        cols = [(lambda s: s["classes"]["chat"]["slo_attainment"], pct),
                (lambda s: s["classes"]["chat"]["ttft_s"]["p99"], sec),
                (lambda s: s["classes"]["batch"]["slo_attainment"], pct),
                (lambda s: s["classes"]["batch"]["ttft_s"]["p99"], sec)]
    elif name == "sjf":
        head = "| rate (req/s) | order | mean TTFT | p99 TTFT | max TTFT | batch p99 TTFT | SLO attainment |"
        cols = [(lambda s: s["ttft_s"]["mean"], sec), (lambda s: s["ttft_s"]["p99"], sec),
                (lambda s: s["ttft_s"]["max"], sec), (lambda s: s["classes"]["batch"]["ttft_s"]["p99"], sec),
                (lambda s: s["slo_attainment"], pct)]
        head = head.replace("| SLO attainment |", "| batch max TTFT | SLO attainment |")
        cols.insert(4, (lambda s: s["classes"]["batch"]["ttft_s"]["max"], sec))
    else:
        head = ("| rate (req/s) | configuration | goodput (req/s) | rejected | chat SLO attainment "
                "| batch SLO attainment |")
        cols = [(lambda s: s["goodput_rps"], lambda v: f"{v:.2f}"),
                (lambda s: s["rejected"] / s["num_requests"], pct),
                (lambda s: s["classes"]["chat"]["slo_attainment"], pct),
                (lambda s: s["classes"]["batch"]["slo_attainment"], pct)]
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, rate in keys:
        vals = [[get(r[label, rate]) if (label, rate) in r else None for r in runs] for get, _ in cols]
        lines.append(f"| {rate:g} | {label} | " + " | ".join(cell(v, f) for v, (_, f) in zip(vals, cols)) + " |")
    return "\n".join(lines)


def readme_figures(out: Path, docs: Path) -> list:
    """The scheduling guide's figures from the seed-0 folders: chat vs batch service under FCFS and
    priority, the TTFT CDF of the SJF study, goodput vs load with and without shedding."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.outputs.rundir import RunData
    from servesim.plots import figures as F
    from servesim.studies.sweep import read_results

    docs.mkdir(parents=True, exist_ok=True)
    written = []
    for study, fig, name in (("priority", "classes_vs_load", "sched_priority"),
                             ("admission", "goodput_vs_load", "sched_admission")):
        src = out / f"{study}-seed0" / "figures" / f"{fig}.png"
        if src.is_file():
            written.append(shutil.copy(src, docs / f"{name}.png"))
    folder = out / "sjf-seed0"
    if (folder / "results.csv").is_file():
        rows = read_results(folder / "results.csv")
        runs = {r["label"]: RunData.from_dir(folder / r["dir"], r["label"]) for r in rows if r["status"] == "ok"}
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        F.latency_cdfs({g: r.latency("ttft") for g, r in runs.items()}, ax, "ttft")
        sc = next(iter(runs.values())).scenario
        hw = sc.get("hardware") or {}
        gpus = int(hw.get("tp") or 1) * int(hw.get("pp") or 1) * int((sc.get("cluster") or {}).get("replicas") or 1)
        rate = ((sc.get("workload") or {}).get("arrival") or {}).get("rate_rps")
        ax.set_title(f"TTFT CDF by queue order: {sc.get('model')} on {gpus} x {hw.get('gpu')},\n"
                     f"{(sc.get('policy') or {}).get('name')}, {rate:g} req/s (interactive-batch, seed 0)", fontsize=10)
        F.save(fig, docs / "sched_sjf")
        plt.close(fig)
        (docs / "sched_sjf.svg").unlink()  # the guide embeds PNGs
        written.append(docs / "sched_sjf.png")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/scheduling")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--only", help="comma-separated studies (default: all)")
    ap.add_argument("--docs", help="also write the guide's figures (PNG) into this folder, e.g. docs")
    a = ap.parse_args(argv)
    ex = ExecutorOptions(workers=a.workers, progress=False)
    seeds = [int(s) for s in a.seeds.split(",")]
    out = Path(a.out)
    for name in (a.only.split(",") if a.only else STUDIES):
        runs = [run_study(name, seed, out, ex) for seed in seeds]
        print(f"\n### {name} (seed 0, and min-max over seeds {a.seeds})\n")
        print(table(name, runs))
    if a.docs:
        for p in readme_figures(out, Path(a.docs)):
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
