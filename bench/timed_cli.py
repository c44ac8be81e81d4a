"""``servesim ARGS`` as the console script runs it, plus what ``bench/speed.py`` needs to split its
wall time: the seconds spent writing the output files (``Results.write``, timed) and a few
summary figures, printed as one JSON line at the end of stderr.

    python bench/timed_cli.py run SCENARIO.yaml --out DIR --quiet
"""

from __future__ import annotations

import json
import sys
import time

from servesim import simulation
from servesim.cli.main import main

_write = simulation.Results.write
_seen: dict = {"write_s": 0.0}


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
    code = main(sys.argv[1:])
    print(json.dumps(_seen), file=sys.stderr)
    sys.exit(code)
