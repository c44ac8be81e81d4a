"""The per-request and per-step tables of a run folder (``requests.csv`` / ``steps.csv``, or
``.parquet``): their columns, in order, and each column's kind. The writer and the reader both
go by these; docs/outputs.md says what each column means (tests/test_docs.py checks it names
exactly these).

Kinds: ``INT_COLUMNS`` are integers (-1 where a replica does not apply), ``STR_COLUMNS`` text,
every other column a float in seconds, FLOPs or bytes (NaN where a time never happened: an
empty CSV cell, a Parquet null).
"""

from __future__ import annotations

REQUEST_COLUMNS = ("request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens",
                   "output_tokens", "replica", "status", "preemptions", "reason", "decode_replica",
                   "kv_transfer_s", "prefix_hit_tokens", "api_s", "class")
STEP_COLUMNS = ("replica", "start_s", "duration_s", "num_seqs", "prefill_tokens", "decode_tokens",
                "context_tokens", "flops", "bytes", "bound", "kv_blocks_used", "padding_tokens")
INT_COLUMNS = frozenset({"request_id", "prompt_tokens", "output_tokens", "replica", "preemptions", "decode_replica",
                         "prefix_hit_tokens", "num_seqs", "prefill_tokens", "decode_tokens", "context_tokens",
                         "kv_blocks_used", "padding_tokens"})
STR_COLUMNS = frozenset({"status", "reason", "class", "bound"})

# the decision trace (``servesim run --decision-trace``, servesim.core.decisions): one row per span
# of decisions a request waited for the same reason
DECISION_COLUMNS = ("request_id", "replica", "class", "start_s", "end_s", "reason", "decisions", "blocker",
                    "inversion", "detail")
