"""Scheduling beyond batching: queue orders and aging, preemption victims, priority preemption
of running requests, the output-length predictor, admission control and the new routers."""

import dataclasses
import math
import re
from collections import deque

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.core.batch import synthetic_batch
from servesim.core.cluster import Cluster
from servesim.core.gateway import OutputPredictor, predicted_ttft_s
from servesim.core.kv import BlockAllocator
from servesim.core.replica import KeyedQueue
from servesim.core.request import Request
from servesim.core.router import ClassAware, PowerOfTwo
from servesim.errors import InputError
from servesim.inputs.scenario import Predictor
from servesim.policies.base import PriorityCount, ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.outputs.recorder import Recorder
from servesim.policies.queues import QueueKey
from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario, specs, two_classes


def req(rid, arrival=0.0, prompt=100, out=50, priority=0):
    r = Request(rid, arrival, prompt, out)
    r.priority = priority
    return r


def running(rid, prompt, emitted, kv, priority=0, arrival=0.0):
    """A request that prefilled its prompt and emitted ``emitted`` tokens, its KV taken from ``kv``."""
    r = req(rid, arrival, prompt, 10_000, priority)
    r.num_output_done = emitted
    r.num_computed_tokens = prompt + emitted - 1
    assert kv.grow(r, r.num_computed_tokens)
    return r


def queue(order, reqs, aging_s=None):
    q = KeyedQueue(QueueKey(order, aging_s))
    for r in reqs:
        q.append(r)
    return q


def state(run, waiting, kv, prio=True):
    count = None
    if prio:
        count = PriorityCount()
        for r in run:
            count.add(r.priority)
    return ReplicaState(run, waiting, kv, running_priorities=count)


# ---------------------------------------------------------------- orders
def test_each_order_ranks_what_it_says():
    a, b, c = req(0, 0.0, prompt=900, priority=2), req(1, 1.0, prompt=100, priority=0), req(2, 2.0, 500, priority=0)
    a.predicted_output_tokens, b.predicted_output_tokens, c.predicted_output_tokens = 10, 400, 40
    a.deadline_s, b.deadline_s, c.deadline_s = 9.0, 5.0, math.inf
    ids = lambda q: [r.request_id for r in q]  # noqa: E731
    assert ids(queue("priority", [a, b, c])) == [1, 2, 0]  # priority, then arrival
    assert ids(queue("sjf", [a, b, c])) == [1, 2, 0]
    assert ids(queue("sjf_predicted", [a, b, c])) == [0, 2, 1]
    assert ids(queue("edf", [a, b, c])) == [1, 0, 2]  # no deadline: last


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 3), st.integers(1, 5000)), min_size=2, max_size=12),
       st.floats(0.1, 20), st.sampled_from(["priority", "sjf"]))
def test_aging_keys_order_the_queue_as_the_effective_keys_would_at_any_time(rows, aging_s, order):
    """The static key base + arrival / aging_s sorts waiting requests exactly as the effective
    key base - (t - arrival) / aging_s does at any time t (the t term is common to all)."""
    reqs = [req(i, a, prompt=p, priority=pr) for i, (a, pr, p) in enumerate(rows)]
    key = QueueKey(order, aging_s)
    base = (lambda r: r.priority) if order == "priority" else (lambda r: math.log2(r.prompt_tokens))
    for t in (max(a for a, _, _ in rows), 150.0, 1e4):
        effective = [base(r) - (t - r.arrival_s) / aging_s for r in reqs]
        static = [key(r) for r in reqs]
        for i in range(len(reqs)):
            for j in range(len(reqs)):
                if abs(effective[i] - effective[j]) > 1e-6:
                    assert (effective[i] < effective[j]) == (static[i] < static[j])


def test_aging_lets_a_long_wait_overtake_a_higher_priority():
    old_low = req(0, 0.0, priority=2)  # waited 10 s more than new_high: 2 levels at aging_s = 4
    new_high = req(1, 10.0, priority=0)
    assert [r.request_id for r in queue("priority", [old_low, new_high], aging_s=4.0)] == [0, 1]
    assert [r.request_id for r in queue("priority", [old_low, new_high], aging_s=6.0)] == [1, 0]
    # sjf: a 4000-token prompt that waited 2 x aging_s ranks with a 1000-token one
    long_, short = req(0, 0.0, prompt=4000), req(1, 2.0, prompt=1001)
    assert [r.request_id for r in queue("sjf", [long_, short], aging_s=1.0)] == [0, 1]


def test_priority_order_admits_high_priority_first_and_keeps_the_fast_path():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    low, high = req(0, 0.0, 300, priority=1), req(1, 1.0, 300, priority=0)
    pol = ContinuousPolicy(max_num_seqs=1, queue_order="priority")
    b = pol.next_batch(state([], queue("priority", [low, high]), kv))
    assert list(b.admitted) == [high] and b.stop[0] == "max_num_seqs" and b.stop[1] is low


def test_sjf_lowers_mean_ttft_but_starves_the_tail_unless_aged():
    """A small version of the evidence: near capacity, shortest prompt first cuts mean TTFT below
    FCFS and pushes p99 far above it (long prompts wait behind a stream of short ones); aging
    brings the tail back near FCFS's and keeps most of the mean's gain."""
    kw = {"workload.num_requests": 600, "policy.max_num_seqs": 16,
          "workload.prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1.0, "max": 7000},
          "workload.output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 0.5, "max": 400},
          # near this shape's capacity (one Llama-3-8B on H100 at the default engine profile: FCFS's
          # mean TTFT is several times its value at low load)
          "workload.arrival": {"process": "poisson", "rate_rps": 16.0}}
    ttft = {name: simulate(make_scenario(**kw, **{"policy.queue": q})).summary["ttft_s"]
            for name, q in (("fcfs", {}), ("sjf", {"order": "sjf"}), ("aged", {"order": "sjf", "aging_s": 0.5}))}
    assert ttft["sjf"]["mean"] < 0.8 * ttft["fcfs"]["mean"]
    assert ttft["sjf"]["p99"] > 2 * ttft["fcfs"]["p99"]
    assert ttft["aged"]["p99"] < 0.5 * ttft["sjf"]["p99"]
    assert ttft["aged"]["mean"] < ttft["fcfs"]["mean"]


# ---------------------------------------------------------------- victims
def test_kv_pressure_preempts_the_chosen_victim_anywhere_in_the_running_list():
    kv = BlockAllocator(num_blocks=10, block_size=16)
    # three running requests at a block boundary (16 computed tokens each: the next token needs a
    # block) with 3 + 2 + 2 blocks... and one free block only
    a = running(0, 48, 1, kv, priority=0, arrival=0.0)  # 48 tokens: 3 blocks, next needs a 4th
    b = running(1, 32, 1, kv, priority=2, arrival=1.0)  # 2 blocks, next needs a 3rd
    c = running(2, 32, 1, kv, priority=1, arrival=2.0)
    assert kv.num_free == 3
    kv.take(2)  # one block left: a takes it, b then needs a victim
    for victim, want in (("newest", [c]), ("lowest_priority", [b]), ("largest_kv", [a])):
        pol = ContinuousPolicy(victim=victim)
        batch = pol.next_batch(state([a, b, c], deque(), kv))
        assert list(batch.preempted) == want, victim
        assert {r.request_id for r, _ in batch.items}.isdisjoint({v.request_id for v in want})
        assert not batch.admitted  # no admission in a step that preempted
    # largest_kv preempted a, scheduled before b: its token and block came back, and b and c run
    batch = ContinuousPolicy(victim="largest_kv").next_batch(state([a, b, c], deque(), kv))
    assert sorted(r.request_id for r, _ in batch.items) == [1, 2]


def test_the_engine_removes_victims_wherever_they_are():
    kw = {**two_classes(), "memory.num_gpu_blocks": 500, "workload.num_requests": 120,
          "workload.arrival": {"process": "poisson", "rate_rps": 6.0}, "policy.preemption_victim": "lowest_priority"}
    res = simulate(make_scenario(**kw))
    cls = res.summary["classes"]
    assert res.summary["preemptions"] > 0 and res.summary["completed"] == 120
    # the batch class (priority 1) takes the preemptions even though it is not always the newest
    assert cls["batch"]["preemptions"] > cls["chat"]["preemptions"]


# ---------------------------------------------------------------- priority preemption of running requests
def test_a_waiting_request_preempts_strictly_lower_priority_running_ones():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    low = [running(i, 100, 5, kv, priority=1, arrival=float(i)) for i in range(2)]
    head = req(9, 5.0, 200, priority=0)
    pol = ContinuousPolicy(max_num_seqs=2, queue_order="priority")
    b = pol.next_batch(state(low, queue("priority", [head]), kv))
    assert list(b.preempted) == [low[1]]  # the lowest priority, latest arrival
    assert list(b.admitted) == [head] and not b.swap_out
    assert low[1] not in [r for r, _ in b.items]
    # equal priority: never; preempt_running false (vLLM V1): never
    eq = req(9, 5.0, 200, priority=1)
    assert not pol.next_batch(state(low, queue("priority", [eq]), kv)).preempted
    v1 = ContinuousPolicy(max_num_seqs=2, queue_order="priority", preempt_running=False)
    assert not v1.next_batch(state(low, queue("priority", [head]), kv)).preempted


def test_no_preemption_when_all_lower_priority_victims_would_not_make_room():
    kv = BlockAllocator(num_blocks=40, block_size=16)
    low = running(0, 100, 5, kv, priority=1)  # 7 blocks
    high = running(1, 400, 5, kv, priority=0)  # 26 blocks
    kv.take(kv.num_free)
    head = req(9, 5.0, 300, priority=0)  # needs 19 blocks; low frees only 7
    b = ContinuousPolicy(queue_order="priority").next_batch(state([high, low], queue("priority", [head]), kv))
    assert not b.preempted and not b.admitted and b.stop[0] == "kv"


def test_the_requests_admitted_ahead_of_the_head_count_when_making_room_for_it():
    """Two high-priority requests wait; the first is admitted, the second stops for KV. Whether
    preempting the lower-priority running request lets it in was judged on the free blocks before
    the first took its own: it 'fit without preempting anyone', so nobody was, and it waited while
    the lower-priority request ran."""
    kv = BlockAllocator(num_blocks=20, block_size=16)
    low = running(0, 160, 1, kv, priority=1)  # 10 blocks; its next token needs an 11th: 9 left
    first, second = req(1, 1.0, 100, priority=0), req(2, 2.0, 100, priority=0)  # 7 blocks each
    b = ContinuousPolicy(queue_order="priority").next_batch(state([low], queue("priority", [first, second]), kv))
    assert list(b.preempted) == [low] and list(b.admitted) == [first, second]
    assert [(r.request_id, q) for r, q in b.items] == [(1, 100), (2, 100)] and b.stop is None


def test_preempting_for_a_prefix_hit_counts_the_blocks_the_hit_maps_again():
    """A victim's prefix blocks that only it maps turn free when it is preempted, and a waiting
    request admitted on a hit on them maps them again: they count against the free blocks as any
    idle cached block does. (They were counted free twice: the policy admitted a second request
    into KV that was not free.)"""
    kv = BlockAllocator(num_blocks=7, block_size=16, prefix_caching=True)
    low = Request(0, 0.0, 100, 50, prefix_group=0, prefix_tokens=32)  # 7 blocks, 2 of them the prefix
    low.priority, low.num_computed_tokens, low.num_output_done = 1, 100, 1
    assert kv.grow(low, 100) and kv.num_free == 0
    head = Request(9, 5.0, 100, 50, prefix_group=0, prefix_tokens=32)  # hits the 2 prefix blocks
    second = req(10, 6.0, 20, priority=0)  # 2 blocks
    pol = ContinuousPolicy(queue_order="priority")
    b = pol.next_batch(state([low], queue("priority", [head, second]), kv))
    assert list(b.preempted) == [low] and list(b.admitted) == [head]
    assert list(b.prefix_hits) == [(head, 32)] and b.stop[:2] == ("kv", second)
    # what the replica applies fits: free the victim, map the hit, grow
    kv.free(low)
    assert kv.grow(head, 32) and kv.grow(head, 100) and kv.num_free == 0


def test_priority_keeps_interactive_ttft_where_fcfs_does_not():
    """A small version of the evidence scenario: at the same load the chat class meets its TTFT
    SLO far more often under the priority order (which may preempt batch requests) than FCFS."""
    kw = {**two_classes(0.6), "workload.num_requests": 300, "policy.max_num_seqs": 24,
          # near capacity at the default engine profile (FCFS's chat attainment well below 90%)
          "workload.arrival": {"process": "poisson", "rate_rps": 16.0}}
    fcfs = simulate(make_scenario(**kw)).summary["classes"]
    prio = simulate(make_scenario(**kw, **{"policy.queue": {"order": "priority"}})).summary["classes"]
    assert prio["chat"]["slo_attainment"] >= 0.95
    assert prio["chat"]["slo_attainment"] > fcfs["chat"]["slo_attainment"] + 0.2
    assert prio["chat"]["ttft_s"]["p99"] < fcfs["chat"]["ttft_s"]["p99"]


# ---------------------------------------------------------------- predictor
def test_predictor_is_exact_without_error_and_reproducible_per_request():
    exact = OutputPredictor(Predictor(sigma=0.0), seed=3)
    assert exact.predict(req(5, out=321)) == 321
    noisy = OutputPredictor(Predictor(sigma=0.5), seed=3)
    a = [noisy.predict(req(i, out=200)) for i in range(5000)]
    again = OutputPredictor(Predictor(sigma=0.5), seed=3)
    assert [again.predict(req(i, out=200)) for i in reversed(range(5000))] == a[::-1]  # order does not matter
    logs = np.log(np.array(a) / 200)
    assert abs(np.median(logs)) < 0.05 and np.std(logs) == pytest.approx(0.5, rel=0.05)


def test_bucket_predictor_names_the_true_range_with_the_given_accuracy():
    p = OutputPredictor(Predictor(kind="buckets", edges=(64, 256), accuracy=0.7), seed=0)
    assert p.middles == [32, 160, 384]  # [1, 64), [64, 256), from 256 up: 1.5 x the last edge
    got = [p.predict(req(i, out=100)) for i in range(20000)]  # true range [64, 256)
    share = np.mean(np.array(got) == 160)
    assert share == pytest.approx(0.7, abs=0.02)
    assert set(got) == {32, 160, 384}
    assert OutputPredictor(Predictor(kind="buckets", edges=(64,), accuracy=1.0), 0).predict(req(0, out=64)) == 96


def test_sjf_predicted_with_an_exact_predictor_beats_fcfs_mean_ttft():
    kw = {"workload.num_requests": 300, "workload.arrival": {"process": "poisson", "rate_rps": 30.0},
          "policy.max_num_seqs": 8, "workload.output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 1.0}}
    fcfs = simulate(make_scenario(**kw)).summary
    sjf = simulate(make_scenario(**kw, **{"policy.queue": {"order": "sjf_predicted", "predictor": {"sigma": 0}}}))
    assert sjf.summary["e2e_s"]["mean"] < 0.8 * fcfs["e2e_s"]["mean"]


# ---------------------------------------------------------------- admission control
def test_token_bucket_admits_the_burst_then_the_rate():
    kw = {"workload.num_requests": 40, "workload.arrival": {"process": "all_at_once"},
          "policy.admission": {"token_bucket": {"rate_rps": 5.0, "burst": 7}}}
    res = simulate(make_scenario(**kw))
    rq = res.requests
    assert (rq["status"] == "rejected").sum() == 33
    assert all(r.startswith("admission: token bucket empty") for r in rq["reason"][rq["status"] == "rejected"])
    # spread out: 1 s apart at 5 req/s, every request finds a token
    ok = simulate(make_scenario(**{**kw, "workload.arrival": {"process": "fixed", "rate_rps": 1.0}}))
    assert ok.summary["rejected"] == 0


def test_queue_caps_and_class_filter():
    kw = {**two_classes(0.5), "workload.num_requests": 60, "workload.arrival": {"process": "all_at_once"},
          "policy.admission": {"max_queue": 10, "classes": ["batch"]}}
    res = simulate(make_scenario(**kw))
    rq = res.requests
    rejected = rq["status"] == "rejected"
    assert set(rq["class"][rejected]) == {"batch"} and rejected.sum() > 0
    assert all("policy.admission.max_queue=10" in r for r in rq["reason"][rejected])
    tok = simulate(make_scenario(**{**kw, "policy.admission": {"max_queued_tokens": 5000}})).requests
    assert (tok["status"] == "rejected").sum() > 0


@pytest.mark.parametrize("pp", [1, 2])
def test_a_queue_cap_rejection_names_the_replica_its_row_names(pp):
    """The reason names the replica by the number requests.csv gives it: with pipeline virtual
    engines (pp 2, overlapped) replica 1 is engines 2-3, and its rejections said 'replica 1' on
    rows whose replica column read 2. Caps on the queued tokens say it the same way."""
    for adm, rule in (({"max_queue": 3}, "requests already wait on"),
                      ({"max_queued_tokens": 3000}, "prompt tokens already wait on")):
        res = simulate(make_scenario(**{"hardware.pp": pp, "cluster.replicas": 2, "workload.num_requests": 80,
                                        "cluster.router": "least_outstanding_tokens",
                                        "workload.arrival": {"process": "all_at_once"}, "policy.admission": adm}))
        rq = res.requests
        rejected = np.flatnonzero(rq["status"] == "rejected")
        assert pp in set(rq["replica"][rejected].tolist())  # (the second replica turned requests away)
        for i in rejected:
            r = int(rq["replica"][i])
            name = f"replica {r}" if pp == 1 else f"replica {r}, virtual engines {r}-{r + 1}"
            assert re.search(rf"{rule} {re.escape(name)}(?![\d-])", rq["reason"][i]), (r, rq["reason"][i])


def test_predicted_ttft_of_an_idle_replica_is_its_prefill_step():
    env = simpy.Environment()
    cl = Cluster(env, prepare(make_scenario()), Recorder(), 0)
    rep = cl.replicas[0]
    one = rep.cost_model.step_time(synthetic_batch([(1000, 0)], [])).time_s
    assert predicted_ttft_s(req(0, prompt=1000), rep) == one
    for i in range(5):
        rep.submit(req(i + 1, prompt=3000))  # FCFS: 15,000 prompt tokens ahead
    assert predicted_ttft_s(req(0, prompt=1000), rep) > 8 * one


def test_ttft_admission_holds_goodput_past_capacity():
    """Past capacity FCFS queues grow and TTFT misses its SLO for most requests; shedding by the
    predicted TTFT keeps the admitted ones within it (a small version of the evidence)."""
    kw = {"workload.num_requests": 600, "slo": {"ttft_s": 0.5}, "policy.max_num_seqs": 32,
          "workload.prompt_tokens": {"dist": "uniform", "min": 500, "max": 1500},
          "workload.output_tokens": {"dist": "uniform", "min": 50, "max": 150}}
    goodput = {}
    for rate in (20.0, 60.0):
        for shed in (False, True):
            extra = {"policy.admission": {"ttft_slo": True, "ttft_slo_share": 0.6}} if shed else {}
            s = simulate(make_scenario(**kw, **extra, **{"workload.arrival": {"process": "poisson",
                                                                             "rate_rps": rate}})).summary
            goodput[rate, shed] = s["goodput_rps"]
    assert goodput[60.0, True] > 2 * goodput[60.0, False]  # shedding keeps goodput, FCFS collapses
    assert goodput[60.0, True] >= 0.8 * max(goodput[20.0, True], goodput[20.0, False])


# ---------------------------------------------------------------- routers
class _Rep:
    def __init__(self, load):
        self.outstanding_tokens = load


def test_power_of_two_takes_the_less_loaded_of_two_and_reads_only_them():
    reps = [_Rep(x) for x in (50, 10, 30, 20)]
    seen = []
    r = PowerOfTwo(np.random.default_rng(0))
    r.settle = seen.append
    picks = [r(reps, None) for _ in range(200)]
    assert len(seen) == 400 and all(seen[2 * k] != seen[2 * k + 1] for k in range(200))
    for k, p in enumerate(picks):
        i, j = seen[2 * k], seen[2 * k + 1]
        assert p == min((i, j), key=lambda x: reps[x].outstanding_tokens)
    assert 0 not in picks  # the most loaded never wins a pair
    again = PowerOfTwo(np.random.default_rng(0))
    assert [again(reps, None) for _ in range(200)] == picks


def test_class_aware_keeps_a_class_on_its_replicas():
    kw = {**two_classes(0.5), "cluster.replicas": 3, "cluster.router": "class_aware",
          "cluster.class_replicas": [{"name": "batch", "replicas": [2]}, {"name": "chat", "replicas": [0, 1]}],
          "workload.num_requests": 120}
    rq = simulate(make_scenario(**kw)).requests
    assert set(rq["replica"][rq["class"] == "batch"]) == {2}
    assert set(rq["replica"][rq["class"] == "chat"]) == {0, 1}
    ca = ClassAware()
    ca.configure(make_scenario(**kw))
    assert ca.allowed == [[0, 1], [2]]


# ---------------------------------------------------------------- input errors
@pytest.mark.parametrize("kw, says", [
    ({"policy.queue": {"order": "fcfs", "aging_s": 3}}, "cannot starve"),
    ({"policy.queue": {"order": "sjf_guess"}}, "policy.queue.order"),
    ({"policy.name": "static", "policy.queue": {"order": "priority"}}, "^policy.queue.order: static batching"),
    # (the field set is named: queue.order is the default fcfs here)
    ({"policy.name": "static", "policy.preemption_victim": "newest"}, "^policy.preemption_victim: static batching"),
    ({"policy.admission": {"classes": ["chat"], "max_queue": 5}}, "no request class 'chat'"),
    ({"cluster.router": "class_aware", "cluster.class_replicas": [{"name": "default", "replicas": [3]}]},
     "not a replica"),
    ({"cluster.replicas": 2, "cluster.class_replicas": [{"name": "default", "replicas": [1]}]},
     "only the class_aware router reads it"),
    # a class listed twice: the last entry held and the first was dropped without a word (found by
    # fuzzing contradicting fields through the CLI)
    ({"cluster.replicas": 2, "cluster.router": "class_aware",
      "cluster.class_replicas": [{"name": "default", "replicas": [0]}, {"name": "default", "replicas": [1]}]},
     r"^cluster.class_replicas\[1\].name: 'default' is listed twice \(cluster.class_replicas\[0\] lists it\); "
     r"give each class one entry with all of its replicas"),
    ({"policy.admission": {"ttft_slo": True}}, "no TTFT SLO"),
    ({"policy.admission": {"ttft_slo_share": 0.6}}, "ttft_slo is off"),
    ({"policy.admission": {"classes": ["default"]}}, "no rule is set"),
    # (0 rejected every request, each one as it arrived, before any step could admit it: refused
    # like max_queued_tokens: 0, and validate predicted only part of them)
    ({"policy.admission": {"max_queue": 0}}, r"^policy.admission.max_queue must be >= 1"),
    ({"policy.queue": {"order": "sjf_predicted", "predictor": {"kind": "buckets", "edges": [10, 5]}}},
     "rising strictly"),
    ({"policy.preemption_victim": "oldest"}, "policy.preemption_victim"),
    # (1e308 was kept as a 309-digit integer)
    ({"workload.classes": [{"name": "a", "share": 1, "priority": 1e308}]},
     r"workload.classes\[0\].priority must be >= -9223372036854775808 and <= 9223372036854775807"),
])
def test_bad_scheduling_fields_name_the_field(kw, says):
    with pytest.raises(InputError, match=says):
        make_scenario(**kw)


@pytest.mark.parametrize("order", ["fcfs", "sjf_predicted"])
@pytest.mark.parametrize("kind", ["lognormal", "buckets"])
def test_empty_predictor_edges_are_refused_under_every_order_and_kind(order, kind, capsys):
    """policy.queue.predictor.edges: [] is refused whatever the order and the kind, naming the field
    and what is valid: under fcfs (and kind lognormal) it was accepted, and sjf_predicted with kind
    lognormal stopped validate and run on an IndexError traceback building the predictor."""
    from servesim.cli.main import main

    rc = main(["validate", "default", "--set", f"policy.queue.order={order}", "--set",
               f"policy.queue.predictor.kind={kind}", "--set", "policy.queue.predictor.edges=[]"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "policy.queue.predictor.edges must list at least one edge, each >= 1, rising strictly" in err


def test_a_queue_of_one_is_the_smallest_max_queue():
    """max_queue: 1 keeps one request waiting (0, which rejected every request, is refused)."""
    sc = make_scenario(**{"workload.num_requests": 6, "workload.arrival": {"process": "fixed", "rate_rps": 1.0},
                          "policy.admission": {"max_queue": 1}})
    assert simulate(sc).summary["rejected"] == 0


def test_class_index_reaches_closed_loop_requests():
    kw = {**two_classes(0.5), "workload.num_requests": 40, "cluster.replicas": 2, "cluster.router": "class_aware",
          "cluster.class_replicas": [{"name": "batch", "replicas": [1]}, {"name": "chat", "replicas": [0]}],
          "workload.arrival": {"process": "closed_loop", "clients": 4}}
    rq = simulate(make_scenario(**kw)).requests
    assert (rq["replica"][rq["class"] == "batch"] == 1).all() and (rq["replica"][rq["class"] == "chat"] == 0).all()


def test_requests_from_specs_carry_their_class():
    rows = [(0.1 * i, 200, 20) for i in range(10)]
    sp = dataclasses.replace(specs(rows), class_index=np.arange(10) % 2, class_names=("chat", "batch"))
    kw = {**two_classes(), "cluster.replicas": 2, "cluster.router": "class_aware",
          "cluster.class_replicas": [{"name": "batch", "replicas": [1]}, {"name": "chat", "replicas": [0]}]}
    rq = simulate(make_scenario(**kw), specs=sp).requests
    assert rq["replica"].tolist() == [0, 1] * 5


@pytest.mark.parametrize("kw", [
    {"memory.num_gpu_blocks": 400, "policy.preemption": "recompute"},  # preempted requests go back to the queue
    {"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 256, "policy.prefix_caching": True,
     "memory.num_gpu_blocks": 600},
    {**two_classes(0.5), "policy.queue": {"order": "priority"}, "memory.num_gpu_blocks": 400},  # a keyed queue
    {"cost.engine": "vllm-v0", "cluster.replicas": 2, "cluster.router": "least_kv_usage",  # synchronous
     "memory.num_gpu_blocks": 300},
], ids=["recompute", "chunked_prefix", "priority", "sync_replicas"])
def test_admission_counters_match_the_queue(kw, monkeypatch):
    """Admission reads the replica's counters (O(1) per arrival) instead of summing its queue:
    at every decision they equal the sums over the waiting requests, and every waiting request
    has computed nothing (its tokens are all prompt still to prefill)."""
    from servesim.core import gateway
    from servesim.core.replica import Replica

    checked = []
    apply = Replica._apply

    def checked_apply(self, batch, now):
        queued = [*self.waiting, *self.incoming]
        assert self.waiting_tokens == sum(r.num_tokens for r in queued)
        assert all(r.num_computed_tokens == 0 for r in queued)
        probe = req(10**6, now, prompt=500)
        probe.cls = 0
        key = getattr(self.waiting, "key", None)
        # (ranked before it: its equals too, wherever they wait: they came first, and equals are
        # served first in, first out; the fast engine's runs move arrivals from ``incoming`` to
        # the queue later than the reference's steps, and the count must not depend on where
        # they are)
        ahead = queued if key is None else [r for r in queued if key(r) <= key(probe)]
        assert gateway.requests_ahead(probe, self) == (len(ahead), sum(r.num_tokens for r in ahead))
        checked.append(len(queued))
        return apply(self, batch, now)

    monkeypatch.setattr(Replica, "_apply", checked_apply)
    simulate(make_scenario(**{"workload.num_requests": 200,
                              "workload.arrival": {"process": "poisson", "rate_rps": 40.0},
                              "workload.prompt_tokens": {"dist": "uniform", "min": 200, "max": 1500},
                              "workload.output_tokens": {"dist": "uniform", "min": 20, "max": 200}, **kw}),
             engine="reference")
    assert max(checked) > 10  # queues formed
