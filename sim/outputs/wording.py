"""Counted nouns in printed text: ``plural(1, "request")`` is "1 request", not "1 requests"."""

from __future__ import annotations


def plural(n, noun: str, nouns: str | None = None, fmt: str = "") -> str:
    """``n`` and ``noun`` in the number ``n`` takes: "1 request", "0 requests", "1,000 requests"
    (``fmt=","``: how ``n`` is written); ``nouns``: an irregular plural ("1 class", "2 classes")."""
    return f"{n:{fmt}} {noun if n == 1 else nouns or noun + 's'}"


def noun(n, singular: str, nouns: str | None = None) -> str:
    """The noun alone, in the number ``n`` takes (where the count is written apart from it)."""
    return singular if n == 1 else nouns or singular + "s"
