"""The ``servesim`` command: parse (``sim/cli/parser.py``), run the subcommand's handler, map
errors to exit codes: 0 ok, 2 bad input, 1 bug. ``run`` and ``validate`` are handled here."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from servesim.cli.parser import build_parser
from servesim.errors import InputError, one_line, shown
from servesim.outputs.profile import format_profile


def _slo_text(slo: dict) -> str:
    """"TTFT <= 1.0 s, TPOT <= 0.05 s", leaving out limits that are not set (null)."""
    parts = [f"{label} <= {slo[key]} s" for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))
             if slo.get(key) is not None]
    return ", ".join(parts) or "no limits set: every completed request counts"


def _fmt_s(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1e3:9.1f} ms" if v < 10 else f"{v:9.2f} s "


def format_summary(s: dict) -> str:
    lines = [f"scenario {s['scenario']}: {s['num_requests']} requests, {s['completed']} completed, "
             f"{s['rejected']} rejected, {s['unfinished']} unfinished, {s['preemptions']} preemptions",
             f"simulated {s['sim_time_s']:.1f} s in {s['wall_time_s']:.2f} s wall", "",
             f"{'latency':<8}{'mean':>13}{'p50':>13}{'p90':>13}{'p99':>13}"]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("tbt_s", "ITL"), ("e2e_s", "E2E"),
                       ("queue_s", "queue")):
        d = s[key]
        lines.append(f"{label:<8}" + "".join(f"{_fmt_s(d[k]):>13}" for k in ("mean", "p50", "p90", "p99")))
    multi = len(s.get("classes") or {}) > 1
    slo_note = "each request against its class's SLO" if multi else _slo_text(s["slo"])
    lines += ["",
              f"throughput    {s['throughput_rps']:.2f} req/s, {s['output_tokens_per_s']:.0f} output tok/s, "
              f"{s['total_tokens_per_s']:.0f} total tok/s (input + output)",
              f"goodput       {s['goodput_rps']:.2f} req/s; SLO attainment {s['slo_attainment'] * 100:.1f}% "
              f"({slo_note})"]
    p, u = s["phases"], s["utilization"]
    busy = p["prefill_time_s"] + p["decode_time_s"] + p["mixed_time_s"]
    share = (lambda x: 100 * x / busy) if busy else (lambda x: 0.0)
    # tokens count every step; steps are split by kind (mixed steps hold both kinds of tokens)
    lines += [f"phases        tokens: prefill {p['prefill_tokens']}, decode {p['decode_tokens']}; steps: prefill-only "
              f"{p['prefill_steps']} ({p['prefill_time_s']:.1f} s, {share(p['prefill_time_s']):.0f}% of busy), "
              f"decode-only {p['decode_steps']} ({p['decode_time_s']:.1f} s, {share(p['decode_time_s']):.0f}%), "
              f"mixed {p['mixed_steps']} ({p['mixed_time_s']:.1f} s, {share(p['mixed_time_s']):.0f}%)",
              f"utilization   busy {u['busy_fraction'] * 100:.0f}%, mean batch {u['mean_batch_size']:.1f}, "
              f"KV mean {u['kv_usage_mean'] * 100:.0f}% / max {u['kv_usage_max'] * 100:.0f}%, "
              f"MFU {u['mfu'] * 100:.1f}%, MBU {u['mbu'] * 100:.1f}%"]
    hol = s.get("head_of_line") or {}
    if hol.get("budget_blocked_requests"):
        n = hol["budget_blocked_requests"]
        lines.append(f"head-of-line  {n} prompt{'s' if n != 1 else ''} waited at the head of the queue, "
                     f"{hol['budget_blocked_s']:.1f} s in all, for room in the token budget next to running decodes "
                     "(their whole prompt fits policy.max_num_batched_tokens only alone; everything queued behind "
                     "waited too): chunked_prefill or a larger budget avoids it")
    lines += _format_memory(s)
    lines += _format_workload(s)
    lines += format_profile(s)
    return "\n".join(lines)


def _format_memory(s: dict) -> list:
    """Per-pool utilization (P/D split), KV hand-off times, swap traffic and prefix-cache hits."""
    lines = []
    pools = s.get("pools", {})
    if len(pools) > 1:
        for name, u in pools.items():
            lines.append(f"pool {name:<8} {u['replicas']} replica(s): busy {u['busy_fraction'] * 100:.0f}%, "
                         f"mean batch {u['mean_batch_size']:.1f}, KV mean {u['kv_usage_mean'] * 100:.0f}%, "
                         f"MFU {u['mfu'] * 100:.1f}%, MBU {u['mbu'] * 100:.1f}%")
    tr = s.get("kv_transfer")
    if tr and tr["count"]:
        t = tr["time_s"]
        lines.append(f"KV hand-off   {tr['count']} transfers, {tr['bytes'] / 1e9:.1f} GB, mean "
                     f"{_fmt_s(t['mean']).strip()}, p99 {_fmt_s(t['p99']).strip()} (first token until KV landed)")
    for name, pl in s.get("pipeline", {}).items():
        busy = " / ".join(f"{b * 100:.0f}%" for b in pl["stage_busy_fraction"])
        lines.append(f"pipeline      {name}: stages busy {busy} of the run (mean of {pl['replicas']} replica(s); "
                     "idle: no work, or a bubble while the engines' steps are on other stages)")
    kv = s.get("kv", {})
    if kv.get("swap_out_bytes"):
        lines.append(f"swap          {kv['swap_out_bytes'] / 1e9:.2f} GB to host, "
                     f"{kv['swap_in_bytes'] / 1e9:.2f} GB back")
    if kv.get("prefix_cache_hit_tokens"):
        lines.append(f"prefix cache  {kv['prefix_cache_hit_rate'] * 100:.1f}% of prompt tokens hit "
                     f"({kv['prefix_cache_hit_tokens']} of {kv['prefix_cache_query_tokens']})")
    return lines


def _format_workload(s: dict) -> list:
    """Per-class lines (when there is more than one class) and the clipped-request count."""
    lines = []
    w = s.get("workload", {})
    clipped = w.get("clipped_requests", 0)
    if clipped:
        lines.append(f"workload      {clipped} requests shortened to the model's context length")
    if "sessions" in w:
        ss = w["sessions"]
        lines.append(f"sessions      {ss['started']} sessions sent {ss['turns_sent']} turns"
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
            lines.append(f"class {name}: {c['num_requests']} requests ({c['completed']} completed), "
                         f"TTFT p50/p99 {_fmt_s(t['p50']).strip()} / {_fmt_s(t['p99']).strip()}, "
                         f"TPOT p50/p99 {_fmt_s(p['p50']).strip()} / {_fmt_s(p['p99']).strip()}, "
                         f"SLO {c['slo_attainment'] * 100:.1f}% ({_slo_text(c['slo'])})")
    return lines


def _progress_bar(quiet: bool):
    if quiet:
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
def _naming(scenario_path):
    """Prefix input errors found after loading (model, GPU, memory fit) with the scenario file."""
    try:
        yield
    except InputError as e:
        where = str(scenario_path) if scenario_path else "the default scenario"
        if where in str(e):
            raise
        raise InputError(f"{where}: {e}") from None


def _writable_dir(path: str, flag: str) -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot create the output folder: {e.strerror or e}") from None
    if not os.access(p, os.W_OK):
        raise InputError(f"{flag} {path}: the output folder is not writable")
    return p


def _writable_file(path: str, flag: str) -> None:
    """Fail now, not after a long run, if ``path`` cannot be written (its folder is created; a
    file created by the check is removed again)."""
    p = Path(path)
    _writable_dir(str(p.parent), flag)
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write the file: {e.strerror or e}") from None
    if not existed:
        p.unlink()


def cmd_run(args) -> int:
    from servesim.inputs.scenario import load_scenario
    from servesim.outputs.writer import check_format, file_names, parse_outputs
    from servesim.simulation import simulate

    outputs = parse_outputs(args.outputs)
    check_format(args.format)
    scenario = load_scenario(args.scenario, args.set or [], args.seed)
    out_dir = _writable_dir(args.out, "--out")  # fail before a long run, not after
    if args.trace_events:
        _writable_file(args.trace_events, "--trace-events")
    update, close = _progress_bar(args.quiet)
    try:
        with _naming(args.scenario):
            results = simulate(scenario, progress=update, engine=getattr(args, "engine", None))
    finally:
        close()
    try:
        out = results.write(out_dir, outputs, args.format)
    except OSError as e:  # e.g. a full disk: the folder is left as it was (writer.write_run)
        raise InputError(f"--out {args.out}: cannot write {e.filename or 'the results'}: {e.strerror or e}; "
                         "the folder was left as it was") from None
    print(format_summary(results.summary))
    files = file_names(outputs, args.format)
    print(f"\nwrote {out}/{files[0]}" + "".join(f", {f}" for f in files[1:]))
    if args.trace_events:
        from servesim.outputs.trace_export import write_trace

        print(f"wrote {write_trace(results, args.trace_events)} (Chrome/Perfetto trace: ui.perfetto.dev)")
    return 0


def cmd_validate(args) -> int:
    from servesim.inputs.scenario import load_scenario
    from servesim.simulation import plan

    scenario = load_scenario(args.scenario, args.set or [])
    with _naming(args.scenario):
        # what run does before its event loop: the setup, the memory check, the workload drawn
        # (every file it names read), so that validate accepts exactly what run can run
        setup, _, _ = plan(scenario)
    cap = setup.capacity
    print(f"{args.scenario}: ok ({scenario.name}: {scenario.model} on {scenario.cluster.replicas} x "
          f"{scenario.hardware.tp * scenario.hardware.pp} {scenario.hardware.gpu}, policy {scenario.policy.name}; "
          f"KV {cap.num_blocks} blocks = {cap.num_tokens} tokens per replica"
          + (f", split over {scenario.hardware.pp} virtual engines" if scenario.hardware.pp > 1
             and scenario.hardware.pp_overlap else "") + ")")
    for pool in setup.pools:  # what will price the steps
        cm = pool.cost_model
        print(f"  {pool.name}: efficiencies {cm.eff.source}; per-step overhead {cm.step_overhead_s * 1e3:.2f} ms "
              f"+ {cm.per_seq_overhead_s * 1e6:.1f} us per sequence ({pool.overhead_source})")
    return 0


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except InputError as e:
        print(f"servesim: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
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
        where = f" {shown(str(e.filename))}" if e.filename else ""
        print(f"servesim: error: {one_line(f'cannot use{where}: {e.strerror or e}')}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
