"""Chunked prefill (Sarathi-Serve): a per-step token budget shared by running decodes and prompt
chunks of partially prefilled and waiting requests; a prompt may span many steps, each chunk
attending to the KV of the chunks before it (the cost model charges that re-read).

It is the iteration-level scheduler of ``policies.continuous`` with chunking on.
"""

from __future__ import annotations

from functools import partial

from policies.continuous import ContinuousPolicy

ChunkedPrefillPolicy = partial(ContinuousPolicy, chunked=True)
