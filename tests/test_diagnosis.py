"""Diagnosis from SLO misses (summary.json profile.diagnosis): on every packaged scenario it agrees
with requests.csv and steps.csv; crafted runs get each cause; run warnings and validate's
predicted rejections."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from servesim.cli.main import format_summary, main
from servesim.inputs.scenario import load_scenario
from servesim.outputs import metrics
from servesim.policies import ContinuousPolicy
from servesim.outputs.checks import preemption_warnings
from servesim.outputs.diagnosis import reason_key, slo_misses
from servesim.outputs.rundir import read_scenario, read_summary, read_table
from servesim.predictions import predict_rejections
from servesim.simulation import simulate
from servesim.inputs.overrides import with_values
from tests.conftest import BASE, make_scenario
from tools.update_golden import scenario_files

ROOT = Path(__file__).resolve().parent.parent


def _ending_in_a_burst(sc):
    """``sc``'s plan with its first 1,000 arrivals rearranged: the first 500 squeezed into the span
    of 1,000, the next 500 all at its end (a replay of 1,000 whose later half arrives at one
    instant). Returns (setup, specs)."""
    from servesim.simulation import plan

    setup, specs, _ = plan(sc)
    a = specs.arrival_s.copy()
    a[:500] *= a[999] / a[500]
    a[500:1000] = a[999]
    return setup, dataclasses.replace(specs, arrival_s=a)


def limits_from_files(out):
    """Per-request (ttft, tpot) limits from scenario.yaml: a class's own, else the top-level SLO."""
    sc, req = read_scenario(out), read_table(out, "requests")
    top = sc.get("slo") or {}
    by = {c["name"]: c.get("slo") or {} for c in (sc["workload"].get("classes") or [])}

    def lim(cls, key):
        v = (by.get(cls) or {}).get(key)
        v = top.get(key) if v is None else v
        return np.inf if v is None else v

    return (np.array([lim(c, "ttft_s") for c in req["class"]], dtype=float),
            np.array([lim(c, "tpot_s") for c in req["class"]], dtype=float))


@pytest.fixture(scope="module", params=scenario_files(), ids=lambda p: p.stem)
def packaged(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param.stem)
    simulate(load_scenario(request.param)).write(out)
    return out


def test_diagnosis_agrees_with_the_run_files(packaged):
    out = packaged
    s, req, steps = read_summary(out), read_table(out, "requests"), read_table(out, "steps")
    lt, lp = limits_from_files(out)
    d = s["profile"]["diagnosis"]
    m = d["slo_misses"]
    # counted independently from requests.csv
    done = req["status"] == "completed"
    with np.errstate(invalid="ignore"):
        ttft_miss = done & (metrics.ttft_s(req) > lt)
        tpot_miss = done & (metrics.tpot_s(req) > lp)
    missed = (req["status"] != "completed") | ttft_miss | tpot_miss
    assert m["requests"] == len(req["status"]) and m["missed"] == int(missed.sum())
    assert m["ttft"]["missed"] == int(ttft_miss.sum()) and m["tpot"]["missed"] == int(tpot_miss.sum())
    assert m["rejected"] == s["rejected"] and m["unfinished"] == s["unfinished"]
    assert 1 - m["missed"] / m["requests"] == pytest.approx(s["slo_attainment"])
    # recomputed from the files alone, the same analysis
    blocks = [c["blocks_per_replica"] for c in s["kv_capacity"].values() for _ in range(c["replicas"])]
    again = slo_misses(req, steps, blocks, lt, lp)
    for group in ("ttft", "tpot"):
        for k, v in m[group].items():
            assert again[group][k] == (pytest.approx(v, rel=1e-9, abs=1e-12) if isinstance(v, float) else v), k
    # the line leads with the largest group, names the cause, and counts as the files do
    if m["missed"]:
        groups = {"rejected": m["rejected"], "unfinished": m["unfinished"], "TTFT by": m["ttft"]["missed"],
                  "TPOT by": m["tpot"]["missed"]}
        biggest = max(groups, key=groups.get)
        head = d["line"].split(": ", 1)[1]
        assert biggest in head.split(";")[0] and f"{groups[biggest]:,}" in head.split(";")[0]
        assert d["line"].startswith(f"SLO missed by {m['missed']:,} of {m['requests']:,} requests")
    else:
        assert "slo_misses" in d and "TTFT by" not in d["line"] and "TPOT by" not in d["line"]


def test_coding_scenario_blames_prefill_interference_for_tpot():
    """The issue's case: most requests miss TPOT (long prompts prefilled whole between the decode
    steps), fewer miss TTFT; the diagnosis leads with TPOT and its cause."""
    s = simulate(load_scenario(next(p for p in scenario_files() if p.stem == "coding"))).summary
    d = s["profile"]["diagnosis"]
    m = d["slo_misses"]
    assert m["tpot"]["missed"] > m["ttft"]["missed"] > 0
    assert d["bottleneck"] == "prefill_interference" == m["tpot"]["cause"]
    assert d["line"].index("TPOT by") < d["line"].index("TTFT by")


CASES = {  # overrides of the test scenario -> the bottleneck its SLO misses must get
    "decode_memory": {"workload.num_requests": 20, "workload.arrival": {"process": "poisson", "rate_rps": 0.5},
                      "workload.prompt_tokens": {"dist": "fixed", "value": 64},
                      "workload.output_tokens": {"dist": "fixed", "value": 100}, "slo": {"tpot_s": 0.005}},
    "kv_capacity": {"workload.num_requests": 120, "workload.arrival": {"process": "poisson", "rate_rps": 100.0},
                    "workload.prompt_tokens": {"dist": "uniform", "min": 256, "max": 1024},
                    "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 128},
                    # (a TPOT limit a little above an unpreempted request's, ~7 ms at the default engine)
                    "memory.num_gpu_blocks": 100, "slo": {"tpot_s": 0.01}},
    "queueing": {"workload.num_requests": 120, "workload.arrival": {"process": "poisson", "rate_rps": 100.0},
                 "workload.prompt_tokens": {"dist": "uniform", "min": 256, "max": 1024},
                 "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 128}, "policy.max_num_seqs": 8,
                 "slo": {"ttft_s": 0.5}},
    "prefill": {"workload.num_requests": 20, "workload.arrival": {"process": "poisson", "rate_rps": 0.5},
                "workload.prompt_tokens": {"dist": "fixed", "value": 7000},
                "workload.output_tokens": {"dist": "fixed", "value": 2}, "slo": {"ttft_s": 0.2}},
    "prefill_interference": {"workload.num_requests": 150, "workload.arrival": {"process": "poisson", "rate_rps": 6},
                             "workload.prompt_tokens": {"dist": "fixed", "value": 6000},
                             "workload.output_tokens": {"dist": "fixed", "value": 64}, "slo": {"tpot_s": 0.03}},
    "rejections": {"policy.max_num_batched_tokens": 256, "slo": {"ttft_s": 1.0}},
    # P/D: the decode pool holds two requests at a time; hand-offs waiting for it hold the prefill
    # replica's KV, which then admits nothing while idle (it was called queueing, "the replica busy 5%")
    "decode_backpressure": {"policy.name": "pd_split", "memory.num_gpu_blocks": 300, "workload.num_requests": 40,
                            "workload.arrival": {"process": "poisson", "rate_rps": 20.0},
                            "workload.prompt_tokens": {"dist": "fixed", "value": 2000},
                            "workload.output_tokens": {"dist": "fixed", "value": 300}, "slo": {"ttft_s": 1.0}},
    "unfinished": {"workload.num_requests": None, "workload.duration_s": 5, "policy.max_num_seqs": 4,
                   "workload.arrival": {"process": "poisson", "rate_rps": 100.0}},
}


@pytest.mark.parametrize("bottleneck", list(CASES))
def test_each_cause(bottleneck):
    s = simulate(make_scenario(**CASES[bottleneck])).summary
    d = s["profile"]["diagnosis"]
    assert d["bottleneck"] == bottleneck, d["line"]
    assert d["line"] in format_summary(s)


def test_without_misses_the_utilization_rules_speak_and_say_the_slo_holds():
    s = simulate(make_scenario(**{"slo": {"ttft_s": 10.0, "tpot_s": 1.0}})).summary
    d = s["profile"]["diagnosis"]
    assert d["line"].startswith("all 50 requests within the SLO; ")
    assert d["bottleneck"] in ("queueing", "prefill", "decode_memory", "decode_compute", "communication")


def test_rejections_warn_and_validate_predicts_them_exactly(tmp_path, capsys):
    sc = make_scenario(**CASES["rejections"])
    s = simulate(sc).summary
    w = {x["code"]: x["message"] for x in s["warnings"]}
    assert "rejections" in w and f"{s['rejected']} of 50 requests" in w["rejections"]
    assert "policy.max_num_batched_tokens=256" in w["rejections"]  # the top reason
    pred = predict_rejections(sc)
    assert pred["rejected"] == s["rejected"] > 0 and pred["requests"] == 50
    # counted per distinct (prompt, output) pair: the same reasons, counts and order as the run's
    assert pred["reasons"] == s["profile"]["diagnosis"]["slo_misses"]["rejection_reasons"]
    assert format_summary(s).rstrip().splitlines()[-1].startswith("warning ")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"a run will reject {s['rejected']:,} of 50 requests" in out


@pytest.mark.parametrize("budget", [256, 480])
def test_validate_warns_of_rejections_from_the_share_the_run_warns_at(tmp_path, capsys, budget):
    """validate said "warning:" for any predicted rejection (3 of 1,000 on a packaged scenario),
    while the run warns only from REJECTED_SHARE of its requests on: the prediction is a warning
    where the run's rejections warning will be, a note (its count all the same) below it."""
    from servesim.outputs.checks import REJECTED_SHARE

    sc = make_scenario(**{**CASES["rejections"], "policy.max_num_batched_tokens": budget})
    s = simulate(sc).summary
    assert s["rejected"] > 0
    loud = "rejections" in {w["code"] for w in s["warnings"]}
    assert loud == (s["rejected"] >= REJECTED_SHARE * 50)
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "a run will reject" in x]
    assert len(lines) == 1 and f"a run will reject {s['rejected']:,} of 50 requests" in lines[0]
    assert lines[0].startswith("warning: " if loud else "  rejections: ")


def test_a_closed_loop_with_num_requests_gets_the_length_predictions_too(tmp_path, capsys):
    """A closed loop draws its num_requests lengths in one chunk at its first send: validate said
    "rejections: not predicted" (and nothing of clipped or head-of-line prompts) for what the run
    then warned of. The lengths drawn as the run draws them give its rejections exactly; without
    num_requests (a closed loop bounded by duration_s) it still cannot tell."""
    closed = {"process": "closed_loop", "clients": 4, "think_time_s": 0.5}
    sc = make_scenario(**{**CASES["rejections"], "workload.arrival": closed})
    s = simulate(sc).summary
    assert s["rejected"] > 0.1 * 50 and "rejections" in {w["code"] for w in s["warnings"]}
    lines = _validate_lines(tmp_path, capsys, sc)
    assert any(x.startswith(f"warning: a run will reject {s['rejected']:,} of 50 requests") for x in lines)
    cut = make_scenario(**{**CASES["rejections"], "workload.arrival": closed, "workload.num_requests": None,
                           "workload.duration_s": 10.0})
    assert any(x.startswith("  rejections: not predicted") for x in _validate_lines(tmp_path, capsys, cut))


@pytest.mark.parametrize("cut, loud", [(4.0, True), (60.0, False)])
def test_validate_predicts_the_requests_a_cut_off_leaves_unfinished(tmp_path, capsys, cut, loud):
    """A workload.duration_s of 4 s with requests that take seconds to serve: the run left 44% of
    them unfinished (its unfinished warning) and validate said nothing. Those arriving within
    their idle-deployment E2E of the cut-off cannot finish: at least that many, at most the run's,
    a floor, said so; the run replayed where affordable gives its count; a warning from the run's
    share on, a note below it (a cut-off far from the arrivals)."""
    from servesim import predictions
    from servesim.predictions import predict_unfinished

    rate = 8.0 if loud else 1.0
    sc = load_scenario(str(ROOT / "scenarios" / "default.yaml"),
                       ["workload.num_requests=null", f"workload.duration_s={cut}",
                        f"workload.arrival.rate_rps={rate}"])
    s = simulate(sc).summary
    pred = predict_unfinished(sc)
    assert pred["exact"] and pred["unfinished"] == s["unfinished"] > 0 and pred["requests"] == s["num_requests"]
    assert ("unfinished" in {w["code"] for w in s["warnings"]}) == loud
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "still queued or running" in x]
    assert len(lines) == 1 and lines[0].startswith("warning: " if loud else "  unfinished: ")
    assert f"a run will leave {s['unfinished']:,} of {s['num_requests']:,} requests" in lines[0]
    assert "(the run replayed: its count)" in lines[0]
    # too long to replay (and too short to extrapolate): the idle deployment's floor, said as one
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1)
        floor = predict_unfinished(sc)
        assert not floor["exact"] and floor["estimate"] is None and 0 < floor["unfinished"] <= s["unfinished"]
        lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "will still be queued or running" in x]
    assert len(lines) == 1 and f"at least {floor['unfinished']:,} of {s['num_requests']:,} requests" in lines[0]
    assert "(a floor: " in lines[0] and "a loaded run leaves more, never fewer" in lines[0]


@pytest.mark.parametrize("rule", [None, {"max_queue": 20}])
def test_validate_extrapolates_the_unfinished_requests_of_a_long_cut_off_run(tmp_path, capsys, monkeypatch, rule):
    """A cut-off run too long to replay whole (SHEDDING_REPLAY_REQUESTS, 1,000 here): validate
    said at least the requests an idle deployment could not finish (a floor: 164 where an
    overloaded run left 7,776), or with a queue rule only what may not complete. Its first
    requests, replayed with its rules, are the run up to their last arrival; from there, a
    backlog that grows is carried to the cut-off at the completion rate of the later half (about
    the run's count), and a queue a rule holds level is said with the swing of its later half (a
    range holding the run's count)."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 50.0},
                       **({"policy.admission": rule} if rule else {}))
    s = simulate(sc).summary
    pred = predictions.predict_unfinished(sc)
    n, run = s["num_requests"], s["unfinished"]
    assert n > 2000 and pred["replayed"] == 1000 and not pred["exact"] and pred["growing"] == (rule is None)
    if rule is None:
        assert run > 0.3 * n and abs(pred["estimate"] - run) <= 0.05 * run, (pred, run)
        assert pred["unfinished"] < 0.5 * run  # (the floor alone: far below)
    else:
        assert pred["low"] <= run <= pred["high"] and pred["high"] - pred["low"] < max(0.5 * run, 20), (pred, run)
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "still queued or running" in x]
    assert len(lines) == 1, lines
    assert f"a run will leave about {pred['estimate']:,} of {n:,} requests" in lines[0]
    assert "the run's own first 1,000 requests, replayed with its rules, are the run up to " in lines[0]
    assert (f"between {pred['low']:,} and {pred['high']:,}" in lines[0]) == (rule is not None)


@pytest.mark.parametrize("segments, cut, rule, tight", [([(20, 60), (1000, 2)], 60.0, {"max_queue": 20}, False),
                                                        ([(600, 2), (1000, 60)], 615.0, {"max_queue": 20}, True),
                                                        ([(600, 2), (1000, 60)], 615.0, None, True)])
def test_validate_unfinished_range_holds_a_rate_schedule_changing_after_the_replay(tmp_path, capsys, monkeypatch,
                                                                                   segments, cut, rule, tight):
    """A piecewise rate that changes after the replayed first requests: their later half held level,
    and its swing was said as the range (60 req/s behind max_queue=20, then 2 req/s: "about 84,
    between 82 and 85" where the run left 3; 2 req/s, then 60: 0 to 10 where it left 84, and with
    no rule 131 where it left 2,244). The arrivals after the replay are compared with its later
    half's rate; where they change, a range is said, holding the run's count, and no "about". Its
    ends come from the run's last requests replayed (the count carried at the 2 req/s half's
    completion rate read 0 to 2,847 where the run left 84 behind max_queue=20): where the load
    before the cut-off fills the deployment, within 10% of the run."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    arrival = {"process": "piecewise", "segments": [{"duration_s": d, "rate_rps": r} for d, r in segments]}
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": cut,
                          "workload.arrival": arrival}, **({"policy.admission": rule} if rule else {}))
    pred = predictions.predict_unfinished(sc)
    s = simulate(sc).summary
    assert pred["replayed"] == 1000 < s["num_requests"] and pred["rate_changed"] and pred["estimate"] is None
    assert pred["low"] <= s["unfinished"] <= pred["high"], (pred, s["unfinished"])
    if tight:
        assert pred["high"] - pred["low"] <= 0.1 * s["unfinished"] + 5, (pred, s["unfinished"])
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "still queued or running" in x]
    assert len(lines) == 1 and f"between {pred['low']:,} and {pred['high']:,} of " in lines[0]
    assert "the arrival schedule changes" in lines[0] and "about" not in lines[0]
    assert f"the run's own last {pred['tail']:,} requests, replayed with its rules" in lines[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_validate_unfinished_reads_a_sinusoid_lower_at_the_cut_off_as_a_rate_change(monkeypatch, seed):
    """A sinusoidal (diurnal) rate near what the deployment serves, 12 req/s +-25% over 480 s behind
    max_queue=20, cut at 250 s, where its rate is about 13% below the replay's later half (within
    the noise of that half's 500 arrivals, under the 25% a change needed): validate carried that
    half's growing backlog to the queue's room, "about 84", where the run left 45 (seed 0). The
    schedule the arrival process is drawn from tells the change; the range then holds the run."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    arrival = {"process": "sinusoidal", "rate_rps": 12.0, "amplitude": 0.25, "period_s": 480.0}
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 250.0, "seed": seed,
                          "workload.arrival": arrival, "policy.admission": {"max_queue": 20}})
    pred = predictions.predict_unfinished(sc)
    s = simulate(sc).summary
    assert pred["replayed"] == 1000 < s["num_requests"] and pred["rate_changed"] and pred["estimate"] is None
    assert pred["low"] <= s["unfinished"] <= pred["high"], (pred, s["unfinished"])


def test_validate_unfinished_reads_an_on_off_schedule_at_the_cut_off(monkeypatch):
    """On/off arrivals (30 req/s for 5 s, then 5 s off) cut at 150 s, after an off period: the
    replay's later half spans several cycles, as does each stretch compared with it, so no rate
    change was read, and its level was said, "about 206, between 147 and 256", where the run left
    101. The schedule just before the cut-off (off) tells the change; the range holds the run."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 150.0,
                          "workload.arrival": {"process": "on_off", "rate_rps": 30.0, "on_s": 5, "off_s": 5}})
    pred = predictions.predict_unfinished(sc)
    s = simulate(sc).summary
    assert pred["rate_changed"] and pred["estimate"] is None
    assert pred["low"] <= s["unfinished"] <= pred["high"], (pred, s["unfinished"])


@pytest.mark.parametrize("rule", [None, {"max_queue": 20}])
def test_validate_unfinished_reads_a_replay_ending_in_a_burst_by_its_span(monkeypatch, rule):
    """A trace whose replayed first 1,000 requests end in a burst at one instant (the later 500),
    then 20 req/s, cut at 100 s: the unfinished count gave up on it ("no estimate", the floor of 0
    to 41 said) where the fluid queue read the later half of their span; both read it so now, and
    the burst is a rate change after which the run's last requests, replayed, give a range that
    holds the run's count (84 behind max_queue=20, 805 without)."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 100.0,
                          "workload.arrival": {"process": "poisson", "rate_rps": 20.0}},
                       **({"policy.admission": rule} if rule else {}))
    setup, specs = _ending_in_a_burst(sc)
    pred = predictions.predict_unfinished(sc, setup, specs)
    run = simulate(sc, specs=specs).summary["unfinished"]
    assert pred["rate_changed"] and pred["low"] <= run <= pred["high"], (pred, run)
    assert pred["low"] > 0.3 * run > pred["unfinished"]  # (the floor alone: far below)


def test_validate_unfinished_range_after_a_rate_change_reaches_the_most_the_replay_held(monkeypatch):
    """A sinusoidal rate (40 req/s, amplitude 0.75, period 30 s) behind max_queue=20, cut at 60 s:
    the requests in flight fell through the replay's later half, so its trend carried to the
    cut-off plus the swing about it read a range of 0 to 77 where the run left 84, below the most
    those requests reached, which the range's top is said to be."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    arrival = {"process": "sinusoidal", "rate_rps": 40.0, "amplitude": 0.75, "period_s": 30.0}
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 60.0,
                          "workload.arrival": arrival, "policy.admission": {"max_queue": 20}})
    pred = predictions.predict_unfinished(sc)
    s = simulate(sc).summary
    assert pred["replayed"] == 1000 < s["num_requests"] and pred["rate_changed"] and pred["estimate"] is None
    assert pred["low"] <= s["unfinished"] <= pred["high"], (pred, s["unfinished"])


def test_validate_unfinished_backlog_behind_max_queue_stops_at_the_queue_room(tmp_path, capsys, monkeypatch):
    """A cut-off run too long to replay whose requests in flight grow through the later half of the
    replay behind max_queue=300: carried at that half's share shed, they read about 564 where the
    run left 360, as the queue, still filling there, sheds more once full. Past its room
    (max_queue + max_num_seqs per replica) the count is that room; with no rule it is unchanged."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    kw = {**SHED, "workload.num_requests": None, "workload.duration_s": 100.0,
          "workload.arrival": {"process": "poisson", "rate_rps": 20.0}}
    sc = make_scenario(**kw, **{"policy.admission": {"max_queue": 300}})
    pred = predictions.predict_unfinished(sc)
    run = simulate(sc).summary["unfinished"]
    assert pred["growing"] and abs(pred["estimate"] - run) <= 0.05 * run, (pred, run)
    assert pred.get("full") == 64 + 300 == pred["estimate"]
    free = predictions.predict_unfinished(make_scenario(**kw))
    assert free["growing"] and free.get("full") is None and free["estimate"] > 1.3 * run
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "still queued or running" in x]
    assert len(lines) == 1 and f"a run will leave about {pred['estimate']:,} of " in lines[0]
    assert "so the queue fills before the cut-off, holding its room" in lines[0]


def test_validate_unfinished_queue_room_counts_each_virtual_engines_sequences(monkeypatch):
    """With hardware.pp=2 (pp_overlap: two virtual engines a replica, each running max_num_seqs of
    its own, beside the replica's max_queue) a backlog behind max_queue=300 was capped at 64 + 300
    = 364 where the run left 427; the room is 2 x 64 + 300."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": None, "workload.duration_s": 100.0, "hardware.pp": 2,
                          "workload.arrival": {"process": "poisson", "rate_rps": 35.0},
                          "policy.admission": {"max_queue": 300}})
    pred = predictions.predict_unfinished(sc)
    run = simulate(sc).summary["unfinished"]
    assert pred["growing"] and pred.get("full") == 2 * 64 + 300 == pred["estimate"]
    assert abs(pred["estimate"] - run) <= 0.05 * run, (pred, run)


@pytest.mark.parametrize("admission, scoped", [
    ({"token_bucket": {"rate_rps": 0.1, "burst": 1}}, False), ({"max_queue": 1}, False),
    ({"token_bucket": {"rate_rps": 2, "burst": 1}}, True), ({"max_queue": 1}, True),
    ({"token_bucket": {"rate_rps": 2, "burst": 1}}, False)])
def test_validate_unfinished_counts_no_request_admission_sheds(admission, scoped):
    """20 req/s of 200-token replies cut off at 3 s behind policy.admission: validate said "at
    least 57 of 60 requests will still be queued or running" at the cut-off, and the run had 0
    unfinished (the token bucket, or the full queue, had rejected them on arrival). Requests a rule
    may shed are not counted: a token bucket's are replayed (its rejections are exact), a
    queue rule's, which the load decides, are all left out; requests of a class no rule applies
    to still count. Always at most the run's count."""
    from servesim.predictions import predict_unfinished

    kw = {"workload.num_requests": None, "workload.duration_s": 3.0, "policy.max_num_seqs": 1,
          "workload.arrival": {"process": "fixed", "rate_rps": 20.0},
          "workload.output_tokens": {"dist": "fixed", "value": 200}, "policy.admission": admission}
    if scoped:  # the rule applies to class a only
        fixed = {"dist": "fixed", "value": 100}
        kw.update({"workload.prompt_tokens": None, "workload.output_tokens": None, "policy.admission.classes": ["a"],
                   "workload.classes": [{"name": n, "share": 1, "prompt_tokens": fixed,
                                         "output_tokens": {"dist": "fixed", "value": 200}} for n in "ab"]})
    sc = make_scenario(**kw)
    s = simulate(sc).summary
    pred = predict_unfinished(sc)
    assert pred["requests"] == s["num_requests"] and pred["unfinished"] <= s["unfinished"]
    if scoped or "token_bucket" in admission and admission["token_bucket"]["rate_rps"] > 1:
        assert pred["unfinished"] > 0  # (class b's late requests, or those the bucket lets in late)


@pytest.mark.parametrize("replayed", [True, False])
def test_validate_counts_the_requests_a_cut_off_leaves_unfinished_behind_a_queue_rule(
        tmp_path, capsys, monkeypatch, replayed):
    """default.yaml at 30 req/s cut off at 20 s behind max_queue=20: the run left 327 of its 558
    requests unfinished, and validate said nothing (a queue rule may reject any request on
    arrival, so the bound left every one out). The run is now replayed with its rules where
    affordable: its count, exactly; where not (SHEDDING_REPLAY_REQUESTS below the run's requests
    here), the requests arriving too late to finish on an idle deployment are said as not
    completed (rejected on arrival or unfinished: at most the run's two counts together)."""
    from servesim import predictions

    if not replayed:
        monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 100)
    sc = load_scenario(str(ROOT / "scenarios" / "default.yaml"),
                       ["workload.num_requests=null", "workload.duration_s=20", "workload.arrival.rate_rps=30",
                        "policy.admission.max_queue=20"])
    s = simulate(sc).summary
    n = s["num_requests"]
    assert s["unfinished"] >= 0.1 * n
    pred = predictions.predict_unfinished(sc)
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "at workload.duration_s=20 s" in x]
    assert len(lines) == 1
    if replayed:
        assert lines[0].startswith("warning: ")
        assert pred["exact"] and pred["unfinished"] == s["unfinished"]
        assert f"a run will leave {s['unfinished']:,} of {n:,} requests" in lines[0]
    else:
        assert not pred["exact"] and pred["unfinished"] == 0
        assert 0 < pred["not_completed"] <= s["unfinished"] + s["rejected"]
        assert lines[0].startswith("warning: " if pred["not_completed"] >= 0.1 * n else "  unfinished: ")
        assert f"at least {pred['not_completed']:,} of {n:,} requests" in lines[0]
        assert "will not have completed" in lines[0] and "(a floor: " in lines[0]


def test_validate_names_a_request_class_no_load_lets_reach_its_slo(tmp_path, capsys):
    """A small class of long prompts with a TTFT limit below their prefill, beside a large class
    with a loose SLO: 94% of all requests meet theirs, so the run warns class_under_slo (and
    studies count it failing), while validate said only that attainment cannot exceed 94%. It
    names the class and the most of it that can be within its SLO; without the small class's tight
    limit it names none."""
    from servesim.predictions import predict_slo_floors

    out = {"dist": "uniform", "min": 1, "max": 64}
    classes = [{"name": "long", "share": 0.06, "slo": {"ttft_s": 0.05}, "output_tokens": out,
                "prompt_tokens": {"dist": "uniform", "min": 4000, "max": 6000}},
               {"name": "chat", "share": 0.94, "slo": {"ttft_s": 10.0}, "output_tokens": out,
                "prompt_tokens": {"dist": "uniform", "min": 16, "max": 512}}]
    none = {"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.num_requests": 200}
    sc = make_scenario(**none, **{"workload.classes": classes})
    s = simulate(sc).summary
    assert s["slo_attainment"] >= 0.9 and "class_under_slo" in {w["code"] for w in s["warnings"]}
    caps = predict_slo_floors(sc)["classes_capped"]
    assert [c for c, _, _ in caps] == ["long"] and caps[0][1] >= s["classes"]["long"]["slo_attainment"]
    assert caps[0][2] == s["classes"]["long"]["num_requests"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "cannot meet the SLO" in x]
    assert len(line) == 1 and f"class long: at most {caps[0][1]:.1%} of its {caps[0][2]:,} requests" in line[0]
    loose = make_scenario(**none, **{"workload.classes": [{**classes[0], "slo": {"ttft_s": 5.0}}, classes[1]]})
    assert predict_slo_floors(loose)["classes_capped"] == []


def test_predicted_rejection_reasons_are_the_runs_in_count_and_order():
    """validate counts the reasons per distinct (prompt, output) pair: two reasons (the token
    budget, the KV cache) come out with the run's counts, most common first."""
    sc = make_scenario(**{"policy.max_num_batched_tokens": 300, "memory.num_gpu_blocks": 29, "policy.watermark": 0.0,
                          "workload.num_requests": 200})
    pred = predict_rejections(sc)["reasons"]
    assert len(pred) == 2 and pred[0][1] > pred[1][1] > 0
    assert pred == simulate(sc).summary["profile"]["diagnosis"]["slo_misses"]["rejection_reasons"]


def test_pipelined_rejections_are_predicted_too():
    """PP with overlapped micro-batches: the replica is virtual engines (validate once crashed on them)."""
    sc = make_scenario(**{**CASES["rejections"], "hardware.pp": 2})
    assert predict_rejections(sc)["rejected"] == simulate(sc).summary["rejected"] > 0


def test_pd_split_rejections_are_predicted_too():
    sc = make_scenario(**{"policy.name": "pd_split", "policy.decode": {"replicas": 1, "max_num_batched_tokens": 64},
                          "policy.max_num_batched_tokens": 64})
    assert predict_rejections(sc)["rejected"] == simulate(sc).summary["rejected"] > 0


def test_warnings_for_a_cut_off_and_for_slo_units(tmp_path, capsys):
    s = simulate(make_scenario(**CASES["unfinished"])).summary
    assert [w["code"] for w in s["warnings"]] == ["unfinished"]
    assert "workload.duration_s=5 s" in s["warnings"][0]["message"]
    s = simulate(make_scenario(**{"slo": {"ttft_s": 500, "tpot_s": 50}})).summary
    msgs = [w["message"] for w in s["warnings"] if w["code"] == "slo_units"]
    assert len(msgs) == 2 and "slo.ttft_s: 0.5" in msgs[0] and "slo.tpot_s: 0.05" in msgs[1]
    assert simulate(make_scenario()).summary["warnings"] == []


def test_a_backlog_that_grows_is_a_warning():
    """Above what the deployment serves, the backlog grows through the run and its latencies
    depend on its length: not_keeping_up, with capacity's keep-up ratio (requests that left per
    request that arrived over the second half of the arrivals). Below it, or with closed-loop
    clients (who wait for their replies), no warning."""
    def run(*sets):
        return simulate(load_scenario(None, ["workload.num_requests=1000", *sets])).summary

    over = run("workload.arrival.rate_rps=30")
    keep = over["workload"]["keep_up"]
    assert keep["ratio"] < 0.9 and keep["window_s"] > keep["median_e2e_s"]
    (w,) = [w for w in over["warnings"] if w["code"] == "not_keeping_up"]
    assert f"left at {keep['ratio']:.0%} of the rate they arrived" in w["message"]
    assert "is above what the deployment serves" in w["message"] and "too short" not in w["message"]
    under = run("workload.arrival.rate_rps=8")
    assert under["workload"]["keep_up"]["ratio"] > 0.95 and under["warnings"] == []
    assert keep["warmup"] is not None and keep["ratio"] + keep["warmup"] < 0.9
    # far above: the second half of the arrivals is over before most requests are served: the
    # shortfall their length alone makes (keep_up_warmup) is as large as the one seen, so it
    # cannot tell a run too short to fill from an overload, and says so
    far = run("workload.arrival.rate_rps=400")
    (w,) = [w for w in far["warnings"] if w["code"] == "not_keeping_up"]
    assert far["workload"]["keep_up"]["ratio"] + far["workload"]["keep_up"]["warmup"] >= 0.9
    assert "either the backlog grew" in w["message"] and "too short to tell" in w["message"]
    closed = run("workload.arrival={process: closed_loop, clients: 256}")
    assert closed["workload"]["keep_up"] is None and closed["warnings"] == []


def test_a_prompt_stuck_at_the_head_of_the_queue_is_a_warning():
    """Whole-prompt admission with prompts that fit the token budget only alone: each waits at the
    head of the queue until the running decodes leave room, the queue behind it too; the warning
    gives the waits and what avoids them (each remedy gives no warning, and a shorter TTFT tail).
    The same load with prompts well under the budget waits nowhere."""
    kw = {"policy.max_num_batched_tokens": 2048, "workload.num_requests": 300,
          "workload.arrival": {"process": "poisson", "rate_rps": 8.0},
          "workload.prompt_tokens": None, "workload.output_tokens": None,
          "workload.classes": [  # chats keep decodes running; a fifth of the prompts nearly fill the budget
              {"name": "chat", "share": 0.8, "prompt_tokens": {"dist": "uniform", "min": 50, "max": 300},
               "output_tokens": {"dist": "uniform", "min": 100, "max": 300}},
              {"name": "long", "share": 0.2, "prompt_tokens": {"dist": "uniform", "min": 2030, "max": 2046},
               "output_tokens": {"dist": "fixed", "value": 2}}]}
    s = simulate(make_scenario(**kw)).summary
    hol = s["head_of_line"]
    (w,) = [w for w in s["warnings"] if w["code"] == "head_of_line"]
    assert hol["budget_blocked_requests"] > 0
    assert f"waited {hol['budget_blocked_s']:.3g} s in all" in w["message"]
    assert "policy.name=chunked_prefill" in w["message"] and "policy.prefill_first" in w["message"]
    # (vLLM V1 stops at such a prompt since late 2025, as the default does: the option is its older admission)
    assert "lets them go ahead, as vLLM V1 did until late 2025" in w["message"]
    for fix in ({"policy.name": "chunked_prefill"}, {"policy.prefill_first": True},
                {"policy.max_num_batched_tokens": 4096}):
        f = simulate(make_scenario(**{**kw, **fix})).summary
        assert not [w for w in f["warnings"] if w["code"] == "head_of_line"], fix
        assert f["ttft_s"]["p99"] < s["ttft_s"]["p99"], fix
    assert s["ttft_s"]["p99"] > 5 * f["ttft_s"]["p99"]  # (the stall is the tail: 1.6 s against 0.08 s)
    # printed once: the warning, not also the head-of-line line (which shows waits below the warning's share)
    from servesim.cli.main import format_summary

    text = format_summary(s)
    assert "warning       " + w["message"] in text and "head-of-line  " not in text
    below = {**s, "warnings": []}
    assert "head-of-line  " in format_summary(below)
    # skip_unfit_prompts (vLLM V1 until late 2025): the chats go ahead of the long prompts, which wait
    # longer; still loud
    k = simulate(make_scenario(**{**kw, "policy.skip_unfit_prompts": True})).summary
    (w,) = [w for w in k["warnings"] if w["code"] == "head_of_line"]
    assert "set aside (policy.skip_unfit_prompts), the requests behind went ahead" in w["message"]
    assert k["classes"]["chat"]["ttft_s"]["p99"] < 0.2 * s["classes"]["chat"]["ttft_s"]["p99"]
    assert k["classes"]["long"]["ttft_s"]["p99"] > s["classes"]["long"]["ttft_s"]["p99"]
    chats = [{**kw["workload.classes"][0], "share": 1.0}]
    short = simulate(make_scenario(**{**kw, "workload.classes": chats})).summary
    assert short["head_of_line"]["budget_blocked_s"] == 0 and short["warnings"] == []


def test_validate_predicts_a_clear_overload(tmp_path, capsys):
    """validate names an offered rate well above what the deployment serves (a probe of the
    workload's own requests all at once on one replica: a lower bound of its throughput); it stays
    quiet at the scenario's own rate, where the run keeps up, and where it cannot tell."""
    from servesim.predictions import predict_overload

    over = predict_overload(load_scenario(None, ["workload.arrival.rate_rps=80"]))
    assert over["overloaded"] and over["probe_requests"] == 1000 and 60 < over["offered_rps"] < 100
    # the probe underrates the deployment: the run at a rate the probe would call full keeps up
    ok = load_scenario(None, [f"workload.arrival.rate_rps={over['served_rps']:.6g}"])
    assert not predict_overload(ok)["overloaded"]
    assert simulate(ok).summary["workload"]["keep_up"]["ratio"] > 0.9
    assert predict_overload(load_scenario(None, ["workload.arrival={process: closed_loop, clients: 64}"])) is None
    assert predict_overload(load_scenario(None, ["workload.num_requests=100"])) is None
    assert main(["validate", str(ROOT / "scenarios" / "default.yaml"), "--set", "workload.arrival.rate_rps=80"]) == 0
    out = capsys.readouterr().out
    assert "is well above what the deployment serves" in out and "servesim capacity" in out
    assert main(["validate", str(ROOT / "scenarios" / "default.yaml")]) == 0
    assert "well above" not in capsys.readouterr().out

# 600 requests at about 56 req/s on one H100 serving about 15: four times what it serves
SHED = {"workload.num_requests": 600, "workload.arrival": {"process": "poisson", "rate_rps": 60.0},
        "workload.prompt_tokens": {"dist": "lognormal", "mean": 1024, "sigma": 0.8, "max": 6144},
        "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 512}, "policy.max_num_seqs": 64}


def _validate_lines(tmp_path, capsys, sc) -> list:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("rule", [{"max_queue": 20}, {"max_queue": 200}, {"max_queued_tokens": 50_000}])
def test_validate_predicts_the_requests_a_full_queue_sheds(tmp_path, capsys, rule):
    """Admission control at four times what the deployment serves: the queue fills and
    policy.admission rejects what it cannot hold (the run's rejections warning), and validate said
    nothing (its overload probe skipped scenarios with admission). It now runs the probe without
    the rules and predicts the shedding: the run itself replayed with its rules, its count
    exactly (a formula from the probe, which underrates what the deployment serves, ran 0.6 to 1.9
    times the runs' counts), said as the run's count."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**SHED, **{"policy.admission": rule})
    shed = predict_shedding(sc)
    s = simulate(sc).summary
    assert "rejections" in {w["code"] for w in s["warnings"]}
    assert shed["overloaded"] and shed["backlog"] is None and shed["bucket"] == 0
    assert shed["queue"] == s["rejected"] and shed["queue_replayed"]["whole"]
    warning = [x for x in _validate_lines(tmp_path, capsys, sc) if x.startswith("warning: a run will reject")]
    assert len(warning) == 1 and f"holds the queue cannot hold, {shed['queue']:,} requests (the run replayed with " \
        "its rules: its count)" in warning[0].replace("sheds what the queue", "holds the queue")
    assert f"policy.admission.{next(iter(rule))}=" in warning[0]
    assert warning[0].startswith(f"warning: a run will reject {s['rejected'] / 600:.0%} of the requests")
    assert "upper bound" not in warning[0]


@pytest.mark.parametrize("rule, arrival", [
    ({"max_queue": 20}, None), ({"max_queued_tokens": 50_000}, None),
    # (a rate that changes after the replay: the later half's share of it read 3,280 where the run shed 2,962)
    ({"max_queue": 20}, {"process": "sinusoidal", "rate_rps": 60.0, "amplitude": 0.75, "period_s": 60})])
def test_validate_extrapolates_the_replay_of_a_long_overloaded_run(tmp_path, capsys, monkeypatch, rule, arrival):
    """An overloaded run longer than the replay (SHEDDING_REPLAY_REQUESTS, 1,000 here for 4,000
    requests): its first requests replayed with the rules shed exactly what the run sheds of them
    (a request's admission is decided on its arrival by what came before it), and the other
    requests at their own arrival times against what the later half of them drained give the run's
    count within a few percent (the formula it replaces ran 0.88 to 1.23 times runs of 20,000 to
    30,000 requests); the line says which part is exact and how the rest was counted."""
    from servesim import predictions
    from servesim.predictions import predict_shedding

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": 4000, **({"workload.arrival": arrival} if arrival else {})},
                       **{"policy.admission": rule})
    shed = predict_shedding(sc)
    res = simulate(sc)
    rep = shed["queue_replayed"]
    assert shed["overloaded"] and not rep["whole"] and rep["replayed"] == 1000
    reason = res.requests["reason"].tolist()
    assert rep["first_count"] == sum(isinstance(r, str) and r.startswith("admission: ") for r in reason[:1000])
    run = res.summary["rejected"]
    assert abs(shed["queue"] - run) <= 0.05 * run, (shed["queue"], run)
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if x.startswith("warning: a run will reject")]
    assert len(line) == 1 and line[0].startswith("warning: a run will reject about ")
    assert (f"about {shed['queue']:,} requests ({rep['first_count']:,} of its first 1,000, the run's own replayed "
            "with its rules: exact; the other 3,000 at their own arrival times, against the completion rate and the "
            "most requests in flight the later 500 of them kept: within 3% of the runs") in line[0], line[0]


@pytest.mark.parametrize("burst_from", [500, 0])
def test_validate_extrapolates_a_replay_whose_later_half_arrives_at_one_instant(monkeypatch, burst_from):
    """A trace whose replayed first requests end in a burst at one instant (the later half of the
    1,000 replayed, or all of them), then 60 req/s: the fluid queue read the completion rate over
    the later half, a stretch of no length, and counted 0 rejections after the replay (808 said
    where the run rejected 3,001; 980 where it rejected 3,178). The later half of their span is
    read instead; where they all arrive at once there is none, and the formula's bound is said."""
    from servesim import predictions
    from servesim.cli.main import _shedding_text
    from servesim.simulation import plan

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": 4000}, **{"policy.admission": {"max_queue": 20}})
    setup, specs, _ = plan(sc)
    a = specs.arrival_s.copy()
    a[burst_from:1000] = a[999]
    specs = dataclasses.replace(specs, arrival_s=a)
    shed = predictions.predict_shedding(sc, setup, specs)
    run = simulate(sc, specs=specs).summary["rejected"]
    rep = shed["queue_replayed"]
    assert shed["overloaded"] and (rep is None) == (burst_from == 0)
    assert shed["queue"] > 0.5 * run  # (the first 1,000's own count alone is under a third of it)
    if rep is not None:
        assert rep["by_span"] and rep["first_count"] < 0.3 * run
        assert abs(shed["queue"] - run) <= 0.1 * run, (shed["queue"], run)
        assert "the later half of their arrivals' span kept (the later 500 arrive at one instant)" in \
            _shedding_text(sc, setup, shed)
    else:
        assert "up to about" in _shedding_text(sc, setup, shed)


def test_validate_by_share_count_reads_the_later_half_of_a_burst_ending_replay_by_its_span(monkeypatch):
    """An overloaded run too long for the fluid queue (past SHEDDING_BUCKET_REPLAY, 1,000 here), its
    replayed first 1,000 requests ending in a burst of 500 at one instant, then 60 req/s behind
    max_queue=20: the other requests were counted at the share the later 500 by count shed, the
    burst alone (3,697 said where the run rejected 2,936). The later half is read as the fluid
    queue and the unfinished count read it, by time span (``_later_half``): within 10%."""
    from servesim import predictions
    from servesim.cli.main import _shedding_text

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 1000)
    monkeypatch.setattr(predictions, "SHEDDING_BUCKET_REPLAY", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": 4000}, **{"policy.admission": {"max_queue": 20}})
    setup, specs = _ending_in_a_burst(sc)
    shed = predictions.predict_shedding(sc, setup, specs)
    run = simulate(sc, specs=specs).summary["rejected"]
    rep = shed["queue_replayed"]
    assert rep["by_share"] and rep["by_span"]
    assert abs(shed["queue"] - run) <= 0.1 * run, (shed["queue"], run)
    assert (f"at the {rep['later_share']:.1%} the later half of their arrivals' span ({rep['later_arrived']:,} "
            "requests; the later 500 arrive at one instant) shed") in _shedding_text(sc, setup, shed)


@pytest.mark.parametrize("rule", [{"max_queue": 20}, {"token_bucket": {"rate_rps": 20, "burst": 5}}])
def test_validate_counts_a_request_admission_sheds_once_not_also_by_its_lengths(tmp_path, capsys, rule):
    """policy.admission decides before the replicas' length rules (Cluster.submit): a prompt too
    long for the KV cache that the full queue or the token bucket sheds is the run's admission
    rejection, once. validate counted it in both lines: 10 rejected by their lengths and 562 shed
    where the run rejected 563 (562 shed, 1 by its length). Both lines now add up to the run's."""
    from servesim.predictions import predict_shedding

    # (written under policy.watermark 0.01, vllm-v1's until 4fc341d: with none kept, the full queue
    # sheds the one prompt too long for the cache too, and no length rejection is left to count)
    sc = make_scenario(**{**SHED, "memory.num_gpu_blocks": 250, "policy.watermark": 0.01}, **{"policy.admission": rule})
    res = simulate(sc)
    reasons = [r for r in res.requests["reason"].tolist() if isinstance(r, str) and r]
    assert len(reasons) == res.summary["rejected"]
    by_length = sum(not r.startswith("admission: ") for r in reasons)
    shed = predict_shedding(sc)
    assert shed["bucket"] + shed["queue"] == len(reasons) - by_length  # (the shedding line: exact here)
    assert len(predict_rejections(sc)["reasons"]) and by_length < predict_rejections(sc)["rejected"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "(checked on the workload's own requests" in x]
    assert len(line) == 1 and f"a run will reject {by_length:,} of 600 requests" in line[0], line
    assert "others these rules would reject are rejected first by policy.admission, counted there" in line[0]


def test_a_class_scoped_queue_limit_counts_the_other_classes_waiting(tmp_path, capsys):
    """policy.admission.classes: [b] with max_queue 100, the other class (70% of the requests)
    alone above what the deployment serves: the limit counts every request waiting, and the
    others' (never rejected) hold the queue once it is full, so b's requests get in only while it
    fills. validate counted the whole limit as b's room: about 86 shed, "at most", where the run
    shed 123. Now the run itself replayed with its rules: its count."""
    from servesim.predictions import predict_shedding

    lengths = {k: SHED[k] for k in ("workload.prompt_tokens", "workload.output_tokens")}
    sc = make_scenario(**{**SHED, "workload.prompt_tokens": None, "workload.output_tokens": None},
                       **{"policy.admission": {"max_queue": 100, "classes": ["b"]},
                          "workload.classes": [{"name": "a", "share": 0.7, **{k[9:]: v for k, v in lengths.items()}},
                                               {"name": "b", "share": 0.3, **{k[9:]: v for k, v in lengths.items()}}]})
    shed = predict_shedding(sc)
    s = simulate(sc).summary
    assert shed["overloaded"] and shed["backlog"] == "others"
    assert 0 < s["rejected"] == shed["queue"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "policy.admission.max_queue=100" in x]
    assert len(line) == 1 and line[0].startswith("warning: ")
    assert f"{shed['queue']:,} requests (the run replayed with its rules: its count)" in line[0]


@pytest.mark.parametrize("rule", [{"max_queue": 20}, {"max_queued_tokens": 50_000},
                                  {"token_bucket": {"rate_rps": 5.0, "burst": 30}}])
@pytest.mark.parametrize("time_s", [0.0, 2.5])
def test_validate_predicts_what_admission_sheds_of_requests_arriving_at_once(tmp_path, capsys, rule, time_s):
    """all_at_once arrivals and a queue limit: the run rejected 580 of 600 requests and validate
    said nothing (no rate to compare). They all arrive before a step admits any, so the run's first
    instant, replayed, gives the run's count; with a limit above the requests, nothing. The
    same when they arrive later than 0 (all_at_once's time_s: the replay, cut off just after 0,
    saw none of them, and validate said nothing)."""
    from servesim.predictions import predict_shedding

    at_once = {**SHED, "workload.arrival": {"process": "all_at_once", "time_s": time_s}}
    sc = make_scenario(**at_once, **{"policy.admission": rule})
    s = simulate(sc).summary
    assert s["rejected"] > 0.5 * 600 and predict_shedding(sc)["at_once"] == s["rejected"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "policy.admission decides" in x]
    assert len(line) == 1 and line[0].startswith(f"warning: a run will reject {s['rejected']:,} of 600 requests")
    roomy = make_scenario(**at_once, **{"policy.admission": {"max_queue": 600}})
    assert predict_shedding(roomy) is None and simulate(roomy).summary["rejected"] == 0


@pytest.mark.parametrize("kind", ["short", "closed", "closed_by_duration", "sessions"])
def test_validate_replays_what_admission_sheds_where_no_rate_tells(tmp_path, capsys, monkeypatch, kind):
    """Fewer than 200 open-loop requests (too few for the rate probe), closed loops and sessions
    (their requests follow the replies): validate said nothing of what admission sheds, where
    the runs shed a quarter to nearly all of their requests. The run itself is replayed, its
    first SHEDDING_REPLAY_REQUESTS requests at most (1,000 here, so that the runs cut by
    duration_s outgrow it): the run's count when that is all of it, else the share, with how it
    moved from the first half of the replay to the later."""
    from servesim import predictions
    from servesim.predictions import predict_shedding

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    kw = {"policy.admission": {"max_queue": 2}, "policy.max_num_seqs": 16}
    if kind == "short":
        kw.update({"workload.num_requests": 150, "workload.arrival": {"process": "poisson", "rate_rps": 100.0}})
    else:
        kw.update({"workload.arrival": {"process": "closed_loop", "clients": 64, "think_time_s": 0.0}})
        if kind == "closed":
            kw["workload.num_requests"] = 300
        elif kind == "closed_by_duration":
            kw.update({"workload.num_requests": None, "workload.duration_s": 1.0})
        else:
            kw.update({"workload.num_requests": None, "workload.duration_s": 1.0,
                       "workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 4}}})
    sc = make_scenario(**kw)
    shed = predict_shedding(sc)
    s = simulate(sc).summary
    assert s["rejected"] >= 0.1 * s["num_requests"] and "rejections" in {w["code"] for w in s["warnings"]}
    if kind in ("short", "closed"):  # the whole run replayed: its count
        assert shed["whole"] and shed["shed"] == s["rejected"] and shed["replayed"] == s["num_requests"]
    else:  # the run's first requests, until 1,000 were admitted: the share, of the same order
        assert not shed["whole"] and shed["replayed"] > 1000
        assert 0.5 < shed["rejected_share"] / (s["rejected"] / s["num_requests"]) < 2
        h = shed["halves"]
        assert h["first"] + h["later"] == shed["replayed"] and h["first_shed"] + h["later_shed"] == shed["shed"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and line[0].startswith("warning: a run will reject ")
    assert ("fewer than 200 requests" in line[0]) == (kind == "short")
    assert (f"the later {shed['replayed'] - shed['replayed'] // 2:,}" in line[0]) == (not shed["whole"])


@pytest.mark.parametrize("bound", ["num_requests", "duration_s", "storm", "sessions"])
def test_validate_replays_a_closed_loops_own_first_requests(tmp_path, capsys, monkeypatch, bound):
    """A closed loop longer than the replay: validate replayed its first 1,000 requests with lengths
    drawn anew (a loop of 1,000 draws other lengths than one of 3,000), so its count was not the
    run's: closed-loop.yaml with max_queue=4 read 71 shed of the first 1,000 (7%), where the run
    shed 61 there and no more (3% of 2,000). And its clients' first requests can be mostly
    rejections, each rejected client sending again (with think time 0 and max_queue=4, 976 of the
    first 1,000, 168 of the next 1,000): 98% read where the run shed 57%. The replay is the run's
    own loop, stopped once 1,000 of its requests were admitted (a rejection costs it next to
    nothing): its count is exactly the run's over as many requests, the whole run's when that is
    all of it, and the line says what share of the run it is at least (with SHEDDING_REPLAY_REQUESTS
    at 1,000, so that these runs outgrow it)."""
    from servesim import predictions
    from servesim.predictions import predict_shedding

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    kw = {"policy.admission": {"max_queue": 1}, "policy.max_num_seqs": 4,
          "workload.arrival": {"process": "closed_loop", "clients": 12, "think_time_s": 0.05},
          "workload.prompt_tokens": {"dist": "lognormal", "mean": 256, "sigma": 1.0, "max": 4096},
          "workload.output_tokens": {"dist": "uniform", "min": 1, "max": 24}, "workload.num_requests": 3000}
    if bound == "duration_s":
        kw.update({"workload.num_requests": None, "workload.duration_s": 30.0})
    elif bound == "sessions":  # (multi-turn sessions, opened at Poisson times: their start times drawn for 2,000)
        kw.update({"policy.admission": {"max_queue": 2}, "policy.max_num_seqs": 16, "workload.num_requests": 2000,
                   "workload.arrival": {"process": "poisson", "rate_rps": 30.0},
                   "workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 4}, "think_time_s": 1.0}})
    elif bound == "storm":  # (every client at once, no think time: its first requests mostly rejected)
        kw.update({"policy.admission": {"max_queue": 2}, "policy.max_num_seqs": 64, "workload.num_requests": 1500,
                   "workload.arrival": {"process": "closed_loop", "clients": 32, "think_time_s": 0.0}})
    sc = make_scenario(**kw)
    shed = predict_shedding(sc)
    r = simulate(sc).requests
    k, ids = shed["replayed"], np.asarray(r["request_id"])
    rejected = np.array([isinstance(x, str) and x.startswith("admission: ")
                         for x in np.asarray(r["reason"], dtype=object)])
    ran = int(rejected[ids < k].sum())
    assert ran > 0 and shed["shed"] == ran and shed["own"]
    assert shed["whole"] == (bound == "storm") == (k == len(ids))
    # (extended past 1,000 by its rejections where they were most of it, up to 1,000 admitted, or the whole run)
    assert k == len(ids) or (k - ran <= 1000 and (k > 1000 or 2 * ran < k))
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    if bound == "storm":
        assert len(line) == 1 and line[0].startswith(f"warning: a run will reject {ran:,} of 1,500 requests")
    else:
        assert len(line) == 1 and f"({ran:,} of its first {k:,}, the run's own, replayed" in line[0]
        assert ("at least" in line[0]) == (bound != "duration_s")


def test_validate_extends_a_closed_loop_s_replay_only_past_a_storm_of_rejections(monkeypatch):
    """A closed loop's partial replay was run again from the start, up to SHEDDING_EXTEND times,
    until SHEDDING_REPLAY_REQUESTS were admitted, whatever share it rejected: with that at 10,000
    closed-loop.yaml's 15,000 requests behind max_queue=8 (a tenth rejected) took validate 30 s
    against the run's 10 s. Only a replay mostly of rejections (the storm the extension is for)
    is extended: here (1,000 replayed, a few percent rejected) one replay, the run's count over
    the requests it ran."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    calls = []
    real = predictions.simulate
    monkeypatch.setattr(predictions, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    sc = load_scenario(str(ROOT / "scenarios" / "closed-loop.yaml"),
                       ["workload.num_requests=3000", "policy.admission.max_queue=4"])
    shed = predictions.predict_shedding(sc)
    assert shed is not None and shed["own"] and not shed["whole"] and shed["replayed"] == 1000
    assert len(calls) == 1 and 2 * shed["shed"] < shed["replayed"]
    r = real(sc).requests
    rejected = np.array([isinstance(x, str) and x.startswith("admission: ")
                         for x in np.asarray(r["reason"], dtype=object)])
    assert shed["shed"] == int(rejected[np.asarray(r["request_id"]) < 1000].sum())


def test_validate_replays_a_closed_loop_cut_by_duration_within_its_first_chunk_of_lengths():
    """A closed loop with only duration_s draws its lengths in chunks of 4,096; a replay of its
    first 10,000 drew its third chunk cut short, whose columns come out of the generator otherwise
    than the run's, so its count (7,170 shed) was not the run's over those requests (7,197),
    though the line calls them the run's own. The replay stays within the first chunk."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{"policy.admission": {"max_queue": 1}, "policy.max_num_seqs": 4,
                          "workload.arrival": {"process": "closed_loop", "clients": 12, "think_time_s": 0.05},
                          "workload.prompt_tokens": {"dist": "lognormal", "mean": 256, "sigma": 1.0, "max": 4096},
                          "workload.output_tokens": {"dist": "uniform", "min": 1, "max": 24},
                          "workload.num_requests": None, "workload.duration_s": 100.0})
    shed = predict_shedding(sc)
    r = simulate(sc).requests
    k, ids = shed["replayed"], np.asarray(r["request_id"])
    rejected = np.array([isinstance(x, str) and x.startswith("admission: ")
                         for x in np.asarray(r["reason"], dtype=object)])
    assert shed["own"] and not shed["whole"] and k < len(ids)
    assert shed["shed"] == int(rejected[ids < k].sum()) > 0


@pytest.mark.parametrize("arrival", [{"process": "poisson", "rate_rps": 20.0},
                                     {"process": "on_off", "rate_rps": 60.0, "on_s": 1.0, "off_s": 9.0}])
def test_validate_replays_shedding_where_rates_show_no_overload(tmp_path, capsys, arrival):
    """20 req/s against a probe that completed 14.6 req/s: within the overload margin (1.5x), so
    validate said nothing of admission, and the run shed 101 of its 600 requests (17%, its
    rejections warning); chat.yaml at 60 req/s (probe 39.8) shed 22% the same way. Bursts of 60
    req/s, 6.6 on average: the run shed 209 (bursty.yaml and coding.yaml with max_queue=2, 19%
    and 23%). Where the average rate shows no clear overload, the workload's first requests at
    their own times, with the rules, are replayed: here that is the whole run on its one
    replica, so the count is the run's."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{**SHED, "workload.arrival": arrival}, **{"policy.admission": {"max_queue": 5}})
    s = simulate(sc).summary
    assert s["rejected"] >= 0.1 * 600 and "rejections" in {w["code"] for w in s["warnings"]}
    shed = predict_shedding(sc)
    assert shed is not None and shed["at_rate"] and shed["whole"] and shed["shed"] == s["rejected"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and line[0].startswith(f"warning: a run will reject {s['rejected']:,} of 600 requests")
    assert "at their own arrival times on the whole deployment" in line[0]


@pytest.mark.parametrize("replicas, arrival", [(2, {"process": "on_off", "rate_rps": 120.0, "on_s": 1.0, "off_s": 9.0}),
                                               (3, {"process": "poisson", "rate_rps": 55.0})])
def test_validate_replays_shedding_on_every_replica_with_its_router(tmp_path, capsys, replicas, arrival):
    """Several replicas behind a per-replica queue limit: the replay ran one replica with the
    arrival times stretched by the replicas, but the router sends each arrival to the least loaded
    replica, so the replicas' queues fill together far less often than one replica's (bursty.yaml
    on two replicas with max_queue=2: 21 of 600 predicted, 3 shed by the run). The replay now runs
    the whole deployment: the whole run's count is the run's."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{**SHED, "workload.arrival": arrival, "cluster.replicas": replicas},
                       **{"policy.admission": {"max_queue": 3}})
    s = simulate(sc).summary
    assert s["rejected"] > 0
    shed = predict_shedding(sc)
    assert shed is not None and shed["at_rate"] and shed["whole"] and shed["shed"] == s["rejected"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and f"a run will reject {s['rejected']:,} of 600 requests" in line[0]


def test_validate_counts_a_token_bucket_and_a_queue_rule_both_below_overload(tmp_path, capsys):
    """A token bucket beside max_queue, the rate within the overload margin: the prediction
    counted only the bucket's rejections (chat.yaml at 60 req/s, bucket 50 req/s burst 20,
    max_queue=20: 300 said, the run rejected 465, 165 of them by max_queue). The first requests
    are now replayed with every rule (here the whole run: its count), the bucket's whole-run count
    beside them."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{**SHED, "workload.arrival": {"process": "poisson", "rate_rps": 20.0}},
                       **{"policy.admission": {"max_queue": 5, "token_bucket": {"rate_rps": 18.0, "burst": 5}}})
    r = simulate(sc).requests
    reasons = [x for x in np.asarray(r["reason"], dtype=object) if isinstance(x, str) and x.startswith("admission: ")]
    bucket = sum("token bucket" in x for x in reasons)
    assert 0 < bucket < len(reasons)  # (both rules reject in the run)
    shed = predict_shedding(sc)
    assert shed is not None and shed["whole"] and shed["bucket"] == bucket
    assert round(shed["rejected_share"] * 600) == len(reasons)
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and line[0].startswith(f"warning: a run will reject {len(reasons):,} of 600 requests")
    assert "token bucket" in line[0] and "policy.admission.max_queue=5" in line[0]


def test_validate_says_a_queue_rule_beside_a_token_bucket_is_not_counted_where_no_replay_tells(
        tmp_path, capsys, monkeypatch):
    """Where the replay of the first requests sheds none (the bucket rejecting only later; stubbed
    here), the bucket's exact count is all that is predicted: the line says the queue rule's
    rejections are not counted and the share is a floor, not "about" all of it."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "_shed_at_rate", lambda *a, **k: None)
    sc = make_scenario(**{**SHED, "workload.arrival": {"process": "poisson", "rate_rps": 20.0}},
                       **{"policy.admission": {"max_queue": 5, "token_bucket": {"rate_rps": 18.0, "burst": 5}}})
    shed = predictions.predict_shedding(sc)
    assert shed is not None and shed["bucket"] > 0 and not shed["queue"] and shed["uncounted"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "token_bucket" in x]
    assert len(line) == 1 and "a run will reject at least " in line[0]
    assert "policy.admission.max_queue=5 rejections are not counted" in line[0]


@pytest.mark.parametrize("arrival, rule", [
    ({"process": "poisson", "rate_rps": 18.0}, {"max_queue": 40}),
    ({"process": "on_off", "rate_rps": 60.0, "on_s": 5.0, "off_s": 15.0}, {"max_queued_tokens": 50_000})])
def test_validate_replays_the_whole_run_where_rates_show_no_overload(tmp_path, capsys, arrival, rule):
    """Within the overload margin validate replayed only the run's first 1,000 requests, and said
    their share: 8% at 18 req/s with max_queue=40 where the run of 2,000 shed 13.6% (its queue full
    from early on, so no still-filling warning either), 13% on bursty.yaml at 60 req/s with
    max_queued_tokens=50000 where the run shed 28% (its bursts). A run of up to
    SHEDDING_REPLAY_REQUESTS requests is now replayed whole, its rules and router kept: the count
    is the run's."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{**SHED, "workload.num_requests": 2000, "workload.arrival": arrival},
                       **{"policy.admission": rule})
    s = simulate(sc).summary
    assert s["rejected"] > 0
    shed = predict_shedding(sc)
    assert shed["at_rate"] and shed["whole"] and shed["replayed"] == 2000 and shed["shed"] == s["rejected"]
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and f"a run will reject {s['rejected']:,} of 2,000 requests" in line[0]


def _first_shed(r, k: int, bucket: bool) -> tuple:
    """The run's rejections by policy.admission among its first k requests (by arrival), in their
    first and later half (``bucket``: the token bucket's too)."""
    order = np.argsort(np.asarray(r["arrival_s"], dtype=np.float64), kind="stable")[:k]
    shed = np.array([isinstance(x, str) and x.startswith("admission: ") and (bucket or "token bucket" not in x)
                     for x in np.asarray(r["reason"], dtype=object)[order]])
    return int(shed[:k // 2].sum()), int(shed[k // 2:].sum())


def test_validate_says_what_a_replay_of_the_run_s_first_requests_covers_and_how_its_share_moved(
        tmp_path, capsys, monkeypatch):
    """A run longer than SHEDDING_REPLAY_REQUESTS (1,000 here) is replayed over its first requests
    only. Their queue still filling, the share read low (4.5% of the first 1,000 at 17 req/s with
    max_queue=40, the run 9.7%), and the warning that it would rise came from a queue-length
    ratio that also fired where the share held (a queue filling and emptying near capacity) and
    missed queues full early. The line now says the requests it covers and what their first and
    later halves shed (the run's own first requests: their counts are the run's), a warning
    when either share reaches the run's rejections threshold."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": 2000,
                          "workload.arrival": {"process": "poisson", "rate_rps": 17.0}},
                       **{"policy.admission": {"max_queue": 40}})
    shed = predictions.predict_shedding(sc)
    assert shed is not None and shed["at_rate"] and not shed["whole"] and shed["replayed"] == 1000
    a, b = _first_shed(simulate(sc).requests, 1000, True)
    h = shed["halves"]
    assert (h["first"], h["later"], h["first_shed"], h["later_shed"]) == (500, 500, a, b)
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and "the prediction covers those first 1,000 only" in line[0] and "of its 2,000" in line[0]
    assert f"the first 500 of them shed {a / 500:.1%}, the later 500 {b / 500:.1%}" in line[0]
    assert ("rising through them" in line[0]) == h["rising"]
    assert line[0].startswith("warning: ") == (max(a + b, 2 * b) >= 100)  # (10% of 1,000, or of the later 500)


def test_validate_says_a_partial_replay_s_reasons_cover_its_requests_beside_a_whole_run_bucket(
        tmp_path, capsys, monkeypatch):
    """A token bucket beside max_queue, the run longer than the replay: the line's headline gave
    the bucket's whole-run count and its reason list the replay's (the bucket's count among the
    first 1,000 only) without saying so. The reasons are now said to be those of the replayed
    requests, and the queue rules' share is said apart from the bucket's."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 1000)
    sc = make_scenario(**{**SHED, "workload.num_requests": 2000,
                          "workload.arrival": {"process": "poisson", "rate_rps": 20.0}},
                       **{"policy.admission": {"max_queue": 5, "token_bucket": {"rate_rps": 18.0, "burst": 5}}})
    r = simulate(sc).requests
    bucket = sum(isinstance(x, str) and "token bucket" in x for x in np.asarray(r["reason"], dtype=object))
    shed = predictions.predict_shedding(sc)
    assert shed is not None and not shed["whole"] and shed["bucket"] == bucket > shed["replay_bucket"] > 0
    a, b = _first_shed(r, 1000, False)
    assert (shed["halves"]["first_shed"], shed["halves"]["later_shed"]) == (a, b)
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "in policy.admission" in x]
    assert len(line) == 1 and f"{bucket:,} of 2,000" in line[0]
    reasons = line[0].split("reasons among those first 1,000: ")
    assert len(reasons) == 2
    counts = [int(c.replace(",", "")) for c in re.findall(r"(?:^|; )([\d,]+) x ", reasons[1])]
    assert sum(counts) == shed["shed"]  # (the replay's: the bucket's among them too)
    assert f"{shed['replay_bucket']:,} x admission: token bucket" in reasons[1]


def test_validate_predicts_no_shedding_where_the_deployment_keeps_up(tmp_path, capsys):
    """The same queue limit at a rate the deployment serves: nothing predicted, nothing rejected."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**{**SHED, "workload.arrival": {"process": "poisson", "rate_rps": 8.0}},
                       **{"policy.admission": {"max_queue": 20}})
    assert predict_shedding(sc) is None
    assert simulate(sc).summary["rejected"] == 0
    assert not [x for x in _validate_lines(tmp_path, capsys, sc) if "reject" in x or "shedding" in x]


def test_validate_replays_the_token_bucket_and_names_a_backlog_no_rule_bounds(tmp_path, capsys):
    """A token bucket rejects by the arrival times alone: validate replays it, the run's count
    exactly. Past a bucket that lets through more than the deployment serves, with no queue rule,
    the backlog still grows: validate says so, and the run falls behind."""
    from servesim.predictions import predict_shedding

    for rate, backlog in ((10.0, None), (40.0, "unbounded")):
        sc = make_scenario(**SHED, **{"policy.admission": {"token_bucket": {"rate_rps": rate}}})
        shed = predict_shedding(sc)
        s = simulate(sc).summary
        assert shed["bucket"] == s["rejected"] > 0.1 * 600 and shed["backlog"] == backlog
        line = [x for x in _validate_lines(tmp_path, capsys, sc) if "token_bucket" in x]
        assert len(line) == 1 and line[0].startswith("warning: ")
        # a count of requests out of requests (it read "rejects 532 of the 31.2 req/s offered")
        assert f"rejects {s['rejected']:,} of 600 requests (" in line[0] and "req/s on average" in line[0]
        assert ("no rule bounds the queue" in line[0]) == (backlog is not None)
        if backlog:
            assert s["workload"]["keep_up"]["ratio"] < 0.9


def test_validate_names_a_queue_limit_that_holds_the_whole_excess(tmp_path, capsys):
    """A max_queue above the run's excess never fills: no request is shed, the queue grows as
    without it, and validate says the backlog grows rather than predicting rejections."""
    from servesim.predictions import predict_shedding

    sc = make_scenario(**SHED, **{"policy.admission": {"max_queue": 2000}})
    assert predict_shedding(sc)["backlog"] == "room"
    s = simulate(sc).summary
    assert s["rejected"] == 0 and "not_keeping_up" in {w["code"] for w in s["warnings"]}
    lines = _validate_lines(tmp_path, capsys, sc)
    assert any(x.startswith("warning: ") and "holds most of this run's excess" in x for x in lines)


def test_validate_predicts_a_clear_overload_of_a_pd_split(capsys):
    """A P/D split at three times what it serves: the run falls behind (a third of the arrivals
    leave), and validate said nothing (the probe skipped P/D splits). The probe now runs the whole
    split; at the packaged scenario's own rate it stays quiet, and the run keeps up."""
    from servesim.predictions import predict_overload

    pd = str(ROOT / "scenarios" / "pd-split.yaml")
    fast = load_scenario(pd, ["workload.arrival.rate_rps=100"])
    over = predict_overload(fast)
    assert over["overloaded"] and over["offered_rps"] > 3 * over["served_rps"]
    assert simulate(fast).summary["workload"]["keep_up"]["ratio"] < 0.5
    assert main(["validate", pd, "--set", "workload.arrival.rate_rps=100"]) == 0
    assert "all at once on the whole P/D split (1 prefill + 2 decode replicas)" in capsys.readouterr().out
    assert not predict_overload(load_scenario(pd, []))["overloaded"]
    assert main(["validate", pd]) == 0
    assert "well above" not in capsys.readouterr().out
    assert simulate(load_scenario(pd, [])).summary["workload"]["keep_up"]["ratio"] > 0.9


def test_the_overload_probe_stays_quick_with_a_tiny_token_budget(monkeypatch):
    """A step holds at most the token budget, so at a budget of a few tokens the probe's prompts
    alone take hundreds of thousands of steps (a fuzzed scenario made validate take 32 s): the
    probe keeps the requests whose prompts fit OVERLOAD_PROBE_STEPS budget-sized steps, and says
    nothing when fewer than OVERLOAD_PROBE_MIN do, without simulating."""
    import servesim.predictions as S
    from servesim.simulation import plan

    calls = []
    real = S.simulate
    monkeypatch.setattr(S, "simulate", lambda sc, **kw: calls.append(len(kw["specs"])) or real(sc, **kw))
    base = ["policy.name=chunked_prefill", "workload.arrival.rate_rps=80"]
    assert S.predict_overload(load_scenario(None, base + ["policy.max_num_batched_tokens=1"])) is None
    assert calls == []
    sc = load_scenario(None, base + ["policy.max_num_batched_tokens=16"])
    over = S.predict_overload(sc)
    specs = plan(sc)[1]
    k = over["probe_requests"]
    # the most requests whose prompts fit the step bound: one more would not
    assert S.OVERLOAD_PROBE_MIN <= k < 1000 and calls == [k]
    assert specs.prompt_tokens[:k].sum() / 16 <= S.OVERLOAD_PROBE_STEPS < specs.prompt_tokens[:k + 1].sum() / 16
    assert over["overloaded"]
    # static batching ignores the token budget: its probe is not cut
    assert S.predict_overload(load_scenario(None, ["policy.name=static", "policy.prefix_caching=false",
                                                   "policy.max_num_batched_tokens=16",
                                                   "workload.arrival.rate_rps=80"]))["probe_requests"] == 1000



def test_validate_predicts_prompts_that_can_wait_at_the_head_of_the_queue(tmp_path, capsys):
    """validate counts the workload's own prompts within max_num_seqs tokens of the budget (whole
    prompts beside decodes: each fits only while few decodes run); the run then shows their
    waits. Quiet with chunked prefill, prefill_first, or prompts well under the budget."""
    from servesim.predictions import predict_head_of_line

    kw = {"policy.max_num_batched_tokens": 2048, "workload.num_requests": 300,
          "workload.arrival": {"process": "poisson", "rate_rps": 8.0},
          "workload.prompt_tokens": None, "workload.output_tokens": None,
          "workload.classes": [
              {"name": "chat", "share": 0.8, "prompt_tokens": {"dist": "uniform", "min": 50, "max": 300},
               "output_tokens": {"dist": "uniform", "min": 100, "max": 300}},
              {"name": "long", "share": 0.2, "prompt_tokens": {"dist": "uniform", "min": 2030, "max": 2046},
               "output_tokens": {"dist": "fixed", "value": 2}}]}
    sc = make_scenario(**kw)
    hol = predict_head_of_line(sc)
    long = int((np.array(simulate(sc).requests["prompt_tokens"]) > 2000).sum())
    assert hol["tight"] == long > 0 and hol["budget"] == 2048 and 2030 <= hol["longest"] <= 2046
    for quiet in ({"policy.name": "chunked_prefill"}, {"policy.prefill_first": True},
                  {"workload.classes": [{**kw["workload.classes"][0], "share": 1.0}]}):
        h = predict_head_of_line(make_scenario(**{**kw, **quiet}))
        assert h is None or h["tight"] == 0, quiet
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(BASE, kw)))
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {long:,} of 300 prompts" in out and "tokens of the 2,048-token budget" in out
    assert main(["validate", str(p), "--set", "policy.skip_unfit_prompts=true"]) == 0
    assert "set aside while the requests behind it go ahead" in capsys.readouterr().out


def test_head_of_line_prediction_counts_speculative_decodes_as_k_plus_1_tokens(tmp_path, capsys):
    """With speculative decoding a decode takes k + 1 tokens of the budget: prompts up to 3,700
    tokens under a 4,096-token budget with 256 sequences of k = 4 waited at the head of the queue
    (the run: dozens, a fifth of its time) while validate, counting one token a decode, said
    nothing. It now counts prompts within max_num_seqs x (k + 1) tokens, and says so."""
    from servesim.predictions import predict_head_of_line

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({
        "name": "spec-hol", "seed": 0, "model": "meta-llama/Meta-Llama-3-8B", "hardware": {"gpu": "h100-sxm"},
        "policy": {"name": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 4096,
                   "spec": {"draft": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.5}},
        "workload": {"num_requests": 600, "arrival": {"process": "poisson", "rate_rps": 30.0},
                     "prompt_tokens": {"dist": "uniform", "min": 100, "max": 3700},
                     "output_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5, "max": 380}}}))
    s = simulate(load_scenario(str(sc))).summary
    assert s["head_of_line"]["budget_blocked_requests"] > 0  # what the run shows
    hol = predict_head_of_line(load_scenario(str(sc)))
    assert hol["decode_tokens"] == 5 and hol["tight"] > 0 and hol["longest"] > 4096 - 256 * 5
    assert main(["validate", str(sc)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {hol['tight']:,} of 600 prompts" in out
    assert "within policy.max_num_seqs x (k + 1) = 256 x 5 = 1,280 tokens of the 4,096-token budget" in out
    # without speculative decoding the same prompts are well under the budget: quiet, as the run
    plain = load_scenario(str(sc), ["policy.spec=null"])
    assert predict_head_of_line(plain)["tight"] == 0
    assert simulate(plain).summary["head_of_line"]["budget_blocked_requests"] == 0


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_output_cap_rejections_group_as_one_reason(policy):
    """policy.max_output_tokens (static batching, or reserve=max) rejects every longer output: the
    reasons were told apart by each output's length ('5 x output of 233 tokens ...; 5 x output of
    229 tokens ...' for 318 rejections, in the run's warning and validate's prediction alike)."""
    kw = {"policy.name": policy, "policy.max_output_tokens": 60, "workload.num_requests": 200,
          "workload.output_tokens": {"dist": "uniform", "min": 10, "max": 120}}
    if policy == "continuous":
        kw["policy.reserve"] = "max"
    sc = make_scenario(**kw)
    s = simulate(sc).summary
    reasons = s["profile"]["diagnosis"]["slo_misses"]["rejection_reasons"]
    assert s["rejected"] > 10 and reasons == [[reasons[0][0], s["rejected"]]]
    assert reasons[0][0].startswith("output of N tokens exceeds policy.max_output_tokens=60")
    assert predict_rejections(sc)["reasons"] == reasons


def test_reasons_group_by_rule():
    a = "prompt + output - 1 = 300 tokens exceeds policy.max_num_batched_tokens=256 (x)"
    b = "prompt + output - 1 = 912 tokens exceeds policy.max_num_batched_tokens=256 (x)"
    assert reason_key(a) == reason_key(b) and "=256" in reason_key(a)


def test_capacity_limits_in_the_wrong_unit_are_named():
    from servesim.outputs.checks import limit_unit_warnings
    from servesim.outputs.metrics import parse_slo

    w = limit_unit_warnings(parse_slo("ttft_p99=500,tpot_p99=50ms,tbt_p99=20"))
    assert [x["message"].split(" is ")[0] for x in w] == ["--slo ttft_p99=500", "--slo tbt_p99=20"]


class PlainPlugin(ContinuousPolicy):
    """A plug-in policy (module:Class): it may read any scenario field."""


def test_settings_the_running_policy_never_reads_are_a_warning(tmp_path, capsys):
    """A setting given for another policy (static batching's timeout, a P/D split's pools and
    link) is accepted, so that one scenario carries every variant of a sweep, but the run and
    validate say it changed nothing; its own policy reads it without a word, and a plug-in
    policy (which may read any field) gets none."""
    def codes(**kw):
        s = simulate(make_scenario(**{"workload.num_requests": 20, **kw})).summary
        return [w["message"] for w in s["warnings"] if w["code"] == "no_effect"]

    (msg,) = codes(**{"policy.batch_timeout_s": 0.5})
    assert msg.startswith("policy.batch_timeout_s=0.5 changes nothing with policy.name=continuous")
    assert codes(**{"policy.name": "static", "policy.batch_timeout_s": 0.5}) == []
    assert codes(**{"policy.max_output_tokens": 300, "policy.reserve": "max"}) == []
    (msg,) = codes(**{"policy.max_output_tokens": 300})
    assert "policy.reserve=max" in msg
    (msg,) = codes(**{"policy.link": {"overlap": True}})
    assert msg.startswith("policy.link (overlap=True) changes nothing with policy.name=continuous")
    assert codes(**{"policy.name": "pd_split", "policy.link": {"overlap": True}}) == []
    assert codes(**{"policy.name": "static", "policy.preemption": "swap"})
    (msg,) = codes(**{"policy.name": "static", "policy.watermark": 0.2})  # (static never reads it)
    assert msg.startswith("policy.watermark=0.2 changes nothing with policy.name=static")
    assert codes(**{"policy.watermark": 0.2}) == []
    assert codes(**{"policy.name": f"{__name__}:PlainPlugin", "policy.batch_timeout_s": 0.5}) == []
    # (queue settings only one order reads: the predictor, sjf_predicted; preempt_running, priority)
    (msg,) = codes(**{"policy.queue": {"predictor": {"sigma": 2.0}}})
    assert msg.startswith("policy.queue.predictor (sigma=2.0) changes nothing with policy.queue.order=fcfs")
    assert codes(**{"policy.queue": {"order": "sjf_predicted", "predictor": {"sigma": 2.0}}}) == []
    (msg,) = codes(**{"policy.queue": {"order": "sjf", "preempt_running": False}})
    assert msg.startswith("policy.queue.preempt_running=false changes nothing with policy.queue.order=sjf")
    assert codes(**{"policy.queue": {"order": "priority", "preempt_running": False}}) == []
    (msg,) = codes(**{"hardware.pp_overlap": False})
    assert msg.startswith("hardware.pp_overlap=false changes nothing with hardware.pp=1")
    assert codes(**{"hardware.pp_overlap": False, "hardware.pp": 2}) == []
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"model": "meta-llama/Llama-2-7b-hf", "hardware": {"gpu": "h100-sxm"},
                                 "workload": {"num_requests": 20, "preset": "azure_conv"},
                                 "policy": {"decode": {"replicas": 2}}}))
    assert main(["validate", str(p)]) == 0
    assert "warning: policy.decode (replicas=2) changes nothing with policy.name=continuous" in capsys.readouterr().out


@pytest.mark.parametrize("policy", ["continuous", "chunked_prefill"])
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_recompute_tokens_are_the_work_done_twice(policy, engine):
    """``kv.recompute_tokens`` counts the KV tokens recompute preemptions dropped: every request
    computes prompt + output - 1 tokens once (the last token is sampled, not computed), so the
    steps' prefill and decode tokens are exactly that sum plus the recompute tokens (chunked
    prefill: preempted mid-prompt too)."""
    sc = make_scenario(**{**CASES["kv_capacity"], "policy.name": policy,
                          "policy.max_num_batched_tokens": 512 if policy == "chunked_prefill" else 8192})
    res = simulate(sc, engine=engine)
    s, req = res.summary, res.requests
    assert s["completed"] == 120 and s["preemptions"] > 0
    once = int((req["prompt_tokens"] + req["output_tokens"] - 1).sum())
    ph = s["phases"]
    assert s["kv"]["recompute_tokens"] > 0
    assert ph["prefill_tokens"] + ph["decode_tokens"] == once + s["kv"]["recompute_tokens"]
    swap = simulate(make_scenario(**{**CASES["kv_capacity"], "policy.preemption": "swap"}), engine=engine).summary
    assert swap["preemptions"] > 0 and swap["kv"]["recompute_tokens"] == 0 and swap["kv"]["swap_out_bytes"] > 0


def test_many_preemptions_are_a_warning_with_their_cost():
    """A KV cache too small for the load preempts: at 5% as many preemptions as requests a
    ``preemptions`` warning says how many, what they cost (tokens dropped and computed again, or
    GB swapped) and what gives the KV room (vLLM warns at every preemption)."""
    s = simulate(make_scenario(**CASES["kv_capacity"])).summary
    w = {x["code"]: x["message"] for x in s["warnings"]}
    assert s["preemptions"] >= 0.05 * 120
    assert w["preemptions"].startswith(f"{s['preemptions']:,} preemptions over 120 requests: the running requests "
                                       "outgrew the KV cache; ")
    assert f"{s['kv']['recompute_tokens']:,} KV tokens were dropped, to be computed again (" in w["preemptions"]
    assert "memory.gpu_memory_utilization" in w["preemptions"] and "policy.max_num_seqs" in w["preemptions"]
    printed = format_summary(s)
    assert f"recompute     {s['kv']['recompute_tokens']} KV tokens dropped by preemption" in printed
    swap = simulate(make_scenario(**{**CASES["kv_capacity"], "policy.preemption": "swap"})).summary
    msg = {x["code"]: x["message"] for x in swap["warnings"]}["preemptions"]
    assert f"{swap['kv']['swap_out_bytes'] / 1e9:.3g} GB of KV was copied to host memory and back" in msg
    assert "dropped" not in msg
    # a few preemptions (under 5% of the requests) are no warning; none, no line either
    # (policy.watermark 0.01, vllm-v1's until 4fc341d: with none kept, 13 preemptions on 700 blocks)
    few = simulate(make_scenario(**{**CASES["kv_capacity"], "memory.num_gpu_blocks": 700,
                                    "policy.watermark": 0.01})).summary
    assert 0 < few["preemptions"] < 6 and "preemptions" not in {x["code"] for x in few["warnings"]}, few["preemptions"]
    assert "recompute " not in format_summary(simulate(make_scenario()).summary)


def test_more_kv_blocks_than_the_gpu_holds_is_a_warning(tmp_path, capsys):
    """``memory.num_gpu_blocks`` beyond the memory next to the weights: the run (and validate)
    says the GPU modelled has more memory than it has, with the room it has; an override within
    it (fewer blocks, as tests and vLLM's measured runs set) is no warning."""
    sc = make_scenario(**{"memory.num_gpu_blocks": 10_000_000, "workload.num_requests": 5})
    w = [x for x in simulate(sc).summary["warnings"] if x["code"] == "kv_override"]
    assert len(w) == 1 and w[0]["message"].startswith("memory.num_gpu_blocks=10,000,000 gives the colocated replicas "
                                                      "19,531 GiB of KV per GPU; the h100-sxm has ")
    assert "of its 80 GiB, memory.gpu_memory_utilization), room for " in w[0]["message"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "warning: memory.num_gpu_blocks=10,000,000 gives" in capsys.readouterr().out
    for blocks in (100, 29_000):  # (29,205 fit: 57 GiB of 2 MiB blocks)
        s = simulate(make_scenario(**{"memory.num_gpu_blocks": blocks, "workload.num_requests": 5})).summary
        assert "kv_override" not in {x["code"] for x in s["warnings"]}
    assert "kv_override" in {x["code"] for x in simulate(make_scenario(**{
        "memory.num_gpu_blocks": 29_206, "workload.num_requests": 5})).summary["warnings"]}


def test_requests_shortened_to_the_context_are_a_warning_validate_predicts(tmp_path, capsys):
    """Lengths beyond the model's context are shortened (workload.clip_to_context): at 10% of the
    requests the run warns that the lengths run are not the ones described, and validate predicts
    the count exactly from the workload's own requests (below 10%: an indented line)."""
    from servesim.predictions import predict_clipped

    long = {"model": "meta-llama/Llama-2-7b-hf", "workload.num_requests": 200,
            "workload.prompt_tokens": {"dist": "lognormal", "mean": 3000, "sigma": 0.8},
            "workload.output_tokens": {"dist": "lognormal", "mean": 500, "sigma": 0.8}}
    sc = make_scenario(**long)
    s = simulate(sc).summary
    k = s["workload"]["clipped_requests"]
    assert k >= 20 and predict_clipped(sc) == {"requests": 200, "clipped": k, "context_tokens": 4096}
    w = {x["code"]: x["message"] for x in s["warnings"]}
    assert w["clipped"].startswith(f"{k} of 200 requests ({k / 200:.0%}) were shortened to fit the model's 4,096-token "
                                   "context")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert f"warning: a run will shorten {k} of 200 requests" in capsys.readouterr().out
    few = make_scenario(**{**long, "workload.prompt_tokens": {"dist": "lognormal", "mean": 1500, "sigma": 0.8}})
    s = simulate(few).summary
    k = s["workload"]["clipped_requests"]
    assert 0 < k < 20 and "clipped" not in {x["code"] for x in s["warnings"]}
    path.write_text(yaml.safe_dump(few.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert f"  clipped: a run will shorten {k} of 200 requests" in capsys.readouterr().out
    assert predict_clipped(make_scenario()) == {"requests": 50, "clipped": 0, "context_tokens": 8192}
    sessions = make_scenario(**{"workload.sessions": {"turns": {"dist": "fixed", "value": 2}, "think_time_s": 1.0}})
    assert predict_clipped(sessions) is None


def test_validate_predicts_requests_no_load_lets_meet_the_slo(tmp_path, capsys):
    """An SLO some requests cannot meet even alone (their prompt's prefill, or one decode step,
    is over the limit): validate names how many and the attainment ceiling; the run's attainment
    stays under it, also per class; an SLO every request can meet alone is no warning."""
    from servesim.predictions import predict_slo_floors

    kw = {"workload.num_requests": 100, "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 8000},
          "workload.arrival": {"process": "poisson", "rate_rps": 0.5}, "slo": {"ttft_s": 0.1, "tpot_s": 0.05}}
    sc = make_scenario(**kw)
    p = predict_slo_floors(sc)
    assert p["requests"] == 100 and 0 < p["ttft"] == p["missed"] < 100 and p["tpot"] == 0 and p["ttft_max_s"] > 0.1
    s = simulate(sc).summary
    assert s["slo_attainment"] <= 1 - p["missed"] / 100
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert (f"warning: {p['missed']} of the 100 requests served ({p['missed']:.1f}%) cannot meet the SLO even on an "
            f"idle deployment: {p['ttft']} prompts take longer than their TTFT limit to prefill alone") in out
    assert f"SLO attainment cannot exceed {100 - p['missed']:.1f}% at any load" in out
    tight = predict_slo_floors(make_scenario(**{**kw, "slo": {"tpot_s": 0.001}}))
    several = int((simulate(sc).requests["output_tokens"] > 1).sum())  # (one output token: no TPOT)
    assert tight["tpot"] == tight["missed"] == several and tight["ttft"] == 0 and tight["tpot_min_s"] > 0.001
    assert predict_slo_floors(make_scenario(**{**kw, "slo": {"ttft_s": 10, "tpot_s": 1}}))["missed"] == 0
    assert predict_slo_floors(make_scenario(**{**kw, "slo": {}})) is None
    # per class: only the class with the tight limit misses
    lengths = {"prompt_tokens": kw["workload.prompt_tokens"], "output_tokens": {"dist": "uniform", "min": 1, "max": 64}}
    classes = make_scenario(**{**kw, "slo": {"ttft_s": 10}, "workload.prompt_tokens": None,
                               "workload.output_tokens": None, "workload.classes": [
                                   {"name": "chat", "share": 1, "slo": {"ttft_s": 0.1}, **lengths},
                                   {"name": "batch", "share": 1, **lengths}]})
    p = predict_slo_floors(classes)
    res = simulate(classes)
    req = res.requests
    chat = req["class"] == "chat"
    assert 0 < p["missed"] < chat.sum()
    assert res.summary["classes"]["chat"]["slo_attainment"] <= 1 - p["missed"] / chat.sum() + 1e-12


def test_a_run_says_what_validate_says_of_requests_no_load_lets_meet_the_slo(tmp_path, capsys):
    """validate warned "N of the requests served cannot meet the SLO even on an idle deployment"
    and the run of the same scenario said nothing of it: its low attainment read as a verdict on
    the load. The run warns (slo_floor) with validate's own sentence; an SLO every request can
    meet alone is no warning in either."""
    kw = {"workload.num_requests": 100, "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 8000},
          "workload.arrival": {"process": "poisson", "rate_rps": 0.5}, "slo": {"ttft_s": 0.1, "tpot_s": 0.05}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario(**kw).to_dict()))
    assert main(["validate", str(path)]) == 0
    said = [x.removeprefix("warning: ") for x in capsys.readouterr().out.splitlines()
            if "cannot meet the SLO even on an idle deployment" in x]
    assert len(said) == 1
    w = {x["code"]: x["message"] for x in simulate(make_scenario(**kw)).summary["warnings"]}
    assert w.get("slo_floor") == said[0]
    loose = simulate(make_scenario(**{**kw, "slo": {"ttft_s": 10, "tpot_s": 1}})).summary["warnings"]
    assert not any(x["code"] == "slo_floor" for x in loose)


@pytest.mark.parametrize("ttft_s", [0.01, 0.15])
def test_warnings_of_a_run_admission_rejected_all_or_most_of_say_what_was_served(ttft_s):
    """Every request rejected by the TTFT rule: the rejections warning said "the latencies describe
    only the requests that were served" (there were none) and slo_floor "100 of the 100 requests
    served" (none was). Both now count what the run served: none, or the few it did."""
    kw = {"workload.num_requests": 60, "workload.prompt_tokens": {"dist": "uniform", "min": 3000, "max": 7000},
          "workload.arrival": {"process": "poisson", "rate_rps": 16}, "slo": {"ttft_s": ttft_s, "tpot_s": 0.05},
          "policy.admission": {"ttft_slo": True}}
    s = simulate(make_scenario(**kw)).summary
    w = {x["code"]: x["message"] for x in s["warnings"]}
    n, rej = s["num_requests"], s["rejected"]
    served = n - rej
    assert rej >= 0.1 * n and served < n and (served == 0) == (ttft_s == 0.01)
    assert "requests that were served" not in w["rejections"]
    assert "requests served" not in w["slo_floor"]
    if served:  # (no cut-off: every request not rejected completed)
        assert f"the latencies describe only the {s['completed']} completed" in w["rejections"]
        assert f"the run admitted {served:,} of them" in w["slo_floor"]
    else:
        assert "none was served" in w["rejections"]
        assert "the run rejected them all" in w["slo_floor"]


def test_a_token_budget_below_max_num_seqs_is_said(tmp_path, capsys):
    """vLLM refuses max_num_batched_tokens < max_num_seqs; servesim runs it (a sweep's variants
    share one scenario) and says so, in the run and in validate: no step holds more sequences
    than the budget has tokens, so max_num_seqs is never reached. Static batching ignores the
    budget: nothing is said of it."""
    kw = {"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 16, "policy.max_num_seqs": 64,
          "workload.num_requests": 60, "workload.arrival": {"process": "poisson", "rate_rps": 40.0}}
    res = simulate(make_scenario(**kw))
    w = {x["code"]: x["message"] for x in res.summary["warnings"]}
    assert "policy.max_num_batched_tokens=16 is below policy.max_num_seqs=64" in w["budget_below_seqs"]
    assert res.steps["num_seqs"].max() <= 16 < 64  # what it says: the cap is the budget
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario(**kw).to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "warning: policy.max_num_batched_tokens=16 is below policy.max_num_seqs=64" in capsys.readouterr().out
    codes = lambda **k: [x["code"] for x in simulate(make_scenario(**k)).summary["warnings"]]  # noqa: E731
    assert "budget_below_seqs" not in codes(**{**kw, "policy.max_num_batched_tokens": 64})
    assert "budget_below_seqs" not in codes(**{**kw, "policy.name": "static"})
    pd = simulate(make_scenario(**{"policy.name": "pd_split", "policy.max_num_seqs": 64,
                                   "policy.decode": {"replicas": 1, "max_num_batched_tokens": 32}})).summary
    msgs = [x["message"] for x in pd["warnings"] if x["code"] == "budget_below_seqs"]
    assert len(msgs) == 1 and msgs[0].startswith("the decode pool's max_num_batched_tokens=32 is below its "
                                                 "max_num_seqs=64")


def _tiny_kv_scenario(tmp_path):
    """A KV cache of 600 blocks (9,600 tokens) for 32 sequences of ~1,100 tokens, at 5 req/s."""
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({
        "name": "tiny-kv", "seed": 7, "model": "Qwen/Qwen2.5-7B-Instruct", "hardware": {"gpu": "h200"},
        "memory": {"num_gpu_blocks": 600}, "policy": {"name": "continuous", "max_num_seqs": 32},
        "workload": {"num_requests": 600, "arrival": {"process": "poisson", "rate_rps": 5.0},
                     "prompt_tokens": {"dist": "lognormal", "mean": 800, "sigma": 0.6, "max": 4000},
                     "output_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5}}}))
    return sc


def test_validate_predicts_preemptions_where_the_run_has_them(tmp_path, capsys):
    """A KV cache of 600 blocks (9,600 tokens) for 32 sequences of ~1,100 tokens: near its
    capacity the run preempted 114 times over 600 requests and validate said nothing of it. The
    overload probe preempts as the batch fills; with the offered rate near what it serves,
    validate names it, and the run's own preemptions warning agrees. At a light load it stays
    quiet, and the run preempts less than the warning's share."""
    sc = _tiny_kv_scenario(tmp_path)
    for rate, expect in ((5.0, True), (2.0, False)):
        assert main(["validate", str(sc), "--set", f"workload.arrival.rate_rps={rate}"]) == 0
        said = "limits the batch under this load" in capsys.readouterr().out
        s = simulate(load_scenario(str(sc), [f"workload.arrival.rate_rps={rate}"])).summary
        ran = any(w["code"] == "preemptions" for w in s["warnings"])
        assert said == ran == expect, (rate, said, s["preemptions"])


def test_validate_names_no_preemptions_a_run_below_the_probes_rate_does_not_have(capsys):
    """The packaged vLLM reproduction (OPT-13B on an A100-40G at 2 req/s): the all-at-once probe
    preempted 1.3 times per request and serves 2.5 req/s, within the overload margin of the
    offered 2 req/s, so validate said a run will preempt; the run preempted 3% as many times as it
    has requests, under the run's warning. Below the probe's rate the batch need not fill: the
    same requests at their own arrival times (here all of the run's: the run's count) decide."""
    path = str(ROOT / "scenarios" / "reproduce" / "vllm-opt13b.yaml")
    # (policy.watermark 0.01, vllm-v1's until 4fc341d: with none kept the run preempts 58 times, a warning)
    sets = ["workload.num_requests=1000", "policy.watermark=0.01"]
    assert main(["validate", path, *(x for kv in sets for x in ("--set", kv))]) == 0
    out = capsys.readouterr().out
    s = simulate(load_scenario(path, sets)).summary
    assert 0 < s["preemptions"] < 0.05 * 1000 and "preemptions" not in {w["code"] for w in s["warnings"]}
    assert "limits the batch" not in out
    assert re.search(rf"at their own arrival times \(the offered 1\.9\d req/s\) {s['preemptions']:,} times", out)


@pytest.mark.parametrize("own", [True, False])
def test_pd_split_prefill_budget_rejection_names_the_pools_field_and_a_fix_that_keeps_the_split(own):
    """A P/D prefill replica runs the prompt alone: a prompt over its budget was said to be 'prompt +
    output - 1' over policy.max_num_batched_tokens (even when policy.prefill's budget was the one
    set) with 'use policy.name=chunked_prefill' (which undoes the split); each prompt length was
    its own reason. Now the budget's own field, the pool's chunked prefill, one reason grouped."""
    budget = {"policy.prefill": {"replicas": 1, "max_num_batched_tokens": 64}} if own else \
        {"policy.prefill": {"replicas": 1}, "policy.max_num_batched_tokens": 64}
    kw = {"policy.name": "pd_split", "policy.decode": {"replicas": 1}, **budget,
          "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 200}}
    sc = make_scenario(**kw)
    s = simulate(sc).summary
    reasons = s["profile"]["diagnosis"]["slo_misses"]["rejection_reasons"]
    assert s["rejected"] > 0 and len(reasons) == 1 and reasons[0][1] == s["rejected"]
    field = "policy.prefill.max_num_batched_tokens=64" if own else "policy.max_num_batched_tokens=64"
    assert reasons[0][0].startswith(f"prompt of N tokens exceeds {field} ")
    assert "policy.prefill.policy=chunked_prefill" in reasons[0][0] and "output" not in reasons[0][0]
    assert predict_rejections(sc)["reasons"] == reasons
    # the fix named helps: the pool's chunked prefill serves them all, still a split
    pf = {**kw["policy.prefill"], "policy": "chunked_prefill"}
    fixed = simulate(make_scenario(**{**kw, "policy.prefill": pf})).summary
    assert fixed["rejected"] == 0 and fixed["completed"] == fixed["num_requests"]


def test_preemption_fix_with_num_gpu_blocks_set_names_that_setting(tmp_path, capsys):
    """With memory.num_gpu_blocks set, the cache has that many blocks whatever the memory: the
    preemption warning (run) and its prediction (validate) advised memory.gpu_memory_utilization,
    hardware.kv_dtype=fp8 or a larger hardware.tp, none of which changes it. They now name
    memory.num_gpu_blocks, and raising it is what helps."""
    sc = _tiny_kv_scenario(tmp_path)
    assert main(["validate", str(sc)]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if "limits the batch under this load" in x]
    run = lambda *s: simulate(load_scenario(str(sc), list(s))).summary  # noqa: E731
    s = run()
    w = [x["message"] for x in s["warnings"] if x["code"] == "preemptions"]
    assert len(said) == len(w) == 1
    for text in (said[0], w[0]):
        assert "more kv blocks (memory.num_gpu_blocks=600 sets the cache's size" in text.lower()
        assert "more kv memory (memory.gpu_memory_utilization" not in text.lower()
    # what the old text advised changes nothing; what it says now does
    # (fp8 KV prices the steps a little faster: about as many preemptions, still past the warning's share)
    old = run("memory.gpu_memory_utilization=0.95", "hardware.kv_dtype=fp8")
    assert any(x["code"] == "preemptions" for x in old["warnings"]) \
        and old["kv_capacity"]["colocated"]["tokens_per_replica"] == 9600
    assert run("memory.num_gpu_blocks=6000")["preemptions"] < 0.05 * s["num_requests"] <= s["preemptions"]
    # without the override the advice is the memory's
    un = simulate(make_scenario(**{"memory.gpu_memory_utilization": 0.3})).summary
    assert preemption_warnings({**un, "preemptions": un["num_requests"]}, load_scenario(str(sc), [
        "memory.num_gpu_blocks=null"]))[0]["message"].count("More KV memory (memory.gpu_memory_utilization") == 1


def test_preemption_fix_on_a_pd_split_names_the_pools_fields():
    """On a P/D split the pools set their own TP and batch size: the preemption advice named only
    the top-level policy.max_num_seqs and hardware.tp, which a pool that sets its own ignores."""
    from servesim.outputs.checks import kv_room_fix

    sc = make_scenario(**{"policy.name": "pd_split", "policy.prefill": {"replicas": 1},
                          "policy.decode": {"replicas": 1, "max_num_seqs": 8}})
    text = kv_room_fix(sc)
    assert "policy.decode.max_num_seqs / policy.prefill.max_num_seqs, else policy.max_num_seqs" in text
    assert "policy.decode.tp / policy.prefill.tp, else hardware.tp" in text
    assert "policy.decode" not in kv_room_fix(make_scenario())


def test_a_short_run_well_below_capacity_is_not_read_as_a_growing_backlog():
    """Found by hand: chat on 4 replicas at 30 req/s (they keep up with about 80) read a keep-up
    ratio of 0.86 over 600 requests, and the run warned that the backlog grew (and compare marked
    it FAILS). Its arrivals bunched toward the end of the window: with no queue at all, its own
    arrivals and service times make most of that shortfall (keep_up_warmup), so the run is too
    short to tell. Well above capacity, a run as short still says the backlog grew."""
    from servesim.outputs.verdicts import fell_behind

    def run(rate):
        return simulate(load_scenario("chat", ["cluster.replicas=4", f"workload.arrival.rate_rps={rate}",
                                               "workload.num_requests=600"], seed=0)).summary

    below = run(30)
    keep = below["workload"]["keep_up"]
    assert keep["ratio"] < 0.9 and keep["ratio"] + keep["warmup"] >= 0.9
    assert not fell_behind(below)
    assert not any("backlog grew through the run:" in w["message"] for w in below["warnings"])
    over = run(120)  # 1.5 x what the 4 replicas keep up with
    keep = over["workload"]["keep_up"]
    assert keep["ratio"] + keep["warmup"] < 0.9 and fell_behind(over)
    (w,) = [w for w in over["warnings"] if w["code"] == "not_keeping_up"]
    assert w["message"].startswith("the backlog grew through the run")


def test_sessions_whose_turns_arrive_faster_through_a_short_run_are_not_read_as_a_growing_backlog():
    """Multi-turn sessions: the turns of the sessions started so far arrive at a rate that rises
    through the run, so more are being served at the window's end than at its start with no
    queue at all; at a load the deployment keeps up with, that is not a backlog."""
    from servesim.outputs.verdicts import fell_behind

    s = simulate(load_scenario("chat", ["cluster.replicas=4", "workload.arrival.rate_rps=3",
                                        "workload.sessions={turns: {dist: uniform, min: 2, max: 8}, think_time_s: 5}",
                                        "workload.num_requests=600"], seed=1)).summary
    keep = s["workload"]["keep_up"]
    assert keep["ratio"] < 0.9 and keep["warmup"] > 0 and not fell_behind(s)


def test_validate_does_not_say_rejections_are_not_predicted_beside_a_shedding_prediction(tmp_path, capsys):
    """Sessions in a closed loop behind max_queue=2: validate printed "rejections: not predicted
    (...)" and on the next line "warning: a run will reject 37 of 60 requests ... in
    policy.admission", two lines that read as contradicting each other. What it cannot predict is
    the rejections by the requests' lengths (their lengths are drawn as the run goes); the line
    says so, and the shedding line gives the run's own count."""
    sc = make_scenario(**{"workload.num_requests": 60,
                          "workload.arrival": {"process": "closed_loop", "clients": 32, "think_time_s": 0.0,
                                               "reject_wait_s": 0.2},
                          "workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 4},
                                                "think_time_s": 0.5},
                          "policy.admission": {"max_queue": 2}})
    s = simulate(sc).summary
    assert s["rejected"] > 0
    lines = _validate_lines(tmp_path, capsys, sc)
    shed = [x for x in lines if "a run will reject" in x]
    assert len(shed) == 1 and f"reject {s['rejected']:,} of 60 requests" in shed[0] and "policy.admission" in shed[0]
    (none,) = [x for x in lines if "not predicted" in x]
    assert none.startswith("  rejections: not predicted from the requests' lengths")


def test_the_rejections_warning_counts_completed_requests_not_unfinished_ones():
    """A queue bound rejects half the requests and the cut-off leaves the rest unfinished: the
    rejections warning said "the latencies describe only the 166 served" on a run that completed
    none (its "served" was every request not rejected, the unfinished too). It names the completed
    ones, and the unfinished apart."""
    kw = {"workload.num_requests": 400, "workload.arrival": {"process": "poisson", "rate_rps": 100},
          "workload.output_tokens": {"dist": "uniform", "min": 200, "max": 300}, "policy.max_num_seqs": 8,
          "policy.admission": {"max_queue": 8}}
    for cut in (0.5, 3.0):
        s = simulate(make_scenario(**{**kw, "workload.duration_s": cut})).summary
        w = {x["code"]: x["message"] for x in s["warnings"]}
        n, rej, unf, done = s["num_requests"], s["rejected"], s["unfinished"], s["completed"]
        assert rej >= 0.1 * n and unf > 0 and rej + unf + done == n
        assert "served" not in w["rejections"]
        if done:
            assert f"the latencies describe only the {done:,} completed, not the {unf:,} still unfinished" \
                in w["rejections"]
        else:
            assert f"none completed (the other {unf:,} were still unfinished" in w["rejections"]


@pytest.mark.parametrize("recompute, says", [(5693, "(1.6% of the tokens computed)"),
                                             (40, "(0.0% of the tokens computed)"),
                                             (1200, "(0.3% of the tokens computed)")])
def test_preemption_warning_gives_the_recompute_share_as_the_run_line_does(recompute, says):
    """The run printed 'recompute 5693 KV tokens ... (1.6% of the tokens computed)' and its
    preemptions warning, of the same tokens, '(2% of the tokens computed)'; a share under 0.5%
    read '(0% ...)' beside thousands of tokens dropped. Both give it to 0.1%."""
    from servesim.outputs.checks import recompute_share

    summary = {"num_requests": 300, "preemptions": 44, "kv": {"recompute_tokens": recompute},
               "phases": {"prefill_tokens": 300_000, "decode_tokens": 55_000}}
    assert f"({recompute_share(summary):.1%} of the tokens computed)" == says  # (the run line's form)
    (w,) = preemption_warnings(summary, make_scenario())
    assert says in w["message"], w["message"]


# a P/D split whose decode GPU (an A100-40GB at 39% of its memory: 309 blocks) cannot take the
# longest prompts' KV: its decode pool refuses them on arrival, before policy.admission's door
PD_REFUSING = {"memory.gpu_memory_utilization": 0.39, "policy.name": "pd_split", "policy.max_num_seqs": 64,
               "policy.prefill": {"replicas": 1}, "policy.decode": {"replicas": 1, "gpu": "a100-40g"},
               "workload.num_requests": 300, "workload.arrival": {"process": "poisson", "rate_rps": 1.0},
               "workload.prompt_tokens": {"dist": "lognormal", "mean": 3000, "sigma": 0.8, "max": 7000},
               "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 256}}


def test_validate_replays_a_p_d_splits_token_bucket_on_the_requests_that_reach_its_door():
    """A P/D split's decode pool refuses a request whose KV it cannot take before the token bucket
    sees it, so it takes no token: the bucket replayed on every arrival said 188 of 600 where the
    run's bucket rejected 135 (the 78 the decode pool refused had spent tokens in the replay).
    The replay now leaves them out: the run's count exactly."""
    from servesim.predictions import predict_rejections, predict_shedding

    sc = make_scenario(**PD_REFUSING, **{"policy.admission": {"token_bucket": {"rate_rps": 0.8, "burst": 2}}})
    reasons = [x for x in np.asarray(simulate(sc).requests["reason"], dtype=object) if isinstance(x, str)]
    bucket = sum(x.startswith("admission: token bucket") for x in reasons)
    refused = sum("on a decode replica" in x for x in reasons)
    assert bucket > 0 and refused > 0.05 * 300  # (the premise: both reject)
    assert predict_rejections(sc)["rejected"] >= refused
    assert predict_shedding(sc)["bucket"] == bucket


def test_the_miss_line_names_its_top_rejection_reason_as_a_share_where_others_rejected_too():
    """The diagnosis line named the most common rejection reason as every rejection's: a P/D split
    behind a token bucket read "217 rejected: admission: token bucket empty", 135 of them the
    bucket's and the rest its decode pool's. It says how many the reason covers; a reason that
    covers them all is still said alone."""
    sc = make_scenario(**PD_REFUSING, **{"policy.admission": {"token_bucket": {"rate_rps": 0.8, "burst": 2}}})
    s = simulate(sc).summary
    d = s["profile"]["diagnosis"]
    (top, k), *others = d["slo_misses"]["rejection_reasons"]
    assert others and k < s["rejected"]  # (the premise: two reasons)
    assert f"{s['rejected']:,} rejected ({k:,} of them: {top})" in d["line"]
    from servesim.outputs.diagnosis import miss_line

    one = {**d["slo_misses"], "rejection_reasons": [[top, s["rejected"]]]}
    assert f"{s['rejected']:,} rejected: {top}" in miss_line(one)[1]


def test_validate_unfinished_in_a_p_d_split_counts_what_its_token_bucket_lets_in():
    """In a P/D split every request a token bucket applies to was taken as one it may shed, so a
    bucket that rejects nothing hid every unfinished one: pd-split.yaml cut off at 20 s said 14
    unfinished (the run: 15) without a bucket, and nothing with a bucket of 50 req/s (the run: 0
    rejected, 15 unfinished). The bucket is replayed there as elsewhere."""
    from servesim.predictions import predict_unfinished

    cut = ["workload.num_requests=null", "workload.duration_s=20"]
    plain = load_scenario(str(ROOT / "scenarios" / "pd-split.yaml"), cut)
    sc = load_scenario(str(ROOT / "scenarios" / "pd-split.yaml"),
                       cut + ["policy.admission.token_bucket={rate_rps: 50, burst: 50}"])
    s = simulate(sc).summary
    assert s["rejected"] == 0 and s["unfinished"] > 0
    pred = predict_unfinished(sc)
    assert 0 < pred["unfinished"] == predict_unfinished(plain)["unfinished"] <= s["unfinished"]


def test_slo_floor_counts_the_requests_a_cut_off_run_admitted_as_admitted():
    """The slo_floor warning of a run whose TTFT rule rejected some requests said "the run served
    N of them, rejecting the rest", N counting every request not rejected: with workload.duration_s
    cutting the run off, some of those were unfinished, never served. N is what the run admitted."""
    kw = {"workload.num_requests": 60, "workload.prompt_tokens": {"dist": "uniform", "min": 3000, "max": 7000},
          "workload.arrival": {"process": "poisson", "rate_rps": 16}, "slo": {"ttft_s": 0.15, "tpot_s": 0.05},
          "policy.admission": {"ttft_slo": True}, "workload.duration_s": 2.0}
    s = simulate(make_scenario(**kw)).summary
    w = {x["code"]: x["message"] for x in s["warnings"]}
    admitted = s["num_requests"] - s["rejected"]
    assert s["unfinished"] > 0 and s["rejected"] > 0 and s["completed"] < admitted
    assert f"the run admitted {admitted:,} of them, rejecting the rest" in w["slo_floor"]
    assert "the run served" not in w["slo_floor"]


def test_validate_does_not_extrapolate_unfinished_requests_that_all_arrive_at_once(tmp_path, capsys, monkeypatch):
    """all_at_once arrivals cut off by duration_s, too many to replay whole: the replayed first
    requests all arrive at 0 s, so there is no stretch of the run to read a trend from; validate
    read their requests in flight at 0 s as a level count and said "about 10,000, between 10,000
    and 10,000" of 20,000 where the run left 17,858 (chat.yaml, 60 s). It says the floor alone,
    at most the run's count, and no estimate."""
    from servesim import predictions

    monkeypatch.setattr(predictions, "SHEDDING_REPLAY_REQUESTS", 300)
    monkeypatch.setattr(predictions, "OVERLOAD_REPLAY_MIN", 300)
    sc = make_scenario(**{**SHED, "workload.num_requests": 900, "workload.duration_s": 5.0,
                          "workload.arrival": {"process": "all_at_once"}})
    s = simulate(sc).summary
    pred = predictions.predict_unfinished(sc)
    assert s["unfinished"] > 0.5 * s["num_requests"]  # (most are left: what a level of 300 would miss)
    assert not pred["exact"] and pred["estimate"] is None and pred["unfinished"] <= s["unfinished"]
    lines = [x for x in _validate_lines(tmp_path, capsys, sc) if "queued or running" in x]
    assert not any("a run will leave about" in x for x in lines), lines


def test_validate_counts_its_reasons_with_thousands_separators(tmp_path, capsys):
    """validate's counts take thousands separators ("2,980 of 3,000 requests"), but the top reasons
    after them did not ("2980 x admission: ..."): the same count, written two ways in one line."""
    import re

    at_once = {**SHED, "workload.num_requests": 1500, "workload.arrival": {"process": "all_at_once"}}
    sc = make_scenario(**at_once, **{"policy.admission": {"max_queue": 20}})
    line = [x for x in _validate_lines(tmp_path, capsys, sc) if "policy.admission decides" in x]
    assert len(line) == 1
    k = int(re.search(r"a run will reject ([\d,]+) of", line[0]).group(1).replace(",", ""))
    assert k >= 1000 and f": {k:,} x admission: " in line[0], line[0]
    assert not re.search(r"\d{4} x ", line[0]), line[0]


def test_the_runs_rejection_warning_counts_with_thousands_separators():
    """The run's own warning ("1480 of 1500 requests ...; top reasons: 1480 x admission") wrote its
    counts bare where validate's line on the same run writes "1,480 of 1,500" and "1,480 x": one
    figure, two spellings between the two commands."""
    import re

    at_once = {**SHED, "workload.num_requests": 1500, "workload.arrival": {"process": "all_at_once"}}
    sc = make_scenario(**at_once, **{"policy.admission": {"max_queue": 20}})
    s = simulate(sc).summary
    w = [x["message"] for x in s["warnings"] if x["code"] == "rejections"]
    assert s["rejected"] >= 1000 and len(w) == 1
    assert w[0].startswith(f"{s['rejected']:,} of 1,500 requests"), w[0]
    assert not re.search(r"\d{4}", w[0]), w[0]
