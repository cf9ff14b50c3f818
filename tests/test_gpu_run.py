"""The one prepared GPU command (benchmarks/gpu_run.py), rehearsed end to end on the CPU as CI
runs it: every part on the accelerator's code path with the GPU machine's missing packages
hidden, the paper grid's protocol run training real (tiny) stacks, the packed files, and the
unpacking that a later command completes from."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from crasplab.records.job_folder import BinEval, EvalRecord, JobRecords, JobResult, TrainRecord

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_run  # noqa: E402
import lease_plan  # noqa: E402

FILES_BACK = {
    "summary.md",
    "machine.json",
    "tests.log",
    "throughput.log",
    "throughput.json",
    "dtypes.log",
    "training.log",
}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-run")
    command = [
        sys.executable,
        "benchmarks/gpu_run.py",
        "--rehearse",
        "--out",
        str(out),
        "--minutes",
        "14",
        "--dtype",
        "auto",
    ]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return out


def test_the_rehearsal_runs_every_part_and_packs_at_most_eight_files(rehearsal):
    assert {path.name for path in rehearsal.iterdir()} == FILES_BACK | {"runs.tar.gz"}
    summary = (rehearsal / "summary.md").read_text()
    for part in ("tests", "throughput", "dtypes", "training"):
        assert f"| {part} | 0 |" in summary, summary
    assert "2 passed" in (rehearsal / "tests.log").read_text()
    throughput = json.loads((rehearsal / "throughput.json").read_text())
    for table in ("stack_model_steps_per_s", "concurrent_model_steps_per_s"):
        assert throughput[table].keys() == {"float32", "bfloat16", "bfloat16-mixed", "tf32"}
    assert all(rates.keys() == {"2"} for rates in throughput["stack_model_steps_per_s"].values())
    assert all(rates.keys() == {"1"} for rates in throughput["concurrent_model_steps_per_s"].values())
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


def test_auto_trains_in_the_fastest_dtype_the_check_said_trains_the_same_and_the_run_records_it(rehearsal):
    """The check judged every choice (on this CPU tf32 computes as float32 does, so it passes) and
    picked the fastest that passed; the protocol trained in it, and its config.json says so."""
    log = (rehearsal / "dtypes.log").read_text()
    for choice in ("bfloat16", "bfloat16-mixed", "tf32"):
        assert f"**{choice} trains the same: " in log
    assert "**tf32 trains the same: yes**" in log
    fastest = re.search(r"\*\*fastest that trains the same: (\S+)\*\*", log).group(1)
    with tarfile.open(rehearsal / "runs.tar.gz") as tar:
        config = json.load(tar.extractfile("ape-paper/config.json"))
    assert config["model"]["dtype"] == fastest
    assert f"--dtype {fastest}" in (rehearsal / "training.log").read_text().splitlines()[0]


def test_auto_trains_in_float32_without_a_dtype_check_that_picked_another(tmp_path):
    plan = gpu_run.Plan(False, tmp_path / "paper", dtype="auto")
    assert plan.training_dtype() == "float32"
    plan.dtype_check.mkdir()
    (plan.dtype_check / "comparison.json").write_text(json.dumps({"same_training": True}))  # before the choices
    assert plan.training_dtype() == "float32"
    (plan.dtype_check / "comparison.json").write_text(json.dumps({"fastest": "bfloat16-mixed"}))
    assert plan.training_dtype() == "bfloat16-mixed"
    assert gpu_run.Plan(False, tmp_path / "paper", dtype="bfloat16").training_dtype() == "bfloat16"


def test_the_summary_plans_the_training_and_lists_what_is_left(rehearsal):
    summary = (rehearsal / "summary.md").read_text()
    assert "measured in this call" in summary and "Left for the next lease: nothing" in summary
    for task in ("NLFirst", "NLLast", "UB"):
        assert re.search(
            rf"\| {task} \| 100, 101, 102, 103, 104 \| 16 \| the step cap \| [0-9.]+ \| started \|", summary
        )


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
    parts = {part.name: part for part in gpu_run.parts(gpu_run.Plan(True, tmp_path), 1.0)}
    assert set(parts["training"].hidden_in_rehearsal) == set(parts["tests"].hidden_in_rehearsal) == set(hidden)


def _dtype_records(losses_by_dtype: dict[str, list[list[float]]], accuracies: dict[str, list[float]]) -> dict:
    """The jobs of one task 'T' in each dtype, one per seed: a train record per step (100, 200, ...),
    a final evaluation and a result."""
    records = {}
    for dtype, per_step in losses_by_dtype.items():
        last = 100 * len(per_step)
        records[dtype] = [
            JobRecords(
                "T",
                seed,
                (
                    *(TrainRecord(100 * (i + 1), losses[seed], 0.0) for i, losses in enumerate(per_step)),
                    EvalRecord(last, (BinEval(1, 2, accuracy, 10),)),
                ),
                (),
                JobResult("T", seed, "ape", last, False, 1.0, ()),
            )
            for seed, accuracy in enumerate(accuracies[dtype])
        ]
    return records


def test_the_dtype_rule_accepts_a_gap_within_the_seeds_spread_and_refuses_one_beyond_it():
    import paper_preset_dtypes as check

    float32 = [[2.0, 2.2, 2.4], [1.0, 1.2, 1.4], [0.5, 0.6, 0.7]]  # spreads 0.4, 0.4, 0.2
    close = [[2.1, 2.3, 2.5], [1.1, 1.3, 1.5], [0.55, 0.65, 0.75]]
    far = [[2.1, 2.3, 2.5], [1.5, 1.7, 1.9], [0.55, 0.65, 0.75]]  # step 200 off by 0.5 > 0.4
    same = dict(float32=[0.9, 1.0, 0.95], bfloat16=[0.92, 0.97, 0.96])
    records = _dtype_records(dict(float32=float32, bfloat16=close), same)
    assert check.compare_task(records, "T", warmup_steps=100)["same_training"]
    records = _dtype_records(dict(float32=float32, bfloat16=far), same)
    verdict = check.compare_task(records, "T", warmup_steps=100)
    assert verdict["loss_steps_within_seed_spread"] == 0.5 and not verdict["same_training"]
    lower = dict(float32=[0.9, 1.0, 0.95], bfloat16=[0.7, 0.8, 0.75])  # 0.2 below, allowed max(0.05, 0.1)
    assert not check.compare_task(_dtype_records(dict(float32=float32, bfloat16=close), lower), "T", 100)[
        "same_training"
    ]


def work(task, seeds=5, steps=1000, under_way=False):
    return lease_plan.TaskWork(task, tuple(range(seeds)), steps, "the step cap", under_way)


def test_a_lease_starts_what_can_finish_and_finishes_what_is_under_way_first():
    """At 100 model-steps/s and 10 s of overhead a task of 5 seeds x 1000 steps takes 60 s: in
    130 s the task under way (listed last) goes first, then one new one; the third is left, and a
    smaller one after it still fits."""
    items = [work("A"), work("B"), work("C", seeds=1, steps=100), work("U", under_way=True)]
    started, left = lease_plan.choose(items, rate=100.0, seconds=131.0, overhead_s=10.0)
    assert [w.task for w in started] == ["U", "A", "C"]
    assert [w.task for w in left] == ["B"]
    assert lease_plan.choose(items, rate=100.0, seconds=59.0, overhead_s=10.0)[0] == [items[2]]


def test_a_task_needs_the_steps_its_kept_run_needed_less_what_this_machine_trained(tmp_path, monkeypatch):
    """NLFirst's seeds needed at most 18,000 steps in the kept paper-scale run; a task with no
    kept job needs the cap; a seed with a checkpoint at step 15,000 needs the rest, and at least
    the two evaluations in a row that stop it."""
    from crasplab.cli.length_gen import RunRequest

    request = RunRequest(pe="ape", preset="protocol-paper", protocol=True, tasks=("NLFirst", "NLLast"))
    kept = ROOT / "evidence" / "protocol-paper-ape"
    by_task = {w.task: w for w in lease_plan.protocol_work(request, tmp_path / "ape-paper", kept)}
    assert by_task["NLFirst"].steps_each == lease_plan.kept_steps(kept, "NLFirst") == 18000
    assert by_task["NLLast"].steps_each == 30000 and by_task["NLLast"].steps_from == "the step cap"
    assert by_task["NLFirst"].seeds == (9000, 9001, 9002, 9003, 9004) and not by_task["NLFirst"].under_way
    assert lease_plan.protocol_work(request, tmp_path / "ape-paper", None)[0].steps_each == 30000
    for trained, needed in ((15000, 3000), (17500, 2000)):  # 2000: two evaluations, 1000 steps apart
        monkeypatch.setattr(lease_plan, "trained_steps", lambda folder, step=trained: step)
        first = lease_plan.protocol_work(request, tmp_path / "ape-paper", kept)[0]
        assert first.under_way and first.steps_each == needed
