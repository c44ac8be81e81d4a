"""servesim: a discrete-event simulator of LLM inference serving clusters.

The Python API (what the ``servesim`` command uses too)::

    import servesim
    sc = servesim.load_scenario("scenarios/chat.yaml", overrides=["workload.num_requests=500"])
    res = servesim.simulate(sc)          # a servesim.Results
    res.summary["ttft_s"]["p99"]; res.requests["first_token_s"]; res.write("out")

Extension points: a policy (``servesim.Policy``: ``next_batch(state) -> Batch``, see
``servesim.policies.base``) or a router (``router(replicas, request) -> index``, with
``reads_state``), named in a scenario by registry name or ``module:Class``
(``servesim.plugins``).
"""

__version__ = "0.3.0"

# name -> (module, attribute): imported on first use, so `import servesim` (and the CLI's start)
# stays light
_API = {
    "load_scenario": ("servesim.inputs.scenario", "load_scenario"),
    "scenario_from_dict": ("servesim.inputs.scenario", "scenario_from_dict"),
    "Scenario": ("servesim.inputs.scenario", "Scenario"),
    "simulate": ("servesim.simulation", "simulate"),
    "Results": ("servesim.simulation", "Results"),
    "RequestSpecs": ("servesim.inputs.workload", "RequestSpecs"),
    "Policy": ("servesim.policies.base", "Policy"),
    "ReplicaState": ("servesim.policies.base", "ReplicaState"),
    "DecodeSet": ("servesim.policies.base", "DecodeSet"),
    "ContinuousPolicy": ("servesim.policies.continuous", "ContinuousPolicy"),
    # (the other built-in a plug-in subclasses: docs/extending.md names StaticPolicy plug-ins)
    "StaticPolicy": ("servesim.policies.static", "StaticPolicy"),
    "Batch": ("servesim.core.batch", "Batch"),
    "make_batch": ("servesim.core.batch", "make_batch"),
    "Request": ("servesim.core.request", "Request"),
    "InputError": ("servesim.errors", "InputError"),
}

__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        import importlib

        module, attr = _API[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'servesim' has no attribute {name!r}")


def __dir__():
    # (the API is imported lazily, so it is not in the module's namespace until used: without this,
    # dir(servesim) and a notebook's tab completion showed none of load_scenario, Results, ...)
    return sorted(set(globals()) | set(__all__))
