"""``servesim validate-run``: a vLLM serving benchmark's result (or a table of measured requests)
replayed through a scenario."""

from __future__ import annotations

import shutil
from pathlib import Path

from servesim.cli.main import _naming, _progress_bar, _writable_dir
from servesim.errors import InputError


def cmd_validate_run(args) -> int:
    from servesim.inputs.request_log import parse_columns
    from servesim.studies.validate_run import METRICS, calibration_text, failed_text, other_model, validate_run

    columns = parse_columns(args.columns)
    made = not Path(args.out).exists()
    out = _writable_dir(args.out, "--out")
    update, close = _progress_bar(args.quiet)
    try:
        with _naming(args.scenario, (args.result,)):
            r = validate_run(args.result, args.scenario, out, args.set or [], args.seed, progress=update,
                             columns=columns, time_unit=args.time_unit)
    except (InputError, OSError):
        if made:  # (a bad benchmark file or scenario leaves no empty output folder behind)
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        close()
    q = r["requests"]
    print(f"{r['model']} on {r['gpus']} x {r['gpu']}, {r['policy']}: replayed {q['replayed']} requests of "
          f"{args.result} ({q['failed']} failed there); arrivals: {r['arrivals']}")
    if q["failed_requests"]:  # (the first few, with why they failed)
        print(f"failed there (left out): {failed_text(q)}")
    if r["columns"]:
        print("columns: " + ", ".join(f"{k} = {v}" for k, v in r["columns"].items()))
    print(f"calibration: {calibration_text(r['calibration'])}")
    if other_model(r):  # (report.md's note; a vllm-h100 result replayed on the default scenario said nothing here)
        print(f"note: the benchmark ran {r['result_model_id']} (its model_id), the scenario simulates {r['model']}: "
              "check the scenario's model (a served model name may differ from the checkpoint's)")
    for w in r.get("warnings") or ():
        print(f"warning: {w}")
    print(f"\n{'metric':<8}{'':>10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}   (ms; error = sim / measured - 1)")
    for k, name in METRICS.items():
        m = r["metrics"][k]
        if "mean" not in m:
            print(f"{name:<8}no samples")
            continue
        for side, key in (("measured", "measured_s"), ("simulated", "simulated_s")):
            print(f"{name if side == 'measured' else '':<8}{side:>10}"
                  + "".join(f"{m[s][key] * 1e3:10.1f}" for s in ("mean", "p50", "p90", "p99")))
        print(f"{'':<8}{'error':>10}" + "".join(f"{m[s]['error'] * 100:+9.1f}%" if m[s]["error"] is not None
                                               else f"{'-':>10}" for s in ("mean", "p50", "p90", "p99")))
    t = r["throughput"]
    mt = t["measured"]["output_tokens_per_s"]
    print(f"\noutput tok/s: measured {'-' if mt is None else f'{mt:.0f}'}, simulated "
          f"{t['simulated']['output_tokens_per_s']:.0f}")
    print(f"\nwrote {out}/report.md, validation.json, qq.png, cdf.png, scenario.yaml, {r['replay']}, run/")
    return 0
