"""Continuous batching without SimPy: exact tokens per request for hand-worked states."""

import dataclasses
from collections import deque

from servesim.policies.base import ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.core.kv import BlockAllocator
from servesim.core.request import Request


def running_req(rid, prompt, emitted, kv):
    """A request that has prefilled its prompt and emitted ``emitted`` tokens (KV holds
    prompt + emitted - 1 tokens), with its blocks taken from ``kv``."""
    r = Request(rid, 0.0, prompt, 10_000)
    r.num_output_done = emitted
    r.num_computed_tokens = prompt + emitted - 1
    assert kv.grow(r, r.num_computed_tokens)
    return r


def scheduled(batch):
    return {r.request_id: q for r, q in batch.items}


def test_admits_whole_prompts_fcfs_under_token_budget():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    waiting = deque(Request(i, 0.0, p, 10) for i, p in enumerate([300, 500, 200, 100]))
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000)
    b = pol.next_batch(ReplicaState([], waiting, kv))
    # 300 + 500 = 800 fit; 800 + 200 = 1000 fits exactly; 100 more would be 1100 > 1000: stop (FCFS, no skipping)
    assert scheduled(b) == {0: 300, 1: 500, 2: 200}
    assert [r.request_id for r in b.admitted] == [0, 1, 2]
    assert b.prefill_tokens == 1000 and b.decode_tokens == 0 and b.num_sampled == 3


def test_decodes_first_then_admission_shares_budget():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    running = [running_req(0, 100, 5, kv), running_req(1, 40, 2, kv)]
    waiting = deque([Request(2, 0.0, 97, 10), Request(3, 0.0, 10, 10)])
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=100)
    b = pol.next_batch(ReplicaState(running, waiting, kv))
    # budget 100: two decodes take 2, request 2 takes 97 (total 99); request 3 (10) does not fit in 1
    assert scheduled(b) == {0: 1, 1: 1, 2: 97}
    assert b.decode_tokens == 2 and b.prefill_tokens == 97
    # attention pairs: decode of r0 at c=104 -> 105, r1 at c=41 -> 42, prefill 97*98/2 = 4753
    assert b.attn_pairs == 105 + 42 + 4753
    assert b.context_tokens == 105 + 42 + 97


def test_sequence_cap():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    running = [running_req(i, 10, 1, kv) for i in range(3)]
    waiting = deque(Request(10 + i, 0.0, 10, 10) for i in range(5))
    b = ContinuousPolicy(max_num_seqs=4, max_num_batched_tokens=8192).next_batch(ReplicaState(running, waiting, kv))
    # 3 running + 1 admitted = max_num_seqs 4
    assert scheduled(b) == {0: 1, 1: 1, 2: 1, 10: 10}


def test_admission_stops_when_kv_blocks_run_out():
    kv = BlockAllocator(num_blocks=10, block_size=16)
    running = [running_req(0, 32, 1, kv)]  # holds 2 blocks (32 tokens), next token needs a 3rd
    waiting = deque([Request(1, 0.0, 64, 10), Request(2, 0.0, 65, 10), Request(3, 0.0, 16, 10)])
    b = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=8192).next_batch(ReplicaState(running, waiting, kv))
    # free 8; decode takes 1 (-> 7); req 1 needs 4 (-> 3); req 2 needs ceil(65/16)=5 > 3: stop, FCFS
    assert scheduled(b) == {0: 1, 1: 64}
    assert kv.num_free == 8  # the policy only decides; nothing was allocated


def test_preempts_newest_when_kv_runs_out_mid_decode():
    kv = BlockAllocator(num_blocks=6, block_size=16)
    # each holds 32 tokens = 2 blocks (prompt 32, 1 emitted -> computed 32); the next token needs a 3rd block
    r0, r1, r2 = (running_req(i, 32, 1, kv) for i in range(3))
    waiting = deque([Request(9, 0.0, 8, 4)])
    policy = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=8192)
    b = policy.next_batch(ReplicaState([r0, r1, r2], waiting, kv))
    # free 0: r0 needs 1 block -> preempt newest r2 (frees 2) -> r0 takes 1; r1 needs 1 -> takes the other.
    assert scheduled(b) == {0: 1, 1: 1}
    assert [r.request_id for r in b.preempted] == [2]
    assert b.admitted == ()  # no admission in a step that preempted


def test_preempts_itself_when_it_is_the_newest_left():
    kv = BlockAllocator(num_blocks=4, block_size=16)
    r0, r1 = running_req(0, 32, 1, kv), running_req(1, 32, 1, kv)
    b = ContinuousPolicy().next_batch(ReplicaState([r0, r1], deque(), kv))
    # free 0: r0 needs 1 -> preempt r1 (frees 2) -> r0 scheduled; r1 is gone
    assert scheduled(b) == {0: 1} and [r.request_id for r in b.preempted] == [1]
    kv2 = BlockAllocator(num_blocks=2, block_size=16)
    lone = running_req(5, 32, 1, kv2)
    b2 = ContinuousPolicy().next_batch(ReplicaState([lone], deque(), kv2))
    assert scheduled(b2) == {} and [r.request_id for r in b2.preempted] == [5]


def test_recompute_after_preemption_prefills_prompt_plus_emitted_output():
    kv = BlockAllocator(num_blocks=100, block_size=16)
    r = Request(0, 0.0, 50, 20)
    r.num_output_done = 7  # preempted after emitting 7 tokens; KV freed
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([r]), kv))
    assert scheduled(b) == {0: 57}
    assert b.prefill_tokens == 57 and b.num_sampled == 1


def test_admission_error_for_prompts_over_budget():
    # whole-prompt admission checks what the engine knows on arrival, the prompt (vLLM's
    # prompt_limit), not prompt + output: a longer sequence ends only if a preemption makes it
    # recompute past the budget (tests/test_kv_outgrow.py)
    pol = ContinuousPolicy(max_num_batched_tokens=512)
    assert pol.admission_error(512, 400) is None
    assert "prompt of 513 tokens exceeds policy.max_num_batched_tokens=512" in pol.admission_error(513, 1)
    assert ContinuousPolicy(max_num_batched_tokens=512, chunked=True).admission_error(513, 1) is None


def test_admission_error_when_the_watermark_leaves_too_few_blocks():
    # 200 blocks of 16 tokens; watermark 0.01 keeps int(2.0) = 2 free when admitting: 198 usable.
    kv = BlockAllocator(num_blocks=200, block_size=16)
    pol = ContinuousPolicy(watermark=0.01)
    # 3180 + 2 - 1 = 3181 tokens = 199 blocks > 198: it could never be admitted, even alone
    assert "policy.watermark=0.01" in pol.admission_error(3180, 2, kv)
    # 3167 + 2 - 1 = 3168 tokens = 198 blocks: admissible on an empty replica
    assert pol.admission_error(3167, 2, kv) is None
    b = pol.next_batch(ReplicaState([], deque([Request(0, 0.0, 3167, 2)]), kv))
    assert scheduled(b) == {0: 3167}
    # chunked: only the first chunk is admitted alone: 512 tokens = 32 blocks, of 40 - 20 usable
    half = BlockAllocator(num_blocks=40, block_size=16)
    assert "first chunk = 512 tokens" in ContinuousPolicy(chunked=True, max_num_batched_tokens=512,
                                                         watermark=0.5).admission_error(5000, 10, half)
    chunked = ContinuousPolicy(chunked=True, max_num_batched_tokens=256, watermark=0.5)
    assert chunked.admission_error(5000, 10, half) is None


def test_budget_blocked_names_a_head_held_back_by_the_running_requests_only():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    pol = ContinuousPolicy(max_num_batched_tokens=2048)
    # two 1500-token prompts, nothing running: the second waits for the first, not for decodes
    b = pol.next_batch(ReplicaState([], deque([Request(0, 0.0, 1500, 5), Request(1, 0.0, 1500, 5)]), kv))
    assert scheduled(b) == {0: 1500} and b.budget_blocked is None
    # one decode running (1 token): a 2048-token prompt fits the budget alone, not next to it
    run = running_req(7, 100, 3, kv)
    head = Request(2, 0.0, 2048, 1)
    b = pol.next_batch(ReplicaState([run], deque([head]), kv))
    assert scheduled(b) == {7: 1} and b.budget_blocked is head


def test_skip_unfit_prompts_sets_aside_a_prompt_without_room_and_admits_the_ones_behind():
    """vLLM V1 with chunked prefill off: a whole prompt that does not fit the budget left next to
    the running decodes is set aside, and the requests behind it are tried (each whole, in order,
    while tokens are left); without the option admission stops at it (FCFS)."""
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    running = [running_req(0, 100, 5, kv), running_req(1, 40, 2, kv)]
    big, small, mid, tiny = (Request(2, 0.0, 1000, 10), Request(3, 0.0, 300, 10), Request(4, 0.0, 697, 10),
                             Request(5, 0.0, 1, 10))
    state = lambda: ReplicaState(running, deque([big, small, mid, tiny]), kv)  # noqa: E731
    fcfs = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000).next_batch(state())
    assert scheduled(fcfs) == {0: 1, 1: 1} and fcfs.budget_blocked is big and fcfs.stop[:2] == ("budget", big)
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000, skip_unfit_prompts=True)
    b = pol.next_batch(state())
    # budget 1000 - 2 decodes = 998: 1000 set aside; 300 fits (698 left); 697 fits (1 left); 1 fits (0 left)
    assert scheduled(b) == {0: 1, 1: 1, 3: 300, 4: 697, 5: 1}
    assert [r.request_id for r in b.admitted] == [3, 4, 5]
    assert b.budget_blocked is big and b.stop[:2] == ("budget", big) and not b.steady
    # a request behind that does not fit what is left is set aside too; the step stops when no token is left
    b = pol.next_batch(ReplicaState(running, deque([big, Request(6, 0.0, 999, 10), small]), kv))
    assert scheduled(b) == {0: 1, 1: 1, 3: 300} and b.stop[:2] == ("budget", big)
    # with nothing set aside it decides as FCFS does
    b = pol.next_batch(ReplicaState(running, deque([small]), kv))
    assert scheduled(b) == {0: 1, 1: 1, 3: 300} and b.stop is None and b.steady
    # chunked prefill and prefill_first have room for any prompt: the option changes nothing
    for kw in ({"chunked": True}, {"prefill_first": True}):
        on = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000, skip_unfit_prompts=True, **kw)
        off = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000, **kw)
        assert scheduled(on.next_batch(state())) == scheduled(off.next_batch(state())), kw


def test_skip_unfit_prompts_stops_at_the_sequence_limit_where_it_is_reached():
    """Once a prompt is set aside, later ones past the tokens left are set aside without the
    prefix-cache lookup (the queue is tried whole every step under overload); when the admitted
    ones fill max_num_seqs, admission still stops at the next request, whatever its size, and with
    prefix caching on (which can shorten a prompt) it decides the same."""
    for caching in (False, True):
        kv = BlockAllocator(num_blocks=1000, block_size=16, prefix_caching=caching)
        running = [running_req(0, 100, 5, kv)]
        big, a, b_, huge, c = (Request(2, 0.0, 1000, 10), Request(3, 0.0, 10, 10), Request(4, 0.0, 10, 10),
                               Request(5, 0.0, 990, 10), Request(6, 0.0, 10, 10))
        pol = ContinuousPolicy(max_num_seqs=3, max_num_batched_tokens=1000, skip_unfit_prompts=True)
        b = pol.next_batch(ReplicaState(running, deque([big, a, b_, huge, c]), kv))
        # 999 left: 1000 set aside; 10 and 10 fit (3 sequences: the limit); 990 is where it stops
        assert scheduled(b) == {0: 1, 3: 10, 4: 10}, caching
        assert b.stop[:2] == ("max_num_seqs", huge), caching
        pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=1000, skip_unfit_prompts=True)
        b = pol.next_batch(ReplicaState(running, deque([big, a, huge, b_, c]), kv))
        assert scheduled(b) == {0: 1, 3: 10, 4: 10, 6: 10} and b.stop[:2] == ("budget", big), caching


def test_prefill_first_admits_prompts_in_a_step_of_their_own():
    """vLLM V0 without chunked prefill: while prompts can be admitted, the step carries only them
    (the running decodes stall); when none can, the running requests decode."""
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    running = [running_req(0, 100, 5, kv), running_req(1, 40, 2, kv)]
    waiting = deque([Request(2, 0.0, 300, 10), Request(3, 0.0, 500, 10)])
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=600, prefill_first=True)
    b = pol.next_batch(ReplicaState(running, waiting, kv))
    # 300 fits the 600-token budget alone (no decode took a token); 300 + 500 does not
    assert scheduled(b) == {2: 300} and b.decode_tokens == 0 and b.num_seqs == 1
    b = pol.next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(b) == {0: 1, 1: 1}
    # without prefill_first the prompt shares the step with the decodes (budget 600 - 2 = 598)
    b = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=600).next_batch(
        ReplicaState(running, deque([Request(2, 0.0, 300, 10)]), kv))
    assert scheduled(b) == {0: 1, 1: 1, 2: 300}


def test_padded_prompt_batch_counts_len_times_longest_and_stops_past_max_paddings():
    """vLLM v0.2 (``max_paddings``, cost.engine vllm-v0.2): a prompt-only step pads every prompt to
    the longest, counts ``len x longest`` against the budget and stops at the first prompt that
    takes the padding past max_paddings (vllm/core/scheduler.py L170-186 at v0.2.3)."""
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    running = [running_req(0, 100, 5, kv)]
    prompts = [300, 200, 350, 100, 300]
    waiting = lambda: deque(Request(10 + i, 0.0, p, 10) for i, p in enumerate(prompts))  # noqa: E731
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=2000, prefill_first=True, max_paddings=256)
    b = pol.next_batch(ReplicaState(running, waiting(), kv))
    # 300; + 200: 2 x 300 = 600, padding 100; + 350: 3 x 350 = 1050, padding 1050 - 850 = 200;
    # + 100: 4 x 350 = 1400, padding 450 > 256: stop there (the 300 behind it waits too)
    assert scheduled(b) == {10: 300, 11: 200, 12: 350} and [r.request_id for r in b.admitted] == [10, 11, 12]
    assert b.stop[0] == "budget" and b.stop[1].request_id == 13 and b.stop[2] == 2000 - 1050 and b.stop[4] == 8 - 1 - 3
    assert b.prefill_tokens == 850 and b.padding_tokens == 200 and b.num_sampled == 3
    # attention causal over 350 tokens in each of the three slots; 200 padded KV slots touched
    assert b.attn_pairs == 3 * (350 * 351 // 2)
    assert b.context_tokens == 850 + 200
    # the budget counts the padded tokens: 3 x 350 = 1050 > 1000 stops at the third prompt
    b = dataclasses.replace(pol, max_num_batched_tokens=1000).next_batch(ReplicaState(running, waiting(), kv))
    assert scheduled(b) == {10: 300, 11: 200} and b.padding_tokens == 100 and b.stop[1].request_id == 12
    # without padding (every other engine): 300 + 200 + 350 + 100 + 300 = 1250 tokens fit 2000
    b = dataclasses.replace(pol, max_paddings=None).next_batch(ReplicaState(running, waiting(), kv))
    assert scheduled(b) == dict(zip(range(10, 15), prompts)) and b.padding_tokens == 0
    assert b.attn_pairs == sum(p * (p + 1) // 2 for p in prompts)


def test_vllm_v023_pads_prompt_batches_and_prices_the_padding():
    """cost.engine vllm-v0.2.3 (DistServe's baseline) turns the padding on for a pool's continuous
    policy (max_paddings 256, vLLM v0.2.3's default); the padded tokens are priced like real ones.
    vllm-v0.2 (v0.1-v0.2.1, the vLLM paper's) and the other engines pack the prompts."""
    from servesim.cost.engines import PROFILES
    from servesim.simulation import prepare
    from tests.conftest import make_scenario

    assert PROFILES["vllm-v0.2.3"].max_paddings == 256
    assert all(p.max_paddings is None for n, p in PROFILES.items() if n != "vllm-v0.2.3")
    pools = {e: prepare(make_scenario(**{"cost.engine": e, "policy.prefill_first": True})).pools[0]
             for e in ("vllm-v0.2.3", "vllm-v0.2")}
    assert pools["vllm-v0.2.3"].make_policy().max_paddings == 256
    assert pools["vllm-v0.2"].make_policy().max_paddings is None
    prompts = lambda: deque([Request(1, 0.0, 900, 10), Request(2, 0.0, 700, 10)])  # noqa: E731
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    pol = pools["vllm-v0.2.3"].make_policy()
    b = pol.next_batch(ReplicaState([], prompts(), kv))
    assert b.padding_tokens == 200 and b.prefill_tokens == 1600
    packed = pools["vllm-v0.2"].make_policy().next_batch(ReplicaState([], prompts(), kv))
    assert packed.padding_tokens == 0 and packed.prefill_tokens == 1600
    cm = pools["vllm-v0.2.3"].cost_model
    assert cm.step_time(b).time_s > cm.step_time(packed).time_s
    assert cm.step_time(b).time_s == cm.step_time(packed._replace(num_tokens=1800, padding_tokens=0,
                                                                  attn_pairs=b.attn_pairs,
                                                                  context_tokens=b.context_tokens)).time_s


def test_prefill_first_admits_no_prompt_beside_a_swap_in():
    """vLLM V0 schedules prompts only while nothing is swapped out: the step that swaps a request
    back in decodes (it and the running ones) and admits no prompt, which gets a step of its own
    next (it was admitted beside the decodes: a mixed step prefill_first never runs)."""
    kv = BlockAllocator(num_blocks=100, block_size=16)
    running = [running_req(0, 64, 1, kv)]
    back = Request(1, 0.0, 64, 100)  # swapped out after its first token: 64 tokens of KV on the host
    back.num_computed_tokens, back.num_output_done, back.swapped_blocks = 64, 1, 4
    waiting = deque([Request(2, 0.0, 100, 5)])
    pol = ContinuousPolicy(prefill_first=True, preemption="swap")
    b = pol.next_batch(ReplicaState(running, waiting, kv, swapped=deque([back]), host_free_blocks=10))
    assert scheduled(b) == {0: 1, 1: 1} and b.swap_in == (back,) and b.admitted == ()
    assert b.prefill_tokens == 0 and b.stop[0] == "swapped_first" and not b.steady
    b = pol.next_batch(ReplicaState(running + [back], waiting, kv))
    assert scheduled(b) == {2: 100} and b.decode_tokens == 0


def test_victims_sharing_a_prefix_free_it_together():
    """Two running requests map the same two cached prefix blocks and nothing else: preempting the
    newest frees none of them (the other still maps them), preempting both frees both. The policy
    counted each victim's shared blocks as held by the other, so it went on to preempt request 1
    as well, which vLLM (reference counts dropping to 0 as the second victim goes) keeps."""
    kv = BlockAllocator(num_blocks=8, block_size=16, prefix_caching=True)
    r0, r1 = running_req(0, 48, 1, kv), running_req(1, 48, 1, kv)  # 3 blocks each; the next token needs a 4th
    shared = []
    for rid in (2, 3):  # 32 prompt tokens, both the group's prefix: the same 2 cached blocks
        r = Request(rid, 0.0, 32, 10_000, prefix_group=0, prefix_tokens=32)
        r.num_computed_tokens, r.num_output_done = 32, 1
        assert kv.grow(r, 32)
        shared.append(r)
    assert kv.num_free == 0
    # a 2-token budget: requests 2 and 3 are not scheduled this step, but they are the newest
    b = ContinuousPolicy(max_num_batched_tokens=2).next_batch(ReplicaState([r0, r1, *shared], deque(), kv))
    assert [r.request_id for r in b.preempted] == [3, 2] and scheduled(b) == {0: 1, 1: 1}


def test_a_reservation_larger_than_the_kv_cache_is_named_as_such():
    """reserve=max reserves up to the context length: on a replica with fewer blocks than that,
    every request was refused as '= <its prompt> tokens needs N free KV blocks ... lower
    policy.watermark', a size that was not the one reserved and a remedy that cannot help."""
    kv = BlockAllocator(num_blocks=500, block_size=16)
    pol = ContinuousPolicy(reserve="max", max_context_tokens=8192)
    why = pol.admission_error(100, 50, kv)
    assert why.startswith("its reservation (policy.reserve=max) = 8192 tokens needs 512 KV blocks; the replica "
                          "has 500 in all") and "policy.max_output_tokens" in why and "watermark" not in why
    # 100 + 7800 = 7900 tokens = 494 blocks: within the 495 the 0.01 watermark leaves
    assert ContinuousPolicy(reserve="max", max_context_tokens=8192, max_output_tokens=7800,
                            watermark=0.01).admission_error(100, 50, kv) is None
    # 100 + 7850 = 7950 tokens = 497 blocks: the watermark keeps it out, and says so with its size
    why = ContinuousPolicy(reserve="max", max_context_tokens=8192, max_output_tokens=7850,
                           watermark=0.01).admission_error(100, 50, kv)
    assert why.startswith("its reservation (policy.reserve=max) = 7950 tokens needs 497 free KV blocks") \
        and "policy.watermark=0.01" in why


def test_decode_needs_a_free_block_at_its_turn_under_vllm_v02():
    """vLLM v0.1-v0.2.x ``can_append_slot`` (``decode_needs_free_block``): each decoding request,
    in the running order, needs a free block at its turn whether or not its next token opens one
    (vllm/core/block_manager.py L143-148, scheduler.py L217-230 at v0.2.3); else the newest
    running request is preempted. Without it a request needs a block only when it opens one."""
    kv = BlockAllocator(num_blocks=6, block_size=16)
    # r0's next token (the 17th) opens a block; r1's and r2's (the 21st) do not; 1 block free
    running = [running_req(0, 16, 1, kv), running_req(1, 20, 1, kv), running_req(2, 20, 1, kv)]
    assert kv.num_free == 1
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=100, prefill_first=True)
    b = pol.next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(b) == {0: 1, 1: 1, 2: 1} and not b.preempted
    # r0 takes the free block; at r1's turn none is free: the newest (r2) is preempted for it
    v02 = dataclasses.replace(pol, decode_needs_free_block=True)
    b = v02.next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(b) == {0: 1, 1: 1} and [r.request_id for r in b.preempted] == [2]
    # no block free and nobody opening one: the newest is preempted all the same (then one is)
    kv = BlockAllocator(num_blocks=4, block_size=16)
    running = [running_req(0, 20, 1, kv), running_req(1, 20, 1, kv)]
    assert kv.num_free == 0
    assert not pol.next_batch(ReplicaState(running, deque(), kv)).preempted
    b = v02.next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(b) == {0: 1} and [r.request_id for r in b.preempted] == [1]
    # the last one left preempts itself (vLLM: "Preempt the current sequence group")
    kv = BlockAllocator(num_blocks=2, block_size=16)
    b = v02.next_batch(ReplicaState([running_req(0, 20, 1, kv)], deque(), kv))
    assert scheduled(b) == {} and [r.request_id for r in b.preempted] == [0]


def test_vllm_v0_profiles_carry_can_append_slot():
    """The vLLM V0 profiles (vllm-v0, vllm-v0.2, vllm-v0.2.3) and sarathi-serve (whose block
    manager keeps the check: ``num_free_gpu_blocks > 0``) turn ``decode_needs_free_block`` on for
    a pool's continuous policy; no other engine does."""
    from servesim.cost.engines import PROFILES
    from servesim.simulation import prepare
    from tests.conftest import make_scenario

    have = {n for n, p in PROFILES.items() if p.decode_needs_free_block}
    assert have == {"vllm-v0", "vllm-v0.2", "vllm-v0.2.3", "sarathi-serve"}
    # vLLM V0 (v0.1-v0.6) and Sarathi-Serve admit a recompute through can_allocate, above the watermark
    held = {n for n, p in PROFILES.items() if p.watermark_on_recompute}
    assert held == {"vllm-v0", "vllm-v0.2", "vllm-v0.2.3", "sarathi-serve"}
    for e in PROFILES:
        pol = prepare(make_scenario(**{"cost.engine": e})).pools[0].make_policy()
        assert pol.decode_needs_free_block is (e in have) and pol.watermark_on_recompute is (e in held), e


def test_vllm_v0_decode_step_needs_a_free_block_per_running_group():
    """vLLM v0.3-v0.5 (``vllm-v0``) keep v0.2's "simple heuristic": before a decode, each running
    group in turn needs a free block per sequence (``BlockSpaceManagerV1.can_append_slots``:
    ``num_seqs <= num_free_gpu_blocks``, vllm/core/block_manager_v1.py at v0.4.1 and v0.5.3;
    ``can_append_slot`` at v0.3.3), else the newest running group is preempted
    (``Scheduler._schedule_running``). The vllm-v0 profile's policy preempted only for a block a
    token opens, so a decode step starting with no block free ran every request."""
    from servesim.simulation import prepare
    from tests.conftest import make_scenario

    pols = {e: prepare(make_scenario(**{"cost.engine": e, "policy.prefill_first": True})).pools[0].make_policy()
            for e in ("vllm-v0", "vllm-v1")}
    # no block free; nobody's next token (the 21st) opens one
    kv = BlockAllocator(num_blocks=6, block_size=16)
    running = [running_req(i, 20, 1, kv) for i in range(3)]
    assert kv.num_free == 0
    v1 = pols["vllm-v1"].next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(v1) == {0: 1, 1: 1, 2: 1} and not v1.preempted
    # vLLM V0: r0 finds none free, the newest (r2) goes and frees 2; r0 and r1 then find one each
    v0 = pols["vllm-v0"].next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(v0) == {0: 1, 1: 1} and [r.request_id for r in v0.preempted] == [2]
    # one block free: r0 takes it for its 17th token (a new block), r1 finds none, r2 goes
    kv = BlockAllocator(num_blocks=6, block_size=16)
    running = [running_req(0, 16, 1, kv), running_req(1, 20, 1, kv), running_req(2, 20, 1, kv)]
    assert kv.num_free == 1
    assert not pols["vllm-v1"].next_batch(ReplicaState(running, deque(), kv)).preempted
    v0 = pols["vllm-v0"].next_batch(ReplicaState(running, deque(), kv))
    assert scheduled(v0) == {0: 1, 1: 1} and [r.request_id for r in v0.preempted] == [2]


def test_vllm_v0_swaps_a_request_in_only_with_a_free_block_beyond_its_own():
    """vLLM V0's ``can_swap_in`` asks a swapped group's blocks plus one free block per sequence
    ("to match can_append_slot", vllm/core/block_manager.py at v0.2.3, block_manager_v1.py at
    v0.4-v0.5): under ``decode_needs_free_block`` a swap-in that would leave its decode no block
    free waits. It swapped in on its blocks alone, left none free, and was swapped out again at
    the next decode (300 chat requests on 300 blocks under vllm-v0 with swap: 133 preemptions,
    44 with recompute)."""
    from servesim.simulation import prepare
    from tests.conftest import make_scenario

    pols = {e: prepare(make_scenario(**{"cost.engine": e, "policy.preemption": "swap"})).pools[0].make_policy()
            for e in ("vllm-v0", "vllm-v1")}

    def state():
        kv = BlockAllocator(num_blocks=4, block_size=16)
        running = [running_req(0, 20, 1, kv)]  # 20 tokens of KV, its 21st opens no block
        back = Request(1, 0.0, 20, 100)  # swapped out after its first token: 20 tokens (2 blocks) on the host
        back.num_computed_tokens, back.num_output_done, back.swapped_blocks = 20, 1, 2
        assert kv.num_free == 2
        return ReplicaState(running, deque(), kv, swapped=deque([back]), host_free_blocks=10), back

    s, back = state()
    v1 = pols["vllm-v1"].next_batch(s)
    assert scheduled(v1) == {0: 1, 1: 1} and v1.swap_in == (back,)
    # vLLM V0: its 2 blocks + 1 > the 2 free; r0 decodes alone, the swapped request waits first in line
    s, back = state()
    v0 = pols["vllm-v0"].next_batch(s)
    assert scheduled(v0) == {0: 1} and v0.swap_in == () and v0.stop[0] == "swapped_first"


def test_vllm_v02_holds_a_recompute_back_at_the_watermark():
    """vLLM v0.2.3 ``can_allocate`` (vllm/core/block_manager.py L103-120) keeps the watermark's blocks
    free for every prompt run, a recompute's too (``watermark_on_recompute``); otherwise a request
    coming back from a preemption may use them. One whose whole sequence could never fit above the
    watermark (vLLM drops it: ``AllocStatus.NEVER``; the replica ends it at its preemption,
    test_kv_outgrow) may use them either way, so it is not stuck."""
    kv = BlockAllocator(num_blocks=100, block_size=16)
    assert kv.grow(running_req(0, 16 * 85 - 1, 1, kv), 16 * 85) and kv.num_free == 15
    back = Request(1, 0.0, 160, 50)
    back.num_output_done, back.preemptions = 1, 1  # 161 tokens to recompute: 11 blocks
    pol = ContinuousPolicy(watermark=0.1, prefill_first=True)  # keeps 10 blocks free
    v02 = dataclasses.replace(pol, watermark_on_recompute=True)
    # 15 free - 11 = 4: above the watermark only for the old rule
    assert [r.request_id for r in pol.next_batch(ReplicaState([], deque([back]), kv)).admitted] == [1]
    b = v02.next_batch(ReplicaState([], deque([back]), kv))
    assert not b.admitted and b.stop[:2] == ("watermark", back)
    assert v02.lacks(kv, back, 8192, kv.num_free, 8) == "watermark" and pol.lacks(kv, back, 8192, 15, 8) is None
    # a new request of the same size is held back by both
    new = Request(2, 0.0, 161, 50)
    assert pol.lacks(kv, new, 8192, 15, 8) == v02.lacks(kv, new, 8192, 15, 8) == "watermark"
    # a recompute of 91 blocks (> 100 - 10) could never come back above the watermark: it uses it
    empty = BlockAllocator(num_blocks=100, block_size=16)
    assert empty.grow(running_req(3, 16 * 5, 1, empty), 16 * 5) and empty.num_free == 95
    big = Request(4, 0.0, 16 * 91 - 1, 50)
    big.num_output_done, big.preemptions = 1, 1
    assert [r.request_id for r in v02.next_batch(ReplicaState([], deque([big]), empty)).admitted] == [4]
