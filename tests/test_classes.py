"""Request classes: mixing by share or by rate, per-class summaries that add up, per-class SLOs."""

import math

import numpy as np
import pytest

from servesim.errors import InputError
from servesim.inputs.scenario import Workload, build
from servesim.simulation import simulate
from servesim.inputs.workload import generate
from tests.conftest import make_scenario

CHAT = {"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 50, "max": 300},
        "output_tokens": {"dist": "uniform", "min": 10, "max": 60}}
BATCH = {"name": "batch", "prompt_tokens": {"dist": "fixed", "value": 3000},
         "output_tokens": {"dist": "fixed", "value": 100}}


def mixed(classes, **kw):
    data = {"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.classes": classes}
    data.update(kw)
    return make_scenario(**data)


def test_shares_split_the_arrivals():
    w = build(Workload, {"num_requests": 20_000, "arrival": {"process": "poisson", "rate_rps": 10.0},
                         "classes": [{**CHAT, "share": 3}, {**BATCH, "share": 1}]}, "workload")
    s = generate(w, np.random.default_rng(0))
    counts = np.bincount(s.class_index)
    # binomial(20000, 0.75): std 61; 4 sigma
    assert counts[0] == pytest.approx(15_000, abs=4 * math.sqrt(20_000 * 0.75 * 0.25))
    assert set(s.prompt_tokens[s.class_index == 1]) == {3000}
    assert s.prompt_tokens[s.class_index == 0].max() <= 300


def test_own_rates_merge_into_one_stream():
    classes = [{**CHAT, "rate_rps": 4.0}, {**BATCH, "arrival": {"process": "fixed", "rate_rps": 0.5}}]
    w = build(Workload, {"duration_s": 2000.0, "classes": classes}, "workload")
    s = generate(w, np.random.default_rng(0))
    assert np.all(np.diff(s.arrival_s) >= 0) and s.arrival_s.max() < 2000.0
    counts = np.bincount(s.class_index)
    assert counts[0] == pytest.approx(8000, abs=4 * math.sqrt(8000))  # Poisson count, 4 sigma
    assert counts[1] == 999  # 0.5 req/s, fixed: arrivals at 2, 4, ..., 1998


def test_per_class_summaries_add_up_and_use_their_own_slo():
    sc = mixed([{**CHAT, "share": 3, "slo": {"ttft_s": 0.02}}, {**BATCH, "share": 1}],
               **{"workload.num_requests": 200, "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
                  "slo": {"ttft_s": 5.0, "tpot_s": 0.05}})
    res = simulate(sc)
    s, cls = res.summary, res.summary["classes"]
    assert list(cls) == ["chat", "batch"]
    for key in ("num_requests", "completed", "rejected", "unfinished", "preemptions"):
        assert sum(c[key] for c in cls.values()) == s[key]
    assert sum(c["goodput_rps"] for c in cls.values()) == pytest.approx(s["goodput_rps"])
    assert sum(c["throughput_rps"] for c in cls.values()) == pytest.approx(s["throughput_rps"])
    # The overall attainment is the request-weighted mean of the classes' (each with its own SLO).
    weighted = sum(c["slo_attainment"] * c["num_requests"] for c in cls.values()) / s["num_requests"]
    assert s["slo_attainment"] == pytest.approx(weighted)
    assert cls["chat"]["slo"] == {"ttft_s": 0.02, "tpot_s": 0.05}
    assert cls["batch"]["slo"] == {"ttft_s": 5.0, "tpot_s": 0.05}
    # The class column says which is which, and agrees with the lengths.
    r = res.requests
    assert set(r["prompt_tokens"][r["class"] == "batch"]) == {3000}
    ttft = (r["first_token_s"] - r["arrival_s"])[r["class"] == "chat"]
    assert cls["chat"]["ttft_s"]["max"] == pytest.approx(np.nanmax(ttft))


def test_plain_workload_is_one_default_class(tmp_path):
    res = simulate(make_scenario(**{"workload.num_requests": 30}))
    assert list(res.summary["classes"]) == ["default"]
    c = res.summary["classes"]["default"]
    assert c["completed"] == res.summary["completed"] and c["ttft_s"] == res.summary["ttft_s"]
    assert c["slo_attainment"] == res.summary["slo_attainment"]
    out = res.write(tmp_path)
    header = (out / "requests.csv").read_text().splitlines()[0]
    assert header.endswith(",class")  # appended last


@pytest.mark.parametrize("classes, extra, message", [
    ([{**CHAT, "share": 1}, {**BATCH, "rate_rps": 1}], {}, "either every class has a share"),
    ([{**CHAT, "share": 1}, {**CHAT, "share": 1}], {}, r"workload.classes\[1\].name: 'chat' is used twice"),
    ([{**CHAT, "share": 1, "rate_rps": 2}], {}, r"workload.classes\[0\]: give exactly one of share, rate_rps, arrival"),
    ([{**CHAT, "share": -1}], {}, r"workload.classes\[0\].share must be > 0 and <= 1e\+06, got -1"),
    ([{**CHAT, "rate_rps": 1}], {"arrival": {"process": "poisson", "rate_rps": 1}}, "remove workload.arrival"),
    ([{"name": "x", "share": 1, "prompt_tokens": {"dist": "fixed", "value": 3}}], {},
     r"workload.classes\[0\].output_tokens is missing"),
    ([{**CHAT, "arrival": {"process": "closed_loop", "clients": 3}}], {}, "closed_loop is a workload-wide process"),
    ([{**CHAT, "share": 1, "slo": {"ttft_s": 0}}], {}, r"workload.classes\[0\].slo.ttft_s must be > 0"),
    ([], {}, "workload.classes must list at least one class"),
])
def test_class_fields_checked(classes, extra, message):
    data = {"num_requests": 10, "classes": classes, **extra}
    if "arrival" not in extra and classes and all("share" in c for c in classes):
        data["arrival"] = {"process": "poisson", "rate_rps": 1}
    with pytest.raises(InputError, match=message):
        build(Workload, data, "workload")


def test_mixed_classes_byte_identical(tmp_path):
    sc = mixed([{**CHAT, "share": 2}, {**BATCH, "share": 1}],
               **{"workload.num_requests": 60})
    a = simulate(sc).write(tmp_path / "a")
    b = simulate(sc).write(tmp_path / "b")
    assert (a / "requests.csv").read_bytes() == (b / "requests.csv").read_bytes()
    assert (a / "steps.csv").read_bytes() == (b / "steps.csv").read_bytes()


def test_shared_prefixes_per_class():
    # chat: its own 2 prefix groups of 500 tokens; batch: the workload's 3 groups of 100 tokens
    # (ids 0..2), so chat's groups are 3 and 4. The drawn prompt is what follows the prefix.
    w = build(Workload, {"num_requests": 400, "arrival": {"process": "poisson", "rate_rps": 10.0},
                         "shared_prefix": {"tokens": 100, "groups": 3},
                         "classes": [{**CHAT, "share": 1, "shared_prefix": {"tokens": 500, "groups": 2}},
                                     {**BATCH, "share": 1}]}, "workload")
    s = generate(w, np.random.default_rng(0))
    chat, batch = s.class_index == 0, s.class_index == 1
    assert set(s.prefix_group[chat]) == {3, 4} and set(s.prefix_tokens[chat]) == {500}
    assert set(s.prefix_group[batch]) == {0, 1, 2} and set(s.prompt_tokens[batch]) == {3100}
    assert s.prompt_tokens[chat].min() >= 550 and s.prompt_tokens[chat].max() <= 800


def test_summary_text_states_the_limits_that_apply():
    from servesim.cli.main import format_summary

    chat = {**CHAT, "share": 1, "slo": {"ttft_s": 1.0}}  # a class that sets no TPOT limit
    res = simulate(mixed([chat, {**BATCH, "share": 1}], **{"workload.num_requests": 20}))
    text = format_summary(res.summary)
    assert "None" not in text
    assert "SLO attainment" in text and "(each request against its class's SLO)" in text
    assert "% (TTFT <= 1 s)" in text  # the chat class's line: its one limit, no "TPOT <= None"
    plain = format_summary(simulate(make_scenario(**{"workload.num_requests": 5})).summary)
    assert "(no limits set: every completed request counts)" in plain
