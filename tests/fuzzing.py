"""The scenario fuzzer's parts: hypothesis strategies over the whole scenario schema, raw-text
and file mutations, and an in-process runner of ``servesim`` that reports how each input ended.

Strategies are derived from the dataclasses of ``servesim.inputs.scenario`` (``schema_leaves``
walks their type hints and ``_f`` bounds), so a field added there is fuzzed without a change
here. Values are mostly inside the field's bounds (capped so that runs stay small: a few dozen
requests, short outputs) and sometimes at or past them, of the wrong type, or extreme spellings
(1e300, 5e-324, -0.0, 2**64, NaN, inf). Raw mutations then work on the YAML text (extreme number
spellings, alias bombs, deep nesting, duplicate keys, tags, huge strings) and its bytes (Latin-1,
UTF-16, binary, NUL bytes, truncation); the files a scenario names (model config.json, GPU YAML,
calibration, empirical lengths, traces, datasets) are generated and mutated the same way.

``check(case)`` runs ``validate`` then ``run`` on one input and returns an ``Outcome``:
the exit codes, whether stderr is one bounded line, wall times, and what went wrong if anything
(a traceback, a hang, validate and run disagreeing, a run slower than its size allows).

``study_argv`` and ``check_study`` take a scenario that validates through one of the studies
instead (``sweep``, ``capacity``, ``compare``, ``plan``, ``run --seeds``, ``report`` on a run), each
kept small (a few probes of a few dozen requests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import shutil
import signal
import tempfile
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from hypothesis import strategies as st

from servesim.cli.main import main
from servesim.errors import MAX_MESSAGE
from servesim.inputs import scenario as S
from servesim.inputs.overrides import with_values
from servesim.inputs.specs import GPUS
from tests.conftest import BASE as CONFTEST_BASE

HANG_S = 60.0  # a run still going after this long hangs (the alarm stops it)
# no run may take longer than BASE_S + PER_REQUEST_S x requests + PER_STEP_S x steps +
# PER_REPLICA_S x replicas (wall time; generous: a hang detector for a shared 2-core machine, not a
# benchmark; 100,000 replicas take ~0.2 ms each to set up)
BASE_S, PER_REQUEST_S, PER_STEP_S, PER_REPLICA_S = 15.0, 5e-3, 2e-4, 1e-3
MODELS = ["meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-2-7b-hf", "microsoft/phi-2", "meta-llama/Llama-3.2-1B",
          "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-2-70b-hf"]
BASE = with_values(CONFTEST_BASE, {"name": "fuzz", "policy.max_num_seqs": 32, "policy.max_num_batched_tokens": 4096,
                                   "workload.num_requests": 12, "workload.arrival.rate_rps": 8.0,
                                   "workload.prompt_tokens.max": 400, "workload.output_tokens.max": 48})

# in-bounds draws of these fields stay below these caps (runs stay small); extremes go past them
CAPS = {"num_requests": 30, "clients": 6, "replicas": 3, "tp": 8, "pp": 4, "max_num_seqs": 64, "duration_s": 30.0,
        "num_gpu_blocks": 4000, "groups": 6, "max_turns": 5, "num_speculative_tokens": 5, "block_size": 64,
        "hash_block_tokens": 1024, "max_num_batched_tokens": 8192, "time_s": 10.0, "think_time_s": 3.0,
        "period_s": 60.0, "on_s": 20.0, "off_s": 20.0, "batch_timeout_s": 1.0, "start_s": 10.0, "end_s": 60.0,
        "max_output_tokens": 2048, "activation_reserve_gib": 40.0, "swap_space_gib": 8.0, "seed": 1000}
TOKEN_FIELDS = {"value", "min", "max", "mean", "median", "p99", "tokens", "std"}
TOKEN_CAP = 1500
RATE_RANGE = (0.2, 60.0)

INT_EXTREMES = [0, -1, 1, 2**31, 2**31 - 1, 2**53 + 1, 2**63, 2**64, 10**30, 1e20, 1.5, -0.0, True, "12", None, [],
                {}, 10**400]
FLOAT_EXTREMES = [0.0, -0.0, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, math.inf, -math.inf, math.nan, -1e300,
                  -1.0, 1e-9, 1e12, True, "1.0", None, [1.0], 10**400]
TEXT_EXTREMES = ["", " ", "x" * 5000, "a\x00b", "line\nbreak", "é", "../../etc/passwd", "/dev/zero", "${HOME}",
                 "~/x", ":", "os:system", "sys:exit", "builtins:print", "a" * 300 + ".yaml", "\u202e", 12, None,
                 ["x"], {"a": 1}]


# ---------------------------------------------------------------- the schema's leaves
@dataclass(frozen=True)
class Leaf:
    """One field of the scenario schema: its dotted path, type and bounds."""

    path: str
    tp: Any
    meta: dict

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _strip_optional(tp):
    """(the type without None, whether None is allowed)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return (rest[0] if len(rest) == 1 else Union[rest]), True
    return tp, False


def schema_leaves(cls=S.Scenario, prefix: str = "") -> list[Leaf]:
    """Every field of ``cls`` and of the dataclasses it holds (not into unions of dataclasses or
    lists of them: those are drawn whole, ``value_for``)."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = f"{prefix}{f.name}"
        out.append(Leaf(path, tp, dict(f.metadata or {})))
        inner, _ = _strip_optional(tp)
        if dataclasses.is_dataclass(inner):
            out += schema_leaves(inner, path + ".")
    return out


# ---------------------------------------------------------------- values
def _in_bounds_number(meta: dict, is_int: bool, name: str):
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    lo = 0 if lo is None else lo
    hi = 1e6 if hi is None else hi
    cap = CAPS.get(name)
    if name in TOKEN_FIELDS:
        cap = TOKEN_CAP
    if name.endswith("rate_rps"):
        lo, hi = max(lo, RATE_RANGE[0]), min(hi, RATE_RANGE[1])
    if cap is not None:
        hi = min(hi, cap)
    if is_int:
        lo_i = int(math.ceil(lo)) + (1 if meta.get("gt") is not None and float(lo).is_integer() else 0)
        return st.integers(lo_i, max(lo_i, int(hi)))
    if meta.get("gt") is not None and lo == 0:
        lo = min(1e-3, hi)
    if lo > 0 and hi / lo > 100:
        return st.floats(math.log(lo), math.log(hi)).map(math.exp).map(lambda x: float(f"{x:.4g}"))
    return st.floats(lo, hi, exclude_min=meta.get("gt") is not None, exclude_max=meta.get("lt") is not None)


def _in_bounds_edges(meta: dict, tp) -> list:
    """Valid values at the ends of a numeric field's range (the smallest and largest it takes)."""
    if tp not in (int, float):
        return []
    out = []
    lo, hi = meta.get("ge"), meta.get("le")
    if meta.get("gt") is not None:
        lo = meta["gt"] + 1 if tp is int else (meta["gt"] or 5e-324) * (1 + 1e-9) or 5e-324
    if lo is not None:
        out.append(int(lo) if tp is int else float(lo))
    if hi is not None:
        out += [int(hi) if tp is int else float(hi), int(hi) // 2 if tp is int else hi / 2]
    return out


def _bounds_edges(meta: dict) -> list:
    edges = []
    for k in ("gt", "ge", "le", "lt"):
        b = meta.get(k)
        if b is not None:
            edges += [b, b * (1 + 1e-12) + 1e-300 if isinstance(b, float) else b + 1,
                      b * (1 - 1e-12) - 1e-300 if isinstance(b, float) else b - 1]
    return edges


STRING_CHOICES = {
    "model": MODELS, "gpu": list(GPUS), "router": ["round_robin", "random", "least_outstanding_tokens",
                                                   "least_kv_usage", "prefix_aware"],
    "preset": ["azure_conv", "azure_code", "arxiv_summarization", "vllm_v1_serve", "vllm_v1_offline"],
    "draft": ["ngram", "meta-llama/Llama-3.2-1B"], "calibration": ["auto", "none"],
    "prompt_key": ["prompt"], "output_key": ["output"], "name": ["fuzz", "chat", "batch"],
}
POLICY_NAMES = ["continuous", "chunked_prefill", "static", "pd_split"]


def value_for(tp, meta: dict, name: str, depth: int = 0):
    """A strategy of raw values for a field of type ``tp`` (mostly valid, sometimes not)."""
    inner, optional = _strip_optional(tp)
    base = _valid_for(inner, meta, name, depth)
    wrong = _wrong_for(inner, meta)
    choices = [base, base, base, wrong]
    edges = _in_bounds_edges(meta, inner)
    if edges:
        choices.append(st.sampled_from(edges))
    if optional:
        choices.append(st.none())
    return st.one_of(*choices)


def _wrong_for(tp, meta):
    if tp is int:
        return st.sampled_from(INT_EXTREMES + _bounds_edges(meta))
    if tp is float:
        return st.sampled_from(FLOAT_EXTREMES + _bounds_edges(meta))
    return st.sampled_from(TEXT_EXTREMES + INT_EXTREMES[:6] + FLOAT_EXTREMES[:8])


def _valid_for(tp, meta, name, depth):
    origin = typing.get_origin(tp)
    if tp is int:
        return _in_bounds_number(meta, True, name)
    if tp is float:
        return _in_bounds_number(meta, False, name)
    if tp is bool:
        return st.booleans()
    if tp is str:
        if name in ("name",) and depth > 1:
            return st.sampled_from(["policy", "continuous", "chunked_prefill", "a", "b"])
        return st.sampled_from(STRING_CHOICES.get(name, POLICY_NAMES if name in ("policy",) else ["x", "y"]))
    if origin is Literal:
        return st.sampled_from(typing.get_args(tp))
    if origin is tuple:
        elem = typing.get_args(tp)[0]
        return st.lists(_valid_for(_strip_optional(elem)[0], meta, name, depth + 1), min_size=0, max_size=4)
    if dataclasses.is_dataclass(tp):
        return dataclass_value(tp, depth + 1)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.one_of(*[dataclass_value(o, depth + 1) for o in options])
    return st.just(None)


def dataclass_value(cls, depth: int = 0):
    """A strategy of mappings for dataclass ``cls``: its tag (a one-value Literal), its required
    fields and a random subset of the others."""
    hints = typing.get_type_hints(cls)
    required, optional = {}, {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if depth > 4 and dataclasses.is_dataclass(_strip_optional(tp)[0]):
            continue  # deep enough
        if typing.get_origin(tp) is Literal and len(typing.get_args(tp)) == 1:
            required[f.name] = st.just(typing.get_args(tp)[0])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required[f.name] = value_for(tp, dict(f.metadata or {}), f.name, depth)
        else:
            optional[f.name] = value_for(tp, dict(f.metadata or {}), f.name, depth)
    return st.fixed_dictionaries(required, optional=optional)


# ---------------------------------------------------------------- scenarios
LEAVES = schema_leaves()


def set_path(data: dict, path: str, value) -> None:
    """Set a dotted path, replacing whatever is not a mapping on the way."""
    node = data
    parts = path.split(".")
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = node[p] = {}
        node = nxt
    node[parts[-1]] = value


@st.composite
def scenarios(draw, max_mutations: int = 3) -> dict:
    """A scenario mapping: BASE with 0..``max_mutations`` fields set to drawn values."""
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(0, max_mutations))):
        leaf = draw(st.sampled_from(LEAVES))
        if leaf.path.startswith(("workload.trace", "workload.dataset")) or leaf.path.endswith(".path"):
            continue  # files (and their options) are drawn by ``file_cases``
        data_value = draw(value_for(leaf.tp, leaf.meta, leaf.name))
        set_path(data, leaf.path, data_value)
    if draw(st.integers(0, 5)) == 0:
        set_path(data, "policy.name", draw(st.sampled_from(POLICY_NAMES)))
    return data


# ---------------------------------------------------------------- files a scenario names
LLAMA_CONFIG = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 8,
                "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 4096,
                "hidden_act": "silu", "tie_word_embeddings": False}
GPU_FILE = {"name": "fuzz-gpu", "peak_flops": 5e14, "fp8_flops": 1e15, "mem_bytes": 80e9, "mem_bw_bytes_per_s": 2e12,
            "link_bw_bytes_per_s": 3e11, "pcie_bw_bytes_per_s": 6.4e10, "link_latency_s": 5e-6, "mem_kind": "hbm"}


def _mutated_mapping(draw, base: dict) -> dict:
    data = dict(base)
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(sorted(data)))
        data[key] = draw(st.sampled_from(INT_EXTREMES + FLOAT_EXTREMES + TEXT_EXTREMES[:8]))
    return data


def _options(draw, cls, path: str) -> dict:
    """A trace's or dataset's options: mostly none, sometimes a drawn mapping of the dataclass."""
    opts = draw(st.one_of(st.just({}), st.just({}), dataclass_value(cls, 1)))
    return {**opts, "path": path}


@st.composite
def file_cases(draw, tmp: Path) -> tuple[dict, dict]:
    """(scenario overrides, {file name: bytes}): one file the scenario names, valid or mutated."""
    kind = draw(st.sampled_from(["config", "gpu", "calibration", "empirical", "trace_csv", "trace_jsonl",
                                 "trace_azure", "sharegpt", "jsonl_dataset"]))
    over, files = {}, {}
    if kind == "config":
        files["model/config.json"] = json.dumps(_mutated_mapping(draw, LLAMA_CONFIG)).encode()
        over["model"] = str(tmp / "model")
    elif kind == "gpu":
        files["gpu.yaml"] = yaml.safe_dump(_mutated_mapping(draw, GPU_FILE)).encode()
        over["hardware.gpu"] = str(tmp / "gpu.yaml")
    elif kind == "calibration":
        from servesim.cost.calibration import shipped_calibrations

        text = shipped_calibrations()["a100-80g"].read_text()
        files["cal.yaml"] = text.encode()
        over["cost.calibration"] = str(tmp / "cal.yaml")
        over["hardware.gpu"] = "a100-80g"
    elif kind == "empirical":
        n = draw(st.integers(0, 30))
        lines = [str(draw(st.integers(1, 600))) for _ in range(n)]
        files["lens.txt"] = ("\n".join(["length", *lines]) + "\n").encode()
        over["workload.prompt_tokens"] = {"dist": "empirical", "path": str(tmp / "lens.txt")}
    elif kind == "trace_csv":
        n = draw(st.integers(1, 25))
        rows = [f"{i * 0.05:.3f},{draw(st.integers(1, 500))},{draw(st.integers(1, 40))}" for i in range(n)]
        files["trace.csv"] = ("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n").encode()
        over["workload"] = {"trace": _options(draw, S.Trace, str(tmp / "trace.csv")), "num_requests": None}
    elif kind == "trace_azure":  # Azure's stamps, 2023 (no offset) or 2024 (+00:00), now and then an odd one
        import datetime as dt

        n = draw(st.integers(1, 25))
        zone = draw(st.sampled_from(["", "+00:00", "Z", "-05:00"]))
        t, rows = dt.datetime(2023, 12, 31, 23, 59, 59), []
        for _ in range(n):
            t += dt.timedelta(microseconds=draw(st.integers(0, 400_000)))
            stamp = f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}{draw(st.integers(0, 9))}{zone}"
            if draw(st.integers(0, 19)) == 0:
                stamp = draw(st.sampled_from(["2024-01-01 24:00:00", "2024-02-30 00:00:00", "2024-01-01 00:00:00+24:00",
                                              "2024-01-01 00:00:00." + "1" * 100, "12.5", "", "2024-01-01T00:00:00"]))
            rows.append(f"{stamp},{draw(st.integers(1, 500))},{draw(st.integers(1, 40))}")
        files["trace.csv"] = ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n").encode()
        over["workload"] = {"trace": _options(draw, S.Trace, str(tmp / "trace.csv")), "num_requests": None}
    elif kind == "trace_jsonl":
        n = draw(st.integers(1, 25))
        rows = [json.dumps({"timestamp": i * 40, "input_length": draw(st.integers(1, 1500)), "output_length":
                            draw(st.integers(1, 40)), "hash_ids": list(range(draw(st.integers(0, 3))))})
                for i in range(n)]
        files["trace.jsonl"] = ("\n".join(rows) + "\n").encode()
        over["workload"] = {"trace": _options(draw, S.Trace, str(tmp / "trace.jsonl")), "num_requests": None}
    elif kind == "sharegpt":
        convs = [{"conversations": [{"from": "human", "value": "hello " * draw(st.integers(0, 60))},
                                    {"from": "gpt", "value": "hi " * draw(st.integers(0, 30))}]}
                 for _ in range(draw(st.integers(1, 12)))]
        files["sg.json"] = json.dumps(convs).encode()
        over["workload.dataset"] = {**_options(draw, S.Dataset, str(tmp / "sg.json")), "loop": True}
        over["workload.prompt_tokens"] = None
    else:
        rows = [json.dumps({"prompt": "word " * draw(st.integers(0, 50)), "output": draw(st.integers(0, 30))})
                for _ in range(draw(st.integers(1, 12)))]
        files["p.jsonl"] = ("\n".join(rows) + "\n").encode()
        over["workload.dataset"] = {**_options(draw, S.Dataset, str(tmp / "p.jsonl")), "format": "jsonl",
                                    "loop": True}
        over["workload.prompt_tokens"] = None
    name = next(iter(files))
    files[name] = draw(byte_mutations(files[name]))
    return over, files


# ---------------------------------------------------------------- raw text and bytes
NUMBER_SPELLINGS = ["1e300", "1e-300", "-0", "-0.0", "1e309", ".nan", ".NaN", "NaN", "nan", ".inf", "-.inf",
                    "Infinity", "inf", "0x7fffffffffffffff", "0o777", "1_000", "99999999999999999999999",
                    "9" * 5000, "~", "null", "true", "[1, 2]", "{a: 1}", "'7'", "1e", "0b101", "+.5", "1:30"]
ALIAS_BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
              "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
              "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
              "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
              "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n")
TAGS = ["!!python/object/apply:os.system ['true']", "!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2001-12-14",
        "!custom x", '!!float "nan"', '!!int "0x1F"', "!!omap [a: 1]", "!!str 5", "!!null ''"]


@st.composite
def text_mutations(draw, text: str) -> str:
    """YAML text with one trick applied."""
    kind = draw(st.sampled_from(["number", "bomb", "nest", "duplicate", "tag", "huge", "anchor_loop", "none",
                                 "merge", "flow"]))
    lines = text.splitlines()
    if kind == "number":
        i = draw(st.integers(0, len(lines) - 1))
        if ":" in lines[i]:
            head = lines[i].split(":", 1)[0]
            lines[i] = f"{head}: {draw(st.sampled_from(NUMBER_SPELLINGS))}"
        return "\n".join(lines) + "\n"
    if kind == "bomb":
        target = draw(st.sampled_from(["name: *i", "seed: *i", "x: *i"]))
        return ALIAS_BOMB + text + target + "\n"
    if kind == "nest":
        depth = draw(st.sampled_from([40, 60, 200, 1000, 5000]))
        return text + "name: " + "[" * depth + "]" * depth + "\n"
    if kind == "duplicate":
        i = draw(st.integers(0, len(lines) - 1))
        return text + lines[i] + "\n"
    if kind == "tag":
        return text.replace("name: fuzz", f"name: {draw(st.sampled_from(TAGS))}")
    if kind == "huge":
        return text.replace("name: fuzz", "name: " + "x" * draw(st.sampled_from([5000, 1_000_000])))
    if kind == "anchor_loop":
        return text + "loop: &l [*l]\n"
    if kind == "merge":
        return "base: &b {seed: 3}\n" + text + "extra:\n  <<: *b\n"
    if kind == "flow":
        return text + "name: {" + ", ".join(f"k{i}: {i}" for i in range(draw(st.integers(1, 50)))) + "}\n"
    return text


@st.composite
def byte_mutations(draw, data: bytes) -> bytes:
    """Bytes with one encoding trick applied (or none)."""
    kind = draw(st.sampled_from(["none", "none", "none", "latin1", "utf16", "bom", "binary", "nul", "truncate",
                                 "flip", "crlf"]))
    if kind == "latin1":
        return b"# caf\xe9\n" + data if not data.lstrip().startswith((b"{", b"[")) else data.replace(b"e", b"\xe9", 1)
    if kind == "utf16":
        return data.decode("utf-8", "replace").encode("utf-16")
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "binary":
        return bytes(draw(st.lists(st.integers(0, 255), min_size=1, max_size=64)))
    if kind == "nul":
        i = draw(st.integers(0, max(0, len(data) - 1)))
        return data[:i] + b"\x00" + data[i:]
    if kind == "truncate":
        return data[:draw(st.integers(0, max(0, len(data) - 1)))]
    if kind == "flip":
        if not data:
            return data
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    return data


@dataclass
class Case:
    """One fuzz input: the scenario file's bytes, the files beside it, --set items."""

    scenario: bytes
    files: dict = field(default_factory=dict)
    sets: list = field(default_factory=list)
    kind: str = "schema"


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@st.composite
def cases(draw, tmp: Path) -> Case:
    """A fuzz input: a scenario from the schema strategies, and with some probability a file it
    names, a raw text mutation, a byte mutation or a --set item."""
    data = draw(scenarios())
    kind = draw(st.sampled_from(["schema", "schema", "schema", "file", "file", "text", "text", "bytes", "set"]))
    files, sets = {}, []
    if kind == "file":
        over, files = draw(file_cases(tmp))
        for k, v in over.items():
            if k == "workload":
                if not isinstance(data.get("workload"), dict):  # a mutation made it something else
                    data["workload"] = dict(BASE["workload"])
                data["workload"] = {**{kk: vv for kk, vv in data["workload"].items()
                                       if kk not in ("prompt_tokens", "output_tokens", "classes")}, **v}
                if data["workload"].get("num_requests", 0) is None:
                    data["workload"].pop("num_requests")
            else:
                set_path(data, k, v)
    try:
        text = _dump(data)
    except (yaml.YAMLError, ValueError, OverflowError):
        text = _dump(BASE)
    if kind == "text":
        text = draw(text_mutations(text))
    raw = text.encode("utf-8", "surrogatepass")
    if kind == "bytes":
        raw = draw(byte_mutations(raw))
    if kind == "set":
        leaf = draw(st.sampled_from(LEAVES))
        sets.append(f"{leaf.path}={draw(st.sampled_from(NUMBER_SPELLINGS + ['', 'x', '[', '{a: [1', '&a x']))}")
    return Case(raw, files, sets, kind)


# ---------------------------------------------------------------- running it
class Hang(BaseException):
    """The alarm: a command ran past ``HANG_S`` (BaseException: nothing under test catches it)."""


@contextlib.contextmanager
def _alarm(seconds: float):
    def ring(_sig, _frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_main(argv: list[str], hang_s: float = HANG_S) -> tuple[str, str, str, float]:
    """``servesim argv`` in this process: (exit kind, stdout, stderr, seconds). Exit kind: "0",
    "2", another code, "traceback" (an exception escaped main) or "hang"."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        with _alarm(hang_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 2
    except Hang:
        return "hang", out.getvalue(), err.getvalue(), time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - what the fuzzer looks for
        import traceback

        return "traceback", out.getvalue(), f"{type(e).__name__}: {e}\n{traceback.format_exc()}", \
            time.perf_counter() - t0
    return str(rc), out.getvalue(), err.getvalue(), time.perf_counter() - t0


@dataclass
class Outcome:
    validate: str
    run: str
    problems: list  # what is wrong (empty: nothing)
    seconds: float
    kind: str
    message: str = ""


def _message_problem(kind: str, err: str, what: str) -> str | None:
    if kind in ("traceback", "hang"):
        return f"{what}: {kind}: {err[-2000:]}"
    if kind not in ("0", "2"):
        return f"{what}: exit {kind}: {err[-500:]}"
    if kind == "2":
        lines = err.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith("servesim: error: "):
            return f"{what}: exit 2 without one 'servesim: error:' line: {err[:500]!r}"
        if len(lines[0]) > MAX_MESSAGE + 40:
            return f"{what}: a message of {len(lines[0])} characters"
        if "Traceback" in err:
            return f"{what}: a traceback on stderr"
    return None


def check(case: Case, root: Path) -> Outcome:
    """Write the case under ``root`` and run ``validate`` then ``run`` on it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    scen = root / "s.yaml"
    scen.write_bytes(case.scenario)
    sets = [x for s in case.sets for x in ("--set", s)]
    v, _, verr, tv = run_main(["validate", str(scen), *sets])
    r, rout, rerr, tr = run_main(["run", str(scen), *sets, "--out", str(root / "out"), "--quiet"])
    problems = [p for p in (_message_problem(v, verr, "validate"), _message_problem(r, rerr, "run")) if p]
    if v in ("0", "2") and r in ("0", "2") and v != r:
        problems.append(f"validate exit {v} but run exit {r}: {(verr or rerr).strip()[:300]}")
    if r == "0":
        try:
            summary = json.loads((root / "out" / "summary.json").read_text())
            replicas = sum(p["replicas"] for p in summary["kv_capacity"].values())
            bound = (BASE_S + PER_REQUEST_S * summary["num_requests"] + PER_STEP_S * summary["phases"]["steps"]
                     + PER_REPLICA_S * replicas)
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"run exit 0 without a readable summary.json: {e}")
            bound = BASE_S
        if tr > bound:
            problems.append(f"run took {tr:.1f} s, more than its size allows ({bound:.1f} s)")
    elif tr > BASE_S:
        problems.append(f"run took {tr:.1f} s to exit {r}")
    if tv > BASE_S + (tr if r == "0" else 0):
        problems.append(f"validate took {tv:.1f} s")
    shutil.rmtree(root / "out", ignore_errors=True)
    return Outcome(v, r, problems, tv + tr, case.kind, (verr or rerr).strip()[:200])


# ---------------------------------------------------------------- the studies
STUDY_SLOS = ["ttft_p99=0.5,tpot_p99=0.05", "ttft_p90=2", "e2e_p50=10", "tbt_p99=0.2", "tpot_mean=30ms"]
STUDY_GRIDS = ["workload.arrival.rate_rps=2,8", "workload.arrival.rate_rps=1,4,16", "policy.max_num_seqs=4,32",
               "cluster.replicas=1,2", "policy.name=continuous,static", "policy.name=continuous,chunked_prefill",
               "hardware.gpu=a100-80g,h100-sxm", "seed=0,1"]
STUDY_S = 90.0  # a study still going after this long hangs (its runs are a few dozen requests each)
# ... plus PER_REPLICA_S x replicas for each of up to STUDY_RUNS runs: a deployment of 50,000
# replicas costs ~3 s a run to set up, and a capacity search of 2 seeds runs up to 2 x (16 + 1)
STUDY_RUNS = 40


@st.composite
def study_argv(draw, scen: Path, out: Path) -> list[str]:
    """One study command on the scenario file ``scen``, writing into ``out``; ``report`` reads a
    ``run`` of it that ``check_study`` makes first."""
    s, o = str(scen), str(out)
    cmd = draw(st.sampled_from(["sweep", "capacity", "capacity", "compare", "plan", "report", "seeds"]))
    if cmd == "sweep":
        argv = ["sweep", s, "--grid", draw(st.sampled_from(STUDY_GRIDS))]
        argv += ["--seeds", "2"] if draw(st.booleans()) else []
    elif cmd == "capacity":
        argv = ["capacity", s, "--slo", draw(st.sampled_from(STUDY_SLOS)), "--max-probes", "16", "--tol", "0.05",
                "--probe-requests", draw(st.sampled_from(["20", "40", "80"])), "--seeds", draw(st.sampled_from("112"))]
        argv += ["--attainment", "0.9"] if draw(st.booleans()) else []
        argv += ["--per-gpu"] if draw(st.booleans()) else []
    elif cmd == "compare":
        pols = draw(st.lists(st.sampled_from(POLICY_NAMES), min_size=1, max_size=3, unique=True))
        argv = ["compare", s, "--policies", ",".join(pols)]
        argv += ["--rates", draw(st.sampled_from(["1,4", "8", "0.5,2,16"]))] if draw(st.booleans()) else []
        argv += ["--no-report"] if draw(st.booleans()) else []
    elif cmd == "plan":
        argv = ["plan", s, "--rate", draw(st.sampled_from(["1", "4", "20"])), "--slo", "ttft_p99=1,tpot_p99=0.1",
                "--max-gpus", "2", "--max-probes", "3", "--probe-requests", "20", "--requests", "30"]
        argv += ["--gpus", "a100-80g,h100-sxm"] if draw(st.booleans()) else []
        argv += ["--no-report"] if draw(st.booleans()) else []
    elif cmd == "report":
        return ["report", o, "--quiet"]
    else:
        argv = ["run", s, "--seeds", "3"]
    return argv + ["--out", o, "--quiet"]


def check_study(scenario: bytes, argv: list[str], root: Path) -> Outcome:
    """Write the scenario under ``root``; when it validates, run ``argv`` (from ``study_argv``) on
    it. The outcome's ``validate`` is the scenario's exit, ``run`` the study's ("-" when the
    scenario did not validate, or ``report`` had no run to read)."""
    root.mkdir(parents=True, exist_ok=True)
    scen = root / "s.yaml"
    scen.write_bytes(scenario)
    v, _, verr, tv = run_main(["validate", str(scen)])
    problems = [p for p in (_message_problem(v, verr, "validate"),) if p]
    kind = argv[0] if argv[0] != "run" else "run --seeds"
    if v != "0":
        return Outcome(v, "-", problems, tv, kind, verr.strip()[:200])
    if argv[0] == "report":
        r, _, rerr, _ = run_main(["run", str(scen), "--out", argv[1], "--quiet"])
        problems += [p for p in (_message_problem(r, rerr, "run"),) if p]
        if r != "0":
            return Outcome(v, "-", problems, tv, kind, rerr.strip()[:200])
    k, _, err, t = run_main(argv, hang_s=STUDY_S + STUDY_RUNS * PER_REPLICA_S * _replicas(scen))
    problems += [p for p in (_message_problem(k, err, argv[0]),) if p]
    return Outcome(v, k, problems, tv + t, kind, err.strip()[:200])


def _replicas(scen: Path) -> int:
    """The replicas of the (valid) scenario file ``scen``, a P/D split's pools together."""
    from servesim.inputs.scenario import load_scenario

    pol = (sc := load_scenario(str(scen))).policy
    return pol.prefill.replicas + pol.decode.replicas if pol.is_deployment else sc.cluster.replicas


def fresh_dir(base: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=base))


__all__ = ["Case", "Outcome", "cases", "check", "check_study", "fresh_dir", "scenarios", "schema_leaves", "study_argv",
           "run_main", "LEAVES"]
