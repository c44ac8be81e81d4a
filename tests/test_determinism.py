"""Same scenario and seed -> byte-identical requests.csv and steps.csv; another seed differs."""

from servesim.simulation import simulate
from tests.conftest import make_scenario


def run_files(tmp_path, name, seed):
    sc = make_scenario(**{"seed": seed, "workload.num_requests": 300, "cluster.replicas": 2})
    out = simulate(sc).write(tmp_path / name)
    return (out / "requests.csv").read_bytes(), (out / "steps.csv").read_bytes()


def test_same_seed_byte_identical(tmp_path):
    a = run_files(tmp_path, "a", 7)
    b = run_files(tmp_path, "b", 7)
    assert a == b
    c = run_files(tmp_path, "c", 8)
    assert c[0] != a[0]
