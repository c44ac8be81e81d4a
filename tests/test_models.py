"""Model families: the Hugging Face config.json loader applies transformers' defaults for absent
keys and each family's aliases (one small config per family), the packaged catalog configs load
to their published sizes, and latent attention (MLA), shared experts and expert parallelism are
priced as their kernels run."""

import json

import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.errors import InputError
from servesim.inputs.hf_config import family_of, model_from_hf_config
from servesim.inputs.specs import GPUS, catalog_names, get_model, packaged_configs, tp_error

GIB = 2**30


def load(**cfg):
    return model_from_hf_config(cfg, "test config.json", "test")


# ---------------------------------------------------------------- one small config per family
def test_llama_defaults_and_aliases():
    m = load(model_type="llama", hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
             intermediate_size=11008)
    # LlamaConfig: no num_key_value_heads -> MHA; untied; vocab 32000; max_position_embeddings 2048
    assert (m.num_kv_heads, m.head_dim, m.tied_embeddings, m.vocab_size, m.max_context_tokens) == (32, 128, False,
                                                                                                 32000, 2048)
    assert m.gated_mlp and m.rotary and m.sliding_window_tokens is None
    # LLaMA-1 files give the context as max_sequence_length (vLLM reads it; the smallest key wins)
    assert load(model_type="llama", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                max_sequence_length=2048, max_position_embeddings=4096).max_context_tokens == 2048
    # num_key_value_heads: null means MHA too
    assert load(model_type="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=None,
                num_hidden_layers=2, intermediate_size=128).num_kv_heads == 4


@pytest.mark.parametrize("model_type,key", [("llama", "intermediate_size"), ("opt", "ffn_dim")])
def test_a_null_mlp_width_is_named_not_read_as_4x_hidden(model_type, key):
    """intermediate_size: null (transformers keeps None: no MLP is built from it) was read as 4 x
    hidden, GPT-2's rule for n_inner: a Llama's MLP silently 20,480 wide instead of an error."""
    with pytest.raises(InputError, match=f"test config.json: field '{key}' is null: give the MLP's width"):
        load(model_type=model_type, hidden_size=64, num_attention_heads=4, num_hidden_layers=2, **{key: None})
    # GPT-2's n_inner and Falcon's ffn_hidden_size do mean 4 x hidden by null
    assert load(model_type="gpt2", n_embd=64, n_head=4, n_layer=2, n_inner=None).intermediate_size == 256
    assert load(model_type="falcon", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                ffn_hidden_size=None).intermediate_size == 256


def test_mistral_window_default_and_null():
    base = dict(model_type="mistral", hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
                intermediate_size=14336, vocab_size=32000)
    # MistralConfig: absent sliding_window is 4096; an explicit null (Instruct-v0.2) switches it off
    assert load(**base).sliding_window_tokens == 4096
    assert load(**base, sliding_window=None).sliding_window_tokens is None
    assert load(**base, sliding_window=2048).sliding_window_tokens == 2048
    assert load(**base).num_kv_heads == 8  # MistralConfig's num_key_value_heads default
    assert get_model("mistralai/Mistral-7B-v0.1").sliding_window_tokens == 4096
    assert get_model("mistralai/Mistral-7B-Instruct-v0.2").sliding_window_tokens is None


def test_a_window_no_request_can_fill_is_no_window(tmp_path, scenario_factory):
    """Phi-3-mini-128k's config.json gives sliding_window 262,144 for a 131,072-token context: every
    layer attends to everything a request can hold, so it is full attention. It was read as a
    window, and a scenario with prefix caching was refused ('attends within 262144 tokens')."""
    from servesim.simulation import prepare

    phi3 = json.loads(packaged_configs()["microsoft/Phi-3-mini-4k-instruct"].read_text())
    long = {**phi3, "max_position_embeddings": 131072, "sliding_window": 262144,
            "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48}}
    m = load(**long)
    assert m.max_context_tokens == 131072 and m.sliding_window_tokens is None
    assert load(**{**long, "sliding_window": 131072}).sliding_window_tokens is None  # equal: none cut either
    assert load(**{**long, "sliding_window": 131071}).sliding_window_tokens == 131071
    assert load(**phi3).sliding_window_tokens == 2047  # the 4k model's real window is kept
    path = tmp_path / "config.json"
    path.write_text(json.dumps(long))
    assert prepare(scenario_factory(**{"model": str(path), "policy.prefix_caching": True})).pools


def test_windows_on_some_layers_named_by_layer_types_or_a_pattern_are_read_as_full_attention():
    """gpt-oss gives ``layer_types`` (every other layer sliding, 128 tokens), Gemma-3 and Cohere2 a
    ``sliding_window_pattern`` (every 6th / 4th layer global). Read generically, their window
    applied to every layer: Gemma-3-1B held at most 512 tokens of KV per sequence and attended no
    further, though its global layers attend to all 32,768. Like Gemma-2's, such windows are read as
    full attention (more KV, never less)."""
    gemma3 = dict(model_type="gemma3_text", hidden_size=1152, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=256, num_hidden_layers=26, intermediate_size=6912, vocab_size=262144,
                  max_position_embeddings=32768, sliding_window=512, sliding_window_pattern=6,
                  hidden_activation="gelu_pytorch_tanh")
    assert load(**gemma3).sliding_window_tokens is None
    assert load(**gemma3 | {"sliding_window_pattern": 27}).sliding_window_tokens == 512  # no global layer among 26
    oss = dict(model_type="gpt_oss", hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
               num_hidden_layers=24, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4,
               vocab_size=201088, max_position_embeddings=131072, sliding_window=128,
               layer_types=["sliding_attention", "full_attention"] * 12)
    assert load(**oss).sliding_window_tokens is None
    assert load(**{**oss, "layer_types": ["sliding_attention"] * 24}).sliding_window_tokens == 128
    # Qwen3 files written by transformers >= 4.53 list every layer as full_attention
    assert load(model_type="qwen3", hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                num_hidden_layers=2, intermediate_size=3072, sliding_window=None, use_sliding_window=False,
                layer_types=["full_attention"] * 2).sliding_window_tokens is None
    with pytest.raises(InputError, match=r"field 'layer_types' must be a list of strings"):
        load(**{**oss, "layer_types": "sliding_attention"})
    with pytest.raises(InputError, match=r"field 'sliding_window_pattern'"):
        load(**gemma3 | {"sliding_window_pattern": "6"})


def test_a_multimodal_config_names_its_text_config():
    """Gemma-3, Llama-4, Mistral-3 and LLaVA files nest the language model under text_config: the
    error said the file lacks hidden_size, which it has, one level down."""
    text = dict(model_type="gemma3_text", hidden_size=5376, num_attention_heads=32, num_key_value_heads=16,
                head_dim=128, num_hidden_layers=62, intermediate_size=21504, vocab_size=262208)
    with pytest.raises(InputError, match=r"lacks 'hidden_size' / .* \(its text_config has it: a multimodal model, "
                                         r"of which servesim prices the language model alone: give the contents of "
                                         r"text_config as the config file\)"):
        load(model_type="gemma3", text_config=text, vision_config={"hidden_size": 1152})
    assert load(**text).num_layers == 62
    with pytest.raises(InputError, match=r"lacks 'hidden_size' / 'n_embd' / 'n_embed' / 'd_model'$"):
        load(model_type="llama", num_attention_heads=4, num_hidden_layers=2)  # (no nested config: as before)


def test_qwen_window_only_with_use_sliding_window_and_qwen1_mlp():
    base = dict(model_type="qwen2", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                num_hidden_layers=28, intermediate_size=18944, vocab_size=152064, sliding_window=131072,
                max_window_layers=28)
    assert load(**base).sliding_window_tokens is None  # use_sliding_window absent: Qwen2Config drops the window
    assert load(**base, use_sliding_window=True).sliding_window_tokens is None  # only layers >= 28: none
    assert load(**{**base, "max_window_layers": 0, "sliding_window": 4096},
                use_sliding_window=True).sliding_window_tokens == 4096
    # (131,072 is past Qwen2Config's 32,768-position context: no window, as below)
    assert load(**{**base, "max_window_layers": 0}, use_sliding_window=True).sliding_window_tokens is None
    # Qwen-1 (QWenMLP): intermediate_size counts gate and up together
    q1 = load(model_type="qwen", hidden_size=8192, num_attention_heads=64, num_hidden_layers=80,
              intermediate_size=49152, vocab_size=152064, seq_length=32768)
    assert q1.intermediate_size == 24576 and q1.max_context_tokens == 32768
    assert q1.total_params() == get_model("Qwen/Qwen-72B").total_params()


def test_qwen3_moe_head_dim_and_kv_default():
    m = load(model_type="qwen3_moe", hidden_size=2048, num_attention_heads=32, num_hidden_layers=48, head_dim=128,
             intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
             vocab_size=151936, mlp_only_layers=[], decoder_sparse_step=1)
    # head_dim 128, not 2048 / 32; Qwen3MoeConfig's num_key_value_heads default is 4 (no MHA fallback)
    assert (m.head_dim, m.num_kv_heads, m.intermediate_size, m.first_dense_layers) == (128, 4, 768, 0)
    with pytest.raises(InputError, match="decoder_sparse_step"):
        load(model_type="qwen3_moe", hidden_size=64, num_attention_heads=4, num_hidden_layers=4,
             moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=2)


@pytest.mark.parametrize("model_type, dense, expert", [("qwen3_moe", 6144, 768), ("deepseek_v3", 18432, 2048)])
def test_an_absent_moe_intermediate_size_takes_the_class_default(model_type, dense, expert):
    """intermediate_size is these families' dense MLP width: a file without moe_intermediate_size
    has experts of the config class's default width (Qwen3MoeConfig 768, DeepseekV3Config 2048), as
    transformers builds it, not intermediate_size's (8-9x the weights: a 30B model read as 235B)."""
    base = dict(model_type=model_type, hidden_size=2048, num_attention_heads=32, num_hidden_layers=8,
                intermediate_size=dense, vocab_size=151936, head_dim=128)
    assert load(**base).intermediate_size == expert
    assert load(**base, moe_intermediate_size=512).intermediate_size == 512
    # Mixtral has no moe_intermediate_size: each expert is intermediate_size wide
    assert load(model_type="mixtral", hidden_size=4096, num_attention_heads=32, num_hidden_layers=4,
                intermediate_size=14336, vocab_size=32000).intermediate_size == 14336


def test_opt_is_tied_and_reads_ffn_dim():
    """OPT files carry no tie_word_embeddings: PretrainedConfig's default (True) applies, so OPT-13B's
    weights are 23.92 GiB in fp16, not the 24.40 GiB of an untied head."""
    m = get_model("facebook/opt-13b")
    assert m.tied_embeddings and not m.gated_mlp and not m.rotary and m.intermediate_size == 20480
    assert CostModel(m, GPUS["a100-80g"], dtype="fp16").weight_bytes / GIB == pytest.approx(23.92, abs=0.01)
    assert load(model_type="opt", hidden_size=768, num_attention_heads=12, num_hidden_layers=12).intermediate_size \
        == 3072  # OPTConfig's ffn_dim default


@pytest.mark.parametrize("cfg,kv", [
    # in-library falcon-7b: multi_query, no num_kv_heads -> 1
    ({"multi_query": True, "new_decoder_architecture": False}, 1),
    # re-saved by FalconConfig: num_kv_heads 71 written, still multi_query -> 1 (a reader of
    # num_kv_heads alone gets 71)
    ({"multi_query": True, "num_kv_heads": 71}, 1),
    ({}, 1),  # multi_query defaults to True
    ({"multi_query": False}, 71),
    # falcon-40b: new_decoder_architecture -> num_kv_heads
    ({"new_decoder_architecture": True, "num_kv_heads": 8, "num_attention_heads": 128, "hidden_size": 8192}, 8),
])
def test_falcon_kv_heads(cfg, kv):
    base = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
            "vocab_size": 65024}
    m = load(**{**base, **cfg})
    assert m.num_kv_heads == kv and m.tied_embeddings and m.intermediate_size == 4 * m.hidden_size
    assert not m.gated_mlp and m.head_dim == 64


def test_legacy_refinedweb_falcon():
    """RefinedWeb remote-code files: n_head / n_layer / n_head_kv (40B: 8 KV heads without
    new_decoder_architecture), RefinedWebModel (7B): multi_query."""
    m40 = load(model_type="RefinedWeb", hidden_size=8192, n_head=128, n_head_kv=8, n_layer=60, vocab_size=65024)
    assert m40.num_kv_heads == 8 and m40.num_layers == 60
    m7 = load(model_type="RefinedWebModel", hidden_size=4544, n_head=71, n_layer=32, multi_query=True,
              vocab_size=65024)
    assert m7.num_kv_heads == 1
    assert m40.total_params() == get_model("tiiuae/falcon-40b").total_params()


def test_phi_and_phi3():
    phi2 = load(model_type="phi", hidden_size=2560, num_attention_heads=32, num_hidden_layers=32,
                intermediate_size=10240, vocab_size=51200, partial_rotary_factor=0.4)
    assert not phi2.gated_mlp and not phi2.tied_embeddings and phi2.head_dim == 80
    assert phi2.total_params() == get_model("microsoft/phi-2").total_params()
    phi3 = get_model("microsoft/Phi-3-mini-4k-instruct")
    assert phi3.gated_mlp and phi3.sliding_window_tokens == 2047 and phi3.head_dim == 96


def test_gemma_head_dim_and_tie():
    m = load(model_type="gemma", hidden_size=3072, num_attention_heads=16, num_hidden_layers=28,
             intermediate_size=24576, hidden_act="gelu")
    # GemmaConfig: head_dim 256 (not 3072 / 16 = 192), 16 KV heads, tied, 256k vocabulary; GeGLU is gated
    assert (m.head_dim, m.num_kv_heads, m.tied_embeddings, m.vocab_size, m.gated_mlp) == (256, 16, True, 256000, True)
    # Gemma-2 alternates windowed and global layers: read with full attention (more KV, never less)
    assert get_model("google/gemma-2-9b").sliding_window_tokens is None


def test_mixtral_and_deepseek_moe():
    mix = load(model_type="mixtral", hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
               intermediate_size=14336, vocab_size=32000)
    assert (mix.num_experts, mix.experts_per_token, mix.num_kv_heads) == (8, 2, 8)  # MixtralConfig defaults
    assert mix.total_params() == get_model("mistralai/Mixtral-8x7B-v0.1").total_params()
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert (ds.num_experts, ds.experts_per_token, ds.num_shared_experts, ds.first_dense_layers) == (256, 8, 1, 3)
    assert (ds.intermediate_size, ds.dense_intermediate_size) == (2048, 18432)
    # MLA: q/k heads of 128 + 64, values of 128; head_dim is never the config's head_dim (64)
    assert (ds.kv_lora_rank, ds.q_lora_rank, ds.qk_rope_head_dim, ds.head_dim, ds.value_head_dim) == (
        512, 1536, 64, 192, 128)
    assert ds.active_params() / 1e9 == pytest.approx(37.6, rel=0.01)  # 37B activated (DeepSeek-V3 report)


def test_bloom_and_families_by_architecture():
    b = get_model("bigscience/bloom")
    assert (b.num_layers, b.hidden_size, b.num_heads, b.vocab_size, b.intermediate_size) == (70, 14336, 112, 250880,
                                                                                            4 * 14336)
    assert not b.rotary and not b.gated_mlp and b.tied_embeddings  # ALiBi, GELU MLP, tied head
    assert family_of({"architectures": ["OPTForCausalLM"]}) == "opt"
    assert family_of({"architectures": ["Qwen3MoeForCausalLM"]}) == "qwen3_moe"
    assert family_of({"architectures": ["RWForCausalLM"]}) == "refinedweb"
    # an unknown model_type: PretrainedConfig's tie_word_embeddings default (True); none at all:
    # Llama-style, untied
    kw = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128, vocab_size=100)
    assert load(model_type="newfamily", **kw).tied_embeddings and not load(**kw).tied_embeddings


@pytest.mark.parametrize("cfg,msg", [
    ({"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
      "intermediate_size": 128, "moe_layer_freq": 2}, "moe_layer_freq"),
    ({"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
      "num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "mlp_only_layers": [1]},
     "mlp_only_layers"),
    ({"model_type": "qwen", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
      "intermediate_size": 129, "vocab_size": 10}, "must be even"),
    ({"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "multi_query": "yes"}, "'multi_query' must be true or false"),
    ({"model_type": "newfamily", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "intermediate_size": 128}, "lacks 'vocab_size'"),
    # dense leading layers need the dense width (a fuzzed DeepSeek-V3 config without it: KeyError)
    ({"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1},
     "lacks 'intermediate_size': the width of the MLP of its first 1 layers"),
])
def test_unsupported_layouts_and_bad_keys_name_the_key(cfg, msg):
    with pytest.raises(InputError, match=msg):
        load(**cfg)


# ---------------------------------------------------------------- the packaged catalog
# published sizes (parameters): the model cards / papers (Falcon-40B, Gemma-7B, Gemma-2-9B,
# Phi-3-mini: the checkpoints' parameter counts as Hugging Face lists them)
PUBLISHED = {"meta-llama/Llama-3.1-8B": 8.03e9, "meta-llama/Llama-3.1-70B": 70.6e9,
             "meta-llama/Llama-3.1-405B": 405e9, "meta-llama/Llama-3.3-70B-Instruct": 70.6e9,
             "Qwen/Qwen2.5-72B-Instruct": 72.7e9, "Qwen/Qwen3-30B-A3B": 30.5e9, "Qwen/Qwen3-235B-A22B": 235e9,
             "deepseek-ai/DeepSeek-V3": 671e9, "mistralai/Mistral-7B-Instruct-v0.2": 7.24e9,
             "facebook/opt-13b": 13e9, "facebook/opt-66b": 66e9, "facebook/opt-175b": 175e9, "01-ai/Yi-34B": 34.4e9,
             "meta-llama/Llama-2-13b-hf": 13e9, "huggyllama/llama-13b": 13e9, "bigscience/bloom": 176e9,
             "tiiuae/falcon-7b": 7e9, "tiiuae/falcon-40b": 41.8e9, "tiiuae/falcon-180B": 180e9,
             "google/gemma-7b": 8.54e9,
             "google/gemma-2-9b": 9.24e9, "microsoft/Phi-3-mini-4k-instruct": 3.82e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_packaged_model_matches_its_published_size(name):
    m = get_model(name)
    assert m.name == name and name in catalog_names()
    assert m.total_params() == pytest.approx(PUBLISHED[name], rel=0.02)


def test_every_packaged_config_says_where_it_comes_from():
    from importlib import resources

    sources = json.loads((resources.files("servesim.inputs") / "configs" / "sources.json").read_text())
    assert set(packaged_configs()) == set(PUBLISHED) <= set(sources)
    for name in packaged_configs():
        assert sources[name]["source"] and sources[name]["status"] in ("copy", "reconstructed", "synthesized")


def test_unknown_model_suggests_packaged_ones():
    with pytest.raises(InputError, match="did you mean 'facebook/opt-13b'"):
        get_model("facebook/opt-13")


# ---------------------------------------------------------------- latent attention, experts
DS = get_model("deepseek-ai/DeepSeek-V3")
H200 = GPUS["h200"]


def test_mla_kv_cache_is_the_latent_not_split_by_tp():
    assert DS.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2  # 70,272 B: one latent + rotary key per layer
    for tp in (1, 8):
        cm = CostModel(DS, H200, tp=tp, dtype="fp8")
        assert cm.kv_bytes_per_token_per_gpu() == DS.kv_bytes_per_token("bf16")  # every rank keeps all of it


def test_mla_attention_costs():
    """Decode runs multi-query attention over the latent with the absorbed weights: 2 x heads x
    (576 + 512) FLOPs per cached token; prefill runs multi-head attention on up-projected K and V
    (2 x heads x (192 + 128) per query-key pair) and up-projects earlier chunks' latents again."""
    cm = CostModel(DS, H200, tp=8, dtype="fp8")
    heads = 128 / 8
    dec = cm.breakdown(synthetic_batch(decode_contexts=[999]))["attention"]
    assert dec.flops == pytest.approx(8 * 61 * 2 * heads * (576 + 512) * 1000)
    assert dec.bytes == pytest.approx(8 * 61 * (1000 * 576 * 2 + 2 * heads * (576 + 512)))
    first = cm.breakdown(synthetic_batch(prefill=[(512, 0)]))["attention"].flops
    later = cm.breakdown(synthetic_batch(prefill=[(512, 1024)]))["attention"].flops
    pairs = 512 * 1024
    assert later - first == pytest.approx(8 * 61 * (2 * heads * 320 * pairs + 2 * 512 * heads * 256 * 1024))
    # the projections read every MLA weight once: q down/up, latent down (replicated per rank), K/V up
    one = cm.breakdown(synthetic_batch(decode_contexts=[10]))["qkv_proj"]
    proj = 7168 * 1536 + 1536 * heads * 192 + 7168 * 576 + 512 * heads * 256
    assert one.bytes == pytest.approx(8 * 61 * (proj + 2 * (7168 + 1536 + 1536 + heads * 192 + 7168 + 576 + 512
                                                            + heads * 256)), rel=1e-9)


def test_shared_experts_dense_layers_and_expert_parallel():
    tok = 256
    b = synthetic_batch(decode_contexts=[100] * tok)
    tp_ops = CostModel(DS, H200, tp=8, dtype="fp8").breakdown(b)
    ep_ops = CostModel(DS, H200, tp=8, dtype="fp8", expert_parallel=True).breakdown(b)
    hit = DS.expected_experts_hit(tok)
    per_tok = 2 * 7168 * 2 * 2048  # gate + up of one expert-width MLP, per token
    routed = 58 * tok * 8 * per_tok
    shared = 58 * tok * per_tok
    dense = 3 * tok * 2 * 7168 * 2 * 18432
    assert tp_ops["mlp_up"].flops == pytest.approx(routed + shared + dense, rel=1e-9)
    # EP moves work between ranks, not its amount; each rank reads whole experts, E_hit / 8 of them
    assert ep_ops["mlp_up"].flops == pytest.approx(tp_ops["mlp_up"].flops, rel=1e-9)
    expert_bytes = 58 * hit * 2 * 7168 * 2048  # fp8 gate + up weights of the experts hit, all ranks
    # the same weights; fewer activation bytes (a rank reads its tokens once, not once per TP shard)
    assert expert_bytes < ep_ops["mlp_up"].bytes < tp_ops["mlp_up"].bytes < 1.05 * ep_ops["mlp_up"].bytes
    assert tp_error(DS, 8, expert_parallel=True) is None
    six = load(model_type="mixtral", hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2,
               intermediate_size=128, vocab_size=100, num_local_experts=6)
    assert "6 experts" in tp_error(six, 4, expert_parallel=True) and tp_error(six, 4) is None
    with pytest.raises(ValueError, match="dense"):
        CostModel(get_model("meta-llama/Llama-3.1-8B"), H200, tp=2, expert_parallel=True)


def test_expert_parallel_scenario_field(tmp_path, capsys):
    from servesim.cli.main import main

    p = tmp_path / "s.yaml"
    base = ("hardware: {gpu: h200, tp: 8, dtype: fp8, expert_parallel: true}\n"
            "workload: {num_requests: 5, preset: azure_conv}\n")
    p.write_text("model: deepseek-ai/DeepSeek-V3\n" + base)
    assert main(["validate", str(p)]) == 0
    capsys.readouterr()
    p.write_text("model: meta-llama/Llama-3.1-70B\n" + base)
    assert main(["validate", str(p)]) == 2
    assert "hardware.expert_parallel" in capsys.readouterr().err


# the hand-typed catalog entries (sim/inputs/specs.py MODELS) against their model cards' parameter
# counts, as Hugging Face lists them (Llama 2 paper: 7B = 6.74B, 70B = 69.0B; Qwen-72B's card 72.3B)
PUBLISHED_TYPED = {"meta-llama/Llama-2-7b-hf": 6.74e9, "meta-llama/Llama-2-70b-hf": 69.0e9,
                   "meta-llama/Meta-Llama-3-8B": 8.03e9, "meta-llama/Meta-Llama-3-70B": 70.6e9,
                   "mistralai/Mistral-7B-v0.1": 7.24e9, "codellama/CodeLlama-34b-Instruct-hf": 33.7e9,
                   "internlm/internlm-20b": 20e9, "Qwen/Qwen-72B": 72.3e9, "microsoft/phi-2": 2.78e9,
                   "Qwen/Qwen2.5-7B-Instruct": 7.62e9, "meta-llama/Llama-3.2-1B": 1.24e9,
                   "mistralai/Mixtral-8x7B-v0.1": 46.7e9}


def test_every_typed_catalog_model_matches_its_published_size():
    from servesim.inputs.specs import MODELS

    assert set(MODELS) == set(PUBLISHED_TYPED)  # a new entry needs its published size here
    for name, n in PUBLISHED_TYPED.items():
        assert MODELS[name].total_params() == pytest.approx(n, rel=0.02), name


def test_same_architecture_variants_are_priced_as_their_catalog_entry(tmp_path, capsys):
    """A chat / instruct variant (or a renamed repository) of a catalog model resolves to that
    entry; an alias is never a catalog name itself, and validate says what priced the run."""
    from servesim.cli.main import main
    from servesim.inputs.specs import MODEL_ALIASES

    names = set(catalog_names())
    for alias, entry in MODEL_ALIASES.items():
        assert entry in names and alias not in names, alias
        assert get_model(alias) == get_model(entry)
    p = tmp_path / "s.yaml"
    p.write_text("model: codellama/CodeLlama-34b-hf\nhardware: {gpu: h100-sxm, tp: 2}\n"
                 "workload: {num_requests: 5, preset: azure_conv}\n")
    assert main(["validate", str(p)]) == 0
    assert "codellama/CodeLlama-34b-hf (priced as codellama/CodeLlama-34b-Instruct-hf" in capsys.readouterr().out
    # an unknown variant is still an error naming the field, with the closest catalog id
    with pytest.raises(InputError, match="did you mean 'meta-llama/Llama-2-7b-hf'"):
        get_model("meta-llama/Llama-2-7b-hff")


@pytest.mark.parametrize("typed, meant", [
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf"),  # no organisation, no -hf, another case
    ("Llama-2-7B", "meta-llama/Llama-2-7b-hf"),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    ("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
    ("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct"),
    ("falcon7b", "tiiuae/falcon-7b"),
])
def test_an_unknown_model_suggests_the_catalog_id_people_mean(typed, meant):
    with pytest.raises(InputError, match=f"did you mean '{meant}'"):
        get_model(typed)


def test_an_unknown_model_far_from_any_gets_the_list_alone():
    with pytest.raises(InputError) as e:
        get_model("gpt-4")
    assert "did you mean" not in str(e.value) and "valid: 01-ai/Yi-34B" in str(e.value)


def test_qwen3_dense_head_dim_and_kv_default():
    """Qwen3Config's head_dim default is 128 and num_key_value_heads 32, not hidden / heads and MHA:
    Qwen3-0.6B's shape (hidden 1024, 16 heads, 8 KV heads) without its head_dim key has heads of 128."""
    base = dict(model_type="qwen3", hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                num_hidden_layers=28, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True)
    m = load(**base)
    assert (m.head_dim, m.q_dim, m.kv_dim) == (128, 2048, 1024)
    assert abs(m.total_params() - 0.596e9) / 0.596e9 < 0.01  # the model card's 0.6B (0.44B non-embedding)
    assert load(**base, head_dim=64).head_dim == 64
    no_kv = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    assert load(**{**no_kv, "num_attention_heads": 32}).num_kv_heads == 32


@pytest.mark.parametrize("keys", [{"num_hidden_layers": 32, "n_layer": 24}, {"hidden_size": 4096, "n_embd": 2048},
                                  {"num_key_value_heads": 8, "num_kv_heads": 4},
                                  {"intermediate_size": 11008, "ffn_dim": 8192}])
def test_contradicting_aliases_are_an_error(keys):
    """Two names of one concept with different values: which one the model uses depends on the
    family (BloomConfig takes n_embed over hidden_size), so the loader names both, never picks one."""
    cfg = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
               intermediate_size=11008, vocab_size=32000)
    cfg.update(keys)
    a, b = keys
    with pytest.raises(InputError, match=f"test config.json: .*{a!r}.*{b!r}"):
        load(**cfg)
    same = {**cfg, b: cfg[a]}  # the same value under both names is no contradiction
    load(**same)


def test_phi_msft_legacy_format_is_untied():
    """microsoft/phi-2 and phi-1_5 shipped first as remote code (model_type "phi-msft", GPT-2 key
    names): its PhiConfig leaves the LM head untied (CausalLMHead has its own linear) and n_inner
    null or absent means 4 x n_embd. Read as an unknown family it was tied: 2.65B, not phi-2's 2.78B."""
    old = dict(model_type="phi-msft", architectures=["PhiForCausalLM"], n_embd=2560, n_layer=32, n_head=32,
               n_inner=None, n_positions=2048, rotary_dim=32, vocab_size=51200, activation_function="gelu_new")
    m = load(**old)
    assert not m.tied_embeddings and not m.gated_mlp and m.intermediate_size == 10240
    assert m.total_params() == get_model("microsoft/phi-2").total_params()
    del old["n_inner"]
    assert load(**old).intermediate_size == 10240


def test_rope_scaling_extends_the_context_as_vllm_does():
    """vLLM's max model length (ModelConfig): a rope_scaling other than llama3 / longrope / su multiplies
    the context by its factor, yarn starting from original_max_position_embeddings. Qwen2.5's model card
    adds yarn x4 over 32,768 positions for 128K; that file was still read as 32,768."""
    base = dict(model_type="qwen2", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                num_hidden_layers=28, intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768)
    yarn = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
    assert load(**base, rope_scaling=yarn).max_context_tokens == 131072
    assert load(**base, rope_scaling={"rope_type": "linear", "factor": 2.0}).max_context_tokens == 65536
    assert load(**base, rope_scaling={"rope_type": "dynamic", "factor": 2}).max_context_tokens == 65536
    for kept in ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
                 {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, {"rope_type": "default"}, None):
        assert load(**base, rope_scaling=kept).max_context_tokens == 32768
    assert get_model("deepseek-ai/DeepSeek-V3").max_context_tokens == 163840  # yarn 40 x 4096
    assert get_model("meta-llama/Llama-3.1-8B").max_context_tokens == 131072  # llama3: as the file says
    for bad, key in (({"type": "yarn", "factor": 4.0}, "original_max_position_embeddings"),
                     ({"type": "linear", "factor": "4"}, "factor"), ({"factor": 2.0}, "rope_type"),
                     ("yarn", "must be a mapping")):
        with pytest.raises(InputError, match=f"test config.json: field 'rope_scaling.*{key}"):
            load(**base, rope_scaling=bad)


def test_opt_projected_embeddings_are_refused():
    """OPT-350m embeds in 512 dimensions and projects to its 1024-wide layers (word_embed_proj_dim):
    a shape ModelSpec has no field for. Read as 1024-wide embeddings it came out 354M, not 331M; the
    key is named instead. A file whose word_embed_proj_dim equals hidden_size (every other OPT) loads."""
    base = dict(model_type="opt", hidden_size=1024, ffn_dim=4096, num_hidden_layers=24, num_attention_heads=16,
                max_position_embeddings=2048, vocab_size=50272)
    with pytest.raises(InputError, match="test config.json: field 'word_embed_proj_dim'.*512.*1024"):
        load(**base, word_embed_proj_dim=512)
    assert load(**base, word_embed_proj_dim=1024).hidden_size == 1024
    assert get_model("facebook/opt-13b").hidden_size == 5120


@pytest.mark.parametrize("model, gpu, tp, dtype", [("deepseek-ai/DeepSeek-V3", "h200", 8, "fp8"),
                                                   ("meta-llama/Meta-Llama-3-8B", "h100-sxm", 16, "bf16")])
def test_host_swap_blocks_are_per_gpu_blocks(model, gpu, tp, dtype):
    """vLLM gives each GPU swap_space of host memory and counts CPU blocks in that GPU's own KV
    block size. An MLA latent is kept whole on every TP rank (and 8 KV heads on 16 ranks one head
    each): the replica-wide KV of a token undercounts what the ranks hold and swap, so DeepSeek-V3
    on 8 GPUs got 8x the host blocks, each swapped 8x faster than PCIe carries it."""
    from tests.conftest import make_scenario

    from servesim.simulation import prepare

    setup = prepare(make_scenario(**{"model": model, "hardware.gpu": gpu, "hardware.tp": tp, "hardware.dtype": dtype,
                                     "memory.swap_space_gib": 4.0}))
    pool = setup.pools[0]
    host_blocks, block_bytes, bw = pool.swap
    per_gpu_block = pool.cost_model.kv_bytes_per_token_per_gpu() * 16
    assert host_blocks == int(4 * GIB // per_gpu_block)
    assert block_bytes / bw == pytest.approx(per_gpu_block / GPUS[gpu].pcie_bw_bytes_per_s)  # one block's swap


def test_qwen2_moe_class_defaults():
    """Qwen2MoeConfig's defaults (Qwen1.5-MoE-A2.7B's shape): 60 experts of 1408, top-4, one shared MLP of
    5632 (4 experts' width), 16 KV heads. A file leaving them out was read as a dense model."""
    m = load(model_type="qwen2_moe", hidden_size=2048, num_attention_heads=16, num_hidden_layers=24,
             intermediate_size=5632, vocab_size=151936)
    assert (m.num_experts, m.experts_per_token, m.intermediate_size, m.num_shared_experts, m.num_kv_heads) == (
        60, 4, 1408, 4, 16)
    assert abs(m.total_params() - 14.3e9) / 14.3e9 < 0.01 and abs(m.active_params() - 2.7e9) / 2.7e9 < 0.01
    assert load(model_type="qwen2_moe", hidden_size=2048, num_attention_heads=16, num_hidden_layers=24,
                intermediate_size=5632, shared_expert_intermediate_size=0).num_shared_experts == 0
    with pytest.raises(InputError, match="'shared_expert_intermediate_size': 5632 .the config class's default"):
        load(model_type="qwen2_moe", hidden_size=2048, num_attention_heads=16, num_hidden_layers=24,
             moe_intermediate_size=1024)


NEOX = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 512,
        "intermediate_size": 2048, "max_position_embeddings": 2048, "num_attention_heads": 8,
        "num_hidden_layers": 4, "rotary_pct": 0.25, "tie_word_embeddings": False, "vocab_size": 50432}


@pytest.mark.parametrize("cfg, note", [
    (NEOX, ["'gpt_neox' is no family servesim knows", "an ungated MLP (one up projection, from the activation "
            "'gelu')", "rotary positions", "as many KV heads as attention heads"]),
    ({**NEOX, "hidden_act": "silu", "num_key_value_heads": 8, "tie_word_embeddings": None},
     ["a gated MLP (gate + up, from the activation 'silu')", "tied to the embeddings"]),
    ({**NEOX, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}, None),  # a family servesim knows
    ({k: v for k, v in NEOX.items() if k not in ("model_type", "architectures")}, None),  # no model_type: Llama-style
])
def test_a_config_of_an_unknown_family_says_what_was_guessed(tmp_path, capsys, cfg, note):
    """A config.json whose model_type servesim does not know (gpt_neox) was read generically, its
    MLP's gating guessed from the activation, with no word of it. run and validate say so in one
    note line naming the guesses and how to state them; the model read is the same."""
    from servesim.cli.main import main

    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = tmp_path / "s.yaml"
    p.write_text(f"model: {tmp_path / 'config.json'}\nhardware: {{gpu: h100-sxm}}\n"
                 "workload: {num_requests: 4, arrival: {process: poisson, rate_rps: 2}, "
                 "prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 4}}\n")
    before = model_from_hf_config(cfg, "c", "c")
    assert main(["validate", str(p)]) == 0
    out, err = capsys.readouterr()
    said = [line for line in out.splitlines() if line.startswith("  note: model:")]
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    ran, err2 = capsys.readouterr()
    said_run = [line for line in ran.splitlines() if line.startswith("warning       model:")]
    # (summary.json's warnings too, which a report of the folder and every study's runs read)
    kept = [w["message"] for w in json.loads((tmp_path / "o" / "summary.json").read_text())["warnings"]
            if w["code"] == "model_generic"]
    assert kept == [line.removeprefix("warning       ") for line in said_run]
    assert "Traceback" not in err + err2
    assert model_from_hf_config(cfg, "c", "c") == before
    if note is None:
        assert said == [] and said_run == [], out
        return
    assert len(said) == 1 and len(said_run) == 1, out
    for part in note:
        assert part in said[0] and part in said_run[0], said[0]
    assert "num_key_value_heads" in said[0] and "set model_type to a known family" in said[0]


def test_windows_on_some_layers_are_said_in_run_and_validate(tmp_path, capsys):
    """Gemma-2-9B's window covers every other layer, but run and validate did not say how servesim
    reads it. One line now says how many layers use which window and what is still overstated
    (every layer's KV kept for the whole sequence)."""
    from servesim.cli.main import main
    from servesim.inputs.specs import model_note

    note = model_note("google/gemma-2-9b")
    assert note.startswith("model: google/gemma-2-9b: 21 of its 42 layers attend within a 4,096-token window "
                           "(Gemma-2: every other layer)") and "overstated, never understated" in note
    for full in ("meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1", "microsoft/Phi-3-mini-4k-instruct"):
        assert model_note(full) is None  # no window, or one on every layer (modelled)
    oss = dict(model_type="mistral", hidden_size=256, num_attention_heads=4, num_key_value_heads=4,
               num_hidden_layers=4, intermediate_size=512, vocab_size=1000, max_position_embeddings=8192,
               sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2)
    (tmp_path / "config.json").write_text(json.dumps(oss))
    p = tmp_path / "s.yaml"
    p.write_text(f"model: {tmp_path / 'config.json'}\nhardware: {{gpu: h100-sxm}}\n"
                 "workload: {num_requests: 4, arrival: {process: poisson, rate_rps: 2}, "
                 "prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 4}}\n")
    assert main(["validate", str(p)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note: model:")]
    assert len(said) == 1 and "2 of its 4 layers attend within a 128-token window (its layer_types)" in said[0]
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    # (the run says it among its warnings, and keeps it in summary.json as model_generic)
    said = [line for line in capsys.readouterr().out.splitlines() if "model: " in line and "2 of its 4 layers" in line]
    assert len(said) == 1
    kept = [w["message"] for w in json.loads((tmp_path / "o" / "summary.json").read_text())["warnings"]
            if w["code"] == "model_generic"]
    assert kept == [model_note(str(tmp_path / "config.json"), dtype="bf16")]


def test_a_checkpoint_published_quantized_is_said_when_priced_in_another_dtype(tmp_path, capsys):
    """DeepSeek-V3's config.json says its weights are FP8 (quantization_config), which vLLM loads
    as they are; servesim priced bf16 weights (twice the bytes) by default without a word. cost,
    validate and run now say so and name the flag or field that prices the checkpoint."""
    from servesim.cli.main import main

    args = ["cost", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--tp", "8", "--decode-batch", "1"]
    assert main(args) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "published weights" in line]
    assert notes == ["note: --model: deepseek-ai/DeepSeek-V3: its published weights are fp8 (quantization_config: "
                     "quant_method 'fp8'), as vLLM loads them; priced with bf16 weights here (--dtype bf16): set "
                     "--dtype fp8 to price the checkpoint as published"]
    assert main(args + ["--dtype", "fp8"]) == 0
    assert "published weights" not in capsys.readouterr().out
    awq = dict(model_type="llama", hidden_size=256, num_attention_heads=4, num_hidden_layers=2, intermediate_size=512,
               vocab_size=1000, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    (tmp_path / "config.json").write_text(json.dumps(awq))
    p = tmp_path / "s.yaml"
    p.write_text(f"model: {tmp_path / 'config.json'}\nhardware: {{gpu: h100-sxm}}\n"
                 "workload: {num_requests: 4, arrival: {process: poisson, rate_rps: 2}, "
                 "prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 4}}\n")
    assert main(["validate", str(p)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note: model:")]
    assert len(said) == 1 and "published weights are int4 (quantization_config: quant_method 'awq')" in said[0]
    assert "set hardware.dtype int4" in said[0]
    p.write_text(p.read_text().replace("gpu: h100-sxm", "gpu: h100-sxm, dtype: int4"))
    assert main(["validate", str(p)]) == 0
    assert "note: model:" not in capsys.readouterr().out
    for other in ({"quant_method": "awq", "bits": 8}, {"quant_method": "bitsandbytes"}, "fp8"):
        (tmp_path / "config.json").write_text(json.dumps({**awq, "quantization_config": other}))
        assert main(["validate", str(p)]) == 0 and "published weights" not in capsys.readouterr().out


def test_a_bf16_checkpoint_that_does_not_fit_names_its_published_fp8(tmp_path, capsys):
    """DeepSeek-V3 priced in bf16 on 8 GPUs gave the does-not-fit error alone, though its checkpoint
    is FP8 (the note run and validate print when it fits): the error names it, and whether the
    FP8 weights fit (on 8 H200s they do, on 8 H100s not either)."""
    from servesim.cli.main import main

    p = tmp_path / "s.yaml"
    p.write_text("model: deepseek-ai/DeepSeek-V3\nhardware: {gpu: h200, tp: 8}\n"
                 "workload: {num_requests: 4, arrival: {process: poisson, rate_rps: 2}, "
                 "prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 4}}\n")
    for cmd in ("validate", "run"):
        assert main([cmd, str(p), "--out", str(tmp_path / "o")] if cmd == "run" else [cmd, str(p)]) == 2
        err = capsys.readouterr().err
        assert "does not fit on h200 with tp=8" in err and "Traceback" not in err
        assert "its published weights are fp8" in err and "set hardware.dtype fp8" in err
        assert "with which it fits" in err
    assert main(["validate", str(p), "--set", "hardware.gpu=h100-sxm"]) == 2
    assert "does not fit either" in capsys.readouterr().err
    assert main(["validate", str(p), "--set", "hardware.dtype=fp8"]) == 0  # (as the note says)
    capsys.readouterr()
    # a model published in the dtype priced: the error as it was
    assert main(["validate", str(p), "--set", "model=meta-llama/Llama-3.1-405B", "--set", "hardware.tp=1"]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "Note:" not in err


def test_plan_says_how_the_model_was_read(tmp_path, capsys):
    """plan priced DeepSeek-V3 in bf16 (twice the weights vLLM loads from its FP8 checkpoint) and
    pruned every shape for memory without a word of it: it prints the model's note, as run and
    validate do."""
    from servesim.cli.main import main

    p = tmp_path / "s.yaml"
    p.write_text("model: deepseek-ai/DeepSeek-V3\nhardware: {gpu: h100-sxm}\n"
                 "workload: {num_requests: 4, arrival: {process: poisson, rate_rps: 2}, "
                 "prompt_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 4}}\n")
    args = ["plan", str(p), "--rate", "1", "--slo", "ttft_p99=5", "--tp", "8", "--policies", "continuous",
            "--seeds", "1", "--out", str(tmp_path / "plan"), "--quiet", "--no-report"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 shapes" not in out and "pruned-memory" in out
    notes = [line for line in out.splitlines() if line.startswith("  note: model:")]
    assert len(notes) == 1 and "published weights are fp8" in notes[0] and "set hardware.dtype fp8" in notes[0]
    assert main(args + ["--set", "hardware.dtype=fp8"]) == 0  # (as published: no note; 8 H100s hold it not either)
    assert "note: model:" not in capsys.readouterr().out


@pytest.mark.parametrize("types", [[], ["sliding_attention"] * 3, ["sliding_attention"] * 25,
                                   ["sliding_attention", "full_attention"] * 3, ["full_attention"] * 23])
def test_a_layer_types_list_of_other_length_than_the_layers_is_refused(types):
    """A ``layer_types`` of every layer sliding but of another length than num_hidden_layers ([],
    one cut short) was read as a window on every layer (KV held to the window, in silence); one
    with a full-attention entry was refused, naming the counts, only when the window was read."""
    oss = dict(model_type="gpt_oss", hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
               num_hidden_layers=24, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4,
               vocab_size=201088, max_position_embeddings=131072, sliding_window=128, layer_types=types)
    with pytest.raises(InputError, match=rf"field 'layer_types': {len(types)} entries for 24 layers; give one per "
                                         "layer"):
        load(**oss)
    with pytest.raises(InputError, match=rf"field 'layer_types': {len(types)} entries for 24 layers"):
        load(**{**oss, "sliding_window": None})  # (no window given: still a file that contradicts itself)
