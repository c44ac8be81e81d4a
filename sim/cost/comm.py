"""Communication time: ring all-reduce and point-to-point sends (alpha-beta model, optionally a
smooth max of latency and transfer; parameters in ``CommEfficiency``)."""

from __future__ import annotations

from servesim.cost.efficiency import CommEfficiency
from servesim.cost.smoothmax import smooth_max


def collective_time_s(latency_s: float, transfer_s: float, e: CommEfficiency) -> float:
    if e.smooth == 1.0:
        return latency_s + transfer_s
    return smooth_max(latency_s, transfer_s, e.smooth)


def allreduce_time_s(size_bytes: float, world: int, link_bw: float, gpu_latency_s: float,
                     e: CommEfficiency) -> float:
    """Ring all-reduce of ``size_bytes`` over ``world`` GPUs: each moves 2(n-1)/n of the data."""
    if world <= 1:
        return 0.0
    hop = 2 * gpu_latency_s if e.hop_latency_s is None else e.hop_latency_s
    lat = e.base_latency_s + hop * (world - 1)
    return collective_time_s(lat, 2 * (world - 1) / world * size_bytes / (link_bw * e.link), e)


def send_time_s(size_bytes: float, link_bw: float, gpu_latency_s: float, e: CommEfficiency) -> float:
    hop = gpu_latency_s if e.hop_latency_s is None else e.hop_latency_s
    return collective_time_s(e.base_latency_s + hop, size_bytes / (link_bw * e.link), e)
