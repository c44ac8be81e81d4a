"""Engine profiles (``cost.engine``, ``sim/cost/engines.py``): selection, the overlap of CPU work
with the GPU step, CUDA-graph padding and launch-bound eager steps, and the API server's time in
the client-side TTFT and E2E."""

import dataclasses
import json

import numpy as np
import pytest

from servesim.cli.main import main
from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.cost.engines import (PROFILES, _sglang_sizes, _trt_llm_sizes, _vllm_v0_sizes, _vllm_v1_sizes,
                                   padded_tokens)
from servesim.inputs.specs import get_gpu, get_model
from servesim.simulation import prepare, simulate

L7, H100 = get_model("meta-llama/Llama-2-7b-hf"), get_gpu("h100-sxm")


def test_every_profile_prices_a_run_and_says_so(scenario_factory):
    for name, p in PROFILES.items():
        res = simulate(scenario_factory(**{"cost.engine": name, "workload.num_requests": 20}))
        cost = res.summary["cost"]["colocated"]
        assert cost["engine"] == name
        assert cost["overhead"]["overlap"] == p.overlap and cost["overhead"]["source"] == f"engine {name}"
        assert cost["cuda_graphs"]["steps"] == {"all": "all", "decode": "decode", "none": "none"}[p.graphs]
        assert res.summary["completed"] == 20


def test_the_default_is_vllm_v1_and_explicit_overheads_override(scenario_factory):
    pool = prepare(scenario_factory()).pools[0]
    assert pool.engine.profile.name == "vllm-v1"
    p = PROFILES["vllm-v0"]
    pool = prepare(scenario_factory(**{"cost.engine": "vllm-v0", "cost.per_seq_overhead_s": 3e-5,
                                       "cost.overhead_overlap": 0.5})).pools[0]
    cm = pool.cost_model
    assert (cm.step_overhead_s, cm.per_seq_overhead_s, cm.overlap) == (p.step_s, 3e-5, 0.5)
    assert pool.engine.overhead_source == "engine vllm-v0 (step), scenario (per sequence)"


def test_unknown_engine_is_exit_2_with_did_you_mean(tmp_path, capsys, scenario_factory):
    path = tmp_path / "s.yaml"
    path.write_text("model: meta-llama/Llama-2-7b-hf\nhardware: {gpu: h100-sxm}\ncost: {engine: trt-lm}\n"
                    "workload: {num_requests: 5, arrival: {process: poisson, rate_rps: 1},"
                    " prompt_tokens: {dist: fixed, value: 10}, output_tokens: {dist: fixed, value: 5}}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cost.engine: 'trt-lm' is not an engine profile" in err and "did you mean 'trt-llm'?" in err
    assert "\n" not in err.strip() and "Traceback" not in err
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--decode-batch", "4",
                 "--engine", "vllm-v2"]) == 2
    assert "--engine: 'vllm-v2' is not an engine profile" in capsys.readouterr().err


def test_overlap_hides_cpu_work_under_the_gpu_step():
    """A hand-worked step: 8 sequences decoding at context 500 on Llama-2-7B / H100, no graphs.
    The GPU's time g comes from the model without CPU work; CPU work c = 1 ms + 8 x 50 us = 1.4 ms.
    With overlap f the share (1 - f) c is on the critical path and f c hides under g:
    step = g + (1 - f) c + max(0, f c - g)."""
    batch = synthetic_batch((), [500] * 8)
    g = CostModel(L7, H100, step_overhead_s=0.0, per_seq_overhead_s=0.0).step_time(batch).time_s
    assert 4e-3 < g < 8e-3  # weight reads: ~13.5 GB at ~3 TB/s
    c = 1e-3 + 8 * 50e-6
    for f, visible in ((0.0, 1.4e-3), (0.75, 0.35e-3), (1.0, 0.0)):
        cost = CostModel(L7, H100, step_overhead_s=1e-3, per_seq_overhead_s=50e-6, overlap=f).step_time(batch)
        assert cost.time_s == pytest.approx(g + visible, rel=1e-12)
        assert cost.overhead_s == pytest.approx(visible, rel=1e-12, abs=1e-15)
    # CPU work longer than the GPU's step shows past it: at f = 1 the step is max(g, c); at
    # f = 0.75 a 20 ms CPU is 5 ms on the critical path, and its other 15 ms outlast g
    for f, want in ((1.0, 20e-3), (0.75, 5e-3 + 15e-3)):
        cost = CostModel(L7, H100, step_overhead_s=20e-3, per_seq_overhead_s=0.0, overlap=f).step_time(batch)
        assert cost.time_s == pytest.approx(want, rel=1e-12)
    assert c == pytest.approx(1.4e-3)


def test_capture_sizes():
    v1 = _vllm_v1_sizes(128, 1)  # max min(2 x 128, 512) = 256
    assert v1[:5] == (1, 2, 4, 8, 16) and v1[-3:] == (240, 248, 256) and len(v1) == 35
    v1 = _vllm_v1_sizes(1024, 1)  # capped at 512, by 16 above 256
    assert v1[-3:] == (480, 496, 512) and 264 not in v1 and 272 in v1 and len(v1) == 51
    assert _vllm_v1_sizes(101, 1)[-1] == 200  # 202 is not a size: the largest below it
    assert _vllm_v0_sizes(100, 1)[-1] == 104 and _vllm_v0_sizes(256, 1)[-1] == 256
    assert _trt_llm_sizes(256, 1)[-1] == 128
    assert _sglang_sizes(256, 2)[-1] == 256 and _sglang_sizes(256, 4)[-1] == 512 and 12 in _sglang_sizes(8, 1)
    assert [padded_tokens(v1, t) for t in (1, 3, 5, 83, 257, 512, 513)] == [1, 4, 8, 88, 272, 512, None]


def test_a_graphed_step_runs_its_tokens_padded():
    """83 decodes replay the 88-token graph: the linear layers (and FLOPs) of 88 tokens, attention
    of the 83 real ones; a decode-only profile runs a prefill step without a graph."""
    sizes = _vllm_v1_sizes(128, 1)
    graphed = CostModel(L7, H100, graph_sizes=sizes)
    plain = CostModel(L7, H100)
    b83, b88 = synthetic_batch((), [600] * 83), synthetic_batch((), [600] * 88)
    # FLOPs (one GPU): the layers of 88 tokens, attention and the LM head of 83 sequences
    layers88 = plain.step_time(b88).flops - plain._attention(b88, 88)[1] - plain._lm_head(88)[1]
    want = layers88 + graphed._attention(b83, 83)[1] + graphed._lm_head(83)[1]
    assert graphed.step_time(b83).flops == pytest.approx(want, rel=1e-12)
    assert graphed.step_time(b83).time_s > plain.step_time(b83).time_s
    assert graphed._graphed(300, True) == (300, False)  # above the largest size: no graph
    assert graphed._graphed(100, False) == (104, True)  # vLLM V1: piecewise graphs for mixed steps too
    decode_only = CostModel(L7, H100, graph_sizes=sizes, graph_mixed=False)
    assert decode_only._graphed(100, False) == (100, False)


def test_a_step_without_a_graph_waits_for_the_cpus_launches():
    """hf-eager: 32 layers x 1.225 ms of launches pace a small decode (the GPU's ~5 ms hides under
    them); a big prefill's kernels are longer than its launches."""
    eager = CostModel(L7, H100, step_overhead_s=0.0, per_seq_overhead_s=0.0, eager_layer_s=39.2e-3 / 32)
    assert eager.step_time(synthetic_batch((), [100] * 2)).time_s == pytest.approx(39.2e-3, rel=1e-12)
    big = synthetic_batch([(8000, 0)])
    assert eager.step_time(big).time_s == CostModel(L7, H100, step_overhead_s=0.0,
                                                    per_seq_overhead_s=0.0).step_time(big).time_s
    assert "launch" in eager.breakdown(synthetic_batch((), [100] * 2))


def test_hf_eager_attention_reads_the_growing_cache_three_times(scenario_factory):
    a = prepare(scenario_factory(**{"cost.engine": "hf-eager"})).cost_model.eff.attention
    b = prepare(scenario_factory()).cost_model.eff.attention
    assert a.memory == pytest.approx(b.memory / 3) and a.compute == b.compute


@pytest.fixture
def api_profile(monkeypatch):
    """vllm-v1 with a known API server (the shipped figures are fitted and may change)."""
    p = dataclasses.replace(PROFILES["vllm-v1"], api_request_s=0.010, api_per_token_s=2e-4)
    monkeypatch.setitem(PROFILES, "vllm-v1", p)
    return p


def test_api_server_time_is_in_ttft_and_e2e_and_reported(api_profile, scenario_factory, tmp_path):
    kw = {"workload.num_requests": 40}
    client = simulate(scenario_factory(**kw))
    engine = simulate(scenario_factory(**kw, **{"cost.api_server": False}))
    c, e = client.requests, engine.requests
    done = c["status"] == "completed"
    assert done.all() and (e["status"] == "completed").all()
    # the engine runs the same steps; the client hears of each token later
    assert np.array_equal(client.steps["duration_s"], engine.steps["duration_s"])
    api = 0.010 + 2e-4 * (c["output_tokens"] - 1)
    assert np.allclose(c["first_token_s"] - e["first_token_s"], 0.010, rtol=0, atol=1e-12)
    assert np.allclose(c["finish_s"] - e["finish_s"], api, rtol=0, atol=1e-12)
    assert np.allclose(c["api_s"], api, rtol=0, atol=1e-15) and np.isnan(e["api_s"]).sum() == 0
    s, s0 = client.summary, engine.summary
    assert s["ttft_s"]["mean"] == pytest.approx(s0["ttft_s"]["mean"] + 0.010)
    assert s["api_server_s"]["mean"] == pytest.approx(api.mean()) and s0["api_server_s"]["mean"] == 0.0
    assert s["cost"]["colocated"]["api_server"] == {"request_s": 0.010, "per_output_token_s": 2e-4}
    client.write(tmp_path)
    head = (tmp_path / "requests.csv").read_text().splitlines()[0].split(",")
    assert head[-2:] == ["api_s", "class"]
    assert json.loads((tmp_path / "summary.json").read_text())["api_server_s"]["mean"] == pytest.approx(api.mean())


def test_closed_loop_clients_think_after_the_api_server_delivers(api_profile, scenario_factory):
    """A client sends its next request after it has received the last token (client-side)."""
    res = simulate(scenario_factory(**{"workload.arrival": {"process": "closed_loop", "clients": 1,
                                                            "think_time_s": 0.0},
                                       "workload.num_requests": 5}))
    r = res.requests
    order = np.argsort(r["arrival_s"])
    assert np.allclose(r["arrival_s"][order][1:], r["finish_s"][order][:-1], rtol=0, atol=1e-9)


def test_async_scheduling_sees_an_arrival_one_step_later(scenario_factory):
    """Request 1 arrives in the middle of a step of request 0's decode: a synchronous engine
    (vllm-v0) schedules it at that step's end; with async scheduling (vllm-v1) that decision was
    made when the step started, so it joins a step later. An idle engine schedules at once."""
    from conftest import specs

    rows = [(0.0, 100, 200), (0.0501, 100, 5), (30.0, 100, 5)]
    out = {}
    for engine in ("vllm-v0", "vllm-v1"):
        res = simulate(scenario_factory(**{"cost.engine": engine, "cost.api_server": False}), specs=specs(rows))
        st, rq = res.steps, res.requests
        ends = st["start_s"] + st["duration_s"]
        k = int(np.searchsorted(ends, 0.0501))  # the step in flight when request 1 arrives
        assert st["start_s"][k] < 0.0501 < ends[k]
        sched = dict(zip(rq["request_id"].tolist(), rq["scheduled_s"].tolist()))
        out[engine] = (sched[1], ends[k], ends[k + 1])
        assert sched[2] == 30.0  # idle: at once
    assert out["vllm-v0"][0] == out["vllm-v0"][1]
    assert out["vllm-v1"][0] == out["vllm-v1"][2]


def test_sarathi_serve_is_vllm_v0s_cpu_work_without_graphs_and_with_nccl(scenario_factory):
    """Sarathi-Serve's artifact runtime (both sides of its comparison): vllm-v0's per-step CPU figures
    (Vidur's profile of that runtime), but every step eager (no CUDA graph captured anywhere) and its
    TP all-reduce torch.distributed's NCCL, launched from Python."""
    v0, ss = PROFILES["vllm-v0"], PROFILES["sarathi-serve"]
    assert (ss.step_s, ss.per_seq_s, ss.overlap) == (v0.step_s, v0.per_seq_s, v0.overlap)
    pools = {e: prepare(scenario_factory(**{"cost.engine": e, "hardware.tp": 2})).pools[0]
             for e in ("vllm-v0", "sarathi-serve")}
    assert pools["vllm-v0"].engine.graph_sizes and pools["sarathi-serve"].engine.graph_sizes == ()
    assert (pools["vllm-v0"].engine.allreduce, pools["sarathi-serve"].engine.allreduce) == ("custom", "nccl")
    cm = pools["sarathi-serve"].cost_model
    step = cm.step_time(synthetic_batch(decode_contexts=[100] * 4))
    # an eager decode step is at least the launches of every layer and its two all-reduces
    layers = cm.model.num_layers
    assert step.time_s >= layers * (ss.eager_layer_s + 2 * ss.eager_collective_s)
    assert step.time_s > pools["vllm-v0"].cost_model.step_time(synthetic_batch(decode_contexts=[100] * 4)).time_s
