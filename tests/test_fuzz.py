"""The scenario fuzzer (tests/fuzzing.py): random scenarios over the whole schema, raw YAML and
byte mutations, and mutated files a scenario names, each run through ``servesim validate`` and
``servesim run`` in this process. Every input must end with exit 0 or 2 (never a traceback or a
hang), exit 2 with one bounded line on stderr, validate and run must agree, and no run may take
longer than its size allows.

The default run tries a few dozen inputs (seconds); ``pytest -m slow`` tries 2,000 and prints the
figures (inputs, exits by kind, problems), and puts 300 scenarios through the study commands
(``sweep``, ``capacity``, ``compare``, ``plan``, ``run --seeds``, ``report``) with the same rules."""

import shutil
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


@pytest.mark.slow
def test_fuzz_studies_long(tmp_path):
    """Random scenarios of the schema strategies through a random study command each: every one
    ends with exit 0 or 2, one bounded error line, within ``fuzzing.STUDY_S``."""
    stats, problems = Counter(), []

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        root = fuzzing.fresh_dir(tmp_path)
        scenario = fuzzing._dump(data.draw(fuzzing.scenarios())).encode("utf-8", "surrogatepass")
        argv = data.draw(fuzzing.study_argv(root / "s.yaml", root / "out"))
        out = fuzzing.check_study(scenario, argv, root)
        shutil.rmtree(root, ignore_errors=True)  # (a sweep's runs: a few MB an input)
        stats["inputs"] += 1
        stats[f"validate exit {out.validate}"] += 1
        stats[f"{out.kind} exit {out.run}"] += 1
        if out.problems:
            problems.append((argv, out))
        assert not out.problems, "\n".join(out.problems) + f"\nargv {argv}\nscenario {scenario[:3000]!r}"

    try:
        one()
    finally:
        print("\nstudy fuzz figures: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    assert stats["inputs"] >= 300 and not problems
