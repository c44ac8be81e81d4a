"""Capacity with a confidence interval over workload seeds: ``capacity_interval``.

One capacity search sees one draw of the workload (the scenario's seed fixes every arrival and
length). ``capacity_interval`` runs ``find_capacity`` once per seed and returns the mean with a
two-sided Student-t interval across the seeds (95% by default): with n seeds,
``mean +- t(0.975, n - 1) x sd / sqrt(n)``, widened to hold every seed's search bracket (from the
highest rate that met to the lowest that failed above it: a search's resolution, ``--tol``). One
seed gives the bracket alone.

This is the one place ``servesim plan`` takes its intervals from (a fixed list of seeds, each
search in its own folder, the interval widened to every seed's bracket); ``servesim capacity``
adds seeds until the half-width is small enough (``servesim.studies.capacity.capacity_interval``).
Both take Student's t from ``servesim.outputs.intervals``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from servesim.studies.capacity import CapacityOptions, find_capacity, seeds_note
from servesim.studies.executors import ExecutorOptions


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval and the samples it came from."""

    estimate: float
    low: float
    high: float
    samples: tuple = ()
    confidence: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def scaled(self, k: float) -> "Interval":
        return Interval(self.estimate * k, self.low * k, self.high * k, tuple(x * k for x in self.samples),
                        self.confidence)


def t_interval(samples, confidence: float = 0.95) -> Interval:
    """Mean and two-sided Student-t interval of ``samples`` (one sample: no interval): the
    study-wide interval (``servesim.outputs.intervals.t_interval``) as an estimate with its ends."""
    from servesim.outputs.intervals import t_interval as student_t

    xs = tuple(float(x) for x in samples)
    iv = student_t(xs, confidence)
    if len(xs) < 2:
        return Interval(iv.mean, iv.mean, iv.mean, xs, confidence)
    return Interval(iv.mean, iv.mean - iv.half, iv.mean + iv.half, xs, confidence)


@dataclass
class CapacityInterval:
    """``capacity_interval``'s result: the interval, each seed's search and whether all confirmed."""

    interval: Interval
    seeds: list
    per_seed: list = field(default_factory=list)  # CapacityResult per seed
    done: bool = True  # every seed's search confirmed its answer (else some give only a bracket floor)

    @property
    def too_short(self) -> str | None:
        """The first seed's note that its answer is a lower bound (probes above it too short to
        tell whether the deployment keeps up: ``CapacityResult.too_short``), else None."""
        return next((f"seed {k}: {r.too_short}" for k, r in zip(self.seeds, self.per_seed) if r.too_short), None)

    @property
    def filling(self) -> str | None:
        """The first seed's warning that the keep-up rule set its answer on probes too short for the
        batch to fill (``CapacityResult.filling``: the capacity may be well above it), saying on how
        many seeds it held, as ``servesim capacity`` prints it; else None."""
        return seeds_note(self.seeds, self.per_seed, "filling")


def capacity_interval(scenario, slo_text: str, seeds, opts: CapacityOptions = CapacityOptions(),
                      out: str | Path | None = None, overrides=(), ex: ExecutorOptions = ExecutorOptions(),
                      confidence: float = 0.95) -> CapacityInterval:
    """``find_capacity`` of ``scenario`` (a file or scenario data) once per seed of ``seeds``
    (each seed's probes in ``out/seed-<s>/`` when ``out`` is given), and the t-interval of the
    capacities across seeds. A seed whose search ran out of probes contributes its bracket's
    floor (``done`` is then False). Every seed's search starts from ``opts.start_rps``: one that
    started from the previous seed's answer stopped elsewhere in its bracket, so a seed's answer
    hung on the seed before it (seeds are exchangeable only if each is searched the same way)."""
    results = []
    for s in seeds:
        where = None if out is None else Path(out) / f"seed-{s}"
        results.append(find_capacity(scenario, slo_text, opts, where, overrides, s, ex))
    caps = [r.capacity_rps for r in results]
    iv = t_interval(caps, confidence)
    # a search resolves its seed's capacity only to its bracket [met, failed): keep every bracket inside
    tops = [hi for r in results for hi in [r.search.bracket()[1] or r.above_rps] if hi is not None]
    iv = replace(iv, low=min([iv.low, *caps]), high=max([iv.high, *tops]))
    return CapacityInterval(iv, list(seeds), results, all(r.done for r in results))
