"""Communication time: ring all-reduce and point-to-point sends (alpha-beta model)."""

from __future__ import annotations


def allreduce_time_s(size_bytes: float, world: int, link_bw_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce of ``size_bytes`` over ``world`` GPUs: each moves 2(n-1)/n of the data."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) * latency_s + 2 * (world - 1) / world * size_bytes / link_bw_bytes_per_s


def send_time_s(size_bytes: float, link_bw_bytes_per_s: float, latency_s: float) -> float:
    return latency_s + size_bytes / link_bw_bytes_per_s
