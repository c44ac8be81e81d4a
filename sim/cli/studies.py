"""``servesim sweep``, ``capacity``, ``compare`` and ``lessons``: call the studies
(``servesim.studies``) with the parsed arguments and print tables and verdicts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from servesim.errors import InputError
from servesim.studies.executors import ExecutorOptions
from servesim.studies.points import DISTS
from servesim.studies.sweep import RESULTS, failed_while_running


def _executor(args) -> ExecutorOptions:
    return ExecutorOptions(args.executor, args.workers, args.address, not args.quiet)


def format_table(rows: list[dict], cols: list[str]) -> str:
    """A plain-text table of chosen results columns (latencies in ms)."""
    shown = []
    for c in cols:
        label = c[:-2] + " ms" if c.endswith("_s") and c.split("_")[0] in DISTS else c
        shown.append((c, label))
    cells = [[label for _, label in shown]]
    for r in rows:
        line = []
        for c, label in shown:
            v = r.get(c)
            if v is None:
                line.append("-")
            elif isinstance(v, float) and label.endswith(" ms"):
                line.append(f"{v * 1e3:.1f}")
            elif isinstance(v, float):
                line.append(f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}")
            else:
                line.append(str(v)[:40])
        cells.append(line)
    return _aligned(cells)


def _aligned(cells: list[list[str]]) -> str:
    """Rows of cells, each column right-aligned to its widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells)


SUMMARY_COLS = ["status", "throughput_rps", "goodput_rps", "slo_attainment", "ttft_p50_s", "ttft_p99_s",
                "tpot_p99_s", "tbt_p99_s", "e2e_p99_s"]


def cmd_sweep(args) -> int:
    from servesim.studies.sweep import run_sweep

    ex = _executor(args)
    res = run_sweep(args.scenario, args.grid, args.out, args.set or [], args.seed, ex)
    rows = res.rows
    print(format_table(rows, ["point", *res.grid, *SUMMARY_COLS]))
    failed = sum(1 for r in rows if r["status"] != "ok")
    print(f"\n{len(rows)} points: {res.ran} ran, {res.skipped} already finished, {failed} failed; "
          f"wrote {Path(args.out) / RESULTS}")
    return _status(res.failed_run)


EXIT_POINTS_FAILED = 3  # a study finished, but some points failed while running (see results.csv)


def _status(failed_run: int) -> int:
    """0, or ``EXIT_POINTS_FAILED`` (said on stderr) when points failed while running."""
    if not failed_run:
        return 0
    print(f"servesim: error: {failed_run} point(s) failed while running (their error is in {RESULTS}); exit "
          f"status {EXIT_POINTS_FAILED}", file=sys.stderr)
    return EXIT_POINTS_FAILED


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.4g}"


def cmd_capacity(args) -> int:
    from servesim.studies.capacity import RATE_KEY, CapacityOptions, find_capacity

    ex = _executor(args)
    opts = CapacityOptions(args.attainment, args.probe_requests, args.probe_duration, args.start, args.tol,
                           args.max_probes, args.keep_up)
    res = find_capacity(args.scenario, args.slo, opts, args.out, args.set or [], args.seed, ex)
    s, n, duration = res.search, res.probe_requests, res.probe_duration_s
    cap, above, gpus = res.capacity_rps, res.above_rps, res.num_gpus
    keys = [f"{m}_{st}" for (m, st) in res.slo]
    size = f"{n} requests each" if duration is None else f"max({n} requests, {duration:g} s of arrivals) each"
    how = f"share within limits >= {args.attainment}" if args.attainment else "percentiles over all requests"
    print(f"probes ({size}; {how}):")
    keep_up = args.keep_up > 0
    lines = [["rate req/s", "meets", *(k + " ms" for k in keys), "attain", *(["keep up"] if keep_up else []),
              "tput req/s"]]
    for p in s.points:
        r = p.values[RATE_KEY]
        e = s.results.get(r) or {}
        lines.append([f"{r:.4g}", _fmt(p.values.get("meets")),
                      *(_fmt(e.get(k, math.nan) * 1e3) for k in keys), _fmt(e.get("attainment")),
                      *([_fmt(e.get("keep_up", math.nan))] if keep_up else []),
                      _fmt(e.get("throughput_rps"))])
    print(_aligned(lines))
    limits = ", ".join(f"{m}_{st} <= {v * 1e3:g} ms" for (m, st), v in res.slo.items())
    if keep_up:
        limits += f", keeping up (>= {args.keep_up:g} left per arrival)"
    if not res.done:
        pass  # the error below says what was bracketed
    elif cap == 0:
        print(f"\nthe SLO ({limits}) is not met even at {min(s.results):.4g} req/s{res.none_served}")
    else:
        per = f" = {cap / gpus:.3g} req/s per GPU ({gpus} GPU{'s' if gpus != 1 else ''})" if args.per_gpu else ""
        print(f"\ncapacity {cap:.4g} req/s{per} for {limits}"
              f"{'' if args.attainment is None else f' for {args.attainment:.0%} of requests'}")
        if above is not None:
            print(f"confirmed: meets at {cap:.4g} req/s, fails at {above:.4g} req/s (+{above / cap - 1:.0%})")
        mean_cap = res.mean_capacity_rps
        if mean_cap != cap:
            print(f"workload.arrival.rate_rps is the {res.arrival.process} process's burst rate: at capacity the "
                  f"mean offered rate is {mean_cap:.4g} req/s ({mean_cap / gpus:.3g} per GPU)")
    if args.out:
        print(f"wrote {Path(args.out) / RESULTS}, {Path(args.out) / 'capacity.json'}")
    if res.error:
        raise InputError(res.error)
    return 0


def cmd_compare(args) -> int:
    from servesim.studies.compare import RATE_KEY, plan_compare, run_compare

    ex = _executor(args)
    plan = plan_compare(args.scenario, args.policies, args.variant, args.rates, args.set or [], args.seed)
    if plan.note:
        print(plan.note, file=sys.stderr)
    rows = run_compare(plan, args.out, ex)
    cols = ["label", *([RATE_KEY] if plan.rates else []), "status", "throughput_rps", "goodput_rps",
            "slo_attainment", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "tbt_p99_s", "e2e_p99_s",
            "mean_batch_size", "num_gpus"]
    print(format_table(rows, cols))
    out = Path(args.out)
    print(f"\nwrote {out / RESULTS}")
    if not args.no_report:
        from servesim.plots.report import build_report

        path = build_report(out)
        print(f"wrote {path} and its figures")
    return _status(failed_while_running(plan.points))


def cmd_lessons(args) -> int:
    from servesim.studies.lessons import LESSONS, run_lessons, write_lessons

    names = []
    for item in args.only or []:
        names += [n.strip() for n in item.split(",") if n.strip()]
    bad = [n for n in names if n not in LESSONS]
    if bad:
        raise InputError(f"--only: unknown lesson {bad[0]!r}; valid: {', '.join(LESSONS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # a folder we cannot write fails now, not after the runs

    def show(x):
        print(f"{x.name:<18} {x.verdict:<14} {'; '.join(x.findings)}  ({x.wall_s:.1f} s)", flush=True)

    lessons = run_lessons(names or None, args.quick, show, args.seed)
    figures = write_lessons(lessons, out, args.quick, args.seed, figures=not args.no_figures)
    held = sum(x.holds for x in lessons)
    print(f"\n{held} of {len(lessons)} claims hold; wrote {out / 'lessons.md'}, lessons.json"
          + (f" and {sum(len(v) for v in figures.values())} figures" if figures else ""))
    return 0
