"""``servesim ARGS`` as the console script runs it, plus what ``bench/speed.py`` needs to split its
wall time: the seconds spent writing the output files (``Results.write``, timed), a few summary
figures and the phases of the process, printed as one JSON line at the end of stderr.

    python bench/timed_cli.py run SCENARIO.yaml --out DIR --quiet

``phases``: name -> [wall seconds, CPU seconds] (``time.perf_counter``, ``time.process_time``),
one after the other, so they add up to the process up to the end of ``main`` (the parent adds
the exit, ``bench/speed.py``'s ``teardown``):

- ``start``: the interpreter's start (CPU only: the process's CPU time when this file begins;
  wall too when the parent passes its spawn time in ``SERVESIM_BENCH_SPAWN``, ``time.time()``);
- ``imports``: ``servesim.cli.main`` and what ``servesim run`` uses (numpy, SimPy, PyYAML, the
  engine, the outputs);
- ``load_scenario``: reading and checking the scenario file;
- ``plan``: the setup and the workload drawn (``simulation.plan``);
- ``engine``: the event loop (``simpy.Environment.run``);
- ``columns``: the request and step columns and the TBT sample out of the recorder;
- ``summary``: the rest of ``simulate()`` (the summaries, profile, warnings, economics);
- ``write <file>``: each output file (``requests.csv``, ``steps.csv``: formatting, SHA-256 and
  writing; ``summary.json``; ``scenario.yaml`` with ``write_rest``: the folder's temporary
  and its rename); ``sha256`` and ``os_write``: of the CSV files' time, hashing and the writes;
- ``other``: the rest of ``main`` (argument parsing, checks of --out, printing the summary).
"""

from __future__ import annotations

import os
import time

_cpu0 = time.process_time()
_wall0 = time.perf_counter()
_spawn = os.environ.get("SERVESIM_BENCH_SPAWN")
_start_wall = time.time() - float(_spawn) if _spawn else None

import json  # noqa: E402
import sys  # noqa: E402

import simpy  # noqa: E402

from servesim import simulation  # noqa: E402
from servesim.cli.main import main  # noqa: E402
from servesim.inputs import scenario as _scenario  # noqa: E402
from servesim.outputs import recorder as _recorder  # noqa: E402
from servesim.outputs import writer as _writer  # noqa: E402
from servesim.studies import replicates as _replicates  # noqa: E402,F401  (servesim run imports it)

_phases: dict = {"start": [_start_wall, _cpu0], "imports": [time.perf_counter() - _wall0, time.process_time() - _cpu0]}
_seen: dict = {"write_s": 0.0, "phases": _phases}


def _add(name: str, wall: float, cpu: float) -> None:
    p = _phases.setdefault(name, [0.0, 0.0])
    p[0] += wall
    p[1] += cpu


def _timed(owner, attr: str, name, exclusive: bool = True) -> None:
    """Time ``owner.attr`` under ``name`` (a string, or a function of the call's arguments
    giving one). ``exclusive``: the time of the phases timed inside it is not counted twice
    (it is taken off this one)."""
    f = getattr(owner, attr)

    def timed(*args, **kwargs):
        inner = [sum(p[0] for k, p in _phases.items() if k not in ("start", "imports")),
                 sum(p[1] for k, p in _phases.items() if k not in ("start", "imports"))] if exclusive else None
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            w, c = time.perf_counter() - w0, time.process_time() - c0
            if exclusive:
                w -= sum(p[0] for k, p in _phases.items() if k not in ("start", "imports")) - inner[0]
                c -= sum(p[1] for k, p in _phases.items() if k not in ("start", "imports")) - inner[1]
            _add(name(*args, **kwargs) if callable(name) else name, w, c)

    setattr(owner, attr, timed)


def _table_name(path, columns, *args, **kwargs) -> str:
    return "write requests" if "request_id" in columns else "write steps"


def _install() -> None:
    _timed(_scenario, "load_scenario", "load_scenario")
    _timed(simulation, "plan", "plan")
    _timed(simpy.Environment, "run", "engine")
    for attr in ("request_columns", "step_columns", "tbt_sample"):
        _timed(_recorder.Recorder, attr, "columns")
    _timed(simulation, "simulate", "summary")  # (what simulate() does besides the phases above)
    _timed(_writer, "write_csv", _table_name)
    _timed(_writer, "write_parquet", _table_name)
    _timed(_writer, "json_text", "write summary.json")
    _timed(simulation, "scenario_to_yaml", "write scenario.yaml")
    _timed(simulation, "write_run", "write_rest")  # (the folder: its temporary, the rename, scenario.yaml's bytes)

    def write(self, data):  # the CSV files' SHA-256 and writes, apart (both inside "write <file>")
        w0, c0 = time.perf_counter(), time.process_time()
        self.sha.update(data)
        w1, c1 = time.perf_counter(), time.process_time()
        try:
            self.bytes += len(data)
            return self.fh.write(data)
        finally:
            w2, c2 = time.perf_counter(), time.process_time()
            for name, w, c in (("sha256", w1 - w0, c1 - c0), ("os_write", w2 - w1, c2 - c1)):
                p = _seen.setdefault(name, [0.0, 0.0])
                p[0] += w
                p[1] += c

    _writer._Digest.write = write


_write = simulation.Results.write


def _timed_write(self, *args, **kwargs):
    t0 = time.perf_counter()
    try:
        return _write(self, *args, **kwargs)
    finally:
        s = self.summary
        _seen.update(write_s=_seen["write_s"] + time.perf_counter() - t0, simulate_s=s["wall_time_s"],
                     steps=s["phases"]["steps"], completed=s["completed"], rejected=s["rejected"],
                     busy_fraction=s["utilization"]["busy_fraction"],
                     mean_batch_size=s["utilization"]["mean_batch_size"])


if __name__ == "__main__":
    simulation.Results.write = _timed_write
    _install()
    w0, c0 = time.perf_counter(), time.process_time()
    code = main(sys.argv[1:])
    w, c = time.perf_counter() - w0, time.process_time() - c0
    timed = [sum(p[i] for k, p in _phases.items() if k not in ("start", "imports")) for i in (0, 1)]
    _phases["other"] = [w - timed[0], c - timed[1]]
    # where the process stands as main returns: the parent takes the exit (teardown) from its own clock
    _seen.update(end_cpu_s=time.process_time(), end_time=time.time())
    print(json.dumps(_seen), file=sys.stderr)
    sys.exit(code)
