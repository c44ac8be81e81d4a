"""Loud failure modes: the ``warnings`` list of summary.json (printed after the summary), for runs
whose numbers look fine but answer another question than the one asked.

Each warning is ``{"code": ..., "message": ...}``:
- ``rejections``: at least ``REJECTED_SHARE`` of the requests were rejected (with the top reasons):
  the latencies describe the few that were served (none: no latencies);
- ``resend_at_once``: a closed loop with think time 0 and no ``reject_wait_s`` above 0 had at least
  ``REJECTED_SHARE`` of its requests rejected, each client sending again at once
  (``resend_at_once_warnings``; ``validate``: with admission rules);
- ``clipped``: at least ``CLIPPED_SHARE`` of the requests were longer than the model's context and
  were shortened to fit it (``workload.clip_to_context``): the lengths run are not the ones
  described (``validate`` predicts it from the workload's own requests);
- ``unfinished``: at least ``UNFINISHED_SHARE`` were still queued or running at
  ``workload.duration_s``: the latencies leave out the backlog the cut-off hides;
- ``nothing_completed``: no request completed;
- ``no_requests``: no request arrived at all (``no_requests_text``: a ``workload.duration_s`` shorter
  than the first arrival, or a trace window with no rows in it): every figure of the run is empty,
  not zero (``validate`` predicts it from the workload drawn);
- ``not_keeping_up``: over the second half of the arrivals, fewer than ``KEEP_UP`` requests left
  per request that arrived (``summary["workload"]["keep_up"]``; open-loop arrivals, at least
  ``KEEP_UP_MIN_REQUESTS`` requests): the backlog grew through the run, so its latencies depend
  on its length instead of settling. The offered rate is above what the deployment serves, or,
  when the run's own arrivals and service times with no queueing could make the whole shortfall
  by themselves (``keep_up["warmup"]``: requests served in longer than that half of the arrivals
  lasts, or arrivals that bunch by chance), the run may instead be too short to tell (the message
  says which). Not shown with ``unfinished``, which says it already;
- ``head_of_line``: with whole-prompt admission, prompts at the head of the queue that fit the token
  budget only alone (not next to the running decodes) waited at least ``HEAD_OF_LINE_SHARE`` of the
  run's replica time (``summary["head_of_line"]``); the queue behind them waited too, or with
  ``policy.skip_unfit_prompts`` went ahead of them (which can starve them);
- ``preemptions``: at least ``PREEMPTED_SHARE`` as many preemptions as requests: the running
  requests outgrew the KV cache, and each preemption dropped a request's KV (recompute: the
  tokens are computed again, ``summary["kv"]["recompute_tokens"]``) or copied it to host memory and
  back (swap); vLLM logs a warning at every preemption for the same reason;
- ``kv_override``: ``memory.num_gpu_blocks`` sets more KV blocks than the GPU has memory for next to
  the weights (``kv_override_warnings``: the run models a GPU with more memory than it has);
- ``budget_below_seqs``: a pool's ``max_num_batched_tokens`` is below its ``max_num_seqs``
  (continuous batching, chunked prefill): a step holds at most the budget's tokens, one per
  decoding sequence, so ``max_num_seqs`` is never reached (vLLM refuses the setting;
  ``budget_warnings``);
- ``slo_units``: an SLO limit that reads like milliseconds typed as seconds (``slo.ttft_s`` over
  ``TTFT_S_MAX``, ``slo.tpot_s`` over ``TPOT_S_MAX``), top-level or a class's;
- ``slo_floor``: requests that cannot meet the SLO at any load: on an idle deployment their prompt's
  prefill alone takes longer than the TTFT limit, or one decode step of them alone longer than the
  TPOT limit (``predictions.predict_slo_floors``; ``slo_floor_text``, which ``validate`` prints
  before the run); SLO attainment cannot exceed the share of the others, whatever the load;
- ``class_under_slo``: at least ``SLO_TARGET`` of all requests were within their class's SLO, but a
  request class was not within its own (``class_slo_warnings``): a small class with a tight SLO
  hides under a large one with a loose SLO, and the studies judge the run as failing the SLO;
- ``trace_unit``: a trace's arrival column names no unit (``timestamp``, not ``timestamp_ms``) and
  ``workload.trace.time_unit`` is null, so its numbers were read as seconds
  (``summary["workload"]["trace_unit_guessed"]``): milliseconds read so make a trace 1000x slower,
  and nothing in the numbers tells which was meant; ``time_unit: s`` states it; or a stated
  ``time_unit`` other than the unit the column's name ends with (``time_unit: ms`` on
  ``arrival_s``, ``trace_unit_conflict_warnings``): the stated unit is read, and one of the two is wrong;
- ``plugin_shadowed``: a policy or router name the scenario uses that servesim ships and an
  installed distribution registers too, under the entry-point group ``servesim.policies`` /
  ``servesim.routers`` (``plugin_shadow_warnings``): servesim's own runs, and the warning names the
  plug-in's ``module:Class`` to run it by;
- ``no_effect``: a setting given (not its default) that this run never reads (``no_effect_warnings``:
  another packaged policy's, ``skip_unfit_prompts`` without whole-prompt admission beside decodes,
  a queue's predictor or ``preempt_running`` under an order that does not read it, pipeline overlap
  without stages, a trace's ``time_unit`` with no number read in it (timestamps, drawn arrivals),
  a router whose rule reads what the scenario does not give: ``prefix_aware``
  without ``policy.prefix_caching``, ``class_aware`` without ``cluster.class_replicas``), a
  ``cost.gpu_hour_usd`` / ``cost.gpu_power_w`` entry for a GPU the deployment
  does not run (``cost_mapping_warnings``), ``policy.queue.order`` (``aging_s``) beside a plug-in
  policy whose own ``queue_key`` orders its queue otherwise, a policy field beside a
  ``ContinuousPolicy`` plug-in that declares its own default for it (``servesim.plugins.
  plugin_queue_warnings`` / ``plugin_field_warnings``, which make the policy: added by
  ``simulate``): the run is the one without it.
  Such settings are accepted, not refused, so that one scenario can carry every variant's fields
  through sweeps and comparisons;
- ``model_generic``: how the model's ``config.json`` was read where it matters
  (``servesim.inputs.specs.model_note``): a ``model_type`` of no family servesim knows, read
  generically (what was guessed, and how to state it); a sliding window on only some layers, read
  as full attention; a ``layer_types`` value other than sliding_attention / full_attention, priced
  as full attention; a checkpoint published in another weight dtype than the one priced.
"""

from __future__ import annotations

from servesim.outputs.metrics import KEEP_UP, too_short_to_tell
from servesim.outputs.verdicts import SLO_TARGET, attainment_pct, classes_under_target
from servesim.outputs.wording import noun, plural

REJECTED_SHARE = 0.1
UNFINISHED_SHARE = 0.1
CLIPPED_SHARE = 0.1  # of the requests shortened to the context: a workload other than the one described
PREEMPTED_SHARE = 0.05  # preemptions per request: past a rare event, a KV cache too small for the load
HEAD_OF_LINE_SHARE = 0.01  # of the run's time x replicas: a stall the TTFT tail shows, not a rare instant
KEEP_UP_MIN_REQUESTS = 50  # fewer: a handful of slow requests at the end would say it
TTFT_S_MAX = 60.0  # a first token after more than a minute is no interactive SLO: likely ms
TPOT_S_MAX = 1.0  # a second per output token: likely ms


def slo_unit_warnings(slos) -> list:
    """``slos``: (field path, ttft_s, tpot_s) triples."""
    out = []
    for path, ttft, tpot in slos:
        for name, v, top in (("ttft_s", ttft, TTFT_S_MAX), ("tpot_s", tpot, TPOT_S_MAX)):
            if v is not None and v > top:
                out.append({"code": "slo_units",
                            "message": f"{path}.{name}: {v:g} s looks like milliseconds typed as seconds (SLO limits "
                                       f"are in seconds: {v:g} ms is {path}.{name}: {v / 1000:g})"})
    return out


def no_effect_warnings(scenario) -> list:
    """Settings of the scenario that change nothing in this run: given (their value is not the
    schema's default) where the packaged policy that would read them is not the one running, a
    queue setting its order does not read, and ``hardware.pp_overlap`` without pipeline stages. A
    plug-in policy may read any field: nothing is said of a deployment that runs one. (Swap space
    under recompute preemption is not named: vLLM's own flags set it whether or not a request
    ever swaps.)"""
    from servesim.inputs.scenario import Link, Policy, Pool, Predictor

    pol = scenario.policy
    out = []

    def add(field: str, value, why: str) -> None:
        out.append({"code": "no_effect", "message": f"policy.{field}={value} changes nothing with "
                                                    f"policy.name={pol.name} ({why}); the run is the one without it"})

    hw = scenario.hardware
    if hw.pp == 1 and not hw.pp_overlap:  # (the engine's, whatever the policy)
        out.append({"code": "no_effect", "message": "hardware.pp_overlap=false changes nothing with hardware.pp=1 (it "
                                                    "overlaps pipeline stages' micro-batches); the run is the one "
                                                    "without it"})
    out += router_no_effect_warnings(scenario)
    out += trace_unit_no_effect_warnings(scenario)
    if pol.runs_plugin():
        return out
    default = Policy()
    if pol.name != "static":
        if pol.batch_timeout_s != default.batch_timeout_s:
            add("batch_timeout_s", f"{pol.batch_timeout_s:g}", "it times static batching's partial batches")
        if pol.max_output_tokens is not None and pol.reserve != "max":
            add("max_output_tokens", pol.max_output_tokens,
                "it caps what static batching, or policy.reserve=max, reserves per request")
        first = scenario.prefill_first_steps
        if pol.skip_unfit_prompts and (pol.name == "chunked_prefill" or first):
            add("skip_unfit_prompts", "true", ("policy.prefill_first admits prompts with the whole budget"
                                               if pol.prefill_first else
                                               f"cost.engine={scenario.cost.engine} runs prompt-only steps "
                                               "(policy.prefill_first null), with the whole budget")
                if first else "chunked prefill fits any prompt in chunks")
    else:
        if pol.preemption != default.preemption:
            add("preemption", pol.preemption, "static batching reserves each batch's KV whole and never preempts")
        if pol.watermark != default.watermark:
            add("watermark", f"{pol.watermark:g}", "static batching forms a batch in whatever KV is free, "
                "keeping none back")
    if pol.name == "static" and pol.skip_unfit_prompts:
        add("skip_unfit_prompts", "true", "static batching runs no decodes beside a batch's prompts")
    q, base_predictor = pol.queue, Predictor()
    given = {}  # (settings of the queue read only under one order: the gateway's predictor, the preempting rule)
    if q.predictor != base_predictor and q.order != "sjf_predicted":
        changed = ", ".join(f"{k}={v}" for k, v in vars(q.predictor).items() if getattr(base_predictor, k) != v)
        given["predictor"] = (f"policy.queue.predictor ({changed})", "sjf_predicted",
                              "the output lengths it sorts by")
    if not q.preempt_running and q.order != "priority":
        given["preempt_running"] = ("policy.queue.preempt_running=false", "priority",
                                    "whether a waiting request preempts lower-priority running ones")
    for setting, order, why in given.values():
        out.append({"code": "no_effect", "message": f"{setting} changes nothing with policy.queue.order={q.order} "
                                                    f"(only policy.queue.order={order} reads it: {why}); the run is "
                                                    "the one without it"})
    if not pol.is_deployment:
        for side, value, base in (("prefill", pol.prefill, Pool()), ("decode", pol.decode, Pool()),
                                  ("link", pol.link, Link())):
            if value != base:
                given = ", ".join(f"{k}={v}" for k, v in vars(value).items() if getattr(base, k) != v)
                out.append({"code": "no_effect",
                            "message": f"policy.{side} ({given}) changes nothing with policy.name={pol.name} "
                                       "(it configures a P/D split, policy.name=pd_split); the run is the one "
                                       "without it"})
    return out


def trace_unit_no_effect_warnings(scenario) -> list:
    """``no_effect`` for ``workload.trace.time_unit`` where no number of the arrival column is read
    in it: arrivals drawn from ``workload.arrival`` (the trace gives lengths only), or an arrival
    column of timestamps (ISO / Azure date-times, which carry their own unit)."""
    w = scenario.workload
    t = getattr(w, "trace", None)
    if t is None or t.time_unit is None:
        return []
    if w.arrival is not None:
        why = ("arrivals come from workload.arrival, so the trace's arrival column is not read (the trace "
               "gives lengths only)")
    else:
        from servesim.inputs.workload import load_trace

        if not load_trace(w).arrival_timestamps:
            return []
        why = ("the trace's arrival column holds timestamps (date-times), which carry their own unit; "
               "time_unit applies to numbers only")
    return [{"code": "no_effect", "message": f"workload.trace.time_unit={t.time_unit} changes nothing: {why}; "
                                             "the run is the one without it"}]


def trace_unit_conflict_warnings(scenario) -> list:
    """``trace_unit`` (module docstring) for a ``workload.trace.time_unit`` stated against the unit
    the arrival column's name ends with (``time_unit: ms`` on ``arrival_s``): the stated unit is
    read, as documented (the name's unit applies where time_unit is null), but one of the two is
    wrong, and reading seconds as milliseconds makes the trace 1000x faster."""
    from servesim.inputs.traces import TIME_UNITS, unit_in_name

    w = scenario.workload
    t = getattr(w, "trace", None)
    if t is None or t.time_unit is None or w.arrival is not None:
        return []
    from servesim.inputs.workload import load_trace

    column = load_trace(w).unit_conflict
    if column is None:
        return []
    named = unit_in_name(column)
    f = TIME_UNITS[t.time_unit] / TIME_UNITS[named]
    speed = f"{1 / f:g}x faster" if f < 1 else f"{f:g}x slower"
    return [{"code": "trace_unit",
             "message": f"workload.trace.time_unit={t.time_unit} contradicts the arrival column {column!r}, whose "
                        f"name says {named}: its numbers were read in {t.time_unit}, as time_unit states (if the "
                        f"name is right, the replay runs {speed} than the trace); if they are in {named}, remove "
                        "time_unit (a null one reads the unit the name ends with); if they are in "
                        f"{t.time_unit}, name the column for it (ending in _{t.time_unit}; "
                        "workload.trace.columns.arrival names the column read)"}]


def router_no_effect_warnings(scenario) -> list:
    """A packaged router whose own rule reads something the scenario does not give, so that it
    routes exactly as ``least_outstanding_tokens`` would: ``prefix_aware`` without
    ``policy.prefix_caching`` (no replica caches a prefix: it never finds one), ``class_aware``
    without ``cluster.class_replicas`` (every class may use every replica); and ``class_aware``
    whose ``cluster.class_replicas`` lists every class but leaves replicas out: they serve nothing."""
    cl = scenario.cluster
    why = None
    if cl.router == "prefix_aware" and not scenario.policy.prefix_caching:
        why = ("without policy.prefix_caching (no replica caches a prefix, so it never finds one; "
               "set policy.prefix_caching: true)")
    elif cl.router == "class_aware" and not cl.class_replicas:
        why = ("without cluster.class_replicas (every class may use every replica; "
               "cluster.class_replicas lists a class's replicas)")
    out = []
    if why is not None:
        out.append({"code": "no_effect", "message": f"cluster.router={cl.router} routes as least_outstanding_tokens "
                                                    f"{why}; the run is the one with least_outstanding_tokens"})
    if cl.router == "class_aware" and cl.class_replicas:
        names = [c.name for c in scenario.workload.classes or ()] or ["default"]
        listed = {c.name for c in cl.class_replicas}
        pol = scenario.policy
        routed = pol.prefill.replicas if pol.name == "pd_split" else cl.replicas
        unused = sorted(set(range(routed)) - {i for c in cl.class_replicas for i in c.replicas})
        if listed >= set(names) and unused:
            shown = ", ".join(map(str, unused[:8])) + (", ..." if len(unused) > 8 else "")
            out.append({"code": "no_effect",
                        "message": "cluster.class_replicas lists every request class and none of replica "
                                   f"{noun(len(unused), 'position')} {shown} of the {routed} routed: "
                                   + ("those replicas serve nothing (their GPUs are counted" if len(unused) > 1 else
                                      "that replica serves nothing (its GPUs are counted")
                                   + ", idle, in the run's cost and utilization)"})
    return out


BUDGET_POLICIES = ("continuous", "chunked_prefill")  # the packaged policies whose steps hold at most the budget


def full_prompt_warnings(scenario, pools) -> list:
    """``no_effect`` for ``policy.full_prompt_admission`` where no pool's policy (``PoolSetup``) admits
    a prompt by its first chunk: no chunked prefill (a whole prompt takes its blocks at once), an
    engine profile whose block manager takes a prompt's whole sequence at admission
    (``whole_prompt_blocks``), or a P/D decode pool (it recomputes a whole sequence at once)."""
    if not scenario.policy.full_prompt_admission or not pools or scenario.policy.runs_plugin():
        return []  # (a plug-in policy may read any field)
    why = []
    for p in pools:
        pol = p.make_policy()
        if not getattr(pol, "chunked", False) or getattr(pol, "recompute_whole", False):
            why.append(f"the {p.name} pool runs whole prompts" if p.name != "colocated" else
                       "it runs whole prompts")
        elif getattr(pol, "whole_prompt_blocks", False):
            engine = f"cost.engine={p.engine.profile.name}" if p.engine is not None else "the engine profile"
            why.append(f"{engine} takes the blocks of a prompt's whole sequence at admission anyway")
        else:
            return []
    return [{"code": "no_effect", "message": f"policy.full_prompt_admission=true changes nothing with "
                                             f"policy.name={scenario.policy.name} ({'; '.join(dict.fromkeys(why))}: "
                                             "only chunked prefill admits a prompt by its first chunk); the run is "
                                             "the one without it"}]


def budget_warnings(pools) -> list:
    """``budget_below_seqs`` (module docstring) for each pool (``PoolSetup``) whose token budget is
    below its sequence cap: it runs fewer sequences at a time than the scenario says, and vLLM
    (``SchedulerConfig``) refuses to start with it. Accepted, not refused, as the other settings
    that change what a run means: one scenario carries a sweep's variants."""
    out = []
    for p in pools:
        b, s = p.max_num_batched_tokens, p.max_num_seqs
        if p.policy_name in BUDGET_POLICIES and b < s:
            what = (f"policy.max_num_batched_tokens={b} is below policy.max_num_seqs={s}" if p.name == "colocated" else
                    f"the {p.name} pool's max_num_batched_tokens={b} is below its max_num_seqs={s} (policy.{p.name}, "
                    "or policy's where it sets none)")
            out.append({"code": "budget_below_seqs",
                        "message": f"{what}: a step holds at most {b:,} tokens, one per decoding sequence, "
                                   f"so at most {b:,} sequences run in a step and "
                                   "max_num_seqs is never reached (vLLM refuses to start with this setting: "
                                   "max_num_batched_tokens must be at least max_num_seqs); raise the budget or lower "
                                   "max_num_seqs"})
    return out


def limit_unit_warnings(slo: dict) -> list:
    """The same check for ``servesim capacity --slo`` limits ({(metric, stat): seconds}): per-token
    metrics (tpot, tbt) over ``TPOT_S_MAX``, the others over ``TTFT_S_MAX``."""
    out = []
    for (metric, stat), v in slo.items():
        top = TPOT_S_MAX if metric in ("tpot", "tbt") else TTFT_S_MAX
        if v > top:
            out.append({"code": "slo_units",
                        "message": f"--slo {metric}_{stat}={v:g} is {v:g} s: it looks like milliseconds typed as "
                                   f"seconds (write {metric}_{stat}={v:g}ms, or {v / 1000:g})"})
    return out


def class_slos(data) -> list:
    """(name, its own ``slo`` mapping, or {}) of each request class of scenario data, which need not
    have been checked yet (any section may be of the wrong type: refused later, not here)."""
    workload = data.get("workload") if isinstance(data, dict) else None
    classes = (workload.get("classes") if isinstance(workload, dict) else None) or []
    out = []
    for c in classes if isinstance(classes, list) else []:
        slo = c.get("slo") if isinstance(c, dict) else None
        out.append((c.get("name") if isinstance(c, dict) else "?", slo if isinstance(slo, dict) else {}))
    return out


def slo_limits_text(slo: dict) -> str:
    """"TTFT <= 300 ms, TPOT <= 50 ms" of an ``slo`` mapping (a class's, of scenario data that need
    not have been checked, or of summary.json), leaving out limits that are not numbers ("": none):
    ``wording.slo_limits``, the one rule for a limit's text (these notes wrote "TTFT <= 0.5 s" beside
    capacity's "500 ms")."""
    from servesim.outputs.wording import slo_limits

    return slo_limits(slo)


def class_slo_note(data: dict, flag: str = "--slo") -> str | None:
    """What ``capacity`` / ``plan`` say of a scenario (its data, overrides applied) whose request
    classes set their own SLOs: they judge every request, of every class, by ``flag`` alone, so a
    class's tighter limit (chat TTFT 0.3 s beside ``--slo ttft_p99=1``) was silently not what
    the answer meets. None when no class sets a limit."""
    own = [f"{name}: {lim}" for name, slo in class_slos(data) if (lim := slo_limits_text(slo))]
    if not own:
        return None
    return (f"the scenario's request classes have their own SLOs ({'; '.join(own)}); {flag} judges every "
            f"request, of every class, by its limits alone, not by those (the answer need not meet a class's own "
            f"SLO: check it in summary.json classes of a run at the rate found)")


def rate_unit(data) -> str:
    """The unit of a scenario's arrival rate (its data, overrides applied): "sessions/s" where it
    starts ``workload.sessions`` (``sessions_rate_note``), else "req/s"."""
    return "sessions/s" if isinstance(data, dict) and sessions_rate_note(data) else "req/s"


def sessions_rate_note(data: dict) -> str | None:
    """What ``compare`` and ``sweep`` say of a scenario (its data, overrides applied) whose
    ``workload.sessions`` an arrival rate starts: the rate (the table's rate column, "at 2
    sessions/s" in the notes, the report and its figures) is sessions started per second, not
    requests, as ``capacity`` says of the rate it searches. None without sessions or for a closed loop (no rate)."""
    w = data.get("workload") if isinstance(data, dict) else None
    if not isinstance(w, dict) or w.get("sessions") is None:
        return None
    a = w.get("arrival")
    if isinstance(a, dict) and a.get("process") == "closed_loop":
        return None
    return ("with workload.sessions, workload.arrival.rate_rps starts sessions, each sending its turns one after "
            "another: the rates here (the workload.arrival.rate_rps column, 'at N sessions/s') are sessions started "
            "per second, not requests; throughput_rps and goodput_rps count requests (turns), and each run's requests "
            "arrive faster than its rate (results.csv offered_rps)")


def scenario_slos(scenario) -> list:
    """(field path, ttft_s, tpot_s) of the scenario's SLO and each request class's."""
    out = [("slo", scenario.slo.ttft_s, scenario.slo.tpot_s)]
    for i, c in enumerate(scenario.workload.classes or ()):
        out.append((f"workload.classes[{i}].slo", c.slo.ttft_s, c.slo.tpot_s))
    return out


def resend_at_once_warnings(scenario, rejected: int | None = None) -> list:
    """A closed loop whose clients send again at once after a rejection (with sessions: begin
    their next session at once after a rejected turn ended one): think time 0 and no
    ``workload.arrival.reject_wait_s`` above 0 (0 is no backoff). ``rejected``: the run's rejections (None:
    before a run, said when admission rules can reject)."""
    from servesim.inputs.scenario import ClosedLoopArrival

    w = scenario.workload
    a = w.arrival
    # (reject_wait_s: 0 is no backoff: the clients still send again at once)
    if not isinstance(a, ClosedLoopArrival) or a.think_time_s > 0 or (a.reject_wait_s or 0) > 0:
        return []
    then = ("ends its session and its client begins the next session at once" if w.sessions is not None else
            "is followed at once by its client's next")
    if rejected is None:
        if not scenario.policy.admission.active:
            return []
        what = f"a request that policy.admission rejects {then}"
    elif rejected:
        what = f"{plural(rejected, 'request', fmt=',')} {'was' if rejected == 1 else 'were'} rejected; each {then}"
    else:
        return []
    return [{"code": "resend_at_once",
             "message": f"{what} (workload.arrival.think_time_s=0, "
                        f"{'no reject_wait_s' if a.reject_wait_s is None else 'reject_wait_s=0'}): against a server "
                        "that keeps rejecting, the clients send a request per API-server round trip (none without an "
                        "API server), so most requests are rejections; serving benchmarks send a fixed number "
                        "of prompts, and a load generator backs off: set workload.arrival.reject_wait_s above 0 (or "
                        "a think time) for that"}]


def run_warnings(summary: dict, scenario, pools=()) -> list:
    """The run's warnings (module docstring); ``scenario``: the ``Scenario`` that ran; ``pools``:
    its setup's pools (``servesim.simulation.PoolSetup``: the model's context, the KV sizing)."""
    out = []
    n = summary["num_requests"]
    rej, unf, done = summary["rejected"], summary["unfinished"], summary["completed"]
    if n and rej >= REJECTED_SHARE * n:
        misses = ((summary.get("profile") or {}).get("diagnosis") or {}).get("slo_misses") or {}
        reasons = misses.get("rejection_reasons") or []
        top = "; ".join(f"{k:,} x {r}" for r, k in reasons)
        # (the latencies are over completed requests: "the 166 served" counted the unfinished ones too,
        # on a run that completed none)
        if done:
            tail = f": the latencies describe only the {done:,} completed" + (
                f", not the {unf:,} still unfinished at workload.duration_s" if unf else "")
        elif unf:
            tail = (f": none completed (the other {unf:,} {'was' if unf == 1 else 'were'} still unfinished at "
                    "workload.duration_s), so there are no latencies to describe")
        else:
            tail = ": none was served, so there are no latencies to describe"
        out.append({"code": "rejections",
                    "message": f"{rej:,} of {plural(n, 'request', fmt=',')} ({rej / n:.0%}) "
                               f"{'was' if rej == 1 else 'were'} rejected"
                               + (f"; top reasons: {top}" if top else "") + tail})
    k = (summary.get("workload") or {}).get("clipped_requests") or 0
    if pools and n and k >= CLIPPED_SHARE * n:
        out.append({"code": "clipped", "message": clipped_text(k, n, pools[0].cost_model.model.max_context_tokens)})
    if n and unf >= UNFINISHED_SHARE * n:
        cut = scenario.workload.duration_s
        out.append({"code": "unfinished",
                    "message": f"{unf:,} of {plural(n, 'request', fmt=',')} ({unf / n:.0%}) were still queued or "
                               "running at "
                               f"workload.duration_s={cut if cut is None else f'{cut:g}'} s: the latency figures cover "
                               f"the {done:,} completed {noun(done, 'one')} and hide that backlog (a longer "
                               "duration_s, or "
                               f"num_requests without a cut-off, shows it)"})
    if n and rej >= REJECTED_SHARE * n:  # (a few rejections, followed at once, are a benchmark's too)
        out += resend_at_once_warnings(scenario, rej)
    if n and not done:
        out.append({"code": "nothing_completed",
                    "message": "the only request did not complete" if n == 1 else
                    f"none of the {n:,} requests completed"})
    if not n:
        out.append({"code": "no_requests", "message": no_requests_text(scenario)})
    keep = (summary.get("workload") or {}).get("keep_up")
    if keep is not None and keep["ratio"] < KEEP_UP and n >= KEEP_UP_MIN_REQUESTS and not any(
            w["code"] == "unfinished" for w in out):
        offered = summary["workload"].get("offered_rps") or 0.0
        e2e = keep["median_e2e_s"]
        warm = keep.get("warmup")
        # the shortfall the run's own arrivals and service times explain with no queueing (requests
        # served in longer than the window lasts, arrivals bunched by chance): all of it -> too short
        # to tell; not all of it even so -> the backlog grew
        short = too_short_to_tell(keep["ratio"], warm)
        rate = f"the offered {offered:.3g} req/s is above what the deployment serves"
        left = f"over the second half of the arrivals, requests left at {keep['ratio']:.0%} of the rate they arrived"
        msg = (f"{left}: either the backlog grew through the run ({rate}) or the run is too short to tell: that "
               f"half lasts {keep['window_s']:.3g} s (the median E2E is {e2e:.3g} s), and with no queue at all, each "
               f"request leaving a service time after it arrived, the run's arrivals and service times make a "
               f"shortfall of up to {warm:.0%} by themselves; run more requests to tell"
               if short else
               f"the backlog grew through the run: {left}, so its latencies depend on workload.num_requests "
               f"instead of settling; {rate} (lower the rate or add replicas; servesim capacity finds the highest "
               "rate it keeps up with)")
        out.append({"code": "not_keeping_up", "message": msg})
    guessed = (summary.get("workload") or {}).get("trace_unit_guessed")
    if guessed:
        out.append({"code": "trace_unit", "message": trace_unit_text(guessed, summary["workload"].get("offered_rps"))})
    out += class_slo_warnings(summary)
    out += preemption_warnings(summary, scenario)
    out += head_of_line_warnings(summary, scenario)
    out += slo_unit_warnings(scenario_slos(scenario))
    out += no_effect_warnings(scenario)
    out += trace_unit_conflict_warnings(scenario)
    out += full_prompt_warnings(scenario, pools)
    out += cost_mapping_warnings(scenario, pools)
    out += plugin_shadow_warnings(scenario)
    out += kv_override_warnings(pools)
    out += gpu_unit_warnings(pools)
    out += budget_warnings(pools)
    out += model_warnings(scenario)
    return out


def model_warnings(scenario) -> list:
    """``model_generic`` (module docstring): the notes on how the run's model was read. (They were
    printed by ``servesim run`` alone, so summary.json, a report of the run folder and every
    study's run said nothing of them.)"""
    from servesim.inputs.specs import model_note

    note = model_note(scenario.model, dtype=scenario.hardware.dtype)
    return [{"code": "model_generic", "message": note}] if note else []


def trace_unit_text(column: str, offered_rps: float | None) -> str:
    """``trace_unit`` (module docstring): the column, the rate the replay offers read so, and the fix."""
    rate = f" (the replay offers {offered_rps:.3g} req/s)" if offered_rps else ""
    return (f"workload.trace: the arrival column {column!r} names no unit and workload.trace.time_unit is null, so "
            f"its numbers were read as seconds{rate}; if they are milliseconds (or us, ns), set "
            f"workload.trace.time_unit: ms (or name the column {column}_ms); time_unit: s states seconds and drops "
            "this warning")


def no_requests_text(scenario, predicted: bool = False) -> str:
    """``no_requests`` (module docstring), naming the setting that left the run empty where one did;
    ``predicted``: as ``validate`` says it of the run to come."""
    cut = scenario.workload.duration_s
    what = "a run will have no request to serve" if predicted else "no request arrived"
    why = (f": none arrives within workload.duration_s={cut:g} s (a longer duration_s, or num_requests "
           "without it, gives the run requests)" if cut is not None else
           ": the workload drew none (a trace window with no rows in it?)")
    return f"{what}{why}; every latency, throughput and utilisation figure of it is empty"


def plugin_shadow_warnings(scenario) -> list:
    """``plugin_shadowed``: a policy or router name of the scenario that servesim ships and an
    installed distribution registers too (``servesim.plugins.shadowed``): servesim's runs."""
    from servesim.plugins import shadowed

    pol = scenario.policy
    used = [("policy", "policy.name", pol.name)]
    if pol.is_deployment:
        used += [("policy", f"policy.{side}.policy", getattr(pol, side).policy) for side in ("prefill", "decode")]
    used.append(("router", "cluster.router", scenario.cluster.router))
    out = []
    for kind, field, name in used:
        note = shadowed(kind, name)
        if note:
            out.append({"code": "plugin_shadowed", "message": f"{field}: {note}"})
    return out


def cost_mapping_warnings(scenario, pools) -> list:
    """``no_effect`` for a ``cost.gpu_hour_usd`` / ``cost.gpu_power_w`` mapping none of whose GPUs a
    pool of the run (``pools``: its setup's) runs: the price or power given is not the one the run
    used (a catalog GPU named in place of the deployment's). A mapping that also names other GPUs
    is not one: studies (plan, a sweep over ``hardware.gpu``) carry one table through runs on
    different GPUs."""
    gpus = sorted({p.cost_model.gpu.name for p in pools})
    out = []
    for key, what in (("gpu_hour_usd", "price"), ("gpu_power_w", "power")):
        value = getattr(scenario.cost, key)
        if isinstance(value, dict) and value and not set(value) & set(gpus):
            given = ", ".join(f"{k}: {v:g}" for k, v in value.items())
            out.append({"code": "no_effect",
                        "message": f"cost.{key} ({given}) changes nothing: this deployment runs {', '.join(gpus)}, "
                                   f"which the mapping does not name (the {what} of each GPU run comes from its own "
                                   "entry, else the catalog); the run is the one without it"})
    return out


def class_slo_warnings(summary: dict) -> list:
    """``class_under_slo`` (module docstring): each request class under ``SLO_TARGET`` of its own
    SLO, with its limits, when the overall share reaches it (below, the run fails the SLO anyway,
    and its class lines say by how much)."""
    a = summary.get("slo_attainment")
    classes = summary.get("classes") or {}
    if len(classes) < 2 or not isinstance(a, (int, float)) or a < SLO_TARGET:
        return []
    under = classes_under_target([summary])
    if not under:
        return []
    parts = []
    for name, att, n, _ in under:
        slo = classes[name].get("slo") or {}
        lim = slo_limits_text(slo)
        parts.append(f"class {name}: {attainment_pct(att)} of its {plural(n, 'request')} within its own "
                     f"SLO" + (f" ({lim})" if lim else ""))
    return [{"code": "class_under_slo",
             "message": f"{'; '.join(parts)}: under the {SLO_TARGET:.0%} each request class must reach, while "
                        f"{attainment_pct(a)} of all requests are within their class's SLO (the classes with looser "
                        "SLOs hide it); sweeps, comparisons and reports count this run as failing the SLO"}]


def clipped_text(k: int, n: int, context_tokens: int, predicted: bool = False) -> str:
    """``clipped`` (module docstring): ``k`` of ``n`` requests longer than the context; ``predicted``:
    as ``validate`` says it of the run to come."""
    share = f"{k / n:.0%}" if k >= CLIPPED_SHARE * n else f"{k / n:.1%}"
    what = (f"a run will shorten {k:,} of {plural(n, 'request', fmt=',')} ({share})" if predicted else
            f"{k:,} of {plural(n, 'request', fmt=',')} ({share}) {'was' if k == 1 else 'were'} shortened")
    return (f"{what} to fit the model's {context_tokens:,}-token context (prompt + output, workload.clip_to_context; "
            "prompt first, then output): the lengths run are not the ones described. A model with a longer context, "
            "or shorter lengths, runs them as described; clip_to_context: false rejects them instead")


def recompute_share(summary: dict) -> float:
    """The share of the tokens a run computed (prefill and decode) that recompute preemptions
    dropped (``kv.recompute_tokens``): work done twice."""
    ph = summary.get("phases") or {}
    total = (ph.get("prefill_tokens") or 0) + (ph.get("decode_tokens") or 0)
    return ((summary.get("kv") or {}).get("recompute_tokens") or 0) / total if total else 0.0


def kv_room_fix(scenario) -> str:
    """What gives a KV cache too small for the load room (``preemptions``, and ``validate``'s
    prediction of them): with ``memory.num_gpu_blocks`` set, the cache has that many blocks
    whatever the memory, the KV dtype or the TP size, so only that setting changes it. A P/D
    split's pools set their own TP and batch size (``policy.prefill`` / ``policy.decode``; the
    top-level fields are what a pool that leaves them null takes), so those are named."""
    pol = scenario.policy
    pd = bool(getattr(pol, "is_deployment", False))
    tp = "TP size (policy.decode.tp / policy.prefill.tp, else hardware.tp)" if pd else "hardware.tp"
    seqs = ("policy.decode.max_num_seqs / policy.prefill.max_num_seqs, else policy.max_num_seqs" if pd else
            "policy.max_num_seqs")
    n = getattr(getattr(scenario, "memory", None), "num_gpu_blocks", None)
    more = (f"more KV blocks (memory.num_gpu_blocks={n:,} sets the cache's size whatever the GPU memory, "
            f"memory.gpu_memory_utilization, hardware.kv_dtype or {tp}: raise it, or remove it to size "
            "the cache from the memory)" if n is not None else
            f"more KV memory (memory.gpu_memory_utilization, hardware.kv_dtype=fp8, a larger {tp})")
    return f"{more} or fewer requests at once ({seqs}) avoids it"


def preemption_warnings(summary: dict, scenario) -> list:
    """``preemptions`` (module docstring): how many, what they cost, and what gives the KV room
    (``kv_room_fix`` of ``scenario``)."""
    n, p = summary["num_requests"], summary.get("preemptions") or 0
    if not n or p < PREEMPTED_SHARE * n:
        return []
    kv = summary.get("kv") or {}
    fix = kv_room_fix(scenario)
    cost = []
    if kv.get("recompute_tokens"):
        cost.append(f"{kv['recompute_tokens']:,} KV tokens were dropped, to be computed again "
                    f"({recompute_share(summary):.1%} of the tokens computed)")
    if kv.get("swap_out_bytes"):
        cost.append(f"{kv['swap_out_bytes'] / 1e9:.3g} GB of KV was copied to host memory and back")
    return [{"code": "preemptions",
             "message": f"{plural(p, 'preemption', fmt=',')} over {plural(n, 'request', fmt=',')}: the running "
                        "requests outgrew the KV cache; "
                        + "".join(f"{c}; " for c in cost) + "each preempted request waited to run again. "
                        + fix[0].upper() + fix[1:] + ", as vLLM's own preemption warning advises"}]


def kv_override_warnings(pools) -> list:
    """``kv_override`` (module docstring), per pool of ``pools`` (``servesim.simulation.PoolSetup``: its
    ``capacity``, ``cost_model``): ``memory.num_gpu_blocks`` beyond the GPU memory left next to the
    weights (``gpu_memory_utilization`` of it: vLLM's override takes that many blocks, or runs out
    of memory). The activation reserve is left out of the bound: it is servesim's estimate."""
    out = []
    for pool in pools:
        cap = pool.capacity
        if cap.num_blocks_override is None:
            continue
        block = cap.kv_bytes_per_token * cap.block_size
        room = cap.usable_bytes - cap.weight_bytes
        if cap.num_blocks_override * block <= room:
            continue
        gpu = pool.cost_model.gpu
        out.append({"code": "kv_override",
                    "message": f"memory.num_gpu_blocks={cap.num_blocks_override:,} gives the {pool.name} replicas "
                               f"{_gib(cap.num_blocks_override * block)} of KV per GPU; the {gpu.name} has "
                               f"{_gib(max(room, 0.0))} next to the weights ({cap.usable_bytes / gpu.mem_bytes:.3g} of "
                               f"its {_gib(gpu.mem_bytes)}, memory.gpu_memory_utilization), room for "
                               f"{max(int(room // block), 0):,} blocks: the run models a GPU with more memory than it "
                               "has"})
    return out


RIDGE_FLOP_PER_BYTE = (10.0, 5000.0)  # real accelerators: about 37 (H20) to 420 (L40S); a unit slip is 1000x


def gpu_unit_warnings(pools) -> list:
    """``validate``'s and the run's, beside ``kv_override_warnings``: a GPU (a GPU YAML's, as the catalog's are in
    range) whose peak FLOP/s over its memory bandwidth lies far outside real accelerators': one
    figure was likely given in another unit (GB/s for bytes/s, TFLOP/s for FLOP/s), which the
    schema's deliberately wide bounds accept."""
    out, seen = [], set()
    lo, hi = RIDGE_FLOP_PER_BYTE
    for pool in pools:
        gpu = pool.cost_model.gpu
        ridge = gpu.peak_flops / gpu.mem_bw_bytes_per_s
        if gpu.name not in seen and not lo <= ridge <= hi:
            seen.add(gpu.name)
            out.append({"code": "gpu_units",
                        "message": f"GPU {gpu.name}: peak_flops / mem_bw_bytes_per_s is {ridge:.3g} FLOP per byte, "
                                   "where real accelerators sit between about 37 (H20) and 420 (L40S): check the "
                                   f"units (peak_flops {gpu.peak_flops:.3g} FLOP/s, mem_bw_bytes_per_s "
                                   f"{gpu.mem_bw_bytes_per_s:.3g} bytes/s)"})
    return out


def _gib(nbytes: float) -> str:
    x = nbytes / 1024 ** 3
    return f"{x:,.0f} GiB" if x >= 100 else f"{x:.3g} GiB"


def head_of_line_warnings(summary: dict, scenario) -> list:
    """``head_of_line`` (module docstring): the waits, their share of the run, and what avoids them."""
    hol = summary.get("head_of_line") or {}
    k, waited = hol.get("budget_blocked_requests", 0), hol.get("budget_blocked_s", 0.0)
    u = summary.get("utilization") or {}
    span = (summary.get("sim_time_s") or 0.0) * (u.get("virtual_engines") or u.get("replicas") or 1)  # schedulers
    if not k or span <= 0 or waited < HEAD_OF_LINE_SHARE * span:
        return []
    pol = scenario.policy
    fix = head_of_line_fix(scenario.prefill_first_steps)
    waits = (f"{k} prompt{'s' if k > 1 else ''} at the head of the queue waited {waited:.3g} s in all "
             f"({waited / span:.0%} of the run) for room in the token budget (policy.max_num_batched_tokens) next to "
             "the running decodes, a whole prompt a step")
    behind = ("; set aside (policy.skip_unfit_prompts), the requests behind went ahead, so such a prompt waits as "
              "long as decodes keep running" if pol.skip_unfit_prompts else
              ", and the requests behind waited with them (policy.skip_unfit_prompts lets them go ahead, as vLLM V1 "
              "did until late 2025)")
    return [{"code": "head_of_line", "message": f"{waits}{behind}: {fix}"}]


def head_of_line_fix(prefill_first: bool = False) -> str:
    """What avoids head-of-line waits for the token budget (the run's warning, ``validate``'s
    prediction and the summary's head-of-line line say the same); ``prefill_first`` already on:
    not offered again."""
    return ("chunked prefill (policy.name=chunked_prefill) or a token budget well above the longest prompt avoids it"
            + ("" if prefill_first else "; policy.prefill_first runs waiting prompts before the decodes, as vLLM "
               "V0 did"))


def format_warnings(warnings: list) -> list:
    """Lines for the printed summary, one per warning."""
    return [f"warning       {w['message']}" for w in warnings or ()]


def slo_floor_text(floors: dict, run_admitted: int | None = None) -> str:
    """What ``predictions.predict_slo_floors`` found (it found requests over a floor): how many of
    the requests served cannot meet the SLO even on an idle deployment, why, and the attainment no
    load exceeds; ``validate`` warns of it before a run, and the run (``slo_floor``) after it.
    ``run_admitted``: the run's requests not rejected (completed or not: a cut-off leaves some
    unfinished); below the floors' count (admission rejected some whose lengths fit), the requests
    are those whose lengths fit, of which the run admitted so many (it said "served", of requests
    a cut-off left unfinished too)."""
    k, n = floors["missed"], floors["requests"]
    of, ran = "requests served", ""
    if run_admitted is not None and run_admitted < n:
        of = "requests whose lengths fit the deployment"
        ran = (f"; the run admitted {run_admitted:,} of them, rejecting the rest" if run_admitted else
               "; the run rejected them all")
    why = []
    if floors["ttft"]:
        api = (f", the API server's {floors['api_request_s'] * 1e3:.3g} ms included" if floors["api_request_s"]
               else "")
        why.append(f"{plural(floors['ttft'], 'prompt', fmt=',')} take{'s' if floors['ttft'] == 1 else ''} longer "
                   "than their TTFT limit to prefill alone (up to "
                   f"{floors['ttft_max_s']:.3g} s{api})")
    if floors["tpot"]:
        why.append(f"{plural(floors['tpot'], 'request', fmt=',')} take{'s' if floors['tpot'] == 1 else ''} longer "
                   "than their TPOT limit for one decode step alone "
                   f"(from {floors['tpot_min_s'] * 1e3:.3g} ms)")
    return (f"{k:,} of the {n:,} {of} ({k / n:.1%}{ran}) cannot meet the SLO even on an idle deployment: "
            f"{'; '.join(why)}; SLO attainment cannot exceed {1 - k / n:.1%} at any load (a faster deployment or "
            "looser limits can)"
            + "".join(f"; class {c}: at most {cap:.1%} of its {plural(m, 'request', fmt=',')}, "
                      f"under the {SLO_TARGET:.0%} each request "
                      "class must reach (sweeps, comparisons and reports count the run as failing the SLO; the run's "
                      "class_under_slo says it when all requests reach it)"
                      for c, cap, m in floors["classes_capped"]))
