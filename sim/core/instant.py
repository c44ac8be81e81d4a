"""The end of a simulated instant: one queue, per SimPy environment, of what waits until nothing
else is due at the current time.

Events of one instant are taken by SimPy in the order they were scheduled, and the two engines
schedule differently (a run of decode steps has one event where the reference engine has one
per step; a client hears of its request's end through a chain of zero-delay events). What must
not depend on that order waits here instead, and goes in a fixed order once the instant has
nothing else left:

1. ``send``: requests that join at the end of the instant (open-loop arrivals that come while
   something else is due then), first in, first out;
2. ``decide``: a replica whose step ended now, or an idle one woken by an arrival, decides its
   next step once every request of the instant has arrived (vLLM's engine core, between two
   steps, adds every request waiting in its input queue before it calls the scheduler; idle, it
   blocks on that queue and, woken, does the same), in the order the steps ended or the replicas
   were woken.

Each item may schedule more events at this instant (a request rejected at once tells its client,
which sends its next one): the queue waits for those again before its next item, and a send
that comes then still goes before the decisions. ``docs/how-it-works.md`` (Same-instant
events) states the whole rule.
"""

from __future__ import annotations


class EndOfInstant:
    __slots__ = ("env", "_sends", "_decides", "_armed")

    def __init__(self, env):
        self.env = env
        self._sends: list = []
        self._decides: list = []
        self._armed = False

    def send(self, fn) -> None:
        """Call ``fn()`` once nothing else is due now, before any decision waiting here."""
        self._sends.append(fn)
        self._arm()

    def decide(self, fn) -> None:
        """Call ``fn()`` once nothing else is due now and no send waits here."""
        self._decides.append(fn)
        self._arm()

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            self.env.timeout(0).callbacks.append(self._drain)

    def _drain(self, _event) -> None:
        self._armed = False
        if self.env.peek() <= self.env.now:  # something else is due now: it goes first
            self._arm()
            return
        if self._sends:
            self._sends.pop(0)()
        else:
            decides, self._decides = self._decides, []
            for fn in decides:
                fn()
        if self._sends or self._decides:
            self._arm()


def end_of_instant(env) -> EndOfInstant:
    """The environment's queue (made on first use)."""
    q = getattr(env, "_servesim_end_of_instant", None)
    if q is None:
        q = env._servesim_end_of_instant = EndOfInstant(env)
    return q
