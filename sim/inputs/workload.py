"""Workloads: arrival times, request classes and prompt/output lengths, from one seeded numpy Generator.

Draw order is fixed, so a scenario and seed always give the same requests:
arrivals (per class in class order, when classes have their own), then class labels (when
classes share the arrivals), then per class in class order the prompt lengths and the output
lengths, then shared-prefix membership and groups (last, so adding a shared prefix leaves the
other draws unchanged). A plain workload is the one-class case: arrivals, prompts, outputs,
prefixes. Closed-loop workloads draw lengths, prefixes, then think times in chunks in the order
requests are sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servesim.inputs.arrivals import (arrival_times, expected_count,  # noqa: F401  (inter_arrivals: public API)
                                     inter_arrivals)
from servesim.errors import InputError
from servesim.inputs.scenario import (MAX_SECONDS, MAX_TOKENS, ClosedLoopArrival, EmpiricalDist, FixedDist,
                                     LognormalDist, NormalDist, PoissonArrival, QuantilesDist, UniformDist, Workload,
                                     ZipfDist)
from servesim.inputs.datasets import load_dataset
from servesim.inputs.traces import TraceData, read_lengths, read_trace

DEFAULT_CLASS = "default"


@dataclass(frozen=True)
class RequestSpecs:
    """Columns of the requests a workload makes, sorted by arrival (``simulate(specs=...)`` takes
    them from the user): ``arrival_s`` (seconds), ``prompt_tokens``, ``output_tokens``, one value
    per request; optional ``prefix_group`` / ``prefix_tokens`` (a shared prefix: its group, -1 for
    none, and its tokens) and ``class_index`` (an index into ``class_names``, the names of the
    scenario's ``workload.classes``, in any order; None: every request ``default``, for a
    scenario without classes)."""

    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64 (shared prefix included)
    output_tokens: np.ndarray  # int64
    prefix_group: np.ndarray | None = None  # int64, -1 = no shared prefix
    prefix_tokens: np.ndarray | None = None  # int64
    class_index: np.ndarray | None = None  # int per request, into class_names; None: all class 0
    class_names: tuple = (DEFAULT_CLASS,)
    clipped: np.ndarray | None = None  # bool per request: lengths shortened to the context length
    # per request, its prompt's block hash ids (a trace's; empty: none), each naming tag_tokens tokens
    block_tags: tuple | None = None
    tag_tokens: int = 0
    info: dict | None = None  # what summary.json's workload section reports of the source (dataset)
    # the source ran out before workload.duration_s (a trace replay's last row came before it): no
    # more would have arrived, so the run's window ends with its last event, not at duration_s
    source_ended: bool = False

    def __len__(self) -> int:
        return len(self.arrival_s)


def check_specs(specs: RequestSpecs) -> RequestSpecs:
    """Hand-made requests (``simulate(specs=...)``) checked as a workload file's rows are: 1-D
    columns of one length, arrivals finite, >= 0 and sorted, token counts whole numbers from 1 to
    ``MAX_TOKENS`` (a request of 0 output tokens never finished: the run hung), prefixes within
    their prompts, classes among ``class_names``. Lists are taken as arrays. Returns the specs
    with numpy columns; ``InputError`` naming the column and the first bad request otherwise."""
    import dataclasses

    def first(mask):  # the first request a check fails, or None
        idx = np.flatnonzero(mask)
        return int(idx[0]) if len(idx) else None

    def bad(name, i, what):
        return InputError(f"specs.{name}: request {i} {what}")

    n = None
    cols = {}
    for name, dtype in (("arrival_s", np.float64), ("prompt_tokens", np.int64), ("output_tokens", np.int64),
                        ("prefix_group", np.int64), ("prefix_tokens", np.int64), ("class_index", np.int64),
                        ("clipped", bool)):
        raw = getattr(specs, name)
        if raw is None:
            if name in ("arrival_s", "prompt_tokens", "output_tokens"):  # (a KeyError on the name, below)
                raise InputError(f"specs.{name}: a column is needed, one value per request; got None")
            continue
        try:
            a = np.asarray(raw)
        except (TypeError, ValueError) as e:
            raise InputError(f"specs.{name}: not a column of numbers ({e})") from None
        if a.ndim != 1:
            raise InputError(f"specs.{name}: one value per request (a 1-D array), got shape {a.shape}")
        if n is None:
            n = len(a)
        elif len(a) != n:
            raise InputError(f"specs.{name}: {len(a)} values for {n} requests (every column has one per request)")
        if a.dtype.kind not in "biuf" or (dtype is bool and a.dtype.kind != "b"):
            raise InputError(f"specs.{name}: numbers expected, got dtype {a.dtype}")
        if dtype is np.int64 and a.dtype.kind == "f" and (i := first(~np.isfinite(a) | (a != np.rint(a)))) is not None:
            raise bad(name, i, f"has {float(a[i])!r}: a whole number of tokens expected")
        cols[name] = a.astype(dtype) if dtype is not bool else a
    arr, p, o = cols["arrival_s"], cols["prompt_tokens"], cols["output_tokens"]
    if (i := first(~np.isfinite(arr) | (arr < 0))) is not None:
        raise bad("arrival_s", i, f"arrives at {float(arr[i])!r}: a finite time >= 0 expected")
    if (i := first(np.diff(arr) < 0)) is not None:
        i += 1
        raise bad("arrival_s", i, f"arrives at {float(arr[i])!r}, before request {i - 1} ({float(arr[i - 1])!r}): "
                  "requests must be sorted by arrival")
    for name, a in (("prompt_tokens", p), ("output_tokens", o)):
        if (i := first((a < 1) | (a > MAX_TOKENS))) is not None:
            raise bad(name, i, f"has {int(a[i])} tokens: from 1 to {MAX_TOKENS:,} expected")
    pt = cols.get("prefix_tokens")
    if pt is not None and (i := first((pt < 0) | (pt > p))) is not None:
        raise bad("prefix_tokens", i, f"has {int(pt[i])}: from 0 to its prompt's {int(p[i])} tokens expected")
    ci = cols.get("class_index")
    if ci is not None and (i := first((ci < 0) | (ci >= len(specs.class_names)))) is not None:
        raise bad("class_index", i, f"is {int(ci[i])}: an index into class_names {tuple(specs.class_names)} expected")
    return dataclasses.replace(specs, **cols)


def match_classes(specs: RequestSpecs, classes) -> RequestSpecs:
    """Hand-made requests' classes as the scenario's: the engine reads a request's class as an
    index into ``workload.classes`` (its priority, deadline, admission rules and replicas), the
    results by name (``class_names``), so ``class_index`` is renumbered by name into the
    scenario's order. A name the scenario has no class of, or requests without classes on a
    scenario with them, is an ``InputError`` (it ran with another class's priority and deadline,
    or into an IndexError)."""
    import dataclasses

    from servesim.errors import did_you_mean

    names = tuple(c.name for c in classes) if classes else (DEFAULT_CLASS,)
    given = tuple(specs.class_names)
    if given == names:
        return specs
    if specs.class_index is None and classes:
        raise InputError(f"specs.class_index: the scenario has request classes ({', '.join(names)}): give each "
                         "request's class (class_index, an index into class_names, and class_names, the classes' "
                         "names), or run a scenario without workload.classes")
    for name in given:
        if name not in names:
            has = (f"workload.classes: {', '.join(names)}" if classes
                   else f"it has none: every request is {DEFAULT_CLASS!r}")
            raise InputError(f"specs.class_names: {name!r} is no request class of the scenario ({has});"
                             f"{did_you_mean(str(name), names)}")
    index = np.array([names.index(n) for n in given], dtype=np.int64)
    renumbered = index[specs.class_index] if specs.class_index is not None else np.full(len(specs), index[0])
    return dataclasses.replace(specs, class_index=renumbered, class_names=names)


# ---------------------------------------------------------------- lengths
def sample_lengths(dist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts (int64, each >= 1) from a length distribution."""
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.min, dist.max + 1, n, dtype=np.int64)
    # draws of unbounded distributions are clipped to the lengths a request can have before they
    # become integers (a float beyond int64 would wrap to a negative length)
    if isinstance(dist, LognormalDist):
        mu, sigma = dist.log_params()
        x = np.rint(rng.lognormal(mu, sigma, n))
        return np.clip(x, 1, dist.max if dist.max is not None else MAX_TOKENS).astype(np.int64)
    if isinstance(dist, NormalDist):
        x = np.rint(rng.normal(dist.mean, dist.std, n))
        return np.clip(x, dist.min, dist.max if dist.max is not None else MAX_TOKENS).astype(np.int64)
    if isinstance(dist, ZipfDist):
        k = np.arange(dist.min, dist.max + 1, dtype=np.float64)
        # weights relative to the first, (k / min)^-s in (0, 1]: k^-s itself underflows to 0 for
        # every k when min is large (min 20,000, s 100), the CDF became 0/0 and every draw min
        # (min = 1: the same numbers as k^-s)
        cdf = np.cumsum((k / k[0]) ** -dist.s)
        cdf /= cdf[-1]
        idx = np.searchsorted(cdf, rng.random(n), side="right")
        return (dist.min + np.minimum(idx, len(k) - 1)).astype(np.int64)
    if isinstance(dist, EmpiricalDist):
        values = read_lengths(dist.path, dist.column)
        return values[rng.integers(0, len(values), n)]
    if isinstance(dist, QuantilesDist):
        x = np.rint(np.interp(rng.random(n), dist.p, dist.tokens))
        return np.maximum(x, 1).astype(np.int64)
    raise TypeError(f"unknown length distribution {dist!r}")


def mean_length(dist, max_tokens: int = MAX_TOKENS) -> float | None:
    """The mean of a length distribution (its draws clipped to ``max_tokens``, as requests are to
    the context); None when it depends on a file (empirical)."""
    if isinstance(dist, FixedDist):
        m = dist.value
    elif isinstance(dist, UniformDist):
        m = (dist.min + dist.max) / 2
    elif isinstance(dist, LognormalDist):
        mu, sigma = dist.log_params()
        m = math.exp(min(mu + sigma**2 / 2, 700.0))
        if dist.max is not None:
            m = min(m, dist.max)
    elif isinstance(dist, NormalDist):
        m = min(max(dist.mean, dist.min), dist.max if dist.max is not None else MAX_TOKENS)
    elif isinstance(dist, ZipfDist):
        m = dist.min  # at least; the exact mean needs the whole support
    elif isinstance(dist, QuantilesDist):
        p, t = np.asarray(dist.p), np.asarray(dist.tokens)
        m = float(((t[1:] + t[:-1]) / 2 * np.diff(p)).sum())
    else:
        return None
    return float(min(max(m, 1.0), max_tokens))


def expected_requests(workload: Workload) -> float | None:
    """How many requests the workload will make, as far as the scenario alone says (before any
    file is read or anything drawn): ``num_requests``, or the arrivals expected within
    ``duration_s`` (``arrivals.expected_count``) when that is fewer or the only bound; None when it
    cannot say (a closed loop, or a trace replayed without num_requests: the file decides)."""
    w = workload
    n = float(w.num_requests) if w.num_requests is not None else None
    if w.duration_s is None or isinstance(w.arrival, ClosedLoopArrival):
        return n
    if w.arrival is not None:
        by_time = expected_count(w.arrival, w.duration_s)
    elif w.classes and w.trace is None:
        by_time = sum(expected_count(_class_arrival(c), w.duration_s) for c in w.classes)
    else:
        return n
    return by_time if n is None else min(n, by_time)


def mean_output_tokens(workload: Workload, max_context_tokens: int) -> float:
    """The mean output length of the workload's requests where its distributions say (1 where
    files decide: a floor, as ``servesim.resources`` needs)."""
    dists = [c.output_tokens for c in workload.classes or ()] or [workload.output_tokens]
    means = [mean_length(d, max_context_tokens) for d in dists if d is not None]
    means = [m for m in means if m is not None]
    return min(means) if means else 1.0


def clip_to_context(prompt: np.ndarray, output: np.ndarray, max_context_tokens: int):
    """Shorten requests whose prompt + output exceeds the context: the prompt to at most
    context - 1 tokens, then the output to what is left (as a server caps max_tokens).
    Returns (prompt, output, clipped mask)."""
    p = np.minimum(prompt, max(max_context_tokens - 1, 1))  # (never a prompt of 0 tokens)
    o = np.maximum(np.minimum(output, max_context_tokens - p), 1)
    return p, o, (p != prompt) | (o != output)


def dataset_replies(workload: Workload, replies: np.ndarray, rng) -> np.ndarray:
    """A dataset's reply lengths with ``workload.output_tokens`` given: every one replaced by a draw
    for a ShareGPT file (as vLLM's ``--sharegpt-output-len``), only those the rows lack (< 1) for a
    JSONL file, whose rows with a reply keep it."""
    if workload.output_tokens is None:
        return replies
    from servesim.inputs.datasets import dataset_format

    if dataset_format(workload.dataset) != "jsonl":
        return sample_lengths(workload.output_tokens, len(replies), rng)
    missing = np.flatnonzero(replies < 1)
    if not len(missing):
        return replies
    out = np.array(replies, dtype=np.int64)
    out[missing] = sample_lengths(workload.output_tokens, len(missing), rng)
    return out


class Lengths:
    """Draws (class labels, prompt, output) for requests in arrival (or send) order."""

    def __init__(self, workload: Workload, trace: TraceData | None):
        self.w = workload
        self.trace = trace  # a trace's rows, or a dataset's first turns
        self.opts = workload.trace if workload.trace is not None else workload.dataset  # sample, loop
        self.pos = 0  # next trace row, when replaying rows in order
        self.rows = None  # the rows of the last draw (trace rows: their hash ids go with them)
        classes = workload.classes
        self.names = tuple(c.name for c in classes) if classes else (DEFAULT_CLASS,)
        self.dists = ([(c.prompt_tokens, c.output_tokens) for c in classes] if classes
                      else [(workload.prompt_tokens, workload.output_tokens)])
        self.shares = None
        if classes and classes[0].share is not None:
            s = np.array([c.share for c in classes], dtype=np.float64)
            self.shares = s / s.sum()

    @property
    def rows_left(self) -> float:
        if self.trace is None or self.opts.sample or self.opts.loop:
            return float("inf")
        return len(self.trace) - self.pos

    def draw(self, n: int, rng, labels: np.ndarray | None = None):
        if self.trace is not None:
            tr, opts = self.trace, self.opts
            if opts.sample:
                rows = rng.integers(0, len(tr), n)
            else:
                if not opts.loop and self.pos + n > len(tr):
                    which = "trace" if self.w.trace is not None else "dataset"
                    raise InputError(f"workload: {self.pos + n} requests need lengths but {tr.path} has "
                                     f"{len(tr)} rows; set workload.{which}.loop: true or ask for fewer")
                rows = (self.pos + np.arange(n)) % len(tr)
                self.pos += n
            self.rows = rows
            output = tr.output_tokens[rows]
            if self.w.dataset is not None:
                output = dataset_replies(self.w, output, rng)
            return np.zeros(n, np.int64), tr.prompt_tokens[rows], output
        if labels is None:
            labels = (rng.choice(len(self.shares), n, p=self.shares).astype(np.int64) if self.shares is not None
                      else np.zeros(n, np.int64))
        if len(self.dists) == 1:
            p, o = self.dists[0]
            return labels, sample_lengths(p, n, rng), sample_lengths(o, n, rng)
        prompt, output = np.empty(n, np.int64), np.empty(n, np.int64)
        for c, (pd, od) in enumerate(self.dists):
            idx = np.flatnonzero(labels == c)
            prompt[idx] = sample_lengths(pd, len(idx), rng)
            output[idx] = sample_lengths(od, len(idx), rng)
        return labels, prompt, output


def prefix_specs(workload: Workload) -> list:
    """Per class, (SharedPrefix or None, first group id): a class's own ``shared_prefix``, else the
    workload's (whose groups 0..groups-1 every such class shares)."""
    wsp = workload.shared_prefix
    offset = wsp.groups if wsp is not None else 0
    out = []
    for c in workload.classes or (None,):
        own = getattr(c, "shared_prefix", None)
        if own is not None:
            out.append((own, offset))
            offset += own.groups
        else:
            out.append((wsp, 0))
    return out


def add_prefixes(specs: list, labels: np.ndarray, prompt: np.ndarray, rng):
    """Draw shared-prefix membership and groups per class (in class order) and put each member's
    prefix in front of its prompt. Returns (prompt, prefix_group, prefix_tokens), the last two
    None when no class has a shared prefix."""
    if all(sp is None for sp, _ in specs):
        return prompt, None, None
    n = len(prompt)
    group = np.full(n, -1, np.int64)
    prefix = np.zeros(n, np.int64)
    for c, (sp, first) in enumerate(specs):
        if sp is None:
            continue
        idx = np.flatnonzero(labels == c) if len(specs) > 1 else np.arange(n)
        member = rng.random(len(idx)) < sp.fraction
        group[idx] = np.where(member, first + rng.integers(0, sp.groups, len(idx)), -1)
        prefix[idx] = np.where(member, sp.tokens, 0)
    return prompt + prefix, group, prefix


def clip_with_prefix(prompt, output, prefix, max_context_tokens):
    p, o, clipped = clip_to_context(prompt, output, max_context_tokens)
    if prefix is not None:
        prefix = np.minimum(prefix, p)
    return p, o, prefix, clipped


# ---------------------------------------------------------------- traces and datasets
def load_trace(workload: Workload) -> TraceData | None:
    """The rows requests take their lengths from: the trace's, or the dataset's first turns."""
    if workload.dataset is not None:
        rows = load_dataset(workload.dataset).first_turns()
        if workload.output_tokens is None and (rows.output_tokens < 1).any():
            raise InputError(f"workload.output_tokens is missing: {int((rows.output_tokens < 1).sum())} rows of "
                             f"{rows.path} have no {workload.dataset.output_key!r}; give a length distribution "
                             "for their replies")
        return rows
    t = workload.trace
    if t is None:
        return None
    cols = None
    if t.columns is not None:
        cols = {k: v for k, v in (("arrival", t.columns.arrival), ("prompt", t.columns.prompt),
                                  ("output", t.columns.output)) if v is not None}
    return read_trace(t.path, t.format, cols, t.time_unit, need_arrival=workload.arrival is None)


def replay_times(workload: Workload, trace: TraceData, max_requests: float = math.inf
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(arrival_s, row index) of a trace replay: window, loop, speedup, then num_requests and
    duration_s. Looping to more than ``max_requests`` rows is refused before they are made."""
    opts = workload.trace
    t = trace.arrival_s
    start = opts.start_s if opts.start_s is not None else 0.0
    keep = t >= start
    if opts.end_s is not None:
        keep &= t < opts.end_s
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise InputError(f"workload.trace: no rows of {trace.path} in the window [{start}, "
                         f"{opts.end_s if opts.end_s is not None else 'end'}) s; the trace spans {t[-1]:.3f} s")
    rel = t[rows] - start
    n, dur = workload.num_requests, workload.duration_s
    if opts.loop:
        if opts.end_s is not None:
            period = opts.end_s - start
        else:  # the span plus one mean gap, so a repeat does not land on the last request
            period = rel[-1] + (rel[-1] - rel[0]) / (len(rel) - 1) if len(rel) > 1 else rel[-1] + 1.0
        if period <= 0:
            period = 1.0
        reps = []
        if n is not None:
            reps.append(-(-n // len(rows)))
        if dur is not None:
            reps.append(int(dur * opts.speedup // period) + 1)
        if not reps:
            raise InputError("workload.trace.loop needs workload.num_requests or workload.duration_s")
        r = min(reps)
        if r * len(rows) > max_requests:
            raise InputError(f"workload.trace.loop: repeating the {len(rows)} rows of {trace.path} {r} times makes "
                             f"{r * len(rows):.3g} requests, more than fit in this machine's memory "
                             f"(~{max_requests:.3g}); lower workload.duration_s or set workload.num_requests")
        rel = (rel[None, :] + period * np.arange(r)[:, None]).ravel()
        rows = np.tile(rows, r)
    elif n is not None and n > len(rows):
        raise InputError(f"workload.num_requests={n} exceeds the {len(rows)} rows of {trace.path} in the window; "
                         f"set workload.trace.loop: true or ask for fewer")
    times = rel / opts.speedup
    if n is not None:
        times, rows = times[:n], rows[:n]
    if dur is not None:
        keep = times < dur
        times, rows = times[keep], rows[keep]
    return times, rows


def replay_ended(workload: Workload, trace: TraceData) -> bool:
    """Whether a trace replay cut at ``workload.duration_s`` ran out of rows before it (not looped,
    and its window's last row, after speedup, arrives before duration_s)."""
    opts, dur = workload.trace, workload.duration_s
    if dur is None or opts.loop:
        return False
    t = trace.arrival_s
    keep = t >= (opts.start_s or 0.0)
    if opts.end_s is not None:
        keep &= t < opts.end_s
    rows = np.flatnonzero(keep)
    return bool(len(rows)) and (t[rows[-1]] - (opts.start_s or 0.0)) / opts.speedup < dur


# ---------------------------------------------------------------- the workload
def _class_arrival(c):
    return c.arrival if c.arrival is not None else PoissonArrival("poisson", c.rate_rps)


def _check_tags(workload: Workload, trace: TraceData | None, block_size: int | None) -> bool:
    """Whether requests carry the trace's block hash ids (and that they can)."""
    if trace is None or trace.hash_ids is None:
        return False
    if workload.shared_prefix is not None:
        raise InputError(f"workload.shared_prefix: {trace.path} has hash_ids, which already say which prompt blocks "
                         "requests share; remove workload.shared_prefix")
    per = workload.trace.hash_block_tokens
    if block_size is not None and block_size > per:
        raise InputError(f"memory.block_size={block_size} exceeds workload.trace.hash_block_tokens={per}: a KV "
                         f"block must not span more than one hash id of {trace.path}")
    return True


def tag_prefixes(tags: list, per: int, prompt: np.ndarray):
    """(prefix_group, prefix_tokens) of requests with block hash ids: the first id names the
    prefix (for routing), and the tokens the ids cover are the prompt's cacheable part."""
    group = np.array([t[0] if t else -1 for t in tags], dtype=np.int64)
    prefix = np.minimum(np.array([len(t) * per for t in tags], dtype=np.int64), prompt)
    return group, prefix


def generate(workload: Workload, rng: np.random.Generator, max_context_tokens: int | None = None,
             block_size: int | None = None, max_requests: float = math.inf):
    """The requests of an open-loop workload (``RequestSpecs``), or the ``ClosedLoop`` /
    ``Sessions`` source of a closed-loop or multi-turn one. ``max_context_tokens`` (with
    ``clip_to_context``) shortens over-long requests; ``block_size`` (the KV block) is checked
    against a trace's hash-id block; ``max_requests``: a looped trace making more is refused
    before they are drawn (``servesim.resources``: what fits in memory)."""
    clip = max_context_tokens if workload.clip_to_context else None
    if workload.sessions is not None:
        from servesim.inputs.sessions import Sessions

        return Sessions(workload, rng, clip)
    trace = load_trace(workload)
    tagged = _check_tags(workload, trace, block_size)
    lengths = Lengths(workload, trace)
    if isinstance(workload.arrival, ClosedLoopArrival):
        return ClosedLoop(workload, lengths, rng, clip, tagged)
    labels = None
    ended = False
    if trace is not None and workload.arrival is None:  # replay the trace
        arrivals, rows = replay_times(workload, trace, max_requests)
        ended = replay_ended(workload, trace)
        lengths.rows = rows
        n = len(arrivals)
        labels, prompt, output = np.zeros(n, np.int64), trace.prompt_tokens[rows], trace.output_tokens[rows]
    else:
        if workload.arrival is not None:
            arrivals = arrival_times(workload.arrival, workload.num_requests, workload.duration_s, rng)
        else:  # classes with their own arrival processes: merge the streams
            streams = [arrival_times(_class_arrival(c), workload.num_requests, workload.duration_s, rng)
                       for c in workload.classes]
            arrivals = np.concatenate(streams)
            labels = np.concatenate([np.full(len(s), i, np.int64) for i, s in enumerate(streams)])
            order = np.argsort(arrivals, kind="stable")
            arrivals, labels = arrivals[order], labels[order]
            if workload.num_requests is not None:
                arrivals, labels = arrivals[:workload.num_requests], labels[:workload.num_requests]
        labels, prompt, output = lengths.draw(len(arrivals), rng, labels)
    check_horizon(arrivals)
    tags = None
    if tagged:
        tags = tuple(trace.hash_ids[r] for r in lengths.rows.tolist())
        group, prefix = tag_prefixes(tags, workload.trace.hash_block_tokens, prompt)
    else:
        prompt, group, prefix = add_prefixes(prefix_specs(workload), labels, prompt, rng)
    clipped = None
    if clip is not None:
        prompt, output, prefix, clipped = clip_with_prefix(prompt, output, prefix, clip)
    return RequestSpecs(arrivals, prompt, output, group, prefix, labels, lengths.names, clipped, tags,
                        workload.trace.hash_block_tokens if tagged else 0, dataset_info(workload), ended)


def check_horizon(arrivals: np.ndarray, what: str = "requests") -> None:
    """An ``InputError`` when arrivals reach past ``MAX_SECONDS`` of simulated time: there a
    double no longer resolves a step's milliseconds (at 1e18 s every step takes no time), so the
    results would be wrong, not just far away."""
    if len(arrivals) and arrivals[-1] > MAX_SECONDS:
        raise InputError(f"workload: the last of the {what} arrives at {arrivals[-1]:.3g} s of simulated time; at most "
                         f"{MAX_SECONDS:.0e} s (beyond it times no longer resolve a step): raise the arrival rate "
                         "(or a trace's speedup) or lower workload.num_requests")


def dataset_info(workload: Workload) -> dict | None:
    """summary.json ``workload.dataset``: the file, its conversations and how tokens were counted;
    for a trace replayed with its own times, ``workload.trace_unit_guessed``: the arrival column
    whose numbers were read as seconds for want of a unit (``TraceData.unit_guessed``), if any."""
    if workload.dataset is None:
        if workload.trace is not None and workload.arrival is None:
            guessed = load_trace(workload).unit_guessed
            return {"trace_unit_guessed": guessed} if guessed else None
        return None
    d = load_dataset(workload.dataset)
    return {"dataset": {"path": d.path, "conversations": d.num_conversations, "turns": len(d.new_tokens),
                        "skipped_conversations": d.skipped, "token_counts": d.token_counts,
                        "token_counts_estimated": d.estimated}}


class ClosedLoop:
    """Requests of a closed-loop workload, made as clients send them (``sim/core/clients.py``).

    Lengths (then think times) are drawn in chunks, in send order, from the run's Generator: the
    k-th request sent gets the k-th lengths, whichever client sends it.
    """

    def __init__(self, workload: Workload, lengths: Lengths, rng, max_context_tokens: int | None,
                 tagged: bool = False):
        self.arrival: ClosedLoopArrival = workload.arrival
        self.num_requests = workload.num_requests
        self.duration_s = workload.duration_s
        self.class_names = lengths.names
        self._lengths, self._rng, self._clip = lengths, rng, max_context_tokens
        self._chunk = workload.num_requests if workload.num_requests is not None else 4096
        self._cols = {k: [] for k in ("class_index", "prompt_tokens", "output_tokens", "prefix_group",
                                      "prefix_tokens", "think_s", "clipped")}
        self._prefixes = prefix_specs(workload)
        self._tag_tokens = workload.trace.hash_block_tokens if tagged else 0
        self._tags: list = []  # per request sent or drawn: its block hash ids (tagged traces)
        self.info = dataset_info(workload)
        if (lengths.opts is not None and not lengths.opts.sample and not lengths.opts.loop
                and workload.num_requests is not None and workload.num_requests > lengths.rows_left):
            which = "trace" if workload.trace is not None else "dataset"
            raise InputError(f"workload.num_requests={workload.num_requests} exceeds the {int(lengths.rows_left)} "
                             f"rows of {lengths.trace.path}; set workload.{which}.loop: true or ask for fewer")
        self._have = 0
        self.sent = 0
        self.source_ended = False  # (as RequestSpecs.source_ended: the rows ran out)
        # One think time per client before its first request.
        self.first_think_s = self._think(self.arrival.clients)

    def __len__(self) -> int:  # requests planned (sent, when the run ends early)
        return self.num_requests if self.num_requests is not None else self.sent

    def _think(self, n: int) -> np.ndarray:
        a = self.arrival
        if a.think == "fixed" or a.think_time_s == 0:
            return np.full(n, a.think_time_s)
        return self._rng.exponential(a.think_time_s, n)

    def _grow(self) -> bool:
        n = self._chunk
        if self.num_requests is not None:
            n = min(n, self.num_requests - self._have)
        n = int(min(n, self._lengths.rows_left))
        if n <= 0:
            # (the trace's or dataset's rows used up: the clients stop sending before duration_s)
            self.source_ended = self.source_ended or self._lengths.rows_left <= 0
            return False
        labels, prompt, output = self._lengths.draw(n, self._rng)
        if self._tag_tokens:
            tags = [self._lengths.trace.hash_ids[r] for r in self._lengths.rows.tolist()]
            self._tags += tags
            group, prefix = tag_prefixes(tags, self._tag_tokens, prompt)
        else:
            prompt, group, prefix = add_prefixes(self._prefixes, labels, prompt, self._rng)
        if group is None:
            group, prefix = np.full(n, -1, np.int64), np.zeros(n, np.int64)
        clipped = np.zeros(n, bool)
        if self._clip is not None:
            prompt, output, prefix, clipped = clip_with_prefix(prompt, output, prefix, self._clip)
        think = self._think(n)
        for k, v in (("class_index", labels), ("prompt_tokens", prompt), ("output_tokens", output),
                     ("prefix_group", group), ("prefix_tokens", prefix), ("think_s", think), ("clipped", clipped)):
            self._cols[k].append(v)
        self._have += n
        return True

    def next(self):
        """(request index, prompt, output, prefix group, prefix tokens, think time after it ends,
        block tags for ``Request.block_tags`` or None), or None when no more."""
        k = self.sent
        if (self.num_requests is not None and k >= self.num_requests) or (k >= self._have and not self._grow()):
            return None
        self.sent += 1
        if k >= self._cached_upto():
            self._flat = {key: np.concatenate(v) for key, v in self._cols.items()}
        f = self._flat
        tags = (self._tag_tokens, self._tags[k]) if self._tag_tokens and self._tags[k] else None
        return (k, int(f["prompt_tokens"][k]), int(f["output_tokens"][k]), int(f["prefix_group"][k]),
                int(f["prefix_tokens"][k]), float(f["think_s"][k]), tags)

    def planned(self) -> dict | None:
        """The columns of every request a run will send, drawn now on a copy (this one is left as
        it is): with ``num_requests``, the lengths are drawn in one chunk at the first send, from
        the Generator in the state it is in now, so they are the run's; None without
        ``num_requests`` (how many are sent depends on the run) or once sending has begun."""
        import copy

        if self.num_requests is None or self.sent:
            return None
        loop = copy.deepcopy(self)
        while loop._have < loop.num_requests and loop._grow():
            pass
        if not loop._have:
            return None
        return {k: np.concatenate(v) for k, v in loop._cols.items()}

    def class_of(self, k: int) -> int:
        """The class index of the ``k``-th request sent (once ``next`` has returned it)."""
        return int(self._flat["class_index"][k])

    def _cached_upto(self) -> int:
        flat = getattr(self, "_flat", None)
        return 0 if flat is None else len(flat["prompt_tokens"])

    def column(self, key: str) -> np.ndarray:
        """A column over the requests sent so far."""
        if not self._cols[key]:
            return np.zeros(0)
        return np.concatenate(self._cols[key])[: self.sent]

    @property
    def class_index(self) -> np.ndarray:
        return self.column("class_index").astype(np.int64)

    @property
    def clipped(self) -> np.ndarray:
        return self.column("clipped").astype(bool)


def check_files(workload: Workload) -> None:
    """Read every file the workload names (trace, empirical lengths), so that ``servesim
    validate`` reports a bad row with its file and line before a run."""
    load_trace(workload)
    dists = [workload.prompt_tokens, workload.output_tokens]
    if workload.sessions is not None and workload.sessions.turns is not None:
        dists.append(workload.sessions.turns)
    for c in workload.classes or ():
        dists += [c.prompt_tokens, c.output_tokens]
    for d in dists:
        if isinstance(d, EmpiricalDist):
            read_lengths(d.path, d.column)
