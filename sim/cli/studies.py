"""``servesim sweep``, ``capacity``, ``compare``, ``lessons`` and ``reproduce``: call the studies
(``servesim.studies``) with the parsed arguments and print tables and verdicts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from servesim.errors import InputError, clip_distinct
from servesim.outputs.intervals import CI_SUFFIX, format_interval, format_value, given_text, row_interval
from servesim.outputs.wording import plural
from servesim.studies.executors import ExecutorOptions
from servesim.outputs.metrics import RESULT_METRICS
from servesim.studies.sweep import RESULTS, failed_while_running, refused_points


def _executor(args, always: tuple = ("summary", "scenario")) -> ExecutorOptions:
    """The study's executor options; ``--outputs`` (sweep, compare, capacity) with the files the
    study cannot do without (``always``) added."""
    outputs = getattr(args, "outputs", None)
    if outputs is not None:
        from servesim.outputs.writer import STUDY_OUTPUTS, parse_outputs

        # summary.json and scenario.yaml always: what the study reads back and what titles its report
        wanted = set(parse_outputs(outputs, valid=STUDY_OUTPUTS)) | set(always)
        outputs = tuple(o for o in STUDY_OUTPUTS if o in wanted)
    return ExecutorOptions(args.executor, args.workers, args.address, not args.quiet, outputs)


def format_table(rows: list[dict], cols: list[str], given=()) -> str:
    """A plain-text table of chosen results columns (latencies in ms); a figure with an interval
    (``<column>_ci95``, runs on several seeds) prints as mean +- half-width, to its precision, one
    without to three significant digits (``format_value``). ``given``: columns of values the user
    gave (a sweep's grid, compare's rates), printed as given (12.25 req/s read "12.2")."""
    shown = []
    for c in cols:
        label = c[:-2] + " ms" if c.endswith("_s") and c.split("_")[0] in RESULT_METRICS else c
        shown.append((c, label))
    cells = [[label for _, label in shown]]
    # text cells (labels, grid values) cut visibly and never into another's text
    texts = {c: clip_distinct((given_text(r[c]) if c in given else str(r[c])) for r in rows if r.get(c) is not None)
             for c, _ in shown}
    for r in rows:
        line = []
        for c, label in shown:
            v = r.get(c)
            if v is None:
                line.append("-")
            elif c in given:
                line.append(texts[c][given_text(v)])
            elif r.get(c + CI_SUFFIX) is not None:
                line.append(format_interval(row_interval(r, c), 1e3 if label.endswith(" ms") else 1.0))
            elif isinstance(v, float):
                # one seed: three significant digits (whole numbers above that), as a figure without
                # an interval prints everywhere; "22604.0" ms claimed a precision one run lacks
                line.append(format_value(v * 1e3 if label.endswith(" ms") else v))
            else:
                line.append(texts[c][str(v)])
        cells.append(line)
    return _aligned(cells)


def _aligned(cells: list[list[str]]) -> str:
    """Rows of cells, each column right-aligned to its widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells)


SUMMARY_COLS = ["status", "throughput_rps", "goodput_rps", "slo_attainment", "slo", "ttft_p50_s", "ttft_p99_s",
                "tpot_p99_s", "itl_p99_s", "e2e_p99_s"]


def with_slo_verdicts(rows: list) -> list:
    """The rows (copies) with an ``slo`` cell: "meets" or "FAILS" (``verdicts.meets_slo``: the
    share within the SLO, each request class's, keeping up), "-" for a row that did not run or has
    no share (no request arrived). The table a study prints judges by the SLO first."""
    from servesim.outputs.verdicts import meets_slo

    out = []
    for r in rows:
        verdict = meets_slo(r) if r.get("status") == "ok" else None  # (None: no request arrived, no share)
        out.append({**r, "slo": "-" if verdict is None else "meets" if verdict else "FAILS"})
    return out


def slo_rule(classes: bool, limits: str = "") -> str:
    """What the ``slo`` column says (``with_slo_verdicts``); ``limits``: the points' SLO where they
    share one (``_slo_limits``): each request against it, a share of requests, where ``servesim
    plan`` judges p99s, so the two could disagree on one deployment with nothing printed to say why."""
    return ("slo: meets when >= 90% of requests are within it"
            + (f" (each request's {limits}: a share of the requests, not p99s)" if limits else "")
            + (", >= 90% of each request class's within its own SLO," if classes else "")
            + " and the run kept up (its backlog did not grow)")


def _slo_limits(points) -> str:
    """"TTFT <= 1 s, TPOT <= 50 ms": the SLO every point's scenario sets (no class SLOs of their
    own), "" where they differ or set none."""
    from servesim.outputs.wording import slo_limits

    texts = set()
    for p in points:
        slo = (p.data or {}).get("slo") if isinstance(p.data, dict) else None
        slo = slo if isinstance(slo, dict) else {}
        texts.add(slo_limits(slo))
    return next(iter(texts)) if len(texts) == 1 else ""


def _points_rule(points) -> str:
    """``slo_rule`` for a study's points: their SLO's limits where they share one and no class has its own."""
    classes = _has_classes(points)
    return slo_rule(classes, "" if classes else _slo_limits(points))


def _has_classes(points) -> bool:
    """Some point's scenario has request classes with SLOs of their own (each must reach 90% too:
    a class under it was hidden by "meets")."""
    from servesim.outputs.checks import class_slos

    return any(len(class_slos(p.data)) > 1 for p in points if p.data is not None)


def cmd_sweep(args) -> int:
    from servesim.studies.sweep import run_sweep

    ex = _executor(args)
    res = run_sweep(args.scenario, args.grid, args.out, args.set or [], args.seed, ex, args.seeds)
    rows = res.rows
    print(format_table(with_slo_verdicts(rows), ["point", *res.grid, *SUMMARY_COLS], given=res.grid))
    print(f"\n{_points_rule(res.points)}")  # (the table alone above its blank line)
    failed = sum(1 for r in rows if r["status"] != "ok")
    # (ran and already finished count runs, one per seed of each point; failed counts points)
    done = (f"{res.ran} ran, {res.skipped} already finished, {failed} failed" if args.seeds == 1 else
            f"{plural(res.ran, 'run')} ran, {res.skipped} already finished ({args.seeds} seeds per point), "
            f"{plural(failed, 'point')} failed")
    print(f"\n{plural(len(rows), 'point')}: {done}; "
          f"wrote {Path(args.out) / RESULTS}" + (f" (means and 95% intervals over {args.seeds} seeds; every run in "
                                                f"{Path(args.out) / 'seeds.csv'})" if args.seeds > 1 else ""))
    # what compare prints after its table: points whose backlog grew, and what the runs warned of
    # (a sweep printed none of it: its report.md was the only place a fallen-behind point was named)
    from servesim.outputs.rundir import read_results, read_study_meta
    from servesim.outputs.verdicts import caveats
    from servesim.studies.replicates import SEEDS

    out = Path(args.out)
    seed_rows = read_results(out / SEEDS) if args.seeds > 1 and (out / SEEDS).is_file() else None
    for note in caveats(rows, read_study_meta(out / "sweep.json"), out_dir=out, run_rows=seed_rows):
        print(f"note: {note}")
    return _status(res.failed_run, res.refused)


EXIT_POINTS_FAILED = 3  # a study finished, but some points failed while running (see results.csv)


def _status(failed_run: int, refused=()) -> int:
    """0, or ``EXIT_POINTS_FAILED`` (said on stderr) when points failed while running. Points
    ``refused`` as invalid ((name, reason)) do not change it; stderr names them and the first
    reason."""
    if refused:
        name, why = refused[0]
        print(f"note: {plural(len(refused), 'point')} refused as invalid and not run "
              f"({'its reason' if len(refused) == 1 else 'each reason'} is in {RESULTS}); "
              f"{name}: {why}", file=sys.stderr)
    if not failed_run:
        return 0
    print(f"servesim: error: {plural(failed_run, 'point')} failed while running "
          f"({'its' if failed_run == 1 else 'their'} error is in {RESULTS}); exit "
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


RATE_KEY_CAP = "workload.arrival.rate_rps"


def _probe_table(s, keys, keep_up: bool) -> str:
    unit = s.rate_unit  # (sessions/s where the rate starts sessions; throughput counts requests)
    lines = [[f"rate {unit}", "requests", "meets", *(k + " ms" for k in keys), "attain",
              *(["keep up"] if keep_up else []), "tput req/s"]]
    for p in s.points:
        r = p.values[RATE_KEY_CAP]
        e = s.evals.get(p.index) or {}
        lines.append([f"{r:.4g}", str(e.get("requests", "")),
                      _fmt(p.values.get("meets")) + (" (too short)" if e.get("too_short") else ""),
                      *(_fmt(e.get(k, math.nan) * 1e3) for k in keys), _fmt(e.get("attainment")),
                      *([_fmt(e.get("keep_up", math.nan))] if keep_up else []),
                      _fmt(e.get("throughput_rps"))])
    return _aligned(lines)


def _limits_text(slo: dict, args) -> str:
    """The search's limits as plan writes them ("ttft_p99 <= 1 s, tpot_p99 <= 50 ms": seconds from
    1 s; capacity wrote "ttft_p99 <= 1000 ms" of the same --slo ttft_p99=1), and its other rules."""
    from servesim.outputs.plandoc import limits_text

    limits = limits_text(slo)
    if args.keep_up > 0:
        limits += f", keeping up (>= {args.keep_up:g} left per arrival)"
    if args.attainment is not None:
        limits += f" for {args.attainment:.0%} of requests"
    return limits


def _class_slo_note(args) -> None:
    """``checks.class_slo_note`` on the scenario (with --set / --seed), printed before the search,
    and, for capacity over multi-turn sessions, that the rate searched starts sessions."""
    from servesim.outputs.checks import class_slo_note, sessions_rate_note
    from servesim.studies.points import load_base

    base = load_base(args.scenario, args.set or [], args.seed)[0]
    note = class_slo_note(base)
    if note:
        print(f"note: {note}", file=sys.stderr)
    adm = (base.get("policy") or {}).get("admission") if isinstance(base.get("policy"), dict) else None
    tb = adm.get("token_bucket") if isinstance(adm, dict) else None
    if args.command == "capacity" and isinstance(tb, dict) and tb.get("rate_rps") is not None:
        # (a P/D split behind a 20 req/s bucket, burst 10, answered 14.3 req/s, 28.6 without it:
        # every failing probe lost requests at the door, "inf" in the table, the bucket unnamed)
        print(f"note: the scenario's policy.admission.token_bucket ({tb['rate_rps']:g} req/s, burst "
              f"{tb.get('burst', 1.0):g}) rejects requests at the cluster's door, and a rejected request misses "
              "every limit: the capacity is at most about what the bucket lets through (less with bursty "
              "arrivals), whatever the deployment serves; for the deployment's own, --set "
              "policy.admission.token_bucket=null", file=sys.stderr)
    # (plan refuses sessions; a closed loop has no rate to search, refused next: no note)
    if args.command == "capacity" and sessions_rate_note(base):
        # (the rate searched starts sessions: "capacity 7.4 req/s" read as requests, where the
        # deployment served 15 turns a second there)
        print("note: with workload.sessions, workload.arrival.rate_rps starts sessions, each sending its turns one "
              "after another: the rates searched and the capacity are sessions started per second, not requests "
              "(each probe's requests arrive faster: results.csv offered_rps)", file=sys.stderr)


def cmd_capacity(args) -> int:
    from servesim.studies.capacity import CapacityOptions, SeedOptions, capacity_interval, find_capacity

    from servesim.outputs.checks import limit_unit_warnings
    from servesim.outputs.metrics import parse_slo

    # (each probe's verdict is read from its requests.csv and tbt_s.npy: those are always kept)
    ex = _executor(args, always=("summary", "scenario", "requests", "tbt"))
    opts = CapacityOptions(args.attainment, args.probe_requests, args.probe_duration, args.start, args.tol,
                           args.max_probes, args.keep_up)
    for w in limit_unit_warnings(parse_slo(args.slo)):  # before a search that could take minutes
        print(f"warning: {w['message']}", file=sys.stderr)
    _class_slo_note(args)
    given = {flag: v for flag, v in (("--max-seeds", args.max_seeds), ("--ci-target", args.ci_target)) if v is not None}
    seeds = SeedOptions(args.seeds, **{k: v for k, v in (("max_seeds", args.max_seeds), ("target", args.ci_target))
                                       if v is not None})  # (checked with one seed too)
    if args.seeds is not None and given:  # (options that would change nothing: refused rather than ignored)
        flag, v = next(iter(given.items()))
        raise InputError(f"{flag} {v}: it steers the seeds added until the interval is narrow enough, which runs "
                         f"without --seeds; --seeds {args.seeds} runs exactly that many, so it would change nothing; "
                         f"drop one of them")
    if args.seeds == 1:  # one search, no interval: the output of servesim before --seeds
        return _capacity_one_seed(find_capacity(args.scenario, args.slo, opts, args.out, args.set or [], args.seed,
                                                ex), args)

    def on_seed(k, res, iv):
        if not args.quiet:
            unit = res.search.rate_unit
            print(f"seed {k}: capacity {res.capacity_rps:.4g} {unit} ({plural(len(res.search.points), 'probe')}); "
                  "so far "
                  f"{format_interval(iv, unit=unit)} over {plural(iv.n, 'seed')}",
                  file=sys.stderr, flush=True)

    ci = capacity_interval(args.scenario, args.slo, opts, seeds, args.out, args.set or [], args.seed, ex, on_seed)
    plan, iv = ci.plan, ci.interval
    n = plan.probe_requests
    size = f"{plural(n, 'request')} each" if plan.probe_duration_s is None else \
        f"max({plural(n, 'request')}, {plan.probe_duration_s:g} s of arrivals) each"
    how = f"share within limits >= {args.attainment}" if args.attainment else "percentiles over all requests"
    print(_probe_length_line(n, plan.probe_requests_why))
    print(f"one search per seed (probes of {size}; {how}; every probe in results.csv):")
    unit = ci.per_seed[0].search.rate_unit if ci.per_seed else "req/s"
    lines = [["seed", f"capacity {unit}", f"fails at {unit}", "probes"]]
    for k, res in zip(ci.seeds, ci.per_seed):
        lines.append([str(k), _fmt(res.result["capacity_rps"]), _fmt(res.result["check_above_rps"]),
                      str(len(res.search.points))])
    print(_aligned(lines))
    limits = _limits_text(plan.slo, args)
    gpus = plan.num_gpus
    if ci.error is None:
        if iv.mean == 0:
            floor = next((r.result.get("floor") for r in ci.per_seed if r.result.get("floor")), None)
            print(f"\nthe SLO ({limits}) is not met on any seed" + (
                f": it cannot be at any rate ({floor})" if floor else ""))
        else:
            per = (f" = {format_interval(ci.per_gpu, unit=unit)} per GPU ({plural(gpus, 'GPU')})"
                   if args.per_gpu else "")
            print(f"\ncapacity {format_interval(iv, unit=unit)}{per} for {limits}")
            rel = f"; half-width {iv.rel:.1%} of the mean" if not math.isnan(iv.rel) else ""
            print(f"95% Student-t interval over {plural(iv.n, 'seed')} (each seed's capacity "
                  f"confirmed by a failing probe 10% above it){rel}"
                  + (f" (target {ci.target:.0%})" if ci.target is not None and not ci.stopped_short else ""))
            if ci.stopped_short:
                print(f"stopped short: {ci.stopped_short}")
            if ci.result.get("too_short"):
                print(f"warning: {ci.result['too_short']}")
            if ci.result.get("filling"):
                print(f"warning: {ci.result['filling']}")
            if ci.result.get("growing"):
                print(f"warning: {ci.result['growing']}")
            _burst_note(ci.result["capacity_mean_rps"], iv.mean, plan.arrival, gpus, iv, unit)
    return _capacity_end(args, ci.error)


def _probe_length_line(n: int, why: str) -> str:
    """The probe length a capacity search used, and why (``capacity.auto_probe_requests``)."""
    return f"probe length: {n} requests ({'--probe-requests ' + why if why.startswith('auto') else 'as given'})"


def _burst_note(mean_cap, cap, arrival, gpus: int, iv=None, unit: str = "req/s") -> None:
    """The mean offered rate at the capacity found (``arrival``'s rate_rps is a burst rate).
    ``iv``: the capacity's interval over seeds, which the mean rate carries with it (it grows
    with the burst rate by the on period's share): printed to that precision, not 4 digits."""
    if mean_cap is None or not abs(mean_cap - cap) > 1e-9 * cap:
        return
    if iv is None or math.isnan(iv.half):
        text, per = f"{mean_cap:.4g} {unit}", f"{mean_cap / gpus:.3g}"
    else:
        from servesim.outputs.intervals import NONNEGATIVE, Interval

        mean = Interval(mean_cap, iv.half * arrival.on_s / (arrival.on_s + arrival.off_s), iv.n, bounds=NONNEGATIVE)
        text, per = format_interval(mean, unit=unit), format_interval(mean.scaled(1 / gpus))
    print(f"workload.arrival.rate_rps is the {arrival.process} process's burst rate: at capacity the "
          f"mean offered rate is {text} ({per} per GPU)")


def _capacity_end(args, error) -> int:
    if args.out:
        print(f"wrote {Path(args.out) / RESULTS}, {Path(args.out) / 'capacity.json'}")
    if error:
        raise InputError(error)
    return 0


def _capacity_one_seed(res, args) -> int:
    s, n, duration = res.search, res.probe_requests, res.probe_duration_s
    cap, above, gpus = res.capacity_rps, res.above_rps, res.num_gpus
    unit = s.rate_unit
    keys = [f"{m}_{st}" for (m, st) in res.slo]
    size = (f"{plural(n, 'request')} each" if duration is None else
            f"max({plural(n, 'request')}, {duration:g} s of arrivals) each")
    how = f"share within limits >= {args.attainment}" if args.attainment else "percentiles over all requests"
    print(_probe_length_line(n, res.result["probe_requests_why"]))
    print(f"probes ({size}; {how}):")
    print(_probe_table(s, keys, args.keep_up > 0))
    limits = _limits_text(res.slo, args)
    if not res.done:
        pass  # the error below says what was bracketed
    elif cap == 0:
        # (where the latency floors say no rate can meet the limits, why: as over several seeds)
        why = f": it cannot be at any rate ({s.floor})" if s.floor else ""
        print(f"\nthe SLO ({limits}) is not met even at {min(s.results):.4g} {unit}{why}{res.none_served}")
    else:
        # (per GPU to the capacity's digits: "23.11 req/s = 23.1 req/s per GPU (1 GPU)" read as two figures)
        per = f" = {cap / gpus:.4g} {unit} per GPU ({plural(gpus, 'GPU')})" if args.per_gpu else ""
        print(f"\ncapacity {cap:.4g} {unit}{per} for {limits}")
        if above is not None:
            print(f"confirmed: meets at {cap:.4g} {unit}, fails at {above:.4g} {unit} (+{above / cap - 1:.0%})")
        print("one seed: no interval (without --seeds 1, capacity searches several seeds and gives a 95% interval)")
        if res.too_short:
            print(f"warning: {res.too_short}")
        if res.filling:
            print(f"warning: {res.filling}")
        if res.growing:
            print(f"warning: {res.growing}")
        _burst_note(res.mean_capacity_rps, cap, res.arrival, gpus, unit=unit)
    return _capacity_end(args, res.error)


def cmd_compare(args) -> int:
    from servesim.outputs.verdicts import (caveats, difference_sentences, differences, gpu_counts, names_text,
                                           ranked, row_name, tied, with_per_gpu)
    from servesim.studies.compare import RATE_KEY, plan_compare, run_compare
    from servesim.studies.replicates import SEEDS
    from servesim.outputs.rundir import read_results, read_study_meta

    ex = _executor(args)
    plan = plan_compare(args.scenario, args.policies, args.variant, args.rates, args.set or [], args.seed,
                        args.seeds)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    rows = run_compare(plan, args.out, ex)
    out = Path(args.out)
    per_gpu = len(set(gpu_counts(rows).values())) > 1
    shown = with_slo_verdicts(ranked(with_per_gpu(rows) if per_gpu else rows))
    cols = ["label", *([RATE_KEY] if plan.rates else []), "status", "goodput_rps",
            *(["goodput_per_gpu"] if per_gpu else []), "slo_attainment", "slo", "throughput_rps", "ttft_p50_s",
            "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "e2e_p99_s", "mean_batch_size", "num_gpus"]
    print(f"ranked by goodput{' per GPU' if per_gpu else ''} (requests/s within the SLO), those that meet the SLO "
          f"first; {_points_rule(plan.points)}")
    print(format_table(shown, cols, given=[RATE_KEY]))
    for group in tied(rows):  # (one seed: equal to the digits shown, no ranking between them)
        names = names_text([row_name(r, "label", plan.rate_unit) for r in group])
        gp = "goodput per GPU" if per_gpu else "goodput"
        print(f"note: {names} tie (the same SLO verdict, {gp} and SLO attainment to the digits shown): listed in "
              "the order given, not ranked")
    meta = read_study_meta(out / "sweep.json")
    seed_rows = read_results(out / SEEDS) if plan.seeds > 1 else None
    for note in caveats(rows, meta, out_dir=out, run_rows=seed_rows, unit=plan.rate_unit):
        print(f"note: {note}")
    if plan.seeds > 1:
        base = plan.configs[0][0]
        for line in difference_sentences(differences(seed_rows, base), base, gpu_counts(rows), rows,
                                         unit=plan.rate_unit):
            print(line)
    print(f"\nwrote {out / RESULTS}" + (f", {out / SEEDS}" if plan.seeds > 1 else ""))
    if not args.no_report:
        from servesim.plots.report import build_report

        path = build_report(out, progress=not args.quiet)
        from servesim.cli.report import drew_figures

        print(f"wrote {path}" + (" and its figures" if drew_figures(out) else " (no figures: nothing to draw)"))
    return _status(failed_while_running(plan.points), refused_points(plan.points, plan.rate_unit))


def _starting(command: str):
    """Progress for commands that run items one after another: a line on stderr as each starts."""
    def starting(name: str, k: int, n: int) -> None:
        print(f"{command}: running {name} ({k} of {n})...", file=sys.stderr, flush=True)

    return starting


def cmd_lessons(args) -> int:
    from servesim.studies.lessons import LESSONS, run_lessons, write_lessons

    names = []
    for item in args.only or []:
        names += [n.strip() for n in item.split(",") if n.strip()]
    bad = [n for n in names if n not in LESSONS]
    if bad or (args.only is not None and not names):  # (an empty --only named none: not "all of them")
        raise InputError(f"--only: unknown lesson {bad[0] if bad else ''!r}; valid: {', '.join(LESSONS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # a folder we cannot write fails now, not after the runs

    def show(x):
        print(f"{x.name:<18} {x.verdict:<14} {'; '.join(x.findings)}  ({x.wall_s:.1f} s)", flush=True)

    lessons = run_lessons(names or None, args.quick, show, args.seed, None if args.quiet else _starting("lessons"))
    figures = write_lessons(lessons, out, args.quick, args.seed, figures=not args.no_figures)
    held = sum(x.holds for x in lessons)
    print(f"\n{held} of {len(lessons)} claims hold; wrote {out / 'lessons.md'}, lessons.json"
          + (f" and {sum(len(v) for v in figures.values())} figures" if figures else ""))
    return 0


def cmd_reproduce(args) -> int:
    from servesim.studies.reproduce import EXPERIMENTS, Options, run_reproduce, simulated_text, summary_line, \
        write_readme, write_reproduce

    bad = [n for n in args.names if n not in EXPERIMENTS]
    if bad:
        raise InputError(f"unknown experiment {bad[0]!r}; valid: {', '.join(EXPERIMENTS)}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    out = Path(args.out)
    readme = Path(args.write_readme) if args.write_readme else None
    if readme is not None and not readme.is_file():
        raise InputError(f"--write-docs {readme}: no such file")
    left = [n for n in EXPERIMENTS if n not in args.names] if args.names else []
    if readme is not None and left:
        # (the table and its summary line were replaced by this run's alone: `reproduce splitwise
        # --write-docs` dropped every other experiment's rows from docs/fidelity.md)
        raise InputError(f"--write-docs {readme}: rewrites the whole fidelity table, so it needs every experiment; "
                         f"this run leaves out {', '.join(left)}: run it without experiment names, or read this "
                         f"run's table in {out / 'reproduce.md'} (without --write-docs)")
    out.mkdir(parents=True, exist_ok=True)  # a folder we cannot write fails now, not after the runs
    opts = Options(args.quick, args.seed, args.workers)

    def show(e):
        rough = "; --quick: rough verdicts" if args.quick else ""
        print(f"{e.name}: {e.matched} of {len(e.figures)} figures matched ({e.wall_s:.1f} s{rough})", flush=True)
        for f in e.figures:
            pub = "-" if f.published is None else (f"{f.published[0]:g}-{f.published[1]:g}"
                                                   if isinstance(f.published, tuple) else f"{f.published:.4g}")
            sim = simulated_text(f.simulated)
            ratio = "" if f.ratio is None else f" ({f.ratio_text}x)"
            print(f"  {f.label}: published {pub}, simulated {sim}{ratio}: {f.verdict}", flush=True)

    experiments = run_reproduce(args.names or None, opts, show, None if args.quiet else _starting("reproduce"))
    write_reproduce(experiments, out, opts)
    print(f"\n{summary_line(experiments, args.quick)}; wrote {out / 'reproduce.md'}, reproduce.json")
    if readme is not None:
        write_readme(readme, experiments, opts)
        print(f"wrote the fidelity table into {readme}")
    return 0
