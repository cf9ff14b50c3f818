"""The one prepared GPU command (benchmarks/gpu_run.py), rehearsed end to end on the CPU as CI
runs it: every part on the accelerator's code path with the GPU machine's missing packages
hidden, the paper grid's protocol run training real (tiny) stacks, the packed files, and the
unpacking that a later command completes from."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_run  # noqa: E402

FILES_BACK = {"summary.md", "machine.json", "tests.log", "throughput.log", "throughput.json", "training.log"}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-run")
    command = [sys.executable, "benchmarks/gpu_run.py", "--rehearse", "--out", str(out), "--minutes", "8"]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return out


def test_the_rehearsal_runs_every_part_and_packs_at_most_eight_files(rehearsal):
    assert {path.name for path in rehearsal.iterdir()} == FILES_BACK | {"runs.tar.gz"}
    summary = (rehearsal / "summary.md").read_text()
    for part in ("tests", "throughput", "training"):
        assert f"| {part} | 0 |" in summary, summary
    assert "2 passed" in (rehearsal / "tests.log").read_text()
    throughput = json.loads((rehearsal / "throughput.json").read_text())
    for table in ("stack_model_steps_per_s", "concurrent_model_steps_per_s"):
        assert throughput[table].keys() == {"float32", "bfloat16"}
        assert all(rates.keys() == {"1", "2"} for rates in throughput[table].values())
    assert throughput["hf_over_ours"].keys() == {"float32", "bfloat16"}
    assert json.loads((rehearsal / "machine.json").read_text())["lab_commit"]


def test_the_pack_holds_finished_jobs_without_checkpoints(rehearsal):
    with tarfile.open(rehearsal / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert not [name for name in names if name.endswith(".npz") or name.endswith(".lock")]
    finished = {Path(name).parent for name in names if name.endswith("result.json")}
    assert finished and all(str(job / "provenance.jsonl") in names for job in finished)
    assert {"ape-paper/config.json", "ape-paper/protocol.json", "ape-paper/predictions.json"} <= set(names)
    with tarfile.open(rehearsal / "runs.tar.gz") as tar:
        predictions = json.load(tar.extractfile("ape-paper/predictions.json"))
    assert predictions["tasks"]["NLLast"]["discrimination"]["checked"]  # made beside the training


def test_what_came_back_unpacks_into_a_run_that_reports_and_unpacks_again_unchanged(rehearsal, tmp_path):
    into = tmp_path / "paper"
    gpu_run.main(["--unpack", str(rehearsal), "--into", str(into)])
    run = into / "ape-paper"
    jobs = gpu_run.finished_job_folders(run)
    assert jobs and (run / "report.md").exists()
    provenance = [json.loads(line) for line in (jobs[0] / "provenance.jsonl").read_text().splitlines()]
    assert provenance[0]["device_kind"] and provenance[0]["lab_commit"]
    gpu_run.main(["--unpack", str(rehearsal), "--into", str(into)])
    assert gpu_run.finished_job_folders(run) == jobs


def test_unpack_refuses_a_folder_that_holds_no_pack(tmp_path):
    with pytest.raises(SystemExit, match="holds no runs.tar.gz"):
        gpu_run.main(["--unpack", str(tmp_path), "--into", str(tmp_path / "runs")])


def test_the_rehearsal_hides_what_the_gpu_machine_lacks_and_what_training_must_not_need(tmp_path):
    hidden = gpu_run.ABSENT_ON_DEVICE + gpu_run.NOT_FOR_TRAINING
    env = gpu_run.rehearsal_environment(tmp_path, hidden)
    for module in hidden:
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True)
        assert "hidden by gpu_run" in probe.stderr
    assert env["CRASPLAB_ACCELERATOR_PATH"] == "rehearse" and os.environ.get("CRASPLAB_ACCELERATOR_PATH") is None
    parts = {part.name: part for part in gpu_run.parts(True, tmp_path, 1.0)}
    assert set(parts["training"].hidden_in_rehearsal) == set(parts["tests"].hidden_in_rehearsal) == set(hidden)
