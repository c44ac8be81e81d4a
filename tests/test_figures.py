"""Every design-review figure from a small run: axis labels, legend entries and data extents."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servesim.plots import figures as F  # noqa: E402
from servesim.outputs.rundir import RunData  # noqa: E402
from servesim.simulation import simulate  # noqa: E402
from tests.conftest import make_scenario  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    a = RunData.from_results(simulate(make_scenario(**{"policy.max_num_seqs": 64})), "continuous")
    b = RunData.from_results(simulate(make_scenario(**{"policy.max_num_seqs": 2})), "small")
    return {"continuous": a, "small": b}


def legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


@pytest.mark.parametrize("metric, xlabel", [("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"),
                                            ("tbt", "ITL (token gap) (ms)"), ("e2e", "E2E (ms)")])
def test_latency_cdfs(runs, ax, metric, xlabel):
    samples = {g: r.latency(metric) for g, r in runs.items()}
    F.latency_cdfs(samples, ax, metric, slo_s=0.5)
    assert ax.get_xlabel() == xlabel and ax.get_ylabel().startswith("fraction of")
    assert legend(ax) == ["continuous", "small", "SLO 500 ms"]
    for line, (g, x) in zip(ax.lines, samples.items()):
        assert line.get_xdata().max() == pytest.approx(np.nanmax(x) * 1e3)
        # every sample, and the rise from 0 at the smallest
        assert line.get_ydata()[-1] == 1.0 and len(line.get_xdata()) == np.isfinite(x).sum() + 1
        assert line.get_ydata()[0] == 0.0 and line.get_xdata()[0] == pytest.approx(np.nanmin(x) * 1e3)
    assert line.get_color() != ax.lines[0].get_color()


def test_a_cdf_of_one_sample_is_drawn(ax):
    """A run of one request drew an empty CDF (a step of one point has no line): it rises from 0
    to 1 at the sample."""
    F.latency_cdfs({"one": [0.026]}, ax, "ttft")
    assert list(ax.lines[0].get_xdata()) == pytest.approx([26.0, 26.0])
    assert list(ax.lines[0].get_ydata()) == [0.0, 1.0]


def _covered(ax, box) -> list:
    """The labelled curves of ``ax`` that run through ``box`` (data coordinates), by their drawn
    steps: between two samples the CDF is flat, then rises."""
    hit = []
    for line in ax.lines:
        if line.get_label().startswith("SLO"):
            continue
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        xs = np.repeat(x, 2)[1:]
        ys = np.repeat(y, 2)[:-1]  # the step path: (x0, y0), (x1, y0), (x1, y1), ...
        inside = (xs >= box.x0) & (xs <= box.x1) & (ys >= box.y0) & (ys <= box.y1)
        flat = [(box.x0 <= a or box.x0 <= b) and min(a, b) <= box.x1 and box.y0 <= v <= box.y1
                for a, b, v in zip(xs[:-1], xs[1:], ys[:-1])]
        if inside.any() or any(flat):
            hit.append(line.get_label())
    return hit


@pytest.mark.parametrize("slow_ms", [(60.0, 30_000.0), (20_000.0, 200_000.0)])
def test_cdf_legend_covers_no_curve(slow_ms):
    """The legend sat in the lower right whatever ran there: an overloaded configuration's CDF,
    far right and low for most of its width, ran under it (a comparison's slowest, or one
    overloaded run's). It goes where no curve runs, else below the axes."""
    rng = np.random.default_rng(0)
    fast = rng.uniform(0.02, 0.2, 300)
    slow = np.exp(rng.uniform(*np.log(np.asarray(slow_ms) / 1e3), 300))
    fig, axes = plt.subplots(1, 3, figsize=(13.8, 4.4))
    F.latency_cdfs({"fast (1 GPU)": fast, "overloaded (1 GPU)": slow}, axes[0], "ttft", slo_s=1.0)
    F.latency_cdfs({"overloaded (1 GPU)": slow}, axes[1], "e2e")
    fig.text(0.01, 0.01, "a note\nof three\nlines", va="bottom")  # (a report's notes: the axes shrink)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.canvas.draw()
    for ax in axes[:2]:
        box = ax.get_legend().get_window_extent().transformed(ax.transData.inverted())
        assert _covered(ax, box) == [], (ax.get_legend()._loc, box)
    plt.close(fig)


def test_cdf_legend_leaves_the_slo_line_in_view():
    """One run well within its SLO: the lower-right legend clears the curve but sat over the
    foot of the dashed SLO line near the axes' right edge. It goes where it covers neither."""
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    F.latency_cdfs({"default-llama3-8b-h100 (1 GPU)": rng.lognormal(np.log(0.045), 0.4, 200)}, ax, "ttft",
                   slo_s=1.0)
    fig.tight_layout()
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent().transformed(ax.transData.inverted())
    assert not box.x0 <= 1000.0 <= box.x1 or not (0.0 < box.y1 and box.y0 < 1.0), box
    plt.close(fig)


def test_long_labels_are_wrapped_inside_their_axes():
    """A long scenario or variant name ran its legend past the axes, over the next panel, and
    its bar labels into each other: legend entries, tick labels and panel titles break lines."""
    long = "a-really-long-variant-label-for-continuous-batching-with-many-seqs (1 GPU)"
    fig, axes = plt.subplots(1, 3, figsize=(13.8, 4.4))
    F.latency_cdfs({long: [0.1, 0.2, 0.3]}, axes[0], "ttft")
    F.latency_vs_load({long: {"rate": [1, 2], "p50": [0.01, 0.02], "p99": [0.03, 0.04]}}, axes[1], "ttft")
    F.ttft_breakdown({long: {"queueing": 0.01, "prefill": 0.02, "api": 0.005},
                      "another-really-long-variant-label-chunked-prefill-512 (1 GPU)":
                          {"queueing": 0.01, "prefill": 0.03, "api": 0.005}}, axes[2])
    fig.tight_layout()
    fig.canvas.draw()
    for ax in axes[:2]:
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert all(len(line) <= 40 for t in texts for line in t.split("\n")), texts
        assert "".join(texts[0].split("\n")).replace(" ", "").startswith(long.replace(" ", ""))
        frame = ax.get_window_extent()
        box = ax.get_legend().get_window_extent()
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1  # (within its own panel)
    ticks = [t for t in axes[2].get_xticklabels()]
    assert all(len(line) <= 24 for t in ticks for line in t.get_text().split("\n"))
    a, b = (t.get_window_extent() for t in ticks)
    assert a.x1 < b.x0  # (side by side, not over each other)
    plt.close(fig)


def test_policy_colors_are_fixed():
    c1 = F.colors_for(["pd_split", "continuous", "x"])
    c2 = F.colors_for(["continuous", "y", "pd_split"])
    assert c1["continuous"] == c2["continuous"] and c1["pd_split"] == c2["pd_split"]
    assert len(set(c1.values())) == 3


def load_series():
    return {"continuous": {"rate": [1, 2, 4], "p50": [0.01, 0.02, 0.05], "p99": [0.03, 0.08, 0.9]},
            "small": {"rate": [1, 2, 4], "p50": [0.01, 0.03, 0.2], "p99": [0.04, 0.3, 2.0]}}


def test_latency_vs_load(ax):
    F.latency_vs_load(load_series(), ax, "ttft", slo_s=0.5)
    assert ax.get_xlabel() == "offered load (req/s)" and ax.get_ylabel() == "TTFT (ms)"
    assert legend(ax) == ["continuous p99", "continuous p50", "small p99", "small p50", "SLO 500 ms"]
    assert list(ax.lines[2].get_ydata()) == [40, 300, 2000]
    assert list(ax.lines[-1].get_ydata()) == [500, 500]  # the SLO line
    assert ax.lines[0].get_color() == ax.lines[1].get_color()  # p50 and p99 of one policy share a colour


def test_slo_lines_name_their_limit_as_the_text_does(ax):
    """The SLO line's legend entry said "SLO 1000 ms" of the limit every title and printed line
    writes "1 s" (``wording.limit_text``: seconds from 1 s, milliseconds under it)."""
    from servesim.outputs.wording import limit_text

    for slo_s in (1.0, 2.5, 0.05):
        ax.clear()
        F.latency_vs_load(load_series(), ax, "ttft", slo_s=slo_s)
        assert legend(ax)[-1] == f"SLO {limit_text(slo_s)}"
    assert legend(ax)[-1] == "SLO 50 ms"
    ax.clear()
    F.latency_cdfs({"a": np.array([0.2, 0.4, 1.5])}, ax, "ttft", slo_s=1.0)
    assert "SLO 1 s" in legend(ax) and not any("1000 ms" in t for t in legend(ax))
    ax.clear()
    F.capacity_probes({0: {"rate": [1.0, 2.0], "p99": [0.5, 3.0], "meets": [True, False]}}, ax, "ttft", slo_s=2.0)
    assert "SLO 2 s" in legend(ax)


def _line_points_in(ax, box) -> list:
    """Labels of ``ax``'s lines with a drawn point (or a point along a drawn segment) in ``box``
    (display coordinates)."""
    hit = []
    for line in ax.get_lines():
        pts = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        pts = pts[np.isfinite(pts).all(axis=1)]
        if len(pts) > 1 and line.get_linestyle() not in ("None", "none", "", " "):
            pts = np.concatenate([a + np.linspace(0, 1, 100)[:, None] * (b - a) for a, b in zip(pts[:-1], pts[1:])])
        if any(box.contains(*p) for p in pts):
            hit.append(line.get_label())
    return hit


@pytest.mark.parametrize("n_series", [1, 4])
def test_latency_vs_load_legend_lies_over_no_line(n_series):
    """matplotlib's "best" spot is the least-bad one: with four configurations (or long names)
    the legend lay over curves and the SLO line. It stays inside where it covers none, else it
    goes below the axes."""
    rng = np.random.default_rng(1)
    data = {f"configuration-{i} (1 GPU)": {"rate": [4, 8, 12, 16], "p50": list(rng.uniform(0.02, 0.2, 4)),
                                            "p99": list(rng.uniform(0.2, 2.0, 4))} for i in range(n_series)}
    if n_series == 1:  # (flat and low: the room above them holds the legend)
        data = {"continuous (1 GPU)": {"rate": [4, 8, 12, 16], "p50": [0.01] * 4, "p99": [0.02] * 4}}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    F.latency_vs_load(data, axes[0], "ttft", slo_s=1.0)
    fig.text(0.01, 0.01, "a note\nof three\nlines", va="bottom")  # (a report's notes: the axes shrink)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.canvas.draw()
    ax = axes[0]
    box = ax.get_legend().get_window_extent()
    assert _line_points_in(ax, box) == []
    inside = ax.get_window_extent().contains(box.x0 + 1, box.y0 + 1)
    assert inside == (n_series == 1)  # (one configuration leaves room inside; four do not)
    plt.close(fig)


def test_latency_vs_load_legends_below_two_panels_stay_apart():
    """A sweep over one field names each configuration at length ("max_num_batched_tokens=8192
    (1 GPU) p99"): the legend below each panel took two columns however wide they were, and the
    TTFT panel's ran under the TPOT panel's, text over text. Two columns only where they fit the
    axes' width; both legends lie within their own axes' span, below the x label."""
    data = {f"max_num_batched_tokens={b} (1 GPU)": {"rate": [6, 12], "p50": [0.04, 0.05], "p99": [0.2, 0.22],
                                                   "ok": [True, b != 2048]} for b in (512, 2048, 8192)}
    fig, axes = F.subplots(1, 2, figsize=(12, 4.8))
    F.latency_vs_load(data, axes[0], "ttft", slo_s=1.0)
    F.latency_vs_load({k: {**d, "p50": [0.008, 0.01], "p99": [0.01, 0.015]} for k, d in data.items()}, axes[1],
                      "tpot", slo_s=0.05)
    fig.tight_layout()
    fig.canvas.draw()
    boxes = [ax.get_legend().get_window_extent() for ax in axes]
    assert not boxes[0].overlaps(boxes[1])
    for ax, box in zip(axes, boxes):
        frame = ax.get_window_extent()
        assert box.x0 >= frame.x0 - 0.1 * frame.width and box.x1 <= frame.x1 + 0.1 * frame.width
        # (placed a share of the axes' height below it, a taller legend, which the layout makes
        # room for by shrinking the axes, came up over the x label)
        assert not box.overlaps(ax.xaxis.label.get_window_extent())


def test_a_cdf_panel_without_samples_says_so_without_stray_ticks(ax):
    """Every output one token: no request has a TPOT. The panel drew the SLO line alone, which set
    an x range of its own around it (ticks 48, 49.5, 51, 52.5 ms), and said "no samples: no request
    completed with this metric" though every request completed. It says "no TPOT sample" and why,
    with no ticks, no SLO line and no legend."""
    F.latency_cdfs({"run (1 GPU)": [], "other (1 GPU)": [float("nan")]}, ax, "tpot", slo_s=0.05)
    assert [t.get_text() for t in ax.texts] == ["no TPOT sample\n(no completed request has two or more output tokens)"]
    assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == [] and not ax.lines
    assert ax.get_legend() is None and ax.get_xlabel() == "TPOT (ms)"


def test_a_load_axis_of_sessions_says_sessions_per_second(ax):
    """With workload.sessions the rate starts sessions: the load axes said req/s (the report passes
    its Context.rate_unit; a capacity search's probes and its capacity line too)."""
    import matplotlib.pyplot as plt

    F.capacity_probes({"seed 0": {"rate": [1.0, 2.0], "p99": [0.1, 0.3], "meets": [True, False],
                                  "keeps_up": [True, True]}}, ax, "ttft", 0.2, (1.5, 0.2), rate_unit="sessions/s")
    assert ax.get_xlabel() == "probed rate: workload.arrival.rate_rps, sessions started per second (sessions/s)"
    assert any(t.startswith("capacity 1.5") and "sessions/s" in t for t in legend(ax))
    _, ax2 = plt.subplots()
    F.goodput_vs_load({"a": {"rate": [1, 2], "goodput": [2, 3.5]}}, ax2, rate_unit="sessions/s")
    assert ax2.get_xlabel().endswith("sessions started per second (sessions/s)") and "req/s" not in ax2.get_xlabel()
    plt.close(ax2.figure)


def test_legends_below_the_axes_leave_the_axes_their_height(tmp_path):
    """A sweep of eight configurations at one rate: each CDF's legend went below its axes (no spot
    inside was free), and the tight layout of the report's 4.4-inch figure squeezed the four panels
    to a sliver above them. ``save`` makes the figure taller by such legends instead."""
    rng = np.random.default_rng(0)
    data = {f"max_num_seqs={2 ** i} (1 GPU)": rng.lognormal(np.log(0.05 * (i + 1) ** 2), 0.5, 300) for i in range(8)}
    fig, axes = F.subplots(1, 4, figsize=(18.4, 4.4))
    for ax, metric in zip(axes, ("ttft", "tpot", "e2e", "tbt")):
        F.latency_cdfs(data, ax, metric, slo_s=1.0)
    F.save(fig, tmp_path / "cdfs")
    fig.canvas.draw()  # (measured on the figure, not the cropped canvas the save drew last)
    for ax in axes:
        frame = ax.get_window_extent()
        assert frame.height >= 0.55 * 4.4 * fig.dpi  # (the axes keep most of the figure's 4.4 inches)
        assert ax.get_legend().get_window_extent().y1 < ax.xaxis.label.get_window_extent().y0


def test_goodput_vs_load(ax):
    data = {"continuous": {"rate": [1, 2, 4], "goodput": [1, 2, 3.5]},
            "small": {"rate": [1, 2, 4], "goodput": [1, 1.5, 0.2]}}
    F.goodput_vs_load(data, ax)
    assert ax.get_xlabel() == "offered load: workload.arrival.rate_rps (req/s)"
    assert ax.get_ylabel() == "goodput (req/s within SLO)"
    assert legend(ax) == ["continuous", "small", "offered load (ideal)"]
    assert list(ax.lines[0].get_ydata()) == [1, 2, 3.5] and list(ax.lines[2].get_xdata()) == [0, 4]


def test_goodput_leaves_a_label_without_points_out_of_the_legend(ax):
    """A configuration whose every point failed to run stood in the legend with nothing drawn
    (the latency and throughput figures left it out)."""
    data = {"ok": {"rate": [1, 2], "goodput": [1, 2]}, "failed": {"rate": [], "goodput": []}}
    F.goodput_vs_load(data, ax)
    assert legend(ax) == ["ok", "offered load (ideal)"]


def test_latency_vs_load_draws_failing_points_hollow(ax):
    """A configuration that fails the SLO (its TTFT 100 s) had the lowest p99 TPOT of all,
    drawn filled like the passing ones: its points that fail are hollow, and the legend says so."""
    data = {"ok": {"rate": [6, 12], "p50": [0.008, 0.009], "p99": [0.011, 0.015], "ok": [True, True]},
            "tiny": {"rate": [6, 12], "p50": [0.006, 0.006], "p99": [0.007, 0.007], "ok": [False, False]}}
    F.latency_vs_load(data, ax, "tpot", slo_s=0.05)
    assert legend(ax) == ["ok p99", "ok p50", "tiny p99", "tiny p50", "hollow: fails the SLO", "SLO 50 ms"]
    ok_p99, tiny_p99 = ax.lines[0], ax.lines[2]
    assert list(ok_p99.get_markevery()) == [0, 1] and list(tiny_p99.get_markevery()) == []
    hollow = ax.lines[3]
    assert hollow.get_markerfacecolor() == "none" and list(hollow.get_ydata()) == pytest.approx([7, 7])
    assert hollow.get_color() == tiny_p99.get_color()


def test_goodput_ideal_is_what_arrived_when_the_runs_say(ax):
    # on_off arrivals: rate_rps is the burst rate; a quarter of it arrives on average
    data = {"continuous": {"rate": [4, 8], "goodput": [0.9, 1.5], "offered": [1.0, 2.0]}}
    F.goodput_vs_load(data, ax)
    assert legend(ax) == ["continuous", "arrived (ideal goodput)"]
    assert list(ax.lines[1].get_xdata()) == [0, 4, 8] and list(ax.lines[1].get_ydata()) == [0, 1.0, 2.0]


def test_throughput_latency(ax):
    data = {"continuous": {"rate": [1, 2], "throughput": [100, 200], "latency": [0.01, 0.02]}}
    F.throughput_latency(data, ax)
    assert ax.get_xlabel() == "throughput (output tokens/s)" and ax.get_ylabel() == "p99 TPOT (ms)"
    assert legend(ax) == ["continuous"]
    assert list(ax.lines[0].get_xdata()) == [100, 200] and list(ax.lines[0].get_ydata()) == [10, 20]
    assert [t.get_text() for t in ax.texts] == ["1", "2"]  # each point labelled with its load


def test_throughput_latency_draws_the_intervals_over_seeds(ax):
    """Over seeds the points were drawn bare, though results.csv had each one's 95% intervals (and
    latency_vs_load drew the same p99 TPOT's): both intervals are error bars now."""
    data = {"continuous": {"rate": [4, 32], "throughput": [700, 4900], "latency": [0.0094, 0.0433],
                           "latency_ci": [0.0015, 0.025], "throughput_ci": [80, 1000], "ok": [True, False]},
            "one seed": {"rate": [4], "throughput": [600], "latency": [0.009], "latency_ci": [None],
                         "throughput_ci": [None]}}
    F.throughput_latency(data, ax, "tpot", "p99", slo_s=0.05)
    assert legend(ax)[-1] == "bars: 95% interval over seeds"
    assert len(ax.containers) == 1  # (the label without intervals has none)
    bars = ax.containers[0]
    segs = [seg for coll in bars.lines[2] for seg in coll.get_segments()]
    spans = sorted((round(float(abs(s[1][0] - s[0][0])), 6), round(float(abs(s[1][1] - s[0][1])), 6)) for s in segs)
    assert spans == [(0, 3.0), (0, 50.0), (160, 0), (2000, 0)]  # (x: 2 x 80, 2 x 1000 tok/s; y: 2 x 1.5, 2 x 25 ms)
    assert ax.get_ylim()[1] >= 43.3 + 25  # (the whole interval in view)


def test_replica_timeline(runs):
    r = runs["small"]
    td = r.timeline_data(0)
    fig, axes = plt.subplots(4, 1)
    F.replica_timeline(td, axes)
    ylabels = [a.get_ylabel() for a in axes]
    assert ylabels == ["batch size (sequences)", "tokens per step", "KV usage (%)", "requests"]
    assert axes[-1].get_xlabel() == "simulated time (s)"
    assert legend(axes[1]) == ["prefill tokens", "decode tokens"] and legend(axes[3]) == ["waiting", "running"]
    n = len(r.steps["start_s"])
    assert len(axes[0].lines[0].get_xdata()) >= n and axes[0].lines[0].get_ydata().max() <= 2
    assert axes[1].lines[0].get_ydata().sum() == r.summary["phases"]["prefill_tokens"]
    assert axes[1].lines[1].get_ydata().sum() == r.summary["phases"]["decode_tokens"]
    kv = axes[2].lines[0].get_ydata()
    assert kv.max() == pytest.approx(r.summary["utilization"]["kv_usage_max"] * 100)
    waiting = axes[3].lines[0].get_ydata()
    assert waiting.min() >= 0 and waiting.max() > 0  # two slots for 50 requests: a queue forms
    assert axes[3].lines[1].get_ydata().max() <= 2
    plt.close(fig)


def test_batch_size_timeline_drops_to_zero_while_the_replica_is_idle():
    """Drawn step by step, each step's batch was held until the next step started: a replica idle
    for most of a light run (one-token replies, a step every second or so) read as running a batch
    of 1 the whole time, while its requests panel said 0 running. Between a step's end and the next
    start the line is at 0."""
    fig, ax = F.subplots()
    F.batch_size_timeline({"t": [0.0, 0.5, 3.0], "duration_s": [0.5, 0.25, 0.5], "num_seqs": [2, 3, 1]}, ax)
    line = ax.lines[0]
    assert line.get_drawstyle() == "steps-post"
    x, y = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)

    def drawn(t):
        return y[np.searchsorted(x, t, side="right") - 1]

    assert [drawn(t) for t in (0.25, 0.6, 1.0, 2.9, 3.2, 3.6)] == [2, 3, 0, 0, 1, 0]


def test_queue_length_agrees_with_the_engine_sampler():
    """The queue series derived from requests matches simulate()'s own sampler (no preemptions here)."""
    res = simulate(make_scenario(**{"policy.max_num_seqs": 2}), sample_every_s=0.05)
    assert res.summary["preemptions"] == 0
    td = RunData.from_results(res).timeline_data(0)
    t, waiting = td["queue_t"], td["waiting"]
    for (ts, rep, w, _running) in res.queue_samples[::7]:
        i = np.searchsorted(t, ts, side="right") - 1
        j = min(i + 1, len(t) - 1)
        assert min(waiting[i], waiting[j]) - 2 <= w <= max(waiting[i], waiting[j]) + 2


def test_ttft_breakdown(runs, ax):
    data = {g: r.ttft_breakdown() for g, r in runs.items()}
    F.ttft_breakdown(data, ax)
    assert ax.get_ylabel() == "mean time (ms)"
    # no P/D split: no KV-transfer bar, legend entry or title (the P/D case is the next test's "b")
    assert legend(ax) == ["queueing", "prefill compute", "API server"] and ax.get_title() == "TTFT breakdown"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["continuous", "small"]
    for j, (g, r) in enumerate(runs.items()):
        top = sum(c.patches[j].get_height() for c in ax.containers)
        assert top == pytest.approx(r.latency("ttft").mean() * 1e3)
        assert ax.texts[j].get_text() == "TTFT " + (f"{top:.0f} ms" if top >= 10 else f"{top:.1f} ms")


def test_ttft_breakdown_shows_shares_when_totals_differ_by_orders_of_magnitude(ax):
    data = {"a": {"queueing": 100.0, "prefill": 1.0, "transfer": 0.0},
            "b": {"queueing": 0.03, "prefill": 0.05, "transfer": 0.002}}
    F.ttft_breakdown(data, ax)
    assert ax.get_ylabel() == "share of mean time (%)"
    tops = [sum(c.patches[j].get_height() for c in ax.containers) for j in range(2)]
    assert tops == [pytest.approx(100), pytest.approx(100)]
    assert ax.containers[0].patches[1].get_height() == pytest.approx(100 * 0.03 / 0.082)
    # labels give the TTFT in time, and the transfer after it apart (it is not part of the TTFT)
    assert [t.get_text() for t in ax.texts] == ["TTFT 101 s", "TTFT 80 ms\n+ 2.0 ms KV"]
    assert legend(ax)[-1] == "KV transfer (P/D, before 2nd token)"
    assert ax.get_title() == "TTFT breakdown (+ KV transfer)"


def test_ttft_breakdown_reads_an_optional_transfer_column(runs):
    r = runs["continuous"]
    req = dict(r.requests)
    req["kv_transfer_s"] = np.full(len(req["arrival_s"]), 0.001)
    r2 = RunData(r.label, r.scenario, r.summary, req, r.steps, r.tbt_s)
    b1, b2 = r.ttft_breakdown(), r2.ttft_breakdown()
    assert b2["transfer"] == pytest.approx(0.001) and b1["transfer"] == 0
    # TTFT excludes the transfer; the API server's part is its own (client-side TTFT)
    assert b2["queueing"] + b2["prefill"] + b2["api"] == pytest.approx(r.latency("ttft").mean())
    assert b2["api"] == r.summary["cost"]["colocated"]["api_server"]["request_s"] > 0


def test_roofline(runs, ax):
    r = runs["continuous"]
    rd = r.roofline_data()
    F.roofline(rd, ax)
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)" and ax.get_ylabel() == "achieved TFLOP/s"
    kinds = r.step_kind()
    names = legend(ax)
    assert names[-1].startswith("roofline h100-sxm")
    expected = [f"{k} steps ({(kinds == k).sum()})" for k in ("prefill", "decode", "mixed") if (kinds == k).any()]
    assert names[:-1] == expected
    pts = np.concatenate([c.get_offsets() for c in ax.collections])
    assert len(pts) == len(kinds)
    roof = ax.lines[-1]
    assert roof.get_ydata().max() == pytest.approx(989)  # H100 SXM dense BF16 TFLOP/s
    # every step sits under the roof: achieved <= min(peak, AI x bandwidth)
    bound = np.minimum(rd["peak_flops"], pts[:, 0] * rd["mem_bw"]) / 1e12
    assert (pts[:, 1] <= bound * (1 + 1e-9)).all()


def test_roofline_of_a_replica_where_no_step_ran_says_so(ax):
    """Every request rejected: the roofline was drawn bare, a line and no word (the timeline's
    panel and the CDFs say why they are empty)."""
    F.roofline({"flops": [], "bytes": [], "duration_s": [], "kind": [], "peak_flops": 989e12, "mem_bw": 3.35e12,
                "hardware": "h100-sxm"}, ax)
    assert [t.get_text() for t in ax.texts] == ["no steps ran"]
    assert not ax.collections


def test_save_writes_png_and_svg(tmp_path, ax):
    paths = F.save(ax.figure, tmp_path / "f" / "x")
    assert [p.name for p in paths] == ["x.png", "x.svg"] and all(p.stat().st_size > 0 for p in paths)


def test_long_timelines_are_drawn_in_time_bins(runs):
    r = runs["small"]
    td = r.timeline_data(0)
    fig, axes = plt.subplots(4, 1)
    F.replica_timeline(td, axes, max_points=10)  # more steps than 10: time bins
    width = F.bin_width_s(float(td["t"].max()))
    assert float(td["t"].max()) / width <= F.MAX_BINS
    assert axes[1].get_ylabel() == "tokens per second"
    prefill, decode = axes[1].lines[0].get_ydata(), axes[1].lines[1].get_ydata()
    assert np.nansum(prefill) * width == pytest.approx(r.summary["phases"]["prefill_tokens"])
    assert np.nansum(decode) * width == pytest.approx(r.summary["phases"]["decode_tokens"])
    mean = axes[0].lines[0].get_ydata()
    assert len(mean) == int(np.floor(td["t"].max() / width)) + 1
    assert np.nanmax(mean) <= td["num_seqs"].max() and np.nanmin(mean) >= td["num_seqs"].min()
    assert "mean per" in legend(axes[0])[0]
    # the queue panel in the same bins (it was drawn change by change: a solid block on a long run)
    waiting = axes[3].lines[0].get_ydata()
    assert len(waiting) <= F.MAX_BINS and "mean per" in legend(axes[3])[0]
    assert np.nanmax(waiting) <= td["waiting"].max() and np.nanmin(waiting) >= 0
    plt.close(fig)


def test_binned_steps_weighs_a_level_by_the_time_it_held():
    """A queue of 4 for the first quarter of a bin, then 0: its mean is 1, its band 0 to 4, and
    the level carried into the next bin counts there."""
    b = F.binned_steps([0.0, 0.25, 1.5, 2.0], [4, 0, 2, 0], 1.0)
    assert list(b["mean"]) == pytest.approx([1.0, 1.0, 0.0])
    assert list(b["min"]) == [0, 0, 0] and list(b["max"]) == [4, 2, 0]


@pytest.mark.parametrize("max_points", [10**9, 10])
def test_timeline_legends_sit_above_the_data(runs, max_points):
    """A timeline's lines run the whole width, so each panel's y axis is raised until its
    upper-right legend is clear of them (they used to cover the peaks of a busy run); binned, the
    min-max band still reaches the run's true maximum (it was drawn between bin centres, and a
    one-bin peak was a sliver too thin to see)."""
    r = runs["continuous"]
    td = r.timeline_data(0)
    fig, axes = plt.subplots(4, 1, figsize=(6, 9.5))
    F.replica_timeline(td, axes, max_points=max_points)
    fig.text(0.01, 0.01, "a note\nof three\nlines", va="bottom")  # (as a report's notes: the axes shrink)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.canvas.draw()
    for ax in axes:
        box = ax.get_legend().get_window_extent().transformed(ax.transData.inverted())
        data_top = max(float(np.nanmax(np.asarray(c.get_ydata(), dtype=float))) for c in ax.lines)
        for coll in ax.collections:  # the bands
            for path in coll.get_paths():
                data_top = max(data_top, float(np.nanmax(path.vertices[:, 1])))
        assert box.y0 > data_top, (ax.get_ylabel(), box.y0, data_top)
    if max_points == 10:
        band_top = max(float(np.nanmax(p.vertices[:, 1])) for p in axes[2].collections[0].get_paths())
        assert band_top == pytest.approx(r.summary["utilization"]["kv_usage_max"] * 100)
    plt.close(fig)


def test_a_replica_where_no_step_ran_counts_from_zero():
    """Every request rejected: the batch, token and request axes counted -0.045 to 0.054 in
    steps of 0.006, with nothing to say why the panels were empty."""
    empty = np.array([], dtype=float)
    td = {"t": empty, "num_seqs": empty, "prefill_tokens": empty, "decode_tokens": empty, "kv_usage": empty,
          "queue_t": np.array([0.0, 11.1]), "waiting": np.array([0, 0]), "running": np.array([0, 0])}
    fig, axes = plt.subplots(4, 1, figsize=(6, 9.5), sharex=True)
    F.replica_timeline(td, axes)
    fig.canvas.draw()
    for ax in (axes[0], axes[1], axes[3]):
        lo, hi = ax.get_ylim()
        assert lo == 0 and hi >= 1, (ax.get_ylabel(), lo, hi)
    for ax in (axes[0], axes[3]):  # (counts: whole ticks)
        assert all(float(t).is_integer() for t in ax.get_yticks() if 0 <= t <= ax.get_ylim()[1])
    for ax in axes[:3]:  # (every panel drawn from the steps says why it is empty, not the first alone)
        assert [t.get_text() for t in ax.texts] == ["no steps ran on this replica"], ax.get_ylabel()
    plt.close(fig)


def test_binned_empty_bins_are_gaps():
    b = F.binned([0.1, 0.2, 2.5], [1.0, 3.0, 5.0], 1.0)
    assert list(b["sum"]) == [4.0, 0.0, 5.0] and b["mean"][0] == 2.0 and np.isnan(b["mean"][1])
    assert b["min"][0] == 1.0 and b["max"][0] == 3.0


def test_roofline_draws_a_sample_of_a_large_run_and_says_so(runs, monkeypatch):
    """A run of a million steps took ten seconds to draw on the roofline: past MAX_ROOFLINE_POINTS
    steps of a kind a fixed sample is drawn, and the legend gives both counts."""
    r = runs["continuous"]
    kinds = r.step_kind()
    n_dec = int((kinds == "decode").sum())
    monkeypatch.setattr(F, "MAX_ROOFLINE_POINTS", n_dec // 3)
    drawn = []
    for _ in range(2):
        fig, ax = plt.subplots()
        F.roofline(r.roofline_data(), ax)
        assert f"decode steps ({n_dec:,}; a sample of {n_dec // 3:,} drawn)" in legend(ax)
        drawn.append(np.concatenate([c.get_offsets() for c in ax.collections]))
        plt.close(fig)
    assert np.array_equal(drawn[0], drawn[1])  # the same sample every time


@pytest.mark.parametrize("lo_ms, hi_ms, labels", [
    (7.2, 8.9, ["8"]),  # no 2, 3 or 5 x 10^k in view: every minor tick in it is labelled
    (6.5, 9.5, ["7", "8", "9"]),
    (15.0, 60.0, ["20", "30", "50"]),  # two or more of 2, 3, 5 x 10^k: those alone
    (40.0, 2500.0, ["50", "200", "500", "2000"]),  # one to two decades: 2 and 5 x 10^k besides the majors
    (20.0, 900.0, ["20", "50", "200", "500"]),  # (one major tick alone in view, 100)
    (1.0, 500.0, []),  # two decades or more: the major ticks alone
])
def test_a_narrow_log_latency_axis_still_has_numbers(ax, lo_ms, hi_ms, labels):
    ax.plot([1, 2], [lo_ms, hi_ms])
    F._log_latency_axes(ax, None, "x", "TPOT (ms)", "t")
    ax.set_ylim(lo_ms, hi_ms)
    ax.figure.canvas.draw()
    fmt = ax.yaxis.get_minor_formatter()
    shown = [fmt(v, i) for i, v in enumerate(ax.yaxis.get_minorticklocs()) if lo_ms <= v <= hi_ms]
    assert [t for t in shown if t] == labels


def test_a_latency_axis_without_labelled_series_draws_no_legend_and_no_warning(ax):
    """Latency axes with nothing labelled (no data, or unlabelled lines) printed matplotlib's 'No
    artists with labels found to put in legend' warning; labelled series still get a legend."""
    import warnings

    ax.plot([1, 2], [3, 4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F._log_latency_axes(ax, None, "x", "TTFT (ms)", "t")
    assert ax.get_legend() is None
    F._log_latency_axes(ax, 0.5, "x", "TTFT (ms)", "t")  # (the SLO line is labelled)
    assert ax.get_legend() is not None


def test_characters_the_font_lacks_are_one_note_not_a_warning_each(tmp_path, capsys):
    """A title with characters DejaVu Sans lacks (a scenario named in Chinese, an emoji): one
    line on stderr naming them, once per process, instead of matplotlib's warning per character,
    draw and call (a dozen per figure, each naming our source line); other warnings still show."""
    import warnings

    F._noted_glyphs.discard("\u540d")
    fig, ax = plt.subplots()
    ax.set_title("\u540d\u540d run")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        F.save(fig, tmp_path / "a")
        with F.glyphs_noted():
            warnings.warn("something else", UserWarning)
        F.save(fig, tmp_path / "b")
    plt.close(fig)
    assert [str(w.message) for w in seen] == ["something else"]
    err = capsys.readouterr().err
    assert err.count("has no \u540d:") == 1 and "DejaVu Sans" in err  # (the second figure: noted already)
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0


def test_an_interval_reaching_below_zero_runs_open_off_a_log_axis_without_setting_its_limits(ax):
    """Two seeds give 95% half-widths larger than the mean: such a bar's low end was drawn at a
    thousandth of its point, which stretched the log axis down to ~0.1 ms and squashed every
    curve. It runs open off the bottom now; the data and the drawable ends set the limits."""
    data = {"continuous": {"rate": [8, 16, 24], "p50": [0.04, 0.05, 0.08], "p99": [0.15, 0.18, 0.25],
                           "p99_ci": [0.3, 0.02, 0.6]},
            "small": {"rate": [8, 16, 24], "p50": [0.045, 0.06, 0.09], "p99": [0.19, 0.22, 0.4],
                      "p99_ci": [0.01, 0.02, 0.03]}}
    F.latency_vs_load(data, ax, "ttft", slo_s=1.0)
    ax.figure.canvas.draw()
    lo, hi = ax.get_ylim()
    assert lo > 30 and hi >= 850  # (the lowest p50 is 40 ms; the highest drawable end 850 ms)
    assert legend(ax)[-2:] == ["SLO 1 s",
                               "bars: 95% interval over seeds (open below: low end <= 0)"]
    # the two open bars still run from above their point down past the bottom of the axes
    open_bars = [ln for ln in ax.lines if ln.get_ydata()[0] in (450, 850)]
    assert len(open_bars) == 2 and all(min(ln.get_ydata()) < lo for ln in open_bars)


def test_intervals_above_zero_keep_their_caps_and_plain_legend(ax):
    F.latency_vs_load({"a": {"rate": [1, 2], "p50": [0.01, 0.02], "p99": [0.03, 0.05], "p99_ci": [0.01, 0.02]}},
                      ax, "ttft")
    assert legend(ax)[-1] == "bars: 95% interval over seeds"
    ax.figure.canvas.draw()
    assert ax.get_ylim()[0] < 20  # (the low end of the first bar, 20 ms, is drawn and in view)


def test_throughput_latency_draws_failing_points_hollow_and_the_slo(ax):
    """Points whose run failed the SLO were drawn as the passing ones and no SLO line was drawn
    (the axis stopped below it); a label that never ran stood in the legend."""
    data = {"continuous": {"rate": [12, 28], "throughput": [1900, 4900], "latency": [0.015, 0.038],
                           "ok": [True, False]},
            "chunked-256": {"rate": [12, 28], "throughput": [1850, 3500], "latency": [0.010, 0.011],
                            "ok": [True, True]},
            "static": {"rate": [], "throughput": [], "latency": [], "ok": []}}
    F.throughput_latency(data, ax, "tpot", "p99", slo_s=0.05)
    assert legend(ax) == ["continuous", "chunked-256", "hollow: fails the SLO", "SLO 50 ms"]
    marked = [(x, ln.get_markerfacecolor()) for ln in ax.lines if ln.get_marker() == "o"
              for x in ln.get_xdata()]
    assert sorted((x, fc == "none") for x, fc in marked) == [(1850, False), (1900, False), (3500, False),
                                                              (4900, True)]
    ax.figure.canvas.draw()
    assert ax.get_ylim()[1] > 50  # the SLO line is in view


def test_capacity_probes_tell_a_probe_that_fell_behind_from_one_that_broke_a_limit(ax):
    """Every probe that did not meet was hollow, labelled as not meeting a limit, though a probe
    inside every latency limit fails when it does not keep up (its backlog grew)."""
    data = {0: {"rate": [8, 16, 32, 24], "p99": [0.17, 0.2, 0.44, 1.3], "meets": [True, True, False, False],
                "keeps_up": [True, True, False, True]},
            1: {"rate": [20, 22], "p99": [0.25, 0.3], "meets": [True, False], "keeps_up": [True, False]}}
    F.capacity_probes(data, ax, "ttft", slo_s=1.0)
    assert legend(ax) == ["each seed's probes (p99)", "met every limit and kept up",
                          "fell behind (keep-up: the backlog grew)", "did not meet a limit", "SLO 1 s"]

    def drawn(marker, hollow):
        return sorted(x for ln in ax.lines if ln.get_marker() == marker
                      and (ln.get_markerfacecolor() == "none") == hollow for x in ln.get_xdata())
    assert drawn("o", False) == [8, 16, 20]
    assert drawn("x", False) == [22, 32]
    assert drawn("o", True) == [24]


def test_capacity_probes_legend_lies_over_no_probe_or_limit():
    """The legend was fixed in the upper left, over the SLO line near the top and over any probe
    there (a seed's probes at the lowest rates, just under the limit)."""
    data = {0: {"rate": [8, 10, 12, 14], "p99": [0.45, 0.47, 0.49, 0.6], "meets": [True, True, True, False],
                "keeps_up": [True, True, True, True]},
            1: {"rate": [9, 10, 13], "p99": [0.2, 0.65, 0.3], "meets": [True, False, True], "keeps_up": [True] * 3}}
    fig, ax = plt.subplots(figsize=(6, 4.8))
    F.capacity_probes(data, ax, "ttft", slo_s=0.5, capacity=(12.0, 1.0))
    fig.tight_layout()
    fig.canvas.draw()
    assert _line_points_in(ax, ax.get_legend().get_window_extent()) == []
    plt.close(fig)


def test_throughput_latency_rate_labels_of_two_series_do_not_overlap(ax):
    """Two configurations at one load sat 0.3 ms apart under a 50 ms SLO line: both '4' labels
    were printed, one over the other (only labels of the same series were kept apart)."""
    data = {"a": {"rate": [4, 8], "throughput": [670, 990], "latency": [0.0089, 0.0091]},
            "b": {"rate": [4, 8, 16], "throughput": [680, 1350, 2730], "latency": [0.0092, 0.011, 0.016]}}
    F.throughput_latency(data, ax, "tpot", "p99", slo_s=0.05)
    assert sorted(t.get_text() for t in ax.texts) == ["16", "4", "8", "8"]


def plan_points():
    return [{"fleet": "1 x h100-sxm", "label": "1 x h100-sxm TP1, continuous", "gpu": "h100-sxm", "kind": "colocated",
             "usd_per_hour": 3.29, "capacity": 21.6, "low": 0.0, "high": 60.0, "chosen": True},
            {"fleet": "1 x h100-sxm", "label": "1 x h100-sxm TP1, chunked prefill 512", "gpu": "h100-sxm",
             "kind": "colocated", "usd_per_hour": 3.29, "capacity": 20.5, "low": 15.6, "high": 25.4, "chosen": False}]


def test_cost_capacity_names_each_configuration_and_keeps_its_interval_in_view(ax):
    """Two configurations on one GPU type were both '1 x h100-sxm' (the policy named nowhere), and
    an interval wider than the axis ran its full height, cut off at the top."""
    F.cost_capacity(plan_points(), ax, 12.0)
    assert legend(ax)[1] == "chosen: 1 x h100-sxm TP1, continuous"
    assert sorted(t.get_text().replace("\n", " ") for t in ax.texts) == ["1 x h100-sxm TP1, chunked prefill 512",
                                                                        "1 x h100-sxm TP1, continuous"]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 60.0


def test_cost_capacity_names_stay_apart_inside_the_axes_and_clear_of_the_legend(tmp_path):
    """A plan's P/D splits of one cost ($6/h) and close capacities (48.1 and 46.7 req/s) had their
    names printed over each other at a fixed offset, and the name of the point at the right edge
    ran out of the axes."""
    from matplotlib.text import Text

    pd = {"gpu": "x", "kind": "pd", "chosen": False}
    data = [{**pd, "fleet": "2 x cheap", "label": "P/D 1 x w/cheap.yaml TP1 : 1 x w/cheap.yaml TP1",
             "usd_per_hour": 2.0, "capacity": 46.7, "low": 46.7, "high": 46.7, "chosen": True},
            {**pd, "fleet": "2 x mixed", "label": "P/D 1 x w/fast.yaml TP1 : 1 x w/cheap.yaml TP1",
             "usd_per_hour": 6.0, "capacity": 48.1, "low": 48.1, "high": 48.1},
            {**pd, "fleet": "2 x mixed", "label": "P/D 1 x w/cheap.yaml TP1 : 1 x w/fast.yaml TP1",
             "usd_per_hour": 6.0, "capacity": 46.7, "low": 46.7, "high": 46.7},
            {**pd, "fleet": "2 x fast", "label": "P/D 1 x w/fast.yaml TP1 : 1 x w/fast.yaml TP1",
             "usd_per_hour": 10.0, "capacity": 49.6, "low": 49.6, "high": 49.6}]
    fig, ax = F.subplots(figsize=(8, 5.5))
    ax.set_title("model at 4 req/s: cost vs capacity\nSLO", fontsize=10)
    F.cost_capacity(data, ax, 4.0)
    F.save(fig, tmp_path / "cap")
    fig.canvas.draw()
    frame, names = ax.get_window_extent(), list(ax.texts)
    assert len(names) == len(data)
    boxes = [Text.get_window_extent(t) for t in names] + [ax.get_legend().get_window_extent()]
    for i, (t, b) in enumerate(zip(names, boxes)):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1, t.get_text()
        assert not any(b.overlaps(o) for o in boxes[:i] + boxes[-1:]), t.get_text()
    plt.close(fig)


def test_cost_capacity_legend_covers_no_interval(tmp_path):
    """A plan of Llama-2-13B on H100 and A100 with 2 seeds: the cheapest configurations sit at the
    left and an H100 estimate's interval (8 to 19 req/s) reached the top of the axis, where the
    legend, placed in the upper left, was drawn over it."""
    from servesim.plots.plan_report import cost_capacity_figure

    def pt(label, gpu, kind, usd, cap, lo, hi, chosen=False):
        return {"fleet": label, "label": label, "gpu": gpu, "kind": kind, "usd_per_hour": usd, "capacity": cap,
                "low": lo, "high": hi, "chosen": chosen}

    data = [pt("2 x a100-80g TP2, chunked prefill 512", "a100-80g", "colocated", 6.36, 10.4, 8.8, 12.0, True),
            pt("2 x a100-80g TP2, continuous", "a100-80g", "colocated", 6.36, 9.75, 9.75, 10.0),
            pt("P/D 1 x a100-80g TP2 : 1 x a100-80g TP2", "a100-80g", "pd", 6.36, 9.1, 8.0, 10.7),
            pt("2 x h100-sxm TP1, chunked prefill 512", "h100-sxm", "colocated", 6.58, 10.0, 8.0, 19.0),
            pt("2 x h100-sxm TP1, continuous", "h100-sxm", "colocated", 6.58, 10.0, 8.0, 20.0),
            pt("5 x a100-80g TP1, continuous", "a100-80g", "colocated", 7.95, 8.5, 8.0, 10.9),
            pt("P/D 3 x a100-80g TP1 : 3 x a100-80g TP1", "a100-80g", "pd", 9.54, 10.3, 8.0, 21.0)]
    fig = cost_capacity_figure(data, "Llama-2-13b-hf at 8 req/s: cost vs capacity", 8.0,
                               F.colors_for(["a100-80g", "h100-sxm"]), "list prices")
    F.save(fig, tmp_path / "cap")
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent()
    for d in data:  # each interval as the vertical segment it is drawn as
        (x, y0), (_, y1) = ax.transData.transform([(d["usd_per_hour"], d["low"]), (d["usd_per_hour"], d["high"])])
        assert not (box.x0 <= x <= box.x1 and y0 <= box.y1 and box.y0 <= y1), d["label"]
    plt.close(fig)


def test_cost_latency_names_each_configuration(ax):
    data = [{**p, "p99": p99, "meets": True} for p, p99 in zip(plan_points(), (0.25, 0.27))]
    F.cost_latency(data, ax, "ttft", 1.0)
    assert sorted(t.get_text().replace("\n", " ") for t in ax.texts) == ["1 x h100-sxm TP1, chunked prefill 512",
                                                      "1 x h100-sxm TP1, continuous"]


def test_cost_latency_draws_an_unbounded_p99_at_the_top_and_keeps_names_apart():
    """A P/D split that lost a tenth of its requests was drawn at the p99 of those that completed,
    250 ms, under the 1 s limit the plan said it broke (or, unbounded, left out); names of points
    near the right edge ran out of the axes, and two side by side ran into each other."""
    from servesim.plots.plan_report import _judged_p99

    seed = {"ttft_p99": None, "ttft_p99_s": 0.25, "tpot_p99": 0.0136, "tpot_p99_s": 0.0136}
    assert _judged_p99({"seeds": [seed]}, "ttft") == float("inf")
    assert _judged_p99({"seeds": [seed, {**seed, "tpot_p99": 0.02}]}, "tpot") == 0.02
    assert _judged_p99({"seeds": [{"ttft_p99_s": 0.3}]}, "ttft") == 0.3  # (the SLO has no TTFT p99)
    pd = {"gpu": "a100-80g", "kind": "pd", "meets": False, "p99": math.inf}
    data = [{"fleet": "1 x a100-80g", "label": "1 x a100-80g TP1, continuous", "gpu": "a100-80g",
             "kind": "colocated", "usd_per_hour": 1.59, "p99": 0.94, "meets": False},
            {"fleet": "2 x a100-80g", "label": "2 x a100-80g TP1, continuous", "gpu": "a100-80g",
             "kind": "colocated", "usd_per_hour": 3.18, "p99": 0.36, "meets": True},
            {**pd, "fleet": "2 x a100-80g", "label": "P/D 1 x a100-80g TP1 : 1 x a100-80g TP1", "usd_per_hour": 3.18},
            {**pd, "fleet": "4 x a100-80g", "label": "P/D 2 x a100-80g TP1 : 2 x a100-80g TP1", "usd_per_hour": 6.36}]
    fig, ax = plt.subplots(figsize=(6, 4.8))
    F.cost_latency(data, ax, "ttft", 1.0)
    fig.tight_layout()
    fig.canvas.draw()
    tops = [ln for ln in ax.lines if ln.get_marker() == "^" and len(ln.get_xdata())]
    assert sorted(x for ln in tops for x in ln.get_xdata()) == [3.18, 6.36]
    for ln in tops:  # at the top edge, above the SLO line and every point, hollow (they fail)
        y_px = ln.get_transform().transform((ln.get_xdata()[0], ln.get_ydata()[0]))[1]
        assert y_px > ax.transData.transform((0, 1000.0))[1] and ln.get_markerfacecolor() == "none"
    assert "top edge: p99 unbounded (over 1% never completed)" in legend(ax)
    frame = ax.get_window_extent()
    boxes = [t.get_window_extent() for t in ax.texts]
    assert len(boxes) == 4
    for i, b in enumerate(boxes):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1, ax.texts[i].get_text()  # (inside the axes)
        assert not any(b.overlaps(o) for o in boxes[:i]), ax.texts[i].get_text()
    legend_box = ax.get_legend().get_window_extent()
    assert legend_box.y1 < frame.y0  # (below the axes: clear of the names)
    plt.close(fig)


def test_cost_latency_names_stay_in_the_axes_and_point_at_their_points(tmp_path):
    """A plan's failing shapes share a cost ($3.18/h: five of them, p99 TTFT from 10 to 55 s):
    each name that collided was moved down a line, so names ran out of the axes, over the x label
    and into the legend, and a name sat by another configuration's point. Names stay inside the
    axes, apart; one moved off its point has a leader line to it."""
    from matplotlib.text import Text

    rows = [(3.18, 55.0, "1 x a100-80g TP2, continuous"), (3.18, 54.0, "1 x a100-80g TP2, chunked prefill 2048"),
            (3.18, 33.0, "2 x a100-80g TP1, chunked prefill 512"), (3.18, 12.0, "2 x a100-80g TP1, continuous"),
            (3.18, 10.5, "2 x a100-80g TP1, chunked prefill 2048"),
            (3.29, 1.2, "1 x h100-sxm TP1, chunked prefill 512"),
            (3.29, 0.42, "1 x h100-sxm TP1, continuous"), (3.29, 0.37, "1 x h100-sxm TP1, chunked prefill 2048"),
            (4.77, 0.85, "3 x a100-80g TP1, chunked prefill 512"), (4.77, 0.68, "3 x a100-80g TP1, continuous"),
            (4.77, 0.65, "3 x a100-80g TP1, chunked prefill 2048"), (6.36, 0.36, "2 x a100-80g TP2, continuous"),
            (6.36, 0.35, "2 x a100-80g TP2, chunked prefill 2048"),
            (6.58, 0.22, "2 x h100-sxm TP1, chunked prefill 512")]
    data = [{"fleet": lab.split(" TP")[0], "label": lab, "gpu": lab.split()[2], "kind": "colocated",
             "usd_per_hour": usd, "p99": p99, "meets": p99 < 1.0} for usd, p99, lab in rows]
    fig, axes = F.subplots(1, 2, figsize=(12, 4.8))
    F.cost_latency(data, axes[0], "ttft", 1.0)
    F.cost_latency([{**d, "p99": d["p99"] / 20} for d in data], axes[1], "tpot", 0.05)
    F.save(fig, tmp_path / "cost")  # (as a plan report lays it out)
    fig.canvas.draw()  # (measured on the figure, not the cropped canvas the save drew last)
    for ax in axes:
        frame, names = ax.get_window_extent(), list(ax.texts)
        assert len(names) == len(rows)
        boxes = [Text.get_window_extent(t) for t in names]  # (the names' own boxes, without their leader lines)
        for i, (t, b) in enumerate(zip(names, boxes)):
            assert frame.y0 <= b.y0 and b.y1 <= frame.y1 and frame.x0 <= b.x0 and b.x1 <= frame.x1, t.get_text()
            assert not any(b.overlaps(o) for o in boxes[:i]), t.get_text()
            point = ax.transData.transform(t.xy)
            near = b.y0 - 8 <= point[1] <= b.y1 + 8  # (level with its point)
            assert near or t.arrow_patch is not None, t.get_text()
    plt.close(fig)


@pytest.mark.parametrize("shape", [dict(kind="colocated", gpu="h100-sxm", tp=2, pp=2, policy="chunked_prefill",
                                        chunk=512),
                                   dict(kind="pd", gpu="h100-sxm", tp=4, decode_gpu="a100-80g", decode_tp=8,
                                        policy="pd_split", ratio=(1, 2))])
def test_a_plan_run_is_labelled_as_its_shape_describes_it(shape):
    from dataclasses import asdict

    from servesim.plots.plan_report import _run_label
    from servesim.studies.plan_space import Shape

    s = Shape(**shape)
    c = {"units": 1, "label": s.describe(1), "shape": asdict(s)}
    assert [_run_label(c, {"units": u}) for u in (1, 3)] == [s.describe(1), s.describe(3)]
    # a candidate never verified is labelled without units (describe(None)): the slow fuzz found
    # plan's report raising IndexError on it
    bare = {"units": None, "label": s.describe(None), "shape": asdict(s)}
    assert [_run_label(bare, {"units": u}) for u in (1, 2)] == [s.describe(1), s.describe(2)]


def test_count_axes_have_whole_ticks():
    """A pool with a few requests read 2.5, 7.5 on its requests and sequences axes."""
    fig, ax = plt.subplots()
    F.queue_timeline({"queue_t": [0.0, 1.0, 2.0], "waiting": [0, 3, 1], "running": [1, 2, 0]}, ax)
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_yticks())
    fig, ax = plt.subplots()
    F.batch_size_timeline({"t": [0.0, 1.0, 2.0], "num_seqs": [1, 3, 2]}, ax)
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_yticks())
    plt.close("all")


@pytest.mark.parametrize("canvas", ["backend_pdf.FigureCanvasPdf", "backend_svg.FigureCanvasSVG"])
def test_timelines_draw_on_a_figure_of_any_backend(runs, canvas, tmp_path):
    """A user's figure from a pdf or svg backend (the Python API draws on the axes it is given):
    placing a timeline's legend asked the canvas for Agg's ``get_renderer`` (AttributeError)."""
    import importlib

    from matplotlib.figure import Figure

    module, name = canvas.split(".")
    fig = Figure(figsize=(6, 9.5))
    getattr(importlib.import_module(f"matplotlib.backends.{module}"), name)(fig)
    axes = fig.subplots(4, 1)
    F.replica_timeline(runs["continuous"].timeline_data(0), axes)
    assert all(ax.get_legend() is not None for ax in axes)
    fig.savefig(tmp_path / f"t.{module[8:]}")
    # (the CDFs' and the load figures' legends are placed by measuring them too)
    fig = Figure()
    getattr(importlib.import_module(f"matplotlib.backends.{module}"), name)(fig)
    ax = fig.subplots()
    F.latency_cdfs({g: r.latency("ttft") for g, r in runs.items()}, ax, "ttft", slo_s=0.5)
    assert ax.get_legend() is not None
    fig.savefig(tmp_path / f"c.{module[8:]}")


def test_validate_cost_plot_title_clear_of_panels_and_plain_log_ticks(tmp_path, monkeypatch):
    """servesim validate-cost's figure: the figure title sat over the first row's panel titles,
    and a panel within one decade labelled its minor ticks '2x10^0 3x10^0 4x10^0', one over the
    next. The title now has room, and the ticks read as plain numbers."""
    from servesim.cost import validation

    figs, subplots = [], F.subplots
    monkeypatch.setattr(F, "subplots", lambda *a, **k: figs.append(subplots(*a, **k)) or figs[-1])  # (to look at)
    rng = np.random.default_rng(0)
    meas = np.exp(rng.uniform(np.log(3e-6), np.log(25e-6), 200))
    fams = ("linear", "qkv_proj", "norm", "o_proj", "mlp_up", "mlp_down", "activation", "rotary", "residual",
            "embedding", "allreduce", "allreduce_pcie", "send_recv")  # (five rows, as validate-cost draws)
    points = {f: (meas, meas * rng.uniform(0.8, 1.3, 200)) for f in fams}
    validation.plot_predicted_vs_measured(points, "a100-80g, calibration auto, num_tokens <= 512",
                                          tmp_path / "v.png")
    fig = figs[0][0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    sup = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes[:3]:
        assert ax.title.get_window_extent(renderer).y1 < sup.y0, ax.get_title()
    ax = fig.axes[2]  # norm: 3-25 us, under one decade
    labels = [t for t in ax.get_xticklabels(minor=True) + ax.get_xticklabels() if t.get_text()
              and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    assert labels and all("times" not in t.get_text() and "^" not in t.get_text() for t in labels)
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))  # (side by side, none over another)


def test_cost_latency_leaves_out_names_with_no_room_and_says_how_many(tmp_path):
    """A plan with runs too short to judge keeping up ran one shape at 63 unit counts, every p99
    about the same: names with no room anywhere were printed at their points, over each other,
    an unreadable band. Those are left out, the rest stay apart, and the title counts them (here 30
    points on a small figure)."""
    from matplotlib.text import Text

    data = [{"fleet": f"{k} x h100-sxm", "label": f"{k} x h100-sxm TP1, continuous", "gpu": "h100-sxm",
             "kind": "colocated", "usd_per_hour": 3.29 * k, "p99": 0.095 + 0.0001 * (k % 3), "meets": False}
            for k in range(2, 32)]
    fig, ax = F.subplots(figsize=(4, 3))
    F.cost_latency(data, ax, "ttft", 1.0)
    F.save(fig, tmp_path / "many")
    fig.canvas.draw()
    names = list(ax.texts)
    assert 0 < len(names) < len(data)
    assert ax.get_title().endswith(f"({len(names)} of {len(data)} named: no room for the rest)")
    boxes = [Text.get_window_extent(t) for t in names]
    for i, b in enumerate(boxes):
        assert not any(b.overlaps(o) for o in boxes[:i]), names[i].get_text()
    # the cost vs capacity figure places its names the same way, and says it once in its title
    caps = [{**d, "capacity": 10.0 + (k % 3), "low": 9.0, "high": 12.0, "chosen": k == 0} for k, d in enumerate(data)]
    fig, ax = F.subplots(figsize=(4, 3))
    ax.set_title("plan\nSLO")
    F.cost_capacity(caps, ax, 8.0)
    placed = [t for t in ax.texts if t.get_text()]
    assert 0 < len(placed) < len(caps)
    assert ax.get_title() == f"plan\nSLO ({len(placed)} of {len(caps)} named: no room for the rest)"
    plt.close(fig)


def test_goodput_bars_stop_at_the_arrivals(ax):
    """Two seeds' goodput bars reached above the 'arrived (ideal goodput)' line: no run's goodput
    exceeds its arrivals per second, so the upper end is cut there (the legend says so); the
    lower end and a bar well inside are left whole."""
    data = {"a": {"rate": [4, 8], "goodput": [3.9, 6.0], "offered": [4.0, 8.0], "goodput_ci": [1.5, 1.0]}}
    F.goodput_vs_load(data, ax)
    segs = [s for c in ax.collections for s in c.get_segments()]
    assert len(segs) == 2
    ends = sorted((float(s[:, 1].min()), float(s[:, 1].max())) for s in segs)
    assert ends[0] == pytest.approx((2.4, 4.0)) and ends[1] == pytest.approx((5.0, 7.0))
    assert any("cut at arrivals" in t for t in legend(ax))


def test_a_bar_open_below_and_cut_at_the_arrivals_is_said_in_one_phrase(ax):
    """A goodput bar whose low end is at or below 0 and whose upper end passes the arrivals read
    "bars: 95% interval over seeds (open below: low end <= 0) (cut at arrivals)", two parentheses
    side by side; one parenthesis holds both."""
    data = {"a": {"rate": [4, 8], "goodput": [0.5, 6.0], "offered": [1.0, 8.0], "goodput_ci": [1.5, 1.0]}}
    F.goodput_vs_load(data, ax)
    bars = [t for t in legend(ax) if t.startswith("bars:")]
    assert bars == ["bars: 95% interval over seeds (open below: low end <= 0; cut at arrivals)"]


def test_a_legend_lies_over_no_error_bar_and_stays_where_it_was_checked(tmp_path):
    """_legend_off_the_lines took matplotlib's "best" when no line ran under it: "best" ignores
    error bars (collections), and is worked out again at every draw, so after the figure's layout it
    could move onto the lines it was checked against. Here the corners free of the line hold error
    bars: the legend must cover none of them in the saved figure, and sit at a fixed spot."""
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    ax.plot([0, 10], [0, 10], label="a curve from corner to corner")
    ax.vlines([0.5, 1, 1.5, 2, 2.5, 3], 6.5, 10, color="C1", label="bars: 95% interval")
    ax.vlines([7, 7.5, 8, 8.5, 9, 9.5], 0, 3.5, color="C1")
    F._legend_off_the_lines(ax, fontsize="small")
    leg = ax.get_legend()
    assert leg._loc not in (0, "best")
    F.save(fig, tmp_path / "legend")
    box = leg.get_window_extent()
    for c in ax.collections:
        for seg in c.get_segments():
            a, b = c.get_transform().transform(seg)
            ys = np.linspace(a[1], b[1], 50)
            assert not ((box.x0 <= a[0] <= box.x1) and ((ys >= box.y0) & (ys <= box.y1)).any())
    plt.close(fig)


def test_throughput_latency_bars_stop_at_zero(ax):
    """Two seeds' t-intervals reached below 0 (bars to -4000 tokens/s and -15 ms): a throughput or
    a latency cannot, so the low ends stop at 0 (the legend says so); the high ends stay whole."""
    data = {"a": {"rate": [4, 24], "throughput": [700, 4000], "latency": [0.009, 0.022],
                  "latency_ci": [0.003, 0.038], "throughput_ci": [300, 4700], "ok": [True, False]}}
    F.throughput_latency(data, ax, "tpot", "p99", slo_s=0.05)
    segs = [seg for coll in ax.containers[0].lines[2] for seg in coll.get_segments()]
    assert min(float(np.min(s)) for s in segs) == 0.0
    ends = sorted((float(s[:, 0].min()), float(s[:, 0].max())) for s in segs if s[0][1] == s[1][1])
    assert ends == [pytest.approx((0, 8700)), pytest.approx((400, 1000))]
    ends = sorted((float(s[:, 1].min()), float(s[:, 1].max())) for s in segs if s[0][0] == s[1][0])
    assert ends == [pytest.approx((0, 60)), pytest.approx((6, 12))]
    assert legend(ax)[-1] == "bars: 95% interval over seeds (cut at 0)"


@pytest.mark.filterwarnings("error::UserWarning")
def test_load_figures_with_no_latency_sample_say_so(ax):
    """Every request rejected at 4 and 8 req/s: nothing drawn, on an axis of -0.04 to 0.04 req/s
    (and -0.04 to 0.04 tokens/s), bare. The axes now span the loads and say there is no sample, on
    a latency axis a decade either side of the SLO (the SLO line alone gave equal limits, which
    matplotlib warned of)."""
    data = {"a": {"rate": [4, 8], "p50": [None, None], "p99": [None, None], "ok": [False, False]}}
    F.latency_vs_load(data, ax, "ttft", slo_s=1.0)
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= 8
    assert [t.get_text() for t in ax.texts] == ["no TTFT sample at any load: no request completed with one"]
    assert ax.get_ylim() == pytest.approx((100.0, 10000.0))
    fig, ax2 = plt.subplots()
    F.throughput_latency({"a": {"rate": [4, 8], "throughput": [0.0, 0.0], "latency": [None, None],
                                "ok": [False, False]}}, ax2, "tpot", "p99", slo_s=0.05)
    assert ax2.get_xlim()[0] == 0 and ax2.get_xlim()[1] > 0
    assert [t.get_text() for t in ax2.texts] == ["no p99 TPOT at any load: no request completed with one"]
    plt.close(fig)
    # one load with samples: no such note
    fig, ax3 = plt.subplots()
    F.latency_vs_load({"a": {"rate": [4, 8], "p50": [0.1, None], "p99": [0.2, None]}}, ax3, "ttft", slo_s=1.0)
    assert not ax3.texts
    plt.close(fig)


def test_goodput_vs_load_draws_failing_loads_hollow(ax):
    """A load whose run fell behind (its goodput the arrival rate x a share that only looks high
    because the run ended) was drawn filled on the ideal line, like a load that is served: loads
    that fail the SLO are hollow there too, as in latency_vs_load, and the legend says so."""
    data = {"a": {"rate": [4, 30], "goodput": [3.7, 27.0], "offered": [3.7, 27.1], "ok": [True, False]}}
    F.goodput_vs_load(data, ax)
    assert "hollow: fails the SLO" in legend(ax)
    curve = ax.lines[0]
    assert list(curve.get_markevery()) == [0]
    hollow = [ln for ln in ax.lines if ln.get_markerfacecolor() == "none" and len(ln.get_xdata())]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [30] and hollow[0].get_color() == curve.get_color()


def test_cost_latency_with_every_run_unbounded_draws_without_a_warning():
    """Every configuration run at R lost over 1% of its requests (a token bucket below the rate):
    only the SLO line had a height, the log axis got equal limits, and matplotlib printed
    "Attempting to set identical low and high ylims" into plan's output. The axis now spans a
    decade either side of the limit, the triangles above it."""
    import warnings

    data = [{"fleet": f"{k} x h100-sxm", "label": f"{k} x h100-sxm TP1, continuous", "gpu": "h100-sxm",
             "kind": "colocated", "usd_per_hour": 3.29 * k, "p99": math.inf, "meets": False} for k in (3, 4)]
    fig, ax = plt.subplots(figsize=(6, 4.8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.cost_latency(data, ax, "ttft", 1.0)
        fig.canvas.draw()
    lo, hi = ax.get_ylim()
    assert lo < 1000.0 < hi and hi / lo > 10
    plt.close(fig)


def test_cost_latency_names_stay_clear_of_the_slo_line():
    """A plan of Llama-2-13B: '2 x a100-80g TP2, continuous', at 6.36 $/h just under the 1 s TTFT
    limit, had its name placed across the SLO's dotted line, struck through, as cost_capacity's
    names once were by its target line."""
    from matplotlib.text import Text

    def pt(label, usd, p99, meets):
        return {"fleet": label, "label": label, "gpu": "a100-80g", "kind": "colocated", "usd_per_hour": usd,
                "p99": p99, "meets": meets}

    data = [pt("2 x a100-80g TP2, continuous", 6.36, 0.93, True),
            pt("P/D 1 x a100-80g TP2 : 1 x a100-80g TP2", 6.36, 0.80, True),
            pt("3 x a100-80g TP1, continuous", 4.77, 1.08, False),
            pt("P/D 3 x a100-80g TP1 : 3 x a100-80g TP1", 9.54, 0.98, True),
            pt("1 x a100-80g TP2, continuous", 3.18, 18.0, False),
            pt("5 x a100-80g TP1, continuous", 7.95, 1.04, False)]
    fig, ax = F.subplots(figsize=(7, 5))
    deferred: list = []
    F.cost_latency(data, ax, "ttft", 1.0, deferred=deferred)
    F.lay_out(fig)
    F.place_names(deferred)
    fig.canvas.draw()
    y = ax.transData.transform((0, 1000.0))[1]
    names = list(ax.texts)
    assert names
    for t in names:
        b = Text.get_window_extent(t)
        assert not b.y0 <= y <= b.y1, t.get_text()
    plt.close(fig)


def test_cost_capacity_names_stay_clear_of_the_target_line():
    """An answer with little headroom sits just above the target rate: its name, placed below and
    beside the point, was struck through by the target's dotted line (plan chat at 120 req/s,
    6 replicas, capacity 124). Names now keep clear of it as they do of the legend."""
    from matplotlib.text import Text

    data = [{"fleet": "6 x h100-sxm", "label": "6 x h100-sxm TP1, continuous", "gpu": "h100-sxm",
             "kind": "colocated", "usd_per_hour": 19.74, "capacity": 124.0, "low": 120.0, "high": 181.0,
             "chosen": True},
            {"fleet": "6 x h100-sxm", "label": "P/D 3 x h100-sxm TP1 : 3 x h100-sxm TP1", "gpu": "h100-sxm",
             "kind": "pd", "usd_per_hour": 19.74, "capacity": 112.0, "low": 110.0, "high": 115.0, "chosen": False}]
    fig, ax = F.subplots(figsize=(8, 5.5))
    F.cost_capacity(data, ax, 120.0)
    fig.canvas.draw()
    y = ax.transData.transform((0, 120.0))[1]
    names = list(ax.texts)
    assert len(names) == 2
    for t in names:
        b = Text.get_window_extent(t)
        assert not b.y0 <= y <= b.y1, t.get_text()
    plt.close(fig)
