"""The ``vllm-v0.2`` engine profile (vLLM of late 2023) and the mechanisms it brings: launch-bound
eager steps with a CPU cost per eagerly launched all-reduce, the engine's all-reduce, and CPU
figures scaled to the GPU's host (``GpuSpec.host_cpu_speed``); its fit to published step times
(``tools/fit_vllm_v02.py``)."""

import pytest

from servesim.cli.main import main
from servesim.core.batch import synthetic_batch
from servesim.cost.calibration import efficiencies_for
from servesim.cost.engines import PROFILES, cost_model_for, host_cpu_scale
from servesim.inputs.specs import GPUS, get_gpu, get_model
from servesim.simulation import prepare
from tools.fit_vllm_v02 import FIELDS, _table, errors, fit, host_speed, kernels_ms, predict_ms

OPT13, L70 = get_model("facebook/opt-13b"), get_model("meta-llama/Llama-2-70b-hf")
V02 = PROFILES["vllm-v0.2"]


def _cm(model, gpu, tp, engine="vllm-v0.2", **kw):
    g = get_gpu(gpu)
    return cost_model_for(model, g, efficiencies_for(g, "auto"), tp, engine, 256, dtype="fp16", kv_dtype="fp16", **kw)


def test_the_profile_is_2023_vllm():
    cm, eng = _cm(L70, "a100-80g", 8)
    assert cm.graph_sizes == () and cm.allreduce == "nccl" and eng.overlap == 0 and not eng.async_scheduling
    # cost.allreduce (here the keyword the scenario's field feeds) overrides the profile's
    assert _cm(L70, "a100-80g", 8, allreduce="custom")[0].allreduce == "custom"
    assert _cm(L70, "a100-80g", 8, engine="vllm-v0")[0].allreduce == "custom"
    assert _cm(L70, "a100-80g", 8, engine="hf-eager")[0].allreduce == "nccl"


def test_a_tp_eager_step_waits_for_layers_and_their_all_reduce_launches():
    """Llama-2-70B at batch 1 on DGX-A100: at TP8 the kernels take less than launching 80 layers
    from Python (0.28 ms each plus 2 x 47 us for the all-reduces), so the step is the launches plus
    the CPU work; at TP1 no all-reduce is launched."""
    cm, _ = _cm(L70, "a100-80g", 8)
    b = synthetic_batch(decode_contexts=[500])
    launch = 80 * (V02.eager_layer_s + 2 * V02.eager_collective_s)
    assert cm._launch_s == pytest.approx(launch)
    assert cm.step_time(b).time_s == pytest.approx(launch + V02.step_s + V02.per_seq_s)
    one, _ = _cm(OPT13, "a100-80g", 1)
    assert one._launch_s == pytest.approx(40 * V02.eager_layer_s)


def test_cpu_figures_follow_the_hosts_speed():
    h100 = get_gpu("h100-sxm")
    assert host_cpu_scale(V02, get_gpu("a100-80g")) == 1.0
    assert host_cpu_scale(V02, h100) == pytest.approx(1 / h100.host_cpu_speed)
    _, eng = _cm(L70, "h100-sxm", 8)
    assert (eng.step_s, eng.per_seq_s, eng.eager_layer_s, eng.eager_collective_s) == pytest.approx(
        tuple(getattr(V02, f) / h100.host_cpu_speed for f in FIELDS))
    assert eng.describe()["host_cpu_scale"] == pytest.approx(1 / h100.host_cpu_speed)
    # a profile without a measuring host is used as it is everywhere
    _, v1 = _cm(L70, "h100-sxm", 8, engine="vllm-v1")
    assert v1.cpu_scale == 1.0 and v1.step_s == PROFILES["vllm-v1"].step_s


def test_scenario_figures_are_not_rescaled(scenario_factory):
    pool = prepare(scenario_factory(**{"cost.engine": "vllm-v0.2", "cost.step_overhead_s": 0.004})).pools[0]
    assert pool.cost_model.step_overhead_s == 0.004  # on an H100: the scenario's own figure
    assert pool.cost_model.per_seq_overhead_s == pytest.approx(V02.per_seq_s / GPUS["h100-sxm"].host_cpu_speed)


def test_gpu_yaml_takes_the_host_speed(tmp_path, capsys):
    good = tmp_path / "g.yaml"
    good.write_text("base: a100-80g\nhost_cpu_speed: 2\n")
    assert get_gpu(str(good)).host_cpu_speed == 2
    bad = tmp_path / "b.yaml"
    bad.write_text("base: a100-80g\nhost_cpu_speed: 0\n")
    assert main(["cost", "--model", "facebook/opt-13b", "--gpu", str(bad), "--decode-batch", "1"]) == 2
    assert "host_cpu_speed" in capsys.readouterr().err


@pytest.fixture(scope="module")
def table():
    return _table()


def test_the_shipped_figures_are_the_fit(table):
    """tools/fit_vllm_v02.py on DistServe's profile of vLLM v0.2.3 gives the shipped figures (to
    their two digits), and on Splitwise's DGX-H100 rows the H100 host's speed."""
    x = fit(table)
    for f, v in zip(FIELDS, x):
        assert getattr(V02, f) == pytest.approx(v, rel=0.05), f
    assert GPUS["h100-sxm"].host_cpu_speed == pytest.approx(host_speed(x, table=table), rel=0.05)


def test_the_engine_prices_steps_as_the_fit_models_them(table):
    """The cost model's eager, synchronous step is the tool's formula, row for row."""
    shipped = [getattr(V02, f) for f in FIELDS]
    for model, gpu, tp, n, ctx in (("facebook/opt-13b", "a100-80g", 1, 16, 500),
                                   ("facebook/opt-66b", "a100-80g", 4, 64, 500),
                                   ("meta-llama/Llama-2-70b-hf", "h100-sxm", 8, 8, 576)):
        cm, _ = _cm(get_model(model), gpu, tp)
        g, layers = kernels_ms(model, gpu, tp, n, ctx)
        step = cm.step_time(synthetic_batch(decode_contexts=[ctx] * n)).time_s * 1e3
        assert step == pytest.approx(predict_ms(shipped, g, layers, tp, n, get_gpu(gpu).host_cpu_speed), rel=1e-9)


def test_held_out_measurements_are_predicted(table):
    """Fitted on DistServe's OPT profiles alone, the profile predicts Splitwise's Llama-2-70B and
    BLOOM-176B steps on DGX-A100 (a different lab's engine and models) within 20% each, 10% on
    average."""
    shipped = [getattr(V02, f) for f in FIELDS]
    held = [e for r, _, e in errors(shipped, {"h100-sxm": GPUS["h100-sxm"].host_cpu_speed}, table)
            if r[0] == "Splitwise" and r[2] == "a100-80g"]
    assert len(held) == 20 and max(map(abs, held)) < 0.20 and sum(map(abs, held)) / len(held) < 0.10
