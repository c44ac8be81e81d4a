"""Profile readers: measured kernel timings in the column format of Vidur's profiling data, as
plain arrays.

``compute/<device>/<org>/<model>/mlp.csv``: per-layer non-attention operators by ``num_tokens``
and TP size, medians in ms; ``attention.csv`` next to it; ``network/<node>/all_reduce.csv`` and
``send_recv.csv``: collectives by message size in bytes; ``cpu_overheads.csv``: the per-step CPU
time; ``fp8_gemm.csv`` (servesim's own, next to the compute profiles): FP8 GEMMs by shape. Every
malformed file, column or cell is an ``InputError`` naming the file (and line).
Fitting (``sim/cost/fitting.py``), validation and ``cost.profiles`` pricing read them from here.

numpy is imported lazily: nothing here runs in the simulation's hot path.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import InputError, shown
from servesim.inputs.files import read_utf8

PROFILE_DTYPE_BYTES = 2.0  # the profiles were measured in fp16

# measured column -> (family, kernel) ; GEMM ops map to the CostModel's operator names
GEMM_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "mlp_up",
            "mlp_down_proj": "mlp_down"}
MEM_OPS = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rotary",
           "mlp_act": "activation", "add": "residual", "emb": "embedding"}
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                 "num_tensor_parallel_workers")

# device folder names in the profiles for our catalog GPUs (others: --device)
DEVICE_DIRS = {"a100-80g": "a100", "a40": "a40", "h100-sxm": "h100"}
# catalog GPUs whose chip a device folder names, but measured on a sibling with other memory: its
# kernel times are not this GPU's (Vidur's a100 is the A100-80GB: 2,039 GB/s of HBM, the 40 GB card
# 1,555, so its memory-bound kernels would be priced about 24% fast); used only when named (--device)
SIBLING_DIRS = {"a100-40g": ("a100", "a100-80g")}


# ---------------------------------------------------------------- reading profiles
@dataclass
class ComputeProfile:
    """One mlp.csv as columns (numpy arrays); ``ops[name]`` are medians in seconds (NaN: absent)."""

    path: Path
    model: str
    tp: "object"
    tokens: "object"
    n_head: int
    n_kv_head: int
    hidden: int
    inter: int
    gated: bool
    ops: dict


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a profile; a file without a header or without a row is an error."""
    text = read_utf8(path, "profile")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise InputError(f"{path}: not a valid CSV file: {shown(str(e), 120)}") from None
    if not rows:
        raise InputError(f"{path}: empty file, expected a header row and measurements")
    if len(rows) == 1:
        raise InputError(f"{path}: no measurement rows")
    return rows[0], rows[1:]


def _measured(path: Path, y, none: str, not_positive: str):
    """The rows of ``y`` (a column of times, NaN where not measured) that hold a time: at least
    one (else ``{path}: {none}``), each positive (else ``{path}: {not_positive}``)."""
    import numpy as np

    ok = ~np.isnan(y)
    if not ok.any():
        raise InputError(f"{path}: {none}")
    if (y[ok] <= 0).any():
        raise InputError(f"{path}: {not_positive}")
    return ok


# A measured time above this is no kernel's or step's time (a unit slip, a corrupt cell): priced, it
# would push a run's clock past where seconds still resolve a step
MAX_TIME_MS = 1e6


def _is_time(name: str) -> bool:
    """Whether a profile column holds times in ms (Vidur's ``time_stats.*``, ``*_median`` / ``*_mean``,
    ``*_ms``), not sizes."""
    return name.startswith("time_stats.") or name.endswith(("_median", "_mean", "_ms"))


def _column(path, header, rows, name, conv, required=True):
    import numpy as np

    if name not in header:
        if required:
            raise InputError(f"{path}: missing column {name!r}")
        return None
    i = header.index(name)
    out = []
    for line, r in enumerate(rows, start=2):
        v = r[i] if i < len(r) else ""
        if v == "" and conv is float:
            out.append(math.nan)  # an empty cell: not measured
            continue
        try:
            x = conv(v)
        except ValueError:
            raise InputError(f"{path}: line {line}: column {name!r}: cannot read {v!r} as a number") from None
        if conv is float and not math.isfinite(x):
            raise InputError(f"{path}: line {line}: column {name!r}: {v!r} is not a finite number "
                             "(leave the cell empty when not measured)")
        if conv is float and x > MAX_TIME_MS and _is_time(name):
            raise InputError(f"{path}: line {line}: column {name!r}: {v!r} ms is more than {MAX_TIME_MS:.0e} ms "
                             "(1,000 s): not one kernel's or one step's time")
        if conv is int and not -(2**31) < x < 2**31:
            raise InputError(f"{path}: line {line}: column {name!r}: {v!r} is out of range")
        out.append(x)
    return np.array(out)


def _bool(v: str) -> bool:
    if v in ("True", "true", "1"):
        return True
    if v in ("False", "false", "0"):
        return False
    raise ValueError(v)


def _check_shape(path, n_head: int, n_kv_head: int, hidden: int, tp, inter: int | None = None) -> None:
    """A profile's model shape and TP sizes make sense: positive sizes, every TP size divides
    the attention heads (as it must to shard them) and leaves each shard MLP columns (``inter``,
    the MLP width, for a linear-layer profile)."""
    import numpy as np

    if min(n_head, n_kv_head, hidden, 1 if inter is None else inter) < 1 or hidden < n_head:
        raise InputError(f"{path}: n_head, n_kv_head, n_embd (>= n_head) and the MLP width must be positive, got "
                         f"{n_head}, {n_kv_head}, {hidden}" + ("" if inter is None else f", {inter}"))
    tp = np.asarray(tp)
    bad = tp[n_head % tp != 0]
    if bad.size:
        raise InputError(f"{path}: num_tensor_parallel_workers {int(bad[0])} does not divide the {n_head} heads")
    bad = tp[tp > inter] if inter is not None else tp[:0]
    if bad.size:
        raise InputError(f"{path}: num_tensor_parallel_workers {int(bad[0])} is more than the MLP width "
                         f"n_expanded_embd {inter}: a shard would hold no MLP column")


def read_compute_profile(path: Path, model: str | None = None) -> ComputeProfile:
    import numpy as np

    header, rows = _read_csv(path)
    cols = {c: _column(path, header, rows, c, _bool if c == "use_gated_mlp" else int) for c in SHAPE_COLUMNS}
    for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp"):
        if len(set(cols[c].tolist())) != 1:
            raise InputError(f"{path}: column {c!r} must hold one value (one model per file)")
    if (cols["num_tokens"] <= 0).any() or (cols["num_tensor_parallel_workers"] <= 0).any():
        raise InputError(f"{path}: num_tokens and num_tensor_parallel_workers must be positive")
    _check_shape(path, int(cols["n_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                 cols["num_tensor_parallel_workers"], int(cols["n_expanded_embd"][0]))
    ops = {}
    for op in (*GEMM_OPS, *MEM_OPS):
        col = _column(path, header, rows, f"time_stats.{op}.median", float, required=op in GEMM_OPS)
        if col is None:
            continue
        positive = f"column 'time_stats.{op}.median' has non-positive times"
        if op in GEMM_OPS:  # (required: a linear layer priced by nothing is no profile)
            _measured(path, col, f"column 'time_stats.{op}.median' has no measured value", positive)
        elif (col[~np.isnan(col)] <= 0).any():
            raise InputError(f"{path}: {positive}")
        ops[op] = col * 1e-3  # ms -> s
    return ComputeProfile(path, model or f"{path.parent.parent.name}/{path.parent.name}",
                          cols["num_tensor_parallel_workers"], cols["num_tokens"],
                          int(cols["n_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                          int(cols["n_expanded_embd"][0]), bool(cols["use_gated_mlp"][0]), ops)


def read_network_profile(path: Path, op: str):
    """(num_workers, size_bytes, devices_per_node, median_s) arrays of one all_reduce/send_recv.csv."""
    header, rows = _read_csv(path)
    n = _column(path, header, rows, "num_workers", int)
    size = _column(path, header, rows, "size", float)
    dpn = _column(path, header, rows, "devices_per_node", int)
    y = _column(path, header, rows, f"time_stats.{op}.median", float) * 1e-3
    if not ((size > 0).all() and (n > 0).all()):
        raise InputError(f"{path}: size and num_workers must be positive (and present on every row)")
    if not (y > 0).all():
        line = 2 + next(i for i, v in enumerate(y.tolist()) if not v > 0)
        raise InputError(f"{path}: line {line}: time_stats.{op}.median must be a positive time (ms)")
    return n, size, dpn, y


ATTN_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
                "prefill_chunk_size", "kv_cache_size")


@dataclass
class AttentionProfile:
    """One attention.csv as columns: each row one attention kernel call of one layer, either a
    prefill chunk of ``chunk`` tokens after ``kv`` cached ones (batch 1), or a decode step of
    ``batch`` sequences each holding ``kv`` cached tokens. ``y`` is its median in seconds, the
    attention kernel plus, when measured, the KV-cache write (``attn_kv_cache_save``): the cost
    model's ``attention`` operator covers both."""

    path: Path
    model: str
    tp: "object"
    batch: "object"
    chunk: "object"
    kv: "object"
    is_prefill: "object"
    n_q_head: int
    n_kv_head: int
    hidden: int
    y: "object"


def read_attention_profile(path: Path, model: str | None = None) -> AttentionProfile:
    """Vidur's ``attention.csv`` (``vidur/profiling/attention``): rows whose own kernel's median
    is empty (a prefill row's decode column and vice versa) use the other; rows with neither are
    skipped."""
    import numpy as np

    header, rows = _read_csv(path)
    cols = {c: _column(path, header, rows, c, int) for c in ATTN_COLUMNS}
    pre = _column(path, header, rows, "is_prefill", _bool)
    for c in ("n_embd", "n_q_head", "n_kv_head"):
        if len(set(cols[c].tolist())) != 1:
            raise InputError(f"{path}: column {c!r} must hold one value (one model per file)")
    if (cols["num_tensor_parallel_workers"] <= 0).any() or (cols["batch_size"] <= 0).any():
        raise InputError(f"{path}: num_tensor_parallel_workers and batch_size must be positive")
    _check_shape(path, int(cols["n_q_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                 cols["num_tensor_parallel_workers"])
    if (cols["kv_cache_size"] < 0).any() or (cols["prefill_chunk_size"] < 0).any():
        raise InputError(f"{path}: kv_cache_size and prefill_chunk_size must be >= 0")
    if (pre & (cols["prefill_chunk_size"] < 1)).any():
        raise InputError(f"{path}: a prefill row (is_prefill True) needs prefill_chunk_size >= 1")
    kern = np.where(pre, _column(path, header, rows, "time_stats.attn_prefill.median", float),
                    _column(path, header, rows, "time_stats.attn_decode.median", float))
    save = _column(path, header, rows, "time_stats.attn_kv_cache_save.median", float, required=False)
    y = kern + (np.nan_to_num(save) if save is not None else 0.0)
    ok = _measured(path, y, "no row has its attention median (time_stats.attn_prefill.median for prefill rows, "
                   "time_stats.attn_decode.median for decode rows)", "attention medians must be positive")
    return AttentionProfile(path, model or f"{path.parent.parent.name}/{path.parent.name}",
                            cols["num_tensor_parallel_workers"][ok], cols["batch_size"][ok],
                            cols["prefill_chunk_size"][ok], cols["kv_cache_size"][ok], pre[ok],
                            int(cols["n_q_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                            y[ok] * 1e-3)


# the parts of a step's CPU time Vidur measures (ms); their sum is the cost model's ``overhead``
CPU_PARTS = ("schedule", "prepare_inputs_e2e", "sampler_e2e", "process_model_outputs")
CPU_RPC = "ray_comm_time"  # with TP > 1: the driver's RPC to the workers (absent or 0: none)


@dataclass
class CpuOverheadProfile:
    """One ``cpu_overheads.csv`` as columns: per row a model, batch size (sequences per step) and
    TP size, and ``y`` the step's CPU time in seconds: the medians of ``CPU_PARTS`` plus the RPC."""

    path: Path
    model: "object"
    batch: "object"
    tp: "object"
    y: "object"


def read_cpu_overheads(path: Path) -> CpuOverheadProfile:
    """Vidur's ``cpu_overheads.csv`` (``vidur/profiling/cpu_overhead``): columns ``model_name``,
    ``batch_size``, ``tensor_parallel_degree`` and, in ms, ``<part>_median`` (or ``_mean``) for each
    of ``CPU_PARTS`` and optionally ``ray_comm_time_median`` (or ``_mean``); any letter case."""
    import numpy as np

    header, rows = _read_csv(path)
    low = [h.strip().lower() for h in header]

    def col(name, conv, required=True):
        return _column(path, low, rows, name, conv, required)

    def part(name, required=True):
        for stat in ("median", "mean"):
            if f"{name}_{stat}" in low:
                return col(f"{name}_{stat}", float)
        if required:
            raise InputError(f"{path}: missing column {name + '_median'!r} (or {name + '_mean'!r}); a "
                             f"cpu_overheads.csv needs {', '.join(p + '_median' for p in CPU_PARTS)}")
        return None

    if "model_name" not in low:
        raise InputError(f"{path}: missing column 'model_name'")
    i = low.index("model_name")
    model = np.array([r[i] if i < len(r) else "" for r in rows])
    batch, tp = col("batch_size", int), col("tensor_parallel_degree", int)
    if (batch <= 0).any() or (tp <= 0).any():
        raise InputError(f"{path}: batch_size and tensor_parallel_degree must be positive")
    y = sum(part(n) for n in CPU_PARTS)
    rpc = part(CPU_RPC, required=False)
    if rpc is not None:
        y = y + np.nan_to_num(rpc)
    ok = _measured(path, y, f"no row has all of {', '.join(p + '_median' for p in CPU_PARTS)}",
                   "CPU overhead times must be positive")
    return CpuOverheadProfile(path, model[ok], batch[ok], tp[ok], y[ok] * 1e-3)


FP8_COLUMNS = ("M", "K", "N", "fp8_ms")


@dataclass
class Fp8GemmProfile:
    """One ``fp8_gemm.csv``: per row one ``[M x K] @ [K x N]`` GEMM with FP8 (e4m3) operands and a
    16-bit output, ``y`` its median in seconds. Columns ``M``, ``K``, ``N`` and ``fp8_ms`` (ms);
    others (a 16-bit time of the same shape, labels) are ignored. Written by
    ``tools/h200_measure.py``; ``servesim calibrate`` fits ``gemm_fp8.compute_scale`` to it."""

    path: Path
    M: "object"
    K: "object"
    N: "object"
    y: "object"


def read_fp8_profile(path: Path) -> Fp8GemmProfile:
    header, rows = _read_csv(path)
    for c in FP8_COLUMNS:
        if c not in header:
            raise InputError(f"{path}: missing column {c!r}; an fp8_gemm.csv needs {', '.join(FP8_COLUMNS)}")
    M, K, N = (_column(path, header, rows, c, int) for c in ("M", "K", "N"))
    y = _column(path, header, rows, "fp8_ms", float)
    if (M <= 0).any() or (K <= 0).any() or (N <= 0).any():
        raise InputError(f"{path}: M, K and N must be positive")
    ok = _measured(path, y, "no row has its fp8_ms", "fp8_ms must be positive times")
    return Fp8GemmProfile(path, M[ok], K[ok], N[ok], y[ok] * 1e-3)


@dataclass
class Profiles:
    compute: list  # ComputeProfile
    allreduce: tuple | None  # (node, (n, size, dpn, y)): all-reduces on the node's peer link
    send_recv: tuple | None
    where: str  # a description for provenance
    attention: list = dataclasses.field(default_factory=list)  # AttentionProfile
    cpu: list = dataclasses.field(default_factory=list)  # CpuOverheadProfile
    allreduce_pcie: tuple | None = None  # (node, data): a node whose larger all-reduces cross PCIe
    fp8: list = dataclasses.field(default_factory=list)  # Fp8GemmProfile


def find_profiles(root: str | Path, gpu: str, device: str | None = None, node: str | None = None,
                  where: str = "--profiles") -> Profiles:
    """Profiles of ``gpu`` under ``root``: a Vidur ``profiling`` folder (``compute/<device>/...``,
    ``network/<node>/...``) or a folder of ``<org>/<model>/mlp.csv`` directly. ``where`` names the
    option or field in errors."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{where}: {str(root)!r} is not a folder")
    dev = device or DEVICE_DIRS.get(gpu, gpu)
    cdir = root / "compute" / dev if (root / "compute").is_dir() else root
    # (a folder of network timings alone, with no compute/ beside them, is that too, not a folder of
    # <org>/<model>/mlp.csv files lacking them)
    network_only = (not device and (not cdir.is_dir() or (cdir == root and not any(root.glob("**/mlp.csv"))))
                    and _network_nodes(root, dev, node))
    if network_only:  # collectives alone (H100: Vidur's network timings, no compute ones here)
        return dataclasses.replace(_network(root, dev, node), where=str(root))
    if not device and gpu in SIBLING_DIRS and (root / "compute" / SIBLING_DIRS[gpu][0]).is_dir():
        sib, measured = SIBLING_DIRS[gpu]
        raise InputError(f"{where}: no measurements for GPU {gpu!r}: compute/{sib} under {root} holds {measured} "
                         f"timings, whose HBM bandwidth differs ({_bw(measured)} against {_bw(gpu)}), so they "
                         f"would price its memory-bound kernels wrong (without profiles, cost.calibration auto "
                         f"prices {gpu} with the {measured} fit at its own bandwidth); "
                         + (f"name --device {sib} to use them anyway" if where == "--profiles"
                            else f"point {where} at {root / 'compute' / sib} to use them anyway"))
    if not cdir.is_dir():
        have = sorted(p.name for p in (root / "compute").iterdir() if p.is_dir())
        raise InputError(f"{where}: no measurements for GPU {gpu!r} (looked for {cdir}); "
                         f"device folders there: {', '.join(have) or 'none'}; "
                         + ("name one with --device" if where == "--profiles" else f"point {where} at one of them"))
    files = sorted(cdir.glob("**/mlp.csv"))
    if not files:
        raise InputError(f"{where}: no mlp.csv files under {cdir}")
    def label(f):
        return str(f.parent.relative_to(cdir)) if f.parent != cdir else f.parent.name

    compute = [read_compute_profile(f, label(f)) for f in files]
    attention = [read_attention_profile(f, label(f)) for f in sorted(cdir.glob("**/attention.csv"))]
    # CPU overheads: next to the compute profiles, under cpu_overhead/<device>/, or (Vidur's first
    # layout) <device>/cpu_overheads.csv
    cpu_files = set(cdir.glob("**/cpu_overheads.csv"))
    for d in (root / "cpu_overhead" / dev, root / dev):
        if d.is_dir() and d != cdir:
            cpu_files |= set(d.glob("**/cpu_overheads.csv") if d.parent.name == "cpu_overhead"
                             else d.glob("cpu_overheads.csv"))
    cpu = [read_cpu_overheads(f) for f in sorted(cpu_files)]
    fp8 = [read_fp8_profile(f) for f in sorted(cdir.glob("**/fp8_gemm.csv"))]
    net = _network(root, dev, node)
    return Profiles(compute, net.allreduce, net.send_recv, str(root), attention, cpu, net.allreduce_pcie, fp8)


def _bw(gpu: str) -> str:
    from servesim.inputs.specs import GPUS
    return f"{GPUS[gpu].mem_bw_bytes_per_s / 1e9:,.0f} GB/s"


def _network_nodes(root: Path, dev: str, node: str | None) -> list:
    """The network folders of ``dev`` (``<dev>_*``, or the one named ``node``), a switched one (DGX:
    every pair on NVSwitch) first."""
    ndir = root / "network"
    if not ndir.is_dir():
        return []
    nodes = sorted(p for p in ndir.iterdir()
                   if p.is_dir() and (p.name == node if node else p.name.startswith(dev + "_")))
    if node and not nodes:
        raise InputError(f"--node: no folder {node!r} under {ndir}")
    return sorted(nodes, key=lambda p: ("dgx" not in p.name, p.name))


def _network(root: Path, dev: str, node: str | None) -> Profiles:
    """Collectives of ``dev``: all-reduce and send/recv on the peer link from the first node that has
    them (a DGX first), all-reduce over PCIe from a node of NVLink-bridged pairs (``*_pairwise*``:
    its all-reduces over more than two GPUs cross PCIe)."""
    ar = sr = pcie = None
    for p in _network_nodes(root, dev, node):
        if ar is None and (p / "all_reduce.csv").exists():
            ar = (p.name, read_network_profile(p / "all_reduce.csv", "all_reduce"))
        if sr is None and (p / "send_recv.csv").exists():
            sr = (p.name, read_network_profile(p / "send_recv.csv", "send_recv"))
        if pcie is None and "pairwise" in p.name and (p / "all_reduce.csv").exists():
            data = read_network_profile(p / "all_reduce.csv", "all_reduce")
            if ((data[0] > 2) & (data[2] == data[0])).any():
                pcie = (p.name, data)
    return Profiles([], ar, sr, "", allreduce_pcie=pcie)
