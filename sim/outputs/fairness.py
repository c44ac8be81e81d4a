"""Fairness between request classes and tenants (``summary.json`` ``fairness``).

A class is served for its ``tenant`` (null: a tenant of its own, named after the class). For each
tenant, ``tenants`` holds the service figures ``classes`` holds per class (requests, completed,
rejected, unfinished, throughput, output tokens/s, latency distributions, SLO attainment and
goodput, each request against its own class's SLO), plus ``classes``: the classes it covers.

``service_share``: per class and per tenant, the tokens (prompt + output) of its completed
requests over those of every request of it that arrived: how much of what it asked for it got.
``jain``: Jain's fairness index, J(x) = (sum x)^2 / (n sum x^2), over the classes (and over the
tenants) of their service share and of their SLO attainment: 1 when every group got the same,
1/n when one group got everything. Over the groups that sent requests (one that sent none asked
for nothing); null with fewer than two of them, or when every x is 0.
"""

from __future__ import annotations

import numpy as np

from servesim.outputs import metrics
from servesim.outputs.metrics import slo_met
from servesim.outputs.summary import summarize_classes


def jain(x) -> float | None:
    """Jain's index of ``x`` (None for fewer than two values or all zero)."""
    x = np.asarray(list(x), dtype=float)
    sq = float((x * x).sum())
    if len(x) < 2 or sq == 0:
        return None
    return float(x.sum() ** 2 / (len(x) * sq))


def _met(req: dict, class_names, slo_by_class: dict) -> np.ndarray:
    """Per request: completed within its class's TTFT and TPOT limits."""
    done = metrics.is_completed(req)
    ttft, tpot = metrics.ttft_s(req), metrics.tpot_s(req)
    lim_ttft, lim_tpot = np.full(len(done), np.inf), np.full(len(done), np.inf)
    for n in class_names:
        sel = req["class"] == n
        t, p = slo_by_class[n]
        if t is not None:
            lim_ttft[sel] = t
        if p is not None:
            lim_tpot[sel] = p
    return done & slo_met(ttft, tpot, lim_ttft, lim_tpot)


def _shares(req: dict, group: np.ndarray, names) -> dict:
    tokens = req["prompt_tokens"] + req["output_tokens"]
    done = req["status"] == "completed"
    out = {}
    for n in names:
        sel = group == n
        demand = int(tokens[sel].sum())
        served = int(tokens[sel & done].sum())
        out[n] = {"demand_tokens": demand, "served_tokens": served,
                  "service_share": served / demand if demand else 0.0}
    return out


def fairness_summary(req: dict, sim_time_s: float, class_names, tenant_of: dict, slo_by_class: dict,
                     classes: dict) -> dict:
    """``summary.json`` ``fairness`` (see the module docstring). ``tenant_of``: class name ->
    tenant name (or None: the class's own name); ``classes``: the summary's per-class figures."""
    tenant_of = {n: tenant_of.get(n) or n for n in class_names}
    tenants = list(dict.fromkeys(tenant_of[n] for n in class_names))
    cls = req["class"]
    tenant_col = cls
    if any(tenant_of[n] != n for n in class_names):
        tenant_col = np.empty(len(cls), dtype=object)
        for n in class_names:
            tenant_col[cls == n] = tenant_of[n]
    if tenant_col is cls:  # a tenant per class: its figures are the class's
        per_tenant = {tenant_of[n]: {k: v for k, v in classes[n].items() if k != "slo"} for n in class_names}
    else:
        per_tenant = summarize_classes({**req, "class": tenant_col}, sim_time_s, tenants,
                                       {t: (None, None) for t in tenants})
        met = _met(req, class_names, slo_by_class)
        per = (lambda v: v / sim_time_s) if sim_time_s > 0 else (lambda v: 0.0)
        for t, s in per_tenant.items():
            n_met = int((met & (tenant_col == t)).sum())
            s["slo_attainment"] = n_met / s["num_requests"] if s["num_requests"] else None
            s["goodput_rps"] = per(n_met)
            del s["slo"]
    for t, s in per_tenant.items():
        s["classes"] = [n for n in class_names if tenant_of[n] == t]
    share_c = _shares(req, cls, class_names)
    share_t = _shares(req, tenant_col, tenants)
    # a group that sent no requests asked for nothing: its 0 share and attainment are no unfairness
    # (counted, one class that drew no request out of four took the index from 0.96 to 0.72)
    asked_c = [n for n in class_names if classes[n]["num_requests"]]
    asked_t = [t for t in tenants if per_tenant[t]["num_requests"]]
    return {
        "tenants": per_tenant,
        "service_share": {"classes": share_c, "tenants": share_t},
        "jain": {
            "classes": {"service_share": jain(share_c[n]["service_share"] for n in asked_c),
                        "slo_attainment": jain(classes[n]["slo_attainment"] for n in asked_c)},
            "tenants": {"service_share": jain(share_t[t]["service_share"] for t in asked_t),
                        "slo_attainment": jain(per_tenant[t]["slo_attainment"] for t in asked_t)},
        },
    }
