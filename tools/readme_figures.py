"""Regenerate the figures the README and docs/reports.md embed (docs/*.png).

    python tools/readme_figures.py [--policies a,b,...] [--rates 4,8,...] [--workers N]

Runs the packaged default scenario (Llama-3-8B on H100) through continuous batching, chunked
prefill (512-token budget) and the P/D split (or ``--policies``) at several arrival rates with
``servesim compare``'s machinery, then draws the figures with the same plot functions
``servesim report`` uses. The work folder (``docs/_work``, git-ignored by ``runs/``) makes reruns resume.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from servesim.plots import figures as F  # noqa: E402
from servesim.plots.report import build_report  # noqa: E402
from servesim.outputs.rundir import RunData, read_results  # noqa: E402
from servesim.studies.compare import policy_names  # noqa: E402
from servesim.inputs.scenario import default_scenario_path, read_yaml  # noqa: E402
from servesim.studies.points import make_points  # noqa: E402
from servesim.studies.sweep import RESULTS, execute, write_meta  # noqa: E402

RATE = "workload.arrival.rate_rps"


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")  # legends outside the axes are kept
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", help="comma-separated registered policies (default: all)")
    ap.add_argument("--rates", default="8,12,16,20,24,28", help="arrival rates, req/s")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "docs"))
    args = ap.parse_args(argv)
    if args.policies:
        configs = [(n, {"policy.name": n}) for n in args.policies.split(",")]
    else:
        # continuous; chunked prefill with a small token budget (Sarathi-style); the P/D split
        # (two GPUs: one prefill, one decode replica). static batching is left out by default:
        # its minutes-long queues would flatten every other curve.
        configs = [("continuous", {"policy.name": "continuous"}),
                   ("chunked_prefill-512", {"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 512}),
                   ("pd_split", {"policy.name": "pd_split"})]
        configs = [c for c in configs if c[1]["policy.name"] in policy_names()]
    if len(configs) < 2:
        configs.append(("continuous-32seqs", {"policy.name": "continuous", "policy.max_num_seqs": 32}))
    rates = [float(r) for r in args.rates.split(",")]
    base = read_yaml(default_scenario_path())
    work = Path(args.out) / "_work"
    variants = [({"label": lbl, RATE: r}, {**ov, RATE: r}) for lbl, ov in configs for r in rates]
    points = make_points(base, variants)
    work.mkdir(parents=True, exist_ok=True)
    write_meta(work, {"kind": "compare", "scenario": "scenarios/default.yaml"})
    execute(points, work, "local", args.workers, progress=True, desc="readme figures")
    build_report(work, progress=True)  # the full report, for a look (docs/_work/report.md)

    rows = read_results(work / RESULTS)
    labels = [c[0] for c in configs]
    gpus = {lbl: next(r["num_gpus"] for r in rows if r["label"] == lbl) for lbl in labels}
    shown = {lbl: f"{lbl} ({gpus[lbl]} GPU{'s' if gpus[lbl] != 1 else ''})" for lbl in labels}  # legend entries
    colors = {shown[lbl]: c for lbl, c in F.colors_for(labels).items()}
    slo = base.get("slo", {})
    out = Path(args.out)
    setup = f"Llama-3-8B on H100, vLLM V1 defaults; SLO TTFT <= {slo.get('ttft_s'):g} s, TPOT <= " \
            f"{slo.get('tpot_s') * 1e3:g} ms"

    series = {shown[lbl]: {"rate": [r[RATE] for r in rows if r["label"] == lbl],
                           "p50": [r["ttft_p50_s"] for r in rows if r["label"] == lbl],
                           "p99": [r["ttft_p99_s"] for r in rows if r["label"] == lbl]} for lbl in labels}
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    F.latency_vs_load(series, ax, "ttft", slo.get("ttft_s"), colors)
    ax.set_title(f"TTFT vs load\n{setup}", fontsize=9)
    _save(fig, out / "ttft_vs_load.png")

    mid = rates[len(rates) // 2]
    runs = {lbl: RunData.from_dir(work / next(r["dir"] for r in rows if r["label"] == lbl and r[RATE] == mid), lbl)
            for lbl in labels}
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    F.latency_cdfs({shown[lbl]: r.latency("tbt") for lbl, r in runs.items()}, ax, "tbt", None, colors)
    ax.set_title(f"ITL (token gap) CDF at {mid:g} req/s\n{setup}", fontsize=9)
    _save(fig, out / "tbt_cdf.png")

    first = runs[labels[0]]
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    F.roofline(first.roofline_data(), ax)
    ax.set_title(f"{shown[labels[0]]} at {mid:g} req/s: steps on the H100 roofline\n{setup}", fontsize=9)
    _save(fig, out / "roofline.png")

    fig, axes = plt.subplots(4, 1, figsize=(7, 7.5), sharex=True)
    F.replica_timeline(first.timeline_data(0), axes)
    axes[0].set_title(f"{shown[labels[0]]} at {mid:g} req/s: replica 0\n{setup}", fontsize=9)
    _save(fig, out / "timeline.png")
    print(f"wrote {out}/ttft_vs_load.png, tbt_cdf.png, roofline.png, timeline.png (and {work}/report.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
