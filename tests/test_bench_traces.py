"""``bench/traces.py`` (trace reading speed) runs and checks what it claims: each shape's file read
by ``read_trace`` and by the row-by-row reader gives the same trace (CSV and JSONL shapes)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_trace_reading_bench_runs_and_both_readers_agree():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "traces.py"), "--rows", "3000"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["numeric", "azure23", "azure24", "jsonl", "mooncake"]
    assert all(ln.endswith("same trace") and "3,000 rows" in ln for ln in lines)


def test_trace_reading_bench_names_an_unknown_shape():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "traces.py"), "--shapes", "azure25"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "azure25" in out.stderr and "azure24" in out.stderr
