"""``policy.prefill_first`` left null is the engine profile's: vLLM V0's scheduler without chunked
prefill (``_schedule_default`` at v0.4-v0.5: "Don't schedule decodes if prefills are scheduled";
``_schedule`` at v0.1-v0.3, returning the prompts alone) and Sarathi-Serve's copy of it never put a
prompt into a decode step, so ``vllm-v0``, ``vllm-v0.2``, ``vllm-v0.2.3`` and ``sarathi-serve``
run prompt-only steps unless the scenario says false; the other profiles (and chunked prefill,
static batching, P/D splits) mix them."""

import pytest

from servesim.cost.engines import PROFILES
from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario, specs

V0_FAMILY = {"vllm-v0", "vllm-v0.2", "vllm-v0.2.3", "sarathi-serve"}


def test_profiles_that_imply_prompt_only_steps():
    assert {n for n, p in PROFILES.items() if p.prompt_only_steps} == V0_FAMILY
    for name in PROFILES:
        pol = prepare(make_scenario(**{"cost.engine": name})).pools[0].make_policy()
        assert pol.prefill_first is (name in V0_FAMILY), name
        # the scenario's word wins either way
        for given in (True, False):
            pol = prepare(make_scenario(**{"cost.engine": name, "policy.prefill_first": given})).pools[0].make_policy()
            assert pol.prefill_first is given, name
        # nothing to run prompts before with chunked prefill
        assert prepare(make_scenario(**{"cost.engine": name, "policy.name": "chunked_prefill"})).pools[0] \
            .make_policy().prefill_first is False
    sc = make_scenario(**{"cost.engine": "vllm-v0"})
    assert sc.prefill_first_steps and not make_scenario().prefill_first_steps


# A (prompt 100, 30 out) arrives first and decodes; B (prompt 100) arrives while it does
ROWS = [(0.0, 100, 30), (0.05, 100, 5)]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllm_v0_runs_a_prompt_in_a_step_of_its_own_by_default(engine):
    def steps(**kw):
        sc = make_scenario(**{"cost.engine": "vllm-v0", "cost.api_server": False, "engine": engine,
                              "workload.num_requests": len(ROWS), **kw})
        st = simulate(sc, specs=specs(ROWS)).steps
        return [(int(p), int(d)) for p, d in zip(st["prefill_tokens"], st["decode_tokens"]) if p]

    # B's prompt runs alone (A's decode waits out the step), as vLLM V0 schedules it
    assert steps() == [(100, 0), (100, 0)]
    # policy.prefill_first false: B's prompt joins A's decode step (Orca's iteration-level batching)
    assert steps(**{"policy.prefill_first": False}) == [(100, 0), (100, 1)]
