"""Closed-loop clients: never more than N outstanding, think time after the previous request
ends, rejected requests end at once (no stalled client), deterministic."""

import numpy as np
import pytest

from servesim.simulation import simulate
from tests.conftest import make_scenario


def closed(clients, think=0.0, n=150, **kw):
    arrival = {"process": "closed_loop", "clients": clients, "think_time_s": think, **kw.pop("arrival_extra", {})}
    return make_scenario(**{"workload.arrival": arrival, "workload.num_requests": n, **kw})


def max_outstanding(r) -> int:
    """Most requests arrived and not yet ended at any instant (a rejected request ends on arrival;
    at equal times ends count before arrivals, as a client sends after its request ends)."""
    end = np.where(r["status"] == "completed", r["finish_s"],
                   np.where(r["status"] == "rejected", r["arrival_s"], np.inf))
    events = sorted([(t, 1) for t in r["arrival_s"]] + [(t, -1) for t in end])
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("clients", [1, 3, 8])
def test_never_more_than_n_outstanding(clients):
    res = simulate(closed(clients, think=0.05))
    r = res.requests
    assert res.summary["completed"] == 150
    assert max_outstanding(r) == clients  # reached (150 requests >> clients) and never exceeded


def test_next_request_is_a_think_time_after_the_previous_ends():
    res = simulate(closed(1, think=0.5, n=20, arrival_extra={"think": "fixed"}))
    r = res.requests
    assert r["arrival_s"][0] == pytest.approx(0.5)  # first think before the first request
    assert np.allclose(r["arrival_s"][1:], r["finish_s"][:-1] + 0.5, rtol=0, atol=1e-9)


def test_rejected_requests_do_not_stall_clients():
    # Prompts up to 20000 tokens on an 8192-token model with clipping off: some are rejected,
    # yet every one of the 100 requests is sent and accounted for.
    sc = closed(2, n=100, **{"workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 20000},
                             "workload.clip_to_context": False})
    res = simulate(sc)
    s = res.summary
    assert s["rejected"] > 0 and s["num_requests"] == 100 == s["completed"] + s["rejected"]
    assert max_outstanding(res.requests) <= 2


def test_duration_only_and_classes():
    sc = closed(4, think=0.2, n=None, **{"workload.duration_s": 10.0, "workload.prompt_tokens": None,
                                         "workload.output_tokens": None, "workload.classes": [
        {"name": "a", "share": 1, "prompt_tokens": {"dist": "fixed", "value": 100},
         "output_tokens": {"dist": "fixed", "value": 20}},
        {"name": "b", "share": 1, "prompt_tokens": {"dist": "fixed", "value": 500},
         "output_tokens": {"dist": "fixed", "value": 5}}]})
    res = simulate(sc)
    s = res.summary
    assert s["num_requests"] == s["completed"] + s["rejected"] + s["unfinished"] > 0
    assert s["unfinished"] <= 4 and max_outstanding(res.requests) <= 4
    assert sum(c["num_requests"] for c in s["classes"].values()) == s["num_requests"]
    r = res.requests
    assert set(r["prompt_tokens"][r["class"] == "b"]) == {500}


def test_closed_loop_byte_identical(tmp_path):
    files = []
    for name in ("a", "b"):
        out = simulate(closed(3, think=0.1, n=60)).write(tmp_path / name)
        files.append(((out / "requests.csv").read_bytes(), (out / "steps.csv").read_bytes()))
    assert files[0] == files[1]


@pytest.mark.parametrize("think,kind,n,duration", [(0.0, "exponential", 25, None), (0.3, "exponential", 25, None),
                                                   (0.3, "fixed", 25, None), (6.0, "exponential", None, 3.0),
                                                   (6.0, "exponential", 25, 4.0)])
def test_clients_beyond_the_requests_are_not_started_and_change_nothing(monkeypatch, think, kind, n, duration):
    """With fewer requests than clients only the clients whose first think ends first are started
    (ties: creation order); the others could only wake to find every request sent. With
    duration_s, a client still thinking at the end is not started either. The requests, their
    order and times are those of starting every client (a million clients for a dozen requests
    took 19 s and 1 GiB before)."""
    from servesim.core import clients

    started = []
    only_some = clients._clients_that_can_send

    def counted(source):
        picked = list(only_some(source))
        started.append(len(picked))
        return picked

    sc = closed(400, think=think, n=n, arrival_extra={"think": kind}, **{"workload.duration_s": duration})
    monkeypatch.setattr(clients, "_clients_that_can_send", counted)
    few = simulate(sc)
    monkeypatch.setattr(clients, "_clients_that_can_send", lambda source: range(source.arrival.clients))
    every = simulate(sc)
    assert 0 < started[0] < 400 and started[0] <= (n or 400)
    assert few.summary["num_requests"] == every.summary["num_requests"] > 0
    for col in ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s", "status"):
        a, b = few.requests[col], every.requests[col]
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), col  # (unfinished: NaN times)
    assert np.array_equal(few.steps["start_s"], every.steps["start_s"])


# 8 clients that never think, with no API-server time between a rejection and the next request,
# under a queue bound of 1 request per replica: most requests are rejected
HAMMER = {"cost.api_server": False, "policy.admission": {"max_queue": 1}, "policy.max_num_seqs": 2}


def test_a_rejected_client_waits_reject_wait_s():
    """``workload.arrival.reject_wait_s``: a client whose request was rejected waits that long
    before its next (a backoff), instead of its think time; a served one still thinks (0 here)."""
    res = simulate(closed(8, n=120, arrival_extra={"reject_wait_s": 0.25}, **HAMMER))
    r = res.requests
    assert res.summary["rejected"] > 10
    assert res.summary["num_requests"] == 120 == res.summary["completed"] + res.summary["rejected"]
    # requests ended at t (completed at finish_s, rejected at arrival_s), and the arrival times
    ended = np.where(r["status"] == "rejected", r["arrival_s"] + 0.25, r["finish_s"])
    arrivals = np.sort(r["arrival_s"])
    # every request but the first 8 was sent by a client whose previous request ended
    # (completed: at once; rejected: 0.25 s after it); so every arrival after time 0 is one of those times
    later = arrivals[arrivals > 0]
    assert len(later) == 112
    assert np.isin(later, ended).all()
    # and a rejected client sent nothing at the instant of its rejection: its next request came
    # 0.25 s later (all but the last few, whose clients found the 120 requests sent)
    rejected_at = r["arrival_s"][r["status"] == "rejected"]
    assert np.isin(rejected_at + 0.25, arrivals).sum() >= len(rejected_at) - 8


def test_a_closed_loop_stuck_on_rejections_is_an_error_not_a_hang(monkeypatch):
    """Clients that resend at once after a rejection, at one instant, while nothing there changes:
    simulated time never advanced (a run with duration_s alone never ended). Now the run stops
    with an error naming what lets time move (after fewer such rejections here, to be quick)."""
    import servesim.core.clients as clients
    from servesim.errors import InputError

    monkeypatch.setattr(clients, "MAX_STUCK_REJECTIONS", 2_000)
    sc = closed(8, n=None, **{**HAMMER, "workload.duration_s": 5.0})
    with pytest.raises(InputError, match="reject_wait_s.*think_time_s"):
        simulate(sc)
    # the same with sessions: a rejected turn ends its session, and its client begins the next at once
    with pytest.raises(InputError, match="think_time_s > 0"):
        simulate(closed(8, n=None, **{**HAMMER, "workload.duration_s": 5.0,
                                      "workload.sessions": {"turns": {"dist": "fixed", "value": 2}}}))
    # with a backoff the same run ends, every request accounted for
    res = simulate(closed(8, n=None, arrival_extra={"reject_wait_s": 0.05}, **{**HAMMER, "workload.duration_s": 5.0}))
    s = res.summary
    assert s["rejected"] > 0 and s["num_requests"] == s["completed"] + s["rejected"] + s["unfinished"]


def test_resending_at_once_after_rejections_is_a_warning(tmp_path, capsys):
    """A closed loop with think time 0 under admission rules, no reject_wait_s: validate says the
    clients will resend at once, and a run where most requests were rejected says they did; with
    a backoff neither does (and the rejections drop)."""
    import yaml

    from servesim.cli.main import main

    sc = closed(8, n=120, **{**HAMMER, "cost.api_server": True})
    w = {x["code"]: x["message"] for x in simulate(sc).summary["warnings"]}
    assert "resend_at_once" in w and "reject_wait_s" in w["resend_at_once"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "no reject_wait_s" in capsys.readouterr().out
    backoff = closed(8, n=120, arrival_extra={"reject_wait_s": 0.5}, **{**HAMMER, "cost.api_server": True})
    s2 = simulate(backoff).summary
    assert "resend_at_once" not in {x["code"] for x in s2["warnings"]}
    assert s2["rejected"] < simulate(sc).summary["rejected"]
    path.write_text(yaml.safe_dump(backoff.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "reject_wait_s" not in capsys.readouterr().out


def test_a_reject_wait_of_0_still_warns_of_resending_at_once(tmp_path, capsys):
    """reject_wait_s: 0 is no backoff (each rejected client sends again at once, as with none given),
    yet it silenced the resend_at_once warning of run and validate."""
    import yaml

    from servesim.cli.main import main

    sc = closed(8, n=120, arrival_extra={"reject_wait_s": 0}, **{**HAMMER, "cost.api_server": True})
    w = {x["code"]: x["message"] for x in simulate(sc).summary["warnings"]}
    assert "reject_wait_s=0" in w["resend_at_once"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "reject_wait_s=0" in capsys.readouterr().out


def test_a_rejected_session_client_waits_reject_wait_s():
    """Sessions in a closed loop: a rejected turn ends its session, and its client waits
    ``reject_wait_s`` (instead of the next session's lead, 0 here) before beginning the next one,
    as a plain closed loop's client waits it before its next request. Before, the field was
    refused with sessions and such a client began its next session at the instant of the rejection."""
    sess = {"workload.sessions": {"turns": {"dist": "fixed", "value": 2}}}
    res = simulate(closed(8, n=120, arrival_extra={"reject_wait_s": 0.25}, **{**HAMMER, **sess}))
    r, s = res.requests, res.summary
    assert s["rejected"] > 10
    assert s["num_requests"] == 120 == s["completed"] + s["rejected"]
    assert s["workload"]["sessions"]["abandoned"] == s["rejected"]
    # every turn after time 0 was sent when the client's previous turn ended: completed (the
    # session's next turn, or the next session, at once) or rejected (the next session 0.25 s after)
    ended = np.where(r["status"] == "rejected", r["arrival_s"] + 0.25, r["finish_s"])
    later = np.sort(r["arrival_s"])[8:]
    assert (later > 0).all() and np.isin(later, ended).all()
    # and none at the instant of a rejection (a rejected turn's client sent nothing then) but
    # where another request ended at that instant too
    rejected_at = np.unique(r["arrival_s"][r["status"] == "rejected"])
    others = np.concatenate([r["finish_s"][r["status"] == "completed"],
                             r["arrival_s"][r["status"] == "rejected"] + 0.25])
    assert not np.isin(np.setdiff1d(rejected_at, others), later).any()
    assert "resend_at_once" not in {x["code"] for x in s["warnings"]}
    # without the backoff the clients begin their next session at once: more rejections, and the
    # run says why (as for a plain closed loop)
    at_once = simulate(closed(8, n=120, **{**HAMMER, **sess})).summary
    assert at_once["rejected"] > s["rejected"]
    warned = {x["code"]: x["message"] for x in at_once["warnings"]}
    assert "begins the next session at once" in warned["resend_at_once"]


def test_validate_fails_as_a_run_on_a_closed_loop_certain_to_be_stuck(monkeypatch, tmp_path, capsys):
    """A closed loop resending at once (think time 0, no backoff, no API-server time) on a KV
    cache too small for every prompt it draws: the run stops on the stuck-loop error (exit 2),
    and validate said ok (exit 0). Now validate gives the run's error; where the run ends first
    (num_requests under the limit) or time moves (reject_wait_s) both still pass."""
    import yaml

    import servesim.core.clients as clients
    from servesim.cli.main import main
    from servesim.errors import InputError

    monkeypatch.setattr(clients, "MAX_STUCK_REJECTIONS", 2_000)
    kw = {"memory.num_gpu_blocks": 2, "cost.api_server": False, "workload.duration_s": 5.0,
          "workload.prompt_tokens": {"dist": "uniform", "min": 40, "max": 100}}
    sc = closed(3, n=None, **kw)
    with pytest.raises(InputError) as run_error:
        simulate(sc)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "simulated time cannot advance" in err and str(run_error.value) in err
    for ok in (closed(3, n=1_500, **{**kw, "workload.duration_s": None}),
               closed(3, n=None, arrival_extra={"reject_wait_s": 0.5}, **kw)):
        s = simulate(ok).summary
        assert s["rejected"] == s["num_requests"] > 0
        path.write_text(yaml.safe_dump(ok.to_dict()))
        assert main(["validate", str(path)]) == 0


@pytest.mark.parametrize("admission, replicas, held", [({"max_queue": 2}, 1, 2), ({"max_queue": 1}, 2, 2),
                                                     ({"token_bucket": {"rate_rps": 5, "burst": 4.5}}, 1, 4),
                                                     ({"max_queued_tokens": 30}, 1, 0)])
def test_validate_fails_a_closed_loop_its_admission_rules_stick(monkeypatch, tmp_path, capsys, admission, replicas,
                                                                held):
    """Clients resending at once (think time 0, no backoff, no API-server time) behind
    policy.admission: at the first instant the deployment is idle and decides nothing until every
    request of it has arrived, so its queues (max_queue each) or the token bucket's burst hold all
    it takes; one client more, rejected, sends again at once, and the run stopped stuck (exit 2)
    where validate said ok with a warning; likewise a max_queued_tokens below every prompt. Now
    validate gives the run's error; as many clients as that holds, or too few requests for the
    run to reach the limit, still pass, as their runs do."""
    import yaml

    import servesim.core.clients as clients
    from servesim.cli.main import main
    from servesim.errors import InputError

    monkeypatch.setattr(clients, "MAX_STUCK_REJECTIONS", 2_000)
    kw = {"cost.api_server": False, "workload.duration_s": 2.0, "cluster.replicas": replicas,
          "policy.admission": admission, "workload.prompt_tokens": {"dist": "uniform", "min": 40, "max": 100}}
    path = tmp_path / "s.yaml"

    def validate(sc) -> int:
        path.write_text(yaml.safe_dump(sc.to_dict()))
        capsys.readouterr()
        return main(["validate", str(path)])

    stuck = closed(held + 1, n=None, **kw)
    with pytest.raises(InputError) as run_error:
        simulate(stuck)
    assert validate(stuck) == 2
    err = capsys.readouterr().err
    assert "simulated time cannot advance" in err and str(run_error.value) in err
    ok = [closed(held + 1, n=1_500, **{**kw, "workload.duration_s": None})]  # (the run ends first)
    if held:
        ok.append(closed(held, n=None, **{**kw, "workload.duration_s": 0.5}) if "max_queue" in admission else
                  closed(held + 1, n=None, arrival_extra={"reject_wait_s": 0.05}, **kw))
    for sc in ok:
        s = simulate(sc).summary
        assert s["num_requests"] == s["completed"] + s["rejected"] + s["unfinished"] > 0
        assert validate(sc) == 0


def test_validate_warns_of_a_duration_bound_closed_loop_its_rules_reject(tmp_path, capsys):
    """A closed loop bounded by duration_s alone draws its lengths as it runs, so validate said
    only "rejections: not predicted" of one whose KV cache turns most prompts away (a run of it
    rejects most of its requests, or stops stuck on them). Now it checks the first chunk the run
    draws and warns, with the resend-at-once advice where the clients resend at once."""
    import yaml

    from servesim.cli.main import main

    kw = {"memory.num_gpu_blocks": 4, "cost.api_server": True, "workload.duration_s": 2.0,
          "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 200}}
    path = tmp_path / "s.yaml"
    for think, resend in ((0.0, True), (0.2, False)):
        sc = closed(3, think=think, n=None, **kw)
        s = simulate(sc).summary
        assert s["rejected"] >= 0.5 * s["num_requests"]
        path.write_text(yaml.safe_dump(sc.to_dict()))
        capsys.readouterr()
        assert main(["validate", str(path)]) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if "requests the clients send" in x)
        head = line.split("warning: ")[1].split(" requests")[0]
        k, n = (int(v.replace(",", "")) for v in head.split(" of the first "))
        assert n == 4096 and 0.5 * n < k < n  # prompts up to 64 tokens fit
        assert ("each is followed at once" in line) == resend
    # enough KV: nothing said
    sc = closed(3, n=None, **{**kw, "memory.num_gpu_blocks": None})
    path.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["validate", str(path)]) == 0
    assert "requests the clients send" not in capsys.readouterr().out


@pytest.mark.parametrize("extra, stuck_clients, ok_clients", [
    ({"policy.admission": {"max_queued_tokens": 250}}, 12, 2),  # (each prompt 40-100 tokens: 2 to 6 fit)
    ({"policy.admission": {"ttft_slo": True}, "slo.ttft_s": 0.1}, 400, 40),
    ({"policy.admission": {"max_queue": 2}, "policy.name": "pd_split", "policy.prefill": {"replicas": 1},
      "policy.decode": {"replicas": 1}}, 3, 2),
    ({"policy.name": "pd_split", "policy.prefill": {"replicas": 1}, "policy.decode": {"replicas": 1},
      "memory.num_gpu_blocks": 2}, 3, None),
    # (a router that keeps the class on one of two replicas: max_queue x replicas said 4 held, ok)
    ({"policy.admission": {"max_queue": 2}, "cluster.replicas": 2, "cluster.router": "class_aware",
      "cluster.class_replicas": [{"name": "a", "replicas": [0]}], "workload.prompt_tokens": None,
      "workload.output_tokens": None,
      "workload.classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "uniform", "min": 40, "max": 100},
                            "output_tokens": {"dist": "uniform", "min": 1, "max": 64}}]}, 3, 2)])
def test_validate_fails_a_closed_loop_stuck_by_the_state_at_its_first_instant(monkeypatch, tmp_path, capsys, extra,
                                                                             stuck_clients, ok_clients):
    """Clients resending at once (think time 0, no backoff, no API-server time) where what is
    rejected at the first instant depends on what is already queued: a max_queued_tokens only
    some prompts fit, ttft_slo (each prompt's predicted TTFT behind those queued), a P/D split
    (left out of the check: validate said ok), a class_aware router keeping the only class on one
    of two replicas (the check counted max_queue on both), each run stopped stuck (exit 2) where validate only
    warned. The run itself replayed to just past its first instant gives its error; fewer clients,
    whose runs progress, still pass."""
    import yaml

    import servesim.core.clients as clients
    from servesim.cli.main import main
    from servesim.errors import InputError

    monkeypatch.setattr(clients, "MAX_STUCK_REJECTIONS", 2_000)
    kw = {"cost.api_server": False, "workload.duration_s": 2.0,
          "workload.prompt_tokens": {"dist": "uniform", "min": 40, "max": 100}, **extra}
    path = tmp_path / "s.yaml"

    def validate(sc) -> int:
        path.write_text(yaml.safe_dump(sc.to_dict()))
        capsys.readouterr()
        return main(["validate", str(path)])

    stuck = closed(stuck_clients, n=None, **kw)
    with pytest.raises(InputError) as run_error:
        simulate(stuck)
    assert validate(stuck) == 2
    err = capsys.readouterr().err
    assert "simulated time cannot advance" in err and str(run_error.value) in err
    if ok_clients is not None:  # (None: every prompt too long for the KV cache, no run progresses)
        ok = closed(ok_clients, n=None, **kw)
        s = simulate(ok).summary
        assert s["completed"] > 0 and s["num_requests"] == s["completed"] + s["rejected"] + s["unfinished"]
        assert validate(ok) == 0


@pytest.mark.parametrize("admission, clients, stuck", [
    ({"max_queue": 2}, 5, True),  # (2 replicas x 2 held, however the router spreads them)
    ({"token_bucket": {"rate_rps": 1.0, "burst": 3}}, 4, True),
    ({"max_queue": 200}, 150, False),  # (all of them on one replica still fit its queue)
])
def test_validate_counts_a_first_instant_it_need_not_replay(monkeypatch, tmp_path, capsys, admission, clients, stuck):
    """Clients resending at once behind policy.admission: where its rules hold fewer requests at the
    first instant than the clients send, however the router spreads them (max_queue on every
    replica, the token bucket's burst), the run is stuck, and where a max_queue alone holds them all
    even on one replica, nothing is rejected then: counting tells without replaying the run's first
    instant (the replay, 441d64d, is as long as the run's own: 25 s for 200,000 clients let in, 45 s
    for those stuck, where the count took 3 s). The counted error is the run's."""
    import yaml

    import servesim.core.clients as clients_mod
    import servesim.predictions as predictions
    from servesim.cli.main import main
    from servesim.errors import InputError

    monkeypatch.setattr(clients_mod, "MAX_STUCK_REJECTIONS", 2_000)
    sc = closed(clients, n=None, **{"cost.api_server": False, "workload.duration_s": 2.0, "cluster.replicas": 2,
                                    "policy.admission": admission})
    run_error = None
    if stuck:
        with pytest.raises(InputError) as e:
            simulate(sc)
        run_error = str(e.value)
    else:
        s = simulate(sc).summary
        assert s["completed"] > 0 and s["rejected"] == 0

    def no_replay(*a, **k):
        raise AssertionError("validate replayed the first instant")

    with monkeypatch.context() as m:
        m.setattr(predictions, "simulate", no_replay)
        if stuck:
            with pytest.raises(InputError) as e:
                predictions.check_resend_not_stuck(sc)
            assert str(e.value) == run_error
        else:
            predictions.check_resend_not_stuck(sc)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc.to_dict()))
    capsys.readouterr()
    assert main(["validate", str(path)]) == (2 if stuck else 0)
    if stuck:
        assert run_error in capsys.readouterr().err
