"""Trace reading speed: seconds and peak memory to read a trace of N rows with ``read_trace``
(column by column where the file is plain) against the row-by-row reader that every file with
something to complain about goes through, for the shapes real traces have:

  numeric  arrival_s, prompt_tokens, output_tokens (servesim's own requests.csv; Vidur's traces)
  azure23  Azure's 2023 traces: TIMESTAMP as 2023-11-16 18:17:03.9799600
  azure24  Azure's 2024 week-long traces: TIMESTAMP as 2024-05-10 00:00:00.0099300+00:00
           (a tenth of the stamps without a fraction, as some of theirs have)
  jsonl    JSON lines {"arrival_s", "prompt_tokens", "output_tokens"}, times in seconds
  mooncake Mooncake's traces: {"timestamp" (ms), "input_length", "output_length", "hash_ids"}
           (one id per 512-token block of the prompt)

The files are synthetic (random gaps and lengths, seeded), written to a temporary folder and
removed after. Each read runs in a fresh process (``ru_maxrss`` is its peak); both readers must
give the same trace, bit for bit, or the script stops.

    python bench/traces.py [--rows 3000000] [--shapes numeric,azure23,azure24,jsonl,mooncake]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES = ("numeric", "azure23", "azure24", "jsonl", "mooncake")

CHILD = r"""
import hashlib, json, resource, sys, time
from servesim.inputs import traces as T
from servesim.resources import collection_paused
path, reader = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if reader == "columns":
    d = T.read_trace(path)
else:
    fmt, cols = T._detect(path, "auto", None)  # (the format and columns read_trace finds)
    with collection_paused():
        if path.endswith(".jsonl"):
            d = T._read_jsonl_rows(path, cols, 1e-3 if fmt == "mooncake" else 1.0, True)
        else:
            d = T._read_csv_rows(path, cols, 1.0, True)
s = time.perf_counter() - t
h = hashlib.sha256(d.arrival_s.tobytes() + d.prompt_tokens.tobytes() + d.output_tokens.tobytes()
                   + repr(d.hash_ids).encode()).hexdigest()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"s": s, "rows": len(d), "digest": h, "peak_mib": peak}))
"""


def write_trace(path: Path, shape: str, rows: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    t = dt.datetime(2024, 5, 10) if shape == "azure24" else dt.datetime(2023, 11, 16, 18, 17)
    x = 0.0
    with path.open("w") as f:
        if shape in ("jsonl", "mooncake"):
            for _ in range(rows):
                x += rnd.randint(1, 400_000) / 1e6
                p, o = rnd.randint(1, 8000), rnd.randint(1, 800)
                if shape == "jsonl":
                    f.write(json.dumps({"arrival_s": round(x, 6), "prompt_tokens": p, "output_tokens": o}) + "\n")
                else:  # (ms, as Mooncake writes them; ids shared between prompts, as its prefixes are)
                    ids = list(range(rnd.randint(0, 50), rnd.randint(0, 50) + -(-p // 512)))
                    f.write(json.dumps({"timestamp": int(x * 1e3), "input_length": p, "output_length": o,
                                        "hash_ids": ids}) + "\n")
            return
        f.write("arrival_s,prompt_tokens,output_tokens\n" if shape == "numeric"
                else "TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for _ in range(rows):
            gap = rnd.randint(1, 400_000)  # microseconds
            p, o = rnd.randint(1, 8000), rnd.randint(1, 800)
            if shape == "numeric":
                x += gap / 1e6
                f.write(f"{x:.6f},{p},{o}\n")
                continue
            prev, t = t, t + dt.timedelta(microseconds=gap)
            stamp = t.strftime("%Y-%m-%d %H:%M:%S")
            if shape == "azure24" and rnd.random() < 0.1 and t.replace(microsecond=0) > prev:
                t = t.replace(microsecond=0)  # (a stamp on the whole second, without a fraction)
            else:
                stamp += f".{t.microsecond:06d}{rnd.randint(0, 9)}"
            f.write(f"{stamp}{'+00:00' if shape == 'azure24' else ''},{p},{o}\n")


def read(path: Path, reader: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), reader], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"reading {path.name} ({reader}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        raise SystemExit(f"--shapes: unknown {', '.join(bad)}; valid: {', '.join(SHAPES)}")
    tmp = Path(tempfile.mkdtemp(prefix="servesim-bench-traces-"))
    try:
        for shape in shapes:
            path = tmp / f"{shape}.{'jsonl' if shape in ('jsonl', 'mooncake') else 'csv'}"
            write_trace(path, shape, args.rows)
            cols, rows = read(path, "columns"), read(path, "rows")
            if cols["digest"] != rows["digest"] or cols["rows"] != rows["rows"]:
                raise SystemExit(f"{shape}: the two readers disagree")
            mib = path.stat().st_size / 2**20
            print(f"{shape:8s} {args.rows:,} rows, {mib:.0f} MiB: read_trace {cols['s']:.2f} s "
                  f"(peak {cols['peak_mib']:.0f} MiB), row by row {rows['s']:.2f} s (peak {rows['peak_mib']:.0f} MiB), "
                  f"{rows['s'] / cols['s']:.1f}x; same trace", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
