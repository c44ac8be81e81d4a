"""A Hugging Face ``config.json`` as a ``ModelSpec``: what transformers would build from it.

A key the file leaves out takes the default of the model's configuration class in transformers
(4.57; ``configuration_<family>.py``), not a guess: OPT and Falcon tie the LM head to the
embeddings (``PretrainedConfig``'s ``tie_word_embeddings=True``), Mistral's window is 4096 tokens
unless the file says ``null``, Gemma's head is 256 wide and Qwen3's 128, Mistral and Mixtral default
to 8 KV heads, Qwen3-MoE to 4. The same concept goes by other names across families (``n_layer``, ``n_embd``,
``n_head_kv``, ``ffn_dim``, ...): ``_ALIASES``. Where a family's semantics differ from the plain
reading they are spelled out in ``_kv_heads``, ``_mlp``, ``_window`` and ``_moe`` (Falcon's
``multi_query``, Qwen2's ``use_sliding_window``, Qwen-1's doubled ``intermediate_size``, DeepSeek's
latent attention and leading dense layers). A file without ``model_type`` (nor a known
``architectures`` entry) is read Llama-style, untied unless it says otherwise. A ``model_type`` of
no family here is read generically (``PretrainedConfig``'s defaults, the MLP's gating from the
activation), and ``generic_reading_note`` names what was guessed, for run and validate to say.

Every value read is checked with ``check_value`` (``sim/inputs/schema.py``): an error names the
file and the key. Researched values and sources: /work/notes/model_configs.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servesim.errors import InputError, shown
from servesim.inputs.schema import bounds, check_value, read_mapping

_INT32 = 2**31 - 1  # sizes beyond int32 are not a real model (and overflow the arithmetic)
_SIZE = bounds(gt=0, le=_INT32, valid=f"a positive integer (at most {_INT32})")
_COUNT = bounds(ge=0, le=_INT32, valid="a non-negative integer")

# One concept, its key in each family (the first present wins).
_ALIASES = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "mlp": ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k", "num_experts_per_token"),
    # vLLM takes the smallest of these the file has (ModelConfig's max model length)
    "context": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len"),
}

# Per family (model_type), the defaults of its transformers config class for the keys servesim
# reads: tie (tie_word_embeddings), gated (gate + up MLP: SwiGLU / GeGLU), rotary (False: learned
# positions or ALiBi), context (max_position_embeddings), kv (num_key_value_heads; None: = heads),
# head_dim, vocab, window (sliding_window when absent), experts / top_k / moe_mlp, and MLA shapes.
_LLAMA = {"tie": False, "gated": True, "context": 2048, "vocab": 32000}
_FAMILIES = {
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "context": 131072, "kv": 8, "window": 4096},
    "mixtral": {**_LLAMA, "context": 131072, "kv": 8, "experts": 8, "top_k": 2},
    "qwen2": {**_LLAMA, "context": 32768, "kv": 32, "vocab": 151936},
    "qwen3": {**_LLAMA, "context": 32768, "kv": 32, "head_dim": 128, "vocab": 151936},
    "qwen2_moe": {**_LLAMA, "context": 32768, "kv": 16, "vocab": 151936, "experts": 60, "top_k": 4, "moe_mlp": 1408,
                  "shared_mlp": 5632},
    "qwen3_moe": {**_LLAMA, "context": 32768, "kv": 4, "vocab": 151936, "experts": 128, "top_k": 8, "moe_mlp": 768},
    "gemma": {"tie": True, "gated": True, "context": 8192, "kv": 16, "head_dim": 256, "vocab": 256000},
    "gemma2": {"tie": True, "gated": True, "context": 8192, "kv": 4, "head_dim": 256, "vocab": 256000},
    "phi": {"tie": False, "gated": False, "context": 2048, "vocab": 51200},
    # phi-2 / phi-1_5's first, remote-code format (GPT-2 key names): its own PhiConfig, LM head untied
    "phi-msft": {"tie": False, "gated": False, "context": 2048, "vocab": 50304},
    "phi3": {**_LLAMA, "context": 4096, "vocab": 32064},
    "opt": {"tie": True, "gated": False, "rotary": False, "context": 2048, "vocab": 50272, "mlp": 3072},
    "falcon": {"tie": True, "gated": False, "context": 2048, "vocab": 65024},
    "bloom": {"tie": True, "gated": False, "rotary": False, "context": 2048, "vocab": 250880},
    "gpt2": {"tie": True, "gated": False, "rotary": False, "context": 1024, "vocab": 50257},
    "gpt_bigcode": {"tie": True, "gated": False, "rotary": False, "context": 1024, "vocab": 50257},
    "deepseek_v2": {**_LLAMA, "context": 2048},
    "deepseek_v3": {**_LLAMA, "context": 4096, "vocab": 129280, "experts": 256, "top_k": 8, "moe_mlp": 2048,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                    "v_head_dim": 128, "n_shared_experts": 1, "first_k_dense_replace": 3},
    # Llama-like remote-code families: their config classes leave the LM head untied
    "internlm": _LLAMA, "internlm2": _LLAMA, "yi": _LLAMA, "baichuan": _LLAMA, "qwen": _LLAMA,
}
_FAMILIES["refinedweb"] = _FAMILIES["refinedwebmodel"] = _FAMILIES["falcon"]  # Falcon's legacy formats
# no model_type: read Llama-style (servesim's reading before families were told apart)
_NO_TYPE = {"tie": False, "context": 4096}
# architectures[0] -> model_type, for files without model_type
_ARCHS = {"opt": "opt", "falcon": "falcon", "rw": "refinedweb", "bloom": "bloom", "llama": "llama",
          "mistral": "mistral", "mixtral": "mixtral", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
          "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma": "gemma", "phi3": "phi3", "phi": "phi",
          "deepseekv3": "deepseek_v3", "deepseekv2": "deepseek_v2", "gpt2": "gpt2", "gptbigcode": "gpt_bigcode"}


def family_of(cfg: dict) -> str | None:
    """The config's ``model_type`` (lower case), or one read off ``architectures[0]``, or None."""
    t = cfg.get("model_type")
    if isinstance(t, str) and t:
        return t.lower()
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        a = archs[0].lower()
        for prefix in sorted(_ARCHS, key=len, reverse=True):
            if a.startswith(prefix):
                return _ARCHS[prefix]
    return None


class _Reader:
    """Typed reads of one config mapping, errors naming the file and key."""

    def __init__(self, cfg: dict, where: str):
        self.cfg, self.where = cfg, where

    def key(self, k: str) -> str:
        return f"{self.where}: field {k!r}"

    def int(self, k: str, meta=_SIZE):
        if k not in self.cfg:  # (callers check first; a missing key is still an input error, never a KeyError)
            raise InputError(f"{self.where} lacks {k!r}")
        return check_value(int, self.cfg[k], self.key(k), meta)

    def opt_int(self, k: str, default, meta=_SIZE):
        """A positive integer when present; absent or null: ``default``."""
        return default if self.cfg.get(k) is None else self.int(k, meta)

    def bool(self, k: str, default: bool) -> bool:
        v = check_value(Optional[bool], self.cfg.get(k), self.key(k))
        return default if v is None else v

    def first(self, concept: str):
        """(key, value) of the first of the concept's keys present (null included), or (None, None).
        Two of them with different values are an error: which one the model uses differs by family
        (BloomConfig takes ``n_embed`` over ``hidden_size``), so neither is picked silently."""
        given = [k for k in _ALIASES[concept] if self.cfg.get(k) is not None]
        for k in given[1:]:
            if self.cfg[k] != self.cfg[given[0]]:
                raise InputError(f"{self.where}: {given[0]!r} ({shown(self.cfg[given[0]])}) and {k!r} "
                                 f"({shown(self.cfg[k])}) name the same thing with different values; keep one")
        for k in _ALIASES[concept]:
            if k in self.cfg:
                return k, self.cfg[k]
        return None, None

    def need(self, concept: str) -> int:
        k, v = self.first(concept)
        if k is None:
            nested = next((n for n in ("text_config", "llm_config", "language_config")
                           if isinstance(self.cfg.get(n), dict) and any(a in self.cfg[n] for a in _ALIASES[concept])),
                          None)
            hint = (f" (its {nested} has it: a multimodal model, of which servesim prices the language model "
                    f"alone: give the contents of {nested} as the config file)" if nested else "")
            raise InputError(f"{self.where} lacks {' / '.join(map(repr, _ALIASES[concept]))}{hint}")
        return self.int(k)


def model_from_hf_config(cfg: dict, where: str, name: str):
    """The ``ModelSpec`` transformers would build from the config mapping ``cfg`` (``where`` leads
    the errors, ``name`` when the file has no ``_name_or_path``)."""
    from servesim.inputs.specs import ModelSpec

    r = _Reader(cfg, where)
    # (model_type first: one that is no string would be ignored, and the file read Llama-style, silently)
    for k in ("model_type", "hidden_act", "activation_function", "hidden_activation", "activation", "_name_or_path"):
        check_value(Optional[str], cfg.get(k), r.key(k))
    fam_name = family_of(cfg)
    fam = _FAMILIES.get(fam_name, {"tie": True}) if fam_name else _NO_TYPE  # unknown: PretrainedConfig's
    hidden, heads, layers = r.need("hidden"), r.need("heads"), r.need("layers")
    mla = _mla(r, fam)
    kv_heads = heads if mla else _kv_heads(r, fam, fam_name, heads)
    if heads % kv_heads:
        raise InputError(f"{where}: num_attention_heads ({heads}) must be a multiple of num_key_value_heads "
                         f"({kv_heads})")
    if mla:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        head_dim = r.opt_int("head_dim", fam.get("head_dim") or hidden // heads)
        if head_dim < 1:
            raise InputError(f"{where}: hidden_size ({hidden}) is smaller than num_attention_heads ({heads}); "
                             "give head_dim")
    proj = cfg.get("word_embed_proj_dim")
    if fam_name == "opt" and proj is not None and r.int("word_embed_proj_dim") != hidden:
        raise InputError(f"{r.key('word_embed_proj_dim')}: embeddings of {proj} projected to the {hidden}-wide "
                         "layers (OPT-350m) are not modelled; only word_embed_proj_dim = hidden_size is")
    experts, top_k, moe = _moe(r, fam, fam_name, layers)
    inter = moe["expert"] if experts else _mlp(r, fam, fam_name, hidden)
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or cfg.get("activation_function")
              or cfg.get("activation") or "silu")
    gated = fam.get("gated", act in ("silu", "swiglu", "swish"))
    alibi = r.bool("alibi", False) or cfg.get("position_embedding_type") == "alibi"
    contexts = [r.int(k) for k in _ALIASES["context"] if cfg.get(k) is not None]
    for k in _ALIASES["context"]:
        if cfg.get(k) is not None and r.int(k) < 2:  # (a request is at least a prompt token and an output token)
            raise InputError(f"{r.key(k)} must be >= 2 (a prompt token and an output token), got {r.int(k)}")
    if "vocab_size" not in cfg and "vocab" not in fam:
        raise InputError(f"{where} lacks 'vocab_size'")
    context = _rope_scaled(r, min(contexts) if contexts else fam.get("context", 2048))
    window = _window(r, fam, fam_name, layers)
    if window is not None and window >= context:
        window = None  # a window no request can fill cuts nothing (Phi-3-mini-128k: 262,144 of 131,072)
    partial = _partial_window(r, fam_name, layers) if window is None else None
    if partial is not None and partial[0] >= context:
        partial = None
    return ModelSpec(
        name=cfg.get("_name_or_path") or name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=r.int("vocab_size") if "vocab_size" in cfg else fam["vocab"],
        gated_mlp=gated,
        tied_embeddings=r.bool("tie_word_embeddings", fam["tie"]),
        max_context_tokens=context,
        num_experts=experts,
        experts_per_token=top_k if experts else 0,
        sliding_window_tokens=window,
        partial_window_tokens=partial[0] if partial else None,
        partial_window_layers=len(partial[1]) if partial else 0,
        partial_window_at=partial[1] if partial else (),
        rotary=fam.get("rotary", True) and not alibi,
        num_shared_experts=moe.get("shared", 0),
        first_dense_layers=moe.get("dense_layers", 0),
        dense_intermediate_size=moe.get("dense", 0),
        kv_lora_rank=mla.get("kv_lora_rank", 0),
        q_lora_rank=mla.get("q_lora_rank", 0),
        qk_rope_head_dim=mla.get("qk_rope_head_dim", 0),
        v_head_dim=mla.get("v_head_dim", 0),
    )


def _rope_scaled(r: _Reader, context: int) -> int:
    """The context as vLLM derives its max model length from it (ModelConfig): a ``rope_scaling``
    other than llama3 / longrope / su (whose files already give the extended length) multiplies it by
    its ``factor``, yarn starting from its ``original_max_position_embeddings`` (Qwen2.5's 128K)."""
    rs = r.cfg.get("rope_scaling")
    if rs is None:
        return context
    key = r.key("rope_scaling")
    if not isinstance(rs, dict):
        raise InputError(f"{key} must be a mapping (rope_type, factor, ...) or null, got {shown(rs)}")
    kind = rs.get("rope_type", rs.get("type"))
    if not isinstance(kind, str):
        raise InputError(f"{key} needs 'rope_type' (or 'type'): linear, dynamic, yarn, llama3, longrope, ...; "
                         f"got {shown(kind)}")
    if kind in ("su", "longrope", "llama3"):
        return context
    factor = rs.get("factor")
    factor = 1.0 if factor is None else check_value(float, factor, r.key("rope_scaling.factor"), bounds(gt=0, le=1e6))
    if kind == "yarn":
        if "original_max_position_embeddings" not in rs:
            raise InputError(f"{key}: a yarn scaling needs 'original_max_position_embeddings'")
        context = check_value(int, rs["original_max_position_embeddings"],
                              r.key("rope_scaling.original_max_position_embeddings"), _SIZE)
    scaled = int(context * factor)
    if not 2 <= scaled <= _INT32:
        raise InputError(f"{key}: {context} positions x factor {factor:g} = {scaled}, outside 2 .. {_INT32}")
    return scaled


def _kv_heads(r: _Reader, fam: dict, fam_name: str | None, heads: int) -> int:
    """KV heads as the model's attention uses them."""
    cfg = r.cfg
    if fam_name in ("falcon", "refinedweb", "refinedwebmodel"):
        # modeling_falcon: num_kv_heads if new_decoder_architecture or not multi_query, else 1;
        # legacy RefinedWeb (40B) files give n_head_kv without new_decoder_architecture (vLLM's RWConfig)
        new = r.bool("new_decoder_architecture", False) or cfg.get("n_head_kv") is not None
        if not new and r.bool("multi_query", True):
            return 1
        for k in ("num_kv_heads", "n_head_kv"):
            if cfg.get(k) is not None:
                return r.int(k)
        return heads
    if fam_name == "gpt_bigcode":
        return 1 if r.bool("multi_query", True) else heads
    k, v = r.first("kv_heads")
    if k is None:
        return fam.get("kv") or heads  # the class default (Mistral 8, Qwen3-MoE 4, Gemma 16), else MHA
    return heads if v is None else r.int(k)  # null: = heads (LlamaConfig, MistralConfig, ...)


def _mlp(r: _Reader, fam: dict, fam_name: str | None, hidden: int) -> int:
    """The dense MLP's width (per branch when gated)."""
    k, v = r.first("mlp")
    if k is None:
        if fam_name in ("falcon", "refinedweb", "refinedwebmodel", "bloom", "gpt2", "gpt_bigcode", "phi-msft"):
            return 4 * hidden  # no key: 4 x hidden (FalconConfig, BloomMLP, GPT-2, phi-msft's n_inner)
        if "mlp" in fam:
            return fam["mlp"]  # OPTConfig's ffn_dim=3072 (every real OPT file gives it)
        raise InputError(f"{r.where} lacks {' / '.join(map(repr, _ALIASES['mlp']))}")
    if v is None:
        if k in ("n_inner", "ffn_hidden_size"):
            return 4 * hidden  # n_inner / ffn_hidden_size null: 4 x hidden (GPT-2, Falcon)
        # (intermediate_size / ffn_dim null: transformers keeps None and builds no MLP from it; 4 x hidden,
        # GPT-2's rule, was taken in silence: 20,480 for Llama-2-13B's 13,824)
        raise InputError(f"{r.key(k)} is null: give the MLP's width (a positive integer; only GPT-2's n_inner and "
                         "Falcon's ffn_hidden_size mean 4 x hidden_size by null)")
    width = r.int(k)
    if fam_name == "qwen" and k == "intermediate_size":
        if width % 2:
            raise InputError(f"{r.key(k)}: Qwen-1's intermediate_size counts gate and up together, so it must be "
                             f"even, got {width}")
        return width // 2  # Qwen-1 (QWenMLP): w1 and w2 are intermediate_size / 2 each
    return width


def _window(r: _Reader, fam: dict, fam_name: str | None, layers: int) -> int | None:
    """The attention window every layer uses, or None (full attention, or a window on only some
    layers: Gemma-2's alternate layers, Qwen2's layers from max_window_layers on, a ``layer_types``
    with other layers than sliding_attention ones: gpt-oss; a ``sliding_window_pattern``: Gemma-3,
    Cohere2; ``_partial_window`` reads those)."""
    cfg = r.cfg
    if fam_name in ("gemma2",):
        return None
    types = cfg.get("layer_types")  # (transformers >= 4.53 writes one per layer)
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise InputError(f"{r.key('layer_types')} must be a list of strings (sliding_attention, "
                             f"full_attention, ...), one per layer, got {shown(types)}")
        if len(types) != layers:  # ([] or a list cut short, all sliding, read as a window on every layer)
            raise InputError(f"{r.key('layer_types')}: {len(types)} entries for {layers} layers; give one per layer")
        if any(t != "sliding_attention" for t in types):
            return None  # some layers attend to everything (gpt-oss: every other one): read as full
    pattern = cfg.get("sliding_window_pattern")  # Gemma-3, Cohere2: every pattern-th layer is global
    if pattern is not None and r.int("sliding_window_pattern") <= layers:
        return None
    if fam_name in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # Qwen2Config: the window applies only with use_sliding_window, and only from layer
        # max_window_layers on
        if not r.bool("use_sliding_window", False) or cfg.get("sliding_window") is None:
            return None
        if r.opt_int("max_window_layers", 28, _COUNT) > 0:
            return None
        return r.int("sliding_window")
    if "sliding_window" not in cfg:
        return fam.get("window")  # MistralConfig: 4096 when absent; an explicit null: none
    return r.opt_int("sliding_window", None)


def _partial_window(r: _Reader, fam_name: str | None, layers: int):
    """(window tokens, the indices of the layers using it, how the file says so) of a window on
    only some layers (``_window``: None for such a model, which it has checked the keys of), or
    None. The layers are transformers' (and vLLM's): which ones slide places them on pipeline
    stages (``CostModel.stage_times``)."""
    cfg = r.cfg
    if fam_name == "gemma2":  # Gemma2Config: layers 0, 2, 4, ... slide (default window 4096; null: none)
        if "sliding_window" in cfg and cfg["sliding_window"] is None:
            return None
        window, at, how = r.opt_int("sliding_window", 4096), range(0, layers, 2), "Gemma-2: every other layer"
    elif cfg.get("sliding_window") is None:
        return None
    elif isinstance(cfg.get("layer_types"), list):
        at, how = [i for i, t in enumerate(cfg["layer_types"]) if t == "sliding_attention"], "its layer_types"
        window = r.int("sliding_window")
        if len(cfg["layer_types"]) != layers:
            raise InputError(f"{r.key('layer_types')}: {len(cfg['layer_types'])} entries for {layers} layers; "
                             "give one per layer")
    elif cfg.get("sliding_window_pattern") is not None:
        p = r.int("sliding_window_pattern")  # (Gemma3: layer i slides unless (i + 1) % pattern == 0)
        window, at, how = r.int("sliding_window"), [i for i in range(layers) if (i + 1) % p], \
            f"sliding_window_pattern {p}: every {p}th layer global"
    elif fam_name in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and r.bool("use_sliding_window", False):
        first = r.opt_int("max_window_layers", 28, _COUNT)  # Qwen2Config: layers from this one on slide
        window, at, how = r.int("sliding_window"), range(min(first, layers), layers), \
            f"the layers from max_window_layers {first} on"
    else:
        return None
    return (window, tuple(at), how) if 0 < len(at) < layers else None


def _moe(r: _Reader, fam: dict, fam_name: str | None, layers: int):
    """(experts, top-k, {expert, shared, dense, dense_layers}) of a mixture of experts (0 experts:
    dense). Layouts other than "every layer after the first k" are refused."""
    cfg = r.cfg
    k, v = r.first("experts")
    experts = r.int(k, _COUNT) if k is not None and v is not None else (fam.get("experts", 0) if k is None else 0)
    if not experts:
        return 0, 0, {}
    tk, tv = r.first("top_k")
    top_k = r.int(tk, _COUNT) if tk is not None and tv is not None else fam.get("top_k", 0)
    if not 0 < top_k <= experts:
        raise InputError(f"{r.where}: mixture-of-experts model needs 0 < num_experts_per_tok <= {experts}, got "
                         f"{top_k!r}")
    if cfg.get("moe_intermediate_size") is not None:
        expert = r.int("moe_intermediate_size")
    elif "moe_mlp" in fam:  # (the class's moe_intermediate_size default: intermediate_size is the dense layers')
        expert = fam["moe_mlp"]
    elif "intermediate_size" in cfg:
        expert = r.int("intermediate_size")  # Mixtral: each expert is intermediate_size wide
    else:
        raise InputError(f"{r.where} lacks 'moe_intermediate_size' / 'intermediate_size' (the experts' width)")
    out = {"expert": expert}
    shared = r.opt_int("n_shared_experts", fam.get("n_shared_experts", 0), _COUNT)
    width = cfg.get("shared_expert_intermediate_size", fam.get("shared_mlp"))
    if width:  # Qwen2-MoE: one shared MLP of its own width (absent: Qwen2MoeConfig's 5632; 0: none)
        width = r.int("shared_expert_intermediate_size") if "shared_expert_intermediate_size" in cfg else width
        if width % expert:
            given = "" if "shared_expert_intermediate_size" in cfg else " (the config class's default: the file " \
                "leaves it out; give it, 0 for none)"
            raise InputError(f"{r.key('shared_expert_intermediate_size')}: {width}{given} is not a multiple of the "
                             f"experts' width {expert} (a shared MLP is modelled as whole experts)")
        shared = width // expert
    out["shared"] = shared
    dense_layers = 0
    if fam_name in ("deepseek_v2", "deepseek_v3") or "first_k_dense_replace" in cfg:
        dense_layers = r.opt_int("first_k_dense_replace", fam.get("first_k_dense_replace", 0), _COUNT)
        if r.opt_int("moe_layer_freq", 1) != 1:
            raise InputError(f"{r.key('moe_layer_freq')}: only every layer after the dense ones being MoE (1) is "
                             "modelled")
    if "mlp_only_layers" in cfg or "decoder_sparse_step" in cfg:  # Qwen-MoE's layout
        only = cfg.get("mlp_only_layers") or []
        if (not isinstance(only, list) or not all(type(i) is int for i in only)  # (no bool, str, null: unsortable)
                or sorted(only) != list(range(len(only)))):
            raise InputError(f"{r.key('mlp_only_layers')}: only leading dense layers ([0, 1, ..., k-1]) are "
                             f"modelled, got {shown(only)}")
        if r.opt_int("decoder_sparse_step", 1) != 1:
            raise InputError(f"{r.key('decoder_sparse_step')}: only every layer being MoE (1) is modelled")
        dense_layers = len(only)
    if dense_layers >= layers:
        raise InputError(f"{r.where}: {dense_layers} dense layers leave no MoE layer of {layers}")
    if dense_layers:
        out["dense_layers"] = dense_layers
        if cfg.get("intermediate_size") is None:
            raise InputError(f"{r.where} lacks 'intermediate_size': the width of the MLP of its first {dense_layers} "
                             "layers, which are dense (first_k_dense_replace / mlp_only_layers)")
        out["dense"] = r.int("intermediate_size")
    return experts, top_k, out


def _mla(r: _Reader, fam: dict) -> dict:
    """Multi-head latent attention shapes (DeepSeek-V2/V3), or {} without ``kv_lora_rank``."""
    if r.cfg.get("kv_lora_rank", fam.get("kv_lora_rank")) is None:
        return {}
    out = {}
    for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        if k not in r.cfg and k not in fam:
            raise InputError(f"{r.where}: a latent-attention config (kv_lora_rank) needs {k!r}")
        out[k] = r.int(k) if k in r.cfg else fam[k]
    # q_lora_rank null: queries projected directly (DeepSeek-V2-Lite)
    out["q_lora_rank"] = r.opt_int("q_lora_rank", 0) if "q_lora_rank" in r.cfg else fam.get("q_lora_rank", 0)
    return out


def published_dtype(cfg: dict) -> str | None:
    """The weight dtype a config's ``quantization_config`` says its checkpoint is published in, as
    vLLM serves it: ``fp8`` (DeepSeek-V3), ``int4`` (4-bit AWQ / GPTQ); None: none of those."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = qc.get("quant_method")
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and qc.get("bits") == 4:
        return "int4"
    return None


def checkpoint_dtype_note(cfg: dict, where: str, dtype: str, field: str) -> str | None:
    """For a config whose ``quantization_config`` says its published weights are FP8 (DeepSeek-V3)
    or 4-bit AWQ / GPTQ, which vLLM serves as they are, while the weight dtype priced (``dtype``,
    set by ``field``) is another: one line saying so and how to price the checkpoint; else None."""
    ck = published_dtype(cfg)
    if ck is None or ck == dtype:
        return None
    method = cfg["quantization_config"].get("quant_method")
    return (f"{where}: its published weights are {ck} (quantization_config: quant_method {shown(method)}), as vLLM "
            f"loads them; priced with {dtype} weights here ({field} {dtype}): set {field} {ck} to price the "
            "checkpoint as published")


def partial_window_note(cfg: dict, where: str) -> str | None:
    """For a config whose sliding window covers only some layers (``ModelSpec.partial_window_*``):
    one line saying how many layers use which window and how servesim prices that, for run,
    validate and cost to print; None otherwise (or when the window is at least the context: it
    cuts nothing). Call after ``model_from_hf_config`` accepted ``cfg``."""
    m = model_from_hf_config(cfg, where, where)
    if not m.partial_window_tokens:
        return None
    window, at, how = _partial_window(_Reader(cfg, where), family_of(cfg), m.num_layers)
    return (f"{where}: {len(at)} of its {m.num_layers} layers attend within a {window:,}-token window ({how}); "
            "their attention follows it, but every layer's KV is kept for the whole sequence (as vLLM V0 does; "
            f"V1 frees the window layers' blocks), so past {window:,} tokens KV is overstated, never understated")


_LAYER_TYPES = ("sliding_attention", "full_attention")


def layer_types_note(cfg: dict, where: str) -> str | None:
    """For a config whose ``layer_types`` names a type other than sliding_attention and
    full_attention (a typo such as ``sliding_attn``, or a kind servesim does not model:
    ``linear_attention``, ...): one line naming each such value, the layers that give it and that
    they were priced as full attention; None otherwise. Real checkpoints use other types, so the
    reading is kept (``_window``: any layer not sliding_attention attends to everything). Call after
    ``model_from_hf_config`` accepted ``cfg``."""
    types = cfg.get("layer_types")
    if not isinstance(types, list):
        return None
    other: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        if t not in _LAYER_TYPES:
            other.setdefault(t, []).append(i)
    if not other:
        return None

    def layers(at: list[int]) -> str:
        shown_at = ", ".join(map(str, at[:8])) + (f", ... ({len(at)} layers)" if len(at) > 8 else "")
        return f"layer{'s' if len(at) > 1 else ''} {shown_at}"
    given = " and ".join(f"{shown(t)} at {layers(at)}" for t, at in other.items())
    n = sum(map(len, other.values()))
    return (f"{where}: layer_types gives {given} of its {len(types)}, no type servesim models: "
            f"{'those layers were' if n > 1 else 'that layer was'} priced as full attention (the types it reads "
            "are sliding_attention and full_attention; correct a misspelt one)")


def generic_reading_note(cfg: dict, where: str) -> str | None:
    """For a config whose ``model_type`` names no family servesim knows (gpt_neox, ...), which it
    reads generically (``model_from_hf_config``: ``PretrainedConfig``'s defaults): one line naming
    what was guessed rather than read, and how to state it; None for a known family or a file
    without ``model_type`` (read Llama-style, as documented). Changes nothing in the reading."""
    fam_name = family_of(cfg)
    if not isinstance(cfg.get("model_type"), str) or fam_name is None or fam_name in _FAMILIES:
        return None
    guessed = []
    act = next((cfg[k] for k in ("hidden_act", "hidden_activation", "activation_function", "activation")
                if cfg.get(k)), None)
    # (as model_from_hf_config reads it)
    gated = str(act or "silu") in ("silu", "swiglu", "swish")
    guessed.append(("a gated MLP (gate + up" if gated else "an ungated MLP (one up projection")
                   + (f", from the activation {shown(act)})" if act else ", no activation given: silu assumed)"))
    if cfg.get("tie_word_embeddings") is None:
        guessed.append("an LM head tied to the embeddings (no tie_word_embeddings)")
    if not (cfg.get("alibi") or cfg.get("position_embedding_type") == "alibi"):
        guessed.append("rotary positions")
    if all(cfg.get(k) is None for k in _ALIASES["kv_heads"]):
        guessed.append("as many KV heads as attention heads (no num_key_value_heads)")
    if all(cfg.get(k) is None for k in _ALIASES["context"]):
        guessed.append("a 2,048-token context (no max_position_embeddings)")
    return (f"{where}: model_type {shown(cfg['model_type'])} is no family servesim knows; read generically, "
            f"guessing {', '.join(guessed)}: state them in the file (num_key_value_heads, tie_word_embeddings, "
            "max_position_embeddings; alibi: true; the MLP reads as gated for hidden_act silu / swiglu / swish), "
            "or set model_type to a known family of that layout (llama: gated, rotary, untied; gpt2: ungated, "
            "learned positions, tied)")


def load_hf_config(p: Path, path: str = "model"):
    """The ``ModelSpec`` of a Hugging Face ``config.json`` file; errors name ``path``, the file and
    the key."""
    cfg = read_mapping(p, "config file", path, fmt="json")
    return model_from_hf_config(cfg, f"{path}: {p}", str(p))


__all__ = ["checkpoint_dtype_note", "family_of", "generic_reading_note", "layer_types_note", "load_hf_config",
           "model_from_hf_config", "partial_window_note", "published_dtype"]
