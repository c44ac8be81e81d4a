"""The request: lengths, progress counters and timestamps (seconds of simulated time).

One idea covers every policy (vLLM v1's): ``num_tokens`` is what the request's KV would hold if
fully computed (prompt plus every output token emitted so far); ``num_computed_tokens`` is how
much of it has KV. A step hands a request ``n`` tokens; when that brings ``num_computed_tokens``
up to ``num_tokens`` the step samples one new output token. A whole prefill, a prefill chunk and
a decode token are the same thing at different sizes.
"""

from __future__ import annotations

import math

NAN = math.nan
INF = math.inf


class Request:
    """One request as the engine, a policy and a router see it (the module docstring gives the idea).

    What a scheduler may read: ``request_id``, ``arrival_s``, ``prompt_tokens``, ``num_tokens``
    (prompt plus the output emitted so far), ``num_computed_tokens`` (of them, those with KV),
    ``num_output_done``, ``preemptions``, ``prefix_group`` / ``prefix_tokens`` (a shared prefix),
    ``cls`` (its class's index), ``priority`` (lower first), ``deadline_s`` (arrival + its class's
    TTFT SLO; inf: none) and ``predicted_output_tokens``. ``output_tokens`` is the true output
    length, which only the replica reads (a real server learns it at the end); policies and
    routers must change nothing of it. Times are seconds of simulated time, NaN until they happen.
    """

    __slots__ = (
        "request_id", "arrival_s", "prompt_tokens", "output_tokens", "num_computed_tokens",
        "num_output_done", "scheduled_s", "first_token_s", "last_token_s", "finish_s", "replica",
        "status", "reason", "preemptions", "kv_blocks", "prefix_group", "prefix_tokens", "swapped_blocks",
        "decode_replica", "kv_transfer_s", "prefix_hit_tokens", "row", "block_tags", "cache_output", "cls",
        "priority", "deadline_s", "predicted_output_tokens", "dropped_tokens", "outgrown",
    )

    def __init__(self, request_id: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 prefix_group: int = -1, prefix_tokens: int = 0, block_tags: tuple | None = None,
                 cache_output: bool = False):
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        # The true output length. Only the replica reads it (to know when the request stops, as
        # an EOS or max_tokens would tell a real server); policies must not.
        self.output_tokens = output_tokens
        self.num_computed_tokens = 0
        self.num_output_done = 0  # output tokens emitted to the user so far
        self.scheduled_s = NAN  # start of the first step that scheduled it
        self.first_token_s = NAN
        self.last_token_s = NAN
        self.finish_s = NAN
        self.replica = -1
        self.status = "pending"  # pending -> completed | rejected | unfinished
        self.reason = ""
        self.preemptions = 0
        self.kv_blocks = 0  # KV blocks mapped on its current replica (shared prefix blocks included)
        # Shared-prefix group (e.g. a system prompt): the first prefix_tokens of the prompt are the
        # same for every request of the group, so their KV blocks can be shared by prefix caching.
        self.prefix_group = prefix_group
        self.prefix_tokens = prefix_tokens
        # How the allocator names its cacheable blocks (sim/core/kv.py): block j of the group is
        # (prefix_group, j), or, with block_tags = (tokens_per_tag, tags) (a trace's block hash
        # ids), (tags[last tag covering block j], j). cache_output: the request's whole token
        # sequence belongs to its group (a session turn), so its full blocks past the prompt
        # (its output) are cached too when it frees them, for the session's next turn.
        self.block_tags = block_tags
        self.cache_output = cache_output
        self.prefix_hit_tokens = 0  # prompt tokens found in the prefix cache at admission
        self.swapped_blocks = 0  # blocks held in host memory while swapped out
        # KV tokens its last recompute preemption dropped (kv.recompute_tokens), until it is
        # readmitted: the prefix cache may still hold some of them then, which are not computed again
        self.dropped_tokens = 0
        self.decode_replica = -1  # P/D split: the decode replica it was handed to
        self.kv_transfer_s = NAN  # P/D split: time from first token until its KV landed on the decode side
        self.row = -1  # its row in the recorder (arrival order)
        # what the scheduler may know of it besides its prompt (set at the cluster's door,
        # ``servesim.core.gateway``): its class (index), the class's priority (lower first), its
        # deadline (arrival + the class's TTFT SLO; inf: none) and a predicted output length
        self.cls = 0
        self.priority = 0
        self.deadline_s = INF
        self.predicted_output_tokens = 0
        # its true output length when its sequence outgrows the KV cache before it (``cap_output``;
        # 0: it does not): the engine ends it as rejected, ``reason`` saying why, when it gets there
        self.outgrown = 0

    def cap_output(self, emits: int, reason: str) -> None:
        """End it after ``emits`` output tokens, rejected for ``reason`` (its sequence outgrows the
        KV cache then; the engines stop it as they stop a request at its last token, and the
        recorder records it rejected, with its true output length)."""
        self.outgrown = self.output_tokens
        self.output_tokens = emits
        self.reason = reason

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV the request needs now: the prompt plus output emitted so far."""
        return self.prompt_tokens + self.num_output_done

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, prompt={self.prompt_tokens}, out={self.num_output_done}/"
                f"{self.output_tokens}, computed={self.num_computed_tokens})")
