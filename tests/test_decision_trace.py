"""The decision trace: why each request waited, the same in both engines, nothing when off."""

import json

import numpy as np
import pytest

from servesim.cli.main import main
from servesim.simulation import simulate
from tests.conftest import make_scenario, specs, two_classes
from tests.test_engine_equivalence import assert_columns_equal, assert_same

MIX = {**two_classes(0.6), "workload.num_requests": 200, "policy.max_num_seqs": 24, "memory.num_gpu_blocks": 800,
       "workload.arrival": {"process": "poisson", "rate_rps": 12.0}}


def spans(res, rid):
    d = res.decisions
    sel = d["request_id"] == rid
    return list(zip(d["reason"][sel].tolist(), d["start_s"][sel].tolist(), d["end_s"][sel].tolist(),
                    d["blocker"][sel].tolist()))


def test_a_short_prompt_behind_a_budget_blocked_head_waits_head_of_line():
    # requests 0-7 decode; request 8's 1995-token prompt fits the 2000-token budget alone, not
    # next to the 8 decode tokens; request 9 (50 tokens) would fit, but FCFS it waits behind 8
    rows = [(0.0, 100, 300)] * 8 + [(0.5, 1995, 5), (0.51, 50, 5)]
    sc = make_scenario(**{"policy.max_num_batched_tokens": 2000})
    res = simulate(sc, specs=specs(rows), decision_trace=True)
    assert [s[0] for s in spans(res, 8)][-1] == "budget"
    reasons = [s for s in spans(res, 9) if s[0] == "head_of_line"]
    assert reasons and all(s[3] == 8 for s in reasons)
    assert reasons[-1][2] - reasons[0][1] > 1.0  # it waited for the decodes to end
    assert res.summary["decisions"]["head_of_line"]["requests"] == 1


def test_with_skip_unfit_prompts_the_short_prompt_goes_ahead_and_the_head_waits_for_the_budget():
    """The same queue with policy.skip_unfit_prompts (vLLM V1 without chunked prefill): request 9
    is admitted at its first decision, ahead of 8, which waits for the budget alone (no
    head-of-line span); 8 is admitted once the decodes leave room, as before."""
    rows = [(0.0, 100, 300)] * 8 + [(0.5, 1995, 5), (0.51, 50, 5)]
    sc = make_scenario(**{"policy.max_num_batched_tokens": 2000, "policy.skip_unfit_prompts": True})
    res = simulate(sc, specs=specs(rows), decision_trace=True)
    assert {s[0] for s in spans(res, 8)} <= {"arrived", "budget"} and spans(res, 8)[-1][0] == "budget"
    assert [s[0] for s in spans(res, 9)] == ["arrived"]
    rq = res.requests
    assert rq["scheduled_s"][9] < 0.6 < rq["scheduled_s"][8]
    assert res.summary["decisions"]["head_of_line"]["requests"] == 0
    fcfs = simulate(make_scenario(**{"policy.max_num_batched_tokens": 2000}), specs=specs(rows))
    assert fcfs.requests["scheduled_s"][9] > fcfs.requests["scheduled_s"][8]


def test_spans_tile_each_wait_from_arrival_to_admission():
    res = simulate(make_scenario(**MIX), decision_trace=True)
    rq, d = res.requests, res.decisions
    checked = 0
    for i in np.flatnonzero((rq["status"] == "completed") & (rq["preemptions"] == 0)):
        rid = rq["request_id"][i]
        sel = (d["request_id"] == rid) & (d["start_s"] < rq["scheduled_s"][i])
        waited = rq["scheduled_s"][i] - rq["arrival_s"][i]
        assert (d["end_s"][sel] - d["start_s"][sel]).sum() == pytest.approx(waited, abs=1e-9)
        checked += waited > 0
    assert checked > 50


@pytest.mark.parametrize("extra", [
    {"policy.skip_unfit_prompts": True, "policy.max_num_batched_tokens": 4096},
    {"policy.queue": {"order": "priority"}},
    {"policy.queue": {"order": "sjf", "aging_s": 1.0}, "policy.name": "chunked_prefill",
     "policy.max_num_batched_tokens": 512},
    {"policy.preemption": "swap", "memory.swap_space_gib": 0.2, "memory.num_gpu_blocks": 400},
    {"policy.name": "pd_split", "policy.prefill": {"replicas": 1}, "policy.decode": {"replicas": 1},
     "policy.admission": {"max_queue": 8, "classes": ["batch"]}},
    # static batching: its batch's runs ignore arrivals, so traced they go step by step while
    # requests wait or arrive (before, 9,929 rows against the reference's 10,014)
    {"policy.name": "static", "policy.max_num_seqs": 4},
])
def test_the_trace_is_the_same_in_both_engines(extra):
    sc = make_scenario(**{**MIX, **extra})
    fast = simulate(sc, decision_trace=True, engine="fast")
    ref = simulate(sc, decision_trace=True, engine="reference")
    assert fast.engine_stats and sum(p["set_steps"] + p["run_steps"] for p in fast.engine_stats.values()) > 0
    assert len(fast.decisions["request_id"]) > 100
    assert_columns_equal(fast.decisions, ref.decisions, "decisions")
    assert_same(fast.summary["decisions"], ref.summary["decisions"])



def test_with_the_trace_on_no_run_holds_waiting_requests():
    """A run held until a completion (``Batch.until_completion``) skips the decisions of the
    requests waiting through it; the trace records every one, so it keeps them step by step."""
    sc = make_scenario(**{**MIX, "policy.preemption": "swap", "memory.swap_space_gib": 0.2,
                          "memory.num_gpu_blocks": 400})
    held = lambda res: sum(p["held_runs"] for p in res.engine_stats.values())  # noqa: E731
    assert held(simulate(sc, engine="fast")) > 0
    assert held(simulate(sc, decision_trace=True, engine="fast")) == 0

def test_fcfs_shows_priority_inversions_and_admission_rejections():
    sc = make_scenario(**{**MIX, "policy.admission": {"max_queue": 6, "classes": ["batch"]}})
    res = simulate(sc, decision_trace=True)
    d, s = res.decisions, res.summary["decisions"]
    assert s["priority_inversions"]["requests"] > 0  # chat waited while batch requests ran
    inv = d["inversion"] == 1
    assert set(d["class"][inv]) == {"chat"}
    adm = d["reason"] == "admission"
    assert adm.sum() == res.summary["rejected"] > 0
    assert all(x.startswith("admission: ") for x in d["detail"][adm])
    assert (d["start_s"][adm] == d["end_s"][adm]).all()
    # under the priority order (which preempts batch requests for chat ones) inversions mostly vanish
    prio = simulate(make_scenario(**{**MIX, "policy.queue": {"order": "priority"}}), decision_trace=True)
    assert prio.summary["decisions"]["priority_inversions"]["request_s"] < 0.1 * s["priority_inversions"]["request_s"]


def test_off_costs_nothing_and_changes_nothing():
    sc = make_scenario(**MIX)
    off, on = simulate(sc), simulate(sc, decision_trace=True)
    assert off.decisions is None and "decisions" not in off.summary
    assert_columns_equal(off.requests, on.requests, "requests")
    assert_columns_equal(off.steps, on.steps, "steps")


def test_cli_writes_the_csv_and_the_perfetto_spans(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(json.dumps({"model": "meta-llama/Meta-Llama-3-8B", "hardware": {"gpu": "h100-sxm"},
                                "policy": {"max_num_seqs": 4},
                                "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate_rps": 20},
                                             "prompt_tokens": {"dist": "fixed", "value": 500},
                                             "output_tokens": {"dist": "fixed", "value": 50}}}))
    csv_path, trace = tmp_path / "d.csv", tmp_path / "t.json"
    assert main(["run", str(scen), "--quiet", "--out", str(tmp_path / "o"), "--decision-trace", str(csv_path),
                 "--trace-events", str(trace)]) == 0
    head = csv_path.read_text().splitlines()[0]
    assert head == "request_id,replica,class,start_s,end_s,reason,decisions,blocker,inversion,detail"
    assert "max_num_seqs" in csv_path.read_text()
    ev = json.loads(trace.read_text())["traceEvents"]
    waits = [e for e in ev if e.get("cat") == "wait"]
    assert waits and {e["name"] for e in waits} >= {"wait: max_num_seqs"}
    assert any("waits" in e.get("args", {}) for e in ev if e.get("cat") == "request")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["decisions"]["requests"]["max_num_seqs"] > 0


def test_consecutive_spans_of_a_request_differ_in_reason_even_as_the_head_changes():
    """Under overload the head of the queue changes at every admission: with the blocker part of
    a span's identity, each waiting request got a row per admission (a 2,000-request run at 5x
    its capacity wrote 778,000 rows). A head-of-line span now keeps the blocker it began with."""
    sc = make_scenario(**{"workload.num_requests": 300, "memory.num_gpu_blocks": 300,
                          "workload.arrival": {"process": "poisson", "rate_rps": 60.0}})
    d = simulate(sc, decision_trace=True).decisions
    key = list(zip(d["request_id"].tolist(), d["replica"].tolist(), d["reason"].tolist(), d["inversion"].tolist()))
    ends, starts = d["end_s"].tolist(), d["start_s"].tolist()
    touching = [i for i in range(1, len(key)) if key[i] == key[i - 1] and starts[i] == ends[i - 1]]
    assert not touching
    hol = d["reason"] == "head_of_line"
    assert hol.sum() > 50 and (d["decisions"][hol] > 1).any()  # (the overload this is about)


def _classify(policy, kv, running, waiting):
    """The reasons the tracer gives the waiting requests at ``policy``'s decision (no engine)."""
    from collections import deque
    from types import SimpleNamespace

    from servesim.core.decisions import DecisionTracer
    from servesim.policies.base import ReplicaState

    waiting = deque(waiting)
    batch = policy.next_batch(ReplicaState(running, waiting, kv))
    tracer = DecisionTracer()
    tracer.decide(SimpleNamespace(prio=None, kv=kv, policy=policy, landed=(), waiting=waiting, index=0), 1.0, batch)
    return {e[0].request_id: e[3] for e in tracer._open.values()}


def test_a_request_behind_the_head_is_classified_as_the_policy_would_admit_it():
    """The requests behind the one admission stopped at were tested on their plain tokens and the
    free blocks: one that the watermark would have kept out too was counted head-of-line (it
    'would have fit'), one whose prompt the prefix cache holds was said to lack KV."""
    from servesim.core.kv import BlockAllocator
    from servesim.core.request import Request
    from servesim.policies.continuous import ContinuousPolicy

    def decoding(rid, prompt, kv, **kw):
        r = Request(rid, 0.0, prompt, 100, **kw)
        r.num_computed_tokens, r.num_output_done = prompt, 1
        assert kv.grow(r, prompt)
        return r

    # 100 blocks of 16, watermark 0.1 keeps 10 free; the running request holds 85 (its next token
    # fits its last block): 15 free. The head needs 20 (kv); 8 blocks behind it would leave 7 < 10
    kv = BlockAllocator(100, 16)
    reasons = _classify(ContinuousPolicy(watermark=0.1), kv, [decoding(0, 85 * 16 - 8, kv)],
                        [Request(1, 0.1, 20 * 16, 10), Request(2, 0.2, 8 * 16, 10)])
    assert reasons == {1: "kv", 2: "watermark"}
    # 20 blocks, prefix caching: the running request maps its 10-block prefix (group 0) and takes
    # an 11th for its next token: 9 free. The head needs 12 (kv); the one behind shares the
    # prefix: 10 of its 11 blocks are hits, so it needs one: it would have fit
    kv = BlockAllocator(20, 16, prefix_caching=True)
    run = decoding(0, 160, kv, prefix_group=0, prefix_tokens=160)
    reasons = _classify(ContinuousPolicy(), kv, [run],
                        [Request(1, 0.1, 192, 10), Request(2, 0.2, 176, 10, prefix_group=0, prefix_tokens=160)])
    assert reasons == {1: "kv", 2: "head_of_line"}
