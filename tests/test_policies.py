"""Every policy without SimPy: exact tokens per request for hand-worked states."""

from collections import deque

import numpy as np

from servesim.policies.base import DecodeSet, ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.pd_split import link_figures, pick_decode_replica, transfer_time_s
from servesim.policies.static import StaticPolicy
from servesim.core.kv import BlockAllocator
from servesim.core.request import Request
from servesim.inputs.scenario import Link
from servesim.inputs.specs import GPUS


def running_req(rid, prompt, emitted, kv, computed=None):
    r = Request(rid, 0.0, prompt, 10_000)
    r.num_output_done = emitted
    r.num_computed_tokens = prompt + emitted - 1 if computed is None else computed
    assert kv.grow(r, r.num_computed_tokens)
    return r


def scheduled(batch):
    return {r.request_id: q for r, q in batch.items}


# ------------------------------------------------------------------ chunked prefill
def test_chunked_prefill_decodes_first_then_chunks_fill_the_budget():
    kv = BlockAllocator(1000, 16)
    running = [running_req(0, 100, 3, kv), running_req(1, 200, 1, kv)]
    partial = running_req(2, 1000, 0, kv, computed=512)  # half-way through its prompt
    running.append(partial)
    waiting = deque([Request(3, 0.0, 700, 10), Request(4, 0.0, 50, 10)])
    b = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=512, chunked=True).next_batch(
        ReplicaState(running, waiting, kv))
    # budget 512: decodes 1 + 1; partial prefill gets min(488 left, 510) = 488 -> 22 left;
    # request 3 gets a 22-token chunk; request 4 gets nothing (budget spent)
    assert scheduled(b) == {0: 1, 1: 1, 2: 488, 3: 22}
    assert [r.request_id for r in b.admitted] == [3]
    assert b.decode_tokens == 2 and b.prefill_tokens == 510
    # a decode at context c attends to c + 1 keys (102 + 1, 200 + 1); the partial chunk attends
    # to its 512 computed tokens plus itself, causally: 488*512 + 488*489/2
    pairs = (102 + 1) + (200 + 1) + 488 * 512 + 488 * 489 // 2 + 22 * 23 // 2
    assert b.attn_pairs == pairs
    # only requests whose prompt completes are sampled: 0, 1 (decodes) and 2 (its last chunk)
    assert b.num_sampled == 3


def test_chunked_prefill_accepts_prompts_longer_than_the_budget():
    assert ContinuousPolicy(max_num_batched_tokens=512, chunked=True).admission_error(100_000, 10) is None
    assert ContinuousPolicy(max_num_batched_tokens=512).admission_error(600, 10) is not None


# ------------------------------------------------------------------ watermark
def test_watermark_keeps_blocks_free_at_admission():
    kv = BlockAllocator(100, 16)
    waiting = deque([Request(0, 0.0, 16 * 95, 10), Request(1, 0.0, 16, 10)])
    # 95 blocks needed, watermark 0.1 -> 10 blocks must stay free: 100 - 95 < 10, nothing admitted
    b = ContinuousPolicy(max_num_batched_tokens=10_000, watermark=0.1).next_batch(ReplicaState([], waiting, kv))
    assert scheduled(b) == {}
    b = ContinuousPolicy(max_num_batched_tokens=10_000, watermark=0.05).next_batch(ReplicaState([], waiting, kv))
    assert scheduled(b) == {0: 1520}  # 100 - 95 = 5 >= 5; request 1 would leave 4 < 5


# ------------------------------------------------------------------ swap preemption
def test_swap_preemption_goes_to_host_while_room_lasts():
    kv = BlockAllocator(6, 16)
    r0, r1, r2 = (running_req(i, 32, 1, kv) for i in range(3))  # 2 blocks each, each needs a 3rd
    pol = ContinuousPolicy(preemption="swap")
    b = pol.next_batch(ReplicaState([r0, r1, r2], deque(), kv, host_free_blocks=2))
    assert scheduled(b) == {0: 1, 1: 1}
    assert [r.request_id for r in b.preempted] == [2] and [r.request_id for r in b.swap_out] == [2]
    b = pol.next_batch(ReplicaState([r0, r1, r2], deque(), kv, host_free_blocks=1))
    assert b.swap_out == ()  # no host room: recompute instead


def test_swapped_requests_come_back_before_new_admissions():
    kv = BlockAllocator(10, 16)
    s = Request(7, 0.0, 40, 100)
    s.num_output_done, s.num_computed_tokens = 5, 44  # swapped out mid-decode, KV on host
    waiting = deque([Request(8, 0.0, 16, 10)])
    b = ContinuousPolicy().next_batch(ReplicaState([], waiting, kv, swapped=deque([s]), host_free_blocks=0))
    # swap-in needs ceil(45/16) = 3 blocks and decodes one token; then request 8 is admitted
    assert scheduled(b) == {7: 1, 8: 16} and b.swap_in == (s,) and b.admitted[0].request_id == 8


# ------------------------------------------------------------------ prefix caching
def test_prefix_cache_hits_skip_cached_blocks():
    kv = BlockAllocator(100, 16, prefix_caching=True)
    first = Request(0, 0.0, 100, 10, prefix_group=3, prefix_tokens=40)  # 2 full prefix blocks
    assert kv.grow(first, 100)  # as if prefilled: blocks (3, 0), (3, 1) now cached
    assert kv.cached_prefix_blocks(first) == (2, 0)
    second = Request(1, 0.0, 70, 10, prefix_group=3, prefix_tokens=40)
    other = Request(2, 0.0, 70, 10, prefix_group=4, prefix_tokens=40)
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([second, other]), kv))
    # request 1 reuses 32 cached tokens and computes 70 - 32 = 38; request 2 computes all 70
    assert scheduled(b) == {1: 38, 2: 70}
    assert b.prefix_hits == ((second, 32),)
    assert b.prefill_tokens == 108
    assert b.attn_pairs == 38 * 32 + 38 * 39 // 2 + 70 * 71 // 2  # the hit still attends to its prefix


def test_prefix_blocks_are_shared_and_evicted_lru_only_when_unreferenced():
    kv = BlockAllocator(10, 16, prefix_caching=True)
    a = Request(0, 0.0, 64, 10, prefix_group=0, prefix_tokens=48)  # 3 shared blocks + 1 own
    b = Request(1, 0.0, 64, 10, prefix_group=0, prefix_tokens=48)
    assert kv.grow(a, 64) and kv.num_used == 4
    assert kv.grow(b, 64) and kv.num_used == 5  # shares 3, adds 1
    a.num_computed_tokens = b.num_computed_tokens = 64  # (computed: their full prefix blocks stay cached)
    assert kv.freeable_blocks(a) == 1
    kv.free(a)
    assert kv.num_used == 4
    kv.free(b)
    # cached, free, evictable: the 3 prefix blocks, after a run of the 2 own blocks (freed first)
    assert kv.num_used == 0 and kv.num_free == 10 and kv.num_idle == 5 and len(kv.evictable) == 4
    c = Request(2, 0.0, 16 * 9, 10)  # needs 9: the 5 empty blocks, the 2 own ones, then the 2 LRU cached
    assert kv.grow(c, 16 * 9)
    assert kv.cached_prefix_blocks(a) == (1, 1)  # block 0 survives (freed last)


def _preempt(kv, r):
    """What the replica does to a request it preempts for recompute (``Replica._apply``)."""
    kv.free(r, recompute=True)
    r.dropped_tokens, r.num_computed_tokens = r.num_computed_tokens, 0
    r.preemptions += 1


def test_a_preempted_request_finds_its_own_full_blocks_when_readmitted():
    # vLLM V1 caches every full block of every request: a request preempted for recompute leaves
    # its full blocks in the cache, and readmitted it computes only what was evicted meanwhile (and
    # at least its last token). Before, only shared-prefix blocks were cached: 110 tokens again.
    kv = BlockAllocator(20, 16, prefix_caching=True)
    r = running_req(0, 100, 10, kv)  # 109 tokens of KV: 6 full blocks + 1 partial
    assert kv.num_used == 7
    _preempt(kv, r)
    # its 6 full blocks are cached, after its partial one (freed first, as vLLM frees a request's
    # blocks last first), which holds its place in the eviction order but no lookup can hit it
    assert kv.num_used == 0 and kv.num_free == 20 and kv.num_idle == 7 and kv.num_empty == 13
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([r]), kv))
    assert b.prefix_hits == ((r, 96),) and scheduled(b) == {0: 110 - 96}
    assert b.prefill_tokens == 14
    assert kv.map_hits(b.prefix_hits) and r.kv_blocks == 6 and kv.num_used == 6 and kv.num_idle == 1
    r.num_computed_tokens = 96
    assert kv.grow(r, 110) and kv.num_used == 7 and kv.num_empty == 12  # (empty blocks first)
    kv.free(r)  # completed: its blocks stay in the eviction order, but nothing can hit them
    assert kv.num_free == 20 and kv.num_idle == 8 and kv.cached_prefix_blocks(r, 6) == (0, 0)


def test_own_blocks_are_evicted_least_recently_freed_first_later_blocks_first():
    # vLLM's free queue is LRU over every freed block: a completion freed after the preemption
    # queues behind the victim's blocks (its run is evicted after them), and of the victim's
    # blocks the last ones go first, so its prefix survives longest
    kv = BlockAllocator(12, 16, prefix_caching=True)
    v = running_req(0, 96, 1, kv)  # 96 tokens of KV: 6 full blocks
    done = running_req(1, 96, 1, kv)
    assert kv.num_free == 0
    _preempt(kv, v)
    kv.free(done)
    assert kv.num_free == 12 and kv.num_idle == 12 and kv.num_empty == 0
    kv.take(2)  # evicts v's blocks 5 and 4
    assert kv.cached_prefix_blocks(v, 6) == (4, 4)
    kv.take(5)  # v's 4 others, then 1 of the completion's 6
    assert kv.cached_prefix_blocks(v, 6) == (0, 0) and kv.num_free == 5 and kv.num_idle == 5
    # freed the other way round, the completion's blocks go first and v's survive
    kv = BlockAllocator(12, 16, prefix_caching=True)
    v = running_req(0, 96, 1, kv)
    done = running_req(1, 96, 1, kv)
    kv.free(done)
    _preempt(kv, v)
    kv.take(7)
    assert kv.cached_prefix_blocks(v, 6) == (5, 5)


def test_a_preempted_request_hits_its_shared_prefix_then_its_own_blocks():
    kv = BlockAllocator(20, 16, prefix_caching=True)
    other = Request(1, 0.0, 40, 10, prefix_group=0, prefix_tokens=32)  # maps the 2 prefix blocks
    assert kv.grow(other, 40)
    r = running_req(0, 0, 0, kv, computed=0)
    r.prefix_group, r.prefix_tokens, r.prompt_tokens, r.num_output_done = 0, 32, 100, 5
    r.num_computed_tokens = 104
    assert kv.grow(r, 104) and kv.num_used == 3 + 7 - 2  # shares 2 of its 7 blocks
    _preempt(kv, r)  # the prefix stays mapped by the other; its own 4 full blocks are cached
    assert kv.num_used == 3 and kv.num_idle == 4 + 1  # (and its partial one freed)
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([r]), kv))
    assert b.prefix_hits == ((r, 96),) and scheduled(b) == {0: 105 - 96}
    assert kv.map_hits(b.prefix_hits) and r.kv_blocks == 6 and kv.num_used == 3 + 4 and kv.num_idle == 1
    assert kv.freeable_blocks(r) == 4  # the shared blocks stay mapped by the other


def test_a_session_turn_preempted_and_readmitted_keeps_the_routers_books():
    # a session turn's blocks are its conversation's: with a prompt under one block, its first
    # block is the conversation's first, which prefix-aware routing follows in and out of the cache
    kv = BlockAllocator(20, 16, prefix_caching=True)
    seen = []
    kv.on_prefix = lambda tag, d: seen.append((tag, d))
    r = Request(0, 0.0, 10, 100, prefix_group=5, prefix_tokens=10, cache_output=True)
    r.num_output_done, r.num_computed_tokens = 30, 39
    assert kv.grow(r, 39)
    _preempt(kv, r)
    assert seen == [(5, 1)] and kv.num_idle == 3  # blocks (5, 1), (5, 0) and the partial one
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([r]), kv))
    assert b.prefix_hits == ((r, 32),) and scheduled(b) == {0: 40 - 32}
    assert kv.map_hits(b.prefix_hits) and r.kv_blocks == 2
    assert seen == [(5, 1), (5, -1)]  # mapped again: not in the cache until it is freed
    r.num_computed_tokens = 32
    assert kv.grow(r, 40)
    kv.free(r)
    assert seen == [(5, 1), (5, -1), (5, 1)]


def test_without_prefix_caching_a_preempted_request_computes_everything_again():
    kv = BlockAllocator(20, 16)
    r = running_req(0, 100, 10, kv)
    _preempt(kv, r)
    assert kv.num_free == 20 and kv.num_idle == 0
    b = ContinuousPolicy().next_batch(ReplicaState([], deque([r]), kv))
    assert not b.prefix_hits and scheduled(b) == {0: 110}


# ------------------------------------------------------------------ speculative decoding
def test_speculative_decode_verifies_k_plus_one_tokens():
    kv = BlockAllocator(100, 16)
    r = running_req(0, 30, 2, kv)  # computed 31
    b = ContinuousPolicy(spec_tokens=4).next_batch(ReplicaState([r], deque(), kv))
    assert scheduled(b) == {0: 5}
    assert b.decode_tokens == 5 and b.num_decode_seqs == 1
    assert b.attn_pairs == 5 * 31 + 15


# ------------------------------------------------------------------ static batching
def test_static_waits_for_a_full_batch_or_the_timeout():
    kv = BlockAllocator(1000, 16)
    pol = StaticPolicy(max_num_seqs=3, batch_timeout_s=0.5, max_output_tokens=100, max_context_tokens=4096)
    waiting = deque([Request(0, 1.0, 50, 10), Request(1, 1.2, 80, 20)])
    b = pol.next_batch(ReplicaState([], waiting, kv, now_s=1.3))
    assert b.empty and b.wake_at_s == 1.5
    b = pol.next_batch(ReplicaState([], waiting, kv, now_s=1.5))
    # prefill padded to the longest prompt: 2 x 80 tokens through the layers, 30 of them padding
    assert scheduled(b) == {0: 50, 1: 80}
    assert b.padding_tokens == 30 and b.num_tokens == 130
    assert b.attn_pairs == 2 * 80 * 81 // 2  # both slots attend over the padded prompt
    # each slot reserves padded prompt + max output = 180 tokens = 12 blocks, up front
    assert [(r.request_id, t) for r, t in b.reserve] == [(0, 180), (1, 180)]


def test_static_decodes_every_slot_until_the_batch_is_done():
    kv = BlockAllocator(1000, 16)
    pol = StaticPolicy(max_num_seqs=2, batch_timeout_s=0.0, max_output_tokens=100, max_context_tokens=4096)
    a, c = Request(0, 0.0, 50, 10), Request(1, 0.0, 80, 20)
    waiting = deque([a, c, Request(2, 0.0, 10, 5)])
    pol.next_batch(ReplicaState([], waiting, kv))
    for r in (a, c):  # as the replica would after the prefill step
        r.num_computed_tokens, r.num_output_done = r.prompt_tokens, 1
    b = pol.next_batch(ReplicaState([a, c], deque(), kv))
    assert scheduled(b) == {0: 1, 1: 1} and b.padding_tokens == 0
    # request 0 finished: its slot idles as padding while request 1 decodes; nobody is admitted
    b = pol.next_batch(ReplicaState([c], deque([Request(2, 0.0, 10, 5)]), kv))
    assert scheduled(b) == {1: 1} and b.padding_tokens == 1 and b.admitted == ()
    # both slots hold the padded prompt (80) and step the same token: each attends 81 keys, the
    # idle slot as the live one (it was charged 82)
    assert b.attn_pairs == 2 * 81 and b.context_tokens == 2 * 81
    # the same step from the engine's decode set (one member: request 1, 80 tokens computed)
    dec = DecodeSet(num_seqs=1, context_tokens=80, prompt_tokens=80, computed_tokens=80)
    b = pol.next_batch(ReplicaState([], deque(), kv, decoding=dec))
    assert b.set_seqs == 1 and b.padding_tokens == 1
    assert b.attn_pairs == 2 * 81 and b.context_tokens == 2 * 81
    # ten steps on (k = 11), request 1 attends 80 + 11 keys, and so does the idle slot
    assert b.next_steps(1, 80 + 10 + 1, 10).attn_pairs == 2 * 91


def test_static_rejects_outputs_beyond_the_reserved_slot():
    pol = StaticPolicy(max_num_seqs=2, batch_timeout_s=0.0, max_output_tokens=100, max_context_tokens=4096)
    assert pol.admission_error(10, 100) is None
    assert "max_output_tokens" in pol.admission_error(10, 101)


# ------------------------------------------------------------------ P/D split decisions
class _Rep:
    def __init__(self, free, waiting=()):
        self.kv = BlockAllocator(100, 16)
        self.kv.num_empty = free
        self.waiting = deque(waiting)
        self.waiting_blocks = sum(self.kv.blocks_for(r.num_tokens) for r in waiting)


def test_decode_replica_is_the_one_with_most_free_kv_that_fits():
    reps = [_Rep(10), _Rep(50), _Rep(50), _Rep(5)]
    assert pick_decode_replica(reps, 20) == 1
    assert pick_decode_replica(reps, 49) == 1  # one block stays spare
    assert pick_decode_replica(reps, 50) is None


def test_hand_offs_leave_room_for_requests_preempted_on_the_decode_side():
    preempted = Request(0, 0.0, 300, 50)
    preempted.num_output_done = 20  # must recompute 320 tokens = 20 blocks
    reps = [_Rep(50, [preempted]), _Rep(40)]
    # replica 0 has room 50 - 20 - 1 = 29, replica 1 has 39
    assert pick_decode_replica(reps, 30) == 1
    assert pick_decode_replica(reps, 39) == 1 and pick_decode_replica(reps, 40) is None


def test_link_figures_and_transfer_time():
    bw, lat = link_figures(Link(), GPUS["h100-sxm"], tp=2)
    assert bw == 2 * 400e9 / 8 and lat == 20e-6  # 400 Gb/s per GPU, two ranks in parallel
    bw, lat = link_figures(Link(type="intra_node"), GPUS["h100-sxm"], tp=1)
    assert bw == GPUS["h100-sxm"].link_bw_bytes_per_s
    assert transfer_time_s(1e9, 1e10, 1e-3) == np.float64(0.101)


def test_mapping_blocks_others_already_map_needs_no_free_block():
    kv = BlockAllocator(4, 16, prefix_caching=True)
    a = Request(0, 0.0, 64, 10, prefix_group=0, prefix_tokens=32)
    assert kv.grow(a, 64) and kv.num_free == 0  # 2 shared + 2 own: the replica is full
    b = Request(1, 0.0, 64, 10, prefix_group=0, prefix_tokens=32)
    assert kv.cached_prefix_blocks(b) == (2, 0)
    assert kv.grow(b, 32)  # a prefix hit on blocks a maps: no free block needed
    assert kv.num_used == 4 and not kv.grow(b, 33)


# ------------------------------------------------------------------ preemption with the decode set whole
def _decoding(rid, prompt, done, bs=16):
    r = Request(rid, 0.0, prompt, 500)
    r.num_output_done, r.num_computed_tokens = done, prompt + done - 1
    r.kv_blocks = -(-r.num_computed_tokens // bs)
    return r


def _prefilling(rid, prompt, computed, bs=16):
    r = Request(rid, 0.0, prompt, 50)
    r.num_computed_tokens, r.kv_blocks = computed, -(-computed // bs)
    return r


def _both_ways(pol, members, tail, free, host_free=0, waiting=()):
    """The policy's decision with ``members`` as the engine's decode set and with the whole running
    list, on a cache with ``free`` free blocks."""
    from servesim.policies.base import DecodeSet

    def state(set_view):
        kv = BlockAllocator(400, 16)
        kv.num_empty = free
        if not set_view:
            return ReplicaState(members + tail, deque(waiting), kv, host_free_blocks=host_free)
        need = sum(-(-(m.num_computed_tokens + 1) // 16) - m.kv_blocks for m in members)
        dec = DecodeSet(len(members), sum(m.num_computed_tokens for m in members), need,
                        sum(m.prompt_tokens for m in members), 0, 0, sum(m.num_computed_tokens for m in members))
        return ReplicaState(list(tail), deque(waiting), kv, host_free_blocks=host_free, decoding=dec,
                            materialize=lambda: members + tail)
    return pol.next_batch(state(True)), pol.next_batch(state(False))


def _same(a, b):
    for f in ("num_seqs", "num_tokens", "prefill_tokens", "decode_tokens", "context_tokens", "attn_pairs", "stop"):
        assert getattr(a, f) == getattr(b, f), f
    assert [id(r) for r in a.preempted] == [id(r) for r in b.preempted]
    assert [id(r) for r in a.swap_out] == [id(r) for r in b.swap_out]
    assert not a.admitted and not b.admitted  # (nothing is admitted in a step that preempts)


def test_preempting_the_newest_outside_the_decode_set_keeps_it_whole():
    """The decode set needs 3 blocks (each member at a block boundary), 2 are free: the newest
    running request, a prefill chunk outside the set, is preempted for it, as ``_one_by_one``
    does on the running list (the third member would preempt it there), and the set stays whole."""
    members = [_decoding(0, 100, 13), _decoding(1, 100, 29), _decoding(2, 100, 45)]  # c = 112, 128, 144
    t1, t2 = _decoding(3, 200, 5), _prefilling(4, 1000, 512)
    pol = ContinuousPolicy(max_num_batched_tokens=512, chunked=True)
    with_set, listed = _both_ways(pol, members, [t1, t2], free=2)
    assert with_set.set_seqs == 3 and [r.request_id for r in with_set.preempted] == [4]
    assert [(r.request_id, q) for r, q in with_set.items] == [(3, 1)]
    _same(with_set, listed)
    # swapping: the victim goes to host memory when it fits there, in both
    pol = ContinuousPolicy(max_num_batched_tokens=512, chunked=True, preemption="swap")
    _same(*_both_ways(pol, members, [t1, t2], free=2, host_free=100))


def test_a_chunk_that_does_not_fit_preempts_the_newest_then_itself():
    """Outside the set, a prefill chunk needing 32 blocks with none free preempts the newest
    running request (2 blocks), then itself; the set decodes alone."""
    members = [_decoding(0, 100, 2), _decoding(1, 100, 3)]  # no block needed
    t1, t2 = _prefilling(2, 1000, 512), _decoding(3, 20, 2)
    pol = ContinuousPolicy(max_num_batched_tokens=512, chunked=True)
    with_set, listed = _both_ways(pol, members, [t1, t2], free=0)
    assert with_set.set_seqs == 2 and [r.request_id for r in with_set.preempted] == [3, 2]
    assert with_set.items == ()
    _same(with_set, listed)


def test_a_victim_inside_the_decode_set_is_decided_on_the_running_list():
    """When the newest requests outside the set do not free enough, the next victim would be a
    member: the running list decides (the set dissolves), as before; and another victim order
    (largest KV first) always does."""
    members = [_decoding(0, 100, 13), _decoding(1, 100, 29)]
    t1 = _decoding(2, 5, 2)  # 1 block: not enough for the set's 2 with none free; a member is next
    pol = ContinuousPolicy(max_num_batched_tokens=512, chunked=True)
    kv = BlockAllocator(400, 16)
    kv.num_empty = 0
    from servesim.policies.base import DecodeSet
    dissolved = []
    state = ReplicaState([t1], deque(), kv, decoding=DecodeSet(2, 112 + 128, 2, 200, 0, 0, 240),
                         materialize=lambda: dissolved.append(1) or members + [t1])
    pol.next_batch(state)
    assert dissolved
    members2 = [_decoding(0, 100, 13)]
    pol = ContinuousPolicy(max_num_batched_tokens=512, chunked=True, victim="largest_kv")
    dissolved.clear()
    state = ReplicaState([t1], deque(), kv, decoding=DecodeSet(1, 112, 1, 100, 0, 0, 112),
                         materialize=lambda: dissolved.append(1) or members2 + [t1])
    pol.next_batch(state)
    assert dissolved
