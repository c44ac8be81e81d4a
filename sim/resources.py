"""Memory: what a run will need, what the machine has, and refusing what cannot fit.

A run's memory grows with its requests (their rows, their events), its steps (one row each) and
its replicas (schedulers, KV books). ``estimate_bytes`` prices them with figures measured on
this code (``servesim run`` of the default scenario, peak RSS, writing included):

- ``PER_REQUEST_BYTES``: ~0.9 KB per request (100k requests at ~11 steps each: 238 MiB; 20k
  requests at 25 steps: 131 MiB; 20k at 200 steps: 563 MiB, solved with the next figure);
- ``PER_STEP_BYTES``: ~125 B per step row (columns while recording, then numpy columns);
- ``PER_REPLICA_BYTES``: ~8 KB per replica (1,000 vs 5,000 replicas of 1,000 requests);
- ``BASE_BYTES``: the interpreter, numpy, SimPy and servesim themselves (~52 MiB).

bench/speed.py case (c), 1M requests and 8.5M steps, then comes to ~1.9 GiB against 1.5 GiB
measured: the figures err high for big runs. Steps are not known before a run (they depend on the
load: a batch of one makes a step per token), so the estimate takes the fewest a run can have:
every step carrying ``max_num_seqs`` sequences (times the speculative tokens). The estimate is
thus a floor, and a run refused by it would certainly not have fit.

``available_bytes`` is the most this process may grow to: MemAvailable (/proc/meminfo) plus what
the process already holds, capped by a cgroup's memory.max and by RLIMIT_AS / RLIMIT_DATA.
``check`` refuses (exit 2) a run whose floor exceeds it, naming the estimate, the available
memory and what to lower; the workload generators are handed the largest request count that fits
(``max_requests``) so they refuse before allocating more. ``guard`` watches the process while it
runs: a run that grows past the available memory anyway (more steps than the floor) is stopped
with the same kind of message, not left to the OOM killer or swap.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import resource
import signal
import threading
from dataclasses import dataclass

from servesim.errors import InputError

MIB = 1 << 20
GIB = 1 << 30
PER_REQUEST_BYTES = 900
PER_STEP_BYTES = 125
PER_REPLICA_BYTES = 8 << 10
BASE_BYTES = 52 * MIB
LIMIT_ENV = "SERVESIM_MEMORY_LIMIT_GIB"  # overrides the available memory (tests; shared machines)
LOWER = ("lower workload.num_requests (or workload.duration_s x the arrival rate), the replicas, or run "
         "on a machine with more memory")


def _meminfo_available() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left() -> float | None:
    """memory.max - memory.current of this process's cgroup (v2), when it has a limit."""
    try:
        with open("/proc/self/cgroup") as fh:
            rel = next((line.strip().split(":", 2)[2] for line in fh if line.startswith("0::")), None)
        if rel is None:
            return None
        base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as fh:
            return float(limit) - float(fh.read().strip())
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def rss_bytes() -> float:
    """This process's resident memory now."""
    try:
        with open("/proc/self/statm") as fh:
            return float(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def _vm_bytes() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return float(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0.0


def available_bytes() -> float:
    """The most this process may grow to (resident bytes), from what the system, its cgroup and
    its resource limits leave; ``$SERVESIM_MEMORY_LIMIT_GIB`` overrides it."""
    env = os.environ.get(LIMIT_ENV)
    if env:
        try:
            return float(env) * GIB
        except ValueError:
            raise InputError(f"${LIMIT_ENV} must be a number of GiB, got {env[:40]!r}") from None
    rss = rss_bytes()
    caps = []
    free = _meminfo_available()
    if free is not None:
        caps.append(rss + free)
    left = _cgroup_left()
    if left is not None:
        caps.append(rss + left)
    vm = _vm_bytes()
    for lim in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(lim)[0]
        if soft != resource.RLIM_INFINITY:
            caps.append(rss + max(0.0, soft - vm))
    return min(caps) if caps else math.inf


@dataclass(frozen=True)
class Estimate:
    """The fewest bytes a run needs (``bytes``) and what went into it."""

    requests: float
    steps: float
    replicas: int

    @property
    def bytes(self) -> float:
        return (BASE_BYTES + self.requests * PER_REQUEST_BYTES + self.steps * PER_STEP_BYTES
                + self.replicas * PER_REPLICA_BYTES)


def _gib(x: float) -> str:
    return f"{x / GIB:.3g} GiB" if x >= GIB / 10 else f"{x / MIB:.0f} MiB"


def estimate(setup, requests: float, mean_output_tokens: float) -> Estimate:
    """The floor of a run's memory with ``requests`` requests of ``mean_output_tokens`` outputs
    on ``setup``'s pools: each step carries at most ``max_num_seqs`` sequences, each sequence at
    most k + 1 tokens with speculative decoding."""
    per_step = max(p.max_num_seqs * ((p.spec[0] + 1) if p.spec else 1) for p in setup.pools)
    replicas = sum(p.replicas for p in setup.pools)
    return Estimate(requests, requests * max(mean_output_tokens, 1.0) / per_step, replicas)


@dataclass(frozen=True)
class Fit:
    """What ``check`` found: the available bytes and the most requests that fit."""

    available: float
    max_requests: float
    mean_output_tokens: float


def _refusal(est: Estimate, available: float, what: str) -> InputError:
    return InputError(f"{what}: the run needs at least {_gib(est.bytes)} of memory ({est.requests:.3g} requests "
                      f"x ~{PER_REQUEST_BYTES} B, >= {est.steps:.3g} steps x ~{PER_STEP_BYTES} B, {est.replicas} "
                      f"replicas), more than the {_gib(available)} available; {LOWER}")


def check(setup, requests: float | None, mean_output_tokens: float, what: str = "workload") -> Fit:
    """Refuse (``InputError``) a run whose memory floor exceeds what is available; the most
    requests that would fit."""
    available = available_bytes()
    one = estimate(setup, 1.0, mean_output_tokens)
    fixed = estimate(setup, 0.0, mean_output_tokens).bytes
    per = one.bytes - fixed
    max_requests = (available - fixed) / per if per > 0 else math.inf
    if requests is not None:
        est = estimate(setup, requests, mean_output_tokens)
        if est.bytes > available:
            raise _refusal(est, available, what)
    elif fixed > available:
        raise _refusal(estimate(setup, 0.0, mean_output_tokens), available, what)
    return Fit(available, max(0.0, max_requests), mean_output_tokens)


def refuse_requests(setup, fit: Fit, requests: float, what: str) -> None:
    """``check`` for a count known only once the workload is drawn (a trace, classes)."""
    if requests > fit.max_requests:
        raise _refusal(estimate(setup, requests, fit.mean_output_tokens), fit.available, what)


class MemoryExceeded(InputError):
    """A run outgrew the memory available (``guard``)."""


@contextlib.contextmanager
def guard(limit_bytes: float, interval_s: float = 0.2):
    """Watch this process's resident memory while the block runs; past ``limit_bytes`` stop the
    block with ``MemoryExceeded``. A thread reads /proc/self/statm a few times a second (nothing
    on the simulation's path) and, past the limit, interrupts the main thread through a Python
    signal handler (``_thread.interrupt_main(SIGUSR1)``: no OS signal is sent). Only on the main
    thread; elsewhere the block runs unwatched."""
    if not math.isfinite(limit_bytes) or threading.current_thread() is not threading.main_thread():
        yield
        return
    import _thread

    stop = threading.Event()
    state = {"rss": None, "raised": False}

    def error():
        state["raised"] = True
        return MemoryExceeded(f"the run grew to {_gib(state['rss'])} of memory, past the {_gib(limit_bytes)} "
                              f"available (more steps than its size alone implies: the check before the run "
                              f"counts the fewest); {LOWER}")

    def handler(_signum, _frame):
        if state["rss"] is not None and not state["raised"]:
            raise error()

    def watch():
        while not stop.wait(interval_s):
            rss = rss_bytes()
            if rss > limit_bytes:
                state["rss"] = rss
                _thread.interrupt_main(signal.SIGUSR1)
                return

    old = signal.signal(signal.SIGUSR1, handler)
    t = threading.Thread(target=watch, name="servesim-memory-guard", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        if state["rss"] is None:
            signal.signal(signal.SIGUSR1, old)
        elif not state["raised"]:  # (the handler stays: a call still pending finds it and does nothing)
            raise error()


# A cluster of this many replicas or more is built with the garbage collector paused and then
# frozen for the run (``CollectorPause``); below it the setup's objects are few next to the run's
# own and there is nothing to gain.
FREEZE_REPLICAS = 1000
# The same for a closed loop of this many clients or more: each started client is a SimPy process
# (its generator, its Process, the events it waits on: ~7 tracked objects) alive until it ends.
FREEZE_CLIENTS = 10_000


@contextlib.contextmanager
def collection_paused():
    """Python's garbage collector paused for a block that allocates millions of objects that form
    no cycles and are soon freed (a trace's rows, read a block at a time): objects alive across
    a few young passes reach the old generation, whose full passes then scan them again (3
    million CSV rows: 2 of 7 s). Nothing is done when the caller has disabled the collector.
    Changes speed only, never results."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class CollectorPause:
    """Python's garbage collector around a run with a large cluster or many closed-loop clients. Building a replica
    allocates a few dozen container objects (its scheduler, queues, KV books, SimPy process) and
    frees none: with 100,000 replicas the collector ran ~450 young and 14 full passes while they
    were built, and more at the start of the run, each full one scanning every replica again
    (``bench/routers.py`` case (x): 4.5 s of collection in 8.8 s of ``simulate()``). With
    ``replicas >= FREEZE_REPLICAS``: one collection first (a previous run's cycles are freed, not
    frozen), collection paused while the cluster is built and its clients started (``built()``
    ends the pause), what exists then frozen (``gc.freeze``: never scanned during the run; cycles
    created during the run are collected as usual), and both undone on exit. The same with
    ``clients >= FREEZE_CLIENTS`` (a closed loop's): starting 300,000 clients ran 11 full passes
    over them (1.6 s), and each full pass during the run scanned them again (1.8 s more, in all
    half of ``simulate()``'s 6.4 s). Nothing is done when the caller has already disabled the
    collector or frozen objects (their settings stand), nor for smaller runs. Changes speed only,
    never results."""

    def __init__(self, replicas: int, clients: int = 0):
        self.active = ((replicas >= FREEZE_REPLICAS or clients >= FREEZE_CLIENTS) and gc.isenabled()
                       and gc.get_freeze_count() == 0)
        self.frozen = False

    def __enter__(self) -> CollectorPause:
        if self.active:
            gc.collect()
            gc.disable()
        return self

    def built(self) -> None:
        """The cluster is built and its clients started: freeze what exists and collect again from
        here on."""
        if self.active and not self.frozen:
            gc.freeze()
            self.frozen = True
            gc.enable()

    def __exit__(self, *exc) -> None:
        if self.active:
            if self.frozen:
                gc.unfreeze()
            gc.enable()
