"""Executors: run resolved scenarios in parallel, on local worker processes or on Ray.

A task is ``(key, resolved scenario data, run folder)``; ``run_point`` simulates one and writes
its folder atomically, and ``run_tasks`` hands each task's row to ``on_done(key, row)`` as it
finishes, in completion order. What to run and what to do with the rows (resume, results.csv) is
the study's business (``sim/studies/sweep.py``), not the executor's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import InputError
from servesim.outputs.writer import OUTPUTS
from servesim.studies.points import flatten_summary, num_gpus

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorOptions:
    """Where and how wide a study runs its points (``--executor``, ``--workers``, ``--address``,
    ``--quiet``)."""

    executor: str = "local"
    workers: int | None = None  # None: all cores (local), or Ray's own sizing
    address: str | None = None  # a Ray cluster to join; None: start a local Ray instance
    progress: bool = True  # a progress bar on stderr
    # the files each run folder gets: of summary, requests, steps, scenario and tbt (tbt_s.npy);
    # None: all. A study that reads only some of them (servesim plan) saves the time and disk.
    outputs: tuple | None = None

    def __post_init__(self):  # options that cannot work are refused before anything runs
        if self.workers is not None and self.workers < 1:
            raise InputError(f"--workers must be >= 1, got {self.workers}")
        if self.address and self.executor != "ray":
            raise InputError("--address needs --executor ray")


def run_point(data: dict, out_dir: str, outputs: tuple | None = None) -> dict:
    """Simulate one resolved scenario, write its folder atomically, return its flattened row.
    ``outputs``: the files to write (``ExecutorOptions.outputs``; None: all; summary.json always).

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
        res.write(tmp, OUTPUTS if outputs is None else tuple(f for f in OUTPUTS if f == "summary" or f in outputs))
        if outputs is None or "tbt" in outputs:
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


@contextlib.contextmanager
def study_session(ex: ExecutorOptions):
    """Around a study that runs many small batches of points (``servesim plan``): with Ray, one
    connection for all of them (each ``run_tasks`` would otherwise start and stop its own)."""
    if ex.executor != "ray":
        yield
        return
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'servesim[ray]'") from None
    if ray.is_initialized():
        yield
        return
    kw = {"num_cpus": ex.workers} if ex.address is None and ex.workers else {}
    ray.init(address=ex.address, include_dashboard=False, log_to_driver=False, **kw)
    try:
        yield
    finally:
        ray.shutdown()


def run_tasks(tasks, on_done, executor: str = "local", workers: int | None = None, address: str | None = None,
              outputs: tuple | None = None):
    """Run every ``(key, data, out_dir)`` task with ``run_point`` (writing ``outputs``);
    ``on_done(key, row)`` for each."""
    if executor == "ray":
        _execute_ray(tasks, address, workers, on_done, outputs)
    else:
        _execute_local(tasks, workers or os.cpu_count() or 1, on_done, outputs)


def _execute_local(tasks, workers: int, on_done, outputs=None):
    if workers <= 1 or len(tasks) <= 1:
        for key, data, out in tasks:
            on_done(key, run_point(data, out, outputs))
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        futs = {pool.submit(run_point, data, out, outputs): key for key, data, out in tasks}
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


def _execute_ray(tasks, address: str | None, workers: int | None, on_done, outputs=None):
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
        refs = {remote.remote(data, out, outputs): key for key, data, out in tasks}
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
