"""``servesim compare``: the same workload through each policy; one table and a figure set.

Policies come from the ``POLICIES`` registry (``--policies a,b``); ``--variant LABEL KEY=VALUE
...`` adds a labelled configuration (e.g. a policy with other parameters). Every configuration
runs with the scenario's seed, so each sees exactly the same requests. ``--rates`` also sweeps
the arrival rate, which adds latency-vs-load, goodput and throughput-latency figures. The runs go
through the sweep machinery (parallel, resumable, ``DIR/results.csv`` with a ``label`` column),
then ``servesim report DIR`` is built unless ``--no-report``.
"""

from __future__ import annotations

from pathlib import Path

from servesim.errors import InputError, did_you_mean
from servesim.inputs.overrides import parse_override
from servesim.studies.points import load_base, make_points
from servesim.studies.sweep import (RESULTS, add_executor_args, check_workers, execute, format_table, read_results,
                                    write_meta)

RATE_KEY = "workload.arrival.rate_rps"


def parse_rates(text: str | None) -> list[float]:
    if not text:
        return []
    out = []
    for item in text.split(","):
        try:
            r = float(item)
        except ValueError:
            raise InputError(f"--rates {item!r} is not a number; expected e.g. --rates 2,4,8") from None
        if not r > 0:
            raise InputError(f"--rates: each rate must be > 0, got {item!r}")
        out.append(r)
    return out


def policy_names() -> list[str]:
    """Valid ``policy.name`` values: the ``POLICIES`` registry plus the deployments the scenario
    schema names (``pd_split`` is two pools of registered policies, not a registry entry)."""
    import typing

    from servesim.policies import POLICIES
    from servesim.inputs.scenario import Policy

    names = list(POLICIES)
    hint = typing.get_type_hints(Policy).get("name")
    for n in typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ():
        if n not in names:
            names.append(n)
    return names


def configurations(policies: str | None, variants) -> list[tuple[str, dict]]:
    """[(label, {dotted.key: value})] from --policies and --variant, policy names checked."""
    POLICIES = policy_names()

    configs = []
    for name in [x.strip() for x in (policies or "").split(",") if x.strip()]:
        if name not in POLICIES:
            raise InputError(f"--policies: unknown policy {name!r};{did_you_mean(name, POLICIES)}")
        configs.append((name, {"policy.name": name}))
    for v in variants or []:
        label, *sets = v
        if not sets:
            raise InputError(f"--variant {label}: give at least one KEY=VALUE after the label")
        ov = {}
        for text in sets:
            try:
                parts, value = parse_override(text)
            except InputError as e:
                raise InputError(f"--variant {label}: {str(e).replace('--set ', '', 1)}") from None
            ov[".".join(parts)] = value
        name = ov.get("policy.name")
        if name is not None and name not in POLICIES:
            raise InputError(f"--variant {label}: unknown policy {name!r};{did_you_mean(str(name), POLICIES)}")
        configs.append((label, ov))
    labels = [c[0] for c in configs]
    if not configs:
        raise InputError("servesim compare: give --policies a,b,... and/or --variant LABEL KEY=VALUE ...")
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise InputError(f"servesim compare: each configuration needs its own label; repeated: {', '.join(sorted(dup))}")
    return configs


CHUNK_NOTE_ABOVE = 2048  # vLLM's default token budget with chunked prefill; Sarathi-Serve uses 512-2048


def chunk_budget_note(configs, base: dict) -> str | None:
    """A note when a configuration runs ``chunked_prefill`` with the scenario's token budget and
    that budget is large (``--policies chunked_prefill`` changes only the policy's name): prompts
    shorter than the budget are never chunked, so the run is continuous batching by another name."""
    pol = base.get("policy") if isinstance(base.get("policy"), dict) else {}
    budget = pol.get("max_num_batched_tokens", 8192)
    if not isinstance(budget, int) or budget <= CHUNK_NOTE_ABOVE:
        return None
    for label, ov in configs:
        if ov.get("policy.name") == "chunked_prefill" and "policy.max_num_batched_tokens" not in ov:
            return (f"note: {label} runs chunked_prefill with the scenario's token budget "
                    f"(policy.max_num_batched_tokens={budget}): prompts shorter than that are never chunked. "
                    f"For Sarathi-Serve-sized chunks add e.g. --variant chunked-512 policy.name=chunked_prefill "
                    f"policy.max_num_batched_tokens=512")
    return None


def cmd_compare(args) -> int:
    import sys

    check_workers(args)
    configs = configurations(args.policies, args.variant)
    rates = parse_rates(args.rates)
    base, _ = load_base(args.scenario, args.set, args.seed)
    note = chunk_budget_note(configs, base)
    if note:
        print(note, file=sys.stderr)
    variants = []
    for label, ov in configs:
        for r in rates or [None]:
            values = {"label": label}
            o = dict(ov)
            if r is not None:
                values[RATE_KEY] = r
                o[RATE_KEY] = r
            variants.append((values, o))
    points = make_points(base, variants)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_meta(out, {"kind": "compare", "scenario": str(args.scenario), "labels": [c[0] for c in configs],
                     "configurations": {lbl: ov for lbl, ov in configs}, "rates": rates, "set": args.set or []})
    execute(points, out, args.executor, args.workers, args.address, not args.quiet, desc="compare")
    rows = read_results(out / RESULTS)
    cols = ["label", *([RATE_KEY] if rates else []), "status", "throughput_rps", "goodput_rps", "slo_attainment",
            "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "tbt_p99_s", "e2e_p99_s", "mean_batch_size", "num_gpus"]
    print(format_table(rows, cols))
    print(f"\nwrote {out / RESULTS}")
    if not args.no_report:
        from servesim.plots.report import build_report

        path = build_report(out)
        print(f"wrote {path} and its figures")
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="the same workload through each policy: a table and figures")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--policies", metavar="A,B,...", help="registered policy names to compare")
    p.add_argument("--variant", nargs="+", action="append", metavar=("LABEL", "KEY=VALUE"),
                   help="a labelled configuration: LABEL KEY=VALUE [KEY=VALUE ...] (repeatable)")
    p.add_argument("--rates", metavar="R1,R2,...", help="also sweep workload.arrival.rate_rps (req/s)")
    p.add_argument("--out", default="compare-out", help="output folder (default: ./compare-out)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field for every run")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--no-report", action="store_true", help="skip figures and report.md")
    add_executor_args(p)
    p.set_defaults(func=cmd_compare)
