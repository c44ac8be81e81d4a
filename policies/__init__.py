"""Batching policies. ``POLICIES`` is the one registry: name -> factory(policy_config, model) -> Policy.

``pd_split`` is not a per-replica policy but a deployment (two pools, each with an inner policy
from this registry); ``policies/pd_split.py`` holds its decisions and ``sim/cluster.py`` its
mechanics.
"""

from servesim.policies.base import Policy, ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.static import StaticPolicy


def _iteration(chunked: bool):
    def factory(cfg, model, max_num_seqs=None, max_num_batched_tokens=None):
        return ContinuousPolicy(
            max_num_seqs=max_num_seqs or cfg.max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens or cfg.max_num_batched_tokens,
            chunked=chunked,
            preemption=cfg.preemption,
            watermark=cfg.watermark,
            spec_tokens=cfg.spec.num_speculative_tokens if cfg.spec is not None else 0,
        )

    return factory


def _static(cfg, model, max_num_seqs=None, max_num_batched_tokens=None):
    return StaticPolicy(max_num_seqs or cfg.max_num_seqs, cfg.batch_timeout_s, cfg.max_output_tokens,
                        model.max_context_tokens)


POLICIES = {
    "continuous": _iteration(chunked=False),
    "chunked_prefill": _iteration(chunked=True),
    "static": _static,
}

__all__ = ["POLICIES", "Policy", "ReplicaState", "ContinuousPolicy", "StaticPolicy"]
