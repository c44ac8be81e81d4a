"""Figures from results. Functions take results (or their columns) and a matplotlib Axes and
return the Axes; none of them runs a simulation."""

from plots.latency import latency_cdf, step_timeline

__all__ = ["latency_cdf", "step_timeline"]
