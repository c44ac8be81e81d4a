"""Builds a run's replicas (one colocated pool, or prefill + decode pools) and moves requests
between them: the router for arrivals, and the P/D KV hand-off with its transfer time."""

from __future__ import annotations

import functools
import heapq
import math
from collections import deque

import numpy as np
import simpy

from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.pd_split import pick_decode_replica, transfer_time_s
from servesim.core.kv import BlockAllocator
from servesim.outputs.recorder import ReplicaInfo
from servesim.core.pipeline import Pipeline, VirtualEngines
from servesim.core.replica import Replica
from servesim.core.router import make_router
from servesim.core.gateway import Gateway
from servesim.errors import PluginError, call_plugin, is_plugin, plugin_name, shown


class Cluster:
    def __init__(self, env, setup, recorder, seed: int):
        self.env = env
        self.setup = setup
        self.rec = recorder
        sc = setup.scenario
        self.replicas: list[Replica] = []
        self.infos: list[ReplicaInfo] = []
        # every scheduler (with pp > 1 and overlap: each virtual engine), numbered in order
        self.pools: dict[str, list[Replica]] = {}
        # what the router and the hand-off see: a replica, or its virtual engines as one
        self.groups: dict[str, list] = {}
        # P/D: each prefill replica's links send one request's KV at a time, and each decode
        # replica's receive one at a time (a replica's virtual engines share its links)
        self._send_link: dict[int, simpy.Resource] = {}
        self._recv_link: dict[int, simpy.Resource] = {}
        self.pipelines: dict[str, list[Pipeline]] = {}  # per pool, its replicas' stages (pp > 1, overlap)
        fast = sc.engine == "fast"
        self._in_run: dict = {}  # replicas with a run of decode steps in flight -> its start's number
        self._runs = 0
        for pool in setup.pools:
            members, groups = [], []
            cm = pool.cost_model
            ve = cm.pp if cm.pp > 1 and sc.hardware.pp_overlap else 1
            blocks = pool.capacity.num_blocks // ve  # vLLM V0: each virtual engine has 1/pp of the KV
            host_blocks, block_bytes, swap_bw = pool.swap
            swap = (host_blocks // ve, block_bytes, swap_bw)  # ... and of the host swap space
            # the packaged ContinuousPolicy is a frozen dataclass that keeps no state between steps:
            # one serves every replica of the pool (making it per replica, with its plug-in lookup,
            # from_config and replaces, was a fifth of building 100,000 replicas); any other policy
            # (static batching, a plug-in) may keep state, so each replica gets a fresh one
            shared = None
            for _ in range(pool.replicas):
                pipe = Pipeline(env, ve) if ve > 1 else None
                if pipe is not None:
                    self.pipelines.setdefault(pool.name, []).append(pipe)
                engines = []
                for _ in range(ve):
                    i = len(self.replicas)
                    spec = None
                    if pool.spec is not None:
                        k, a, draft = pool.spec
                        spec = (k, a, draft, np.random.default_rng([seed, i, 1]))  # per replica, reproducible
                    policy = shared or pool.make_policy()
                    if type(policy) is ContinuousPolicy:
                        shared = policy
                    r = Replica(env, i, policy, cm,
                                BlockAllocator(blocks, pool.capacity.block_size, sc.policy.prefix_caching,
                                               cm.model.sliding_window_tokens),
                                recorder, cm.model.max_context_tokens, fast=fast, role=pool.name, pool=pool.name,
                                handoff=self.handoff, spec=spec, swap=swap, pipeline=pipe,
                                async_scheduling=pool.engine is not None and pool.engine.async_scheduling,
                                budget=(pool.max_num_seqs, pool.max_num_batched_tokens))
                    r.on_run = self._on_run
                    # a virtual engine's share of the replica's GPUs (its steps use each stage in turn)
                    self.infos.append(ReplicaInfo(i, pool.name, cm.peak_flops * cm.num_gpus / ve,
                                                  cm.gpu.mem_bw_bytes_per_s * cm.num_gpus / ve, blocks, ve))
                    self.replicas.append(r)
                    engines.append(r)
                members += engines
                groups.append(VirtualEngines(engines) if ve > 1 else engines[0])
                if pool.name in ("prefill", "decode"):
                    link = simpy.Resource(env, capacity=1)
                    links = self._send_link if pool.name == "prefill" else self._recv_link
                    for e in engines:
                        links[e.index] = link
            self.pools[pool.name] = members
            self.groups[pool.name] = groups
        self._fast = fast
        recorder.order_steps = fast
        self.entry = self.groups.get("prefill") or self.groups["colocated"]
        self.decode = self.pools.get("decode", [])
        self.route = make_router(sc.cluster.router, np.random.default_rng([seed, 2]))
        self._plugin_router = is_plugin(self.route)
        if hasattr(self.route, "configure"):
            self.route.configure(sc)
        # a router that reads replicas' counters or KV needs them brought up to date at each
        # arrival: all of them, unless it settles the ones it reads itself
        own_settle = hasattr(self.route, "settle")
        self._settle_on_submit = fast and getattr(self.route, "reads_state", True) and not own_settle
        if own_settle and fast:
            self.route.settle = self._settle_entry
        # replicas in a run by when their next step ends (Replica.on_due): what settle() visits
        self._due: list = []
        self._track_due = fast and (self._settle_on_submit or bool(self.pools.get("decode")))
        if self._track_due:
            for r in self.replicas:
                r.on_due = self._due_changed
        # the door: class attributes, predicted lengths and admission control (None: nothing to do)
        self.gateway = Gateway(sc, seed) if Gateway.needed(sc) else None
        self.admission = self.gateway.admission if self.gateway is not None else None
        if self.gateway is not None:
            self.gateway.watch(self.replicas)
        self.tracer = None  # the decision trace, when asked for (``servesim.core.decisions``)
        classes = sc.workload.classes or ()
        if len({c.priority for c in classes}) > 1:
            for r in self.replicas:
                r.track_priorities()
        if hasattr(self.route, "watch"):
            self._watch_loads()
        self.pending: deque = deque()  # (request, prefill replica, streamed_s) waiting for decode-side room
        self._retry_due = False  # a try of the pending hand-offs is scheduled (``_retry_soon``)
        self._stream = sc.policy.link.overlap  # layer-wise KV streaming during the last prefill step
        # upcoming arrival times (open-loop workloads; set by simulate) and the index of the next
        # one: with a router that decides ahead of time, a fast replica knows when its next
        # request comes (a hint to plan runs of decode steps; an arrival off the hint still
        # interrupts the run as any other)
        self.arrival_times: list | None = None
        self.next_arrival = 0
        if fast and hasattr(self.route, "routings_until"):
            for i, r in enumerate(self.entry):
                if isinstance(r, Replica):
                    r.next_arrival_s = functools.partial(self._next_arrival_s, i)
        if self.decode:
            self._decode_blocks = min(r.kv.num_blocks for r in self.decode)
            for r in self.decode:
                r.after_free = self._retry_soon
                r.handoffs_waiting = self.pending
        self._bulk_ended = False  # decode replicas' runs were told that completions matter now

    def _watch_loads(self) -> None:
        """Replicas tell the router when they change (``Replica.watch``), so it re-reads only
        those; with ``holders``, which replicas cache each prefix group's first block."""
        changed: set = set()
        holders: dict = {}  # group -> {position: engines of it caching the block}
        for pos, grp in enumerate(self.entry):
            for e in grp.engines if isinstance(grp, VirtualEngines) else [grp]:
                e.watch, e.watch_key = changed, pos
                if hasattr(self.route, "holders"):
                    e.kv.on_prefix = functools.partial(self._prefix_moved, holders, pos)
        self.route.watch(self.entry, changed)
        if hasattr(self.route, "holders"):
            self.route.holders = holders
            self._holder_moved = getattr(self.route, "holder_moved", None)

    _holder_moved = None  # the router's holder_moved(group, position, joined), told who joins or leaves

    def _prefix_moved(self, holders: dict, pos: int, group: int, delta: int) -> None:
        at = holders.setdefault(group, {})
        had = at.get(pos, 0)
        n = had + delta
        if n:
            at[pos] = n
        else:
            del at[pos]
        if (not had or not n) and self._holder_moved is not None:
            self._holder_moved(group, pos, bool(n))

    def _next_arrival_s(self, i: int) -> float:
        """When the next request routed to ``self.entry[i]`` arrives (inf if none is known)."""
        times = self.arrival_times
        if times is None:
            return math.inf
        j = self.next_arrival + self.route.routings_until(i, len(self.entry))
        return times[j] if j < len(times) else math.inf

    def _on_run(self, replica, started: bool) -> None:
        if started:
            self._runs += 1
            self._in_run[replica] = self._runs  # (ordered as the runs started)
        else:
            del self._in_run[replica]

    def _due_changed(self, r) -> None:
        """``r``'s next step end to settle may have come earlier: keep it in the heap."""
        t = r.next_settle_s()
        if t < r.due_s:
            r.due_s = t
            heapq.heappush(self._due, (t, r.index, r))

    def settle(self, strict: bool = False) -> None:
        """Bring replicas in the middle of a run of decode steps up to now (what a router, the
        P/D hand-off or the end of the run must see). With the heap of due times, only the
        replicas whose steps ended since they were last brought up to date are visited:
        O(those x log replicas), not O(replicas), per arrival or hand-off."""
        now = self.env.now
        if strict or not self._track_due:
            for r in self._in_run:
                r.settle(now, strict)
            return
        due = self._due
        if not due or due[0][0] > now:
            return
        ready = []
        in_run = self._in_run
        while due and due[0][0] <= now:
            t, _, r = heapq.heappop(due)
            if t == r.due_s:  # (else stale: a later entry holds its time)
                r.due_s = math.inf
                if r in in_run:  # (else its run has ended: nothing to settle)
                    ready.append(r)
        if len(ready) > 1:  # in the order their runs started, as the loop over every replica has it
            ready.sort(key=in_run.get)
        for r in ready:
            r.settle(now)
            self._due_changed(r)

    def _settle_entry(self, pos: int) -> None:
        """Bring the routed replica at ``pos`` (all its virtual engines) up to date, if it is in
        the middle of a run of decode steps."""
        grp = self.entry[pos]
        now = self.env.now
        for e in grp.engines if isinstance(grp, VirtualEngines) else (grp,):
            if e in self._in_run:
                e.settle(now)

    def _reject(self, req, reason: str) -> None:
        if self.tracer is not None:
            self.tracer.rejected(req, reason)
        self.rec.reject(req, reason)

    def submit(self, req) -> None:
        gw = self.gateway
        if gw is not None:
            gw.annotate(req)
        if self._settle_on_submit:
            self.settle()
        self.rec.arrive(req)
        if self.decode:
            reason = self._decode_rejection(req)
            if reason is not None:
                req.replica = -1
                self.rec.reject(req, reason)
                return
            emits, why = self.decode[0].outgrow(req)
            if why is not None:  # its decode outgrows a decode replica's KV: it ends there when it does
                req.cap_output(emits, f"decode pool: {why}")
        adm = self.admission
        if adm is not None and adm.applies_to(req):
            reason = adm.at_door(req, self.env.now)
            if reason is not None:
                req.replica = -1
                self._reject(req, reason)
                return
            pos = self.route(self.entry, req) if not self._plugin_router else self._plugin_route(req)
            if adm.reads_state and self._fast:
                self._settle_entry(pos)
            grp = self.entry[pos]
            # (named as requests.csv and steps.csv number it: with pipeline virtual engines, by its
            # first engine, not by its position among the routed replicas)
            index = grp.index if isinstance(grp, Replica) else grp.engines[0].index
            reason = adm.at_replica(req, grp, index)
            if reason is not None:
                req.replica = index
                self._reject(req, reason)
                return
            self.entry[pos].submit(req)
            return
        self.entry[self.route(self.entry, req) if not self._plugin_router else self._plugin_route(req)].submit(req)

    def _plugin_route(self, req) -> int:
        """A plug-in router's pick, checked: what it raises, or anything but the index of a
        replica, is a ``PluginError`` naming it (-1 would silently pick the last one)."""
        pos = call_plugin("router", self.route, "its call", self.route, self.entry, req)
        n = len(self.entry)
        if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or not 0 <= pos < n:
            raise PluginError(f"router {plugin_name(self.route)}: returned {shown(pos)} for request {req.request_id}; "
                              f"the index of a replica, 0 to {n - 1}, expected")
        return int(pos)

    def _decode_rejection(self, req) -> str | None:
        if req.output_tokens <= 1:
            return None  # its one token comes from the prefill step: it finishes there, never handed off
        total = req.prompt_tokens + req.output_tokens
        need = self.decode[0].kv.blocks_for(total - 1)
        if need > self._decode_blocks and not self.decode[0].grows_kv:  # (else it ends when it outgrows it)
            return f"prompt + output = {total} tokens needs {need} KV blocks; a decode replica has " \
                   f"{self._decode_blocks} in all"
        # the hand-off leaves one block spare on the decode replica (pd_split.decode_room): a
        # prompt needing every block could never be handed off, and the run would stall
        handed = self.decode[0].kv.blocks_for(req.prompt_tokens)
        if handed > self._decode_blocks - 1:
            return f"prompt = {req.prompt_tokens} tokens needs {handed} KV blocks on a decode replica, which " \
                   f"keeps one of its {self._decode_blocks} spare for a hand-off"
        # a request preempted on the decode side is recomputed there, under the decode policy
        # (continuous recomputes in chunks there: no budget limit on prompt + output)
        reason = self.decode[0].admission_error(req.prompt_tokens, req.output_tokens)
        return None if reason is None else f"decode pool: {reason}"

    def rejection_reason(self, req) -> str | None:
        """Why ``req`` would be rejected on arrival (None: it would not): rejection depends only on
        its lengths and the deployment, never on the load (``predictions.predict_rejections``)."""
        if self.decode:
            reason = self._decode_rejection(req) or self.entry[0].arrival_reason(req)
            if reason is None:
                why = self.decode[0].outgrow(req)[1]
                reason = None if why is None else f"decode pool: {why}"
            return reason
        return self.entry[0].rejection_reason(req)

    # ---------------------------------------------------------------- P/D hand-off
    def handoff(self, req, src: Replica, streamed_s: float = 0.0) -> None:
        """Called by a prefill replica when ``req`` has its first token and more to decode;
        ``streamed_s``: how long its KV could stream during the step that finished its prompt."""
        self.pending.append((req, src, streamed_s if self._stream else 0.0))
        self._retry_soon()

    def _retry_soon(self) -> None:
        """Try the waiting hand-offs once everything else due at this instant has happened: a
        decode replica's step ending now has ended, its KV freed and its next step's taken, before
        a hand-off reads its room. (Both engines see the same state whatever the order in which
        SimPy takes events of the same instant: with steps of one fixed length, e.g. launch-bound
        ones, a prefill replica and a decode replica can end steps at the very same time.)"""
        if self.pending and not self._retry_due:
            self._retry_due = True
            self.env.timeout(0).callbacks.append(self._retry_now)

    def _retry_now(self, _event) -> None:
        self._retry_due = False
        self._retry_handoffs()

    def _retry_handoffs(self) -> None:
        if self.pending and self._fast:
            self.settle()
        while self.pending:
            req, src, streamed_s = self.pending[0]
            need = self.decode[0].kv.blocks_for(req.num_computed_tokens)
            j = pick_decode_replica(self.decode, need)
            if j is None:
                if self._fast and not self._bulk_ended:
                    # a hand-off waits: every completion on the decode side may let it in, at its
                    # time (runs of decode steps stop settling completions in bulk)
                    self._bulk_ended = True
                    for r in list(self._in_run):
                        r.end_bulk()
                return
            self.pending.popleft()
            if not self.pending:
                self._bulk_ended = False
            dst = self.decode[j]
            token = src.kv.detach(req)  # the prefill side keeps the blocks until the KV lands
            ok = dst.kv.grow(req, req.num_computed_tokens)
            assert ok
            if hasattr(dst, "kv_changed"):
                dst.kv_changed()  # fast engine: a run of decode steps planned on the old free count stops
            req.decode_replica = dst.index
            if self.env.now > req.first_token_s:
                streamed_s = 0.0  # it waited for room: no decode replica to stream to during the step
            self.env.process(self._transfer(req, src, dst, token, streamed_s))

    def _transfer(self, req, src, dst, token, streamed_s: float = 0.0):
        """Send ``req``'s KV from ``src`` to ``dst``: once the prefill replica's links are free of
        its earlier hand-offs and then the decode replica's of the ones it is receiving (each
        carries one at a time, first come first served), latency + bytes / bandwidth. Senders
        always take their own link before the receiver's, so the waits cannot deadlock."""
        pool = self.setup.pools_by_name["prefill"]
        model = pool.cost_model.model
        tokens = req.num_computed_tokens
        if model.sliding_window_tokens is not None:  # only the window's KV is kept, and sent
            tokens = min(tokens, model.sliding_window_tokens)
        kv_bytes = model.kv_bytes_per_token(pool.cost_model.kv_dtype) * tokens
        t0 = self.env.now
        with self._send_link[src.index].request() as out:
            yield out
            with self._recv_link[dst.index].request() as into:  # asked for only once the sender's is held
                yield into
                if self.env.now > t0:
                    streamed_s = 0.0  # the links were carrying other KV while the step ran
                yield self.env.timeout(transfer_time_s(kv_bytes, *self.setup.link, streamed_s,
                                                       pool.cost_model.model.num_layers))
        src.kv.release(token)
        if src.watch is not None:
            src.watch.add(src.watch_key)
        src.wake()  # freed prefill-side blocks may let it admit more
        req.kv_transfer_s = self.env.now - req.first_token_s
        self.rec.kv_transfer_bytes += kv_bytes
        dst.accept_prefilled(req)
