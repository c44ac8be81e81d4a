"""The ``servesim`` command: parse (``sim/cli/parser.py``), run the subcommand's handler, map
errors to exit codes: 0 ok, 2 bad input, 1 bug. ``run`` and ``validate`` are handled here."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path

from servesim.cli.parser import parse
from servesim.core.decisions import format_decisions
from servesim.errors import InputError, PluginError, Terminated, one_line, shown_path
from servesim.errors import clip as clip_text
from servesim.outputs.checks import format_warnings, head_of_line_fix, recompute_share
from servesim.outputs.intervals import (BOUNDED, NONNEGATIVE, PM, UP_TO_REQUESTS, Interval, count_bounds,
                                        format_interval, rate_bounds, seeds_text)
from servesim.outputs.profile import format_profile
from servesim.outputs.progress import interactive
from servesim.outputs.verdicts import DRAW_ONE, NOTHING_DRAWN, attainment_pct, seeds_alike_figures
from servesim.outputs.wording import plural, slo_limits


def _slo_text(slo: dict) -> str:
    """"TTFT <= 1 s, TPOT <= 50 ms" (``wording.slo_limits``, as compare and report.md write it),
    leaving out limits that are not set (null)."""
    return slo_limits(slo) or "no limits set: every completed request counts"


def _fmt_s(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1e3:9.1f} ms" if v < 10 else f"{v:9.2f} s "


def format_summary(s: dict) -> str:
    lines = [f"scenario {s['scenario']}: {plural(s['num_requests'], 'request')}, {s['completed']} completed, "
             f"{s['rejected']} rejected, {s['unfinished']} unfinished, {plural(s['preemptions'], 'preemption')}",
             f"simulated {s['sim_time_s']:.1f} s in {s['wall_time_s']:.2f} s wall", "",
             f"{'latency':<8}{'mean':>13}{'p50':>13}{'p90':>13}{'p99':>13}"]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("tbt_s", "ITL"), ("e2e_s", "E2E"),
                       ("queue_s", "queue")):
        d = s[key]
        lines.append(f"{label:<8}" + "".join(f"{_fmt_s(d[k]):>13}" for k in ("mean", "p50", "p90", "p99")))
    api = s.get("api_server_s") or {}
    if api.get("mean"):  # the engine profile's API server: TTFT and E2E are client-side
        lines.append(f"{'API':<8}" + "".join(f"{_fmt_s(api[k]):>13}" for k in ("mean", "p50", "p90", "p99")))
        engines = sorted({c.get("engine", "?") for c in (s.get("cost") or {}).values()})
        lines.append(f"(TTFT and E2E as a client measures them: they include the API server's time, row API; "
                     f"engine {', '.join(engines)})")
    multi = len(s.get("classes") or {}) > 1
    slo_note = "each request against its class's SLO" if multi else _slo_text(s["slo"])
    lines += ["",
              f"throughput    {s['throughput_rps']:.2f} req/s, {s['output_tokens_per_s']:.0f} output tok/s, "
              f"{s['total_tokens_per_s']:.0f} total tok/s (input + output)",
              f"goodput       {s['goodput_rps']:.2f} req/s; SLO attainment "
              + ("n/a (no request arrived)" if s["slo_attainment"] is None else
                 f"{attainment_pct(s['slo_attainment'])} ({slo_note})")]
    p, u = s["phases"], s["utilization"]
    busy = p["prefill_time_s"] + p["decode_time_s"] + p["mixed_time_s"]
    share = (lambda x: 100 * x / busy) if busy else (lambda x: 0.0)
    # tokens count every step; steps are split by kind (mixed steps hold both kinds of tokens)
    # (padded tokens, static batching's or vllm-v0.2.3's prompt batches, are priced as real ones: said when any)
    pad = f", padding {p['padding_tokens']}" if p.get("padding_tokens") else ""
    lines += [f"phases        tokens: prefill {p['prefill_tokens']}, decode {p['decode_tokens']}{pad}; steps: "
              f"prefill-only "
              f"{p['prefill_steps']} ({p['prefill_time_s']:.1f} s, {share(p['prefill_time_s']):.0f}% of busy), "
              f"decode-only {p['decode_steps']} ({p['decode_time_s']:.1f} s, {share(p['decode_time_s']):.0f}%), "
              f"mixed {p['mixed_steps']} ({p['mixed_time_s']:.1f} s, {share(p['mixed_time_s']):.0f}%)",
              f"utilization   busy {u['busy_fraction'] * 100:.0f}%, mean batch {u['mean_batch_size']:.1f}, "
              f"KV mean {u['kv_usage_mean'] * 100:.0f}% / max {u['kv_usage_max'] * 100:.0f}%, "
              f"MFU {u['mfu'] * 100:.1f}%, MBU {u['mbu'] * 100:.1f}%"]
    hol = s.get("head_of_line") or {}
    if hol.get("budget_blocked_requests") and not any(w.get("code") == "head_of_line" for w in s.get("warnings") or ()):
        # (waits too short for the head_of_line warning, which says more, are still shown)
        n = hol["budget_blocked_requests"]
        lines.append(f"head-of-line  {plural(n, 'prompt')} waited at the head of the queue, "
                     f"{hol['budget_blocked_s']:.1f} s in all, for room in the token budget next to running decodes "
                     f"(their whole prompt fits policy.max_num_batched_tokens only alone): {head_of_line_fix()}")
    lines += _format_memory(s)
    lines += format_decisions(s.get("decisions"))
    lines += _format_economics(s)
    lines += _format_workload(s)
    lines += format_profile(s)
    lines += format_seeds(s.get("seeds"))
    lines += format_warnings(s.get("warnings"))
    return "\n".join(lines)


def format_seeds(sec: dict | None) -> list:
    """The headline figures over ``run --seeds N``: mean +- the 95% interval's half-width."""
    if not sec:
        return []
    f = sec["figures"]

    # a rate of completions is cut at the seeds' mean arrivals per second too (no seed's exceeds
    # its own: "4 (0 to 27) req/s" was printed at 4.5 req/s arrived), as results.csv rows are
    offered = {"offered_rps": (f.get("offered_rps") or {}).get("mean")}
    # and a count of requests at the seeds' mean arrivals (completed + rejected + unfinished of each:
    # "completed 4 (0 to 9)" was printed of 6 requests)
    each = [f[k].get("values") or [] for k in UP_TO_REQUESTS if k in f]
    if len(each) == len(UP_TO_REQUESTS) and len({len(v) for v in each}) == 1 and each[0] \
            and all(isinstance(x, (int, float)) for v in each for x in v):
        offered["num_requests"] = sum(map(sum, each)) / len(each[0])

    def iv(name, scale=1.0, unit=""):
        x = f[name]
        n = x.get("n", len(x["values"]))
        return format_interval(Interval(math.nan if x["mean"] is None else x["mean"],
                                        math.nan if x["ci95"] is None else x["ci95"], n,
                                        bounds=BOUNDED.get(name) or rate_bounds(offered, name)
                                        or count_bounds(offered, name) or NONNEGATIVE),
                               scale, unit)

    seeds = sec["seeds"]
    if seeds_alike_figures(f):  # (every seed the same run: "4.78 ± 0 req/s" claimed a certainty)
        return ["", f"over {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}): every seed gave the same figures, seed "
                    f"{seeds[0]}'s above: nothing in the run is drawn from the seed ({NOTHING_DRAWN}), so the seeds "
                    f"repeat one workload and give no interval over another sample of it ({DRAW_ONE})"]
    lines = ["", f"over {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}; mean {PM} half-width of the 95% Student-t "
                 "interval over the seeds, or the mean (low to high) where that is cut at 0, 100%, the arrivals per "
                 "second or the requests; the figures "
                 f"above are seed {seeds[0]}'s):"]
    lines.append(f"  throughput  {iv('throughput_rps', unit='req/s')}, "
                 f"{iv('output_tokens_per_s', unit='output tok/s')}")
    att = "n/a (no request arrived)" if f["slo_attainment"]["mean"] is None else f"{iv('slo_attainment', 100)}%"
    lines.append(f"  goodput     {iv('goodput_rps', unit='req/s')}; SLO attainment {att}")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E")):
        if f[f"{key}.p50"]["mean"] is None or math.isnan(f[f"{key}.p50"]["mean"]):
            continue
        n = f[f"{key}.p50"].get("n", len(seeds))  # (a seed whose run has no such figure: one-token outputs)
        some = f" (over the {n} of {len(seeds)} seeds that have one)" if n < len(seeds) else ""
        lines.append(f"  {label:<11} p50 {iv(key + '.p50', 1e3, 'ms')}, p99 {iv(key + '.p99', 1e3, 'ms')}{some}")
    lines.append(f"  requests    completed {iv('completed')}, rejected {iv('rejected')}, "
                 f"unfinished {iv('unfinished')}")
    warned = sec.get("warnings") or {}
    if warned:  # (seed 0's are printed below in full; the other seeds' runs may raise others)
        where = {code: "every seed" if len(on) == len(seeds) else seeds_text(on) for code, on in warned.items()}
        lines.append("  warnings    " + "; ".join(f"{code} on {w}" for code, w in where.items()))
    return lines


def _format_memory(s: dict) -> list:
    """Per-pool utilization (P/D split), KV hand-off times, swap traffic and prefix-cache hits."""
    lines = []
    pools = s.get("pools", {})
    if len(pools) > 1:
        for name, u in pools.items():
            lines.append(f"pool {name:<8} {plural(u['replicas'], 'replica')}: busy {u['busy_fraction'] * 100:.0f}%, "
                         f"mean batch {u['mean_batch_size']:.1f}, KV mean {u['kv_usage_mean'] * 100:.0f}%, "
                         f"MFU {u['mfu'] * 100:.1f}%, MBU {u['mbu'] * 100:.1f}%")
    tr = s.get("kv_transfer")
    if tr and tr["count"]:
        t = tr["time_s"]
        lines.append(f"KV hand-off   {plural(tr['count'], 'transfer')}, {tr['bytes'] / 1e9:.1f} GB, mean "
                     f"{_fmt_s(t['mean']).strip()}, p99 {_fmt_s(t['p99']).strip()} (first token until KV landed)")
    for name, pl in s.get("pipeline", {}).items():
        busy = " / ".join(f"{b * 100:.0f}%" for b in pl["stage_busy_fraction"])
        lines.append(f"pipeline      {name}: stages busy {busy} of the run "
                     f"(mean of {plural(pl['replicas'], 'replica')}; idle: no work, or a bubble while the engines' "
                     "steps are on other stages)")
    kv = s.get("kv", {})
    if kv.get("swap_out_bytes"):
        lines.append(f"swap          {kv['swap_out_bytes'] / 1e9:.2f} GB to host, "
                     f"{kv['swap_in_bytes'] / 1e9:.2f} GB back")
    if kv.get("recompute_tokens"):
        lines.append(f"recompute     {kv['recompute_tokens']} KV tokens dropped by preemption, to be computed again "
                     f"({recompute_share(s):.1%} of the tokens computed)")
    if kv.get("prefix_cache_hit_tokens"):
        lines.append(f"prefix cache  {kv['prefix_cache_hit_rate'] * 100:.1f}% of prompt tokens hit "
                     f"({kv['prefix_cache_hit_tokens']} of {kv['prefix_cache_query_tokens']})")
    return lines


def _watts(w: float) -> str:
    """Power in kW, or in MW from 1 MW (7,000 H100s at TDP printed as "7e+03 kW")."""
    return f"{w / 1e3:.3g} kW" if w < 999.5e3 else f"{w / 1e6:.3g} MW"


def _format_economics(s: dict) -> list:
    """What the run's GPUs cost and drew, and the tokens per dollar and per joule."""
    e = s.get("economics")
    if not e:
        return []
    gpus = " + ".join(f"{p['gpus']} x {p['gpu']}" + (f" at ${p['usd_per_gpu_hour']:.2f}/GPU-h"
                                                      if p["usd_per_gpu_hour"] is not None else "")
                      for p in e["pools"].values())
    parts = [gpus + (f" = ${e['usd_per_hour']:.2f}/h" if e["usd_per_hour"] is not None else "")]
    if e["tokens_per_usd"] is not None:
        def usd(v):  # (None: no such tokens completed; "$0 per M" read as free tokens)
            return "n/a" if v is None else f"${v:.3g}" if v < 999.5 else f"${v:,.0f}"  # (not "$4.39e+03")

        parts.append(f"{e['tokens_per_usd'] / 1e6:.3g}M tokens per $ ({usd(e['usd_per_million_input_tokens'])}"
                     f" per M input, {usd(e['usd_per_million_output_tokens'])} per M output tokens)")
    if e["tokens_per_joule"] is not None:
        parts.append(f"{e['tokens_per_joule']:.3g} tokens per J at a mean {_watts(e['mean_power_w'])} "
                     f"(TDP {_watts(e['provisioned_power_w'])})")
    # (each figure that is lacking, by name: a GPU YAML with a price and no power has a price)
    for key, what, field in (("usd_per_gpu_hour", "price per GPU-hour", "gpu_hour_usd"),
                             ("power_w", "board power", "gpu_power_w")):
        lacking = sorted({p["gpu"] for p in e["pools"].values() if p[key] is None})
        if lacking:
            parts.append(f"no {what} for {', '.join(lacking)} (cost.{field} or the GPU YAML)")
    return ["economics     " + "; ".join(parts)]


def _format_workload(s: dict) -> list:
    """Per-class lines (when there is more than one class) and the clipped-request count."""
    lines = []
    w = s.get("workload", {})
    clipped = w.get("clipped_requests", 0)
    if clipped:
        lines.append(f"workload      {plural(clipped, 'request')} shortened to the model's context length")
    if "sessions" in w:
        ss = w["sessions"]
        lines.append(f"sessions      {plural(ss['started'], 'session')} sent {plural(ss['turns_sent'], 'turn')}"
                     + (f"; {ss['abandoned']} ended at a rejected turn" if ss["abandoned"] else ""))
    ds = w.get("dataset")
    if ds:
        lines.append(f"dataset       {ds['path']}: {ds['conversations']} conversations ({ds['turns']} turns, "
                     f"{ds['skipped_conversations']} skipped); tokens: {ds['token_counts']}"
                     if not ds["token_counts_estimated"] else
                     f"warning       dataset {ds['path']}: token counts {ds['token_counts']}")
    classes = s.get("classes", {})
    if len(classes) > 1:
        for name, c in classes.items():
            t, p = c["ttft_s"], c["tpot_s"]
            lines.append(f"class {name}: {plural(c['num_requests'], 'request')} ({c['completed']} completed), "
                         f"TTFT p50/p99 {_fmt_s(t['p50']).strip()} / {_fmt_s(t['p99']).strip()}, "
                         f"TPOT p50/p99 {_fmt_s(p['p50']).strip()} / {_fmt_s(p['p99']).strip()}, "
                         # (a class that drew no request has no attainment: 0 of 0 is not "0.0%")
                         f"SLO {attainment_pct(c['slo_attainment']) if c['num_requests'] else '-'} "
                         f"({_slo_text(c['slo'])})")
    lines += _format_fairness(s)
    return lines


def _format_fairness(s: dict) -> list:
    """Per tenant (when classes share tenants) and Jain's index, with more than one class."""
    f = s.get("fairness") or {}
    if len(s.get("classes") or {}) < 2 or not f:
        return []
    lines = []
    tenants = f.get("tenants", {})
    if len(tenants) > 1 and len(tenants) < len(s["classes"]):
        for name, t in tenants.items():
            lines.append(f"tenant {name}: {plural(t['num_requests'], 'request')} ({t['completed']} completed), "
                         f"{t['throughput_rps']:.2f} req/s, SLO "
                         + (attainment_pct(t["slo_attainment"]) if t["num_requests"] else "-"))
    j = f["jain"]["tenants" if len(tenants) > 1 else "classes"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines.append(f"fairness      Jain index over {'tenants' if len(tenants) > 1 else 'classes'}: service share "
                 f"{fmt(j['service_share'])}, SLO attainment {fmt(j['slo_attainment'])} (1 = equal)")
    return lines


def _progress_bar(quiet: bool):
    if quiet or not interactive():  # (no bar, and no progress calls from the engine either)
        return None, lambda: None
    from tqdm import tqdm

    bar = None

    def update(done, total, now_s):
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="req", desc="simulating", file=sys.stderr, mininterval=0.5,
                       dynamic_ncols=True)
        if done - bar.n >= max(1, total // 200) or done == total:
            bar.update(done - bar.n)
            bar.set_postfix_str(f"sim {now_s:.0f} s", refresh=False)

    def close():
        if bar is not None:
            bar.close()

    return update, close


@contextlib.contextmanager
def _naming(scenario_path, others=()):
    """Prefix input errors found after loading (model, GPU, memory fit) with the scenario file;
    not those that name the scenario or one of the ``others`` (another input file) already."""
    try:
        yield
    except InputError as e:
        if scenario_path:
            where = str(scenario_path)
        else:  # (as the schema's errors name the packaged default: its path)
            from servesim.inputs.scenario import default_scenario_path

            where = str(default_scenario_path())
        if any(str(x) in str(e) for x in (where, *others)):
            raise
        raise InputError(f"{where}: {e}") from None


def dangling_link(path) -> str | None:
    """What ``path`` is when it is a symbolic link that leads nowhere (a loop of links, or a link
    to a missing target), for a message; None otherwise. (Such a path "does not exist", and its
    ``mkdir`` said "File exists".)"""
    if not os.path.islink(path) or os.path.exists(path):
        return None
    try:
        os.stat(path)
    except OSError as e:
        import errno

        if e.errno == errno.ELOOP:
            return "a symbolic link in a loop of links (following it leads back to it)"
    try:
        target = os.readlink(path)
    except OSError:
        return "a symbolic link that leads nowhere"
    return f"a symbolic link to {shown_path(target)}, which does not exist"


def _not_a_file(path: str, flag: str) -> None:
    """An output folder given as the path of something that is no folder is refused naming it."""
    link = dangling_link(path)
    if link is not None:
        raise InputError(f"{flag} {path}: is {link}; give a folder to write into")
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{flag} {path}: exists and is not a folder; give a folder to write into")


def _writable_dir(path: str, flag: str) -> Path:
    p = Path(path)
    _not_a_file(path, flag)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot create the output folder: {e.strerror or e}") from None
    if not os.access(p, os.W_OK):
        raise InputError(f"{flag} {path}: the output folder is not writable")
    return p


def _new_folders(path: str) -> list[Path]:
    """The folders ``_writable_dir(path)`` would create: ``path`` and its ancestors that are not
    there yet, deepest first."""
    out, p = [], Path(path).absolute()
    while not os.path.lexists(p) and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def _remove_if_empty(folders: list[Path]) -> None:
    """Remove the folders a command created (``_new_folders``), deepest first, while empty: a run
    that stopped (bad input found once it started, an interrupt) leaves no empty --out behind."""
    for f in folders:
        try:
            f.rmdir()
        except OSError:
            return


def _writable_file(path: str, flag: str, taken: dict | None = None) -> None:
    """Fail now, not after a long run, if ``path`` cannot be written (its folder is created; a
    file created by the check is removed again): a folder, device or pipe there is refused (it would
    be replaced, or never written), and so is a file another output of the run writes (``taken``:
    resolved path -> what writes it)."""
    p = Path(path)
    if p.exists() and not p.is_file():
        raise InputError(f"{flag} {path}: exists and is not a regular file (a folder, device or pipe); give a "
                         "file path")
    if taken and (other := taken.get(p.resolve())):
        raise InputError(f"{flag} {path}: {other} writes that file; give another path")
    _writable_dir(str(p.parent), flag)
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write the file: {e.strerror or e}") from None
    if not existed:
        p.unlink()


@contextlib.contextmanager
def _writing(path: str, flag: str):
    """An OSError while writing ``path`` (a full disk: no file name in it) as an InputError naming the flag."""
    try:
        yield
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write the file: {e.strerror or e}") from None


def cmd_run(args) -> int:
    from servesim.inputs.scenario import load_scenario
    from servesim.outputs.writer import RUN_ENTRIES, check_format, file_names, parse_outputs
    from servesim.simulation import simulate

    outputs = parse_outputs(args.outputs)
    check_format(args.format)
    scenario = load_scenario(args.scenario, args.set or [], args.seed)
    made = _new_folders(args.out)
    out_dir = _writable_dir(args.out, "--out")  # fail before a long run, not after
    try:
        # (the run folder's files, then each trace, must not land on one another)
        taken = {(out_dir / name).resolve(): f"--out {args.out}" for name in RUN_ENTRIES}
        if args.trace_events:
            _writable_file(args.trace_events, "--trace-events", taken)
            taken[Path(args.trace_events).resolve()] = "--trace-events"
        tracing = getattr(args, "decision_trace", None)
        if tracing:
            _writable_file(tracing, "--decision-trace", taken)
        from servesim.studies.replicates import check_seed_count

        check_seed_count(args.seeds)
        if args.workers is not None:  # (the studies' own rule, before anything runs)
            from servesim.studies.executors import ExecutorOptions

            ExecutorOptions(workers=args.workers)
        update, close = _progress_bar(args.quiet)
        try:
            with _naming(args.scenario):
                results = simulate(scenario, progress=update, engine=getattr(args, "engine", None),
                                   decision_trace=bool(tracing))
        finally:
            close()
        if args.seeds > 1:
            results.summary["seeds"] = _other_seeds(scenario, results.summary, args)
        # (a trace written into the run folder is named in its summary.json, so that the next run written
        # there in place removes it where that run writes none: it kept the earlier run's, read as its own)
        inside = {key: Path(path).name for key, path in (("decision_trace", tracing),
                                                          ("trace_events", args.trace_events))
                  if path and Path(path).resolve().parent == out_dir.resolve()}
        if inside:
            results.summary["trace_files"] = inside
        try:
            out = results.write(out_dir, outputs, args.format)
        except OSError as e:  # e.g. a full disk: the folder is left as it was (writer.write_run)
            raise InputError(f"--out {args.out}: cannot write {e.filename or 'the results'}: {e.strerror or e}; "
                             "the folder was left as it was") from None
    except BaseException:  # (bad input found by the run, a kill: no empty --out folder left behind)
        _remove_if_empty(made)
        raise
    # (how a config.json was read is summary.json's model_generic warning, printed with the others)
    print(format_summary(results.summary))
    files = file_names(outputs, args.format)
    print(f"\nwrote {out}/{files[0]}" + "".join(f", {f}" for f in files[1:]))
    if tracing:
        from servesim.outputs.decision_trace import write_decision_csv

        with _writing(tracing, "--decision-trace"):  # (the print outside: a closed stdout is not the file's)
            wrote = write_decision_csv(results.decisions, tracing)
        print(f"wrote {wrote} (why each request waited)")
    if args.trace_events:
        from servesim.outputs.trace_export import write_trace

        with _writing(args.trace_events, "--trace-events"):
            wrote = write_trace(results, args.trace_events)
        print(f"wrote {wrote} (Chrome/Perfetto trace: ui.perfetto.dev)")
    return 0


def _other_seeds(scenario, summary: dict, args) -> dict:
    """summary.json ``seeds``: the scenario on its seed (``summary``) and the next ``--seeds`` - 1."""
    from servesim.studies.replicates import seed_summaries, seeds_for, seeds_section

    seeds = seeds_for(scenario.seed, args.seeds)
    bar = None
    if not args.quiet and interactive():
        from tqdm import tqdm

        bar = tqdm(total=len(seeds) - 1, unit="seed", desc="other seeds", file=sys.stderr, dynamic_ncols=True)
    try:
        others = seed_summaries(scenario, seeds[1:], args.workers, bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return seeds_section(seeds, [summary, *others])


def _padding_text(pool) -> str:
    """validate's word on an engine that pads prompt batches (``EngineProfile.max_paddings``):
    whether this pool's steps do (only a continuous policy's ``prefill_first`` prompt-only steps)."""
    from servesim.policies.continuous import ContinuousPolicy

    limit = pool.engine.profile.max_paddings if pool.engine is not None else None
    if limit is None:
        return ""
    policy = pool.make_policy()
    if isinstance(policy, ContinuousPolicy) and policy.prefill_first and not policy.chunked:
        return f"; prompt-only steps padded to their longest prompt (at most {limit} padded tokens)"
    return (f"; no prompt padding ({pool.engine.profile.name} pads the prompt-only steps of policy.prefill_first "
            "with continuous batching)")


def cmd_validate(args) -> int:
    from servesim.inputs.scenario import load_scenario
    from servesim.inputs.specs import MODEL_ALIASES, model_note
    from servesim.outputs.rundir import deployment_gpus, deployment_shape
    from servesim.predictions import check_resend_not_stuck, dry_run_plugins
    from servesim.simulation import plan

    scenario = load_scenario(args.scenario, args.set or [])
    with _naming(args.scenario):
        # what run does before its event loop: the setup, the memory check, the workload drawn
        # (every file it names read), so that validate accepts exactly what run can run
        setup, specs, _ = plan(scenario)
        # a plug-in policy or router decides a few steps: one whose next_batch raises or returns no
        # valid batch is the error a run would stop on (it was called ok, and the run failed)
        dry_run_plugins(scenario, setup, specs)
        # a closed loop certain to be stuck on rejections is the error the run stops on
        check_resend_not_stuck(scenario, setup, specs)
        # (before the 'ok' line: the rejection prediction asks a plug-in policy's admission_error,
        # and one that raises is an error, which followed 'ok' without naming the scenario)
        warnings = validate_warnings(scenario, setup, specs)
    alias_of = MODEL_ALIASES.get(scenario.model)
    model = scenario.model if alias_of is None else f"{scenario.model} (priced as {alias_of}: the same architecture)"
    # the GPUs in all and how they are split (replicas, TP, PP, a P/D split's pools), as report titles say
    resolved = scenario.to_dict()
    shape = deployment_shape(resolved)
    kv = "; ".join(("KV " if len(setup.pools) == 1 else f"KV {pool.name} ")
                   + f"{pool.capacity.num_blocks:,} blocks = {pool.capacity.num_tokens:,} tokens per replica"
                   for pool in setup.pools)
    print(f"{args.scenario}: ok ({scenario.name}: {model} on {deployment_gpus(resolved)}"
          + (f" ({shape})" if shape else "") + f", policy {scenario.policy.name}; {kv}"
          + (f", split over {scenario.hardware.pp} virtual engines" if scenario.hardware.pp > 1
             and scenario.hardware.pp_overlap else "") + ")")
    for pool in setup.pools:  # what will price the steps
        cm, eng = pool.cost_model, pool.engine
        graphs = (f"CUDA graphs up to {eng.graph_sizes[-1]} tokens ({'all' if eng.graph_mixed else 'decode-only'}"
                  " steps, padded)" if eng.graph_sizes else "no CUDA graphs")
        pad = _padding_text(pool)
        api = (f"API server {eng.api_request_s * 1e3:.1f} ms per request + {eng.api_per_token_s * 1e6:.0f} us per "
               "output token (TTFT and E2E are client-side)" if eng.api_request_s or eng.api_per_token_s
               else "no API-server time (TTFT and E2E are the engine's)")
        print(f"  {pool.name}: engine {eng.profile.name}; efficiencies {cm.eff.source}; per-step CPU "
              f"{cm.step_overhead_s * 1e3:.2f} ms + {cm.per_seq_overhead_s * 1e6:.1f} us per sequence"
              + (f" + {cm.per_token_overhead_s * 1e6:.2f} us per token" if cm.per_token_overhead_s else "")
              + f" ({eng.overhead_source}), overlap {cm.overlap:g} with the GPU step"
              + (" (async scheduling: arrivals join the step after next)" if eng.async_scheduling else "")
              + f"; {graphs}{pad}; {api}"
              # (a P/D decode pool's budget is its max_num_seqs at most, whatever it was given)
              + f"; step budget {pool.max_num_batched_tokens:,} tokens, {pool.max_num_seqs:,} sequences; "
              f"activation reserve {pool.capacity.activation_reserve_bytes / 2**30:.2f} GiB per GPU; "
              f"KV {pool.capacity.num_blocks:,} blocks")
    note = model_note(scenario.model, dtype=scenario.hardware.dtype)
    if note:
        print(f"  note: {note}")
    line = workload_line(specs)
    if line:
        print(line)
    for line in warnings:
        print(line)
    return 0


def workload_line(specs) -> str | None:
    """``validate``'s line on the requests drawn (open-loop workloads): how many, over how long, the
    mean rate, and the prompt and output lengths (mean, p50, p99), so that a trace read in the
    wrong time unit or lengths far from the ones meant show before a run; None otherwise."""
    import numpy as np

    from servesim.inputs.workload import RequestSpecs

    if not isinstance(specs, RequestSpecs) or not len(specs):
        return None
    from servesim.outputs.stats import offered_rate

    a = specs.arrival_s
    span = float(a[-1] - a[0])
    offered = offered_rate(a)
    rate = f", {offered:.3g} req/s on average" if offered else ", all at once"

    def lengths(x) -> str:
        p50, p99 = np.percentile(x, [50, 99])
        return f"mean {x.mean():,.0f}, p50 {p50:,.0f}, p99 {p99:,.0f}"

    return (f"  workload: {plural(len(a), 'request', fmt=',')} arriving over {span:,.4g} s{rate}; prompt tokens "
            f"{lengths(specs.prompt_tokens)}; output tokens {lengths(specs.output_tokens)}")


def validate_warnings(scenario, setup=None, specs=None) -> list:
    """Warnings ``validate`` can give before a run: the requests it will reject (predicted from the
    workload's own lengths and the deployment's limits), prompts that can wait at the head of the
    queue for the token budget (``predict_head_of_line``), an offered rate well above what the
    deployment serves (``predict_overload``: a short probe), the requests admission control sheds
    (``predict_shedding``: its token bucket replayed, the same probe for a queue that fills),
    preemptions (that probe's, near or above what it serves) and SLO limits in the wrong unit.
    ``setup``, ``specs``: ``plan``'s (the workload drawn once)."""
    from servesim.inputs.workload import RequestSpecs, dataset_info
    from servesim.outputs.checks import (CLIPPED_SHARE, PREEMPTED_SHARE, REJECTED_SHARE, UNFINISHED_SHARE,
                                         budget_warnings, clipped_text, cost_mapping_warnings, full_prompt_warnings,
                                         gpu_unit_warnings,
                                         kv_override_warnings, kv_room_fix, no_effect_warnings, no_requests_text,
                                         plugin_shadow_warnings, resend_at_once_warnings, scenario_slos,
                                         slo_floor_text, slo_unit_warnings, trace_unit_conflict_warnings,
                                         trace_unit_text)
    from servesim.plugins import plugin_warnings
    from servesim.predictions import (OVERLOAD_MARGIN, admission_first, closed_loop_first_rejections, drawn_lengths,
                                      predict_clipped,
                                      predict_head_of_line, predict_never_back, predict_over_budget,
                                      predict_overload, predict_rejections, predict_shedding, predict_slo_floors,
                                      predict_unfinished, preemptions_at_rate)
    from servesim.simulation import prepare

    setup = setup or prepare(scenario)
    lines = [f"warning: {w['message']}" for w in kv_override_warnings(setup.pools) + gpu_unit_warnings(setup.pools)
             + budget_warnings(setup.pools) + resend_at_once_warnings(scenario)]
    guessed = (dataset_info(scenario.workload) or {}).get("trace_unit_guessed")
    if guessed:
        lines.append(f"warning: {trace_unit_text(guessed, None)}")
    if isinstance(specs, RequestSpecs) and not len(specs):
        lines.append(f"warning: {no_requests_text(scenario, predicted=True)}")
    # (a closed loop with num_requests draws its lengths as an open-loop workload does: predicted too)
    lengths = drawn_lengths(specs)
    if lengths is None:
        lengths = specs
    probe_broke = []  # a plug-in's PluginError in a probe: said as a warning (a run may never load it so)
    # policy.admission rejects before the replicas' length rules see a request: one it sheds is
    # counted there, once (validate counted it in both lines: 10 + 562 where the run rejected 563)
    first = _predict_or_none(probe_broke, admission_first, scenario, setup, specs) if lengths is specs else None
    exact = first is None or first[1]
    pred = predict_rejections(scenario, setup, lengths, first[0] if first is not None and exact else None)
    if pred and not exact:  # (those a queue rule may shed first, the load deciding: said, not left out)
        pred["shed_first"] = predict_rejections(scenario, setup, lengths, first[0])["shed_first"]
    if pred and pred["rejected"]:
        n, k, g = pred["requests"], pred["rejected"], pred["while_decoding"]
        top = "; ".join(f"{c:,} x {r}" for r, c in pred["reasons"])
        when = "before they are served" if not g else (
            f", {g:,} of them while decoding, when their sequence outgrows the KV cache"
            + (" (fewer if workload.duration_s ends the run first)" if scenario.workload.duration_s else "")
            + (f", the other {k - g:,} before they are served" if k > g else ""))
        s = pred["shed_first"]
        # (exact: the token bucket's replay, or the run's; else those a queue rule may shed first)
        shed = ("" if not s else f"; {s:,} others these rules would reject are rejected first by policy.admission, "
                "counted there" if exact else
                f"; {s:,} of them may be rejected first by policy.admission's queue rules, as the load decides, "
                "and counted there instead")
        upto = "" if exact or not s else "up to "
        text = (f"a run will reject {upto}{k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%})"
                f"{'' if g else ' '}{when} "
                f"(checked on the workload's own requests{shed}): {top}")
        # (a warning from the share the run's own rejections warning names on, a note below it)
        lines.append(f"warning: {text}" if k >= REJECTED_SHARE * n else f"  rejections: {text}")
    elif pred is None:
        # (by the lengths alone: admission's shedding is replayed below, and said apart)
        lines.append("  rejections: not predicted from the requests' lengths (the KV cache's, the context's and the "
                     "token budget's rules: multi-turn workloads, and closed-loop ones without workload.num_requests, "
                     "draw their lengths as they run)")
        first = closed_loop_first_rejections(scenario, setup, specs)
        if first and first["rejected"] >= REJECTED_SHARE * first["requests"]:
            k, n = first["rejected"], first["requests"]
            lines.append(f"warning: {k:,} of the first {n:,} requests the clients send ({k / n:.1%}, their lengths "
                         "drawn as the run draws them) are rejected on arrival by the replicas' rules (run "
                         "validate with workload.num_requests for the reasons)"
                         # (the run's resend_at_once warning, its "N requests were rejected" said above)
                         + "".join(f"; {w['message'].split('; ', 1)[-1]}"
                                   for w in resend_at_once_warnings(scenario, k)))
    ob = predict_over_budget(scenario, setup, lengths)
    if ob and ob["at_risk"]:
        k, n, b = ob["at_risk"], len(lengths.prompt_tokens), ob["budget"]
        text = (f"{k:,} of {n:,} requests ({k / n:.1%}) are served with prompt + output - 1 over "
                f"policy.max_num_batched_tokens={b:,}: whole-prompt admission recomputes a preempted request in "
                "one prefill within the budget, so one preempted after its sequence passes it ends rejected then; "
                "how many do depends on the preemptions under load, so the rejections above leave them out "
                "(chunked prefill recomputes in chunks; swap preemption with host room, or a budget of at least "
                "the longest prompt + output - 1, keeps them all)")
        lines.append(f"warning: {text}" if k >= REJECTED_SHARE * n else f"  rejections: {text}")
    nb = predict_never_back(scenario, setup, lengths)
    if nb and nb["at_risk"]:
        k, n = nb["at_risk"], len(lengths.prompt_tokens)
        pool = " a decode replica's" if "decode" in setup.pools_by_name else ""
        wm = setup.pools_by_name.get("decode", setup.pools[0]).watermark
        text = (f"{k:,} of {n:,} requests ({k / n:.1%}) are served with prompt + output - 1 needing more KV blocks "
                f"than the {nb['blocks']:,} of{pool} {nb['num_blocks']:,} that policy.watermark={wm:g} leaves: "
                "the engine profile (cost.engine) admits a recompute above the watermark too, so one "
                "preempted after its sequence passes them ends rejected then, as vLLM V0 ignores it; how many do "
                "depends on the preemptions under load, so the rejections above leave them out (a lower "
                "policy.watermark, more KV memory, or swap preemption with host room keeps them)")
        lines.append(f"warning: {text}" if k >= REJECTED_SHARE * n else f"  rejections: {text}")
    clip = predict_clipped(scenario, setup, lengths)
    if clip and clip["clipped"]:
        k, n = clip["clipped"], clip["requests"]
        text = clipped_text(k, n, clip["context_tokens"], predicted=True)
        lines.append(f"warning: {text}" if k >= CLIPPED_SHARE * n else f"  clipped: {text}")
    floors = predict_slo_floors(scenario, setup, lengths)
    if floors and floors["missed"]:  # (the run says the same: its slo_floor warning)
        lines.append(f"warning: {slo_floor_text(floors)}")
    # (with a queue rule it replays the run: a plug-in can break there, as in the probes below)
    late = _predict_or_none(probe_broke, predict_unfinished, scenario, setup, specs)
    est = late and late["estimate"] is not None and late["high"]
    changed = late and late.get("rate_changed")
    if late and (est or changed and late["high"] or late["unfinished"] or not late["exact"]
                 and late["not_completed"]):
        k, n, cut = late["unfinished"], late["requests"], f"workload.duration_s={late['duration_s']:g} s"
        fix = ("the latency figures cover only the completed ones (a longer duration_s, or num_requests without a "
               "cut-off, lets them finish)")
        # (an idle deployment's bound can only undercount: a loaded run leaves more, never fewer)
        floor = ("a floor: each arrives too close to it to finish even on an idle deployment (its prefill and decode "
                 "steps alone take longer than what is left), so a loaded run leaves more, never fewer")
        if late["exact"]:  # (the run replayed with its rules, which with a queue rule decide by the load)
            rules = (" with policy.admission's rules, which decide by the load what they reject"
                     if scenario.policy.admission.active else "")
            text = (f"a run will leave {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) still queued or "
                    f"running at {cut} (the run replayed{rules}: its count); {fix}")
        elif changed and late["high"]:
            k, r, (then, after, span) = late["high"], late["replayed"], changed
            text = (f"a run will leave between {late['low']:,} and {k:,} of {plural(n, 'request', fmt=',')} (up to "
                    f"{k / n:.1%}) still queued or running at {cut}: the run's own first {r:,} requests, replayed "
                    f"with its rules, are the run up to {late['replayed_until']:,.4g} s (exact), but the requests "
                    f"after them arrive at another rate ({after:.3g} req/s over the {span:,.4g} s before the "
                    f"cut-off, {then:.3g} in the later half of those replayed: the arrival schedule changes), so "
                    f"the count there is not carried from the replay: the run's own last {late['tail']:,} requests, "
                    "replayed with its rules from an idle deployment, read it from the arrivals before the cut-off "
                    "(at least their count there, less its swing: a run loaded when they begin leaves more; at most "
                    "that plus the run's requests in flight when they begin, within what the queue's rules hold); "
                    f"{fix}")
        elif est:
            k, r = late["estimate"], late["replayed"]
            first = (f"the run's own first {r:,} requests, replayed with its rules, are the run up to "
                     f"{late['replayed_until']:,.4g} s (exact)")
            least = (f"; at least {late['unfinished']:,} in any case (they arrive too close to it to finish even on "
                     "an idle deployment)" if late["unfinished"] else "")
            if late["growing"] and late.get("full"):
                text = (f"a run will leave about {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) still "
                        f"queued or running at {cut}: {first}, and the requests in flight grew through the later "
                        "half of them, so the queue fills before the cut-off, holding its room: "
                        "policy.admission.max_queue waiting and policy.max_num_seqs running per replica (per virtual "
                        "engine with hardware.pp; those the "
                        f"API server still streams to their clients come on top){least}; {fix}")
            elif late["growing"]:
                text = (f"a run will leave about {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) still "
                        f"queued or running at {cut}: {first}, and the requests in flight grew through the later "
                        f"half of them, so the other {n - r:,} are counted arriving against the completion rate "
                        "that half kept (an extrapolation, for arrivals that go on as they began: within 5% of "
                        f"the runs in docs/how-it-works.md's checks){least}; {fix}")
            else:
                text = (f"a run will leave about {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) still "
                        f"queued or running at {cut}, between {late['low']:,} and {late['high']:,}: {first}, and "
                        "the requests in flight held level through the later half of them, swinging between those "
                        "counts about their trend (where in that swing the cut-off falls decides; for arrivals that "
                        f"go on as they began){least}; {fix}")
        elif k:
            text = (f"at least {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) will still be queued or "
                    f"running at {cut} ({floor}); {fix}")
        else:  # (every late request is one policy.admission's queue rules may reject: both said)
            k = late["not_completed"]
            text = (f"at least {k:,} of {plural(n, 'request', fmt=',')} ({k / n:.1%}) will not have completed at "
                    f"{cut} ({floor}); each is rejected "
                    "on arrival by policy.admission (its queue rules decide by the load, which validate did not "
                    f"replay for a run this long) or still queued or running; {fix}")
        lines.append(f"warning: {text}" if k >= UNFINISHED_SHARE * n else f"  unfinished: {text}")
    hol = predict_head_of_line(scenario, setup, lengths)
    if hol and hol["tight"]:
        k, n, b = hol["tight"], hol["requests"], hol["budget"]
        behind = (", set aside while the requests behind it go ahead (policy.skip_unfit_prompts)"
                  if scenario.policy.skip_unfit_prompts else ", and the requests behind it with it")
        d, seqs = hol["decode_tokens"], hol["max_num_seqs"]
        within = (f"policy.max_num_seqs={seqs}" if d == 1 else
                  f"policy.max_num_seqs x (k + 1) = {seqs} x {d} = {seqs * d:,}")
        leaves = ("fewer decodes than the tokens it leaves run beside it" if d == 1 else
                  f"the decodes beside it, k + 1 = {d} tokens each, take fewer than the tokens it leaves")
        lines.append(f"warning: {k:,} of {plural(n, 'prompt', fmt=',')} ({k / n:.1%}; the longest "
                     f"{hol['longest']:,} tokens) "
                     f"{'is' if k == 1 else 'are'} within {within} tokens of the {b:,}-token budget: with "
                     f"whole-prompt admission such a prompt fits only while {leaves}, so under load it can wait "
                     f"at the head of the queue{behind}: "
                     f"{head_of_line_fix(scenario.prefill_first_steps)}")
    over = _predict_or_none(probe_broke, predict_overload, scenario, setup, specs)
    if over is not None and over["overloaded"]:
        lines.append(f"warning: the offered {over['offered_rps']:.3g} req/s is well above what the deployment serves: "
                     f"{_probe_text(scenario, setup, over)}"
                     + "; the backlog will grow through the run and its latencies with workload.num_requests "
                     "(servesim capacity finds the highest rate it keeps up with)")
    shed = _predict_or_none(probe_broke, predict_shedding, scenario, setup, specs)
    if shed is not None:
        lines.append(_shedding_text(scenario, setup, shed))
    # The probe runs its batch as full as the load allows: when it outgrew the KV cache (as many
    # preemptions as the run's own warning names) and the offered rate is at least what the probe
    # served (the queue grows: the batch fills as the probe's did), a run preempts too; within the
    # overload margin below it, the batch may not fill, so the workload's first requests at the
    # offered rate tell (the full-batch probe named preemptions a run at 80% of it never had)
    if (over is not None and over["preemptions"] >= PREEMPTED_SHARE * over["probe_requests"]
            and over["offered_rps"] * OVERLOAD_MARGIN >= over["served_rps"]):
        k, p = over["probe_requests"], over["preemptions"]
        seqs = "the pools' max_num_seqs" if scenario.policy.is_deployment else "policy.max_num_seqs"
        head = (f"warning: the KV cache, not {seqs}, limits the batch under this load: {k:,} of the "
                f"workload's requests all at once preempted running requests {p:,} times ({p / k:.2f} per "
                "request)")
        fix = f"(each preemption recomputes or swaps a request's KV); {kv_room_fix(scenario)}"
        if over["offered_rps"] >= over["served_rps"]:
            lines.append(f"{head}, and the offered {over['offered_rps']:.3g} req/s is at or above the "
                         f"{over['served_rps']:.3g} req/s they completed, so a run will preempt too {fix}")
        else:
            q = _predict_or_none(probe_broke, preemptions_at_rate, scenario, k, setup, specs)
            if q is not None and q >= PREEMPTED_SHARE * k:
                lines.append(f"{head}, and at the offered {over['offered_rps']:.3g} req/s (below the "
                             f"{over['served_rps']:.3g} req/s they completed) the same requests at their own "
                             f"arrival times preempted {q:,} times ({q / k:.2f} per request), so a run will "
                             f"preempt too {fix}")
            elif q is not None:
                lines.append(f"  preemptions: few at this load: {k:,} of the workload's requests all at once "
                             f"preempted {p:,} times, but at their own arrival times (the offered "
                             f"{over['offered_rps']:.3g} req/s) {q:,} times ({q / k:.2f} per request)")
    if probe_broke:  # (once: the probes run the same first requests; the first names what ran it)
        where = getattr(probe_broke[0], "where", None) or "validate's probes of the load; a run that loads it so " \
            "stops there"
        lines.append(f"warning: {clip_text(probe_broke[0], 400)} (in {where})")
    lines += [f"warning: {w['message']}" for w in slo_unit_warnings(scenario_slos(scenario))]
    lines += [f"warning: {w['message']}" for w in no_effect_warnings(scenario) + trace_unit_conflict_warnings(scenario)
              + full_prompt_warnings(scenario, setup.pools) + cost_mapping_warnings(scenario, setup.pools)
              + plugin_warnings(scenario, setup.pools) + plugin_shadow_warnings(scenario)]
    return lines


def _probe_text(scenario, setup, over: dict) -> str:
    """What the overload probe ran and what it completed, for validate's lines."""
    n, pools = scenario.cluster.replicas, setup.pools_by_name
    if "decode" in pools:  # a P/D split: the probe ran the whole split
        ran = (f"all at once on the whole P/D split ({pools['prefill'].replicas} prefill + "
               f"{pools['decode'].replicas} decode replicas), completed {over['served_rps']:.3g} req/s")
    else:
        ran = (f"all at once on one replica, completed {over['served_rps'] / n:.3g} req/s"
               + (f" ({over['served_rps']:.3g} on {n} replicas)" if n > 1 else ""))
    return f"{over['probe_requests']:,} of its requests, {ran}"


def _predict_or_none(broke: list, predict, *args):
    """One of validate's load predictions (``servesim.predictions``; some simulate a probe,
    ``predictions._probe``): ``predict(*args)``, or None where it cannot answer: a plug-in's PluginError is kept in
    ``broke`` (validate says it as a warning: a run may never load the plug-in so), but one raised
    in a replay of the run itself (its ``exact``: the whole workload as drawn, its rules and
    cut-off kept) is the error the run stops on, so validate stops on it too, naming the replay
    (it was a warning, exit 0, where ``servesim run`` then failed with exit 2); a probe the
    machine cannot hold (InputError, MemoryError) gives no prediction (the run says)."""
    try:
        return predict(*args)
    except PluginError as e:
        if getattr(e, "exact", False):
            raise PluginError(f"{e} (in {e.where})") from e.__cause__
        broke.append(e)
    except (InputError, MemoryError):
        pass
    return None


def _shedding_text(scenario, setup, shed: dict) -> str:
    """validate's line on the requests ``policy.admission`` sheds (``predictions.predict_shedding``):
    a warning when the share reaches the run's ``rejections`` threshold or the queue grows through
    the run anyway, else an indented note."""
    from servesim.outputs.checks import REJECTED_SHARE
    from servesim.predictions import OVERLOAD_MARGIN, OVERLOAD_PROBE_MIN

    adm = scenario.policy.admission
    if shed["at_once"]:
        k, share = shed["at_once"], shed["rejected_share"]
        top = "; ".join(f"{c:,} x {r}" for r, c in shed["reasons"])
        text = (f"a run will reject {k:,} of {plural(shed['requests'], 'request', fmt=',')} ({share:.1%}) at once: "
                "they all arrive before a step "
                f"admits any, so policy.admission decides on the queue they make themselves (the run's first "
                f"instant, replayed): {top}")
        return f"warning: {text}" if share >= REJECTED_SHARE else f"  shedding: {text}"
    if shed.get("replayed"):
        k, n, share = shed["shed"], shed["replayed"], shed["rejected_share"]
        top = "; ".join(f"{c:,} x {r}" for r, c in shed["reasons"])
        why = (f"fewer than {OVERLOAD_PROBE_MIN} requests, too few to compare rates" if shed["short"] else
               f"at their own arrival times on "
               f"{'the whole P/D split' if 'decode' in setup.pools_by_name else 'the whole deployment'}"
               f", the offered {shed['offered_rps']:.3g} req/s on average not clearly above ({OVERLOAD_MARGIN:g}x) the "
               f"{shed['at_rate']:.3g} req/s validate's load probe completed: rates cannot tell, and bursts fill "
               "the queue at their peak rate"
               if shed.get("at_rate") else
               "its requests follow the replies, each sent after the last one ended or was rejected")
        if shed["whole"]:
            text = (f"a run will reject {k:,} of {plural(n, 'request', fmt=',')} ({share:.1%}) in policy.admission "
                    "(the run replayed: "
                    f"{why}): {top}")
        else:
            # (the run's first requests only: how the share moved through them, and what the reasons cover)
            h = shed["halves"]
            first, later = h["first_shed"] / h["first"], h["later_shed"] / h["later"]
            moved = (f"; the first {h['first']:,} of them shed {first:.1%}, the later {h['later']:,} {later:.1%}"
                     + (", a share rising through them, so the run's later requests may shed more" if h["rising"]
                        else ", and the run's later requests can shed another share"))
            top = f"reasons among those first {n:,}: {top}"
            total = shed.get("run_requests")
            of = f" of its {total:,}" if total else ""
            if shed.get("own"):  # (a closed loop's own first requests: their count is the run's, at least)
                least = f", at least {k / total:.1%} of its {total:,}" if total else ""
                text = (f"a run will reject about {share:.0%} of its requests in policy.admission ({k:,} of its "
                        f"first {n:,}, the run's own, replayed: {why}{least}; the prediction covers those first "
                        f"{n:,} only{moved}, and a burst among them, such as a long prompt holding the head of the "
                        f"queue, can overstate it): {top}")
            elif shed.get("bucket"):  # (the bucket's count is the whole run's; the queue rules', the replay's)
                tb, b, q = adm.token_bucket, shed["bucket"], k - shed["replay_bucket"]
                text = (f"a run will reject about {share:.0%} of its requests in policy.admission: "
                        f"policy.admission.token_bucket ({tb.rate_rps:g} req/s, burst {tb.burst:g}) {b:,} of "
                        f"{total:,} ({b / total:.0%}; its replay on every arrival time, exact), and the queue rules "
                        f"about {q / n:.0%} more ({q:,} of its first {n:,}, replayed with every rule: {why}; that "
                        f"share covers those first {n:,} only{moved}): {top}")
            else:
                text = (f"a run will reject about {share:.0%} of its requests in policy.admission ({k:,} of its "
                        f"first {n:,}{of}, replayed: {why}; the prediction covers those first {n:,} only{moved}): "
                        f"{top}")
        h = shed.get("halves")
        # (loud too where the later half of a partial replay reaches the run's rejections threshold)
        loud = share >= REJECTED_SHARE or (h is not None and h["later_shed"] >= REJECTED_SHARE * h["later"])
        return f"warning: {text}" if loud else f"  shedding: {text}"
    scope = "" if adm.classes is None else f" (policy.admission.classes: {', '.join(adm.classes)})"
    parts = []
    if shed["bucket"]:
        tb = adm.token_bucket
        # (a count of requests, of the requests it covers: "532 of the 31.2 req/s offered" mixed the two)
        covered = shed.get("bucket_of")
        of = ("requests" if not covered else f"of {plural(covered, 'request', fmt=',')}" if adm.classes is None
              else f"of the {covered:,} requests of policy.admission.classes ({', '.join(adm.classes)})")
        parts.append(f"policy.admission.token_bucket ({tb.rate_rps:g} req/s, burst {tb.burst:g}) rejects "
                     f"{shed['bucket']:,} {of} (the workload offers {shed['offered_rps']:.3g} req/s on average; "
                     "its replay on the workload's arrival times, exact)")
    if shed.get("uncounted"):
        queue_rules = [r for r in shed["rules"] if r != "token_bucket"]
        parts.append(f"{', '.join('policy.admission.' + r for r in queue_rules)}{scope} rejections are not "
                     f"counted ({shed['uncounted']}; a run's can come on top, as its queue fills)")
    if shed["overloaded"]:
        past = " that pass the token bucket" if adm.token_bucket is not None else ""
        over = (f"the {shed['reaching_rps']:.3g} req/s{past} are well above what the deployment serves "
                f"({_probe_text(scenario, setup, shed)})")
        queue_rules = [r for r in shed["rules"] if r != "token_bucket"]
        rep = shed.get("queue_replayed")
        names = f"{', '.join('policy.admission.' + r for r in queue_rules)}{scope}"
        if shed["queue"] and rep is not None and rep["whole"]:
            parts.append(f"{over}: {names} sheds what the queue cannot hold, {shed['queue']:,} requests (the run "
                         "replayed with its rules: its count)")
        elif shed["queue"] and rep is not None:
            h, k = rep["halves"], rep["replayed"]
            rest = shed["requests"] - k
            span = (f"later half of their arrivals' span ({rep['later_arrived']:,} requests; the later "
                    f"{h['later']:,} arrive at one instant)" if rep.get("by_span") else f"later {h['later']:,} of them")
            how = (f"at the {rep['later_share']:.1%} the {span} shed, for arrivals that go on as they began"
                   if rep["by_share"] else
                   "at their own arrival times, against the completion rate and the most requests in flight the "
                   + ("later half of their arrivals' span kept (the later "
                      f"{h['later']:,} arrive at one instant)" if rep.get("by_span") else
                      f"later {h['later']:,} of them kept: within 3% of the runs of 20,000 to 50,000 requests in "
                      "docs/how-it-works.md's checks"))
            parts.append(f"{over}: {names} sheds what the queue cannot hold, about {shed['queue']:,} requests "
                         f"({rep['first_count']:,} of its first {k:,}, the run's own replayed with its rules: "
                         f"exact; the other {rest:,} {how})")
        elif shed["queue"]:
            parts.append(f"{over}: {names} sheds what "
                         f"the queue cannot hold, about {shed['queue']:,} requests (an upper bound for steady "
                         "arrivals: the probe underrates what the deployment serves, and the bound ran 1.2 to "
                         "1.9 times the runs' counts in docs/how-it-works.md's checks; arrivals in bursts can shed "
                         "more)")
        else:
            parts.append(over)
        if shed["backlog"]:
            why = {"unbounded": "no rule bounds the queue",
                   "others": "the requests policy.admission.classes leaves out outgrow it by themselves",
                   "room": "the queue's limit holds most of this run's excess"}[shed["backlog"]]
            parts.append(f"{why}: the backlog will grow through the run and its latencies with "
                         "workload.num_requests")
    share = shed["rejected_share"]
    rep = shed.get("queue_replayed")
    # (the whole run replayed: exact, as the bucket's replay on every arrival time)
    bound = ("" if shed["queue"] and rep is not None and rep["whole"] else
             "about " if shed["queue"] and rep is not None else "up to about " if shed["queue"] else
             "at least " if shed.get("uncounted") else "about ")
    text = (f"a run will reject {bound}{share:.0%} of the requests: "
            if share else "") + "; ".join(parts)
    text += " (servesim capacity finds the highest rate the deployment keeps up with)" if shed["overloaded"] else ""
    loud = share >= REJECTED_SHARE or shed["backlog"]
    return f"warning: {text}" if loud else f"  shedding: {text}"


# positional arguments, as the messages name them; every other string is an option --dest
_POSITIONAL = {"scenario": "the scenario path", "dir": "the folder path", "result": "the result file path"}
_FREE_TEXT = {"note"}  # (an empty note is a note)


def _packaged_scenario(args) -> None:
    """A scenario given by a name that is no file here but a packaged scenario's (``chat``,
    ``scenarios/chat.yaml`` outside a checkout, ``lessons/offline``) is that packaged file, said
    on stderr (unless --quiet): the docs' commands work from any folder once servesim is
    installed. A bare name that is neither is refused with the packaged names."""
    from servesim.inputs.scenario import packaged_scenario, scenario_file

    given = getattr(args, "scenario", None)
    if not isinstance(given, str) or not given.strip() or os.path.lexists(given):
        return
    path = packaged_scenario(given)
    if path is not None:
        args.scenario = str(path)
        if not getattr(args, "quiet", False):
            print(f"scenario {given!r}: no such file here; the packaged one ({path})", file=sys.stderr)
    else:
        from servesim.inputs.overrides import check_overrides

        # (`--set key value` makes argparse take the value as the scenario: that is named first)
        check_overrides(getattr(args, "set", None) or [])
        scenario_file(given)  # a bare name that is no packaged one: refused with their names


def _check_not_empty(args) -> None:
    """An empty path, name or list given on the command line (``--out ""``, often an unset shell
    variable) is refused: as a path it would mean the current folder, where ``run`` writes its
    files in place over any of the same name; as a name or list it would be ignored."""
    for dest, value in vars(args).items():
        if isinstance(value, str) and not value.strip() and dest not in _FREE_TEXT:
            what = _POSITIONAL.get(dest, "--" + dest.replace("_", "-"))
            raise InputError(f"{what} is blank; give a value"
                             + (" (for the current folder, write .)" if dest in ("out", "dir", "profiles")
                                else ""))


def _check_out_folder(args) -> None:
    """An --out folder that is a file: refused naming it (a study's ``mkdir`` said only "cannot use
    'x': File exists"). ``calibrate --out`` is a file."""
    out = getattr(args, "out", None)
    if getattr(args, "command", None) != "calibrate" and isinstance(out, str):
        _not_a_file(out, "--out")
        _not_another_kind(out, args.command)


def _servesim_run(folder: Path) -> bool:
    """Whether ``folder`` holds a servesim run's summary.json (not some other file of that name)."""
    import json

    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and "num_requests" in summary and "files" in summary


def _not_another_kind(out: str, command: str) -> None:
    """A run written into a study's folder, or a study into a run's, is refused: the folder would
    hold both, and ``servesim report`` (which takes a folder with summary.json for a run) would
    describe the run and hide the study, or describe an old run instead of the study just written.
    A study's folder is known by its sweep.json (every study writes it first)."""
    folder = Path(out)
    if not folder.is_dir():
        return
    if command == "run" and (folder / "sweep.json").is_file():
        raise InputError(f"--out {out}: holds a servesim study (sweep.json, results.csv, runs/); a run written "
                         "there would hide it (servesim report reads a folder with summary.json as a run): give "
                         "the run another --out")
    if command == "validate-run" and (_servesim_run(folder) or (folder / "sweep.json").is_file()):
        # (it writes scenario.yaml and report.md there: a run's scenario.yaml no longer matched the
        # digest its summary.json keeps, and the run read as damaged)
        raise InputError(f"--out {out}: holds a servesim run or study; validate-run writes its scenario.yaml and "
                         "report.md there, over theirs: give validate-run another --out")
    # (lessons and reproduce wrote their report beside a run's files, which report then read as the run)
    if (command in RESUMABLE or command in ("lessons", "reproduce")) and _servesim_run(folder):
        what = {"capacity": "capacity search", "compare": "comparison", "lessons": "lessons report",
                "reproduce": "reproduce report"}.get(command, command)
        raise InputError(f"--out {out}: holds a servesim run (summary.json); a {what} written there would be "
                         "hidden by it (servesim report reads a folder with summary.json as that run): give the "
                         f"{what} another --out")


def _beside_scenario_hint(message: str, scenario) -> str:
    """When a file the message says does not exist is a relative path that does exist beside the
    scenario file (relative paths are read from the current folder, as the docs say), say so."""
    import re

    if not scenario or not isinstance(scenario, str):
        return ""
    folder = Path(scenario).parent
    if folder == Path("."):
        return ""
    for name in re.findall(r"'([^'\n]{1,300})'(?: does not exist|: No such file or directory)", message):
        beside = folder / name
        if not Path(name).is_absolute() and os.path.exists(beside):
            return (f" (relative paths are read from the current folder; {str(beside)!r} is beside the scenario: "
                    f"write that path, or run from {str(folder)!r})")
    return ""


# studies that keep each finished run in their --out folder and reuse it when run again
RESUMABLE = ("sweep", "compare", "capacity", "plan")


def _interrupted_text(args, what: str = "interrupted") -> str:
    """What Ctrl-C (or SIGTERM: ``what``) leaves: for a study writing into a folder, that its
    finished runs are kept there and the same command picks up from them (it reuses them, runs
    the rest)."""
    out = getattr(args, "out", None)
    if getattr(args, "command", None) in RESUMABLE and out:
        if not os.path.isdir(out):
            # (stopped before its first run wrote anything, e.g. a plan still predicting: the line
            # named a folder that did not exist as keeping the finished runs)
            return f"{what} before any run finished; nothing was written to {shown_path(out)}"
        return (f"{what}; the runs that finished are kept in {shown_path(out)}: the same command reuses them "
                "and runs the rest")
    return what


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises ``Terminated`` for the block (main thread only, and only where it still has
    the default action, which killed the process at once: a study stopped by ``timeout`` said
    nothing, exit 143, and left its folder without the note that the same command resumes it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv=None) -> int:
    with _sigterm_raises():
        return _main(argv)


def _main(argv) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = None
    try:
        args = parse(argv)
        _check_not_empty(args)
        _check_out_folder(args)
        _packaged_scenario(args)
        return args.func(args)
    except InputError as e:
        text = str(e) + _beside_scenario_hint(str(e), getattr(args, "scenario", None))
        print(f"servesim: error: {one_line(text)}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"servesim: {_interrupted_text(args, 'terminated (SIGTERM)')}", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"servesim: {_interrupted_text(args)}", file=sys.stderr)
        return 130
    except MemoryError:
        # a valid scenario can still be too big for this machine (a huge workload.num_requests or
        # cluster.replicas): say which knobs size it rather than print numpy's traceback
        print("servesim: error: out of memory building or running the simulation; the run is too large for "
              "this machine: lower workload.num_requests (or workload.duration_s x the arrival rate), "
              "cluster.replicas or the pools' replicas", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`servesim cost ... | head`): not an error of ours; keep Python's
        # exit-time flush from raising again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        # a file or folder we were told to read or write (--out, --trace-events, ...) that the
        # file system refuses: name it, no traceback
        where = f" {shown_path(e.filename)}" if e.filename else ""
        print(f"servesim: error: {one_line(f'cannot use{where}: {e.strerror or e}')}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
