"""Where policy and router names come from: the one list the schema, the CLI's "did you mean" and
the tests read.

A name is, in order: a packaged entry of ``servesim.policies.POLICIES`` / ``servesim.core.router.
ROUTERS``; a name another installed package registers under the entry-point group
``servesim.policies`` / ``servesim.routers`` (``[project.entry-points."servesim.policies"]
sjf = "mypkg.sjf:ShortestJobFirst"``); or ``module:attribute``, imported from the Python path
(the working directory included), e.g. ``policy.name: my_policies:ShortestJobFirst``.

What a name resolves to is a factory: for a policy, ``factory(config, model) -> Policy`` (a class
with a ``from_config`` classmethod is called through it: ``ContinuousPolicy`` subclasses inherit
one), for a router ``factory(rng) -> router``.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from importlib import metadata

from servesim.errors import InputError, clip, did_you_mean, shown

KINDS = {"policy": "servesim.policies", "router": "servesim.routers"}


def _packaged(kind: str) -> dict:
    if kind == "policy":
        from servesim.policies import POLICIES

        return POLICIES
    from servesim.core.router import ROUTERS

    return ROUTERS


@functools.lru_cache(maxsize=None)
def _entry_points(kind: str) -> dict:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=KINDS[kind])}
    except Exception:  # a broken third-party distribution must not stop every run
        return {}


def names(kind: str) -> list[str]:
    """Every registered name of ``kind`` ("policy" | "router"): packaged, then installed plug-ins."""
    return list(_packaged(kind)) + [n for n in _entry_points(kind) if n not in _packaged(kind)]


def shadowed(kind: str, name: str) -> str | None:
    """When an installed distribution registers ``name`` under ``kind``'s entry-point group while
    servesim ships a ``kind`` of that name (``pd_split`` among the policies too): what the name
    runs and how to name the plug-in, for the ``plugin_shadowed`` warning. The packaged one runs
    (a plain name means what servesim's documentation says, whatever is installed); None when
    no plug-in takes the name."""
    from servesim.policies import DEPLOYMENTS

    ep = _entry_points(kind).get(name)
    if ep is None or (name not in _packaged(kind) and not (kind == "policy" and name in DEPLOYMENTS)):
        return None
    dist = getattr(getattr(ep, "dist", None), "name", None)
    by = f"the distribution {dist!r}" if dist else "an installed distribution"
    return (f"{name!r} is servesim's own {kind}, and {by} also registers a plug-in of that name ({ep.value}, "
            f"entry-point group {KINDS[kind]}): the run uses servesim's {name}; to run the plug-in, name it as "
            f"{ep.value}, and to run servesim's without this warning, register the plug-in under another name")


def _load(spec: str, what: str):
    module, _, attr = spec.partition(":")
    # (an empty or relative module reached importlib, whose error named its own source file)
    if not all(p.isidentifier() for p in module.split(".")) or not all(p.isidentifier() for p in attr.split(".")):
        raise InputError(f"{what}: {shown(spec)} is no module:Class; write a module's dotted name (a file "
                         "my_module.py in the working directory is my_module), a colon, then the class or function "
                         "in it, e.g. my_module:MyClass")
    # the working directory is where a user keeps their own policies (the ``servesim`` script's
    # sys.path starts at its own folder, not there)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise InputError(f"{what}: cannot import module {module!r} ({e})") from None
    except (Exception, SystemExit) as e:  # the user's module raised (or called sys.exit) while importing: say so
        import traceback

        frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
        where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
        detail = clip(e, 300)
        if isinstance(e, SyntaxError) and e.filename:  # (its last frame is importlib's, not the user's file)
            detail, where = clip(e.msg, 300), f" ({e.filename}, line {e.lineno})"
        raise InputError(f"{what}: importing {module!r} failed: {type(e).__name__}: {detail}{where}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{what}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{what}: {spec!r} is not a class or a function")
    return obj


def resolve(kind: str, name: str, where: str | None = None, also: tuple = (), without: tuple = ()):
    """The factory ``name`` stands for (see the module docstring); ``where`` names the field for
    errors (default ``policy.name`` / ``cluster.router``); ``also``: other names the field takes
    (``pd_split`` for ``policy.name``), and ``without``: registered names it does not take
    (``static`` for a P/D pool's policy), for the valid names an error lists and suggests."""
    where = where or ("policy.name" if kind == "policy" else "cluster.router")
    packaged = _packaged(kind)
    if name in packaged:
        return packaged[name]
    eps = _entry_points(kind)
    if name in eps:
        try:
            obj = eps[name].load()
        except (Exception, SystemExit) as e:  # (sys.exit at import: named too, not a silent exit)
            raise InputError(f"{where}: the plug-in {name!r} ({eps[name].value}) failed to load: "
                             f"{type(e).__name__}: {e}") from None
    elif ":" in name:
        obj = _load(name, where)
    else:
        valid = [n for n in [*names(kind), *also] if n not in without]
        raise InputError(f"{where}: {name!r} is not valid;{did_you_mean(name, valid)} (or module:Class)")
    if kind == "policy" and hasattr(obj, "from_config"):
        return obj.from_config
    return obj


def construct_class(factory):
    """The class a ``resolve``d policy factory builds (its ``from_config``'s class), else the factory."""
    return getattr(factory, "__self__", factory)


def policy_identity(name: str, where: str) -> tuple:
    """What a ``policy.name`` runs, so that one policy under two names (``continuous`` and
    ``servesim.policies.continuous:ContinuousPolicy``, or a plug-in by its registered name and its
    ``module:Class``) reads as one: (class, chunked) for a ``ContinuousPolicy`` (the packaged
    names set ``chunked``; a class of its own keeps its own default), (class,) for another class,
    (the name,) for a deployment (``pd_split``). Errors as ``resolve``'s, naming ``where``."""
    import functools

    from servesim.policies import DEPLOYMENTS, ContinuousPolicy

    if name in DEPLOYMENTS:
        return (name,)
    factory, chunked = resolve("policy", name, where), None
    if isinstance(factory, functools.partial) and not factory.args and set(factory.keywords) <= {"chunked"}:
        factory, chunked = factory.func, factory.keywords.get("chunked")
    cls = construct_class(factory)
    if isinstance(cls, type) and issubclass(cls, ContinuousPolicy):
        return (cls, bool(getattr(cls, "chunked", False) if chunked is None else chunked))
    return (cls,)


def policy_identity_text(key: tuple) -> str:
    """``policy_identity``'s answer in words: "ContinuousPolicy with chunked prefill"."""
    what = getattr(key[0], "__name__", str(key[0]))
    return what + ("" if len(key) == 1 else " with chunked prefill" if key[1] else " without chunked prefill")


def _user_frame(e: BaseException):
    """The innermost frame of ``e``'s traceback in a file outside servesim's own (None when it was
    raised by the call itself or in the standard library: a callable of the wrong signature, such as
    os:system or json:loads)."""
    import sysconfig
    import traceback

    import servesim.policies

    own = tuple(os.path.dirname(m.__file__) + os.sep for m in (sys.modules["servesim"], servesim.policies)) + tuple(
        os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib"))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(own) and not f.filename.startswith("<")]
    return frames[-1] if frames else None


_INTERFACE = {"policy": ("next_batch", "admission_error"), "router": ("__call__",)}  # what one must have


def construct(kind: str, name: str, where: str, *args):
    """``resolve(kind, name, where)(*args)``: a fresh policy or router. A name that resolves to
    something that is no factory of ``kind`` (``os:system``: it raises when called so, or makes
    no object with the interface) is an input error naming the field, not a traceback."""
    factory = resolve(kind, name, where)
    try:
        obj = factory(*args)
    except InputError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever a wrong callable raises (sys:exit too)
        own = _user_frame(e)
        if own is not None:  # it raised in its own code (a bug in its __init__): a plug-in, and where it broke
            raise InputError(f"{where}: {shown(name)}: making the {kind} raised {type(e).__name__}: "
                             f"{shown(str(e), 120)} ({own.filename}, line {own.lineno})") from None
        raise InputError(f"{where}: {shown(name)} is no {kind}: making one with it raised {type(e).__name__}: "
                         f"{shown(str(e), 120)}") from None
    lacks = [m for m in _INTERFACE[kind] if not hasattr(obj, m)]
    if lacks:
        hint = " (a policy needs next_batch(state) and admission_error(prompt_tokens, max_tokens, kv=None): see " \
            "servesim.Policy)" if kind == "policy" else ""
        raise InputError(f"{where}: {shown(name)} is no {kind}: it made a {type(obj).__name__}, which has no "
                         f"{' or '.join(lacks)}{hint}")
    return obj


def _plugin_policies(pools) -> list:
    """``(policy, where)`` of each distinct plug-in policy of the setup's ``pools`` (each pool's
    policy made once; ``where``, the scenario field naming it), for the ``no_effect`` warnings below."""
    from servesim.errors import is_plugin, plugin_name

    out, seen = [], set()
    for pool in pools:
        policy = pool.make_policy()
        if not is_plugin(policy) or plugin_name(policy) in seen:
            continue
        seen.add(plugin_name(policy))
        out.append((policy, "policy.name" if pool.name == "colocated" else f"policy.{pool.name}.policy"))
    return out


def plugin_queue_warnings(scenario, plugins) -> list:
    """``no_effect`` for ``policy.queue.order`` (``aging_s``) given with a plug-in policy that orders
    its waiting queue itself: the policy owns its queue order (its ``queue_key``; none is first
    come, first served), so an order the scenario sets that its ``queue_key`` is not (a
    ``ContinuousPolicy`` subclass that overrides ``queue_key``, a policy written from scratch that
    never reads ``cfg.queue``) is not the one the run used. ``plugins``: ``_plugin_policies``'."""
    from servesim.errors import plugin_name
    from servesim.policies.queues import QueueKey, queue_key

    q = scenario.policy.queue
    given = ([f"policy.queue.order={q.order}"] if q.order != "fcfs" else []) + \
        ([f"policy.queue.aging_s={q.aging_s:g}"] if q.aging_s is not None else [])
    if not given:
        return []
    out = []
    for policy, where in plugins:
        key = getattr(policy, "queue_key", None)
        try:
            same = key == queue_key(q.order, q.aging_s)
        except Exception:  # noqa: BLE001 - a plug-in's own key compared: not the scenario's
            same = False
        if not same:
            own = (f"its own order, {key.order}" + (f" aged by {key.aging_s:g} s" if key.aging_s is not None else "")
                   + " (its declared queue_order)" if isinstance(key, QueueKey) else
                   f"its own queue_key ({getattr(key, '__qualname__', type(key).__name__)})" if key is not None
                   else "no queue_key: first come, first served")
            out.append({"code": "no_effect",
                        "message": f"{' and '.join(given)} change{'s' if len(given) == 1 else ''} nothing with "
                                   f"{where}={plugin_name(policy)}: the "
                                   f"plug-in orders its waiting queue itself, with {own}; the run is the one without "
                                   "it (leave it out, or have the plug-in read cfg.queue.order)"})
    return out


# a ContinuousPolicy field -> the scenario's policy field it is made from (``from_config``), for
# the fields a subclass may declare (the queue's order and aging: ``plugin_queue_warnings``)
_DECLARABLE = {"preemption": "preemption", "watermark": "watermark", "victim": "preemption_victim",
               "preempt_running": "queue.preempt_running", "reserve": "reserve",
               "max_output_tokens": "max_output_tokens", "prefill_first": "prefill_first",
               "skip_unfit_prompts": "skip_unfit_prompts"}


def plugin_field_warnings(scenario, plugins) -> list:
    """``no_effect`` for a ``policy`` field given (not its default) beside a ``ContinuousPolicy``
    plug-in that declares its own default for it (``ContinuousPolicy.declared_fields``: the
    policy's code keeps it, whatever the scenario says). ``plugins``: ``_plugin_policies``'."""
    from servesim.errors import plugin_name
    from servesim.inputs.scenario import Policy
    from servesim.policies.continuous import ContinuousPolicy

    def value(cfg, path):
        for part in path.split("."):
            cfg = getattr(cfg, part)
        return cfg

    pol, base = scenario.policy, Policy()
    out = []
    for policy, where in plugins:
        if not isinstance(policy, ContinuousPolicy):
            continue
        for name in type(policy).declared_fields():
            path = _DECLARABLE.get(name)
            if path is None:
                continue
            given = value(pol, path)
            if given != value(base, path) and given != getattr(policy, name):
                out.append({"code": "no_effect",
                            "message": f"policy.{path}={given} changes nothing with {where}={plugin_name(policy)}: "
                                       f"the plug-in declares its own {name} = {getattr(policy, name)!r}, which it "
                                       "keeps; the run is the one without it"})
    return out


def plugin_warnings(scenario, pools) -> list:
    """The ``no_effect`` warnings of a scenario's plug-in policies (``plugin_queue_warnings``,
    ``plugin_field_warnings``, each plug-in pool's policy made once): ``simulate`` adds them to the
    run's, ``validate`` prints them."""
    plugins = _plugin_policies(pools)
    return plugin_queue_warnings(scenario, plugins) + plugin_field_warnings(scenario, plugins)
