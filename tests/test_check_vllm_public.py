"""``tools/check_vllm_public.py``: reading inference-sim/training's run folders (a checkout or a bare
git folder), rebuilding a stage's requests from its configuration, and the error arithmetic.
The public runs themselves are not here: these tests build a tiny run folder of the same layout
with made-up measurements."""

import json
import shutil
import subprocess

import numpy as np
import pytest
import yaml

from tools.check_vllm_public import Repo, compare, label, load_run, main, specs_for, whole_run

RUN = "20260101-000000-llama-2-7b-tp1-tiny"


def write_run(root, stages=((2.0, 20), (4.0, 10)), failed=(0, 0)):
    d = root / "default_args" / RUN
    (d / "results").mkdir(parents=True)
    (d / "exp-config.yaml").write_text(yaml.safe_dump(
        {"model": "meta-llama/Llama-2-7b-hf", "tensor_parallelism": 1, "max_model_len": 4096,
         "max_num_batched_tokens": 2048, "max_num_seqs": 128}))
    (d / "results" / "config.yaml").write_text(yaml.safe_dump(
        {"data": {"type": "shared_prefix", "shared_prefix": {"num_groups": 10, "num_prompts_per_group": 10,
                                                              "system_prompt_len": 100, "question_len": 466,
                                                              "output_len": 65}},
         "load": {"type": "constant", "stages": [{"rate": r, "duration": s} for r, s in stages]}}))
    for i, (r, s) in enumerate(stages):
        n = int(r * s)
        (d / "results" / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps(
            {"successes": {"count": n - failed[i], "prompt_len": {"mean": 593.4},
                           "latency": {"time_to_first_token": {"mean": 0.025, "p99": 0.05},
                                       "request_latency": {"mean": 0.025 + 64 * 0.007, "p99": 0.6}}},
             "failures": {"count": failed[i]}}))
    return root


def test_reads_a_checkout_and_rebuilds_the_stages(tmp_path):
    repo = Repo(write_run(tmp_path))
    assert not repo.bare and repo.runs() == [RUN]
    run = load_run(repo, RUN)
    assert (run["tp"], run["max_num_seqs"], run["output_tokens"]) == (1, 128, 65)
    assert [s["prompt_tokens"] for s in run["stages"]] == [593, 593]
    specs = specs_for(run, seed=0)
    # 40 + 40 requests, the second stage's after 20 s, the 100 prompts sent in turn
    assert len(specs) == 80 and np.all(np.diff(specs.arrival_s) >= 0)
    assert specs.arrival_s[0] == 0.0 and specs.arrival_s[39] < 20.0 and specs.arrival_s[-1] < 30.0
    assert list(specs.prefix_group[:3]) == [0, 1, 2] and np.all(specs.output_tokens == 65)
    assert label(RUN) == "llama-2-7b-tp1-tiny" and label("plain") == "plain"


def test_a_missing_stage_file_skips_the_run(tmp_path):
    write_run(tmp_path)
    (tmp_path / "default_args" / RUN / "results" / "stage_1_lifecycle_metrics.json").unlink()
    assert load_run(Repo(tmp_path), RUN) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_reads_a_bare_git_folder(tmp_path):
    src = write_run(tmp_path / "src")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q", str(src)], check=True)
    subprocess.run(git + ["-C", str(src), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(src), "commit", "-qm", "runs"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "bare")], check=True)
    repo = Repo(tmp_path / "bare")
    assert repo.bare and repo.runs() == [RUN]
    assert load_run(repo, RUN)["stages"][1]["rate_rps"] == 4.0


def test_errors_are_simulated_over_measured():
    run = {"name": RUN, "output_tokens": 11,
           "stages": [{"ttft_s": 0.02, "e2e_s": 0.12, "completed": 30, "failed": 0, "rate_rps": 1.0},
                      {"ttft_s": 0.04, "e2e_s": 0.24, "completed": 10, "failed": 10, "rate_rps": 2.0}]}
    sims = [[{"ttft_s": 0.022, "e2e_s": 0.132}, {"ttft_s": 0.03, "e2e_s": 0.21}],
            [{"ttft_s": 0.018, "e2e_s": 0.128}, {"ttft_s": 0.03, "e2e_s": 0.23}]]
    rows = compare(run, sims)
    # stage 0: TTFT 20 ms both seeds' mean (22, 18) -> 0%; TPOT (120-20)/10 = 10 ms vs mean(11, 11) -> +10%
    assert rows[0]["error"]["ttft"] == pytest.approx(0.0, abs=1e-12)
    assert rows[0]["error"]["tpot"] == pytest.approx(0.10)
    assert rows[0]["spread"]["ttft"] == pytest.approx(0.2)
    assert rows[1]["failed_share"] == pytest.approx(0.5)
    # whole run, stages weighted by completed requests (30 : 10)
    m = (30 * 0.12 + 10 * 0.24) / 40
    p = (30 * 0.13 + 10 * 0.22) / 40
    assert whole_run(rows)["e2e"] == pytest.approx(p / m - 1)


def test_the_tool_end_to_end(tmp_path, capsys):
    write_run(tmp_path, stages=((2.0, 15),))
    assert main(["--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| llama-2-7b-tp1-tiny | 2 req/s |" in out and "over the 1 runs" in out
    # light load on one H100: a 7B decode step takes milliseconds, not tens of them
    row = next(line for line in out.splitlines() if line.startswith("| llama-2-7b-tp1-tiny | 2 req/s"))
    tpot_sim_ms = float(row.split("|")[4].split("/")[1].split("(")[0])
    assert 4.0 < tpot_sim_ms < 10.0


def test_without_a_checkout_it_says_so(tmp_path, capsys):
    assert main(["--repo", str(tmp_path / "none")]) == 0
    assert "skipped: no inference-sim/training checkout" in capsys.readouterr().out
