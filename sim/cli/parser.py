"""Every ``servesim`` subcommand's arguments, in one place. Each subcommand's ``func`` is its
handler (``sim/cli/*.py``), which turns the parsed arguments into calls of the library
(``servesim.simulation``, ``servesim.cost``, ``servesim.studies``) and prints the outcome."""

from __future__ import annotations

import argparse
import sys

from servesim import __version__
from servesim.errors import DIGITS_RULE, InputError, misgrouped_number, non_ascii_number, prefixed_number


class _Parser(argparse.ArgumentParser):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.register("action", None, _StoreOnce)  # (every one-value option: given twice, refused)
        self.register("action", "store", _StoreOnce)

    def error(self, message):  # argparse's own exit 2, with our one-paragraph style
        self.print_usage(sys.stderr)
        where = "" if self.prog == "servesim" else f"{self.prog}: "  # (main prints "servesim: error: ")
        raise InputError(f"{where}{message}{self._hint(message)}")

    def _hint(self, message: str) -> str:
        """The closest valid name for a misspelt subcommand or choice ("servesim rnu", "--format
        parqet") or option ("--polcy"): argparse of Python 3.11 names none."""
        import difflib
        import re

        m = re.match(r"argument [^:]+: invalid choice: '(.*)' \(choose from (.*)\)$", message, re.S)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            return f" (did you mean {close[0]!r}?)" if close else ""
        if message.startswith("unrecognized arguments: "):
            options = [o for o in self._option_string_actions if o.startswith("--")]
            words = [w.split("=")[0] for w in message[len("unrecognized arguments: "):].split() if w.startswith("--")]
            close = {w: difflib.get_close_matches(w, options, n=1) for w in words}
            hints = [(w, c[0]) for w, c in close.items() if c]
            if len(hints) == 1:
                return f" (did you mean {hints[0][1]!r}?)"
            return f" (did you mean {', '.join(f'{c!r} for {w!r}' for w, c in hints)}?)" if hints else ""
        return ""


def _number(convert, text: str):
    """``convert(text)`` for a flag's value, refusing a number in other digits than ASCII's
    (DIGITS_RULE: Python's int() reads １０ as 10; a scenario field and a trace cell do not)."""
    if non_ascii_number(text) or prefixed_number(text) or misgrouped_number(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not written in {DIGITS_RULE}")
    return convert(text)


def _int(text: str) -> int:
    return _number(int, text)


def _float(text: str) -> float:
    return _number(float, text)


_int.__name__, _float.__name__ = "int", "float"  # (argparse's message for other text: "invalid int value")


def _int_or_auto(text: str) -> int | None:
    """``auto`` (None: the command chooses) or an integer."""
    return None if text.strip().lower() == "auto" else _number(int, text)


_int_or_auto.__name__ = "'auto' or int"  # ("invalid 'auto' or int value: 'x'")


def _plan_probe_requests(text: str) -> int:
    """``plan --probe-requests``: a count. ``auto`` is capacity's (4 x the requests the deployment
    holds at once) and is named as such: plan's per-unit probes only seed its unit search, and
    argparse's "invalid int value: 'auto'" read as if the flag took no such word anywhere."""
    if text.strip().lower() == "auto":
        raise argparse.ArgumentTypeError(
            "plan takes a count of requests here (default: max(the scenario's num_requests, 1000)); auto is "
            "servesim capacity's: plan's per-unit probes only pick the unit count its search starts from, and every "
            "answer is judged on runs at the rate (--requests), run longer where too short to judge keeping up "
            "(docs/sizing.md)")
    return _number(int, text)


_plan_probe_requests.__name__ = "int"


MAX_SEED = 2**63 - 1  # the scenario's seed field's range


def _seed(text: str) -> int:
    """``--seed``'s value, checked where it is given (the lessons that simulate nothing, and the
    robustness runs, took -5 in silence or named the scenario's field for it)."""
    try:
        seed = _int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is from 0 to {MAX_SEED}, got {seed}")
    return seed


class _StoreOnce(argparse._StoreAction):
    """Every option that takes one value (``--seed 1``, ``--out DIR``, ``--write-docs [FILE]``):
    given again, by any spelling (``--seed=2``, an abbreviation ``--se 2``, an alias), refused
    naming both values. argparse kept the last in silence (``run --seed 1 --seed 2`` ran seed 2,
    ``capacity --slo A --slo B`` searched against B alone). Registered as every ``_Parser``'s
    ``store`` action; the repeatable options are ``append`` ones (``--set``, ``--grid``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if self.option_strings:  # (a positional is consumed once by argparse itself)
            given = namespace.__dict__.setdefault("_given_once", {})
            # (named as written: ``auto`` is read as None, the command's choice)
            shown = "auto" if values is None and self.type is _int_or_auto else values
            if self.dest in given:
                raise argparse.ArgumentError(self, self._twice(option_string or self.option_strings[0],
                                                               given[self.dest], shown))
            given[self.dest] = shown
        setattr(namespace, self.dest, values)

    def _twice(self, flag, first, values) -> str:
        if first == values:
            return f"{values!r} is given twice; give it once"
        return f"given twice ({first!r}, then {values!r}); give it once"


class _Once(_StoreOnce):
    """A list flag (``--gpus a,b``) given once: given again, refused naming both and the one list
    that holds both (``--gpus h100-sxm --gpus a100-80g`` searched only the A100)."""

    def _twice(self, flag, first, values) -> str:
        if first == values:
            return super()._twice(flag, first, values)
        return f"given twice ({first!r}, then {values!r}); give one comma-separated list: {flag} {first},{values}"


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The whole parser; given ``argv`` whose first word is a subcommand, only that subcommand's
    group (the others' arguments import the study modules for their choices: ~50 ms that
    ``servesim run`` does not need). Anything else (no command, an option first, a typo) gets every
    subcommand, so that help and "invalid choice" list them all."""
    p = _Parser(prog="servesim", description="Discrete-event simulator of LLM inference serving.")
    p.add_argument("--version", action="version", version=f"servesim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    first = argv[0] if argv else None
    groups = [add for names, add in _GROUPS if first in names] or [add for _, add in _GROUPS]
    for add in groups:
        add(sub)
    p.commands = sub.choices  # (parse: words left over are the subcommand's error, not the top level's)
    return p


def parse(argv: list) -> argparse.Namespace:
    """``argv`` parsed; words no option takes are refused by the subcommand's parser (its usage,
    "servesim run: unrecognized arguments: ..."), with a hint when one looks like a field override
    without ``--set``."""
    p = build_parser(argv)
    args, extra = p.parse_known_args(argv)
    sub = p.commands.get(getattr(args, "command", None))
    if extra and sub is not None:
        # argparse gives an optional positional (validate-run's scenario, after its result) nothing
        # when it matches the positionals before the first option: a word after the options is
        # then left over, though the usage line allows it there
        for action in sub._actions:
            if (not action.option_strings and action.nargs == "?" and getattr(args, action.dest, None) is None
                    and extra and not extra[0].startswith("-") and "=" not in extra[0]):
                setattr(args, action.dest, extra.pop(0))
    if extra:
        hint = ""
        if any("=" in x and not x.startswith("-") for x in extra):
            hint = " (a field override goes after --set: --set KEY=VALUE)"
        p.commands.get(getattr(args, "command", None), p).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _run_and_validate(sub) -> None:
    from servesim.cli.main import cmd_run, cmd_validate

    r = sub.add_parser("run", help="run a scenario (the packaged default when none is given)")
    r.add_argument("scenario", nargs="?", help="scenario YAML file, or a packaged scenario's name (e.g. chat, "
                                               "lessons/offline) where no such file exists")
    r.add_argument("--out", default="out", help="output folder (default: ./out)")
    _overrides(r, "override a field, e.g. policy.max_num_seqs=64 (a list entry: workload.classes[0].share=2)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--outputs", metavar="NAME[,NAME]", action=_Once,
                   help="which files to write: summary, requests, steps, scenario (default: all)")
    r.add_argument("--format", default="csv", help="requests and steps as csv (default) or parquet (needs pyarrow)")
    r.add_argument("--trace-events", metavar="FILE",
                   help="also write a Chrome/Perfetto trace (JSON) of steps and requests")
    r.add_argument("--decision-trace", metavar="FILE",
                   help="also write why each request waited, decision by decision (CSV; its spans go into "
                        "--trace-events too, and a summary into summary.json)")
    r.add_argument("--engine", choices=["fast", "reference"],
                   help="simulation engine (default: the scenario's engine, fast); same results either way")
    _seeds(r, "also run the N - 1 seeds after the scenario's and add their 95%% intervals (summary.json seeds)")
    r.add_argument("--workers", type=_int, help="with --seeds: parallel worker processes (default: all cores)")
    r.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="check a scenario and print what is wrong")
    v.add_argument("scenario", help="scenario YAML file, or a packaged scenario's name (e.g. chat)")
    v.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, as servesim run --set")
    v.set_defaults(func=cmd_validate)


def _cost(sub) -> None:
    """``cost``, ``calibrate`` and ``validate-cost``."""
    from servesim.cli.cost import cmd_calibrate, cmd_cost, cmd_validate_cost

    c = sub.add_parser("cost", help="one step's cost with a per-operator breakdown")
    c.add_argument("--model", required=True, help="catalog model id or a Hugging Face config.json path")
    c.add_argument("--gpu", required=True, help="catalog GPU or a GPU YAML path")
    c.add_argument("--tp", type=_int, default=1, help="tensor-parallel GPUs")
    c.add_argument("--pp", type=_int, default=1, help="pipeline stages (the step crosses all of them)")
    c.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp8", "int4"], help="weight dtype")
    c.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"],
                   help="KV cache dtype (default: the 16-bit dtype the model computes in)")
    c.add_argument("--allreduce", choices=["custom", "nccl"],
                   help="TP all-reduce inside the NVLink domain (as the scenario's cost.allreduce; default: the engine "
                        "profile's: nccl for hf-eager, sarathi-serve, vllm-v0.2 and vllm-v0.2.3, else custom)")
    c.add_argument("--expert-parallel", action="store_true",
                   help="MoE: experts spread over the TP ranks (as hardware.expert_parallel)")
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("--prefill", type=_int, metavar="TOKENS", help="a prefill step of this many prompt tokens")
    g.add_argument("--decode-batch", type=_int, metavar="B", help="a decode step of B sequences, one token each")
    c.add_argument("--context", type=_int, default=0, help="KV tokens already computed per sequence")
    c.add_argument("--json", action="store_true", help="print the cost as JSON")
    c.add_argument("--calibration", default="auto", help="auto (shipped fit) | none (v0 figures) | FILE")
    c.add_argument("--engine", default="vllm-v1", help="engine profile (as the scenario's cost.engine): per-step "
                   "overhead and its overlap, CUDA graphs (capture sizes for max_num_seqs 256)")
    c.add_argument("--profiles", metavar="DIR", help="price the per-layer kernels from measured timings of this "
                   "model shape and TP (Vidur-format profiling folder; as the scenario's cost.profiles)")
    c.add_argument("--device", help="with --profiles: device folder under compute/ (default: from the GPU name)")
    c.set_defaults(func=cmd_cost)

    c = sub.add_parser("calibrate", help="fit the cost model's efficiencies to measured kernel timings")
    _profile_args(c)
    c.add_argument("--out", required=True, metavar="FILE", help="calibration YAML to write")
    c.add_argument("--note", help="a line of provenance to add to the file's header comment")
    c.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("validate-cost", help="predicted vs measured operator times: MAPE and worst case")
    _profile_args(v)
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
    v.add_argument("--quiet", action="store_true", help="no progress on stderr")
    v.set_defaults(func=cmd_validate_cost)


def _profile_args(p) -> None:
    """The measurements ``calibrate`` and ``validate-cost`` read."""
    p.add_argument("--profiles", required=True, metavar="DIR",
                   help="Vidur-format profiling folder (compute/<device>/<org>/<model>/mlp.csv, network/<node>/)")
    p.add_argument("--gpu", required=True, help="catalog GPU (or GPU YAML) the measurements were taken on")
    p.add_argument("--device", help="device folder under compute/ (default: from the GPU name, e.g. a100)")
    p.add_argument("--node", help="network folder for collectives (default: <device>_*, a DGX one first)")
    p.add_argument("--max-tokens", type=_int, default=4096, help="validate over num_tokens <= this (default 4096)")


def _overrides(p, set_help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) and ``--seed N``: changes to the scenario file."""
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    p.add_argument("--seed", type=_seed, help="override the scenario's seed")


def _seeds(p, help_text: str, default=1) -> None:
    p.add_argument("--seeds", type=_int, default=default, metavar="N", help=help_text)


def _study_outputs(p) -> None:
    """``--outputs`` of ``sweep`` and ``compare``: which files each run folder gets."""
    p.add_argument("--outputs", metavar="NAME[,NAME]", action=_Once,
                   help="files in each run folder: requests, steps, tbt (tbt_s.npy), besides summary and scenario "
                        "(always) (default: all); the report's per-run figures need requests and steps")


def _executor_args(p) -> None:
    """Shared by ``sweep``, ``capacity`` and ``compare``: where the points run."""
    p.add_argument("--workers", type=_int, help="parallel worker processes (default: all cores)")
    p.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="local processes (default) or Ray (pip install 'servesim[ray]')")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _studies(sub) -> None:
    """``sweep``, ``capacity`` and ``compare``."""
    from servesim.cli.studies import cmd_capacity, cmd_compare, cmd_sweep
    from servesim.studies.capacity import METRICS, STATS

    p = sub.add_parser("sweep", help="run the cross product of scenario fields (parallel, resumable)")
    p.add_argument("scenario", help="scenario YAML file (may hold a sweep: {grid: {...}} block)")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                   help="a field and its values, e.g. workload.arrival.rate_rps=2,4,8 (repeatable)")
    p.add_argument("--out", required=True, help="output folder (results.csv, runs/<hash>/...)")
    _overrides(p, "override a field for every point (not a swept one: each point sets those)")
    _seeds(p, "run each point on N seeds: results.csv has means and 95%% intervals (<figure>_ci95), seeds.csv "
              "every run (default 1)")
    _executor_args(p)
    _study_outputs(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("capacity", help="highest arrival rate at which the SLOs hold (bisection on rate)")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--slo", required=True, metavar="METRIC_STAT=S,...",
                   help="limits in seconds (or with ms), e.g. ttft_p99=0.5,tpot_p99=0.05; metrics "
                        f"{', '.join(METRICS)}; stats {', '.join(STATS)}")
    p.add_argument("--attainment", type=_float, help="instead: this share of requests within every limit (e.g. 0.9)")
    p.add_argument("--per-gpu", action="store_true", help="also report capacity divided by the GPUs used")
    p.add_argument("--probe-requests", type=_int_or_auto, default=None, metavar="N|auto",
                   help="requests per probe (default auto: max(the scenario's num_requests, 1000, 4 x the requests "
                        "the deployment holds at once when full), rounded up to 100)")
    p.add_argument("--probe-duration", type=_float, metavar="S",
                   help="make each probe at least S seconds of arrivals (default: two periods of a periodic "
                        "arrival process, else off)")
    p.add_argument("--start", type=_float, help="first rate to probe (default: the scenario's rate)")
    p.add_argument("--tol", type=_float, default=0.02, help="stop when the bracket is this narrow (default 0.02)")
    p.add_argument("--max-probes", type=_int, default=40,
                   help="give up after this many probes, with exit 2 and no answer (default 40)")
    p.add_argument("--keep-up", type=_float, default=0.9, metavar="SHARE",
                   help="a probe must also keep up: over the second half of its arrivals, requests that "
                        "leave >= SHARE x requests that arrive (default 0.9; 0: off)")
    p.add_argument("--out", help="keep the probes here (results.csv, runs/, capacity.json)")
    _overrides(p, "override a field")
    _seeds(p, "search on exactly N seeds (1: one search, no interval); default: 3 seeds, then more until the "
              "95%% interval's half-width is <= --ci-target of the capacity or --max-seeds ran", default=None)
    # (defaults None: given with --seeds they would change nothing, and are refused; cmd_capacity)
    p.add_argument("--max-seeds", type=_int, default=None, help="without --seeds: stop adding seeds here (default 10)")
    p.add_argument("--ci-target", type=_float, default=None, metavar="SHARE",
                   help="without --seeds: the half-width to reach, as a share of the capacity (default 0.05)")
    _executor_args(p)
    p.add_argument("--outputs", metavar="NAME[,NAME]", action=_Once,
                   help="files in each probe's run folder: steps, besides summary, scenario, requests and tbt "
                        "(always: each probe's verdict is read from them) (default: all)")
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("compare", help="the same workload through each policy: a table and figures")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--policies", metavar="A,B,...", action=_Once,
                   help="policies to compare: registered names (continuous, chunked_prefill, static, pd_split, "
                        "installed plug-ins) or module:Class")
    p.add_argument("--variant", nargs="+", action="append", metavar=("LABEL", "KEY=VALUE"),
                   help="a labelled configuration: LABEL KEY=VALUE [KEY=VALUE ...] (repeatable)")
    p.add_argument("--rates", metavar="R1,R2,...", action=_Once, help="also sweep workload.arrival.rate_rps (req/s)")
    p.add_argument("--out", default="compare-out", help="output folder (default: ./compare-out)")
    _overrides(p, "override a field for every run (not one every configuration sets, e.g. policy.name with --policies)")
    _seeds(p, "run each configuration on N seeds (the same N for all): 95%% intervals, and differences paired "
              "by seed (default 1)")
    p.add_argument("--no-report", action="store_true", help="skip figures and report.md")
    _executor_args(p)
    _study_outputs(p)
    p.set_defaults(func=cmd_compare)


def _plan(sub) -> None:
    from servesim.cli.plan import cmd_plan
    from servesim.studies.capacity import METRICS, STATS
    from servesim.studies.plan import OBJECTIVES
    from servesim.studies.plan_space import POLICIES

    p = sub.add_parser("plan", help="the cheapest deployment (GPU, TP/PP, replicas, policy or P/D split) that "
                       "serves a rate within the SLO, verified by simulation")
    p.add_argument("scenario", help="scenario YAML file (model, workload; its hardware and policy are searched)")
    p.add_argument("--rate", type=_float, required=True, metavar="R", help="the arrival rate to serve (req/s)")
    p.add_argument("--slo", required=True, metavar="METRIC_STAT=S,...",
                   help="limits as servesim capacity takes them, e.g. ttft_p99=2,tpot_p99=100ms; metrics "
                        f"{', '.join(METRICS)}; stats {', '.join(STATS)}")
    p.add_argument("--attainment", type=_float, help="instead: this share of requests within every limit")
    p.add_argument("--gpus", metavar="LIST", action=_Once,
                   help="GPU types to try, e.g. h100-sxm,a100-80g (default: the scenario's)")
    p.add_argument("--tp", default="1,2,4,8", action=_Once, metavar="LIST",
                   help="tensor-parallel sizes (default 1,2,4,8)")
    p.add_argument("--pp", default="1", action=_Once, metavar="LIST",
                   help="pipeline stages, colocated shapes (default 1)")
    p.add_argument("--policies", default=",".join(POLICIES), action=_Once, metavar="LIST",
                   help=f"deployment kinds to try (default {','.join(POLICIES)}); a plug-in policy as "
                        "policy.name takes it (module:Class) is a colocated shape with the scenario's budgets")
    p.add_argument("--chunks", default="512,2048", action=_Once, metavar="LIST",
                   help="chunked prefill token budgets to try (default 512,2048)")
    p.add_argument("--pd-ratios", default="1:1,1:2,2:1,1:3", action=_Once, metavar="P:D,...",
                   help="P/D split: prefill:decode replicas per unit (default 1:1,1:2,2:1,1:3)")
    p.add_argument("--mixed-pd", action="store_true",
                   help="also P/D splits whose prefill and decode pools use different GPU types of --gpus")
    p.add_argument("--max-gpus", type=_int, default=64, help="the largest deployment to consider (default 64)")
    p.add_argument("--objective", default="cost", choices=OBJECTIVES,
                   help="minimize $/hour (default), GPUs, or modeled mean power at the rate")
    p.add_argument("--seeds", type=_int, default=3, help="workload seeds every answer is verified with (default 3)")
    p.add_argument("--price", action="append", metavar="GPU=USD",
                   help="USD per GPU-hour, over the catalog's list price (repeatable)")
    p.add_argument("--probe-requests", type=_plan_probe_requests, help="requests per unit in a capacity probe "
                   "(default: max(the "
                   "scenario's, 1000))")
    p.add_argument("--requests", type=_int, help="requests in every run at the rate (default: max(probe requests, "
                   "300 s of arrivals))")
    p.add_argument("--tol", type=_float, default=0.05, help="capacity search bracket (default 0.05)")
    p.add_argument("--keep-up", type=_float, default=0.9, metavar="SHARE",
                   help="every run must keep up, as servesim capacity (default 0.9; 0: off)")
    p.add_argument("--max-probes", type=_int, default=30, help="capacity probes per search (default 30)")
    p.add_argument("--verify-top", type=_int, default=3,
                   help="configurations whose whole deployment gets a capacity search (default 3)")
    p.add_argument("--exhaustive", action="store_true",
                   help="simulate every shape, also those whose bound cannot beat the best verified")
    p.add_argument("--top", type=_int, default=10, help="rows of the ranked table printed (default 10)")
    p.add_argument("--out", default="plan-out", help="output folder (default: ./plan-out)")
    p.add_argument("--no-report", action="store_true", help="skip figures and report.md")
    _overrides(p, "override a field of the scenario (not one the plan sets in its runs: --set hardware.tp=2 is "
                  "refused, --tp 2 pins it)")
    _executor_args(p)
    p.set_defaults(func=cmd_plan)


def _report(sub) -> None:
    from servesim.cli.report import cmd_report

    p = sub.add_parser("report", help="figures and report.md from a run, sweep, capacity, compare or plan folder")
    p.add_argument("dir", help="output folder of servesim run, sweep, capacity, compare or plan")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_report)


def _lessons(sub) -> None:
    from servesim.cli.studies import cmd_lessons
    from servesim.studies.lessons import LESSONS

    p = sub.add_parser("lessons", help="reproduce the prefill/decode lessons: claims, numbers, verdicts, figures")
    p.add_argument("--out", default="out/lessons", help="output folder (default: ./out/lessons)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only these lessons (repeat or comma-separate): {', '.join(LESSONS)}")
    p.add_argument("--quick", action="store_true", help="smaller simulations (the test suite's subset)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--seed", type=_seed, help="replace every lesson scenario's seed (robustness checks)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_lessons)


def _validate_run(sub) -> None:
    from servesim.cli.validate_run import cmd_validate_run

    p = sub.add_parser("validate-run", help="replay a vLLM serving benchmark's requests (or a table of measured "
                       "requests) through a scenario: measured vs simulated TTFT, TPOT, ITL, E2E")
    p.add_argument("result", help="the result JSON of `vllm bench serve --save-result --save-detailed` "
                   "(or benchmark_serving.py --save-result), or a CSV table of measured requests: one row per "
                   "request with its send time, prompt and output tokens, TTFT and E2E")
    p.add_argument("--columns", metavar="ROLE=COLUMN,...",
                   help="a CSV table's columns, where their names are not the usual ones: roles sent, prompt, "
                        "output, ttft, e2e, error, prompt_id (which prompt each request sent: its repeats hit the "
                        "prefix cache) (e.g. sent=arrival_ms,output=max_tokens)")
    p.add_argument("--time-unit", choices=["s", "ms", "us", "ns"],
                   help="a CSV table's time unit for every time column (default: each column's name suffix, "
                        "_s / _ms / _us / _ns; none: seconds)")
    p.add_argument("scenario", nargs="?", help="scenario YAML of the deployment (its workload is replaced by the "
                   "benchmark's requests; default: the packaged default)")
    p.add_argument("--out", default="validate-run-out", help="output folder (default: ./validate-run-out)")
    _overrides(p, "override a field of the scenario, e.g. policy.max_num_seqs=128")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_validate_run)


def _reproduce(sub) -> None:
    from servesim.cli.studies import cmd_reproduce
    from servesim.studies.reproduce import EXPERIMENTS

    p = sub.add_parser("reproduce", help="rebuild published results (DistServe, Sarathi-Serve, vLLM, Splitwise) from "
                                         "each paper's configuration: published vs simulated figures and verdicts")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"experiments to run (default: all): {', '.join(EXPERIMENTS)}")
    p.add_argument("--quick", action="store_true", help="short probes and coarse searches (rough figures, marked so)")
    p.add_argument("--out", default="out/reproduce", help="output folder (default: ./out/reproduce)")
    p.add_argument("--seed", type=_seed, help="replace every scenario's seed (robustness checks)")
    p.add_argument("--workers", type=_int, default=None, help="capacity probes in parallel (default: all cores)")
    p.add_argument("--write-docs", "--write-readme", dest="write_readme", metavar="FILE", nargs="?",
                   const="docs/fidelity.md",
                   help="also write the fidelity table into FILE (default ./docs/fidelity.md, the fidelity guide) "
                        "between its <!-- reproduce-table:begin/end --> markers (the whole table: a run of "
                        "every experiment, so no experiment names)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_reproduce)


# each subcommand's group: the names it adds, and the function that adds them (in help order)
_GROUPS = ((("run", "validate"), _run_and_validate), (("cost", "calibrate", "validate-cost"), _cost),
           (("sweep", "capacity", "compare"), _studies), (("plan",), _plan), (("report",), _report),
           (("lessons",), _lessons), (("validate-run",), _validate_run), (("reproduce",), _reproduce))
