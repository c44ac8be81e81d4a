"""The text cells of the study tables (``servesim compare``/``sweep`` and report.md): labels longer
than a column allows are cut visibly, and two different labels never read the same."""

from __future__ import annotations

from servesim.cli.studies import format_table
from servesim.plots.report import _md_table


def _labels(lines: list) -> list:
    return [line.split()[0] for line in lines[1:]]


def test_long_labels_are_cut_visibly_and_stay_distinct():
    a = "policies.x:ShortestPromptFirst_with_a_long_name-seqs8"
    b = "policies.x:ShortestPromptFirst_with_a_long_name-seqs16"
    rows = [{"label": a, "goodput_rps": 1.0}, {"label": b, "goodput_rps": 2.0}, {"label": "fcfs", "goodput_rps": 3.0}]
    shown = _labels(format_table(rows, ["label", "goodput_rps"]).splitlines())
    assert len(set(shown)) == 3
    assert shown[2] == "fcfs"
    for text, full in zip(shown[:2], (a, b)):
        assert text != full[:len(text)]  # (not a silent prefix: the cut is marked)
        assert "..." in text and len(text) <= 40
    md = _md_table([{"label": a + "_" * 10 + x} for x in ("1", "2")], ["label"]).splitlines()[2:]
    assert md[0] != md[1] and all("..." in line for line in md)


def test_labels_whose_cuts_would_read_the_same_are_shown_whole():
    from servesim.errors import clip_distinct

    base = "x" * 30
    texts = [base + "-left-" + "z" * 20, base + "-right-" + "z" * 20, "short"]
    out = clip_distinct(texts, 40)
    assert len(set(out.values())) == 3
    assert out["short"] == "short"
    for t in texts[:2]:  # (the same start and end: cut, they would read alike)
        assert out[t] == t
    assert clip_distinct(["a" * 41], 40)["a" * 41].count("...") == 1
