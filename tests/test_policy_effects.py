"""The effects the literature reports, each asserted with a direction and a margin on a small run."""

import numpy as np
import pytest

from servesim.policies.pd_split import transfer_time_s
from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario, specs


def summary(**kw):
    return simulate(make_scenario(**kw)).summary


def test_continuous_doubles_static_throughput_at_lower_latency():
    wl = {"workload.num_requests": 400, "workload.arrival": {"process": "poisson", "rate_rps": 50.0},
          "workload.prompt_tokens": {"dist": "uniform", "min": 100, "max": 1000},
          "workload.output_tokens": {"dist": "uniform", "min": 16, "max": 512}, "policy.max_num_seqs": 64}
    static = summary(**wl, **{"policy.name": "static"})
    cont = summary(**wl, **{"policy.name": "continuous"})
    assert static["completed"] == cont["completed"] == 400
    assert cont["throughput_rps"] >= 2 * static["throughput_rps"]
    assert cont["e2e_s"]["mean"] <= static["e2e_s"]["mean"]
    assert static["phases"]["padding_tokens"] > 0 and cont["phases"]["padding_tokens"] == 0


def test_chunked_prefill_cuts_p99_tbt_at_equal_throughput():
    wl = {"workload.num_requests": 600, "workload.arrival": {"process": "poisson", "rate_rps": 3.0},
          "workload.prompt_tokens": {"dist": "lognormal", "mean": 3000, "sigma": 0.6, "max": 7000},
          "workload.output_tokens": {"dist": "uniform", "min": 64, "max": 256}}
    cont = summary(**wl)
    chunked = summary(**wl, **{"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 512})
    assert cont["utilization"]["busy_fraction"] > 0.9  # near saturation
    assert chunked["tbt_s"]["p99"] * 2 <= cont["tbt_s"]["p99"]
    assert chunked["throughput_rps"] == pytest.approx(cont["throughput_rps"], rel=0.10)
    assert chunked["phases"]["mixed_steps"] > cont["phases"]["mixed_steps"]


PD_WL = {"workload.num_requests": 800,
         "workload.prompt_tokens": {"dist": "lognormal", "mean": 2000, "sigma": 0.5, "max": 6000},
         "workload.output_tokens": {"dist": "uniform", "min": 64, "max": 256},
         "slo": {"ttft_s": 0.5, "tpot_s": 0.012}}


def test_pd_split_removes_prefill_interference_from_tpot():
    rows = []
    for rate in (6.0, 14.0):
        arr = {"workload.arrival": {"process": "poisson", "rate_rps": rate}}
        coloc = summary(**PD_WL, **arr, **{"cluster.replicas": 2})  # same 2 GPUs either way
        res = simulate(make_scenario(**PD_WL, **arr, **{"policy.name": "pd_split", "policy.prefill": {"replicas": 1},
                                                         "policy.decode": {"replicas": 1}}))
        pd = res.summary
        # decode-pool steps carry no prefill tokens at all
        dec = res.steps["replica"] == 1
        assert res.steps["prefill_tokens"][dec].sum() == 0 and res.steps["decode_tokens"][~dec].sum() == 0
        rows.append((coloc, pd))
    (c_lo, p_lo), (c_hi, p_hi) = rows
    # colocated P99 TPOT inflates with load (prefills stall decodes); the split's barely moves
    assert c_hi["tpot_s"]["p99"] > 1.3 * c_lo["tpot_s"]["p99"]
    assert p_hi["tpot_s"]["p99"] < 1.25 * p_lo["tpot_s"]["p99"]
    assert p_hi["tpot_s"]["p99"] < 0.8 * c_hi["tpot_s"]["p99"]
    # ... and at the higher rate the split meets the SLOs far more often
    assert p_hi["slo_attainment"] > c_hi["slo_attainment"] + 0.2
    assert set(p_hi["pools"]) == {"prefill", "decode"} and p_hi["kv_transfer"]["count"] == 800


def test_pd_kv_transfer_time_is_link_time_and_grows_with_prompt():
    sc = make_scenario(**{"policy.name": "pd_split", "policy.link": {"bandwidth_gbps": 10.0, "latency_s": 0.001}})
    setup = prepare(sc)
    rows = [(t, p, 4) for t, p in [(0.0, 256), (5.0, 1024), (10.0, 4096)]]  # far apart: no waiting
    res = simulate(sc, specs=specs(rows))
    kv_tok = setup.cost_model.model.kv_bytes_per_token("bf16")
    want = [transfer_time_s(kv_tok * p, 10e9 / 8, 0.001) for _, p, _ in rows]
    got = res.requests["kv_transfer_s"].tolist()
    assert got == pytest.approx(want, rel=1e-9)
    assert got[0] < got[1] < got[2]
    # the second token waits for the transfer: its gap is at least the transfer time
    r = res.requests
    assert np.all(r["finish_s"] - r["first_token_s"] >= np.array(want))


def test_pd_hand_offs_from_one_prefill_replica_share_its_links():
    """Two prompts prefilled in one step: their first tokens come together, the second KV leaves
    when the first has landed (one prefill replica's links, first come first served). With two
    prefill and two decode replicas their transfers overlap; into one decode replica they queue
    at its links."""
    link = {"bandwidth_gbps": 10.0, "latency_s": 0.001}
    rows = [(0.0, 1024, 4), (0.0, 1024, 4)]
    sc = make_scenario(**{"policy.name": "pd_split", "policy.link": link})
    one = transfer_time_s(prepare(sc).cost_model.model.kv_bytes_per_token("bf16") * 1024, 10e9 / 8, 0.001)
    r = simulate(sc, specs=specs(rows)).requests
    assert r["first_token_s"][0] == r["first_token_s"][1]
    assert sorted(r["kv_transfer_s"].tolist()) == pytest.approx([one, 2 * one], rel=1e-9)
    two = make_scenario(**{"policy.name": "pd_split", "policy.link": link, "policy.prefill": {"replicas": 2},
                           "policy.decode": {"replicas": 2}})
    r = simulate(two, specs=specs(rows)).requests
    assert sorted(r["replica"].tolist()) == [0, 1]
    assert sorted(r["decode_replica"].tolist()) == [2, 3]  # each decode replica receives one
    assert r["kv_transfer_s"].tolist() == pytest.approx([one, one], rel=1e-9)
    # two prefill replicas, one decode replica: its links receive one KV at a time
    into_one = make_scenario(**{"policy.name": "pd_split", "policy.link": link, "policy.prefill": {"replicas": 2},
                                "policy.decode": {"replicas": 1}})
    r = simulate(into_one, specs=specs(rows)).requests
    assert sorted(r["replica"].tolist()) == [0, 1] and r["decode_replica"].tolist() == [2, 2]
    assert sorted(r["kv_transfer_s"].tolist()) == pytest.approx([one, 2 * one], rel=1e-9)
    # with PP every stage's GPUs send their layers' KV at once: twice the bandwidth at PP 2
    bw1 = prepare(sc).link[0]
    bw2 = prepare(make_scenario(**{"policy.name": "pd_split", "policy.link": link, "hardware.pp": 2})).link[0]
    assert bw2 == 2 * bw1


def test_pd_layerwise_streaming_hides_the_transfer_behind_the_prefill_step():
    """policy.link.overlap (Splitwise): the KV streams while the prompt's prefill step runs, so a
    slow link leaves only what the step could not hide, and a fast one only the last layer's share."""
    rows = [(0.0, 1024, 4)]
    kv = None
    for bw, want in ((10.0, "partly hidden"), (400.0, "last layer")):
        link = {"bandwidth_gbps": bw, "latency_s": 0.001}
        off = simulate(make_scenario(**{"policy.name": "pd_split", "policy.link": link}), specs=specs(rows))
        sc = make_scenario(**{"policy.name": "pd_split", "policy.link": {**link, "overlap": True}})
        on = simulate(sc, specs=specs(rows))
        model = prepare(sc).cost_model.model
        kv = model.kv_bytes_per_token("bf16") * 1024
        full = kv / (bw * 1e9 / 8)
        st = on.steps
        step = float(st["duration_s"][(st["replica"] == 0) & (st["prefill_tokens"] == 1024)][0])
        assert off.requests["kv_transfer_s"][0] == pytest.approx(0.001 + full, rel=1e-9)
        got = on.requests["kv_transfer_s"][0]
        if want == "partly hidden":
            assert full > step  # the 10 Gbit/s link needs longer than the step
            assert got == pytest.approx(0.001 + full - step, rel=1e-9)
        else:
            assert full < step
            assert got == pytest.approx(0.001 + full / model.num_layers, rel=1e-9)
        # the decode side starts earlier by what the streaming hid
        assert on.requests["finish_s"][0] < off.requests["finish_s"][0]


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_modes_finish_everything(mode):
    res = simulate(make_scenario(**{
        "memory.num_gpu_blocks": 200, "policy.preemption": mode, "workload.num_requests": 100,
        "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
        "workload.prompt_tokens": {"dist": "uniform", "min": 100, "max": 600},
        "workload.output_tokens": {"dist": "uniform", "min": 100, "max": 400}}))
    s = res.summary
    assert s["completed"] == 100 and s["preemptions"] > 10
    prompts = int(res.requests["prompt_tokens"].sum())
    if mode == "recompute":  # preempted requests prefill again (prompt + output so far)
        assert s["phases"]["prefill_tokens"] > prompts
        assert s["kv"]["swap_out_bytes"] == 0
    else:  # swapped requests keep their KV: each prompt is prefilled exactly once
        assert s["phases"]["prefill_tokens"] == prompts
        assert s["kv"]["swap_out_bytes"] == s["kv"]["swap_in_bytes"] > 0
    assert res.kv_blocks_in_use == [0]


def test_swap_moves_the_expected_bytes():
    # 10 blocks of 16 tokens; two requests of prompt 64: both admitted (4 + 4 blocks), both decode
    # until their KV reaches 80 tokens; the next token needs a 6th block each but only 0 are free
    # after A takes its 6th: B (the newest, holding 5 blocks) is swapped out, A finishes, B returns.
    sc = make_scenario(**{"memory.num_gpu_blocks": 10, "policy.preemption": "swap", "policy.watermark": 0.0})
    res = simulate(sc, specs=specs([(0.0, 64, 80), (0.0, 64, 80)]))
    block_bytes = prepare(sc).cost_model.model.kv_bytes_per_token("bf16") * 16
    assert res.requests["preemptions"].tolist() == [0, 1]
    assert res.summary["kv"]["swap_out_bytes"] == 5 * block_bytes == res.summary["kv"]["swap_in_bytes"]
    assert list(res.requests["status"]) == ["completed", "completed"]


SHARED = {"workload.num_requests": 300, "workload.arrival": {"process": "poisson", "rate_rps": 8.0},
          "workload.prompt_tokens": {"dist": "uniform", "min": 64, "max": 512},
          "workload.output_tokens": {"dist": "uniform", "min": 8, "max": 64}}


def test_prefix_caching_skips_shared_prefix_compute():
    wl = {**SHARED, "workload.shared_prefix": {"tokens": 1024, "fraction": 0.8}}
    off = simulate(make_scenario(**wl))
    on = simulate(make_scenario(**wl, **{"policy.prefix_caching": True}))
    members = int((off.requests["prompt_tokens"] > 1024).sum())  # group members carry the prefix
    s_on, s_off = on.summary, off.summary
    hits = s_on["kv"]["prefix_cache_hit_tokens"]
    # every member but the first finds the 1024-token prefix (64 full blocks) cached
    assert hits == pytest.approx(1024 * members, rel=0.02)
    assert s_on["phases"]["prefill_tokens"] == s_off["phases"]["prefill_tokens"] - hits
    assert s_on["kv"]["prefix_cache_hit_rate"] == pytest.approx(hits / s_off["phases"]["prefill_tokens"], rel=1e-9)
    assert on.steps["flops"].sum() < 0.6 * off.steps["flops"].sum()
    assert s_on["ttft_s"]["mean"] < 0.7 * s_off["ttft_s"]["mean"]


def _preempted_with_shared_prefixes(engine: str):
    """Tight KV under shared prefixes: requests are preempted (recompute) and hit the cache again
    when readmitted."""
    return make_scenario(**{"engine": engine, "workload.num_requests": 60, "policy.prefix_caching": True,
                            "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
                            "workload.prompt_tokens": {"dist": "uniform", "min": 200, "max": 1500},
                            "workload.output_tokens": {"dist": "uniform", "min": 50, "max": 400},
                            "workload.shared_prefix": {"tokens": 1000, "fraction": 0.5, "groups": 3},
                            "memory.num_gpu_blocks": 300})


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_prefix_hits_per_request_add_up_after_preemptions(engine):
    # Tight KV: requests are preempted (recompute) and hit the cache again when readmitted. Both
    # the column and the summary count a request's hits at its first admission only.
    res = simulate(_preempted_with_shared_prefixes(engine))
    r = res.requests
    assert r["preemptions"].sum() > 0
    assert int(r["prefix_hit_tokens"].sum()) == res.summary["kv"]["prefix_cache_hit_tokens"] > 0


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_recompute_tokens_leave_out_what_the_prefix_cache_still_holds(engine):
    # A request preempted (recompute) and readmitted finds its shared prefix in the cache again: those
    # tokens are not computed twice, so kv.recompute_tokens leaves them out (it counted every dropped
    # token, 17485 here instead of 11533, and the preemptions warning could say over 100% of the
    # tokens computed were recomputed). The steps then compute exactly every request's prompt +
    # output - 1, less its first admission's hits, plus the recompute tokens.
    res = simulate(_preempted_with_shared_prefixes(engine))
    r, s = res.requests, res.summary
    assert s["preemptions"] > 0 and s["kv"]["recompute_tokens"] > 0
    once = int((r["prompt_tokens"] + r["output_tokens"] - 1).sum()) - int(r["prefix_hit_tokens"].sum())
    computed = int(res.steps["prefill_tokens"].sum() + res.steps["decode_tokens"].sum())
    assert computed == once + s["kv"]["recompute_tokens"]


def test_preempted_requests_recompute_only_what_the_cache_lost():
    # vLLM V1 caches every full block of every request, so a request preempted for recompute finds
    # its own blocks again when readmitted unless they were evicted meanwhile (least recently
    # freed first). Before, only shared-prefix blocks were cached: with prefix caching on and no
    # shared prefix, every preempted request computed its whole sequence again (12,457 tokens
    # here, as with caching off); now 2,985. The steps compute exactly every request's prompt +
    # output - 1 plus the recompute tokens, and the fast engine equals the reference.
    def run(caching, engine="fast"):
        return simulate(make_scenario(**{
            "engine": engine, "workload.num_requests": 60, "policy.prefix_caching": caching,
            "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
            "workload.prompt_tokens": {"dist": "uniform", "min": 200, "max": 1500},
            "workload.output_tokens": {"dist": "uniform", "min": 50, "max": 400},
            "memory.num_gpu_blocks": 300, "policy.watermark": 0.01}))  # (the counts below: 1% kept free)
    off, on, ref = run(False), run(True), run(True, "reference")
    assert off.summary["preemptions"] == on.summary["preemptions"] == 13
    assert off.summary["kv"]["recompute_tokens"] == 12457
    assert on.summary["kv"]["recompute_tokens"] == 2985
    r = on.requests
    assert int(r["prefix_hit_tokens"].sum()) == on.summary["kv"]["prefix_cache_hit_tokens"] == 0  # (first admissions)
    once = int((r["prompt_tokens"] + r["output_tokens"] - 1).sum())
    computed = int(on.steps["prefill_tokens"].sum() + on.steps["decode_tokens"].sum())
    assert computed == once + 2985
    for got, want in ((on.requests, ref.requests), (on.steps, ref.steps)):
        assert got.keys() == want.keys()
        for k in got:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_prefix_caching_without_shared_prefix_changes_nothing(tmp_path):
    off = simulate(make_scenario(**SHARED)).write(tmp_path / "off")
    on = simulate(make_scenario(**SHARED, **{"policy.prefix_caching": True})).write(tmp_path / "on")
    assert (on / "requests.csv").read_bytes() == (off / "requests.csv").read_bytes()
    assert (on / "steps.csv").read_bytes() == (off / "steps.csv").read_bytes()


def tpot_at_batch(batch, spec=None):
    kw = {"workload.num_requests": batch, "workload.arrival": {"process": "fixed", "rate_rps": 1e6},
          "workload.prompt_tokens": {"dist": "fixed", "value": 256},
          "workload.output_tokens": {"dist": "fixed", "value": 128},
          "policy.max_num_seqs": batch, "policy.max_num_batched_tokens": 256 * batch + 1024}
    if spec:
        kw["policy.spec"] = spec
    return summary(**kw)["tpot_s"]["mean"]


def test_speculative_decoding_gain_shrinks_as_batch_grows():
    spec = {"draft": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 4, "acceptance_rate": 0.8}
    gain = {b: tpot_at_batch(b) / tpot_at_batch(b, spec) for b in (1, 64, 256)}
    assert gain[1] > 1.5  # ~3.4 tokens per step for the price of one verify plus 4 draft steps
    assert gain[1] > gain[64] > gain[256]
    assert gain[256] < 1.2  # verifying 5 tokens per sequence turns big batches compute-bound


def test_speculative_tokens_per_step_match_expectation():
    a, k = 0.8, 4
    sc = make_scenario(**{"policy.spec": {"draft": "ngram", "num_speculative_tokens": k, "acceptance_rate": a}})
    res = simulate(sc, specs=specs([(0.0, 64, 2000)] * 20))  # all at once
    st = res.steps
    assert st["prefill_tokens"][0] == 20 * 64 and st["prefill_tokens"][1:].sum() == 0  # one prefill step
    seq_steps = int(st["num_seqs"][1:].sum())  # decode steps x sequences in them
    emitted = 20 * (2000 - 1)  # the first token of each comes from the prefill
    # a decode step emits the accepted draft tokens plus one: (1 - a^(k+1)) / (1 - a) on average
    # (slightly fewer at the very end, where a request needs fewer than it could get)
    assert emitted / seq_steps == pytest.approx((1 - a ** (k + 1)) / (1 - a), rel=0.02)
    assert st["decode_tokens"][1:].sum() == (k + 1) * seq_steps  # every step verifies k + 1 per sequence


def test_speculative_steps_stream_their_tokens_as_one_itl_gap():
    """vLLM's benchmark counts one ITL gap per streamed chunk, and a verify step's accepted tokens
    stream out together: one gap per step a request decodes in (before: m - 1 more gaps of 0, so
    that ITL p50 was 0 at acceptance 0.8), and a mean above TPOT, which is per token."""
    sc = make_scenario(**{"policy.spec": {"draft": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.8}})
    res = simulate(sc, specs=specs([(0.0, 64, 2000)] * 20))
    gaps = res.tbt_s
    assert len(gaps) == int(res.steps["num_seqs"][1:].sum())  # one per request per decode step
    assert gaps.min() > 0
    tpot = res.summary["tpot_s"]["mean"]
    assert res.summary["itl_s"]["p50"] > 2 * tpot  # ~3.4 tokens a step
    assert res.summary["itl_s"]["mean"] == pytest.approx(gaps.mean())


def test_speculative_draft_model_kv_shares_the_cache():
    """A draft model keeps its own KV of every token the target does (vLLM sizes the cache for
    both: each block holds the two models' KV of its tokens), so a block costs the target's KV
    plus the draft's. Before, only the draft's weights were taken off the pool and the run had
    a quarter more blocks than the GPU holds (Llama-3-8B with a Llama-3.2-1B draft)."""
    from servesim.inputs.specs import get_model

    draft = "meta-llama/Llama-3.2-1B"
    ngram = prepare(make_scenario(**{"policy.spec": {"draft": "ngram"}}))
    with_draft = prepare(make_scenario(**{"policy.spec": {"draft": draft}}))
    assert prepare(make_scenario()).capacity.num_blocks == ngram.capacity.num_blocks  # an n-gram draft holds no KV
    cap = with_draft.capacity
    target, small = get_model("meta-llama/Meta-Llama-3-8B"), get_model(draft)
    per_token = target.kv_bytes_per_token("bf16") + small.kv_bytes_per_token("bf16")
    assert cap.kv_bytes_per_token == per_token
    assert cap.num_blocks == int(cap.kv_pool_bytes // (per_token * 16))
    assert cap.num_blocks < 0.85 * ngram.capacity.num_blocks  # 1B's KV is a quarter of 8B's per token


def test_speculative_draft_model_kv_is_swapped_with_the_targets():
    """A swapped block carries the draft's KV of its tokens too: the same preemptions copy 1.25x
    the bytes with a Llama-3.2-1B draft (32 KiB a token beside Llama-3-8B's 128 KiB)."""
    def swapped(draft):
        sc = make_scenario(**{"memory.num_gpu_blocks": 40, "policy.preemption": "swap",
                              "policy.spec": {"draft": draft, "num_speculative_tokens": 2, "acceptance_rate": 0.0}})
        s = simulate(sc, specs=specs([(0.0, 100, 200)] * 30)).summary
        return s["preemptions"], s["kv"]["swap_out_bytes"]

    (n_ngram, b_ngram), (n_draft, b_draft) = swapped("ngram"), swapped("meta-llama/Llama-3.2-1B")
    assert n_ngram == n_draft > 0 and b_ngram > 0  # the same schedule (acceptance 0: one token a step)
    assert b_draft / b_ngram == pytest.approx(1.25)


def test_speculative_rejection_for_kv_counts_the_verified_tokens_it_names():
    """A sequence verifying k tokens past its end needs their KV too: 20 + 12 - 1 + 4 = 35 tokens,
    3 blocks of 16. The rejection said 'prompt + output = 32 tokens needs 3 KV blocks' (32 tokens
    are 2 blocks): it names the tokens it counted."""
    sc = make_scenario(**{"memory.num_gpu_blocks": 2,
                          "policy.spec": {"draft": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.5}})
    reason = simulate(sc, specs=specs([(0.0, 20, 12)])).requests["reason"][0]
    # (its prompt fits: it is served until the step verifying k tokens past it needs a third block)
    assert "prompt + output - 1 + k = 35 tokens" in reason and "needs 3 KV blocks" in reason
    assert "after 9 of its 12 output tokens" in reason and "the replica has 2 in all" in reason
    plain = simulate(make_scenario(**{"memory.num_gpu_blocks": 1}), specs=specs([(0.0, 20, 12)]))
    assert plain.requests["reason"][0].startswith("its prompt of 20 tokens needs 2 KV blocks")


def test_pd_decode_side_recomputes_in_chunks_of_its_budget():
    # a decode replica (continuous, budget 256) that preempts a long request recomputes it in
    # chunks of its budget, once the blocks of its whole sequence are free (before: requests whose
    # prompt + output exceeded the decode budget were rejected, 42% of a chatbot workload at 1,024)
    sc = make_scenario(**{"policy.name": "pd_split", "policy.max_num_batched_tokens": 256,
                          "policy.prefill": {"policy": "chunked_prefill"}, "memory.num_gpu_blocks": 131})
    res = simulate(sc, specs=specs([(0.0, 1000, 500), (0.0, 900, 500)]))  # 94 + 88 blocks > 131
    r = res.requests
    assert list(r["status"]) == ["completed", "completed"]
    assert r["preemptions"].tolist() == [0, 1]  # preempted once: it comes back whole, not in thrashing chunks
    st = res.steps
    dec = st["replica"] == 1
    assert (st["prefill_tokens"] + st["decode_tokens"])[dec].max() <= 256
    assert st["prefill_tokens"][dec].sum() >= 900 + 1  # its recompute ran on the decode side, chunked


def test_pd_decode_pool_is_sized_by_its_role():
    # DistServe's decode engine takes 65,536 tokens a step; copied as the decode pool's budget it
    # must not size the decode pool's activation reserve (it cost 16% of the decode KV)
    from servesim.simulation import prepare

    kw = {"model": "facebook/opt-13b", "hardware.gpu": "a100-80g", "policy.name": "pd_split",
          "policy.max_num_seqs": 1024}
    big = prepare(make_scenario(**kw, **{"policy.decode": {"max_num_batched_tokens": 65536}})).pools_by_name
    small = prepare(make_scenario(**kw, **{"policy.decode": {"max_num_batched_tokens": 1024}})).pools_by_name
    assert big["decode"].max_num_batched_tokens == 1024  # one token per sequence: max_num_seqs
    assert big["decode"].capacity.num_blocks == small["decode"].capacity.num_blocks
    assert big["decode"].capacity.activation_reserve_bytes < 0.5 * 2**30  # 65,536 tokens: 7.5 GiB
    assert big["prefill"].max_num_batched_tokens == 8192  # the prefill pool keeps its budget


def test_pd_decode_side_admission_is_not_a_prefix_hit():
    sc = make_scenario(**{"policy.name": "pd_split"})
    res = simulate(sc, specs=specs([(0.0, 300, 20), (0.1, 500, 20)]))
    assert res.requests["prefix_hit_tokens"].tolist() == [0, 0]
    assert res.summary["kv"]["prefix_cache_hit_tokens"] == 0


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_pd_under_decode_kv_pressure_finishes_everything(engine):
    # hand-offs used to fill decode replicas with landed requests queued behind one preempted
    # there that could never fit again: the run stalled
    sc = make_scenario(**{"policy.name": "pd_split", "memory.num_gpu_blocks": 300, "workload.num_requests": 200,
                          "workload.arrival": {"process": "poisson", "rate_rps": 30.0},
                          "workload.prompt_tokens": {"dist": "lognormal", "mean": 1024, "sigma": 0.8, "max": 3000},
                          "workload.output_tokens": {"dist": "lognormal", "mean": 192, "sigma": 0.7, "max": 1024}})
    res = simulate(sc, engine=engine)
    assert res.summary["completed"] == 200 and res.summary["preemptions"] > 0
    assert res.kv_blocks_in_use == [0, 0]


def test_pd_one_token_requests_are_not_rejected_for_decode_room():
    # a request wanting one output token gets it from the prefill step and finishes there: it
    # never reaches the decode pool, so the decode replica's KV size cannot turn it away (it was
    # rejected as "needs 100 KV blocks on a decode replica", and validate predicted that too)
    from servesim.predictions import predict_rejections

    sc = make_scenario(**{"policy.name": "pd_split", "memory.num_gpu_blocks": 100, "policy.watermark": 0.0})
    rows = [(0.0, 1585, 1), (0.0, 1585, 2), (0.0, 100, 3)]  # 1585 tokens: all 100 blocks
    res = simulate(sc, specs=specs(rows))
    r = res.requests
    assert r["status"].tolist() == ["completed", "rejected", "completed"]
    assert r["decode_replica"].tolist()[0] == -1  # finished on the prefill replica
    assert "spare for a hand-off" in r["reason"][1]
    pred = predict_rejections(sc, prepare(sc), specs(rows))
    assert pred["rejected"] == 1


def test_pd_link_of_an_mla_model_is_one_gpus_per_stage():
    """An MLA latent is whole on every TP rank (it is one KV head): each decode GPU needs all of it
    over its own link, so TP ranks add no bandwidth to the hand-off (it was TP x faster: 8x for
    DeepSeek-V3 at TP 8). Sharded KV heads keep the smaller pool's TP ranks x PP stages."""
    link = {"bandwidth_gbps": 400.0}
    one_gpu = 400e9 / 8
    mla = prepare(make_scenario(**{"model": "deepseek-ai/DeepSeek-V3", "hardware.gpu": "h200", "hardware.tp": 8,
                                   "hardware.dtype": "fp8", "policy.name": "pd_split", "policy.link": link}))
    assert mla.link[0] == pytest.approx(one_gpu)
    gqa = prepare(make_scenario(**{"model": "meta-llama/Llama-3.1-70B", "hardware.tp": 4, "policy.name": "pd_split",
                                   "policy.decode": {"tp": 8}, "policy.link": link}))
    assert gqa.link[0] == pytest.approx(4 * one_gpu)  # the prefill pool's 4 ranks each send a quarter


def test_pd_intra_node_link_of_two_gpu_types_is_the_slower_ones():
    """Within a node the KV crosses both pools' GPU links: an H100 prefill pool handing off to an
    A100 decode pool moves at the A100's NVLink figure (it took the prefill GPU's alone)."""
    from servesim.inputs.specs import GPUS

    def link(prefill, decode):
        return prepare(make_scenario(**{"policy.name": "pd_split", "policy.link": {"type": "intra_node"},
                                        "policy.prefill": {"gpu": prefill}, "policy.decode": {"gpu": decode}})).link

    a100, h100 = GPUS["a100-80g"], GPUS["h100-sxm"]
    assert a100.link_bw_bytes_per_s < h100.link_bw_bytes_per_s
    slow = (a100.link_bw_bytes_per_s, a100.link_latency_s)
    assert link("h100-sxm", "a100-80g") == pytest.approx(slow) and link("a100-80g", "h100-sxm") == pytest.approx(slow)
    assert link("h100-sxm", "h100-sxm") == pytest.approx((h100.link_bw_bytes_per_s, h100.link_latency_s))
