"""What a user meets when something is wrong (issue 47, reliability round 3): every error a user's
flags, files, folders or machine can cause is one `error:` line (crasplab.errors.command_boundary),
every file the lab reads back goes through a validated reader that names the file, what is wrong
and what to do, and no command writes into a folder of something else. One test per cause, each
with the probe's own input."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crasp.__main__ import main as crasp_main
import crasplab.cli.length_gen as length_gen_library
from crasplab.compiler import compile_text
from crasplab.compiler.lower import MAX_NESTING, CompileError
from crasplab.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, command_boundary
from crasplab.records.files import ResultFileError, append_jsonl, atomic_write, read_jsonl
from crasplab.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from crasplab.train.engines import EngineError, check_some_node_fits
from crasplab.train.loop import Job
from crasplab.train.workers import WorkerError
from experiments import compiled, length_gen
from tests.tiny import ROOT, TINY_MODEL, tiny_config, tiny_model
from flax import nnx

# A finished length_gen run kept in the repository: a protocol run of NB with three seeds.
KEPT_RUN = ROOT / "evidence/protocol-clip-rope-nb"
TINY_FLAGS = [
    *("--tasks", "UL", "--seeds", "1", "--no-progress", "--n-layers", "1", "--n-heads", "2", "--d-model", "16"),
    *("--train-lengths", "1", "4", "--test-bins", "1-4,5-6", "--batch-size", "8", "--max-steps", "24"),
    *("--eval-every", "8", "--eval-examples-per-length", "4", "--greedy-examples-per-bin", "8"),
    *("--checkpoint-every", "4", "--warmup-steps", "2", "--workers", "1"),
]


@pytest.fixture
def kept_run(tmp_path) -> Path:
    return Path(shutil.copytree(KEPT_RUN, tmp_path / "run"))


def run_worker(*folders: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-P", "-m", "crasplab.train.workers", *map(str, folders)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def tiny_job(folder: Path) -> Job:
    job = Job(task_code="UL", seed=1, model=TINY_MODEL, train=tiny_config(), out_dir=str(folder))
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps(job.to_dict()))
    return job


# -- B: errors in the worker ------------------------------------------------------------------------
def test_the_worker_on_a_folder_without_a_job_is_one_error_line(tmp_path):
    (tmp_path / "empty_dir").mkdir()
    done = run_worker(tmp_path / "empty_dir")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'empty_dir' / 'job.json'} is missing; give the folder of a job (<run>/<task>/seed<k>, "
        "where the run's command writes job.json before the job trains), run that command again, or restore the file"
    ]


def test_the_worker_on_a_truncated_checkpoint_is_one_error_line_that_says_what_to_do(tmp_path):
    job = tiny_job(tmp_path / "UL" / "seed1")
    params = nnx.state(tiny_model(), nnx.Param)
    save_checkpoint(job.files.checkpoint_file, params, {"step": 4})
    os.truncate(job.files.checkpoint_file, 3000)
    done = run_worker(job.folder)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {job.files.checkpoint_file}: not a readable checkpoint (BadZipFile")
    assert "delete it and run the same command again" in line


def test_a_checkpoint_of_other_settings_is_named_so_and_never_called_unreadable(tmp_path):
    """n_layers 3 against a checkpoint of 2: the file is good, and the message must not say delete it."""
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, nnx.state(tiny_model(n_layers=2), nnx.Param), {"step": 8})
    for layers in (3, 1):
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(path, nnx.state(tiny_model(n_layers=layers), nnx.Param))
        assert "trained with other settings" in str(refused.value) and "not damaged" in str(refused.value)
        assert "not a readable checkpoint" not in str(refused.value) and "delete" not in str(refused.value)


def test_a_worker_error_reaches_the_user_as_one_error_line():
    with pytest.raises(SystemExit, match="^error: the worker for UL seed 1 exited with code 1"):
        with command_boundary():
            raise WorkerError("the worker for UL seed 1 exited with code 1; its log:\ncannot write ...")


def test_a_disk_that_fills_up_during_a_write_is_a_file_error_and_leaves_no_temporary(tmp_path):
    def full(_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(ResultFileError, match=r"cannot write .*checkpoint.npz: No space left on device"):
        atomic_write(tmp_path / "checkpoint.npz", full)
    assert list(tmp_path.iterdir()) == []


# -- C: report files read without validation ---------------------------------------------------------
@pytest.mark.parametrize("content", [b"{", b"\xff\xfe", b"[1]", b"{}"], ids=["torn", "bytes", "list", "empty"])
@pytest.mark.parametrize("name", ["protocol.json", "predictions.json", "NB/seed5000/result.json"])
def test_a_damaged_report_file_is_one_error_line_naming_it(kept_run, name, content, capsys):
    (kept_run / name).write_bytes(content)
    with pytest.raises(SystemExit) as refused:
        length_gen.main(["--report-only", str(kept_run)])
    message = str(refused.value)
    assert message.startswith(f"error: {kept_run / name}") and "\n" not in message, message
    assert "so not the file the lab wrote" in message or "is not text" in message


@pytest.mark.parametrize("threshold", ['"high"', "5", "-0.5", "true"])
def test_a_threshold_in_config_json_decides_nothing_the_protocols_rules_do(kept_run, threshold):
    """A config.json from when the threshold was a run setting holds one; the report reads the run
    at its rules' threshold whatever that file says, and refuses another one asked for."""
    config = (kept_run / "config.json").read_text()
    (kept_run / "config.json").write_text(config.replace('"threshold": 0.9', f'"threshold": {threshold}'))
    length_gen.main(["--report-only", str(kept_run)])
    assert (kept_run / "report.md").read_text() == (KEPT_RUN / "report.md").read_text()
    refused = f"^error: {kept_run} is a protocol run: its rules .* fixed the threshold at 0.9 before it ran"
    with pytest.raises(SystemExit, match=refused):
        length_gen.main(["--report-only", str(kept_run), "--threshold", "0.8"])


def test_a_metrics_record_without_its_fields_is_one_error_line_naming_the_file(kept_run):
    metrics = kept_run / "NB" / "seed5000" / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"kind": "eval", "step": 8}\n')
    with pytest.raises(SystemExit, match=f"^error: {metrics}: record .* is neither a train record nor an eval record"):
        length_gen.main(["--report-only", str(kept_run)])


# -- D: commands that write a folder ----------------------------------------------------------------
def compile_into(out: Path, *task: str) -> None:
    crasp_main(["compile", "majority", "--pe", "ape", "--out", str(out), *task])


def test_compile_refuses_an_out_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x\n")
    with pytest.raises(SystemExit, match=f"^error: --out {tmp_path / 'afile'} is a file"):
        compile_into(tmp_path / "afile")


def test_compile_refuses_a_folder_of_something_else_and_leaves_it_as_it_was(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hi\n")
    with pytest.raises(SystemExit, match="holds notes.txt and no compiled.json"):
        compile_into(tmp_path / "other")
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]


def test_compile_never_replaces_the_files_of_a_length_gen_run(kept_run):
    with pytest.raises(
        SystemExit, match="holds NB, accuracy_by_length.png, config.json and 5 more and no compiled.json"
    ):
        compile_into(kept_run, "--task", "UR")
    assert (kept_run / "config.json").read_text() == (KEPT_RUN / "config.json").read_text()
    assert sorted(p.name for p in kept_run.iterdir()) == sorted(p.name for p in KEPT_RUN.iterdir())


def test_an_experiment_refuses_a_folder_of_something_else(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(SystemExit, match=f"^error: --out {tmp_path} holds notes.txt and no config.json"):
        length_gen.main([*TINY_FLAGS, "--out", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_compile_says_what_it_will_write_before_writing_and_writes_it_compressed(tmp_path, capsys):
    out = tmp_path / "majority"
    compile_into(out)
    lines = capsys.readouterr().out.splitlines()
    size = (out / "checkpoint.npz").stat().st_size
    assert (
        lines[0]
        == f"writing {out}: {size / 1e6:.1f} MB (checkpoint.npz {size / 1e6:.1f} MB, and text files of a few kB)"
    )
    parameters = json.loads((out / "compiled.json").read_text())["parameters"]
    assert size < 4 * parameters / 10  # float32 weights, mostly zeros: stored in a tenth of their bytes or less


# -- E: the compiler's lowering ----------------------------------------------------------------------
def nested_nots(count: int) -> str:
    return "alphabet: a b\naccept: A\nA := " + "not " * count + 'Q("a")\n'


def test_a_program_nested_deeper_than_the_compiler_follows_is_a_clear_limit_error():
    with pytest.raises(CompileError, match=f"the program nests 602 levels deep .* at most {MAX_NESTING}"):
        compile_text(nested_nots(600), "deep.crasp", "ape")
    compile_text(nested_nots(MAX_NESTING - 2), "deep.crasp", "ape")  # the limit itself compiles


# -- H: Ray ------------------------------------------------------------------------------------------
class ClusterWithoutGPU:
    @staticmethod
    def nodes():
        return [dict(Alive=True, Resources=dict(CPU=2.0, memory=1e9)), dict(Alive=False, Resources=dict(GPU=1.0))]


def test_a_gpu_share_no_node_offers_fails_at_once_naming_the_resource():
    with pytest.raises(EngineError, match=r"each asks for 1 CPU and 0.5 of a GPU \(--gpu-share 0.5\), .* CPU 2, GPU 0"):
        check_some_node_fits(ClusterWithoutGPU, 0.5, wait_s=0.0)
    check_some_node_fits(ClusterWithoutGPU, 0.0, wait_s=0.0)  # CPU jobs fit


def test_a_joined_cluster_is_given_a_bounded_time_for_a_node_to_join(monkeypatch):
    monkeypatch.setattr("crasplab.train.engines.POLL_SECONDS", 0.01)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"after waiting 0.05 s for a node to join"):
        check_some_node_fits(ClusterWithoutGPU, 1.0, wait_s=0.05)
    assert time.monotonic() - started < 60  # bounded, not forever


def test_an_address_ray_cannot_parse_is_the_labs_error(tmp_path):
    pytest.importorskip("ray")
    with pytest.raises(SystemExit, match="^error: cannot reach the Ray cluster at 'not a host:xx'"):
        length_gen.main(
            [*TINY_FLAGS, "--out", str(tmp_path / "run"), "--engine", "ray", "--ray-address", "not a host:xx"]
        )


# -- I: a torn line in a JSON-lines file -------------------------------------------------------------
def test_an_append_after_a_torn_line_starts_a_new_line_and_the_torn_one_is_reported(tmp_path, capsys):
    path = tmp_path / "invocations.jsonl"
    append_jsonl(path, dict(finished=True, wall_s=32.0))
    with open(path, "a") as f:
        f.write('{"finished": tr')  # printf '{"finished": tr' >> RUN/invocations.jsonl
    append_jsonl(path, dict(finished=True, wall_s=9.9))
    assert path.read_text().splitlines()[1:] == ['{"finished": tr', '{"finished": true, "wall_s": 9.9}']
    assert read_jsonl(path) == [dict(finished=True, wall_s=32.0), dict(finished=True, wall_s=9.9)]
    assert capsys.readouterr().err == f"{path}:2: a torn line (its writer was stopped mid-line), skipped\n"


def test_a_line_that_is_not_a_torn_record_is_still_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json}\n')
    with pytest.raises(ResultFileError, match="metrics.jsonl:2: not a JSON record"):
        read_jsonl(tmp_path / "metrics.jsonl")


def test_a_run_whose_invocations_end_in_a_torn_line_reports_after_the_next_invocation(kept_run, capsys):
    with open(kept_run / "invocations.jsonl", "a") as f:
        f.write('{"finished": tr')
    append_jsonl(kept_run / "invocations.jsonl", dict(finished=True, jobs=0, started="now", wall_s=1.0, workers="w"))
    length_gen.main(["--report-only", str(kept_run)])
    summary = json.loads((kept_run / "summary.json").read_text())
    assert summary["invocations"][-1]["started"] == "now"
    assert "invocations.jsonl" in capsys.readouterr().err


# -- J: compiled.py on runs it does not read ---------------------------------------------------------
def test_compiled_report_only_on_a_length_gen_run_is_refused(kept_run):
    with pytest.raises(SystemExit, match="config.json is not the settings of a run of experiments/compiled.py"):
        compiled.main(["--report-only", str(kept_run)])


def test_compiled_trained_on_a_run_without_a_witnessed_task_is_refused_before_anything(kept_run, tmp_path):
    out = tmp_path / "compiled"
    with pytest.raises(SystemExit, match=r"the run trained NB \(rope\), and no witness is compiled for any"):
        compiled.main(["--trained", str(kept_run), "--tasks", "--rounding-lengths", "--out", str(out)])
    assert not out.exists()


# -- Ctrl-C and kill ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "stop, code, line",
    [
        (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
        (lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5)), EXIT_TERMINATED, "terminated (SIGTERM)"),
    ],
    ids=["ctrl-c", "kill"],
)
def test_a_stopped_run_prints_one_line_and_records_its_wall_time(tmp_path, monkeypatch, capsys, stop, code, line):
    handler = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(length_gen_library, "run_jobs_on", lambda *args, **keywords: stop())
    with pytest.raises(SystemExit) as stopped:
        length_gen.main([*TINY_FLAGS, "--out", str(tmp_path)])
    assert stopped.value.code == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and [row for row in err.splitlines() if row.startswith(line)] != []
    (record,) = read_jsonl(tmp_path / "invocations.jsonl")
    assert record["finished"] is False and record["wall_s"] >= 0
    assert signal.getsignal(signal.SIGTERM) == handler  # the boundary puts the handler back
