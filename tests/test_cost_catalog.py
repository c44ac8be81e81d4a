"""Catalog additions: MoE experts, weight and KV dtypes, GPUs from YAML, config.json MoE, and the
``servesim cost`` JSON contract with the calibrated model."""

import json

import pytest

from servesim.core.batch import synthetic_batch
from servesim.cli.main import main
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for
from servesim.errors import InputError
from servesim.core.kv import size_kv
from servesim.inputs.specs import GPUS, MODELS, get_gpu, get_model

MIXTRAL = MODELS["mistralai/Mixtral-8x7B-v0.1"]
H100 = GPUS["h100-sxm"]


def test_catalog_has_the_issue_models_and_gpus():
    for m in ("codellama/CodeLlama-34b-Instruct-hf", "internlm/internlm-20b", "Qwen/Qwen-72B", "microsoft/phi-2",
              "Qwen/Qwen2.5-7B-Instruct", "mistralai/Mixtral-8x7B-v0.1"):
        assert m in MODELS
    for g in ("a100-40g", "a100-80g", "a40", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "mi300x"):
        spec = GPUS[g]
        assert spec.peak_flops > 0 and spec.mem_bw_bytes_per_s > 0 and spec.pcie_bw_bytes_per_s > 0
    assert GPUS["h100-sxm"].fp8_flops == pytest.approx(2 * GPUS["h100-sxm"].peak_flops, rel=0.01)
    assert GPUS["a100-80g"].fp8_flops == 0


def test_mixtral_params_and_expected_experts_hit():
    # Mixtral-8x7B has 46.7B parameters (12.9B active per token)
    assert MIXTRAL.total_params() == pytest.approx(46.7e9, rel=0.01)
    assert MIXTRAL.expected_experts_hit(1) == pytest.approx(2.0)  # one token: its top-2
    # E (1 - (1 - k/E)^T) = 8 (1 - 0.75^4) = 5.46875 for 4 tokens
    assert MIXTRAL.expected_experts_hit(4) == pytest.approx(8 * (1 - 0.75**4))
    assert MIXTRAL.expected_experts_hit(512) == pytest.approx(8.0)


def test_moe_reads_only_the_experts_hit():
    cm = CostModel(MIXTRAL, H100, tp=2, eff=efficiencies_for(H100))
    one = cm.breakdown(synthetic_batch(decode_contexts=[100]))
    many = cm.breakdown(synthetic_batch(decode_contexts=[100] * 256))
    expert_bytes = 2 * MIXTRAL.hidden_size * MIXTRAL.intermediate_size * 2.0 * MIXTRAL.num_layers  # gate+up, bf16
    # batch 1 reads 2 of 8 experts' up/gate weights, batch 256 all 8 (plus activations)
    assert one["mlp_up"].bytes == pytest.approx(2 * expert_bytes, rel=0.01)
    assert many["mlp_up"].bytes == pytest.approx(8 * expert_bytes, rel=0.05)
    assert "moe_router" in one
    # FLOPs follow the routed tokens: T k tokens through the experts
    assert many["mlp_up"].flops == pytest.approx(2 * 256 * 2 * MIXTRAL.hidden_size * 2 * MIXTRAL.intermediate_size
                                                 * MIXTRAL.num_layers, rel=1e-9)
    dense_like = CostModel(MODELS["mistralai/Mistral-7B-v0.1"], H100, tp=2, eff=efficiencies_for(H100))
    assert cm.step_time(synthetic_batch(decode_contexts=[100])).time_s > \
        dense_like.step_time(synthetic_batch(decode_contexts=[100])).time_s


def test_weight_and_kv_dtypes_change_bytes_and_capacity():
    m = MODELS["meta-llama/Llama-2-70b-hf"]
    g = GPUS["h100-sxm"]
    bf16 = CostModel(m, g, tp=4, eff=efficiencies_for(g))
    fp8 = CostModel(m, g, tp=4, dtype="fp8", kv_dtype="fp8", eff=efficiencies_for(g))
    int4 = CostModel(m, g, tp=4, dtype="int4", kv_dtype="int4", eff=efficiencies_for(g))
    # the layers' weights scale with the dtype; embedding, LM head and final norm stay 16-bit
    layers = m.num_layers * m.layer_weight_params()
    outer = (m.total_params() - layers) * 2.0  # (Llama-2-70B: 2 x 32000 x 8192 + 8192 parameters)
    assert outer == 2.0 * (2 * 32000 * 8192 + 8192)
    assert bf16.weight_bytes == pytest.approx(layers * 2.0 + outer)
    assert fp8.weight_bytes == pytest.approx(layers * 1.0 + outer)
    assert int4.weight_bytes == pytest.approx(layers * 0.5 + outer)
    assert sum(int4.stage_weight_bytes()) == pytest.approx(int4.weight_bytes)
    assert int4.kv_bytes_per_token_per_gpu() == pytest.approx(bf16.kv_bytes_per_token_per_gpu() / 4)
    b = synthetic_batch(decode_contexts=[2000] * 8)
    assert int4.step_time(b).time_s < fp8.step_time(b).time_s < bf16.step_time(b).time_s  # decode is memory-bound
    assert fp8.peak_flops == g.fp8_flops
    caps = [size_kv(cm, 0.9, 16, 2**30).num_blocks for cm in (bf16, fp8, int4)]
    assert caps[0] < caps[1] < caps[2]


def test_low_bit_decode_at_batch_1_stays_weight_read_bound():
    # The fitted 128-row tile padding is cuBLAS's 16-bit tiling; low-bit kernels tile M by 16. At
    # batch 1 every linear layer is weight-read bound, so the time of the layers' GEMMs scales
    # with their weight bytes: fp8 about 1/2 of bf16, int4 about 1/4 (kernel latency aside).
    m, g = MODELS["meta-llama/Llama-2-7b-hf"], GPUS["a100-80g"]
    b = synthetic_batch(decode_contexts=[512])
    t = {}
    for d in ("bf16", "fp8", "int4"):
        ops = CostModel(m, g, dtype=d, kv_dtype="bf16", eff=efficiencies_for(g)).breakdown(b)
        for op in ("qkv_proj", "o_proj", "mlp_up", "mlp_down"):
            assert ops[op].bound == "memory", (d, op)
        t[d] = sum(ops[op].time_s for op in ("qkv_proj", "o_proj", "mlp_up", "mlp_down"))
    assert 0.45 < t["fp8"] / t["bf16"] < 0.6 and 0.2 < t["int4"] / t["bf16"] < 0.35


def test_gpu_from_yaml(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text("name: h100-slow\nbase: h100-sxm\nmem_bw_bytes_per_s: 2.0e12\n")
    g = get_gpu(str(p))
    assert g.name == "h100-slow" and g.mem_bw_bytes_per_s == 2.0e12 and g.peak_flops == H100.peak_flops
    assert "transferred from h100-sxm" in efficiencies_for(g).source
    p.write_text("name: x\npeak_flops: 1e15\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4e12\n")
    assert get_gpu(str(p)).link_bw_bytes_per_s > 0
    p.write_text("name: x\npeak_flops: 1e15\n")
    with pytest.raises(InputError, match="lacks mem_bytes"):
        get_gpu(str(p))
    p.write_text("name: x\npeak_flops: fast\nmem_bytes: 1\nmem_bw_bytes_per_s: 1\n")
    with pytest.raises(InputError, match="peak_flops must be a number"):
        get_gpu(str(p))
    with pytest.raises(InputError, match="does not exist"):
        get_gpu(str(tmp_path / "none.yaml"))
    for body, msg in (("base: [h100-sxm]\n", "base: unknown GPU"),
                      ("name: x\npeak_flops: .inf\nmem_bytes: 1\nmem_bw_bytes_per_s: 1\n", "must be a finite"),
                      ("name: x\npeak_flops: true\nmem_bytes: 1\nmem_bw_bytes_per_s: 1\n", "must be a number")):
        p.write_text(body)
        with pytest.raises(InputError, match=msg):
            get_gpu(str(p))


def test_gpu_yaml_errors_name_the_field_and_say_what_is_valid(tmp_path, capsys):
    """The GPU YAML goes through the scenario's schema builder: field path, what is valid, and the
    closest field or choice for a misspelling."""
    p = tmp_path / "gpu.yaml"
    for body, msg in (
        ("name: x\npeak_flop: 1e15\nmem_bytes: 1\nmem_bw_bytes_per_s: 1\n",
         r"gpu\.yaml: peak_flop: unknown field; \(did you mean 'peak_flops'\?\) valid: base, fp8_flops"),
        ("base: h100-sxm\nmem_kind: hmb\n", r"gpu\.yaml: mem_kind: 'hmb' is not valid; \(did you mean 'hbm'\?\)"),
        ("base: h100-sxm\nname: [a]\n", r"gpu\.yaml: name must be a string, got \['a'\]"),
        ("base: h100-sxm\nfp8_flops: -1\n", r"gpu\.yaml: fp8_flops must be >= 0 and <= 1e\+21, got -1"),
        ("base: h100-sm\n", r"base: unknown GPU 'h100-sm'; \(did you mean 'h100-sxm'\?\)"),
        ("- h100-sxm\n", r"gpu\.yaml: a GPU file must be a YAML mapping, got list"),
        # an empty file (or comments alone) read "got NoneType"
        ("", r"gpu\.yaml: a GPU file must be a YAML mapping, got an empty document \(no fields\)"),
        ("# base: h100-sxm\n", r"gpu\.yaml: a GPU file must be a YAML mapping, got an empty document"),
    ):
        p.write_text(body)
        with pytest.raises(InputError, match=msg):
            get_gpu(str(p))
    p.write_text("name: x\npeak_flop: 1e15\nmem_bytes: 1\nmem_bw_bytes_per_s: 1\n")
    assert main(["cost", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", str(p), "--prefill", "8"]) == 2
    err = capsys.readouterr().err
    assert "--gpu: " in err and "did you mean 'peak_flops'" in err and "Traceback" not in err


def test_config_json_file_errors_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    for text, msg in (("[1, 2]", r"config\.json: a config file must be a JSON object, got list"),
                      ('{"hidden_size": 4096,\n "n_head" 32}',
                       r"config\.json: line 2, column 11: malformed JSON: Expecting"),
                      ('{"hidden_size": 4096}', r"config\.json lacks 'num_attention_heads' / 'n_head'"),
                      ('{"hidden_size": true}', r"field 'hidden_size' must be a positive integer")):
        path.write_text(text)
        with pytest.raises(InputError, match=msg):
            get_model(str(path))


def test_moe_config_json(tmp_path):
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
           "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
           "hidden_act": "silu", "max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path / "config.json"))
    assert m.num_experts == 8 and m.experts_per_token == 2
    assert m.total_params() == MIXTRAL.total_params()
    cfg["num_experts_per_tok"] = 9
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="num_experts_per_tok"):
        get_model(str(tmp_path / "config.json"))


@pytest.mark.parametrize("key,value,msg", [
    ("num_key_value_heads", "eight", "'num_key_value_heads' must be a positive integer"),
    ("num_key_value_heads", 5, "must be a multiple of num_key_value_heads"),
    ("head_dim", 0.5, "'head_dim' must be a positive integer"),
    ("max_position_embeddings", float("inf"), "'max_position_embeddings' must be a positive integer"),
    ("vocab_size", 10**15, "at most 2147483647"),
    ("hidden_size", 16, "give head_dim"),
    ("tie_word_embeddings", "yes", "must be true or false"),
    ("hidden_act", ["silu"], "'hidden_act' must be a string"),
])
def test_bad_config_json_fields_name_the_field(tmp_path, capsys, key, value, msg):
    """Found by fuzzing each config.json field with odd values: each is an input error naming the
    field, through the CLI too (exit 2, no traceback)."""
    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
           "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu", "max_position_embeddings": 8192}
    cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=msg):
        get_model(str(path))
    assert main(["cost", "--model", str(path), "--gpu", "h100-sxm", "--prefill", "8"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cost_json_contract_with_calibrated_model(capsys):
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--tp", "2", "--prefill", "512",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("step_time_s", "flops", "bytes", "arithmetic_intensity", "bound", "mfu", "mbu", "num_layers", "ops"):
        assert k in d
    for op in ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "attention", "allreduce", "lm_head", "overhead"):
        assert set(d["ops"][op]) == {"time_s", "flops", "bytes", "bound"}
    assert sum(o["time_s"] for o in d["ops"].values()) == pytest.approx(d["step_time_s"], rel=1e-12)
    assert main(["cost", "--model", "mistralai/Mixtral-8x7B-v0.1", "--gpu", "a100-80g", "--tp", "2",
                 "--decode-batch", "8", "--context", "512"]) == 0
    assert "moe_router" in capsys.readouterr().out


def test_scenario_gpu_from_yaml(tmp_path, scenario_factory):
    from servesim.simulation import prepare

    p = tmp_path / "gpu.yaml"
    p.write_text("name: big-h100\nbase: h100-sxm\nmem_bytes: 160e9\n")
    setup = prepare(scenario_factory(**{"hardware.gpu": str(p)}))
    assert setup.cost_model.gpu.mem_bytes == 160e9
    assert setup.capacity.num_blocks > prepare(scenario_factory()).capacity.num_blocks


def test_calibrated_tp_speeds_up_prefill_but_not_perfectly():
    from servesim.inputs.specs import MODELS as M

    b = synthetic_batch(prefill=[(2048, 0)])
    eff = efficiencies_for(H100)
    t1 = CostModel(M["meta-llama/Meta-Llama-3-8B"], H100, tp=1, eff=eff).step_time(b)
    t2 = CostModel(M["meta-llama/Meta-Llama-3-8B"], H100, tp=2, eff=eff).step_time(b)
    assert t1.time_s / 2 < t2.time_s < t1.time_s
    assert t2.comm_s > 0 and t1.comm_s == 0


def test_fp8_on_a_gpu_file_without_fp8_flops_is_refused(tmp_path, capsys, scenario_factory):
    """A GPU file without base that gives no fp8_flops says nothing about FP8 tensor cores: FP8
    weights on it are refused (naming the field to give), not priced at its 16-bit peak as if it
    had none; fp8_flops: 0 says so and runs; bf16 needs no FP8 figure."""
    from servesim.simulation import prepare

    p = tmp_path / "gpu.yaml"
    p.write_text("name: x\npeak_flops: 1e15\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4e12\n")
    args = ["cost", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", str(p), "--decode-batch", "8"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "--dtype: fp8 on GPU" in err and "gives no fp8_flops" in err and "fp8_flops: 0" in err
    assert "Traceback" not in err
    with pytest.raises(InputError, match=r"hardware\.dtype: fp8 .*gives no fp8_flops"):
        prepare(scenario_factory(**{"hardware.gpu": str(p), "hardware.dtype": "fp8"}))
    p.write_text("name: x\npeak_flops: 1e15\nfp8_flops: 0\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4e12\n")
    assert main(args + ["--dtype", "fp8"]) == 0
    assert prepare(scenario_factory(**{"hardware.gpu": str(p), "hardware.dtype": "fp8"})).cost_model.dtype == "fp8"
    p.write_text("base: a100-80g\n")  # (a base's FP8 figure is known: the A100 has none)
    assert main(args + ["--dtype", "fp8"]) == 0


def test_gpu_file_named_as_a_catalog_gpu_must_match_it(tmp_path):
    """Calibrations (and a run's GPU) are looked up by name: a GPU file that names itself as a
    catalog GPU but has other figures would be priced with that GPU's fit (an L40S named h100-sxm
    took the H100's NVLink all-reduce). It is refused; with the catalog GPU's figures (a price of
    one's own) it is that GPU."""
    p = tmp_path / "gpu.yaml"
    p.write_text("name: h100-sxm\nbase: l40s\n")
    with pytest.raises(InputError, match=r"gpu\.yaml: name: 'h100-sxm' is a catalog GPU's name, and this file's "
                                         r"figures differ from it \(peak_flops"):
        get_gpu(str(p))
    p.write_text("name: h100-sxm\nbase: h100-sxm\nprice_per_gpu_hour_usd: 2.0\n")
    g = get_gpu(str(p))
    assert g.price_per_gpu_hour_usd == 2.0 and g.peak_flops == H100.peak_flops
