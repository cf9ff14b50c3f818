"""Unpacking what came back from a GPU machine (crasplab.cli.unpack, through gpu_run.py --unpack)
adds finished jobs and never removes or changes a local file: stray files do not make a folder a
job, a job that does not validate or is of other settings is left out, a differing local job is
kept as a conflict, a run that is training is refused, and a kill leaves each job absent or whole."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from crasplab.cli import unpack
from crasplab.cli.unpack import unpack_runs
from crasplab.records.run_folder import LOCK_FILE
from tests.tiny import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_run  # noqa: E402

# A finished protocol run kept in the repository: NB, seeds 5000-5002.
KEPT_RUN = ROOT / "evidence/protocol-clip-rope-nb"
SEEDS = ("seed5000", "seed5001", "seed5002")


def _pack(tmp_path: Path, change=lambda run: None) -> Path:
    """The kept run as the GPU machine packs it (as "nb"), after `change(run folder)`."""
    runs = tmp_path / "remote"
    change(Path(shutil.copytree(KEPT_RUN, runs / "nb")))
    (tmp_path / "came-back").mkdir()
    with tarfile.open(tmp_path / "came-back" / "runs.tar.gz", "w:gz") as tar:
        for path in sorted((runs / "nb").rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(runs)))
    return tmp_path / "came-back" / "runs.tar.gz"


def _local(tmp_path: Path, keep=SEEDS) -> Path:
    """A local copy of the run holding the seeds `keep`."""
    local = Path(shutil.copytree(KEPT_RUN, tmp_path / "into" / "nb"))
    for seed in set(SEEDS) - set(keep):
        shutil.rmtree(local / "NB" / seed)
    return local


def _files(folder: Path) -> dict[str, bytes]:
    """The files under `folder` (its lock, which unpacking takes as a run does, left out)."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK_FILE]
    return {str(p.relative_to(folder)): p.read_bytes() for p in files}


def _jobs_of(folder: Path) -> dict[str, bytes]:
    return {name: data for name, data in _files(folder).items() if name.startswith("NB/")}


def test_a_stray_result_json_does_not_make_the_run_a_job_and_no_local_job_is_removed(tmp_path):
    """The probe: a result.json at the top of the run and of its task folder made both count as
    finished jobs, and the local run (with a job training here) was deleted and replaced."""

    def stray_results(run):
        shutil.copy(run / "NB/seed5000/result.json", run / "result.json")
        shutil.copy(run / "NB/seed5000/result.json", run / "NB/result.json")

    archive = _pack(tmp_path, stray_results)
    local = _local(tmp_path, keep=SEEDS[:2])
    training_here = local / "NB" / "seed5009"
    training_here.mkdir()
    shutil.copy(local / "NB/seed5000/job.json", training_here / "job.json")
    before = _jobs_of(local)
    [unpacked] = unpack_runs(archive, tmp_path / "into")
    assert unpacked.taken == ["NB/seed5002"] and unpacked.already_here == ["NB/seed5000", "NB/seed5001"]
    after = _jobs_of(local)
    assert {name: after[name] for name in before} == before  # every local file as it was
    assert _jobs_of(local / "NB/seed5002") == {} and _files(local / "NB/seed5002") == _files(KEPT_RUN / "NB/seed5002")
    assert not (local / "result.json").exists() and not (local / "NB/result.json").exists()
    assert "result.json (not a file of a run)" in unpacked.left_out


def test_a_job_of_garbage_or_of_other_settings_is_left_out_and_said_so(tmp_path):
    def spoil(run):
        (run / "NB/seed5000/result.json").write_text("garbage")
        job = json.loads((run / "NB/seed5001/job.json").read_text())
        job["train"]["max_steps"] += 1
        (run / "NB/seed5001/job.json").write_text(json.dumps(job))
        (run / "NB/seed5002/metrics.jsonl").write_text("[1, 2]\n")

    [unpacked] = unpack_runs(_pack(tmp_path, spoil), tmp_path / "into")
    assert unpacked.taken == [] and not (tmp_path / "into/nb/NB").exists()
    reasons = dict(line.split(" ", 1) for line in unpacked.left_out if line.startswith("NB/"))
    assert reasons["NB/seed5000"].startswith("(nb/NB/seed5000/result.json: not JSON")
    assert "train.max_steps" in reasons["NB/seed5001"]
    assert "metrics.jsonl:1: a JSON list, not the object the lab writes" in reasons["NB/seed5002"]


def test_a_differing_local_job_is_kept_and_reported_as_a_conflict(tmp_path, capsys):
    local = _local(tmp_path)
    result = json.loads((local / "NB/seed5001/result.json").read_text())
    result["elapsed_s"] += 1
    (local / "NB/seed5001/result.json").write_text(json.dumps(result))
    before = _files(local / "NB")
    [unpacked] = unpack_runs(_pack(tmp_path), tmp_path / "into")
    assert _files(local / "NB") == before and unpacked.taken == []
    assert len(unpacked.conflicts) == 1 and str(local / "NB/seed5001") in unpacked.conflicts[0]
    assert "conflict:" in capsys.readouterr().err


def test_unpacking_into_a_run_that_is_training_is_refused(tmp_path):
    """The run folder's lock, held by another process (as a run holds it while it trains)."""
    local = _local(tmp_path, keep=())
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl,sys;f=open({str(local / LOCK_FILE)!r},'a');"
         "fcntl.flock(f,fcntl.LOCK_EX);print('held',flush=True);sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match="is in use by another process"):
            gpu_run.main(["--unpack", str(_pack(tmp_path).parent), "--into", str(tmp_path / "into")])
    finally:
        holder.communicate("")
    assert not (local / "NB").exists() or not any((local / "NB").iterdir())


def test_a_kill_mid_unpack_leaves_each_job_absent_or_whole_and_the_next_unpack_completes(tmp_path, monkeypatch):
    archive = _pack(tmp_path)
    real_rename, moved = os.rename, []

    def killed_after_one_job(source, target):
        if Path(target).name.startswith("seed"):
            if moved:
                raise KeyboardInterrupt  # a kill between two jobs
            moved.append(target)
        real_rename(source, target)

    monkeypatch.setattr(unpack.os, "rename", killed_after_one_job)
    with pytest.raises(KeyboardInterrupt):
        unpack_runs(archive, tmp_path / "into")
    monkeypatch.setattr(unpack.os, "rename", real_rename)
    local = tmp_path / "into" / "nb"
    present = sorted(p.name for p in (local / "NB").iterdir())
    assert present == ["seed5000"] and _files(local / "NB/seed5000") == _files(KEPT_RUN / "NB/seed5000")
    assert sorted(p.name for p in (tmp_path / "into").iterdir()) == ["nb"]  # no scratch left
    [unpacked] = unpack_runs(archive, tmp_path / "into")
    assert unpacked.taken == ["NB/seed5001", "NB/seed5002"] and unpacked.already_here == ["NB/seed5000"]


def test_a_run_of_other_settings_is_refused_and_left_as_it_was(tmp_path):
    local = _local(tmp_path)
    config = json.loads((local / "config.json").read_text())
    config["seeds"] = [1]
    (local / "config.json").write_text(json.dumps(config))
    before = _files(local)
    with pytest.raises(SystemExit, match="holds a run of other settings than the nb that came back"):
        gpu_run.main(["--unpack", str(_pack(tmp_path).parent), "--into", str(tmp_path / "into")])
    assert _files(local) == before


@pytest.mark.parametrize("content", [b"", b"garbage", b"\x1f\x8b\x08\x00truncated"])
def test_an_archive_that_is_empty_truncated_or_not_gzip_is_one_error_line(tmp_path, content, capsys):
    (tmp_path / "runs.tar.gz").write_bytes(content)
    with pytest.raises(SystemExit, match="is not a whole gzip-compressed tar") as stopped:
        gpu_run.main(["--unpack", str(tmp_path), "--into", str(tmp_path / "into")])
    assert str(stopped.value).startswith("error: ") and "\n" not in str(stopped.value)


def test_the_pack_holds_only_job_folders_and_the_runs_own_files(tmp_path):
    run = Path(shutil.copytree(KEPT_RUN, tmp_path / "runs" / "nb"))
    shutil.copy(run / "NB/seed5000/result.json", run / "NB/result.json")
    assert gpu_run.finished_job_folders(run) == [run / "NB" / seed for seed in SEEDS]
