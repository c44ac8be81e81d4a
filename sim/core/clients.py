"""Closed-loop clients: each sends a request, waits for it to end, thinks, and sends the next.

This is how ``max-concurrency`` serving benchmarks drive a server: at most ``clients`` requests
are ever outstanding. A request ends when it completes or is rejected (a rejected request ends
at once, so a client never stalls on it; the client then waits its think time, or
``reject_wait_s``); the recorder's end hooks tell the waiting client.
"""

from __future__ import annotations

import numpy as np

from servesim.core.request import Request
from servesim.errors import InputError
from servesim.outputs.wording import plural


def _after_this_instant(env):
    """A zero-delay wait, taken before a request is sent at the end of a wait (think time, the
    API server's delay, a session's start). The wait's timeout was scheduled when it began, so
    SimPy, which takes events of one instant in the order they were scheduled, would send the
    request before a step that started later and ends at this very instant; the fast engine's
    runs of decode steps have no event per step and count such a step as ended. Scheduled now,
    the request goes after every step ending now, in both engines (such instants coincide only
    when step times and think times are both fixed, e.g. launch-bound HF eager steps)."""
    return env.timeout(0)


def _end_events(env, recorder, api_delay_s) -> dict:
    """request_id -> the event its client waits on (set by the caller); the recorder's end hook
    fires it with how long after the engine ended the request the client hears of it
    (``api_delay_s(request)``: the API server; None: at once).

    The requests that end at one instant are told in the order of their ids, once everything
    else due then has happened (one zero-delay event): on different replicas they end in the
    order SimPy takes their steps, which the two engines schedule differently (a run of decode
    steps has one event where the reference has one per step), and the order their clients send
    their next requests in (their ids, a session's next turn) must not depend on it."""
    ends = {}
    due: list = []

    def tell(_event) -> None:
        ended = sorted(due, key=lambda r: r.request_id)
        due.clear()
        for req in ended:
            ev = ends.pop(req.request_id, None)
            if ev is not None:
                ev.succeed(api_delay_s(req) if api_delay_s is not None else 0.0)

    def on_end(req):
        if req.request_id in ends:
            if not due:
                env.timeout(0).callbacks.append(tell)
            due.append(req)

    recorder.end_hooks.append(on_end)
    return ends


def drive_closed_loop(env, source, submit, recorder, api_delay_s=None) -> None:
    """Start one SimPy process per client that can send a request (``_clients_that_can_send``).
    ``source`` is a ``sim.workload.ClosedLoop``; ``submit(request)`` records and routes a new
    request; ``api_delay_s(request)``: how long after the engine ends a request the client hears
    of it (the API server; None: at once)."""
    ends = _end_events(env, recorder, api_delay_s)
    reject_wait = source.arrival.reject_wait_s
    # requests rejected at once, each sent at once after its predecessor's rejection (no think
    # time, backoff or API-server time between them): (the instant, how many) since time last moved
    stuck = [-1.0, 0]

    def client(c: int):
        think = float(source.first_think_s[c])
        waited = False  # since the last event: a think time or the API server's delay
        while True:
            if think > 0:
                yield env.timeout(think)
                waited = True
            nxt = source.next()
            if nxt is None:
                return
            if waited:
                yield _after_this_instant(env)
            k, prompt, output, group, prefix, think, tags = nxt
            ev = ends[k] = env.event()
            req = Request(k, env.now, prompt, output, group, prefix, tags)
            req.cls = source.class_of(k)
            submit(req)
            delay = yield ev
            waited = delay > 0
            if waited:
                yield env.timeout(delay)
            if req.status == "rejected":
                if reject_wait is not None:
                    think = reject_wait  # (the drawn think time is not used: the draws stay as they were)
                if think == 0 and not waited:
                    _check_not_stuck(stuck, env.now, source)

    for c in _clients_that_can_send(source):
        env.process(client(c))


# A closed loop whose clients resend at once after a rejection (no think time, backoff or API-server
# time) sends its next request at the instant of the rejection; while the replicas' state does not
# move, every one of them is rejected too and simulated time never advances (with duration_s alone,
# a run that never ends). This many such requests at one instant end the run with an error.
MAX_STUCK_REJECTIONS = 100_000


def _check_not_stuck(stuck: list, now: float, source, sessions: bool = False) -> None:
    """Count a request rejected at ``now`` whose client sends again at once; past
    ``MAX_STUCK_REJECTIONS`` at one instant, an ``InputError`` naming what lets time move."""
    if stuck[0] != now:
        stuck[0], stuck[1] = now, 0
    stuck[1] += 1
    if stuck[1] > MAX_STUCK_REJECTIONS:
        what = ("a session's rejected turn ends it and its client begins the next at once" if sessions else
                "each sent at once after the one before it was rejected")
        fix = ("workload.arrival.reject_wait_s (a rejected client's backoff before its next session) or "
               "think_time_s > 0 (a client's lead before each session)" if sessions else
               "workload.arrival.reject_wait_s (a rejected client's backoff) or think_time_s > 0")
        err = InputError(
            f"workload.arrival: {plural(stuck[1], 'request', fmt=',')} {'was' if stuck[1] == 1 else 'were'} "
            f"rejected at t={now:g} s, {what} (think_time_s "
            f"{source.arrival.think_time_s:g}, no API-server time): simulated time cannot advance. Give {fix}, "
            "or relax the policy.admission rule that rejects them")
        err.stuck = True  # (validate's replay of the first instant raises this one, and only this one, as the run's)
        raise err


def _clients_that_can_send(source):
    """The clients worth starting, in creation order: all of them, or only those whose first
    think time ends by ``duration_s`` (the others would still be thinking when the run ends)
    and, with ``num_requests`` N fewer than the clients, among those the N whose first think time
    ends first (ties: creation order, the order their timeouts were scheduled in). Any other
    client's first ``source.next()`` comes after those N clients' first calls, by when N
    requests have been sent: it would wake, be told there is nothing left (which changes
    nothing) and stop. Starting a million such clients for a dozen requests took 19 s and 1 GiB;
    the requests, their order and every time are the same without them."""
    n, cap, until = source.arrival.clients, source.num_requests, source.duration_s
    if (cap is None or n <= cap) and until is None:
        return range(n)
    return _first_to_send(source.first_think_s, cap, until)


def _first_to_send(wait_s, cap: int | None, until: float | None) -> list:
    """Positions in ``wait_s`` (each client's wait before its first send, in creation order) of
    the clients that can send: those whose wait ends by ``until`` (None: no end) and, of them,
    the first ``cap`` to send (None: all), ties in creation order; in creation order."""
    wait_s = np.asarray(wait_s, dtype=float)
    order = np.argsort(wait_s, kind="stable")
    if until is not None:
        order = order[wait_s[order] <= until]
    if cap is not None:
        order = order[:cap]
    return np.sort(order).tolist()


def drive_sessions(env, source, submit, recorder, api_delay_s=None) -> None:
    """Run multi-turn sessions (``servesim.inputs.sessions.Sessions``): each session sends a
    turn, waits for it to end, thinks, and sends the next (a rejected turn ends the session).
    Open loop: sessions begin at ``source.start_s``; closed loop: each client begins a session,
    runs it to its end and begins the next, thinking ``Session.lead_s`` before each.
    ``api_delay_s`` as for ``drive_closed_loop``."""
    ends = _end_events(env, recorder, api_delay_s)
    stuck = [-1.0, 0]  # (as drive_closed_loop's: a closed loop's client begins its next session at once)
    # closed loop: a client whose session a rejected turn ended waits this long (its backoff)
    # instead of its next session's lead (None: the lead, as after any session)
    reject_wait = source.arrival.reject_wait_s if source.closed else None

    def run(i: int, waited: bool):
        """``waited``: the session starts at the end of a wait (its start time or lead, or the
        API server's delay after the client's previous session's last turn). Returns whether it
        ends at the end of a wait (the API server's delay after its last turn), and whether a
        rejected turn ended it."""
        s = source.session(i)
        for k, prompt in enumerate(s.prompts):
            if k and s.think_s[k] > 0:
                yield env.timeout(s.think_s[k])
                waited = True
            rid = source.send(s.clipped[k], k == 0)
            if rid is None:
                return waited, False
            if waited:
                yield _after_this_instant(env)
            # the whole prompt is the session's (prefix group i); its reply's blocks stay cached
            req = Request(rid, env.now, prompt, s.outputs[k], i, prompt, cache_output=not s.clipped[k])
            ev = ends[rid] = env.event()
            submit(req)
            delay = yield ev
            waited = delay > 0
            if waited:
                yield env.timeout(delay)
            if req.status == "rejected":
                source.abandoned += 1
                if source.closed and not waited and not reject_wait:
                    _check_not_stuck(stuck, env.now, source, sessions=True)
                return waited, True
        return waited, False

    if source.closed:
        def client(i):
            waited = False  # the previous session ended at the end of a wait (the API server's delay)
            rejected = False  # a rejected turn ended the previous session
            while True:
                if i is None:
                    i = source.next_session()
                    if i is None:
                        return
                # (after a rejection the backoff replaces the lead; the lead drawn is not used, so
                # the draws stay as they were)
                lead = reject_wait if rejected and reject_wait is not None else source.session(i).lead_s
                if lead > 0:
                    yield env.timeout(lead)
                    waited = True
                # (a session begun at once after the previous one's last turn, lead 0, still comes
                # at the end of that turn's API-server delay: sent after every step ending then)
                waited, rejected = yield from run(i, waited)
                i = None

        for i in _sessions_that_can_send(source):
            env.process(client(i))
        return

    def launcher():
        while True:
            i = source.next_session()
            if i is None:
                return
            t = float(source.start_s[i])
            waited = t > env.now
            if waited:
                yield env.timeout(t - env.now)
            env.process(run(i, waited))

    env.process(launcher())


def _sessions_that_can_send(source) -> list:
    """The first session of each closed-loop client worth starting, in creation order. Each
    client takes a session at time 0 (``next_session``, in creation order) and, after its lead,
    sends its first turn; a lead of 0 sends at once, so once ``num_requests`` turns went out that
    way the later clients get none. A client whose lead ends after ``duration_s`` never sends;
    with ``num_requests`` N, only the clients whose first turn goes out among the first N (by
    lead, ties in creation order) can send anything: every other one would find N turns sent,
    stop, and change nothing. The sessions are handed out here as those calls would (the same
    draws, in the same order); only the clients that can send are started (a million clients
    for a dozen turns took a minute and 1.5 GiB)."""
    n, cap, until = source.arrival.clients, source.num_requests, source.duration_s
    if (cap is None or n <= cap) and until is None:
        return [None] * n  # (each takes its session when it starts)
    taken, leads = [], []
    at_once = 0  # turns sent at time 0 by the clients before (lead 0)
    for _ in range(n):
        if cap is not None and at_once >= cap:
            break
        i = source.next_session()
        if i is None:
            break
        lead = source.lead_s(i)
        taken.append(i)
        leads.append(lead)
        at_once += lead == 0
    return [taken[k] for k in _first_to_send(leads, cap, until)]
