"""``servesim report DIR``: figures (PNG + SVG) and report.md from a run, sweep, capacity, compare or
plan folder."""

from __future__ import annotations

from pathlib import Path

from servesim.errors import InputError


def drew_figures(folder: Path) -> bool:
    """Whether a report in ``folder`` drew any figure (a report may have nothing to draw)."""
    return (folder / "figures").is_dir() and any((folder / "figures").glob("*.png"))


def cmd_report(args) -> int:
    path = Path(args.dir)
    if not path.is_dir():
        from servesim.cli.main import dangling_link

        link = dangling_link(path)
        what = f"is {link}" if link is not None else "does not exist" if not path.exists() else \
            "is a file, not a folder" if path.is_file() else "is not a folder"
        raise InputError(f"servesim report: {args.dir!r} {what}; give the --out folder of servesim run, sweep, "
                         "capacity, compare or plan")
    from servesim.outputs.plandoc import PLAN_JSON
    from servesim.outputs.rundir import read_study_meta
    from servesim.studies.lock import holder

    # (drawn now, the report would call the points still to run stopped, and outlive the study as
    # its report: sweep and capacity write none at their end to replace it)
    who = holder(path)
    if who is not None:
        by = (f" (pid {who.get('pid')} on {who.get('host')}, a {who.get('what', 'study')} started "
              f"{who.get('started', '?')})") if who else ""
        raise InputError(f"servesim report: a servesim study is still writing in {args.dir!r}{by}; run servesim "
                         "report when it has finished (results.csv lists the points finished so far)")

    # (the study that last wrote the folder, by its sweep.json: a sweep, capacity search or comparison
    # run into a plan's folder leaves its plan.json, which is not what the folder now holds)
    if (path / PLAN_JSON).is_file() and read_study_meta(path / "sweep.json").get("kind", "plan") == "plan":
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
    drew = drew_figures(path)
    print(f"wrote {out}" + (f" and {path / 'figures'}/*.png, *.svg" if drew else " (no figures: nothing to draw)"))
    return 0

