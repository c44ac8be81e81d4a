"""vLLM v0.4-v0.5's chunked-prefill scheduler (``Scheduler._schedule_chunked_prefill``) against
Sarathi-Serve's (``SarathiScheduler._schedule``), as the ``vllm-v0`` and ``sarathi-serve`` engine
profiles set them on a chunked-prefill policy: exact decisions on hand-worked states.

vLLM (vllm/core/scheduler.py at v0.4 and v0.5): ``_schedule_running`` asks ``_can_append_slots``
(a free block per sequence) of every running group, one mid-way through its prompt too; then the
swapped groups only if nobody was preempted, stopping at the first that cannot come back; then new
prompts in every case, the step's victims joining the waiting queue's front only after.
Sarathi-Serve asks the free block of decodes only, and puts a victim at the queue's front at once,
where it stops admission."""

import dataclasses
from collections import deque

from servesim.core.kv import BlockAllocator
from servesim.core.request import Request
from servesim.cost.engines import PROFILES
from servesim.policies.base import ReplicaState
from servesim.simulation import prepare
from tests.conftest import make_scenario
from tests.test_continuous_policy import running_req, scheduled


def _policy(engine, **kw):
    over = {"cost.engine": engine, "policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 64,
            "policy.max_num_seqs": 8, **kw}
    return prepare(make_scenario(**over)).pools[0].make_policy()


def _mid_prompt(rid, prompt, done, kv):
    """A request ``done`` tokens into its prompt, holding the blocks of its whole prompt (vLLM V0's
    and Sarathi-Serve's block managers allocate them at admission)."""
    r = Request(rid, 0.0, prompt, 50)
    assert kv.grow(r, prompt)
    r.num_computed_tokens = done
    return r


def test_profiles_carry_the_rules():
    assert {n for n, p in PROFILES.items() if p.prefill_needs_free_block} == {"vllm-v0"}
    assert {n for n, p in PROFILES.items() if p.admit_past_preemption} == {"vllm-v0"}
    v0, sarathi = _policy("vllm-v0"), _policy("sarathi-serve")
    assert v0.prefill_needs_free_block and v0.admit_past_preemption
    assert not sarathi.prefill_needs_free_block and not sarathi.admit_past_preemption
    assert not _policy("vllm-v1").admit_past_preemption


def test_vllm_v0_prompt_chunk_needs_a_free_block_at_its_turn():
    """No block free, two running requests mid-prompt (their blocks all taken at admission):
    vLLM V0's ``_can_append_slots`` fails for the first, so the newest is preempted and the first
    runs its chunk; Sarathi-Serve runs both chunks (it checks decodes only)."""
    def state():
        kv = BlockAllocator(num_blocks=6, block_size=16)
        running = [_mid_prompt(0, 48, 16, kv), _mid_prompt(1, 48, 16, kv)]
        assert kv.num_free == 0
        return ReplicaState(running, deque(), kv)

    b = _policy("vllm-v0").next_batch(state())
    assert scheduled(b) == {0: 32} and [r.request_id for r in b.preempted] == [1]
    b = _policy("sarathi-serve").next_batch(state())
    assert scheduled(b) == {0: 32, 1: 32} and not b.preempted


def test_vllm_v0_chunked_admits_in_a_step_that_preempted():
    """Three decodes on a full cache (none opening a block): the first finds no free block, the
    newest (r2) is preempted and frees 2. vLLM V0's chunked scheduler then schedules the waiting
    prompt on what is left (one block). Sarathi-Serve puts its victim at the queue's front at once
    and tries it first: its whole sequence needs the blocks it freed (plus the watermark's, a block
    from 100 blocks on), so the prompt behind it waits (servesim admits nothing in such a step;
    Sarathi-Serve with no watermark block, as here, would re-admit the victim itself)."""
    def state():
        kv = BlockAllocator(num_blocks=6, block_size=16)
        running = [running_req(i, 20, 1, kv) for i in range(3)]
        assert kv.num_free == 0
        return ReplicaState(running, deque([Request(9, 0.0, 10, 5)]), kv)

    v0 = _policy("vllm-v0")
    b = v0.next_batch(state())
    assert scheduled(b) == {0: 1, 1: 1, 9: 10}
    assert [r.request_id for r in b.preempted] == [2] and [r.request_id for r in b.admitted] == [9]
    assert b.stop is None
    for old in (dataclasses.replace(v0, admit_past_preemption=False), _policy("sarathi-serve")):
        b = old.next_batch(state())
        assert scheduled(b) == {0: 1, 1: 1} and [r.request_id for r in b.preempted] == [2]
        assert b.admitted == () and b.stop[0] == "preemption_step"
    # the prompt admitted takes the blocks of its whole prompt (whole_prompt_blocks): one of 40
    # tokens (3 blocks) does not fit the 2 the victim freed, and waits at the queue's head
    s = state()
    s.waiting = deque([Request(9, 0.0, 40, 5)])
    b = v0.next_batch(s)
    assert scheduled(b) == {0: 1, 1: 1} and b.admitted == () and b.stop[:2] == ("kv", s.waiting[0])


def test_vllm_v0_chunked_swapped_requests_do_not_hold_prompts_back():
    """A swapped-out request that cannot come back (its 2 blocks and a free one, of the 2 free):
    vLLM V0's chunked scheduler schedules the waiting prompt all the same; with swapped requests
    first it waited behind it."""
    def state():
        kv = BlockAllocator(num_blocks=4, block_size=16)
        running = [running_req(0, 20, 1, kv)]
        back = Request(1, 0.0, 20, 100)
        back.num_computed_tokens, back.num_output_done, back.swapped_blocks = 20, 1, 2
        return ReplicaState(running, deque([Request(9, 0.0, 10, 5)]), kv, swapped=deque([back]),
                            host_free_blocks=10)

    v0 = _policy("vllm-v0", **{"policy.preemption": "swap", "memory.swap_space_gib": 0.05})
    b = v0.next_batch(state())
    assert scheduled(b) == {0: 1, 9: 10} and b.swap_in == () and [r.request_id for r in b.admitted] == [9]
    b = dataclasses.replace(v0, admit_past_preemption=False).next_batch(state())
    assert scheduled(b) == {0: 1} and b.swap_in == () and b.admitted == () and b.stop[0] == "swapped_first"


def test_no_swap_in_in_a_step_that_preempted():
    """vLLM V0 swaps nothing in after a preemption ("it means we don't have space for swap-in"),
    though the victim's blocks would hold the swapped request: the prompt behind it is admitted."""
    kv = BlockAllocator(num_blocks=6, block_size=16)
    running = [running_req(i, 20, 1, kv) for i in range(3)]
    back = Request(5, 0.0, 4, 100)
    back.num_computed_tokens, back.num_output_done, back.swapped_blocks = 4, 1, 1
    s = ReplicaState(running, deque([Request(9, 0.0, 10, 5)]), kv, swapped=deque([back]), host_free_blocks=10)
    b = _policy("vllm-v0", **{"policy.preemption": "swap", "memory.swap_space_gib": 0.05}).next_batch(s)
    assert [r.request_id for r in b.preempted] == [2] and b.swap_in == ()
    assert scheduled(b) == {0: 1, 1: 1, 9: 10}


def test_a_prompt_holding_every_block_is_rejected_not_preempted_forever():
    """Under vllm-v0's chunked-prefill rule a running prompt chunk needs a free block at its turn; a
    prompt whose blocks are every block the replica has (a watermark of 0 blocks: 0.01 of fewer than
    100) never has one, and was preempted and admitted again forever (the run never ended). It is
    rejected on arrival, naming the rule; a prompt one block smaller is served, and one computed in
    its admission step is not this rule's. (A SIGALRM turns the old endless run into a failure.)"""
    import signal

    from servesim.simulation import simulate

    def run(prompt, budget=64):
        sc = make_scenario(**{"cost.engine": "vllm-v0", "policy.name": "chunked_prefill",
                              "policy.max_num_batched_tokens": budget, "memory.num_gpu_blocks": 10,
                              "workload.num_requests": 1,
                              "workload.prompt_tokens": {"dist": "fixed", "value": prompt},
                              "workload.output_tokens": {"dist": "fixed", "value": 1}})
        old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("run never ended")))
        signal.alarm(20)
        try:
            return simulate(sc)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    res = run(150)  # (10 blocks of 16 tokens: every one)
    s = res.summary
    assert (s["completed"], s["rejected"], s["unfinished"]) == (0, 1, 0)
    reason = str(res.requests["reason"][0])
    assert "needs 10 KV blocks, every one" in reason and "free block at its turn" in reason
    assert "max_num_batched_tokens=64" in reason
    assert run(140).summary["completed"] == 1  # (9 blocks: one left free)
    # (computed whole in its admission step: not this rule's; 150 + 1 tokens still outgrow the cache
    # for a decode, the existing rule that keeps a block free for a chunked recompute)
    assert "every one" not in str(run(150, budget=256).requests["reason"][0])
