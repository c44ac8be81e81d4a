"""Closed-loop clients: each sends a request, waits for it to end, thinks, and sends the next.

This is how ``max-concurrency`` serving benchmarks drive a server: at most ``clients`` requests
are ever outstanding. A request ends when it completes or is rejected (a rejected request ends
at once, so a client never stalls on it); the recorder's end hooks tell the waiting client.
"""

from __future__ import annotations

from servesim.core.request import Request


def drive_closed_loop(env, source, submit, recorder, api_delay_s=None) -> None:
    """Start one SimPy process per client. ``source`` is a ``sim.workload.ClosedLoop``;
    ``submit(request)`` records and routes a new request; ``api_delay_s(request)``: how long after
    the engine ends a request the client hears of it (the API server; None: at once)."""
    ends = {}  # request_id -> event the client waits on

    def on_end(req):
        ev = ends.pop(req.request_id, None)
        if ev is not None:
            ev.succeed(api_delay_s(req) if api_delay_s is not None else 0.0)

    recorder.end_hooks.append(on_end)

    def client(c: int):
        think = float(source.first_think_s[c])
        while True:
            if think > 0:
                yield env.timeout(think)
            nxt = source.next()
            if nxt is None:
                return
            k, prompt, output, group, prefix, think = nxt
            ev = ends[k] = env.event()
            submit(Request(k, env.now, prompt, output, group, prefix))
            delay = yield ev
            if delay > 0:
                yield env.timeout(delay)

    for c in range(source.arrival.clients):
        env.process(client(c))
