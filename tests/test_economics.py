"""Prices and power in the GPU catalog, the scenario's overrides, and summary.json's economics."""

import numpy as np
import pytest

from servesim.cost.economics import IDLE_POWER_SHARE, PoolUse, economics, gpu_power_w, phase_cost_shares
from servesim.errors import InputError
from servesim.inputs.specs import GPUS, get_gpu
from servesim.simulation import simulate

from conftest import make_scenario


def test_every_catalog_gpu_has_a_price_and_a_board_power():
    for name, g in GPUS.items():
        assert g.price_per_gpu_hour_usd is not None and g.price_per_gpu_hour_usd > 0, name
        assert g.power_w is not None and g.power_w >= 250, name
    # datasheet TDPs
    assert GPUS["h100-sxm"].power_w == 700 and GPUS["a100-80g"].power_w == 400
    # a list price, not a cost: an H100 SXM rents for more than an A100 and less than a B200
    assert GPUS["a100-80g"].price_per_gpu_hour_usd < GPUS["h100-sxm"].price_per_gpu_hour_usd \
        < GPUS["b200"].price_per_gpu_hour_usd


def test_power_model_runs_from_idle_to_board_power():
    assert gpu_power_w(700, 0.0) == pytest.approx(700 * IDLE_POWER_SHARE)
    assert gpu_power_w(700, 1.0) == pytest.approx(700)
    assert gpu_power_w(700, 0.5) == pytest.approx(700 * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) / 2))
    assert gpu_power_w(700, 1.7) == gpu_power_w(700, 1.0)  # a share, clipped


def test_gpu_yaml_carries_price_and_power(tmp_path):
    f = tmp_path / "h20.yaml"
    f.write_text("name: h20\npeak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e12\n"
                 "price_per_gpu_hour_usd: 1.2\npower_w: 400\n")
    g = get_gpu(str(f))
    assert (g.price_per_gpu_hour_usd, g.power_w) == (1.2, 400)
    f.write_text("base: h100-sxm\nmem_bytes: 96e9\n")
    assert get_gpu(str(f)).price_per_gpu_hour_usd == GPUS["h100-sxm"].price_per_gpu_hour_usd
    f.write_text("base: h100-sxm\npower_w: -3\n")
    with pytest.raises(InputError, match="power_w"):
        get_gpu(str(f))


@pytest.mark.parametrize("line, match", [
    # (each ran: a price of 1e-300 printed 2.29e+300M tokens per $, a power of 1e-300 6.49e+302
    # tokens per J, fp8_flops: 3 an FP8 run of 3.8e13 simulated seconds, a blank name '1 x  at $...')
    ("price_per_gpu_hour_usd: 1e-300", r"price_per_gpu_hour_usd must be 0 \(free\) or from 1e-06 to 1e\+06"),
    ("power_w: 1e-300", r"power_w must be >= 1e-06"),
    ("fp8_flops: 3", r"fp8_flops must be 0 \(no FP8 tensor cores\) or dense FP8 FLOP/s from 1e\+09"),
    ("name: ''", r"name must be a GPU's name \(text that is not blank\), got ''"),
    ("name: '  '", r"name must be a GPU's name"),
    # (an engine profile's CPU figures are scaled by its host's speed over this: vllm-v0.2 ran 6.9e300 s)
    ("host_cpu_speed: 1e-300", r"host_cpu_speed must be >= 0\.01 and <= 100, got 1e-300"),
])
def test_a_gpu_yaml_out_of_range_figure_or_blank_name_is_refused_naming_the_file_and_field(tmp_path, line, match):
    f = tmp_path / "h20.yaml"
    body = "name: h20\npeak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e12\n"
    f.write_text(body.replace("name: h20\n", "") + line + "\n")
    with pytest.raises(InputError, match=rf"h20.yaml: {match}"):
        get_gpu(str(f))
    # the edges stay valid: free, a microdollar, a microwatt, no FP8
    f.write_text(body + "price_per_gpu_hour_usd: 0\npower_w: 1e-6\nfp8_flops: 0\n")
    assert get_gpu(str(f)).price_per_gpu_hour_usd == 0
    f.write_text(body + "price_per_gpu_hour_usd: 1e-6\nfp8_flops: 1e9\n")
    assert get_gpu(str(f)).fp8_flops == 1e9


def test_phase_cost_shares_split_mixed_steps_by_prefill_tokens():
    steps = {"duration_s": np.array([1.0, 1.0, 2.0, 3.0]), "prefill_tokens": np.array([100, 0, 50, 0]),
             "decode_tokens": np.array([0, 8, 50, 4]), "replica": np.array([0, 0, 0, 1])}
    pools = np.array(["prefill", "decode"], dtype=object)
    shares = phase_cost_shares(steps, pools, ["prefill", "decode"])
    assert shares["prefill"] == pytest.approx((1.0 + 0.0 + 2.0 * 0.5) / 4.0)
    assert shares["decode"] == 0.0


def test_economics_adds_up():
    pools = [PoolUse("prefill", "h100-sxm", 2, 3.0, 700.0, 0.5, 1.0),
             PoolUse("decode", "a100-80g", 4, 1.5, 400.0, 1.0, 0.0)]
    e = economics(pools, 3600.0, 2e6, 1e6)
    assert e["usd_per_hour"] == pytest.approx(2 * 3.0 + 4 * 1.5)
    assert e["usd"] == pytest.approx(12.0)
    assert e["tokens_per_usd"] == pytest.approx(3e6 / 12.0)
    # the prefill pool's cost is the input tokens', the decode pool's the output tokens'
    assert e["usd_per_million_input_tokens"] == pytest.approx(6.0 / 2)
    assert e["usd_per_million_output_tokens"] == pytest.approx(6.0 / 1)
    power = 2 * gpu_power_w(700, 0.5) + 4 * 400
    assert e["mean_power_w"] == pytest.approx(power)
    assert e["provisioned_power_w"] == 2 * 700 + 4 * 400
    assert e["tokens_per_joule"] == pytest.approx(3e6 / (power * 3600))
    unknown = economics([PoolUse("colocated", "x", 1, None, None, 1.0, 0.5)], 10.0, 1.0, 1.0)
    assert unknown["usd_per_hour"] is None and unknown["tokens_per_usd"] is None and unknown["missing"] == ["x"]


def test_summary_economics_of_a_run_and_its_overrides():
    s = simulate(make_scenario(**{"cluster.replicas": 2})).summary
    e = s["economics"]
    h100 = GPUS["h100-sxm"]
    assert e["gpus"] == 2 and e["usd_per_hour"] == pytest.approx(2 * h100.price_per_gpu_hour_usd)
    tokens = s["total_tokens_per_s"] * s["sim_time_s"]
    assert e["tokens_per_usd"] == pytest.approx(tokens / (e["usd_per_hour"] * s["sim_time_s"] / 3600))
    busy = s["utilization"]["busy_fraction"]
    assert e["mean_power_w"] == pytest.approx(2 * gpu_power_w(h100.power_w, busy))
    over = simulate(make_scenario(**{"cost.gpu_hour_usd": 2.0, "cost.gpu_power_w": {"h100-sxm": 500}})).summary
    assert over["economics"]["usd_per_hour"] == 2.0 and over["economics"]["provisioned_power_w"] == 500


def test_pd_split_attributes_each_pool_to_its_phase():
    s = simulate(make_scenario(**{"policy.name": "pd_split", "policy.decode.gpu": "a100-80g",
                                  "workload.num_requests": 30})).summary
    e = s["economics"]
    assert e["pools"]["prefill"]["input_cost_share"] == 1.0 and e["pools"]["decode"]["input_cost_share"] == 0.0
    assert e["usd_per_hour"] == pytest.approx(GPUS["h100-sxm"].price_per_gpu_hour_usd
                                             + GPUS["a100-80g"].price_per_gpu_hour_usd)


RANGE = r"must be a number from 1e-06 to 1e\+06"


@pytest.mark.parametrize("field, value, match", [
    ("gpu_hour_usd", "cheap", "cost.gpu_hour_usd must be a number"),
    ("gpu_hour_usd", {"h100-sxm": -1}, rf"cost.gpu_hour_usd.h100-sxm {RANGE}, or 0"),
    ("gpu_hour_usd", {"h100": 2.0}, r"cost.gpu_hour_usd.h100: not a GPU.*did you mean"),
    # (an integer beyond a float: np.isfinite raised a TypeError on it)
    ("gpu_hour_usd", 10**400, rf"cost.gpu_hour_usd {RANGE}, or 0"),
    # (the $ per million tokens, the tokens per $ and per joule, the energy overflowed to inf)
    ("gpu_hour_usd", 1e308, rf"cost.gpu_hour_usd {RANGE}, or 0"),
    ("gpu_hour_usd", 1e-308, rf"cost.gpu_hour_usd {RANGE}, or 0"),
    ("gpu_power_w", 1e308, rf"cost.gpu_power_w {RANGE} \("),
    ("gpu_power_w", 0, rf"cost.gpu_power_w {RANGE} \("),
])
def test_bad_price_overrides_name_the_field(field, value, match):
    with pytest.raises(InputError, match=match):
        simulate(make_scenario(**{f"cost.{field}": value}))


def test_free_gpus_cost_nothing():
    e = simulate(make_scenario(**{"cost.gpu_hour_usd": 0})).summary["economics"]
    assert e["usd"] == 0 and e["tokens_per_usd"] is None  # (no tokens per dollar when nothing is paid)


@pytest.mark.parametrize("value", [-0.0, {"h100-sxm": -0.0}])
def test_a_free_gpu_written_minus_zero_is_free_not_minus_zero(value):
    """cost.gpu_hour_usd: -0 was printed "1 x h100-sxm at $-0.00/GPU-h" and kept as -0.0 in
    summary.json (the range check lets 0 through, and -0.0 == 0)."""
    import math

    from servesim.cli.main import format_summary

    s = simulate(make_scenario(**{"cost.gpu_hour_usd": value})).summary
    (pool,) = s["economics"]["pools"].values()
    assert pool["usd_per_gpu_hour"] == 0 and math.copysign(1, pool["usd_per_gpu_hour"]) == 1
    assert "$-0" not in format_summary(s) and "at $0.00/GPU-h" in format_summary(s)


def test_printed_summary_has_an_economics_line():
    from servesim.cli.main import format_summary

    text = format_summary(simulate(make_scenario()).summary)
    line = next(x for x in text.splitlines() if x.startswith("economics"))
    assert "1 x h100-sxm at $" in line and "tokens per $" in line and "tokens per J" in line


def test_printed_economics_of_a_run_that_completed_nothing_prices_no_tokens():
    """A run cut off before any request completed has no token to price: the line said '$0 per M
    input, $0 per M output tokens' (free tokens); it says n/a."""
    from servesim.cli.main import format_summary

    s = simulate(make_scenario(**{"workload.duration_s": 0.05, "workload.num_requests": None})).summary
    assert s["completed"] == 0 and s["economics"]["usd_per_million_input_tokens"] is None
    line = next(x for x in format_summary(s).splitlines() if x.startswith("economics"))
    assert "(n/a per M input, n/a per M output tokens)" in line and "$0 per M" not in line


def test_printed_economics_names_what_a_gpu_lacks(tmp_path):
    """A GPU YAML with a price and no power was printed as 'no catalog price or power for h20'
    beside its own price: the line names the figure that is missing, and not one it has."""
    from servesim.cli.main import format_summary

    f = tmp_path / "h20.yaml"
    f.write_text("name: h20\npeak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e12\n"
                 "price_per_gpu_hour_usd: 1.2\n")
    s = simulate(make_scenario(**{"hardware.gpu": str(f), "workload.num_requests": 10})).summary
    assert s["economics"]["missing"] == ["h20"] and s["economics"]["usd_per_hour"] == 1.2
    line = next(x for x in format_summary(s).splitlines() if x.startswith("economics"))
    assert "no board power for h20" in line and "no price" not in line and "at $1.20/GPU-h" in line


def test_printed_power_of_a_large_cluster_is_in_megawatts():
    """10,000 H100s were printed at "TDP 7e+03 kW", and their $ per M output tokens as "$4.39e+03"."""
    from servesim.cli.main import _format_economics

    pools = [PoolUse("colocated", "h100-sxm", 10_000, 3.29, 700.0, 0.5, 0.2)]
    line = _format_economics({"economics": economics(pools, 60.0, 1e6, 1e5)})[0]
    assert "(TDP 7 MW)" in line and "at a mean 4.03 MW" in line and "$4,387 per M output" in line
    assert "e+" not in line
    small = _format_economics({"economics": economics([PoolUse("c", "h100-sxm", 1, 3.29, 700.0, 1.0, 0.2)],
                                                      60.0, 1e6, 1e5)})[0]
    assert "at a mean 0.7 kW (TDP 0.7 kW)" in small
