"""Fairness: per-tenant service, service shares and Jain's index in summary.json."""

import pytest

from servesim.outputs.fairness import jain
from servesim.simulation import simulate
from tests.conftest import make_scenario, two_classes


def test_jain_index():
    assert jain([1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([0.5, 1.0]) == pytest.approx(0.9)
    assert jain([3]) is None and jain([0, 0]) is None


def test_tenants_gather_their_classes_and_add_up():
    kw = {**two_classes(0.5), "workload.num_requests": 200, "workload.arrival": {"process": "poisson", "rate_rps": 8.0}}
    kw["workload.classes"][1]["tenant"] = "a"  # both classes served for tenant a
    s = simulate(make_scenario(**kw)).summary
    f = s["fairness"]
    assert list(f["tenants"]) == ["a"] and f["tenants"]["a"]["classes"] == ["chat", "batch"]
    for key in ("num_requests", "completed", "rejected", "unfinished", "preemptions"):
        assert f["tenants"]["a"][key] == s[key]
    assert f["tenants"]["a"]["slo_attainment"] == pytest.approx(s["slo_attainment"])  # each against its class's SLO
    assert f["jain"]["tenants"] == {"service_share": None, "slo_attainment": None}  # one tenant
    assert f["jain"]["classes"]["service_share"] == 1.0  # everything served


def test_shedding_one_tenant_shows_in_its_share_and_the_index():
    kw = {**two_classes(0.5), "workload.num_requests": 200, "workload.arrival": {"process": "all_at_once"},
          "policy.admission": {"max_queue": 5, "classes": ["batch"]}}
    f = simulate(make_scenario(**kw)).summary["fairness"]
    share = f["service_share"]["tenants"]
    assert share["a"]["service_share"] == 1.0 and share["b"]["service_share"] < 0.5
    assert share["b"]["served_tokens"] < share["b"]["demand_tokens"]
    assert f["jain"]["tenants"]["service_share"] < 0.9
    assert f["tenants"]["b"]["rejected"] > 0 and f["tenants"]["a"]["rejected"] == 0


def test_plain_workloads_have_one_default_tenant():
    f = simulate(make_scenario()).summary["fairness"]
    assert list(f["tenants"]) == ["default"] and f["jain"]["classes"]["service_share"] is None


def test_a_class_that_sent_no_requests_is_left_out_of_jains_index():
    """A class (or tenant) that drew no request asked for nothing: its service share and SLO
    attainment of 0 are no unfairness. Before, they entered Jain's index as a group that got
    nothing, and one rare class pulled a fair run's index down from ~1 to ~0.5."""
    kw = {**two_classes(0.5), "workload.num_requests": 40, "workload.arrival": {"process": "poisson", "rate_rps": 2.0}}
    rare = {**kw["workload.classes"][0], "name": "rare", "share": 1e-9, "tenant": "c"}
    kw["workload.classes"] = [*kw["workload.classes"], rare]
    s = simulate(make_scenario(**kw)).summary
    f = s["fairness"]
    assert s["classes"]["rare"]["num_requests"] == 0 and f["tenants"]["c"]["num_requests"] == 0
    assert s["completed"] == 40  # everything that arrived was served
    for group in ("classes", "tenants"):
        assert f["jain"][group]["service_share"] == 1.0
        att = [v["slo_attainment"] for k, v in (s["classes"] if group == "classes" else f["tenants"]).items()
               if k not in ("rare", "c")]
        assert f["jain"][group]["slo_attainment"] == pytest.approx(jain(att))


def test_a_class_that_sent_no_requests_has_no_attainment_in_summary_json(tmp_path):
    """0 of 0 requests within the SLO is no share: summary.json gave such a class (and its tenant)
    ``slo_attainment`` 0.0, read as a class that failed its SLO by anything that takes the number
    (its printed and drawn forms already said "no requests"). It is null now, and a run folder
    holding it reads back."""
    from servesim.outputs.rundir import read_summary

    kw = {**two_classes(0.5), "workload.num_requests": 40, "workload.arrival": {"process": "poisson", "rate_rps": 2.0}}
    rare = {**kw["workload.classes"][0], "name": "rare", "share": 1e-9, "tenant": "c"}
    kw["workload.classes"] = [*kw["workload.classes"], rare]
    res = simulate(make_scenario(**kw))
    s = res.summary
    assert s["classes"]["rare"]["num_requests"] == 0
    assert s["classes"]["rare"]["slo_attainment"] is None and s["classes"]["rare"]["goodput_rps"] == 0.0
    assert s["fairness"]["tenants"]["c"]["slo_attainment"] is None
    assert s["classes"]["chat"]["slo_attainment"] is not None
    res.write(tmp_path / "run")
    assert read_summary(tmp_path / "run")["classes"]["rare"]["slo_attainment"] is None
    # tenants that gather several classes are summarized apart: one that sent nothing, too
    rare2 = {**rare, "name": "rare2"}
    kw["workload.classes"] = [*kw["workload.classes"], rare2]
    f = simulate(make_scenario(**kw)).summary["fairness"]
    assert f["tenants"]["c"]["classes"] == ["rare", "rare2"] and f["tenants"]["c"]["slo_attainment"] is None


def test_the_tenant_line_reads_100_percent_only_when_every_request_met_the_slo():
    """The printed tenant line rounded 99.97% to "100.0%" (the class lines and the run's own use
    attainment_pct, which never does)."""
    from servesim.cli.main import _format_fairness

    tenant = {"num_requests": 3000, "completed": 3000, "throughput_rps": 5.0}
    s = {"classes": {"a": {}, "b": {}, "c": {}},
         "fairness": {"tenants": {"x": {**tenant, "slo_attainment": 2999 / 3000},
                                  "y": {**tenant, "slo_attainment": 1.0}},
                      "jain": {"tenants": {"service_share": 1.0, "slo_attainment": 1.0}}}}
    lines = _format_fairness(s)
    assert lines[0].endswith("SLO 99.97%") and lines[1].endswith("SLO 100.0%")
