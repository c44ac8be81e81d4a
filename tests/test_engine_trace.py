"""Tiny scenarios whose every timestamp is worked out by hand from the cost model."""

import math

import pytest

from servesim.core.batch import synthetic_batch
from servesim.simulation import prepare, simulate
from tests.conftest import SYNC, make_scenario, specs


def test_two_requests_exact_timestamps():
    sc = make_scenario(**SYNC)
    cm = prepare(sc).cost_model
    # A arrives at 0 (prompt 100, 3 output tokens); B at 1 ms, during A's prefill (prompt 50, 2 tokens).
    res = simulate(sc, specs=specs([(0.0, 100, 3), (0.001, 50, 2)]))
    d1 = cm.step_time(synthetic_batch(prefill=[(100, 0)])).time_s  # A's prefill alone
    d2 = cm.step_time(synthetic_batch(prefill=[(50, 0)], decode_contexts=[100])).time_s  # A decodes, B prefills
    d3 = cm.step_time(synthetic_batch(decode_contexts=[101, 50])).time_s  # both decode
    assert d1 > 0.001  # B really arrives during step 1
    r = res.requests
    expect = {
        "scheduled_s": [0.0, d1],
        "first_token_s": [d1, d1 + d2],
        "finish_s": [d1 + d2 + d3, d1 + d2 + d3],
    }
    for col, values in expect.items():
        assert r[col].tolist() == pytest.approx(values, rel=1e-12, abs=1e-15), col
    assert list(r["status"]) == ["completed", "completed"]
    st = res.steps
    assert st["duration_s"].tolist() == pytest.approx([d1, d2, d3], rel=1e-12)
    assert st["prefill_tokens"].tolist() == [100, 50, 0]
    assert st["decode_tokens"].tolist() == [0, 1, 2]
    assert st["num_seqs"].tolist() == [1, 2, 2]
    assert st["context_tokens"].tolist() == [100, 101 + 50, 102 + 51]
    # TBT gaps: A's tokens at d1, d1+d2, d1+d2+d3 -> gaps d2, d3; B's at d1+d2, d1+d2+d3 -> gap d3
    assert sorted(res.tbt_s.tolist()) == pytest.approx(sorted([d2, d3, d3]), rel=1e-12)
    s = res.summary
    assert s["ttft_s"]["max"] == pytest.approx(d1 + d2 - 0.001, rel=1e-12)
    assert s["tpot_s"]["mean"] == pytest.approx(((d2 + d3) / 2 + d3) / 2, rel=1e-12)
    assert s["sim_time_s"] == pytest.approx(d1 + d2 + d3, rel=1e-12)
    assert res.kv_blocks_in_use == [0]


def test_single_token_output_finishes_at_first_token_and_has_no_tpot():
    res = simulate(make_scenario(), specs=specs([(0.0, 64, 1)]))
    r = res.requests
    assert r["first_token_s"][0] == r["finish_s"][0]
    assert res.summary["tpot_s"]["mean"] is None
    assert len(res.tbt_s) == 0


def test_duration_stops_the_run_and_reports_unfinished():
    sc = make_scenario(**{"workload.num_requests": None, "workload.duration_s": 1.0,
                          "workload.output_tokens": {"dist": "fixed", "value": 1000}})
    res = simulate(sc)
    status = list(res.requests["status"])
    assert len(status) > 0 and set(status) == {"unfinished"}  # 1000 tokens take far more than 1 s
    assert res.summary["unfinished"] == len(status)
    assert res.summary["sim_time_s"] == 1.0


def test_request_that_can_never_fit_is_rejected_with_reason():
    sc = make_scenario(**{"memory.num_gpu_blocks": 10})  # 160 tokens of KV
    res = simulate(sc, specs=specs([(0.0, 100, 10), (0.1, 150, 20), (0.2, 20, 5)]))
    r = res.requests
    assert list(r["status"]) == ["completed", "rejected", "completed"]
    assert "KV blocks" in r["reason"][1] and "170" in r["reason"][1]
    # its prompt fits (150 of 160 tokens): it is served until its sequence outgrows the KV
    # (the engine cannot know its output length), after 160 - 150 + 1 = 11 of its 20 tokens
    assert "outgrew the KV cache while decoding, after 11 of its 20 output tokens" in r["reason"][1]
    assert not math.isnan(r["first_token_s"][1])
    # a prompt that cannot fit is rejected on arrival, never scheduled
    res = simulate(sc, specs=specs([(0.0, 161, 1)]))
    assert res.requests["status"][0] == "rejected" and math.isnan(res.requests["first_token_s"][0])


@pytest.mark.parametrize("policy", ["continuous", "chunked_prefill", "pd_split"])
def test_request_the_watermark_keeps_out_is_rejected_not_stalled(policy):
    # 200 blocks of 16 tokens, watermark 0.01: admission keeps 2 free, so 198 are usable. A
    # 3180-token prompt (+ 2 - 1 = 3181 tokens, 199 blocks) fits the KV but could never be admitted;
    # it used to wait forever, and the request behind it (FCFS) with it: the run stalled.
    sc = make_scenario(**{"memory.num_gpu_blocks": 200, "policy.name": policy, "policy.watermark": 0.01})
    res = simulate(sc, specs=specs([(0.0, 3180, 2), (0.1, 100, 10)]))
    r = res.requests
    assert list(r["status"]) == ["rejected", "completed"]
    assert "policy.watermark=0.01" in r["reason"][0] and "leaving 198" in r["reason"][0]
    # without the watermark it fits: 199 <= 200
    res = simulate(make_scenario(**{"memory.num_gpu_blocks": 200, "policy.name": policy, "policy.watermark": 0.0}),
                   specs=specs([(0.0, 3180, 2), (0.1, 100, 10)]))
    assert list(res.requests["status"]) == ["completed", "completed"]


def test_prompt_beyond_context_length_rejected():
    res = simulate(make_scenario(), specs=specs([(0.0, 8000, 500)]))  # Llama-3-8B: 8192 context
    assert res.requests["status"][0] == "rejected"
    assert "context length 8192" in res.requests["reason"][0]


def test_preemption_under_kv_pressure_recomputes_and_finishes_everything():
    sc = make_scenario(**{"memory.num_gpu_blocks": 40})  # 640 tokens of KV for 4 x (100 + 200)
    res = simulate(sc, specs=specs([(0.0, 100, 200)] * 4))
    r = res.requests
    assert list(r["status"]) == ["completed"] * 4
    assert r["preemptions"].sum() > 0
    # recompute repeats prefill work: more prefill tokens than the prompts alone
    assert res.summary["phases"]["prefill_tokens"] > 400
    assert res.kv_blocks_in_use == [0]
    assert res.steps["kv_blocks_used"].max() <= 40


def test_round_robin_and_least_outstanding_routing():
    rows = [(0.0, 100, 10), (0.0, 1000, 10), (0.0, 100, 10), (0.0, 100, 10)]
    rr = simulate(make_scenario(**{"cluster.replicas": 2}), specs=specs(rows))
    assert rr.requests["replica"].tolist() == [0, 1, 0, 1]
    lot = simulate(make_scenario(**{"cluster.replicas": 2, "cluster.router": "least_outstanding_tokens"}),
                   specs=specs(rows))
    # loads: r0 gets 100; r1 (0) gets 1000; r0 (100) gets 100; r0 (200 < 1000) gets the last
    assert lot.requests["replica"].tolist() == [0, 1, 0, 0]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_head_of_line_wait_for_the_token_budget_is_measured(engine):
    # budget 512: A (100 + 40 tokens) decodes one token a step; B's 512-token prompt (1 output
    # token) fits the budget alone but not next to A's decode token: it waits until A finishes.
    sc = make_scenario(**{"engine": engine, "policy.max_num_batched_tokens": 512, **SYNC})
    res = simulate(sc, specs=specs([(0.0, 100, 40), (0.05, 512, 1)]))
    r, st = res.requests, res.steps
    blocked_from = float(st["start_s"][st["start_s"] >= 0.05].min())  # the first decision after B arrived
    assert r["scheduled_s"][1] == pytest.approx(r["finish_s"][0])  # admitted at A's last step's end
    hol = res.summary["head_of_line"]
    assert hol["budget_blocked_requests"] == 1
    assert hol["budget_blocked_s"] == pytest.approx(r["scheduled_s"][1] - blocked_from)
    # a 511-token prompt fits next to the decode token: no wait
    res = simulate(make_scenario(**{"engine": engine, "policy.max_num_batched_tokens": 512, **SYNC}),
                   specs=specs([(0.0, 100, 40), (0.05, 511, 1)]))
    assert res.summary["head_of_line"] == {"budget_blocked_requests": 0, "budget_blocked_s": 0.0}


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_preempted_request_may_come_back_into_the_watermark(engine):
    # 200 blocks of 16 tokens, watermark 0.05: new requests leave 10 free (190 usable). B (16
    # tokens, 1 block) runs; A (2960-token prompt, 185 blocks) is admitted next to it (199 - 185
    # >= 10). Both grow until the KV runs out and A, the newest, is preempted after ~100 tokens:
    # its recompute (over 3040 tokens, more than 190 blocks) could never come back if the
    # watermark held it back too, and the run stalled (as it did before re-admissions were exempt).
    kw = {"engine": engine, "memory.num_gpu_blocks": 200, "policy.watermark": 0.05,
          "policy.max_num_batched_tokens": 4096}
    res = simulate(make_scenario(**kw), specs=specs([(0.0, 16, 400), (0.01, 2960, 200)]))
    r = res.requests
    assert list(r["status"]) == ["completed", "completed"]
    assert r["preemptions"][1] >= 1
    # only a first admission must fit what the watermark leaves: a 3100-token prompt (194 blocks) cannot
    res = simulate(make_scenario(**kw), specs=specs([(0.0, 3100, 2)]))
    assert res.requests["status"][0] == "rejected" and "its prompt = 3100 tokens" in res.requests["reason"][0]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllm_v02_preempts_a_decode_when_no_block_is_free_at_its_turn(engine):
    """vLLM v0.2's can_append_slot near a full cache, step by step. 5 blocks of 16 tokens; A
    (prompt 32, 4 tokens) and B (prompt 20, 3 tokens) arrive together and prefill in one
    prompt-only step (2 + 2 blocks, 1 free). Step 2: A's 33rd token takes the free block; at B's
    turn none is free, and B, the newest (and last) running request, preempts itself; A decodes
    alone. Step 3: B (20 + 1 tokens) is recomputed in a prompt step of its own, taking the 2 free
    blocks. Step 4: none is free at A's turn (its 34th token opens no block): B is preempted again.
    Step 5: B recomputed (22 tokens): its third token, it completes. Step 6: A's fourth. Without the
    rule (vllm-v1; vllm-v0 keeps it too) nothing is preempted: both decode in steps 2 and 3, A alone
    in step 4."""
    kw = {"memory.num_gpu_blocks": 5, "memory.block_size": 16, "policy.watermark": 0.0,
          "policy.prefill_first": True, "cost.api_server": False}
    rows = [(0.0, 32, 4), (0.0, 20, 3)]
    res = simulate(make_scenario(**kw, **{"cost.engine": "vllm-v0.2"}), specs=specs(rows), engine=engine)
    st, r = res.steps, res.requests
    assert st["prefill_tokens"].tolist() == [52, 0, 21, 0, 22, 0]
    assert st["decode_tokens"].tolist() == [0, 1, 0, 1, 0, 1]
    assert r["preemptions"].tolist() == [0, 2] and list(r["status"]) == ["completed", "completed"]
    old = simulate(make_scenario(**kw, **{"cost.engine": "vllm-v1"}), specs=specs(rows), engine=engine)
    v0 = simulate(make_scenario(**kw, **{"cost.engine": "vllm-v0"}), specs=specs(rows), engine=engine)
    assert v0.steps["prefill_tokens"].tolist() == [52, 0, 21, 0, 22, 0]
    assert v0.requests["preemptions"].tolist() == [0, 2]
    assert old.steps["prefill_tokens"].tolist() == [52, 0, 0, 0]
    assert old.steps["decode_tokens"].tolist() == [0, 2, 2, 1]
    assert old.requests["preemptions"].tolist() == [0, 0]
