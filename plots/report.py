"""``servesim report DIR``: figures and a ``report.md`` from a run, sweep, capacity or compare folder.

Each figure is written as PNG and SVG under ``DIR/figures/`` and followed in the report by one
sentence generated from the numbers it shows. Kinds of folder:
- a run (``summary.json``): CDFs, timeline, TTFT breakdown, roofline;
- a sweep / compare / capacity folder (``results.csv``): a table of every point; groups are the
  ``label`` column (compare), the seeds (capacity) or the swept fields other than the arrival
  rate; when the rate is swept, latency-vs-load, goodput-vs-load and throughput-latency figures;
  the per-run figures are drawn for each group at the highest rate that every group ran.

Judged by the SLO first (``servesim.outputs.verdicts``): the report opens with a verdict that ranks
the configurations by goodput and says which meet the SLO; no sentence credits a lower latency to
a configuration that fails the SLO without saying so; the caveats (identical configurations,
unequal GPU counts, configurations that did not run, one seed, groups left out of a figure) are in
report.md and in each figure's caption. With ``--seeds`` the figures carry 95% intervals and the
verdict the differences from the first configuration, paired by seed (per-run figures show the
first seed).

Figures stand alone: a title with the model, GPU, arrival rate and SLO; legend entries with each
configuration's GPU count; identical configurations drawn once, labelled with both names;
side-by-side panels on shared axes; timelines of long runs in time bins.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from servesim.errors import InputError, clip_distinct
from servesim.outputs.checks import class_slos, rate_unit
from servesim.outputs.plandoc import limit_text
from servesim.outputs.intervals import (BOUNDED, CI_SUFFIX, NONNEGATIVE, SEED_KEY, Interval, format_interval,
                                        format_value, given_text, rate_bounds, row_interval, seeds_text)
from servesim.outputs.metrics import RESULT_METRICS, parse_slo, summary_dist
from servesim.outputs.progress import Phases
from servesim.outputs.rundir import (RunData, deployment_gpus, deployment_shape, gpu_label, gpu_types, has_table,
                                     read_capacity, read_results, read_scenario, read_study_meta)
from servesim.outputs.writer import write_text_whole
from servesim.outputs.wording import noun, plural
from servesim.outputs.verdicts import (CLASS_MIN, caveats, class_means, difference_sentences, differences,
                                       fell_behind, gpu_counts, identical_labels, loads_up_to, meets_slo,
                                       not_run_text, rank_key, ranked, rate_order, rate_text, seeds_alike_figures,
                                       slo_phrase, value_text, with_per_gpu)
from servesim.plots import figures as F
from servesim.plots.service import service_section

RATE_KEY = "workload.arrival.rate_rps"
MAX_GROUPS_PER_PANEL = 8  # per-run figures side by side: more are left out, and the caption says so
_NOT_SWEPT = {"point", "status", "error", "hash", "dir", "meets", "seeds"}


def _ms(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if v >= 10:  # (3 digits, as the milliseconds below: "p50 3145 ms and p99 19 s" was a p99 of 18.55 s)
        return f"{format_value(v)} s"
    # (three significant digits, as the tables print the same figure: ITL p50 "8.2 ms" here, "8.15" there)
    return f"{format_value(v * 1e3)} ms"


def _rate(r, unit: str = "req/s") -> str:
    """A load as the report writes it; ``unit``: ``Context.rate_unit`` (sessions/s with workload.sessions)."""
    return rate_text(r, ".4g", unit)


# ---------------------------------------------------------------- reading a folder
def _value_columns(rows) -> list:
    if not rows:
        return []
    keys = list(rows[0])
    end = keys.index("status") if "status" in keys else len(keys)
    return [k for k in keys[1:end] if k not in _NOT_SWEPT and not k.startswith("probe_")]


def _whole_name(meta: dict) -> str:
    """The one configuration of a study that swept nothing but the rate: its scenario file's name
    (the series was called "all")."""
    name = Path(str(meta.get("scenario") or "")).name
    return name or "the scenario"


PROBES = "probes"  # (the group of a one-seed capacity search: a plural subject, "probes deliver")


def _many(g) -> int:
    """How many a group's label names, for the verb after it (``noun``): "probes deliver", "seed 0
    delivers"."""
    return 2 if g == PROBES else 1


def _group_label(row, cols, kind: str = "sweep", whole: str = "the scenario") -> str:
    if "label" in cols:
        return str(row["label"])
    if kind == "capacity":
        return f"seed {row[SEED_KEY]}" if SEED_KEY in cols else PROBES
    others = [c for c in cols if c != RATE_KEY]
    if not others:
        return whole
    if others == ["policy.name"]:
        return str(row["policy.name"])
    return ", ".join(f"{c.split('.')[-1]}={row[c]}" for c in others)


def load_folder(path: Path, bar: Phases | None = None) -> dict:
    """{"kind", "rows", "groups": {label: [rows sorted by rate]}, "rate": bool, "runs": {label: RunData},
    "meta", "cols", "rep_rate", "chosen": {label: row}, "seed_rows": seeds.csv rows ([] without)};
    ``bar``: a step per run folder read."""
    if (path / "summary.json").is_file():
        run = RunData.from_dir(path)
        return {"kind": "run", "rows": [], "groups": {}, "rate": False, "runs": {run.label: run}, "meta": {},
                "rep_rate": None, "chosen": {}, "cols": [], "seed_rows": []}
    if not (path / "results.csv").is_file():
        unfinished = sorted(path.glob("results-seed*.csv"))
        if unfinished:  # (its seeds' rows join results.csv when the search ends: it stopped before)
            raise InputError(f"servesim report: {path} holds a capacity search that stopped before its answer "
                             f"({unfinished[0].name} has its probes so far); run the same servesim capacity "
                             "command again to resume it")
        kind = read_study_meta(path / "sweep.json").get("kind")
        if kind:  # (a study's sweep.json is written first: it stopped before its results.csv)
            so_far = " (seeds.csv has its runs so far)" if (path / "seeds.csv").is_file() else ""
            what = "capacity search" if kind == "capacity" else kind
            raise InputError(f"servesim report: {path} holds a {what} that stopped before its results.csv{so_far}; "
                             f"run the same servesim {kind} command again to resume it")
        for marker, report, command in (("lessons.json", "lessons.md", "lessons"),
                                        ("reproduce.json", "reproduce.md", "reproduce"),
                                        ("validation.json", "report.md", "validate-run")):
            if (path / marker).is_file():  # (said only 'neither summary.json nor results.csv')
                raise InputError(f"servesim report: {path} holds the output of servesim {command}, which "
                                 f"has its report already: {path / report}")
        raise InputError(f"servesim report: {path} has neither summary.json (a run) nor results.csv "
                         "(a sweep, capacity or compare folder)")
    meta = read_study_meta(path / "sweep.json")
    kind = meta.get("kind", "sweep")
    if kind == "capacity" and not (path / "capacity.json").is_file():  # (written at the search's end)
        raise InputError(f"servesim report: {path} holds a capacity search that stopped before its answer "
                         "(results.csv has the probes of the seeds it finished); run the same servesim capacity "
                         "command again to resume it")
    rows = read_results(path / "results.csv")
    if not rows:  # (every point a study runs writes its row, a failed one too: none is a damaged file)
        listed = meta.get("points")
        of = f" while {path / 'sweep.json'} lists {listed} point(s)" if isinstance(listed, int) and listed else ""
        what = "capacity search" if kind == "capacity" else kind
        raise InputError(f"servesim report: {path / 'results.csv'} has its header but no row{of}: no point of "
                         f"this {what} is recorded (the file was cut or emptied); run the same servesim {kind} "
                         "command again to write it (its finished runs are reused)")
    probes = len(rows)  # (a capacity search's, the short ones rerun longer among them)
    if kind == "capacity":  # a probe run again longer (too short to tell): the longer one decided
        rows = [r for r in rows if r.get("probe_rerun") not in (True, "True")]
    seed_rows = read_results(path / "seeds.csv") if (path / "seeds.csv").is_file() else []
    cols = _value_columns(rows)
    has_rate = RATE_KEY in cols
    groups: dict = {}
    for r in rows:
        groups.setdefault(_group_label(r, cols, kind, _whole_name(meta)), []).append(r)
    if has_rate:
        for g in groups.values():
            g.sort(key=lambda r: rate_order(r[RATE_KEY]))
    ok: dict = {}  # rows that ran and whose folder has its summary.json
    unread = []  # rows that ran but whose folder has none (removed since): said, not drawn
    for g, rs in groups.items():
        ok[g] = []
        for r in rs:
            if r["status"] == "ok" and r.get("dir"):
                if (path / r["dir"] / "summary.json").is_file():
                    ok[g].append(r)
                else:
                    unread.append(f"{g}: {r['dir']} has no summary.json, so that run is left out of the per-run "
                                  "figures")
    rep_rate = None
    if kind == "capacity":
        # The per-run figures show the probe at the capacity found (the highest that met) of the
        # first seed searched.
        first = next(iter(ok), None)
        met = [r for r in ok.get(first, []) if r.get("meets") in (True, "True")]
        chosen = {first: max(met, key=lambda r: r[RATE_KEY])} if met else {}
        rep_rate = chosen[first][RATE_KEY] if chosen else None
    elif has_rate:
        ran = [set(r[RATE_KEY] for r in rs) for rs in ok.values() if rs]  # groups that failed throughout: left out
        common = set.intersection(*ran) if ran else set()
        rep_rate = max(common) if common else None
        chosen = {g: next(r for r in rs if r[RATE_KEY] == rep_rate) for g, rs in ok.items()
                  if rep_rate is not None and rs}  # (a group that failed at every rate has no run to show)
    else:
        chosen = {g: rs[0] for g, rs in ok.items() if rs}
    runs = {}
    if bar is not None:
        bar.add(len(chosen) - 1)
    bare = []  # chosen runs written without their tables (a study's --outputs): said, not drawn
    bare_policies = set()  # their policies (for the figures' titles, which name one shared by every run)
    lacking = set()
    for g, r in chosen.items():
        folder = path / r["dir"]
        lacks = [t for t in ("requests", "steps") if not has_table(folder, t)]
        if lacks:
            bare.append(g)
            lacking.update(lacks)
            bare_policies.add((read_scenario(folder).get("policy") or {}).get("name"))
        else:
            runs[g] = RunData.from_dir(folder, label=g)
        if bar is not None:
            bar.step(f"read {g}")
    if bare:
        tables = " or ".join(t for t in ("requests", "steps") if t in lacking)
        one = len(bare) == 1
        unread.append(f"{', '.join(bare[:5])}{f' and {len(bare) - 5} more' if len(bare) > 5 else ''}: "
                      f"{'its run folder holds' if one else 'their run folders hold'} no {tables} table (written "
                      f"with --outputs), so the per-run figures leave {'it' if one else 'them'} out")
    seed_groups: dict = {}  # runs on several seeds: every seed's rows, grouped as ``groups``
    for r in seed_rows:
        seed_groups.setdefault(_group_label(r, cols, kind, _whole_name(meta)), []).append(r)
    if rows and not any(CLASS_MIN in r for r in rows):
        # (a results.csv written before the column: its runs' summaries give each row's lowest class,
        # which the verdicts judge by; the report said "meets" of a configuration a class failed)
        for r in rows:
            if r.get("status") == "ok" and r.get("dir"):
                seeded = [q for q in seed_groups.get(_group_label(r, cols, kind, _whole_name(meta)), [])
                          if q.get(RATE_KEY) == r.get(RATE_KEY) and q.get("status") == "ok"]
                means = class_means(_run_summaries(path, seeded or [r]))
                r[CLASS_MIN] = min((a for _, a, _, _ in means), default=None)
    return {"kind": kind, "rows": rows, "groups": groups, "rate": has_rate, "runs": runs, "meta": meta,
            "path": path, "cols": cols, "rep_rate": rep_rate, "chosen": chosen, "seed_rows": seed_rows,
            "seed_groups": seed_groups, "unread": unread, "bare_policies": bare_policies, "probes": probes}


# ---------------------------------------------------------------- what each figure is about
def _model_name(scenario: dict) -> str:
    return str(scenario.get("model", "?")).rstrip("/").split("/")[-1]


class Context:
    """What the figures and sentences of one report need to say what they show: model, GPU, rate,
    SLO, each group's GPU count and SLO verdict, identical groups, caveats."""

    def __init__(self, data: dict, scenario: dict, ttft_slo, tpot_slo):
        runs, rows = data["runs"], data["rows"]
        first = next(iter(runs.values()), None)
        sc = scenario
        self.model = _model_name(sc) if sc else "?"
        types = gpu_types(sc) if sc else ["?"]
        # (a P/D split's pools on different GPU types: "GPUs", the shape names each pool's)
        self.mixed_gpus = len(types) > 1
        self.gpu = "GPUs" if self.mixed_gpus else types[0]
        # the models and GPU types the runs shown ran, where they are not all the scenario's (a sweep
        # of model or hardware.gpu, a compare whose variants set them): the titles named the
        # scenario's alone ("Llama-2-7b-hf on 1 x h100-sxm each" over 13B and A100 runs too)
        models, kinds = {}, {}
        for r in runs.values():
            if isinstance(r.scenario, dict) and r.scenario:
                models[_model_name(r.scenario)] = None
                kinds[" + ".join(gpu_types(r.scenario))] = None
        for r in rows if not runs else ():  # (the runs' own names first: a GPU file's row value is its path)
            if r.get("model") not in (None, ""):
                models[_model_name({"model": r["model"]})] = None
            if r.get("hardware.gpu") not in (None, ""):
                kinds[gpu_label(str(r["hardware.gpu"]))] = None
        if len(models) > 1:
            self.model = ", ".join(models)
        # (across_gpus: the runs shown are on different GPU types, each named)
        self.across_gpus = len(kinds) > 1
        if self.across_gpus:
            self.gpu = ", ".join(kinds)
        self.ttft_slo, self.tpot_slo = ttft_slo, tpot_slo
        self.class_slos = _class_slos(sc)
        self.classes = len(class_slos(sc)) > 1  # (each class is judged by its own SLO too: verdicts.meets_slo)
        # the per-request SLO the runs' goodput and attainment count (a capacity search's limits differ)
        self.run_slo = scenario_slo(sc)
        self.kind = data["kind"]
        rate = data.get("rep_rate")
        if rate is None and first is not None:
            rate = ((first.scenario.get("workload") or {}).get("arrival") or {}).get("rate_rps")
        self.rate = rate
        # the rate's unit: with workload.sessions the rate starts sessions, each of several requests
        self.rate_unit = rate_unit(sc)
        # a closed loop has no rate: its load is its clients (the title said nothing of the load)
        arrival = ((sc or {}).get("workload") or {}).get("arrival") if isinstance(sc, dict) else None
        clients = arrival.get("clients") if isinstance(arrival, dict) and arrival.get("process") == "closed_loop" \
            else None
        self.loop = (f"closed loop of {clients} clients" if clients is not None
                     and not any(str(c).endswith("arrival.clients") for c in data["cols"]) else None)
        # the mean arrival rate when it is far from rate_rps (on_off: rate_rps is the burst rate)
        offered = (first.summary.get("workload") or {}).get("offered_rps") if first is not None else None
        self.offered = offered if offered and rate and abs(offered / rate - 1) > 0.2 else None
        # every run shown had no request (a duration_s no arrival fell in): the rate named was offered
        # to nothing, and the title said "0.01 req/s" alone, as of a run that served that load
        self.none_arrived = bool(runs) and all(r.summary.get("num_requests") == 0 for r in runs.values())
        # the policy in the title when every run shown has the same one (else their labels name them)
        names = {(r.scenario.get("policy") or {}).get("name") for r in runs.values()}
        names |= data.get("bare_policies") or set()  # (runs shown by their results.csv rows only)
        if not names and sc and (self.kind == "capacity" or (self.kind == "sweep" and not any(
                c == "label" or c.startswith("policy.name") for c in data["cols"]))):
            # (no run read: a capacity search's probes all run the scenario's policy, as does a
            # sweep whose grid does not set it)
            names = {(sc.get("policy") or {}).get("name")}
        self.policy = next(iter(names)) if len(names) == 1 else None  # (None: unnamed, or several)
        # how the GPUs are split (TP2, 2 replicas x TP1, a P/D split's pools) when every run shown
        # has the same split: a count of GPUs alone reads the same for all of them
        shapes = {deployment_shape(r.scenario) for r in runs.values()}
        if not shapes and sc and self.kind == "capacity":  # (its probes all run the scenario's deployment)
            shapes = {deployment_shape(sc)}
        self.shape = next(iter(shapes)) if len(shapes) == 1 else ""
        self.gpus = gpu_counts(rows) if "label" in data["cols"] else {}
        for g, r in runs.items():
            self.gpus.setdefault(g, r.num_gpus())
        if not self.gpus and data["groups"]:
            self.gpus = {g: next((r.get("num_gpus") for r in rs if r.get("num_gpus")), None)
                         for g, rs in data["groups"].items()}
        self.identical = identical_labels(rows) if "label" in data["cols"] else {}
        self.status = {}  # group -> meets the SLO at the figures' rate (None: unknown, or not the scenario's SLO)
        self.under = {}  # group -> its request classes under 90% of their own SLO there (verdicts.slo_phrase)
        if self.kind != "capacity":
            for g, r in data["chosen"].items():
                self.status[g] = meets_slo(r)
                self.under[g] = _classes_under(data, r, g)
            for g, r in runs.items():
                if g not in self.status:
                    self.status[g] = meets_slo(r.summary)
        if rows:  # (a study: its notes, what results.csv shows, and what its runs warned of)
            self.notes = caveats(rows, data["meta"], out_dir=data.get("path"), run_rows=data.get("seed_rows"),
                                 unit=self.rate_unit)
        else:
            self.notes = [w["message"] for r in runs.values() for w in r.summary.get("warnings") or ()]
        self.notes += data.get("unread") or []
        self.seeds = int(data["meta"].get("seeds") or 1)
        if self.kind == "capacity" and not data["meta"].get("seeds"):
            # (a search without --seeds adds seeds until its interval is narrow: sweep.json has no
            # count, and the report said nothing of the seeds its probes ran on)
            self.seeds = max(1, len({r.get("seed") for r in rows if r.get("seed") is not None}))

    def label(self, g) -> str:
        """A legend entry: the group, the groups identical to it, and its GPU count."""
        same = [d for d, s in self.identical.items() if s == g]
        n = self.gpus.get(g)
        gpu = f" ({plural(n, 'GPU')})" if n else ""
        return " = ".join([str(g), *same]) + gpu

    def keep(self, groups) -> list:
        """Groups to draw: identical ones once (their legend entry names both); a group whose
        twin is not among ``groups`` (its run folder could not be read) is drawn itself."""
        groups = list(groups)
        return [g for g in groups if self.identical.get(g) not in groups]

    def title(self, what: str, rate: bool = True, slo=None, runs_slo: bool = False) -> str:
        """``slo``: (TTFT, TPOT) limits to name instead of the report's; ``runs_slo``: name the
        per-request SLO the runs' goodput and attainment count (a capacity search's limits are
        another), "SLO per class" when the request classes carry their own."""
        if runs_slo:
            slo = self.run_slo
        counts = {n for n in self.gpus.values() if n}
        each = f"{next(iter(counts))}{'' if self.mixed_gpus else ' x'} " if len(counts) == 1 else ""
        # (" each": one deployment per configuration compared; a capacity search's groups are its seeds)
        if self.across_gpus:  # ("1 x h100-sxm, a100-80g" read as one GPU of two kinds)
            n = next(iter(counts)) if len(counts) == 1 else None
            parts = [what, f"{self.model} on " + (f"{plural(n, 'GPU')} each ({self.gpu})" if n else self.gpu)
                     + (f" ({self.shape})" if self.shape else "")]
        else:
            parts = [what, f"{self.model} on {each}{self.gpu}" + (f" ({self.shape})" if self.shape else "")
                     + (" each" if each and len(self.gpus) > 1 and self.kind != "capacity" else "")]
        if self.policy:
            parts.append(f"policy {self.policy}")
        if rate and self.rate is not None:
            parts.append(f"{self.rate:.4g} {self.rate_unit}" + (" (none arrived)" if self.none_arrived else
                                                      f" ({self.offered:.3g} arrived per s)" if self.offered else ""))
        elif rate and self.loop:
            parts.append(self.loop)
        slo = F.slo_text(*(slo or (self.ttft_slo, self.tpot_slo)))
        if runs_slo and self.class_slos:  # (the top-level limits judge only a class without its own)
            parts.append("SLO per class")
        elif slo:
            parts.append(f"SLO {slo}")
        elif self.class_slos and self.kind != "capacity":
            parts.append("SLO per class")
        if self.seeds > 1:
            # (a capacity search's figures over seeds draw each seed's probes, no mean)
            parts.append(f"first of {self.seeds} seeds" if rate else f"each of {self.seeds} seeds"
                         if self.kind == "capacity" else f"mean of {self.seeds} seeds")
        return " | ".join(parts)


def _class_limits(scenario: dict) -> list:
    """(class, (ttft_s, tpot_s)) each request class is judged by: its own limit, else the top-level one."""
    top = (scenario or {}).get("slo") or {}
    if not isinstance(top, dict):
        top = {}
    return [(n, tuple(own.get(k) if own.get(k) is not None else top.get(k) for k in ("ttft_s", "tpot_s")))
            for n, own in class_slos(scenario)]


def _class_slos(scenario: dict) -> str:
    """"chat: TTFT <= 300 ms, TPOT <= 30 ms; batch: TTFT <= 30 s" when the scenario's request
    classes are judged by different SLOs (a class's limit, else the top-level one), "" when not.
    The report then names no single SLO: the top-level one quoted as "the SLO" (and drawn as
    every request's limit) was the one only a class without its own used, if any."""
    eff = _class_limits(scenario)
    if len({lim for _, lim in eff}) < 2:
        return ""
    return "; ".join(f"{n}: {F.slo_text(*lim) or 'no limit'}" for n, lim in eff)


def scenario_slo(scenario: dict) -> tuple:
    """(ttft_s, tpot_s) every request of the scenario is judged by: the top-level ``slo``, or, when
    its request classes all carry the same limits of their own, those (the top-level ones judged
    no request, yet every title and the CDFs' limit lines named them); (None, None) when the
    classes differ (``_class_slos``)."""
    eff = {lim for _, lim in _class_limits(scenario)}
    if len(eff) > 1:
        return (None, None)
    if eff:
        return next(iter(eff))
    slo = (scenario or {}).get("slo") or {}
    return (slo.get("ttft_s"), slo.get("tpot_s")) if isinstance(slo, dict) else (None, None)


def _decorate(fig, title: str, notes: list) -> None:
    """A figure's title and, under it, a caption with the caveats (wrapped to the figure's width)."""
    fig.suptitle(title, fontsize=11)
    if notes:
        width = max(60, int(fig.get_figwidth() * 15))
        text = "\n".join(textwrap.fill("Note: " + n, width) for n in notes)
        fig.text(0.01, -0.01, text, ha="left", va="top", fontsize=8, color="#444444")


# ---------------------------------------------------------------- sentences
def _slo_note(g, ctx: Context, row=None) -> str:
    ok = ctx.status.get(g)
    if ok is False and row is not None:
        return f" ({g} {slo_phrase(row, ctx.under.get(g))})"
    return " (fails the SLO)" if ok is False else ""


def _cdf_sentence(metric: str, samples: dict, where: str, ctx: Context, rows: dict) -> str:
    """Lowest and highest p99, judged by the SLO: a configuration that fails it is never credited
    with a lower latency without the sentence saying that it fails."""
    name = F.METRIC_NAMES[metric]
    p99 = {g: (float(_pct(x, 99)) if len(x) else None) for g, x in samples.items()}
    p99 = {g: v for g, v in p99.items() if v is not None}
    if not p99:
        return f"No {name} samples{where}."
    if len(p99) == 1:
        g, v = next(iter(p99.items()))
        p50 = _pct(samples[g], 50)
        # (one unit for both: "p50 6522 ms and p99 16.4 s" read as two scales)
        lo = f"{format_value(p50)} s" if v >= 10 and p50 == p50 else _ms(p50)
        return f"{name}: p50 {lo} and p99 {_ms(v)}{where}{_slo_note(g, ctx, rows.get(g))}."
    base = next(iter(p99))
    order = sorted(p99, key=p99.get)
    best, worst = order[0], order[-1]
    fails = {g for g in p99 if ctx.status.get(g) is False}
    meeting = [g for g in order if g not in fails]
    if best in fails:
        phrase = slo_phrase(rows[best], ctx.under.get(best)) if best in rows else "fails the SLO"
        text = (f"{best} has the lowest p99 {name}{where} ({_ms(p99[best])}"
                + (f", against {_ms(p99[base])} for {base}" if base != best else "") + f") but {phrase}")
        if meeting:
            text += f"; of the configurations that meet the SLO, {meeting[0]} has the lowest ({_ms(p99[meeting[0]])})"
        return text + "."
    if best != base and ctx.seeds > 1:
        # (one seed's runs: "pd_split cuts p99 TPOT from 9.1 ms to 7.8 ms" stood next to the
        # verdict's paired differences finding none over the seeds)
        # (a sweep's report has no paired differences: its Summary's means and intervals)
        judge = ("the verdict's paired differences say" if ctx.kind == "compare" else
                 "the Summary's means and intervals over them say")
        text = (f"In the first seed's runs, {best} has the lowest p99 {name}{where} ({_ms(p99[best])}, against "
                f"{_ms(p99[base])} for {base}; whether that holds over the {ctx.seeds} seeds, {judge})")
    elif best != base:
        text = f"{best} cuts p99 {name} from {_ms(p99[base])} ({base}) to {_ms(p99[best])}{where}"
    else:
        text = f"{base} has the lowest p99 {name} ({_ms(p99[base])}){where}"
    if worst != best:
        text += f"; the highest is {worst} at {_ms(p99[worst])}{_slo_note(worst, ctx)}"
    return text + "."


def _pct(x, q):
    import numpy as np

    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else None


def _load_sentence(metric: str, series: dict, slo_s, unit: str = "req/s") -> str:
    name = F.METRIC_NAMES[metric]

    def _rate(r):  # (the load's unit: sessions/s with workload.sessions)
        return rate_text(r, ".4g", unit)

    parts = []
    for g, d in series.items():
        if slo_s is not None:
            # (a load whose backlog grew is within no SLO: its p99 only grows the longer it lasts)
            behind = [r for r, b in zip(d["rate"], d.get("behind") or [False] * len(d["rate"])) if b]
            under = [r for r, v in zip(d["rate"], d["p99"]) if v is not None and v <= slo_s and r not in behind]
            # runs on several seeds: a load counts as within only when the interval's top is
            ci = d.get("p99_ci") or [None] * len(d["rate"])
            unsure = [r for r, v, h in zip(d["rate"], d["p99"], ci) if r in under and h is not None and v + h > slo_s]
            upto = loads_up_to(d["rate"], under)  # ("up to R" claims every load up to R)
            if not under:
                parts.append(f"{g} at none of the loads")
            elif max(under) == max(d["rate"]) and len(upto) == len(d["rate"]) and not unsure:
                parts.append(f"{g} at every load tried (up to {_rate(max(under))})")
            elif upto:
                parts.append(f"{g} up to {_rate(max(upto))}")
            else:
                parts.append(f"{g} only at {', '.join(_rate(r) for r in under)}")
            if upto and len(upto) < len(under):
                parts[-1] += f" (also within at {', '.join(_rate(r) for r in under if r not in upto)})"
            if unsure:
                parts[-1] += (f" (its mean; the 95% interval reaches past the SLO at "
                              f"{', '.join(_rate(r) for r in unsure)})")
            if behind:
                parts[-1] += f" (it fell behind at {', '.join(_rate(r) for r in behind)}: the backlog grew)"
            # (a load where no request completed has no p99: "at none of the loads" read as latencies
            # over the limit, where every request was rejected)
            empty = [r for r, v in zip(d["rate"], d["p99"]) if v is None or v != v]
            if empty and len(empty) == len(d["rate"]):
                parts[-1] += f" (no {name} sample at any of them: no request completed with one)"
            elif empty:
                parts[-1] += f" (no {name} sample at {', '.join(_rate(r) for r in empty)})"
        else:
            parts.append(f"{g}: {_ms(d['p99'][0])} at {_rate(d['rate'][0])}, {_ms(d['p99'][-1])} at "
                         f"{_rate(d['rate'][-1])}")
    if slo_s is not None:
        # (a limit as given, as the figures' titles write it: "the 1 s SLO", not "the 1000 ms SLO", nor "50.0 ms")
        return f"p99 {name} stays within the {limit_text(slo_s)} SLO for " + "; ".join(parts) + "."
    return f"p99 {name} at the lowest and highest load: " + "; ".join(parts) + "."


# ---------------------------------------------------------------- tables
def _is_latency(c: str) -> bool:
    return c.endswith("_s") and c.split("_")[0] in RESULT_METRICS


def _md_table(rows, cols, given=()) -> str:
    """``given``: columns of values the user gave (a sweep's grid, the rates), printed as given."""
    # text cells cut visibly and never into another's text (clip_distinct)
    texts = {c: clip_distinct(((given_text(r[c]) if c in given else str(r[c])).replace("|", "/") for r in rows
                               if r.get(c) is not None), 60) for c in cols}

    def cell(c, r):
        v = r.get(c)
        if v is None:
            return "-"
        if c in given:
            return texts[c][given_text(v).replace("|", "/")]
        if r.get(c + CI_SUFFIX) is not None:
            return format_interval(row_interval(r, c), 1e3 if _is_latency(c) else 1.0)
        if isinstance(v, float):
            # (one run: three significant digits, as compare's and sweep's tables print the same cell;
            # "117.3" ms here was "117" there, and a goodput "6.6" beside "6.58")
            return format_value(v * 1e3 if _is_latency(c) else v)
        return texts[c][str(v).replace("|", "/")]

    head = [c[:-2] + " (ms)" if _is_latency(c) else c for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(c, r) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _run_table(runs: dict, chosen: dict) -> str:
    rows = []
    for g, run in runs.items():
        s = run.summary
        rows.append({"run": g, "completed": s["completed"], "throughput_rps": s["throughput_rps"],
                     "goodput_rps": s["goodput_rps"], "slo_attainment": s["slo_attainment"],
                     **{f"{m}_{st}_s": summary_dist(s, m)[st]
                        for m in ("ttft", "tpot", "itl", "e2e") for st in ("p50", "p99")},
                     "mean_batch_size": s["utilization"]["mean_batch_size"], "mfu": s["utilization"]["mfu"],
                     "mbu": s["utilization"]["mbu"]})
    # ranked as the verdict ranks: the SLO judged with the run's keep-up and its request classes too
    # (without them, a run that fell behind, or whose tight-SLO class failed, ranked above one that
    # meets the SLO whenever its share of requests within it and its goodput were higher)
    judged = {r["run"]: {"status": "ok", **r, "workload": runs[r["run"]].summary.get("workload"),
                         "classes": runs[r["run"]].summary.get("classes")} for r in rows}
    rows.sort(key=lambda r: rank_key(judged[r["run"]]))
    return _md_table(rows, list(rows[0]))


# ---------------------------------------------------------------- verdict
def _classes_under(data: dict, row: dict, group=None) -> list:
    """``verdicts.classes_under_target`` of the row's run(s) (the point's seeds with --seeds; seeds
    on which a class drew no request left out): the request classes under the 90% a configuration
    is judged by, which name them in its verdict; [] when none is, or the runs have no classes. The
    overall share can reach 90% while the class with the tight SLO fails it, hidden by a loose
    one's 100%: the verdict said "meets" alone."""
    from servesim.outputs.verdicts import class_fails, classes_under_target

    if not class_fails(row):
        return []
    if group is None:
        group = _group_label(row, data["cols"], data["kind"], _whole_name(data["meta"]))
    seeded = [r for r in (data.get("seed_groups") or {}).get(group, [])
              if r.get(RATE_KEY) == row.get(RATE_KEY) and r.get("status") == "ok"]
    return classes_under_target(_run_summaries(data.get("path"), seeded or [row]))


def _run_summaries(path, rows: list) -> list:
    """The summary.json of each row's run folder that has a readable one."""
    from servesim.outputs.rundir import read_summary

    summaries = []
    for r in rows:
        f = Path(path or ".") / str(r.get("dir") or "") / "summary.json"
        if path is None or not r.get("dir") or not f.is_file():
            continue
        try:
            summaries.append(read_summary(f.parent))
        except (InputError, OSError, ValueError):  # (a damaged run's summary: the caveats say so; no note here)
            continue
    return summaries


def _verdict(data: dict, ctx: Context) -> list:
    """Markdown lines: the groups ranked by goodput at each rate, each with its SLO verdict, and
    the paired differences from the first configuration (seeds > 1)."""
    rows = data["rows"]
    cols = data["cols"]
    key = "label" if "label" in cols else None
    by_rate: dict = {}
    for r in rows:
        by_rate.setdefault(r.get(RATE_KEY), []).append(r)
    per_gpu = len({v for v in ctx.gpus.values() if v}) > 1
    out = ["## Verdict", "",
           "Ranked by goodput" + (" per GPU" if per_gpu else "") + " (requests per second completed within the SLO"
           + (f": {F.slo_text(ctx.ttft_slo, ctx.tpot_slo)}" if F.slo_text(ctx.ttft_slo, ctx.tpot_slo) else
              f", each request against its class's: {ctx.class_slos}" if ctx.class_slos else "")
           + (", divided by the GPUs each configuration uses: they differ" if per_gpu else "")
           + "), those that meet the SLO first; a configuration meets the SLO when at least 90% of its requests "
           "are within it" + (", at least 90% of each request class's within its own SLO," if ctx.classes else "")
           + " and it kept up (its backlog did not grow)."
           + (" Ranks within overlapping intervals are not differences"
              + (": see the paired differences below." if key else ".") if ctx.seeds > 1 else ""), ""]
    for rate, rs in sorted(by_rate.items(), key=lambda x: rate_order(x[0])):
        if rate is not None:
            out += [f"At {_rate(rate, ctx.rate_unit)}:", ""]
        ranked_ok = []  # (row, group, goodput text, verdict text) of the rows that ran, in rank order
        twins: dict = {}  # group -> the lines of the groups identical to it, said right below its rank
        failed = []  # the rows that did not run, after the ranking
        for r in sorted(rs, key=lambda x: rank_key(x, per_gpu)):
            g = _group_label(r, cols, data["kind"], _whole_name(data["meta"]))
            if r["status"] != "ok":
                failed.append(f"- {g}: did not run ({not_run_text(r)[:300]})")
                continue
            if key and g in ctx.identical:
                twins.setdefault(ctx.identical[g], []).append(f"- {g}: identical to {ctx.identical[g]}")
                continue
            n = r.get("num_gpus")
            gp = value_text(r, "goodput_rps", unit="req/s")
            if per_gpu and n:
                gp += f", {value_text(with_per_gpu([r])[0], 'goodput_per_gpu', unit='req/s')} per GPU"
            verdict = slo_phrase(r, _classes_under(data, r))
            ranked_ok.append((r, g, gp, f"**{verdict}**" if meets_slo(r) is False else verdict))
        # one seed: goodputs equal to the digits shown and the same verdict (e.g. 10.34498 and 10.34359
        # req/s: the same requests within the SLO, finishing a few ms apart) share a rank, no winner
        # between them (with seeds, the intervals and the paired differences below say it)
        same = [ctx.seeds == 1 and i > 0 and ranked_ok[i][2:] == ranked_ok[i - 1][2:] for i in range(len(ranked_ok))]
        k = 0
        for i, (r, g, gp, verdict) in enumerate(ranked_ok):
            k = k if same[i] else i + 1
            n = r.get("num_gpus")
            tied = same[i] or (i + 1 < len(same) and same[i + 1])
            name = f"**{g}**" if k == 1 and meets_slo(r) else g
            out.append(f"{k}. {name}" + (f" ({plural(n, 'GPU')})" if n else "")
                       + f": goodput {gp}, {verdict}" + (" (tied)" if tied else ""))
            out += twins.pop(g, [])
        out += [line for lines in twins.values() for line in lines] + failed
        out.append("")
    seed_rows = data["seed_rows"]
    if seed_rows and key:
        labels = list(dict.fromkeys(str(r["label"]) for r in rows))
        sents = difference_sentences(differences(seed_rows, labels[0]), labels[0], ctx.gpus, rows,
                                     unit=ctx.rate_unit)
        if sents:
            out += ["Differences from the first configuration, paired by seed (called better or worse only when the "
                    "95% interval of the difference excludes zero):", ""] + [f"- {s}" for s in sents] + [""]
    return out


# ---------------------------------------------------------------- the report
def _series(groups, key_p50, key_p99, verdict=None):
    """Each group's loads and latencies; ``ok``: each load's verdict (``verdict(row)``, default the
    scenario's SLO: ``meets_slo``)."""
    verdict = verdict or meets_slo
    out = {}
    for g, rs in groups.items():
        rs = [r for r in rs if r["status"] == "ok"]
        if rs:
            out[g] = {"rate": [r[RATE_KEY] for r in rs], "p50": [r[key_p50] for r in rs],
                      "p99": [r[key_p99] for r in rs], "p99_ci": [r.get(key_p99 + CI_SUFFIX) for r in rs],
                      "behind": [fell_behind(r) for r in rs], "ok": [verdict(r) for r in rs]}
    return out


def build_report(path: str | Path, progress: bool = False) -> Path:
    """Write ``DIR/figures/*.png|svg`` and ``DIR/report.md``; returns the report's path.
    ``progress``: a progress bar on stderr."""
    path = Path(path)
    bar = Phases(progress, "report", 1)
    try:
        return _build(path, bar)
    finally:
        bar.close()


def _points_text(data: dict, ran: int) -> str:
    """How many points a study has and how many ran; a capacity search's probes as its command
    counted them, the short ones rerun longer among them (each drawn once: the longer decided),
    where "60 points, 60 ran" hid the 3 of 63 probes its table printed."""
    n = len(data["rows"])
    reruns = data.get("probes", n) - n
    if data["kind"] != "capacity" or not reruns:
        return f"{plural(n, 'point')}, {ran} ran"
    return (f"{plural(data['probes'], 'probe')}, {reruns} of them short ones rerun longer (the longer run decided "
            f"its rate): {plural(n, 'point')} drawn, {ran} ran")


def _build(path: Path, bar: Phases) -> Path:
    data = load_folder(path, bar)
    if data["kind"] == "run":
        bar.step("read the run")
    bar.add((3 if data["rate"] else 0) + (4 if data["runs"] else 0) + 1)
    figdir = path / "figures"
    runs: dict = data["runs"]
    first = next(iter(runs.values()), None)
    scenario = first.scenario if first else {}
    if not scenario:
        d = next((r["dir"] for r in data["rows"] if r.get("dir")), None)
        scenario = read_scenario(path / d) if d else {}
    # (classes that differ: no one limit, each request is judged by its class's)
    ttft_slo, tpot_slo = scenario_slo(scenario)
    if data["kind"] == "capacity" and meta_slo(data["meta"]):
        lim = meta_slo(data["meta"])  # draw the limits the search used, not the scenario's slo
        ttft_slo = next((v for (m, _), v in lim.items() if m == "ttft"), None)
        tpot_slo = next((v for (m, _), v in lim.items() if m == "tpot"), None)
    ctx = Context(data, scenario, ttft_slo, tpot_slo)
    labels = list(data["groups"]) or list(runs)
    colors = F.colors_for(labels)
    dcolors = {ctx.label(g): colors[g] for g in labels}
    where = f" at {_rate(data['rep_rate'], ctx.rate_unit)}" if data.get("rep_rate") is not None else ""
    md = [f"# servesim report: {path.name}", ""]
    meta = data["meta"]
    if data["kind"] == "run":
        s = first.summary
        md += [f"One run of scenario `{s['scenario']}`: {_model_name(first.scenario)} on "
               f"{deployment_gpus(first.scenario)}" + (f" ({ctx.shape})" if ctx.shape else "")
               + f", policy `{first.scenario.get('policy', {}).get('name')}`, "
               f"{plural(s['num_requests'], 'request')}"
               + (f" at {ctx.rate:.3g} {ctx.rate_unit}" if ctx.rate is not None else "")
               + (f" ({ctx.offered:.3g} arrived per second)" if ctx.offered else "") + ".", ""]
        md += _run_verdict(s)
    else:
        ran = sum(1 for r in data["rows"] if r["status"] == "ok")
        # (sweep.json's scenario may be null, as its reader allows: the header read "A sweep of `None`")
        of = f"`{meta['scenario']}`" if meta.get("scenario") else "a scenario sweep.json does not name"
        md += [f"A {data['kind']} of {of} ({ctx.model} on {ctx.gpu}"
               # (a capacity search's points are its probes, each on one seed)
               + ((f", one search on each of {ctx.seeds} seeds" if data["kind"] == "capacity" else
                   f", {ctx.seeds} seeds per point") if ctx.seeds > 1 else "")
               + f"): {_points_text(data, ran)}.", ""]
        if data["kind"] == "capacity":
            md += _capacity_lines(path, ctx.rate_unit)
        else:
            md += _verdict(data, ctx)
        if ctx.notes:
            md += ["## Caveats", ""] + [f"- {n}" for n in ctx.notes] + [""]
    md += ["## Summary", ""]
    if data["rows"]:
        rows = data["rows"]
        per_gpu = len({v for v in ctx.gpus.values() if v}) > 1
        if data["kind"] in ("compare", "sweep"):
            rows = ranked(rows)
        if per_gpu:
            rows = with_per_gpu(rows)
        cols = ["point", *data["cols"], "status", "goodput_rps", *(["goodput_per_gpu"] if per_gpu else []),
                "slo_attainment", "throughput_rps", *(["throughput_per_gpu"] if per_gpu else []), "ttft_p50_s",
                "ttft_p99_s", "tpot_p99_s", "itl_p99_s", "e2e_p99_s", "mean_batch_size", "num_gpus"]
        for r in rows:  # (results.csv written before the itl columns: ITL is TBT)
            r.setdefault("itl_p99_s", r.get("tbt_p99_s"))
        md += [_md_table(rows, cols, given=data["cols"]), ""]
        if ctx.seeds > 1 and data["kind"] == "capacity":  # (no mean, no seeds.csv: one probe a row)
            md += ["Each row is one probe on one seed (its seed column).", ""]
        elif ctx.seeds > 1:
            md += [f"Each figure is the mean over {ctx.seeds} seeds {chr(177)} the half-width of its 95% Student-t "
                   "interval; every run is in seeds.csv.", ""]
    if runs:
        md += [f"Per-run figures below{where}" + (" (each configuration's first seed)" if ctx.seeds > 1 else "")
               + ":", "", _run_table(runs, data["chosen"]), ""]
    md += ["## Figures", ""]

    def add(name, title, fig, sentence, notes=()):
        _decorate(fig, title, [*ctx.notes, *notes])
        F.save(fig, figdir / name)
        md.extend([f"### {title.split(' | ')[0]}", "", f"![{title}](figures/{name}.png)", "", sentence, ""])
        bar.step(name)

    if data["kind"] == "capacity" and len(data["groups"]) > 1:
        _capacity_figure(path, data, ctx, add)
    elif data["rate"]:
        _load_figures(data, ctx, dcolors, add)
    # per request class, when there are several (titles as the others': model, GPUs, policy, load, SLO)
    # (each class's panels judge it by its own SLO: the title names the runs', not a search's limits)
    service_section(path, data, runs, dcolors, add, F.subplots,
                    lambda what, rate=True: ctx.title(what, rate, runs_slo=True), ctx.label, ctx.keep)
    if runs:
        _run_figures(runs, ctx, dcolors, where, add, data["chosen"])
    if md[-2:] == ["## Figures", ""]:
        md += ["None: no finished run here holds the requests and steps tables the figures are drawn from "
               "(see the caveats).", ""]
    out = write_text_whole(path / "report.md", "\n".join(md).rstrip() + "\n")  # (a kill leaves the old one whole)
    bar.step("report.md")
    return out


def _seeds_sentence(sec) -> str:
    """A ``run --seeds N`` folder's headline figures over its seeds, with their 95% intervals (the
    report gave the first seed's goodput alone, as the run's), and whose the figures after it are;
    "" for a run of one seed. Seeds that all gave the same figures (nothing drawn from the seed)
    are said to, with no interval."""
    if not isinstance(sec, dict) or not isinstance(sec.get("figures"), dict) or len(sec.get("seeds") or []) < 2:
        return ""
    f, seeds = sec["figures"], sec["seeds"]
    whose = f"the figures after this are seed {seeds[0]}'s"
    if seeds_alike_figures(f):
        return (f"Every one of the {len(seeds)} seeds gave the same figures (nothing in the run is drawn from "
                f"the seed): no interval over them; {whose}.")
    offered = {"offered_rps": (f.get("offered_rps") or {}).get("mean")}

    def iv(name, scale=1.0, unit=""):
        x = f.get(name)
        if not isinstance(x, dict) or x.get("mean") is None:
            return None
        return format_interval(Interval(float(x["mean"]), math.nan if x.get("ci95") is None else float(x["ci95"]),
                                        int(x.get("n") or len(seeds)),
                                        bounds=BOUNDED.get(name) or rate_bounds(offered, name) or NONNEGATIVE),
                               scale, unit)

    parts = [(t, v) for t, v in (("goodput", iv("goodput_rps", unit="req/s")),
                                 ("SLO attainment", (iv("slo_attainment", 100.0) or "") + "%"
                                  if iv("slo_attainment") else None),
                                 ("p99 TTFT", iv("ttft_s.p99", 1e3, "ms")), ("p99 TPOT", iv("tpot_s.p99", 1e3, "ms")))
             if v]
    return (f"Over {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}; mean and 95% Student-t interval): "
            + ", ".join(f"{t} {v}" for t, v in parts) + f"; {whose}:")


def _run_verdict(s: dict) -> list:
    """A run folder's verdict: SLO attainment, the diagnosis and the warnings."""
    g = s.get("goodput_rps")  # (a number or null: read_summary's rule)
    out = ["## Verdict", "", f"Goodput {'-' if g is None else f'{g:.3g}'} req/s; {slo_phrase(s)}."]
    over = _seeds_sentence(s.get("seeds"))
    if over:
        out[-1] = over + " " + out[-1]
    d = ((s.get("profile") or {}).get("diagnosis") or {}).get("line")
    if d:
        out += ["", f"Diagnosis: {d}."]
    warns = s.get("warnings") or []
    # (run --seeds: the other seeds' runs may warn of what this one, the first seed's, does not)
    sec = s.get("seeds") if isinstance(s.get("seeds"), dict) else {}
    first = {w.get("code") for w in warns if isinstance(w, dict)}
    seeds = sec.get("seeds") if isinstance(sec.get("seeds"), list) and sec.get("seeds") else [None]
    warned = sec.get("warnings") if isinstance(sec.get("warnings"), dict) else {}  # (an edited file: none)
    others = [f"{code} ({seeds_text(on)})"
              for code, on in warned.items() if code not in first and isinstance(on, list) and on]
    if warns or others:
        out += ["", "## Caveats", ""] + [f"- {w['message']}" for w in warns]
        if others:
            out.append(f"- The runs on other seeds than {seeds[0]} (whose figures these are) also warned: "
                       f"{'; '.join(others)}; `servesim run --seed N` shows one in full.")
    return out + [""]


def _capacity_lines(path: Path, unit: str = "req/s") -> list:
    """The capacity search's answer in words; ``unit``: the rate searched (``Context.rate_unit``:
    sessions/s with workload.sessions, whose rate starts sessions)."""
    if not (path / "capacity.json").is_file():
        return []
    cap = read_capacity(path / "capacity.json")
    keep = f", keeping up (>= {cap['keep_up']:g} left per arrival)" if cap.get("keep_up") else ""
    if cap["capacity_rps"] is None:  # the search ran out of probes without an answer
        br = cap.get("bracket_rps") if isinstance(cap.get("bracket_rps"), list) else []
        lo, hi = [v if isinstance(v, (int, float)) else None for v in (br + [None, None])[:2]]
        return [f"**No capacity found** for `{cap['slo']}`{keep}: the probes ran out "
                + (f"between {lo:.4g} (meets) and {hi:.4g} {unit} (fails)." if lo and hi else
                   f"with every rate up to {lo:.4g} {unit} meeting." if lo else
                   f"with no rate meeting, down to {hi:.4g} {unit}." if hi else "before any probe."), ""]
    gpus = f"{plural(cap['num_gpus'], 'GPU')}"
    att = f" with {cap['attainment']:.0%} attainment" if cap.get("attainment") else ""
    if cap["capacity_rps"] == 0:  # no rate met, on every seed
        floor = cap.get("floor")
        return [f"**No rate meets** `{cap['slo']}`{keep}{att}" + (
            f": no rate can ({floor})." if
            isinstance(floor, str) else ": every probe failed, down to the lowest rate searched."), ""]
    iv = cap.get("interval")
    if isinstance(iv, dict) and cap.get("capacity_ci95_rps") is not None:
        ci = _cap_interval(cap)
        text = (f"**Capacity: {format_interval(ci, unit=unit)}** ({format_interval(ci.scaled(1 / cap['num_gpus']))}"
                f" {unit} per GPU, {gpus}) for `{cap['slo']}`{keep}{att}: the mean of {iv.get('seeds')} seeds' "
                f"searches with its 95% Student-t interval (per seed: "
                + ", ".join(f"{x['capacity_rps']:.4g}" for x in cap.get("seeds") or []
                            if isinstance(x.get("capacity_rps"), (int, float)))
                + f" {unit}).")
        text += _probe_length_text(cap)
        if iv.get("stopped_short"):
            text += f" Stopped short: {iv['stopped_short']}."
        return [text + _filling_text(cap), ""]
    return [f"**Capacity: {cap['capacity_rps']:.4g} {unit}** ({cap['capacity_rps_per_gpu']:.3g} {unit} per "
            f"GPU, {gpus}) for `{cap['slo']}`{keep}{att}"
            + (f"; the check at {cap['check_above_rps']:.4g} {unit} fails." if cap.get("check_above_rps") else ".")
            + " One seed: no interval." + _probe_length_text(cap) + _filling_text(cap), ""]


def _probe_length_text(cap: dict) -> str:
    """The requests per probe and how they were chosen (capacity.json ``probe_requests`` and
    ``probe_requests_why``: ``auto: ...`` or given), as a sentence, or "" (a capacity.json from
    before they were written)."""
    n, why = cap.get("probe_requests"), cap.get("probe_requests_why")
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    how = f"--probe-requests {why}" if isinstance(why, str) and why.startswith("auto") else "as given"
    return f" Probes of {n:,} requests ({how})."


def _filling_text(cap: dict) -> str:
    """The search's warning that the keep-up rule set its answer on probes too short for the
    batch to fill (capacity.json ``filling``), as a sentence after the capacity, or ""."""
    note = cap.get("filling")
    return f" **Warning:** {note[0].upper()}{note[1:]}." if isinstance(note, str) and note else ""


def _capacity_figure(path: Path, data: dict, ctx: Context, add) -> None:
    """A capacity search over several seeds: every seed's probes, the SLO and the interval."""
    cap = read_capacity(path / "capacity.json") if (path / "capacity.json").is_file() else {}
    band = (cap["capacity_rps"], cap.get("capacity_ci95_rps")) if cap.get("capacity_rps") else None
    metrics = [m for m, lim in (("ttft", ctx.ttft_slo), ("tpot", ctx.tpot_slo)) if lim is not None] or ["ttft"]
    fig, axes = F.subplots(1, len(metrics), figsize=(6.5 * len(metrics), 4.8), squeeze=False, sharex=True)
    for m, ax in zip(metrics, axes[0]):
        series = {g: {"rate": [r[RATE_KEY] for r in rs if r["status"] == "ok"],
                      "p99": [r[f"{m}_p99_s"] for r in rs if r["status"] == "ok"],
                      "meets": [r.get("meets") in (True, "True") for r in rs if r["status"] == "ok"],
                      "keeps_up": [{True: True, "True": True, False: False, "False": False}.get(r.get("probe_keeps_up"))
                                   for r in rs if r["status"] == "ok"]}
                  for g, rs in data["groups"].items()}
        F.capacity_probes(series, ax, m, {"ttft": ctx.ttft_slo, "tpot": ctx.tpot_slo}[m], band, ctx.rate_unit)
    n = len(data["groups"])
    add("capacity_probes", ctx.title(f"Capacity search over {n} seeds", rate=False), fig,
        f"Every probe of the {n} seeds' searches (a probe meets when every limit of `{cap.get('slo', '?')}` holds "
        "and it keeps up); the capacity is the mean of the seeds' answers"
        + (f", {format_interval(_cap_interval(cap), unit=ctx.rate_unit)} (95% interval)." if band else "."))


def _cap_interval(cap: dict):
    from servesim.outputs.intervals import NONNEGATIVE, Interval

    half = cap.get("capacity_ci95_rps")
    return Interval(cap["capacity_rps"], math.nan if half is None else half,
                    int((cap.get("interval") or {}).get("seeds") or 1), bounds=NONNEGATIVE)


def _load_figures(data: dict, ctx: Context, dcolors: dict, add) -> None:
    """Latency, goodput and throughput against the offered load, one curve per group."""
    groups = {g: rs for g, rs in data["groups"].items() if g in ctx.keep(data["groups"])}
    shown = {ctx.label(g): rs for g, rs in groups.items()}
    search = ctx.kind == "capacity"

    def verdict(r: dict) -> bool | None:
        # a capacity probe meets what the search judged (its limits and keep-up rule), not the
        # scenario's SLO: the peak was credited at the failing check 10% above the answer, above
        # what the deployment serves, while the headline said that probe fails; latency vs load
        # drew probes over the search's limit line filled, as meeting, beside "hollow: fails the SLO"
        if search and r.get("meets") is not None:
            return r["meets"] in (True, "True")
        return meets_slo(r)

    fig, axes = F.subplots(1, 2, figsize=(12, 4.8))
    s_ttft = _series(shown, "ttft_p50_s", "ttft_p99_s", verdict)
    s_tpot = _series(shown, "tpot_p50_s", "tpot_p99_s", verdict)
    F.latency_vs_load(s_ttft, axes[0], "ttft", ctx.ttft_slo, dcolors, ctx.rate_unit)
    F.latency_vs_load(s_tpot, axes[1], "tpot", ctx.tpot_slo, dcolors, ctx.rate_unit)
    add("latency_vs_load", ctx.title("Latency vs offered load", rate=False), fig,
        _load_sentence("ttft", _series(groups, "ttft_p50_s", "ttft_p99_s"), ctx.ttft_slo, ctx.rate_unit) + " "
        + _load_sentence("tpot", _series(groups, "tpot_p50_s", "tpot_p99_s"), ctx.tpot_slo, ctx.rate_unit))
    # Goodput at a load: the arrivals per second that end within the SLO (arrival rate x SLO
    # attainment). The summary's goodput_rps (vLLM's: within-SLO completions over the run's whole
    # length) also counts the drain after the last arrival, so runs of few requests read below
    # their load even when every request meets the SLO; it is the fallback for results files
    # without offered_rps.
    arrived = all(r.get("offered_rps") is not None and r["offered_rps"] == r["offered_rps"]
                  for rs in groups.values() for r in rs if r["status"] == "ok")
    key = "goodput_arrived_rps" if arrived else "goodput_rps"
    if arrived:
        by_point: dict = {}  # (runs on several seeds: each point's seeds.csv rows)
        for q in data.get("seed_rows") or []:
            by_point.setdefault(q.get("point"), []).append(q)
        groups = {g: [_with_arrived_goodput(r, by_point.get(r.get("point"))) for r in rs] for g, rs in groups.items()}
    gp = {g: {"rate": [r[RATE_KEY] for r in rs if r["status"] == "ok"],
              "goodput": [r[key] for r in rs if r["status"] == "ok"],
              "offered": [r.get("offered_rps") for r in rs if r["status"] == "ok"],
              "goodput_ci": [r.get(key + CI_SUFFIX) for r in rs if r["status"] == "ok"],
              "ok": [verdict(r) for r in rs if r["status"] == "ok"]}
          for g, rs in groups.items()}
    fig, ax = F.subplots(figsize=(6.5, 4.8))
    F.goodput_vs_load({ctx.label(g): d for g, d in gp.items()}, ax, dcolors,
                      ylabel="goodput: arrivals within SLO (req/s)" if arrived else None, rate_unit=ctx.rate_unit)

    # the peak over the loads where the SLO is met: a load that fails it (most often one that fell
    # behind, its attainment high only because the run ended) was credited as a group's peak, above
    # groups that meet it; a group that meets it at no load gives its highest, said to fail
    peak, meets = {}, {}
    for g, rs in groups.items():
        ran = [r for r in rs if r["status"] == "ok"]
        good = [r for r in ran if verdict(r) is not False]
        best = max(good or ran, key=lambda r: r[key], default=None)
        if best is not None:
            # (as goodput_rps, the column the per-GPU figures divide)
            peak[g] = {**best, "goodput_rps": best[key], "goodput_rps" + CI_SUFFIX: best.get(key + CI_SUFFIX)}
            meets[g] = bool(good)
    gpus = ctx.gpus
    per_gpu = len({gpus.get(g) for g in peak}) > 1  # unequal hardware: say it per GPU too
    order = sorted(peak, key=lambda g: (not meets[g], -peak[g]["goodput_rps"]))
    # a capacity search's limits are not what goodput counts: the runs' per-request SLO is
    run_slo = ctx.run_slo if ctx.kind == "capacity" else None
    if run_slo is None:
        within = "requests per second within the SLO"
    elif ctx.class_slos:  # (the top-level limits judge only a class without its own)
        within = f"requests per second within each request's class's SLO ({ctx.class_slos}), not the search's limits"
    elif F.slo_text(*run_slo):
        within = f"requests per second within the scenario's per-request SLO, {F.slo_text(*run_slo)}, not the " \
                 "search's limits"
    else:
        within = "completed requests per second: the scenario sets no per-request SLO, and goodput does not count " \
                 "the search's limits"
    if arrived:
        within = within.replace("completed requests per second", "arrivals per second that complete", 1) \
            .replace("requests per second", "arrivals per second", 1)
    add("goodput_vs_load", ctx.title("Goodput vs offered load", rate=False, runs_slo=run_slo is not None), fig,
        f"Peak goodput ({within}) at a load that meets "
        + ("the search's limits" if search else "the SLO") + ", highest first: " + "; ".join(
            f"{g} {value_text(peak[g], 'goodput_rps', unit='req/s')} (at {_rate(peak[g][RATE_KEY], ctx.rate_unit)}"
            + (f"; {value_text(with_per_gpu([peak[g]])[0], 'goodput_per_gpu')} per GPU of {gpus[g]}"
               if per_gpu and gpus.get(g) else "")
            + ("" if meets[g] else "; it fails the SLO at every load tried, this one included") + ")"
            for g in order) + "."
        + (" Goodput here is the arrival rate x the share of requests within the SLO; the summaries' "
           "goodput_rps (completions within the SLO over the run's whole length, the drain after the last "
           "arrival included) reads lower for runs of few requests." if arrived else ""))
    # throughput at a load: over the second half of the arrivals (without the drain, whose emptying
    # batch lowers a short run's whole-run figure most), where the results have it
    windowed = all(r.get("window_output_tokens_per_s") is not None
                   for rs in groups.values() for r in rs if r["status"] == "ok")
    tput = "window_output_tokens_per_s" if windowed else "output_tokens_per_s"
    tl = {g: {"rate": [r[RATE_KEY] for r in rs if r["status"] == "ok"],
              "throughput": [r[tput] for r in rs if r["status"] == "ok"],
              "latency": [r["tpot_p99_s"] for r in rs if r["status"] == "ok"],
              "latency_ci": [r.get("tpot_p99_s" + CI_SUFFIX) for r in rs if r["status"] == "ok"],
              "throughput_ci": [r.get(tput + CI_SUFFIX) for r in rs if r["status"] == "ok"],
              "ok": [verdict(r) for r in rs if r["status"] == "ok"]} for g, rs in groups.items()}
    fig, ax = F.subplots(figsize=(6.5, 4.8))
    xlabel = "throughput over the second half of the arrivals (output tokens/s)" if windowed else None
    F.throughput_latency({ctx.label(g): d for g, d in tl.items()}, ax, "tpot", "p99", dcolors, xlabel=xlabel,
                         slo_s=ctx.tpot_slo, rate_unit=ctx.rate_unit)
    # (with seeds, each figure with its interval and to the digits that supports: "4866 output
    # tok/s at p99 TPOT 61.3 ms" was printed for 4900 +- 1000 and 60 +- 70 ms)
    last = {g: {tput: d["throughput"][-1], tput + CI_SUFFIX: d["throughput_ci"][-1],
                "tpot_p99_s": d["latency"][-1], "tpot_p99_s" + CI_SUFFIX: d["latency_ci"][-1]}
            for g, d in tl.items() if d["rate"]}
    add("throughput_latency", ctx.title("Throughput vs latency", rate=False), fig,
        "At the highest load each ran, " + "; ".join(
            f"{g} {noun(_many(g), 'delivers', 'deliver')} "
            + (f"{d['throughput'][-1]:.0f}" if last[g][tput + CI_SUFFIX] is None else value_text(last[g], tput))
            + " output tok/s" + (" (over the second half of the arrivals)" if windowed else "")
            + " at p99 TPOT " + (_ms(d["latency"][-1]) if last[g]["tpot_p99_s" + CI_SUFFIX] is None
                                 else value_text(last[g], "tpot_p99_s", 1e3, "ms"))
            + (f" but {noun(_many(g), 'fails', 'fail')} the SLO there" if d["ok"][-1] is False else "")
            for g, d in tl.items() if d["rate"]) + ".")


def _with_arrived_goodput(r: dict, seed_rows: list | None = None) -> dict:
    """``r`` with ``goodput_arrived_rps``: its arrival rate (``offered_rps``) x its SLO attainment,
    and its 95% half-width where they have one (runs on several seeds). With the point's seeds.csv
    rows (``seed_rows``), the mean over the seeds of each seed's own rate x its own attainment, with
    the t-interval of those products: the product of the two means was drawn (seeds that drew 10 and
    20 req/s of arrivals, with every request and half of them within the SLO, 10 req/s each: drawn
    at 15 x 0.75 = 11.25). Without them, the two intervals combine, to first order, as
    sqrt((rate x h_attainment)^2 + (attainment x h_rate)^2) (the rate's own was left out: "22.1 +- 0
    req/s" over seeds that drew 21.3 and 22.9 req/s of arrivals)."""
    if r.get("status") != "ok":
        return r
    o, a = r["offered_rps"], r["slo_attainment"]
    per_seed = [q["offered_rps"] * q["slo_attainment"] for q in seed_rows or ()
                if q.get("status") == "ok" and isinstance(q.get("offered_rps"), (int, float))
                and isinstance(q.get("slo_attainment"), (int, float))]
    if len(per_seed) > 1:
        from servesim.outputs.intervals import t_interval

        iv = t_interval(per_seed)
        return {**r, "goodput_arrived_rps": iv.mean, "goodput_arrived_rps" + CI_SUFFIX: iv.half}
    out = {**r, "goodput_arrived_rps": o * a}
    h_a, h_o = r.get("slo_attainment" + CI_SUFFIX), r.get("offered_rps" + CI_SUFFIX)
    if (h_a is not None and h_a == h_a) or (h_o is not None and h_o == h_o):
        h_a = h_a if h_a is not None and h_a == h_a else 0.0
        h_o = h_o if h_o is not None and h_o == h_o else 0.0
        out["goodput_arrived_rps" + CI_SUFFIX] = math.hypot(o * h_a, a * h_o)
    return out


def _run_figures(runs: dict, ctx: Context, dcolors: dict, where: str, add, chosen: dict) -> None:
    """CDFs, TTFT breakdown, timeline and roofline of each group's representative run."""
    rows = {g: r for g, r in chosen.items()}
    for g, r in runs.items():
        rows.setdefault(g, r.summary)
    kept = [g for g in ctx.keep(runs)]
    left_out = kept[MAX_GROUPS_PER_PANEL:]
    shown_groups = kept[:MAX_GROUPS_PER_PANEL]
    omit = ([f"{len(left_out)} of {len(kept)} configurations are not drawn in the side-by-side figures "
             f"(timeline, roofline): {', '.join(left_out)}"] if left_out else [])
    runs_kept = {g: runs[g] for g in kept}
    # CDFs: a configuration that fails the SLO says so in its legend entry (one whose TTFT
    # fails by seconds drew the leftmost, best-looking TPOT and ITL curves, named as the rest)
    metrics = ["ttft", "tpot", "e2e"] + (["tbt"] if all(r.tbt_s is not None for r in runs.values()) else [])
    fig, axes = F.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4.4))
    sentences = []
    named = {g: ctx.label(g) + (", fails the SLO" if meets_slo(rows.get(g) or {}) is False else "")
             for g in runs_kept}
    cdf_colors = {named[g]: dcolors[ctx.label(g)] for g in runs_kept}
    for m, ax in zip(metrics, axes):
        slo_m = {"ttft": ctx.ttft_slo, "tpot": ctx.tpot_slo}.get(m)
        F.latency_cdfs({named[g]: r.latency(m) for g, r in runs_kept.items()}, ax, m, slo_m, cdf_colors)
        sentences.append(_cdf_sentence(m, {g: r.latency(m) for g, r in runs_kept.items()}, where, ctx, rows))
    if "tbt" not in metrics:
        sentences.append("(ITL samples, the token gaps, are not kept in a plain run folder; sweeps and comparisons "
                         "keep them.)")
    add("latency_cdfs", ctx.title("Latency CDFs"), fig, " ".join(sentences))

    # TTFT breakdown
    bd = {g: r.ttft_breakdown() for g, r in runs_kept.items()}
    fig, ax = F.subplots(figsize=(max(5.5, 1.8 * len(bd) + 2), 4.6))
    F.ttft_breakdown({ctx.label(g): d for g, d in bd.items()}, ax)
    parts = []
    for g, d in bd.items():
        if not d:
            parts.append(f"{g}: no request completed")
            continue
        tot = d["queueing"] + d["prefill"] + d.get("api", 0.0)
        if tot > 0:
            x = f" then {_ms(d['transfer'])} of KV transfer to the decode pool" if d["transfer"] > 0 else ""
            a = f", {d['api'] / tot:.0%} API server" if d.get("api", 0.0) > 0 else ""
            parts.append(f"{g} {_ms(tot)} ({d['queueing'] / tot:.0%} queueing, "
                         f"{d['prefill'] / tot:.0%} prefill{a}){x}{_slo_note(g, ctx)}")
    add("ttft_breakdown", ctx.title("TTFT breakdown"), fig, "Mean TTFT" + where + ": " + "; ".join(parts) + ".")

    shown = [(g, runs[g]) for g in shown_groups]
    # per-replica timeline: the first replica of each pool (a P/D split's decode pool, where
    # TPOT is made, as well as its prefill pool); rows share their y axis, so panels compare
    panels = [(g, r, first, pool) for g, r in shown
              for pool, first, _, _ in (r.pools() or [("colocated", 0, 1, None)])]
    fig, columns = F.panel_grid(len(panels), 4, (5.5, 9.5), sharex=True, sharey=True)
    parts = []
    tds = [r.timeline_data(first) for _, r, first, _ in panels]
    # one drawing for every panel (shared axes must mean the same units): time bins as soon as
    # one panel has too many steps to draw one by one
    width = None
    if any(len(td["t"]) > F.MAX_STEP_POINTS for td in tds):
        width = F.bin_width_s(max(float(td["t"].max()) for td in tds if len(td["t"])))
    for j, ((g, r, first, pool), td) in enumerate(zip(panels, tds)):
        F.replica_timeline(td, columns[j], width_s=width)
        name = f"replica {first}" + ("" if pool == "colocated" else f" ({pool} pool)")
        columns[j][0].set_title(F.wrap_label(f"{ctx.label(g)}: {name}", 56), fontsize=10)
        kv = td["kv_usage"]
        qmax = int(td["waiting"].max()) if len(td["waiting"]) else 0
        tq = float(td["queue_t"][td["waiting"].argmax()]) if len(td["waiting"]) else 0.0
        parts.append(f"{g} {name}: mean batch {td['num_seqs'].mean() if len(td['num_seqs']) else 0:.1f} "
                     f"sequences, KV peaks at {(kv.max() if len(kv) else 0) * 100:.0f}%, "
                     + (f"up to {qmax} request{'' if qmax == 1 else 's'} waiting (at {tq:.0f} s)" if qmax
                        else "no request waiting"))
    bins = (f" Steps are drawn in {width:g} s time bins (a panel has more than {F.MAX_STEP_POINTS} steps): the "
            "mean per bin as a line, its min-max as a band, tokens as tokens per second." if width else "")
    add("timeline", ctx.title("Per-replica timeline"), fig,
        "The first replica of each pool" + where + ": " + "; ".join(parts) + "." + bins, omit)

    # roofline: one panel per configuration, or per pool where a P/D split's pools differ in GPU
    # or TP (each under its own roofline: drawn as one, the decode pool's steps were left out)
    roofs = [(g, r, pool) for g, r in shown for pool in r.roofline_pools()]
    fig, columns = F.panel_grid(len(roofs), 1, (6.0, 5.0), sharex=True, sharey=True)
    parts = []
    for j, (g, r, pool) in enumerate(roofs):
        rd = r.roofline_data(pool)
        F.roofline(rd, columns[j][0])
        what = "steps on the roofline" if pool is None else f"{pool} pool's steps on its roofline"
        columns[j][0].set_title(F.wrap_label(f"{ctx.label(g)}: {what}", 60), fontsize=10)
        parts.append(_roofline_sentence(g if pool is None else f"{g} {pool} pool", rd, brief=j > 0))
    add("roofline", ctx.title("Roofline"), fig, " ".join(parts), omit)


def meta_slo(meta) -> dict:
    try:
        return parse_slo(meta.get("slo") or "")
    except Exception:  # noqa: BLE001 - an old or hand-edited sweep.json: fall back to the scenario's
        return {}


def _share(x: float) -> str:
    return f"{x:.1%}" if x < 0.01 else f"{x:.0%}"


def _roofline_sentence(g, rd, brief: bool = False) -> str:
    import numpy as np

    fl, by, dur, kind = rd["flops"], rd["bytes"], rd["duration_s"], np.asarray(rd["kind"])
    ridge = rd["peak_flops"] / rd["mem_bw"]
    ok = (by > 0) & (dur > 0)
    ai = np.where(ok, fl / np.where(by > 0, by, 1), 0)
    if not ok.any():
        return f"{g}: no steps ran."
    below = float((ai[ok] < ridge).mean())
    if brief:
        parts = [f"{g}: {below:.0%} left of the ridge"]
    else:
        parts = [f"{g}: {below:.0%} of steps lie left of the ridge ({ridge:.0f} FLOP/B, memory-bound side)"]
    for k in ("decode", "prefill", "mixed"):
        m = ok & (kind == k)
        if m.any():
            ach = fl[m].sum() / dur[m].sum()
            if brief:
                parts.append(f"{k} {ach / 1e12:.0f} TFLOP/s")
            else:
                # (the FLOP/s is over the steps' time, all FLOPs / all seconds, not a median: "a median
                # 14 FLOP/B and 71 TFLOP/s" read as a median step at 71, where the median step ran 34)
                parts.append(f"{k} steps reach a median {np.median(ai[m]):.0f} FLOP/B and, over their time, "
                             f"{ach / 1e12:.0f} TFLOP/s ({_share(ach / rd['peak_flops'])} of peak)")
    return ("; " if not brief else ", ").join(parts) + "."
