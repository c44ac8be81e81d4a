"""The packaged scenario library: every file validates, and its resolved form loads back the same."""

from importlib import resources

import pytest
import yaml

from servesim.cli.main import main
from servesim.inputs.scenario import load_scenario, scenario_from_dict, scenario_to_yaml
from servesim.simulation import prepare

LIBRARY = ("default", "chat", "coding", "long-context", "bursty", "offline-batch", "multi-class", "closed-loop",
           "diurnal", "pd-split", "interactive-batch")


def path(name):
    return str(resources.files("servesim.scenarios") / f"{name}.yaml")


@pytest.mark.parametrize("name", LIBRARY)
def test_library_scenario_validates_and_round_trips(name, capsys):
    s = load_scenario(path(name))
    prepare(s)
    assert scenario_from_dict(yaml.safe_load(scenario_to_yaml(s))) == s  # the written scenario.yaml reruns it
    assert main(["validate", path(name)]) == 0
    assert "ok" in capsys.readouterr().out


def test_library_uses_the_new_workload_features():
    w = {name: load_scenario(path(name)).workload for name in LIBRARY}
    assert w["coding"].preset == "azure_code" and w["coding"].arrival.process == "on_off"
    assert w["long-context"].prompt_tokens.p99 is not None
    assert w["offline-batch"].arrival.process == "all_at_once"
    assert [c.name for c in w["multi-class"].classes] == ["chat", "summarize"]
    assert w["closed-loop"].arrival.process == "closed_loop"
    assert w["diurnal"].arrival.process == "sinusoidal"
    assert load_scenario(path("pd-split")).policy.name == "pd_split"
    ib = w["interactive-batch"].classes
    assert [(c.name, c.priority) for c in ib] == [("chat", 0), ("batch", 1)] and ib[0].tenant != ib[1].tenant
