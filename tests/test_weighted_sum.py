"""The TBT mean's exact sum in integers (``stats._weighted_sum_by_exponent``) against
``math.fsum`` of the exact products and against ``Fraction``: the exactly rounded sum is one
number, so the two must agree bit for bit, summary.json's mean unchanged."""

import math
from fractions import Fraction

import numpy as np
import pytest

from servesim.outputs import stats
from servesim.outputs.stats import WeightedSample, _exact_products, _weighted_sum_by_exponent


def _draws(rng):
    yield rng.random(50) * 0.05, rng.integers(1, 256, 50)  # TBT gaps and batch sizes
    yield rng.random(3000) * 1e-2, rng.integers(0, 1024, 3000)  # counts up to the limit, zeros
    for _ in range(150):
        n = int(rng.integers(1, 200))
        scale = 10.0 ** rng.integers(-300, 300, n)
        v = rng.standard_normal(n) * scale  # both signs, any magnitude
        yield v, rng.integers(0, 1024, n)
        v = np.concatenate([v, -v[: n // 2], [0.0, -0.0, 5e-324, -2.2250738585072014e-308, 1e-310]])
        yield v, rng.integers(0, 1024, len(v))  # subnormals, cancellation
    x = rng.random(40)
    yield np.concatenate([x, -x, [1e-300]]), np.ones(81, dtype=np.int64)  # all but one cancel


def test_the_integer_sum_is_fsums_and_the_exact_sums_rounding():
    rng = np.random.default_rng(7)
    for v, c in _draws(rng):
        got = _weighted_sum_by_exponent(v, c)
        want = math.fsum(_exact_products(v, c))
        if got is None:  # (only where the sum is zero)
            assert want == 0.0
            continue
        assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
        assert got == float(sum(Fraction(float(a)) * int(b) for a, b in zip(v, c)))


def test_chunks_add_up(monkeypatch):
    """Several chunks of the sum (a long run's millions of pairs) give what one does."""
    rng = np.random.default_rng(3)
    v, c = rng.random(10_000) * 0.03, rng.integers(1, 300, 10_000)
    whole = _weighted_sum_by_exponent(v, c)
    monkeypatch.setattr(stats, "_SUM_CHUNK", 777)
    assert _weighted_sum_by_exponent(v, c) == whole == math.fsum(_exact_products(v, c))


@pytest.mark.parametrize("v, c", [
    ([0.5, 0.25], [1024, 1]),  # a count past the limit: fsum
    ([0.5, math.inf], [1, 1]),
    ([0.0, -0.0], [3, 4]),  # a zero sum: its sign is fsum's
    ([1e308, 1e308], [1000, 1000]),  # beyond a double: fsum's error or inf
])
def test_where_it_does_not_apply_fsum_decides(v, c):
    assert _weighted_sum_by_exponent(np.array(v), np.array(c, dtype=np.int64)) is None


def test_the_weighted_mean_uses_it_and_is_unchanged():
    rng = np.random.default_rng(5)
    v, c = rng.random(5000) * 0.02, rng.integers(1, 256, 5000)
    mean = WeightedSample(v, c).stats()["mean"]
    assert mean == math.fsum(_exact_products(v, c)) / int(c.sum())
    big = np.full(5000, 2000)  # (counts past the limit: fsum's way)
    assert WeightedSample(v, big).stats()["mean"] == math.fsum(_exact_products(v, big)) / 10_000_000
