"""A GPU YAML file goes by one name everywhere: the name its loader gives it (``name:``, else
``<base>-custom``, else the file's name), in validate's line, summary.json, the economics line,
report and figure titles; and a P/D split's two pools may not be two GPUs of one name."""

import json

import yaml

from servesim.cli.main import main
from servesim.inputs.overrides import with_values
from servesim.outputs.rundir import deployment_gpus, deployment_shape, gpu_label
from tests.conftest import BASE

WORKLOAD = {"num_requests": 12, "arrival": {"process": "poisson", "rate_rps": 4.0},
            "prompt_tokens": {"dist": "fixed", "value": 200}, "output_tokens": {"dist": "fixed", "value": 8}}


def scenario(tmp_path, **over):
    data = with_values(BASE, over)
    data["workload"] = WORKLOAD
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_a_gpu_file_is_named_by_its_name_field_in_validate_summary_and_report(tmp_path, capsys):
    """A GPU file ok.yaml with name: g1 read '1 x ok' in validate's line and every figure title,
    while summary.json and the economics line said 'g1': one GPU under two names."""
    gpu = tmp_path / "ok.yaml"
    gpu.write_text("name: g1\nbase: h100-sxm\npeak_flops: 900e12\n")
    p = scenario(tmp_path, **{"hardware.gpu": str(gpu)})
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "on 1 x g1," in out and "x ok" not in out, out
    run = tmp_path / "o"
    assert main(["run", str(p), "--out", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert {u["gpu"] for u in summary["economics"]["pools"].values()} == {"g1"}
    capsys.readouterr()
    assert main(["report", str(run), "--quiet"]) == 0
    md = (run / "report.md").read_text()
    titles = [line for line in md.splitlines() if line.startswith("![")]
    assert titles and all("on 1 x g1 |" in t for t in titles), titles
    assert "on 1 x g1," in md and "x ok" not in md


def test_gpu_label_is_the_loaders_name(tmp_path):
    """No name: a file with base: is '<base>-custom' (as summary.json says), one without is its
    file name; a catalog GPU its own; a file no longer there its file name."""
    based, bare = tmp_path / "mine.yaml", tmp_path / "h20.yml"
    based.write_text("base: a100-80g\nprice_per_gpu_hour_usd: 1.5\n")
    bare.write_text("peak_flops: 148e12\nmem_bytes: 96e9\nmem_bw_bytes_per_s: 4.0e12\n")
    assert gpu_label(str(based)) == "a100-80g-custom"
    assert gpu_label(str(bare)) == "h20"
    assert gpu_label("h100-sxm") == "h100-sxm"
    assert gpu_label(str(tmp_path / "gone.yaml")) == "gone"
    fast = tmp_path / "fast.yaml"
    fast.write_text("name: fastone\nbase: h100-sxm\nmem_bw_bytes_per_s: 4.5e12\n")
    pd = {"hardware": {"gpu": str(based)},
          "policy": {"name": "pd_split", "prefill": {"replicas": 1}, "decode": {"replicas": 2, "gpu": str(fast)}}}
    assert deployment_gpus(pd) == "3 GPUs"
    assert deployment_shape(pd) == "P/D: 1 x a100-80g-custom TP1 prefill + 2 x fastone TP1 decode"
    assert deployment_gpus({"hardware": {"gpu": str(based)}, "cluster": {"replicas": 2}}) == "2 x a100-80g-custom"


def test_a_pd_split_of_two_gpu_files_of_one_name_is_refused(tmp_path, capsys):
    """Two GPU files with base: h100-sxm and no name: are both 'h100-sxm-custom': a run priced each
    pool right but named both pools so (economics line, summary.json, titles): which was which
    could not be told. Refused as servesim plan refuses them in --gpus, naming both files."""
    cheap, fast = tmp_path / "cheap.yaml", tmp_path / "fast.yaml"
    cheap.write_text("base: h100-sxm\nprice_per_gpu_hour_usd: 1.0\n")
    fast.write_text("base: h100-sxm\nmem_bw_bytes_per_s: 4.5e12\nprice_per_gpu_hour_usd: 5.0\n")
    p = scenario(tmp_path, **{"policy": {"name": "pd_split", "prefill": {"gpu": str(cheap)},
                                         "decode": {"gpu": str(fast)}}})
    for argv in (["validate", str(p)], ["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("servesim: error: "), err
        assert "cheap.yaml" in err[0] and "fast.yaml" in err[0] and "'h100-sxm-custom'" in err[0], err
        assert "give each file a name: of its own" in err[0]
    assert not (tmp_path / "o" / "summary.json").exists()
    # named apart, the split runs and names each pool's GPU
    fast.write_text("name: fast\nbase: h100-sxm\nmem_bw_bytes_per_s: 4.5e12\nprice_per_gpu_hour_usd: 5.0\n")
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    pools = json.loads((tmp_path / "o" / "summary.json").read_text())["economics"]["pools"]
    assert {k: u["gpu"] for k, u in pools.items()} == {"prefill": "h100-sxm-custom", "decode": "fast"}
    # the same file for both pools is one GPU: not refused
    capsys.readouterr()
    p = scenario(tmp_path, **{"hardware.gpu": str(cheap),
                              "policy": {"name": "pd_split", "decode": {"gpu": str(cheap)}}})
    assert main(["validate", str(p)]) == 0


def test_validate_run_names_a_gpu_file_by_its_name(tmp_path, capsys):
    """validate-run's report and line named a GPU file by its path ('/tmp/.../ok.yaml x 1')."""
    from tests.test_validate_run import DETAILED

    gpu = tmp_path / "ok.yaml"
    gpu.write_text("name: g1\nbase: h100-sxm\n")
    dep = tmp_path / "deployment.yaml"
    dep.write_text(f"model: meta-llama/Meta-Llama-3-8B\nhardware: {{gpu: {gpu}}}\n")
    out = tmp_path / "v"
    assert main(["validate-run", str(DETAILED), str(dep), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert json.loads((out / "validation.json").read_text())["gpu"] == "g1"
    assert "on 1 x g1" in printed and "ok.yaml" not in printed, printed


def test_a_run_folder_read_where_its_gpu_file_is_not_names_the_gpu_as_the_run_did(tmp_path, capsys):
    """A run folder reported where its GPU file no longer is (moved, another directory for a
    relative path) fell back to the file's name ('1 x ok') beside the roofline's 'g1': the name
    the run recorded (summary.json cost) is taken."""
    from servesim.outputs.rundir import RunData

    gpu = tmp_path / "ok.yaml"
    gpu.write_text("name: g1\nbase: h100-sxm\n")
    p = scenario(tmp_path, **{"hardware.gpu": str(gpu)})
    run = tmp_path / "o"
    assert main(["run", str(p), "--out", str(run), "--quiet"]) == 0
    gpu.unlink()
    assert deployment_gpus(RunData.from_dir(run).scenario) == "1 x g1"
    capsys.readouterr()
    assert main(["report", str(run), "--quiet"]) == 0
    md = (run / "report.md").read_text()
    assert "on 1 x g1," in md and "x ok" not in md


def test_a_gpu_file_named_as_a_catalog_gpu_in_other_letter_case_is_refused(tmp_path, capsys):
    """Names are matched exactly (hardware.gpu: H100-SXM is refused, "did you mean 'h100-sxm'"), yet
    a GPU file named H100-SXM with its own figures ran, printed '1 x H100-SXM' as if the catalog's H100,
    while one named h100-sxm is refused: both are, exit 2, naming the file and the catalog GPU."""
    gpu = tmp_path / "mine.yaml"
    for text in ("name: H100-SXM\npeak_flops: 500e12\nmem_bytes: 80e9\nmem_bw_bytes_per_s: 2e12\n",
                 "name: H100-Sxm\nbase: h100-sxm\nprice_per_gpu_hour_usd: 2\n"):
        gpu.write_text(text)
        p = scenario(tmp_path, **{"hardware.gpu": str(gpu)})
        for argv in (["validate", str(p)], ["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "mine.yaml" in err[0] and "is the catalog GPU 'h100-sxm' in other letter case" \
                in err[0] and "write name: h100-sxm" in err[0], err
        assert not (tmp_path / "o").exists()
    # the catalog's own name in its own case, with only a price of its own, runs
    gpu.write_text("name: h100-sxm\nbase: h100-sxm\nprice_per_gpu_hour_usd: 2\n")
    assert main(["validate", str(scenario(tmp_path, **{"hardware.gpu": str(gpu)}))]) == 0


def test_two_gpu_files_whose_names_differ_only_in_letter_case_are_refused(tmp_path, capsys):
    """A P/D split's pools on two different GPUs named 'my-gpu' and 'MY-GPU' read as one GPU in the
    economics line and titles: refused as two files of one name are."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("name: my-gpu\nbase: h100-sxm\n")
    b.write_text("name: MY-GPU\nbase: h100-sxm\nmem_bw_bytes_per_s: 4.5e12\n")
    p = scenario(tmp_path, **{"policy": {"name": "pd_split", "prefill": {"gpu": str(a)}, "decode": {"gpu": str(b)}}})
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "a.yaml" in err and "b.yaml" in err and "are different GPUs (mem_bw_bytes_per_s differs)" in err, err
    assert "'my-gpu' and 'MY-GPU' differing only in letter case" in err and "Traceback" not in err
