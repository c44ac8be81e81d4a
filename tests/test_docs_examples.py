"""Every command and code block of README.md and docs/*.md runs (with quick settings), so a change
that breaks a documented example fails here. How blocks are run and marked: tests/docs_blocks.py."""

import pytest

from tests.docs_blocks import LANGUAGES, PAGES, ROOT, blocks, run_page


def test_every_block_declares_a_language_and_is_run_or_marked():
    total = {"run": 0, "slow": 0, "not-run": 0, "sample": 0}
    for page in PAGES:
        for b in blocks(page):
            assert b.lang in LANGUAGES, f"{b.where}: fence language {b.lang!r}; use one of {LANGUAGES}"
            if b.kind == "not-run":
                assert b.markers["not-run"].strip(), f"{b.where}: say why a block is not run"
            total[b.kind] += 1
    # the documentation shows working examples, not only samples
    assert total["run"] >= 30 and total["not-run"] <= 5, total


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.kind == "run" for b in blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page, tmp_path):
    counts = run_page(page, tmp_path)
    expected = sum(b.kind == "run" or "file" in b.markers for b in blocks(page))
    assert counts["run"] == expected, counts


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.kind == "slow" for b in blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_slow_examples_run(page, tmp_path):
    slow = [b for b in blocks(page) if b.kind == "slow"]
    if any("../shared" in b.body for b in slow) and not (ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("the block reads ../shared/data, which this checkout does not have")
    counts = run_page(page, tmp_path, kinds=("run", "slow"))
    assert counts["slow"] == len(slow), counts
