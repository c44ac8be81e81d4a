"""Batching policies. ``POLICIES`` is the packaged registry: name -> factory(config, model) ->
Policy, where ``config`` is the scenario's ``policy`` section with ``max_num_seqs`` and
``max_num_batched_tokens`` resolved for the pool. ``servesim.plugins`` adds installed plug-ins
and ``module:Class`` names to it.

``pd_split`` is not a per-replica policy but a deployment (two pools, each with an inner policy
from this registry); ``policies/pd_split.py`` holds its decisions and ``servesim.core.cluster``
its mechanics.
"""

import functools

from servesim.policies.base import NO_DECODE_SET, DecodeSet, Policy, ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.static import StaticPolicy

POLICIES = {
    "continuous": functools.partial(ContinuousPolicy.from_config, chunked=False),
    "chunked_prefill": functools.partial(ContinuousPolicy.from_config, chunked=True),
    "static": StaticPolicy.from_config,
}

# deployments: names a scenario's policy.name takes besides the per-replica policies
DEPLOYMENTS = ("pd_split",)

__all__ = ["POLICIES", "DEPLOYMENTS", "Policy", "ReplicaState", "DecodeSet", "NO_DECODE_SET", "ContinuousPolicy",
           "StaticPolicy"]
