"""Paged KV memory: capacity sizing and a block allocator that checks its own books.

Blocks are interchangeable except cached (prefix) blocks, so the allocator keeps counts and the
keys of cached blocks, not block ids: a request holds ``ceil(tokens / block_size)`` blocks for its
computed tokens.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from dataclasses import dataclass

from servesim.errors import InputError

GIB = 1024**3


@dataclass(frozen=True)
class KvCapacity:
    """How a replica's per-GPU memory splits; all sizes are per GPU."""

    usable_bytes: float  # GPU memory x utilization
    weight_bytes: float
    activation_reserve_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks_override: int | None = None

    @property
    def kv_pool_bytes(self) -> float:
        return self.usable_bytes - self.weight_bytes - self.activation_reserve_bytes

    @property
    def num_blocks(self) -> int:
        if self.num_blocks_override is not None:
            return self.num_blocks_override
        return int(self.kv_pool_bytes // (self.kv_bytes_per_token * self.block_size))

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size


def window_blocks(window_tokens: int, block_size: int) -> int:
    """The most KV blocks a sequence holds under a sliding attention window of ``window_tokens``:
    the window's tokens straddle at most ceil(window / block_size) + 1 blocks."""
    return -(-window_tokens // block_size) + 1


def activation_reserve_bytes(model, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of one forward pass at the token budget (what vLLM's profiling run
    measures): the widest per-token tensors (QKV out, MLP up) plus fp32 logits for each sequence."""
    n_up = 2 if model.gated_mlp else 1
    per_token = 2.0 * (4 * model.hidden_size + (n_up + 1) * model.intermediate_size / tp)
    logits = 4.0 * max_num_seqs * model.vocab_size / tp
    return max_num_batched_tokens * per_token + logits


def size_kv(cost_model, gpu_memory_utilization: float, block_size: int, reserve_bytes: float,
            num_blocks_override: int | None = None, extra_weight_bytes: float = 0.0,
            where: str = "hardware", extra_kv_bytes_per_token: float = 0.0) -> KvCapacity:
    """Per-GPU memory plan; a clear error when weights (and the reserve) leave no room for KV.
    ``extra_weight_bytes``: other weights on the replica's GPUs (a speculative draft model);
    ``extra_kv_bytes_per_token``: the KV those take per token on the replica's GPUs (the draft
    keeps its own KV of every token the target does, in the same blocks)."""
    cm = cost_model
    # With PP every stage keeps the KV of the same tokens for its own layers, so the stage that
    # fits the fewest blocks (its weights: layers, embedding or LM head) sets the pool for all.
    caps = [KvCapacity(
        usable_bytes=cm.gpu.mem_bytes * gpu_memory_utilization,
        weight_bytes=(w + extra_weight_bytes / cm.pp) / cm.tp,
        activation_reserve_bytes=reserve_bytes,
        kv_bytes_per_token=cm.kv_bytes_per_token_per_gpu(n) + extra_kv_bytes_per_token / cm.pp,
        block_size=block_size,
    ) for w, n in zip(cm.stage_weight_bytes(), cm.stage_layers())]
    stage = min(range(len(caps)), key=lambda i: caps[i].kv_pool_bytes / (caps[i].kv_bytes_per_token * block_size))
    cap = caps[stage]
    on = f" on pipeline stage {stage + 1} of {cm.pp}" if cm.pp > 1 else ""
    # a P/D pool (where="policy.decode") has its own tp and gpu fields: name those
    tp_field, gpu_field = ("hardware.tp", "a bigger GPU") if where == "hardware" else \
        (f"{where}.tp", f"a bigger GPU ({where}.gpu)")
    if cap.kv_pool_bytes < cap.kv_bytes_per_token * block_size:
        draft = (f" ({extra_weight_bytes / cm.pp / cm.tp / GIB:.1f} GiB of them the speculative draft model's, "
                 "policy.spec.draft, whose KV each block holds too)") if extra_weight_bytes else ""
        raise InputError(
            f"{where}: model {cm.model.name} does not fit on {cm.gpu.name} with tp={cm.tp}, pp={cm.pp}: "
            f"per GPU{on}, weights take {cap.weight_bytes / GIB:.1f} GiB{draft} and the activation reserve "
            f"{cap.activation_reserve_bytes / GIB:.1f} GiB of {cap.usable_bytes / GIB:.1f} GiB usable "
            f"({cm.gpu.mem_bytes / GIB:.1f} GiB x memory.gpu_memory_utilization={gpu_memory_utilization}), "
            f"leaving {cap.kv_pool_bytes / GIB:.2f} GiB for KV; one {block_size}-token block needs "
            f"{cap.kv_bytes_per_token * block_size / 2**20:.2f} MiB. Raise {tp_field} or hardware.pp, "
            f"use {gpu_field}{', a smaller draft' if extra_weight_bytes else ''} or a smaller dtype."
        )
    if num_blocks_override is not None:
        cap = dataclasses.replace(cap, num_blocks_override=num_blocks_override)
    return cap


class BlockAllocator:
    """Paged KV blocks of one replica, with an optional block-hash prefix cache.

    A request maps ``req.kv_blocks`` logical blocks, ``ceil(tokens / block_size)`` for the tokens
    whose KV it holds. Blocks are interchangeable except the full blocks of a shared prefix
    (``req.prefix_group`` >= 0, first ``req.prefix_tokens // block_size`` blocks): with prefix
    caching, block ``j`` is hashed by its key (``key``: ``(g, j)`` for group ``g``, or from the
    request's block hash ids), shared by every request mapping it (reference counts), and kept
    after its last user frees it, as free-but-cached, until evicted LRU (last-freed last; a
    request's later blocks are freed first so prefixes survive longest). As vLLM V1 caches every
    full block, a request's other full blocks stay in the cache too when freed: a session turn's
    (``cache_output``: its group is its conversation) keyed the same way, for the next turn to
    hit; a request's preempted for recompute (``free(req, recompute=True)``) under its own keys
    ``(request_id, ~j)``, for it to hit when readmitted (``cached_prefix_blocks`` looks past its
    shared prefix when ``req.dropped_tokens``; ``map_hits`` maps them back as its unshared
    blocks); anyone else's (completed, handed off, swapped out: no lookup can hit them) as a
    counted run in the eviction order, so that blocks freed after them outlive them, as in
    vLLM's free queue.

    With a sliding attention window (``window_tokens``) a request never holds more than
    ``window_blocks`` blocks: blocks wholly out of the window are freed as the sequence grows (vLLM
    V1's sliding-window manager; V0 reused them in a ring, which holds the same count), so
    ``blocks_for`` and ``grow`` cap at that many. ``window_blocks`` = ceil(window / block_size) + 1,
    the most blocks the window's tokens can straddle (V1 holds this many or one fewer, depending
    on the alignment; the cap is the upper bound).

    Contract: ``num_free`` = empty blocks + cached blocks nobody references (``num_idle``; an
    allocation takes an empty block first, else evicts the least recently freed cached one). ``grow(req, tokens)``
    maps enough blocks for ``tokens`` tokens, or returns False changing nothing when fewer than
    the new blocks are free (a cache hit may need no free block; planning counts it anyway).
    ``free(req)`` unmaps all of its blocks. ``num_used + num_free == num_blocks`` always.
    """

    __slots__ = ("block_size", "num_blocks", "num_empty", "caching", "cache", "evictable", "num_idle", "on_prefix",
                 "window_blocks")

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 window_tokens: int | None = None):
        assert window_tokens is None or not prefix_caching, "prefix caching with a sliding window is not modelled"
        self.block_size = block_size
        # the most blocks a request ever holds (sys.maxsize: no sliding window)
        self.window_blocks = sys.maxsize if window_tokens is None else window_blocks(window_tokens, block_size)
        self.num_blocks = num_blocks
        self.num_empty = num_blocks
        self.caching = prefix_caching
        self.cache: dict = {}  # block key (tag, j) -> number of requests mapping it
        # the free blocks holding KV, least recently freed first: cached keys nobody maps (-> None),
        # and runs of blocks no lookup can hit (a ``_Spent`` -> how many: blocks of requests gone
        # from this replica, vLLM V1 caches them too), which take their place in the eviction order
        self.evictable: OrderedDict = OrderedDict()
        self.num_idle = 0  # blocks in ``evictable``
        # on_prefix(tag, +1 / -1): the first block of a prefix (key (tag, 0)) entered / left the cache
        # (the cluster keeps which replicas can hold a prefix, for prefix-aware routing)
        self.on_prefix = None

    @property
    def num_free(self) -> int:
        return self.num_empty + self.num_idle

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_empty - self.num_idle

    def blocks_for(self, tokens: int) -> int:
        """Blocks a request with ``tokens`` tokens of KV holds."""
        n = -(-tokens // self.block_size)
        return n if n < self.window_blocks else self.window_blocks

    def _prefix_blocks(self, req) -> int:
        if not self.caching or req.prefix_group < 0:
            return 0
        return req.prefix_tokens // self.block_size

    def prefix_blocks(self, req) -> int:
        """The most leading blocks ``cached_prefix_blocks(req)`` can find (its shared prefix's full
        blocks; 0 without prefix caching)."""
        return self._prefix_blocks(req)

    def key(self, group: int, tags, j: int) -> tuple:
        """The cache key of block ``j`` of a request with ``prefix_group`` ``group`` and
        ``block_tags`` ``tags``: ``(group, j)``; with hash ids (each naming ``per`` tokens and,
        being a chain hash, everything before them) the id of the last one the block reaches."""
        if tags is None:
            return (group, j)
        per, ids = tags
        return (ids[((j + 1) * self.block_size - 1) // per], j)

    def cached_prefix_blocks(self, req, max_blocks: int | None = None, dropped=None,
                             pending=None) -> tuple[int, int]:
        """(leading prefix blocks of ``req`` found in the cache, up to ``max_blocks``; how many of
        those nobody maps now, or nobody would once the mappings counted in ``dropped`` (cache
        key -> mappings, of requests to be preempted first: ``mappings``) were released).
        ``pending``: the keys of shared blocks that requests scheduled earlier in the same step
        map (hit, or fill and so cache, as vLLM V1 caches a block when it allocates it for tokens
        the step computes): found too, mapped by them (never idle)."""
        pb = self._prefix_blocks(req)
        if max_blocks is not None:
            pb = min(pb, max_blocks)
        hits = idle = 0
        g, tags, key = req.prefix_group, req.block_tags, self.key
        while hits < pb:
            k = (g, hits) if tags is None else key(g, tags, hits)
            if pending and k in pending:
                hits += 1
                continue
            rc = self.cache.get(k)
            if rc is None:
                break
            if dropped:
                rc -= dropped.get(k, 0)
            hits += 1
            idle += rc == 0
        if hits == pb and req.dropped_tokens and self.caching and max_blocks is not None:
            # a request preempted for recompute: its own full blocks it left in the cache, as long
            # as they were not evicted since (nobody else maps them)
            get = self.cache.get
            for k in self._own_keys(req, range(hits, max_blocks)):
                if get(k) != 0:
                    break
                hits += 1
                idle += 1
        return hits, idle

    def freeable_blocks(self, req, dropped=None) -> int:
        """Blocks that would become free if ``req`` were freed now (shared blocks others map do not;
        ``dropped``: mappings released before it, as ``cached_prefix_blocks``)."""
        cache, dropped = self.cache, dropped or {}
        return req.kv_blocks - sum(1 for k in self.mappings(req) if cache[k] - dropped.get(k, 0) > 1)

    def shared_keys(self, req, lo: int, hi: int) -> list:
        """The cache keys of ``req``'s shared (prefix) blocks ``lo`` to ``hi`` - 1 (``hi`` capped at
        its shared prefix's full blocks; none without prefix caching)."""
        hi = min(hi, self._prefix_blocks(req))
        return self._keys(req.prefix_group, req.block_tags, range(lo, hi)) if hi > lo else []

    def mappings(self, req) -> list:
        """The cache keys of the shared (prefix) blocks ``req`` maps: what freeing it releases."""
        return self._keys(req.prefix_group, req.block_tags, range(min(self._prefix_blocks(req), req.kv_blocks)))

    def _own_keys(self, req, blocks: range) -> list:
        """The cache keys of ``req``'s blocks past its shared prefix, for each j of ``blocks``: its
        group's (``key``) for a session turn (``cache_output``: its whole sequence is its
        conversation's), else its own ``(request_id, ~j)``: no other request's, and never a
        prefix's first block (``~j`` < 0), so routing never counts it."""
        if req.cache_output and req.prefix_group >= 0:
            return self._keys(req.prefix_group, req.block_tags, blocks)
        rid = req.request_id
        return [(rid, ~j) for j in blocks]

    def map_hits(self, hits) -> bool:
        """Map the prefix-cache hits ``hits`` ((request, cached tokens), requests holding no
        blocks) before anything else is allocated: first every request's own blocks (past its
        shared prefix, cached when it was preempted; ``cached_prefix_blocks``), taken off the
        cache as its unshared blocks, so no other mapping evicts them; then the shared blocks,
        as ``grow`` maps them. False when an own block is gone."""
        own = []
        cache, evictable, on_prefix = self.cache, self.evictable, self.on_prefix
        for r, cached in hits:
            pb = self._prefix_blocks(r)
            target = self.blocks_for(cached)
            keys = self._own_keys(r, range(max(pb, r.kv_blocks), target))
            for k in keys:
                if cache.get(k) != 0:
                    return False
                del cache[k]
                del evictable[k]
                if k[1] == 0 and on_prefix is not None:  # (a session turn's, its prompt under a block)
                    on_prefix(k[0], -1)
            self.num_idle -= len(keys)
            own.append(len(keys))
        for (r, cached), n in zip(hits, own):
            if not self.grow(r, min(cached, self._prefix_blocks(r) * self.block_size)):
                return False
            r.kv_blocks += n
        return True

    def take(self, n: int) -> None:
        """Allocate ``n`` unshared blocks (empty ones first, then the least recently freed cached
        ones): growth the engine books in bulk for its decode set (``num_free >= n``)."""
        take = min(n, self.num_empty)
        self.num_empty -= take
        if n > take:
            self._evict(n - take)

    def _evict(self, n: int) -> None:
        """Take ``n`` blocks from the front of ``evictable`` (``n <= num_idle``)."""
        evictable, cache, on_prefix = self.evictable, self.cache, self.on_prefix
        self.num_idle -= n
        while n:
            key, run = evictable.popitem(last=False)
            if run is None:
                del cache[key]
                if key[1] == 0 and on_prefix is not None:
                    on_prefix(key[0], -1)
                n -= 1
            elif run > n:
                evictable[key] = run - n
                evictable.move_to_end(key, last=False)
                return
            else:
                n -= run

    def grow(self, req, tokens: int) -> bool:
        target = self.blocks_for(tokens)
        have = req.kv_blocks
        new = target - have
        if new <= 0:
            return True
        pb = self._prefix_blocks(req)
        if pb <= have:  # no shared blocks among the new ones
            if new > self.num_free:
                return False
            self.take(new)
        else:
            # blocks another request maps already cost nothing; every other one takes a free block
            top = pb if pb < target else target
            keys = self._keys(req.prefix_group, req.block_tags, range(have, top))
            cache = self.cache
            get = cache.get
            if new > self.num_free and new - sum(1 for k in keys if get(k, 0) > 0) > self.num_free:
                return False
            evictable, on_prefix = self.evictable, self.on_prefix
            for key in keys:  # block have, have + 1, ... in order (each take as ``take(1)``)
                rc = get(key)
                if rc is None:
                    if self.num_empty:
                        self.num_empty -= 1
                    else:
                        self._evict(1)
                    cache[key] = 1
                    if key[1] == 0 and on_prefix is not None:
                        on_prefix(key[0], 1)
                else:
                    if rc == 0:
                        del evictable[key]
                        self.num_idle -= 1
                    cache[key] = rc + 1
            if target > top:  # the blocks past the prefix: as many ``take(1)`` (empty ones first)
                self.take(target - top)
        req.kv_blocks = target
        return True

    def _keys(self, group: int, tags, blocks: range) -> list:
        """``key(group, tags, j)`` for each j of ``blocks``, in order (one list, no call per block)."""
        if tags is None:
            return [(group, j) for j in blocks]
        per, ids = tags
        bs = self.block_size
        return [(ids[((j + 1) * bs - 1) // per], j) for j in blocks]

    def shrink(self, req, tokens: int) -> None:
        """Unmap blocks past what ``tokens`` tokens need (rejected speculative tokens)."""
        target = self.blocks_for(tokens)
        extra = req.kv_blocks - target
        if extra > 0:
            assert target >= self._prefix_blocks(req), "shrinking into a shared prefix"
            self.num_empty += extra
            req.kv_blocks = target

    def detach(self, req, recompute: bool = False) -> tuple:
        """Take ``req``'s blocks off it but keep them allocated (KV in flight to another replica);
        ``release`` the returned token to free them. ``recompute``: as ``free``."""
        shared = min(self._prefix_blocks(req), req.kv_blocks)
        own = ()
        computed = req.num_computed_tokens // self.block_size  # its full blocks
        if self.caching and (recompute or (req.cache_output and req.prefix_group >= 0)):
            full = max(shared, min(computed, req.kv_blocks))
            own = self._own_keys(req, range(full - 1, shared - 1, -1))  # later blocks evictable first
        # its shared blocks from ``computed`` on hold tokens it has not computed (a chunk ended in
        # one, or a reservation mapped them ahead): ``release`` keeps none of them cached
        token = (req.prefix_group, req.block_tags, shared, own, req.kv_blocks, min(computed, shared))
        req.kv_blocks = 0
        return token

    def release(self, token) -> None:
        g, tags, shared, own, n, filled = token
        if not self.caching:
            self.num_empty += n
            assert self.num_empty <= self.num_blocks, "KV blocks freed twice"
            return
        cache, evictable, on_prefix = self.cache, self.evictable, self.on_prefix
        # every block goes into the eviction order, as vLLM's free queue takes every freed block,
        # the request's last first: its blocks no lookup can hit as a run (the partial last one;
        # the full ones but for a session turn, whose stay cached under its conversation's keys
        # for the next turn, and a request preempted for recompute, whose stay cached under its own
        # for its return; a block whose key is cached already is a duplicate), then its own
        # cached blocks, later ones first, then its shared ones nobody maps any more
        own = [key for key in own if key not in cache]
        spent = n - shared - len(own)
        # a shared block it has not filled that nobody else maps leaves the cache: vLLM V1 caches a
        # block only once it is full (``SingleTypeKVCacheManager.cache_blocks``: num_full_blocks =
        # num_tokens // block_size), so no later lookup may hit tokens nobody computed
        gone = 0
        for key in self._keys(g, tags, range(shared - 1, filled - 1, -1)):
            rc = cache[key] - 1
            if rc:
                cache[key] = rc
            else:
                del cache[key]
                gone += 1
                if key[1] == 0 and on_prefix is not None:
                    on_prefix(key[0], -1)
        spent += gone
        if spent:
            last = next(reversed(evictable), None)
            if last is not None and evictable[last] is not None:  # (the newest run grows)
                evictable[last] += spent
            else:
                evictable[_Spent()] = spent
        for key in own:
            cache[key] = 0
            evictable[key] = None
            if key[1] == 0 and on_prefix is not None:
                on_prefix(key[0], 1)
        idle = n - shared + gone
        for key in self._keys(g, tags, range(filled - 1, -1, -1)):
            rc = cache[key] - 1
            cache[key] = rc
            if rc == 0:
                evictable[key] = None
                idle += 1
        self.num_idle += idle
        assert self.num_empty + self.num_idle <= self.num_blocks, "KV blocks freed twice"

    def free(self, req, recompute: bool = False) -> None:
        """Unmap all of ``req``'s blocks. ``recompute``: it was preempted to be recomputed here, so
        its own full blocks stay cached under its keys, for ``cached_prefix_blocks`` to find when
        it comes back."""
        if not self.caching:  # (detach and release, for blocks nobody shares: the hot path)
            self.num_empty += req.kv_blocks
            req.kv_blocks = 0
            assert self.num_empty <= self.num_blocks, "KV blocks freed twice"
            return
        self.release(self.detach(req, recompute))


class _Spent:
    """A run of free blocks whose KV no lookup can hit, in ``BlockAllocator.evictable``."""

    __slots__ = ()
