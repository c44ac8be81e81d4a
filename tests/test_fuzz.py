"""The scenario fuzzer (tests/fuzzing.py): random scenarios over the whole schema, raw YAML and
byte mutations, and mutated files a scenario names, each run through ``servesim validate`` and
``servesim run`` in this process. Every input must end with exit 0 or 2 (never a traceback or a
hang), exit 2 with one bounded line on stderr, validate and run must agree, and no run may take
longer than its size allows.

The default run tries a few dozen inputs (seconds); ``pytest -m slow`` tries 2,000 and prints the
figures (inputs, exits by kind, problems)."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fuzzing


def _fuzz(tmp_path, examples: int, derandomize: bool) -> tuple[Counter, list]:
    stats, problems = Counter(), []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        root = fuzzing.fresh_dir(tmp_path)
        case = data.draw(fuzzing.cases(root))
        out = fuzzing.check(case, root)
        stats["inputs"] += 1
        stats[f"kind {case.kind}"] += 1
        stats[f"validate exit {out.validate}"] += 1
        stats[f"run exit {out.run}"] += 1
        if out.problems:
            problems.append((case, out))
        assert not out.problems, "\n".join(out.problems) + f"\ninput ({case.kind}): {case.scenario[:3000]!r} " \
                                                           f"files {list(case.files)} sets {case.sets}"

    try:
        one()
    finally:
        print("\nfuzz figures: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    return stats, problems


def test_fuzz_quick(tmp_path):
    stats, problems = _fuzz(tmp_path, 30, derandomize=True)
    assert stats["inputs"] >= 30 and not problems


@pytest.mark.slow
def test_fuzz_long(tmp_path):
    stats, problems = _fuzz(tmp_path, 2000, derandomize=False)
    assert stats["inputs"] >= 2000 and not problems
