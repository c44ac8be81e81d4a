"""A sliding window on only some layers (Gemma-2: every other layer; Qwen2 past max_window_layers;
gpt-oss's layer_types; Gemma-3's sliding_window_pattern): those layers' attention follows the
window, the others' the whole context; every layer's KV is kept (vLLM V0). They were all priced
with full attention: a Gemma-2-9B decode of 64 at 8,000 tokens on an H100 cost 67.0 ms, of which
58.5 ms attention, where half the layers read 4,096 keys, not 8,001."""

import dataclasses
import json

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.errors import InputError
from servesim.inputs.hf_config import model_from_hf_config
from servesim.inputs.specs import GPUS, get_model
from servesim.simulation import simulate

H100 = GPUS["h100-sxm"]
SMALL = dict(model_type="mistral", hidden_size=1024, num_attention_heads=8, num_key_value_heads=8,
             num_hidden_layers=4, intermediate_size=2048, vocab_size=32000, max_position_embeddings=8192,
             sliding_window=256, layer_types=["sliding_attention", "full_attention"] * 2)


def load(**cfg):
    return model_from_hf_config(cfg, "test config.json", "test")


def test_which_layers_use_the_window_is_read_from_each_family():
    g2 = get_model("google/gemma-2-9b")
    assert (g2.sliding_window_tokens, g2.partial_window_tokens, g2.partial_window_layers) == (None, 4096, 21)
    m = load(**SMALL)
    assert (m.sliding_window_tokens, m.partial_window_tokens, m.partial_window_layers) == (None, 256, 2)
    gemma3 = dict(model_type="gemma3_text", hidden_size=1152, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=256, num_hidden_layers=26, intermediate_size=6912, vocab_size=262144,
                  max_position_embeddings=32768, sliding_window=512, sliding_window_pattern=6)
    assert (load(**gemma3).partial_window_tokens, load(**gemma3).partial_window_layers) == (512, 22)
    qwen = dict(model_type="qwen2", hidden_size=1024, num_attention_heads=8, num_key_value_heads=8,
                num_hidden_layers=24, intermediate_size=2048, sliding_window=4096, use_sliding_window=True,
                max_window_layers=21)
    assert (load(**qwen).partial_window_tokens, load(**qwen).partial_window_layers) == (4096, 3)
    assert load(**qwen | {"use_sliding_window": False}).partial_window_tokens is None
    # a window no request fills (>= the context) or on every / no layer is not a partial one
    assert load(**SMALL | {"sliding_window": 8192}).partial_window_tokens is None
    assert load(**{**SMALL, "layer_types": ["sliding_attention"] * 4}).sliding_window_tokens == 256
    assert load(model_type="gemma2", hidden_size=256, num_attention_heads=4, num_hidden_layers=2,
                intermediate_size=512, sliding_window=None).partial_window_tokens is None
    with pytest.raises(InputError, match=r"field 'layer_types': 3 entries for 4 layers"):
        load(**{**SMALL, "layer_types": ["sliding_attention", "full_attention", "full_attention"]})


def test_a_step_prices_the_window_layers_on_the_windowed_batch():
    m = load(**SMALL)
    cm = CostModel(m, H100)
    full = CostModel(dataclasses.replace(m, partial_window_tokens=None, partial_window_layers=0), H100)
    win = CostModel(dataclasses.replace(m, sliding_window_tokens=256, partial_window_tokens=None,
                                        partial_window_layers=0), H100)
    for step in ({"decode_contexts": [4000] * 8}, {"prefill": [(1000, 3000)]}, {"prefill": [(2048, 0)]}):
        b_full, b_win = synthetic_batch(**step), synthetic_batch(**step, window=256)
        b = b_full._replace(windowed=b_win)
        c = cm.step_time(b)
        assert c == cm.step_time_reference(b)  # bit for bit, as every step
        att = cm.breakdown(b)["attention"].time_s
        # two layers at the full batch's attention, two at the windowed one's
        assert att == pytest.approx((full.breakdown(b_full)["attention"].time_s
                                     + win.breakdown(b_win)["attention"].time_s) / 2, rel=1e-12)
        assert full.breakdown(b_full)["attention"].time_s > att > win.breakdown(b_win)["attention"].time_s
        assert full.step_time(b_full).time_s >= c.time_s >= win.step_time(b_win).time_s
        assert cm.breakdown(b)["mlp_up"] == full.breakdown(b_full)["mlp_up"]
    short = synthetic_batch(decode_contexts=[100] * 8)  # within the window: as full attention
    assert cm.step_time(short._replace(windowed=short)).time_s == pytest.approx(full.step_time(short).time_s,
                                                                                rel=1e-12)


def test_runs_price_the_window_layers_and_keep_every_layers_kv(tmp_path, scenario_factory):
    path = tmp_path / "config.json"
    kw = {"workload.num_requests": 12, "workload.prompt_tokens": {"dist": "fixed", "value": 3000},
          "workload.output_tokens": {"dist": "fixed", "value": 40}}
    runs = {}
    for name, cfg in (("partial", SMALL), ("full", {**SMALL, "layer_types": ["full_attention"] * 4}),
                      ("window", {**SMALL, "layer_types": ["sliding_attention"] * 4})):
        path.write_text(json.dumps(cfg))
        runs[name] = [simulate(scenario_factory(**{**kw, "model": str(path)}), engine=e) for e in ("fast", "reference")]
    fast, ref = runs["partial"]
    for col in ("first_token_s", "finish_s"):
        assert np.array_equal(fast.requests[col], ref.requests[col]), col
    finish = {k: float(np.mean(v[0].requests["finish_s"] - v[0].requests["arrival_s"])) for k, v in runs.items()}
    assert finish["full"] > finish["partial"] > finish["window"]
    # its KV is the full model's: every layer's for the whole sequence
    kv = {k: v[0].summary["kv_capacity"]["colocated"]["blocks_per_replica"] for k, v in runs.items()}
    assert kv["partial"] == kv["full"] == kv["window"]  # (the pool: the same layers' KV per token)
    peak = {k: float(np.max(v[0].steps["kv_blocks_used"])) for k, v in runs.items()}
    assert peak["partial"] == peak["full"] > peak["window"]  # held: every layer's, for the whole sequence


def test_pipeline_stages_carry_their_own_layers_windows():
    """Which layers slide places the window's cheaper attention on pipeline stages: Qwen2's from
    max_window_layers on all sit on the last stage. stage_times shared the layers' work by layer
    counts alone, so a Qwen2 (window from layer 14 of 28) decode of 32 at 16,000 tokens over two
    stages read 6.0 ms each where the full-attention stage takes 7.8 and the windowed one 4.2."""
    from servesim.core.batch import model_batch

    qwen = dict(model_type="qwen2", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                num_hidden_layers=28, intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768,
                sliding_window=4096, use_sliding_window=True, max_window_layers=14)
    m = load(**qwen)
    assert m.partial_window_at == tuple(range(14, 28))
    assert get_model("google/gemma-2-9b").partial_window_at == tuple(range(0, 42, 2))
    assert load(**SMALL).partial_window_at == (0, 2)  # (its layer_types)
    gemma3 = dict(model_type="gemma3_text", hidden_size=1152, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=256, num_hidden_layers=12, intermediate_size=6912, vocab_size=262144,
                  max_position_embeddings=32768, sliding_window=512, sliding_window_pattern=6)
    assert load(**gemma3).partial_window_at == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10)  # (layers 5 and 11 global)
    cm = CostModel(m, H100, pp=2)
    full = CostModel(dataclasses.replace(m, partial_window_tokens=None, partial_window_layers=0,
                                         partial_window_at=()), H100, pp=2)
    assert cm.stage_window_layers() == [0, 14]
    step = {"decode_contexts": [16000] * 32}
    b = model_batch(m, **step)
    c = cm.step_time(b)
    st = cm.stage_times(c, b)
    assert sum(st) == pytest.approx(c.time_s - c.overhead_s, rel=1e-12)
    # the first stage attends as the full-attention model's does: its time is that model's first stage's
    bf = synthetic_batch(**step)
    assert st[0] == pytest.approx(full.stage_times(full.step_time(bf), bf)[0], rel=1e-9)
    assert st[0] > 1.5 * st[1]
    # Gemma-2's alternate layers: the two stages of 21 hold 11 and 10 window layers
    g2 = CostModel(get_model("google/gemma-2-9b"), H100, pp=2)
    assert g2.stage_window_layers() == [11, 10]
    b = model_batch(g2.model, **{"decode_contexts": [8000] * 32})
    st = g2.stage_times(g2.step_time(b), b)
    assert st[0] < st[1]  # (one window layer more on the first; the LM head on the last)


def test_servesim_cost_says_how_many_window_layers_each_stage_holds(tmp_path, capsys):
    from servesim.cli.main import main

    qwen = dict(model_type="qwen2", hidden_size=1024, num_attention_heads=8, num_key_value_heads=8,
                num_hidden_layers=8, intermediate_size=2048, vocab_size=32000, max_position_embeddings=32768,
                sliding_window=1024, use_sliding_window=True, max_window_layers=4)
    (tmp_path / "config.json").write_text(json.dumps(qwen))
    args = ["cost", "--model", str(tmp_path / "config.json"), "--gpu", "h100-sxm", "--pp", "2", "--decode-batch", "8",
            "--context", "8000"]
    assert main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pipeline:"))
    assert "(4 layers, 0 of them windowed)" in line and "(4 layers, 4 of them windowed)" in line
    assert "Stage 1 is the slowest" in line  # (its full-attention layers read 8,000 keys, the others 1,024)


def test_a_layer_type_it_does_not_model_is_named_in_the_model_note(tmp_path, capsys):
    # (a typo, sliding_attn, or a real kind, linear_attention, is priced as full attention: the note says so)
    from servesim.cli.main import main
    from servesim.inputs.specs import model_note

    cfg = {**SMALL, "layer_types": ["sliding_attention", "linear_attention", "sliding_attn", "linear_attention"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    note = model_note(str(tmp_path / "config.json"))
    assert "'linear_attention' at layers 1, 3" in note and "'sliding_attn' at layer 2" in note
    assert "priced as full attention" in note
    assert load(**cfg).partial_window_at == (0,)  # (the reading is kept: only sliding_attention slides)
    assert main(["cost", "--model", str(tmp_path / "config.json"), "--gpu", "h100-sxm", "--decode-batch", "8"]) == 0
    assert "'sliding_attn' at layer 2" in capsys.readouterr().out
    (tmp_path / "config.json").write_text(json.dumps(SMALL))  # (the two types it reads: no such note)
    assert "priced as full attention" not in (model_note(str(tmp_path / "config.json")) or "")
