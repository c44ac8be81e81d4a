"""policy.preset: vLLM V1's scheduler defaults, resolved per GPU and entry point."""

import pytest
import yaml

from servesim.errors import InputError
from servesim.inputs.scenario import load_scenario, scenario_from_dict, scenario_to_yaml
from tests.conftest import make_scenario

PRESET = {"policy": {"preset": "vllm_v1_serve"}}


@pytest.mark.parametrize("preset, gpu, tokens, seqs", [
    ("vllm_v1_serve", "h100-sxm", 8192, 1024),
    ("vllm_v1_serve", "h200", 8192, 1024),
    ("vllm_v1_serve", "mi300x", 8192, 1024),
    ("vllm_v1_serve", "a100-80g", 2048, 256),  # >= 70 GiB but an A100: the small defaults
    ("vllm_v1_serve", "l40s", 2048, 256),
    ("vllm_v1_offline", "h100-sxm", 16384, 1024),
    ("vllm_v1_offline", "a100-40g", 8192, 256),
])
def test_preset_resolves_per_gpu_and_entry_point(preset, gpu, tokens, seqs):
    p = make_scenario(**{"policy": {"preset": preset}, "hardware.gpu": gpu}).policy
    assert (p.name, p.max_num_batched_tokens, p.max_num_seqs, p.prefix_caching, p.preemption) == \
        ("chunked_prefill", tokens, seqs, True, "recompute")


def test_given_fields_win_and_the_written_scenario_reloads_the_same():
    sc = make_scenario(**{"policy": {"preset": "vllm_v1_serve", "max_num_seqs": 64}})
    assert sc.policy.max_num_seqs == 64 and sc.policy.max_num_batched_tokens == 8192
    again = scenario_from_dict(yaml.safe_load(scenario_to_yaml(sc)))
    assert again == sc


def test_a_wrong_preset_names_the_field():
    with pytest.raises(InputError, match=r"policy.preset: 'vllm_v1_srve' is not a policy preset.*vllm_v1_serve"):
        make_scenario(**{"policy": {"preset": "vllm_v1_srve"}})


def test_the_packaged_default_is_current_vllm():
    p = load_scenario().policy
    assert p.preset == "vllm_v1_serve"
    assert (p.name, p.max_num_batched_tokens, p.max_num_seqs, p.prefix_caching) == ("chunked_prefill", 8192, 1024, True)
