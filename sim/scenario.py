"""Scenario files: YAML -> frozen dataclasses, with validation errors that name the field path.

The field names are a contract (README, tests and users rely on them): add fields, never rename.
Each default is stated once, here, in the dataclass. ``load_scenario`` is the only entry point
that reads files; the dataclasses themselves do no I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from sim.errors import InputError, did_you_mean


def _f(default=dataclasses.MISSING, *, gt=None, ge=None, le=None, lt=None, doc="", **kw):
    """A dataclass field with bounds that ``build`` checks (gt: >, ge: >=, le: <=, lt: <)."""
    meta = {"gt": gt, "ge": ge, "le": le, "lt": lt, "doc": doc}
    if default is dataclasses.MISSING and "default_factory" not in kw:
        return field(metadata=meta, **kw)
    if "default_factory" in kw:
        return field(metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


# ---------------------------------------------------------------- length distributions (tokens)
@dataclass(frozen=True)
class FixedDist:
    dist: Literal["fixed"]
    value: int = _f(gt=0)


@dataclass(frozen=True)
class UniformDist:
    dist: Literal["uniform"]
    min: int = _f(gt=0)
    max: int = _f(gt=0)

    def check(self, path):
        if self.max < self.min:
            raise InputError(f"{path}.max must be >= {path}.min ({self.min}), got {self.max}")


@dataclass(frozen=True)
class LognormalDist:
    """Lognormal with the given mean (tokens) and sigma (of the underlying normal, log space)."""

    dist: Literal["lognormal"]
    mean: float = _f(gt=0)
    sigma: float = _f(gt=0)
    max: Optional[int] = _f(None, gt=0, doc="clip samples to this many tokens")


@dataclass(frozen=True)
class NormalDist:
    dist: Literal["normal"]
    mean: float = _f(gt=0)
    std: float = _f(ge=0)
    min: int = _f(1, gt=0)
    max: Optional[int] = _f(None, gt=0)

    def check(self, path):
        if self.max is not None and self.max < self.min:
            raise InputError(f"{path}.max must be >= {path}.min ({self.min}), got {self.max}")


LengthDist = Union[FixedDist, UniformDist, LognormalDist, NormalDist]


# ---------------------------------------------------------------- arrival processes
@dataclass(frozen=True)
class PoissonArrival:
    process: Literal["poisson"]
    rate_rps: float = _f(gt=0)


@dataclass(frozen=True)
class FixedArrival:
    """Evenly spaced arrivals, 1 / rate_rps apart."""

    process: Literal["fixed"]
    rate_rps: float = _f(gt=0)


@dataclass(frozen=True)
class GammaArrival:
    """Renewal process with gamma inter-arrival times: mean 1/rate_rps, coefficient of variation cv."""

    process: Literal["gamma"]
    rate_rps: float = _f(gt=0)
    cv: float = _f(gt=0)


Arrival = Union[PoissonArrival, FixedArrival, GammaArrival]


# ---------------------------------------------------------------- sections
@dataclass(frozen=True)
class Hardware:
    gpu: str
    tp: int = _f(1, gt=0, doc="tensor-parallel GPUs per replica")
    pp: int = _f(1, gt=0, doc="pipeline-parallel stages per replica")
    dtype: Literal["bf16", "fp16", "fp8", "int4"] = "bf16"
    kv_dtype: Optional[Literal["bf16", "fp16", "fp8", "int8", "int4"]] = _f(None, doc="defaults to dtype")


@dataclass(frozen=True)
class Memory:
    gpu_memory_utilization: float = _f(0.9, gt=0, le=1)
    block_size: int = _f(16, gt=0, doc="tokens per KV block")
    activation_reserve_gib: Optional[float] = _f(None, ge=0, doc="None: estimated from the token budget")
    num_gpu_blocks: Optional[int] = _f(None, gt=0, doc="override the computed KV block count (as vLLM's num_gpu_blocks_override)")
    swap_space_gib: float = _f(4.0, ge=0, doc="host memory per GPU for swapped-out KV (vLLM's swap_space)")
    swap_bandwidth_gb_per_s: Optional[float] = _f(None, gt=0, doc="host<->GPU copy bandwidth; null: the GPU's PCIe figure")


@dataclass(frozen=True)
class Cluster:
    replicas: int = _f(1, gt=0)
    router: Literal["round_robin", "random", "least_outstanding_tokens", "least_kv_usage", "prefix_aware"] = "round_robin"


@dataclass(frozen=True)
class Spec:
    """Speculative decoding: a draft proposes k tokens, the target verifies k + 1 per step."""

    draft: str = _f("ngram", doc="a draft model (catalog id or config.json path), or ngram (no draft cost)")
    num_speculative_tokens: int = _f(4, gt=0)
    acceptance_rate: float = _f(0.8, ge=0, le=1, doc="probability each draft token is accepted")


@dataclass(frozen=True)
class Pool:
    """One pool of a P/D split: its replicas, GPU, TP and inner policy (null: the top-level value)."""

    replicas: int = _f(1, gt=0)
    gpu: Optional[str] = None
    tp: Optional[int] = _f(None, gt=0)
    policy: Literal["continuous", "chunked_prefill"] = "continuous"
    max_num_seqs: Optional[int] = _f(None, gt=0)
    max_num_batched_tokens: Optional[int] = _f(None, gt=0)


@dataclass(frozen=True)
class Link:
    """The KV hand-off link of a P/D split (per GPU; TP ranks send their shards in parallel)."""

    type: Literal["inter_node", "intra_node"] = "inter_node"
    bandwidth_gbps: Optional[float] = _f(None, gt=0, doc="Gbit/s; null: 400 across nodes, the GPU's NVLink within one")
    latency_s: Optional[float] = _f(None, ge=0, doc="null: 20 us across nodes, the GPU's link latency within one")


@dataclass(frozen=True)
class Policy:
    name: Literal["continuous", "chunked_prefill", "static", "pd_split"] = "continuous"
    max_num_seqs: int = _f(256, gt=0)
    max_num_batched_tokens: int = _f(8192, gt=0)
    preemption: Literal["recompute", "swap"] = "recompute"
    watermark: float = _f(0.01, ge=0, lt=1, doc="share of KV blocks kept free when admitting (vLLM's)")
    prefix_caching: bool = False
    batch_timeout_s: float = _f(0.1, ge=0, doc="static: start a partial batch this long after its first request waited")
    max_output_tokens: Optional[int] = _f(None, gt=0, doc="static: output tokens reserved per slot; null: up to the context length")
    spec: Optional[Spec] = None
    prefill: Pool = field(default_factory=Pool)
    decode: Pool = field(default_factory=Pool)
    link: Link = field(default_factory=Link)

    def check(self, path):
        if self.spec is not None and self.name not in ("continuous", "chunked_prefill"):
            raise InputError(f"{path}.spec: speculative decoding works with continuous or chunked_prefill, "
                             f"not {self.name}")


@dataclass(frozen=True)
class SharedPrefix:
    """A share of requests start with one of ``groups`` common prefixes (e.g. system prompts) of
    ``tokens`` tokens; for them the prompt length drawn is what follows the prefix."""

    tokens: int = _f(gt=0)
    fraction: float = _f(1.0, ge=0, le=1)
    groups: int = _f(1, gt=0)


@dataclass(frozen=True)
class Workload:
    arrival: Arrival
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    num_requests: Optional[int] = _f(None, gt=0)
    duration_s: Optional[float] = _f(None, gt=0, doc="arrivals stop and the run ends at this time")
    shared_prefix: Optional[SharedPrefix] = None

    def check(self, path):
        if self.num_requests is None and self.duration_s is None:
            raise InputError(f"{path}: give num_requests or duration_s (or both)")


@dataclass(frozen=True)
class Slo:
    ttft_s: Optional[float] = _f(None, gt=0, doc="None: no TTFT limit")
    tpot_s: Optional[float] = _f(None, gt=0, doc="None: no TPOT limit")


@dataclass(frozen=True)
class Cost:
    step_overhead_s: float = _f(0.002, ge=0, doc="fixed per-step time: scheduling, launch, sampling")
    per_seq_overhead_s: float = _f(1e-5, ge=0, doc="per-step time per scheduled sequence")
    calibration: str = _f("auto", doc="auto: shipped fit of the GPU (or the closest calibrated GPU's); "
                                      "none: v0 round figures; or a path to a calibration YAML")


@dataclass(frozen=True)
class Scenario:
    model: str
    hardware: Hardware
    workload: Workload
    name: str = "unnamed"
    seed: int = _f(0, ge=0)
    memory: Memory = field(default_factory=Memory)
    cluster: Cluster = field(default_factory=Cluster)
    policy: Policy = field(default_factory=Policy)
    slo: Slo = field(default_factory=Slo)
    cost: Cost = field(default_factory=Cost)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- building and validation
_TAGS = {"dist": "dist", "process": "process"}


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    return "a mapping"


def _convert(tp, value, path):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Union:
        non_none = [a for a in args if a is not type(None)]
        if value is None and type(None) in args:
            return None
        if len(non_none) == 1:
            return _convert(non_none[0], value, path)
        return _build_tagged(non_none, value, path)
    if origin is Literal:
        if value not in args:
            raise InputError(f"{path}: {value!r} is not valid;{did_you_mean(value, [str(a) for a in args])}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"{path} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise InputError(f"{path} must be an integer, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{path} must be a number, got {value!r}")
        if value != value or value in (float("inf"), float("-inf")):
            raise InputError(f"{path} must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise InputError(f"{path} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported field type {tp} at {path}")  # a bug in the schema, not input


def _build_tagged(options, value, path):
    """A union of dataclasses told apart by a tag field (``dist`` or ``process``)."""
    tag_field = next(f.name for f in dataclasses.fields(options[0]) if f.name in _TAGS)
    by_tag = {typing.get_args(typing.get_type_hints(o)[tag_field])[0]: o for o in options}
    if not isinstance(value, dict):
        raise InputError(f"{path} must be a mapping with a {tag_field!r} key, got {value!r}")
    if tag_field not in value:
        raise InputError(f"{path}.{tag_field} is missing; valid: {', '.join(by_tag)}")
    tag = value[tag_field]
    if tag not in by_tag:
        raise InputError(f"{path}.{tag_field}: {tag!r} is not valid;{did_you_mean(str(tag), by_tag)}")
    return build(by_tag[tag], value, path)


def build(cls, data, path: str):
    """Build dataclass ``cls`` from plain data, checking types, bounds and unknown keys."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{path or 'scenario'} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            raise InputError(f"{where}: unknown field;{did_you_mean(str(key), fields)}")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name in data:
            value = _convert(hints[name], data[name], where)
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        else:
            raise InputError(f"{where} is missing: expected {_type_name(hints[name])}")
        meta = f.metadata
        if value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            if meta.get("gt") is not None and not value > meta["gt"]:
                raise InputError(f"{where} must be > {meta['gt']}, got {value!r}")
            if meta.get("ge") is not None and not value >= meta["ge"]:
                raise InputError(f"{where} must be >= {meta['ge']}, got {value!r}")
            if meta.get("le") is not None and not value <= meta["le"]:
                raise InputError(f"{where} must be <= {meta['le']}, got {value!r}")
            if meta.get("lt") is not None and not value < meta["lt"]:
                raise InputError(f"{where} must be < {meta['lt']}, got {value!r}")
        kwargs[name] = value
    obj = cls(**kwargs)
    if hasattr(obj, "check"):
        obj.check(path or "scenario")
    return obj


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed as a YAML scalar)."""
    if "=" not in text:
        raise InputError(f"--set {text!r}: expected dotted.key=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise InputError(f"--set {text!r}: empty key segment")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise InputError(f"--set {text!r}: {'.'.join(parts[: i + 1])} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(f"cannot read scenario {str(p)!r}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{p}:{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: a scenario must be a YAML mapping, got {type(data).__name__}")
    return data


def default_scenario_path() -> Path:
    return Path(str(resources.files("scenarios") / "default.yaml"))


def load_scenario(path: str | Path | None = None, overrides: list[str] = (), seed: int | None = None) -> Scenario:
    """Read, override and validate a scenario file (the packaged default when ``path`` is None)."""
    path = default_scenario_path() if path is None else Path(path)
    data = apply_overrides(read_yaml(path), list(overrides))
    if seed is not None:
        data["seed"] = seed
    try:
        return scenario_from_dict(data)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def scenario_from_dict(data: dict) -> Scenario:
    return build(Scenario, data, "")


def scenario_to_yaml(s: Scenario) -> str:
    return yaml.safe_dump(s.to_dict(), sort_keys=False)
