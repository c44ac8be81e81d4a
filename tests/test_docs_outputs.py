"""The command outputs the docs quote (``text`` blocks marked ``<!-- output-of: ARGS -->``, see
tests/docs_blocks.py) are what the commands print today: a change to the code that moves a quoted
number, or a line's wording, fails here until the block is regenerated from the command.

Runs are seeded and deterministic (the same scenario gives the same requests and the same steps on
every machine), so the comparison is exact, to the digits printed; only wall-clock times vary and
are not compared. Capacity searches depend on ``--workers`` (the probes run in parallel rounds), so
a block quoting one names the worker count its output was made with."""

import shlex

import pytest

from tests.docs_blocks import PAGES, ROOT, blocks, output_of, stale_lines

QUOTED = [b for p in PAGES for b in blocks(p) if "output-of" in b.markers]


def _check(block, tmp_path):
    assert block.lang == "text", f"{block.where}: output-of marks a text block (a quoted output)"
    missing = stale_lines(block, output_of(block, tmp_path))
    assert not missing, (f"{block.where}: the quoted output of servesim {block.markers['output-of']} is stale "
                         f"(rerun it and paste what it prints):\n" + "\n".join(missing))


def test_quoted_outputs_are_marked():
    """The quoted outputs this suite reruns (a page losing its markers would silently stop checking)."""
    pages = {b.page.relative_to(ROOT).as_posix() for b in QUOTED}
    assert {"README.md", "docs/comparing-policies.md", "docs/sizing.md", "docs/cost-model.md",
            "docs/workloads.md"} <= pages, pages
    for b in QUOTED:
        assert shlex.split(b.markers["output-of"])[0] != "servesim", f"{b.where}: give the arguments, not 'servesim'"


@pytest.mark.parametrize("block", [b for b in QUOTED if "slow" not in b.markers], ids=lambda b: b.where)
def test_quoted_output_is_what_the_command_prints(block, tmp_path):
    _check(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in QUOTED if "slow" in b.markers], ids=lambda b: b.where)
def test_quoted_slow_output_is_what_the_command_prints(block, tmp_path):
    _check(block, tmp_path)


def test_a_changed_figure_in_a_quoted_output_is_found(tmp_path):
    """The check itself: a quoted line with one digit changed is reported with the printed line."""
    from tests.docs_blocks import Block

    printed = ["scenario x: 10 requests", "simulated 1.0 s in 0.31 s wall", "TTFT  55.1 ms"]
    good = Block(ROOT / "README.md", 1, "text", "scenario x: 10 requests\nsimulated 1.0 s in 0.16 s wall\n...\n")
    bad = Block(ROOT / "README.md", 1, "text", "scenario x: 10 requests\nTTFT  55.2 ms\n")
    assert stale_lines(good, printed) == []
    assert stale_lines(bad, printed) == ["docs:    TTFT  55.2 ms\nprinted: TTFT  55.1 ms"]
