"""One boundary for every entry point (issue 61 D and F): export, the training scripts' numeric
flags, the settings files and the worker pool's progress bars. Each probe of the issue ended in a
traceback (or a hang); each is one `error:` line here, naming the file or flag and what to do, or
(a moved run folder) no error at all."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from crasplab.errors import command_boundary
from crasplab.export import main as export_main
from crasplab.records.files import ResultFileError, read_json_object, read_jsonl
from crasplab.records.run_folder import RunFolderError, read_run_config
from crasplab.records.settings import LARGEST_INT, Settings, SettingsError
from crasplab.train.config import ModelSettings
from crasplab.train.loop import Job, run_job
from crasplab.train.runs import read_job
from crasplab.train.workers import TaskBars, _read_progress
from experiments import length_gen, paper_grid, sweep
from tests.tiny import tiny_config

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny job trained for 8 steps, at <run>/UR/seed0."""
    folder = tmp_path_factory.mktemp("export") / "run" / "UR" / "seed0"
    job = Job(
        task_code="UR",
        seed=0,
        model=ModelSettings(pe="ape", n_layers=1, n_heads=2, d_model=16),
        train=tiny_config(max_steps=8, eval_every=8),
        task_overrides=dict(alphabet_size=6),
        out_dir=str(folder),
    )
    run_job(job)
    return folder


def _copy(folder: Path, to: Path) -> Path:
    return Path(shutil.copytree(folder, to))


def _job_json(folder: Path, change) -> None:
    values = json.loads((folder / "job.json").read_text())
    change(values)
    (folder / "job.json").write_text(json.dumps(values))


def _one_error_line(stopped: pytest.ExceptionInfo) -> str:
    message = str(stopped.value)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda j: (j / "checkpoint.npz").write_bytes((j / "checkpoint.npz").read_bytes()[:2000]), "not a readable"),
        (lambda j: (j / "job.json").write_text("garbage"), "job.json: not JSON"),
        (lambda j: (j / "job.json").write_text(DEEP), "job.json: JSON nested deeper than"),
        (lambda j: _job_json(j, lambda v: v["model"].update(pe="xyz")), "pe must be one of"),
        (lambda j: _job_json(j, lambda v: v["train"].update(batch_size=10**30)), f"to {LARGEST_INT}"),
    ],
    ids=["torn checkpoint", "garbage job.json", "job.json nested 100,000 deep", "unknown encoding", "10^30"],
)
def test_export_of_a_spoilt_job_is_one_error_line(trained, tmp_path, spoil, says):
    job = _copy(trained, tmp_path / "run" / "UR" / "seed0")
    spoil(job)
    with pytest.raises(SystemExit) as stopped:
        export_main([str(job), "--out", str(tmp_path / "hf")])
    assert says in _one_error_line(stopped) and not (tmp_path / "hf").exists()


@pytest.mark.parametrize("out", ["/proc/crasp-export", "{tmp}/file.txt/hf", "{tmp}/full"])
def test_export_to_a_target_it_cannot_write_or_that_holds_files_is_one_error_line(trained, tmp_path, out):
    (tmp_path / "file.txt").write_text("mine")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stopped:
        export_main([str(trained), "--out", out.format(tmp=tmp_path)])
    assert f"--out {out.format(tmp=tmp_path)}" in _one_error_line(stopped)
    assert (tmp_path / "file.txt").read_text() == "mine" and [p.name for p in (tmp_path / "full").iterdir()] == [
        "notes.txt"
    ]


def test_a_job_folder_renamed_to_another_task_or_seed_is_refused(trained, tmp_path):
    """The probe (F): a job of UR in a folder renamed NB/seed0 exported as NB's without a word."""
    renamed = _copy(trained, tmp_path / "run" / "NB" / "seed0")
    with pytest.raises(SystemExit) as stopped:
        export_main([str(renamed), "--out", str(tmp_path / "hf")])
    assert "a job of task UR in the folder of task NB" in _one_error_line(stopped)
    with pytest.raises(ResultFileError, match="a job of seed 0 in a folder named seed3"):
        read_job(_copy(trained, tmp_path / "run" / "UR" / "seed3"))
    assert read_job(_copy(trained, tmp_path / "sweep" / "UR" / "l1-h2-d16" / "seed0")).task_code == "UR"
    assert read_job(_copy(trained, tmp_path / "anywhere")).task_code == "UR"  # a name that says nothing


def test_a_run_folder_moved_then_resumed_reports_progress_under_its_new_place(trained, tmp_path):
    """The probe: progress.json kept the folder's absolute path, and the resumed run's bars failed
    with KeyError on it."""
    moved = _copy(trained, tmp_path / "moved" / "UR" / "seed0")
    job = read_job(moved)
    old = dict(task="UR", seed=0, step=4, max_steps=8, loss=1.0, train_bin_accuracy=None, folder=str(trained))
    job.files.progress_file.write_text(json.dumps(old))
    bars = TaskBars([job], enabled=False)
    bars.update(_read_progress(job))
    assert bars.steps[str(job.folder)] == 4


@dataclass(frozen=True)
class Counts(Settings):
    steps: int
    rate: float


@pytest.mark.parametrize("values", [dict(steps=10**23, rate=0.1), dict(steps=1, rate=1e300)])
def test_a_number_beyond_what_the_arrays_hold_is_a_settings_error(values):
    with pytest.raises(SettingsError, match="is not accepted; expected (an integer|a finite number)"):
        Counts.from_dict(values)


def test_json_nested_beyond_the_parser_is_a_file_error(tmp_path):
    (tmp_path / "config.json").write_text(DEEP)
    (tmp_path / "metrics.jsonl").write_text(DEEP + "\n")
    with pytest.raises(ResultFileError, match="nested deeper"):
        read_json_object(tmp_path / "config.json", "fix it")
    with pytest.raises(ResultFileError, match="metrics.jsonl: line 1 is JSON nested deeper"):
        read_jsonl(tmp_path / "metrics.jsonl")
    with pytest.raises(RunFolderError, match="is not the settings of a run"):
        read_run_config(tmp_path, ("tasks",), "experiments/length_gen.py")


@pytest.mark.parametrize(
    "main, flags, says",
    [
        (sweep.main, ["--tasks", "UL", "--max-steps", str(10**23)], "argument --max-steps: must be at most"),
        (length_gen.main, ["--tasks", "UL", "--max-steps", str(10**23)], f"max_steps = {10**23} is not accepted"),
        (length_gen.main, ["--tasks", "UL", "--learning-rate", "1e300"], "must be of magnitude at most"),
    ],
)
def test_numeric_flags_are_bounded_while_they_are_parsed(main, flags, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*flags, "--out", str(tmp_path / "run")])
    assert says in f"{stopped.value} {capsys.readouterr().err}" and not (tmp_path / "run").exists()


def test_paper_grid_refuses_workers_beyond_any_machine_at_once(tmp_path):
    """The probe: --workers 100000000 hung while the plan was made."""
    with pytest.raises(SystemExit) as stopped:
        paper_grid.main(["--workers", "100000000", "--dry-run", "--step-seconds", "1", "--out", str(tmp_path)])
    assert "--workers must be from 1 to 1024" in _one_error_line(stopped)


def test_an_os_error_no_code_below_named_is_one_line_naming_the_path(tmp_path):
    with pytest.raises(SystemExit) as stopped, command_boundary():
        (tmp_path / "missing" / "file").read_text()
    assert f"{tmp_path / 'missing' / 'file'}: No such file or directory" in _one_error_line(stopped)
