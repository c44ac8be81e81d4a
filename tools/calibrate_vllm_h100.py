"""Calibrate the ``vllm-v1`` engine profile to measured vLLM V1 runs, and print how close it gets.

    python tools/calibrate_vllm_h100.py [--data DIR] [--workers N] [--cache DIR]   # the fit (~10 min on 2 cores)
    python tools/calibrate_vllm_h100.py --check [--shipped-attention]               # the shipped profile (~10 s)

DIR defaults to $SERVESIM_SHARED_DATA or ../shared/data; the runs are in its ``vllm-h100`` folder
(vLLM v0.15.1 serving Llama-2-7B on one H100-SXM, measured per request by inference-perf; from
inference-sim/training c4f0340). The files are read at run time, never copied; only derived
numbers are printed. Without the folder the tool says so and exits 0.

What is replayed (each run as recorded, ``replay``): every request's arrival, prompt tokens
(``input_tokens``) and output tokens (``max_tokens``: the runs ignore EOS), on the runs' vLLM
configuration (chunked prefill with a 2,048-token budget, max_num_seqs 128, 7,462 KV blocks of 16
tokens, prefix caching, fp16). inference-perf's shared-prefix workloads send the same 100 prompts
again and again, in order (``prompt_ids``); each request's whole prompt is its prefix group, so
after a prompt's first use its full blocks hit the prefix cache, as in vLLM. The 10 shared
system prompts matter only for those first 100 uses and are not modelled.

What is fitted, jointly over the three runs' five load stages, in two stages as the measurements
separate them (``fit``):

* the engine, by simulation over a grid: the share of the ``vllm-v1`` profile's per-step CPU work
  that overlaps the GPU step (``overlap``; the CPU work itself, 2 ms per step, is the profile's,
  from Vidur's measurement of the same phases: only its share on the critical path, (1 - overlap)
  x 2 ms, shows in these runs) and, as a GPU figure for the H100 calibration rather than the
  profile, the attention kernels' HBM-bandwidth efficiency (the shipped H100 figure is the v0
  guess 0.80, never measured; decode attention is most of a step at the 20 req/s stage): the
  point with the least squared relative errors of the stages' mean TPOT ((e2e - ttft) /
  (max_tokens - 1), as the data's README advises), which the API server's time per request does
  not reach;
* then the API server, in closed form for that point (it adds to the client's times and does not
  change the engine's): ``api_request_s`` (added to TTFT and E2E) and ``api_per_token_s`` (added
  to E2E per later output token), both >= 0, from the squared relative errors of mean TTFT and E2E.

The fitted constants print as Python to paste into
``sim/cost/engines.py``. Then per run and per stage: mean and p99 TTFT, TPOT and E2E, measured
against simulated; the same with each workload left out of the fit (fitted on the other two); and
the fit with the shipped attention efficiency.

``--check`` skips the fit and prints the table for the shipped profile (with the attention
efficiency ``H100_ATTENTION_MEMORY`` these runs imply, unless ``--shipped-attention``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from servesim.studies.measured_vllm import (METRICS, STAGES, WORKLOADS, available, data_dir, load,  # noqa: E402
                                            replay, table)

# the engine grid: overlap share of the profile's CPU work; attention HBM-bandwidth efficiency
GRID_OVERLAP = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
GRID_ATTENTION_MEMORY = (0.80, 0.85, 0.90, 0.95)
# the attention HBM-bandwidth efficiency these runs imply for H100 (fitted with the profile, below),
# shipped in sim/cost/calibrations/h100-sxm.yaml: the override then changes nothing (--check
# --shipped-attention prints the same table)
H100_ATTENTION_MEMORY = 0.9


def with_attention_memory(x: float, folder: str) -> str:
    """A calibration file: the efficiencies H100 runs with (``cost.calibration: auto``) with
    attention's HBM-bandwidth efficiency ``x``; its path."""
    import dataclasses

    import yaml

    from servesim.cost.calibration import efficiencies_for
    from servesim.inputs.specs import get_gpu

    eff = efficiencies_for(get_gpu("h100-sxm"))
    eff = dataclasses.replace(eff, attention=dataclasses.replace(eff.attention, memory=x))
    body = {k: v for k, v in eff.to_dict().items() if v is not None and k != "source"}
    path = Path(folder) / f"h100-attention-{x:g}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return str(path)


# ---------------------------------------------------------------- the fit
def fit_api(sim: dict, runs: dict, meas: dict, train) -> tuple:
    """(api_request_s, api_per_token_s), both >= 0, minimising the squared relative errors of the
    ``train`` stages' mean TTFT and E2E when added to the engine's times ``sim`` (ms); and the
    objective. (TPOT, the engine's measure, chose the engine point.) Every residual is linear in
    (A, c): a 2-variable non-negative least squares."""
    rows, rhs = [], []
    for w, lo, hi in train:
        s = slice(lo, hi)
        n1 = runs[w]["max_tokens"][s] - 1
        t, e = sim[w][0][s], sim[w][1][s]
        MT, ME = meas[w][0][s].mean(), meas[w][1][s].mean()
        # (t + A) / MT - 1, (e + A + c n1) / ME - 1
        for base, X, a, c in ((t.mean(), MT, 1.0, 0.0), (e.mean(), ME, 1.0, n1.mean())):
            rows.append((a / X, c / X))
            rhs.append(1.0 - base / X)
    M, b = np.array(rows), np.array(rhs)
    best = None
    for free in ((0, 1), (0,), (1,), ()):  # the non-negative solution is one of these (2 variables)
        x = np.zeros(2)
        if free:
            sol = np.linalg.lstsq(M[:, free], b, rcond=None)[0]
            if np.any(sol < 0):
                continue
            x[list(free)] = sol
        J = float(np.sum((M @ x - b) ** 2))
        if best is None or J < best[0]:
            best = (J, x)
    J, (A, c) = best
    return A / 1e3, c / 1e3, J  # ms -> s


def tpot_objective(sim: dict, runs: dict, meas: dict, train) -> float:
    """Sum over the ``train`` stages of the squared relative error of mean TPOT."""
    J = 0.0
    for w, lo, hi in train:
        s = slice(lo, hi)
        n1 = runs[w]["max_tokens"][s] - 1
        mt, me = meas[w][0][s], meas[w][1][s]
        J += (((sim[w][1][s] - sim[w][0][s]) / n1).mean() / ((me - mt) / n1).mean() - 1) ** 2
    return J


def stage_units(workloads) -> list:
    return [(w, lo, hi) for w in workloads for lo, hi, _ in STAGES[w]]


def grid() -> list:
    """Engine points: (attention HBM efficiency, overlap)."""
    return list(itertools.product(GRID_ATTENTION_MEMORY, GRID_OVERLAP))


_RUNS: dict = {}  # per process: the runs, read once


def _simulate_point(args):
    (att, f), data, folder = args
    cost = {"overhead_overlap": f, "api_server": False, "calibration": with_attention_memory(att, folder)}
    if not _RUNS:
        _RUNS.update({w: load(w, data) for w in WORKLOADS})
    return (att, f), {w: replay(w, _RUNS[w], cost) for w in WORKLOADS}


def simulate_points(points, data: Path, folder: str, workers: int, cache: str | None = None) -> dict:
    """Engine point -> {workload: simulated engine-side (TTFT, E2E) ms}; with ``cache``, points
    simulated before are read from that folder (derived numbers only) and new ones written."""
    out = {}
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        for p in points:
            f = Path(cache) / ("_".join(f"{x:g}" for x in p) + ".npz")
            if f.is_file():
                z = np.load(f)
                out[p] = {w: (z[f"{w}_ttft"], z[f"{w}_e2e"]) for w in WORKLOADS}
    jobs = [(p, data, folder) for p in points if p not in out]
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            for i, (p, sim) in enumerate(pool.imap_unordered(_simulate_point, jobs), 1):
                out[p] = sim
                print(f"  [{i}/{len(jobs)}] engine point {p}", file=sys.stderr, flush=True)
    else:
        for i, job in enumerate(jobs, 1):
            p, sim = _simulate_point(job)
            out[p] = sim
            print(f"  [{i}/{len(jobs)}] engine point {p}", file=sys.stderr, flush=True)
    if cache:
        for p, sim in out.items():
            np.savez(Path(cache) / ("_".join(f"{x:g}" for x in p) + ".npz"),
                     **{f"{w}_{k}": v for w, (t, e) in sim.items() for k, v in (("ttft", t), ("e2e", e))})
    return out


def fit(sims: dict, runs: dict, meas: dict, workloads=WORKLOADS) -> tuple:
    """Fitted on ``workloads``' stages, in two stages as the measurements separate them: the
    engine point with the least squared relative errors of mean TPOT (the engine's own measure:
    the API server's time per request does not reach it), then the API server's figures for
    that point from mean TTFT and E2E (``fit_api``): (engine point, api_request_s, api_per_token_s)."""
    train = stage_units(workloads)
    point = min(sims, key=lambda p: (tpot_objective(sims[p], runs, meas, train), p))
    A, c, _ = fit_api(sims[point], runs, meas, train)
    return point, A, c


def with_api(sim: dict, runs: dict, A_s: float, c_s: float) -> dict:
    """Client-side times: the engine's plus the API server's (ms)."""
    out = {}
    for w, (t, e) in sim.items():
        n1 = runs[w]["max_tokens"] - 1
        out[w] = (t + A_s * 1e3, e + A_s * 1e3 + c_s * 1e3 * n1)
    return out


# ---------------------------------------------------------------- main
def shipped_errors(data: Path, attention_memory: float | None = H100_ATTENTION_MEMORY) -> tuple:
    """The shipped ``vllm-v1`` profile replayed on the three runs, client-side (attention's HBM
    efficiency ``attention_memory``; None: the shipped H100 figure): (table text, errors per
    (run, stage), simulated client-side (TTFT, E2E) per run, the runs)."""
    runs = {w: load(w, data) for w in WORKLOADS}
    meas = {w: (runs[w]["ttft_ms"], runs[w]["e2e_ms"]) for w in WORKLOADS}
    with tempfile.TemporaryDirectory() as tmp:
        cost = {} if attention_memory is None else {"calibration": with_attention_memory(attention_memory, tmp)}
        sim = {w: replay(w, runs[w], cost) for w in WORKLOADS}
    text, errs = table(meas, sim, runs)
    return text, errs, sim, runs


def pct_row(label: str, errs: dict) -> list:
    return [f"| {label} | {w} {lab} | " + " | ".join(f"{e[k][q] * 100:+.1f}%" for k in METRICS
                                                    for q in ("mean", "p99")) + " |" for (w, lab), e in errs.items()]


def main(argv=None) -> int:
    from servesim.cost.engines import PROFILES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the shared data folder (default: $SERVESIM_SHARED_DATA or ../shared/data)")
    ap.add_argument("--check", action="store_true", help="only replay the shipped profile and print the table")
    ap.add_argument("--shipped-attention", action="store_true",
                    help="with --check: the shipped H100 attention efficiency, not H100_ATTENTION_MEMORY")
    ap.add_argument("--workers", type=int, default=1, help="processes for the grid (default 1)")
    ap.add_argument("--cache", help="keep the simulated engine points in this folder (rerun: only new ones run)")
    args = ap.parse_args(argv)
    data = data_dir(args.data)
    if not available(data):
        print(f"skipped: no measured vLLM runs at {data} (give --data or set SERVESIM_SHARED_DATA)")
        return 0
    if args.check:
        att = None if args.shipped_attention else H100_ATTENTION_MEMORY
        text, *_ = shipped_errors(data, att)
        print(f"shipped vllm-v1 profile, H100 attention HBM efficiency {'shipped' if att is None else att}: "
              "measured / simulated (ms), error\n\n" + text)
        return 0
    runs = {w: load(w, data) for w in WORKLOADS}
    meas = {w: (runs[w]["ttft_ms"], runs[w]["e2e_ms"]) for w in WORKLOADS}
    with tempfile.TemporaryDirectory() as tmp:
        sims = simulate_points(grid(), data, tmp, args.workers, args.cache)
        (att, f), A, c = fit(sims, runs, meas)
    cpu = PROFILES["vllm-v1"].step_s
    print(f"fitted on all three runs: overlap {f:g} of the profile's {cpu * 1e3:g} ms CPU work per step "
          f"({(1 - f) * cpu * 1e3:.2f} ms on the critical path); API server {A * 1e3:.1f} ms per request + "
          f"{c * 1e6:.0f} us per output token; H100 attention HBM efficiency {att:g}\n")
    print("# paste into sim/cost/engines.py (vLLM V1, fitted by tools/calibrate_vllm_h100.py)")
    print(f"_V1_OVERLAP = {f:g}\n_V1_API_REQUEST_S = {A * 1e3:.1f}e-3\n_V1_API_PER_TOKEN_S = {c * 1e6:.0f}e-6")
    print(f"# and into tools/calibrate_vllm_h100.py (and the H100 calibration): H100_ATTENTION_MEMORY = {att:g}\n")
    text, _ = table(meas, with_api(sims[(att, f)], runs, A, c), runs)
    print("measured / simulated (ms), error\n\n" + text + "\n")
    print("leave one workload out: fitted on the other two, errors on the one left out\n")
    print("| left out (fitted: attention, overlap, API) | stage | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | "
          "E2E mean | E2E p99 |\n|---|---|---|---|---|---|---|---|")
    for held in WORKLOADS:
        rest = tuple(w for w in WORKLOADS if w != held)
        (a2, f2), A2, c2 = fit(sims, runs, meas, rest)
        _, errs = table(meas, with_api(sims[(a2, f2)], runs, A2, c2), runs, (held,))
        print("\n".join(pct_row(f"{held} ({a2:g}, {f2:g}, {A2 * 1e3:.1f} ms + {c2 * 1e6:.0f} us/token)", errs)))
    shipped = {p: v for p, v in sims.items() if p[0] == GRID_ATTENTION_MEMORY[0]}
    (a3, f3), A3, c3 = fit(shipped, runs, meas)
    _, errs = table(meas, with_api(sims[(a3, f3)], runs, A3, c3), runs)
    print(f"\nwith the shipped H100 attention efficiency {a3:g}: best overlap {f3:g}, API {A3 * 1e3:.1f} ms + "
          f"{c3 * 1e6:.0f} us/token\n")
    print("| fit | stage | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | E2E mean | E2E p99 |\n"
          "|---|---|---|---|---|---|---|---|")
    print("\n".join(pct_row("shipped attention", errs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
