"""``servesim sweep``: run the cross product of scenario fields, in parallel, resumably.

A sweep is a list of *points*; each point is a fully resolved scenario (plain data) plus the
values that name it (the swept fields, or a comparison label). Workers receive the resolved
scenario, never the grid, so every executor (local processes, Ray) computes the same thing:
same scenario + seed => same results. Each finished point lives in ``DIR/runs/<hash>/`` (the
output contract: summary.json, requests.csv, steps.csv, scenario.yaml, plus tbt_s.npy), where
``<hash>`` is a digest of the resolved scenario; a rerun skips points whose folder exists.
``DIR/results.csv`` has one row per point: the swept values as columns, then status, error and
the flattened summary. A point that fails is recorded with its error; the others go on.

Points of one sweep share the scenario's seed, so e.g. every policy sees the same requests
(common random numbers).
"""

from __future__ import annotations

import copy
import csv
import hashlib
import itertools
import json
import math
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from servesim.errors import InputError
from servesim.inputs.scenario import set_dotted as scenario_set_dotted
from servesim.outputs.metrics import LATENCY_METRICS
from servesim.outputs.rundir import read_results, read_summary
from servesim.outputs.stats import DIST_STATS

RUNS = "runs"
RESULTS = "results.csv"
SWEEP_META = "sweep.json"

# Summary fields flattened into results.csv, in this order (after the point's own columns).
_DISTS = LATENCY_METRICS
_STATS = DIST_STATS
METRIC_COLUMNS = (
    ("num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s", "throughput_rps",
     "output_tokens_per_s", "goodput_rps", "slo_attainment", "offered_rps")
    + tuple(f"{d}_{s}_s" for d in _DISTS for s in _STATS)
    + ("busy_fraction", "mean_batch_size", "kv_usage_mean", "kv_usage_max", "mfu", "mbu", "num_gpus", "wall_time_s")
)


@dataclass
class Point:
    """One run of a sweep: ``values`` name it (column -> value), ``data`` is the resolved scenario."""

    index: int
    values: dict
    data: dict | None  # the resolved scenario as plain data (None when it failed validation)
    error: str = ""
    hash: str = ""
    row: dict = field(default_factory=dict)


# ---------------------------------------------------------------- building points
def set_dotted(data: dict, key: str, value) -> dict:
    """Set ``a.b.c`` in a nested mapping (creating mappings on the way), as ``--set`` does."""
    return scenario_set_dotted(data, key, value, "--grid")


def parse_grid(texts) -> dict:
    """``["key=v1,v2", ...]`` -> {key: [v1, v2]} (values parsed as YAML scalars)."""
    grid = {}
    for text in texts or []:
        if "=" not in text:
            raise InputError(f"--grid {text!r}: expected dotted.key=v1,v2,...")
        key, raw = text.split("=", 1)
        key = key.strip()
        if not key:
            raise InputError(f"--grid {text!r}: missing key before '='")
        values = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                raise InputError(f"--grid {text!r}: empty value in the list")
            try:
                values.append(yaml.safe_load(item))
            except yaml.YAMLError:
                values.append(item)
        grid[key] = values
    return grid


def pop_sweep_block(data: dict) -> dict:
    """Remove and return the scenario's optional ``sweep: {grid: {key: [values]}}`` block."""
    block = data.pop("sweep", None)
    if block is None:
        return {}
    if not isinstance(block, dict) or set(block) - {"grid"}:
        raise InputError("sweep: expected a mapping with one key, grid: {dotted.key: [values, ...]}")
    grid = block.get("grid") or {}
    if not isinstance(grid, dict):
        raise InputError("sweep.grid: expected a mapping of dotted.key: [values, ...]")
    out = {}
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise InputError(f"sweep.grid.{k}: expected a non-empty list of values, got {v!r}")
        out[str(k)] = v
    return out


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("servesim")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"


def scenario_hash(data: dict) -> str:
    """Digest of a resolved scenario (canonical JSON) and the servesim version: a sweep point's resume key.

    Results of another servesim version are not reused; within one version, delete ``DIR/runs``
    to rerun after changing the code.
    """
    text = json.dumps({"servesim": _version(), "scenario": data}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(data: dict) -> tuple[dict | None, str]:
    """Validate scenario data; return (fully resolved plain data, "") or (None, error message)."""
    from servesim.inputs.scenario import scenario_from_dict

    try:
        return scenario_from_dict(data).to_dict(), ""
    except InputError as e:
        return None, str(e)


def make_points(base: dict, variants: list[tuple[dict, dict]]) -> list[Point]:
    """Points from (values naming it, {dotted.key: value} overrides) pairs on top of ``base``."""
    points = []
    for i, (values, overrides) in enumerate(variants):
        d = copy.deepcopy(base)
        for k, v in overrides.items():
            set_dotted(d, k, v)
        resolved, err = resolve(d)
        p = Point(i, dict(values), resolved, err)
        if resolved is not None:
            p.hash = scenario_hash(resolved)
        points.append(p)
    if points and all(p.data is None for p in points):
        raise InputError(f"every sweep point is invalid; the first: {points[0].error}")
    return points


def grid_points(base: dict, grid: dict) -> list[Point]:
    keys = list(grid)
    combos = itertools.product(*(grid[k] for k in keys)) if keys else [()]
    variants = [(dict(zip(keys, c)), dict(zip(keys, c))) for c in combos]
    return make_points(base, variants)


# ---------------------------------------------------------------- one point (runs in a worker)
def num_gpus(data: dict) -> int:
    """GPUs a resolved scenario uses: replicas x tp x pp, or the sum over a P/D split's two pools."""
    hw = data.get("hardware", {})
    tp, pp = int(hw.get("tp", 1)), int(hw.get("pp", 1))
    pol = data.get("policy") or {}
    if pol.get("name") == "pd_split":
        return sum(int((pol.get(k) or {}).get("replicas", 1)) * int((pol.get(k) or {}).get("tp") or tp) * pp
                   for k in ("prefill", "decode"))
    return int((data.get("cluster") or {}).get("replicas", 1)) * tp * pp


def flatten_summary(s: dict) -> dict:
    row = {k: s.get(k) for k in ("num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s",
                                 "throughput_rps", "output_tokens_per_s", "goodput_rps", "slo_attainment",
                                 "wall_time_s")}
    for d in _DISTS:
        for st in _STATS:
            row[f"{d}_{st}_s"] = s[f"{d}_s"][st]
    row["offered_rps"] = s.get("workload", {}).get("offered_rps")
    u = s.get("utilization", {})
    for k in ("busy_fraction", "mean_batch_size", "kv_usage_mean", "kv_usage_max", "mfu", "mbu"):
        row[k] = u.get(k)
    return row


def run_point(data: dict, out_dir: str) -> dict:
    """Simulate one resolved scenario, write its folder atomically, return its flattened row.

    Never raises for a failing scenario: the row then has ``status=error`` and the message.
    """
    import numpy as np

    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    out = Path(out_dir)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    try:
        res = simulate(scenario_from_dict(data))
        if tmp.exists():
            shutil.rmtree(tmp)
        res.write(tmp)
        np.save(tmp / "tbt_s.npy", np.asarray(res.tbt_s, dtype=float))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        row = flatten_summary(res.summary)
        row["num_gpus"] = num_gpus(data)
        return {"status": "ok", "error": "", **row}
    except Exception as e:  # noqa: BLE001 - a failing point is recorded, the sweep goes on
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, MemoryError):  # a point too large for this machine: not a bug
            return {"status": "error", "error": "out of memory: the point is too large for this machine (lower "
                                                "workload.num_requests or the replicas)"}
        msg = str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}"
        if not isinstance(e, InputError):
            msg += " | " + traceback.format_exc(limit=3).replace("\n", " ")[-400:]
        return {"status": "error", "error": msg}


def finished_row(out_dir: Path, data: dict) -> dict | None:
    """The row of a point already finished in an earlier run (None when it has not finished)."""
    if not (out_dir / "summary.json").is_file():
        return None
    row = flatten_summary(read_summary(out_dir))
    row["num_gpus"] = num_gpus(data)
    return {"status": "ok", "error": "", **row}


# ---------------------------------------------------------------- executors
def _execute_local(tasks, workers: int, on_done):
    if workers <= 1 or len(tasks) <= 1:
        for key, data, out in tasks:
            on_done(key, run_point(data, out))
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        futs = {pool.submit(run_point, data, out): key for key, data, out in tasks}
        try:
            for fut in as_completed(futs):
                try:
                    row = fut.result()
                except Exception as e:  # noqa: BLE001 - e.g. a worker killed for memory
                    row = {"status": "error", "error": f"worker failed: {type(e).__name__}: {e}"}
                on_done(futs[fut], row)
        except BaseException:  # Ctrl-C: drop the queued points; finished ones stay for a resume
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _execute_ray(tasks, address: str | None, workers: int | None, on_done):
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'servesim[ray]'") from None
    started = False
    if not ray.is_initialized():
        kw = {"num_cpus": workers} if address is None and workers else {}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **kw)
        started = True
    try:
        remote = ray.remote(run_point)
        refs = {remote.remote(data, out): key for key, data, out in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    row = ray.get(ref)
                except Exception as e:  # noqa: BLE001
                    row = {"status": "error", "error": f"ray task failed: {type(e).__name__}: {e}"}
                on_done(refs[ref], row)
    finally:
        if started:  # stops the local instance, or disconnects from the cluster at --address
            ray.shutdown()


def execute(points: list[Point], out_dir: Path, executor: str = "local", workers: int | None = None,
            address: str | None = None, progress: bool = True, desc: str = "sweep") -> tuple[int, int]:
    """Run every point not finished yet; fill ``point.row``. Returns (ran, skipped).

    With the Ray executor, ``out_dir`` must be visible to the workers (one machine, or a shared
    file system); rows come back to the driver either way.
    """
    if executor not in ("local", "ray"):
        raise InputError(f"--executor {executor!r}: valid: local, ray")
    runs = out_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    tasks, skipped = [], 0
    for p in points:
        if p.data is None:
            p.row = {"status": "error", "error": p.error}
            continue
        prev = finished_row(runs / p.hash, p.data)
        if prev is not None:
            p.row = prev
            skipped += 1
            continue
        tasks.append((p.index, p.data, str((runs / p.hash).resolve())))
    # Two points with the same resolved scenario run once.
    seen, unique = {}, []
    for key, data, out in tasks:
        if out in seen:
            seen[out].append(key)
        else:
            seen[out] = [key]
            unique.append((key, data, out))
    by_index = {p.index: p for p in points}
    out_of = {key: out for key, _, out in unique}
    last_write = [0.0]
    bar = None
    if progress and unique:
        from tqdm import tqdm

        if skipped:
            print(f"{desc}: {skipped} of {len(points)} points already finished, skipped", file=sys.stderr)
        bar = tqdm(total=len(unique), unit="run", desc=desc, file=sys.stderr, dynamic_ncols=True)

    def on_done(key, row):
        for k in seen[out_of[key]]:
            by_index[k].row = dict(row)
        if time.monotonic() - last_write[0] > 1.0:  # keep results.csv current without rewriting it per point
            write_results(out_dir, points)
            last_write[0] = time.monotonic()
        if bar is not None:
            bar.update(1)
            if row.get("status") != "ok":
                bar.write(f"point {key} failed: {row.get('error', '')[:200]}", file=sys.stderr)

    try:
        if executor == "ray":
            _execute_ray(unique, address, workers, on_done)
        else:
            _execute_local(unique, workers or os.cpu_count() or 1, on_done)
    finally:
        if bar is not None:
            bar.close()
    write_results(out_dir, points)
    return len(unique), skipped


# ---------------------------------------------------------------- results.csv
def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def write_results(out_dir: Path, points: list[Point]) -> Path:
    """One row per point: its values, status, error, the flattened summary, hash and folder."""
    value_cols = []
    for p in points:
        for k in p.values:
            if k not in value_cols:
                value_cols.append(k)
    header = ["point", *value_cols, "status", "error", *METRIC_COLUMNS, "hash", "dir"]
    path = out_dir / RESULTS
    tmp = out_dir / (RESULTS + ".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for p in points:
            row = p.row or {"status": "pending", "error": ""}
            d = f"{RUNS}/{p.hash}" if p.hash and row.get("status") == "ok" else ""
            w.writerow([p.index, *(_cell(p.values.get(k)) for k in value_cols), row.get("status", ""),
                        row.get("error", ""), *(_cell(row.get(c)) for c in METRIC_COLUMNS), p.hash, d])
    os.replace(tmp, path)
    return path


def write_meta(out_dir: Path, meta: dict) -> None:
    (out_dir / SWEEP_META).write_text(json.dumps(meta, indent=2, default=str) + "\n")


# ---------------------------------------------------------------- CLI
def load_base(path, overrides, seed) -> tuple[dict, dict]:
    """(scenario data with --set/--seed applied and the sweep block removed, the sweep grid)."""
    from servesim.inputs.scenario import apply_overrides, default_scenario_path, read_yaml

    data = read_yaml(path or default_scenario_path())
    grid = pop_sweep_block(data)
    data = apply_overrides(data, list(overrides or []))
    if seed is not None:
        data["seed"] = seed
    return data, grid


def add_executor_args(p) -> None:
    p.add_argument("--workers", type=int, help="parallel worker processes (default: all cores)")
    p.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="local processes (default) or Ray (pip install 'servesim[ray]')")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def check_workers(args) -> None:
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    if args.address and args.executor != "ray":
        raise InputError("--address needs --executor ray")


def format_table(rows: list[dict], cols: list[str]) -> str:
    """A plain-text table of chosen results columns (latencies in ms)."""
    shown = []
    for c in cols:
        label = c[:-2] + " ms" if c.endswith("_s") and c.split("_")[0] in _DISTS else c
        shown.append((c, label))
    cells = [[label for _, label in shown]]
    for r in rows:
        line = []
        for c, label in shown:
            v = r.get(c)
            if v is None:
                line.append("-")
            elif isinstance(v, float) and label.endswith(" ms"):
                line.append(f"{v * 1e3:.1f}")
            elif isinstance(v, float):
                line.append(f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}")
            else:
                line.append(str(v)[:40])
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells)


SUMMARY_COLS = ["status", "throughput_rps", "goodput_rps", "slo_attainment", "ttft_p50_s", "ttft_p99_s",
                "tpot_p99_s", "tbt_p99_s", "e2e_p99_s"]


def cmd_sweep(args) -> int:
    check_workers(args)
    base, grid = load_base(args.scenario, args.set, args.seed)
    grid.update(parse_grid(args.grid))
    if not grid:
        raise InputError("servesim sweep: nothing to sweep; give --grid dotted.key=v1,v2,... "
                         "or a sweep: {grid: {...}} block in the scenario")
    points = grid_points(base, grid)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_meta(out, {"kind": "sweep", "scenario": str(args.scenario), "grid": grid, "set": args.set or [],
                     "points": len(points)})
    ran, skipped = execute(points, out, args.executor, args.workers, args.address, not args.quiet)
    rows = read_results(out / RESULTS)
    print(format_table(rows, ["point", *grid, *SUMMARY_COLS]))
    failed = sum(1 for r in rows if r["status"] != "ok")
    print(f"\n{len(rows)} points: {ran} ran, {skipped} already finished, {failed} failed; wrote {out / RESULTS}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run the cross product of scenario fields (parallel, resumable)")
    p.add_argument("scenario", help="scenario YAML file (may hold a sweep: {grid: {...}} block)")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                   help="a field and its values, e.g. workload.arrival.rate_rps=2,4,8 (repeatable)")
    p.add_argument("--out", required=True, help="output folder (results.csv, runs/<hash>/...)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field for every point")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    add_executor_args(p)
    p.set_defaults(func=cmd_sweep)
