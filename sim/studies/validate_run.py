"""``servesim validate-run``: replay a vLLM serving benchmark's requests through a scenario and
compare the measured latency distributions with the simulated ones.

The replay takes the benchmark's per-request prompt and output lengths (its successful
requests) and its arrivals: the recorded send times when the file has ``start_times``; else the
process the file states (``request_rate`` with ``burstiness``: Poisson at 1, gamma with CV
1/sqrt(burstiness) otherwise, evenly spaced at inf; ``max_concurrency`` with an infinite rate: that
many closed-loop clients; an infinite rate alone: all at once). The scenario gives everything
else (model, GPU, parallelism, policy). The run is a normal scenario run (``DIR/scenario.yaml``
replays ``DIR/replay.csv``; its output files are in ``DIR/run``).

Compared: TTFT, TPOT ((E2E - TTFT) / (output - 1), output > 1), ITL (every gap between streamed
tokens) and E2E, at the mean and percentiles ``PERCENTILES``, with the error
(simulated - measured) / measured, over the requests the simulation completed on both sides; per
request (request i of the replay is request i of the benchmark, by send order), where the replay sends
each request when the benchmark did (recorded send times, or all at once), the median absolute
relative error of TTFT and E2E; and the throughputs. The benchmark measures
at the client (HTTP, the API server's tokenization and streaming included); servesim prices engine
steps only, so a constant gap in TTFT at low load is that front-end time.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np

from servesim.errors import InputError
from servesim.inputs.files import regular_file
from servesim.outputs.rundir import gpu_label
from servesim.outputs.stats import offered_rate
from servesim.outputs.writer import json_text
from servesim.inputs.scenario import Scenario, load_scenario, read_yaml, scenario_from_dict, scenario_to_yaml
from servesim.inputs.specs import get_model
from servesim.inputs.vllm_result import BenchResult, read_vllm_result

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)
METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}
FAILURES_SHOWN = 10  # failed requests named in validation.json (report.md: the first 3)


# ---------------------------------------------------------------- the replay
def replay_workload(res: BenchResult, csv_path: Path, block_size: int = 16,
                    max_context_tokens: int | None = None) -> tuple[dict, str, np.ndarray]:
    """(workload mapping, how arrivals were replayed, benchmark index of each replayed request in
    order); writes the requests' lengths (and send times) to ``csv_path``, or, when the requests
    say which prompt they sent (``res.prompt_id``), to ``replay.jsonl`` beside it as a trace with
    block hash ids (``write_prompt_trace``)."""
    idx = np.flatnonzero(res.ok)
    if len(idx) == 0:
        raise InputError(f"{res.path}: no request succeeded; nothing to replay")
    n = len(idx)
    prompt, output = res.input_tokens[idx], res.output_tokens[idx]
    trace = {"path": str(csv_path.resolve()), "format": "csv"}
    if res.sent_s is not None:
        order = idx[np.argsort(res.sent_s[idx], kind="stable")]
        t = res.sent_s[order]
        offered = offered_rate(t)
        how = "the recorded send times" + (f" ({offered:.3g} req/s)" if offered else "")
        if res.prompt_id is not None:
            ids = res.prompt_id[order]
            path = write_prompt_trace(res, order, csv_path.with_suffix(".jsonl"), block_size, max_context_tokens)
            return ({"trace": {"path": str(path.resolve()), "format": "mooncake", "time_unit": "s",
                               "hash_block_tokens": block_size}},
                    how + f"; {len(np.unique(ids[ids >= 0]))} distinct prompts", order)
        rows = zip(t.tolist(), res.input_tokens[order].tolist(), res.output_tokens[order].tolist())
        header = ("arrival_s", "prompt_tokens", "output_tokens")
        work = {"trace": trace}
    else:
        order = idx
        rows = zip(prompt.tolist(), output.tolist())
        header = ("prompt_tokens", "output_tokens")
        rate, b, mc = res.request_rate, res.burstiness, res.max_concurrency
        if math.isinf(rate) and mc is not None:
            arrival = {"process": "closed_loop", "clients": mc, "think_time_s": 0.0}
            how = f"{mc} closed-loop clients (max concurrency {mc}, request rate inf)"
        elif math.isinf(rate):
            arrival = {"process": "all_at_once"}
            how = "all at once (request rate inf)"
        elif math.isinf(b):
            arrival = {"process": "fixed", "rate_rps": rate}
            how = f"evenly spaced at {rate:g} req/s (burstiness inf)"
        elif b == 1.0:
            arrival = {"process": "poisson", "rate_rps": rate}
            how = f"Poisson at {rate:g} req/s"
        else:
            arrival = {"process": "gamma", "rate_rps": rate, "cv": 1 / math.sqrt(b)}
            how = f"gamma at {rate:g} req/s, burstiness {b:g} (CV {1 / math.sqrt(b):.3g})"
        if not math.isinf(rate) and mc is not None:
            how += f"; the benchmark's max concurrency {mc} is not replayed (no start_times in the file)"
        work = {"trace": trace, "arrival": arrival, "num_requests": n}
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return work, how, order


def write_prompt_trace(res: BenchResult, order: np.ndarray, path: Path, block_size: int,
                       max_context_tokens: int | None = None) -> Path:
    """The replayed requests, in send order, as a JSONL trace (``timestamp`` in seconds,
    ``input_length``, ``output_length``, ``hash_ids``): a request's prompt ``p`` gets the ids
    ``p x width + j`` of its blocks ``j`` of ``block_size`` tokens, so requests that sent the same
    prompt name the same blocks and the prefix cache holds them as vLLM's would; a request of
    unknown prompt names none. Blocks past ``max_context_tokens`` get no id (the run clips or
    rejects such a prompt; a table's two-billion-token prompt must not become 134 million ids)."""
    ids = res.prompt_id[order]
    prompt = res.input_tokens[order]
    if max_context_tokens is not None:
        prompt = np.minimum(prompt, max_context_tokens)
    width = int(-(-prompt.max() // block_size)) + 1  # (more than any prompt's blocks: ids never collide)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for t, p, c, o, g in zip(res.sent_s[order].tolist(), res.input_tokens[order].tolist(), prompt.tolist(),
                                 res.output_tokens[order].tolist(), ids.tolist()):
            blocks = list(range(g * width, g * width + -(-c // block_size))) if g >= 0 else []
            fh.write(json.dumps({"timestamp": t, "input_length": p, "output_length": o, "hash_ids": blocks}) + "\n")
    return path


# a file without a workload names the deployment alone (the benchmark's requests replace any
# workload): this stands in for it until they do
PLACEHOLDER_WORKLOAD = ("workload={num_requests: 1, arrival: {process: poisson, rate_rps: 1}, "
                        "prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}")


def load_deployment(scenario_path: str | None, overrides=(), seed: int | None = None) -> Scenario:
    """The scenario whose deployment replays the requests (``load_scenario``); a file without a
    ``workload`` section is taken as it is, as the benchmark's requests replace the workload."""
    extra = []
    if scenario_path is not None:
        data = read_yaml(Path(scenario_path))
        if isinstance(data, dict) and "workload" not in data:
            extra = [PLACEHOLDER_WORKLOAD]
    return load_scenario(scenario_path, extra + list(overrides), seed)


def replay_scenario(sc: Scenario, workload: dict) -> Scenario:
    data = sc.to_dict()
    data["workload"] = {**workload, "clip_to_context": sc.workload.clip_to_context}
    return scenario_from_dict(data)


# ---------------------------------------------------------------- samples and statistics
def measured_samples(res: BenchResult, order: np.ndarray, keep: np.ndarray | None = None) -> dict:
    """Per metric, the benchmark's samples (per-request metrics in replay order); ``keep``: which
    replayed requests count (bool per request of ``order``; the simulation's completed ones), all
    when None."""
    if keep is not None:
        order = order[keep]
    out = res.output_tokens[order]
    multi = out > 1
    tpot = (res.e2e_s[order] - res.ttft_s[order])[multi] / (out[multi] - 1)
    itl = np.concatenate([res.itl_s[i] for i in order]) if len(order) else np.zeros(0)
    return {"ttft": res.ttft_s[order], "tpot": tpot, "itl": itl, "e2e": res.e2e_s[order]}


def simulated_samples(results) -> tuple[dict, np.ndarray]:
    """Per metric, the run's samples, and which requests completed (request id order)."""
    r = results.requests
    ids = np.argsort(r["request_id"])
    done = (r["status"] == "completed")[ids]
    ttft = (r["first_token_s"] - r["arrival_s"])[ids]
    e2e = (r["finish_s"] - r["arrival_s"])[ids]
    out = r["output_tokens"][ids]
    multi = done & (out > 1)
    tpot = (e2e - ttft)[multi] / (out[multi] - 1)
    return {"ttft": ttft, "tpot": tpot, "itl": np.asarray(results.tbt_s, float), "e2e": e2e, "done": done}, done


def compare(meas: np.ndarray, sim: np.ndarray) -> dict:
    """Mean and percentiles of both samples, with the relative error of the simulated one."""
    row = {"n_measured": int(len(meas)), "n_simulated": int(len(sim))}
    if not len(meas) or not len(sim):
        return row
    stats = [("mean", float(np.mean(meas)), float(np.mean(sim)))]
    stats += [(f"p{p}", float(np.percentile(meas, p)), float(np.percentile(sim, p))) for p in PERCENTILES]
    for name, m, s in stats:
        row[name] = {"measured_s": m, "simulated_s": s, "error": (s - m) / m if m > 0 else None}
    return row


def paired_error(meas: np.ndarray, sim: np.ndarray, done: np.ndarray) -> float | None:
    """Median over requests completed in both of |simulated / measured - 1|."""
    ok = done & (meas > 0)
    return float(np.median(np.abs(sim[ok] / meas[ok] - 1))) if ok.any() else None


def gpus(sc: Scenario) -> int:
    pol, hw = sc.policy, sc.hardware
    if pol.name == "pd_split":
        return hw.pp * sum(p.replicas * (p.tp or hw.tp) for p in (pol.prefill, pol.decode))
    return sc.cluster.replicas * hw.tp * hw.pp


# ---------------------------------------------------------------- the study
def _is_table(path) -> bool:
    """A table of requests: a ``.csv`` file, or one of another name but ``.json`` whose first
    character is no ``{`` (a table saved as ``.txt`` or ``.log`` was read as JSON: 'malformed JSON:
    Expecting value')."""
    low = str(path).lower()
    if low.endswith((".csv", ".json")):
        return low.endswith(".csv")
    try:
        with regular_file(path).open("rb") as fh:  # (not a pipe: it may never end)
            head = fh.read(4096)
    except (OSError, InputError):  # (read_vllm_result names what is wrong with the path)
        return False
    return not head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{")


def read_result(result_path: str, columns: dict | None = None, time_unit: str | None = None) -> BenchResult:
    """A vLLM result file (JSON), or a table of measured requests (``.csv``:
    ``servesim.inputs.request_log``, where ``columns`` and ``time_unit`` apply)."""
    if str(result_path).lower().endswith((".yaml", ".yml")):
        # (a scenario given first: the measurement comes first, the scenario second)
        raise InputError(f"{result_path} is a YAML file, not a measurement: validate-run takes the measured requests "
                         "first (a vLLM result, .json, or a table of requests, .csv), then the scenario: "
                         "servesim validate-run RESULT SCENARIO.yaml")
    if _is_table(result_path):
        from servesim.inputs.request_log import read_request_log

        return read_request_log(result_path, columns, time_unit)
    if columns or time_unit:
        flag = "--columns" if columns else "--time-unit"
        raise InputError(f"{flag}: it reads a table of requests (a .csv file); {result_path} is read as a vLLM "
                         "result (JSON), whose fields have fixed names")
    return read_vllm_result(result_path)


def validate_run(result_path: str, scenario_path: str | None, out_dir: str | Path, overrides=(),
                 seed: int | None = None, progress=None, columns: dict | None = None,
                 time_unit: str | None = None) -> dict:
    """Replay, simulate, compare and write ``out_dir``: replay.csv, scenario.yaml, run/,
    validation.json, report.md, qq.png and cdf.png (+ .svg). Returns validation.json's content.
    ``result_path``: a vLLM result (JSON) or a table of measured requests (CSV; ``read_result``)."""
    from servesim.simulation import simulate

    out = Path(out_dir)
    res = read_result(result_path, columns, time_unit)
    sc = load_deployment(scenario_path, list(overrides), seed)
    ctx = get_model(sc.model).max_context_tokens
    work, how, order = replay_workload(res, out / "replay.csv", sc.memory.block_size, ctx)
    for stale in ("replay.csv", "replay.jsonl"):  # (an earlier run's replay of the other kind, into this --out)
        if stale != Path(work["trace"]["path"]).name:
            (out / stale).unlink(missing_ok=True)
    replay = replay_scenario(sc, work)
    (out / "scenario.yaml").write_text(scenario_to_yaml(replay))
    results = simulate(replay, progress=progress)
    results.write(out / "run")
    sim, done = simulated_samples(results)
    # (request i of the run is request order[i] of the measurement: the replay sends them in that order)
    assert len(done) == len(order), (len(done), len(order))
    paired = measured_samples(res, order)  # every replayed request, for the per-request errors
    # the statistics compare the same requests on both sides: those the simulation completed (a
    # request it rejected has no simulated latency; the benchmark's would skew the measured side)
    meas = measured_samples(res, order, done)
    s = results.summary
    rate = (how if res.sent_s is not None else
            f"{res.request_rate:g} req/s" if not math.isinf(res.request_rate) else
            f"max concurrency {res.max_concurrency}" if res.max_concurrency else "all at once")
    policy = sc.policy.name + (f" ({sc.policy.preset})" if sc.policy.preset else "")
    same_arrivals = res.sent_s is not None or (math.isinf(res.request_rate) and res.max_concurrency is None)
    report = {
        "result": str(result_path), "scenario": str(scenario_path) if scenario_path else "default",
        "model": sc.model, "result_model_id": res.model_id, "gpu": gpu_label(sc.hardware.gpu), "gpus": gpus(sc),
        "policy": policy, "rate": rate, "arrivals": how,
        "requests": {"in_file": len(res), "failed": int((~res.ok).sum()),
                     "failed_requests": list(res.failures[:FAILURES_SHOWN]), "replayed": int(len(order)),
                     "simulated_completed": int(s["completed"]), "simulated_rejected": int(s["rejected"])},
        "metrics": {k: compare(meas[k], sim[k] if k in ("tpot", "itl") else sim[k][done]) for k in METRICS},
        # (per request only where each request arrived when it was sent: the recorded send times, or all
        # at once; arrivals drawn from a rate send request i at another time than the benchmark did)
        "paired_median_abs_error": {k: paired_error(paired[k], sim[k], done) if same_arrivals else None
                                    for k in ("ttft", "e2e")},
        "per_request_compared": same_arrivals,
        "throughput": {
            "measured": {"requests_per_s": res.throughput.get("request_throughput"),
                         "output_tokens_per_s": res.throughput.get("output_throughput"),
                         "total_tokens_per_s": res.throughput.get("total_token_throughput")},
            "simulated": {"requests_per_s": s["throughput_rps"], "output_tokens_per_s": s["output_tokens_per_s"],
                          "total_tokens_per_s": s["total_tokens_per_s"]}},
        "prefix_cache_hit_rate": s["kv"]["prefix_cache_hit_rate"],
        # what priced the simulation: the engine profile and the kernel calibration (cost.calibration)
        "calibration": {"setting": sc.cost.calibration,
                        "engine": ", ".join(dict.fromkeys(c["engine"] for c in s["cost"].values())),
                        "pools": s["cost"]},
        "source": "vllm" if res.columns is None else "table",
        "columns": res.columns,
        "replay": Path(work["trace"]["path"]).name,  # replay.csv, or replay.jsonl with the prompts' blocks
    }
    report["warnings"] = (itl_warnings(res, order) + replay_warnings(res, order, sc, ctx)
                          + rejected_warnings(results, len(order))
                          + behind_warnings(results.summary))
    (out / "validation.json").write_text(json_text(report, indent=2))
    title = (f"{_source(report)} vs servesim: {sc.model} on {gpus(sc)} x {gpu_label(sc.hardware.gpu)}\n"
             f"policy {policy}; rate: {rate}; {report['requests']['replayed']} requests; "
             f"engine profile {report['calibration']['engine']}, cost.calibration {sc.cost.calibration}")
    data = {k: {"metric": METRICS[k], "measured": meas[k], "simulated": sim[k] if k in ("tpot", "itl")
                else sim[k][done]} for k in METRICS}
    figures = _figures(data, title, out)
    (out / "report.md").write_text(report_md(report, figures))
    return report


def other_model(r: dict) -> bool:
    """Whether the benchmark's ``model_id`` names another model than the scenario's (its last path
    part not in the scenario's model, a catalog alias read as its entry): report.md notes it, and
    the terminal, where the errors are read, says it too."""
    from servesim.inputs.specs import MODEL_ALIASES

    mid = r.get("result_model_id")
    if not isinstance(mid, str) or not mid.strip():
        return False
    model = str(r["model"])
    names = {model.lower(), MODEL_ALIASES.get(model, model).lower()}
    ran = {mid, MODEL_ALIASES.get(mid, mid)}
    return not any(x.rstrip("/").split("/")[-1].lower() in name for x in ran for name in names)


def itl_warnings(res: BenchResult, order: np.ndarray) -> list:
    """Replayed requests with more gaps between streamed chunks (``itls``) than their output tokens
    minus one: n tokens have at most n - 1 gaps, so the file's output_lens or itls is off (an
    output recounted by another tokenizer, a chunk split), and the measured ITL samples are not
    one per token gap. The first such request is named by its index in the file."""
    idx = sorted(int(i) for i in order if len(res.itl_s[i]) > max(int(res.output_tokens[i]) - 1, 0))
    if not idx:
        return []
    i, n = idx[0], int(res.output_tokens[idx[0]])
    return [f"{len(idx)} of {len(order)} replayed requests have more itls entries than output tokens minus one: "
            f"request {i} has {len(res.itl_s[i])} (itls[{i}]) but {n} output tokens (output_lens[{i}]), which "
            f"have at most {max(n - 1, 0)} gaps between them; the file's output_lens and itls disagree, so its "
            "ITL samples are not one per token gap: check how the benchmark counted output tokens"]


def replay_warnings(res: BenchResult, order: np.ndarray, sc: Scenario, ctx: int) -> list:
    """What makes the comparison unsound, said loudly (stdout, report.md, validation.json):
    requests that succeeded in the benchmark but need more than the simulated model's context
    (the engine refuses those, so the benchmark did not serve this model, or served a longer
    max_model_len): the replay clips them to the context (``workload.clip_to_context``) or
    rejects them, and their simulated latencies are not the measured requests'. ``ctx``: the
    model's context in tokens."""
    need = res.input_tokens[order] + res.output_tokens[order]
    over = int((need > ctx).sum())
    if not over:
        return []
    fate = ("clipped to it in the simulation (workload.clip_to_context), so their simulated latencies are not "
            "those of the requests measured" if sc.workload.clip_to_context else "rejected by the simulation")
    return [f"{over} of {len(order)} replayed requests need more than {sc.model}'s context of {ctx:,} tokens "
            f"(prompt + output, up to {int(need.max()):,}): {fate}; the benchmark served them, so it did not run "
            "this model as the scenario describes it: check the scenario's model"]


def behind_warnings(summary: dict) -> list:
    """The simulated replay fell behind the benchmark's arrivals: the run's own keep-up warning
    (``checks.run_warnings``' not_keeping_up, ``summary["workload"]["keep_up"]``), worded for a
    replay, whose rate is the benchmark's to keep, not to lower. Its latencies then grow with the
    benchmark's length, and their errors say more about that backlog than about the engine's
    speed. Too short to tell (the rule's own ``too_short_to_tell``: the shortfall the replay's
    arrivals and service times make with no queue) it says so and no more."""
    from servesim.outputs.metrics import too_short_to_tell

    if not any(w.get("code") == "not_keeping_up" for w in summary.get("warnings") or ()):
        return []
    keep = summary["workload"]["keep_up"]
    left = (f"over the second half of the benchmark's arrivals the simulated requests left at {keep['ratio']:.0%} "
            "of the rate they arrived")
    if too_short_to_tell(keep["ratio"], keep.get("warmup")):
        return [f"{left}, but the replay is too short to tell whether the simulated deployment keeps up with the "
                f"benchmark's rate: that half lasts {keep['window_s']:.3g} s, and with no queue at all its arrivals "
                f"and service times make a shortfall of up to {keep['warmup']:.0%} by themselves"]
    return [f"the simulated deployment fell behind the benchmark's rate: {left}, so its queue grew through the "
            "replay and its latencies with the benchmark's length; if the benchmarked server kept up, check that "
            "the scenario describes it (GPU, replicas, parallelism, the policy's batch limits)"]


def rejected_warnings(results, n: int) -> list:
    """The requests the benchmark served that the simulation rejected: how many, and their reasons
    (up to three kinds, a kind being a reason with its numbers left out, each with one example and
    its count). Their latencies are left out of both sides of the statistics."""
    r = results.requests
    rejected = r["status"] == "rejected"
    k = int(rejected.sum())
    if not k:
        return []
    kinds: dict = {}
    for reason in r["reason"][rejected].tolist():
        kinds.setdefault(re.sub(r"\d[\d,.]*", "#", str(reason)), [str(reason), 0])[1] += 1
    shown_kinds = sorted(kinds.values(), key=lambda x: -x[1])[:3]
    why = "; ".join(f"{c} like '{ex}'" for ex, c in shown_kinds) + (
        f"; {len(kinds) - 3} more kinds" if len(kinds) > 3 else "")
    return [f"{k} of {n} replayed requests were rejected by the simulation, which the benchmark served ({why}; "
            "each request's reason is in run/requests.csv): the scenario does not serve this load as the "
            f"deployment did, and the statistics compare only the {n - k} requests the simulation completed"]


def _api_server(r: dict) -> bool:
    """Whether the simulation added an API server's time to TTFT and E2E (any pool's)."""
    return any(c["api_server"]["request_s"] or c["api_server"]["per_output_token_s"]
               for c in r["calibration"]["pools"].values())


def calibration_text(cal: dict) -> str:
    """One line for ``validation.json`` ``calibration``: per pool, the engine profile with its CPU
    overhead and API-server figures, then the kernel efficiencies (cost.calibration and their
    provenance)."""
    def pool(c: dict) -> str:
        o, api = c["overhead"], c["api_server"]
        cpu = (f"CPU {o['step_s'] * 1e3:.3g} ms a step"
               + (f" + {o['per_seq_s'] * 1e3:.3g} ms a sequence" if o["per_seq_s"] else "")
               + (f" + {o['per_token_s'] * 1e6:.3g} us a token" if o["per_token_s"] else "")
               + f", {o['overlap']:.0%} of it overlapping the GPU ({o['source']})")
        front = (f"API server {api['request_s'] * 1e3:.3g} ms a request + {api['per_output_token_s'] * 1e3:.3g} ms an "
                 "output token" if api["request_s"] or api["per_output_token_s"] else "no API server")
        return (f"engine profile {c['engine']} ({cpu}; {front}); kernels: cost.calibration {cal['setting']}, "
                f"{c['efficiencies']}")

    texts = {name: pool(c) for name, c in cal["pools"].items()}
    parts = ([next(iter(texts.values()))] if len(set(texts.values())) == 1 else  # (pools priced alike: once)
             [f"{name}: {t}" for name, t in texts.items()])
    return " | ".join(parts)


def _figures(data: dict, title: str, out: Path) -> list:
    from servesim.plots import validation
    from servesim.plots.figures import save, subplots

    written = []
    for stem, draw, what in (("qq", validation.qq, "Q-Q"), ("cdf", validation.cdf, "CDFs")):
        fig, axes = subplots(2, 2, figsize=(11, 9.5))
        for ax, k in zip(axes.ravel(), METRICS):
            draw(data[k], ax)
        fig.suptitle(f"{title}\n{what}: measured (x) vs simulated (y)" if stem == "qq" else f"{title}\n{what}",
                     fontsize="medium")
        written.append(save(fig, out / stem)[0].name)
    return written


def _source(r: dict) -> str:
    return "measured requests" if r.get("source") == "table" else "vLLM benchmark"


def failed_text(q: dict) -> str:
    """'request 5: Bad Request ...; ...; and N more': the first three failed requests of
    validation.json ``requests``; '' when none failed."""
    named = (q.get("failed_requests") or [])[:3]
    more = q["failed"] - len(named)
    return "; ".join(named) + (f"; and {more} more" if named and more > 0 else "")


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.1f}"


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def report_md(r: dict, figures: list) -> str:
    q = r["requests"]
    failed = f": {failed_text(q)}" if q.get("failed_requests") else ""
    src = (f"- benchmark result: `{r['result']}` (model_id {r['result_model_id']!s}); scenario: `{r['scenario']}`"
           if r.get("source") != "table" else
           f"- measured requests: `{r['result']}`, columns "
           + ", ".join(f"{k} = `{v}`" for k, v in r["columns"].items())
           + f" (no gaps between streamed tokens in a table: no ITL samples); scenario: `{r['scenario']}`")
    lines = [f"# {_source(r)} vs servesim: {r['model']} on {r['gpus']} x {r['gpu']}, {r['policy']}, {r['rate']}", "",
             src,
             f"- requests: {q['in_file']} in the file, {q['failed']} failed there (left out{failed}), "
             f"{q['replayed']} replayed; simulated: {q['simulated_completed']} completed, "
             f"{q['simulated_rejected']} rejected",
             f"- arrivals: {r['arrivals']}",
             f"- calibration: {calibration_text(r['calibration'])}",
             f"- prefix-cache hit rate in the simulation: {r['prefix_cache_hit_rate'] * 100:.1f}%",
             "- error = (simulated - measured) / measured. "
             + ("Both sides are the client's: the benchmark measures HTTP, tokenization and streaming with the "
                "engine; servesim adds its engine profile's API-server time (summary.json api_server_s) to TTFT "
                "and E2E. " if _api_server(r) else
                "The benchmark measures at the client (HTTP, tokenization and streaming with the engine); the "
                "simulated TTFT and E2E are the engine's alone (no API server: cost.api_server false, or an engine "
                "profile without one), so the front end's time shows as error. ")
             + ("The table names each request's prompt (prompt_id): requests that sent the same prompt name the "
                "same KV blocks, which the scenario's prefix cache (policy.prefix_caching) holds as vLLM's would."
                if r.get("replay") == "replay.jsonl" else
                "The file carries no prompt text, so servesim cannot see which requests share a prefix: a "
                "benchmark of shared prompts hits vLLM's prefix cache where the replay does not (its hit rate "
                "above; a table can name them in a prompt_id column)."), ""]
    for w in r.get("warnings") or ():
        lines += [f"**Warning:** {w}.", ""]
    if other_model(r):
        lines += [f"**Note:** the benchmark ran `{r['result_model_id']}`, the scenario simulates `{r['model']}`.", ""]
    for k, name in METRICS.items():
        m = r["metrics"][k]
        lines += [f"## {name} ({m['n_measured']} measured, {m['n_simulated']} simulated samples)", ""]
        if "mean" not in m:
            lines += ["no samples on one side", ""]
            continue
        lines += ["| stat | measured (ms) | simulated (ms) | error |", "|---|---:|---:|---:|"]
        for stat in ["mean"] + [f"p{p}" for p in PERCENTILES]:
            v = m[stat]
            lines.append(f"| {stat} | {_ms(v['measured_s'])} | {_ms(v['simulated_s'])} | {_pct(v['error'])} |")
        pe = r["paired_median_abs_error"].get(k)
        if pe is not None:
            lines.append(f"\nper request (the same request in both): median |error| {pe * 100:.1f}%")
        elif k in r["paired_median_abs_error"] and r.get("per_request_compared") is False:
            lines.append("\nper request: not compared (the arrivals are drawn from the stated rate, so each request "
                         "reaches the simulated server at another time than it reached the benchmark's)")
        lines.append("")
    t = r["throughput"]
    lines += ["## Throughput", "", "| | measured | simulated |", "|---|---:|---:|"]
    for key, label in (("requests_per_s", "requests/s"), ("output_tokens_per_s", "output tokens/s"),
                       ("total_tokens_per_s", "total tokens/s (input + output)")):
        mv = t["measured"][key]
        lines.append(f"| {label} | {'-' if mv is None else f'{mv:.2f}'} | {t['simulated'][key]:.2f} |")
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    return "\n".join(lines)
