"""Regression: every packaged scenario (at 200 requests) still computes what it computed when
tests/golden was last written by tools/update_golden.py. A failure means the simulator's numbers
moved: if that was intended, regenerate the files and say why in the commit."""

import json
from pathlib import Path

import pytest

from tools.update_golden import key_figures, scenario_files

GOLDEN = Path(__file__).parent / "golden"


def flatten(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: p.stem)
def test_packaged_scenario_matches_golden(path):
    golden = GOLDEN / (path.stem + ".json")
    assert golden.exists(), f"no golden file for {path.name}: run python tools/update_golden.py"
    want = dict(flatten(json.loads(golden.read_text())))
    got = dict(flatten(key_figures(path)))
    assert set(got) == set(want)
    for k, v in want.items():
        if isinstance(v, float):
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-12), k
        else:
            assert got[k] == v, k
