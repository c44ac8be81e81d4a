"""Fault injection: what a run folder and a sweep look like after a read-only folder, a full
disk, kill -9 and a second sweep in the same folder. Nothing finished is lost, nothing
half-written is taken for a result, and every failure names its file (exit 2, or 3 for a sweep
whose points failed while running).

A real full disk and a real read-only folder are small tmpfs mounts where this process may
mount (root in a container); elsewhere the writer is patched to fail the same way (ENOSPC) and
a chmod makes a folder read-only (which root ignores: then that case is skipped).
"""

import contextlib
import copy
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from servesim.cli.main import main
from servesim.outputs import writer
from servesim.outputs.rundir import read_results, verify_run
from servesim.studies import lock
from servesim.studies.sweep import METRIC_COLUMNS
from tests.conftest import BASE

ROOT = Path(__file__).resolve().parent.parent


def scenario(tmp_path, n=30, name="s.yaml") -> Path:
    data = copy.deepcopy(BASE)
    data["workload"]["num_requests"] = n
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


@contextlib.contextmanager
def tmpfs(path: Path, size: str, readonly: bool = False):
    """A tmpfs of ``size`` mounted at ``path`` (skip the test where mounting is not allowed)."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode(errors='replace').strip()[:100]}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/mounts").exists()


def no_tmp_left(folder: Path) -> bool:
    return not any(p.name.startswith(writer.TMP_PREFIX) for p in folder.iterdir())


# ---------------------------------------------------------------- read-only folders
def test_a_read_only_folder_is_refused_naming_it(tmp_path, capsys):
    ro = tmp_path / "ro"
    if can_mount():
        ctx = tmpfs(ro, "1m", readonly=True)
    elif os.geteuid() != 0:
        ro.mkdir()
        ro.chmod(0o555)
        ctx = contextlib.nullcontext(ro)
    else:
        pytest.skip("root without mount: no way to make a read-only folder")
    with ctx:
        for argv in (["run", scenario(tmp_path), "--out", ro / "run", "--quiet"],
                     ["sweep", scenario(tmp_path), "--grid", "seed=0,1", "--out", ro / "sw", "--quiet"]):
            assert main([str(a) for a in argv]) == 2
            err = capsys.readouterr().err
            assert str(ro) in err and err.count("\n") == 1, err
        assert list(ro.iterdir()) == []


def test_a_run_folder_made_read_only_keeps_its_results(tmp_path, capsys):
    """A folder remounted read-only between two runs: the second fails naming the folder and
    the first's results stay whole."""
    if not can_mount():
        pytest.skip("needs a tmpfs to remount read-only")
    mnt = tmp_path / "m"
    with tmpfs(mnt, "4m"):
        assert main(["run", str(scenario(tmp_path)), "--out", str(mnt / "run"), "--quiet"]) == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert main(["run", str(scenario(tmp_path, 40)), "--out", str(mnt / "run"), "--quiet"]) == 2
        assert str(mnt) in capsys.readouterr().err
        verify_run(mnt / "run")  # the first run, whole


# ---------------------------------------------------------------- a full disk
def _fill(monkeypatch, after_bytes: int):
    """Make the writer's CSV tables fail with ENOSPC after ``after_bytes`` (a patched full disk)."""
    real = writer.write_csv

    class Full:
        def __init__(self, fh):
            self.fh, self.n = fh, 0

        def write(self, data):
            self.n += len(data)
            if self.n > after_bytes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.fh.write(data)

    monkeypatch.setattr(writer, "write_csv", lambda path, cols, *a: real(Full(path), cols, *a))


@pytest.mark.parametrize("real_disk", [True, False])
def test_a_full_disk_names_the_file_and_leaves_the_old_folder_whole(tmp_path, capsys, monkeypatch, real_disk):
    out_root = tmp_path / "disk"
    if real_disk:
        if not can_mount():
            pytest.skip("cannot mount a small tmpfs here (the patched case covers it)")
        ctx = tmpfs(out_root, "160k")
    else:
        out_root.mkdir()
        ctx = contextlib.nullcontext(out_root)
    with ctx:
        out = out_root / "run"
        assert main(["run", str(scenario(tmp_path, 5)), "--out", str(out), "--quiet"]) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        capsys.readouterr()
        if not real_disk:
            _fill(monkeypatch, 20_000)
        assert main(["run", str(scenario(tmp_path, 400)), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "No space left on device" in err and ("steps.csv" in err or "requests.csv" in err), err
        assert err.count("\n") == 1
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
        verify_run(out)
        assert no_tmp_left(out_root)


def test_a_full_disk_in_a_sweep_point_names_the_file_and_exits_3(tmp_path, capsys, monkeypatch):
    _fill(monkeypatch, 1_000)
    out = tmp_path / "sw"
    assert main(["sweep", str(scenario(tmp_path)), "--grid", "seed=0,1", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 3
    rows = read_results(out / "results.csv")
    assert all(r["status"] == "error" and "No space left" in r["error"] and ".csv" in r["error"] for r in rows)
    assert no_tmp_left(out / "runs") and not list((out / "runs").iterdir())
    assert "exit status 3" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["sweep", str(scenario(tmp_path)), "--grid", "seed=0,1", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0  # with room again, the same points run


# ---------------------------------------------------------------- atomic run folders
def test_a_rewritten_run_folder_holds_only_the_new_run(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(scenario(tmp_path)), "--out", str(out), "--quiet"]) == 0
    (out / "figures").mkdir()
    (out / "report.md").write_text("old")  # what report adds: replaced with the folder
    assert main(["run", str(scenario(tmp_path, 7)), "--out", str(out), "--quiet", "--outputs", "summary,steps"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["steps.csv", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 7 and summary["files"]["steps.csv"]["rows"] == summary["phases"]["steps"]
    verify_run(out)
    assert no_tmp_left(tmp_path)


def test_a_folder_with_other_files_is_written_in_place(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["run", str(scenario(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert (out / "notes.txt").read_text() == "keep me"
    verify_run(out)


def test_a_run_written_in_place_leaves_none_of_the_earlier_runs_files(tmp_path):
    """A folder with a file of the user's (notes.txt) is written in place: the earlier run's
    report.md and figures, and its tables the new run does not write, stayed beside the new
    summary.json (report.md described the old run; a report of the new summary read the old
    requests.csv). The earlier run's own --trace-events file goes too (summary.json's
    trace_files named it, 12a5aba); the user's files stay."""
    out = tmp_path / "mine"
    assert main(["run", str(scenario(tmp_path)), "--out", str(out), "--quiet", "--trace-events",
                 str(out / "trace.json")]) == 0
    (out / "figures").mkdir()
    (out / "figures" / "latency_cdfs.png").write_bytes(b"old")
    (out / "report.md").write_text("# servesim report: the earlier run\n")
    (out / "notes.txt").write_text("mine\n")
    assert main(["run", str(scenario(tmp_path, 7)), "--out", str(out), "--quiet", "--outputs", "summary,steps"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "steps.csv", "summary.json"]
    assert set(json.loads((out / "summary.json").read_text())["files"]) == {"steps.csv"}
    verify_run(out)


def test_summary_lists_every_file_with_rows_bytes_and_digest(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(scenario(tmp_path)), "--out", str(out), "--quiet"]) == 0
    files = json.loads((out / "summary.json").read_text())["files"]
    assert set(files) == {"requests.csv", "steps.csv", "scenario.yaml"}
    for name, info in files.items():
        assert info["bytes"] == (out / name).stat().st_size and len(info["sha256"]) == 64
    assert files["requests.csv"]["rows"] == 30
    with open(out / "steps.csv", "r+b") as fh:  # one byte edited, same size
        fh.seek(40)
        b = fh.read(1)
        fh.seek(40)
        fh.write(b"7" if b != b"7" else b"8")
    with pytest.raises(Exception, match="steps.csv: its content differs"):
        verify_run(out)


# ---------------------------------------------------------------- sweeps: damage, kill -9, a second sweep
def test_resume_runs_damaged_points_again(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", str(scenario(tmp_path)), "--grid", "seed=0,1,2,3", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    first = read_results(out / "results.csv")
    dirs = [out / r["dir"] for r in first]
    (dirs[0] / "summary.json").write_text((dirs[0] / "summary.json").read_text()[:50])  # truncated
    (dirs[1] / "requests.csv").unlink()  # deleted
    steps = dirs[2] / "steps.csv"
    steps.write_bytes(steps.read_bytes()[:-10])  # truncated
    (out / "runs" / f"{writer.TMP_PREFIX}{first[3]['hash']}-999-dead").mkdir()  # a killed writer's leftover
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert all(str(d) in err for d in dirs[:3]) and str(dirs[3]) not in err
    again = read_results(out / "results.csv")
    for a, b in zip(first, again):
        assert {k: a[k] for k in METRIC_COLUMNS if k != "wall_time_s"} == \
            {k: b[k] for k in METRIC_COLUMNS if k != "wall_time_s"}
    assert no_tmp_left(out / "runs")
    for d in dirs:
        verify_run(d)


def test_resume_runs_a_point_again_whose_summary_lacks_what_its_row_takes(tmp_path, capsys):
    """A run's summary.json edited so that a statistic the results row takes is gone (ttft_s.max),
    or the workload section is null, was a KeyError / AttributeError traceback on the next sweep
    into the folder (found by a fuzzer corrupting study folders); now the point runs again."""
    out = tmp_path / "sw"
    argv = ["sweep", str(scenario(tmp_path)), "--grid", "seed=0,1,2", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    first = read_results(out / "results.csv")
    dirs = [out / r["dir"] for r in first]
    s0 = json.loads((dirs[0] / "summary.json").read_text())
    del s0["ttft_s"]["max"]
    (dirs[0] / "summary.json").write_text(json.dumps(s0))
    s1 = json.loads((dirs[1] / "summary.json").read_text())
    s1["workload"] = {"keep_up": "x"}
    (dirs[1] / "summary.json").write_text(json.dumps(s1))
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"{dirs[0]} is damaged, running the point again: its summary.json lacks what results.csv takes" in err
    assert f"{dirs[1]} is damaged, running the point again" in err and "workload.keep_up is 'x'" in err
    assert str(dirs[2]) not in err and "Traceback" not in err
    again = read_results(out / "results.csv")
    assert [r["ttft_max_s"] for r in again] == [r["ttft_max_s"] for r in first]
    for d in dirs:
        verify_run(d)


def _sweep_cmd(scen: Path, out: Path, points: int, workers: int = 2) -> list:
    return [sys.executable, "-m", "servesim", "sweep", str(scen), "--grid",
            "seed=" + ",".join(str(i) for i in range(points)), "--out", str(out), "--workers", str(workers),
            "--quiet"]


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(cond, timeout_s: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find the workers")
def test_kill_9_mid_sweep_then_resume_loses_nothing(tmp_path):
    scen = scenario(tmp_path, 1500)
    out, clean = tmp_path / "sw", tmp_path / "clean"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_sweep_cmd(scen, out, 6), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert _wait(lambda: len(_children(proc.pid)) >= 2 and (out / "runs").is_dir()
                     and any(p.name.startswith(writer.TMP_PREFIX) for p in (out / "runs").iterdir()), 60)
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the workers die with their parent (PR_SET_PDEATHSIG), within moments
        assert _wait(lambda: not any(_alive(w) for w in workers), 10), [w for w in workers if _alive(w)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    done_before = [p for p in (out / "runs").iterdir() if not p.name.startswith(".")]
    for d in done_before:
        verify_run(d)  # whatever finished before the kill is whole
    resumed = subprocess.run(_sweep_cmd(scen, out, 6), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert no_tmp_left(out / "runs")
    fresh = subprocess.run(_sweep_cmd(scen, clean, 6), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    a, b = read_results(out / "results.csv"), read_results(clean / "results.csv")
    assert [r["status"] for r in a] == ["ok"] * 6
    for x, y in zip(a, b):
        assert {k: x[k] for k in METRIC_COLUMNS if k != "wall_time_s"} == \
            {k: y[k] for k in METRIC_COLUMNS if k != "wall_time_s"}


def test_a_second_sweep_in_the_same_folder_is_refused_until_the_first_ends(tmp_path, capsys):
    scen = scenario(tmp_path, 1500)
    out = tmp_path / "sw"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_sweep_cmd(scen, out, 4, workers=1), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        lock_file = out / lock.LOCK_FILE
        assert _wait(lambda: lock_file.is_file() and str(proc.pid) in lock_file.read_text(), 60)
        small = scenario(tmp_path, 10, "other.yaml")
        assert main(["sweep", str(small), "--grid", "seed=7,8", "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "another servesim study" in err and f"pid {proc.pid}" in err, err
        os.kill(proc.pid, signal.SIGKILL)  # the holder dies: its lock goes with it
        proc.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    _wait(lambda: not _children(proc.pid), 10)
    assert main(["sweep", str(small), "--grid", "seed=7,8", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert f"took over the lock of pid {proc.pid}" in err
    assert no_tmp_left(out / "runs")
    assert [r["seed"] for r in read_results(out / "results.csv")] == [7, 8]


def test_the_lock_is_reentrant_and_released(tmp_path):
    with lock.folder_lock(tmp_path, "a"):
        with lock.folder_lock(tmp_path, "b"):
            pass
        assert str(os.getpid()) in (tmp_path / lock.LOCK_FILE).read_text()
    with lock.folder_lock(tmp_path, "c"):  # released: taken again
        pass


def test_a_symlinked_run_folder_is_replaced_behind_its_link(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    assert main(["run", str(scenario(tmp_path)), "--out", str(real), "--quiet"]) == 0
    link.symlink_to(real)
    assert main(["run", str(scenario(tmp_path, 9)), "--out", str(link), "--quiet"]) == 0
    assert link.is_symlink() and json.loads((real / "summary.json").read_text())["num_requests"] == 9
    assert no_tmp_left(tmp_path)
