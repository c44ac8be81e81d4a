"""Communication time: all-reduce, all-gather and point-to-point sends over one kind of link.

A collective of ``S`` bytes over ``n`` GPUs is run by one of a few algorithms; algorithm ``a``
has a fixed latency, a number of synchronising steps and a volume of bytes each GPU moves through
its link at a share ``eta_a`` of the link's datasheet bandwidth ``B`` (one direction)::

    t_a(S, n) = smoothmax_p(latency_a + steps_a(n) * hop, volume_a(n) * S / (eta_a * B))
    t(S, n)   = min over the algorithms available at size S of t_a(S, n)

=========  ==================  =====================  ========================================
algorithm  steps (all-reduce)  volume (all-reduce)    who
=========  ==================  =====================  ========================================
ring       2 (n - 1)           2 (n - 1) / n x S      NCCL, two protocols: Simple/LL128
                                                      (``base_latency_s``, ``link``) and LL
                                                      (``small_latency_s``, ``small_link``)
oneshot    1 (no hop)          (n - 1) x S            custom all-reduce: every GPU reads all
                                                      peers' buffers (vLLM ``1stage``)
twoshot    2 (no hop)          2 (n - 1) / n x S      custom all-reduce: reduce-scatter and
                                                      all-gather through peer memory (``2stage``)
=========  ==================  =====================  ========================================

An all-gather (``S`` = the gathered output) is a ring of ``n - 1`` steps moving ``(n - 1) / n x S``;
a send is one step moving ``S``. Only latencies, ``eta``, the hop latency and ``p`` are fitted
(``sim/cost/fitting.py``); ``B`` is the datasheet figure, so a fit transfers to another GPU with
a link of the same kind by its bandwidth. The model and its fit to Vidur's NCCL measurements:
docs/cost-model.md.

One function, ``_time``, holds the equations for scalars (the engine) and numpy arrays (fitting
and validation), so the two cannot drift apart.
"""

from __future__ import annotations

from servesim.cost.efficiency import CommEfficiency, CustomAllReduce
from servesim.cost.smoothmax import smooth_max, smooth_max_np

KIB, MIB = 1024, 1024 * 1024
# message-size ranges the fits are weighted and reported by (bytes, [lo, hi)): decode steps' all-
# reduces are mostly below 1 MiB (Llama-2-70B: 16 KiB per sequence), prefill chunks above
SIZE_RANGES = ((0, 64 * KIB, "<64 KiB"), (64 * KIB, MIB, "64 KiB-1 MiB"), (MIB, 16 * MIB, "1-16 MiB"),
               (16 * MIB, float("inf"), ">16 MiB"))

# (steps, bytes moved per GPU per byte of message) of NCCL's ring, per operation, over n GPUs
_RING = {
    "allreduce": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
    "allgather": lambda n: (n - 1, (n - 1) / n),
    "send": lambda n: (1, 1.0),
}


def _time(op: str, size, n, bw: float, hop: float, e: CommEfficiency, custom: CustomAllReduce | None, vec: bool):
    """Time of ``op`` (``allreduce`` | ``allgather`` | ``send``) of ``size`` bytes over ``n`` GPUs
    on a link of ``bw`` bytes/s with ``hop`` seconds per ring step: the fastest algorithm (the
    ring's two protocols; with ``custom``, an all-reduce's one-/two-shot up to its size limit).
    Scalars, or numpy arrays elementwise when ``vec``."""
    if vec:
        import numpy as np

        smax, lower = smooth_max_np, np.minimum
    else:
        smax, lower = smooth_max, min
    steps, vol = _RING[op](n)

    def algo(lat, v, eta):
        tr = v * size / (bw * eta)
        return lat + tr if e.smooth == 1.0 else smax(lat, tr, e.smooth)

    t = algo(e.base_latency_s + steps * hop, vol, e.link)
    if e.small_latency_s is not None:
        t = lower(t, algo(e.small_latency_s + steps * hop, vol, e.small_link))
    if custom is not None and op == "allreduce":
        c = lower(custom.oneshot_latency_s + (n - 1) * size / (bw * custom.oneshot_link),
                  custom.twoshot_latency_s + 2 * (n - 1) / n * size / (bw * custom.twoshot_link))
        if vec:
            import numpy as np

            t = np.where(size <= custom.max_bytes, lower(t, c), t)
        elif size <= custom.max_bytes:
            t = lower(t, c)
    return t


def _hop(e: CommEfficiency, gpu_latency_s: float) -> float:
    return gpu_latency_s if e.hop_latency_s is None else e.hop_latency_s


def allreduce_time_s(size_bytes: float, world: int, link_bw: float, gpu_latency_s: float, e: CommEfficiency,
                     custom: CustomAllReduce | None = None) -> float:
    """All-reduce of ``size_bytes`` over ``world`` GPUs; with ``custom``, the engine's custom
    all-reduce competes below its size limit (the caller decides where it applies)."""
    if world <= 1:
        return 0.0
    return _time("allreduce", size_bytes, world, link_bw, _hop(e, gpu_latency_s), e, custom, False)


def allgather_time_s(size_bytes: float, world: int, link_bw: float, gpu_latency_s: float, e: CommEfficiency) -> float:
    """All-gather whose output on every GPU is ``size_bytes`` (each contributes ``1 / world``)."""
    if world <= 1:
        return 0.0
    return _time("allgather", size_bytes, world, link_bw, _hop(e, gpu_latency_s), e, None, False)


def send_time_s(size_bytes: float, link_bw: float, gpu_latency_s: float, e: CommEfficiency) -> float:
    return _time("send", size_bytes, 2, link_bw, _hop(e, gpu_latency_s), e, None, False)


def collective_time_np(op: str, size, n, link_bw: float, gpu_latency_s: float, e: CommEfficiency,
                       custom: CustomAllReduce | None = None):
    """``allreduce_time_s`` / ``allgather_time_s`` / ``send_time_s`` over numpy arrays of sizes and
    GPU counts (``op``: ``allreduce`` | ``allgather`` | ``send``); 0 where ``n <= 1``."""
    import numpy as np

    size = np.asarray(size, float)
    n = np.asarray(n, float)
    nn = np.maximum(n, 2.0)  # n = 1 costs nothing; avoid dividing by it
    t = _time(op, size, nn, link_bw, _hop(e, gpu_latency_s), e, custom, True)
    return np.where(n <= 1, 0.0, t)


def best_algorithm(size_bytes: float, world: int, link_bw: float, gpu_latency_s: float, e: CommEfficiency,
                   custom: CustomAllReduce | None = None) -> str:
    """Which algorithm ``allreduce_time_s`` takes at this size (for reports): ``nccl``,
    ``nccl-ll``, ``oneshot`` or ``twoshot``."""
    import dataclasses

    hop = _hop(e, gpu_latency_s)
    bulk = dataclasses.replace(e, small_latency_s=None, small_link=None)
    times = {"nccl": _time("allreduce", size_bytes, world, link_bw, hop, bulk, None, False)}
    if e.small_latency_s is not None:
        ll = dataclasses.replace(e, base_latency_s=e.small_latency_s, link=e.small_link, small_latency_s=None,
                                 small_link=None)
        times["nccl-ll"] = _time("allreduce", size_bytes, world, link_bw, hop, ll, None, False)
    if custom is not None and size_bytes <= custom.max_bytes:
        times["oneshot"] = custom.oneshot_latency_s + (world - 1) * size_bytes / (link_bw * custom.oneshot_link)
        times["twoshot"] = (custom.twoshot_latency_s
                            + 2 * (world - 1) / world * size_bytes / (link_bw * custom.twoshot_link))
    return min(times, key=times.get)
