"""Figures of ``servesim reproduce``: each function takes an experiment's figure data (a dict
computed by ``servesim.studies.reproduce``) and a matplotlib Axes, draws, and returns the Axes. No
simulation here."""

from __future__ import annotations

import textwrap


def attainment_curves(data, ax):
    """SLO attainment (%) against the per-GPU request rate, one line per system (``series``: label,
    rates, attainment shares, and optionally ``measured``: a published curve, drawn dashed, and
    ``band``: a (low, high) share per rate, shaded: the seeds' spread), the attainment target
    dashed, and each goodput (where a curve falls through the target) marked."""
    target = 100 * data["target"]
    for s in data["series"]:
        y = [100 * a for a in s["attainment"]]
        style = dict(linestyle="--", marker="x") if s.get("measured") else dict(linestyle="-", marker="o")
        (line,) = ax.plot(s["rates"], y, markersize=4, label=s["label"], **style)
        if s.get("band"):
            ax.fill_between(s["rates"], [100 * lo for lo, _ in s["band"]], [100 * hi for _, hi in s["band"]],
                            color=line.get_color(), alpha=0.15, linewidth=0)
        if s.get("goodput") is not None:
            ax.plot([s["goodput"]], [target], marker="v", markersize=9, color=line.get_color(), linestyle="none")
            ax.annotate(f"{s['goodput']:.2g}", (s["goodput"], target), textcoords="offset points", xytext=(3, 6),
                        fontsize=7, color=line.get_color())
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("per-GPU rate (req/s)")
    ax.set_ylabel("SLO attainment (% of requests)")
    low = min(100 * a for s in data["series"] for a in [*s["attainment"], *(lo for lo, _ in s.get("band") or ())])
    ax.set_ylim(max(0, 10 * (low // 10) - 10), 102)
    ax.set_xlim(left=0)
    # (each line wrapped to the panel: a 9-point line of 130 characters ran past a 7-inch figure's edges)
    fig = ax.get_figure()
    width = max(40, int(12 * fig.get_figwidth() / max(1, len(fig.axes))))  # (characters; panels side by side)
    ax.set_title("\n".join(textwrap.fill(line, width) for line in data["title"].split("\n")), fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    return ax
