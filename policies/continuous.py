"""Iteration-level batching with paged KV: vLLM-style continuous batching, and its chunked form.

Each step, running requests (admission order) each get their next tokens: one decode token (or
``k + 1`` with speculative decoding), or the rest of their prompt (chunked: as much as the
token budget allows). If KV runs out, a running request is preempted (``victim``: the newest by
default; ``servesim.policies.queues``): recompute frees its KV and re-queues it (at the front of
an FCFS queue; in its place in a keyed one); swap copies its KV to host memory (while host space
lasts, else recompute). If nobody was preempted, swapped requests come back first (FCFS), then
waiting requests are admitted in the queue's order (``queue_order``: FCFS by default) while
``max_num_seqs``, the token budget and free KV blocks (minus the watermark) allow: with their
whole prompt (continuous) or a chunk (chunked prefill, Sarathi-Serve), taking the KV blocks of
the tokens scheduled (vLLM V1), or of its whole prompt at once (``whole_prompt_blocks``: the vLLM V0
and Sarathi-Serve engine profiles, whose block manager allocates a prompt when it admits it,
chunked or not); with ``full_prompt_admission`` (vLLM V1's ``--scheduler-reserve-full-isl``) a
chunked prompt is admitted only when the blocks of the whole of it are free, though it takes its
first chunk's. (Under ``admit_past_preemption``, vLLM v0.4-v0.5's chunked-prefill scheduler, waiting
requests are admitted in a step that preempted too, nobody swapped in then, and past swapped-out
requests that do not come back.) With prefix caching, a
prompt's leading blocks found in the cache are not recomputed (a request preempted for recompute
finds its own full blocks there too, those not evicted since).

Under the ``priority`` order with ``preempt_running``, a waiting request stopped by
``max_num_seqs`` or the KV cache preempts (recompute) running requests of strictly lower
priority, lowest (then latest arrival) first, as many as make room, and is admitted in the same
step; when no such set makes room, nobody is preempted. (vLLM V0's priority preemption; vLLM V1
preempts by priority only under KV pressure, ``preempt_running: false``.)

With ``reserve`` (Orca's KV reservation, ``policy.reserve``) a request is admitted only when the
KV for its whole reservation is free, and takes it at once: ``max`` up to the model's context
length (or prompt + ``max_output_tokens``), ``pow2`` prompt + its true output rounded up to a power
of two, ``oracle`` prompt + its true output (the last token is never stored: prompt + output - 1).
Reserved requests never grow their KV, so they are never preempted. ``pow2`` and ``oracle`` read
the request's true output length: they are the vLLM paper's oracles (the one exception to the
policy contract), upper bounds no real scheduler reaches. With ``buddy`` the reservation is
rounded up to a power of two tokens: the vLLM paper's Orca stores KV contiguously with a buddy
allocator, whose rounding is most of the external fragmentation its Fig. 2 shows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from servesim.policies.base import ReplicaState
from servesim.policies.queues import queue_key, victim_picker
from servesim.core.batch import Batch, make_batch

# fields ``from_config`` always takes from the scenario, whatever a subclass declares: the
# deployment's budgets (its KV cache is sized for them), the model's context, and speculative
# decoding (the engine's draft runs as the scenario's policy.spec says)
SCENARIO_OWNED = ("max_num_seqs", "max_num_batched_tokens", "max_context_tokens", "spec_tokens")
_ROOM = ("max_num_seqs", "kv", "watermark")  # admission stops that preempting running requests can lift
_HELD = (*_ROOM, "budget")  # admission stops that only a completion lifts (``_held``)


@dataclass(frozen=True)
class ContinuousPolicy:
    """The packaged ``continuous`` and ``chunked_prefill`` policies (``chunked=True``), as the
    module docstring describes them; built from the scenario's ``policy`` section by
    ``from_config``. Subclass it to change one thing and keep the rest, the fast path included:
    ``queue_key`` for the admission order, a field's default (``chunked: bool = True``), or
    ``next_batch`` around the base's (docs/extending.md)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked: bool = False
    preemption: str = "recompute"  # recompute | swap
    watermark: float = 0.0  # share of all KV blocks kept free when admitting (vLLM: 0.01)
    spec_tokens: int = 0  # speculative tokens verified per decode step (k)
    queue_order: str = "fcfs"  # servesim.policies.queues.ORDERS
    aging_s: float | None = None
    victim: str = "auto"  # servesim.policies.queues.VICTIMS
    preempt_running: bool = True  # priority order: waiting requests preempt lower-priority running ones
    reserve: str = "none"  # none | max | pow2 | oracle: KV reserved at admission (Orca)
    max_output_tokens: int | None = None  # reserve max: output tokens reserved (None: up to the context)
    max_context_tokens: int = 0  # the model's context length (reserve max)
    buddy: bool = False  # reservations rounded up to a power of two tokens (a buddy allocator)
    # a preempted request comes back only when the KV of its whole sequence so far is free, and
    # takes it at once, even if chunked (the P/D decode side: its recompute fits any budget in
    # chunks, and cannot be preempted half-way by the decodes' growth, over and over)
    recompute_whole: bool = False
    # vLLM V0 without chunked prefill (``_schedule_default``): a step that admits prompts carries
    # no decodes (prefills first; running requests stall for it, the "generation stalls" of
    # Sarathi-Serve), decodes run only in steps that admit nothing, and no prompt is admitted
    # while requests are swapped out (they come back first, beside the decodes). False: prompts
    # join the running decodes' step (Orca's iteration-level batching, vLLM V1).
    prefill_first: bool = False
    # vLLM V1 with chunked prefill off until late 2025 (``Scheduler.schedule``: a waiting request
    # whose new tokens exceed the budget left was set aside and the next one tried, until
    # vllm-project/vllm#28911): a whole prompt that does not fit next to the running decodes is
    # skipped, the requests behind it admitted if they fit. False: admission stops there (FCFS
    # head-of-line: the queue behind it waits too; vLLM V1 since).
    skip_unfit_prompts: bool = False
    # a P/D split's prefill pool: the scenario field its budget comes from ("" elsewhere). Its
    # replicas run the prompt alone (and, preempted, recompute just that), and the fix for a
    # prompt over the budget is that pool's chunked prefill, not policy.name (which undoes the split)
    prefill_budget_path: str = ""
    # vLLM v0.2's padded prompt batches (``prefill_first`` steps, whole prompts): each prompt of a
    # prompt-only step is padded to the step's longest, the budget counts sequences x the longest,
    # and admission stops at the first prompt that would take the padding past ``max_paddings``
    # tokens. Set from the engine profile (``EngineProfile.max_paddings``, cost.engine vllm-v0.2),
    # not the scenario; None: no padding
    max_paddings: int | None = None
    # vLLM V0's (v0.1-v0.6.1) and Sarathi-Serve's ``can_append_slot``: before a decode step each decoding
    # request, in the running list's order, needs a free KV block at its turn, whether or not its
    # next token opens a new block (a ``Batch`` preempts the newest running request until one is
    # free); so a decode step starting with no block free preempts. Set from the engine profile
    # (``EngineProfile.decode_needs_free_block``), not the scenario. False: a request needs a free
    # block only when its next token opens one
    decode_needs_free_block: bool = False
    # vLLM V0's (and Sarathi-Serve's) ``can_allocate``: a request preempted for recompute comes back
    # only above the watermark, as a new one does (False: it may use the watermark's blocks). Set
    # from the engine profile (``EngineProfile.watermark_on_recompute``)
    watermark_on_recompute: bool = False
    # vLLM V0's and Sarathi-Serve's ``BlockSpaceManager.allocate``: a waiting request is admitted
    # only when the KV blocks of its whole sequence so far (its prompt; prompt + output so far for
    # a recompute) are free, the watermark kept, and takes them all at once, even with chunked
    # prefill (its later chunks grow nothing, so a request half-way through its prompt is never
    # what runs out of KV). Set from the engine profile (``EngineProfile.whole_prompt_blocks``).
    # False: vLLM V1's ``allocate_slots``, the blocks of the tokens scheduled, chunk by chunk
    whole_prompt_blocks: bool = False
    # vLLM V1's ``--scheduler-reserve-full-isl`` (``SchedulerConfig.scheduler_reserve_full_isl``,
    # vllm-project/vllm#37307): a waiting request (new, or preempted for recompute) is admitted only
    # when the KV blocks of its whole sequence so far (its prompt; prompt + output so far for a
    # recompute; prefix-cache hits counted) are free, the watermark kept, though it still takes only
    # its first chunk's (``KVCacheManager.allocate_slots(full_sequence_must_fit=True)``). Only
    # chunked prefill is affected (a whole prompt takes its blocks at once either way). From the
    # scenario's ``policy.full_prompt_admission``
    full_prompt_admission: bool = False
    # vLLM V0's ``_schedule_running`` with chunked prefill (v0.4-v0.5): under
    # ``decode_needs_free_block``, a running request mid-way through its prompt needs a free KV block
    # at its turn too (``_can_append_slots`` for every running group), though its blocks were all
    # taken at admission. Set from the engine profile (``EngineProfile.prefill_needs_free_block``)
    prefill_needs_free_block: bool = False
    # vLLM V0's ``_schedule_chunked_prefill`` (v0.4-v0.5): with chunked prefill, waiting requests are
    # admitted in a step that preempted (after the running requests, on the blocks and tokens left;
    # the step's victims rejoin the queue after it, so they are not among them), with no swap-in in
    # such a step, and swapped-out requests that do not all come back do not hold them back. Set
    # from the engine profile (``EngineProfile.admit_past_preemption``). False: nothing is admitted in
    # a step that preempted, and swapped-out requests come back before any waiting one
    admit_past_preemption: bool = False

    @classmethod
    def from_config(cls, cfg, model, **kw):
        """From the scenario's ``policy`` section (``servesim.inputs.scenario.Policy``, budgets
        resolved for the pool); ``kw`` overrides fields (``chunked``). A field a subclass gives a
        default of its own (``queue_order: str = "sjf"``, ``prefill_first = True``) is the
        policy's: it keeps it, whatever the scenario says (``declared_fields``; the scenario's
        value, when given, is a ``no_effect`` warning), but for the deployment's budgets, the
        model's context and speculative decoding, which are the scenario's."""
        q = cfg.queue
        values = dict(max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                      preemption=cfg.preemption, watermark=cfg.watermark,
                      spec_tokens=cfg.spec.num_speculative_tokens if cfg.spec is not None else 0,
                      queue_order=q.order, aging_s=q.aging_s, victim=cfg.preemption_victim,
                      preempt_running=q.preempt_running,
                      reserve=getattr(cfg, "reserve", "none"), max_output_tokens=cfg.max_output_tokens,
                      max_context_tokens=model.max_context_tokens,
                      buddy=getattr(cfg, "reserve_allocator", "paged") == "buddy",
                      prefill_first=getattr(cfg, "prefill_first", False),
                      skip_unfit_prompts=getattr(cfg, "skip_unfit_prompts", False),
                      full_prompt_admission=getattr(cfg, "full_prompt_admission", False))
        # (silently replaced by the scenario's, its schema default included: a subclass declaring
        # queue_order = "sjf" ran FCFS)
        values.update({name: getattr(cls, name) for name in cls.declared_fields()})
        return cls(**{**values, **kw})

    @classmethod
    def declared_fields(cls) -> tuple:
        """The fields a subclass gives a default other than ``ContinuousPolicy``'s (as a dataclass
        field or a plain class attribute), except those the scenario owns (``SCENARIO_OWNED``)."""
        if cls is ContinuousPolicy:
            return ()
        return tuple(f.name for f in fields(ContinuousPolicy) if f.name not in SCENARIO_OWNED
                     and getattr(cls, f.name, f.default) != f.default)

    def reserved_tokens(self, prompt_tokens: int, output_tokens: int) -> int:
        """KV tokens reserved at admission for a request (``reserve``; 0 when none).
        ``output_tokens`` is its true output length (read by the pow2 and oracle reservations only)."""
        res = self.reserve
        if res == "none":
            return 0
        if res == "oracle":
            tokens = prompt_tokens + output_tokens - 1  # the last token is sampled, never stored
        elif res == "pow2":
            tokens = min(prompt_tokens + _pow2(output_tokens), self.max_context_tokens)
        elif self.max_output_tokens is not None:
            tokens = min(prompt_tokens + self.max_output_tokens, self.max_context_tokens)
        else:
            tokens = self.max_context_tokens
        return _pow2(tokens) if self.buddy else tokens

    @property
    def queue_key(self):
        """The waiting queue's order (``servesim.policies.queues``; None: FCFS)."""
        return queue_key(self.queue_order, self.aging_s)

    @property
    def _pick_victim(self):
        return victim_picker(self.victim, self.queue_order)

    def _chunked_fix(self, field: str) -> str:
        """How to turn chunked prefill on: ``field``=chunked_prefill for the packaged policy, its
        class attribute for a plug-in subclass."""
        return f"{field}=chunked_prefill" if type(self) is ContinuousPolicy else \
            f"chunked = True in {type(self).__name__} (servesim's chunked prefill)"

    def admission_error(self, prompt_tokens: int, max_tokens: int, kv=None) -> str | None:
        # Whole-prompt admission runs the prompt in one prefill within the per-step token budget:
        # what the engine knows on arrival is the prompt (vLLM v0.2.3 vllm/core/scheduler.py L66-67
        # and L145-154: a waiting sequence longer than min(max_model_len, max_num_batched_tokens)
        # is ignored; the output length is unknown). A request preempted for recompute later comes
        # back with prompt + output so far in one prefill: one over the budget then ends, rejected
        # (``Replica.recompute_limit``). Chunked prefill: its first chunk is admitted alone (its
        # blocks: those of its first chunk, or of its whole prompt under ``whole_prompt_blocks``).
        if not self.chunked and prompt_tokens > self.max_num_batched_tokens:
            if self.prefill_budget_path:
                # (a P/D prefill pool's fix is its own chunked prefill, which keeps the split)
                return (f"prompt of {prompt_tokens} tokens exceeds {self.prefill_budget_path}="
                        f"{self.max_num_batched_tokens} (a prefill replica with whole-prompt admission runs the prompt "
                        f"in one prefill within the budget; use {self._chunked_fix('policy.prefill.policy')} or a "
                        "larger budget)")
            # the packaged policy's fix is chunked prefill by its field, a plug-in subclass's its own
            # class attribute (policy.name=chunked_prefill would replace it with the packaged policy)
            return (f"prompt of {prompt_tokens} tokens exceeds policy.max_num_batched_tokens="
                    f"{self.max_num_batched_tokens} (whole-prompt admission runs the prompt in one prefill within "
                    f"the budget; use {self._chunked_fix('policy.name')} or a larger budget)")
        if self.reserve == "max" and self.max_output_tokens is not None and max_tokens > self.max_output_tokens:
            return (f"output of {max_tokens} tokens exceeds policy.max_output_tokens={self.max_output_tokens} "
                    f"(what policy.reserve=max reserves per request)")
        if kv is not None:
            # A first admission keeps the watermark's blocks free (``admit``'s reserve), even on an
            # otherwise empty replica: a larger prompt (chunked: first chunk) would wait forever,
            # and every request queued behind it (FCFS) with it. (A re-admission after a
            # preemption may use the reserve, so a recompute can always come back.)
            by_chunk = self.chunked and not self.whole_prompt_blocks and not self.full_prompt_admission
            first = min(prompt_tokens, self.max_num_batched_tokens) if by_chunk else prompt_tokens
            tokens = max(first, self.reserved_tokens(prompt_tokens, max_tokens))
            need = kv.blocks_for(tokens)
            room = kv.num_blocks - int(self.watermark * kv.num_blocks)
            if need > room:
                what = f"its reservation (policy.reserve={self.reserve})" if self.reserve != "none" else \
                    "its first chunk" if by_chunk else "its prompt"
                if need > kv.num_blocks:  # (a reservation past the sequence, which the replica checked fits)
                    less = "set policy.max_output_tokens to reserve less, or " if self.reserve == "max" else \
                        "use policy.reserve_allocator: paged, or " if self.buddy else ""
                    return (f"{what} = {tokens} tokens needs {need} KV blocks; the replica has {kv.num_blocks} in "
                            f"all ({less}give the replica more KV memory)")
                return (f"{what} = {tokens} tokens needs {need} free KV blocks to be admitted, but admission "
                        f"keeps policy.watermark={self.watermark:g} of the {kv.num_blocks} blocks free, leaving "
                        f"{room} (lower policy.watermark or give the replica more KV memory)")
        return None

    def _tokens(self, r, budget: int) -> int:
        """Tokens ``r`` would run this step: a decode (1, or k + 1) or the rest of its prompt."""
        remaining = r.prompt_tokens + r.num_output_done - r.num_computed_tokens
        if remaining == 1 and r.num_output_done > 0:
            return self.spec_tokens + 1
        return min(remaining, budget) if self.chunked else remaining

    def _slot_need(self, r, need: int) -> int:
        """The free KV blocks running request ``r`` needs at its turn to take ``need`` new ones:
        ``need``, or at least one for a decoding request under ``decode_needs_free_block`` (vLLM
        v0.2.3 ``BlockSpaceManager.can_append_slot``, vllm/core/block_manager.py L143-148: "at
        least one free block for each sequence", checked for each running group in turn before
        the decode step, vllm/core/scheduler.py L217-234)."""
        if need < 1 and self.decode_needs_free_block and (
                self.prefill_needs_free_block
                or (r.num_output_done > 0 and r.prompt_tokens + r.num_output_done - r.num_computed_tokens == 1)):
            return 1
        return need

    @property
    def _admits_past_preemption(self) -> bool:
        """Whether waiting requests are admitted in a step that preempted, swapped-out ones left
        behind (``admit_past_preemption``: chunked prefill only; not a P/D decode side)."""
        return self.admit_past_preemption and self.chunked and not self.recompute_whole

    @property
    def skips_unfit(self) -> bool:
        """Whether admission sets aside a whole prompt without room in the budget left beside the
        decodes (``skip_unfit_prompts``; chunked prefill and ``prefill_first`` always have room
        for one, so never then). The decision trace reads it too."""
        return self.skip_unfit_prompts and not self.chunked and not self.prefill_first

    @property
    def aggregates_decodes(self) -> bool:
        """Decoding requests can be scheduled as one aggregate: each takes exactly one token a
        step (speculative decoding's accepted tokens vary per sequence); a request whose KV was
        reserved whole at admission joins the set holding it (it grows none)."""
        return self.spec_tokens == 0

    def next_batch(self, state: ReplicaState) -> Batch:
        dec = state.decoding
        if self.prefill_first and not self.chunked and state.waiting and not state.swapped and not state.landed:
            batch = self._prefills_only(state, dec)
            if batch is not None:
                return batch
        if dec.num_seqs:
            batch = self._with_decode_set(state, dec)
            if batch is not None:
                return batch
        return self._one_by_one(state, state.running)  # (reading running dissolves the decode set)

    def _with_decode_set(self, state: ReplicaState, dec) -> Batch | None:
        """The decision when the decode set (ahead of every other running request) takes its
        tokens as a whole: what ``_one_by_one`` decides on the whole running list, as long as
        the requests it would preempt are all outside the set (the newest first: the default
        victim order); None otherwise (then the running list is needed).

        ``_one_by_one`` takes the members' tokens one by one, preempting the newest running
        requests while one does not fit; a member needs at most one block, so the victims it
        takes for the members are the fewest newest ones that free the set's whole need, in that
        order, before any request outside the set is scheduled."""
        kv = state.kv
        free = kv.num_free
        budget = self.max_num_batched_tokens
        n = dec.num_seqs
        if n > budget:
            return None
        tail = state.tail
        end = len(tail)  # tail[end:] are preempted this step (the newest victims)
        preempted = []
        swap_out = []
        host_free = state.host_free_blocks
        # with a prefix cache: the shared blocks' mappings this step's victims release (a block the
        # victims alone map turns free once the last of them goes: ``freeable_blocks``)
        dropped = {} if kv.caching else None
        newest = self._pick_victim is None
        need = dec.blocks_needed
        if self.decode_needs_free_block and free - need < 1:
            # (each member needs a free block at its turn: decided member by member on the
            # running list; with a block left after the set's growth, every member had one)
            return None
        while need > free:
            if not newest or not end:  # another victim order, or a member of the set is next
                return None
            end -= 1
            free, host_free = self._preempt(tail[end], kv, free, host_free, preempted, swap_out, dropped)
        free -= need
        budget -= n
        items = []
        i = 0
        while i < end:
            r = tail[i]
            i += 1
            q = self._tokens(r, budget)
            if q > budget or q == 0:
                continue
            need = kv.blocks_for(r.num_computed_tokens + q) - r.kv_blocks
            if self._slot_need(r, need) > free:
                if not newest:
                    return None  # a preemption in another victim order: decided on the running list
                while self._slot_need(r, need) > free:  # the newest go first; the last may be r itself
                    end -= 1
                    victim = tail[end]
                    free, host_free = self._preempt(victim, kv, free, host_free, preempted, swap_out, dropped)
                    if victim is r:
                        break
                if victim is r:
                    continue
            if need > 0:
                free -= need
            budget -= q
            items.append((r, q))
        if preempted:  # (nothing is admitted in a step that preempts, as _one_by_one)
            if self._admits_past_preemption:
                reserved = []
                _, admitted, hits, _, stop = self.admit(state, n + len(tail) - len(preempted), free, budget, items,
                                                        reserved, dropped, swap_in=False)
                return make_batch(items, preempted, admitted, prefix_hits=hits, swap_out=swap_out, decode_set=dec,
                                  stop=stop, reserve=reserved)
            return make_batch(items, preempted, (), swap_out=swap_out, decode_set=dec,
                              stop=("preemption_step", None, budget, free,
                                    self.max_num_seqs - n - len(tail) + len(preempted)))
        reserved = []
        swap_in, admitted, hits, blocked, stop = self.admit(state, n + len(tail), free, budget, items, reserved)
        if stop is not None and self._may_preempt_for(stop) and state.running_priorities is not None:
            # (no count: the replica's requests share one priority, so none is lower)
            low = state.running_priorities.lowest()
            if low is not None and stop[1].priority < low:
                return None  # a waiting request preempts lower-priority ones: decided on the running list
        steady = self._steady(state, admitted, swap_in, blocked)
        held = not steady and self._held(state, items, admitted, swap_in, blocked, stop)
        # deaf to arrivals under FCFS (they queue behind the head) or when a swapped-out request
        # comes first; a keyed queue may rank an arrival ahead of the head (``arrivals_behind``)
        deaf = held and (getattr(state.waiting, "key", None) is None or stop[0] == "swapped_first")
        return make_batch(items, (), admitted, prefix_hits=hits, swap_in=swap_in, budget_blocked=blocked,
                          decode_set=dec, steady=steady or held, steady_arrivals=deaf,
                          until_completion=held, arrivals_behind=held and not deaf, stop=stop, reserve=reserved)

    def _prefills_only(self, state: ReplicaState, dec) -> Batch | None:
        """``prefill_first``: the waiting requests admitted with the whole budget and the free KV
        blocks, none of the running requests scheduled (the decode set included: it waits out the
        step); None when none can be admitted (then the running requests decode)."""
        items, reserved = [], []
        _, admitted, hits, blocked, stop = self.admit(state, dec.num_seqs + len(state.tail), state.kv.num_free,
                                                      self.max_num_batched_tokens, items, reserved)
        if not admitted:
            return None
        padding = (0, 0, 0)
        if self.max_paddings is not None:
            keep, padding, cut = self._padded(items)
            if cut is not None:  # (admission stopped at items[keep]: nothing after it is admitted)
                kept = {id(r) for r in admitted[:keep]}
                free = state.kv.num_free - sum(state.kv.blocks_for(self._admission_tokens(r, 0, q))
                                               for r, q in items[:keep])
                admitted, items = admitted[:keep], items[:keep]
                hits = [h for h in hits if id(h[0]) in kept]
                reserved = [x for x in reserved if id(x[0]) in kept]
                stop = ("budget", cut, self.max_num_batched_tokens - keep * max(q for _, q in items), free,
                        self.max_num_seqs - dec.num_seqs - len(state.tail) - keep)
                blocked = None
        return make_batch(items, (), admitted, prefix_hits=hits, budget_blocked=blocked, stop=stop,
                          reserve=reserved, padding=padding, steady=self._steady(state, admitted, (), blocked))

    def _padded(self, items):
        """vLLM v0.2's prompt batch over the prompts ``admit`` took, in order (``max_paddings``):
        (how many it keeps, their padding as ``make_batch`` takes it, the request admission stops
        at or None). vLLM v0.2.3 ``Scheduler._schedule`` (vllm/core/scheduler.py L170-186): the
        prompts taken so far plus the next are ``len x longest`` tokens against the budget, and
        ``len x longest - sum`` padded tokens against ``max_paddings``; the first to break either
        stops admission. The model runner pads every prompt to the longest
        (vllm/worker/model_runner.py L94-106), and attention is causal over the padded length
        (``BlockDiagonalCausalMask.from_seqlens([seq_len] * batch_size)``,
        vllm/model_executor/layers/attention.py L133-136): each padded slot is a token of every
        layer, ``P(P+1)/2 - q(q+1)/2`` more query-key pairs per prompt, and a KV token touched."""
        longest = total = 0
        for k, (r, q) in enumerate(items):
            top = max(longest, q)
            if (k + 1) * top > self.max_num_batched_tokens or (k + 1) * top - total - q > self.max_paddings:
                cut, n = r, k
                break
            longest, total = top, total + q
        else:
            cut, n = None, len(items)
        pad = n * longest - total
        pairs = sum(longest * (longest + 1) // 2 - q * (q + 1) // 2 for _, q in items[:n])
        return n, (pad, pairs, pad), cut

    def _may_preempt_for(self, stop) -> bool:
        """Whether admission stopped where preempting lower-priority running requests may help."""
        return self.preempt_running and self.queue_order == "priority" and stop[0] in _ROOM

    def _steady(self, state: ReplicaState, admitted, swap_in, blocked) -> bool:
        """Whether, after this step, only arrivals can change the decision: nothing waits to be
        admitted or swapped in (so every later step decodes whatever runs, one token each), and
        nothing is held back."""
        return (not self.spec_tokens and blocked is None and len(admitted) == len(state.waiting) + len(state.landed)
                and len(swap_in) == len(state.swapped))

    def _held(self, state: ReplicaState, items, admitted, swap_in, blocked, stop) -> bool:
        """Whether this decision (the decode set alone, requests left waiting) is the decision of
        every later step until a running request completes (or, with a keyed queue, a request
        arrives: it may rank ahead of the head): admission stopped at the head of the queue for
        room that decode-only steps only take (KV blocks: the decode set grows) or keep (its
        sequence slots and token budget: its size is fixed) and only a completion gives back. The
        queue's order does not change meanwhile (a keyed queue's keys are fixed at insertion; aging
        is folded into them), nor do the running requests' priorities (a higher-priority head would
        have preempted now). Swapped-out requests come back first: when the first of them does not
        fit, nothing else is admitted, whatever arrives. Not with landed requests (P/D), a head
        blocked by the budget alone (``Batch.budget_blocked``: timed per decision), or speculative
        decoding.

        With a prefix cache, the decode set's growth may evict cached blocks (nothing is cached
        until a request releases its blocks): the head's whole prompt then needs as many blocks
        or more (each lost hit was a block to map). A chunk of it (chunked prefill) spans the hits
        and a budget of new tokens, so losing hits shrinks the chunk: held only when the head has
        no hit to lose."""
        if (items or admitted or swap_in or blocked is not None or stop is None or self.spec_tokens
                or state.landed):
            return False
        if stop[0] == "swapped_first":  # (its need is its KV so far: no prefix-cache hit to lose)
            # (under admit_past_preemption an arrival is admitted past it: decided step by step)
            return not self._admits_past_preemption and bool(state.swapped) and stop[1] is state.swapped[0]
        if stop[0] not in _HELD or state.swapped:
            return False
        return (not self.chunked or stop[0] not in ("kv", "watermark")
                or self._waiting_tokens(state.kv, stop[1], 0)[1] == 0)  # (hits held: 0 without a cache)

    def _swaps_back(self, kv, r) -> bool:
        """Whether ``r``, swapped out now, could ever come back: under ``decode_needs_free_block``
        (vLLM V0's ``can_swap_in``: its blocks plus one free) its blocks and one more must fit the
        cache even with nothing else in it. A lone sequence holding every block could not: swapped
        out, it waited for a block that never comes (the run stalled); it is preempted for
        recompute instead (vLLM V0 preempts a single-sequence group for recompute by default), where
        a sequence the cache cannot hold ends rejected (``Replica.outgrow``)."""
        return not self.decode_needs_free_block or kv.blocks_for(r.num_computed_tokens) + 1 <= kv.num_blocks

    def _preempt(self, victim, kv, free: int, host_free: int, preempted: list, swap_out: list,
                 dropped=None) -> tuple[int, int]:
        """Preempt ``victim`` this step (to host memory when ``policy.preemption`` is swap and it
        fits there, else for recompute): the free KV blocks and host blocks after. ``dropped``
        (with a prefix cache): the shared blocks' mappings released by the victims before it,
        its own added (two victims sharing a prefix free it together, not neither)."""
        preempted.append(victim)
        free += kv.freeable_blocks(victim, dropped)
        if dropped is not None:
            for k in kv.mappings(victim):
                dropped[k] = dropped.get(k, 0) + 1
        if self.preemption == "swap" and victim.kv_blocks <= host_free and self._swaps_back(kv, victim):
            swap_out.append(victim)
            host_free -= victim.kv_blocks
        return free, host_free

    def _one_by_one(self, state: ReplicaState, running: list) -> Batch:
        kv = state.kv
        free = kv.num_free
        budget = self.max_num_batched_tokens
        items = []
        preempted = []
        swap_out = []
        host_free = state.host_free_blocks
        dropped = {} if kv.caching else None  # (the victims' shared mappings, as in _with_decode_set)
        pick = self._pick_victim  # None: the newest
        gone = set()  # ids of the requests preempted this step (any victim but the newest)
        mine = {}  # id -> (position in items, tokens, new blocks) of the running requests scheduled
        end = len(running)  # running[end:] have been preempted this step (newest victims)
        i = 0
        while i < end:
            r = running[i]
            if gone and id(r) in gone:
                i += 1
                continue
            q = self._tokens(r, budget)
            if q > budget or q == 0:  # token budget spent: this one waits for the next step
                i += 1
                continue
            need = kv.blocks_for(r.num_computed_tokens + q) - r.kv_blocks
            while self._slot_need(r, need) > free:
                if pick is None:
                    victim = running[end - 1]  # the newest; may be r itself
                    end -= 1
                else:
                    victim = pick([x for x in running[:end] if id(x) not in gone])
                    gone.add(id(victim))
                    taken = mine.pop(id(victim), None)
                    if taken is not None:  # scheduled earlier this step: its tokens and blocks come back
                        k, qv, nv = taken
                        items[k] = None
                        budget += qv
                        free += nv
                free, host_free = self._preempt(victim, kv, free, host_free, preempted, swap_out, dropped)
                if victim is r:
                    break
            else:
                free -= need if need > 0 else 0
                budget -= q
                if pick is not None:
                    mine[id(r)] = (len(items), q, need if need > 0 else 0)
                items.append((r, q))
                i += 1
                continue
            if pick is None:
                i += 1
            else:
                break  # it preempted itself: nothing after it is scheduled (vLLM)
        if gone:
            items = [x for x in items if x is not None]

        swap_in = admitted = hits = ()
        blocked = None
        steady = False
        reserved = []
        if preempted and self._admits_past_preemption:
            swap_in, admitted, hits, _, stop = self.admit(state, len(running) - len(preempted), free, budget, items,
                                                          reserved, dropped, swap_in=False)
        elif preempted:
            stop = ("preemption_step", None, budget, free, self.max_num_seqs - len(running) + len(preempted))
        else:
            n_run = len(running)
            swap_in, admitted, hits, blocked, stop = self.admit(state, n_run, free, budget, items, reserved)
            if stop is not None and self._may_preempt_for(stop):
                return self._preempt_for_waiting(state, running, items, free, budget, swap_in, admitted, hits,
                                                 blocked, stop, reserved)
            steady = self._steady(state, admitted, swap_in, blocked)
        return make_batch(items, preempted, admitted, prefix_hits=hits, swap_out=swap_out, swap_in=swap_in,
                          budget_blocked=blocked, steady=steady, stop=stop, reserve=reserved)

    def _preempt_for_waiting(self, state, running, items, free, budget, swap_in, admitted, hits, blocked, stop,
                             reserved):
        """Admission stopped at a waiting request for ``max_num_seqs`` or KV: preempt (recompute)
        running requests of strictly lower priority, lowest (then latest arrival) first, as many
        as let it in, and admit again; repeat for the next one stopped so. ``items`` are the
        running requests' tokens followed by what ``admit`` added, ``reserved`` its reservations
        (kept when nothing can be preempted: the first admission stands)."""
        kv = state.kv
        n_run = len(running)
        base = items[:len(items) - len(admitted) - len(swap_in)]  # the running requests' tokens
        victims = []
        # with a prefix cache: the victims' mappings of shared blocks, released before anything is
        # admitted (a block only victims map turns free, and a request admitted on a hit maps it
        # again: it counts against the free blocks as any idle cached block does)
        dropped = {} if kv.caching else None
        while True:
            room = self._make_room(kv, stop, running, victims, base, n_run, free, budget, dropped, items, hits)
            if room is None:
                break
            chosen, n_run, free, budget, dropped = room
            victims += chosen
            gone = {id(v) for v in chosen}
            base = [(r, q) for r, q in base if id(r) not in gone]
            items = base[:]
            reserved = []
            swap_in, admitted, hits, blocked, stop = self.admit(state, n_run, free, budget, items, reserved, dropped)
            if stop is None or not self._may_preempt_for(stop):
                break
        return make_batch(items, victims, admitted, prefix_hits=hits, swap_in=swap_in, budget_blocked=blocked,
                          stop=stop, reserve=reserved)

    def _make_room(self, kv, stop, running, victims, base, n_run, free, budget, dropped=None, ahead=(), hits=()):
        """The running requests of strictly lower priority than the request admission stopped at
        (``stop``'s, not yet ``victims``) whose preemption lets it in, lowest priority and latest
        arrival first: (them, and the sequences, free blocks and tokens after, and ``dropped``
        with their mappings of shared blocks added), or None when preempting all of them would
        not. ``n_run``, ``free`` and ``budget`` are the running requests' (before admission);
        whether it fits is judged on what ``stop`` says was left when admission reached it, after
        the requests ranked ahead of it took theirs (they are admitted again first): ``ahead``, the
        step's (request, tokens) before it, and ``hits``, their prefix-cache hits, whose shared
        blocks it hits in the same step, as ``admit`` counts them (``step_pending``; a victim's
        are left out)."""
        head = stop[1]
        taken = {id(v) for v in victims}
        cands = sorted((r for r in running if r.priority > head.priority and id(r) not in taken),
                       key=lambda r: (r.priority, r.arrival_s), reverse=True)
        if not cands:
            return None
        sched = {id(r): q for r, q in base}
        kept = self._kept(kv, head, int(self.watermark * kv.num_blocks))
        chosen = []
        if dropped is not None:
            dropped = dict(dropped)
        _, _, budget_at, free_at, seats_at = stop
        for v in cands + [None]:
            pending = None
            if kv.caching and ahead:
                out = taken.union(id(x) for x in chosen)
                pending = step_pending(kv, [x for x in ahead if id(x[0]) not in out], hits)
            c, held, idle, q = self._waiting_tokens(kv, head, budget_at, dropped, pending)
            need = kv.blocks_for(self._gate_tokens(head, self._admission_tokens(head, c, q))) - held + idle
            if seats_at > 0 and 0 < q <= budget_at and free_at - need >= kept:
                return (chosen, n_run, free, budget, dropped) if chosen else None
            if v is None:
                return None
            chosen.append(v)
            n_run -= 1
            seats_at += 1
            freed = kv.freeable_blocks(v, dropped)
            if dropped is not None:
                for k in kv.mappings(v):
                    dropped[k] = dropped.get(k, 0) + 1
            qv = sched.get(id(v))
            if qv is not None:  # scheduled this step: its tokens and the blocks they grew come back
                budget += qv
                budget_at += qv
                grown = kv.blocks_for(v.num_computed_tokens + qv) - v.kv_blocks
                freed += grown if grown > 0 else 0
            free += freed
            free_at += freed
        return None

    def _kept(self, kv, r, kept: int) -> int:
        """The free blocks admitting waiting request ``r`` must leave (the watermark's ``kept``): all
        of them for a new request; none for one coming back from a preemption (else a recompute
        larger than what the watermark leaves would never return), but under
        ``watermark_on_recompute`` (vLLM v0.2.3 ``BlockSpaceManager.can_allocate``,
        vllm/core/block_manager.py L103-120: the watermark for every prompt run, a recompute's
        included) all of them too (a recompute whose whole sequence could never fit above them ends
        rejected at its preemption, ``Replica.recompute_blocks``, as vLLM drops it,
        ``AllocStatus.NEVER``; were one to wait here, it may use the watermark's blocks)."""
        if not r.preemptions:
            return kept
        if self.watermark_on_recompute and kv.blocks_for(r.num_tokens) <= kv.num_blocks - kept:
            return kept
        return 0

    def _waiting_tokens(self, kv, r, budget: int, dropped=None, pending=None):
        """(computed tokens after prefix-cache hits, cached blocks held, of which idle, tokens to
        schedule) for waiting request ``r`` with ``budget`` tokens left (``dropped``: mappings
        released by this step's preemptions; ``pending``: shared blocks the requests scheduled
        before it in this step map, ``BlockAllocator.cached_prefix_blocks``)."""
        c = r.num_computed_tokens  # 0: waiting requests hold no KV
        held = idle = 0
        if c == 0 and kv.caching and (r.prefix_group >= 0 or r.dropped_tokens):
            # keep at least one token to compute (the step must produce logits)
            held, idle = kv.cached_prefix_blocks(r, (r.num_tokens - 1) // kv.block_size, dropped, pending)
            c = held * kv.block_size
        remaining = r.num_tokens - c
        return c, held, idle, (min(remaining, budget) if self.chunked else remaining)

    def _admission_tokens(self, r, c: int, q: int) -> int:
        """The KV tokens ``admit`` maps for waiting request ``r`` taking ``q`` tokens after ``c``
        computed ones (a prefix-cache hit): c + q, its whole reservation (``reserve``: never
        preempted, so c is 0 or a hit), or its whole sequence so far: coming back from a preemption
        (``recompute_whole``), or always (``whole_prompt_blocks``, vLLM V0's block manager)."""
        if self.reserve != "none":
            return max(c + q, self.reserved_tokens(r.prompt_tokens, r.output_tokens))
        if (self.recompute_whole and r.preemptions) or self.whole_prompt_blocks:
            return r.num_tokens
        return c + q

    def _gate_tokens(self, r, tokens: int) -> int:
        """The KV tokens that must fit (above the watermark) for waiting request ``r`` to be admitted
        taking ``tokens`` (``_admission_tokens``): those, or its whole sequence so far under
        ``full_prompt_admission`` (vLLM V1's ``full_sequence_must_fit``: checked, not allocated)."""
        return max(tokens, r.num_tokens) if self.full_prompt_admission else tokens

    def lacks(self, kv, r, budget: int, free: int, seats: int, pending=None) -> str | None:
        """What waiting request ``r`` lacks, of ``budget`` tokens, ``free`` KV blocks and ``seats``
        sequence slots, to be admitted as ``admit`` admits (its prefix-cache hits, reservation and
        the watermark counted), or None when it would be: the decision trace's reason for a request
        queued behind the one admission stopped at (``servesim.core.decisions``). ``pending``: the
        shared blocks the step's requests map (``step_pending``), hits as ``admit`` counts them."""
        if seats <= 0:
            return "max_num_seqs"
        c, held, idle, q = self._waiting_tokens(kv, r, budget, pending=pending)
        if q > budget or q == 0:
            return "budget"
        need = kv.blocks_for(self._gate_tokens(r, self._admission_tokens(r, c, q))) - held + idle
        if need > free:
            return "kv"
        kept = self._kept(kv, r, int(self.watermark * kv.num_blocks))
        if kept and free - need < kept:
            return "watermark"
        return None

    def _take_holders(self, kv, queue, taken, items, n_seqs, free, budget, stop, swapped: bool = False):
        """``admit``'s first part: take requests whose KV is kept (swapped out to host, or landed
        here from a P/D prefill replica) from the front of ``queue`` into ``taken`` (and their
        tokens into ``items``); returns (True when all of them fit, and the sequences, free blocks,
        tokens and stop reason after)."""
        for r in queue:
            q = self._tokens(r, budget)
            need = kv.blocks_for(r.num_computed_tokens + q) - r.kv_blocks  # swapped: kv_blocks is 0
            gate = need
            if self.decode_needs_free_block and swapped:
                # vLLM V0's can_swap_in asks its blocks plus one free block per sequence, "to match
                # can_append_slot" (vllm/core/block_manager.py at v0.2-v0.3, block_manager_v1.py
                # at v0.4-v0.5): a swap-in that left no block free was swapped out again at the
                # next decode, a ping-pong vLLM V0 does not have
                gate = max(need, kv.blocks_for(r.num_computed_tokens) + 1)
            if n_seqs >= self.max_num_seqs or q > budget or gate > free:
                if stop is None:
                    stop = ("swapped_first", r, budget, free, self.max_num_seqs - n_seqs)
                return False, n_seqs, free, budget, stop
            free -= need if need > 0 else 0
            budget -= q
            n_seqs += 1
            items.append((r, q))
            taken.append(r)
        return True, n_seqs, free, budget, stop

    def admit(self, state: ReplicaState, n_seqs: int, free: int, budget: int, items: list, reserved=None,
              dropped=None, swap_in: bool = True):
        """After the running requests got their tokens (``n_seqs`` sequences scheduled or
        running, ``free`` blocks and ``budget`` tokens left, nobody preempted): swapped requests
        come back, then waiting ones are admitted. Appends their (request, tokens) to ``items``
        (and, with ``reserve``, (request, reserved tokens) to ``reserved``, for ``Batch.reserve``);
        returns (swap_in, admitted, prefix_hits, budget_blocked, stop): ``budget_blocked`` is the
        waiting request at the head whose whole prompt fits the budget alone but not next to the
        step's other tokens (it waits, and FCFS everything behind it), or None; ``stop`` why
        admission stopped with requests left (``Batch.stop``), or None. ``dropped``: the prefix
        cache's mappings this step's preemptions release first (``_preempt_for_waiting``, and a step
        that preempted under ``admit_past_preemption``); ``swap_in`` False: no swapped request comes
        back (such a step: vLLM V0 swaps in only when nobody was preempted)."""
        kv = state.kv
        swapping = swap_in
        swap_in = []
        admitted = []
        hits = []
        blocked = None
        stop = None

        # swapped requests come back first; then (P/D decode side) requests whose KV landed here;
        # only then the waiting queue (on a decode replica: requests preempted there, to recompute)
        # (landed ones are tried even when a swapped one does not fit: they hold their KV, and
        # only running them frees any)
        swapped_back = all_back = True
        if state.swapped and swapping:
            swapped_back, n_seqs, free, budget, stop = self._take_holders(kv, state.swapped, swap_in, items, n_seqs,
                                                                          free, budget, stop, swapped=True)
        if self._admits_past_preemption:
            # vLLM v0.4-v0.5's _schedule_chunked_prefill: the prompts are scheduled whatever the
            # swapped-out requests did (_schedule_prefills after _schedule_swapped, which stops at the
            # first that cannot come back)
            swapped_back = True
        if state.landed:
            all_back, n_seqs, free, budget, stop = self._take_holders(kv, state.landed, admitted, items, n_seqs, free,
                                                                      budget, stop)
        all_back = all_back and swapped_back
        if all_back and self.prefill_first and not self.chunked and state.swapped and state.waiting:
            # vLLM V0 schedules no prompt while requests are swapped out: this step swaps them in
            # beside the decodes, and prompts are admitted in a step of their own after it
            all_back = False
            if stop is None:
                stop = ("swapped_first", None, budget, free, self.max_num_seqs - n_seqs)
        if all_back:
            kept = int(self.watermark * kv.num_blocks)
            # (prefix caching) the shared blocks the step's requests map, as vLLM V1 caches a block
            # when it allocates it, so a request admitted after them in this step hits them: the
            # full blocks the step fills for prompts being computed (a chunk of a running one, an
            # admitted one's hits and tokens), and those hit
            pending = None
            if kv.caching:
                pending = set()
                bs = kv.block_size
                for r, q in items:
                    c = r.num_computed_tokens
                    if r.prefix_group >= 0 and c < r.prefix_tokens:
                        pending.update(kv.shared_keys(r, c // bs, (c + q) // bs))
            skip = self.skips_unfit
            skipped = None  # (skip: the first prompt set aside for the budget, with what was left then)
            # (once one is set aside, a later one whose whole prompt exceeds the tokens left is set aside
            # too, with nothing else to note: tested on its own, without _waiting_tokens' prefix lookup,
            # when nothing can shorten its prompt: under overload the queue is tried whole every step)
            plain = skip and not self.chunked and not kv.caching
            for r in state.waiting:
                if skipped is not None and plain and n_seqs < self.max_num_seqs \
                        and r.prompt_tokens + r.num_output_done - r.num_computed_tokens > budget > 0:
                    continue
                if n_seqs >= self.max_num_seqs:
                    stop = ("max_num_seqs", r, budget, free, 0)
                    break
                c, held, idle, q = self._waiting_tokens(kv, r, budget, dropped, pending)
                if q > budget or q == 0:
                    if not self.chunked and q <= self.max_num_batched_tokens and not admitted and not swap_in \
                            and skipped is None:
                        blocked = r  # fits the budget alone, not next to the running requests' tokens
                    if skip and budget > 0:  # (vLLM V1: set aside, the next one tried while tokens are left)
                        if skipped is None:
                            skipped = ("budget", r, budget, free, self.max_num_seqs - n_seqs)
                        continue
                    stop = ("budget", r, budget, free, self.max_num_seqs - n_seqs)
                    break
                tokens = self._admission_tokens(r, c, q)
                need = kv.blocks_for(tokens) - held + idle
                gate = kv.blocks_for(self._gate_tokens(r, tokens)) - held + idle  # (full_prompt_admission)
                # the watermark holds back new requests; one coming back from a preemption may
                # use it (else a recompute larger than what the watermark leaves would never return)
                if free - gate < self._kept(kv, r, kept):
                    stop = ("kv" if gate > free else "watermark", r, budget, free, self.max_num_seqs - n_seqs)
                    break
                if tokens > c + q:
                    reserved.append((r, tokens))
                free -= need
                budget -= q
                n_seqs += 1
                items.append((r, q))
                admitted.append(r)
                if c:  # a prefix-cache hit
                    hits.append((r, c))
                if pending is not None and r.prefix_group >= 0:
                    pending.update(kv.shared_keys(r, 0, (c + q) // kv.block_size))
            if stop is None and skipped is not None:  # (only prompts set aside are left: they wait for tokens)
                stop = skipped
        return swap_in, admitted, hits, blocked, stop


def step_pending(kv, items, prefix_hits=()) -> set | None:
    """The keys of the shared prefix blocks a step's requests map once it is applied: the full
    blocks their tokens fill (a running request's chunk, an admitted one's hits and tokens,
    ``prefix_hits`` giving their hits), which a request admitted after them in the same step
    hits (``ContinuousPolicy.admit``'s ``pending``); None without prefix caching."""
    if not kv.caching:
        return None
    hits = {id(r): c for r, c in prefix_hits}
    pending = set()
    bs = kv.block_size
    for r, q in items:
        if r.prefix_group >= 0:
            c = hits.get(id(r), r.num_computed_tokens)
            pending.update(kv.shared_keys(r, 0, (c + q) // bs))
    return pending


def _pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()
