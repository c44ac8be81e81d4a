"""Calibration files and lookup: write a fit as YAML, load one, and pick the efficiencies a GPU
runs with (its shipped fit, the closest calibrated GPU's, the v0 figures or a file).

The shipped fits live in ``sim/cost/calibrations/<gpu>.yaml`` (written by ``servesim calibrate``
from ``sim/cost/fitting.py``'s fits); a file is validated by ``efficiency.from_dict``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from datetime import date
from importlib import resources
from pathlib import Path

from servesim.cost.efficiency import DEFAULT_EFFICIENCIES, FAMILIES, Efficiencies, from_dict
from servesim.inputs.schema import dump_yaml, load_packaged_yaml, read_mapping
from servesim.inputs.specs import GPUS, GpuSpec


# shares of the GPU's peer link: they transfer only between GPUs whose links are of one kind
# (``allreduce_pcie`` is a share of PCIe, which every GPU has)
COMM_FAMILIES = ("allreduce", "allreduce_custom", "send_recv")


def link_kind(gpu: GpuSpec) -> str:
    """``pcie`` when the GPUs of a node talk only over PCIe (no faster peer link), else ``peer``
    (NVLink, Infinity Fabric)."""
    return "peer" if gpu.peer_link else "pcie"


# families no kernel profile measures (Vidur's are fp16 and NCCL only): ``servesim calibrate``
# carries them over from the GPU's current efficiencies and writes them even at the v0 figures, so
# that a GPU's own file, not the closest GPU's, says what it uses
CARRIED = ("allreduce_custom", "gemm_fp8")


def carried_families(gpu: GpuSpec) -> tuple:
    """The ``CARRIED`` families that mean something on ``gpu``: the custom all-reduce needs a peer
    link, FP8 GEMMs FP8 tensor cores."""
    return tuple(f for f in CARRIED if (gpu.peer_link if f == "allreduce_custom" else gpu.fp8_flops > 0))


def calibration_yaml(eff: Efficiencies, gpu: GpuSpec, provenance: str, quality: dict | None = None) -> str:
    body = {"gpu": gpu.name, "source": eff.source}
    d = eff.to_dict()
    v0 = DEFAULT_EFFICIENCIES.to_dict()
    keep = carried_families(gpu)
    for fam in FAMILIES:
        if d[fam] != v0[fam] or fam in keep:  # other families at the v0 figures are omitted (filled in on load)
            body[fam] = d[fam] if fam != "overhead" else {k: list(v) for k, v in d[fam].items()}
    if quality:
        body["fit_quality"] = quality
    head = "".join(f"# {line}\n" for line in provenance.splitlines())
    return head + dump_yaml(body, sort_keys=False, width=110)


def load_calibration(path: str | Path, where: str = "cost.calibration") -> Efficiencies:
    p = Path(path)
    return from_dict(dict(_raw(p, where)), f"{where}: {p}")


def shipped_calibrations() -> dict[str, Path]:
    """GPU name -> packaged calibration file."""
    d = resources.files("servesim.cost") / "calibrations"
    return {Path(str(f)).stem: Path(str(f)) for f in d.iterdir() if str(f).endswith(".yaml")}


def closest_calibrated(gpu: GpuSpec, calibrated: list[str]) -> str | None:
    """The calibrated GPU most like ``gpu``: same memory kind (HBM / GDDR) first, then the smallest
    log-distance in peak FLOP/s and bandwidth."""
    best = None
    for name in calibrated:
        if name not in GPUS:
            continue
        c = GPUS[name]
        d = (c.mem_kind != gpu.mem_kind,
             abs(math.log(c.peak_flops / gpu.peak_flops))
             + abs(math.log(c.mem_bw_bytes_per_s / gpu.mem_bw_bytes_per_s)),
             name)
        best = d if best is None or d < best else best
    return best[2] if best else None


def _raw(path: Path, where: str, cached: bool = False) -> dict:
    return _raw_packaged(str(path)) if cached else read_mapping(path, "calibration file", where)


@functools.lru_cache(maxsize=32)
def _raw_packaged(path: str) -> dict:
    """Packaged calibration files do not change while we run: parse each once (callers copy)."""
    return load_packaged_yaml(Path(path).read_text(encoding="utf-8"))


def efficiencies_for(gpu: GpuSpec, calibration: str = "auto", where: str = "cost.calibration") -> Efficiencies:
    """``auto``: the shipped fit of this GPU, else the closest calibrated GPU's (transferred);
    ``none``: the v0 round numbers; otherwise a path to a calibration file.

    With ``auto``, a family the GPU's own fit lacks (A40: no all-reduce measurements) comes from the
    closest calibrated GPU that has it."""
    if calibration == "none":
        return DEFAULT_EFFICIENCIES
    if calibration != "auto":
        return _from_path(gpu, Path(calibration), where)
    shipped = shipped_calibrations()
    if not shipped:
        return DEFAULT_EFFICIENCIES
    own = gpu.name in shipped
    name = gpu.name if own else closest_calibrated(gpu, sorted(shipped))
    if name is None:
        return DEFAULT_EFFICIENCIES
    data = dict(_raw(shipped[name], f"{where} (packaged {name})", True))
    notes = [] if own else [f"transferred from {name}"]
    if not own:
        for fam in COMM_FAMILIES:
            # a collective's efficiency is a share of the GPU's link: it means nothing on a link
            # of another kind (an NVLink fit on a PCIe-only GPU)
            if fam in data and link_kind(GPUS[name]) != link_kind(gpu):
                del data[fam]
    for fam in FAMILIES:
        if fam in data:
            continue
        same_link = fam not in COMM_FAMILIES
        donor = closest_calibrated(GPUS[name], [g for g in sorted(shipped) if g != name and g in GPUS
                                                and fam in _raw(shipped[g], where, True)
                                                and (same_link or link_kind(GPUS[g]) == link_kind(gpu))])
        if donor:
            data[fam] = _raw(shipped[donor], where, True)[fam]
            notes.append(f"{fam} from {donor}")
        elif not same_link:
            notes.append(f"{fam}: v0 (no calibrated GPU with a {link_kind(gpu)} link)")
    eff = from_dict(data, f"{where} (packaged {name})")
    if notes:
        eff = dataclasses.replace(eff, source=f"{eff.source} [{'; '.join(notes)}]")
    return eff


def _from_path(gpu: GpuSpec, p: Path, where: str) -> Efficiencies:
    """A calibration file given by path: the families it lacks keep the v0 figures, not what ``auto``
    gives ``gpu`` (a shipped file named by path prices unlike ``auto``: the H100's lacks the
    bandwidth-bound kernels, which ``auto`` takes from the A100), so its ``source`` names them."""
    raw = _raw(p, where)
    eff = from_dict(dict(raw), f"{where}: {p}")
    lacking = [f for f in FAMILIES if f not in raw and f != "overhead" and f not in _v0_named(eff.source)
               and (f != "gemm_fp8" or gpu.fp8_flops > 0) and (f != "allreduce_custom" or gpu.peer_link)]
    if not lacking:
        return eff
    return dataclasses.replace(eff, source=f"{eff.source} [v0 figures: {', '.join(lacking)} (not in {p.name}; "
                                           "cost.calibration auto would fill them from a calibrated GPU)]")


def _v0_named(source: str) -> set:
    """Families a calibration's ``source`` already says are at the v0 figures (``servesim calibrate``
    writes 'not measured, v0 figures: a, b' or 'attention not measured (v0 values)')."""
    named = set()
    if "v0 figures: " in source:
        named |= {f.strip(" ;]") for f in source.split("v0 figures: ", 1)[1].split(";", 1)[0].split(",")}
    if "attention not measured (v0 values)" in source:
        named.add("attention")
    return named


def today() -> str:
    return date.today().isoformat()
