"""``simulate(scenario) -> Results``: the one entry point for the CLI and the Python API."""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from policies import POLICIES
from sim.cost import CostModel
from sim.errors import InputError
from sim.kv_cache import GIB, BlockAllocator, KvCapacity, activation_reserve_bytes, size_kv
from sim.clients import drive_closed_loop
from sim.metrics import REQUEST_COLUMNS, STEP_COLUMNS, Recorder, summarize, summarize_classes
from sim.replica import Replica
from sim.request import Request
from sim.router import ROUTERS
from sim.scenario import Scenario, scenario_to_yaml
from sim.specs import get_gpu, get_model
from sim.workload import ClosedLoop, RequestSpecs, generate


@dataclass(frozen=True)
class Setup:
    """Everything resolved from a scenario before the run (what ``servesim validate`` checks)."""

    scenario: Scenario
    cost_model: CostModel
    capacity: KvCapacity

    def make_policy(self):
        return POLICIES[self.scenario.policy.name](self.scenario.policy)


def prepare(scenario: Scenario) -> Setup:
    model = get_model(scenario.model)
    hw = scenario.hardware
    gpu = get_gpu(hw.gpu)
    if model.num_layers < hw.pp:
        raise InputError(f"hardware.pp={hw.pp} exceeds the model's {model.num_layers} layers")
    if model.num_heads % hw.tp:
        raise InputError(f"hardware.tp={hw.tp} must divide the model's {model.num_heads} attention heads")
    cm = CostModel(model, gpu, hw.tp, hw.pp, hw.dtype, hw.kv_dtype or hw.dtype,
                   scenario.cost.step_overhead_s, scenario.cost.per_seq_overhead_s)
    mem = scenario.memory
    if mem.activation_reserve_gib is not None:
        reserve = mem.activation_reserve_gib * GIB
    else:
        reserve = activation_reserve_bytes(model, hw.tp, scenario.policy.max_num_batched_tokens,
                                           scenario.policy.max_num_seqs)
    cap = size_kv(cm, mem.gpu_memory_utilization, mem.block_size, reserve, mem.num_gpu_blocks)
    return Setup(scenario, cm, cap)


@dataclass
class Results:
    scenario: Scenario
    summary: dict
    requests: dict  # column -> numpy array (REQUEST_COLUMNS)
    steps: dict  # column -> numpy array
    tbt_s: np.ndarray
    kv_blocks_in_use: list  # per replica, at the end of the run (0 when every request ended)
    queue_samples: list  # (time_s, replica, waiting, running) when sampling was asked for

    def write(self, out_dir: str | Path) -> Path:
        """Write summary.json, requests.csv, steps.csv and scenario.yaml (the output contract)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        (out / "scenario.yaml").write_text(scenario_to_yaml(self.scenario))
        _write_csv(out / "requests.csv", REQUEST_COLUMNS, [self.requests[c] for c in REQUEST_COLUMNS])
        st = self.steps
        bound = np.where(st["compute_bound"], "compute", "memory")
        cols = [st[c] if c != "bound" else bound for c in STEP_COLUMNS]
        _write_csv(out / "steps.csv", STEP_COLUMNS, cols)
        return out


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else repr(float(v))
    return str(v)


def _write_csv(path: Path, header, columns) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        lists = [c.tolist() for c in columns]
        for row in zip(*lists):
            w.writerow([_fmt(v) for v in row])


def _classes(scenario: Scenario, specs, req_cols: dict):
    """Add the ``class`` column; return (class names, name -> (ttft_s, tpot_s) SLO, per-request
    SLO limit arrays or None when every request has the scenario's SLO)."""
    names = tuple(getattr(specs, "class_names", ("default",)))
    index = getattr(specs, "class_index", None)
    ids = req_cols["request_id"]
    idx = index[ids] if index is not None and len(ids) else np.zeros(len(ids), np.int64)
    req_cols["class"] = np.array(names, dtype=object)[idx] if len(ids) else np.zeros(0, dtype=object)
    slo = scenario.slo
    classes = scenario.workload.classes or ()
    by_name = {c.name: c for c in classes}
    slo_by_class = {}
    for name in names:
        c = by_name.get(name)
        slo_by_class[name] = (c.slo.ttft_s if c is not None and c.slo.ttft_s is not None else slo.ttft_s,
                              c.slo.tpot_s if c is not None and c.slo.tpot_s is not None else slo.tpot_s)
    if all(v == (slo.ttft_s, slo.tpot_s) for v in slo_by_class.values()):
        return names, slo_by_class, None
    inf = lambda v: np.inf if v is None else v  # noqa: E731
    ttft = np.array([inf(slo_by_class[n][0]) for n in names])[idx]
    tpot = np.array([inf(slo_by_class[n][1]) for n in names])[idx]
    return names, slo_by_class, (ttft, tpot)


def simulate(scenario: Scenario, progress=None, specs: RequestSpecs | None = None,
             sample_every_s: float | None = None) -> Results:
    """Run a scenario to the end (every request finished, or ``workload.duration_s``).

    ``progress(done, total, now_s)`` is called as requests complete (for a progress bar);
    ``specs`` replaces the generated workload (tests use it for hand-made requests);
    ``sample_every_s`` records (time, replica, waiting, running) every so often in
    ``Results.queue_samples`` (an independent observer of the queues, used to check Little's law).
    """
    wall0 = time.perf_counter()
    setup = prepare(scenario)
    rng = np.random.default_rng(scenario.seed)
    if specs is None:
        specs = generate(scenario.workload, rng, setup.cost_model.model.max_context_tokens)
    total = len(specs)
    env = simpy.Environment()
    cb = None
    if progress is not None:
        def cb(_req):
            progress(rec.completed, total, env.now)
    rec = Recorder(cb)
    cm, cap = setup.cost_model, setup.capacity
    replicas = [
        Replica(env, i, setup.make_policy(), cm, BlockAllocator(cap.num_blocks, cap.block_size), rec,
                cm.model.max_context_tokens)
        for i in range(scenario.cluster.replicas)
    ]
    route = ROUTERS[scenario.cluster.router]()

    def submit(req):
        rec.arrive(req)
        replicas[route(replicas, req)].submit(req)

    def arrivals():
        arr, pr, out = specs.arrival_s.tolist(), specs.prompt_tokens.tolist(), specs.output_tokens.tolist()
        for i in range(total):
            delay = arr[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            req = Request(i, arr[i], pr[i], out[i])
            rec.arrive(req)
            replicas[route(replicas, req)].submit(req)

    if isinstance(specs, ClosedLoop):
        drive_closed_loop(env, specs, submit, rec)
    else:
        env.process(arrivals())
    samples = []
    if sample_every_s is not None:
        def observe():
            while rec.completed + rec.rejected < len(specs):
                for r in replicas:
                    samples.append((env.now, r.index, len(r.waiting), len(r.running)))
                yield env.timeout(sample_every_s)

        env.process(observe())
    until = scenario.workload.duration_s
    env.run(until=until)
    sim_time = float(until) if until is not None else float(env.now)
    for r in rec.requests:
        if r.status == "pending":
            r.status = "unfinished"
    req_cols = rec.request_columns()
    names, slo_by_class, limits = _classes(scenario, specs, req_cols)
    steps = rec.step_columns()
    tbt = np.frombuffer(rec.tbt) if len(rec.tbt) else np.zeros(0)
    summary = summarize(scenario, req_cols, steps, tbt, sim_time, 0.0, cm.peak_flops * cm.num_gpus,
                        cm.gpu.mem_bw_bytes_per_s * cm.num_gpus, len(replicas), cap.num_blocks, limits)
    summary["kv_capacity"] = {"blocks_per_replica": cap.num_blocks, "block_size": cap.block_size,
                              "tokens_per_replica": cap.num_tokens,
                              "kv_pool_gib_per_gpu": cap.kv_pool_bytes / GIB}
    clipped = getattr(specs, "clipped", None)
    summary["workload"] = {"clipped_requests": int(clipped[req_cols["request_id"]].sum()) if clipped is not None else 0}
    summary["classes"] = summarize_classes(req_cols, sim_time, names, slo_by_class)
    summary["wall_time_s"] = time.perf_counter() - wall0
    return Results(scenario, summary, req_cols, steps, tbt, [r.kv.num_used for r in replicas], samples)
