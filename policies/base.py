"""The policy contract: decide what one step runs, as plain data. Nothing else.

A policy never touches SimPy, never allocates KV and never reads a request's true output
length (``Request.output_tokens``): only what a real scheduler knows (prompt, tokens emitted so
far, tokens computed, KV blocks held, free blocks). The replica commits the decision.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from servesim.core.batch import Batch


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """A read-only view of one replica for its policy (the containers are the replica's own;
    a policy must not mutate them).

    ``running``: requests holding KV, oldest admission first. ``waiting``: FCFS queue (preempted
    requests go back to its front). ``kv``: the block allocator (read ``num_free``,
    ``block_size``, ``num_blocks``, ``caching``, ``cached_prefix_blocks(req)``). ``swapped``:
    requests whose KV sits in host memory (FCFS); ``host_free_blocks``: host room for more;
    ``landed``: (P/D decode side) requests whose prompt KV arrived and is mapped here, FCFS.
    """

    running: list
    waiting: deque
    kv: object
    now_s: float = 0.0
    swapped: tuple | deque = ()
    host_free_blocks: int = 0
    landed: tuple | deque = ()  # P/D decode side: requests whose KV just landed here (they hold it)


class Policy(Protocol):
    def next_batch(self, state: ReplicaState) -> Batch:
        """The next step's batch; an empty batch means "nothing can run until something changes"."""

    def admission_error(self, prompt_tokens: int, max_tokens: int, kv=None) -> str | None:
        """Why a request with this prompt and output limit could never be scheduled, or None.
        ``kv`` (the replica's allocator: ``block_size``, ``num_blocks``, ``blocks_for``), when
        given, lets the policy also refuse a request whose admission could never find its blocks
        free (e.g. under a watermark); the replica has already checked that the whole sequence
        fits its blocks."""
