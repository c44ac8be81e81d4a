"""``servesim compare``: the same workload through each policy; one table and a figure set.

Policies come from the ``POLICIES`` registry (``--policies a,b``); ``--variant LABEL KEY=VALUE
...`` adds a labelled configuration (e.g. a policy with other parameters). Every configuration
runs with the scenario's seed, so each sees exactly the same requests. ``--rates`` also sweeps
the arrival rate, which adds latency-vs-load, goodput and throughput-latency figures. The runs go
through the sweep machinery (parallel, resumable, ``DIR/results.csv`` with a ``label`` column),
then ``servesim report DIR`` is built unless ``--no-report``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import InputError, ascii_float, did_you_mean
from servesim.inputs.overrides import override_texts, parse_override
from servesim.outputs.checks import rate_unit, sessions_rate_note
from servesim.outputs.verdicts import study_warnings
from servesim.studies.executors import ExecutorOptions
from servesim.studies.points import (given_twice, load_base, make_points, require_rate, scenario_hash,
                                    scenario_label)
from servesim.studies.replicates import check_seed_count
from servesim.studies.lock import folder_lock
from servesim.studies.sweep import RESULTS, begin_study, execute_seeds, read_results, write_meta

RATE_KEY = "workload.arrival.rate_rps"


def parse_rates(text) -> list[float]:
    """``--rates`` text (``r1,r2,...``); from Python also a number or a list of them."""
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        text = str(float(text))
    elif text is not None and not isinstance(text, str):
        if not hasattr(text, "__iter__"):
            raise TypeError(f"rates: 'r1,r2,...' or a list of req/s, got {type(text).__name__}")
        text = ",".join(str(r) for r in text)  # (a list was "'list' object has no attribute 'split'")
    if not text:
        return []
    out = []
    for item in text.split(","):
        try:
            r = ascii_float(item)
        except ValueError:
            raise InputError(f"--rates {item!r} is not a number; expected e.g. --rates 2,4,8") from None
        if not r > 0:
            raise InputError(f"--rates: each rate must be > 0, got {item!r}")
        if r == math.inf:  # (inf, 1e400: refused here, as 0 and nan are, not as every configuration invalid)
            raise InputError(f"--rates: each rate must be finite, got {item!r}")
        if r in out:  # (each configuration ran twice at it, as --grid refuses a value given twice)
            raise InputError(f"--rates: {item.strip()!r} is given twice (rates {out.index(r) + 1} and {len(out) + 1}); "
                             "give each rate once (--seeds N repeats every point on N seeds)")
        out.append(r)
    return out


def policy_names() -> list[str]:
    """Registered ``policy.name`` values: the policies (``servesim.plugins.names``) plus the
    deployments (``pd_split`` is two pools of registered policies, not a registry entry).
    ``module:Class`` names are valid too."""
    from servesim.plugins import names
    from servesim.policies import DEPLOYMENTS

    return names("policy") + list(DEPLOYMENTS)


def _known(name: str, names: list) -> bool:
    return name in names or ":" in name


def configurations(policies: str | None, variants) -> list[tuple[str, dict]]:
    """[(label, {dotted.key: value})] from --policies and --variant, policy names checked."""
    POLICIES = policy_names()

    configs = []
    for name in [x.strip() for x in (policies or "").split(",") if x.strip()]:
        if not _known(name, POLICIES):
            raise InputError(f"--policies: unknown policy {name!r};{did_you_mean(name, POLICIES)} (or module:Class)")
        configs.append((name, {"policy.name": name}))
    for v in variants or []:
        label, *sets = v
        if not label.strip() or "=" in label:  # (a blank label was shown as "point 2"; KEY=VALUE: no label)
            raise InputError(f"--variant {label!r}: the first word is the variant's label (e.g. --variant big-batch "
                             "policy.max_num_seqs=512), then its KEY=VALUE changes")
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
        if name is not None and not _known(str(name), POLICIES):
            raise InputError(f"--variant {label}: unknown policy {name!r};{did_you_mean(str(name), POLICIES)} "
                             "(or module:Class)")
        configs.append((label, ov))
    labels = [c[0] for c in configs]
    if not configs:
        raise InputError("servesim compare: give --policies a,b,... and/or --variant LABEL KEY=VALUE ...")
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise InputError(f"servesim compare: each configuration needs its own label; repeated: "
                         f"{', '.join(sorted(dup))}")
    _check_each_configuration_once(configs, _policies_given(policies))
    return configs


def _check_each_configuration_once(configs, from_policies: int) -> None:
    """Two configurations that run the same (``--policies continuous,servesim.policies.continuous:
    ContinuousPolicy``, one policy by two names; or two variants of the same changes) are refused,
    as plan refuses one policy by two spellings: the comparison ran it twice, as two rows and two
    lines that differed only by noise-free labels. Policies are told apart by what they run
    (``servesim.plugins.policy_identity``; one that does not load, by its name), the other changes
    by their values."""
    import json

    from servesim.plugins import policy_identity, policy_identity_text

    def where(i):
        return _where(configs, from_policies, i)

    idents, rests, keys = [], [], []
    for i, (_, ov) in enumerate(configs):
        rest = {k: v for k, v in ov.items() if k != "policy.name"}
        name = ov.get("policy.name")
        try:
            ident = policy_identity(str(name), where(i)) if name is not None else None
        except InputError:  # (a name that does not load: refused with the configuration, _refuse_invalid_configs)
            ident = (str(name),)
        idents.append(ident)
        rests.append(rest)
        keys.append((ident, json.dumps(rest, sort_keys=True, default=repr)))
    twice = given_twice(keys)
    if twice:
        j, i = twice
        label, ident, rest = configs[i][0], idents[i], rests[i]
        same = f"both {policy_identity_text(ident)}" if ident is not None else "the same changes"
        extra = f", with the same changes ({', '.join(f'{k}={v}' for k, v in rest.items())})" if rest and \
            ident is not None else ""
        raise InputError(f"servesim compare: {label!r} ({where(i)}) runs what {configs[j][0]!r} ({where(j)}) runs "
                         f"({same}{extra}): the comparison would run one configuration twice; give each once")


def _policies_given(policies) -> int:
    """How many of the configurations came from ``--policies`` (``configurations`` puts them first)."""
    return len([x for x in (policies or "").split(",") if x.strip()])


def _where(configs, from_policies: int, i: int) -> str:
    """What named configuration ``i``: its ``--policies`` value or its ``--variant``."""
    return f"--policies value {i + 1}" if i < from_policies else f"--variant {configs[i][0]}"


def _check_each_scenario_once(points, configs, from_policies: int) -> None:
    """Two configurations whose changes, once read, make the same scenario (the same hash: one run
    folder), refused as ``_check_each_configuration_once`` refuses the same changes:
    ``--variant a policy.max_num_seqs=8 --variant b policy.max_num_seqs=8.0`` ran one
    configuration as two rows sharing one run."""
    labels = [label for label, _ in configs]
    first: dict = {}
    for p in points:
        if p.data is None:
            continue
        label = p.values["label"]
        # the scenario's name is a label (summary.json's scenario), not part of the configuration:
        # --variant a name=x --variant b name=y ran one configuration as two rows, with equal results
        j = first.setdefault(scenario_hash({k: v for k, v in p.data.items() if k != "name"}), label)
        if j != label:
            a, b = labels.index(j), labels.index(label)
            names = {q.data.get("name") for q in points if q.data is not None and q.values["label"] in (j, label)}
            only = ", differing only in name, a label" if len(names) > 1 else ""
            raise InputError(f"servesim compare: {label!r} ({_where(configs, from_policies, b)}) runs what {j!r} "
                             f"({_where(configs, from_policies, a)}) runs (the same scenario once their values are "
                             f"read{only}): the comparison would run one configuration twice; give each once")


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
            return (f"{label} runs chunked_prefill with the scenario's token budget "
                    f"(policy.max_num_batched_tokens={budget}): prompts shorter than that are never chunked. "
                    f"For Sarathi-Serve-sized chunks add e.g. --variant chunked-512 policy.name=chunked_prefill "
                    f"policy.max_num_batched_tokens=512")
    return None


def split_colocated_replicas(configs, base: dict) -> tuple[list, list]:
    """A ``pd_split`` configuration on a scenario with ``cluster.replicas`` R > 1 (which pd_split
    refuses: its pools are sized by ``policy.prefill/decode.replicas``) runs as a split of the same
    GPUs (``simulation.pd_split_replicas``), unless it sizes the pools itself. Returns (configs,
    notes saying what was translated)."""
    from servesim.simulation import pd_split_replicas

    cluster = base.get("cluster")
    replicas = cluster.get("replicas", 1) if isinstance(cluster, dict) else 1  # (else the points say what is wrong)
    if not isinstance(replicas, int) or replicas <= 1:
        return configs, []
    out, notes = [], []
    sizing = ("cluster.replicas", "policy.prefill.replicas", "policy.decode.replicas", "policy.prefill",
              "policy.decode")
    for label, ov in configs:
        if ov.get("policy.name") == "pd_split" and not any(k in ov for k in sizing):
            p, d = pd_split_replicas(replicas)
            ov = {**ov, "cluster.replicas": 1, "policy.prefill.replicas": p, "policy.decode.replicas": d}
            notes.append(f"{label}: the scenario's cluster.replicas={replicas} runs as a P/D split of the same "
                         f"GPUs: policy.prefill.replicas={p}, policy.decode.replicas={d} (another split: --variant "
                         f"LABEL policy.name=pd_split cluster.replicas=1 policy.prefill.replicas=P "
                         f"policy.decode.replicas=D)")
        out.append((label, ov))
    return out, notes


@dataclass
class ComparePlan:
    """What a comparison will run: each configuration (at each rate), as sweep points."""

    scenario: str
    overrides: list  # --set texts applied to every run
    configs: list  # [(label, {dotted.key: value})]
    rates: list  # req/s; empty: the scenario's own rate
    points: list  # Point, one per configuration and rate
    notes: list  # what the reader must know before trusting the table (chunk_budget_note, translations)
    seeds: int = 1  # independent seeds per point (replicates.py); > 1 adds intervals
    rate_unit: str = "req/s"  # the rates' unit: "sessions/s" where the rate starts multi-turn sessions


def _check_has_rate(base: dict) -> None:
    """``--rates`` on a scenario whose arrival process has no rate (a closed loop, a trace, all at
    once) is refused as such, not point by point as an unknown field the user never wrote. (A
    scenario that does not parse is left to its points, which name what is wrong.)"""
    from servesim.inputs.scenario import scenario_from_dict

    try:
        arrival = scenario_from_dict(base).workload.arrival
    except InputError:
        return
    require_rate(arrival, "--rates sets")


def _check_overrides_matter(overrides, configs) -> None:
    """A ``--set KEY=VALUE`` that every configuration sets again (``--policies`` sets
    ``policy.name``) would change nothing: an ``InputError`` saying so, rather than a comparison
    that silently ignores it."""
    for text in overrides or ():
        key = ".".join(parse_override(text)[0])
        if configs and all(key in ov for _, ov in configs):
            raise InputError(f"--set {text}: every configuration sets {key} itself (--policies sets policy.name, "
                             "--variant the keys it lists), so it would change nothing; drop it, or give it in the "
                             "--variant it is meant for")


def _refuse_invalid_configs(points, scenario: str = "") -> None:
    """An ``InputError`` naming the first configuration that is invalid at every rate (a value its
    ``--variant`` or ``--policies`` gives that the schema, or the simulation's setup, refuses).
    Each configuration is one the user named, so a typo in one is an error before anything runs,
    not a missing row and exit status 0.
    (A sweep's grid may hold invalid combinations; there, such points are rows with their reason.)
    ``scenario``: the file the configurations change, named first (as ``servesim run`` names it)."""
    by_label: dict = {}
    for p in points:
        by_label.setdefault(p.values["label"], []).append(p)
    for label, ps in by_label.items():
        error = ""
        for p in ps:
            error = (p.error or "refused by the schema") if p.data is None else _setup_error(p.data)
            if not error:
                break
        if error:
            where = f"{scenario}: " if scenario and scenario not in error else ""
            raise InputError(f"{where}configuration {label!r} (--policies/--variant) is invalid: {error}")


def _setup_error(data: dict) -> str:
    """What the simulation's own setup refuses in a point the schema read (a P/D split with
    cluster.replicas > 1, a model that does not fit its GPUs, ...), or "". Such a configuration
    was run at every rate, each point an error row, and the comparison exited 0 without it."""
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import prepare

    try:
        prepare(scenario_from_dict(data))
    except InputError as e:
        return str(e)
    except Exception:  # noqa: BLE001 (anything else is the run's to report, as a point that failed while running)
        return ""
    return ""


def _python_configs(policies, variants) -> tuple:
    """``plan_compare``'s ``policies`` (``"a,b"``, or from Python a list of names) and ``variants``
    (a list of ``[label, "key=value", ...]`` lists) as ``configurations`` takes them; a
    ``TypeError`` for another shape (a variant as ``(label, [texts])`` ended in an AttributeError,
    one given bare was taken character by character)."""
    if policies is not None and not isinstance(policies, str):
        if not isinstance(policies, (list, tuple)) or not all(isinstance(x, str) for x in policies):
            raise TypeError(f"plan_compare(policies=...): 'a,b' or a list of policy names, got {policies!r:.80}")
        policies = ",".join(policies)
    if variants is None:
        return policies, variants
    shape = "a list of variants, each a list of texts [label, 'key=value', ...]"
    if isinstance(variants, str) or not isinstance(variants, (list, tuple)):
        raise TypeError(f"plan_compare(variants=...): {shape}, got {variants!r:.80}")
    for v in variants:
        if isinstance(v, str):
            raise TypeError(f"plan_compare(variants=...): {shape}, got {v!r:.80} (one variant: put it in a list)")
        if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, str) for x in v):
            raise TypeError(f"plan_compare(variants=...): {shape}, got {v!r:.80}")
    return policies, variants


def plan_compare(scenario, policies: str | None, variants, rates: str | None, overrides=(),
                 seed: int | None = None, seeds: int = 1) -> ComparePlan:
    """The points of comparing ``policies`` (``a,b,...``) and ``variants`` ([label, key=value,
    ...] lists) on the scenario file, at each of ``rates`` (``r1,r2,...``) when given, each on
    ``seeds`` seeds."""
    check_seed_count(seeds)
    overrides = override_texts(overrides, "plan_compare(overrides=...)")
    policies, variants = _python_configs(policies, variants)
    configs = configurations(policies, variants)
    _check_overrides_matter(overrides, configs)
    rate_list = parse_rates(rates)
    base, _ = load_base(scenario, overrides, seed)
    if rate_list:
        _check_has_rate(base)
    note = chunk_budget_note(configs, base)
    configs, notes = split_colocated_replicas(configs, base)
    sessions = sessions_rate_note(base)  # (the rate starts sessions: "at 2 req/s" read as requests)
    notes = ([note] if note else []) + notes + ([sessions] if sessions else [])
    runs = []
    for label, ov in configs:
        for r in rate_list or [None]:
            values = {"label": label}
            o = dict(ov)
            if r is not None:
                values[RATE_KEY] = r
                o[RATE_KEY] = r
            runs.append((values, o))
    points = make_points(base, runs, "--policies/--variant/--rates", "configuration")
    _refuse_invalid_configs(points, scenario_label(scenario, base))
    _check_each_scenario_once(points, configs, _policies_given(policies))
    return ComparePlan(scenario_label(scenario, base), list(overrides or []), configs, rate_list, points, notes, seeds,
                       rate_unit(base))


def run_compare(plan: ComparePlan, out: str | Path, ex: ExecutorOptions = ExecutorOptions()) -> list[dict]:
    """Run the plan's points into ``out`` (results.csv with a ``label`` column, runs/<hash>/,
    sweep.json with the plan's ``notes`` and the results' ``warnings``: ``verdicts.study_warnings``);
    returns results.csv's rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"kind": "compare", "scenario": plan.scenario, "labels": [c[0] for c in plan.configs],
            "configurations": {lbl: ov for lbl, ov in plan.configs}, "rates": plan.rates,
            "set": plan.overrides, "notes": plan.notes, **({"seeds": plan.seeds} if plan.seeds > 1 else {})}
    with folder_lock(out, "compare"):  # (sweep.json too: a second comparison is refused before it writes)
        begin_study(out, meta)
        execute_seeds(plan.points, out, ex, plan.seeds, desc="compare")
        rows = read_results(out / RESULTS)
        # what the results show: identical, failed, ...
        write_meta(out, {**meta, "warnings": study_warnings(rows, unit=plan.rate_unit)})
    return rows
