"""``servesim sweep``: run the cross product of scenario fields, in parallel, resumably.

Points (``sim/studies/points.py``) are resolved scenarios; executors (``sim/studies/executors.py``)
run them. This module is the sweep machinery on top, shared by sweep, capacity and compare:
each finished point lives in ``DIR/runs/<hash>/`` (the output contract: summary.json,
requests.csv, steps.csv, scenario.yaml, plus tbt_s.npy), where ``<hash>`` is a digest of the
resolved scenario; a rerun skips points whose folder exists. ``DIR/results.csv`` has one row per
point: the swept values as columns, then status, error and the flattened summary. A point that
fails is recorded with its error; the others go on.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from servesim.errors import InputError, one_line, shown
from servesim.inputs.overrides import parse_override
from servesim.outputs.rundir import read_results, read_scenario, read_summary, verify_run
from servesim.outputs.writer import STUDY_OUTPUTS, TMP_PREFIX, remove_report, study_file_names
from servesim.studies.executors import EXECUTORS, ExecutorOptions, run_tasks
from servesim.studies.lock import folder_lock
from servesim.outputs.metrics import RESULT_METRICS
from servesim.outputs.progress import interactive
from servesim.outputs.checks import sessions_rate_note
from servesim.outputs.verdicts import values_name
from servesim.outputs.wording import plural
from servesim.studies.points import STATS as _STATS
from servesim.studies.points import (Point, flatten_summary, grid_points, load_base, num_gpus, parse_grid,
                                     scenario_label)
from servesim.studies.replicates import SEEDS, aggregate_row, check_seed_count, interval_columns, replicate

RUNS = "runs"
RESULTS = "results.csv"
SWEEP_META = "sweep.json"

# Summary fields flattened into results.csv, in this order (after the point's own columns).
METRIC_COLUMNS = (
    ("num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s", "throughput_rps",
     "output_tokens_per_s", "total_tokens_per_s", "goodput_rps", "slo_attainment", "class_slo_attainment_min",
     "offered_rps", "keep_up", "keep_up_warmup", "window_output_tokens_per_s")
    + tuple(f"{d}_{s}_s" for d in RESULT_METRICS for s in _STATS)
    + ("busy_fraction", "mean_batch_size", "kv_usage_mean", "kv_usage_max", "mfu", "mbu", "num_gpus", "wall_time_s")
)


def finished_row(out_dir: Path, data: dict, outputs: tuple | None = None) -> dict | None:
    """The row of a point already finished in an earlier run (None when it has not finished).
    A folder that is damaged (its summary.json unreadable, or a file it lists missing, truncated
    or edited: ``verify_run``), or that holds another scenario's run (its scenario.yaml is not
    ``data``: folders swapped or copied in under another name), is removed, with a note naming
    it, and the point runs again; so is one that lacks a file this run wants (``outputs``, as
    ``ExecutorOptions.outputs``; None: all): an earlier run that wrote fewer files (``--outputs``)
    does not stand for this one. A folder without scenario.yaml (``outputs`` without it, from
    Python) is taken on its name."""
    if not out_dir.exists():
        return None
    try:
        summary = read_summary(out_dir)
        verify_run(out_dir, summary)
        ran = read_scenario(out_dir)
    except InputError as e:
        print(f"servesim: {out_dir} is damaged, running the point again: {one_line(e, 300)}", file=sys.stderr)
        _remove(out_dir)
        return None
    if ran and _canonical(ran) != _canonical(data):
        # (whole and intact, but another point's run: folders swapped, or copied in under another name)
        print(f"servesim: {out_dir} holds the run of another scenario (its scenario.yaml is not this point's "
              "resolved scenario), running the point again", file=sys.stderr)
        _remove(out_dir)
        return None
    missing = [f for f in study_file_names(STUDY_OUTPUTS if outputs is None else outputs)
               if not (out_dir / f).is_file()]
    if missing:
        print(f"servesim: {out_dir} lacks {', '.join(missing)} (an earlier run wrote fewer files), running the "
              "point again", file=sys.stderr)
        _remove(out_dir)
        return None
    try:
        row = flatten_summary(summary)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        # (read_summary checks what every reader needs; a row also takes every statistic of each
        # distribution and the workload's figures, which an edit may have removed)
        print(f"servesim: {out_dir} is damaged, running the point again: its summary.json lacks what results.csv "
              f"takes from it ({type(e).__name__}: {one_line(e, 120)})", file=sys.stderr)
        _remove(out_dir)
        return None
    row["num_gpus"] = num_gpus(data)
    return {"status": "ok", "error": "", **row}


def _canonical(data: dict) -> str:
    """A resolved scenario as canonical JSON: what ``scenario_hash`` digests, so that the
    scenario.yaml a run wrote compares equal to the point's resolved data it was run from."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _remove(path: Path) -> None:
    """Remove a damaged run folder, or a file or link in its place (rmtree leaves those, and the
    point said to run again then failed: its folder 'exists and is not a folder')."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale(runs: Path) -> int:
    """Remove the ``.tmp-*`` folders a killed run left in ``runs`` (the caller holds the folder's
    lock, so none is being written); how many there were."""
    n = 0
    for d in runs.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(d, ignore_errors=True)
        n += 1
    return n


def execute(points: list[Point], out_dir: Path, executor: str = "local", workers: int | None = None,
            address: str | None = None, progress: bool = True, desc: str = "sweep",
            results: str = RESULTS, outputs: tuple | None = None) -> tuple[int, int]:
    """Run every point not finished yet; fill ``point.row``; keep ``out_dir/results`` (one row per
    point) current. Returns (ran, skipped). ``outputs``: the files of each run folder
    (``ExecutorOptions.outputs``; None: all).

    With the Ray executor, ``out_dir`` must be visible to the workers (one machine, or a shared
    file system); rows come back to the driver either way.
    """
    if executor not in EXECUTORS:
        raise InputError(f"--executor {executor!r}: valid: {', '.join(EXECUTORS)}")
    with folder_lock(out_dir, desc):
        return _execute(points, out_dir, executor, workers, address, progress, desc, results, outputs)


def _execute(points, out_dir: Path, executor, workers, address, progress, desc, results, outputs) -> tuple[int, int]:
    runs = out_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    remove_stale(runs)
    tasks, skipped = [], 0
    for p in points:
        if p.data is None:
            p.row = {"status": "error", "error": p.error}
            continue
        prev = finished_row(runs / p.hash, p.data, outputs)
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
    if unique:  # (now, not at the first point's end: until then the folder showed an earlier study's rows)
        write_results(out_dir, points, results)
    last_write = [0.0]
    bar = None
    if progress and unique:
        from tqdm import tqdm

        if skipped:
            print(f"{desc}: {skipped} of {plural(len(points), 'point')} already finished, skipped", file=sys.stderr)
        if interactive():
            bar = tqdm(total=len(unique), unit="run", desc=desc, file=sys.stderr, dynamic_ncols=True)

    def on_done(key, row):
        for k in seen[out_of[key]]:
            by_index[k].row = dict(row)
        if time.monotonic() - last_write[0] > 1.0:  # keep results.csv current without rewriting it per point
            write_results(out_dir, points, results)
            last_write[0] = time.monotonic()
        if bar is not None:
            bar.update(1)
            if row.get("status") != "ok":
                p = by_index[key]
                name = values_name(p.values) or f"point {p.number}"  # (its values, not a number to look up)
                bar.write(f"{name} failed: {one_line(row.get('error', ''), 200)}", file=sys.stderr)

    try:
        run_tasks(unique, on_done, executor, workers, address, outputs)
    finally:
        if bar is not None:
            bar.close()
    write_results(out_dir, points, results)
    return len(unique), skipped


def execute_seeds(points: list[Point], out_dir: Path, ex: ExecutorOptions, seeds: int = 1,
                  desc: str = "sweep", scenario: str | None = None) -> tuple[int, int]:
    """``execute`` with each point run on ``seeds`` seeds (``replicates``): seeds.csv gets a row
    per run, results.csv a row per point with the mean and ``_ci95`` of each figure. One seed:
    exactly ``execute``. Returns (ran, skipped) counted in runs. ``scenario``: the file every run
    was refused from, named first in that error (as ``servesim run`` names it)."""
    check_seed_count(seeds)
    if seeds == 1:
        # (a seeds.csv an earlier run over seeds left in the folder is not this study's runs: the
        # report paired its configurations by seed from it)
        (out_dir / SEEDS).unlink(missing_ok=True)
        ran, skipped = execute(points, out_dir, ex.executor, ex.workers, ex.address, ex.progress, desc,
                               outputs=ex.outputs)
        _refuse_if_all_refused(points, desc, out_dir / RESULTS, scenario)
        return ran, skipped
    groups = replicate(points, seeds)
    runs = [q for g in groups for q in g]
    # (results.csv is written at the end: an earlier study's stayed, and a stopped one's report read
    # it beside this study's sweep.json and seeds.csv)
    (out_dir / RESULTS).unlink(missing_ok=True)
    ran, skipped = execute(runs, out_dir, ex.executor, ex.workers, ex.address, ex.progress,
                           f"{desc} x {seeds} seeds", results=SEEDS, outputs=ex.outputs)
    for p, g in zip(points, groups):
        p.row = aggregate_row([q.row for q in g], METRIC_COLUMNS)
        if any((q.row or {}).get("failed") == "run" for q in g):  # (a seed's run failed: exit status 3)
            p.row["failed"] = "run"
    write_results(out_dir, points)
    _refuse_if_all_refused(runs, desc, out_dir / SEEDS, scenario)
    return ran, skipped


def _refuse_if_all_refused(runs: list[Point], desc: str, where: Path, scenario: str | None = None) -> None:
    """An ``InputError`` when every run was refused by its own checks (the memory it needs, a model
    that does not fit its GPUs): the study has nothing to show, as when every point is invalid
    before running (``make_points``), so it is an input error, not a table of errors with exit 0.
    The results file stays, with each run's reason."""
    rows = [q.row for q in runs]
    # (a point invalid before running has no ``failed``: it is refused as an input too)
    if rows and all(r is not None and r.get("status") == "error" and r.get("failed", "input") == "input"
                    for r in rows):
        named = f"{scenario}: " if scenario else ""
        raise InputError(f"{named}every {desc} point was refused; the first: {rows[0].get('error')} "
                         f"(each reason in {where})")


# ---------------------------------------------------------------- results.csv
def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def write_results(out_dir: Path, points: list[Point], name: str = RESULTS) -> Path:
    """One row per point: its values, status, error, the flattened summary, hash and folder; rows
    averaged over seeds (``replicates.aggregate_row``) add ``seeds`` and ``<figure>_ci95``."""
    value_cols = []
    for p in points:
        for k in p.values:
            if k not in value_cols:
                value_cols.append(k)
    seeded = any("seeds" in (p.row or {}) for p in points)
    extra = ["seeds", *interval_columns(METRIC_COLUMNS)] if seeded else []
    header = ["point", *value_cols, "status", "error", *METRIC_COLUMNS, *extra, "hash", "dir"]
    path = out_dir / name
    tmp = out_dir / (name + ".tmp")
    try:
        with tmp.open("w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(header)
            for p in points:
                row = p.row or {"status": "pending", "error": ""}
                d = f"{RUNS}/{p.hash}" if p.hash and row.get("status") == "ok" else ""
                w.writerow([p.number, *(_cell(p.values.get(k)) for k in value_cols), row.get("status", ""),
                            row.get("error", ""), *(_cell(row.get(c)) for c in (*METRIC_COLUMNS, *extra)), p.hash,
                            d])
        os.replace(tmp, path)
    except OSError as e:  # a full disk: name the file (the last complete results.csv stays)
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    return path


def begin_study(out_dir: Path, meta: dict) -> None:
    """A study starts writing in ``out_dir`` (its lock held): the report an earlier study left
    there is removed (``writer.remove_report``; a note on stderr says so), then ``meta`` is
    written as sweep.json."""
    if remove_report(out_dir):
        print(f"servesim: {out_dir}: removed the report.md and figures an earlier study left (servesim report "
              f"{out_dir} draws this study's)", file=sys.stderr)
    write_meta(out_dir, meta)


def write_meta(out_dir: Path, meta: dict) -> None:
    path = out_dir / SWEEP_META
    tmp = out_dir / (SWEEP_META + ".tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None


# ---------------------------------------------------------------- the sweep study
@dataclass
class SweepResult:
    grid: dict  # {dotted.key: [values]}: the swept fields, the scenario's sweep block included
    rows: list  # results.csv as read back (read_results)
    ran: int  # points simulated now
    skipped: int  # points finished in an earlier run of the same folder
    failed_run: int = 0  # points that failed while running (not refused as invalid): exit status 3
    refused: list = field(default_factory=list)  # (point's name, reason) of the points refused as invalid
    points: list = field(default_factory=list)  # the points (Point: values, resolved scenario)


def run_sweep(scenario, grid_texts, out: str | Path, overrides=(), seed: int | None = None,
              ex: ExecutorOptions = ExecutorOptions(), seeds: int = 1) -> SweepResult:
    """Sweep the cross product of the scenario file's ``sweep: {grid}`` block and ``grid_texts``
    (``key=v1,v2,...``) with ``overrides`` (``key=value``) and ``seed`` applied to every point;
    results in ``out`` (results.csv, runs/<hash>/, sweep.json; with ``seeds`` > 1 also seeds.csv,
    see ``execute_seeds``)."""
    if isinstance(grid_texts, str):  # (taken character by character: "--grid 'p': expected dotted.key=v1,v2,...")
        raise TypeError(f"run_sweep(grid_texts=...): a list of 'dotted.key=v1,v2,...' strings, got {grid_texts!r:.80} "
                        "(one grid key: put it in a list)")
    base, grid = load_base(scenario, overrides, seed)
    given = parse_grid(grid_texts)
    for key in given:  # (the --grid values replaced the block's silently: a sweep of fewer points than either says)
        if key in grid:
            raise InputError(f"--grid {key}: {key} is also swept by the scenario's sweep block (sweep.grid: "
                             f"{shown(grid[key])}); the --grid values would replace the block's: give its values "
                             "in one of them")
    grid.update(given)
    if not grid:
        raise InputError("servesim sweep: nothing to sweep; give --grid dotted.key=v1,v2,... "
                         "or a sweep: {grid: {...}} block in the scenario")
    for text in overrides or ():  # (each point sets the grid's keys: a --set of one was silently lost)
        key = ".".join(parse_override(text)[0])
        if key in grid:
            raise InputError(f"--set {text}: {key} is also swept (--grid or the scenario's sweep block), which sets "
                             "it at every point, so the --set would change nothing; drop one of them")
    points = grid_points(base, grid)
    sessions = sessions_rate_note(base)  # (the rate starts sessions: "rate_rps=2" read as requests)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out, "sweep"):
        begin_study(out, {"kind": "sweep", "scenario": scenario_label(scenario, base), "grid": grid,
                         "set": list(overrides or []), "points": len(points),
                         **({"notes": [sessions]} if sessions else {}),
                         **({"seeds": seeds} if seeds > 1 else {})})
        ran, skipped = execute_seeds(points, out, ex, seeds, scenario=scenario_label(scenario, base))
    return SweepResult(grid, read_results(out / RESULTS), ran, skipped, failed_while_running(points),
                       refused_points(points), points)


def refused_points(points: list[Point], unit: str = "req/s") -> list:
    """(name, reason) of the points refused as invalid (a value the schema refuses, a model that
    does not fit): not run, and no exit status of their own, since a grid may span what fits and
    what does not; the command names them on stderr. ``unit``: the rate's, where a point is named
    by its label and rate (compare: "static at 2 sessions/s" with workload.sessions)."""
    return [(values_name(p.values, unit=unit) or f"point {p.number}", p.error or (p.row or {}).get("error", ""))
            for p in points if (p.row or {}).get("status") == "error" and (p.row or {}).get("failed") != "run"]


def failed_while_running(points: list[Point]) -> int:
    """Points whose run failed (a bug, a worker that died, a full disk, memory): what makes a
    study exit with status 3. Points refused as invalid are reported, not counted."""
    return sum(1 for p in points if (p.row or {}).get("failed") == "run")

