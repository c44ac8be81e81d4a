import numpy as np
import pytest

from servesim.inputs.overrides import with_values
from servesim.inputs.scenario import scenario_from_dict
from servesim.inputs.workload import RequestSpecs

BASE = {
    "name": "test",
    "seed": 0,
    "model": "meta-llama/Meta-Llama-3-8B",
    "hardware": {"gpu": "h100-sxm"},
    "policy": {"name": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
    "workload": {
        "num_requests": 50,
        "arrival": {"process": "poisson", "rate_rps": 4.0},
        "prompt_tokens": {"dist": "uniform", "min": 16, "max": 512},
        "output_tokens": {"dist": "uniform", "min": 1, "max": 64},
    },
}


# a synchronous engine without an API server (vLLM V0's loop, the engine's own timestamps): for
# tests that work the core loop's times out by hand or against queueing theory, prompts batched with
# the decodes (policy.prefill_first false: vllm-v0's own default, null, runs prompt-only steps)
SYNC = {"cost.engine": "vllm-v0", "cost.api_server": False, "policy.prefill_first": False}


def make_scenario(**overrides):
    """The BASE scenario with dotted-key overrides, e.g. make_scenario(**{"policy.max_num_seqs": 1})."""
    return scenario_from_dict(with_values(BASE, overrides))


def policy_mix_kw(policy, max_num_seqs, budget, preemption, prefix_caching, blocks, router, duration,
                  replicas, spec):
    """Scenario overrides for the property tests' random draws: any policy (P/D: one prefill
    replica plus ``replicas`` decode ones), router, preemption mode, KV size, cut-off and
    speculative decoding (on the policies that take it)."""
    kw = {
        "policy.name": policy, "policy.max_num_seqs": max_num_seqs, "policy.max_num_batched_tokens": budget,
        "policy.preemption": preemption, "policy.prefix_caching": prefix_caching and policy != "static",
        "memory.num_gpu_blocks": blocks, "memory.swap_space_gib": 0.05, "cluster.router": router,
        "workload.duration_s": duration, "workload.num_requests": 10,
    }
    if policy == "pd_split":
        kw["policy.prefill"] = {"replicas": 1, "policy": "chunked_prefill" if budget < 1000 else "continuous"}
        kw["policy.decode"] = {"replicas": replicas}
    else:
        kw["cluster.replicas"] = replicas
    if spec is not None and policy in ("continuous", "chunked_prefill"):
        kw["policy.spec"] = {"draft": "ngram", "num_speculative_tokens": spec, "acceptance_rate": 0.7}
    return kw


def two_classes(chat_share: float = 0.7) -> dict:
    """Scenario overrides for an interactive + batch mix: ``chat`` (priority 0, TTFT SLO 0.5 s,
    tenant a) and ``batch`` (priority 1, long prompts, TTFT SLO 10 s, tenant b)."""
    return {"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.classes": [
        {"name": "chat", "share": chat_share, "priority": 0, "tenant": "a", "slo": {"ttft_s": 0.5},
         "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6, "max": 2000},
         "output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 0.6, "max": 400}},
        {"name": "batch", "share": 1 - chat_share, "priority": 1, "tenant": "b", "slo": {"ttft_s": 10.0},
         "prompt_tokens": {"dist": "lognormal", "mean": 2000, "sigma": 0.5, "max": 5000},
         "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.5, "max": 800}}]}


def specs(rows):
    """RequestSpecs from (arrival_s, prompt_tokens, output_tokens) rows."""
    a, p, o = zip(*rows)
    return RequestSpecs(np.array(a, float), np.array(p, np.int64), np.array(o, np.int64))


@pytest.fixture
def scenario_factory():
    return make_scenario


def interrupt_run_point(monkeypatch, at: int):
    """Ctrl-C at a study's ``at``-th point (``executors.run_point`` raises KeyboardInterrupt on that
    call, runs the others); returns the real ``run_point``, to put back for a resume."""
    import servesim.studies.executors as ex

    real, calls = ex.run_point, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(ex, "run_point", interrupted)
    return real
