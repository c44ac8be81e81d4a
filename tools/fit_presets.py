"""Fit the built-in workload presets (``sim/inputs/presets.py``) to the shared traces, and check them.

    python tools/fit_presets.py [--data DIR]     # DIR defaults to $SERVESIM_SHARED_DATA or ../shared/data

Reads the trace files at run time (they are never copied into the repository) and prints, for
each preset, the fitted parameters as a Python literal (paste into ``sim/inputs/presets.py``) and a
table comparing the trace with samples drawn from the fitted preset.

Fits:
- Lengths: the piecewise-linear quantile function through the trace's percentiles at ``P``
  (summary statistics only). Prompt and output are sampled independently: their Spearman rank
  correlation is small in both Azure traces (printed below), so nothing is lost by it.
- Arrivals, conversation: a gamma renewal process with the trace's mean rate and inter-arrival CV.
- Arrivals, code: an interrupted Poisson process (``on_off`` with exponential durations; its gaps
  are hyperexponential) matching the trace's mean gap, gap CV and median gap. A gamma process
  with CV 13 would match the first two moments too, but with shape 1/169 it puts most gaps at
  zero; the code trace instead has dense bursts (median gap 64 ms) separated by idle minutes
  (57 gaps over 5 s hold 72% of its hour).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servesim.inputs.traces import read_trace  # noqa: E402

P = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0)


def shared_data(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get("SERVESIM_SHARED_DATA"):
        return Path(os.environ["SERVESIM_SHARED_DATA"])
    return ROOT.parent / "shared" / "data"


def quantile_table(x: np.ndarray) -> dict:
    q = np.percentile(x, [100 * p for p in P])  # linear interpolation
    return {"dist": "quantiles", "p": list(P), "tokens": [round(float(v), 1) for v in q]}


def table_mean(t: dict) -> float:
    p, v = np.array(t["p"]), np.array(t["tokens"])
    return float(np.sum(np.diff(p) * (v[1:] + v[:-1]) / 2))


def h2_of_ipp(lam: float, alpha: float, beta: float):
    """Inter-arrival law of an interrupted Poisson process (rate lam when on; on->off rate alpha,
    off->on rate beta): hyperexponential, prob p of Exp(mu1), else Exp(mu2)."""
    s = lam + alpha + beta
    d = np.sqrt(s * s - 4 * lam * beta)
    mu1, mu2 = (s + d) / 2, (s - d) / 2
    p = (lam - mu2) / (mu1 - mu2)
    return p, mu1, mu2


def h2_stats(p, mu1, mu2):
    from scipy.optimize import brentq
    mean = p / mu1 + (1 - p) / mu2
    m2 = 2 * (p / mu1**2 + (1 - p) / mu2**2)
    cv = np.sqrt(m2 - mean**2) / mean
    med = brentq(lambda x: p * np.exp(-mu1 * x) + (1 - p) * np.exp(-mu2 * x) - 0.5, 1e-12, 1e6)
    return mean, cv, med


def fit_ipp(gaps: np.ndarray) -> dict:
    from scipy.optimize import least_squares
    target = np.array([gaps.mean(), gaps.std() / gaps.mean(), np.median(gaps)])

    def resid(x):
        lam, alpha, beta = np.exp(x)
        return np.log(np.array(h2_stats(*h2_of_ipp(lam, alpha, beta))) / target)

    rate = 1 / gaps.mean()
    x0 = np.log([np.log(2) / np.median(gaps), 1 / 20.0, 1 / 60.0])
    sol = least_squares(resid, x0, xtol=1e-14, ftol=1e-14)
    lam, alpha, beta = np.exp(sol.x)
    assert np.allclose((alpha + beta) / (lam * beta), h2_stats(*h2_of_ipp(lam, alpha, beta))[0]), "IPP mean"
    del rate
    return {"process": "on_off", "rate_rps": round(float(lam), 4), "on_s": round(float(1 / alpha), 3),
            "off_s": round(float(1 / beta), 3), "durations": "exponential"}


def idc(t: np.ndarray, window_s: float) -> float:
    """Index of dispersion of counts: variance / mean of the number of arrivals per window."""
    c = np.bincount((t // window_s).astype(int))[:-1]  # whole windows only
    return float(c.var() / c.mean())


def busiest(t: np.ndarray, window_s: float) -> int:
    """Most arrivals in any window of that length starting at an arrival, over the first hour."""
    t = t[t < t[0] + 3600]
    return int((np.searchsorted(t, t + window_s) - np.arange(len(t))).max())


def describe(x) -> str:
    x = np.asarray(x, float)
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return f"{x.mean():8.1f} {p50:8.1f} {p90:8.1f} {p99:8.1f} {x.max():8.0f}"


def check(name: str, preset: dict, trace) -> None:
    """Draw from the preset with servesim's own generator and compare with the trace."""
    from servesim.inputs.scenario import build, Workload
    from servesim.inputs.workload import generate
    n = 200_000
    data = {"num_requests": n, **preset}
    if "arrival" not in data:
        data["arrival"] = {"process": "poisson", "rate_rps": 1.0}
    s = generate(build(Workload, data, "workload"), np.random.default_rng(0))
    print(f"  {'':22}{'mean':>8} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for label, a, b in (("prompt", trace.prompt_tokens, s.prompt_tokens),
                        ("output", trace.output_tokens, s.output_tokens)):
        print(f"  {label + ' trace':22}{describe(a)}")
        print(f"  {label + ' preset':22}{describe(b)}")
    if trace.arrival_s is not None and "arrival" in preset:
        for label, t in (("trace", trace.arrival_s), ("preset", s.arrival_s)):
            g = np.diff(t)
            print(f"  gaps {label:17} rate {1 / g.mean():6.3f} rps  CV {g.std() / g.mean():6.2f}  "
                  f"median {np.median(g) * 1e3:7.1f} ms  count variance/mean in 10 s {idc(t, 10):6.1f}, "
                  f"60 s {idc(t, 60):6.1f}; busiest 20 s of the first hour {busiest(t, 20)} requests")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the shared data folder (holds traces/ and vidur/)")
    args = ap.parse_args(argv)
    root = shared_data(args.data)
    files = {
        "azure_conv": root / "traces" / "AzureLLMInferenceTrace_conv.csv",
        "azure_code": root / "traces" / "AzureLLMInferenceTrace_code.csv",
        "arxiv_summarization":
            root / "vidur" / "processed_traces" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
    }
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        print(f"missing: {', '.join(missing)} (set --data or SERVESIM_SHARED_DATA)", file=sys.stderr)
        return 2
    from scipy.stats import spearmanr
    presets = {}
    for name, path in files.items():
        tr = read_trace(str(path), need_arrival=name != "arxiv_summarization")
        pre = {}
        if tr.arrival_s is not None:
            gaps = np.diff(tr.arrival_s)
            if name == "azure_code":
                pre["arrival"] = fit_ipp(gaps)
            else:
                pre["arrival"] = {"process": "gamma", "rate_rps": round(float(1 / gaps.mean()), 4),
                                  "cv": round(float(gaps.std() / gaps.mean()), 4)}
        pre["prompt_tokens"] = quantile_table(tr.prompt_tokens)
        pre["output_tokens"] = quantile_table(tr.output_tokens)
        presets[name] = pre
        rho = spearmanr(tr.prompt_tokens, tr.output_tokens)[0]
        print(f"# {name}: {path.name}, {len(tr)} rows"
              + (f", span {tr.arrival_s[-1]:.1f} s" if tr.arrival_s is not None else "")
              + f"; Spearman(prompt, output) = {rho:+.3f}; quantile-table means "
              f"{table_mean(pre['prompt_tokens']):.1f} / {table_mean(pre['output_tokens']):.1f} vs trace "
              f"{tr.prompt_tokens.mean():.1f} / {tr.output_tokens.mean():.1f}")
        check(name, pre, tr)
    print("\nPRESETS = " + repr(presets).replace("}, '", "},\n    '"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
