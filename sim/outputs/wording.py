"""Counted nouns in printed text: ``plural(1, "request")`` is "1 request", not "1 requests"."""

from __future__ import annotations


def plural(n, noun: str, nouns: str | None = None, fmt: str = "") -> str:
    """``n`` and ``noun`` in the number ``n`` takes: "1 request", "0 requests", "1,000 requests"
    (``fmt=","``: how ``n`` is written); ``nouns``: an irregular plural ("1 class", "2 classes")."""
    return f"{n:{fmt}} {noun if n == 1 else nouns or noun + 's'}"


def noun(n, singular: str, nouns: str | None = None) -> str:
    """The noun alone, in the number ``n`` takes (where the count is written apart from it)."""
    return singular if n == 1 else nouns or singular + "s"


def limit_text(v: float) -> str:
    """A limit in seconds as given: 2 s, 100 ms (seconds from 1 s, milliseconds under it)."""
    return f"{v * 1e3:g} ms" if v < 1 else f"{v:g} s"


def slo_limits(slo: dict) -> str:
    """"TTFT <= 1 s, TPOT <= 50 ms": an ``slo`` mapping's limits (``ttft_s``, ``tpot_s``; those not
    numbers left out, "" for none) as report.md, compare, sweep and plan write them (``limit_text``;
    run printed "TPOT <= 0.05 s" of the limit the others call 50 ms)."""
    return ", ".join(f"{name} <= {limit_text(v)}"
                     for name, v in (("TTFT", slo.get("ttft_s")), ("TPOT", slo.get("tpot_s")))
                     if isinstance(v, (int, float)) and not isinstance(v, bool))
