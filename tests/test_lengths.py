"""Length models, presets and clipping to the context length."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from servesim.errors import InputError
from servesim.inputs.presets import PRESETS
from servesim.inputs.scenario import LognormalDist, Workload, build
from servesim.simulation import simulate
from servesim.inputs.workload import clip_to_context, generate, sample_lengths
from tests.conftest import make_scenario


def dist(d, path="workload.prompt_tokens"):
    data = {"arrival": {"process": "poisson", "rate_rps": 1.0}, "num_requests": 1,
            "prompt_tokens": d, "output_tokens": {"dist": "fixed", "value": 1}}
    return build(Workload, data, "workload").prompt_tokens


def draw(d, n=200_000, seed=0):
    return sample_lengths(dist(d), n, np.random.default_rng(seed))


def test_lognormal_by_median_and_p99_reproduces_them():
    n, median, p99 = 200_000, 1000.0, 4000.0
    x = draw({"dist": "lognormal", "median": median, "p99": p99}, n)
    sigma = math.log(p99 / median) / norm.ppf(0.99)
    # Standard error of a sample quantile: sqrt(p (1 - p) / n) / density there. For a lognormal,
    # density(x_p) = phi(z_p) / (x_p sigma), so the relative error is sqrt(p(1-p)/n) sigma / phi(z_p):
    # 0.19% at the median and 0.60% at p99 here; allow 4 of those (plus rounding to tokens).
    se50 = math.sqrt(0.25 / n) * sigma / norm.pdf(0)
    se99 = math.sqrt(0.99 * 0.01 / n) * sigma / norm.pdf(norm.ppf(0.99))
    assert np.median(x) == pytest.approx(median, rel=4 * se50)
    assert np.percentile(x, 99) == pytest.approx(p99, rel=4 * se99)


def test_lognormal_parameterizations_agree():
    by_mean = dist({"dist": "lognormal", "mean": 1000, "sigma": 0.5}).log_params()
    by_median = dist({"dist": "lognormal", "median": math.exp(by_mean[0]), "sigma": 0.5}).log_params()
    assert by_median == pytest.approx(by_mean)
    assert isinstance(dist({"dist": "lognormal", "mean": 1, "sigma": 1}), LognormalDist)


@pytest.mark.parametrize("d, message", [
    ({"dist": "lognormal", "mean": 100},
     "workload.prompt_tokens: give mean \\+ sigma, median \\+ sigma or median \\+ p99; got mean"),
    ({"dist": "lognormal", "median": 100, "p99": 50},
     "workload.prompt_tokens.p99 must be > workload.prompt_tokens.median"),
    ({"dist": "lognormal", "mean": 100, "sigma": 1, "p99": 500}, "got mean \\+ sigma \\+ p99"),
    ({"dist": "zipf", "s": 1.2, "min": 10, "max": 5},
     "workload.prompt_tokens.max must be >= workload.prompt_tokens.min"),
    ({"dist": "zipf", "s": 0, "max": 5}, "workload.prompt_tokens.s must be > 0 and <= 100, got 0"),
    ({"dist": "quantiles", "p": [0, 0.5], "tokens": [1, 2]}, "p must rise strictly from 0 to 1"),
    ({"dist": "quantiles", "p": [0, 1], "tokens": [5, 2]}, "tokens must be >= 1 and non-decreasing"),
    ({"dist": "quantiles", "p": [0, 0.5, 1], "tokens": [1, 2]}, "same length"),
    ({"dist": "quantiles", "p": [0, "x"], "tokens": [1, 2]}, r"workload.prompt_tokens.p\[1\] must be a number"),
    ({"dist": "empirical"}, "workload.prompt_tokens.path is missing"),
    ({"dist": "normal", "mean": 10, "std": -1}, "workload.prompt_tokens.std must be >= 0 and <= 2147483647, got -1"),
])
def test_length_fields_are_checked_with_their_path(d, message):
    with pytest.raises(InputError, match=message):
        dist(d)


def test_zipf_span_limit_is_the_one_the_reference_states():
    """zipf's max - min limit was enforced but not documented: the reference's max row states it."""
    from pathlib import Path

    dist({"dist": "zipf", "s": 1.2, "min": 5, "max": 10_000_005})
    with pytest.raises(InputError, match="max - min must be at most 10000000, got 10000001"):
        dist({"dist": "zipf", "s": 1.2, "min": 5, "max": 10_000_006})
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "scenario.md").read_text()
    zipf = page[page.index("### dist: zipf"):page.index("### dist: empirical")]
    assert "| `max` | integer | **required** | > 0, <= 2.14748e+09 | at most min + 10,000,000" in zipf


def test_zipf_frequencies():
    n, s, hi = 100_000, 1.5, 1000
    x = draw({"dist": "zipf", "s": s, "max": hi}, n)
    assert x.min() >= 1 and x.max() <= hi
    h = sum(k ** -s for k in range(1, hi + 1))
    for k in (1, 2, 10):
        p = k ** -s / h
        assert np.sum(x == k) == pytest.approx(n * p, abs=4 * math.sqrt(n * p * (1 - p)))  # binomial, 4 sigma


def test_zipf_far_from_one_keeps_its_shape():
    # k^-s underflowed to 0 for every k >= 20,000 at s = 100: the CDF was 0/0 and every draw min
    n, s, lo, hi = 50_000, 100.0, 20_000, 30_000
    x = draw({"dist": "zipf", "s": s, "min": lo, "max": hi}, n)
    k = np.arange(lo, hi + 1, dtype=float)
    w = np.exp(-s * np.log(k / lo))
    w /= w.sum()
    mean, sd = float((k * w).sum()), float(np.sqrt((k * k * w).sum() - (k * w).sum() ** 2))
    assert x.mean() == pytest.approx(mean, abs=4 * sd / math.sqrt(n))  # ~20,204, sd ~200
    assert np.mean(x == lo) == pytest.approx(w[0], abs=0.002)  # ~0.5%, not all of them


def test_empirical_from_a_file(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("tokens\n100\n200\n\n300\n")
    x = draw({"dist": "empirical", "path": str(f)}, 30_000)
    assert set(np.unique(x)) == {100, 200, 300}
    for v in (100, 200, 300):  # each 1/3; binomial 4 sigma
        assert np.sum(x == v) == pytest.approx(10_000, abs=4 * math.sqrt(30_000 * 2 / 9))
    c = tmp_path / "lengths.csv"
    c.write_text("a,len\nx,7\ny,9\n")
    assert set(draw({"dist": "empirical", "path": str(c), "column": "len"}, 100)) == {7, 9}


def test_empirical_file_errors_name_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("10\n20\n-3\n")
    with pytest.raises(InputError, match=r"bad.txt line 3: length must be a positive integer \(>= 1\), got -3"):
        draw({"dist": "empirical", "path": str(f)}, 10)
    with pytest.raises(InputError, match="cannot read lengths file"):
        draw({"dist": "empirical", "path": str(tmp_path / "missing.txt")}, 10)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(InputError, match="no lengths in the file"):
        draw({"dist": "empirical", "path": str(tmp_path / "empty.txt")}, 10)
    # a CSV given without its column: its rows were 'must be a positive integer, got '1,100'', no word
    # of the column field that reads it
    (tmp_path / "t.csv").write_text("id,tokens\n1,100\n")
    with pytest.raises(InputError, match=r"t.csv line 2: length must be a positive integer, got '1,100': one length "
                                         r"a line, or a CSV with a header and the length distribution's column:"):
        draw({"dist": "empirical", "path": str(tmp_path / "t.csv")}, 10)


def test_quantiles_dist_matches_its_table():
    x = draw({"dist": "quantiles", "p": [0, 0.5, 1], "tokens": [100, 200, 1000]}, 100_000)
    assert x.min() >= 100 and x.max() <= 1000
    assert np.median(x) == pytest.approx(200, rel=0.02)
    # mean of a piecewise-linear quantile function: 0.5 * 150 + 0.5 * 600 = 375; the std is 250,
    # so the standard error of the mean is 0.8: allow 4 of those plus rounding.
    assert x.mean() == pytest.approx(375, abs=4)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_expand_and_draw(name):
    data = {"preset": name, "num_requests": 20_000}
    if "arrival" not in PRESETS[name]:
        data["arrival"] = {"process": "poisson", "rate_rps": 1.0}
    w = build(Workload, data, "workload")
    s = generate(w, np.random.default_rng(0))
    table = PRESETS[name]["prompt_tokens"]
    assert np.median(s.prompt_tokens) == pytest.approx(table["tokens"][table["p"].index(0.5)], rel=0.03)


def test_preset_errors_and_overrides():
    with pytest.raises(InputError, match="workload.preset: 'azure_cov' is not a preset; \\(did you mean 'azure_conv'"):
        build(Workload, {"preset": "azure_cov", "num_requests": 1}, "workload")
    w = build(Workload, {"preset": "azure_conv", "num_requests": 1,
                         "output_tokens": {"dist": "fixed", "value": 3}}, "workload")
    assert w.output_tokens.value == 3 and w.arrival.process == "gamma"
    # a field of the preset's arrival changes just that (found by a user trial: --set
    # workload.arrival.rate_rps=5 on a preset scenario said "workload.arrival.process is missing")
    w = build(Workload, {"preset": "azure_code", "num_requests": 1, "arrival": {"rate_rps": 5.0}}, "workload")
    code = PRESETS["azure_code"]["arrival"]
    assert (w.arrival.process, w.arrival.rate_rps, w.arrival.on_s) == ("on_off", 5.0, code["on_s"])
    assert w.arrival.mean_rate_rps == pytest.approx(5.0 * code["on_s"] / (code["on_s"] + code["off_s"]))
    # another process (or length distribution) replaces the preset's
    w = build(Workload, {"preset": "azure_code", "num_requests": 1, "arrival": {"process": "poisson", "rate_rps": 3.0},
                         "prompt_tokens": {"dist": "fixed", "value": 100}}, "workload")
    assert w.arrival.process == "poisson" and not hasattr(w.arrival, "on_s")
    assert w.prompt_tokens.dist == "fixed" and w.output_tokens.dist == "quantiles"


def test_clip_to_context():
    p, o, c = clip_to_context(np.array([10, 9000, 8000, 100]), np.array([5, 10, 500, 8092]), 8192)
    assert p.tolist() == [10, 8191, 8000, 100]
    assert o.tolist() == [5, 1, 192, 8092]
    assert c.tolist() == [False, True, True, False]


def test_clipped_requests_are_counted_in_the_summary():
    # Llama-3-8B: 8192 tokens of context. Prompts uniform on 16..12000: P(prompt + 10 > 8192)
    # = (12000 - 8182) / 11985; the summary counts exactly the requests that were changed.
    wl = {"dist": "uniform", "min": 16, "max": 12000}
    sc = make_scenario(**{"workload.num_requests": 40, "workload.prompt_tokens": wl,
                          "workload.output_tokens": {"dist": "fixed", "value": 10}})
    res = simulate(sc)
    raw = generate(sc.workload, np.random.default_rng(sc.seed))  # the same draws, unclipped
    expected = int(np.sum(raw.prompt_tokens + 10 > 8192))
    assert expected > 0
    assert res.summary["workload"]["clipped_requests"] == expected
    assert res.summary["rejected"] == 0
    off = simulate(make_scenario(**{"workload.num_requests": 40, "workload.prompt_tokens": wl,
                                    "workload.output_tokens": {"dist": "fixed", "value": 10},
                                    "workload.clip_to_context": False}))
    assert off.summary["workload"]["clipped_requests"] == 0
    assert off.summary["rejected"] == expected
