"""experiments/pretrained.py: the paper's prompt format, the answer extraction, the
report's statistics, and a resumed run giving the same records as an uninterrupted one (on a tiny
random-weight Llama checkpoint written here, with a byte-level tokenizer.json)."""

import json
import re

import jax
import pytest
from crasplab.models.loading.tokenizer import tokenizer_from_folder
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.tasks import COPYING_CODES, RETRIEVAL_CODES
from crasplab.incontext import formal_prompts, greedy
from crasplab.incontext.greedy import answer_line
from crasplab.incontext.settings import PretrainedSettings
from crasplab.reports.in_context import bias_statement, summarize
from crasplab.reports.intervals import difference_interval, wilson_interval
from crasplab.incontext import answering
from experiments import pretrained
from tests.model_files import answer_records, write_byte_level_tokenizer, write_tiny_llama

LETTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
LETTERS_AND_DIGITS = LETTERS | set("0123456789")
RETRIEVAL_LINE = re.compile(r"^ ((?:\S )+)\| (\S):$")


def _retrieval_lines(prompt: str):
    *demos, test = prompt.split("\n")
    parsed_demos = []
    for line in demos:
        question, answer = line.rsplit(" ", 1)
        parsed_demos.append((*RETRIEVAL_LINE.match(question).groups(), answer))
    return parsed_demos, RETRIEVAL_LINE.match(test).groups()


@settings(max_examples=25, deadline=None)
@given(code=st.sampled_from(RETRIEVAL_CODES), length=st.integers(10, 60), seed=st.integers(0, 10**6))
def test_retrieval_prompts_follow_the_spec_format(code, length, seed):
    task = formal_prompts.pretrained_task(code)
    item = formal_prompts.cell_items(code, length, 1, seed, demonstrations=4, demo_length=4)[0]
    demos, (context, query) = _retrieval_lines(item.prompt)
    assert len(demos) == 4
    symbols = context.split()
    assert len(symbols) == length and set(symbols) <= LETTERS_AND_DIGITS
    assert item.expected == " ".join(task.answer(symbols, query))
    occurrences = [k for k, s in enumerate(symbols) if s == query]
    if code in ("UL", "UR"):
        assert len(occurrences) == 1
    else:
        assert 2 <= len(occurrences) <= max(2, length // 5)
        assert all(b - a > 1 for a, b in zip(occurrences, occurrences[1:]))
    for demo_context, demo_query, demo_answer in demos:
        assert len(demo_context.split()) == 4
        assert demo_answer == " ".join(task.answer(demo_context.split(), demo_query))


@settings(max_examples=20, deadline=None)
@given(code=st.sampled_from(COPYING_CODES), length=st.integers(10, 52), seed=st.integers(0, 10**6))
def test_copying_prompts_follow_the_spec_format(code, length, seed):
    item = formal_prompts.cell_items(code, length, 1, seed, demonstrations=5, demo_length=5)[0]
    *demos, test = item.prompt.split("\n")
    assert test.endswith(" :") and len(test[:-2].split()) == length and set(test[:-2].split()) <= LETTERS
    backward = code in ("UB", "NB")
    assert item.expected.split() == (test[:-2].split()[::-1] if backward else test[:-2].split())
    assert len(demos) == 5
    for line in demos:
        source, answer = line.split(" : ")
        assert len(source.split()) == 5
        assert answer.split() == (source.split()[::-1] if backward else source.split())
    if code in ("UF", "UB"):
        assert len(set(test[:-2].split())) == length


def test_cells_are_fixed_by_the_seed_whatever_else_runs():
    first = formal_prompts.cell_items("NRFirst", 20, 3, seed=7, demonstrations=4, demo_length=4)
    again = formal_prompts.cell_items("NRFirst", 20, 3, seed=7, demonstrations=4, demo_length=4)
    other_seed = formal_prompts.cell_items("NRFirst", 20, 3, seed=8, demonstrations=4, demo_length=4)
    assert first == again and first != other_seed


def test_answer_line_stops_at_a_line_break_or_special_token(tmp_path):
    write_byte_level_tokenizer(tmp_path)
    tokenizer = tokenizer_from_folder(tmp_path)
    ids = tokenizer.encode(" a b \nc")
    assert answer_line(tokenizer, ids) == "a b"
    end = tokenizer.backend.token_to_id("<|endoftext|>")
    assert answer_line(tokenizer, tokenizer.encode(" x y") + [end] + tokenizer.encode("z")) == "x y"


def test_wilson_and_newcombe_intervals_match_published_values():
    # Newcombe 1998 (Stat. Med. 17:857 and 17:873): Wilson 81/263; method 10 for 56/70 - 48/80 and 9/10 - 3/10.
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert difference_interval(56, 70, 48, 80)[1:] == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert difference_interval(9, 10, 3, 10)[1:] == pytest.approx((0.1705, 0.8090), abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(n_a=st.integers(1, 200), n_b=st.integers(1, 200), data=st.data())
def test_intervals_contain_their_estimate_and_stay_in_range(n_a, n_b, data):
    k_a, k_b = data.draw(st.integers(0, n_a)), data.draw(st.integers(0, n_b))
    low, high = wilson_interval(k_a, n_a)
    assert 0 <= low <= k_a / n_a <= high <= 1
    difference, low, high = difference_interval(k_a, n_a, k_b, n_b)
    assert -1 <= low <= difference <= high <= 1


def _write_run(folder, accuracy: dict[str, float], n=40):
    settings = PretrainedSettings(model="m", tasks=tuple(accuracy), lengths=(10,), n=n)
    config = dict(settings.to_dict(), architecture="gguf/llama")
    (folder / "config.json").write_text(json.dumps(config))
    # The real prompts of each cell, so the report's floors are computed as on a run.
    records = [
        dict(
            task=task,
            length=10,
            index=i,
            correct=i < round(p * n),
            seconds=0.5,
            prompt=item.prompt,
            expected=item.expected,
            output=item.expected if i < round(p * n) else "",
        )
        for task, p in accuracy.items()
        for i, item in enumerate(formal_prompts.cell_items(task, 10, n, 0, *settings.demonstrations.for_task(task)))
    ]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_summary_gaps_and_bias_statement_follow_the_counts(tmp_path):
    _write_run(tmp_path, {"UR": 0.9, "UL": 0.3, "UF": 0.5, "UB": 0.5, "NRFirst": 0.2})
    summary = summarize(tmp_path)
    gaps = {gap["name"]: gap for gap in summary["gaps"]}
    assert set(gaps) == {"UR - UL", "UF - UB", "UR - NRFirst"}  # pairs with both tasks present
    assert gaps["UR - UL"]["gap"] == pytest.approx(0.6) and gaps["UR - UL"]["low"] > 0
    assert gaps["UF - UB"]["low"] < 0 < gaps["UF - UB"]["high"]
    assert "1 of 2 pairs (UR - UL)" in bias_statement(summary)
    assert summary["prompts_per_second"] == pytest.approx(2.0)
    assert {gap["name"]: gap["corrected"] for gap in summary["gaps"]} == {
        "UR - UL": "above 0 after correction",
        "UF - UB": "not resolved after correction",
        "UR - NRFirst": "above 0 after correction",
    }


def test_a_gap_above_0_alone_is_not_above_0_after_correction_over_its_family(tmp_path):
    # 0.30 against 0.10 on 40 prompts each: Newcombe's 95% interval lies above 0 (p about 0.03), but
    # Holm over three comparisons asks p < 0.05 / 3 of the smallest.
    _write_run(tmp_path, {"UR": 0.3, "UL": 0.1, "UF": 0.5, "UB": 0.5, "NRFirst": 0.3})
    gaps = {gap["name"]: gap for gap in summarize(tmp_path)["gaps"]}
    assert gaps["UR - UL"]["low"] > 0 and 0.05 / 3 < gaps["UR - UL"]["p"] < 0.05
    assert gaps["UR - UL"]["corrected"] == "not resolved after correction"
    assert "no directional bias" in bias_statement(summarize(tmp_path))


def test_tasks_at_their_floor_mark_their_gaps(tmp_path):
    # Non-unique retrieval at 0: its trivial strategy (the token after a random occurrence) does better.
    _write_run(tmp_path, {"UR": 0.9, "NRFirst": 0.0, "NRLast": 0.0, "NLLast": 0.0})
    summary = summarize(tmp_path)
    assert summary["floors"]["NRFirst"]["strategy"] == "after an occurrence"
    assert summary["floors"]["NRFirst"]["at_floor"] and not summary["floors"]["UR"]["at_floor"]
    gaps = {gap["name"]: gap for gap in summary["gaps"]}
    assert gaps["NRLast - NLLast"]["at_floor"] == ["NRLast", "NLLast"]
    assert gaps["UR - NRFirst"]["at_floor"] == ["NRFirst"]


def test_an_interrupted_run_resumes_to_the_same_records(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    model = write_tiny_llama(tmp_path / "model")
    common = ["--model", str(model), "--tasks", "UR", "NB", "--lengths", "6", "--batch-size", "2"]
    flags = common + ["--n", "3"]
    pretrained.main(flags + ["--out", str(tmp_path / "whole")])
    whole = answer_records(tmp_path / "whole")
    assert len(whole) == 6 and {r["task"] for r in whole} == {"UR", "NB"}

    real_answer_lines, calls = answering.answer_lines, []

    def interrupted(*args):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real_answer_lines(*args)

    monkeypatch.setattr(answering, "answer_lines", interrupted)
    with pytest.raises(SystemExit, match="^130$"):  # Ctrl-C: one line, exit 130 (crasplab.errors)
        pretrained.main(flags + ["--out", str(tmp_path / "resumed")])
    assert len(answer_records(tmp_path / "resumed")) == 3  # UR's batches (2 + 1 prompts) finished, NB's not
    monkeypatch.setattr(answering, "answer_lines", real_answer_lines)
    pretrained.main(flags + ["--out", str(tmp_path / "resumed")])
    assert sorted(answer_records(tmp_path / "resumed"), key=str) == sorted(whole, key=str)
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["evaluated"] == summary["planned"] == 6
    assert (tmp_path / "resumed" / "accuracy_by_length.png").stat().st_size > 0

    with pytest.raises(SystemExit, match="different settings \\(n: 3 in the folder, 4 now\\)"):
        pretrained.main(common + ["--n", "4", "--out", str(tmp_path / "resumed")])


def test_prompts_beyond_the_models_context_are_refused_before_the_folder_is_written(tmp_path):
    model = write_tiny_llama(tmp_path)  # 512 positions; it sees text byte by byte
    with pytest.raises(SystemExit, match="exceed the context of 512 positions .* lower --lengths"):
        pretrained.main(["--model", str(model), "--tasks", "NB", "--lengths", "300", "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def _retrieval_at_length_6(model, out, n: int, *flags: str) -> list[str]:
    """The flags of a run of n UR prompts of length 6 on `model` into `out`."""
    return ["--model", str(model), "--tasks", "UR", "--lengths", "6", "--n", str(n), *flags, "--out", str(out)]


def test_running_out_of_memory_says_what_to_lower_and_keeps_the_answered_batches(tmp_path, monkeypatch):
    model = write_tiny_llama(tmp_path)
    flags = _retrieval_at_length_6(model, tmp_path / "run", 3, "--batch-size", "2")
    real_generate, calls = greedy.generate, []

    def generate_until_memory_runs_out(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 27227974704 bytes.")
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(greedy, "generate", generate_until_memory_runs_out)
    with pytest.raises(
        SystemExit,
        match=r"^error: out of memory decoding a batch of 3 rows \(batch size 2 plus one\) "
        r".*run the same command again with a smaller batch \(--batch-size",
    ):
        pretrained.main(flags)
    assert len(answer_records(tmp_path / "run")) == 2  # the first batch's two prompts
    monkeypatch.setattr(greedy, "generate", real_generate)
    pretrained.main(_retrieval_at_length_6(model, tmp_path / "run", 3, "--batch-size", "1"))  # the third prompt
    assert len(answer_records(tmp_path / "run")) == 3


def test_other_runtime_errors_of_the_model_are_not_called_a_lack_of_memory(tmp_path, monkeypatch):
    def failing_generate(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(greedy, "generate", failing_generate)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL: something else"):
        pretrained.main(_retrieval_at_length_6(write_tiny_llama(tmp_path), tmp_path / "run", 1))


def test_lengths_a_task_cannot_sample_are_refused_before_loading(tmp_path):
    with pytest.raises(SystemExit, match="task UF \\(alphabet of 52\\) accepts lengths 1 to 52"):
        pretrained.main(["--model", str(tmp_path / "absent"), "--tasks", "UF", "--lengths", "60"])


def test_a_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no such file or folder"):
        pretrained.main(["--model", str(tmp_path / "absent.gguf"), "--tasks", "UR", "--lengths", "10"])


def test_the_tasks_are_the_papers_ten_in_the_order_that_seeds_their_prompts():
    assert pretrained.TASKS == ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast", "UF", "UB", "NF", "NB")


def test_a_bad_demonstration_count_writes_nothing_and_the_corrected_command_runs(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    out = tmp_path / "run"
    flags = _retrieval_at_length_6(write_tiny_llama(tmp_path / "model"), out, 1, "--batch-size", "1")
    with pytest.raises(SystemExit):
        pretrained.main(flags + ["--retrieval-demonstrations", "-1"])
    assert "argument --retrieval-demonstrations: must be at least 1, got -1" in capsys.readouterr().err
    assert not out.exists()
    pretrained.main(flags + ["--retrieval-demonstrations", "1"])
    assert len(answer_records(out)) == 1


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--copying-demonstrations", "0"], "argument --copying-demonstrations: must be at least 1, got 0"),
        (["--retrieval-demo-length", "-3"], "argument --retrieval-demo-length: must be at least 1, got -3"),
        (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
        (["--n", "0"], "argument --n: must be at least 1, got 0"),
        (["--batch-size", "two"], "argument --batch-size: 'two' is not an integer"),
        (["--tasks", "XYZ"], "argument --tasks: invalid choice: 'XYZ'"),
        (["--tasks", "Majority"], "argument --tasks: invalid choice: 'Majority'"),  # a task without a prompt format
    ],
)
def test_invalid_settings_are_refused_while_parsing_before_anything_is_written(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        pretrained.main(["--model", str(tmp_path / "absent.gguf"), "--out", str(out), *flags])
    error = capsys.readouterr().err
    assert message in error and not out.exists()
    if "--tasks" in flags:
        accepted = error.split("choose from", 1)[1]
        assert all(code in accepted for code in pretrained.TASKS)


def test_lengths_without_an_upper_bound_are_described_so(tmp_path):
    with pytest.raises(SystemExit, match="task UR \\(alphabet of 62\\) accepts lengths 2 or more$"):
        pretrained.main(["--model", str(tmp_path / "absent"), "--tasks", "UR", "--lengths", "1"])


def test_an_out_that_is_a_file_is_refused_before_loading(tmp_path):
    (tmp_path / "notes.txt").write_text("not a run")
    with pytest.raises(SystemExit, match="--out .*notes.txt is a file; give a folder"):
        pretrained.main(["--model", str(tmp_path / "absent"), "--tasks", "UR", "--out", str(tmp_path / "notes.txt")])


@pytest.mark.parametrize(
    "config", [None, "{broken", '{"model": "m"}'], ids=["absent", "invalid-json", "other-settings"]
)
def test_report_only_on_a_folder_without_a_run_is_a_clear_error(tmp_path, config):
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    expected = "holds no run: it has no config.json" if config is None else "is not the settings of a run"
    with pytest.raises(SystemExit, match=f"^error: {re.escape(str(tmp_path))}.*{expected}"):
        pretrained.main(["--report-only", str(tmp_path)])


def test_families_table_sets_runs_side_by_side_with_the_papers_pattern(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    _write_run(first, {"UR": 0.9, "UL": 0.3, "UF": 0.5, "UB": 0.5, "NF": 0.5})
    _write_run(second, {"UR": 0.1, "UL": 0.8, "UF": 0.9, "UB": 0.1})
    pretrained.main(["--compare", str(first), str(second)])
    rows = {line.split(" | ")[1]: line.split(" | ") for line in capsys.readouterr().out.splitlines() if " - " in line}
    assert rows["UR - UL"][2].startswith("above 0") and "(above 0)" in rows["UR - UL"][3]
    assert "(below 0)" in rows["UR - UL"][4]  # the second run opposes the paper's pattern
    assert "(not resolved)" in rows["UF - UB"][3] and "(above 0)" in rows["UF - UB"][4]
    assert rows["UF - NF"][2].startswith("near 0") and rows["UF - NF"][4].strip(" |") == "-"  # no NF run
