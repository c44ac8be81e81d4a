"""What ``plan`` (and ``validate``, ``capacity``) estimate before running prices a sliding window as
the engine does (``batch.model_batch``): on every layer (Mistral-7B-v0.1) or on some of them
(Gemma-2-9B: every other layer). They priced both as full attention, so a 7,000-token Gemma-2
prompt's TTFT floor (243.4 ms) was above the TTFT a run gives it alone (240.9 ms): a floor that
could prune a shape whose run meets the SLO; and a Mistral request longer than the KV cache,
which the run serves in its window's blocks, was counted as rejected."""

import numpy as np
import pytest

from conftest import make_scenario
from servesim.simulation import prepare, simulate
from servesim.studies.plan_space import latency_floors, pool_bound, workload_stats

WINDOWED = ("google/gemma-2-9b", "mistralai/Mistral-7B-v0.1")
LONG = {"policy.prefix_caching": False, "workload.num_requests": 1,
        "workload.prompt_tokens": {"dist": "fixed", "value": 7000},
        "workload.output_tokens": {"dist": "fixed", "value": 50}}


@pytest.mark.parametrize("model", WINDOWED + ("meta-llama/Meta-Llama-3-8B",))
def test_plans_latency_floors_are_the_runs_times_of_a_request_alone(model):
    sc = make_scenario(model=model, **LONG)
    floors = latency_floors("colocated", prepare(sc), workload_stats(sc))
    r = simulate(sc).requests
    ttft = r["first_token_s"][0] - r["arrival_s"][0]
    tpot = (r["finish_s"][0] - r["first_token_s"][0]) / (r["output_tokens"][0] - 1)
    assert floors["ttft"][0] == pytest.approx(ttft, rel=1e-12)  # its prefill alone: the floor is the run's
    assert floors["tpot"][0] <= tpot * (1 + 1e-12)  # one step at its prompt's context: the run's steps grow


@pytest.mark.parametrize("model", WINDOWED)
def test_plans_decode_bound_prices_the_runs_decode_step(model):
    # 8 requests at once, prefilled in one step: then decode steps of all 8, the first at context
    # 7,000, the batch pool_bound prices at the mean prompt (max_num_seqs 8)
    sc = make_scenario(model=model, **{**LONG, "workload.num_requests": 8, "policy.max_num_seqs": 8,
                                       "policy.max_num_batched_tokens": 65536,
                                       "workload.arrival": {"process": "all_at_once"}})
    setup = prepare(sc)
    b = pool_bound(setup.pools_by_name["colocated"], 7000.0, spec=False, overlap=False)
    assert b.decode_batch == 8
    st = simulate(sc).steps
    first = np.flatnonzero((st["prefill_tokens"] == 0) & (st["num_seqs"] == 8))[0]
    assert st["prefill_tokens"][0] == 8 * 7000
    assert b.decode_batch / b.decode_tps == pytest.approx(st["duration_s"][first], rel=1e-12)


def test_a_windowed_request_longer_than_the_kv_cache_is_not_counted_rejected():
    # 300 blocks of 16 tokens: 7,050 tokens need 441 without a window, at most 257 within Mistral's 4,096
    sc = make_scenario(model=WINDOWED[1], **{**LONG, "memory.num_gpu_blocks": 300})
    floors = latency_floors("colocated", prepare(sc), workload_stats(sc))
    assert floors["rejected_share"] == 0.0
    assert simulate(sc).summary["completed"] == 1


@pytest.mark.parametrize("model", WINDOWED)
def test_the_gateways_predicted_ttft_of_an_idle_replica_is_the_runs_prefill_step(model):
    import simpy

    from servesim.core.cluster import Cluster
    from servesim.core.gateway import predicted_ttft_s
    from servesim.core.request import Request
    from servesim.outputs.recorder import Recorder

    sc = make_scenario(model=model, **LONG)
    rep = Cluster(simpy.Environment(), prepare(sc), Recorder(), 0).replicas[0]
    step = simulate(sc).steps["duration_s"][0]  # its prefill, alone
    assert predicted_ttft_s(Request(0, 0.0, 7000, 50), rep) == pytest.approx(step, rel=1e-12)


def test_the_lessons_price_their_models_as_they_attend():
    # the context-length lessons priced Mistral-7B-v0.1 at 32k as full attention; it attends within
    # 4,096 tokens (37% of a 32k prefill's time attention, where its window gives far less)
    from servesim.core.batch import model_batch
    from servesim.studies import lessons

    les = lessons.lesson_long_context(quick=True)
    assert les.holds
    lens, shares = dict(les.figures)["prefill_attention_share"]["series"][lessons.MISTRAL_7B.split("/")[1]]
    cm = lessons.cost_model(lessons.MISTRAL_7B, "h100-sxm")
    for p, share in zip(lens, shares):
        ops = cm.breakdown(model_batch(cm.model, prefill=[(p, 0)]))
        assert share == pytest.approx(ops["attention"].time_s / sum(o.time_s for o in ops.values()), rel=1e-12)


def test_plan_prunes_a_shape_whose_replicas_reject_the_prompts_with_their_reason():
    # whole-prompt admission (continuous) with a budget below the prompts: every request is
    # rejected at arrival. The floors counted only KV, so plan ran eight probes up to 64 units of
    # the shape to find 'too many requests never completed'
    from servesim.inputs.overrides import with_values
    from servesim.studies.plan_space import Shape, assess
    from conftest import BASE

    base = with_values(BASE, {"workload.prompt_tokens": {"dist": "fixed", "value": 12000},
                              "model": "mistralai/Mistral-7B-v0.1", "policy.max_num_batched_tokens": 8192})
    sc = make_scenario(**{"workload.prompt_tokens": {"dist": "fixed", "value": 12000},
                          "model": "mistralai/Mistral-7B-v0.1"})
    a = assess(Shape("colocated", "h100-sxm", 1), base, 1.0, {("ttft", "p99"): 5.0}, None, workload_stats(sc), 8,
               {"h100-sxm": 3.0}, {"h100-sxm": 700.0})
    assert a.status == "pruned-latency"
    assert "100.0% of requests are rejected (e.g. prompt of 12000 tokens exceeds" in a.reason
    assert "exceeds policy.max_num_batched_tokens=8192" in a.reason
    a = assess(Shape("colocated", "h100-sxm", 1, policy="chunked_prefill", chunk=2048), base, 1.0,
               {("ttft", "p99"): 5.0}, None, workload_stats(sc), 8, {"h100-sxm": 3.0}, {"h100-sxm": 700.0})
    assert a.status == "ok"
