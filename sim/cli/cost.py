"""``servesim calibrate`` and ``servesim validate-cost``: fit the cost model's efficiencies to
measured kernel timings, and report how well a calibration predicts them."""

from __future__ import annotations

import json
from pathlib import Path

from servesim.errors import InputError


def _profiles(args):
    from servesim.cost.profiles import find_profiles
    from servesim.inputs.specs import get_gpu

    gpu = get_gpu(args.gpu, "--gpu")
    if args.max_tokens < 1:
        raise InputError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    return gpu, find_profiles(args.profiles, gpu.name, args.device, args.node)


def _summary_rows(rows, detail: bool):
    keep = []
    for r in rows:
        if r["model"] == "all" or r["family"] in ("linear", "allreduce", "send_recv", "overhead") or detail:
            keep.append(r)
    return keep


def cmd_calibrate(args) -> int:
    from servesim import __version__
    from servesim.cost.calibration import FAMILIES, calibration_yaml, today
    from servesim.cost.fitting import fit_profiles
    from servesim.cost.validation import format_table, validate

    gpu, prof = _profiles(args)
    eff = fit_profiles(prof, gpu)
    v = validate(prof, gpu, eff, args.max_tokens)
    quality = {}
    for r in v["rows"]:
        if r["model"] == "all":
            quality[r["family"]] = {"mape": round(r["mape"], 4), "worst": round(r["worst"], 4), "points": r["points"]}
    files = [str(p.path.relative_to(Path(args.profiles))) if Path(args.profiles) in p.path.parents else str(p.path)
             for p in prof.compute]
    prov = (f"servesim {__version__} calibration for {gpu.name}, fitted by `servesim calibrate` on {today()}\n"
            f"from {len(files)} compute profile(s) under {args.profiles}: {', '.join(files)}\n"
            + (f"all-reduce: network/{prof.allreduce[0]}/all_reduce.csv (intra-node rows)\n" if prof.allreduce else "")
            + (f"send/recv: network/{prof.send_recv[0]}/send_recv.csv (intra-node rows)\n" if prof.send_recv else "")
            + (f"attention: {len(prof.attention)} attention.csv file(s)\n" if prof.attention else "")
            + (f"per-step CPU overhead: {', '.join(str(c.path) for c in prof.cpu)}\n" if prof.cpu else "")
            + "Fit: scipy least_squares on log(predicted) - log(measured); models in sim/cost/efficiency.py.\n"
            + "fit_quality: |predicted/measured - 1| over num_tokens <= "
            + f"{args.max_tokens} (linear = per-layer QKV+O+up+down).")
    if args.note:
        prov += "\n" + args.note
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(calibration_yaml(eff, gpu, prov, quality))
    print(f"calibrated {gpu.name} from {len(prof.compute)} compute profile(s); wrote {out}")
    for fam in FAMILIES:
        if getattr(eff, fam) is not None:
            print(f"  {fam:<11}{getattr(eff, fam)}")
    print()
    print(format_table([r for r in v["rows"] if r["model"] == "all"]))
    return 0


def cmd_validate_cost(args) -> int:
    from servesim.cost.calibration import efficiencies_for
    from servesim.cost.validation import (format_table, plot_predicted_vs_measured, validate, validate_held_out_models,
                                     validate_measured)

    gpu, prof = _profiles(args)
    eff = efficiencies_for(gpu, args.calibration, "--calibration")
    if args.measured and args.held_out_models:
        raise InputError("--measured and --held-out-models are two different checks: give one")
    if args.measured:
        v = validate_measured(prof, gpu, eff, args.max_tokens)
        what = "priced from the other measurements (cost.profiles, leave one out)"
    elif args.held_out_models:
        v = validate_held_out_models(prof, gpu, args.max_tokens)
        what = "each model predicted by a fit to the other models' profiles (leave one model out)"
    else:
        v = validate(prof, gpu, eff, args.max_tokens)
        what = f"efficiencies: {eff.source}"
    print(f"{gpu.name}: predicted vs measured, num_tokens <= {args.max_tokens}; {what}\n")
    print(format_table(_summary_rows(v["rows"], args.detail)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = "measured" if args.measured else "held-out-models" if args.held_out_models else "calibration"
    stem = f"validate-cost-{gpu.name}" + ("" if mode == "calibration" else f"-{mode}")
    (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu.name, "mode": mode, "calibration": args.calibration,
                                                  "source": eff.source if mode == "calibration" else what,
                                                  "max_tokens": args.max_tokens, "rows": v["rows"]}, indent=1))
    title = {"measured": "priced from measurements, leave one out",
             "held-out-models": "fit without the model, leave one model out"}.get(mode, f"calibration {args.calibration}")
    plot_predicted_vs_measured(v["points"], f"{gpu.name}, {title}, num_tokens <= {args.max_tokens}", out / f"{stem}.png")
    print(f"\nwrote {out / (stem + '.json')}, {out / (stem + '.png')}")
    return 0


def _common(p):
    p.add_argument("--profiles", required=True, metavar="DIR",
                   help="Vidur-format profiling folder (compute/<device>/<org>/<model>/mlp.csv, network/<node>/)")
    p.add_argument("--gpu", required=True, help="catalog GPU (or GPU YAML) the measurements were taken on")
    p.add_argument("--device", help="device folder under compute/ (default: from the GPU name, e.g. a100)")
    p.add_argument("--node", help="network folder for collectives (default: <device>_*, a DGX one first)")
    p.add_argument("--max-tokens", type=int, default=4096, help="validate over num_tokens <= this (default 4096)")


def register(sub) -> None:
    """Add ``calibrate`` and ``validate-cost`` to the ``servesim`` subparsers."""
    c = sub.add_parser("calibrate", help="fit the cost model's efficiencies to measured kernel timings")
    _common(c)
    c.add_argument("--out", required=True, metavar="FILE", help="calibration YAML to write")
    c.add_argument("--note", help="a line of provenance to add to the file's header comment")
    c.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("validate-cost", help="predicted vs measured operator times: MAPE and worst case")
    _common(v)
    v.add_argument("--calibration", default="auto",
                   help="auto (shipped fit, or the closest calibrated GPU's) | none (v0 figures) | FILE")
    v.add_argument("--out", default="out", help="folder for the table (JSON) and plot (PNG); default ./out")
    v.add_argument("--detail", action="store_true", help="every family per model and TP, not only totals")
    v.add_argument("--held-out-models", action="store_true",
                   help="validate the fit on models it never saw: each model predicted by a fit to the others "
                        "(leave one model out; --calibration is not used)")
    v.add_argument("--measured", action="store_true",
                   help="validate pricing from the measurements themselves (cost.profiles): each GEMM point "
                        "predicted from the others (leave one out), the error at token counts not profiled")
    v.set_defaults(func=cmd_validate_cost)

