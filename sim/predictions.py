"""What ``servesim validate`` predicts of a run without running it (``simulate`` runs it): the
requests the replicas reject (``predict_rejections``), those clipped to the context
(``predict_clipped``), those no load lets meet the SLO (``predict_slo_floors``), those a
``duration_s`` cut-off leaves unfinished (``predict_unfinished``), prompts that can wait at the head
of the queue (``predict_head_of_line``), an offered rate well above what the deployment serves
(``predict_overload``: a short probe), and what admission control sheds (``predict_shedding``).
Each reads the workload drawn with the scenario's seed (``plan``'s, when the caller has it)."""

from __future__ import annotations

import copy
import dataclasses
import math
import weakref
from typing import NamedTuple

import numpy as np
import simpy

from servesim.core.cluster import Cluster
from servesim.core.replica import OUTGREW
from servesim.core.request import Request
from servesim.errors import InputError, PluginError
from servesim.inputs.scenario import Admission, AllAtOnceArrival, Scenario
from servesim.inputs.sessions import Sessions
from servesim.inputs.workload import ClosedLoop, RequestSpecs, generate
from servesim.outputs.checks import REJECTED_SHARE
from servesim.outputs.diagnosis import top_reasons
from servesim.outputs.recorder import Recorder
from servesim.outputs.stats import offered_rate
from servesim.outputs.verdicts import SLO_TARGET
from servesim.policies import DEPLOYMENTS
from servesim.simulation import _classes, prepare, simulate


def _one_replica(scenario: Scenario) -> Scenario:
    """``scenario`` on one replica per pool, routed round robin (what a probe of one replica's
    behaviour runs on: every replica of a pool is the same)."""
    return dataclasses.replace(scenario, cluster=dataclasses.replace(scenario.cluster, replicas=1,
                                                                     router="round_robin", class_replicas=None))


def _setup_and_specs(scenario: Scenario, setup, specs):
    """``setup`` and ``specs`` as ``plan`` makes them (the workload drawn with the scenario's seed),
    unless given (``validate`` has them from ``plan`` already)."""
    if setup is None:
        setup = prepare(scenario)
    if specs is None:
        specs = generate(scenario.workload, np.random.default_rng(scenario.seed),
                         setup.cost_model.model.max_context_tokens, min(p.capacity.block_size for p in setup.pools))
    return setup, specs


def predict_rejections(scenario: Scenario, setup=None, specs=None, first=None) -> dict | None:
    """The rejections a run of ``scenario`` will have, without running it: every rejection rule
    (on arrival, or a sequence outgrowing the KV cache while decoding, rejected when it does)
    depends only on a request's lengths and the deployment, never on the load, so the workload's
    own requests (drawn with the scenario's seed) checked against the replicas' rules give the
    run's count exactly (those rejected while decoding: unless a ``workload.duration_s`` cut-off
    ends the run before they outgrow it). {"requests", "rejected", "while_decoding" (of them, those
    rejected while decoding), "reasons": [[reason, count], ...]}; None for
    closed-loop and multi-turn workloads (their lengths are drawn as the run goes). ``setup``,
    ``specs``: ``plan``'s, when the caller has them. ``first``: per request, whether
    ``policy.admission`` rejects it before the replicas' rules see it (``admission_first``): those
    are left out (a request is counted once, with the reason the run gives it), and "shed_first"
    counts those of them the rules would have rejected."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs):
        return None
    by_pair, inverse, order = _rejection_pairs(scenario, setup, specs)
    kept = inverse if first is None else inverse[~first]
    counts = np.bincount(kept, minlength=len(by_pair)).tolist()
    # each distinct pair's reason as many times as it occurs, in the order the requests first
    # show it (top_reasons breaks ties by that order)
    rejected = [(by_pair[i], counts[i]) for i in np.argsort(order, kind="stable").tolist()
                if by_pair[i] is not None and counts[i]]
    shed = 0 if first is None else int(np.array([r is not None for r in by_pair], dtype=bool)[inverse[first]].sum())
    return {"requests": len(specs), "rejected": sum(c for _, c in rejected),
            "while_decoding": sum(c for r, c in rejected if OUTGREW in r),
            "reasons": top_reasons(rejected, counted=True), "shed_first": shed}


def admission_first(scenario: Scenario, setup=None, specs=None) -> tuple | None:
    """Per request of the workload drawn, whether ``policy.admission`` rejects it before the
    replicas' length rules see it (``Cluster.submit``: the token bucket, then the queue rules, then
    the replica), as ``(mask, exact)``: a token bucket alone, replayed on the arrival times (exact);
    with a queue rule (the load decides), the run replayed with its rules where ``_affordable``
    takes all of it (exact), else every request a rule applies to (``_may_shed``: those it may
    reject, exact False). None without admission control and for closed-loop and multi-turn
    workloads."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    adm = scenario.policy.admission
    if not adm.active or not isinstance(specs, RequestSpecs) or not len(specs):
        return None
    n = len(specs)
    may = _may_shed(scenario, setup, specs) & ~_refused_before_door(setup, specs)  # (refused before the door)
    if not (adm.max_queue is not None or adm.max_queued_tokens is not None or adm.ttft_slo):
        return may, bool(may.sum() <= SHEDDING_BUCKET_REPLAY)  # (the bucket's replay, past which all it covers)
    if _affordable(setup, specs.prompt_tokens) < n:
        return may, False
    r = _run_replayed(scenario, specs).requests
    mask = np.zeros(n, dtype=bool)
    ids = np.asarray(r["request_id"], dtype=np.int64)
    mask[ids] = [isinstance(x, str) and x.startswith("admission: ") for x in r["reason"].tolist()]
    return mask, True


# (setup, specs) as weak references, and their reasons per pair: validate asks more than once for the same workload
_LAST_REASONS: list = [None, None, None]


def check_resend_not_stuck(scenario: Scenario, setup=None, specs=None) -> None:
    """The ``InputError`` a run of ``scenario`` stops on when its closed loop is stuck on
    rejections (``sim/core/clients.py``: more than ``MAX_STUCK_REJECTIONS`` requests rejected at
    one instant, each client sending again at once), raised before the run where that is certain:
    a colocated deployment whose clients resend at once after a rejection (no think time, no
    ``reject_wait_s`` above 0, no API-server time for a rejection) and whose first
    ``MAX_STUCK_REJECTIONS + 1`` requests (their lengths drawn as the run draws them) are all
    rejected on arrival by the replicas' rules, which depend only on the lengths (a KV cache too
    small for any of the prompts). With ``policy.admission`` or a P/D split, whose rules decide by
    what the instant's requests already hold, the run itself up to its first instant
    (``_first_instant_replayed``: a ``max_queued_tokens`` only some prompts fit, ``ttft_slo``, a
    router that does not spread them evenly; each left the run stuck where validate warned, and a
    P/D split was not checked), but where counting the instant's clients is certain
    (``_first_instant_counted``: the replay is as long as the run's first instant). Else nothing
    (the load decides; ``resend_at_once`` warns)."""
    from servesim.core.clients import MAX_STUCK_REJECTIONS, _check_not_stuck

    setup, specs = _setup_and_specs(scenario, setup, specs)
    a = scenario.workload.arrival
    if not isinstance(specs, ClosedLoop) or specs.sent:
        return
    wait = a.reject_wait_s if a.reject_wait_s is not None else a.think_time_s
    if wait > 0 or any(p.engine.api_request_s > 0 for p in setup.pools):
        return
    need = MAX_STUCK_REJECTIONS + 1
    first = specs.first_think_s
    until = scenario.workload.duration_s
    t0 = float(first.min()) if len(first) else math.inf
    if until is not None and t0 >= until:
        return
    if len(setup.pools) != 1 or scenario.policy.admission.active:
        by_count = _first_instant_counted(scenario, setup, specs, int((first == t0).sum()))
        if by_count == "stuck":
            _check_not_stuck([t0, MAX_STUCK_REJECTIONS], t0, specs)
        if by_count is None:
            _first_instant_replayed(scenario, specs, t0)
            return
    if specs.num_requests is not None and not need <= specs.num_requests <= 10 * need:
        return  # (fewer: the run ends first; many more: the run draws them all in one chunk, too many to draw here)
    loop = copy.deepcopy(specs)  # (its lengths drawn in the run's chunks, as the run draws them)
    while loop._have < need:
        if not loop._grow():
            return
        # (chunk by chunk: the first request served ends it, most often in the first chunk)
        prompt = loop._cols["prompt_tokens"][-1][: need - (loop._have - len(loop._cols["prompt_tokens"][-1]))]
        output = loop._cols["output_tokens"][-1][: len(prompt)]
        if not _rejected_on_arrival(setup, prompt, output).all():
            return
    _check_not_stuck([t0, MAX_STUCK_REJECTIONS], t0, specs)


def _first_instant_counted(scenario: Scenario, setup, specs: ClosedLoop, sending: int) -> str | None:
    """What counting alone tells of a colocated deployment's first instant, ``sending`` clients
    sending then, without replaying it (``_first_instant_replayed``: as long as the run's own first
    instant, 25 s for 200,000 clients behind max_queue, every one of them let in): "stuck" where
    ``policy.admission``'s rules, applying to every request, hold fewer requests at that instant
    however the router spreads them (``max_queue`` on every replica, the token bucket's ``burst``:
    nothing leaves a queue, and no token comes back, while time stands still) and the run has the
    requests to be stuck; "clear" where its only rule is a ``max_queue`` that the instant's requests
    cannot reach even all on one replica (the length rules are then checked as without admission);
    None where only the replay tells (a P/D split, ``max_queued_tokens``, ``ttft_slo``, a token
    bucket the instant's requests fit, a ``max_queue`` an uneven router may fill)."""
    from servesim.core.clients import MAX_STUCK_REJECTIONS

    if len(setup.pools) != 1:
        return None
    adm = scenario.policy.admission
    held = []
    if adm.max_queue is not None:
        held.append(adm.max_queue * setup.pools[0].replicas)
    if adm.token_bucket is not None:
        held.append(int(adm.token_bucket.burst))
    if (held and sending > min(held) and _rules_cover_all(scenario, specs)
            and (specs.num_requests is None or specs.num_requests >= MAX_STUCK_REJECTIONS + 1 + min(held))):
        return "stuck"
    if (adm.max_queued_tokens is None and not adm.ttft_slo and adm.token_bucket is None
            and adm.max_queue is not None and sending <= adm.max_queue):
        return "clear"
    return None


def _first_instant_replayed(scenario: Scenario, specs: ClosedLoop, t0: float) -> None:
    """The run itself up to its first instant ``t0`` (its own closed loop, a copy, sending as it
    sends; ``duration_s`` just past ``t0``): the stuck-loop ``InputError`` it raises there is the
    run's (its clients resending at once while nothing else moves), raised before the run; nothing
    where time moves past ``t0``, or the run ends first (``num_requests`` under the limit). Exact
    where the rules decide by the state at that instant: a ``max_queued_tokens`` only some prompts
    fit (the queued prompts fill it, and each rejected client's next prompt is tried against what
    is left), ``ttft_slo`` (each prompt's predicted TTFT behind those queued), a P/D split, a router
    that does not spread the instant's requests evenly (least-loaded, session affinity)."""
    from servesim.core.clients import MAX_STUCK_REJECTIONS

    if specs.num_requests is not None and not specs.num_requests <= 10 * (MAX_STUCK_REJECTIONS + 1):
        return  # (many more: the run draws them all in one chunk, too many to draw here)
    wl = dataclasses.replace(scenario.workload, duration_s=math.nextafter(t0, math.inf))
    try:
        simulate(dataclasses.replace(scenario, workload=wl), specs=copy.deepcopy(specs))
    except InputError as e:
        if getattr(e, "stuck", False):
            raise
    except PluginError:
        return  # (a plug-in's error is dry_run_plugins' and the run's to say)


def _rules_cover_all(scenario: Scenario, specs) -> bool:
    """Whether ``policy.admission``'s rules apply to every request of the workload (no
    ``policy.admission.classes``, or one listing each of its classes)."""
    adm = scenario.policy.admission
    return adm.active and (adm.classes is None or set(specs.class_names) <= set(adm.classes))


def closed_loop_first_rejections(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """A closed loop bounded by ``duration_s`` alone draws its lengths as it runs, in chunks: its
    first chunk (4,096 requests, drawn on a copy, as the run draws them) checked against the
    replicas' rules, which reject on arrival by the lengths alone. {"requests", "rejected"
    (of them, on arrival)}; None for other workloads (``predict_rejections`` counts theirs)."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, ClosedLoop) or specs.sent or specs.num_requests is not None:
        return None
    loop = copy.deepcopy(specs)
    if not loop._grow():
        return None
    prompt, output = loop._cols["prompt_tokens"][0], loop._cols["output_tokens"][0]
    return {"requests": len(prompt), "rejected": int(_rejected_on_arrival(setup, prompt, output).sum())}


def _rejected_on_arrival(setup, prompt_tokens, output_tokens) -> np.ndarray:
    """Per request given by its lengths (arrays), whether the replicas' rules reject it on arrival
    (``rejection_reasons``; not one that outgrows the KV cache while decoding, ``OUTGREW``)."""
    by_pair, inverse, _ = rejection_reasons(setup, prompt_tokens, output_tokens)
    return np.array([r is not None and OUTGREW not in r for r in by_pair], dtype=bool)[inverse]


def drawn_lengths(specs):
    """The requests' lengths as a run draws them, without running: ``specs`` itself for an
    open-loop workload; for a closed loop with ``workload.num_requests``, ``ClosedLoop.planned``
    (its lengths drawn in one chunk, in send order, as the run draws them) with every arrival at 0
    (not the run's times); None otherwise (multi-turn sessions, a closed loop bounded only by
    duration_s: how many it sends depends on the run)."""
    if isinstance(specs, RequestSpecs):
        return specs
    cols = specs.planned() if isinstance(specs, ClosedLoop) else None
    if cols is None:
        return None
    return RequestSpecs(arrival_s=np.zeros(len(cols["prompt_tokens"])),
                        prompt_tokens=cols["prompt_tokens"].astype(np.int64),
                        output_tokens=cols["output_tokens"].astype(np.int64),
                        prefix_group=cols["prefix_group"].astype(np.int64),
                        prefix_tokens=cols["prefix_tokens"].astype(np.int64),
                        class_index=cols["class_index"].astype(np.int64), class_names=tuple(specs.class_names),
                        clipped=cols["clipped"].astype(bool))


def _rejection_pairs(scenario: Scenario, setup, specs: RequestSpecs) -> tuple:
    """The reasons the deployment's replicas reject the requests of ``specs`` at arrival, per
    distinct (prompt, output) pair (the rules of one replica per pool, asked once per pair):
    ``(by_pair, inverse, first)``, ``by_pair[inverse[i]]`` request i's reason or None,
    ``first[j]`` the first request with pair j. Per pair, not per request: 10 million requests
    made a list per request cost validate seconds."""
    last = _LAST_REASONS
    if last[0] is not None and last[0]() is setup and last[1]() is specs:
        return last[2]
    result = rejection_reasons(setup, specs.prompt_tokens, specs.output_tokens)
    last[:] = [weakref.ref(setup), weakref.ref(specs), result]
    return result


def rejection_reasons(setup, prompt_tokens, output_tokens) -> tuple:
    """``_rejection_pairs`` of requests given by their lengths (arrays): the replicas' rules (one
    replica per pool, asked once per distinct pair), as ``(by_pair, inverse, first)``. ``servesim
    plan``'s latency floors count a request rejected by these (``plan_space.latency_floors``)."""
    return _by_pair(prompt_tokens, output_tokens, _rules(setup).rejection_reason)


def _by_pair(prompt_tokens, output_tokens, ask) -> tuple:
    """``ask(request)`` once per distinct (prompt, output) pair of the requests given by their
    lengths (arrays): ``(by_pair, inverse, first)``, ``by_pair[inverse[i]]`` request i's answer,
    ``first[j]`` the first request with pair j."""
    # (token counts are below 2**31: one int64 key per pair, 30x faster than np.unique(axis=1))
    key = (np.asarray(prompt_tokens).astype(np.int64) << 32) | np.asarray(output_tokens).astype(np.int64)
    pairs, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return [ask(Request(0, 0.0, k >> 32, k & 0xFFFFFFFF)) for k in pairs.tolist()], np.ravel(inverse), first


def _rules(setup) -> Cluster:
    """A cluster of one replica per pool of ``setup``, whose replicas' rules a prediction asks."""
    # every replica of a pool has the same rules: one of each is enough (a cluster of 100,000
    # replicas took seconds to build here)
    one = dataclasses.replace(setup, pools=tuple(dataclasses.replace(p, replicas=1) for p in setup.pools),
                              scenario=_one_replica(setup.scenario))
    return Cluster(simpy.Environment(), one, Recorder(None), setup.scenario.seed)


def _admitted(scenario: Scenario, setup, specs: RequestSpecs) -> np.ndarray:
    """Per request of ``specs``, whether the replicas admit it on arrival: no rejection reason, or
    one it meets only while decoding (its sequence outgrowing the KV cache): it queues and its
    prompt is prefilled as any other's."""
    by_pair, inverse, _ = _rejection_pairs(scenario, setup, specs)
    return np.array([r is None or OUTGREW in r for r in by_pair], dtype=bool)[inverse]


def predict_over_budget(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The workload's own requests that whole-prompt admission serves but can end while decoding,
    without running: their prompt fits the token budget, but a preemption for recompute after
    their sequence passes it ends them, rejected (``Replica.recompute_limit``: the recompute is
    one prefill within the budget), which depends on the load. A request whose sequence reaches
    prompt + output - 1 tokens (its last KV, or as far as it gets before it outgrows the KV cache)
    over the budget can. {"requests" (admitted on arrival), "at_risk", "budget"}; None where no
    pool has such a limit (chunked prefill, static batching, a P/D split) and for closed-loop and
    multi-turn workloads."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs):
        return None
    entry = _rules(setup).entry[0]
    limit = entry.recompute_limit
    if limit is None:
        return None
    return {**_admitted_at_risk(entry, specs, lambda req: req.prompt_tokens + entry.outgrow(req)[0] - 1 > limit),
            "budget": limit}


def _admitted_at_risk(entry, specs: RequestSpecs, at_risk, admits=None) -> dict:
    """{"requests": how many of ``specs`` the first pool's ``entry`` admits on arrival (or
    ``admits(request)`` holds for), "at_risk": how many of those ``at_risk(request)`` holds for},
    each (prompt, output) pair judged once."""
    def judged(req) -> tuple:
        ok = entry.arrival_reason(req) is None if admits is None else admits(req)
        return ok, ok and at_risk(req)

    by_pair, inverse, _ = _by_pair(specs.prompt_tokens, specs.output_tokens, judged)
    both = np.array(by_pair, dtype=bool).reshape(-1, 2)[inverse]
    return {"requests": int(both[:, 0].sum()), "at_risk": int(both[:, 1].sum())}


def _refused_before_door(setup, specs: RequestSpecs) -> np.ndarray:
    """Per request of ``specs``, whether a P/D split's decode pool refuses it on arrival, before
    ``policy.admission`` (``Cluster.submit``: its KV cannot be handed off to a decode replica), so
    that a token bucket never sees it nor spends a token on it; all False without a decode pool."""
    if "decode" not in setup.pools_by_name or not len(specs):
        return np.zeros(len(specs), dtype=bool)
    cluster = _rules(setup)
    refused, inverse, _ = _by_pair(specs.prompt_tokens, specs.output_tokens,
                                   lambda req: cluster._decode_rejection(req) is not None)
    return np.array(refused, dtype=bool)[inverse]


def predict_never_back(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The workload's own requests that can end while decoding under an engine profile whose
    admission holds a recompute back at the watermark too (``watermark_on_recompute``: vllm-v0,
    vllm-v0.2, vllm-v0.2.3, sarathi-serve), without running: a preemption for recompute after their sequence
    needs more KV blocks than the watermark leaves ends them, rejected
    (``Replica.recompute_blocks``), which depends on the load. {"requests" (admitted on arrival),
    "at_risk", "blocks" (what the watermark leaves), "num_blocks"}, of the pool
    where a recompute happens: a P/D split's decode pool (its prefill pool holds a prompt alone,
    checked on arrival); None where that pool has no such limit, and for closed-loop and
    multi-turn workloads."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs):
        return None
    cluster = _rules(setup)
    entry = cluster.entry[0]
    if cluster.decode:
        one = cluster.decode[0]

        def admits(req):  # as ``Cluster.submit``: the decode pool's hand-off rules, then the prefill pool's
            return cluster._decode_rejection(req) is None and entry.arrival_reason(req) is None
    else:
        one, admits = entry.engines[0] if hasattr(entry, "engines") else entry, None
    if getattr(one, "recompute_blocks", None) is None:
        return None
    return {**_admitted_at_risk(entry, specs, one.can_outlive_watermark, admits), "blocks": one.recompute_blocks,
            "num_blocks": one.kv.num_blocks}


def _served(scenario: Scenario, setup, specs: RequestSpecs) -> np.ndarray:
    """Per request of ``specs``, whether the replicas take it (no rejection reason)."""
    by_pair, inverse, _ = _rejection_pairs(scenario, setup, specs)
    return np.array([r is None for r in by_pair], dtype=bool)[inverse]


def predict_clipped(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The requests a run will shorten to the model's context (``workload.clip_to_context``),
    without running: the workload's own requests (drawn with the scenario's seed) are clipped as
    they are drawn, so their count is the run's. {"requests", "clipped", "context_tokens"}; None for
    closed-loop and multi-turn workloads (their lengths are drawn as the run goes)."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs):
        return None
    k = int(specs.clipped.sum()) if specs.clipped is not None else 0
    return {"requests": len(specs), "clipped": k, "context_tokens": setup.cost_model.model.max_context_tokens}


def predict_slo_floors(scenario: Scenario, setup=None, specs=None, only=None) -> dict | None:
    """The requests that cannot meet their SLO at any load, without running: on an idle
    deployment a request's TTFT is at least its prompt's prefill alone and its TPOT at least one
    decode step of it alone (``plan_space.latency_floors``, what ``servesim plan`` prunes with),
    each with the API server's time as the client measures it.
    {"requests" (not rejected), "missed", "ttft", "tpot" (over each limit), "ttft_max_s",
    "tpot_min_s", "api_request_s" (the API server's part of each TTFT), "classes_capped": [(class, the
    most of its requests that can be within its SLO, its requests), ...] for the request classes
    (two or more) that cannot reach ``verdicts.SLO_TARGET`` of their own}
    over the workload's own
    requests; None without an SLO, for closed-loop and multi-turn workloads. Rejected requests
    are ``predict_rejections``'. ``only``: a mask of the requests whose floors to price (a run's
    checks those that missed the SLO: one within it cannot be over a floor, which is a lower bound
    on its latency), the others taken as within it."""
    from servesim.studies.plan_space import NEVER, WorkloadStats, latency_floors, stats_from_specs

    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs) or not len(specs):
        return None
    n = len(specs)
    names, _, limits = _classes(scenario, specs, {"request_id": np.arange(n)})
    if limits is None:
        slo = scenario.slo
        if slo.ttft_s is None and slo.tpot_s is None:
            return None
        limits = (np.full(n, np.inf if slo.ttft_s is None else slo.ttft_s),
                  np.full(n, np.inf if slo.tpot_s is None else slo.tpot_s))
    kind = "pd" if "decode" in setup.pools_by_name else "colocated"
    stats = stats_from_specs(scenario, specs)
    if only is None:
        floors = latency_floors(kind, setup, stats)
    else:  # (each request's floors are its own: pricing some of them gives those exactly)
        part = latency_floors(kind, setup, WorkloadStats(stats.prompt[only], stats.output[only],
                                                         stats.prompt_total[only]))
        floors = {"ttft": np.zeros(n), "tpot": np.full(n, np.nan)}
        floors["ttft"][only], floors["tpot"][only] = part["ttft"], part["tpot"]
    # (what the replicas reject is predict_rejections'; the floors mark only what needs more KV)
    served = (floors["ttft"] < NEVER / 10) & _served(scenario, setup, specs)
    ttft = served & (floors["ttft"] > limits[0])
    with np.errstate(invalid="ignore"):
        tpot = served & (floors["tpot"] > limits[1])  # (NaN: one output token, no TPOT)
    missed = ttft | tpot
    # per request class (two or more): the most of its requests that can be within its SLO (its
    # rejected ones and those over a floor cannot: each class's attainment is over all of its requests)
    caps = []
    if len(names) > 1:
        index = specs.class_index if specs.class_index is not None else np.zeros(n, np.int64)
        kept = _served(scenario, setup, specs) & ~missed
        for i, name in enumerate(names):
            sel = index == i
            k = int(sel.sum())
            if k and kept[sel].sum() < SLO_TARGET * k:
                caps.append((name, float(kept[sel].sum() / k), k))
    return {"classes_capped": caps,
            "requests": int(served.sum()), "missed": int(missed.sum()), "ttft": int(ttft.sum()),
            "tpot": int(tpot.sum()), "ttft_max_s": float(floors["ttft"][ttft].max()) if ttft.any() else None,
            "tpot_min_s": float(np.nanmin(floors["tpot"][tpot])) if tpot.any() else None,
            "api_request_s": setup.pools[0].engine.api_request_s}


def predict_unfinished(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The requests a run cut off at ``workload.duration_s`` leaves unfinished, at least, without
    running: those the replicas take whose arrival plus their E2E on an idle deployment (their
    prompt's prefill alone, then each decode step of theirs alone, with the API server's time as
    the client sees it: ``plan_space.latency_floors``) is past the cut-off cannot have finished by
    it, whatever the load. {"requests", "unfinished", "duration_s", "exact" (False), "not_completed"
    (with a queue rule, those late requests, counting those it may reject on arrival: each is
    rejected or unfinished; else "unfinished")} over the workload's own requests: a floor, as a
    loaded run leaves more. The run itself is replayed with its rules where ``_affordable`` takes
    all of it (with a queue rule, ``max_queue``, ``max_queued_tokens``, ``ttft_slo``, the load
    decides what it rejects): "unfinished" its count, "exact" True; else, where at least
    ``OVERLOAD_REPLAY_MIN`` can be, its first requests extrapolated (``_unfinished_extrapolated``:
    "estimate", "low", "high", "growing", "replayed", "replayed_until"; "estimate" None where not).
    None without ``duration_s`` and for closed-loop and multi-turn workloads (their arrival
    times depend on the run)."""
    from servesim.studies.plan_space import NEVER, latency_floors, stats_from_specs

    until = scenario.workload.duration_s
    if until is None:
        return None
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs) or not len(specs):
        return None
    floors = latency_floors("pd" if "decode" in setup.pools_by_name else "colocated", setup,
                            stats_from_specs(scenario, specs))
    served = (floors["e2e"] < NEVER / 10) & _served(scenario, setup, specs)
    late = served & (specs.arrival_s + floors["e2e"] > until)
    k = int((late & ~_may_shed(scenario, setup, specs)).sum())
    out = {"requests": len(specs), "unfinished": k, "duration_s": float(until), "exact": False, "not_completed": k,
           "estimate": None}
    adm = scenario.policy.admission
    if adm.max_queue is not None or adm.max_queued_tokens is not None or adm.ttft_slo:
        out["not_completed"] = int(late.sum())
        # a queue rule may reject any request on arrival (the load decides), so the bound above
        # leaves them all out and can say nothing (a run of 159 left 138 unfinished): the run
        # itself, replayed with its rules where affordable, gives the count; else the late
        # requests are said as not completed, rejected or still unfinished
    # the bound above counts only what an idle deployment could not finish: a loaded run leaves
    # more (164 said where a run at twice what the deployment serves left 7,776), so the run itself
    # is replayed with its rules where affordable, its count exactly; else its first requests,
    # extrapolated (``_unfinished_extrapolated``)
    n, k_replay = len(specs), _affordable(setup, specs.prompt_tokens)
    if k_replay == n:
        out.update(unfinished=int(_run_replayed(scenario, specs).summary["unfinished"]), exact=True)
    elif k_replay >= min(n, OVERLOAD_REPLAY_MIN):
        out.update(_unfinished_extrapolated(scenario, setup, specs, k))
    return out


def _unfinished_extrapolated(scenario: Scenario, setup, specs: RequestSpecs, floor: int) -> dict:
    """``predict_unfinished``'s estimate of a run too long to replay whole: its first requests
    replayed with its rules (``_replay_first``), which are exactly the run up to the last of their
    arrivals, T (nothing after it reaches back), and the requests in flight (admitted, not yet
    finished) from there to the cut-off D: where they grow through the later half of the replay
    (its least-squares trend carried to D past their swing about it), the backlog of the run at T
    plus the other requests, less the later half's share rejected, against the completion rate the
    later half kept ("growing"); else the trend at D, "low" and "high" the swing about it over the
    later half (a queue bounded by a rule, or a deployment that keeps up: the count at D depends on
    where in that swing the cut-off falls). Each at least ``floor`` (what an idle deployment could
    not finish). Where the requests after them arrive at another rate than that half's
    (``_rate_changed``: a schedule changing after the replay) and it held level, no trend is carried:
    "estimate" None, "low" the floor, "high" the most requests in flight it reached and the count
    carried at its completion rate, "rate_changed" (that half's rate, the other, the stretch read).
    {"estimate", "low", "high", "growing", "replayed", "replayed_until": T}. The later half is read
    as ``_later_half`` reads it for the fluid queue: by time span where it arrives at one instant (a
    burst ending the replay: the later half of the span); {"estimate": None} where all of those
    requests arrive at one instant (``all_at_once``): no stretch of the run to read a trend from
    (20,000 requests at once cut off at 60 s read "about 10,000, between 10,000 and 10,000", the
    first 10,000 all in flight at 0 s, where the run left 17,858), so the floor alone is said."""
    n, until = len(specs), float(scenario.workload.duration_s)
    res, k = _replay_first(scenario, setup, specs, 1)
    h = _later_half(res, specs, k)
    if h is None:  # (all of them at one instant: no stretch of the run to read)
        return {"estimate": None}
    t_end, grid = h.t_end, h.grid
    counts = h.counts.astype(np.float64)
    slope, icept = np.polyfit(grid, counts, 1)
    swing = counts - (slope * grid + icept)
    growing = bool(slope * (until - t_end) > swing.max() - swing.min())
    share = h.share
    # (the requests in flight carried from T at the completion rate the later half kept: the
    # other requests' count against it, however they arrive)
    carried = float(h.in_flight(t_end)) + (n - k) * (1 - share) - h.rate * (until - t_end)
    full = None
    if growing:
        est = low = high = carried
        room = _queue_room(scenario, setup, specs)
        if carried > room:
            # a queue still filling through the later half sheds more once it is full, beyond that
            # half's share: max_queue x replicas waiting, max_num_seqs x replicas running (Poisson
            # 20 req/s behind max_queue=300 read about 564 where the run left 360; its room 364)
            est = low = high = full = room
    else:
        est = slope * until + icept
        low, high = est + swing.min(), est + swing.max()
    def clip(x) -> int:
        return int(round(min(max(x, floor), n)))

    out = {"estimate": clip(est), "low": clip(low), "high": clip(high), "growing": growing, "replayed": k,
           "replayed_until": t_end, "full": full}
    changed = _rate_changed(specs.arrival_s, k, h, until, scenario.workload)
    if changed is not None:
        # a count carried from the later half holds for arrivals that go on as that half's: a
        # schedule that changes after it (a piecewise or on/off rate, a sinusoid, a trace's burst)
        # does otherwise (chat-like requests at 60 req/s with max_queue=20, then 2 req/s: "about
        # 84, between 82 and 85" where the run left 3; 2 req/s, then 60 with no rule: 131 where it
        # left 2,244; a sinusoid 20% lower at the cut-off than in that half: about 84 where the run
        # left 45). The run's own last requests, replayed with its rules from an idle deployment
        # (``_replay_last``), read the count at the cut-off from the arrivals before it: at least
        # their count (a run loaded when they begin leaves more), at most that plus the run's
        # requests in flight then (exact where the first requests' replay reaches it, else the most
        # its later half held or the count carried at its completion rate), and never more than the
        # queue's room holds (max_queue + max_num_seqs per replica, and those the API server still
        # streams, which the replays' most in flight show: 85 left where that room was 84). Only a
        # range is said (0-2,847 where the run left 84 behind max_queue=20 read the count carried at
        # the 2 req/s half's completion rate to a cut-off after 60 req/s)
        tail, start = _replay_last(scenario, specs, k, until)
        u = float(tail.count_at_end)
        if start <= t_end:
            before = float(h.in_flight(start))
        else:
            ahead = int(np.count_nonzero((specs.arrival_s[k:] > t_end) & (specs.arrival_s[k:] <= start)))
            before = max(float(counts.max()),
                         float(h.in_flight(t_end)) + ahead * (1 - share) - h.rate * (start - t_end))
        room = _queue_room(scenario, setup, specs)
        if math.isfinite(room):
            room = max(room, float(counts.max()), float(tail.most))
        # (where in its swing about the cut-off the count falls decides: the swing the replay of the
        # last requests kept over the later half of its stretch before the cut-off, both ways)
        low = min(u, tail.low)
        top = min(u + max(before, 0.0) + max(tail.high - u, 0), room, max(high, counts.max(), carried, tail.high))
        out.update(estimate=None, low=clip(low), high=clip(max(top, u)), rate_changed=changed, growing=False,
                   full=None, tail=tail.k)
    return out


class _Tail(NamedTuple):
    k: int  # the requests replayed
    count_at_end: int  # unfinished at the cut-off (the run's count of them)
    most: int  # the most in flight (admitted, not finished) at any time
    low: int  # in flight at the cut-off by the trend over the later half of the stretch from its middle
    high: int  # request to the cut-off, less and plus the swing about it there


def _replay_last(scenario: Scenario, specs: RequestSpecs, k: int, until: float) -> tuple:
    """The run's last ``k`` requests (arriving by ``until``) replayed with its rules at their own
    times from an idle deployment, to ``until``: (``_Tail``, the first one's arrival). A run that
    is loaded when they begin leaves at least as many in flight at ``until``."""
    n = len(specs)
    k = min(k, n)
    rows = dataclasses.replace(specs, **{
        f.name: getattr(specs, f.name)[n - k:] for f in dataclasses.fields(specs)
        if isinstance(getattr(specs, f.name), (np.ndarray, tuple)) and f.name != "class_names"})
    start = float(rows.arrival_s[0])
    rows = dataclasses.replace(rows, arrival_s=rows.arrival_s - start)
    one = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, num_requests=k,
                                                                     duration_s=until - start))
    res = _simulate(f"validate's replay of the workload's last {k:,} requests at their own arrival times with "
                    f"policy.admission's rules; {LOADED_SO}", one, specs=rows)
    r = res.requests
    arrival = np.asarray(r["arrival_s"], dtype=np.float64)
    finish = np.asarray(r["finish_s"], dtype=np.float64)
    kept = np.asarray(r["status"], dtype=object) != "rejected"
    admitted_at = np.sort(arrival[kept])
    done_at = np.sort(np.where(np.isnan(finish), np.inf, finish)[kept])
    def flight(t):
        return np.searchsorted(admitted_at, t, side="right") - np.searchsorted(done_at, t, side="right")

    end = until - start
    grid = np.linspace(end - (end - float(rows.arrival_s[k // 2])) / 2, end, 201)
    last = flight(grid).astype(np.float64)
    # (its trend at the cut-off and the swing about it: a count growing to the end is no lower there)
    slope, icept = np.polyfit(grid, last, 1)
    swing = last - (slope * grid + icept)
    at = slope * end + icept
    return _Tail(k, int(res.summary["unfinished"]), int(flight(admitted_at).max(initial=0)),
                 int(math.floor(at + swing.min())), int(math.ceil(at + swing.max()))), start


def _queue_room(scenario: Scenario, setup, specs) -> float:
    """The requests a colocated deployment holds behind ``policy.admission.max_queue`` applying to
    every request: on each replica ``max_num_seqs`` running (on each of its virtual engines, with
    ``hardware.pp`` and ``pp_overlap``) and ``max_queue`` waiting (a request is
    let in only while fewer wait; a preempted one moves from one to the other); those the API
    server still streams to their clients come on top. Infinite where no such rule bounds it."""
    adm = scenario.policy.admission
    if adm.max_queue is None or not _rules_cover_all(scenario, specs) or len(setup.pools) != 1:
        return math.inf
    pool = setup.pools[0]
    # (hardware.pp with pp_overlap: each of a replica's virtual engines runs max_num_seqs of its own,
    # Cluster; max_queue holds for the replica: 364 said where a pp=2 run left 427, its room 428)
    cm = pool.cost_model
    ve = cm.pp if cm.pp > 1 and scenario.hardware.pp_overlap else 1
    return float(pool.replicas * (ve * pool.max_num_seqs + adm.max_queue))


def _processes(workload) -> list:
    """The arrival processes the workload draws from: its own, and each class's (``rate_rps``:
    Poisson)."""
    from servesim.inputs.scenario import PoissonArrival

    procs = [] if workload.arrival is None else [workload.arrival]
    for c in workload.classes or ():
        if c.arrival is not None:
            procs.append(c.arrival)
        elif c.rate_rps is not None:
            procs.append(PoissonArrival(process="poisson", rate_rps=c.rate_rps))
    return procs


def _scheduled(workload, t0: float, t1: float) -> float | None:
    """The arrivals the workload's arrival processes expect in [t0, t1) (``expected_count``: a
    piecewise or fixed on/off schedule, a sinusoid, a renewal process's rate; each class's own
    process or ``rate_rps`` summed); None where that is not known before the run (a trace's own
    times, on/off periods of random length, a closed loop)."""
    from servesim.inputs.arrivals import expected_count
    from servesim.inputs.scenario import (FixedArrival, GammaArrival, OnOffArrival, PiecewiseArrival,
                                          PoissonArrival, SinusoidalArrival)

    known = (FixedArrival, GammaArrival, OnOffArrival, PiecewiseArrival, PoissonArrival, SinusoidalArrival)
    procs = _processes(workload)
    if not procs or (workload.trace is not None and workload.arrival is None):
        return None
    total = 0.0
    for a in procs:
        if not isinstance(a, known) or isinstance(a, OnOffArrival) and a.durations != "fixed":
            return None
        total += expected_count(a, t1) - expected_count(a, t0)
    return total


def _rate_changed(arrival_s: np.ndarray, k: int, h: _LaterHalf, until: float, workload=None) -> tuple | None:
    """Whether the requests after the first ``k`` (arriving by ``until``) come at another rate than
    the later half of those ``k`` did (``h``, from ``h.t_half`` to ``h.t_end``, its ``arrived``):
    over all of the rest of the run, or over the stretch as long as that half just before ``until``,
    the count at least ``RATE_CHANGE`` and 3 standard deviations (Poisson, the later half's rate
    read from its own arrivals) off that rate; or, where the arrival process's schedule is known
    (``_scheduled``), its rate there at least ``RATE_CHANGE`` off its rate over that half (a
    sinusoid 13% lower at the cut-off than in that half passed a 25% test: about 84 said where the
    run left 45). (that half's rate, the other one, the stretch it covers in s), or None."""
    t_end = h.t_end
    w = t_end - h.t_half
    if not w > 0 or not until > t_end:
        return None
    rate = h.arrived / w
    later = arrival_s[k:]
    # (the rate the arrival process is scheduled to have, where it is known: a sinusoid 12% lower at
    # the cut-off than in the later half is within the noise of 500 arrivals, and a run near what
    # the deployment serves left 45 where validate said about 84)
    plan = _scheduled(workload, h.t_half, t_end) if workload is not None else None
    then = plan / w if plan is not None and plan > 0 else None
    # (the schedule's rate just before the cut-off too, an eighth of that half: the requests in flight
    # there follow it; an on/off cycle shorter than the half averages the same over each stretch, and
    # a cut-off after an off period read about 206 where the run left 101)
    for start in (t_end, max(t_end, until - w), max(t_end, until - w / 8)):
        span = until - start
        got = int(np.count_nonzero(later > start))
        want = rate * span
        if then is not None and abs(_scheduled(workload, start, until) / span - then) > RATE_CHANGE * then:
            return (rate, got / span, span)
        # (3 standard deviations of the difference: the count's, Poisson, and the later half's rate's,
        # read from its own arrivals and carried over the stretch; Poisson's for any process, as a
        # burstier one's swings change the count at the cut-off as much: gamma arrivals, cv 2, near
        # what the deployment serves read about 13 and 0 where the runs left 46 and 32)
        sd = math.sqrt(max(want, 1.0) * (1 + want / max(h.arrived, 1)))
        if abs(got - want) > max(RATE_CHANGE * want, 3 * sd):
            return (rate, got / span, span)
    return None


RATE_CHANGE = 0.05  # the least change in the arrival rate after a partial replay that _rate_changed reads as one


class _LaterHalf(NamedTuple):
    """A replay of the run's first ``k`` requests read over the later half of their arrivals, from
    ``t_half`` (the arrival of request ``k // 2``) to ``t_end`` (of request ``k - 1``): the
    requests in flight (admitted, not yet finished) at any time (``in_flight``) and on a grid of
    201 instants across that half (``grid``, ``counts``), the completion rate it kept, the requests
    arriving in it (from ``t_half`` on: ``arrived``) and the share of them rejected (``share``;
    ``shed``: by ``policy.admission``, the token bucket's left out where ``_later_half`` is told)."""
    arrival: np.ndarray  # (the replay's requests, in its row order)
    rejected: np.ndarray
    arrived: int
    share: float
    shed: float
    t_half: float
    t_end: float
    in_flight: object  # t -> requests in flight at t
    grid: np.ndarray
    counts: np.ndarray
    rate: float


def _later_half(res, specs: RequestSpecs, k: int, skip_bucket: bool = False) -> _LaterHalf | None:
    """``_LaterHalf`` of ``res``, the replay of the first ``k`` of ``specs``; where that half
    arrives at one instant (a burst ending the replay), the later half of their span instead, from
    midway between the first arrival and the last (``t_half``); None where all ``k`` arrive at one
    instant (``all_at_once``: no stretch of the run to read). The one reading of that half that
    the unfinished, the fluid queue's and the by-share counts take (``skip_bucket``: the token
    bucket's rejections left out of ``shed``, its own replay counting them)."""
    t_end, t_half = float(specs.arrival_s[k - 1]), float(specs.arrival_s[k // 2])
    if not t_end > t_half:
        # (a trace whose replayed requests end in a burst at one instant: the fluid queue read
        # nothing after them, 0 rejections, 808 said where the run rejected 3,001)
        t0 = float(specs.arrival_s[0])
        if not t_end > t0:
            return None
        t_half = t0 + (t_end - t0) / 2
        if not t_end > t_half:
            return None
    r = res.requests
    arrival = np.asarray(r["arrival_s"], dtype=np.float64)
    finish = np.asarray(r["finish_s"], dtype=np.float64)
    rejected = np.asarray(r["status"], dtype=object) == "rejected"
    reason = np.asarray(r["reason"], dtype=object)
    later = arrival >= t_half
    arrived = int(later.sum())
    shed = np.array([isinstance(x, str) and x.startswith("admission: ")
                     and not (skip_bucket and x.startswith(BUCKET_REASON)) for x in reason[later]], dtype=bool)
    admitted_at = np.sort(arrival[~rejected])
    done_at = np.sort(np.where(np.isnan(finish), np.inf, finish)[~rejected])

    def in_flight(t):
        return np.searchsorted(admitted_at, t, side="right") - np.searchsorted(done_at, t, side="right")

    grid = np.linspace(t_half, t_end, 201)
    rate = (np.searchsorted(done_at, t_end, side="right") - np.searchsorted(done_at, t_half, side="right")) / (
        t_end - t_half)
    return _LaterHalf(arrival, rejected, arrived, float(rejected[later].mean()), float(shed.mean()), t_half, t_end,
                      in_flight, grid, in_flight(grid), rate)


def _may_shed(scenario: Scenario, setup, specs: RequestSpecs) -> np.ndarray:
    """Per request of ``specs``, whether ``policy.admission`` may reject it on arrival (then it is
    not left unfinished): those a token bucket rejects (replayed on the arrival times of the requests
    it applies to, as ``_bucket_rejections``; in a P/D split, of those its decode pool does not
    refuse before the door, ``_refused_before_door``: it was every request the bucket applies to,
    so a bucket that rejected none hid every unfinished request), and every request a queue rule
    (``max_queue``, ``max_queued_tokens``, ``ttft_slo``: the load decides) applies to."""
    adm = scenario.policy.admission
    n = len(specs)
    if not adm.active:
        return np.zeros(n, dtype=bool)
    if adm.classes is None:
        scope = np.ones(n, dtype=bool)
    else:
        names, _, _ = _classes(scenario, specs, {"request_id": np.arange(n)})
        index = specs.class_index if specs.class_index is not None else np.zeros(n, np.int64)
        scope = np.isin(np.asarray(names, dtype=object)[index], list(adm.classes))
    tb = adm.token_bucket
    if (adm.max_queue is not None or adm.max_queued_tokens is not None or adm.ttft_slo
            or int(scope.sum()) > SHEDDING_BUCKET_REPLAY):
        return scope
    if tb is None:
        return np.zeros(n, dtype=bool)
    scope &= ~_refused_before_door(setup, specs)
    shed = np.zeros(n, dtype=bool)
    shed[np.flatnonzero(scope)] = _bucket_mask(specs.arrival_s[scope], tb.rate_rps, tb.burst)
    return shed


def predict_head_of_line(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The workload's own prompts that can wait at the head of the queue for room in the token
    budget, without running: with whole-prompt admission beside running decodes (``continuous``
    without ``prefill_first``), a prompt of p tokens fits the budget B only while fewer than B - p
    decodes run beside it, so one within ``max_num_seqs`` tokens of B can wait there (how long
    depends on the load; the run's ``head_of_line`` says); with speculative decoding a decode takes
    k + 1 tokens, so within ``max_num_seqs`` x (k + 1). {"requests", "tight", "budget",
    "max_num_seqs", "decode_tokens" (per decode: 1, or k + 1), "longest"} over the requests the
    replicas admit on arrival (those whose sequence outgrows the KV cache later too); None when it
    does not apply (another policy, a P/D split, closed-loop or multi-turn workloads)."""
    pol = scenario.policy
    if pol.name != "continuous" or scenario.prefill_first_steps:
        return None
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs):
        return None
    pool = setup.pools[0]
    budget, seqs = pool.max_num_batched_tokens, pool.max_num_seqs
    # a decode takes k + 1 tokens of the budget with speculative decoding (the k it verifies)
    per_decode = 1 + (pool.spec[0] if pool.spec else 0)
    p = specs.prompt_tokens
    # (what the replicas reject on arrival never waits: predict_rejections names it; a request
    # whose sequence outgrows the KV cache later is admitted, and its prompt waits as any other's)
    fits = _admitted(scenario, setup, specs)
    tight = fits & (p > budget - seqs * per_decode)
    return {"requests": int(fits.sum()), "tight": int(tight.sum()), "budget": budget, "max_num_seqs": seqs,
            "decode_tokens": per_decode, "longest": int(p[tight].max()) if tight.any() else 0}


OVERLOAD_PROBE_REQUESTS = 1000  # of the workload's own requests, all at once on one replica
OVERLOAD_MARGIN = 1.5  # the probe underrates what it serves (its drain): only a clear excess is named
OVERLOAD_PROBE_MIN = 200  # fewer requests: the probe is mostly its drain, and says nothing
# the most prefill steps the probe may need at the token budget (~1 s of simulating mixed steps)
OVERLOAD_PROBE_STEPS = 50_000


def predict_overload(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """Whether the offered rate looks above what the deployment serves, without running it: the
    first ``OVERLOAD_PROBE_REQUESTS`` requests of the workload (drawn with the scenario's seed) all
    arriving at once on one replica, completed per second, times the replicas, is what it serves
    when never short of work (an underestimate: the probe ends draining, so only an offered rate
    ``OVERLOAD_MARGIN`` times above it is called an overload). {"offered_rps",
    "served_rps", "probe_requests", "overloaded": offered > OVERLOAD_MARGIN x served, "preemptions":
    the probe's, its batch as full as the KV cache lets it be}; None when
    it cannot tell: closed-loop, multi-turn or all_at_once arrivals, admission
    control (it sheds load by design), fewer than ``OVERLOAD_PROBE_MIN`` requests (a probe that
    short is mostly drain), or a probe that rejects more than a tenth of its requests. With
    continuous batching or chunked prefill the probe keeps the requests whose prompts fit
    ``OVERLOAD_PROBE_STEPS`` steps of the token budget (a step holds at most the budget), so a tiny
    budget keeps ``validate`` quick: fewer than ``OVERLOAD_PROBE_MIN`` of them, and it cannot tell.
    A P/D split (one deployment of two pools) runs the probe on all of it, its prefill pool's
    budgets bounding the steps.
    ``setup``, ``specs``: ``plan``'s, when the caller has them."""
    if isinstance(scenario.workload.arrival, AllAtOnceArrival) or scenario.policy.admission.active:
        return None
    return _overload_probe(scenario, setup, specs)


def _overload_probe(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """``predict_overload``'s probe, with ``policy.admission`` left out of it (what the deployment
    serves when nothing is shed: ``predict_shedding`` asks it of a scenario with admission)."""
    # a P/D split is one deployment of two pools (cluster.replicas is 1): the probe runs all of it
    split = scenario.policy.name in DEPLOYMENTS
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if not isinstance(specs, RequestSpecs) or len(specs) < OVERLOAD_PROBE_MIN:
        return None
    span = float(specs.arrival_s[-1] - specs.arrival_s[0])
    if not span > 0:
        return None
    k = min(len(specs), OVERLOAD_PROBE_REQUESTS)
    first = setup.pools[0]  # (a P/D split's prefill pool: the one that runs the prompts)
    if first.policy_name in ("continuous", "chunked_prefill"):
        # a step holds at most the token budget, so the probe's prompts alone take sum(p) / budget
        # steps: a tiny budget (1 token: a step per prompt token) would make this quick check as
        # slow as a long run, so the probe keeps the requests that fit OVERLOAD_PROBE_STEPS
        budget = first.max_num_batched_tokens * (first.replicas if split else 1)
        steps = np.cumsum(specs.prompt_tokens[:k], dtype=np.float64) / budget
        k = int(np.searchsorted(steps, OVERLOAD_PROBE_STEPS, side="right"))
        if k < OVERLOAD_PROBE_MIN:
            return None
    res = _probe(scenario, specs, np.zeros(k), split,
                 f"validate's load probe: the workload's first {k:,} requests at once on {_on(split)}; {LOADED_SO}")
    if res.summary["completed"] < 0.9 * k:  # (rejections: they leave at once; predict_rejections names them)
        return None
    # (its throughput counts the drain, when the last requests run in a shrinking batch: a lower
    # bound of what it serves with work always waiting; completions between two percentiles
    # would overstate it, as the short requests finish first)
    served = res.summary["throughput_rps"] * (1 if split else scenario.cluster.replicas)
    offered = offered_rate(specs.arrival_s)
    return {"offered_rps": offered, "served_rps": served, "probe_requests": k,
            "overloaded": bool(offered > OVERLOAD_MARGIN * served), "preemptions": int(res.summary["preemptions"])}


def preemptions_at_rate(scenario: Scenario, k: int, setup=None, specs=None) -> int:
    """The preemptions of the workload's first ``k`` requests arriving at their own times (drawn
    with the scenario's seed), on one replica (each replica takes 1 / replicas of the arrivals:
    the arrival times stretched by the replicas) or the whole P/D split: what a run at the offered
    rate preempts, where ``predict_overload``'s probe (all at once, its batch as full as the KV
    cache lets it be) says only what a full batch does. With ``k`` all of a single replica's
    requests, it is the run's count."""
    setup, specs = _setup_and_specs(scenario, setup, specs)
    split = scenario.policy.name in DEPLOYMENTS
    stretch = 1 if split else scenario.cluster.replicas
    k = min(k, len(specs))
    where = (f"validate's preemption probe: the workload's first {k:,} requests at their own arrival times on "
             f"{_on(split)}; {LOADED_SO}")
    return int(_probe(scenario, specs, specs.arrival_s[:k] * stretch, split, where).summary["preemptions"])


# requests of validate's dry run of a plug-in: enough for a router's 200th call and a policy's
# hundreds of steps with a queue (8 let one that broke on its 50th call pass, the run then failing)
PLUGIN_DRY_REQUESTS = 200


def uses_plugins(scenario: Scenario) -> bool:
    """Whether a policy or router servesim does not ship decides in a run of ``scenario``."""
    from servesim.core.router import ROUTERS

    return scenario.policy.runs_plugin() or scenario.cluster.router not in ROUTERS


def dry_run_plugins(scenario: Scenario, setup=None, specs=None) -> int | None:
    """``validate``'s dry run of a scenario's plug-in policy or router: the workload's first
    ``PLUGIN_DRY_REQUESTS`` requests (drawn with the scenario's seed, at their own arrival times;
    those whose prompts fit ``OVERLOAD_PROBE_STEPS`` steps of the token budget) run on the whole
    deployment, so that a ``next_batch`` (a router's call) that raises or returns
    no valid decision is the ``PluginError`` a run would stop on, naming the plug-in, before the
    scenario is called ok. The requests it ran; None where no plug-in runs (or no request is drawn).
    Only what these few requests reach is exercised: a decision that breaks under load shows in
    the run."""
    if not uses_plugins(scenario):
        return None
    setup, specs = _setup_and_specs(scenario, setup, specs)
    lengths = drawn_lengths(specs)
    workload = dataclasses.replace(scenario.workload, duration_s=None)
    if lengths is not None:
        k = min(len(lengths), PLUGIN_DRY_REQUESTS)
        if not k:
            return None
        # a step holds at most the token budget, so the dry run keeps the requests whose prompts fit
        # OVERLOAD_PROBE_STEPS steps of it (a tiny budget would make it as slow as a long run), and at
        # least the first request
        first = setup.pools[0]
        budget = first.max_num_batched_tokens * first.replicas
        steps = np.cumsum(lengths.prompt_tokens[:k], dtype=np.float64) / budget
        k = max(1, int(np.searchsorted(steps, OVERLOAD_PROBE_STEPS, side="right")))
        run, given = dataclasses.replace(scenario, workload=dataclasses.replace(workload, num_requests=k)), \
            _first(lengths, k)
    else:  # (multi-turn sessions, a closed loop bounded by duration_s: as many requests as the run sends first)
        k = PLUGIN_DRY_REQUESTS
        run, given = dataclasses.replace(scenario, workload=dataclasses.replace(workload, num_requests=k)), None
    try:
        simulate(run, specs=given)
    except PluginError as e:
        raise PluginError(f"{e} (validate's dry run of the workload's first {k:,} requests)") from e.__cause__
    except InputError:  # (the few requests cut from the workload, not the plug-in: the run itself was checked)
        return None
    return k


def _first(specs: RequestSpecs, k: int) -> RequestSpecs:
    """``specs`` cut to its first ``k`` requests (every per-request column; ``class_names`` kept)."""
    return dataclasses.replace(specs, **{
        f.name: getattr(specs, f.name)[:k] for f in dataclasses.fields(specs)
        if isinstance(getattr(specs, f.name), (np.ndarray, tuple)) and f.name != "class_names"})


LOADED_SO = "a run that loads it so stops there"


def _simulate(where: str, scenario: Scenario, exact: bool = False, **kw):
    """``simulate`` for one of validate's probes or replays: a plug-in's ``PluginError`` raised in
    it carries ``where`` (what ran it: validate's warning names it) and ``exact`` (it ran the run
    itself, as ``servesim run`` does: the run fails with that error, so validate does too; a probe
    or a partial replay loads the plug-in otherwise than the run may), unless an inner one set them."""
    try:
        return simulate(scenario, **kw)
    except PluginError as e:
        if getattr(e, "where", None) is None:
            e.where, e.exact = where, exact
        raise


def _on(split: bool) -> str:
    return "the whole P/D deployment" if split else "one replica"


def _probe(scenario: Scenario, specs: RequestSpecs, arrival_s: np.ndarray, split: bool, where: str):
    """Run the workload's first ``len(arrival_s)`` requests, arriving at ``arrival_s``, on one
    replica (the whole deployment for a P/D ``split``), with ``policy.admission`` left out and no
    ``duration_s``: the probes of ``_overload_probe`` and ``preemptions_at_rate``; ``where``: what
    it is, for a plug-in's error (``_simulate``)."""
    k = len(arrival_s)
    probe = dataclasses.replace(_first(specs, k), arrival_s=arrival_s)
    one = dataclasses.replace(scenario if split else _one_replica(scenario),
                              workload=dataclasses.replace(scenario.workload, num_requests=k, duration_s=None),
                              policy=dataclasses.replace(scenario.policy, admission=Admission()))
    return _simulate(where, one, specs=probe)


SHEDDING_BUCKET_REPLAY = 2_000_000  # arrivals the token bucket is replayed on (more: its rate bounds it)


def _bucket_rejections(arrival_s: np.ndarray, rate: float, burst: float) -> int:
    """How many of the arrivals (sorted) ``policy.admission.token_bucket`` rejects: the gateway's
    bucket replayed (it reads only the arrival times, so the count is the run's: give it the
    arrivals that reach the door, those a P/D split's decode pool refuses left out); past
    ``SHEDDING_BUCKET_REPLAY`` arrivals, the least its rate lets through refused."""
    n = len(arrival_s)
    if n > SHEDDING_BUCKET_REPLAY:
        span = float(arrival_s[-1] - arrival_s[0]) if n else 0.0
        return max(0, int(n - (span * rate + burst)))
    return int(_bucket_mask(arrival_s, rate, burst).sum())


def _bucket_mask(arrival_s: np.ndarray, rate: float, burst: float) -> np.ndarray:
    """Per arrival (sorted), whether the token bucket rejects it: the gateway's bucket
    (``gateway.Admission.at_door``) replayed."""
    tokens, last = burst, 0.0
    rejected = np.zeros(len(arrival_s), dtype=bool)
    for i, t in enumerate(arrival_s.tolist()):
        tokens = min(burst, tokens + (t - last) * rate)
        last = t
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            rejected[i] = True
    return rejected


def _shed_at_once(scenario: Scenario, specs) -> dict | None:
    """``predict_shedding`` of ``all_at_once`` arrivals: every request arrives at one instant
    (``time_s``), before any step admits one, so the rules decide on the queue the arrivals
    themselves make: the run cut off just after that instant rejects what the run rejects (up to
    ``SHEDDING_BUCKET_REPLAY`` requests: more, None). Replayed at 0 (nothing happens before the
    arrivals: the same decisions), so that the cut-off is just after them whatever ``time_s``: cut
    at 1e-9 s, a replay of arrivals at ``time_s`` > 0 saw none of them and predicted nothing.
    {"at_once": the requests the rules reject, "reasons" (top three), "rejected_share", ...} (the
    rest of the keys empty)."""
    if not isinstance(specs, RequestSpecs) or not len(specs) or len(specs) > SHEDDING_BUCKET_REPLAY:
        return None
    specs = dataclasses.replace(specs, arrival_s=np.zeros_like(specs.arrival_s))
    cut = dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, duration_s=1e-9, arrival=dataclasses.replace(scenario.workload.arrival, time_s=0.0)))
    reasons = _admission_reasons(_simulate(
        f"validate's replay of the {len(specs):,} requests arriving at once with policy.admission's rules; "
        f"{LOADED_SO}", cut, specs=specs))
    if not reasons:
        return None
    return _replay_result(reasons, len(specs), at_once=len(reasons))


BUCKET_REASON = "admission: token bucket"  # (the gateway's reason for the bucket's rejections)


def _admission_reasons(res) -> list:
    """The reasons of a run's requests that ``policy.admission`` rejected."""
    return [r for r in res.requests["reason"].tolist() if isinstance(r, str) and r.startswith("admission: ")]


def _replay_result(reasons: list, n: int, **given) -> dict:
    """``predict_shedding``'s answer from a replay of ``n`` requests that shed ``reasons``: the
    keys a rate probe would fill left empty (None, 0, []), and ``given`` on top."""
    return {"offered_rps": None, "served_rps": None, "probe_requests": None, "rules": [], "reaching_rps": None,
            "bucket": 0, "queue": 0, "at_once": 0, "halves": None, "shed": len(reasons),
            "reasons": top_reasons(reasons), "requests": n, "rejected_share": len(reasons) / n, "overloaded": False,
            "backlog": None, **given}


SHEDDING_REPLAY_REQUESTS = 10_000  # the most requests a replay of the run itself runs (more: its first ones)
_LAST_RUN: list = [None, None, None]


def _affordable(setup, prompts: np.ndarray) -> int:
    """How many of ``prompts`` (in arrival order) a replay runs: those whose prompts alone take at
    most ``OVERLOAD_PROBE_STEPS`` budget-sized steps (with continuous batching or chunked prefill),
    at most ``SHEDDING_REPLAY_REQUESTS``."""
    first = setup.pools[0]
    k = min(len(prompts), SHEDDING_REPLAY_REQUESTS)
    if first.policy_name in ("continuous", "chunked_prefill"):
        budget = first.max_num_batched_tokens * first.replicas
        k = min(k, int(np.searchsorted(np.cumsum(prompts, dtype=np.float64) / budget, OVERLOAD_PROBE_STEPS,
                                       side="right")))
    return k


def _run_replayed(scenario: Scenario, specs: RequestSpecs):
    """The run itself, its admission rules and ``duration_s`` kept: ``scenario`` on the workload it
    draws (``specs``), what ``servesim run`` simulates; kept for the last (scenario, specs), as
    ``predict_unfinished`` and ``predict_shedding`` both read it."""
    last = _LAST_RUN
    if last[0] is not None and last[0]() is scenario and last[1]() is specs:
        return last[2]
    res = _simulate("validate's replay of the run itself (the workload as drawn, with policy.admission's rules and "
                    "workload.duration_s): the run stops there too", scenario, exact=True, specs=specs)
    last[:] = [weakref.ref(scenario), weakref.ref(specs), res]
    return res


def _halves(res, skip_bucket: bool) -> dict:
    """A partial replay's rejections by ``policy.admission`` in the first and the later half of its
    requests (by arrival), and whether the later half's share is clearly above the first's (a
    two-proportion z of at least 2): the replay covers only the run's first requests, and a share
    that rises through them says the run's later ones may shed more. ``skip_bucket``:
    the token bucket's rejections left out (its whole-run count is said apart). {"first",
    "later": requests, "first_shed", "later_shed", "rising"}."""
    r = res.requests
    order = np.argsort(np.asarray(r["arrival_s"], dtype=np.float64), kind="stable")
    reason = np.asarray(r["reason"], dtype=object)[order]
    shed = np.array([isinstance(x, str) and x.startswith("admission: ")
                     and not (skip_bucket and x.startswith(BUCKET_REASON)) for x in reason], dtype=bool)
    k = len(shed)
    h = k // 2
    a, b = int(shed[:h].sum()), int(shed[h:].sum())
    rising = False
    if h and k - h:
        p = (a + b) / k
        se = np.sqrt(p * (1 - p) * (1 / h + 1 / (k - h)))
        rising = bool(se > 0 and (b / (k - h) - a / h) >= 2 * se)
    return {"first": h, "later": k - h, "first_shed": a, "later_shed": b, "rising": rising}


SHEDDING_EXTEND = 3  # replays of a closed loop's first requests extended past its rejections, at most


def _shed_replayed(scenario: Scenario, setup, specs) -> dict | None:
    """``predict_shedding`` where no offered rate tells what reaches the replicas: closed-loop and
    multi-turn workloads (each client or session sends its next request after the last one ends,
    or is rejected) and open-loop workloads of fewer than ``OVERLOAD_PROBE_MIN`` requests (too few
    for the rate probe). The run itself is replayed, with its admission rules: all of it when it
    has at most ``SHEDDING_REPLAY_REQUESTS`` requests (``workload.num_requests``, or the short
    open-loop workload drawn), the run's count ("whole"); else its first
    ``SHEDDING_REPLAY_REQUESTS`` requests, the share of those shed ("about": a burst of rejections
    among them, such as a long prompt holding the head of the queue, weighs more in them than in
    the whole run). They are the run's own ("own"; its lengths and think times drawn as the run
    draws them), so their count is exactly that of the run's first requests, at least the
    run's (of "run_requests": ``num_requests``, None with only ``duration_s``), and it is extended
    past its rejections (which cost it next to nothing) until ``SHEDDING_REPLAY_REQUESTS`` were
    admitted, so that a burst of them at the start (every client sending at once, each rejected one
    sending again) does not stand for the whole run; multi-turn sessions' too (``_own_first``). A
    replay whose prompts alone take more than ``OVERLOAD_PROBE_STEPS`` budget-sized steps is not
    run (None), where the lengths are known before it: the workload drawn, a closed loop's
    ``num_requests``. {"replayed": the requests replayed, "whole", "short" (an open-loop workload),
    "shed" (of them), "reasons"
    (top three), "rejected_share", "at_once": 0, ...} (the rate keys empty); None when nothing is shed."""
    wl = scenario.workload
    first = setup.pools[0]
    budget = (first.max_num_batched_tokens * first.replicas
              if first.policy_name in ("continuous", "chunked_prefill") else None)
    kw, loop = {}, None
    if isinstance(specs, RequestSpecs):  # (a short open-loop workload: the run, on the requests drawn)
        replay, kw, whole, prompts = scenario, {"specs": specs}, True, specs.prompt_tokens
    else:
        whole = wl.num_requests is not None and wl.num_requests <= SHEDDING_REPLAY_REQUESTS
        replay = scenario if whole else dataclasses.replace(
            scenario, workload=dataclasses.replace(wl, num_requests=SHEDDING_REPLAY_REQUESTS))
        lengths = drawn_lengths(specs)
        prompts = lengths.prompt_tokens[:SHEDDING_REPLAY_REQUESTS] if lengths is not None else None
        if not whole and isinstance(specs, (ClosedLoop, Sessions)) and not specs.sent:
            loop = _own_first(specs, SHEDDING_REPLAY_REQUESTS)
            if isinstance(loop, ClosedLoop) and loop._have < loop.num_requests:
                # (within its first chunk of lengths, drawn as the run draws it: a later chunk cut
                # short draws its columns otherwise than the run's)
                loop.num_requests = loop._have
                replay = dataclasses.replace(scenario, workload=dataclasses.replace(wl, num_requests=loop._have))
            kw = {"specs": loop}
    if budget is not None and prompts is not None and prompts.sum() / budget > OVERLOAD_PROBE_STEPS:
        return None
    where = (f"validate's replay of the run{'' if whole else f's first {replay.workload.num_requests:,} requests'} "
             f"with policy.admission's rules; {LOADED_SO}")
    # (the run itself where whole and no closed loop's first requests are cut from it: its plug-in errors are the run's)
    res = (_run_replayed(scenario, specs) if isinstance(specs, RequestSpecs)
           else _simulate(where, replay, exact=whole and loop is None, **kw))
    n = res.summary["num_requests"]
    reasons = _admission_reasons(res)
    if loop is not None:
        # a rejected request costs the replay next to nothing (no step runs it), and a closed loop's
        # first requests can be mostly rejections (its clients all sending at once, each rejected one
        # sending again: closed-loop.yaml with think time 0 and max_queue=4 rejected 976 of its first
        # 1,000 and 168 of the next 1,000), so where most of the replay was rejections it is the
        # same run's first requests extended until SHEDDING_REPLAY_REQUESTS of them were admitted,
        # within the loop's first chunk of lengths (the run's whole num_requests, or 4,096) and
        # SHEDDING_EXTEND replays (each from the start: a replay mostly admitted is not extended,
        # as that would run its admitted requests again and again)
        drawn = loop._have if isinstance(loop, ClosedLoop) else wl.num_requests or np.inf
        for _ in range(SHEDDING_EXTEND):
            cap = int(min(SHEDDING_REPLAY_REQUESTS + len(reasons), drawn))
            # (duration_s cut it, enough admitted, or too few rejected to be a storm)
            if n < loop.num_requests or cap <= n or 2 * len(reasons) < n:
                break
            loop = _own_first(specs, cap)
            res = _simulate(where, dataclasses.replace(scenario, workload=dataclasses.replace(wl, num_requests=cap)),
                            specs=loop)
            n = res.summary["num_requests"]
            reasons = _admission_reasons(res)
    if not n or not reasons:
        return None
    out = _replay_result(reasons, n, replayed=n, whole=whole, short=isinstance(specs, RequestSpecs))
    if loop is not None:
        # (duration_s cut the run before it sent them, or they are all the run's: its count)
        out["whole"] = n < loop.num_requests or n == wl.num_requests
        out["own"] = True
        out["run_requests"] = wl.num_requests
    if not out["whole"]:  # (the run's first requests only: how the share moved through them)
        out["halves"] = _halves(res, False)
    return out


def _own_first(source, k: int):
    """A copy of the run's own closed loop or sessions ``source`` (none sent yet) that stops after
    its first ``k`` requests: the clients (sessions) send them as in the run, none knowing of the
    cap before it is reached, so each is admitted or rejected as there. A closed loop's first chunk
    of lengths and think times is drawn first, as the run draws it (``num_requests``, or 4,096:
    the chunk follows the count); sessions draw theirs in chunks of their own, and their start
    times (open loop) were drawn with the run's count already."""
    own = copy.deepcopy(source)
    if isinstance(own, ClosedLoop):
        own._grow()
    own.num_requests = k
    return own


_LAST_FIRST: list = [None, None, None]


def _replay_first(scenario: Scenario, setup, specs: RequestSpecs, k: int) -> tuple:
    """The run replayed with its rules on its first ``_affordable`` requests (at least ``k``) at
    their own arrival times: ``(result, requests replayed)``; the whole run (``_run_replayed``, its
    ``duration_s`` kept) where that is all of them. A request's admission is decided on its arrival,
    by what came before it, so the replay's decisions on those first requests are the run's own.
    Kept for the last (scenario, specs, k): the shedding and unfinished predictions both read it."""
    n = len(specs)
    k = min(n, max(k, _affordable(setup, specs.prompt_tokens)))
    if k == n:
        return _run_replayed(scenario, specs), k
    last = _LAST_FIRST
    if last[0] is not None and last[0]() is scenario and last[1]() is specs and last[2][1] == k:
        return last[2]
    one = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, num_requests=k,
                                                                     duration_s=None))
    res = _simulate(f"validate's replay of the workload's first {k:,} requests at their own arrival times with "
                    f"policy.admission's rules; {LOADED_SO}", one, specs=_first(specs, k))
    last[:] = [weakref.ref(scenario), weakref.ref(specs), (res, k)]
    return res, k


# a partial replay of an overloaded run shorter than this is not extrapolated (the queue rules'
# formula is said instead): its later half would still be the queue filling
OVERLOAD_REPLAY_MIN = 2_000


def _queue_replayed(scenario: Scenario, setup, specs: RequestSpecs, k: int) -> dict | None:
    """``predict_shedding``'s count of the queue rules' rejections (the token bucket's left out: its
    own replay counts them) of an overloaded run, from the run replayed with its rules
    (``_replay_first``): the whole run's count, exactly ("whole"); else the exact count of its first
    requests ("first_count" of "replayed": a request's admission is decided on its arrival by what
    came before it) plus the other requests' (``_fluid_rejections``: at their own arrival times,
    against the completion rate and the most requests in flight the later half of the replay kept;
    with ``policy.admission.classes``, which leaves some requests to the queue whatever it holds, at
    the share the later half shed: "by_share"; "by_span" where the later half arrives at one
    instant, a burst, and the later half of their span is read instead: ``_later_half``), "count";
    None where fewer than ``OVERLOAD_REPLAY_MIN`` can be replayed, and where they all arrive at one
    instant (no stretch of the run to read a completion rate from: the fluid queue counted none of
    the other requests, 980 said where the run rejected 3,178; the formula's bound is said).
    Checked against runs of 20,000 to 50,000 requests
    (docs/how-it-works.md): within 3%, a sinusoidal rate included (the later half's share alone read
    1.19 times that run's count), where the formula it replaces (what the probe serves over the
    arrivals' span) ran 0.88 to 1.23 times their counts, and 0.61 to 1.88 times on runs of 600 to
    7,000."""
    n = len(specs)
    if min(n, max(k, _affordable(setup, specs.prompt_tokens))) < min(n, OVERLOAD_REPLAY_MIN):
        return None
    res, k = _replay_first(scenario, setup, specs, k)
    adm = scenario.policy.admission
    h = _halves(res, adm.token_bucket is not None)
    x = h["first_shed"] + h["later_shed"]
    if k == n:
        return {"whole": True, "count": x, "replayed": k}
    by_share = adm.classes is not None or n > SHEDDING_BUCKET_REPLAY
    later = _later_half(res, specs, k, adm.token_bucket is not None)
    if later is None:  # (the replayed requests all arrive at one instant: the formula's bound is said)
        return None
    # (the later half as the fluid queue reads it, by time span: by request count, a burst at one
    # instant ending the replay stood for the whole rest of the run)
    rest = later.shed * (n - k) if by_share else _fluid_rejections(scenario, setup, specs, res, k)
    return {"whole": False, "replayed": k, "first_count": x, "halves": h, "count": int(round(x + rest)),
            "by_share": by_share, "by_span": bool(specs.arrival_s[k - 1] <= specs.arrival_s[k // 2]),
            "later_share": later.shed, "later_arrived": later.arrived}


def _fluid_rejections(scenario: Scenario, setup, specs: RequestSpecs, res, k: int) -> float | None:
    """The queue rules' rejections of the requests after the first ``k`` of ``specs``, whose replay
    is ``res``: from the run's requests in flight at the last of those ``k`` arrivals (exact), the
    later arrivals that reach the queue (those the replicas' length rules and the token bucket let
    through) fill it at their own times, in steps of 1/200 of the later half of the replay, the
    requests in flight drain at the completion rate that half kept, and what would take them past
    the most that half held is rejected (a fluid queue: a rate that changes after the replay is
    followed, where a share of it is not); None where the ``k`` all arrive at one instant
    (``_later_half``)."""
    h = _later_half(res, specs, k)
    if h is None:  # (no stretch of the run to read a completion rate from: 0 here undercounted)
        return None
    t_end, t_half, rate = h.t_end, h.t_half, h.rate
    most = float(h.counts.max())
    reach = _served(scenario, setup, specs)
    tb = scenario.policy.admission.token_bucket
    if tb is not None:  # (the bucket's rejections never reach the queue: its replay, exact)
        door = ~_refused_before_door(setup, specs)
        shed = np.zeros(len(specs), dtype=bool)
        shed[np.flatnonzero(door)] = _bucket_mask(specs.arrival_s[door], tb.rate_rps, tb.burst)
        reach &= ~shed
    later = specs.arrival_s[k:][reach[k:]]
    if not len(later):
        return 0.0
    step = (t_end - t_half) / 200
    bins = np.bincount(((later - t_end) // step).astype(np.int64))
    held, out = float(h.in_flight(t_end)), 0.0
    for a in bins.tolist():
        held += a - rate * step
        if held > most:
            out += held - most
            held = most
        held = max(held, 0.0)
    return out


def _shed_at_rate(scenario: Scenario, setup, specs: RequestSpecs, k: int, served: float) -> dict | None:
    """``predict_shedding`` where what reaches the replicas is not over ``OVERLOAD_MARGIN`` x what
    the overload probe served (within that margin the queue may or may not fill, as the probe
    underrates the deployment; below it, bursts of arrivals can still fill it at their peak
    rate): the run replayed with ``policy.admission`` on the whole deployment (its replicas and
    router, or the whole P/D split). The whole run (its ``duration_s`` too) when ``_affordable``
    takes all of it: its count, exactly ("whole"), and its "unfinished"; else its first
    ``_affordable`` requests (at least ``k``, the probe's) at their own arrival times, the share
    of them shed ("about": a queue still filling at their end sheds more after them), and
    "halves" (``_halves``: the first and later half's shares, so that the line says how the share
    moved through them). In ``_shed_replayed``'s keys, "at_rate" the probe's served rate,
    "run_requests" the run's, "replay_bucket" the replay's token-bucket rejections; None when it
    sheds nothing."""
    # (on the whole deployment, its router included: on one replica with the times stretched by the
    # replicas, two replicas behind max_queue=2 read bursty.yaml's 600 requests shedding 21 where
    # the run, its router sending each arrival to the less loaded replica, shed 3; and the whole run
    # where it is affordable: its first 1,000 alone read 8% where the run of 2,000 at 18 req/s with
    # max_queue=40 shed 13.6%, and bursty.yaml's first 1,000 at 60 req/s with max_queued_tokens=50000
    # 13% where its 3,000 shed 28%)
    n = len(specs)
    res, k = _replay_first(scenario, setup, specs, k)
    whole = k == n
    reasons = _admission_reasons(res)
    if not reasons:
        return None
    return _replay_result(reasons, k, offered_rps=offered_rate(specs.arrival_s), served_rps=served, probe_requests=k,
                          replayed=k, whole=whole, short=False, at_rate=served, run_requests=n,
                          replay_bucket=sum(r.startswith(BUCKET_REASON) for r in reasons),
                          unfinished=res.summary["unfinished"] if whole else None,
                          halves=None if whole else _halves(res, scenario.policy.admission.token_bucket is not None))


def predict_shedding(scenario: Scenario, setup=None, specs=None) -> dict | None:
    """The requests ``policy.admission`` will shed, without running it. The rule: the token bucket
    is replayed on the arrival times of the requests it applies to (exact). What reaches the
    replicas is then compared with what the deployment serves, S (``predict_overload``'s probe, run
    without the admission rules: a lower bound). When it is over ``OVERLOAD_MARGIN`` x S and a rule
    bounds the queue (``max_queue``, ``max_queued_tokens``, or ``ttft_slo`` with a TTFT limit on
    every request it applies to), the queue fills and stays full, so the requests the deployment
    cannot take are rejected: of those the rules apply to, over the arrivals' span T, about
    S x T - (the others) are served, the queue holds its limit (``max_queue`` x replicas, or
    ``max_queued_tokens`` x replicas / their mean prompt), and the rest are rejected (an
    overestimate, as S is an underestimate); the limit counts the waiting requests of every class,
    so when the requests no rule applies to outgrow S by themselves, they hold the queue once it is
    full and the others got in only while it filled. That formula ran 0.61 to 1.88 times the runs'
    counts: the count said ("queue") is the run replayed with its rules (``_queue_replayed``: the
    whole run's count, or its first requests' extrapolated, "queue_replayed"), the formula only
    where too few requests can be replayed. {"offered_rps", "served_rps" (None without the probe),
    "probe_requests", "rules" (the fields that shed), "reaching_rps" (the rate past the bucket),
    "bucket" (its rejections), "queue" (the queue rules' estimated rejections), "rejected_share"
    (of all requests, both), "overloaded" (what reaches the replicas is over the margin),
    "backlog" (why the queue grows through the run anyway, or None: "unbounded", no rule bounds it;
    "others", the requests no rule applies to outgrow S; "room", the queue's limit holds so much of
    this run's excess that fewer than ``REJECTED_SHARE`` of the requests are rejected), "uncounted" (why
    the queue rules beside a token bucket are not counted, below overload, or None)}; None without
    admission control and when nothing is predicted (no bucket rejections and no overload, or a
    probe that cannot tell); what reaches the replicas not over ``OVERLOAD_MARGIN`` x S (rates
    cannot tell) and no bucket rejections, or a queue rule beside them: ``_shed_at_rate``, the
    run replayed at its own times with the rules (the whole run where affordable, else its first
    requests), "at_rate" S, "halves" (``_halves``: a partial replay's first and later half), and
    with a bucket "bucket" its whole-run count and "rejected_share" its share plus the queue
    rules' share of the replay; ``all_at_once`` arrivals:
    ``_shed_at_once``, "at_once" the count (0 otherwise); closed-loop and multi-turn workloads,
    and open-loop ones of fewer than ``OVERLOAD_PROBE_MIN`` requests: ``_shed_replayed``, "replayed"
    the requests it ran."""
    adm = scenario.policy.admission
    if not adm.active:
        return None
    setup, specs = _setup_and_specs(scenario, setup, specs)
    if isinstance(scenario.workload.arrival, AllAtOnceArrival):
        return _shed_at_once(scenario, specs)
    if isinstance(specs, RequestSpecs) and not len(specs):
        return None
    if not isinstance(specs, RequestSpecs) or len(specs) < OVERLOAD_PROBE_MIN:
        return _shed_replayed(scenario, setup, specs)
    n = len(specs)
    span = float(specs.arrival_s[-1] - specs.arrival_s[0])
    if not span > 0:
        return None
    names, _, limits = _classes(scenario, specs, {"request_id": np.arange(n)})
    index = specs.class_index if specs.class_index is not None else np.zeros(n, np.int64)
    scope = (np.ones(n, bool) if adm.classes is None
             else np.isin(np.asarray(names, dtype=object)[index], list(adm.classes)))
    ttft = limits[0] if limits is not None else np.full(n, np.inf if scenario.slo.ttft_s is None
                                                        else scenario.slo.ttft_s)
    rules = [f"max_queue={adm.max_queue}" if adm.max_queue is not None else None,
             f"max_queued_tokens={adm.max_queued_tokens}" if adm.max_queued_tokens is not None else None,
             "ttft_slo" if adm.ttft_slo and np.isfinite(ttft[scope]).all() else None]
    rules = [r for r in rules if r]
    n_in = int(scope.sum())
    n_out = n - n_in
    tb = adm.token_bucket
    # (the requests a P/D split's decode pool refuses before the door take no token: counted with
    # them, a bucket near the arrival rate was said to reject 188 of 600 where the run rejected 135)
    bucket = (_bucket_rejections(specs.arrival_s[scope & ~_refused_before_door(setup, specs)], tb.rate_rps,
                                 tb.burst) if tb is not None else 0)
    admitted = n_in - bucket
    reaching = (n_out + admitted) / span
    over = _overload_probe(scenario, setup, specs)
    served = over["served_rps"] if over is not None else None
    overloaded = served is not None and reaching > OVERLOAD_MARGIN * served
    if not overloaded and (not bucket or rules):
        # no clear overload by the average rate: within the margin of what the probe served (an
        # underestimate) the queue may or may not fill, and arrivals in bursts fill it at their
        # peak rate (bursty.yaml with max_queue=2 shed 19% at 3.9 req/s on average, against a
        # probe's 21): the workload's first requests at their own times, with the rules, tell;
        # with a token bucket beside a queue rule, both (the bucket alone counted only its own
        # rejections: chat.yaml at 60 req/s, bucket 50 req/s burst 20, max_queue=20 said 300
        # where the run rejected 465, 165 of them by max_queue), its whole-run count kept beside
        replay = (_shed_at_rate(scenario, setup, specs, over["probe_requests"], served)
                  if served is not None else None)
        if replay is not None and bucket:
            # the bucket's count is exact for the whole run; the queue rules' share is the replay's
            others = replay["shed"] - replay["replay_bucket"]
            replay["bucket"] = bucket
            replay["rejected_share"] = bucket / n + others / replay["replayed"]
        if replay is not None or not bucket:
            return replay
    # (a queue rule beside the bucket that nothing here counts: said, not taken as none)
    uncounted = None
    if not overloaded and rules:
        uncounted = ("validate's load probe could not tell what the deployment serves" if served is None else
                     f"the workload's first {min(over['probe_requests'], n):,} requests replayed with every rule "
                     "shed none")
    queue, backlog, replayed = 0, None, None
    if overloaded:
        capacity = served * span  # requests the deployment serves while they arrive (at least)
        backlog = ("unbounded" if not rules else "others" if n_out > OVERLOAD_MARGIN * capacity else None)
        if rules:
            entry = setup.pools[0].replicas  # (the replicas requests queue on: a P/D split's prefill pool)
            room = 0.0
            if adm.max_queue is not None:
                room = adm.max_queue * entry
            elif adm.max_queued_tokens is not None and n_in:
                # (the prompts of every class waiting count against it, as in the gateway)
                mean = float(specs.prompt_tokens[scope].mean() if not n_out else specs.prompt_tokens.mean())
                room = adm.max_queued_tokens * entry / mean
            excess = admitted - max(capacity - n_out, 0.0)
            # those the rules apply to that get in: what the others leave of what is served while they
            # arrive, plus the queue's limit at the end (drained after it: whatever its mix, everything
            # in it was admitted). The limit counts every request waiting, those of the classes
            # policy.admission.classes leaves out too (never rejected), so when those alone outgrow
            # what the deployment serves, they hold the queue once it is full: the rules' requests got
            # in only while it filled, as their share of the arrivals
            kept = max(capacity - n_out + room, room * admitted / (admitted + n_out) if admitted + n_out else 0.0)
            queue = int(max(admitted - kept, 0.0))
            # the run itself replayed with its rules (its first requests, extrapolated, where it is
            # long): the formula above, from a probe that underrates the deployment, ran 0.61 to
            # 1.88 times the runs' counts; kept where too few requests can be replayed
            replayed = _queue_replayed(scenario, setup, specs, over["probe_requests"])
            if replayed is not None:
                queue = replayed["count"]
            # the limit holds this run's excess (fewer rejected than the run's warning names): its queue grows
            if backlog is None and excess > 0 and queue < REJECTED_SHARE * n:
                backlog = "room"
    return {"at_once": 0, "offered_rps": offered_rate(specs.arrival_s), "served_rps": served,
            "probe_requests": over["probe_requests"] if over is not None else None,
            "rules": (["token_bucket"] if tb is not None else []) + rules, "reaching_rps": float(reaching),
            "bucket": bucket, "bucket_of": n_in, "queue": queue, "rejected_share": (bucket + queue) / n,
            "overloaded": bool(overloaded), "backlog": backlog, "uncounted": uncounted,
            "queue_replayed": replayed, "requests": n}
