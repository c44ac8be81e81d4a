"""Measured vLLM V1 runs replayed through servesim: ``../shared/data/vllm-h100`` (vLLM v0.15.1
serving Llama-2-7B on one H100-SXM, measured per request at the client by inference-perf; from
inference-sim/training c4f0340; see that folder's README). The files are read at run time, never
copied; only derived numbers (means, percentiles, errors) leave this module.

The three Llama-2-7B runs (``WORKLOADS``) calibrate the ``vllm-v1`` profile
(``tools/calibrate_vllm_h100.py``). Any other run of the same study in the folder, named as they
are (``<model>-tp<N>-<workload>.csv``, e.g. ``codellama-34b-tp2-general.csv``), is replayed too
(``discover``): the model from a ``<model>*config.json`` beside it, else the catalog model whose
name matches, at its TP size, with the study's vLLM settings; rows that failed at the client are
replayed (they loaded the server) and left out of the figures.

What is replayed (each run as recorded, ``replay``): every request's arrival, prompt tokens
(``input_tokens``) and output tokens (``max_tokens``: the runs ignore EOS), on the runs' vLLM
configuration (chunked prefill with a 2,048-token budget, max_num_seqs 128, 7,462 KV blocks of 16
tokens, prefix caching, fp16). inference-perf's shared-prefix workloads send the same 100 prompts
again and again, in order (``prompt_ids``); each request's whole prompt is its prefix group, so
after a prompt's first use its full blocks hit the prefix cache, as in vLLM.

Used by ``servesim reproduce vllm-h100`` (``errors``) and ``tools/calibrate_vllm_h100.py`` (the fit).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.errors import InputError
from servesim.inputs.traces import MAX_TOKENS  # (no request has more tokens)

WORKLOADS = ("general", "codegen", "roleplay")
# load stages as (first request, end, label): the runs' constant rates x durations (data README;
# inference-perf's stage files count the same: 4,800 + 12,000, 3,000 + 6,000, 7,200)
STAGES = {"general": ((0, 4800, "8 req/s"), (4800, 16800, "20 req/s")),
          "codegen": ((0, 3000, "5 req/s"), (3000, 9000, "10 req/s")),
          "roleplay": ((0, 7200, "6 req/s"),),
          # (inference-sim/training's public configuration: 4 req/s for 1,200 s)
          "reasoning": ((0, 4800, "4 req/s"),)}
NUM_PROMPTS = 100  # inference-perf shared_prefix: 10 groups x 10 prompts, sent in turn
METRICS = ("ttft", "tpot", "e2e")


def data_dir(arg: str | None = None) -> Path:
    """The ``vllm-h100`` folder: under ``arg``, else ``$SERVESIM_SHARED_DATA``, else the first
    ``shared/data`` found beside the working directory or beside the source checkout."""
    if arg:
        return Path(arg) / "vllm-h100"
    env = os.environ.get("SERVESIM_SHARED_DATA")
    if env:
        return Path(env) / "vllm-h100"
    for base in (Path.cwd().parent, Path(__file__).resolve().parents[2].parent):
        if (base / "shared" / "data" / "vllm-h100").is_dir():
            return base / "shared" / "data" / "vllm-h100"
    return Path.cwd().parent / "shared" / "data" / "vllm-h100"


def available(data: Path) -> bool:
    """Whether the three calibration runs (Llama-2-7B) are in ``data``."""
    return all((data / f"llama-2-7b-tp1-{w}.csv").is_file() for w in WORKLOADS)


# ---------------------------------------------------------------- the runs in the folder
RUN_FILE = re.compile(r"^(?P<model>[a-z0-9][a-z0-9._-]*?)-tp(?P<tp>[1-9][0-9]*)-(?P<workload>[a-z0-9_]+)\.csv$",
                      re.IGNORECASE)
# KV blocks vLLM logged for a run (the data's README); other runs: servesim sizes the KV itself
LOGGED_BLOCKS = {("llama-2-7b", 1): 7462}


@dataclass(frozen=True)
class RunFile:
    """One measured run's table: ``<model>-tp<N>-<workload>.csv``."""

    path: Path
    model_stem: str
    tp: int
    workload: str

    @property
    def calibration(self) -> bool:
        """One of the three runs the ``vllm-v1`` profile is fitted to."""
        return (self.model_stem, self.tp) == ("llama-2-7b", 1) and self.workload in WORKLOADS

    @property
    def label(self) -> str:
        """How figures name it: the calibration runs by their workload (as always), the others by
        model, TP and workload."""
        return self.workload if self.calibration else f"{self.model_stem} TP{self.tp} {self.workload}"


def discover(data: Path) -> list:
    """Every run table in ``data`` (``RUN_FILE`` names), the calibration runs first."""
    if not data.is_dir():
        return []
    out = []
    for f in sorted(data.glob("*.csv")):
        m = RUN_FILE.match(f.name)
        if m:
            out.append(RunFile(f, m["model"].lower(), int(m["tp"]), m["workload"].lower()))
    return sorted(out, key=lambda r: (not r.calibration, WORKLOADS.index(r.workload) if r.calibration else 0,
                                      r.model_stem, r.tp, r.workload))


def _norm(name: str) -> str:
    """A model name compared loosely: no organisation, lower case, '.' and '_' as '-', without the
    suffixes that name a variant of the same weights' shape (-hf, -instruct, -chat, -v0.1)."""
    n = name.split("/")[-1].lower().replace("_", "-").replace(".", "-")
    # at the end only, any of them in any order (``-instruct-v0-1``, ``-chat-hf``): a name such as
    # ``qwen-v10`` or ``phi-hfx`` keeps its letters
    return re.sub(r"(-(hf|instruct|chat|v0-1|v0-2|v1))+$", "", n)


def model_for(stem: str, data: Path) -> str | None:
    """The model a run file names: a Hugging Face ``config.json`` beside it whose name starts
    with the stem (``llama-2-7b-hf-config.json``), else the catalog model whose loose name
    (``_norm``) is the stem's; None when neither."""
    for f in sorted(data.glob("*config.json")):
        if f.name.lower().startswith(stem + "-") or f.name.lower().startswith(stem + "_"):
            return str(f)
    from servesim.inputs.specs import MODELS

    hits = sorted(m for m in MODELS if _norm(m) == _norm(stem))
    return hits[0] if hits else None


def stages_of(run: RunFile, n: int) -> tuple:
    """The run's load stages as (first row, end, label): the study's, when its rows are as many;
    else the whole run as one."""
    st = STAGES.get(run.workload)
    if st and st[-1][1] == n:
        return st
    return ((0, n, "whole run"),)


# ---------------------------------------------------------------- data
def load(workload: str, data: Path) -> dict:
    """One calibration run's columns (numpy arrays, in send order); ``prompt_id`` added."""
    d = load_file(data / f"llama-2-7b-tp1-{workload}.csv")
    if not d["ok"].all():
        raise ValueError(f"{workload}: the run has failed requests; the calibration expects none")
    return d


COLUMNS = ("arrival_ms", "input_tokens", "max_tokens", "ttft_ms", "e2e_ms", "has_error")  # (of the data's README)


def load_file(path: Path) -> dict:
    """A run table's columns (numpy arrays, in send order); ``prompt_id`` and ``ok`` (the row did
    not fail at the client) added. ``KeyError`` naming a missing column; ``ValueError`` for a
    table with no rows or cells that are not numbers."""
    raw = np.genfromtxt(path, delimiter=",", names=True)
    if raw.dtype.names is None:
        raise ValueError("no header of named columns")
    missing = [c for c in COLUMNS if c not in raw.dtype.names]
    if missing:
        raise KeyError(f"no column {missing[0]!r}")
    d = {k: np.atleast_1d(raw[k]) for k in raw.dtype.names}
    if not len(d["arrival_ms"]):
        raise ValueError("no rows")
    for c in COLUMNS:  # (inf and nan as well as text: a cast to int64 would make garbage of them)
        bad = np.flatnonzero(~np.isfinite(d[c]))
        if len(bad):
            raise ValueError(f"{c} of row {int(bad[0])} is not a finite number")
    for c in ("input_tokens", "max_tokens"):
        bad = np.flatnonzero((d[c] < 1) | (d[c] != np.round(d[c])) | (d[c] > MAX_TOKENS))
        if len(bad):
            raise ValueError(f"{c} of row {int(bad[0])} is {d[c][bad[0]]:g}: token counts are whole numbers from 1 "
                             f"to {MAX_TOKENS:,}")
    for c in ("ttft_ms", "e2e_ms"):
        bad = np.flatnonzero((d["has_error"] == 0) & (d[c] < 0))
        if len(bad):
            raise ValueError(f"{c} of row {int(bad[0])} is {d[c][bad[0]]:g}: a latency is >= 0")
    d["ok"] = d["has_error"] == 0
    d["prompt_id"] = prompt_ids(d["input_tokens"].astype(np.int64))
    return d


def _mode(x: np.ndarray) -> int:
    """The most frequent value (the smallest of equally frequent ones); -1 for none. (Not
    ``np.bincount``: its array is as long as the largest value.)"""
    if not len(x):
        return -1
    u, n = np.unique(x, return_counts=True)
    return int(u[n.argmax()])


def prompt_ids(tokens: np.ndarray) -> np.ndarray:
    """Which of the 100 prompts each row sent: row % 100 (inference-perf sends them in turn), put
    right where concurrent senders swapped neighbours (the row's length is another nearby
    prompt's); a row matching none gets a prompt of its own (it never hits the cache)."""
    base = np.arange(len(tokens)) % NUM_PROMPTS
    canon = np.array([_mode(tokens[base == k]) for k in range(NUM_PROMPTS)])
    pid = base.copy()
    for i in np.flatnonzero(canon[base] != tokens):
        for step in (1, -1, 2, -2, 3, -3):
            k = (base[i] + step) % NUM_PROMPTS
            if canon[k] == tokens[i]:
                pid[i] = k
                break
        else:
            pid[i] = NUM_PROMPTS + i
    return pid


def specs_for(d: dict):
    from servesim.inputs.workload import RequestSpecs

    prompt = d["input_tokens"].astype(np.int64)
    return RequestSpecs(arrival_s=(d["arrival_ms"] - d["arrival_ms"][0]) / 1e3, prompt_tokens=prompt,
                        output_tokens=d["max_tokens"].astype(np.int64), prefix_group=d["prompt_id"].astype(np.int64),
                        prefix_tokens=prompt.copy())


def replay_scenario(n: int, cost: dict, model: str = "meta-llama/Llama-2-7b-hf", tp: int = 1,
                    blocks: int | None = 7462, max_num_seqs: int = 128, max_num_batched_tokens: int = 2048):
    """The runs' vLLM configuration as a scenario (the requests come from ``specs_for``); ``blocks``
    None: servesim sizes the KV cache (gpu_memory_utilization 0.9, as vLLM's default). The defaults
    are the study's settings (every run's exp-config.yaml)."""
    from servesim.inputs.scenario import scenario_from_dict

    memory = {"block_size": 16} if blocks is None else {"block_size": 16, "num_gpu_blocks": blocks}
    return scenario_from_dict({
        "name": "vllm-h100-replay", "model": model,
        "hardware": {"gpu": "h100-sxm", "tp": tp, "dtype": "fp16"},
        "memory": memory,
        "policy": {"name": "chunked_prefill", "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": max_num_batched_tokens, "prefix_caching": True},
        "workload": {"num_requests": n, "arrival": {"process": "poisson", "rate_rps": 1.0},  # placeholders
                     "prompt_tokens": {"dist": "fixed", "value": 16}, "output_tokens": {"dist": "fixed", "value": 16}},
        "cost": {"engine": "vllm-v1", **cost}})


def replay(workload: str, d: dict, cost: dict, run: RunFile | None = None, model: str | None = None) -> tuple:
    """Simulated (TTFT, E2E) per request in ms, in the data's row order (a calibration run; or
    ``run`` on ``model``). Rows are replayed in order of their send times (concurrent senders
    may write a table a little out of order)."""
    from servesim.simulation import simulate

    n = len(d["arrival_ms"])
    if run is None:
        sc = replay_scenario(n, cost)
    else:
        sc = replay_scenario(n, cost, model, run.tp, LOGGED_BLOCKS.get((run.model_stem, run.tp)))
    sent = np.argsort(d["arrival_ms"], kind="stable")  # (identity for a table in send order)
    res = simulate(sc, specs=specs_for({k: d[k][sent] for k in ("arrival_ms", "input_tokens", "max_tokens",
                                                                  "prompt_id")}))
    rq = res.requests
    if not np.all(rq["status"] == "completed"):
        raise RuntimeError(f"{workload}: not every request completed")
    order = np.argsort(rq["request_id"])  # (request ids in arrival order: the sorted rows)
    arr = rq["arrival_s"][order]
    ttft, e2e = np.empty(n), np.empty(n)
    ttft[sent] = (rq["first_token_s"][order] - arr) * 1e3
    e2e[sent] = (rq["finish_s"][order] - arr) * 1e3
    return ttft, e2e


# ---------------------------------------------------------------- metrics
def stats(x: np.ndarray) -> dict:
    """Mean and p99; nan for no rows."""
    if not len(x):
        return {"mean": math.nan, "p99": math.nan}
    return {"mean": float(np.mean(x)), "p99": float(np.percentile(x, 99))}


def metrics(ttft_ms, e2e_ms, max_tokens) -> dict:
    """TTFT, TPOT and E2E statistics; TPOT over the requests of more than one output token (as
    vLLM's benchmark has it: one token has no time per output token)."""
    many = max_tokens > 1
    tpot = (e2e_ms[many] - ttft_ms[many]) / (max_tokens[many] - 1)
    return {"ttft": stats(ttft_ms), "tpot": stats(tpot), "e2e": stats(e2e_ms)}


def _error(sim: float, meas: float) -> float:
    """sim / meas - 1; nan where it has no meaning (no figure, or a measured zero)."""
    return sim / meas - 1 if meas and math.isfinite(meas) and math.isfinite(sim) else math.nan


def _cell(m: float, p: float, e: float) -> str:
    return f"{m:.1f} / {p:.1f} ({e * 100:+.1f}%)" if math.isfinite(e) else f"{m:.1f} / {p:.1f}"


def units(runs: dict, workloads=WORKLOADS) -> list:
    """(workload, label, slice) of every load stage, then (workload, "all", whole run)."""
    out = [(w, lab, slice(lo, hi)) for w in workloads for lo, hi, lab in STAGES[w]]
    return out + [(w, "all", slice(None)) for w in workloads]


TABLE_HEAD = ("| run | stage | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | E2E mean | E2E p99 |\n"
              "|---|---|---|---|---|---|---|---|")


def compared(run: str, stage: str, m: dict, p: dict) -> tuple:
    """One table row of measured ``m`` against simulated ``p`` (``metrics``), and its relative
    errors {metric: {stat: err}}."""
    e = {k: {q: _error(p[k][q], m[k][q]) for q in ("mean", "p99")} for k in METRICS}
    row = f"| {run} | {stage} | " + " | ".join(
        _cell(m[k][q], p[k][q], e[k][q]) for k in METRICS for q in ("mean", "p99")) + " |"
    return row, e


def table(meas: dict, sim: dict, runs: dict, workloads=WORKLOADS) -> tuple:
    """Per stage and whole run: (rows of measured / simulated / error, {unit: {metric: {stat: err}}})."""
    rows, errs = [], {}
    for w, lab, s in units(runs, workloads):
        n = runs[w]["max_tokens"][s]
        row, errs[(w, lab)] = compared(w, lab, metrics(meas[w][0][s], meas[w][1][s], n),
                                       metrics(sim[w][0][s], sim[w][1][s], n))
        rows.append(row)
    return TABLE_HEAD + "\n" + "\n".join(rows), errs


# ---------------------------------------------------------------- late requests
NEIGHBOURS = 50  # a request's TTFT is set against the median of the 50 sent around it


def late_rows(ttft_ms: np.ndarray) -> np.ndarray:
    """The requests late on their own: TTFT more than half the run's median TTFT above the median
    of the ``NEIGHBOURS`` requests sent around it (in send order; at the ends, the nearest ones).
    Neighbours share the load, the queue and the engine's state, so a simulated request is late
    this way only when its own arrival is (a burst); a measured one also when something outside
    the engine held it alone (the client, the network, the host)."""
    x = np.asarray(ttft_ms, dtype=float)
    if not len(x):
        return np.zeros(0, dtype=bool)
    half = NEIGHBOURS // 2
    span = 2 * half + 1
    if len(x) <= span:  # (fewer rows than a window: every row's neighbours are the whole run)
        local = np.full(len(x), np.median(x))
    else:
        # the window of the span rows nearest each one: centred on it, shifted inside the run at its
        # ends (the ends padded with their own value made a first request its own neighbours' median,
        # so a cold first request, late on its own, was never counted)
        medians = np.median(np.lib.stride_tricks.sliding_window_view(x, span), axis=1)
        local = medians[np.clip(np.arange(len(x)) - half, 0, len(x) - span)]
    return x - local > 0.5 * np.median(x)


def late_requests(meas_ttft: np.ndarray, sim_ttft: np.ndarray) -> dict:
    """Measured against simulated, for one run's rows (send order): the share of requests late on
    their own (``late_rows``), each against half its own run's median ("threshold_ms": measured,
    simulated), and the p99 TTFT of both without the rows late in the measurement."""
    late = late_rows(meas_ttft)
    keep = ~late if (~late).any() else np.ones(len(late), dtype=bool)
    return {"share": (float(late.mean()), float(late_rows(sim_ttft).mean())),
            "p99_without": (stats(meas_ttft[keep])["p99"], stats(sim_ttft[keep])["p99"]),
            # (each side's rows are late against half its own run's median, ``late_rows``: the two differ)
            "threshold_ms": (0.5 * float(np.median(meas_ttft)), 0.5 * float(np.median(sim_ttft)))}


def errors(data: Path) -> tuple:
    """The shipped default (``vllm-v1`` profile, the H100 calibration) replayed on every run in
    the folder (``discover``), client-side: (table text, {(run, stage): {metric: {stat: relative
    error}}}, per run {metric: {stat: (measured, simulated)}} over the whole run and its requests
    late on their own ("late": ``late_requests``), per run its notes: a model not found, failed
    rows). A run is keyed by ``RunFile.label``; its figures
    cover the rows that did not fail at the client."""
    whole, notes, rows_text, errs = {}, {}, [], {}
    for run in discover(data):
        model = model_for(run.model_stem, data)
        if model is None:
            notes[run.label] = [f"{run.path.name}: no model named {run.model_stem!r} in the catalog and no "
                                f"{run.model_stem}-config.json beside it: not replayed"]
            continue
        try:
            d = load_file(run.path)
        except (KeyError, ValueError, IndexError) as e:  # (a table of another layout: named, not a traceback)
            notes[run.label] = [f"{run.path.name}: not read as a run table ({type(e).__name__}: {e}); the columns "
                                f"are {', '.join(COLUMNS)}: not replayed"]
            continue
        ok = d["ok"]
        try:
            ttft, e2e = replay(run.label, d, {}, run, model)
        except (InputError, RuntimeError) as e:  # (a model that does not fit, a request it rejects: named)
            notes[run.label] = [f"{run.path.name} on {model} at TP {run.tp}: not replayed ({e})"]
            continue
        meas, sim = (d["ttft_ms"], d["e2e_ms"]), (ttft, e2e)
        failed = float(1 - ok.mean())
        notes[run.label] = ([f"{failed:.0%} of its requests failed at the client (replayed, left out of the "
                             "figures); over 10%, the run was overloaded, and its latencies are the survivors'"]
                            if failed > 0 else [])
        n = len(ok)
        stages = stages_of(run, n)  # then the whole run, unless it is the one stage already
        for lo, hi, lab in stages if stages[0][2] == "whole run" else (*stages, (0, n, "all")):
            s = np.zeros(n, dtype=bool)
            s[lo:hi] = True
            s &= ok
            if not s.any():
                continue
            m = metrics(meas[0][s], meas[1][s], d["max_tokens"][s])
            p = metrics(sim[0][s], sim[1][s], d["max_tokens"][s])
            row, errs[(run.label, lab)] = compared(run.label, lab, m, p)
            rows_text.append(row)
            if hi - lo == n:  # (the last unit)
                whole[run.label] = {k: {q: (m[k][q], p[k][q]) for q in ("mean", "p99")} for k in METRICS}
                whole[run.label]["late"] = late_requests(meas[0][s], sim[0][s])
    return TABLE_HEAD + "\n" + "\n".join(rows_text), errs, whole, notes
