"""``servesim report DIR``: figures (PNG + SVG) and report.md from a run, sweep, capacity, compare or
plan folder."""

from __future__ import annotations

from pathlib import Path

from servesim.errors import InputError


def cmd_report(args) -> int:
    path = Path(args.dir)
    if not path.is_dir():
        raise InputError(f"servesim report: {args.dir!r} is not a folder")
    from servesim.outputs.plandoc import PLAN_JSON

    if (path / PLAN_JSON).is_file():
        from servesim.plots.plan_report import build_plan_report

        try:
            out = build_plan_report(path)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            # (plan.json's top level is checked by read_plan; an edited candidate fails here)
            raise InputError(f"{path / PLAN_JSON}: damaged (edited): {type(e).__name__}: {e}; run servesim plan "
                             "again") from None
    else:
        from servesim.plots.report import build_report  # matplotlib only here, never in the engine

        out = build_report(path, progress=not args.quiet)
    drew = any((path / "figures").glob("*.png")) if (path / "figures").is_dir() else False
    print(f"wrote {out}" + (f" and {path / 'figures'}/*.png, *.svg" if drew else " (no figures: nothing to draw)"))
    return 0

