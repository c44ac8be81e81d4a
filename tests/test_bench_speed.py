"""``bench/speed.py``'s breakdown of a ``servesim run`` process (``bench/timed_cli.py``): each phase
is timed once, so the phases' CPU seconds add up to the process's own (wait4), and the breakdown
line names every phase."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import speed  # noqa: E402

PHASES = ["start", "imports", "load_scenario", "plan", "engine", "columns", "summary", "write scenario.yaml",
          "write requests", "write steps", "write summary.json", "write_rest", "other", "teardown"]


def test_phases_cover_the_process_once(tmp_path):
    r = speed.run_cli("a", 300, 9.0, "fast", tmp_root=str(tmp_path))
    assert r["completed"] == 300
    phases = r["phases"]
    assert list(phases) == PHASES
    assert all(cpu >= 0 for _, cpu in phases.values())
    assert all(wall >= 0 for wall, _ in phases.values())  # (start's wall: the parent passed its spawn time)
    total = sum(cpu for _, cpu in phases.values())
    # every phase counted once: their CPU time is the process's (wait4), up to the clocks' ticks
    assert abs(total - r["cpu_s"]) <= 0.05 * r["cpu_s"] + 0.03, (total, r["cpu_s"], phases)
    assert phases["engine"][1] > 0 and phases["write steps"][1] > 0
    assert r["sha256"][1] <= phases["write requests"][1] + phases["write steps"][1]
    line = speed.phases_line(r)
    assert all(f"{name} " in line for name in PHASES)
    assert speed.phases_line({"wall_s": 1.0}) is None  # (rows recorded before the breakdown)


def test_fastest_phases_takes_each_phase_least_cpu_of_the_runs():
    runs = [{"phases": {"engine": [9.0, 3.1], "write steps": [1.0, 0.20]}},
            {"phases": {"engine": [5.0, 3.3], "write steps": [0.5, 0.25]}}]
    assert speed.fastest_phases(runs) == {"engine": 3.1, "write steps": 0.20}
    assert speed.fastest_phases(runs + [{"wall_s": 1.0}]) is None
