"""A request is checked against the KV cache at arrival by what the engine knows there, its
prompt (as vLLM, which cannot know the output length): a sequence that later outgrows the cache
is served until it does, preempting others as it grows, and then ends rejected with the reason,
at that time (vLLM V0 preempts it and, finding it can never be scheduled again, ends it)."""

import math

import numpy as np
import pytest

from servesim.core.replica import OVER_BUDGET
from servesim.predictions import predict_rejections
from servesim.simulation import simulate
from tests.conftest import SYNC, make_scenario, specs

BLOCKS = 20  # of 16 tokens: 320 tokens of KV
# a decoding request needs a free block only when its next token opens one: vllm-v1's rule (the V0
# profiles ask a free block of every decode, can_append_slot: the tests that name one say so)
PLAIN = {"cost.engine": "vllm-v1", "cost.api_server": False}


def tiny(engine, **kw):
    return make_scenario(**{**PLAIN, "engine": engine, "memory.num_gpu_blocks": BLOCKS, "policy.watermark": 0.0,
                            "workload.num_requests": 2, **kw})


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("policy", ["continuous", "chunked_prefill"])
def test_a_sequence_that_outgrows_the_kv_is_served_until_it_does(engine, policy):
    # prompt 177 fits (12 blocks); prompt + output - 1 = 391 tokens would need 25 of the 20 blocks.
    # The step that emits output token j + 1 computes 177 + j tokens: j + 1 <= 320 - 177 + 1 = 144
    res = simulate(tiny(engine, **{"policy.name": policy, "workload.num_requests": 1}), specs=specs([(0.0, 177, 215)]))
    r, s = res.requests, res.summary
    assert (s["completed"], s["rejected"], s["unfinished"]) == (0, 1, 0)
    assert r["status"][0] == "rejected" and r["output_tokens"][0] == 215
    assert "outgrew the KV cache while decoding, after 144 of its 215 output tokens" in r["reason"][0]
    # served until then: its first token came, and 144 steps (a prefill and 143 decodes) ran
    assert not math.isnan(r["first_token_s"][0]) and r["finish_s"][0] > r["first_token_s"][0]
    assert len(res.steps["start_s"]) == 144
    # before, it was rejected at arrival, never scheduled; a prompt that cannot fit still is
    res2 = simulate(tiny(engine, **{"policy.name": policy, "workload.num_requests": 1}), specs=specs([(0.0, 321, 5)]))
    assert res2.summary["rejected"] == 1 and "its prompt of 321 tokens needs 21 KV blocks" in res2.requests["reason"][0]
    assert math.isnan(res2.requests["first_token_s"][0]) and len(res2.steps["start_s"]) == 0


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_it_preempts_others_as_it_grows_and_every_request_is_accounted_for(engine):
    # A (100 + 250: 22 blocks whole) emits 221 tokens at most; B (100 + 200: 19 blocks) fits alone.
    # Together they outgrow the 20 blocks: B, the newest, is preempted, A runs to its 221st token
    # and ends rejected, and B comes back, is recomputed and completes.
    rows = [(0.0, 100, 250), (0.0, 100, 200)]
    res = simulate(tiny(engine), specs=specs(rows))
    r, s = res.requests, res.summary
    assert list(r["status"]) == ["rejected", "completed"]
    assert "after 221 of its 250 output tokens" in r["reason"][0]
    assert s["preemptions"] == 1 and list(r["preemptions"]) == [0, 1]
    assert r["finish_s"][1] > r["finish_s"][0]
    # validate predicts the rejection from the lengths (its count is the run's)
    pred = predict_rejections(tiny(engine), specs=specs(rows))
    assert pred["rejected"] == 1 and "outgrew the KV cache" in pred["reasons"][0][0]


def test_both_engines_agree_on_a_load_that_outgrows_the_kv():
    kw = {"memory.num_gpu_blocks": 20, "workload.num_requests": 30,
          "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 200},
          "workload.output_tokens": {"dist": "uniform", "min": 1, "max": 300}}
    fast, ref = (simulate(make_scenario(**{**kw, "engine": e})) for e in ("fast", "reference"))
    s = fast.summary
    assert s["rejected"] > 0 and s["completed"] + s["rejected"] == 30 and s["preemptions"] > 0
    for col in ("status", "finish_s", "first_token_s", "preemptions", "reason"):
        assert np.array_equal(fast.requests[col], ref.requests[col], equal_nan=col.endswith("_s")), col
    # client-side times (the API server's, on by default): one that ended rejected while decoding
    # heard of its end after the API server's time too, never before its first token
    r = fast.requests
    mid = (r["status"] == "rejected") & ~np.isnan(r["first_token_s"])
    assert mid.any() and (r["finish_s"][mid] >= r["first_token_s"][mid]).all() and (r["api_s"][mid] > 0).all()


def test_validate_says_which_rejections_come_while_decoding(tmp_path, capsys):
    import yaml

    from servesim.cli.main import main

    sc = make_scenario(**{"memory.num_gpu_blocks": 20, "workload.num_requests": 30,
                          "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 400},
                          "workload.output_tokens": {"dist": "uniform", "min": 1, "max": 300}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    pred = predict_rejections(sc)
    k, g = pred["rejected"], pred["while_decoding"]
    assert 0 < g < k  # some prompts do not fit at all (over 320 tokens), others outgrow it later
    assert (f"a run will reject {k} of 30 requests ({k / 30:.1%}), {g} of them while decoding, when their sequence "
            f"outgrows the KV cache, the other {k - g} before they are served") in out
    # their reasons group as one (the request's own counts read N), as the run's summary groups them
    grown = [(r, c) for r, c in pred["reasons"] if "outgrew" in r]
    assert grown == [("its sequence outgrew the KV cache while decoding, after N of its N output tokens: prompt + "
                      "output = N tokens needs N KV blocks; the replica has 20 in all (the engine cannot know the "
                      "output length at arrival; give the replica more KV memory)", g)]
    assert simulate(sc).summary["rejected"] == k


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_one_cut_off_before_it_outgrows_the_kv_is_unfinished_with_its_true_length(engine):
    sc = tiny(engine, **{"workload.num_requests": 1, "workload.duration_s": 0.2})
    r = simulate(sc, specs=specs([(0.0, 177, 215)])).requests
    assert r["status"][0] == "unfinished" and r["output_tokens"][0] == 215 and r["reason"][0] == ""


def test_a_p_d_request_rejected_at_the_door_keeps_its_true_output_length():
    # A P/D split caps a request whose decode outgrows a decode replica's KV (221 of 250 tokens)
    # before its admission rules; one they then reject never ran: requests.csv has its true length
    kw = {**PLAIN, "policy.name": "pd_split", "policy.prefill": {"replicas": 1}, "policy.decode": {"replicas": 1},
          "policy.link": {"type": "inter_node", "bandwidth_gbps": 400}, "memory.num_gpu_blocks": BLOCKS,
          "policy.watermark": 0.0, "workload.num_requests": 3, "policy.admission": {"max_queue": 1}}
    res = simulate(make_scenario(**kw), specs=specs([(0.0, 100, 250)] * 3))
    r = res.requests
    assert list(r["status"]) == ["rejected"] * 3
    assert "outgrew the KV cache while decoding, after 221 of its 250" in r["reason"][0]
    assert all("admission" in x for x in r["reason"][1:])
    assert list(r["output_tokens"]) == [250, 250, 250]


def test_one_whose_error_reaches_the_client_after_the_cut_off_is_unfinished():
    # as a completed request whose response reaches the client after workload.duration_s: the
    # engine ends it rejected, but the client hears of it api_request_s later, past the cut-off
    one = specs([(0.0, 177, 215)])
    engine_end = simulate(tiny("fast", **{"workload.num_requests": 1}), specs=one).requests["finish_s"][0]
    kw = {"workload.num_requests": 1, "cost.api_server": True}
    api = simulate(tiny("fast", **kw), specs=one).requests["api_s"][0]
    assert api > 0
    res = simulate(tiny("fast", **kw, **{"workload.duration_s": engine_end + api / 2}), specs=one)
    r = res.requests
    assert (r["status"][0], r["reason"][0], r["output_tokens"][0]) == ("unfinished", "", 215)
    assert math.isnan(r["finish_s"][0]) and (res.summary["rejected"], res.summary["unfinished"]) == (0, 1)
    # heard by the cut-off: rejected, at the client's time
    r = simulate(tiny("fast", **kw, **{"workload.duration_s": engine_end + 2 * api}), specs=one).requests
    assert r["status"][0] == "rejected" and r["finish_s"][0] == pytest.approx(engine_end + api)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_whole_prompt_admission_checks_the_prompt_and_ends_a_recompute_over_the_budget(engine):
    # Two 200-token prompts with 150 output tokens each under a 256-token budget, whole prompts
    # (continuous): prompt + output - 1 = 349 > 256, but the engine knows only the prompt on
    # arrival (vLLM's prompt_limit), so both are served (before: both rejected on arrival). 40
    # blocks hold 640 tokens: at 320 tokens each they fill the cache, B (the newest) is preempted,
    # and its recompute of prompt + 120 output tokens = 320 tokens in one prefill exceeds the
    # budget: it ends rejected then, holding no KV; A completes.
    kw = {"policy.max_num_batched_tokens": 256, "policy.max_num_seqs": 8}
    res = simulate(tiny(engine, **kw, **{"memory.num_gpu_blocks": 40}), specs=specs([(0.0, 200, 150), (0.0, 200, 150)]))
    r, s = res.requests, res.summary
    assert list(r["status"]) == ["completed", "rejected"] and (s["preemptions"], s["unfinished"]) == (1, 0)
    assert r["reason"][1].startswith(OVER_BUDGET + ", after 120 of its 150 output tokens: its recompute of "
                                     "prompt + output so far = 320 tokens exceeds policy.max_num_batched_tokens=256")
    assert r["output_tokens"][1] == 150 and r["first_token_s"][1] < r["finish_s"][1] < r["finish_s"][0]
    assert res.kv_blocks_in_use == [0]  # (every block back at the end: the ended request's too)
    # the decision trace does not keep it waiting, 'preempted', to the end of the run
    d = simulate(tiny(engine, **kw, **{"memory.num_gpu_blocks": 40}), specs=specs([(0.0, 200, 150)] * 2),
                 decision_trace=True).decisions
    assert not (d["end_s"][d["request_id"] == 1] > r["finish_s"][1]).any()
    # swap preemption keeps the KV (no recompute) and chunked prefill recomputes in chunks: served
    for more in ({"policy.preemption": "swap", "memory.swap_space_gib": 1.0}, {"policy.name": "chunked_prefill"}):
        res = simulate(tiny(engine, **kw, **more, **{"memory.num_gpu_blocks": 40}),
                       specs=specs([(0.0, 200, 150), (0.0, 200, 150)]))
        assert res.summary["completed"] == 2 and res.summary["preemptions"] >= 1, more
    # a prompt over the budget is still rejected on arrival
    res = simulate(tiny(engine, **kw), specs=specs([(0.0, 257, 1)]))
    assert "prompt of 257 tokens exceeds policy.max_num_batched_tokens=256" in res.requests["reason"][0]


def test_validate_says_which_requests_a_preemption_past_the_budget_can_end(tmp_path, capsys):
    """A request whose prompt fits the whole-prompt budget but whose prompt + output - 1 does not
    is served, and ends rejected only if a preemption makes it recompute past the budget: how
    many do depends on the load, so validate names those that can (every one the run ends so is
    among them) and leaves them out of the rejections it counts."""
    import yaml

    from servesim.cli.main import main
    from servesim.predictions import predict_over_budget

    kw = {"policy.max_num_batched_tokens": 512, "memory.num_gpu_blocks": 120, "workload.num_requests": 80,
          "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
          "workload.prompt_tokens": {"dist": "uniform", "min": 100, "max": 600},
          "workload.output_tokens": {"dist": "uniform", "min": 50, "max": 300}}
    sc = make_scenario(**kw)
    res = simulate(sc)
    r = res.requests
    fits = r["prompt_tokens"] <= 512
    risky = fits & (r["prompt_tokens"] + r["output_tokens"] - 1 > 512)
    ended = np.char.startswith(r["reason"].astype(str), OVER_BUDGET)
    assert ended.any() and not (ended & ~risky).any()  # (the run ends some of them, and only them)
    ob = predict_over_budget(sc)
    assert (ob["at_risk"], ob["requests"], ob["budget"]) == (int(risky.sum()), int(fits.sum()), 512)
    # the rejections validate counts are those on arrival: the prompts over the budget
    assert predict_rejections(sc)["rejected"] == int((~fits).sum()) == res.summary["rejected"] - int(ended.sum())
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    k = int(risky.sum())
    assert (f"warning: {k} of 80 requests ({k / 80:.1%}) are served with prompt + output - 1 over "
            "policy.max_num_batched_tokens=512: whole-prompt admission recomputes a preempted request") in out
    assert "a budget of at least the longest prompt + output - 1, keeps them all" in out
    # chunked prefill recomputes in chunks: nothing to say
    assert predict_over_budget(make_scenario(**{**kw, "policy.name": "chunked_prefill"})) is None
    # a PP replica with pp_overlap (virtual engines, each of 1/pp of the KV): the same budget, asked
    # of its engines (it was an AttributeError)
    pp = predict_over_budget(make_scenario(**{**kw, "hardware.pp": 2, "hardware.pp_overlap": True}))
    assert (pp["requests"], pp["budget"]) == (int(fits.sum()), 512) and 0 < pp["at_risk"] <= int(risky.sum())


def test_head_of_line_prediction_counts_prompts_whose_sequence_outgrows_the_kv_later():
    """A request whose sequence outgrows the KV cache while decoding is admitted on arrival: its
    prompt waits at the head of the queue for room in the budget as any other's. validate's
    head-of-line prediction left them out (it counted only requests that complete)."""
    from servesim.predictions import predict_head_of_line

    kw = {"policy.max_num_batched_tokens": 2048, "memory.num_gpu_blocks": 200, "workload.num_requests": 100,
          "workload.prompt_tokens": None, "workload.output_tokens": None,
          "workload.classes": [
              {"name": "chat", "share": 0.8, "prompt_tokens": {"dist": "uniform", "min": 50, "max": 300},
               "output_tokens": {"dist": "uniform", "min": 10, "max": 100}},
              # 2,030 to 2,046 tokens of prompt (128 blocks of the 200) + 1,500 of output: 221 blocks
              {"name": "long", "share": 0.2, "prompt_tokens": {"dist": "uniform", "min": 2030, "max": 2046},
               "output_tokens": {"dist": "fixed", "value": 1500}}]}
    sc = make_scenario(**kw)
    grown = predict_rejections(sc)["while_decoding"]
    assert grown > 0
    assert predict_head_of_line(sc)["tight"] == grown


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("profile", ["vllm-v0", "vllm-v0.2.3", "sarathi-serve", "vllm-v1"])
def test_a_recompute_that_can_never_come_back_above_the_watermark_ends_rejected(engine, profile):
    # 20 blocks, a 15% watermark keeps 3 free: 17 blocks (272 tokens) for an admission. A (256: 16
    # blocks) and B (1 token) fit; A, the largest, is preempted once the two fill the cache, after
    # its 17th token under vLLM V0's rule that a decode needs a free block (273 tokens to
    # recompute, 18 blocks); vllm-v1 preempts it after its 32nd (B's 3rd block), and runs it again.
    # vLLM V0's can_allocate holds a recompute above the watermark too, so it could never come back
    # (vLLM V0 ignores it: NEVER); it ends then, rejected, with its reason. Profiles that let a
    # recompute use the watermark run it.
    kw = {"cost.engine": profile, "policy.watermark": 0.15, "policy.preemption_victim": "largest_kv",
          "policy.max_num_batched_tokens": 512}
    res = simulate(tiny(engine, **kw), specs=specs([(0.0, 256, 40), (0.0, 1, 100)]))
    r, s = res.requests, res.summary
    assert s["preemptions"] == 1 and list(r["preemptions"]) == [1, 0]
    if profile == "vllm-v1":
        assert list(r["status"]) == ["completed", "completed"]
        return
    assert list(r["status"]) == ["rejected", "completed"] and (s["rejected"], s["unfinished"]) == (1, 0)
    after = 17
    assert r["reason"][0].startswith(
        f"preempted with a sequence that can never be admitted again, after {after} of its 40 output tokens: its "
        f"recompute of prompt + output so far = {256 + after} tokens needs 18 free KV blocks to be admitted, but "
        "admission keeps policy.watermark=0.15 of the 20 blocks free")
    assert "leaving 17" in r["reason"][0]
    # it ends at its preemption, before B (which then runs alone)
    assert r["finish_s"][0] < r["finish_s"][1] and r["output_tokens"][0] == 40
    # (before, it came back into the watermark's blocks and was preempted again, over and over)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllm_v0_holds_a_recompute_that_fits_only_into_the_watermark(engine):
    # vLLM V0 (v0.3-v0.6) sends a request preempted for recompute back to the waiting queue, which
    # admits it through BlockSpaceManager.can_allocate: free - its blocks >= the watermark's. 20
    # blocks, a 20% watermark keeps 4. A (128 + 60 out), C (32 + 40) and B (64 + 100) take 8 + 2 + 4
    # blocks in step 0; after k decodes each holds ceil((prompt + k) / 16). vLLM V1 preempts B, the
    # newest, when a token opens a block none is free for: at k = 33 they would need 11 + 5 + 7 = 23
    # (97 to recompute, 7 blocks). vLLM V0 asks a free block of each decode (can_append_slot): the
    # cache is full after k = 17 (10 + 4 + 6 = 20 blocks), so B goes in step 18 (81 computed
    # tokens to recompute, 82 with its next: 6 blocks). C completes at k = 39: from step 40, 20 - A's
    # 11 = 9 blocks are free (8 from A's 12th at k = 49). V1's rule lets B into them at once; V0's
    # holds it until 6 fit with 4 left: once A completes (after its 59th decode), step 60.
    rows = [(0.0, 128, 60), (0.0, 32, 40), (0.0, 64, 100)]
    runs = {p: simulate(tiny(engine, **{"cost.engine": p, "policy.watermark": 0.2, "workload.num_requests": 3}),
                        specs=specs(rows)) for p in ("vllm-v1", "vllm-v0")}
    for p, res in runs.items():
        st, r = res.steps, res.requests
        assert list(r["status"]) == ["completed"] * 3 and list(r["preemptions"]) == [0, 0, 1], p
        assert (st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (224, 14), p
    v1, v0 = (runs[p].steps for p in ("vllm-v1", "vllm-v0"))
    # (the last token of a recompute is never computed before it: 96 and 81)
    assert [runs[p].summary["kv"]["recompute_tokens"] for p in ("vllm-v1", "vllm-v0")] == [96, 81]
    assert (v1["num_seqs"][33], v1["kv_blocks_used"][32], v1["kv_blocks_used"][33]) == (2, 20, 16)
    assert (v0["num_seqs"][18], v0["kv_blocks_used"][17], v0["kv_blocks_used"][18]) == (2, 20, 14)
    assert [x for x in v1["prefill_tokens"][1:] if x] == [97] and [x for x in v0["prefill_tokens"][1:] if x] == [82]
    # V1: B comes back in step 40 beside A's decode, into 7 of the 9 free blocks (2 left)
    assert v1["prefill_tokens"][40] == 97 and (v1["num_seqs"][40], v1["kv_blocks_used"][40]) == (2, 18)
    # V0: A decodes alone in steps 40-59 (9, then 8 blocks free: under 6 + 4); B is back in step 60
    assert set(v0["num_seqs"][18:40]) == {2} and set(v0["num_seqs"][40:60]) == {1}
    assert sum(v0["prefill_tokens"][1:60]) == 0 and (v0["prefill_tokens"][60], v0["kv_blocks_used"][60]) == (82, 6)
    assert min(20 - v0["kv_blocks_used"][i] for i in range(40, 60)) == 8
    # B's outputs left, one from its recompute and the decodes after it: V1 67, V0 83 (the profiles'
    # step times differ: counted in steps)
    assert (len(v1["start_s"]), len(v0["start_s"])) == (40 + 67, 60 + 82)


def test_validate_predicts_who_can_end_at_a_recompute_the_watermark_never_lets_back():
    from servesim.predictions import predict_never_back
    kw = {**SYNC, "memory.num_gpu_blocks": BLOCKS, "policy.watermark": 0.15, "workload.num_requests": 3}
    # 17 blocks above the watermark (272 tokens): 256 + 40 - 1 = 295 tokens (19 blocks) can end so;
    # 1 + 100 - 1 (7 blocks) cannot; 300 + 5 (its prompt alone 19 blocks) is rejected on arrival
    rows = [(0.0, 256, 40), (0.0, 1, 100), (0.0, 300, 5)]
    for profile in ("vllm-v0", "vllm-v0.2.3", "sarathi-serve"):
        got = predict_never_back(make_scenario(**{**kw, "cost.engine": profile}), specs=specs(rows))
        assert got == {"requests": 2, "at_risk": 1, "blocks": 17, "num_blocks": 20}, profile
    # the profiles that let a recompute use the watermark have no such limit
    assert predict_never_back(make_scenario(**{**kw, "cost.engine": "vllm-v1"}), specs=specs(rows)) is None


def test_validate_predicts_a_p_d_splits_never_back_from_the_decode_pool(tmp_path, capsys):
    # a P/D split recomputes a preempted request in its decode pool: the prediction read the prefill
    # pool's KV (an H100's 28,000 blocks, none at risk) while the run ended requests at the decode
    # pool's watermark (a GPU of 19.5 GB: a few hundred blocks)
    import yaml

    from servesim.cli.main import main
    from servesim.predictions import predict_never_back
    gpu = tmp_path / "small.yaml"
    gpu.write_text("name: small-gpu\nbase: h100-sxm\nmem_bytes: 19.5e9\n")
    kw = {**SYNC, "cost.engine": "vllm-v0.2.3", "policy.name": "pd_split", "policy.watermark": 0.5,
          "policy.preemption_victim": "largest_kv", "policy.max_num_seqs": 64, "policy.prefill": {"replicas": 1},
          "policy.decode": {"replicas": 1, "gpu": str(gpu)}, "workload.num_requests": 60,
          "workload.arrival": {"process": "poisson", "rate_rps": 50.0},
          "workload.prompt_tokens": {"dist": "uniform", "min": 1000, "max": 4000},
          "workload.output_tokens": {"dist": "uniform", "min": 100, "max": 3000}}
    sc = make_scenario(**kw)
    res = simulate(sc)
    r = res.requests
    never = np.array(["can never be admitted again" in x for x in r["reason"]])
    assert never.any()  # the run ends some so, in the decode pool
    got = predict_never_back(sc)
    assert got is not None and got["num_blocks"] < 1000  # the decode replica's KV
    assert got["blocks"] == got["num_blocks"] - int(0.5 * got["num_blocks"])
    # every one the run ended so is among those at risk: prompt + output - 1 over the blocks left
    seq = r["prompt_tokens"] + r["output_tokens"] - 1
    at_risk = -(-seq // 16) > got["blocks"]
    assert at_risk[never].all() and got["at_risk"] == int(at_risk.sum()) >= int(never.sum())
    assert got["requests"] == 60
    # validate says so, naming the decode replica's KV
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert (f"{got['at_risk']} of 60 requests ({got['at_risk'] / 60:.1%}) are served with prompt + output - 1 needing "
            f"more KV blocks than the {got['blocks']} of a decode replica's {got['num_blocks']} that "
            "policy.watermark=0.5 leaves") in out


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("policy", ["chunked_prefill", "pd_split"])
def test_a_chunked_recompute_under_the_free_block_rule_ends_the_sequence_one_block_early(engine, policy):
    """Under cost.engine vllm-v0.2's rule (a decoding request needs a free KV block at its turn), a
    sequence holding every block was preempted, recomputed in chunks whose last, of one token, is
    a decode needing that block, preempted again, forever: the run never ended (chunked prefill,
    and a P/D decode pool, which recomputes in chunks). Now one block less holds such a sequence."""
    import signal

    # prompt 177 + output 144 - 1 = 320 tokens: all 20 blocks; the step emitting token j + 1 computes
    # 177 + j tokens, which must leave a block free: 177 + j <= 19 x 16 = 304, so 128 tokens come
    # (P/D: the prefill pool runs the prompt whole; the decode pool recomputes in chunks of its budget)
    # (a budget of 8, half a block: a recompute whose last chunk is one token while its last block
    # has room needs no new block, only the rule's free one: 312 computed tokens of 313, 20 blocks held)
    budget = {"policy.prefill.max_num_batched_tokens": 512, "policy.decode.max_num_batched_tokens": 8} \
        if policy == "pd_split" else {"policy.max_num_batched_tokens": 8}
    sc = tiny(engine, **{"policy.name": policy, "cost.engine": "vllm-v0.2", "policy.max_num_seqs": 8,
                         "workload.num_requests": 1, **budget})

    def hung(*_):
        raise TimeoutError("the run did not end")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        res = simulate(sc, specs=specs([(0.0, 177, 144)]))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    r, s = res.requests, res.summary
    assert (s["completed"], s["rejected"], s["unfinished"]) == (0, 1, 0)
    assert "outgrew the KV cache while decoding, after 128 of its 144 output tokens" in r["reason"][0]
    assert "needs a free block at its turn" in r["reason"][0] and "19 hold one" in r["reason"][0]
    # validate's prediction reads the same rule
    pred = predict_rejections(sc, specs=specs([(0.0, 177, 144)]))
    assert (pred["rejected"], pred["while_decoding"]) == (1, 1)
    # a sequence one block shorter is served whole
    res = simulate(sc, specs=specs([(0.0, 177, 128)]))
    assert res.summary["completed"] == 1
