"""Simulator speed (issue 8): process wall time of ``servesim run`` through the CLI, writing the
output files included, split into simulating and writing; peak RSS; simulated requests and steps
per wall-second. Each case is a fresh ``servesim run`` process (``bench/timed_cli.py``: the
console script's ``main`` with the write timed), on a scenario file in a temporary folder, the
outputs written there and removed after.

Workload: conversation-trace-shaped lengths, lognormal fitted to prompt mean 1,155 / p99 4,142
and output mean 211 / p99 601 tokens (sigma solved from mean and p99 below), clipped to the
model's context; Llama-2-7B on one H100 per replica; Poisson arrivals.

  (a) 50,000 requests at 9 req/s, 1 replica, continuous batching
  (b) the same with chunked prefill (token budget 512)
  (c) 1,000,000 requests over 16 replicas (round robin) at 70% of their capacity
  (d) P/D split, 4 prefill + 12 decode replicas, 200,000 requests at 70% of the capacity of the
      decode pool (12 colocated replicas' capacity is the reference)
  scale: the (c) configuration at 10k / 100k / 1M requests (cost grows linearly)

Capacity (for c, d, scale) is measured by a saturation probe, as in ``bench/engine.py``: 2,000
requests offered far above what one replica serves; completed requests per second is the capacity.

Run it on one core:  taskset -c 0 python bench/speed.py [--cases a,b,c,d,scale]
                     [--engine fast|reference] [--outputs NAME,...] [--format csv|parquet]
                     [--repeat N] [--json bench/results.json] [--write-docs]

It first prints the machine: its CPU, Python and the time of a fixed pure-Python loop
(``python_reference_s``, recorded with every row): the same code's figures differ by machine
(1.8x between two of this project's sandboxes), so figures of two machines compare only after
scaling by their loops' times.

Figures are printed (``--repeat N``: the fastest of N runs of each case, every wall and CPU
time listed, and each phase's least CPU time of the N runs); ``--json FILE`` merges them into
FILE (``bench/results.json``: the record the docs' table comes from), ``--write-docs`` records
into it and rewrites the table.

servesim's modules are compiled to bytecode first (``warm_bytecode``), as an installed package has
them. Figures per case: ``wall_s`` the whole process (interpreter start, imports, simulating, printing
the summary, writing the files); ``simulate_s`` the summary's ``wall_time_s`` (``simulate()``:
the run, its columns and the summary); ``write_s`` ``Results.write``; ``other_s`` the rest;
``phases`` the process phase by phase ([wall s, CPU s] each: ``bench/timed_cli.py``'s list, and
``teardown``, the exit after ``main`` returned), printed under the case's line. Rows
without ``simulate_s`` in results.json were measured before this, as ``simulate()`` alone in a
child process (no CLI, no files written).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

Z99 = 2.3263478740408408  # standard normal 99th percentile


def sigma_from_mean_p99(mean: float, p99: float) -> float:
    """Lognormal sigma with the given mean and 99th percentile: ln(p99/mean) = z*s - s^2/2,
    the smaller root (the larger one puts most of the mass in a far tail)."""
    r = math.log(p99 / mean)
    return Z99 - math.sqrt(Z99 * Z99 - 2.0 * r)


PROMPT = {"dist": "lognormal", "mean": 1155.0, "sigma": sigma_from_mean_p99(1155.0, 4142.0)}
OUTPUT = {"dist": "lognormal", "mean": 211.0, "sigma": sigma_from_mean_p99(211.0, 601.0)}

BASE = {
    "name": "bench-speed",
    "seed": 0,
    "model": "meta-llama/Llama-2-7b-hf",
    "hardware": {"gpu": "h100-sxm"},
    "policy": {"name": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
    "workload": {"arrival": {"process": "poisson", "rate_rps": 9.0}, "prompt_tokens": PROMPT,
                 "output_tokens": OUTPUT, "clip_to_context": True},
}


def scenario_dict(case: str, num_requests: int, rate_rps: float, engine: str) -> dict:
    d = copy.deepcopy(BASE)
    d["workload"]["num_requests"] = num_requests
    d["workload"]["arrival"]["rate_rps"] = rate_rps
    d["engine"] = engine
    if case == "b":
        d["policy"] = {"name": "chunked_prefill", "max_num_seqs": 256, "max_num_batched_tokens": 512}
    elif case in ("c", "scale", "probe"):
        d["cluster"] = {"replicas": 16 if case != "probe" else 1, "router": "round_robin"}
    elif case == "d":
        d["policy"] = {"name": "pd_split", "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                       "prefill": {"replicas": 4}, "decode": {"replicas": 12}}
    return d


def run_cli(case, n, rate, engine, outputs=None, fmt="csv", tmp_root=None) -> dict:
    """One ``servesim run`` process on the case's scenario: its wall time, peak RSS (its own, from
    wait4) and the split reported by ``timed_cli``."""
    tmp = Path(tempfile.mkdtemp(prefix="servesim-bench-", dir=tmp_root))
    try:
        scenario = tmp / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(scenario_dict(case, n, rate, engine)))
        cmd = [sys.executable, str(ROOT / "bench" / "timed_cli.py"), "run", str(scenario), "--out", str(tmp / "out"),
               "--quiet", "--format", fmt] + (["--outputs", outputs] if outputs else [])
        env = dict(os.environ, SERVESIM_BENCH_SPAWN=repr(time.time()))
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        err = proc.stderr.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        exited = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"case {case}: servesim run exited {proc.returncode}:\n{err[-2000:]}")
        seen = json.loads(err.strip().splitlines()[-1])
        # the exit, after main returned: the interpreter's teardown (freeing, modules' finalization)
        seen["phases"]["teardown"] = [exited - seen["end_time"],
                                      usage.ru_utime + usage.ru_stime - seen["end_cpu_s"]]
        written = sum(f.stat().st_size for f in (tmp / "out").iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "case": case, "requests": n, "rate_rps": rate, "engine": engine, "outputs": outputs or "all", "format": fmt,
        "wall_s": wall, "simulate_s": seen["simulate_s"], "write_s": seen["write_s"],
        "other_s": wall - seen["simulate_s"] - seen["write_s"], "output_mib": written / 2**20,
        "sim_requests_per_wall_s": n / wall, "steps": seen["steps"], "steps_per_wall_s": seen["steps"] / wall,
        "completed": seen["completed"], "rejected": seen["rejected"], "busy_fraction": seen["busy_fraction"],
        "mean_batch_size": seen["mean_batch_size"],
        "peak_rss_mib": usage.ru_maxrss / 1024,  # (KiB on Linux)
        # the process's CPU time (user + system): on a shared machine the figure wall time would
        # be on an idle core
        "cpu_s": usage.ru_utime + usage.ru_stime,
        # of it, the kernel's: mostly memory touched for the first time (the columns, the output
        # files' page cache), which costs ~2-3 s a GiB on a virtual machine whose host backs
        # guest memory on first touch
        "sys_s": usage.ru_stime,
        # the process phase by phase, [wall s, CPU s] each (``timed_cli``; ``teardown`` from here)
        "phases": seen["phases"], "sha256": seen.get("sha256"), "os_write": seen.get("os_write"),
    }


def capacity_rps(engine: str) -> float:
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    res = simulate(scenario_from_dict(scenario_dict("probe", 2000, 1000.0, engine)))
    return res.summary["throughput_rps"]


def docs_table(results: dict) -> str:
    rows = ["| case | requests | engine | wall (s) | CPU (s) | of it system (s) | simulate (s) | write (s) "
            "| sim req / wall s | sim steps / wall s | peak RSS (MiB) |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    opt = lambda r, k: f"{r[k]:.1f}" if r.get(k) is not None else "-"  # noqa: E731 (older rows lack some)
    for key, r in results.items():
        if not isinstance(r, dict) or "requests" not in r or "wall_s" not in r or key.endswith("_before"):
            continue
        rows.append(f"| {key} | {r['requests']:,} | {r['engine']} | {r['wall_s']:.1f} | {opt(r, 'cpu_s')} | "
                    f"{opt(r, 'sys_s')} | {opt(r, 'simulate_s')} | {opt(r, 'write_s')} | "
                    f"{r['sim_requests_per_wall_s']:,.0f} | {r['steps_per_wall_s']:,.0f} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(rows)


BEGIN, END = "<!-- speed-table:begin -->", "<!-- speed-table:end -->"


def write_docs(results: dict) -> None:
    """The table between the speed-table markers of docs/performance.md."""
    path = ROOT / "docs" / "performance.md"
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to replace")
    block = f"{BEGIN}\n{docs_table(results)}\n{END}"
    path.write_text(text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):])


def warm_bytecode() -> None:
    """Compile servesim's modules to bytecode once, as an installed package has them (pip writes
    them at install; an editable install on first import, unless ``PYTHONDONTWRITEBYTECODE`` is
    set, as in some sandboxes): each measured process then loads them rather than compiling a
    hundred modules (~0.1 s of its start-up)."""
    import compileall

    import servesim
    import servesim.plots
    import servesim.policies

    for pkg in (servesim, servesim.policies, servesim.plots):
        for d in pkg.__path__:
            compileall.compile_dir(d, quiet=1)


def cpu_model() -> str:
    """The CPU's name as the OS reports it (``/proc/cpuinfo`` on Linux), else ``platform``'s."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def python_reference_s(repeat: int = 3) -> float:
    """Seconds this machine's Python takes for a fixed loop of the kinds of work the engine does
    (integer arithmetic, dict stores, method calls, small lists), fastest of ``repeat``: the
    figures of two machines (or days) compare only after dividing by theirs. The same CPU
    time on one machine can be 1.8x on another (on 2026-12-05 the same code ran (a) in 4.9-5.4 s
    and (c) in 110 s instead of the recorded 2.8 s and 60 s: docs/performance.md)."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        d, acc, items = {}, 0, []
        app = items.append
        for i in range(3_000_000):
            d[i & 1023] = acc
            acc += (i * i) % 7
            app(i)
            if len(items) > 64:
                items.clear()
        best = min(best, time.perf_counter() - t0)
    return best


# issue 16's targets (process wall time through the CLI, one core; peak RSS): case -> (must, goal) wall
# seconds and the most peak RSS in MiB (None: none set). Printed with each case's figures, met or not.
TARGETS = {"a": (2.8, 1.4, None), "c": (60.0, None, 2048.0)}


def phases_line(r: dict) -> str | None:
    """The process of one case phase by phase (``timed_cli``'s phases and the teardown), CPU
    seconds with the wall seconds in brackets, in the order they ran; None for a row without them."""
    phases = r.get("phases")
    if not phases:
        return None
    cell = lambda w, c: f"{c:.3f}" + (f" [{w:.3f}]" if w is not None else "")  # noqa: E731
    parts = [f"{k} {cell(*v)}" for k, v in phases.items()]
    inside = [f"{k} {cell(*r[k])}" for k in ("sha256", "os_write") if r.get(k)]
    return ("    phases, CPU s [wall s]: " + ", ".join(parts)
            + (f" (of the CSV files' writing: {', '.join(inside)})" if inside else ""))


def fastest_phases(runs: list) -> dict | None:
    """Per phase, the least CPU seconds any of ``runs`` (``run_cli`` rows of one case) spent in it
    (on a shared machine each phase's noise is its own); None when a run lacks the phases."""
    if not runs or not all(x.get("phases") for x in runs):
        return None
    return {k: min(x["phases"][k][1] for x in runs) for k in runs[0]["phases"]}


def verdict(case: str, r: dict, reference_s: float) -> str | None:
    """The line saying whether a case's figures meet issue 16's targets on this machine (None for
    a case without targets, or a run of another engine or format than the targets name)."""
    if case not in TARGETS or r.get("engine") != "fast" or r.get("format") != "csv" or r.get("outputs") != "all":
        return None
    must, goal, rss = TARGETS[case]
    parts = [f"wall {r['wall_s']:.2f} s against <= {must:g} s: " + ("met" if r["wall_s"] <= must else "NOT MET")]
    if goal is not None:
        parts.append(f"goal <= {goal:g} s: " + ("met" if r["wall_s"] <= goal else "not met"))
    if rss is not None:
        parts.append(f"peak RSS {r['peak_rss_mib']:.0f} MiB against <= {rss:.0f} MiB: "
                     + ("met" if r["peak_rss_mib"] <= rss else "NOT MET"))
    return (f"    target ({case}), this machine (reference loop {reference_s:.3f} s; the targets are absolute, "
            "so a slower machine can miss what a faster one meets): " + "; ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="a,b,c,d,scale")
    ap.add_argument("--engine", default="fast", choices=["fast", "reference"])
    ap.add_argument("--outputs", help="servesim run --outputs (default: every file)")
    ap.add_argument("--format", default="csv", choices=["csv", "parquet"], help="servesim run --format")
    ap.add_argument("--tmp", help="folder for the scenario and outputs of each run (default: the system's)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each case this many times, one after the other, and keep the fastest (wall time; "
                         "every run's wall time is listed as walls_s): on a shared machine the others measure the "
                         "other work as much as servesim")
    ap.add_argument("--json", help="merge the figures into this file (bench/results.json is the record "
                    "docs/performance.md's table comes from; default: print only, so a look at the machine's "
                    "speed never overwrites it)")
    ap.add_argument("--write-docs", "--write-readme", dest="write_docs", action="store_true",
                    help="merge into --json (default bench/results.json) and update the table in "
                         "docs/performance.md from it")
    args = ap.parse_args()
    if args.json is None and args.write_docs:
        args.json = str(ROOT / "bench" / "results.json")
    path = Path(args.json) if args.json else None
    results = json.loads(path.read_text()) if path is not None and path.exists() else {}
    cases = args.cases.split(",")
    warm_bytecode()
    machine = {"cpu": cpu_model(), "python": sys.version.split()[0], "python_reference_s": python_reference_s()}
    print(f"machine: {machine['cpu']}, Python {machine['python']}; reference loop "
          f"{machine['python_reference_s']:.3f} s (a figure from another machine compares after scaling by the "
          "ratio of the two machines' loops)", flush=True)
    cap = None
    if any(c in ("c", "d", "scale") for c in cases):
        cap = capacity_rps(args.engine)
        results["capacity_rps_per_replica"] = cap
        print(f"capacity of one replica (saturation probe): {cap:.2f} req/s")
    plan = []
    for c in cases:
        if c == "a":
            plan.append(("a", "a", 50_000, 9.0))
        elif c == "b":
            plan.append(("b", "b", 50_000, 9.0))
        elif c == "c":
            plan.append(("c", "c", 1_000_000, 0.7 * cap * 16))
        elif c == "d":
            plan.append(("d", "d", 200_000, 0.7 * cap * 12))
        elif c == "scale":
            plan += [(f"scale_{n // 1000}k", "scale", n, 0.7 * cap * 16) for n in (10_000, 100_000)]
        else:
            raise SystemExit(f"unknown case {c!r}")
    if args.repeat < 1:
        raise SystemExit(f"--repeat {args.repeat}: at least 1")
    for key, case, n, rate in plan:
        runs = [run_cli(case, n, rate, args.engine, args.outputs, args.format, args.tmp) for _ in range(args.repeat)]
        r = min(runs, key=lambda x: x["wall_s"])
        if args.repeat > 1:
            r["walls_s"] = [x["wall_s"] for x in runs]
            # (CPU time: what the machine's other work changes least)
            r["cpus_s"] = [x["cpu_s"] for x in runs]
            r["phases_fastest_cpu_s"] = fastest_phases(runs)
        r["machine"] = machine
        suffix = "".join(f"_{x}" for x in (args.engine if args.engine != "fast" else None,
                                           args.format if args.format != "csv" else None,
                                           args.outputs.replace(",", "+") if args.outputs else None) if x)
        results[key + suffix] = r
        print(f"({key}{suffix}) {n:>9,} requests [{args.engine}]: wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s "
              f"of which system {r['sys_s']:.2f} s (simulate "
              f"{r['simulate_s']:.2f} s, write {r['write_s']:.2f} s of {r['output_mib']:.0f} MiB, other "
              f"{r['other_s']:.2f} s), {r['sim_requests_per_wall_s']:,.0f} sim req/s, "
              f"{r['steps_per_wall_s']:,.0f} steps/s, peak RSS {r['peak_rss_mib']:.0f} MiB, busy "
              f"{r['busy_fraction'] * 100:.0f}%, mean batch {r['mean_batch_size']:.1f}"
              + (f"; fastest of {args.repeat}: " + ", ".join(f"{w:.2f}" for w in r["walls_s"]) + " s (CPU "
                 + ", ".join(f"{c:.2f}" for c in r["cpus_s"]) + " s)" if args.repeat > 1 else ""), flush=True)
        line = phases_line(r)
        if line is not None:
            print(line, flush=True)
        if r.get("phases_fastest_cpu_s"):
            print(f"    each phase's least CPU s of the {args.repeat} runs: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r["phases_fastest_cpu_s"].items()), flush=True)
        line = verdict(case, r, machine["python_reference_s"])
        if line is not None:
            print(line, flush=True)
        if path is not None:
            path.write_text(json.dumps(results, indent=2) + "\n")
    if args.write_docs:
        write_docs(results)


if __name__ == "__main__":
    main()
