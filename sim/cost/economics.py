"""What a deployment costs and draws: dollars per hour, power, and the tokens each buys.

Prices and board power come from the GPU catalog (``GpuSpec.price_per_gpu_hour_usd``,
``GpuSpec.power_w``: sources in ``sim/inputs/specs.py``), replaced by the scenario's
``cost.gpu_hour_usd`` / ``cost.gpu_power_w`` when given (a number for every GPU of the
deployment, or a mapping from GPU name to number).

Power model (``gpu_power_w``): a GPU draws ``idle + (TDP - idle) x busy share``, with
``idle = IDLE_POWER_SHARE x TDP``; the busy share is the fraction of the run its replica was
running steps. This is a first-order model: a memory-bound decode step draws less than the board's
TDP, so it overstates the power of decode-heavy runs, and it leaves out the host (CPUs, network,
cooling). ``provisioned_power_w`` (every GPU at TDP) is what capacity planning such as
Splitwise's iso-power clusters counts.

Cost split between input and output tokens (``phase_cost_shares``): the GPU time of each pool is
attributed to the phase its steps did: prefill-only steps to input tokens, decode-only steps to
output tokens, a mixed step by its share of prefill tokens; idle time in the same proportion as
busy time. A P/D split's prefill pool is thus all input and its decode pool all output.
``$/M input tokens`` is the input share of the cost per million input tokens served, and so on.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from servesim.errors import InputError, shown
from servesim.inputs.schema import is_finite

# Idle draw as a share of board power: an assumption, not a measurement. nvidia-smi shows idle
# data-center GPUs at roughly 10-20% of their TDP (an H100 SXM idles near 70-100 W of 700 W).
IDLE_POWER_SHARE = 0.15
SECONDS_PER_HOUR = 3600.0


def gpu_power_w(tdp_w: float, busy_share: float, idle_share: float = IDLE_POWER_SHARE) -> float:
    """Mean board power of one GPU busy ``busy_share`` of the time (clipped to [0, 1]):
    ``idle + (tdp - idle) x busy``, ``idle = idle_share x tdp``."""
    busy = min(max(busy_share, 0.0), 1.0)
    idle = idle_share * tdp_w
    return idle + (tdp_w - idle) * busy


def _override(value, gpu_name: str, catalog):
    """The scenario's override for ``gpu_name`` (a number, or a mapping by GPU name), else the catalog's."""
    if value is None:
        return catalog
    if isinstance(value, dict):
        return float(value[gpu_name]) + 0.0 if gpu_name in value else catalog
    return float(value) + 0.0  # (-0.0, a free GPU written -0, becomes 0.0: it was shown as "$-0.00/GPU-h")


def gpu_price(gpu, cost) -> float | None:
    """USD per GPU-hour of ``gpu`` (a ``GpuSpec``) under the scenario's ``cost`` section (None: unknown)."""
    return _override(getattr(cost, "gpu_hour_usd", None), gpu.name, gpu.price_per_gpu_hour_usd)


def gpu_tdp(gpu, cost) -> float | None:
    """Board power (W) of ``gpu`` under the scenario's ``cost`` section (None: unknown)."""
    return _override(getattr(cost, "gpu_power_w", None), gpu.name, gpu.power_w)


# An override's range: a GPU-hour price or a board power beyond these is a typo (1e308 made
# the $ per million tokens overflow to inf; 1e-308 the tokens per $ or per joule)
OVERRIDE_MIN, OVERRIDE_MAX = 1e-6, 1e6


def check_override(value, path: str, positive: bool) -> None:
    """A ``cost.gpu_hour_usd`` / ``cost.gpu_power_w`` value: None, a number, or {GPU name: number};
    the number 0 (a price only: free GPUs) or within [``OVERRIDE_MIN``, ``OVERRIDE_MAX``]."""
    if value is None:
        return
    items = value.items() if isinstance(value, dict) else [(None, value)]
    for k, v in items:
        where = path if k is None else f"{path}.{k}"
        if k is not None and not isinstance(k, str):
            raise InputError(f"{path}: keys must be GPU names, got {shown(k)}")
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and is_finite(v) and (
            OVERRIDE_MIN <= v <= OVERRIDE_MAX or (v == 0 and not positive))
        if not ok:
            lo = f"{OVERRIDE_MIN:g} to {OVERRIDE_MAX:g}" + ("" if positive else ", or 0")
            raise InputError(f"{where} must be a number from {lo} (or a mapping of GPU name to number), "
                             f"got {shown(v)}")


@dataclass(frozen=True)
class PoolUse:
    """One pool of a run, as the economics need it."""

    name: str
    gpu: str
    gpus: int  # all GPUs of the pool (replicas x tp x pp)
    usd_per_gpu_hour: float | None
    tdp_w: float | None
    busy_fraction: float
    input_share: float  # share of the pool's GPU time attributed to input tokens (phase_cost_shares)


def phase_cost_shares(steps: dict, replica_pool: np.ndarray, pools) -> dict:
    """{pool: share of its busy time attributed to input (prefill) tokens}: prefill-only steps
    count whole, mixed steps by their prefill token share, decode-only not at all. A pool that
    ran no step gets 0.5. ``replica_pool``: each replica's pool name, by replica index."""
    dur = steps["duration_s"]
    pf = steps["prefill_tokens"].astype(float)
    tot = pf + steps["decode_tokens"]
    share = np.divide(pf, tot, out=np.zeros_like(pf), where=tot > 0)
    # (pools as integer codes: comparing an object array of names per step is slow on long runs)
    names = list(pools)
    code = np.array([names.index(p) if p in names else -1 for p in replica_pool], dtype=np.int64)
    pool_of_step = code[steps["replica"]] if len(dur) else np.zeros(0, dtype=np.int64)
    keep = pool_of_step >= 0
    keep = slice(None) if keep.all() else keep  # (every step: no copies)
    busy = np.bincount(pool_of_step[keep], weights=dur[keep], minlength=len(names))
    pre = np.bincount(pool_of_step[keep], weights=(dur * share)[keep], minlength=len(names))
    return {name: float(pre[i] / busy[i]) if busy[i] > 0 else 0.5 for i, name in enumerate(names)}


def economics(pools: list[PoolUse], sim_time_s: float, input_tokens: float, output_tokens: float,
              idle_share: float = IDLE_POWER_SHARE) -> dict:
    """``summary.json`` ``economics``: price per hour, power, energy and the tokens each buys
    (tokens of completed requests over the run; see the module docstring for the power model and
    the input/output split). Figures that need a price or a power the catalog lacks are None."""
    gpus = sum(p.gpus for p in pools)
    priced = all(p.usd_per_gpu_hour is not None for p in pools)
    powered = all(p.tdp_w is not None for p in pools)
    usd_h = sum(p.gpus * p.usd_per_gpu_hour for p in pools) if priced else None
    mean_w = sum(p.gpus * gpu_power_w(p.tdp_w, p.busy_fraction, idle_share) for p in pools) if powered else None
    prov_w = sum(p.gpus * p.tdp_w for p in pools) if powered else None
    hours = sim_time_s / SECONDS_PER_HOUR
    usd = usd_h * hours if usd_h is not None else None
    joules = mean_w * sim_time_s if mean_w is not None else None
    tokens = input_tokens + output_tokens

    def per(n, d):
        return n / d if d else None

    in_usd = sum(p.gpus * p.usd_per_gpu_hour * p.input_share for p in pools) * hours if priced else None
    out_usd = usd - in_usd if usd is not None else None
    lacking = [p.gpu for p in pools if p.usd_per_gpu_hour is None or p.tdp_w is None]
    return {
        "gpus": gpus,
        "usd_per_hour": usd_h,
        "usd": usd,
        "provisioned_power_w": prov_w,
        "mean_power_w": mean_w,
        "energy_j": joules,
        "idle_power_share": idle_share,
        "tokens_per_usd": per(tokens, usd),
        "output_tokens_per_usd": per(output_tokens, usd),
        "tokens_per_joule": per(tokens, joules),
        "output_tokens_per_joule": per(output_tokens, joules),
        "usd_per_million_input_tokens": per(in_usd * 1e6, input_tokens) if in_usd is not None else None,
        "usd_per_million_output_tokens": per(out_usd * 1e6, output_tokens) if out_usd is not None else None,
        "pools": {p.name: {"gpu": p.gpu, "gpus": p.gpus, "usd_per_gpu_hour": p.usd_per_gpu_hour, "power_w": p.tdp_w,
                           "busy_fraction": p.busy_fraction,
                           "mean_power_w": (p.gpus * gpu_power_w(p.tdp_w, p.busy_fraction, idle_share)
                                            if p.tdp_w is not None else None),
                           "input_cost_share": p.input_share} for p in pools},
        "missing": sorted(set(lacking)),  # GPUs without a price or power: give cost.gpu_hour_usd / gpu_power_w
    }


def deployment_usd_per_hour(gpu_counts: dict, prices: dict) -> float | None:
    """USD per hour of ``{gpu name: GPUs}`` at ``prices`` ({gpu name: USD per GPU-hour or None})."""
    if any(prices.get(g) is None for g in gpu_counts):
        return None
    return sum(n * prices[g] for g, n in gpu_counts.items())
