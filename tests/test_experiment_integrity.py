"""What the four experiments on pretrained models share through crasplab.cli and their settings
types: one process per run folder, repeated list values and non-finite numbers refused while the
flags are parsed, batches beyond the machine's memory refused before config.json is written, and
folders that cannot be written or configs edited by hand reported as `error:` lines."""

import fcntl
import json
import re

import pytest

from crasplab.records import files
from experiments import finetune, mechanism, pretrained, realistic
from tests.model_files import answer_records, write_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


PRETRAINED_FLAGS = ["--tasks", "UR", "--lengths", "6", "--n", "2", "--batch-size", "2"]


def test_a_run_folder_in_use_by_another_process_is_refused_and_its_records_stay_single(tiny, tmp_path):
    out = tmp_path / "run"
    pretrained.main(["--model", str(tiny), *PRETRAINED_FLAGS, "--out", str(out)])
    with open(out / ".lock", "a") as other_process:  # a second open file holds the lock like another process
        fcntl.flock(other_process, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SystemExit, match=f"^error: {re.escape(str(out))} is in use by another process"):
            pretrained.main(["--model", str(tiny), *PRETRAINED_FLAGS, "--n", "3", "--out", str(out)])
    assert len(answer_records(out)) == 2
    pretrained.main(["--model", str(tiny), *PRETRAINED_FLAGS, "--out", str(out)])  # released: the same command resumes
    assert len(answer_records(out)) == 2


@pytest.mark.parametrize(
    "main, flags, message",
    [
        (pretrained.main, ["--tasks", "UF", "UF"], "argument --tasks: UF given more than once; give each value once"),
        (pretrained.main, ["--lengths", "6", "8", "6"], "argument --lengths: 6 given more than once"),
        (finetune.main, ["--tasks", "UF", "UB", "UF"], "argument --tasks: UF given more than once"),
        (mechanism.main, ["--lengths", "5", "5"], "argument --lengths: 5 given more than once"),
        (mechanism.main, ["--k", "1", "1"], "argument --k: 1 given more than once"),
        (mechanism.main, ["--periods", "3", "3"], "argument --periods: 3 given more than once"),
        (realistic.main, ["lorem", "--lengths", "50", "50"], "argument --lengths: 50 given more than once"),
        (finetune.main, ["--threshold", "nan"], "argument --threshold: must be a finite number, got nan"),
        (finetune.main, ["--threshold", "1.5"], "argument --threshold: must lie in [0, 1], got 1.5"),
        (finetune.main, ["--learning-rate", "inf"], "argument --learning-rate: must be a finite number, got inf"),
        (finetune.main, ["--lora-alpha", "nan"], "argument --lora-alpha: must be a finite number, got nan"),
    ],
    ids=[
        "pretrained-tasks",
        "pretrained-lengths",
        "finetune-tasks",
        "mechanism-lengths",
        "mechanism-k",
        "mechanism-periods",
        "lorem-lengths",
        "threshold-nan",
        "threshold-above-1",
        "learning-rate-inf",
        "lora-alpha-nan",
    ],
)
def test_repeated_values_and_numbers_that_are_not_finite_are_refused_while_parsing(
    tmp_path, capsys, main, flags, message
):
    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        main([*flags, "--model", str(tmp_path / "absent"), "--out", str(out)])
    assert message in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    "main, flags, message",
    [
        (
            pretrained.main,
            [*PRETRAINED_FLAGS, "--batch-size", "1000000000"],
            "decoding 1000000001 prompts of up to .* tokens at once needs at least .* GiB, and this machine "
            "has .* GiB of memory; lower --batch-size",
        ),
        (
            finetune.main,
            ["--tasks", "UF", "--batch-size", "1000000000"],
            "a batch of 1000000000 UF prompts of up to .* tokens needs at least .* GiB.* lower --batch-size",
        ),
        (
            finetune.main,
            ["--tasks", "UF", "--eval-batch-size", "1000000000"],
            "a batch of 1000000001 UF prompts of up to .* tokens needs at least .* GiB.* lower --eval-batch-size",
        ),
    ],
    ids=["pretrained", "finetune-training", "finetune-test"],
)
def test_a_batch_beyond_the_machines_memory_is_refused_before_config_json(tiny, tmp_path, main, flags, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=f"^error: {message}"):
        main(["--model", str(tiny), *flags, "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize(
    "main, flags",
    [
        (pretrained.main, ["--tasks", "UR", "--lengths", "6", "--n", "1000000000"]),
        (finetune.main, ["--tasks", "UF", "--examples-per-length", "1000000000"]),
        (realistic.main, ["git", "--commits", "2", "--n", "1000000000"]),
        (mechanism.main, ["--sequences", "1000000000"]),
    ],
    ids=["pretrained-n", "finetune-examples", "git-n", "mechanism-sequences"],
)
def test_more_prompts_than_the_memory_holds_are_refused_before_the_model_is_loaded(tmp_path, main, flags):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match="^error: building [0-9]+ prompts needs at least .* GiB, and this machine has"):
        main([*flags, "--model", str(tmp_path / "absent"), "--out", str(out)])
    assert not out.exists()


def test_a_lora_rank_wider_than_the_model_is_refused_before_config_json(tiny, tmp_path):
    with pytest.raises(SystemExit, match="^error: --lora-rank 1000000 is wider than the model \\(32\\)"):
        finetune.main(
            [
                "--model",
                str(tiny),
                "--tasks",
                "UF",
                "--method",
                "lora",
                "--lora-rank",
                "1000000",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    assert not (tmp_path / "run").exists()


def test_a_run_folder_that_cannot_be_written_is_an_error_line(tiny, tmp_path, monkeypatch):
    out = tmp_path / "run"
    pretrained.main(["--model", str(tiny), *PRETRAINED_FLAGS, "--out", str(out)])

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)  # what a read-only folder does to every write
    for flags in (["--report-only", str(out)], ["--model", str(tiny), *PRETRAINED_FLAGS, "--out", str(out)]):
        with pytest.raises(
            SystemExit,
            match=f"^error: cannot write {re.escape(str(out))}/.*: Permission denied; make its folder writable",
        ):
            pretrained.main(flags)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("threshold", "high", "setting threshold = 'high' is not accepted; expected a finite number"),
        ("tasks", "UF", "setting tasks = 'UF' is not accepted; expected a list"),
        ("seed", None, "is not the settings of a run of experiments/finetune.py"),
    ],
)
def test_a_hand_edited_config_json_is_an_error_line_on_report_only(tmp_path, key, value, message):
    settings = finetune.settings_from(finetune.build_parser().parse_args(["--preset", "quick", "--model", "m"]))
    config = dict(settings.to_dict(), architecture="gguf/llama")
    if value is None:
        del config[key]
    else:
        config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match=f"^error: .*config.json.*{re.escape(message)}"):
        finetune.main(["--report-only", str(tmp_path)])
