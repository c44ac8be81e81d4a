"""servesim's default (the ``vllm-v1`` engine profile, the shipped calibrations) against the 16
measured vLLM runs published in the public repository inference-sim/training (``default_args/``):
vLLM v0.15.1 on H100-SXM serving Llama-2-7B (TP 1), CodeLlama-34B (TP 2), Mixtral-8x7B (TP 2) and
Llama-2-70B (TP 4), each under four inference-perf workloads (general, codegen, roleplay,
reasoning), measured at the client.

    git clone https://github.com/inference-sim/training /tmp/training
    python tools/check_vllm_public.py --repo /tmp/training [--runs SUBSTR ...] [--seeds N]

``--repo`` is a checkout of that repository (a bare git folder works too: files are then read with
``git show HEAD:path``). Without it the tool says so and exits 0. Nothing of it is copied: the
files are read at run time and only derived numbers (means, errors) are printed.

Only the three Llama-2-7B runs among these are in ``../shared/data/vllm-h100`` (per request), and
only they calibrate anything (``tools/calibrate_vllm_h100.py``). The other 13 runs are held out:
no constant of servesim is fitted to them, and this tool is how the docs' table of them is made.

What is compared: the repository holds inference-perf's aggregates per load stage
(``results/stage_<i>_lifecycle_metrics.json``: mean and p99 of TTFT and request latency, the mean
prompt length), not per-request rows. So each stage is rebuilt from its configuration
(``results/config.yaml``, ``exp-config.yaml``): Poisson arrivals at the stage's rate for its
duration (inference-perf's constant-rate sender; the 7B runs' recorded arrivals have exponential
gaps), every prompt of the stage's mean measured length, every output of ``output_len`` tokens
(the runs ignore EOS), the ``shared_prefix`` workload's 100 prompts sent in turn (after its first
use a prompt's blocks hit vLLM's prefix cache, as in ``servesim.studies.measured_vllm``), on the
runs' vLLM settings (chunked prefill, ``max_num_batched_tokens``, ``max_num_seqs``, block size 16,
prefix caching, fp16; the KV blocks as servesim sizes them). TPOT is ``(E2E - TTFT) /
(output_len - 1)`` of the means, as the data's README advises.

Runs where more than 10% of the requests failed (inference-sim/training's ``split.py`` excludes
three reasoning runs as overload) are printed apart: their client timed requests out, which
servesim does not model, so their latencies are of the requests that survived.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from servesim.studies.measured_vllm import NUM_PROMPTS  # noqa: E402  (inference-perf's 100 prompts, in turn)
OVERLOAD_FAILURES = 0.10  # more failed requests than this: an overload run (timeouts)


class Repo:
    """Files of a checkout (or a bare git folder: ``git show HEAD:path``)."""

    def __init__(self, path: Path):
        self.path = path
        self.bare = not (path / "default_args").is_dir()

    def read(self, rel: str) -> str | None:
        if not self.bare:
            f = self.path / rel
            return f.read_text() if f.is_file() else None
        r = subprocess.run(["git", "-C", str(self.path), "show", f"HEAD:{rel}"], capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    def runs(self) -> list[str]:
        if not self.bare:
            return sorted(p.name for p in (self.path / "default_args").iterdir() if p.is_dir())
        r = subprocess.run(["git", "-C", str(self.path), "ls-tree", "--name-only", "HEAD", "default_args/"],
                           capture_output=True, text=True)
        return sorted(Path(x).name for x in r.stdout.split())


def available(path: Path | None) -> bool:
    if path is None or not path.is_dir():
        return False
    return bool(Repo(path).runs())


def load_run(repo: Repo, name: str) -> dict | None:
    """One run's settings and measured stages; None when its files are not all there."""
    exp, cfg = repo.read(f"default_args/{name}/exp-config.yaml"), repo.read(f"default_args/{name}/results/config.yaml")
    if exp is None or cfg is None:
        return None
    exp, cfg = yaml.safe_load(exp), yaml.safe_load(cfg)
    stages = []
    for i, st in enumerate(cfg["load"]["stages"]):
        text = repo.read(f"default_args/{name}/results/stage_{i}_lifecycle_metrics.json")
        if text is None:
            return None
        m = json.loads(text)
        lat = m["successes"]["latency"]
        ok, bad = m["successes"]["count"], m["failures"]["count"]
        stages.append({"rate_rps": float(st["rate"]), "duration_s": float(st["duration"]),
                       "prompt_tokens": int(round(m["successes"]["prompt_len"]["mean"])),
                       "ttft_s": lat["time_to_first_token"]["mean"], "e2e_s": lat["request_latency"]["mean"],
                       "ttft_p99_s": lat["time_to_first_token"]["p99"], "e2e_p99_s": lat["request_latency"]["p99"],
                       "completed": ok, "failed": bad})
    sp = cfg["data"]["shared_prefix"]
    return {"name": name, "model": exp["model"], "tp": int(exp["tensor_parallelism"]),
            "max_num_seqs": int(exp["max_num_seqs"]), "max_num_batched_tokens": int(exp["max_num_batched_tokens"]),
            "max_model_len": int(exp.get("max_model_len", 4096)), "output_tokens": int(sp["output_len"]),
            "stages": stages}


def label(name: str) -> str:
    """``20260218-150956-codellama-34b-tp2-codegen`` -> ``codellama-34b-tp2-codegen``."""
    parts = name.split("-", 2)
    return parts[2] if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() else name


def specs_for(run: dict, seed: int):
    """The run's requests as the stages' configuration makes them (module docstring)."""
    from servesim.inputs.workload import RequestSpecs

    rng = np.random.default_rng(seed)
    arrivals, prompts, t0 = [], [], 0.0
    for st in run["stages"]:
        n = int(round(st["rate_rps"] * st["duration_s"]))
        # Poisson arrivals over the stage: n uniform times, sorted (n fixed: the stage's count)
        arrivals.append(t0 + np.sort(rng.uniform(0.0, st["duration_s"], n)))
        prompts.append(np.full(n, st["prompt_tokens"], dtype=np.int64))
        t0 += st["duration_s"]
    arr = np.concatenate(arrivals)
    arr -= arr[0]
    prompt = np.concatenate(prompts)
    n = len(arr)
    return RequestSpecs(arrival_s=arr, prompt_tokens=prompt, output_tokens=np.full(n, run["output_tokens"]),
                        prefix_group=np.arange(n, dtype=np.int64) % NUM_PROMPTS, prefix_tokens=prompt.copy())


def scenario_for(run: dict, n: int):
    """The run's vLLM settings as the replay of the shared runs builds them (servesim's KV sizing)."""
    from servesim.studies.measured_vllm import replay_scenario

    return replay_scenario(n, {}, run["model"], run["tp"], None, run["max_num_seqs"], run["max_num_batched_tokens"])


def simulate_run(run: dict, seed: int) -> list[dict]:
    """Per stage: simulated mean TTFT / E2E (s) and p99 TTFT of the completed requests, and the
    share completed."""
    from servesim.simulation import simulate

    specs = specs_for(run, seed)
    res = simulate(scenario_for(run, len(specs)), specs=specs)
    rq = res.requests
    order = np.argsort(rq["request_id"])
    done = rq["status"][order] == "completed"
    arr = rq["arrival_s"][order]
    ttft, e2e = rq["first_token_s"][order] - arr, rq["finish_s"][order] - arr
    out, lo = [], 0
    for st in run["stages"]:
        n = int(round(st["rate_rps"] * st["duration_s"]))
        s = slice(lo, lo + n)
        lo += n
        ok = done[s]
        out.append({"ttft_s": float(np.mean(ttft[s][ok])) if ok.any() else float("nan"),
                    "e2e_s": float(np.mean(e2e[s][ok])) if ok.any() else float("nan"),
                    "ttft_p99_s": float(np.percentile(ttft[s][ok], 99)) if ok.any() else float("nan"),
                    "completed": float(ok.mean())})
    return out


def tpot(e2e_s: float, ttft_s: float, out: int) -> float:
    return (e2e_s - ttft_s) / (out - 1)


def compare(run: dict, sims: list[list[dict]]) -> list[dict]:
    """Per stage, measured against simulated (the mean over seeds; ``spread``: the seeds' range of
    the error, in points)."""
    rows = []
    out = run["output_tokens"]
    for i, st in enumerate(run["stages"]):
        m = {"ttft": st["ttft_s"], "tpot": tpot(st["e2e_s"], st["ttft_s"], out), "e2e": st["e2e_s"]}
        per_seed = [{"ttft": s[i]["ttft_s"], "tpot": tpot(s[i]["e2e_s"], s[i]["ttft_s"], out), "e2e": s[i]["e2e_s"]}
                    for s in sims]
        p = {k: float(np.mean([x[k] for x in per_seed])) for k in m}
        err = {k: p[k] / m[k] - 1 for k in m}
        spread = {k: (max(x[k] for x in per_seed) - min(x[k] for x in per_seed)) / m[k] for k in m}
        total = st["completed"] + st["failed"]
        rows.append({"run": label(run["name"]), "stage": i, "rate_rps": st["rate_rps"], "measured": m, "simulated": p,
                     "error": err, "spread": spread, "failed_share": st["failed"] / total if total else 0.0,
                     "weight": st["completed"]})
    return rows


def whole_run(rows: list[dict]) -> dict:
    """A run's errors over its stages (means weighted by the completed requests of each)."""
    w = np.array([r["weight"] for r in rows], dtype=float)
    out = {}
    for k in ("ttft", "tpot", "e2e"):
        m = float(np.dot(w, [r["measured"][k] for r in rows]) / w.sum())
        p = float(np.dot(w, [r["simulated"][k] for r in rows]) / w.sum())
        out[k] = p / m - 1
    return out


def report(all_rows: dict[str, list[dict]]) -> str:
    """The tables: per stage, per run, and the mean absolute errors over the runs (overload runs
    apart)."""
    lines = ["| run | stage | TTFT mean ms (meas / sim) | TPOT mean ms | E2E mean s | failed |",
             "|---|---|---|---|---|---|"]
    for name, rows in all_rows.items():
        for r in rows:
            m, p, e = r["measured"], r["simulated"], r["error"]
            lines.append(f"| {r['run']} | {r['rate_rps']:g} req/s | {m['ttft'] * 1e3:.1f} / {p['ttft'] * 1e3:.1f} "
                         f"({e['ttft']:+.0%}) | {m['tpot'] * 1e3:.2f} / {p['tpot'] * 1e3:.2f} ({e['tpot']:+.0%}) | "
                         f"{m['e2e']:.2f} / {p['e2e']:.2f} ({e['e2e']:+.0%}) | {r['failed_share']:.0%} |")
    active = {n: rows for n, rows in all_rows.items() if max(r["failed_share"] for r in rows) <= OVERLOAD_FAILURES}
    over = [n for n in all_rows if n not in active]
    lines += ["", "| run (whole, stages weighted by requests) | TTFT mean | TPOT mean | E2E mean |",
              "|---|---|---|---|"]
    whole = {n: whole_run(rows) for n, rows in all_rows.items()}
    for n, e in whole.items():
        tag = " (overload: excluded below)" if n in over else ""
        lines.append(f"| {label(n)}{tag} | {e['ttft']:+.1%} | {e['tpot']:+.1%} | {e['e2e']:+.1%} |")
    if active:
        lines.append("")
        mape = {k: float(np.mean([abs(whole[n][k]) for n in active])) for k in ("ttft", "tpot", "e2e")}
        worst = {k: max(abs(whole[n][k]) for n in active) for k in ("ttft", "tpot", "e2e")}
        held = [n for n in active if "llama-2-7b" not in label(n)]
        lines.append(f"over the {len(active)} runs with at most {OVERLOAD_FAILURES:.0%} failed requests: mean absolute "
                     "error " + ", ".join(f"{k.upper()} {mape[k]:.1%} (worst {worst[k]:.1%})" for k in mape))
        if held and len(held) < len(active):
            mh = {k: float(np.mean([abs(whole[n][k]) for n in held])) for k in ("ttft", "tpot", "e2e")}
            lines.append(f"of them the {len(held)} held out (not Llama-2-7B, whose runs calibrate the profile): "
                         + ", ".join(f"{k.upper()} {mh[k]:.1%}" for k in mh))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, help="a checkout of github.com/inference-sim/training")
    ap.add_argument("--runs", nargs="*", default=[], help="only runs whose folder name contains one of these")
    ap.add_argument("--seeds", type=int, default=1, help="arrival seeds per run (default 1)")
    args = ap.parse_args(argv)
    if not available(args.repo):
        print(f"skipped: no inference-sim/training checkout at {args.repo} (give --repo; see the docstring)")
        return 0
    repo = Repo(args.repo)
    all_rows = {}
    for name in repo.runs():
        if args.runs and not any(s in name for s in args.runs):
            continue
        run = load_run(repo, name)
        if run is None:
            print(f"{name}: incomplete (no exp-config.yaml, results/config.yaml or stage metrics): skipped",
                  file=sys.stderr)
            continue
        sims = [simulate_run(run, seed) for seed in range(args.seeds)]
        all_rows[name] = compare(run, sims)
        print(f"  {label(name)} done", file=sys.stderr, flush=True)
    if not all_rows:
        print("no runs matched")
        return 0
    print(report(all_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
