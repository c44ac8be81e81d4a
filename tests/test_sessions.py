"""Multi-turn sessions and block-hash traces: the prefix cache is driven by real reuse."""

import json

import numpy as np
import pytest

from servesim.core.kv import BlockAllocator
from servesim.core.request import Request
from servesim.errors import InputError
from servesim.inputs.sessions import Sessions
from servesim.inputs.traces import read_trace
from servesim.inputs.workload import generate
from servesim.simulation import simulate
from tests.conftest import make_scenario

SESSION = {"workload.num_requests": 60, "workload.arrival": {"process": "poisson", "rate_rps": 0.5},
           "workload.prompt_tokens": {"dist": "uniform", "min": 50, "max": 400},
           "workload.output_tokens": {"dist": "uniform", "min": 20, "max": 300},
           "workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 6}, "think_time_s": 2.0},
           "policy.prefix_caching": True}


def sessions_of(sc, seed=0):
    return generate(sc.workload, np.random.default_rng(seed), 8192)


def test_a_turns_prompt_is_the_conversation_so_far():
    src = sessions_of(make_scenario(**SESSION))
    assert isinstance(src, Sessions)
    i = src.next_session()
    s = src.session(i)
    assert len(s.prompts) >= 2
    for k in range(1, len(s.prompts)):
        # the previous prompt and reply, plus a new message of 50..400 tokens
        new = s.prompts[k] - s.prompts[k - 1] - s.outputs[k - 1]
        assert 50 <= new <= 400


def test_sessions_are_reproducible_and_count_turns():
    sc = make_scenario(**SESSION)
    a, b = simulate(sc), simulate(sc)
    assert a.summary == {**b.summary, "wall_time_s": a.summary["wall_time_s"]}
    assert a.summary["num_requests"] == 60  # num_requests counts turns
    info = a.summary["workload"]["sessions"]
    assert info["turns_sent"] == 60 and info["abandoned"] == 0 and 10 <= info["started"] <= 30


def test_every_later_turn_hits_its_history_in_the_cache():
    """One session at a time with room to spare: turn k finds every full block of turn k - 1's
    prompt and reply (all but the reply's last token, whose KV is never computed)."""
    sc = make_scenario(**{**SESSION, "workload.arrival": {"process": "closed_loop", "clients": 1}})
    r = simulate(sc)
    req = r.requests
    order = np.argsort(req["arrival_s"])
    bs = 16
    hits = req["prefix_hit_tokens"][order]
    prompt, out = req["prompt_tokens"][order], req["output_tokens"][order]
    src = sessions_of(sc)
    k = 0
    checked = 0
    while k < len(order):
        s = src.session(src.next_session())
        for t in range(len(s.prompts)):
            if k >= len(order):
                break
            assert prompt[k] == s.prompts[t]
            if t == 0:
                assert hits[k] == 0
            else:
                known = (prompt[k - 1] + out[k - 1] - 1) // bs * bs
                assert hits[k] == min(known, (prompt[k] - 1) // bs * bs)
                checked += 1
            k += 1
    assert checked >= 20
    assert r.summary["kv"]["prefix_cache_hit_rate"] > 0.5


def test_the_cache_lowers_ttft_of_later_turns():
    on = simulate(make_scenario(**SESSION)).summary
    off = simulate(make_scenario(**{**SESSION, "policy.prefix_caching": False})).summary
    assert off["kv"]["prefix_cache_hit_tokens"] == 0
    assert on["kv"]["prefix_cache_hit_rate"] > 0.5
    assert on["ttft_s"]["mean"] < off["ttft_s"]["mean"]


def test_a_rejected_turn_ends_its_session():
    # prompts soon exceed what the replica may hold: the session gives up at the rejected turn
    sc = make_scenario(**{**SESSION, "memory.num_gpu_blocks": 60, "workload.num_requests": 40})
    r = simulate(sc)
    info = r.summary["workload"]["sessions"]
    assert r.summary["rejected"] > 0
    assert info["abandoned"] == r.summary["rejected"]
    assert r.summary["num_requests"] == info["turns_sent"] <= 40


def test_closed_loop_clients_run_sessions_back_to_back():
    sc = make_scenario(**{**SESSION, "workload.arrival": {"process": "closed_loop", "clients": 4}})
    r = simulate(sc)
    assert r.summary["completed"] == 60
    # at most 4 turns in flight at any time
    a, f = r.requests["arrival_s"], r.requests["finish_s"]
    events = sorted([(t, 1) for t in a] + [(t, -1) for t in f])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 4


@pytest.mark.parametrize("lead,kind,n,duration", [(0.0, "exponential", 30, None), (0.7, "exponential", 30, None),
                                                  (0.7, "fixed", 30, None), (8.0, "exponential", None, 4.0)])
def test_closed_loop_clients_beyond_the_turns_are_not_started_and_change_nothing(monkeypatch, lead, kind, n,
                                                                                 duration):
    """With fewer turns than clients, the sessions are handed out as the clients' calls at time 0
    would and only the clients whose first turn can go out are started; the turns, their order
    and times are those of starting every client (a million clients for a dozen turns took a
    minute and 1.5 GiB before). Sessions are built when first run, from the same draws."""
    from servesim.core import clients

    started = []
    only_some = clients._sessions_that_can_send

    def counted(source):
        picked = only_some(source)
        started.append(len(picked))
        return picked

    sc = make_scenario(**{**SESSION, "workload.num_requests": n, "workload.duration_s": duration, "workload.arrival": {
        "process": "closed_loop", "clients": 500, "think_time_s": lead, "think": kind}})
    monkeypatch.setattr(clients, "_sessions_that_can_send", counted)
    few = simulate(sc)
    monkeypatch.setattr(clients, "_sessions_that_can_send", lambda source: [None] * source.arrival.clients)
    every = simulate(sc)
    assert 0 < started[0] < 500 and started[0] <= (n or 500)
    assert few.summary["num_requests"] == every.summary["num_requests"] > 0
    for col in ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "prefix_hit_tokens", "finish_s",
                "status"):
        a, b = few.requests[col], every.requests[col]
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), col  # (unfinished: NaN times)
    assert np.array_equal(few.steps["start_s"], every.steps["start_s"])
    assert few.summary["workload"]["sessions"] == every.summary["workload"]["sessions"]


def test_session_fields_are_checked():
    with pytest.raises(InputError, match="sessions.turns is missing"):
        make_scenario(**{**SESSION, "workload.sessions": {"think_time_s": 1.0}})
    with pytest.raises(InputError, match="shared_prefix"):
        make_scenario(**{**SESSION, "workload.shared_prefix": {"tokens": 100}})
    with pytest.raises(InputError, match="think_time_s"):
        make_scenario(**{**SESSION, "workload.sessions": {"turns": {"dist": "fixed", "value": 2},
                                                          "think_time_s": -1}})


# ---------------------------------------------------------------- allocator: block keys
def test_cache_output_keeps_the_reply_blocks():
    kv = BlockAllocator(100, 16, prefix_caching=True)
    first = Request(0, 0.0, 40, 30, prefix_group=7, prefix_tokens=40, cache_output=True)
    assert kv.grow(first, 69)
    first.num_computed_tokens = 69  # 4 full blocks (64 tokens) and a partial one
    kv.free(first)
    # the 4 full blocks cached, after the partial one (freed first, a run no lookup hits)
    assert kv.num_free == 100 and kv.num_idle == 5 and [v for v in kv.evictable.values()] == [1] + [None] * 4
    nxt = Request(1, 0.0, 150, 10, prefix_group=7, prefix_tokens=150, cache_output=True)
    assert kv.cached_prefix_blocks(nxt) == (4, 4)
    other = Request(2, 0.0, 150, 10, prefix_group=8, prefix_tokens=150)
    assert kv.cached_prefix_blocks(other) == (0, 0)


def test_hash_id_keys_follow_the_last_id_a_block_reaches():
    kv = BlockAllocator(100, 16, prefix_caching=True)
    a = Request(0, 0.0, 100, 5, prefix_group=1, prefix_tokens=96, block_tags=(32, (1, 2, 3)))
    assert kv.grow(a, 100)
    same_start = Request(1, 0.0, 100, 5, prefix_group=1, prefix_tokens=96, block_tags=(32, (1, 2, 9)))
    # blocks 0-3 lie in ids 1 and 2; blocks 4-5 in id 9 (not cached)
    assert kv.cached_prefix_blocks(same_start) == (4, 0)
    moved = Request(2, 0.0, 100, 5, prefix_group=5, prefix_tokens=96, block_tags=(32, (5, 2, 3)))
    assert kv.cached_prefix_blocks(moved) == (0, 0)  # a chain hash: a different first id, nothing shared


# ---------------------------------------------------------------- Mooncake traces
def write_mooncake(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]},
    {"timestamp": 500, "input_length": 1200, "output_length": 30, "hash_ids": [0, 1, 3]},
    {"timestamp": 1500, "input_length": 700, "output_length": 10, "hash_ids": [4, 5]},
    {"timestamp": 2500, "input_length": 1050, "output_length": 25, "hash_ids": [0, 1, 2]},
]


def test_mooncake_trace_is_read_in_ms_with_its_hash_ids(tmp_path):
    t = read_trace(str(write_mooncake(tmp_path / "mc.jsonl", MOONCAKE_ROWS)))
    assert t.arrival_s.tolist() == [0.0, 0.5, 1.5, 2.5]
    assert t.prompt_tokens.tolist() == [1100, 1200, 700, 1050]
    assert t.hash_ids == ((0, 1, 2), (0, 1, 3), (4, 5), (0, 1, 2))
    # its columns named (all three, or one): still ms, not seconds (it was read as 0, 500, 1500, 2500 s)
    path = str(tmp_path / "mc.jsonl")
    named = read_trace(path, columns={"arrival": "timestamp", "prompt": "input_length", "output": "output_length"})
    assert named.arrival_s.tolist() == [0.0, 0.5, 1.5, 2.5] and named.hash_ids == t.hash_ids
    assert read_trace(path, columns={"output": "output_length"}).arrival_s.tolist() == [0.0, 0.5, 1.5, 2.5]


def test_mooncake_hash_ids_drive_prefix_hits(tmp_path):
    path = write_mooncake(tmp_path / "mc.jsonl", MOONCAKE_ROWS)
    sc = make_scenario(**{"workload.trace": {"path": str(path)}, "workload.arrival": None,
                          "workload.prompt_tokens": None, "workload.output_tokens": None,
                          "workload.num_requests": None, "policy.prefix_caching": True})
    r = simulate(sc)
    hits = r.requests["prefix_hit_tokens"].tolist()
    # the second request shares ids 0, 1 (1024 tokens); the third nothing; the fourth all three
    # ids, capped at its prompt less a token: 1040 = 65 blocks of 16
    assert hits == [0, 1024, 0, 1040]


def test_mooncake_rows_are_checked(tmp_path):
    bad = write_mooncake(tmp_path / "bad.jsonl", [MOONCAKE_ROWS[0], {**MOONCAKE_ROWS[1], "hash_ids": [0, "x"]}])
    with pytest.raises(InputError, match=r"bad.jsonl line 2: hash_ids must be a list of integers in \[0, "):
        read_trace(str(bad))
    # an id past int64 (it keys a KV block as one): refused, not an OverflowError later
    big = write_mooncake(tmp_path / "big.jsonl", [{**MOONCAKE_ROWS[0], "hash_ids": [2**63]}])
    with pytest.raises(InputError, match=r"big.jsonl line 1: hash_ids .* in \[0, 9223372036854775807\]"):
        read_trace(str(big))
    assert read_trace(str(write_mooncake(tmp_path / "edge.jsonl", [{**MOONCAKE_ROWS[0], "hash_ids": [2**63 - 1]}])))
    sc = make_scenario(**{"workload.trace": {"path": str(write_mooncake(tmp_path / "mc.jsonl", MOONCAKE_ROWS)),
                                             "hash_block_tokens": 8},
                          "workload.arrival": None, "workload.prompt_tokens": None,
                          "workload.output_tokens": None, "workload.num_requests": None})
    with pytest.raises(InputError, match="memory.block_size=16 exceeds workload.trace.hash_block_tokens=8"):
        simulate(sc)


def test_a_trace_that_is_not_utf8_names_the_byte(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,1\xff0,5\n")
    with pytest.raises(InputError, match=r"line 3: not UTF-8 text: byte offset 48 \(0xff\)"):
        read_trace(str(p))


def test_a_dataset_conversation_is_cut_at_the_turn_limit_without_max_turns(tmp_path):
    """sessions.max_turns: 'at most 10000 in any case'; synthetic turns were capped there, a
    ShareGPT conversation of more turns was replayed whole."""
    from servesim.inputs.scenario import MAX_TURNS

    turns = MAX_TURNS + 3
    conv = [m for _ in range(turns) for m in ({"from": "human", "value": "ab"}, {"from": "gpt", "value": "cd"})]
    path = tmp_path / "long.json"
    path.write_text(json.dumps([{"id": "long", "conversations": conv}]))
    kw = {"workload.num_requests": 1, "workload.arrival": {"process": "poisson", "rate_rps": 1.0},
          "workload.prompt_tokens": None, "workload.output_tokens": None,
          "workload.dataset": {"path": str(path)}, "workload.sessions": {}}
    src = generate(make_scenario(**kw).workload, np.random.default_rng(0), None)
    assert len(src.session(src.next_session()).prompts) == MAX_TURNS
    kw["workload.sessions"] = {"max_turns": 7}
    src = generate(make_scenario(**kw).workload, np.random.default_rng(0), None)
    assert len(src.session(src.next_session()).prompts) == 7
    # the check of turns asked for counts them as they run, capped: more than MAX_TURNS turns of
    # the one conversation are refused (counted uncapped, the run would have ended 3 short, silently)
    kw.update({"workload.sessions": {}, "workload.num_requests": MAX_TURNS + 1})
    with pytest.raises(InputError, match=f"exceeds the {MAX_TURNS} turns of the 1 conversations"):
        generate(make_scenario(**kw).workload, np.random.default_rng(0), None)
