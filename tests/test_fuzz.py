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


def _fuzz(tmp_path, examples: int, derandomize: bool, one_input=None, label: str = "fuzz") -> tuple[Counter, list]:
    """Run ``examples`` inputs, each ``one_input(data, root)`` -> (outcome, stats keys, the input as
    shown on failure) in a fresh folder (default: a schema case through validate and run); every
    outcome must be free of problems. Prints the figures (``label`` figures: ...) at the end."""
    stats, problems = Counter(), []
    one_input = one_input or _schema_input

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        root = fuzzing.fresh_dir(tmp_path)
        out, keys, shown = one_input(data, root)
        stats["inputs"] += 1
        for k in keys:
            stats[k] += 1
        if out.problems:
            problems.append((shown, out))
        assert not out.problems, "\n".join(out.problems) + f"\n{shown}"

    try:
        one()
    finally:
        print(f"\n{label} figures: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    return stats, problems


def _schema_input(data, root):
    """A schema case (``fuzzing.cases``) through validate and run."""
    case = data.draw(fuzzing.cases(root))
    out = fuzzing.check(case, root)
    return (out, [f"kind {case.kind}", f"validate exit {out.validate}", f"run exit {out.run}"],
            f"input ({case.kind}): {case.scenario[:3000]!r} files {list(case.files)} sets {case.sets}")


def _study_input(data, root):
    """A schema scenario through a random study (``fuzzing.study_argv``, ``fuzzing.check_study``)."""
    scenario = fuzzing._dump(data.draw(fuzzing.scenarios())).encode("utf-8", "surrogatepass")
    argv = data.draw(fuzzing.study_argv(root / "s.yaml", root / "out"))
    out = fuzzing.check_study(scenario, argv, root)
    shutil.rmtree(root, ignore_errors=True)  # (a sweep's runs: a few MB an input)
    return (out, [f"validate exit {out.validate}", f"{out.kind} exit {out.run}"],
            f"argv {argv}\nscenario {scenario[:3000]!r}")


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
    stats, problems = _fuzz(tmp_path, 300, derandomize=False, one_input=_study_input, label="study fuzz")
    assert stats["inputs"] >= 300 and not problems
