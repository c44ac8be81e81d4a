"""Extension points: policies and routers loaded by name, the extension guide's policy on the fast
path, and the ``servesim`` namespace that a user's own files cannot shadow."""

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from servesim.errors import InputError
from servesim.policies.continuous import ContinuousPolicy
from servesim.plugins import names, resolve
from servesim.simulation import simulate
from tests.conftest import make_scenario, specs
from tests.test_engine_equivalence import run_both

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "shortest_prompt_first.py"


@pytest.fixture
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))


def test_the_extension_guide_shows_the_example_policy_as_it_is():
    guide = (ROOT / "docs" / "extending.md").read_text()
    code = EXAMPLE.read_text()
    body = code[code.index("from dataclasses"):].strip()
    assert body in guide, "docs/extending.md ('A policy') must show examples/shortest_prompt_first.py"


def test_the_readme_has_a_write_your_own_policy_section_with_the_example():
    """Issue 16: a README section "Write your own policy" with the example, which runs (the
    README's blocks run in tests/test_docs_examples.py) and is the example file's policy: the
    same class, base and queue key (the README shortens its docstring and comment)."""
    readme = (ROOT / "README.md").read_text()
    assert "\n## Write your own policy\n" in readme
    section = readme.split("\n## Write your own policy\n", 1)[1].split("\n## ", 1)[0]
    code = EXAMPLE.read_text()
    for line in ("class ShortestPromptFirst(ContinuousPolicy):", "def queue_key(request) -> int:",
                 "return request.prompt_tokens", "policy.name=shortest_prompt_first:ShortestPromptFirst"):
        assert line in section and (line in code or line.startswith("policy.name")), line
    assert "examples/shortest_prompt_first.py" in section and "docs/extending.md" in section


def test_shortest_prompt_first_admits_short_prompts_first_on_the_fast_path(examples_on_path):
    # everything arrives at once, one sequence at a time: service order is prompt order
    rows = [(0.0, p, 5) for p in (900, 100, 500, 300, 700)]
    sc = make_scenario(**{"policy.name": "shortest_prompt_first:ShortestPromptFirst", "policy.max_num_seqs": 1})
    res = simulate(sc, specs=specs(rows))
    order = np.argsort(res.requests["scheduled_s"], kind="stable")
    assert res.requests["prompt_tokens"][order].tolist() == [100, 300, 500, 700, 900]
    stats = res.engine_stats["colocated"]
    assert stats["set_steps"] + stats["run_steps"] > 0


def test_shortest_prompt_first_matches_the_reference_engine(examples_on_path):
    rng = np.random.default_rng(3)
    n = 300
    rows = sorted(zip(np.cumsum(rng.exponential(0.05, n)).tolist(), rng.integers(50, 2000, n).tolist(),
                      rng.integers(2, 300, n).tolist()))
    sc = make_scenario(**{"policy.name": "shortest_prompt_first:ShortestPromptFirst",
                          "memory.num_gpu_blocks": 500, "policy.max_num_seqs": 32})
    fast, ref = run_both(sc, specs(rows))
    assert fast.fast_path_used and ref.summary["preemptions"] > 0
    # a request can overtake an earlier, longer one in the queue
    fcfs = simulate(make_scenario(**{"memory.num_gpu_blocks": 500, "policy.max_num_seqs": 32}), specs=specs(rows))
    assert not np.array_equal(np.argsort(fast.requests["scheduled_s"], kind="stable"),
                              np.argsort(fcfs.requests["scheduled_s"], kind="stable"))


class OneAtATime:
    """A policy written from scratch without the aggregate: it reads ``state.running`` (every
    running request) and runs one request at a time to its end. The engine dissolves its decode
    set for it; results equal the reference engine's."""

    @classmethod
    def from_config(cls, cfg, model):
        return cls()

    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return None

    def next_batch(self, state):
        from servesim.core.batch import make_batch

        if state.running:
            r = state.running[0]
            return make_batch([(r, r.num_tokens - r.num_computed_tokens)])
        if state.waiting:
            r = state.waiting[0]
            return make_batch([(r, r.prompt_tokens)], admitted=[r])
        return make_batch(())


class FirstReplica:
    reads_state = False

    def __init__(self, rng):
        pass

    def __call__(self, replicas, request):
        return 0


def test_a_policy_and_a_router_from_any_module():
    sc = make_scenario(**{"policy.name": f"{__name__}:OneAtATime", "cluster.replicas": 2,
                          "cluster.router": f"{__name__}:FirstReplica"})
    fast, ref = run_both(sc)
    assert fast.summary["completed"] == 50
    assert set(fast.requests["replica"].tolist()) == {0}
    assert fast.summary["utilization"]["mean_batch_size"] == 1.0


class PlainContinuous(ContinuousPolicy):
    """A plug-in built on continuous batching that changes nothing."""


@dataclass(frozen=True)
class PlainChunked(ContinuousPolicy):
    chunked: bool = True


def test_a_continuous_subclass_schedules_whole_prompts_unless_its_chunked_field_says_otherwise():
    """docs/extending.md: a subclass replacing chunked_prefill in policy.name is continuous
    batching (it rejected prompts over the chunk budget); chunked: bool = True makes it chunked."""
    kw = {"policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 256}
    packaged = simulate(make_scenario(**kw))
    assert packaged.summary["rejected"] == 0
    plain = simulate(make_scenario(**{**kw, "policy.name": f"{__name__}:PlainContinuous"}))
    assert plain.summary["rejected"] > 0
    # (its fix is the class's field: policy.name=chunked_prefill would drop the plug-in)
    reasons = set(plain.requests["reason"][plain.requests["status"] == "rejected"])
    assert reasons and all("use chunked = True in PlainContinuous (servesim's chunked prefill) or a larger budget"
                           in r for r in reasons)
    plug = simulate(make_scenario(**{**kw, "policy.name": f"{__name__}:PlainChunked"}))
    for col in ("first_token_s", "finish_s", "status"):
        assert np.array_equal(plug.requests[col], packaged.requests[col]), col


def test_a_continuous_subclass_on_the_decode_side_of_a_split_runs_as_continuous_does():
    """The decode pool's budget is its max_num_seqs (256 here); the packaged continuous policy
    runs chunked there, but a plug-in subclassing it kept whole-prompt admission and rejected
    every request with prompt + output - 1 over 256 tokens (most of them), exit 0."""
    kw = {"policy.name": "pd_split", "workload.prompt_tokens": {"dist": "uniform", "min": 200, "max": 900}}
    plug = simulate(make_scenario(**kw, **{"policy.decode": {"policy": f"{__name__}:PlainContinuous"}}))
    packaged = simulate(make_scenario(**kw))
    assert plug.summary["rejected"] == 0 and plug.summary["completed"] == 50
    for col in ("first_token_s", "finish_s", "decode_replica"):
        assert np.array_equal(plug.requests[col], packaged.requests[col]), col
    run_both(make_scenario(**kw, **{"policy.decode": {"policy": f"{__name__}:PlainContinuous"}}))


def test_names_come_from_one_registry_and_bad_ones_say_what_is_valid():
    assert {"continuous", "chunked_prefill", "static"} <= set(names("policy"))
    assert {"round_robin", "least_kv_usage"} <= set(names("router"))
    with pytest.raises(InputError, match="did you mean 'chunked_prefill'"):
        make_scenario(**{"policy.name": "chunked"})
    with pytest.raises(InputError, match="cluster.router.*least_kv_usage"):
        make_scenario(**{"cluster.router": "least_kv"})
    with pytest.raises(InputError, match="cannot import module 'no_such_module_xyz'"):
        make_scenario(**{"policy.name": "no_such_module_xyz:Policy"})
    with pytest.raises(InputError, match="has no attribute 'Nope'"):
        resolve("policy", f"{__name__}:Nope")
    for spec in (":", ":B", "../x:Y", "..:X", "x:1y"):  # (importlib's own error named its source file)
        with pytest.raises(InputError, match=r"is no module:Class; write a module's dotted name") as e:
            make_scenario(**{"cluster.router": spec})
        assert "importlib" not in str(e.value)
    # P/D pools take any per-replica policy, plug-ins included, but not static or a deployment
    sc = make_scenario(**{"policy.name": "pd_split", "policy.decode": {"policy": f"{__name__}:OneAtATime"}})
    assert sc.policy.decode.policy.endswith("OneAtATime")
    with pytest.raises(InputError, match="policy.prefill.policy: 'static' cannot run inside a P/D pool"):
        make_scenario(**{"policy.name": "pd_split", "policy.prefill": {"policy": "static"}})


def test_a_users_own_policies_plots_and_scenarios_shadow_nothing(tmp_path):
    """A working directory with its own ``policies.py``, ``plots.py``, ``sim.py`` and
    ``scenarios/`` (which once broke ``from sim.simulate import simulate`` and replaced the
    packaged scenarios): the API and the command still use servesim's own."""
    for name in ("policies.py", "plots.py", "sim.py"):
        (tmp_path / name).write_text("raise ImportError('a user module, not servesim')\n")
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "default.yaml").write_text("this: is not a servesim scenario\n")
    code = textwrap.dedent("""
        import servesim
        res = servesim.simulate(servesim.load_scenario(None, ["workload.num_requests=20"]))
        print(res.summary["scenario"], res.summary["completed"])
    """)
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["default-llama3-8b-h100", "20"]
    cli = subprocess.run([sys.executable, "-m", "servesim", "run", "--quiet", "--out", "o",
                          "--set", "workload.num_requests=20"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert cli.returncode == 0, cli.stderr
    assert "scenario default-llama3-8b-h100: 20 requests" in cli.stdout


def test_version_and_public_api():
    import servesim

    assert servesim.__version__.count(".") == 2
    for name in ("load_scenario", "simulate", "Results", "Policy", "ReplicaState", "make_batch", "ContinuousPolicy"):
        assert getattr(servesim, name) is not None
    with pytest.raises(AttributeError):
        servesim.no_such_thing  # noqa: B018
    # (the lazily imported names were missing from dir(), in a fresh interpreter: a notebook's tab
    # completion offered none of them)
    out = subprocess.run([sys.executable, "-c", "import servesim; print(sorted(set(servesim.__all__) - "
                          "set(dir(servesim))))"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    with pytest.raises(TypeError, match="load_scenario"):
        servesim.simulate({"model": "meta-llama/Meta-Llama-3-8B"})


@pytest.mark.parametrize("call, error, says", [
    (lambda sv: sv.load_scenario(123), TypeError, "a file path"),
    (lambda sv: sv.load_scenario(overrides="workload.num_requests=5"), TypeError, "put it in a list"),
    (lambda sv: sv.load_scenario(overrides=[5]), TypeError, "dotted.key=value"),
    (lambda sv: sv.scenario_from_dict(None), InputError, "got None: an empty document \\(no fields\\)"),
    (lambda sv: sv.simulate(make_scenario(), engine="bogus"), ValueError, "'fast' or 'reference'"),
    (lambda sv: sv.simulate(make_scenario(), specs=[1, 2]), TypeError, "RequestSpecs"),
    (lambda sv: sv.simulate(make_scenario(), progress=5), TypeError, "a function"),
    # (every 0 s the queue sampler never let the clock move: the run hung)
    (lambda sv: sv.simulate(make_scenario(), sample_every_s=0), ValueError, "> 0"),
    (lambda sv: sv.simulate(make_scenario(), sample_every_s=-1.0), ValueError, "> 0"),
    (lambda sv: sv.simulate(make_scenario(), sample_every_s=float("nan")), ValueError, "finite"),
    # (every 1e-9 s over the arrivals: billions of samples filled the memory before it ended)
    (lambda sv: sv.simulate(make_scenario(), sample_every_s=1e-9), ValueError, "more than 10,000,000 queue samples"),
])
def test_the_python_api_names_a_wrong_argument(call, error, says):
    import servesim

    with pytest.raises(error, match=says):
        call(servesim)


def test_the_python_api_takes_overrides_as_any_list_of_strings():
    import servesim

    assert servesim.load_scenario(overrides=None).workload.num_requests is not None
    assert servesim.load_scenario(overrides=("workload.num_requests=5",)).workload.num_requests == 5
    assert servesim.load_scenario(overrides=(o for o in ["workload.num_requests=7"])).workload.num_requests == 7


def test_results_write_names_a_wrong_argument_and_takes_outputs_as_the_cli_does(tmp_path):
    import servesim

    res = simulate(make_scenario(**{"workload.num_requests": 5}))
    for kw, error, says in [({"outputs": ["bogus"]}, InputError, "unknown output; valid"),
                            ({"outputs": []}, InputError, "at least one"),
                            ({"outputs": 5}, TypeError, "names from"),
                            ({"fmt": "xml"}, InputError, "unknown format")]:
        with pytest.raises(error, match=says):
            res.write(tmp_path / "bad", **kw)
    assert not (tmp_path / "bad").exists()
    with pytest.raises(TypeError, match="folder path"):
        res.write(5)
    res.write(tmp_path / "a", outputs="summary,steps")
    res.write(tmp_path / "b", outputs=("requests",))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["steps.csv", "summary.json"]
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["requests.csv"]
    assert isinstance(res, servesim.Results)


@pytest.mark.parametrize("columns, says", [
    (([0.0, 1.0, 2.0], [10, 20], [5, 5, 5]), "2 values for 3 requests"),
    (([2.0, 1.0], [10, 20], [5, 5]), "must be sorted by arrival"),
    (([0.0, float("nan")], [10, 20], [5, 5]), "finite time >= 0"),
    (([-1.0, 0.0], [10, 20], [5, 5]), "finite time >= 0"),
    # (a request of 0 output tokens never finished: the run hung)
    (([0.0, 1.0], [10, 20], [0, 5]), "output_tokens: request 0 has 0 tokens"),
    (([0.0, 1.0], [-10, 20], [5, 5]), "prompt_tokens: request 0 has -10"),
    (([0.0, 1.0], [10.5, 20], [5, 5]), "whole number"),
    ((np.zeros((2, 2)), [[1, 1], [1, 1]], [[1, 1], [1, 1]]), "1-D"),
])
def test_hand_made_requests_are_checked_as_a_workload_file_is(columns, says):
    from servesim.inputs.workload import RequestSpecs

    with pytest.raises(InputError, match=says):
        simulate(make_scenario(), specs=RequestSpecs(*columns))


def test_hand_made_requests_may_be_lists():
    from servesim.inputs.workload import RequestSpecs

    res = simulate(make_scenario(), specs=RequestSpecs([0.0, 0.5], [10, 20], [3, 4]))
    assert res.summary["completed"] == 2
    assert res.requests["output_tokens"].tolist() == [3, 4]


PLUGINS = '''
from servesim.policies.continuous import ContinuousPolicy
from servesim import make_batch


class ReturnsNone(ContinuousPolicy):
    def next_batch(self, state):
        return None


class Raises(ContinuousPolicy):
    def next_batch(self, state):
        raise ValueError("my bug")


class NeverSchedules(ContinuousPolicy):
    def next_batch(self, state):
        return make_batch([])


class NotAdmitted(ContinuousPolicy):
    """schedules waiting prompts without admitting them: the second step gives them 0 tokens"""
    def next_batch(self, state):
        return make_batch([(r, r.prompt_tokens - r.num_computed_tokens) for r in state.waiting])


class WholeNotAdmitted(ContinuousPolicy):
    """schedules the head's whole prompt without admitting it: the step ran, computing a prompt that
    never joined the running set, and the next failed on 'one token to decode a step'"""
    def next_batch(self, state):
        return make_batch([(state.waiting[0], state.waiting[0].num_tokens)] if state.waiting else [])


class AdmitsRunning(ContinuousPolicy):
    """admits a running request again (an IndexError or 'not in deque' from the engine)"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        running = state.running
        return make_batch([(running[0], 1)], admitted=[running[0]]) if running else b


class AdmitsAStranger(ContinuousPolicy):
    def next_batch(self, state):
        from servesim import Request
        r = Request(999, 0.0, 10, 10)
        return make_batch([(r, 10)], admitted=[r])


class PreemptsAndSchedules(ContinuousPolicy):
    def next_batch(self, state):
        running = state.running
        if running and running[0].num_output_done > 2:
            return make_batch([(running[0], 1)], preempted=[running[0]])
        return ContinuousPolicy.next_batch(self, state)


class TwoTokensADecode(ContinuousPolicy):
    """gives a decoding request two tokens a step (without speculative decoding)"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        running = [r for r in state.running if r.num_output_done > 0]
        if not running:
            return b
        return make_batch([(r, 2 if r is running[0] else q) for r, q in b.items] if any(
            r is running[0] for r, _ in b.items) else [(running[0], 2)])


class HalfATokens(ContinuousPolicy):
    def next_batch(self, state):
        return make_batch([(r, 1.5) for r in state.waiting], admitted=list(state.waiting))


class TwiceInAStep(ContinuousPolicy):
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        return make_batch(list(b.items) + list(b.items[:1]), admitted=b.admitted) if b.items else b


class PastThePrompt(ContinuousPolicy):
    def next_batch(self, state):
        return make_batch([(r, r.prompt_tokens + 7) for r in state.waiting], admitted=list(state.waiting))


class WakesAtText(ContinuousPolicy):
    def next_batch(self, state):
        return make_batch([], wake_at_s="soon")


class WakesNever(ContinuousPolicy):
    def next_batch(self, state):
        return make_batch([], wake_at_s=float("inf"))


class WakesSoonForever(ContinuousPolicy):
    """a timer policy whose timer never leads anywhere: the run went on forever"""
    def next_batch(self, state):
        return make_batch([], wake_at_s=state.now_s + 0.001)


class AdmissionRaises(ContinuousPolicy):
    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        raise RuntimeError("adm bug")


class AdmissionSaysFive(ContinuousPolicy):
    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return 5


class AdmissionSaysNothing(ContinuousPolicy):
    """a blank reason: every request rejected, the summary's top reason ''"""
    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return " "


class OnlyNextBatch:
    def __init__(self, *args):
        pass

    def next_batch(self, state):
        return make_batch([])


class KeyOfMixedTypes(ContinuousPolicy):
    queue_key = staticmethod(lambda r: None if r.request_id % 2 else r.prompt_tokens)


class KeyNotCallable(ContinuousPolicy):
    queue_key = 5


class Exits(ContinuousPolicy):
    def next_batch(self, state):
        raise SystemExit(3)


class WaitingOnly:
    """one request at a time from state.waiting: on the decode side of a P/D split it never looks
    at state.landed, where the requests come"""
    def __init__(self, *args):
        pass

    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return None

    def next_batch(self, state):
        if state.running:
            return make_batch([(state.running[0], 1)])
        if state.waiting:
            return make_batch([(state.waiting[0], state.waiting[0].prompt_tokens)], admitted=[state.waiting[0]])
        return make_batch([])


class HitOnARunningRequest(ContinuousPolicy):
    """a prefix hit for a running request it does not admit: the hit set its computed tokens back to
    what it says at every step (here: what it has, so the run went on as if nothing was said)"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        running = [r for r in state.running if r not in b.admitted]
        if not running:
            return b
        r = running[0]
        return make_batch(b.items, b.preempted, b.admitted, prefix_hits=[*b.prefix_hits, (r, r.num_computed_tokens)],
                          swap_in=b.swap_in)


class NegativeHit(ContinuousPolicy):
    """a hit of -5 cached tokens: the request computed its prompt and 5 tokens more, exit 0"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        if not b.admitted:
            return b
        return make_batch(b.items, b.preempted, b.admitted, prefix_hits=[(r, -5) for r in b.admitted])


class ReservesForAWaitingRequest(ContinuousPolicy):
    """KV reserved for a request it leaves waiting: the blocks were taken, exit 0"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        if not b.admitted:
            return b
        last = b.admitted[-1]
        return make_batch([(r, q) for r, q in b.items if r is not last], b.preempted, b.admitted[:-1],
                          reserve=[(last, 100)])


class SwapsOutWithoutPreempting(ContinuousPolicy):
    """swap_out for a request it does not preempt: ignored, exit 0"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        running = [r for r in state.running if r not in b.admitted]
        if not running:
            return b
        return make_batch(b.items, b.preempted, b.admitted, swap_out=[running[0]])


class AdmitsTwice(ContinuousPolicy):
    """the same request twice in admitted= (an IndexError from the queue, named as such)"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        return make_batch(b.items, b.preempted, [*b.admitted, b.admitted[0]]) if b.admitted else b


class DecodeSetWithoutContext(ContinuousPolicy):
    """the decode set passed as (n, 0): its attention priced as if it held no KV, exit 0"""
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        if not b.set_seqs:
            return b
        return make_batch(b.items, b.preempted, b.admitted, prefix_hits=b.prefix_hits, swap_in=b.swap_in,
                          decode_set=(state.decoding.num_seqs, 0))


class AdmittedNone(ContinuousPolicy):
    """a Batch whose admitted is None ('the run stopped on TypeError ... must only read what they
    are given', which it had)"""
    def next_batch(self, state):
        return ContinuousPolicy.next_batch(self, state)._replace(admitted=None)


class ItemsNotPairs(ContinuousPolicy):
    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        return b._replace(items=tuple(r for r, _ in b.items))


class MinusOne:
    reads_state = False

    def __init__(self, rng):
        pass

    def __call__(self, replicas, request):
        return -1


class RouterRaises(MinusOne):
    def __call__(self, replicas, request):
        return {}["missing"]
'''


@pytest.mark.parametrize("kw, says", [
    ({"policy.name": "badplugins:Raises"},
     r"policy badplugins:Raises: next_batch raised ValueError: my bug \(.*badplugins.py, line 13\)"),
    ({"policy.name": "badplugins:ReturnsNone"}, "next_batch returned None .* not a servesim.Batch"),
    # (it left every request waiting: the run ended with them in flight)
    ({"policy.name": "badplugins:NeverSchedules"},
     r"policy badplugins:NeverSchedules: 5 requests were left in flight with nothing left to happen \(5 waiting "
     r"\(state.waiting\);"),
    # (it said 'while they waited' and 'schedule waiting work': they had landed, in state.landed)
    ({"policy.name": "pd_split", "policy.decode.policy": "badplugins:WaitingOnly"},
     r"5 requests were left in flight with nothing left to happen \(5 landed on a P/D decode replica "
     r"\(state.landed\);"),
    # (its first step computed the prompts of requests that stayed waiting; the second gave them 0
    # tokens, a step that took no time: the run never moved on)
    ({"policy.name": "badplugins:NotAdmitted"},
     r"schedules request 0, which is not running \(waiting: make_batch\(..., admitted=\[...\]\) must list"),
    ({"policy.name": "badplugins:WholeNotAdmitted"}, "schedules request 0, which is not running \\(waiting"),
    ({"policy.name": "badplugins:AdmitsRunning"}, "admits request 0, which is running already"),
    ({"policy.name": "badplugins:AdmitsAStranger"}, "admits request 999, which is not waiting on this replica"),
    ({"policy.name": "badplugins:PreemptsAndSchedules"}, "schedules request 0, which it preempts in the same step"),
    # (TypeError in the engine's speculative-decoding path: the run had none)
    ({"policy.name": "badplugins:TwoTokensADecode"},
     "schedules 2 tokens for request 0, which has one token to decode a step; schedule at most that"),
    ({"policy.name": "badplugins:HalfATokens"}, "schedules 1.5 tokens for request 0; .* a whole number"),
    ({"policy.name": "badplugins:TwiceInAStep"}, "schedules request 0 twice in one step"),
    ({"policy.name": "badplugins:PastThePrompt"}, r"schedules (\d+) tokens for request 0, which has \d+ tokens left to "
                                                  "compute; schedule at most that"),
    # (a TypeError traceback when the engine compared it with the clock)
    ({"policy.name": "badplugins:WakesAtText"}, "wake_at_s is 'soon'; the simulated time"),
    # (inf is never, as None: the clock was moved to inf and the policy asked again there)
    ({"policy.name": "badplugins:WakesNever"},
     "5 requests were left in flight .* set no wake_at_s that is finite and later than its decision"),
    ({"policy.name": "badplugins:AdmissionRaises"}, "admission_error raised RuntimeError: adm bug"),
    # (5 was taken as a rejection reason)
    ({"policy.name": "badplugins:AdmissionSaysFive"}, "admission_error returned 5; a reason"),
    ({"policy.name": "badplugins:AdmissionSaysNothing"}, "admission_error returned ' ', a blank reason"),
    ({"policy.name": "badplugins:KeyOfMixedTypes", "workload.arrival.rate_rps": 1000.0},
     "queue_key gave sort keys that cannot be compared"),
    ({"policy.name": "badplugins:KeyNotCallable"}, "queue_key is 5; a function"),
    # (sys.exit in a plug-in ended the command with its status and no word)
    ({"policy.name": "badplugins:Exits"}, "next_batch raised SystemExit: 3"),
    ({"policy.name": "badplugins:HitOnARunningRequest"},
     "gives request 0 a prefix hit, but does not admit it in the same step"),
    ({"policy.name": "badplugins:NegativeHit"},
     r"gives request 0 a prefix hit of -5 cached tokens; a whole number from 0 to \d+"),
    ({"policy.name": "badplugins:ReservesForAWaitingRequest", "workload.arrival.rate_rps": 1000.0},
     r"reserves KV for request \d+, which is not running"),
    ({"policy.name": "badplugins:SwapsOutWithoutPreempting"}, "swaps out request 0, which it does not preempt"),
    ({"policy.name": "badplugins:AdmitsTwice"}, "lists request 0 twice in its Batch's admitted"),
    ({"policy.name": "badplugins:DecodeSetWithoutContext", "workload.arrival.rate_rps": 1000.0},
     r"its Batch's attn_pairs is [\d.]+ where its items, prefix hits and decode set give [\d.]+"),
    ({"policy.name": "badplugins:AdmittedNone"}, r"its Batch's admitted is None \(NoneType\); a tuple of waiting"),
    ({"policy.name": "badplugins:ItemsNotPairs"},
     r"its Batch's items holds Request\(0.*; each one a pair \(request, tokens\) expected"),
    # (-1 picked the last replica, silently)
    ({"cluster.replicas": 2, "cluster.router": "badplugins:MinusOne"},
     "returned -1 for request 0; the index of a replica, 0 to 1"),
    ({"cluster.replicas": 2, "cluster.router": "badplugins:RouterRaises"},
     "router badplugins:RouterRaises: its call raised KeyError"),
])
def test_a_plugin_that_breaks_its_contract_is_named_without_a_traceback(tmp_path, monkeypatch, capsys, kw, says):
    from servesim.cli.main import main
    from servesim.errors import PluginError

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=says):
        simulate(make_scenario(**{"workload.num_requests": 5, **kw}))
    args = [x for k, v in kw.items() for x in ("--set", f"{k}={v}")]
    assert main(["run", *args, "--set", "workload.num_requests=5", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error:") and "Traceback" not in err


def test_from_python_a_plugin_errors_cause_is_what_the_plugin_raised(tmp_path, monkeypatch):
    """SimPy re-raises a copy of a process's exception: the PluginError caught from simulate()
    had the original PluginError as its __cause__, and the plug-in's own exception one further."""
    from servesim.errors import PluginError

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        simulate(make_scenario(**{"workload.num_requests": 5, "policy.name": "badplugins:Raises"}))
    assert type(info.value.__cause__) is ValueError and str(info.value.__cause__) == "my bug"


def test_a_policy_that_only_ever_wakes_itself_is_stopped_and_named(tmp_path, monkeypatch, capsys):
    """A policy deciding nothing and setting wake_at_s a millisecond on, forever, while requests
    waited: simulated time grew without end and nothing was written (a hang). Past
    Replica.MAX_IDLE_WAKES such decisions in a row (lowered here) it is a PluginError; the
    timer policy that schedules after a few wakes is untouched (the sweep: a PluginError mid-run
    is a point that failed while running, exit 3)."""
    from servesim.cli.main import main
    from servesim.core.replica import Replica
    from servesim.errors import PluginError

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(Replica, "MAX_IDLE_WAKES", 2000)
    with pytest.raises(PluginError, match=r"badplugins:WakesSoonForever: decided nothing 2,001 times in a row, each "
                                          r"time setting wake_at_s, with 5 requests waiting"):
        simulate(make_scenario(**{"workload.num_requests": 5, "policy.name": "badplugins:WakesSoonForever"}))
    import yaml

    from tests.conftest import BASE

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(BASE))
    out = tmp_path / "sw"
    rc = main(["sweep", str(sc), "--grid", "policy.name=continuous,badplugins:WakesSoonForever", "--set",
               "workload.num_requests=5", "--out", str(out), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 3 and "1 point failed while running" in err, err


def test_a_policy_without_admission_error_is_refused_before_the_run(tmp_path, monkeypatch):
    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match="is no policy: .* has no admission_error .* servesim.Policy"):
        simulate(make_scenario(**{"policy.name": "badplugins:OnlyNextBatch"}))


def test_a_plugin_module_that_exits_while_importing_is_named(tmp_path, monkeypatch, capsys):
    from servesim.cli.main import main

    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for field in ("policy.name", "cluster.router"):
        assert main(["validate", "--set", f"{field}=exits_on_import:X", str(ROOT / "scenarios" / "default.yaml")]) == 2
        assert "importing 'exits_on_import' failed: SystemExit: 3" in capsys.readouterr().err
    # (where it raised: the message named the exception alone, while a syntax error names its line)
    (tmp_path / "raises_on_import.py").write_text("x = 1\nraise RuntimeError('import boom')\n")
    assert main(["validate", "--set", "policy.name=raises_on_import:X", str(ROOT / "scenarios" / "default.yaml")]) == 2
    err = capsys.readouterr().err
    assert "failed: RuntimeError: import boom (" in err and "raises_on_import.py, line 2)" in err
    # a syntax error named its file twice, then importlib's own file and line as where it came from
    (tmp_path / "syntax_slip.py").write_text("x = 1\n\ndef f(:\n    pass\n")
    assert main(["validate", "--set", "policy.name=syntax_slip:X", str(ROOT / "scenarios" / "default.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"failed: SyntaxError: invalid syntax ({tmp_path / 'syntax_slip.py'}, line 3)" in err
    assert "importlib" not in err


def test_a_queue_sampler_too_fine_for_a_closed_loop_stops_at_its_bound(monkeypatch):
    """A closed loop's arrivals are not known ahead, so its sampler is bounded as it runs."""
    import servesim.simulation as sim_mod

    monkeypatch.setattr(sim_mod, "MAX_QUEUE_SAMPLES", 50)
    sc = make_scenario(**{"workload.arrival": {"process": "closed_loop", "clients": 2, "think_time_s": 0.0},
                          "workload.num_requests": 20})
    with pytest.raises(ValueError, match="more than 50 queue samples"):
        simulate(sc, sample_every_s=1e-4)
    assert len(simulate(sc, sample_every_s=1.0).queue_samples) <= 50


MUTATING = '''
from servesim.policies.continuous import ContinuousPolicy


class QueuesItself:
    """a router that puts the request in a replica's queue itself (and routes it there too)"""
    reads_state = True

    def __init__(self, rng):
        pass

    def __call__(self, replicas, request):
        replicas[0].waiting.append(request)
        return 0
'''


def test_a_plugin_that_changes_the_engine_state_is_named_when_the_run_breaks(tmp_path, monkeypatch, capsys):
    """A router that queued the request itself left it queued twice; the engine stopped later, outside
    the plug-in, with a KeyError traceback. The run now stops on an error naming the plug-ins in use,
    what was raised and where, and what plug-ins must not do."""
    from servesim.cli.main import main
    from servesim.errors import PluginError

    (tmp_path / "mutating.py").write_text(MUTATING)
    monkeypatch.syspath_prepend(str(tmp_path))
    kw = {"cluster.replicas": 2, "cluster.router": "mutating:QueuesItself", "workload.num_requests": 5}
    with pytest.raises(PluginError, match=r"the run stopped on \w+: .* at [a-z_]+\.py, line \d+, with plug-in "
                                          r"mutating:QueuesItself in use\. Policies and routers must only read"):
        simulate(make_scenario(**kw))
    args = [x for k, v in kw.items() for x in ("--set", f"{k}={v}")]
    assert main(["run", *args, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error:") and "Traceback" not in err and "servesim bug" in err


TIMED_PLUGIN = '''
from servesim.policies.continuous import ContinuousPolicy
from servesim import make_batch


class LateSkips(ContinuousPolicy):
    """From t = 2 s on, the oldest running request sits out every step: a rule that can turn true
    between arrivals, while the base's steady flag is handed on (the trap docs/extending.md names)."""

    def next_batch(self, state):
        b = ContinuousPolicy.next_batch(self, state)
        if state.now_s < 2.0 or b.preempted:
            return self.flags(b)
        running = state.running  # (dissolves the decode set: every running request is in items)
        b = ContinuousPolicy.next_batch(self, state)
        if b.preempted or len(b.items) < 2 or not running or running[0] in b.admitted:
            return self.flags(b)
        return self.flags(make_batch([(r, q) for r, q in b.items if r is not running[0]], (), b.admitted,
                                     steady=b.steady))

    def flags(self, b):
        return b


class LateSkipsStepByStep(LateSkips):
    def flags(self, b):
        return b._replace(steady=False, until_completion=False)
'''


def test_the_reference_engine_catches_a_broken_steady_claim(tmp_path, monkeypatch):
    """docs/extending.md's check: a policy whose decision changes between arrivals while it claims
    steady gets another answer from the fast engine than from the reference; with the claims
    cleared, both agree."""
    (tmp_path / "timed.py").write_text(TIMED_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [(0.2 * i, 200 + 37 * i, 400) for i in range(6)]  # arrivals end at 1 s; decodes run past 2 s
    for name, agree in (("timed:LateSkips", False), ("timed:LateSkipsStepByStep", True)):
        sc = make_scenario(**{"policy.name": name})
        fast = simulate(sc, specs=specs(rows), engine="fast")
        ref = simulate(sc, specs=specs(rows), engine="reference")
        for res, engine in ((fast, "fast"), (ref, "reference")):  # as the guide compares them
            res.write(tmp_path / name.split(":")[1] / engine, outputs="requests,steps")
        out = tmp_path / name.split(":")[1]
        same = all((out / "fast" / f).read_bytes() == (out / "reference" / f).read_bytes()
                   for f in ("requests.csv", "steps.csv"))
        assert same is agree, name
        assert fast.summary["completed"] == ref.summary["completed"] == len(rows)
    # the skips happen: the reference's oldest request finishes later than without the rule
    base = simulate(make_scenario(), specs=specs(rows), engine="reference")
    assert ref.requests["finish_s"][0] > base.requests["finish_s"][0]


def test_validate_names_a_plugin_whose_admission_error_breaks_before_saying_ok(tmp_path, monkeypatch, capsys):
    """validate asks the policy's admission_error while it predicts rejections: one that raised
    (or returned no reason) was an error printed after the scenario's 'ok' line, and without the
    scenario's name."""
    from servesim.cli.main import main

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = str(ROOT / "scenarios" / "default.yaml")
    for name, says in (("AdmissionRaises", "admission_error raised RuntimeError: adm bug"),
                       ("AdmissionSaysFive", "admission_error returned 5; a reason")):
        assert main(["validate", "--set", f"policy.name=badplugins:{name}", scenario]) == 2
        out, err = capsys.readouterr()
        assert ": ok (" not in out, out
        assert err.startswith(f"servesim: error: {scenario}: policy badplugins:{name}: {says}"), err


KV_HOG = '''
from servesim import make_batch


class AdmitsEverything:
    """Admits every waiting request and decodes every running one, whatever the free KV."""

    def __init__(self, cfg, model):
        pass

    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return None

    def next_batch(self, state):
        waiting = list(state.waiting)
        items = [(r, 1) for r in state.running] + [(r, r.prompt_tokens) for r in waiting]
        return make_batch(items, admitted=waiting)
'''


def test_a_batch_over_the_free_kv_is_an_error_under_python_O_too(tmp_path):
    """The engine's check that a decision fits the free KV blocks was an assert: under ``python -O``
    (PYTHONOPTIMIZE) a plug-in's batch over the cache ran, exit 0, as if the cache held it."""
    (tmp_path / "kvhog.py").write_text(KV_HOG)
    script = textwrap.dedent('''
        import servesim
        from servesim.errors import PluginError
        from tests.conftest import make_scenario
        sc = make_scenario(**{"policy.name": "kvhog:AdmitsEverything", "memory.num_gpu_blocks": 40,
                              "workload.arrival.rate_rps": 1000.0, "workload.num_requests": 20})
        try:
            res = servesim.simulate(sc)
        except PluginError as e:
            print("PluginError:", e)
        else:
            print("ran:", res.summary["completed"], "completed")
    ''')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    for flags in ([], ["-O"]):
        out = subprocess.run([sys.executable, *flags, "-c", script], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("PluginError:") and "more KV than is free" in out.stdout, (flags, out.stdout)


def test_a_plugin_whose_constructor_raises_is_named_with_its_line_not_called_no_policy(tmp_path, monkeypatch):
    """A bug in a plug-in's __init__ was reported as "'m:C' is no policy: making one with it raised
    ValueError: ...", with no line: as if the class were not a policy at all. A callable of the
    wrong kind (os:system, a class taking other arguments) is still "no policy"."""
    (tmp_path / "ctor_bugs.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass

        from servesim import ContinuousPolicy


        @dataclass(frozen=True)
        class CheckedPolicy(ContinuousPolicy):
            def __post_init__(self):
                raise ValueError("my check")


        class Router:
            def __init__(self, rng):
                self.table = {}["missing"]

            def __call__(self, replicas, request):
                return 0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    where = rf"\({re.escape(str(tmp_path / 'ctor_bugs.py'))}, line"
    with pytest.raises(InputError, match=r"policy.name: 'ctor_bugs:CheckedPolicy': making the policy raised "
                                         rf"ValueError: 'my check' {where} 10\)"):
        simulate(make_scenario(**{"policy.name": "ctor_bugs:CheckedPolicy"}))
    with pytest.raises(InputError, match=rf"cluster.router: 'ctor_bugs:Router': making the router raised KeyError: "
                                         rf".*missing.* {where} 15\)"):
        simulate(make_scenario(**{"cluster.replicas": 2, "cluster.router": "ctor_bugs:Router"}))
    for field, name in (("policy.name", "os:system"), ("cluster.router", "json:loads"),
                        ("policy.name", "ctor_bugs:Router")):
        with pytest.raises(InputError, match=f"{field}: '{name}' is no (policy|router): making one with it raised"):
            simulate(make_scenario(**{"cluster.replicas": 2, field: name}))


HAND_MADE = '''
from dataclasses import dataclass

from servesim import Batch, ContinuousPolicy
from servesim.policies.static import StaticPolicy


@dataclass(frozen=True)
class HandMade(ContinuousPolicy):
    """Continuous batching's decisions, rebuilt as Batch(...) without make_batch's counts."""

    def next_batch(self, state):
        b = super().next_batch(state)
        return Batch(items=b.items, preempted=b.preempted, admitted=b.admitted, num_seqs=b.num_seqs,
                     set_seqs=b.set_seqs)


@dataclass(frozen=True)
class Same(ContinuousPolicy):
    pass


@dataclass(frozen=True)
class Chunked(ContinuousPolicy):
    chunked: bool = True


class Static(StaticPolicy):
    pass
'''


def test_a_hand_made_batch_without_its_counts_is_named_not_run_as_free_steps(tmp_path, monkeypatch):
    """A Batch built by hand (servesim exports Batch) kept its counts at 0: every step was priced as
    an empty one, and the run finished, exit 0, with TPOT 0 ms. The plug-ins that build batches
    as the packaged policies do (preemptions, static batching, chunked, a P/D decode pool)
    run as before."""
    from servesim.errors import PluginError

    (tmp_path / "handmade.py").write_text(HAND_MADE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"policy handmade:HandMade: its Batch counts \d+ sequences and 0 tokens "
                                          r"while its items \(and decode set\) hold \d+ and [1-9]\d*; build it with "
                                          r"servesim.make_batch"):
        simulate(make_scenario(**{"policy.name": "handmade:HandMade", "workload.num_requests": 5}))
    fast = {"workload.num_requests": 30, "workload.arrival.rate_rps": 50.0}
    for kw in ({"policy.name": "handmade:Same", "policy.prefix_caching": True},
               {"policy.name": "handmade:Same", "memory.num_gpu_blocks": 60, "policy.preemption": "swap"},
               {"policy.name": "handmade:Chunked", "policy.max_num_batched_tokens": 256},
               {"policy.name": "handmade:Static"},
               {"policy.name": "pd_split", "policy.decode.policy": "handmade:Same"}):
        res = simulate(make_scenario(**{**fast, **kw}))
        assert res.summary["completed"] == 30, kw
        packaged = {**kw, "policy.name": {"handmade:Chunked": "chunked_prefill", "handmade:Static": "static"}.get(
            kw["policy.name"], "continuous" if kw["policy.name"] != "pd_split" else "pd_split")}
        packaged.pop("policy.decode.policy", None)
        ref = simulate(make_scenario(**{**fast, **packaged}))
        assert res.summary["ttft_s"] == ref.summary["ttft_s"] and res.summary["tpot_s"] == ref.summary["tpot_s"], kw


UNDER_LOAD = '''
from servesim.policies.continuous import ContinuousPolicy


class BreaksUnderLoad(ContinuousPolicy):
    """fine with a few requests waiting; raises past 50 (a run that never queues so many never sees it)"""
    def next_batch(self, state):
        if len(state.waiting) > 50:
            raise ValueError("too many")
        return ContinuousPolicy.next_batch(self, state)
'''


SPF = "policy.name=shortest_prompt_first:ShortestPromptFirst"


@pytest.mark.parametrize("sets, good, says", [
    (["policy.name=badplugins:Raises"], [SPF], r"policy badplugins:Raises: next_batch raised ValueError: my bug \(.*"
     r"badplugins.py, line \d+\) \(validate's dry run of the workload's first 200"),
    (["policy.name=badplugins:ReturnsNone"], [SPF], "policy badplugins:ReturnsNone: next_batch returned None"),
    (["policy.name=badplugins:PastThePrompt"], [SPF], "policy badplugins:PastThePrompt: schedules"),
    (["cluster.replicas=2", "cluster.router=badplugins:RouterRaises"],
     ["cluster.replicas=2", "cluster.router=long_prompts_apart:LongPromptsApart"],
     "router badplugins:RouterRaises: its call raised KeyError"),
    # (a closed loop: its lengths drawn as the run draws them)
    (["policy.name=badplugins:Raises", "workload.arrival={process: closed_loop, clients: 4, think_time_s: 0.1}"],
     [SPF, "workload.arrival={process: closed_loop, clients: 4, think_time_s: 0.1}"],
     "policy badplugins:Raises: next_batch raised ValueError"),
])
def test_validate_runs_a_plugin_policy_or_router_on_a_few_requests(tmp_path, monkeypatch, capsys, sets, good, says):
    """validate built a plug-in policy and asked its admission_error, but never its next_batch: a
    policy whose next_batch raised or returned no batch (a router that raised) was 'ok', exit 0,
    and the run then failed on its first step. A plug-in that keeps its contract is still ok."""
    from servesim.cli.main import main

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    (tmp_path / "long_prompts_apart.py").write_text(
        "class LongPromptsApart:\n    reads_state = False\n\n    def __init__(self, rng):\n        pass\n\n"
        "    def __call__(self, replicas, request):\n        return 0 if request.prompt_tokens > 2048 else 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    scenario = str(ROOT / "scenarios" / "default.yaml")
    for given, rc in ((sets, 2), (good, 0)):
        args = [x for s in given for x in ("--set", s)]
        assert main(["validate", *args, "--set", "workload.num_requests=200", scenario]) == rc
        out, err = capsys.readouterr()
        if rc == 0:
            assert ": ok (" in out and not err, err
            continue
        assert ": ok (" not in out, out
        assert re.match(f"servesim: error: {re.escape(scenario)}: {says}", err), err
        assert "Traceback" not in err


AT_50TH = '''
from servesim.policies.continuous import ContinuousPolicy


class Router50:
    """routes round robin; its 50th call raises"""
    reads_state = False

    def __init__(self, rng):
        self.calls = 0

    def __call__(self, replicas, request):
        self.calls += 1
        if self.calls == 50:
            raise ValueError("my 50th call")
        return self.calls % len(replicas)


class Policy50(ContinuousPolicy):
    """continuous batching; the 50th next_batch of a replica raises"""
    def next_batch(self, state):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 50:
            raise ValueError("my 50th call")
        return ContinuousPolicy.next_batch(self, state)
'''


@pytest.mark.parametrize("sets, says", [
    (["cluster.replicas=2", "cluster.router=at50:Router50"], "router at50:Router50: its call raised ValueError"),
    (["policy.name=at50:Policy50"], "policy at50:Policy50: next_batch raised ValueError"),
])
def test_validate_dry_run_reaches_a_plugins_50th_call(tmp_path, monkeypatch, capsys, sets, says):
    """validate's dry run ran the workload's first 8 requests: a router that broke on its 50th
    call (a policy on its 50th step, which the few steps of 8 requests never reach) was 'ok',
    exit 0, and the run stopped on it. The dry run now runs the first 200: the error, exit 2."""
    from servesim.cli.main import main

    (tmp_path / "at50.py").write_text(AT_50TH)
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = str(ROOT / "scenarios" / "default.yaml")
    args = [x for s in sets for x in ("--set", s)]
    assert main(["validate", *args, "--set", "workload.num_requests=300", scenario]) == 2
    out, err = capsys.readouterr()
    assert ": ok (" not in out and "Traceback" not in err
    assert re.match(f"servesim: error: {re.escape(scenario)}: {says}: my 50th call .*\\(validate's dry run of the "
                    "workload's first 200 requests\\)", err), err


def test_validate_warns_of_a_plugin_that_breaks_only_in_its_load_probe(tmp_path, monkeypatch, capsys):
    """A plug-in that broke only when many requests waited (validate's overload probe runs the
    workload's first requests at once) was silent: the probe's PluginError was taken as 'cannot
    tell'. The dry run passes (a few requests), the probe's failure is a warning naming it."""
    from servesim.cli.main import main

    (tmp_path / "loadplugins.py").write_text(UNDER_LOAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = str(ROOT / "scenarios" / "default.yaml")
    assert main(["validate", "--set", "policy.name=loadplugins:BreaksUnderLoad", scenario]) == 0
    out = capsys.readouterr().out
    assert ": ok (" in out
    assert re.search(r"warning: policy loadplugins:BreaksUnderLoad: next_batch raised ValueError: too many .*"
                     r"\(in validate's load probe: the workload's first 1,000 requests at once on one replica; a run "
                     r"that loads it so stops there\)", out), out


def test_validate_fails_as_the_run_on_a_plugin_that_breaks_in_the_replay_of_the_run(tmp_path, monkeypatch,
                                                                                     capsys):
    """A workload.duration_s cut-off beside a queue rule: validate replays the run itself with its
    rules to count the requests left unfinished, and a plug-in that broke there (many requests
    waiting, past its dry run's 200) was a warning, exit 0, while servesim run failed on it, exit
    2. The replay is the run: validate fails as the run does, with the same error, naming the
    replay."""
    from servesim.cli.main import main

    (tmp_path / "loadplugins.py").write_text(UNDER_LOAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = str(ROOT / "scenarios" / "default.yaml")
    sets = [x for v in ["policy.name=loadplugins:BreaksUnderLoad", "workload.num_requests=null",
                        "workload.duration_s=60", "workload.arrival.rate_rps=16", "policy.max_num_seqs=32",
                        "policy.admission.max_queue=80"] for x in ("--set", v)]
    assert main(["run", *sets, "--quiet", "--out", str(tmp_path / "run"), scenario]) == 2
    run_err = capsys.readouterr().err
    says = "policy loadplugins:BreaksUnderLoad: next_batch raised ValueError: too many"
    assert f"{scenario}: {says}" in run_err, run_err
    assert main(["validate", *sets, scenario]) == 2
    out, err = capsys.readouterr()
    assert ": ok (" not in out and "Traceback" not in err
    assert err.startswith(run_err.rstrip("\n")), (err, run_err)
    # the error names what raised it: the replay of the run itself, not "validate's load probe"
    assert ("(in validate's replay of the run itself (the workload as drawn, with policy.admission's rules and "
            "workload.duration_s): the run stops there too)") in err and "load probe" not in err, err


OVER_BUDGET = '''
from servesim import make_batch
from servesim.policies.static import StaticPolicy


class EveryoneAtOnce:
    """Admits every waiting prompt whole and decodes every running request, whatever the budgets."""

    def __init__(self, cfg, model):
        pass

    def admission_error(self, prompt_tokens, max_tokens, kv=None):
        return None

    def next_batch(self, state):
        waiting, landed = list(state.waiting), list(state.landed)  # (landed: on a P/D decode replica)
        items = [(r, 1) for r in state.running + landed] + [(r, r.prompt_tokens) for r in waiting]
        return make_batch(items, admitted=landed + waiting)


class MyStatic(StaticPolicy):
    """static batching as a plug-in: its prefill runs a whole batch past the token budget"""
'''


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("sets, says", [
    ({"policy.max_num_batched_tokens": 600, "workload.arrival.rate_rps": 1000.0},
     r"policy overbudget:EveryoneAtOnce: schedules [\d,]+ tokens in one step, over "
     r"policy.max_num_batched_tokens=600; a step holds at most that many"),
    ({"policy.max_num_seqs": 4, "workload.arrival.rate_rps": 1000.0},
     r"policy overbudget:EveryoneAtOnce: schedules \d+ sequences in one step, over policy.max_num_seqs=4"),
    ({"policy.name": "pd_split", "policy.decode.policy": "overbudget:EveryoneAtOnce", "policy.decode.max_num_seqs": 3,
      "workload.arrival.rate_rps": 1000.0},
     r"policy overbudget:EveryoneAtOnce: schedules \d+ sequences in one step, over the decode pool's max_num_seqs=3"),
])
def test_a_plugin_step_over_the_budget_is_refused_on_both_engines(tmp_path, monkeypatch, capsys, engine, sets, says):
    """A plug-in that scheduled more tokens than max_num_batched_tokens (more sequences than
    max_num_seqs) in a step ran, exit 0, priced as a step the deployment cannot run (its KV cache
    sized with an activation reserve for the budget): the engine refuses it, naming the budget,
    on the fast and the reference engine alike."""
    from servesim.cli.main import main
    from servesim.errors import PluginError

    (tmp_path / "overbudget.py").write_text(OVER_BUDGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    kw = {"policy.name": "overbudget:EveryoneAtOnce", "workload.num_requests": 20, "engine": engine, **sets}
    with pytest.raises(PluginError, match=says):
        simulate(make_scenario(**kw))
    args = [x for k, v in kw.items() for x in ("--set", f"{k}={v}")]
    assert main(["run", *args, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.match(f"servesim: error: .*: {says}", err) and "Traceback" not in err, err


def test_a_plugin_within_its_budget_and_static_batching_as_a_plugin_run(tmp_path, monkeypatch):
    """The budget check refuses only steps over it: the same plug-in under budgets its steps keep
    runs, and a StaticPolicy subclass (whose prefill runs its whole batch past the token budget, as
    static batching does) is held to max_num_seqs only."""
    (tmp_path / "overbudget.py").write_text(OVER_BUDGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = simulate(make_scenario(**{"policy.name": "overbudget:EveryoneAtOnce", "workload.num_requests": 20,
                                    "workload.arrival.rate_rps": 0.5}))
    assert res.summary["completed"] == 20
    kw = {"workload.num_requests": 20, "workload.arrival.rate_rps": 1000.0, "policy.max_num_batched_tokens": 600,
          "policy.max_num_seqs": 8}
    mine = simulate(make_scenario(**{"policy.name": "overbudget:MyStatic", **kw}))
    packaged = simulate(make_scenario(**{"policy.name": "static", **kw}))
    assert mine.summary["completed"] == packaged.summary["completed"] == 20
    assert mine.steps["prefill_tokens"].max() > 600  # (past the token budget, as static's)


@pytest.mark.parametrize("sets, says", [
    # a ContinuousPolicy subclass with its own queue_key: the scenario's order was silently not the run's
    ({"policy.name": "shortest_prompt_first:ShortestPromptFirst", "policy.queue.order": "edf"},
     r"policy.queue.order=edf changes nothing with policy.name=shortest_prompt_first:ShortestPromptFirst: the "
     r"plug-in orders its waiting queue itself, with its own queue_key \(ShortestPromptFirst.queue_key\)"),
    # one written from scratch, no queue_key (first come, first served); on a P/D pool
    ({"policy.name": "pd_split", "policy.prefill.policy": "badplugins:WaitingOnly", "policy.queue.order": "sjf",
      "policy.queue.aging_s": 2.0},
     r"policy.queue.order=sjf and policy.queue.aging_s=2 change nothing with "
     r"policy.prefill.policy=badplugins:WaitingOnly: .* with no queue_key: first come, first served"),
])
def test_a_queue_order_a_plugin_does_not_follow_is_a_no_effect_warning(tmp_path, monkeypatch, capsys, sets, says):
    """The policy owns its queue order (its queue_key), but a scenario's policy.queue.order given
    beside a plug-in that orders its queue otherwise was silently not the order the run used (no
    no_effect: nothing was said of a plug-in): run and validate say it. A subclass that keeps
    ContinuousPolicy's queue_key follows the order: nothing is said."""
    from servesim.cli.main import main

    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    res = simulate(make_scenario(**{"workload.num_requests": 5, **sets}))
    noted = [w["message"] for w in res.summary["warnings"] if w["code"] == "no_effect"]
    assert any(re.match(says, m) for m in noted), noted
    args = [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    assert main(["validate", *args, str(ROOT / "scenarios" / "default.yaml")]) == 0
    assert re.search("warning: " + says, capsys.readouterr().out)
    (tmp_path / "keeps.py").write_text("from servesim import ContinuousPolicy\n\n\n"
                                       "class KeepsTheOrder(ContinuousPolicy):\n    pass\n")
    follows = simulate(make_scenario(**{"workload.num_requests": 5, "policy.name": "keeps:KeepsTheOrder",
                                        "policy.queue.order": "sjf", "policy.queue.aging_s": 2.0}))
    assert not [w for w in follows.summary["warnings"] if "queue" in w["message"]], follows.summary["warnings"]


@pytest.fixture
def installed_plugins(tmp_path, monkeypatch):
    """A distribution on the path registering policies (one under a packaged name) and a router
    under a packaged name, as `pip install` of a plug-in package would."""
    from servesim import plugins

    dist = tmp_path / "myplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[servesim.policies]\ncontinuous = shortest_prompt_first:ShortestPromptFirst\n"
        "spf = shortest_prompt_first:ShortestPromptFirst\n\n"
        "[servesim.routers]\nround_robin = badplugins:MinusOne\n")
    (tmp_path / "badplugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    plugins._entry_points.cache_clear()
    yield
    plugins._entry_points.cache_clear()


def test_an_entry_point_under_a_packaged_name_is_named_not_silently_passed_over(installed_plugins, capsys):
    """A distribution registering 'continuous' (or the router 'round_robin'): the name ran
    servesim's own and nothing said that the plug-in installed under it never ran. It still runs
    servesim's (a plain name means what the docs say), with a plugin_shadowed warning in run
    and validate naming the plug-in's module:Class; a plug-in under a name of its own runs, and
    says nothing."""
    from servesim.cli.main import main

    res = simulate(make_scenario(**{"workload.num_requests": 5}))
    shadow = [w["message"] for w in res.summary["warnings"] if w["code"] == "plugin_shadowed"]
    assert len(shadow) == 2, res.summary["warnings"]
    assert shadow[0].startswith("policy.name: 'continuous' is servesim's own policy, and the distribution 'myplug' "
                                "also registers a plug-in of that name (shortest_prompt_first:ShortestPromptFirst")
    assert "the run uses servesim's continuous; to run the plug-in, name it as shortest_prompt_first:" in shadow[0]
    assert shadow[1].startswith("cluster.router: 'round_robin' is servesim's own router") and "badplugins:MinusOne" \
        in shadow[1]
    assert res.summary["completed"] == 5  # (servesim's round robin: the plug-in's -1 would have been an error)
    assert main(["validate", "--set", "policy.name=continuous", str(ROOT / "scenarios" / "default.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning: policy.name: 'continuous' is servesim's own policy" in out
    own = simulate(make_scenario(**{"workload.num_requests": 5, "policy.name": "spf"}))
    assert not [w for w in own.summary["warnings"] if w["code"] == "plugin_shadowed" and "policy" in w["message"]]


DECLARES = '''
from dataclasses import dataclass

from servesim import ContinuousPolicy


@dataclass(frozen=True)
class SjfByDefault(ContinuousPolicy):
    queue_order: str = "sjf"


class SjfAsAttribute(ContinuousPolicy):  # (no @dataclass: a plain class attribute)
    queue_order = "sjf"


@dataclass(frozen=True)
class KeepsRoom(ContinuousPolicy):
    watermark: float = 0.01
    max_num_seqs: int = 1  # (the deployment's: the scenario's budgets win)
'''


@pytest.mark.parametrize("name", ["declares:SjfByDefault", "declares:SjfAsAttribute"])
def test_a_subclass_keeps_the_queue_order_it_declares(tmp_path, monkeypatch, name):
    """A ContinuousPolicy subclass declaring queue_order = "sjf" ran FCFS, silently: from_config
    passed the scenario's policy.queue.order (its default, fcfs) over it. The policy owns its
    queue order: it runs as the packaged sjf order does, request for request."""
    (tmp_path / "declares.py").write_text(DECLARES)
    monkeypatch.syspath_prepend(str(tmp_path))
    kw = {"workload.num_requests": 60, "workload.arrival.rate_rps": 200.0, "policy.max_num_seqs": 4}
    mine = simulate(make_scenario(**{"policy.name": name, **kw}))
    sjf = simulate(make_scenario(**{"policy.queue.order": "sjf", **kw}))
    fcfs = simulate(make_scenario(**kw))
    assert np.array_equal(mine.requests["first_token_s"], sjf.requests["first_token_s"])
    # (the order changes the run)
    assert not np.array_equal(mine.requests["first_token_s"], fcfs.requests["first_token_s"])


def test_a_policy_field_a_subclass_declares_is_kept_and_a_given_one_named(tmp_path, monkeypatch):
    """A subclass's own watermark is kept; the scenario's budgets are the deployment's (its KV cache
    is sized for them) and win; a policy.watermark given beside it is a no_effect warning."""
    from servesim.simulation import prepare

    (tmp_path / "declares.py").write_text(DECLARES)
    monkeypatch.syspath_prepend(str(tmp_path))
    sc = make_scenario(**{"policy.name": "declares:KeepsRoom", "workload.num_requests": 5,
                          "policy.watermark": 0.05})
    policy = prepare(sc).pools[0].make_policy()
    assert (policy.watermark, policy.max_num_seqs) == (0.01, 256)
    noted = [w["message"] for w in simulate(sc).summary["warnings"] if w["code"] == "no_effect"]
    assert noted == ["policy.watermark=0.05 changes nothing with policy.name=declares:KeepsRoom: the plug-in "
                     "declares its own watermark = 0.01, which it keeps; the run is the one without it"], noted


@pytest.mark.parametrize("typo", ["pd_splt", "pd-split"])
def test_a_misspelled_policy_name_suggests_and_lists_pd_split(typo):
    """policy.name takes pd_split, yet its error listed only chunked_prefill, continuous and static,
    so a misspelling of pd_split got no 'did you mean' and the valid names left it out."""
    with pytest.raises(InputError) as e:
        make_scenario(**{"policy.name": typo})
    msg = str(e.value)
    assert "policy.name:" in msg and "(did you mean 'pd_split'?)" in msg
    assert "valid: chunked_prefill, continuous, pd_split, static" in msg


@pytest.mark.parametrize("typo", ["pd_splt", "statc"])
def test_a_pool_policy_is_offered_only_what_a_pool_runs(typo):
    """A P/D pool's replicas take requests one step at a time: a misspelled pool policy is offered
    neither pd_split nor static ('statc' was answered "did you mean 'static'?", which the pool
    then refuses)."""
    with pytest.raises(InputError) as e:
        make_scenario(**{"policy.name": "pd_split", "policy.prefill.policy": typo})
    msg = str(e.value)
    assert "policy.prefill.policy:" in msg and "valid: chunked_prefill, continuous (or module:Class)" in msg
    assert "did you mean" not in msg
