"""``policy.full_prompt_admission``: vLLM V1's ``--scheduler-reserve-full-isl``
(``SchedulerConfig.scheduler_reserve_full_isl``, vllm-project/vllm#37307). With chunked prefill,
vLLM V1 admits a waiting request when its first chunk's KV blocks are free; with the option, only
when the blocks of its whole prompt (prompt + output so far for a recompute) are free
(``KVCacheManager.allocate_slots(full_sequence_must_fit=True)``), though it still allocates the
chunk's alone. Without it a long prompt admitted into a nearly full cache is preempted when its
next chunk cannot grow, recomputed, and preempted again (the thrash #37307 describes)."""

import pytest

from servesim.cli.main import main
from servesim.outputs.checks import full_prompt_warnings
from servesim.simulation import prepare, simulate
from tests.conftest import SYNC, make_scenario, specs

# 40 blocks of 16 tokens, no watermark, a 256-token budget. A: prompt 200 (13 blocks), 60 out; B:
# prompt 480 (30 blocks), 10 out: the two prompts never fit together
ROWS = [(0.0, 200, 60), (0.0, 480, 10)]


def run(engine, full, profile="vllm-v1", rows=ROWS, **kw):
    sc = make_scenario(**{**SYNC, "cost.engine": profile, "engine": engine, "memory.num_gpu_blocks": 40,
                          "policy.watermark": 0.0, "policy.name": "chunked_prefill",
                          "policy.max_num_batched_tokens": 256, "policy.full_prompt_admission": full,
                          "workload.num_requests": len(rows), **kw})
    return simulate(sc, specs=specs(rows))


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_without_it_v1_admits_the_first_chunk_and_thrashes(engine):
    res = run(engine, False)
    st, r = res.steps, res.requests
    # step 0: A's prompt and B's first 56 tokens (13 + 4 blocks); step 1: B's next 255 (20 blocks:
    # 33); step 2: B's last 169 need 10 more of the 7 free: B, the newest, preempts itself
    assert [tuple(int(st[k][i]) for k in ("num_seqs", "prefill_tokens", "kv_blocks_used")) for i in range(3)] == \
        [(2, 256, 17), (2, 255, 33), (1, 0, 13)]
    assert r["preemptions"][1] > 1 and res.summary["kv"]["recompute_tokens"] > 480
    assert list(r["status"]) == ["completed", "completed"]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_with_it_v1_admits_a_prompt_only_when_its_whole_prompt_fits_but_takes_a_chunk(engine):
    res = run(engine, True)
    st, r = res.steps, res.requests
    # B's 30 blocks are never free beside A (27 at most): A runs alone, its prefill and 59 decodes
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (1, 200, 13)
    assert set(st["num_seqs"][:60]) == {1} and sum(st["prefill_tokens"][1:60]) == 0
    # then B: 30 blocks free, its first chunk takes 16 of them (the check is not an allocation),
    # its second the other 14; then its 9 decodes
    assert [(int(st["prefill_tokens"][i]), int(st["kv_blocks_used"][i])) for i in (60, 61)] == [(256, 16), (224, 30)]
    assert len(st["start_s"]) == 60 + 2 + 9
    assert res.summary["preemptions"] == 0 and res.summary["kv"]["recompute_tokens"] == 0
    assert r["first_token_s"][1] >= r["finish_s"][0]
    # vLLM V0's block manager allocates the whole prompt at admission: the same steps, 30 blocks at once
    v0 = run(engine, False, "vllm-v0").steps
    assert [int(v0["kv_blocks_used"][i]) for i in (60, 61)] == [30, 30] and len(v0["start_s"]) == 71


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_recompute_comes_back_only_when_its_whole_sequence_fits(engine):
    # 20 blocks, a 32-token budget. A (prompt 160, 60 out) runs its prompt in steps 0-4 and decodes
    # in steps 5-63; B (prompt 64, 100 out) runs its prompt beside A's decodes in steps 5-7 (31, 31,
    # 2 tokens) and decodes from step 8. In step 53 the two need more than the 20 blocks: B, the
    # newest, preempts itself after 46 output tokens (110 tokens to recompute: 7 blocks); A keeps 14.
    rows = [(0.0, 160, 60), (0.0, 64, 100)]
    kw = {"memory.num_gpu_blocks": 20, "policy.max_num_batched_tokens": 32, "policy.max_num_seqs": 2}
    off, on = (run(engine, full, rows=rows, **kw) for full in (False, True))
    for res in (off, on):
        st = res.steps
        assert [int(st["prefill_tokens"][i]) for i in range(8)] == [32] * 5 + [31, 31, 2]
        assert (st["num_seqs"][53], st["kv_blocks_used"][53]) == (1, 14)
    # without the option B's first chunk comes back at once into the 6 blocks left (2 of them), grows
    # with its next chunks, and is preempted again: three times in all
    assert (off.steps["num_seqs"][54], off.steps["prefill_tokens"][54], off.steps["kv_blocks_used"][54]) == (2, 31, 16)
    assert list(off.requests["preemptions"]) == [0, 3] and off.summary["kv"]["recompute_tokens"] > 109
    # with it, B waits until its 7 blocks are free: A holds 14 or more until it completes (step 63);
    # B's recompute then runs in steps 64-67 (32, 32, 32, 14 tokens: 2, 4, 6, 7 blocks), and its last
    # 53 outputs in steps 68-120
    st = on.steps
    assert set(st["num_seqs"][54:64]) == {1} and sum(st["prefill_tokens"][8:64]) == 0
    back = [(int(st["prefill_tokens"][i]), int(st["kv_blocks_used"][i])) for i in range(64, 68)]
    assert back == [(32, 2), (32, 4), (32, 6), (14, 7)] and len(st["start_s"]) == 121
    assert list(on.requests["preemptions"]) == [0, 1] and on.summary["kv"]["recompute_tokens"] == 109


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_whose_whole_sequence_never_fits_above_the_watermark_is_rejected_at_arrival(engine):
    # 300 tokens: 19 of 20 blocks, over the 18 a 10% watermark leaves; its first chunk (256: 16
    # blocks) is under them. vLLM would hold it at the head of the queue forever
    # (vllm-project/vllm#39734); servesim ends it on arrival with the reason
    rows = [(0.0, 300, 5)]
    kw = {"memory.num_gpu_blocks": 20, "policy.watermark": 0.1}
    on = run(engine, True, rows=rows, **kw)
    assert on.summary["rejected"] == 1 and len(on.steps["start_s"]) == 0
    why = on.requests["reason"][0]
    assert "its prompt = 300 tokens needs 19 free KV blocks" in why and "policy.watermark=0.1" in why
    assert run(engine, False, rows=rows, **kw).summary["completed"] == 1


def test_it_is_said_to_change_nothing_where_no_prompt_is_admitted_by_a_chunk(tmp_path, capsys):
    def said(**kw):
        sc = make_scenario(**{"policy.full_prompt_admission": True, **kw})
        return [w["message"] for w in full_prompt_warnings(sc, prepare(sc).pools)]

    assert said(**{"policy.name": "chunked_prefill"}) == []
    assert "(it runs whole prompts: only chunked prefill" in said(**{"policy.name": "continuous"})[0]
    assert "cost.engine=vllm-v0 takes" in said(**{"policy.name": "chunked_prefill", "cost.engine": "vllm-v0"})[0]
    pd = {"policy.name": "pd_split", "policy.decode": {"replicas": 1}}
    got = said(**pd, **{"policy.prefill": {"replicas": 1}})[0]
    assert "the prefill pool runs whole prompts; the decode pool runs whole prompts" in got
    assert said(**pd, **{"policy.prefill": {"replicas": 1, "policy": "chunked_prefill"}}) == []
    assert make_scenario(**{"policy.name": "continuous"}).policy.full_prompt_admission is False  # (off by default)
    # validate prints it
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario(**{"policy.full_prompt_admission": True}).to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "policy.full_prompt_admission=true changes nothing with policy.name=continuous" in capsys.readouterr().out


def test_the_decision_trace_and_priority_preemption_count_the_whole_prompt():
    """``lacks`` (the decision trace's reason for a request behind the stop) and ``_make_room``
    (a waiting request preempting lower-priority ones) judge a request as ``admit`` does."""
    import dataclasses
    from collections import deque

    from servesim.core.kv import BlockAllocator
    from servesim.core.request import Request
    from servesim.policies.base import ReplicaState
    from servesim.policies.continuous import ContinuousPolicy

    kv = BlockAllocator(num_blocks=40, block_size=16)
    b = Request(1, 0.0, 480, 10)  # 30 blocks; its first chunk of 256: 16
    off = ContinuousPolicy(chunked=True, max_num_batched_tokens=256)
    on = ContinuousPolicy(chunked=True, max_num_batched_tokens=256, full_prompt_admission=True)
    assert off.lacks(kv, b, 256, 27, 4) is None and on.lacks(kv, b, 256, 27, 4) == "kv"
    assert on.lacks(kv, b, 256, 30, 4) is None
    # a running low-priority request holding 13 blocks: B (priority 0) preempts it only when its
    # whole prompt needs the room
    low = Request(0, 0.0, 200, 60)
    low.priority, low.num_output_done, low.num_computed_tokens = 5, 1, 200  # its next decode: 13 blocks still
    assert kv.grow(low, 200) and kv.num_free == 27
    for pol, preempts in ((off, False), (on, True)):
        pol = dataclasses.replace(pol, queue_order="priority")
        batch = pol.next_batch(ReplicaState([low], deque([b]), kv))
        assert bool(batch.preempted) is preempts and [r.request_id for r in batch.admitted] == [1]
