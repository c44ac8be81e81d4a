"""The servesim command: outputs on disk, summary contract, and bad input -> exit 2 naming the field."""

import csv
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servesim.cli.main import main
from servesim.cost.engines import PROFILES
from servesim.outputs.columns import REQUEST_COLUMNS, STEP_COLUMNS

ROOT = Path(__file__).resolve().parent.parent

GOOD = textwrap.dedent("""\
    name: cli-test
    model: meta-llama/Meta-Llama-3-8B
    hardware: {gpu: h100-sxm}
    policy: {name: continuous, max_num_seqs: 64, max_num_batched_tokens: 4096}
    workload:
      num_requests: 60
      arrival: {process: poisson, rate_rps: 5.0}
      prompt_tokens: {dist: lognormal, mean: 400, sigma: 0.5, max: 2000}
      output_tokens: {dist: uniform, min: 4, max: 64}
    slo: {ttft_s: 0.5, tpot_s: 0.05}
""")


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_run_writes_the_contract_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", write(tmp_path, GOOD), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "TTFT" in printed and "goodput" in printed and "MFU" in printed
    s = json.loads((out / "summary.json").read_text())
    for key in ("scenario", "num_requests", "completed", "rejected", "sim_time_s", "wall_time_s", "throughput_rps",
                "output_tokens_per_s", "ttft_s", "tpot_s", "tbt_s", "e2e_s", "queue_s", "slo_attainment",
                "goodput_rps", "phases", "utilization", "total_tokens_per_s", "itl_s"):
        assert key in s, key
    # vLLM's names: ITL is the TBT distribution; total throughput counts prompt and output tokens
    assert s["itl_s"] == s["tbt_s"] and "ITL" in printed and "total tok/s" in printed
    with open(out / "requests.csv") as fh:
        done = [r for r in csv.DictReader(fh) if r["status"] == "completed"]
    tokens = sum(int(r["prompt_tokens"]) + int(r["output_tokens"]) for r in done)
    assert s["total_tokens_per_s"] == pytest.approx(tokens / s["sim_time_s"])
    for key in ("ttft_s", "tpot_s", "tbt_s", "e2e_s", "queue_s"):
        assert set(s[key]) == {"mean", "p50", "p90", "p99", "max"}
        assert s[key]["p50"] <= s[key]["p99"] <= s[key]["max"]
    assert s["num_requests"] == 60 == s["completed"] + s["rejected"] + s["unfinished"]
    assert 0 < s["utilization"]["mfu"] < 1 and 0 < s["utilization"]["mbu"] < 1
    with open(out / "requests.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == REQUEST_COLUMNS and len(rows) == 60
    with open(out / "steps.csv") as fh:
        steps = list(csv.DictReader(fh))
    assert tuple(steps[0]) == STEP_COLUMNS and {r["bound"] for r in steps} <= {"compute", "memory"}
    resolved = (out / "scenario.yaml").read_text()
    assert "gpu_memory_utilization: 0.9" in resolved and "block_size: 16" in resolved


def test_set_override_and_seed(tmp_path):
    out = tmp_path / "o"
    p = write(tmp_path, GOOD)
    assert main(["run", p, "--out", str(out), "--quiet", "--set", "workload.num_requests=10",
                 "--set", "cluster.replicas=2", "--seed", "3"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["num_requests"] == 10
    assert "replicas: 2" in (out / "scenario.yaml").read_text() and "seed: 3" in (out / "scenario.yaml").read_text()


def test_validate_ok(tmp_path, capsys):
    assert main(["validate", write(tmp_path, GOOD)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out
    v1 = PROFILES["vllm-v1"]
    assert "colocated: engine vllm-v1; efficiencies Hopper" in out
    assert (f"per-step CPU {v1.step_s * 1e3:.2f} ms + {v1.per_seq_s * 1e6:.1f} us per sequence (engine vllm-v1), "
            f"overlap {v1.overlap:g} with the GPU step (async scheduling: arrivals join the step after next); "
            "CUDA graphs up to 128 tokens (all steps, padded)") in out
    own = GOOD.replace("slo:", "cost: {step_overhead_s: 0.001, engine: vllm-v0}\nslo:")
    assert main(["validate", write(tmp_path, own)]) == 0
    out = capsys.readouterr().out
    assert ("per-step CPU 1.00 ms + 171.0 us per sequence (scenario (step), engine vllm-v0 (per sequence)), "
            "overlap 0 with the GPU step; CUDA graphs up to 64 tokens (decode-only steps, padded)") in out


def test_validate_prints_each_pools_budget_reserve_and_blocks(tmp_path, capsys):
    """The docs say validate prints each pool's step budget, activation reserve and KV blocks: a P/D
    decode pool's budget is its max_num_seqs whatever budget it was given, and its reserve with it."""
    from servesim.inputs.scenario import load_scenario
    from servesim.simulation import prepare

    pd = GOOD.replace("policy: {name: continuous,", "policy: {name: pd_split, decode: {max_num_batched_tokens: "
                      "65536},")
    path = write(tmp_path, pd)
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out
    pools = prepare(load_scenario(path, [])).pools_by_name
    for name, budget in (("prefill", 4096), ("decode", 64)):
        cap = pools[name].capacity
        line = next(x for x in out.splitlines() if x.startswith(f"  {name}: "))
        assert (f"step budget {budget:,} tokens, 64 sequences; activation reserve "
                f"{cap.activation_reserve_bytes / 2**30:.2f} GiB per GPU; KV {cap.num_blocks:,} blocks") in line


def test_validate_writes_each_pools_kv_in_one_style(tmp_path, capsys):
    """small41: the 'ok' line read "KV 29027 blocks = 464432 tokens" and the pool's line below it
    "KV 29,027 blocks": the same count in two styles. Counts carry thousands separators."""
    from servesim.inputs.scenario import load_scenario
    from servesim.simulation import prepare

    for text in (GOOD, GOOD.replace("policy: {name: continuous,", "policy: {name: pd_split,")):
        path = write(tmp_path, text)
        assert main(["validate", path]) == 0
        lines = capsys.readouterr().out.splitlines()
        for pool in prepare(load_scenario(path, [])).pools:
            cap = pool.capacity
            assert cap.num_blocks >= 1000 and cap.num_tokens >= 1000  # (where a separator shows)
            assert f"{cap.num_blocks:,} blocks = {cap.num_tokens:,} tokens per replica" in lines[0]
            assert f"KV {cap.num_blocks:,} blocks" in next(x for x in lines if x.startswith(f"  {pool.name}: "))
        # no count of four digits or more without its separators on either line
        assert not re.search(r"KV \S* ?\d{4}|\d{4,} (blocks|tokens)", "\n".join(lines[:3]))


def test_validate_describes_the_requests_drawn(tmp_path, capsys):
    """validate prints what the workload drew (count, span, mean rate, lengths), so a trace read in
    the wrong time unit (ms as s: 1000x fewer requests per second) shows before a run."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n250,200,20\n600,300,30\n900,100,10\n")
    sc = write(tmp_path, textwrap.dedent(f"""\
        name: t
        model: meta-llama/Meta-Llama-3-8B
        hardware: {{gpu: h100-sxm}}
        workload: {{trace: {{path: {trace}}}}}
        """))
    assert main(["validate", sc]) == 0
    assert ("  workload: 4 requests arriving over 900 s, 0.00444 req/s on average; prompt tokens mean 175, p50 150, "
            "p99 297; output tokens mean 18, p50 15, p99 30") in capsys.readouterr().out


def test_offered_rate_is_one_definition_in_validate_and_summary(tmp_path, capsys):
    """validate said a trace of 4 requests over 900 s arrives at 3 / 900 s = 0.00333 req/s, the
    run's summary.json workload.offered_rps 4 / 900 s = 0.00444: one rate, n / the last arrival
    (from the run's start, the window every rate of the run is per)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n250,200,20\n600,300,30\n900,100,10\n")
    sc = write(tmp_path, textwrap.dedent(f"""\
        name: t
        model: meta-llama/Meta-Llama-3-8B
        hardware: {{gpu: h100-sxm}}
        workload: {{trace: {{path: {trace}}}}}
        """))
    assert main(["validate", sc]) == 0
    said = float(re.search(r"([0-9.e-]+) req/s on average", capsys.readouterr().out).group(1))
    assert main(["run", sc, "--out", str(tmp_path / "o"), "--outputs", "summary"]) == 0
    offered = json.loads((tmp_path / "o" / "summary.json").read_text())["workload"]["offered_rps"]
    assert offered == pytest.approx(4 / 900) and f"{offered:.3g}" == f"{said:.3g}"


def test_a_run_stopped_by_bad_input_leaves_no_empty_out_folder(tmp_path, capsys):
    """An unknown model is found once the run starts, after --out was created: the run stopped
    with exit 2 and left the empty folder (and its new parents) behind. A folder already there stays."""
    sc = write(tmp_path, GOOD.replace("meta-llama/Meta-Llama-3-8B", "no-such/model"))
    out = tmp_path / "new" / "o"
    assert main(["run", sc, "--out", str(out)]) == 2
    assert "unknown model 'no-such/model'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    (tmp_path / "there").mkdir()
    assert main(["run", sc, "--out", str(tmp_path / "there")]) == 2
    assert (tmp_path / "there").is_dir()


def test_a_run_that_no_request_reaches_says_so(tmp_path, capsys):
    """A duration_s shorter than the first arrival left a run with no request: it printed zeros
    (and 'SLO attainment 0.0%') with no warning, and validate said 'ok' without a word."""
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "duration_s: 0.001"))
    assert main(["validate", sc]) == 0
    assert "warning: a run will have no request to serve: none arrives within workload.duration_s=0.001 s" in (
        capsys.readouterr().out)
    assert main(["run", sc, "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["num_requests"] == 0
    assert [w["code"] for w in s["warnings"]] == ["no_requests"]
    assert "no request arrived: none arrives within workload.duration_s=0.001 s" in capsys.readouterr().out


def test_a_run_that_no_request_reaches_has_no_slo_attainment(tmp_path, capsys):
    """0 of 0 requests is no share: summary.json's slo_attainment read 0.0 (and the run printed
    'SLO attainment 0.0%', the seeds' line 'n/a%'), as if every request had missed."""
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "duration_s: 0.001"))
    assert main(["run", sc, "--out", str(tmp_path / "o"), "--seeds", "2"]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["num_requests"] == 0 and s["slo_attainment"] is None
    assert s["seeds"]["figures"]["slo_attainment"]["mean"] is None
    out = capsys.readouterr().out
    assert "SLO attainment n/a (no request arrived)" in out
    assert "SLO attainment 0.0%" not in out and "n/a%" not in out
    assert main(["report", str(tmp_path / "o")]) == 0


def test_a_comparison_of_runs_no_request_reached_calls_none_failing(tmp_path, capsys):
    """A configuration whose run had no request has no SLO attainment (null, not 0.0): compare's
    table said FAILS beside '-' for it."""
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "duration_s: 0.001"))
    assert main(["compare", sc, "--policies", "continuous,chunked_prefill", "--out", str(tmp_path / "c"),
                 "--workers", "1", "--quiet", "--no-report"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.strip().startswith(("continuous ", "chunked_prefill "))]
    assert len(rows) == 2 and all("FAILS" not in r and "meets" not in r for r in rows), rows


def test_a_price_mapping_that_names_no_gpu_of_the_deployment_is_named(tmp_path, capsys):
    """A cost.gpu_hour_usd mapping for another catalog GPU was accepted and silently left the run
    at the catalog's price; one that names the deployment's GPU too (as plan's tables do) is not."""
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 5"))
    assert main(["validate", sc, "--set", "cost.gpu_hour_usd={a100-80g: 1.0}"]) == 0
    assert ("warning: cost.gpu_hour_usd (a100-80g: 1) changes nothing: this deployment runs h100-sxm"
            in capsys.readouterr().out)
    assert main(["run", sc, "--set", "cost.gpu_power_w={a100-80g: 300}", "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [w["message"][:24] for w in s["warnings"]] == ["cost.gpu_power_w (a100-8"]
    capsys.readouterr()
    assert main(["validate", sc, "--set", "cost.gpu_hour_usd={a100-80g: 1.0, h100-sxm: 2.0}"]) == 0
    assert "changes nothing" not in capsys.readouterr().out


def test_set_reaches_into_lists_with_the_field_paths_errors_print():
    """``--set workload.classes[1].slo.ttft_s=3``: the notation messages use for a field path
    (``workload.classes[0].share ...``) also sets one; an index past the list or into something
    that is no list names what is there."""
    from servesim.errors import InputError
    from servesim.inputs.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "multi-class.yaml",
                       ["workload.classes[1].slo.ttft_s=3", "workload.classes[0].share=0.5"])
    assert sc.workload.classes[1].slo.ttft_s == 3.0 and sc.workload.classes[0].share == 0.5
    for text, says in [("workload.classes[2].share=1", "workload.classes has 2 entries, so indexes 0 to 1"),
                       ("workload.arrival[0].rate_rps=1", "workload.arrival is not a list"),
                       ("workload.nope[0].x=1", "workload.nope is not a list (it is not set)"),
                       ("workload.classes[x].share=1", "'classes[x]' is not a field name"),
                       # (a list entered with a dot, or a field of the list itself: its entries are indexed)
                       ("workload.classes.0.share=1",
                        "a list: index an entry, e.g. workload.classes[0].share"),
                       ("workload.classes.1.slo.ttft_s=1",
                        "a list: index an entry, e.g. workload.classes[1].slo.ttft_s"),
                       ("workload.classes.share=1",
                        "a list: index an entry, e.g. workload.classes[0].share")]:
        with pytest.raises(InputError, match=re.escape(says)):
            load_scenario(ROOT / "scenarios" / "multi-class.yaml", [text])


def test_numbers_in_e_notation_are_numbers(tmp_path, capsys):
    """YAML 1.1 reads 5e0 (no dot) as a string; scenario files and --set read it as the number."""
    p = write(tmp_path, GOOD.replace("rate_rps: 5.0", "rate_rps: 5e0"))
    assert main(["validate", p, "--set", "workload.num_requests=6e1"]) == 0
    assert main(["validate", write(tmp_path, GOOD.replace("rate_rps: 5.0", "rate_rps: 5x0"))]) == 2
    assert "workload.arrival.rate_rps must be a number, got '5x0'" in capsys.readouterr().err


BAD = [
    ("policy: {name: continuous,", "policy: {name: nope,", "policy.name", "continuous"),
    ("model: meta-llama/Meta-Llama-3-8B", "model: meta-llama/Llama-9-9B", "model", "meta-llama/Meta-Llama-3-8B"),
    ("hardware: {gpu: h100-sxm}", "hardware: {gpu: h900}", "hardware.gpu", "h100-sxm"),
    ("rate_rps: 5.0", "rate_rps: -1", "workload.arrival.rate_rps", ">= 1e-06"),
    ("  output_tokens: {dist: uniform, min: 4, max: 64}\n", "", "workload.output_tokens", "missing"),
    ("sigma: 0.5", "sigma: 0.5}}: [", "s.yaml", "line"),
    ("hardware: {gpu: h100-sxm}", "hardware: {gpu: h100-sxm, tp: 3}", "hardware.tp", "32"),
    ("name: cli-test", "name: cli-test\npolicyy: {}", "policyy", "policy"),
    ("dist: uniform, min: 4", "dist: unifrm, min: 4", "workload.output_tokens.dist", "uniform"),
    # the tag's key misspelled: named as the unknown field it is (it said only 'dist is missing';
    # found by fuzzing scenarios through the CLI)
    ("dist: uniform, min: 4", "dst: uniform, min: 4", "workload.output_tokens.dst: unknown field (did you mean "
     "'dist'?)", "valid dist: fixed, uniform"),
    ("arrival: {process: poisson,", "arrival: {proces: poisson,", "workload.arrival.proces: unknown field",
     "(did you mean 'process'?)"),
    ("model: meta-llama/Meta-Llama-3-8B", "model: meta-llama/Meta-Llama-3-70B", "does not fit", "GiB"),
    # a P/D pool that does not fit names its own fields to raise (it said hardware.tp, "a bigger GPU")
    ("policy: {name: continuous,", "memory: {gpu_memory_utilization: 0.3}\npolicy: {name: pd_split, "
     "decode: {gpu: a100-40g},", "use a bigger GPU (policy.decode.gpu)", "Raise policy.decode.tp or hardware.pp"),
    # a P/D pool's GPU or TP left to the top-level value: a bad one is named where it was written
    # (it said 'policy.prefill.gpu: unknown GPU' and 'policy.prefill.tp=3', fields the file did not
    # set; found by fuzzing scenarios through the CLI)
    ("hardware: {gpu: h100-sxm}\npolicy: {name: continuous,", "hardware: {gpu: h900}\npolicy: {name: pd_split,",
     "hardware.gpu: unknown GPU 'h900'", "h100-sxm"),
    ("hardware: {gpu: h100-sxm}\npolicy: {name: continuous,", "hardware: {gpu: h100-sxm, tp: 3}\npolicy: {name: "
     "pd_split,", "hardware.tp=3 must divide", "32 attention heads"),
    ("hardware: {gpu: h100-sxm}\npolicy: {name: continuous,", "hardware: {gpu: h100-sxm}\npolicy: {name: pd_split, "
     "decode: {tp: 3},", "policy.decode.tp=3 must divide", "32 attention heads"),
    # a list or mapping where a name goes (found by fuzzing every field with odd values)
    ("dist: uniform, min: 4", "dist: [uniform], min: 4", "workload.output_tokens.dist", "uniform"),
    ("arrival: {process: poisson,", "arrival: {process: {a: 1},", "workload.arrival.process", "poisson"),
    ("  num_requests: 60\n", "  num_requests: 60\n  preset: []\n", "workload.preset", "not a preset"),
    # a lone scalar where a mapping goes is offered as its one required field only when it could be
    # one (it said "write shared_prefix: {tokens: 'abc'}", itself an error; found by fuzzing)
    ("  num_requests: 60\n", "  num_requests: 60\n  shared_prefix: abc\n", "workload.shared_prefix must be a mapping",
     "its fields: tokens (required), fraction, groups"),
    ("  num_requests: 60\n", "  num_requests: 60\n  shared_prefix: 100\n", "workload.shared_prefix must be a mapping",
     "write shared_prefix: {tokens: 100}"),
    ("hardware: {gpu: h100-sxm}", "hardware: {gpu: h100-sxm}\ncluster: {replicas: 99999999999}",
     "cluster.replicas", "<= 100000"),
    ("max_num_seqs: 64", "max_num_seqs: .inf", "policy.max_num_seqs", "must be an integer"),
    ("num_requests: 60", "num_requests: .nan", "workload.num_requests", "must be an integer"),
    # options a policy would silently ignore
    ("policy: {name: continuous,", "policy: {name: static, prefix_caching: true,", "policy.prefix_caching",
     "never reuses cached blocks"),
    ("policy: {name: continuous,", "policy: {name: static, spec: {draft: ngram},", "policy.spec",
     "continuous or chunked_prefill"),
    ("policy: {name: continuous,", "policy: {name: chunked_prefill, prefill_first: true,", "policy.prefill_first",
     "set policy.name: continuous"),
    # a budget below the k + 1 tokens a speculative decode verifies: no decode ever fit (chunked
    # prefill stalled with a RuntimeError traceback)
    ("name: continuous, max_num_seqs: 64, max_num_batched_tokens: 4096}", "name: chunked_prefill, max_num_seqs: 64, "
     "max_num_batched_tokens: 4, spec: {num_speculative_tokens: 4}}", "policy.max_num_batched_tokens=4",
     "k + 1 = 5 tokens"),
    # a draft model is split over the target's TP GPUs: its heads must divide by them (it ran)
    ("hardware: {gpu: h100-sxm}\npolicy: {name: continuous,", "hardware: {gpu: h100-sxm, tp: 2}\npolicy: {name: "
     "continuous, spec: {draft: tiiuae/falcon-7b},", "policy.spec.draft",
     "hardware.tp=2 must divide the model's 71 attention heads"),
    # a draft too big to fit was told as the target's weights alone (146 GiB 'for Llama-3-8B')
    ("max_num_batched_tokens: 4096}", "max_num_batched_tokens: 4096, spec: {draft: meta-llama/Meta-Llama-3-70B}}",
     "of them the speculative draft model's", "a smaller draft"),
]


@pytest.mark.parametrize("old,new,field,hint", BAD, ids=[b[2] for b in BAD])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_bad_input_exit_2_names_the_field(tmp_path, capsys, old, new, field, hint, command):
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    args = [command, p] + (["--out", str(tmp_path / "o"), "--quiet"] if command == "run" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert field in err and hint in err, err
    assert "Traceback" not in err


def test_missing_file_and_bad_set(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml"), "--quiet"]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    assert main(["run", write(tmp_path, GOOD), "--quiet", "--set", "policy.max_num_seqs=zero"]) == 2
    assert "policy.max_num_seqs must be an integer" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_set_with_a_space_for_the_equals_sign_is_named_as_such(tmp_path, capsys, command):
    # `--set workload.num_requests 100`: argparse takes 100 as the scenario, which was reported as
    # "scenario '100' does not exist"; the --set item is checked before any file is read
    argv = [command, "--set", "workload.num_requests", "100", "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv + (["--grid", "seed=1,2"] if command == "sweep" else [])) == 2
    assert capsys.readouterr().err.strip() == (
        "servesim: error: --set 'workload.num_requests': expected dotted.key=value, with no space around '=' "
        "(e.g. --set workload.num_requests=VALUE)")


@pytest.mark.parametrize("command", ["validate", "run", "sweep"])
@pytest.mark.parametrize("text", ["workload.num_requests=", "slo.ttft_s=", "policy.max_num_seqs= ", "seed="])
def test_an_empty_set_value_is_named(tmp_path, capsys, command, text):
    # (an empty value read as null: "--set workload.num_requests=" said "workload: give num_requests or
    # duration_s" without naming the --set, and "--set slo.ttft_s=" silently dropped the TTFT limit)
    key = text.split("=")[0]
    argv = [command, write(tmp_path, GOOD), "--set", text]
    if command != "validate":
        argv += ["--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv + (["--grid", "cluster.replicas=1,2"] if command == "sweep" else [])) == 2
    assert capsys.readouterr().err.strip() == (
        f"servesim: error: --set {text!r}: no value after '=' for {key}; give its value, null to unset the field, "
        "or '' for an empty text")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [["lessons", "--only", "bound", "--quick", "--no-figures"],
                                     ["reproduce", "no-such-experiment", "--quick"]])
def test_lessons_and_reproduce_do_not_write_into_a_run_folder(tmp_path, capsys, command):
    """As sweep and compare refuse: lessons.md (reproduce.md) written beside a run's summary.json
    was hidden by it (servesim report reads the folder as that run). Refused before anything runs
    (the experiment name is checked after), the run's folder unchanged."""
    run_dir = tmp_path / "run"
    assert main(["run", write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 5")), "--out", str(run_dir),
                 "--quiet"]) == 0
    before = sorted(p.name for p in run_dir.iterdir())
    capsys.readouterr()
    assert main([*command, "--out", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--out {run_dir}: holds a servesim run (summary.json); a {command[0]} report written there" in err, err
    assert "another --out" in err and "Traceback" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_a_run_written_in_place_removes_the_earlier_runs_traces_it_does_not_write(tmp_path, capsys):
    """A folder rerun without --decision-trace / --trace-events kept the earlier run's dt.csv and
    te.json beside the new run's files, read as this run's. A trace written into the folder is named
    in summary.json (trace_files), so the next run there removes the ones it does not write again,
    as it removes the files the earlier summary listed; a file of the user's, or a trace outside
    the folder, stays."""
    s = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 8"))
    out = tmp_path / "o"
    assert main(["run", s, "--out", str(out), "--quiet", "--decision-trace", str(out / "dt.csv"),
                 "--trace-events", str(out / "te.json")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace_files"] == {"decision_trace": "dt.csv", "trace_events": "te.json"}
    assert "dt.csv" not in summary["files"] and "decisions" in summary
    (out / "mine.txt").write_text("keep")
    assert main(["run", s, "--out", str(out), "--quiet", "--trace-events", str(out / "te.json"),
                 "--decision-trace", str(tmp_path / "elsewhere.csv")]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "requests.csv", "scenario.yaml", "steps.csv",
                                                    "summary.json", "te.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace_files"] == {"trace_events": "te.json"}  # (elsewhere.csv is not in the folder)
    assert main(["run", s, "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "requests.csv", "scenario.yaml", "steps.csv",
                                                    "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert "trace_files" not in summary and "decisions" not in summary  # (nothing claimed of a trace)
    assert (tmp_path / "elsewhere.csv").is_file() and (out / "mine.txt").read_text() == "keep"
    assert main(["report", str(out), "--quiet"]) == 0
    capsys.readouterr()


def test_a_run_too_big_for_memory_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import servesim.cli.main

    def too_big(*a, **k):
        raise MemoryError

    monkeypatch.setattr("servesim.simulation.simulate", too_big)
    monkeypatch.setattr(servesim.cli.main, "simulate", too_big, raising=False)
    assert main(["run", write(tmp_path, GOOD), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and "workload.num_requests" in err and "Traceback" not in err


def test_unwritable_outputs_are_clear_errors(tmp_path, capsys):
    """Found by fuzzing: an output path the file system refuses gave a traceback from every command
    that writes (--trace-events only after the whole run)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where a folder is needed
    s = write(tmp_path, GOOD)
    assert main(["run", s, "--out", str(tmp_path / "o"), "--trace-events", str(blocker / "t.json"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--trace-events" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "summary.json").exists()  # refused before running
    for args in (["lessons", "--only", "bound", "--no-figures", "--out", str(blocker / "l")],
                 ["sweep", s, "--grid", "seed=0", "--out", str(blocker / "s"), "--quiet"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert str(blocker) in err and "Traceback" not in err


def test_console_script_exit_status_without_traceback(tmp_path):
    p = write(tmp_path, GOOD.replace("rate_rps: 5.0", "rate_rps: -1"))
    proc = subprocess.run([sys.executable, "-m", "sim", "validate", p], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "workload.arrival.rate_rps must be >= 1e-06 and <= 1e+09, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cost_json(capsys):
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--tp", "2",
                 "--prefill", "512", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"step_time_s", "flops", "bytes", "arithmetic_intensity", "bound", "mfu", "mbu", "num_layers",
            "ops"} <= set(d)
    assert {"qkv_proj", "o_proj", "mlp_up", "mlp_down", "attention", "allreduce", "lm_head",
            "overhead"} <= set(d["ops"])
    assert sum(o["time_s"] for o in d["ops"].values()) == pytest.approx(d["step_time_s"])


def test_cost_decode_batch_is_bounded(capsys):
    # found by fuzzing: --decode-batch 2147483647 built a list of two billion sequences
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--decode-batch",
                 "2147483647", "--context", "10"]) == 2
    assert "--decode-batch must be between 1 and 1048576" in capsys.readouterr().err


def test_cost_table_and_bad_gpu(capsys):
    assert main(["cost", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "h100-sxm", "--decode-batch", "8",
                 "--context", "1024"]) == 0
    assert "memory-bound" in capsys.readouterr().out
    assert main(["cost", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "h101", "--prefill", "8"]) == 2
    assert "--gpu" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    # found by a cost-model review: these priced a step no server could run, with exit 0
    (["--model", "meta-llama/Llama-2-7b-hf", "--decode-batch", "1", "--context", "100000"], "context length 4096"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--prefill", "4000", "--context", "100"], "4100 tokens exceeds"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct", "--tp", "7", "--prefill", "8"], "4 KV heads"),  # 28 heads, 4 KV
    (["--model", "internlm/internlm-20b", "--tp", "5", "--prefill", "8"], "MLP width 13824"),
    # found by an adversarial pass over the flags: ignored with exit 0
    (["--model", "meta-llama/Llama-2-7b-hf", "--decode-batch", "8", "--device", "a100"], "give --profiles DIR too"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--decode-batch", "8", "--profiles", ""], "--profiles is blank"),
])
def test_cost_refuses_what_the_model_cannot_run(capsys, args, message):
    assert main(["cost", "--gpu", "h100-sxm", *args]) == 2
    assert message in capsys.readouterr().err


def test_cost_says_why_a_step_is_bound_and_whether_the_weights_fit(capsys):
    assert main(["cost", "--model", "Qwen/Qwen-72B", "--gpu", "l40s", "--decode-batch", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["weights_fit"] is False and d["weights_gib_per_gpu"] > 130  # 72B in bf16 on one 48 GB GPU
    assert (d["bound"] == "memory") == (d["memory_s"] > d["compute_s"])
    assert main(["cost", "--model", "Qwen/Qwen-72B", "--gpu", "l40s", "--tp", "8", "--decode-batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "could not run" not in out and "memory-bound" in out and "compute time" in out


def test_cost_says_when_the_steps_kv_cache_does_not_fit(capsys):
    # 4,096 sequences at 4,000 tokens hold 4,096 x 4,001 x 0.5 MiB = 8 TiB of Llama-2-7B's KV: the
    # step was priced without a word that no GPU could hold it
    args = ["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--context", "4000"]
    assert main([*args, "--decode-batch", "4096", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["weights_fit"] is True and d["memory_fit"] is False
    assert d["kv_gib_per_gpu"] == pytest.approx(4096 * 4001 * 32 * 2 * 4096 * 2 / 2**30)
    assert main([*args, "--decode-batch", "4096"]) == 0
    assert "of this step's KV cache per GPU exceed the h100-sxm's" in capsys.readouterr().out
    assert main([*args, "--decode-batch", "8", "--json"]) == 0  # 8 x 4,001 tokens: 15.6 GiB, with 12.6 of weights
    assert json.loads(capsys.readouterr().out)["memory_fit"] is True


def test_out_path_that_is_a_file_is_bad_input(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("x")
    assert main(["run", write(tmp_path, GOOD), "--quiet", "--out", str(f)]) == 2
    assert "--out" in capsys.readouterr().err


def test_errors_found_after_loading_name_the_scenario_file(tmp_path, capsys):
    p = write(tmp_path, GOOD)
    assert main(["run", p, "--quiet", "--set", "policy.name=pd_split", "--set", "cluster.replicas=2"]) == 2
    err = capsys.readouterr().err
    assert p in err and "cluster.replicas" in err


def test_summary_prints_pools_transfer_swap_and_prefix_lines(tmp_path, capsys):
    p = write(tmp_path, GOOD)
    assert main(["run", p, "--quiet", "--out", str(tmp_path / "a"), "--set", "policy.name=pd_split",
                 "--set", "policy.decode.replicas=2"]) == 0
    out = capsys.readouterr().out
    assert "pool prefill  1 replica:" in out and "pool decode   2 replicas" in out
    assert "KV hand-off   60 transfers" in out
    assert main(["run", p, "--quiet", "--out", str(tmp_path / "b"), "--set", "policy.prefix_caching=true",
                 "--set", "workload.shared_prefix.tokens=512", "--set", "memory.num_gpu_blocks=100",
                 "--set", "workload.arrival.rate_rps=20",
                 "--set", "policy.preemption=swap"]) == 0
    out = capsys.readouterr().out
    assert "prefix cache" in out and "swap " in out


def test_hints_lead_with_the_name_meant():
    from servesim.errors import did_you_mean
    from servesim.inputs.specs import GPUS

    assert "did you mean 'h100-pcie' or 'h100-sxm'?" in did_you_mean("h100", GPUS)  # not 'h200'
    assert "did you mean 'h100-pcie' or 'h100-sxm'?" in did_you_mean("H100", GPUS)  # any case
    assert "did you mean 'chunked_prefill'?" in did_you_mean("sarathi", ["chunked_prefill", "continuous", "static"])
    assert "did you mean 'pd_split'?" in did_you_mean("DistServe", ["continuous", "pd_split"])
    assert "did you mean 'poisson'?" in did_you_mean("poison", ["fixed", "gamma", "poisson"])


def test_version_is_the_package_version(capsys):
    from importlib.metadata import version

    import servesim

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"servesim {servesim.__version__}" == f"servesim {version('servesim')}"


@pytest.mark.parametrize("only", ["", ","])
def test_lessons_only_with_no_name_is_an_error(tmp_path, capsys, only):
    """``lessons --only ''`` named no lesson and ran all of them (exit 0)."""
    assert main(["lessons", "--only", only, "--out", str(tmp_path / "l")]) == 2
    assert "--only: unknown lesson ''; valid: " in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    # found by an adversarial pass over the flags: --out "" (an unset shell variable) wrote the run's
    # files into the current folder, in place over any of the same name; --device "", --node "" and
    # --columns "" were ignored with exit 0
    (["run", "--out", ""], "--out is blank; give a value (for the current folder, write .)"),
    (["run", "--trace-events", " "], "--trace-events is blank"),
    (["validate", ""], "the scenario path is blank"),
    (["report", ""], "the folder path is blank"),
    (["calibrate", "--profiles", "p", "--gpu", "a100-80g", "--out", "x.yaml", "--device", ""], "--device is blank"),
    (["calibrate", "--profiles", "p", "--gpu", "a100-80g", "--out", "x.yaml", "--node", ""], "--node is blank"),
    (["validate-run", "result.json", "--columns", ""], "--columns is blank"),
    (["sweep", "s.yaml", "--grid", "seed=1", "--out", ""], "--out is blank"),
])
def test_a_blank_path_or_name_on_the_command_line_is_refused(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_no_option_defaults_to_a_blank_string():
    """main() refuses blank strings in the parsed arguments: a blank default would refuse the
    command whenever its option is not given."""
    import argparse

    from servesim.cli.parser import build_parser

    sub = next(a for a in build_parser([])._actions if isinstance(a, argparse._SubParsersAction))
    blank = [(name, a.dest) for name, sp in sub.choices.items() for a in sp._actions
             if isinstance(a.default, str) and not a.default.strip()]
    assert not blank


def test_a_file_missing_from_the_current_folder_but_beside_the_scenario_is_pointed_out(tmp_path, monkeypatch,
                                                                                       capsys):
    """Relative paths in a scenario are read from the current folder (docs/workloads.md); a scenario
    in another folder naming a file beside it failed with 'does not exist' and nothing more."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "lens.txt").write_text("100\n200\n")
    data = {"name": "rel", "model": "meta-llama/Llama-2-7b-hf", "hardware": {"gpu": "h100-sxm"},
            "workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_rps": 2},
                         "prompt_tokens": {"dist": "empirical", "path": "lens.txt"},
                         "output_tokens": {"dist": "fixed", "value": 4}}}
    (tmp_path / "sub" / "s.yaml").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "sub/s.yaml", "--quiet", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert "'lens.txt': No such file or directory (relative paths are read from the current folder; 'sub/lens.txt' " \
           "is beside the scenario: write that path, or run from 'sub')" in err
    monkeypatch.chdir(tmp_path / "sub")
    assert main(["run", "s.yaml", "--quiet", "--out", "o"]) == 0
    # a model's config.json the same way (its message says "does not exist")
    import shutil

    import servesim.scenarios

    shutil.copy(Path(servesim.scenarios.__path__[0]) / "reproduce" / "yi-34b-max-model-len-8192.json",
                tmp_path / "sub" / "cfg.json")
    (tmp_path / "sub" / "m.yaml").write_text(json.dumps({**data, "model": "cfg.json",
                                                         "hardware": {"gpu": "h100-sxm", "tp": 2}}))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "sub/m.yaml"]) == 2
    assert "'cfg.json' does not exist (relative paths are read from the current folder; 'sub/cfg.json'" \
        in capsys.readouterr().err


def test_progress_bars_are_drawn_only_on_a_terminal(monkeypatch, tmp_path, capsys):
    """Redirected to a file or a CI log, a bar wrote a line of carriage-return updates every half
    second; it is drawn only when stderr is a terminal (and --quiet silences it there too)."""
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    argv = ["run", "--set", "workload.num_requests=40", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # (pytest's capture is no terminal)
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert main(argv) == 0
    assert "simulating" in term.getvalue()
    term.seek(0)
    term.truncate()
    assert main([*argv, "--quiet"]) == 0
    assert term.getvalue() == ""
    assert main(["report", str(tmp_path / "o")]) == 0  # (the report's phases: servesim.outputs.progress)
    assert "report" in term.getvalue()


def test_ctrl_c_in_a_sweep_keeps_the_finished_runs_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """Ctrl-C during a study: exit 130 with one line (no traceback) saying the finished runs are
    kept in --out and that the same command reuses them; run again, it runs only the rest."""
    import servesim.studies.executors as ex
    from tests.conftest import interrupt_run_point

    real = interrupt_run_point(monkeypatch, 2)
    sc, out = write(tmp_path, GOOD), tmp_path / "sw"
    args = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4,8", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert err.strip() == (f"servesim: interrupted; the runs that finished are kept in {str(out)!r}: the same command "
                           "reuses them and runs the rest")
    assert len(list((out / "runs").iterdir())) == 1
    monkeypatch.setattr(ex, "run_point", real)
    assert main(args) == 0
    assert "3 points: 2 ran, 1 already finished, 0 failed" in capsys.readouterr().out

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("servesim.simulation.simulate", ctrl_c)  # a run keeps nothing: it writes at its end
    assert main(["run", sc, "--out", str(tmp_path / "o"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == "servesim: interrupted"


def test_ctrl_c_before_a_study_wrote_its_folder_does_not_say_runs_are_kept_there(tmp_path, capsys, monkeypatch):
    """Ctrl-C before a study's first run (a plan predicting for its first seconds) said 'the runs
    that finished are kept in OUT' of a folder that did not exist."""
    def ctrl_c(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("servesim.cli.main._packaged_scenario", ctrl_c)  # (at once, before anything is written)
    sc, out = write(tmp_path, GOOD), tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4", "--out", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == \
        f"servesim: interrupted before any run finished; nothing was written to {str(out)!r}"
    assert not out.exists()


def _terminated(argv, wait_for, tmp_path, delay_s=0.3):
    """``servesim ARGV`` in a child process, sent SIGTERM ``delay_s`` after ``wait_for`` exists and
    ``main`` is being called (the process is then past its imports, where the signal still has its
    default action; a fixed delay from the start lost that race on a loaded machine): (exit status,
    stderr)."""
    import signal
    import time

    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    start = ("import pathlib, sys; from servesim.cli.main import main; pathlib.Path(sys.argv[1]).touch(); "
             "sys.exit(main(sys.argv[2:]))")
    proc = subprocess.Popen([sys.executable, "-c", start, str(ready), *argv], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (ready.exists() and wait_for.exists()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_sigterm_stops_a_study_with_a_message_and_its_finished_runs_kept(tmp_path):
    """SIGTERM (``timeout``, a job scheduler) had its default action: the process ended at once,
    exit 143 and not a word, the study's note that the same command resumes it never printed. It
    now ends as Ctrl-C does (workers stopped, finished runs kept), says so, and exits 143; the same
    command then reuses the runs that finished."""
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 20000"))  # (a few seconds a point)
    out = tmp_path / "sw"
    argv = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2,3,4,5,6,7", "--out", str(out), "--workers", "2",
            "--quiet"]
    rc, err = _terminated(argv, out / "runs", tmp_path)
    assert rc == 143, err
    assert err.strip() == (f"servesim: terminated (SIGTERM); the runs that finished are kept in {str(out)!r}: the "
                           "same command reuses them and runs the rest")
    assert "Traceback" not in err
    sc = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 500000"), "long.yaml")
    rc, err = _terminated(["run", sc, "--out", str(tmp_path / "o")], Path(sc), tmp_path, delay_s=0.5)
    assert (rc, err.strip()) == (143, "servesim: terminated (SIGTERM)")


def test_validate_names_a_gpu_figure_likely_in_another_unit(tmp_path, capsys):
    """A GPU YAML with its bandwidth in GB/s-as-bytes/s (1000x low) passes the schema's wide
    bounds: validate says its FLOP per byte lies far outside real accelerators'; the same GPU
    with the right unit, and every catalog GPU, says nothing."""
    from servesim.outputs.checks import RIDGE_FLOP_PER_BYTE
    from servesim.inputs.specs import GPUS
    from servesim.outputs.rundir import read_summary

    gpu = tmp_path / "g.yaml"
    gpu.write_text("name: myh20\npeak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e9\n")
    sc = write(tmp_path, GOOD.replace("hardware: {gpu: h100-sxm}", f"hardware: {{gpu: {gpu}}}"))
    assert main(["validate", sc]) == 0
    assert ("warning: GPU myh20: peak_flops / mem_bw_bytes_per_s is 3.7e+04 FLOP per byte, where real accelerators "
            "sit between about 37 (H20) and 420 (L40S): check the units") in capsys.readouterr().out
    # the run says it too (it ran priced 1000x slow without a word)
    assert main(["run", sc, "--quiet", "--out", str(tmp_path / "r")]) == 0
    assert "gpu_units" in {w["code"] for w in read_summary(tmp_path / "r")["warnings"]}
    assert "check the units" in capsys.readouterr().out
    gpu.write_text("name: myh20\npeak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e12\n")
    assert main(["validate", sc]) == 0
    assert "FLOP per byte" not in capsys.readouterr().out
    assert main(["run", sc, "--quiet", "--out", str(tmp_path / "r2")]) == 0
    assert "gpu_units" not in {w["code"] for w in read_summary(tmp_path / "r2")["warnings"]}
    lo, hi = RIDGE_FLOP_PER_BYTE
    assert all(lo <= g.peak_flops / g.mem_bw_bytes_per_s <= hi for g in GPUS.values())


def test_cost_with_a_tp_below_one_says_it_once(capsys):
    # the flag and its value lead the message: "--tp 0 must be >= 1", not "..., got 0" again
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "h100-sxm", "--tp", "0",
                 "--prefill", "10"]) == 2
    assert capsys.readouterr().err.strip() == "servesim: error: --tp 0 must be >= 1"


def test_errors_found_after_loading_the_default_scenario_name_its_file(tmp_path, capsys):
    # the schema's errors named the packaged default by its path, later ones (an unknown model, a
    # TP the model cannot split) as "the default scenario": one name for one file
    from servesim.inputs.scenario import default_scenario_path

    assert main(["run", "--set", "model=llama-2-7b", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"servesim: error: {default_scenario_path()}: model: unknown model")


@pytest.mark.parametrize("argv, says", [
    (["run", "s.yaml", "policy.name=a:B"], "servesim run: unrecognized arguments: policy.name=a:B (a field override "
                                           "goes after --set: --set KEY=VALUE)"),
    (["sweep", "s.yaml", "--out", "o", "policy.name=a,b"], "servesim sweep: unrecognized arguments: policy.name=a,b"),
    (["run", "--bogus"], "servesim run: unrecognized arguments: --bogus"),
])
def test_words_no_option_takes_are_named_by_the_subcommand(capsys, argv, says):
    """They were the top-level parser's: 'servesim: error: servesim: unrecognized arguments', after
    the usage of every subcommand; a field override written without --set now gets a hint."""
    from servesim.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"servesim: error: {says}" in err and "servesim: error: servesim:" not in err
    assert err.startswith(f"usage: servesim {argv[0]}")


@pytest.mark.parametrize("argv, says", [
    (["rnu"], "argument command: invalid choice: 'rnu' (choose from 'run', "),
    (["rnu"], ") (did you mean 'run'?)"),
    (["validat", "s.yaml"], "(did you mean 'validate'?)"),
    (["cost", "--model", "llama-2-7b", "--dtype", "bf61"], "(did you mean 'bf16'?)"),
    (["run", "--outptus", "summary"], "servesim run: unrecognized arguments: --outptus (did you mean '--outputs'?)"),
    (["run", "--outptus=summary", "--quite"], "(did you mean '--outputs' for '--outptus', '--quiet' for '--quite'?)"),
])
def test_a_misspelt_subcommand_choice_or_option_gets_the_closest_name(capsys, argv, says):
    """argparse (Python 3.11) lists the choices but names no close one, and says nothing for an
    option; the top-level error was also prefixed twice ('servesim: error: servesim: argument')."""
    from servesim.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in err and err.startswith("servesim: error: ") and "servesim: error: servesim:" not in err


def test_an_unknown_option_with_no_close_name_gets_no_hint(capsys):
    from servesim.cli.main import main

    assert main(["run", "--zzzzzz"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "servesim: error: servesim run: unrecognized arguments: --zzzzzz"


@pytest.mark.parametrize("argv", [
    ["lessons", "--only", "bound", "--seed", "-5", "--out", "OUT"],  # (a lesson that simulates nothing took it)
    ["run", "--seed", "-1", "--out", "OUT", "--quiet"],
    ["reproduce", "vllm", "--seed", str(2**63), "--out", "OUT"],
])
def test_a_seed_out_of_range_is_refused_as_the_flag(tmp_path, capsys, argv):
    from servesim.cli.main import main

    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"servesim {argv[0]}: argument --seed: a seed is from 0 to {2**63 - 1}, got " in last


@pytest.mark.parametrize("sets, says", [
    (["model=1"], "default.yaml: model must be a string, got 1 (given by --set model=1)"),
    (["policy.max_num_seqs=8", "policy.max_num_seqs=-1"], "(given by --set policy.max_num_seqs=-1)"),  # the last
    (["policy={name: x}"], "policy.name: 'x' is not valid;"),
])
def test_an_error_in_a_value_given_by_set_says_so(capsys, sets, says):
    """The error named the scenario file alone, whose own value was fine."""
    from servesim.cli.main import main

    from servesim.inputs.scenario import default_scenario_path

    assert main(["validate", str(default_scenario_path()), *[x for s in sets for x in ("--set", s)]]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in last and last.endswith(f"(given by --set {sets[-1]})")


def test_an_error_in_the_file_itself_names_no_set(tmp_path, capsys):
    from servesim.cli.main import main

    p = tmp_path / "s.yaml"
    from servesim.inputs.scenario import default_scenario_path

    p.write_text(default_scenario_path().read_text().replace("num_requests: 1000", "num_requests: -5"))
    assert main(["validate", str(p), "--set", "workload.arrival.rate_rps=2", "--set", "seed=3"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "workload.num_requests must be" in last and "--set" not in last


def test_a_packaged_scenario_is_found_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    """Outside a checkout, `servesim run chat` said "scenario 'chat' does not exist", and the docs'
    `scenarios/default.yaml` paths worked only from a checkout. A name that is no file here but a
    packaged scenario's is that file, said on stderr; a file of that name here still wins; a bare
    name that is neither lists the packaged ones, leading with the closest."""
    monkeypatch.chdir(tmp_path)
    for name, packaged in [("chat", "chat.yaml"), ("scenarios/chat.yaml", "chat.yaml"),
                           ("default.yaml", "default.yaml"), ("lessons/offline", "lessons/offline.yaml")]:
        assert main(["validate", name]) == 0, name
        out, err = capsys.readouterr()
        assert f"scenario {name!r}: no such file here; the packaged one" in err
        assert out.startswith(str(Path(__file__).resolve().parents[1] / "scenarios" / packaged)) or \
            Path(out.split(":")[0]).as_posix().endswith("scenarios/" + packaged), out
    default = (Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml").read_text()
    (tmp_path / "chat").write_text(default.replace("name: default-llama3-8b-h100", "name: mine"))
    assert main(["validate", "chat"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("chat: ok (mine:") and "packaged" not in err
    assert main(["validate", "chatt"]) == 2
    err = capsys.readouterr().err
    assert "scenario 'chatt' does not exist: no such file here, and no packaged scenario of that name" in err
    assert "(did you mean 'chat'?)" in err and "lessons/offline" in err
    assert main(["validate", "zzqx"]) == 2  # (no close name: the list still reads as its own clause)
    assert "no packaged scenario of that name; valid: bursty, chat," in capsys.readouterr().err
    for missing in ("nothere.yaml", "x/scenarios/chat.yaml", "../chat.yaml"):
        assert main(["validate", missing]) == 2
        assert f"scenario {missing!r} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("study", [["sweep", "--grid", "workload.arrival.rate_rps=2"],
                                   ["capacity", "--slo", "ttft_p99=1"], ["compare", "--policies", "fcfs"],
                                   ["plan", "--rate", "1", "--slo", "ttft_p99=1"]])
def test_a_study_whose_out_is_a_file_says_so(tmp_path, capsys, study):
    """A study's --out that is a file was 'cannot use 'x': File exists' (its mkdir's error); it
    says, as run's does, that it exists and is not a folder."""
    plain = tmp_path / "f.txt"
    plain.write_text("x")
    assert main([study[0], write(tmp_path, GOOD), *study[1:], "--out", str(plain), "--quiet"]) == 2
    assert f"--out {plain}: exists and is not a folder; give a folder to write into" in capsys.readouterr().err
    assert plain.read_text() == "x"


@pytest.mark.parametrize("command", [["run"], ["sweep", "--grid", "workload.arrival.rate_rps=2"], ["report"]])
def test_an_out_folder_that_is_a_symlink_loop_or_a_dangling_link_says_so(tmp_path, capsys, command):
    """--out given a loop of symbolic links was "cannot create the output folder: File exists"
    (run, the studies), and `report` of one said the folder does not exist: each names the link."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    scenario = write(tmp_path, GOOD)
    for link, says in (("a", "is a symbolic link in a loop of links"),
                       ("gone", f"is a symbolic link to {str(tmp_path / 'missing')!r}, which does not exist")):
        path = str(tmp_path / link)
        argv = ["report", path] if command == ["report"] else [command[0], scenario, *command[1:], "--out", path,
                                                                 "--quiet"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{path!r} {says}" in err if command == ["report"] else f"--out {path}: {says}" in err, err
        assert "File exists" not in err and f"{path!r} does not exist" not in err and "Traceback" not in err


@pytest.mark.parametrize("study", [["sweep", "--grid", "workload.arrival.rate_rps=2"],
                                   ["capacity", "--slo", "ttft_p99=1"], ["compare", "--policies", "fcfs"],
                                   ["plan", "--rate", "1", "--slo", "ttft_p99=1"]])
def test_a_run_and_a_study_do_not_share_a_folder(tmp_path, capsys, study):
    """A study written into a run's folder (or a run into a study's) left both there, and
    `servesim report` read the folder as the run (summary.json): the study just written was
    hidden behind an old run. Each is refused, exit 2, naming the folder and what it holds."""
    scenario = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 5"))
    run_dir, study_dir = tmp_path / "run", tmp_path / "study"
    assert main(["run", scenario, "--out", str(run_dir), "--quiet"]) == 0
    before = (run_dir / "summary.json").read_text()
    capsys.readouterr()
    assert main([study[0], scenario, *study[1:], "--out", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--out {run_dir}: holds a servesim run (summary.json)" in err and "another --out" in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["requests.csv", "scenario.yaml", "steps.csv", "summary.json"]
    assert (run_dir / "summary.json").read_text() == before
    # the other way: a study's folder (known by its sweep.json) refuses a run
    study_dir.mkdir()
    (study_dir / "sweep.json").write_text(json.dumps({"kind": study[0]}))
    assert main(["run", scenario, "--out", str(study_dir), "--quiet"]) == 2
    assert f"--out {study_dir}: holds a servesim study" in capsys.readouterr().err
    assert not (study_dir / "summary.json").exists()


def test_a_summary_json_not_servesims_does_not_refuse_a_study(tmp_path, capsys):
    """Only a servesim run's summary.json marks a run folder: a user's own file of that name in
    the folder does not stop a sweep writing there."""
    (tmp_path / "summary.json").write_text('{"mine": 1}')
    scenario = write(tmp_path, GOOD.replace("num_requests: 60", "num_requests: 5"))
    assert main(["sweep", scenario, "--grid", "seed=1", "--out", str(tmp_path), "--quiet", "--workers", "1"]) == 0
    assert (tmp_path / "results.csv").is_file()


def test_validate_says_whether_an_engines_prompt_batches_are_padded(tmp_path, capsys):
    """cost.engine vllm-v0.2.3 pads only policy.prefill_first's prompt-only steps: validate says
    which, so a scenario with prefill_first false does not silently run without the padding (null
    is the profile's: prompt-only steps, padded)."""
    padded = GOOD.replace("slo:", "cost: {engine: vllm-v0.2.3}\nslo:")
    for given in (["--set", "policy.prefill_first=true"], []):
        assert main(["validate", write(tmp_path, padded), *given]) == 0
        assert "no CUDA graphs; prompt-only steps padded to their longest prompt (at most 256 padded tokens);" in \
            capsys.readouterr().out
    assert main(["validate", write(tmp_path, padded), "--set", "policy.prefill_first=false"]) == 0
    assert ("no prompt padding (vllm-v0.2.3 pads the prompt-only steps of policy.prefill_first with continuous "
            "batching)") in capsys.readouterr().out
    assert main(["validate", write(tmp_path, GOOD), "--set", "policy.prefill_first=true"]) == 0
    out = capsys.readouterr().out  # (vllm-v1 packs its prompts)
    assert "prompt padding" not in out and "padded to their longest prompt" not in out


def test_run_prints_the_padded_tokens_it_priced(tmp_path, capsys):
    """validate says vllm-v0.2.3 pads policy.prefill_first's prompt batches, and the run prices the
    padding as real tokens (summary.json phases.padding_tokens), but the printed phases line gave
    prefill and decode tokens alone (docs/outputs.md: prefill / decode / padding tokens), so the
    padding validate promised was nowhere in what the run printed. It is now, when there is any."""
    import json
    import re

    padded = GOOD.replace("slo:", "cost: {engine: vllm-v0.2.3}\nslo:").replace("rate_rps: 5.0", "rate_rps: 40.0")
    out = tmp_path / "o"
    assert main(["run", write(tmp_path, padded), "--set", "policy.prefill_first=true", "--out", str(out),
                 "--outputs", "summary"]) == 0
    pad = json.loads((out / "summary.json").read_text())["phases"]["padding_tokens"]
    assert pad > 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("phases")]
    assert re.search(rf"tokens: prefill \d+, decode \d+, padding {pad};", line)
    assert main(["run", write(tmp_path, GOOD), "--out", str(tmp_path / "p"), "--outputs", "summary"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("phases")]
    assert "padding" not in line


def _one_value_options():
    """(subcommand, action) for every option of every subcommand that takes one value: all but
    the flags (store_true) and the repeatable ones (append: --set, --grid, --price, --variant)."""
    import argparse

    from servesim.cli.parser import build_parser

    sub = next(a for a in build_parser([])._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, a) for name, sp in sub.choices.items() for a in sp._actions
            if a.option_strings and a.nargs != 0 and not isinstance(a, argparse._AppendAction)]


def _two_values(action):
    if action.choices:
        return str(action.choices[0]), str(action.choices[-1])
    if getattr(action.type, "__name__", "") in ("int", "float", "_seed", "'auto' or int"):
        return "1", "2"
    return "a", "b"


def test_every_one_value_option_given_twice_is_refused(tmp_path, monkeypatch, capsys):
    """argparse kept the last of a one-value option given twice, in silence (run --seed 1 --seed 2
    ran seed 2; capacity --slo A --slo B searched against B alone). Each subcommand's every such
    option, the second time spelt --flag=value or by its last alias, is refused naming the flag
    and both values; nothing runs."""
    monkeypatch.chdir(tmp_path)
    options = _one_value_options()
    assert {name for name, _ in options} >= {"run", "validate-run", "cost", "calibrate", "validate-cost",
                                             "sweep", "capacity", "compare", "plan", "lessons", "reproduce"}
    assert len(options) > 60
    for name, action in options:
        first, second = _two_values(action)
        flag = action.option_strings[0]
        again = action.option_strings[-1]
        assert main([name, f"{flag}={first}", again, second]) == 2, (name, flag)
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith(f"servesim: error: servesim {name}: argument {'/'.join(action.option_strings)}: "
                               "given twice ("), (name, flag, last)
        assert first in last and second in last, (name, flag, last)
        assert main([name, flag, second, flag, second]) == 2  # (the same value twice: said so)
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert re.search(rf": argument \S+: '?{second}(\.0)?'? is given twice; give it once$", last), (name, flag, last)
    assert not list(tmp_path.iterdir())


def test_an_abbreviated_option_given_twice_is_refused_and_repeatable_ones_stay_repeatable(capsys):
    from servesim.cli.parser import parse

    assert main(["run", "--trace-events", "a", "--trace=b"]) == 2
    assert "argument --trace-events: given twice ('a', then 'b')" in capsys.readouterr().err
    args = parse(["sweep", "s.yaml", "--out", "o", "--set", "seed=1", "--set", "policy.max_num_seqs=8",
                  "--grid", "seed=1,2", "--grid", "policy.max_num_seqs=8,16"])
    assert args.set == ["seed=1", "policy.max_num_seqs=8"] and len(args.grid) == 2
    args = parse(["run", "--quiet", "--quiet", "--seed", "3"])  # (a flag twice: the same thing)
    assert args.quiet and args.seed == 3


def test_probe_requests_auto_given_twice_is_named_as_written(capsys):
    """--probe-requests auto is read as None (the command chooses): given twice, the refusal named
    it as None ('given twice (None, then 100)', 'None is given twice'), a value nobody wrote."""
    assert main(["capacity", "chat", "--probe-requests", "auto", "--probe-requests", "100"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "given twice ('auto', then 100)" in last and "None" not in last, last
    assert main(["capacity", "chat", "--probe-requests", "AUTO", "--probe-requests=auto"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("'auto' is given twice; give it once") and "None" not in last, last


def test_probe_requests_out_of_range_names_auto(tmp_path, monkeypatch, capsys):
    """Out of range, --probe-requests' refusal named the numbers alone, not auto (the default)."""
    monkeypatch.chdir(tmp_path)
    base = ["capacity", str(Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"), "--slo", "ttft_p99=1"]
    assert main(base + ["--probe-requests", "0"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("--probe-requests must be >= 1 and <= 1e+12, or auto (the default), got 0"), last
    assert not list(tmp_path.iterdir())
