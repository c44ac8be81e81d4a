"""Prefill/decode disaggregation (DistServe, Splitwise): the decisions of the hand-off.

Requests are prefilled in the prefill pool (inner policy: continuous or chunked_prefill); the
step that finishes a prompt produces the first token; the request's KV then moves to a decode
replica over a link and it decodes there (inner policy: continuous). With ``policy.link.overlap``
(Splitwise) the KV streams layer by layer during that step, so only what the step could not
hide is left to send after it. The KV is held on both
sides until the transfer lands. A request whose decode replica has no room waits, holding its
prefill-side KV, until one frees blocks.
"""

from __future__ import annotations

GBIT = 1e9 / 8  # bytes per second in one Gbit/s


def decode_room(replica) -> int:
    """Free KV blocks a hand-off may take on a decode replica: its free blocks, less what the
    requests preempted there (waiting, holding no KV) need to come back, less one spare block so
    that requests holding their KV can always take their next token's block. Without this,
    hand-offs could fill the replica with requests queued behind one that can never fit again."""
    return replica.kv.num_free - replica.waiting_blocks - 1


def pick_decode_replica(replicas, blocks_needed: int) -> int | None:
    """Least loaded by KV: the decode replica with the most room (``decode_room``), if any can
    take ``blocks_needed`` (ties: lowest index); None when none can."""
    best, best_room = None, -1
    for i, r in enumerate(replicas):
        room = decode_room(r)
        if room >= blocks_needed and room > best_room:
            best, best_room = i, room
    return best


def link_figures(link, gpu, tp: float) -> tuple[float, float]:
    """(bytes/s, latency_s) of the KV hand-off: per-GPU link bandwidth times the ``tp`` GPUs that
    send their shards in parallel (the smaller pool's TP ranks, on every PP stage; a replica's KV
    over the most one GPU of either pool holds, as ranks holding copies, e.g. of an MLA latent,
    each need all of theirs)."""
    if link.type == "intra_node":
        bw = link.bandwidth_gbps * GBIT if link.bandwidth_gbps else gpu.link_bw_bytes_per_s
        lat = link.latency_s if link.latency_s is not None else gpu.link_latency_s
    else:
        bw = (link.bandwidth_gbps or 400.0) * GBIT
        lat = link.latency_s if link.latency_s is not None else 20e-6
    return bw * tp, lat


def transfer_time_s(kv_bytes: float, bytes_per_s: float, latency_s: float, streamed_s: float = 0.0,
                    layers: int = 1) -> float:
    """Seconds from the first token until the KV has landed: ``latency + bytes / bandwidth``. With
    layer-wise streaming (``policy.link.overlap``, Splitwise) each layer's KV leaves as the prefill
    step computes it, so ``streamed_s`` of the step hides that much of the transfer; the last
    layer's share (``1 / layers``) is always sent after the step."""
    full = kv_bytes / bytes_per_s
    return latency_s + max(full - streamed_s, full / layers)
