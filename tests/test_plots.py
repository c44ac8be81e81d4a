import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plots import latency_cdf, step_timeline  # noqa: E402
from sim.simulate import simulate  # noqa: E402
from tests.conftest import make_scenario  # noqa: E402


def test_latency_cdf_and_timeline():
    res = simulate(make_scenario())
    r = res.requests
    fig, (a, b) = plt.subplots(1, 2)
    latency_cdf(r["first_token_s"] - r["arrival_s"], a, label="TTFT", slo_s=0.5)
    assert a.get_xlabel() == "latency (ms)"
    xs = a.lines[0].get_xdata()
    assert xs.max() == (r["first_token_s"] - r["arrival_s"]).max() * 1e3
    assert [t.get_text() for t in a.get_legend().get_texts()] == ["TTFT", "SLO"]
    step_timeline(res.steps, b)
    assert len(b.lines[0].get_xdata()) == len(res.steps["start_s"])
    plt.close(fig)
