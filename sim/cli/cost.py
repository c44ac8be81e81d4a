"""``servesim cost``: one step's cost; ``servesim calibrate`` and ``servesim validate-cost``: fit
the cost model's efficiencies to measured kernel timings, and report how well a calibration
predicts them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servesim.errors import InputError
from servesim.outputs.wording import plural

# sequences in one step: far beyond any max_num_seqs (each is priced one by one)
MAX_DECODE_BATCH = 1 << 20


def cmd_cost(args) -> int:
    from servesim.core.batch import model_batch
    from servesim.inputs.specs import activation_dtype, dtype_error, get_gpu, get_model, tp_error

    model = get_model(args.model, "--model")
    gpu = get_gpu(args.gpu, "--gpu")
    bad_dtype = dtype_error(gpu, args.dtype, "--dtype")
    if bad_dtype:
        raise InputError(bad_dtype)
    if args.device is not None and not args.profiles:
        raise InputError(f"--device {args.device!r} names a device folder of --profiles; give --profiles DIR too "
                         "(without it the cost is the roofline's, and --device would change nothing)")
    bad_tp = tp_error(model, args.tp, args.expert_parallel)
    if bad_tp:
        raise InputError(f"--tp {args.tp} {bad_tp}")
    if args.expert_parallel and not model.is_moe:
        raise InputError(f"--expert-parallel: {model.name} is a dense model (expert parallelism needs a "
                         "mixture-of-experts model)")
    if args.pp < 1 or args.pp > model.num_layers:
        raise InputError(f"--pp {args.pp} must be between 1 and the model's {model.num_layers} layers")
    if args.prefill is not None:
        if args.prefill < 1 or args.context < 0:
            raise InputError("--prefill must be >= 1 and --context >= 0")
        if args.prefill + args.context > model.max_context_tokens:
            raise InputError(f"--prefill + --context = {args.prefill + args.context} tokens exceeds {model.name}'s "
                             f"context length {model.max_context_tokens}")
        step = {"prefill": [(args.prefill, args.context)]}
        what = f"prefill of {args.prefill} tokens"
        if args.context:
            what += f" after {args.context} cached"
    else:
        if not 1 <= args.decode_batch <= MAX_DECODE_BATCH or args.context < 0:
            raise InputError(f"--decode-batch must be between 1 and {MAX_DECODE_BATCH} and --context >= 0")
        if args.context + 1 > model.max_context_tokens:
            raise InputError(f"--context {args.context} + the decoded token exceeds {model.name}'s context length "
                             f"{model.max_context_tokens}")
        step = {"decode_contexts": [args.context] * args.decode_batch}
        what = f"decode step of {args.decode_batch} sequences at context {args.context}"
    batch = model_batch(model, **step)
    from servesim.cost.calibration import efficiencies_for

    measured = None
    if args.profiles:
        from servesim.cost.measured import load_measured

        measured = load_measured(args.profiles, model, args.tp, gpu, args.dtype, args.device, "--profiles")
    from servesim.cost.engines import cost_model_for
    from servesim.cost.engines import padded_tokens as engines_padded

    eff = efficiencies_for(gpu, args.calibration, "--calibration")
    cm, engine = cost_model_for(model, gpu, eff, args.tp, args.engine, 256, where="--engine", pp=args.pp,
                                dtype=args.dtype, kv_dtype=args.kv_dtype or activation_dtype(args.dtype),
                                measured=measured, allreduce=args.allreduce, expert_parallel=args.expert_parallel)
    c = cm.step_time(batch)
    ops = cm.breakdown(batch)
    tokens = batch.num_tokens + batch.padding_tokens
    graph = engines_padded(cm.graph_sizes, tokens) if cm.graph_mixed or not batch.prefill_tokens else None
    stages = cm.stage_times(c, batch)
    ai = c.arithmetic_intensity
    ridge = cm.peak_flops / gpu.mem_bw_bytes_per_s
    stage_gib = max(cm.stage_weight_bytes()) / args.tp / 2**30
    fits = stage_gib < gpu.mem_bytes / 2**30
    # the KV this step reads and writes (each sequence's cached and new tokens, a sliding window's
    # at most) on one GPU of the fullest stage: a decode step of 100,000 sequences was priced as if
    # terabytes of KV sat next to the weights
    window = model.sliding_window_tokens
    per_seq = ([args.prefill + args.context] if args.prefill is not None else [args.context + 1] * args.decode_batch)
    kv_tokens = sum(min(t, window) if window else t for t in per_seq)
    kv_gib = kv_tokens * cm.kv_bytes_per_token_per_gpu() / 2**30
    step_fits = stage_gib + kv_gib < gpu.mem_bytes / 2**30
    if args.json:
        print(json.dumps({
            "step_time_s": c.time_s, "flops": c.flops, "bytes": c.bytes, "arithmetic_intensity": ai,
            "ridge_flops_per_byte": ridge, "compute_s": c.compute_s, "memory_s": c.memory_s,
            "bound": c.bound, "mfu": cm.mfu(c), "mbu": cm.mbu(c), "weights_gib_per_gpu": stage_gib,
            "weights_fit": fits, "kv_gib_per_gpu": kv_gib, "memory_fit": step_fits,
            "num_layers": model.num_layers,
            "ops": {k: v._asdict() for k, v in ops.items()},
            "measured_ops": None if measured is None else {"source": measured.source, "ops": list(measured.ops)},
            "pp_stage_times_s": stages,
            "engine": engine.profile.name, "cuda_graph_tokens": graph,
        }, indent=2))
        return 0
    print(f"{model.name} on {args.tp} x {args.pp} x {gpu.name} (TP x PP): {what}" if args.pp > 1 else
          f"{model.name} on {args.tp} x {gpu.name}: {what}")
    print(f"step {c.time_s * 1e3:.3f} ms, {c.flops / 1e12:.3f} TFLOP, {c.bytes / 1e9:.3f} GB, "
          f"MFU {cm.mfu(c) * 100:.1f}%, MBU {cm.mbu(c) * 100:.1f}%")
    # the bound compares the operators' compute and memory times at the fitted efficiencies (tile
    # padding and kernels' share of peak included), so near the datasheet ridge it can be either
    print(f"arithmetic intensity {ai:.1f} FLOP/byte ({'above' if ai > ridge else 'below'} the datasheet ridge "
          f"{ridge:.1f}); at the fitted efficiencies the operators' compute time is {c.compute_s * 1e3:.3f} ms and "
          f"memory time {c.memory_s * 1e3:.3f} ms: {c.bound}-bound")
    if not fits:
        print(f"note: {stage_gib:.1f} GiB of weights per GPU exceed the {gpu.name}'s {gpu.mem_bytes / 2**30:.0f} GiB: "
              "this step could not run there (raise --tp or --pp)")
    elif not step_fits:
        print(f"note: {stage_gib:.1f} GiB of weights and {kv_gib:.1f} GiB of this step's KV cache per GPU exceed the "
              f"{gpu.name}'s {gpu.mem_bytes / 2**30:.0f} GiB: this step could not run there (fewer sequences or "
              "tokens, or raise --tp or --pp)")
    from servesim.inputs.specs import model_note

    note = model_note(args.model, "--model", args.dtype, "--dtype")
    if note:
        print(f"note: {note}")
    if args.pp > 1:
        win = cm.stage_window_layers() or [None] * args.pp  # (a window on some layers: how many each holds)
        held = ", ".join(f"{i + 1}: {t * 1e3:.3f} ms ({n} layers" + (")" if w is None else f", {w} of them windowed)")
                         for i, (t, n, w) in enumerate(zip(stages, cm.stage_layers(), win)))
        slow = max(range(args.pp), key=lambda i: stages[i])
        print(f"pipeline: the step holds stage {held}; stage 1 also embeds, the last runs the LM head, each but "
              f"the last sends to the next. Stage {slow + 1} is the slowest: with overlapping micro-batches "
              "(hardware.pp_overlap) it bounds the replica's step rate")
    print(f"engine {engine.profile.name} (max_num_seqs 256): " + (
        f"a CUDA graph of {graph} tokens" + (f" (padded from {tokens})" if graph != tokens else "") if graph else
        "no CUDA graph (the CPU's kernel launches can pace the GPU)")
        + f"; CPU {cm._overhead_s(batch.num_seqs, batch.num_tokens) * 1e3:.3f} ms per step, "
        f"{c.overhead_s * 1e3:.3f} ms of it not hidden under the GPU (overlap {cm.overlap:g})")
    if measured is not None:
        print(f"priced from measurements ({measured.source}): {', '.join(measured.ops)}; "
              "FLOPs, bytes and bounds from the model")
    print()
    print(f"{'operator':<12}{'time ms':>10}{'share':>8}{'GFLOP':>12}{'MB':>12}  bound")
    for k, v in ops.items():
        print(f"{k:<12}{v.time_s * 1e3:>10.3f}{100 * v.time_s / c.time_s:>7.1f}%{v.flops / 1e9:>12.2f}"
              f"{v.bytes / 1e6:>12.2f}  {v.bound}")
    return 0


def _profiles(args):
    from servesim.cost.fitting import check_units
    from servesim.cost.profiles import find_profiles
    from servesim.inputs.specs import get_gpu

    gpu = get_gpu(args.gpu, "--gpu")
    if args.max_tokens < 1:
        raise InputError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    prof = find_profiles(args.profiles, gpu.name, args.device, args.node)
    check_units(prof, gpu)  # (times in seconds or microseconds would fit, and write, a calibration of nothing)
    if prof.compute:
        first = min(prof.compute, key=lambda p: p.tokens.min())
        if args.max_tokens < first.tokens.min():  # (no compute row left to validate)
            raise InputError(f"--max-tokens {args.max_tokens} is below every measured token count: the smallest "
                             f"is {int(first.tokens.min())}, in {first.path}")
    return gpu, prof


def _summary_rows(rows, detail: bool):
    keep = []
    for r in rows:
        if r["model"] == "all" or r["family"] in ("linear", "allreduce", "allreduce_pcie", "send_recv", "overhead") \
                or detail:
            keep.append(r)
    return keep


def _write_if_it_loads(text: str, out: Path) -> None:
    """Write the calibration ``servesim calibrate`` fitted, if it loads as a scenario would load
    it: written beside ``out``, loaded, then moved into place (as sweep and plan files are); else
    an ``InputError`` naming the field, and nothing is written (a file that only fails when a run
    names it is a silent failure)."""
    import os

    from servesim.cost.calibration import load_calibration
    from servesim.errors import InputError

    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    try:
        load_calibration(tmp, "fitted calibration")
    except InputError as e:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{out}: not written: the fit gave a calibration that does not load "
                         f"({str(e).replace(str(tmp), out.name)}); the profiles measure something "
                         "the cost model cannot fit") from None
    os.replace(tmp, out)


def cmd_calibrate(args) -> int:
    from servesim import __version__
    import dataclasses

    from servesim.cost.calibration import FAMILIES, calibration_yaml, carried_families, efficiencies_for, today
    from servesim.cost.efficiency import Efficiencies
    from servesim.cost.fitting import COMM_FIT_FAMILIES
    from servesim.cost.fitting import fit_profiles, fits_fp8
    from servesim.cost.validation import format_table, validate
    from servesim.cli.main import _writable_file

    _writable_file(args.out, "--out")  # (a folder, device or pipe there: refused before the fit)
    gpu, prof = _profiles(args)
    eff = fit_profiles(prof, gpu)
    carried = efficiencies_for(gpu, "auto")
    fp8_fitted = fits_fp8(prof.fp8, gpu)  # fit_profiles fitted gemm_fp8 from them
    keep = tuple(f for f in carried_families(gpu) if not (f == "gemm_fp8" and fp8_fitted))
    v0 = Efficiencies()
    # families neither measured here nor carried over: loaded from the file (a path), they are the
    # v0 figures, not what `auto` gives this GPU (the H100's GEMMs from a collectives-only fit): say so
    unfitted = [f for f in FAMILIES if f != "overhead" and f not in keep and getattr(eff, f) == getattr(v0, f)
                and (f != "gemm_fp8" or gpu.fp8_flops > 0) and (f != "allreduce_custom" or gpu.peer_link)]
    eff = dataclasses.replace(eff, **{f: getattr(carried, f) for f in keep})
    if unfitted:
        eff = dataclasses.replace(eff, source=eff.source.replace("; attention not measured (v0 values)", "")
                                  + f"; not measured, v0 figures: {', '.join(unfitted)}")
    v = validate(prof, gpu, eff, args.max_tokens)
    quality = {}
    for r in v["rows"]:
        # every family's overall error; collectives' also per message-size range (model "<node> <range>")
        if r["model"] == "all":
            key = r["family"]
        elif r["tp"] == "all" and r["family"] in COMM_FIT_FAMILIES:
            key = f"{r['family']} {r['model'].split(' ', 1)[1]}"
        else:
            continue
        quality[key] = {"mape": round(r["mape"], 4), "worst": round(r["worst"], 4), "points": r["points"]}
    files = [str(p.path.relative_to(Path(args.profiles))) if Path(args.profiles) in p.path.parents else str(p.path)
             for p in prof.compute]
    prov = (f"servesim {__version__} calibration for {gpu.name}, fitted by `servesim calibrate` on {today()}\n"
            + (f"from {plural(len(files), 'compute profile')} under {args.profiles}: {', '.join(files)}\n" if files
               else f"from the network timings under {args.profiles} (no compute profiles for this GPU)\n")
            + (f"all-reduce: network/{prof.allreduce[0]}/all_reduce.csv (intra-node rows on the peer link)\n"
               if prof.allreduce else "")
            + (f"all-reduce over PCIe: network/{prof.allreduce_pcie[0]}/all_reduce.csv (rows beyond its NVLink pairs)\n"
               if prof.allreduce_pcie else "")
            + (f"send/recv: network/{prof.send_recv[0]}/send_recv.csv (intra-node rows)\n" if prof.send_recv else "")
            + (f"attention: {plural(len(prof.attention), 'attention.csv file')}\n" if prof.attention else "")
            + (f"per-step CPU overhead: {', '.join(str(c.path) for c in prof.cpu)}\n" if prof.cpu else "")
            + (f"FP8 GEMMs: {plural(len(prof.fp8), 'fp8_gemm.csv file')}\n" if fp8_fitted else "")
            + (f"{', '.join(keep)}: not measured by these profiles; carried over from this GPU's current "
               f"efficiencies ({carried.source})\n" if keep else "")
            + "Fit: scipy least_squares on log(predicted) - log(measured); models in sim/cost/efficiency.py.\n"
            + "fit_quality: |predicted/measured - 1| over num_tokens <= "
            + f"{args.max_tokens} (linear = per-layer QKV+O+up+down).")
    if args.note:
        prov += "\n" + args.note
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    _write_if_it_loads(calibration_yaml(eff, gpu, prov, quality), out)
    print(f"calibrated {gpu.name} from {plural(len(prof.compute), 'compute profile')}; wrote {out}")
    if unfitted:
        differ = [f for f in unfitted if getattr(carried, f) != getattr(v0, f)]
        print(f"note: not measured by these profiles: {', '.join(unfitted)}. A run naming this file prices them "
              "with the v0 figures (cost.calibration: none's)"
              + (f"; with cost.calibration: auto the {gpu.name} takes other figures for "
                 + ("all of them" if differ == unfitted else ", ".join(differ)) if differ else ""))
    if prof.fp8 and not fp8_fitted:
        print(f"note: {plural(len(prof.fp8), 'fp8_gemm.csv file')} not used: {gpu.name} has no FP8 tensor cores "
              "(fp8_flops 0), so FP8 weights run at its 16-bit peak")
    for fam in FAMILIES:
        if getattr(eff, fam) is not None and getattr(eff, fam) != getattr(Efficiencies(), fam):  # the fitted ones
            print(f"  {fam:<17}{getattr(eff, fam)}")
    print()
    print(format_table(_summary_rows(v["rows"], False)))
    return 0


def cmd_validate_cost(args) -> int:
    from servesim.cost.calibration import efficiencies_for
    from servesim.cost.validation import (format_table, plot_predicted_vs_measured, validate, validate_held_out_models,
                                     validate_measured)

    from servesim.outputs.progress import Phases

    from servesim.cli.main import _writable_dir

    if args.measured and args.held_out_models:
        raise InputError("--measured and --held-out-models are two different checks: give one")
    out = _writable_dir(args.out, "--out")  # (before the work, not after)
    bar = Phases(not args.quiet, "validate-cost", 2)  # progress on stderr, closed before the table
    try:
        gpu, prof = _profiles(args)
        if (args.measured or args.held_out_models) and not prof.compute:
            flag = "--measured" if args.measured else "--held-out-models"
            raise InputError(f"{flag} checks the per-layer kernels of compute profiles (mlp.csv), and "
                             f"{args.profiles} has none for {gpu.name}, only network timings: leave {flag} out "
                             "to validate the collectives")
        eff = efficiencies_for(gpu, args.calibration, "--calibration")
        bar.step("profiles read")
        if args.measured:
            v = validate_measured(prof, gpu, eff, args.max_tokens)
            what = "priced from the other measurements (cost.profiles, leave one out)"
        elif args.held_out_models:
            bar.add(len({p.model for p in prof.compute}) - 1)
            v = validate_held_out_models(prof, gpu, args.max_tokens, lambda m: bar.step(f"{m} held out"))
            what = "each model predicted by a fit to the other models' profiles (leave one model out)"
        else:
            v = validate(prof, gpu, eff, args.max_tokens)
            what = f"efficiencies: {eff.source}"
        if not args.held_out_models:
            bar.step("validated")
    finally:
        bar.close()
    if not v["rows"]:  # (--measured prices a point from 2 others of its operator: each needs 3 token counts)
        raise InputError(f"--profiles: nothing to validate under {args.profiles} for {gpu.name} "
                         + ("(--measured needs at least 3 token counts of an operator at one TP size)"
                            if args.measured else "(no measurement the cost model prices)"))
    # (--max-tokens bounds the kernels' token counts: collectives go by message size, and a
    # network-only folder's figure has no token count to bound)
    from servesim.cost.fitting import COMM_FIT_FAMILIES

    within = f", num_tokens <= {args.max_tokens}" if set(v["points"]) - set(COMM_FIT_FAMILIES) else ""
    print(f"{gpu.name}: predicted vs measured{within}; {what}\n")
    print(format_table(_summary_rows(v["rows"], args.detail)))
    mode = "measured" if args.measured else "held-out-models" if args.held_out_models else "calibration"
    from servesim.outputs.writer import name_part

    # (a GPU YAML's name may hold a path's separators: the files stay in --out)
    stem = f"validate-cost-{name_part(gpu.name)}" + ("" if mode == "calibration" else f"-{mode}")
    (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu.name, "mode": mode, "calibration": args.calibration,
                                                  "source": eff.source if mode == "calibration" else what,
                                                  "max_tokens": args.max_tokens, "rows": v["rows"]}, indent=1))
    title = {"measured": "priced from measurements, leave one out",
             "held-out-models": "fit without the model, leave one model out"}.get(mode,
                                                                                  f"calibration {args.calibration}")
    if not args.quiet:  # the plot takes seconds (matplotlib)
        print(f"validate-cost: drawing {out / (stem + '.png')} ...", file=sys.stderr, flush=True)
    plot_predicted_vs_measured(v["points"], f"{gpu.name}, {title}{within}",
                               out / f"{stem}.png")
    print(f"\nwrote {out / (stem + '.json')}, {out / (stem + '.png')}")
    return 0

