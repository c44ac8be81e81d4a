"""Per-phase profiling (summary.json ``profile``) and its one-line diagnosis, on three crafted
scenarios: queue-bound, prefill-bound and decode memory-bound."""

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.cli.main import format_summary
from servesim.outputs.profile import PHASES, comm_seconds, diagnose
from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario

QUEUE_BOUND = {  # 10x more work arriving than one replica with 8 slots can serve
    "workload.num_requests": 120, "workload.arrival": {"process": "poisson", "rate_rps": 100.0},
    "workload.prompt_tokens": {"dist": "uniform", "min": 256, "max": 1024},
    "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 128}, "policy.max_num_seqs": 8}
PREFILL_BOUND = {  # long prompts, two output tokens, light load: TTFT is the prefill itself
    "workload.num_requests": 20, "workload.arrival": {"process": "poisson", "rate_rps": 0.5},
    "workload.prompt_tokens": {"dist": "fixed", "value": 7000}, "workload.output_tokens": {"dist": "fixed", "value": 2}}
DECODE_BOUND = {  # short prompts, long outputs, light load: a small decode batch reading all weights per token
    "workload.num_requests": 20, "workload.arrival": {"process": "poisson", "rate_rps": 0.5},
    "workload.prompt_tokens": {"dist": "fixed", "value": 64}, "workload.output_tokens": {"dist": "fixed", "value": 400}}


@pytest.mark.parametrize("overrides, bottleneck, words", [
    (QUEUE_BOUND, "queueing", "TTFT dominated by queueing"),
    (PREFILL_BOUND, "prefill", "TTFT dominated by prefill compute"),
    (DECODE_BOUND, "decode_memory", "memory-bound at"),
])
def test_diagnosis_names_the_bottleneck(overrides, bottleneck, words):
    s = simulate(make_scenario(**overrides)).summary
    d = s["profile"]["diagnosis"]
    assert d["bottleneck"] == bottleneck, d["line"]
    assert words in d["line"]
    text = format_summary(s)
    assert f"diagnosis     {d['line']}" in text and "profile" in text


def test_decode_bound_line_reports_small_batch_and_mbu():
    s = simulate(make_scenario(**DECODE_BOUND)).summary
    dec = s["profile"]["decode"]
    assert dec["compute_bound_share"] == 0.0 and dec["mean_batch_size"] < 4
    assert f"batch small (mean {dec['mean_batch_size']:.1f}), memory-bound at {dec['mbu'] * 100:.0f}% MBU" in \
        s["profile"]["diagnosis"]["line"]


def test_each_profile_line_says_the_phase_bound():
    """The printed profile gave MFU and MBU per phase but not which roof bound the phase's steps
    (summary.json's compute_bound_share): a long-prompt run's prefill and a small decode batch
    read alike but for two percentages. Each line now says the bound most of its steps hit, with
    their share when not all."""
    from servesim.outputs.profile import bound_text, format_profile

    assert bound_text(1.0) == "compute-bound" and bound_text(0.0) == "memory-bound"
    assert bound_text(0.85) == "compute-bound (85% of steps)" and bound_text(0.38) == "memory-bound (62% of steps)"
    assert bound_text(0.999) == "compute-bound" and bound_text(None) == ""
    said = {}
    for name, over in (("prefill", PREFILL_BOUND), ("decode", DECODE_BOUND)):
        s = simulate(make_scenario(**over)).summary
        lines = {ln[14:22].strip(): ln for ln in format_profile(s)}
        for k in PHASES:
            if s["profile"][k]["steps"]:
                share = s["profile"][k]["compute_bound_share"]
                assert lines[k].endswith(", " + bound_text(share)), lines[k]
        said[name] = lines[name]
    assert said["prefill"].endswith("compute-bound")  # (7,000-token prompts)
    assert said["decode"].endswith("memory-bound")  # (a decode batch of a few sequences)


def test_phase_figures_add_up_to_the_run():
    res = simulate(make_scenario(**{"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 256}))
    s, st = res.summary, res.steps
    p = s["profile"]
    assert sum(p[k]["steps"] for k in PHASES) == len(st["duration_s"]) == s["phases"]["steps"]
    assert sum(p[k]["share_of_steps"] for k in PHASES) == pytest.approx(1.0)
    assert sum(p[k]["share_of_busy"] for k in PHASES) == pytest.approx(1.0)
    assert sum(p[k]["busy_s"] for k in PHASES) == pytest.approx(st["duration_s"].sum())
    assert sum(p[k]["prefill_tokens"] for k in PHASES) == s["phases"]["prefill_tokens"]
    assert sum(p[k]["decode_tokens"] for k in PHASES) == s["phases"]["decode_tokens"]
    assert p["mixed"]["steps"] == s["phases"]["mixed_steps"] > 0
    assert p["prefill"]["busy_s"] == pytest.approx(s["phases"]["prefill_time_s"])
    assert p["comm_s"] == 0.0  # TP 1, PP 1
    for k in PHASES:
        assert 0.0 <= p[k]["mfu"] <= 1.0 and 0.0 <= p[k]["mbu"] <= 1.0
        assert 0.0 <= p[k]["kv_usage_mean"] <= p[k]["kv_usage_max"] <= 1.0


def test_comm_time_is_the_cost_models_per_step():
    sc = make_scenario(**{"hardware.tp": 2, "workload.num_requests": 10})
    res = simulate(sc)
    cm = prepare(sc).cost_model
    st = res.steps
    comm = comm_seconds(st, [cm])
    for i in (0, len(comm) // 2, len(comm) - 1):
        b = synthetic_batch(prefill=[(int(st["prefill_tokens"][i]), 0)] if st["prefill_tokens"][i] else [],
                            decode_contexts=[0] * int(st["decode_tokens"][i]))
        assert comm[i] == pytest.approx(cm.step_time(b).comm_s, rel=1e-12) and comm[i] > 0
    assert res.summary["profile"]["comm_s"] == pytest.approx(comm.sum())
    assert res.summary["profile"]["comm_s"] < st["duration_s"].sum()


def _fake(queue, ttft, comm_share=0.0, completed=1):
    phase = {"share_of_busy": 0.0, "kv_usage_max": 0.1, "busy_s": 0.0, "prefill_tokens": 0, "mfu": 0.1, "mbu": 0.5,
             "compute_bound_share": 0.0, "mean_batch_size": 100.0}
    prof = {k: dict(phase) for k in PHASES}
    prof["decode"]["share_of_busy"] = 1.0
    prof["comm_share"] = comm_share
    summ = {"completed": completed, "num_requests": 1, "ttft_s": {"mean": ttft}, "queue_s": {"mean": queue},
            "utilization": {"busy_fraction": 0.9}}
    return summ, prof


def test_rule_order_and_remaining_rules():
    assert diagnose(*_fake(0.0, 0.1, completed=0), 256)["bottleneck"] == "none"
    assert diagnose(*_fake(0.06, 0.1, comm_share=0.5), 256)["bottleneck"] == "queueing"  # queueing first
    assert diagnose(*_fake(0.01, 0.1, comm_share=0.5), 256)["bottleneck"] == "communication"
    s, p = _fake(0.01, 0.1)
    p["decode"]["compute_bound_share"] = 0.9
    assert diagnose(s, p, 256)["bottleneck"] == "decode_compute"
    assert "batch 100.0" in diagnose(s, p, 256)["line"]  # not small: 100 >= 256 / 4
    p["decode"]["kv_usage_max"] = 0.99
    assert "capped by KV capacity" in diagnose(s, p, 256)["line"]


def test_queue_bound_with_full_kv_says_so():
    s = simulate(make_scenario(**{**QUEUE_BOUND, "policy.max_num_seqs": 256, "memory.num_gpu_blocks": 100})).summary
    d = s["profile"]["diagnosis"]
    assert d["bottleneck"] == "queueing" and "KV cache full" in d["line"]
    assert np.isfinite(s["profile"]["decode"]["kv_usage_mean"])
