"""Pipeline parallelism with overlapping micro-batches (``hardware.pp_overlap``, vLLM's virtual
engines, ``sim/pipeline.py``): exact event times on tiny traces, the stage split of a step's
time, routing inside a replica, KV split, and the throughput the overlap buys."""

import pytest

from servesim.core.batch import synthetic_batch
from servesim.cli.main import main
from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario, specs


def _pp(scenario_factory, pp=2, overlap=True, **kw):
    return scenario_factory(**{"hardware.pp": pp, "hardware.pp_overlap": overlap, **kw})


def test_stage_times_split_the_layers_and_place_embedding_and_lm_head(scenario_factory):
    """Llama-3-8B (32 layers, a 128k-token vocabulary) on PP 4: each stage its 8 layers' share,
    stage 1 also the embedding lookup, stage 4 the LM head, stages 1-3 the send to the next."""
    cm = prepare(_pp(scenario_factory, pp=4)).cost_model
    b = synthetic_batch(prefill=[(700, 0)], decode_contexts=[300] * 9)
    cost = cm.step_time(b)
    st = cm.stage_times(cost, b)
    assert cm.stage_layers() == [8, 8, 8, 8]
    assert len(st) == 4 and sum(st) == pytest.approx(cost.time_s - cost.overhead_s, rel=1e-12)
    ops = cm.breakdown(b)
    send = ops["pp_send"].time_s / 3
    assert st[1] == st[2]
    assert st[0] - st[1] == pytest.approx(ops["embedding"].time_s, rel=1e-9)
    assert st[3] - st[1] == pytest.approx(ops["lm_head"].time_s - send, rel=1e-9)
    layers = cost.time_s - cost.overhead_s - ops["pp_send"].time_s - ops["embedding"].time_s - ops["lm_head"].time_s
    assert st[1] == pytest.approx(layers / 4 + send, rel=1e-12)
    # a decode step reads weights: the LM head (128k x 4096, 2.4 layers' worth) makes the last
    # stage (8 layers + head) the slowest, by about its share of the weights
    d = synthetic_batch(decode_contexts=[300] * 64)
    sd = cm.stage_times(cm.step_time(d), d)
    w = cm.stage_weight_bytes()
    assert max(sd) == sd[3] and sd[3] / sd[1] == pytest.approx(w[3] / w[1], rel=0.1)
    one = prepare(_pp(scenario_factory, pp=1)).cost_model
    c1 = one.step_time(b)
    assert one.stage_times(c1, b) == [c1.time_s - c1.overhead_s]


@pytest.mark.parametrize("model,pp,layers", [
    ("meta-llama/Llama-2-70b-hf", 3, [27, 27, 26]),  # the remainder on the stages before the last
    ("meta-llama/Llama-2-70b-hf", 6, [13, 13, 13, 14, 14, 13]),
    ("microsoft/phi-2", 2, [16, 16]),
    ("meta-llama/Llama-3.2-1B", 2, [8, 8]),  # tied embeddings
])
def test_stage_layers_and_weights(model, pp, layers):
    from servesim.cost.roofline import CostModel
    from servesim.inputs.specs import DTYPE_BYTES, get_gpu, get_model

    m = get_model(model)
    cm = CostModel(m, get_gpu("a100-80g"), tp=2, pp=pp)
    assert cm.stage_layers() == layers and sum(layers) == m.num_layers
    w = cm.stage_weight_bytes()
    emb = m.vocab_size * m.hidden_size * DTYPE_BYTES["bf16"]
    layer = m.layer_weight_params() * DTYPE_BYTES["bf16"]
    assert w[0] == pytest.approx(layers[0] * layer + emb)
    assert w[-1] == pytest.approx(layers[-1] * layer + emb + m.hidden_size * DTYPE_BYTES["bf16"])
    # untied: the stages hold the model once; tied: the last stage keeps its own copy of the embedding
    extra = emb if m.tied_embeddings else 0
    assert sum(w) == pytest.approx(cm.weight_bytes + extra)
    assert CostModel(m, get_gpu("a100-80g"), tp=2).stage_weight_bytes() == [pytest.approx(cm.weight_bytes)]


def test_the_stage_that_fits_the_fewest_blocks_sizes_the_kv():
    """PP 2 of Llama-3-8B: both stages have 16 layers; the last also holds the 1 GiB LM head, so it
    fits fewer blocks, and every stage's pool is cut to its size."""
    from servesim.cost.roofline import CostModel
    from servesim.core.kv import GIB, size_kv
    from servesim.inputs.specs import get_gpu, get_model

    cm = CostModel(get_model("meta-llama/Meta-Llama-3-8B"), get_gpu("l40s"), tp=1, pp=2)
    cap = size_kv(cm, 0.9, 16, 1 * GIB)
    w = cm.stage_weight_bytes()
    assert w[1] > w[0] and cap.weight_bytes == w[1]
    assert cap.num_blocks == int((0.9 * cm.gpu.mem_bytes - w[1] - GIB) // (cm.kv_bytes_per_token_per_gpu(16) * 16))


def test_two_virtual_engines_overlap_exactly_as_the_stages_allow(scenario_factory):
    """Two one-token requests at t=0 on one PP=2 replica: engine 0 takes the first, engine 1 (fewer
    unfinished) the second. Both schedule at 0; after its overhead each wants stage 0: engine 0
    holds it for tau0 while engine 1 waits, then moves to stage 1 as engine 1 enters stage 0.
    Stage 1 (its layers and the LM head) takes longer than stage 0 (its layers, the embedding and
    the send), so engine 1 then waits for stage 1 too: it enters at tau0 + tau1, not 2 tau0."""
    sc = _pp(scenario_factory, **{"cost.api_server": False})  # the engine's own times
    P = 400
    res = simulate(sc, specs=specs([(0.0, P, 1), (0.0, P, 1)]))
    cm = prepare(sc).cost_model
    cost = cm.step_time(synthetic_batch(prefill=[(P, 0)]))
    tau0, tau1 = cm.stage_times(cost, synthetic_batch(prefill=[(P, 0)]))
    assert tau1 > tau0
    r = res.requests
    assert list(r["replica"]) == [0, 1]
    assert r["first_token_s"][0] == pytest.approx(cost.overhead_s + tau0 + tau1, rel=1e-12)
    assert r["first_token_s"][1] == pytest.approx(cost.overhead_s + tau0 + 2 * tau1, rel=1e-12)
    st = res.steps
    assert list(st["replica"]) == [0, 1]
    assert st["duration_s"][0] == pytest.approx(cost.time_s, rel=1e-12)  # no wait
    # waited tau0 for stage 0, then tau1 - tau0 for stage 1
    assert st["duration_s"][1] == pytest.approx(cost.time_s + tau1, rel=1e-12)
    # each stage worked both steps; the run ends with engine 1's token: the rest is idle
    end = cost.overhead_s + tau0 + 2 * tau1
    pl = res.summary["pipeline"]["colocated"]
    assert pl["replicas"] == 1 and pl["stages"] == 2
    assert pl["stage_busy_fraction"] == pytest.approx([2 * tau0 / end, 2 * tau1 / end], rel=1e-9)
    # without overlap: one scheduler, both prompts in one step that crosses both stages
    seq = simulate(_pp(scenario_factory, overlap=False, **{"cost.api_server": False}),
                   specs=specs([(0.0, P, 1), (0.0, P, 1)]))
    assert list(seq.requests["replica"]) == [0, 0]
    both = cm.step_time(synthetic_batch(prefill=[(P, 0), (P, 0)])).time_s
    assert list(seq.requests["first_token_s"]) == pytest.approx([both, both], rel=1e-12)


def test_virtual_engines_split_the_kv_and_the_gpus(scenario_factory):
    sc = _pp(scenario_factory, pp=2, **{"memory.num_gpu_blocks": 101, "cluster.replicas": 2})
    res = simulate(sc, specs=specs([(0.01 * i, 300, 40) for i in range(12)]))
    assert sorted(set(res.requests["replica"])) == [0, 1, 2, 3]  # 2 replicas x 2 engines
    assert res.summary["kv_capacity"]["colocated"]["blocks_per_replica"] == 101
    # 2 replicas, as kv_capacity and pipeline say (it read 4, the schedulers), over 4 schedulers
    assert res.summary["utilization"]["replicas"] == 2 and res.summary["utilization"]["virtual_engines"] == 4
    assert res.summary["pools"]["colocated"]["replicas"] == 2
    assert res.summary["utilization"]["busy_fraction"] == pytest.approx(
        res.steps["duration_s"].sum() / (4 * res.summary["sim_time_s"]))
    assert res.steps["kv_blocks_used"].max() <= 50  # each engine holds 101 // 2 blocks
    assert len(res.kv_blocks_in_use) == 4 and res.kv_blocks_in_use == [0] * 4
    # MFU is over the replicas' GPUs once: the engines' shares add up to the replica
    cm = prepare(sc).cost_model
    st = res.steps
    peak = cm.peak_flops * cm.num_gpus / 2
    assert res.summary["utilization"]["mfu"] == pytest.approx(st["flops"].sum() / (st["duration_s"] * peak).sum())


def test_requests_go_to_the_engine_with_fewest_unfinished(scenario_factory):
    # long requests arriving one by one: engines alternate; a short one finishing frees its engine
    rows = [(0.0, 100, 200), (0.001, 100, 200), (0.002, 100, 2), (0.5, 100, 50), (0.501, 100, 50)]
    res = simulate(_pp(scenario_factory), specs=specs(rows))
    rep = list(res.requests["replica"])
    assert rep[:3] == [0, 1, 0]
    # at 0.5 s the 2-token request is done: engine 0 and 1 have one unfinished each -> engine 0,
    # then engine 1 (engine 0 has two)
    assert res.requests["finish_s"][2] < 0.5
    assert rep[3:] == [0, 1]


def test_overlap_buys_throughput_where_stages_would_idle(scenario_factory):
    """PP=4: without overlap three of four stages idle during every step. Prefill-heavy work is
    compute-bound, so four micro-batches in the stages at once finish close to 4x sooner. Decode
    at a modest batch is weight-read-bound: every micro-batch re-reads its stage's weights, so
    splitting one batch of 64 into four of 16 buys little (only the KV reads and the compute
    spread out); at 256 sequences, where KV reads weigh more, it buys more."""

    def speedup(rows):
        kw = {"workload.num_requests": len(rows)}
        seq = simulate(_pp(scenario_factory, pp=4, overlap=False, **kw), specs=specs(rows))
        ovl = simulate(_pp(scenario_factory, pp=4, overlap=True, **kw), specs=specs(rows))
        assert (ovl.requests["status"] == "completed").all()
        return seq.requests["finish_s"].max() / ovl.requests["finish_s"].max()

    prefill = speedup([(0.0, 2000, 2)] * 64)
    decode64 = speedup([(0.0, 200, 300)] * 64)
    decode256 = speedup([(0.0, 200, 300)] * 256)
    assert 2.5 < prefill <= 4.0
    assert 1.0 < decode64 < decode256 < prefill


def test_cost_cli_shows_the_stage_split(capsys):
    import json

    args = ["cost", "--model", "meta-llama/Llama-2-70b-hf", "--gpu", "a100-80g", "--tp", "4", "--decode-batch", "8",
            "--context", "500", "--json"]
    assert main(args + ["--pp", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    st = out["pp_stage_times_s"]
    assert len(st) == 2 and st[1] > st[0]  # decode: the last stage's LM head outweighs the send
    assert sum(st) == pytest.approx(out["step_time_s"] - out["ops"]["overhead"]["time_s"], rel=1e-12)
    assert "pp_send" in out["ops"]
    assert main(args) == 0
    one = json.loads(capsys.readouterr().out)["pp_stage_times_s"]  # PP 1: the same layers, no send
    assert one == [pytest.approx(st[0] + st[1] - out["ops"]["pp_send"]["time_s"], rel=1e-9)]
    assert main(args + ["--pp", "81"]) == 2
    assert "--pp 81 must be between 1 and the model's 80 layers" in capsys.readouterr().err


def test_one_request_at_a_time_sees_no_difference(scenario_factory):
    """With a single request in the system the stages never contend: the virtual engines give
    exactly the one-step-at-a-time times."""
    rows = [(0.0, 500, 30), (5.0, 300, 20), (10.0, 50, 60)]
    a = simulate(_pp(scenario_factory, pp=4, overlap=True), specs=specs(rows))
    b = simulate(_pp(scenario_factory, pp=4, overlap=False), specs=specs(rows))
    assert a.requests["finish_s"][0] < 5.0 and a.requests["finish_s"][1] < 10.0
    for col in ("first_token_s", "finish_s"):
        assert list(a.requests[col]) == pytest.approx(list(b.requests[col]), rel=1e-12)
    assert list(a.steps["duration_s"]) == pytest.approx(list(b.steps["duration_s"]), rel=1e-9)


def test_each_virtual_engine_gets_its_share_of_kv_and_host_swap(scenario_factory):
    import simpy

    from servesim.core.cluster import Cluster
    from servesim.outputs.recorder import Recorder

    for overlap, engines in ((True, 3), (False, 1)):
        setup = prepare(_pp(scenario_factory, pp=3, overlap=overlap, **{"memory.num_gpu_blocks": 100}))
        cl = Cluster(simpy.Environment(), setup, Recorder(), 0)
        host = setup.pools[0].swap[0]
        assert len(cl.replicas) == engines and len(cl.entry) == 1
        assert [r.kv.num_blocks for r in cl.replicas] == [100 // engines] * engines
        assert [r.host_blocks for r in cl.replicas] == [host // engines] * engines
        assert sum(i.peak_flops for i in cl.infos) == pytest.approx(setup.cost_model.peak_flops * 3)


def test_virtual_engines_share_the_host_links():
    """Two engines that swap KV at the same time: the second copy waits for the first (they share
    the replica's PCIe links), while the stages are free to overlap."""
    import simpy

    from servesim.core.pipeline import Pipeline

    env = simpy.Environment()
    pipe = Pipeline(env, 2)
    done = []

    def engine(i):
        yield from pipe.swap(1.0)
        done.append(("copied", i, env.now))
        yield from pipe.traverse([0.5, 0.5])
        done.append(("stepped", i, env.now))

    env.process(engine(0))
    env.process(engine(1))
    env.run()
    assert sorted(done) == [("copied", 0, 1.0), ("copied", 1, 2.0), ("stepped", 0, 2.0), ("stepped", 1, 3.0)]


def test_swapping_virtual_engines_account_for_every_request(scenario_factory):
    sc = _pp(scenario_factory, pp=2, **{"memory.num_gpu_blocks": 24, "memory.swap_space_gib": 1.0,
                                        "policy.preemption": "swap", "workload.num_requests": 40})
    res = simulate(sc, specs=specs([(0.002 * i, 64, 120) for i in range(40)]))
    s = res.summary
    assert s["completed"] == 40 and s["preemptions"] > 0
    assert s["kv"]["swap_in_bytes"] > 0


def test_stages_serve_steps_first_come_first_served_and_count_busy_time_up_to_now():
    import simpy

    from servesim.core.pipeline import Pipeline

    env = simpy.Environment()
    pipe = Pipeline(env, 2)
    ends = {}

    def step(name, at, times):
        yield env.timeout(at)
        yield from pipe.traverse(times)
        ends[name] = env.now

    # A: stage 1 0-1, stage 2 1-3. B enters at 0.5: stage 1 once A leaves it (1-2), stage 2 once
    # A leaves that (3-3.5), although B reached it at 2.
    env.process(step("A", 0.0, [1.0, 2.0]))
    env.process(step("B", 0.5, [1.0, 0.5]))
    env.run(until=2.5)
    assert pipe.busy_s == pytest.approx([2.0, 1.5])  # stage 2 has worked 1-2.5 so far
    env.run(until=10)
    assert ends == {"A": 3.0, "B": 3.5}
    assert pipe.busy_s == pytest.approx([2.0, 2.5])


def test_a_request_too_big_for_a_virtual_engines_kv_says_the_engine_has_a_share():
    """A virtual engine holds 1/pp of the replica's KV blocks: a rejection said 'the replica has 10
    in all' of a replica given 20 (memory.num_gpu_blocks), which reads as a wrong count."""
    sc = make_scenario(**{"hardware.pp": 2, "memory.num_gpu_blocks": 20})
    reason = simulate(sc, specs=specs([(0.0, 100, 100)])).requests["reason"][0]
    # (its prompt fits an engine: it is served until its sequence outgrows the engine's share)
    assert "outgrew the KV cache" in reason and "prompt + output = 200 tokens needs 13 KV blocks" in reason
    assert "each of the replica's 2 virtual engines (hardware.pp with pp_overlap) has 10 of its blocks" in reason
    no_overlap = make_scenario(**{"hardware.pp": 2, "hardware.pp_overlap": False, "memory.num_gpu_blocks": 20})
    assert simulate(no_overlap, specs=specs([(0.0, 100, 100)])).requests["status"][0] == "completed"


def test_a_pd_split_with_pipelined_replicas_serves_and_predicts():
    """A P/D split with hardware.pp: its prefill pool's entry replica is a replica's virtual engines,
    which had no ``arrival_reason``: the run and validate's rejection count stopped with an
    AttributeError (found by tests/test_properties.py::test_invariants_long)."""
    sc = make_scenario(**{"policy.name": "pd_split", "policy.prefill": {"replicas": 1},
                          "policy.decode": {"replicas": 1}, "hardware.pp": 2})
    res = simulate(sc, specs=specs([(0.0, 1, 1), (0.0, 100, 20)]))
    assert list(res.requests["status"]) == ["completed", "completed"]
    from servesim.predictions import predict_rejections

    pred = predict_rejections(sc, specs=specs([(0.0, 1, 1), (0.0, 100, 20)]))
    assert pred is None or pred["rejected"] == 0
