"""numfmt: columns of numbers as text, exactly Python's repr (floats) and str (integers)."""

import numpy as np
import pytest

from servesim.outputs.numfmt import float_cells, int_cells


def texts(cells: np.ndarray) -> list:
    """Each row's characters without the NUL padding."""
    return [row.tobytes().replace(b"\0", b"").decode() for row in cells]


def expected_floats(x) -> list:
    return ["" if v != v else repr(v) for v in np.asarray(x, dtype=float).tolist()]


def edge_floats() -> np.ndarray:
    powers10 = 10.0 ** np.arange(-12, 25)
    powers2 = 2.0 ** np.arange(-40, 70)
    near = np.concatenate([np.nextafter(powers10, 0), np.nextafter(powers10, np.inf), np.nextafter(powers2, 0),
                           np.nextafter(powers2, np.inf)])
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, 2 / 3, 5e-324,
                2.2250738585072014e-308,
                1.7976931348623157e308, 9.5, 0.95, 99.99999999999999, 999999999999999.9, 9999999999999998.0, 1e15,
                1e16, 1e-4, 1e-5, 1.5e-5, 9.999999999999999e-5, 123456789012345680.0, 1e22, 1e23, 4.35,
                0.30000000000000004, 20383398371328.0, 14019670016.0]
    return np.concatenate([powers10, powers2, near, -powers10, specials, -np.array(specials)])


def test_float_cells_are_repr_on_edge_cases():
    x = edge_floats()
    assert texts(float_cells(x)) == expected_floats(x)


@pytest.mark.parametrize("seed", [0, 1])
def test_float_cells_are_repr_on_a_million_values(seed):
    """Simulated times (running sums: 16-17 digit values), durations, FLOP counts (integers as
    floats), short decimals, values across every exponent, and arbitrary bit patterns."""
    rng = np.random.default_rng(seed)
    n = 100_000
    x = np.concatenate([
        np.cumsum(rng.random(n) * 0.01), rng.random(n) * 0.05, np.round(rng.random(n) * 1e13),
        np.round(rng.random(n) * 1e6) / 1e3, rng.random(n) * 10.0 ** rng.integers(-9, 20, n),
        -rng.random(n) * 10.0 ** rng.integers(-9, 20, n), rng.integers(0, 2 ** 63, n, dtype=np.int64).view(np.float64),
        rng.integers(1, 10 ** 6, n) * 10.0 ** rng.integers(-8, 12, n), np.full(n, np.nan) * (rng.random(n) < 0.5),
        rng.random(n) * 1e-4])
    x = x[rng.permutation(len(x))]
    got = texts(float_cells(x))
    want = expected_floats(x)
    bad = [(v, g, w) for v, g, w in zip(x.tolist(), got, want) if g != w]
    assert bad == []


def test_float_cells_of_one_kind_of_value_per_call():
    """A block of rows can be all NaN, all zero, all out of range (the width logic's corners) or
    all whole numbers (written as integers with ".0")."""
    rng = np.random.default_rng(2)
    whole = np.round(rng.random(1000) * 10.0 ** rng.integers(0, 16, 1000))  # FLOP counts: whole numbers
    for x in (np.full(5, np.nan), np.zeros(4), np.array([-0.0]), np.array([1e300, -1e-300]), np.array([np.inf]),
              np.zeros(0), whole, -whole, np.array([2.0 ** 53 - 1, 1e15, 1.0]), np.array([2.0 ** 53, 1e16]),
              np.array([0.0, -0.0, 3.0]), np.array([1.0, np.nan])):
        assert texts(float_cells(x)) == expected_floats(x)


def test_int_cells_are_str():
    rng = np.random.default_rng(3)
    for x in (rng.integers(-1, 20, 1000), rng.integers(0, 10 ** 6, 100_000), rng.integers(-10 ** 15, 10 ** 15, 10_000),
              rng.integers(-2 ** 63, 2 ** 63 - 1, 1000, dtype=np.int64), np.array([0, -1, 9, 10, 99, 100, 10 ** 15]),
              np.zeros(7, dtype=np.int64), np.array([], dtype=np.int64)):
        assert texts(int_cells(x)) == [str(v) for v in x.tolist()]
