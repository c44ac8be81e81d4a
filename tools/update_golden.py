"""Regenerate tests/golden/*.json: key summary figures of every packaged scenario at 200 requests.

These are regression files, not truth: they pin what the simulator computes today so that an
unintended change (a refactor, a speed-up) shows up. After an intended change, rerun this script
and say in the commit why the numbers moved.

    python tools/update_golden.py
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from servesim.inputs.scenario import load_scenario  # noqa: E402
from servesim.simulation import simulate  # noqa: E402

OVERRIDES = ["workload.num_requests=200"]
KEYS = ("num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s", "throughput_rps",
        "output_tokens_per_s", "ttft_s", "tpot_s", "tbt_s", "e2e_s", "queue_s", "slo_attainment", "goodput_rps")
PHASE_KEYS = ("prefill_tokens", "decode_tokens", "padding_tokens", "steps", "prefill_steps", "decode_steps",
              "mixed_steps", "prefill_time_s", "decode_time_s", "mixed_time_s")


def scenario_files() -> list[Path]:
    return sorted(Path(str(p)) for p in resources.files("servesim.scenarios").iterdir() if p.name.endswith(".yaml"))


def key_figures(path: Path) -> dict:
    s = simulate(load_scenario(path, OVERRIDES)).summary
    out = {k: s[k] for k in KEYS}
    out["phases"] = {k: s["phases"][k] for k in PHASE_KEYS}
    return out


def main() -> None:
    for p in scenario_files():
        target = ROOT / "tests" / "golden" / (p.stem + ".json")
        target.write_text(json.dumps(key_figures(p), indent=1, sort_keys=True) + "\n")
        print("wrote", target.relative_to(ROOT))


if __name__ == "__main__":
    main()
