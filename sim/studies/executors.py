"""Executors: run resolved scenarios in parallel, on local worker processes or on Ray.

A task is ``(key, resolved scenario data, run folder)``; ``run_point`` simulates one and writes
its folder atomically, and ``run_tasks`` hands each task's row to ``on_done(key, row)`` as it
finishes, in completion order. What to run and what to do with the rows (resume, results.csv) is
the study's business (``sim/studies/sweep.py``), not the executor's.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import InputError, PluginError, one_line
from servesim.outputs.writer import OUTPUTS
from servesim.resources import MemoryExceeded
from servesim.studies.points import flatten_summary, num_gpus

EXECUTORS = ("local", "ray")
MAX_WORKERS = 4096  # worker processes (or Ray CPUs) of one study


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
        check_numbers(self, ("workers",))
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise InputError(f"--workers must be >= 1 and <= {MAX_WORKERS}, got {self.workers}")
        if self.address and self.executor != "ray":
            raise InputError("--address needs --executor ray")


def check_numbers(options, names, required=()) -> None:
    """The fields ``names`` of an options dataclass hold a number or None, and those in ``required``
    a number (as its CLI flags would give): one set from Python to text (or to None where a number
    is needed) failed later as "'<=' not supported between instances of 'int' and 'str'", naming no
    option."""
    for name in (*names, *required):
        value = getattr(options, name)
        if value is None and name not in required:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{type(options).__name__}({name}=...): a number, got {value!r:.60}")


def run_point(data: dict, out_dir: str, outputs: tuple | None = None) -> dict:
    """Simulate one resolved scenario, write its folder atomically, return its flattened row.
    ``outputs``: the files to write (``ExecutorOptions.outputs``; None: all; summary.json always).

    Never raises for a failing scenario: the row then has ``status=error`` and the message.
    """
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import simulate

    try:
        res = simulate(scenario_from_dict(data))
        # whole or not at all (a .tmp-* folder beside it until then)
        files = OUTPUTS if outputs is None else tuple(f for f in OUTPUTS if f == "summary" or f in outputs)
        res.write(Path(out_dir), files, tbt=outputs is None or "tbt" in outputs)
        row = flatten_summary(res.summary)
        row["num_gpus"] = num_gpus(data)
        return {"status": "ok", "error": "", **row}
    except Exception as e:  # noqa: BLE001 - a failing point is recorded, the sweep goes on
        if isinstance(e, OSError) and e.filename:  # a full disk, a folder gone read-only: name the file
            return {"status": "error", "error": f"cannot write {e.filename}: {e.strerror or e}", "failed": "run"}
        if isinstance(e, MemoryError):  # a point too large for this machine: not a bug
            return {"status": "error", "error": "out of memory: the point is too large for this machine (lower "
                                                "workload.num_requests or the replicas)", "failed": "run"}
        if isinstance(e, InputError):
            # refused by the checks before the run (invalid for this point, e.g. the model does not
            # fit) unless the run outgrew the memory (the machine, not the point) or a plug-in policy
            # or router broke its contract (raised, returned no decision): a bug, as a crash is
            failed = "run" if isinstance(e, (MemoryExceeded, PluginError)) else "input"
            return {"status": "error", "error": one_line(e), "failed": failed}
        msg = f"{type(e).__name__}: {e} | " + traceback.format_exc(limit=3).replace("\n", " ")[-400:]
        return {"status": "error", "error": one_line(msg), "failed": "run"}


INHERITED_FDS: set = set()  # descriptors a worker must close (a study's folder lock: sim/studies/lock.py)


def worker_init(parent_pid: int) -> None:
    """In each local worker process: die with the parent. A killed sweep must not leave workers
    simulating for minutes (and writing into its folder): Linux's PR_SET_PDEATHSIG sends the
    worker SIGKILL when its parent dies; elsewhere (or if that fails) a thread polls the parent's
    pid. Also closes the parent's folder lock, so that only the parent holds it, and gives SIGTERM
    back its default action (the parent ``servesim`` raises on it; a worker must simply end when
    the parent stops the pool)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in list(INHERITED_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    INHERITED_FDS.clear()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            pr_set_pdeathsig = 1
            armed = ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        import threading

        def watch():
            while True:
                time.sleep(1.0)
                if os.getppid() != parent_pid:
                    os._exit(1)

        threading.Thread(target=watch, name="servesim-parent-watch", daemon=True).start()


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

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=worker_init,
                             initargs=(os.getpid(),)) as pool:
        futs = {}
        try:
            with _ctrl_c_held():  # (the first submit forks the workers)
                for key, data, out in tasks:
                    futs[pool.submit(run_point, data, out, outputs)] = key
            for fut in as_completed(futs):
                try:
                    row = fut.result()
                except Exception as e:  # noqa: BLE001 - e.g. a worker killed for memory
                    row = {"status": "error", "error": one_line(f"worker failed: {type(e).__name__}: {e}"),
                           "failed": "run"}
                on_done(futs[fut], row)
        except BaseException:  # Ctrl-C: drop the queued points; finished ones stay for a resume
            _stop(pool, futs)
            raise


@contextlib.contextmanager
def _ctrl_c_held():
    """Hold Ctrl-C back for the block, then act on it: one that came while the pool forked its
    workers was raised inside Python's at-fork hooks, which swallow exceptions ("Exception ignored
    in: <function _releaseLock>"), and the study ran on to its end with exit 0."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list = []
    parent = os.getpid()

    def hold(signum, frame):
        if os.getpid() != parent:
            # a worker forked in the block has this handler until its initializer runs: SIGTERM from
            # the pool stopping it (``_stop``), held back, left the worker alive, and the pool waited
            # for it forever (servesim hung after Ctrl-C); it ends the worker as worker_init's default
            # would. (Ctrl-C is the parent's to act on: it stops the workers.)
            if signum == signal.SIGTERM:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        held.append((signum, frame))

    old = signal.signal(signal.SIGINT, hold)
    old_term = signal.signal(signal.SIGTERM, hold)  # (servesim's)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)
        signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)
    if held:  # (the handlers it had: Python's raises KeyboardInterrupt, servesim's Terminated)
        signum, frame = held[0]
        handler = old if signum == signal.SIGINT else old_term
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:  # (SIGTERM's default: end the process, as it would have)
            os.kill(os.getpid(), signum)


def _stop(pool, futs) -> None:
    """Stop a pool at once (Ctrl-C): cancel every point not started and end the workers, whose
    points in progress leave only ``.tmp-*`` folders (a run folder appears whole or not at all).
    ``shutdown(cancel_futures=True)`` alone cancelled nothing on Python 3.11, and the exit then
    waited for the workers to run every queued point: a sweep went on to its end after Ctrl-C."""
    for fut in futs:
        fut.cancel()
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            proc.terminate()
    # (its manager thread ends with the workers: joined here, not raced by the interpreter's exit,
    # which printed "OSError: [Errno 9] Bad file descriptor" from concurrent.futures)
    pool.shutdown(wait=True, cancel_futures=True)


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
                    row = {"status": "error", "error": one_line(f"ray task failed: {type(e).__name__}: {e}"),
                           "failed": "run"}
                on_done(refs[ref], row)
    finally:
        if started:  # stops the local instance, or disconnects from the cluster at --address
            ray.shutdown()
