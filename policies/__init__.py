"""Batching policies. ``POLICIES`` is the one registry: name -> factory(policy_config) -> Policy."""

from policies.base import Policy, ReplicaState
from policies.continuous import ContinuousPolicy


def _continuous(cfg):
    return ContinuousPolicy(max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens)


POLICIES = {"continuous": _continuous}

__all__ = ["POLICIES", "Policy", "ReplicaState", "ContinuousPolicy"]
