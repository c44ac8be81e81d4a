"""``servesim plan``: call ``servesim.studies.plan.run_plan`` with the parsed arguments, show a
progress bar with an ETA, print the ranked table, the answer and the failures that support it."""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.cli.studies import _class_slo_note, _executor
from servesim.cost.economics import OVERRIDE_MAX, OVERRIDE_MIN
from servesim.errors import InputError, ascii_float, ascii_int, clip
from servesim.outputs.progress import interactive
from servesim.outputs.wording import plural


def _ints(text: str, flag: str) -> tuple:
    try:
        vals = tuple(ascii_int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated integers") from None
    if not vals:
        raise InputError(f"{flag}: give at least one value")
    return vals


def _ratios(text: str) -> tuple:
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        try:
            p, d = (ascii_int(x) for x in parts)
        except ValueError:
            raise InputError(f"--pd-ratios {item!r}: expected P:D, e.g. 1:2") from None
        out.append((p, d))
    return tuple(out)


def _prices(items) -> tuple:
    out = []
    for text in items or []:
        for item in text.split(","):
            if "=" not in item:
                raise InputError(f"--price {item!r}: expected GPU=USD, e.g. h100-sxm=2.5")
            g, v = item.split("=", 1)
            # (an empty side read "--price : not one of the GPUs searched", or "'' is not a number")
            if not g.strip():
                raise InputError(f"--price {item!r}: no GPU before '='; expected GPU=USD, e.g. h100-sxm=2.5 (a GPU "
                                 "that --gpus searches, or the scenario's hardware.gpu)")
            if not v.strip():
                raise InputError(f"--price {item!r}: no price after '='; expected GPU=USD, e.g. {g.strip()}=2.5 "
                                 "(USD per GPU-hour)")
            try:
                usd = ascii_float(v)
            except ValueError:
                raise InputError(f"--price {item!r}: {v!r} is not a number") from None
            if not (usd == 0 or OVERRIDE_MIN <= usd <= OVERRIDE_MAX):
                raise InputError(f"--price {item!r}: the price (USD per GPU-hour) must be 0 or from {OVERRIDE_MIN:g} "
                                 f"to {OVERRIDE_MAX:g}")
            out.append((g.strip(), usd))
    return tuple(out)


def _names(text: str | None, flag: str, what: str) -> tuple:
    """A comma-separated list of names; given but naming none (``--gpus ,``) is refused, not read
    as the flag's default."""
    names = tuple(x.strip() for x in (text or "").split(",") if x.strip())
    if text is not None and not names:
        raise InputError(f"{flag} {text!r}: names no {what}; give a comma-separated list, or leave {flag} out for "
                         "its default")
    return names


def _model_note(args) -> str | None:
    """``note: ...`` on how the scenario's model was read, as run and validate print it: a window
    on only some layers (Gemma-2), a generic reading, or a checkpoint published in another weight
    dtype than the one priced (DeepSeek-V3's FP8 in bf16: every shape then holds twice the weights
    vLLM loads, and may be pruned for it). None otherwise."""
    from servesim.inputs.scenario import load_scenario
    from servesim.inputs.specs import model_note

    try:
        sc = load_scenario(args.scenario, args.set or [], args.seed)
    except InputError:
        return None
    note = model_note(sc.model, dtype=sc.hardware.dtype)
    return f"note: {note}" if note else None


def _bucket_warning(args) -> str | None:
    """``warning: ...`` where the scenario's ``policy.admission.token_bucket`` admits less than the
    rate planned for: it sits at the cluster's door, so every configuration of every size rejects
    the excess, and a rejected request misses every limit (chat at 16 req/s behind a 10 req/s bucket:
    every shape "infeasible" for "too many requests never completed", the bucket never named).
    None otherwise."""
    from servesim.inputs.scenario import load_scenario, mean_rate_at

    try:
        sc = load_scenario(args.scenario, args.set or [], args.seed)
    except InputError:
        return None
    tb, arrival = sc.policy.admission.token_bucket, getattr(sc.workload, "arrival", None)
    if tb is None or arrival is None or getattr(arrival, "rate_rps", None) is None:
        return None
    mean = mean_rate_at(arrival, args.rate)
    if not tb.rate_rps < mean:
        return None
    scope = "" if sc.policy.admission.classes is None else " (of policy.admission.classes)"
    return (f"warning: the scenario's policy.admission.token_bucket admits {tb.rate_rps:g} req/s (burst "
            f"{tb.burst:g}), below the {mean:.3g} req/s planned for: it rejects about "
            f"{1 - tb.rate_rps / mean:.0%} of the requests{scope} at the cluster's door in every configuration, "
            "whatever its size, and a rejected request misses every limit. Plan without it (--set "
            "policy.admission.token_bucket=null) or with its rate_rps at or above --rate")


def cmd_plan(args) -> int:
    from servesim.outputs import plandoc as D
    from servesim.studies.plan import PlanOptions, check_options, run_plan

    if args.top < 0:
        raise InputError(f"--top must be >= 0 (rows of the ranked table printed), got {args.top}")
    opts = PlanOptions(
        rate_rps=args.rate, slo=args.slo, attainment=args.attainment,
        gpus=_names(args.gpus, "--gpus", "GPU"), tps=_ints(args.tp, "--tp"), pps=_ints(args.pp, "--pp"),
        policies=_names(args.policies, "--policies", "policy"),
        chunks=_ints(args.chunks, "--chunks"), pd_ratios=_ratios(args.pd_ratios), mixed_pd=args.mixed_pd,
        max_gpus=args.max_gpus, objective=args.objective, seeds=args.seeds, prices=_prices(args.price),
        probe_requests=args.probe_requests, requests=args.requests, tol=args.tol, keep_up=args.keep_up,
        max_probes=args.max_probes, verify_top=args.verify_top, exhaustive=args.exhaustive)
    check_options(opts)  # (before the progress bar: a bad option is the one line on stderr)
    _class_slo_note(args)
    warning = _bucket_warning(args)
    if warning:
        print(warning, file=sys.stderr)
    ex = _executor(args)
    out = Path(args.out)
    bar = None
    if not args.quiet and interactive():
        from tqdm import tqdm

        bar = tqdm(total=1, unit="step", desc="plan", file=sys.stderr, dynamic_ncols=True)

    def progress(done, total, best):
        bar.total = total
        bar.n = done
        if best:
            bar.set_postfix_str(f"best {best}", refresh=False)
        bar.refresh()

    try:
        res = run_plan(args.scenario, opts, out, args.set or [], args.seed, ex, progress if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    doc = res.doc
    c = D.counts(doc)
    print(f"plan: {doc.get('model')} at {doc['rate_rps']:g} req/s, {D.slo_text(doc)}, "
          f"{plural(len(doc['seeds']), 'seed')}; "
          f"{plural(len(doc['candidates']), 'shape')}: " + ", ".join(f"{v} {k}" for k, v in c.items())
          + f"; {doc['wall_s']:.0f} s")
    for note in (D.burst_note(doc), D.layout_note(doc), _model_note(args)):
        if note:
            print("  " + note)
    for line in D.pruned_lines(doc, examples=1):
        print("  " + clip(line, 240))  # (the whole reason is in report.md and plan.json)
    rows = D.table_rows(doc, args.top)
    if rows:
        print()
        print(D.aligned(rows))
        for line in D.table_notes(doc, args.top):
            print(line)
        more = len(doc["ranking"]) - len(rows)
        if more > 0:
            print(f"... and {more} more in {out / D.PLAN_JSON}")
    print()
    print(D.answer_sentence(doc))
    note = D.short_run_note(doc)
    if note:
        print(note)
    for line in D.verification_lines(doc):
        print("  " + line)
    for line in D.failure_lines(doc):
        print(line)
    # (results.csv only when something was simulated: a space pruned whole, by memory or TP, has none)
    wrote = [str(out / f) for f in (D.PLAN_JSON, "results.csv") if (out / f).is_file()]
    if not args.no_report:
        from servesim.plots.plan_report import build_plan_report

        wrote.append(str(build_plan_report(out)))
        if (out / "figures").is_dir() and any((out / "figures").glob("*.png")):
            wrote.append(str(out / "figures") + "/*.png")
    print("\nwrote " + ", ".join(wrote))
    return 0
