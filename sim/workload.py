"""Synthetic workloads: arrival times and prompt/output lengths, from one seeded numpy Generator.

Draw order is fixed (arrivals, then prompt lengths, then output lengths) so a scenario and seed
always give the same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.scenario import (FixedArrival, FixedDist, GammaArrival, LognormalDist, NormalDist, PoissonArrival,
                          UniformDist, Workload)


@dataclass(frozen=True)
class RequestSpecs:
    """Columns of the requests a workload makes, sorted by arrival."""

    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64 (shared prefix included)
    output_tokens: np.ndarray  # int64
    prefix_group: np.ndarray | None = None  # int64, -1 = no shared prefix
    prefix_tokens: np.ndarray | None = None  # int64

    def __len__(self) -> int:
        return len(self.arrival_s)


def inter_arrivals(arrival, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` gaps (seconds) between consecutive arrivals; the first request arrives after one gap."""
    mean = 1.0 / arrival.rate_rps
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(mean, n)
    if isinstance(arrival, FixedArrival):
        return np.full(n, mean)
    if isinstance(arrival, GammaArrival):
        shape = 1.0 / arrival.cv**2  # gamma CV = 1/sqrt(shape)
        return rng.gamma(shape, mean / shape, n)
    raise TypeError(f"unknown arrival process {arrival!r}")


def arrival_times(arrival, num_requests: int | None, duration_s: float | None, rng) -> np.ndarray:
    if num_requests is not None:
        t = np.cumsum(inter_arrivals(arrival, num_requests, rng))
        return t[t < duration_s] if duration_s is not None else t
    # Only a duration: draw in chunks until past it.
    chunks, last = [], 0.0
    expected = int(duration_s * arrival.rate_rps)
    while last < duration_s:
        t = last + np.cumsum(inter_arrivals(arrival, max(1024, expected // 4), rng))
        chunks.append(t)
        last = float(t[-1])
    t = np.concatenate(chunks)
    return t[t < duration_s]


def sample_lengths(dist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts (int64, each >= 1) from a length distribution."""
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.min, dist.max + 1, n, dtype=np.int64)
    if isinstance(dist, LognormalDist):
        mu = math.log(dist.mean) - dist.sigma**2 / 2  # so that E[X] = mean
        x = np.rint(rng.lognormal(mu, dist.sigma, n))
        return np.clip(x, 1, dist.max if dist.max is not None else None).astype(np.int64)
    if isinstance(dist, NormalDist):
        x = np.rint(rng.normal(dist.mean, dist.std, n))
        return np.clip(x, dist.min, dist.max if dist.max is not None else None).astype(np.int64)
    raise TypeError(f"unknown length distribution {dist!r}")


def generate(workload: Workload, rng: np.random.Generator) -> RequestSpecs:
    arrivals = arrival_times(workload.arrival, workload.num_requests, workload.duration_s, rng)
    n = len(arrivals)
    prompt = sample_lengths(workload.prompt_tokens, n, rng)
    output = sample_lengths(workload.output_tokens, n, rng)
    sp = workload.shared_prefix
    if sp is None:
        return RequestSpecs(arrivals, prompt, output)
    # drawn after everything else, so adding a shared prefix leaves the other draws unchanged
    member = rng.random(n) < sp.fraction
    group = np.where(member, rng.integers(0, sp.groups, n), -1).astype(np.int64)
    prefix = np.where(member, sp.tokens, 0).astype(np.int64)
    return RequestSpecs(arrivals, prompt + prefix, output, group, prefix)
