"""The scheduling evidence in the docs: three ``servesim compare --seeds N`` studies of
``scenarios/interactive-batch.yaml`` (chat + batch summarization on one Llama-3-8B / H100),
printed as Markdown tables: each figure's mean over the seeds +- the half-width of its 95%
Student-t interval (``servesim.outputs.intervals``).

    python tools/scheduling_evidence.py [--out out/scheduling] [--seeds 3] [--workers N] [--docs docs]

1. priority: the chat class's SLO attainment and p99 TTFT under FCFS and the priority order, as
   the load grows past the replica's capacity;
2. sjf: mean, p99 and max TTFT under FCFS, shortest-prompt-first and SJF with aging, at 13 req/s;
3. admission: goodput vs load with and without shedding by predicted TTFT.

Each study's folder gets ``servesim report`` figures (``OUT/<study>/figures``: means over the
seeds with their intervals). The folders resume (a point already run is not run again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servesim.outputs.intervals import format_interval, t_interval  # noqa: E402
from servesim.outputs.rundir import read_results  # noqa: E402
from servesim.plots.report import build_report  # noqa: E402
from servesim.studies.compare import plan_compare, run_compare  # noqa: E402
from servesim.studies.executors import ExecutorOptions  # noqa: E402
from servesim.studies.replicates import SEEDS  # noqa: E402

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


def run_study(name: str, seeds: int, out: Path, ex: ExecutorOptions) -> list:
    """One ``compare --seeds`` of the study; per seed, {(label, rate): summary} (seeds 0 .. n - 1)."""
    variants, rates = STUDIES[name]
    folder = out / name
    plan = plan_compare(SCENARIO, None, variants, rates, seed=0, seeds=seeds)
    run_compare(plan, folder, ex)
    build_report(folder)
    got: dict = {}
    for r in read_results(folder / (SEEDS if seeds > 1 else "results.csv")):
        if r["status"] == "ok":
            got.setdefault(int(r.get("seed") or 0), {})[r["label"], r[RATE]] = \
                json.loads((folder / r["dir"] / "summary.json").read_text())
    return [got[k] for k in sorted(got)]


def cell(values: list, fmt) -> str:
    """The mean over seeds +- its 95% interval's half-width, to the interval's precision."""
    iv = t_interval([v for v in values if v is not None])
    if iv.n == 0:
        return "-"
    return fmt(iv)


def pct(iv) -> str:
    return format_interval(iv, 100.0, "%").replace(" %", "%")


def sec(iv) -> str:
    return format_interval(iv, 1.0, "s") if iv.mean >= 1 else format_interval(iv, 1e3, "ms")


def num(iv) -> str:
    return format_interval(iv)


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
        cols = [(lambda s: s["goodput_rps"], num),
                (lambda s: s["rejected"] / s["num_requests"], pct),
                (lambda s: s["classes"]["chat"]["slo_attainment"], pct),
                (lambda s: s["classes"]["batch"]["slo_attainment"], pct)]
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, rate in keys:
        vals = [[get(r[label, rate]) if (label, rate) in r else None for r in runs] for get, _ in cols]
        lines.append(f"| {rate:g} | {label} | " + " | ".join(cell(v, f) for v, (_, f) in zip(vals, cols)) + " |")
    return "\n".join(lines)


def readme_figures(out: Path, docs: Path) -> list:
    """The docs' figures from the studies' folders: chat vs batch service under FCFS and
    priority, goodput vs load with and without shedding (the reports' figures: means over the
    seeds, with their intervals), the TTFT CDF of the SJF study (its first seed's runs)."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.outputs.rundir import RunData
    from servesim.plots import figures as F

    docs.mkdir(parents=True, exist_ok=True)
    written = []
    for study, fig, name in (("priority", "classes_vs_load", "sched_priority"),
                             ("admission", "goodput_vs_load", "sched_admission")):
        src = out / study / "figures" / f"{fig}.png"
        if src.is_file():
            written.append(shutil.copy(src, docs / f"{name}.png"))
    folder = out / "sjf"
    if (folder / "results.csv").is_file():
        rows = read_results(folder / "results.csv")
        runs = {r["label"]: RunData.from_dir(folder / r["dir"], r["label"]) for r in rows if r["status"] == "ok"}
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        F.latency_cdfs({g: r.latency("ttft") for g, r in runs.items()}, ax, "ttft")
        first = next(iter(runs.values()))
        sc = first.scenario
        rate = ((sc.get("workload") or {}).get("arrival") or {}).get("rate_rps")
        ax.set_title(f"TTFT CDF by queue order: {sc.get('model')} on {first.num_gpus()} x {sc['hardware']['gpu']},\n"
                     f"{(sc.get('policy') or {}).get('name')}, {rate:g} req/s (interactive-batch, first seed)",
                     fontsize=10)
        F.save(fig, docs / "sched_sjf")
        plt.close(fig)
        (docs / "sched_sjf.svg").unlink()  # the scheduling guide embeds PNGs
        written.append(docs / "sched_sjf.png")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/scheduling")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per point (compare --seeds)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--only", help="comma-separated studies (default: all)")
    ap.add_argument("--docs", help="also write the scheduling guide's figures (PNG) into this folder, e.g. docs")
    a = ap.parse_args(argv)
    ex = ExecutorOptions(workers=a.workers, progress=False)
    out = Path(a.out)
    for name in (a.only.split(",") if a.only else STUDIES):
        runs = run_study(name, a.seeds, out, ex)
        print(f"\n### {name} (mean over {len(runs)} seeds +- the half-width of its 95% interval)\n")
        print(table(name, runs))
    if a.docs:
        for p in readme_figures(out, Path(a.docs)):
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
