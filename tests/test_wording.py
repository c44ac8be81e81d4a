"""Counted nouns in printed output: "1 request", never "1 requests" (servesim.outputs.wording)."""

import re

import yaml

from servesim.cli.main import format_summary, main
from servesim.outputs.wording import noun, plural
from servesim.simulation import simulate
from tests.conftest import BASE, make_scenario

ONE_PLURAL = re.compile(r"(?<![\d.,])1 (requests|steps|points|preemptions|prompts|sessions|turns|probes|seeds)\b")


def test_plural():
    assert [plural(n, "request") for n in (0, 1, 2)] == ["0 requests", "1 request", "2 requests"]
    assert plural(1234, "request", fmt=",") == "1,234 requests" and plural(1, "class", "classes") == "1 class"
    assert noun(3, "step") == "steps" and noun(1, "step") == "step"


def test_a_run_of_one_request_says_1_request(tmp_path, capsys):
    """A run of one request printed "1 requests", "1 steps" (its one prefill step, as in the
    README's profile line) and "all 1 requests within the SLO"; validate "1 requests arriving"; a
    one-point sweep "1 points: 1 ran"."""
    s = simulate(make_scenario(**{"workload.num_requests": 1, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}})).summary
    text = format_summary(s)
    assert not ONE_PLURAL.search(text), ONE_PLURAL.search(text)
    assert "scenario test: 1 request, 1 completed" in text and "1 step  (" in text
    assert "the one request within the SLO" in text
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 1}}))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "workload: 1 request arriving" in out and not ONE_PLURAL.search(out)
    assert main(["sweep", str(path), "--grid", "workload.arrival.rate_rps=2", "--out", str(tmp_path / "sw"),
                 "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "\n1 point: 1 ran, 0 already finished, 0 failed" in out and not ONE_PLURAL.search(out)
    assert main(["report", str(tmp_path / "sw")]) == 0
    md = (tmp_path / "sw" / "report.md").read_text()
    assert "1 point, 1 ran" in md and not ONE_PLURAL.search(md)


def test_the_decision_summary_says_1_request():
    """run --decision-trace printed "head-of-line: 1 requests would have fit" and "priority
    inversions: 1 requests waited"."""
    from servesim.core.decisions import format_decisions

    d = {"rows": 3, "wait_s": {"kv_blocks": 1.5}, "head_of_line": {"requests": 1, "request_s": 0.5},
         "priority_inversions": {"requests": 1, "request_s": 0.25}}
    text = "\n".join(format_decisions(d))
    assert "head-of-line: 1 request would have fit" in text and "priority inversions: 1 request waited" in text
    assert not ONE_PLURAL.search(text)
