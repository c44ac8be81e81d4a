"""Workload v0: arrival processes and length distributions, from one seeded Generator."""

import numpy as np
import pytest

from servesim.inputs.scenario import build, Workload
from servesim.inputs.workload import generate


def wl(**kw):
    data = {"num_requests": 20000, "arrival": {"process": "poisson", "rate_rps": 10.0},
            "prompt_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 5}}
    data.update(kw)
    return build(Workload, data, "workload")


def test_poisson_rate_and_cv():
    s = generate(wl(), np.random.default_rng(0))
    gaps = np.diff(np.concatenate([[0.0], s.arrival_s]))
    n = len(gaps)
    # mean gap 0.1 s; standard error of the mean 0.1/sqrt(n): 5 sigma
    assert gaps.mean() == pytest.approx(0.1, abs=5 * 0.1 / np.sqrt(n))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert np.all(np.diff(s.arrival_s) >= 0)


def test_fixed_and_gamma_arrivals():
    s = generate(wl(arrival={"process": "fixed", "rate_rps": 4.0}, num_requests=5), np.random.default_rng(0))
    assert s.arrival_s.tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])
    g = generate(wl(arrival={"process": "gamma", "rate_rps": 10.0, "cv": 3.0}), np.random.default_rng(1))
    gaps = np.diff(g.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)


def test_duration_only_and_both():
    s = generate(wl(num_requests=None, duration_s=100.0), np.random.default_rng(0))
    assert s.arrival_s.max() < 100.0 and len(s) == pytest.approx(1000, abs=5 * np.sqrt(1000))
    both = generate(wl(num_requests=50, duration_s=1.0), np.random.default_rng(0))
    assert len(both) < 50 and both.arrival_s.max() < 1.0


def test_length_distributions():
    rng = np.random.default_rng(0)
    s = generate(wl(prompt_tokens={"dist": "lognormal", "mean": 1000, "sigma": 0.5},
                    output_tokens={"dist": "uniform", "min": 10, "max": 20}), rng)
    assert s.prompt_tokens.mean() == pytest.approx(1000, rel=0.02)
    assert s.output_tokens.min() == 10 and s.output_tokens.max() == 20
    clipped = generate(wl(prompt_tokens={"dist": "lognormal", "mean": 1000, "sigma": 1.5, "max": 2000}), rng)
    assert clipped.prompt_tokens.max() == 2000 and clipped.prompt_tokens.min() >= 1
    normal = generate(wl(prompt_tokens={"dist": "normal", "mean": 100, "std": 50, "min": 5, "max": 150}), rng)
    assert normal.prompt_tokens.min() == 5 and normal.prompt_tokens.max() == 150


def test_same_seed_same_requests():
    a = generate(wl(prompt_tokens={"dist": "uniform", "min": 1, "max": 100}), np.random.default_rng(5))
    b = generate(wl(prompt_tokens={"dist": "uniform", "min": 1, "max": 100}), np.random.default_rng(5))
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)


def test_uniform_max_below_min_is_an_error():
    from servesim.errors import InputError
    with pytest.raises(InputError, match="workload.prompt_tokens.max must be >= workload.prompt_tokens.min"):
        wl(prompt_tokens={"dist": "uniform", "min": 10, "max": 5})


def test_packaged_scenarios_validate():
    from importlib import resources
    from servesim.inputs.scenario import load_scenario
    from servesim.simulation import prepare
    files = sorted(p for p in resources.files("servesim.scenarios").iterdir() if p.name.endswith(".yaml"))
    assert any(p.name == "default.yaml" for p in files)
    for p in files:
        prepare(load_scenario(str(p)))
