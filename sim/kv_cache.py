"""Paged KV memory: capacity sizing and a block allocator that checks its own books.

Blocks are interchangeable in v0 (no prefix sharing), so the allocator keeps counts, not block
ids: a request holds ``ceil(tokens / block_size)`` blocks for its computed tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.errors import InputError

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


def activation_reserve_bytes(model, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of one forward pass at the token budget (what vLLM's profiling run
    measures): the widest per-token tensors (QKV out, MLP up) plus fp32 logits for each sequence."""
    n_up = 2 if model.gated_mlp else 1
    per_token = 2.0 * (4 * model.hidden_size + (n_up + 1) * model.intermediate_size / tp)
    logits = 4.0 * max_num_seqs * model.vocab_size / tp
    return max_num_batched_tokens * per_token + logits


def size_kv(cost_model, gpu_memory_utilization: float, block_size: int, reserve_bytes: float,
            num_blocks_override: int | None = None) -> KvCapacity:
    """Per-GPU memory plan; a clear error when weights (and the reserve) leave no room for KV."""
    cm = cost_model
    cap = KvCapacity(
        usable_bytes=cm.gpu.mem_bytes * gpu_memory_utilization,
        weight_bytes=cm.weight_bytes / cm.num_gpus,
        activation_reserve_bytes=reserve_bytes,
        kv_bytes_per_token=cm.kv_bytes_per_token_per_gpu(),
        block_size=block_size,
    )
    if cap.kv_pool_bytes < cap.kv_bytes_per_token * block_size:
        raise InputError(
            f"hardware: model {cm.model.name} does not fit on {cm.gpu.name} with tp={cm.tp}, pp={cm.pp}: "
            f"per GPU, weights take {cap.weight_bytes / GIB:.1f} GiB and the activation reserve "
            f"{cap.activation_reserve_bytes / GIB:.1f} GiB of {cap.usable_bytes / GIB:.1f} GiB usable "
            f"({cm.gpu.mem_bytes / GIB:.1f} GiB x memory.gpu_memory_utilization={gpu_memory_utilization}), "
            f"leaving {cap.kv_pool_bytes / GIB:.2f} GiB for KV; one {block_size}-token block needs "
            f"{cap.kv_bytes_per_token * block_size / 2**20:.2f} MiB. Raise hardware.tp or hardware.pp, "
            f"use a bigger GPU or a smaller dtype."
        )
    if num_blocks_override is not None:
        cap = dataclasses.replace(cap, num_blocks_override=num_blocks_override)
    return cap


class BlockAllocator:
    """Counts of free and used KV blocks on one replica, per request.

    Contract: ``grow(req, tokens)`` makes ``req`` hold enough blocks for ``tokens`` tokens and
    returns False (changing nothing) when there are not enough free blocks; ``free(req)`` returns
    all of its blocks. ``used + free == total`` always holds.
    """

    __slots__ = ("block_size", "num_blocks", "num_free")

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_free = num_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def extra_blocks(self, req, tokens: int) -> int:
        """Blocks ``req`` would need on top of what it holds to hold ``tokens`` tokens."""
        need = -(-tokens // self.block_size) - req.kv_blocks
        return need if need > 0 else 0

    def grow(self, req, tokens: int) -> bool:
        extra = self.extra_blocks(req, tokens)
        if extra > self.num_free:
            return False
        self.num_free -= extra
        req.kv_blocks += extra
        return True

    def free(self, req) -> None:
        self.num_free += req.kv_blocks
        req.kv_blocks = 0
        assert self.num_free <= self.num_blocks, "KV blocks freed twice"

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

