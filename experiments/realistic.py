"""Copying in realistic settings (retrieval/copying paper, section 4.2), on any model the lab loads:

    python experiments/realistic.py lorem      # lorem-ipsum paragraphs, forward and backward
    python experiments/realistic.py git        # git revert (history in order) and cherry-pick (in reverse)
    python experiments/realistic.py lorem --model path/to/model.gguf --lengths 100 500 --n 20
    python experiments/realistic.py git --report-only runs/realistic/git/smollm2

lorem: repeat a lorem-ipsum paragraph (incontext.lorem: a fixed Latin word list, shuffled words and
sentences, some words and sentences repeated) word by word, in order (forward) or last word first
(backward), after an instruction and few-shot demonstrations. Greedy decoding stops at the end of
the line or at 1.5x the reference length. The report aligns each output to its reference token by
token and asks whether errors come after ambiguous tokens (tokens with several different
successors in the reference) more than after the others.

git: list the hashes of a synthetic history (7-hex hashes, short messages) in the order `git
revert` takes them (newest first, as the log lists them: forward) or `git cherry-pick` does
(oldest first: backward), after the same explanation of both commands and three examples of the
command asked. Exact match of the hash list.

Default sizes fit a 2-core CPU with SmolLM2-135M: lorem, paragraphs of 50 100 200 400 tokens, --n 6
per length and direction (48 prompts, about 14 minutes); git, histories of 2 4 8 16 commits, --n 10
per size and command (80 prompts, about 8 minutes).

Each command writes a run folder (default runs/realistic/<experiment>/<model name>): config.json,
results.jsonl (one record per prompt, rewritten atomically after every batch), summary.json,
report.md and a figure. Running the same command again continues where an interrupted run stopped;
a seed fixes every prompt.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crasplab.cli.arguments import (
    HelpFormatter,
    add_batch_size_flag,
    add_dtype_flag,
    add_flags_of,
    add_list_flag,
    add_model_flag,
    add_run_folder_flags,
    add_seed_flag,
    at_least,
    fraction,
    run_from_flags,
    settings_from_flags,
)
from crasplab.cli.experiment import Report
from crasplab.incontext.answering import answer_pending, graded_answers, in_batches
from crasplab.incontext.directions import DIRECTIONS
from crasplab.incontext.git_history import git_items
from crasplab.incontext.greedy import ContextError, check_answers_fit, check_context, continuation_lines
from crasplab.incontext.lorem import LoremSettings as LoremText
from crasplab.models.memory import check_batch_memory, check_prompt_count, decoding_bytes
from crasplab.incontext.settings import GitRunSettings, LoremRunSettings, RealisticSettings
from crasplab.models.config import DTYPES
from crasplab.models.loading import NAMED_MODELS, load_with_tokenizer
from crasplab.reports.realistic import report_markdown, write_report
from crasplab.records.run_folder import RESULTS_FILE
from crasplab.train.allocator import restart_with_huge_page_blocks

SETTINGS = {"lorem": LoremRunSettings, "git": GitRunSettings}


def token_ids(tokenizer, text: str) -> list[int]:
    """The tokens of `text` alone, without the BOS that prompts get."""
    return tokenizer.backend.encode(text, add_special_tokens=False).ids


def check_sizes(pretrained, sizes: tuple[int, ...], positions_per_unit: float, flag: str, holds: str, why: str) -> None:
    """Refuse at once a size that no prompt and answer of it could fit in the model's context, for
    any text: building such prompts takes minutes (or never ends) before
    incontext.greedy.check_context can look. `holds` is formatted with the largest size that may fit."""
    context = pretrained.config.max_positions
    too_large = [size for size in sizes if size * positions_per_unit > context]
    if too_large:
        raise ContextError(
            f"{flag} {' '.join(map(str, too_large))}: the context of {context} positions of "
            f"{pretrained.path} holds {holds.format(math.floor(context / positions_per_unit))} ({why}); "
            f"choose smaller {flag}"
        )


def check_cell(pretrained, prompts: list[str], new_tokens: int, batch_size: int, flags: str) -> None:
    """Refuse a cell whose prompts and answers exceed the context, or whose batches exceed the memory."""
    check_context(pretrained, prompts, new_tokens, flags)
    positions = max(map(len, pretrained.tokenizer.encode_batch(prompts))) + new_tokens
    check_batch_memory(
        decoding_bytes(pretrained.config, batch_size + 1, positions),
        f"decoding {batch_size + 1} prompts of up to {positions} tokens at once",
        "--batch-size",
    )


def record_answers(
    settings: LoremRunSettings | GitRunSettings,
    out: Path,
    pretrained,
    cells: list[list[dict]],
    answer: Callable[[list[dict]], list[dict]],
    key: tuple[str, ...],
    started: float,
) -> None:
    """Answer every prompt of `cells` that the run folder lacks, --batch-size at a time, saving after
    each batch. A batch never mixes cells (alike prompts, so alike compiled shapes); a record is
    known by its `key` fields. config.json holds the settings and the model loaded."""
    answer_pending(
        out,
        dict(settings.to_dict(), model_path=str(pretrained.path), architecture=pretrained.architecture),
        [batch for cell in cells for batch in in_batches(cell, settings.batch_size)],
        answer,
        lambda record: tuple(record[field] for field in key),
        started,
        RESULTS_FILE,
        may_change=settings.RESULTS_UNCHANGED,
    )


def run_lorem(settings: LoremRunSettings, out: Path) -> None:
    """Copy every paragraph the run folder lacks; a record keeps the reference's and the output's
    tokens (and the reference's token texts) for the alignment the report makes."""
    check_prompt_count(len(settings.lengths) * len(settings.directions) * settings.n, "--n")
    started = time.perf_counter()
    pretrained = load_with_tokenizer(settings.model, dtype=settings.dtype)
    tokenizer = pretrained.tokenizer
    text = LoremText(
        settings.seed, settings.demonstrations, settings.demo_length, settings.repeat_word, settings.repeat_sentence
    )
    limit = settings.output_limit
    check_sizes(
        pretrained,
        settings.lengths,
        1 + limit,
        "--lengths",
        "paragraphs of at most {} tokens",
        f"each token needs {1 + limit:g} positions: one in the prompt, up to {limit:g} in the copy",
    )

    def count(text: str) -> int:
        return len(token_ids(tokenizer, text))

    cells, cell_limits = [], {}
    for length in settings.lengths:
        for name in settings.directions:
            cell = []
            for item in text.items(DIRECTIONS[name], length, settings.n, count):
                reference_ids = token_ids(tokenizer, item.reference)
                cell.append(
                    dict(
                        direction=name,
                        length=length,
                        index=item.index,
                        prompt=item.prompt,
                        reference=item.reference,
                        reference_ids=reference_ids,
                        reference_pieces=[tokenizer.decode([token]) for token in reference_ids],
                        limit=math.ceil(limit * len(reference_ids)),
                    )
                )
            # One decoding budget per cell, whatever is left to do, so every batch of it shares a shape.
            cell_limits[(name, length)] = max(entry["limit"] for entry in cell)
            check_cell(
                pretrained,
                [entry["prompt"] for entry in cell],
                cell_limits[(name, length)],
                settings.batch_size,
                "--lengths, --demonstrations or --demo-length",
            )
            cells.append(cell)
    newline_id = token_ids(tokenizer, "\n")[-1]

    def answer(batch: list[dict]) -> list[dict]:
        outputs = continuation_lines(
            pretrained,
            [entry["prompt"] for entry in batch],
            [entry["limit"] for entry in batch],
            cell_limits[(batch[0]["direction"], batch[0]["length"])],
            newline_id,
            settings.batch_size,
        )
        return [
            dict(entry, output=output, output_ids=token_ids(tokenizer, output)) for entry, output in zip(batch, outputs)
        ]

    record_answers(settings, out, pretrained, cells, answer, ("direction", "length", "index"), started)


def run_git(settings: GitRunSettings, out: Path) -> None:
    """Ask for every hash list the run folder lacks."""
    check_prompt_count(len(settings.commits) * len(settings.commands) * settings.n, "--n")
    started = time.perf_counter()
    pretrained = load_with_tokenizer(settings.model, dtype=settings.dtype)
    tokenizer = pretrained.tokenizer
    check_sizes(
        pretrained,
        settings.commits,
        2,
        "--commits",
        "at most {} commits",
        "each needs 2 positions at least: its hash in the history and in the answer",
    )
    cells = []
    for commits in settings.commits:
        for command in settings.commands:
            items = git_items(command, commits, settings.n, settings.seed, settings.examples, settings.example_commits)
            check_answers_fit(
                pretrained,
                [item.prompt for item in items],
                [item.expected for item in items],
                "--commits, --examples or --example-commits",
            )
            cells.append([dataclasses.asdict(item) for item in items])  # command, commits, index, prompt, expected
    newline_id = token_ids(tokenizer, "\n")[-1]

    # A commit list is right when it names the same commits; spacing may differ.
    answer = graded_answers(
        pretrained, newline_id, settings.batch_size, lambda output, expected: output.split() == expected.split()
    )
    record_answers(settings, out, pretrained, cells, answer, ("command", "commits", "index"), started)


def add_experiment(
    experiments,
    shared: argparse.ArgumentParser,
    name: str,
    summary: str,
    sizes: tuple[str, str],
    conditions: tuple[str, str],
    n: str,
) -> argparse.ArgumentParser:
    """The subcommand of an experiment that evaluates every condition at every size, n prompts each
    (defaults: the experiment's settings type).

    --batch-size defaults to n: on a CPU a decoding step costs about the same for one row as for
    ten (it reads every weight once), so each (size, condition) cell is decoded in one batch."""
    defaults = SETTINGS[name]()
    parser = experiments.add_parser(
        name,
        parents=[shared],
        formatter_class=HelpFormatter,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]} (see the main --help).",
    )
    flag, text = sizes
    add_list_flag(parser, f"--{flag}", getattr(defaults, flag), text, type=at_least(1), metavar="N")
    flag, text = conditions
    add_list_flag(parser, f"--{flag}", getattr(defaults, flag), text, choices=getattr(defaults, flag))
    parser.add_argument("--n", type=at_least(1), default=defaults.n, help=n)
    add_batch_size_flag(parser, defaults.batch_size)
    return parser


LOREM_FLAGS = {
    "demonstrations": (at_least(0), "demonstration paragraphs in each prompt"),
    "demo_length": (at_least(1), "length of a demonstration, in tokens"),
    "repeat_word": (fraction, "probability that a word repeats a word already used"),
    "repeat_sentence": (fraction, "probability that a sentence repeats an earlier sentence"),
}
GIT_FLAGS = {
    "examples": (at_least(0), "few-shot examples in each prompt"),
    "example_commits": (at_least(1), "commits in each example history"),
}


def build_parser() -> argparse.ArgumentParser:
    shared = argparse.ArgumentParser(add_help=False)
    add_model_flag(shared, RealisticSettings.model, NAMED_MODELS)
    add_seed_flag(shared, RealisticSettings.seed, "every prompt")
    add_dtype_flag(shared, RealisticSettings.dtype, DTYPES)
    add_run_folder_flags(shared, "runs/realistic/<experiment>/<model name>")

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    experiments = parser.add_subparsers(dest="experiment", required=True, metavar="{lorem,git}")
    lorem = add_experiment(
        experiments,
        shared,
        "lorem",
        "lorem-ipsum copying, forward and backward, with the ambiguity analysis",
        sizes=("lengths", "paragraph lengths in tokens of the model's tokenizer (the paper goes to 500 and 2000)"),
        conditions=("directions", "forward: in order; backward: word by word, last word first"),
        n="paragraphs per length (each copied in every direction)",
    )
    add_flags_of(lorem, LoremRunSettings, LOREM_FLAGS)
    git = add_experiment(
        experiments,
        shared,
        "git",
        "git revert (forward) and cherry-pick (backward) of a synthetic history",
        sizes=("commits", "commits per history"),
        conditions=("commands", "revert: hashes in the log's order (forward); cherry-pick: reversed (backward)"),
        n="histories per size (each asked with every command)",
    )
    add_flags_of(git, GitRunSettings, GIT_FLAGS)
    return parser


def settings_from(args: argparse.Namespace) -> LoremRunSettings | GitRunSettings:
    """The experiment's settings: every flag of its subcommand."""
    return settings_from_flags(SETTINGS[args.experiment], args)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    experiment = args.experiment
    run_from_flags(
        args,
        settings_from,
        lambda settings: Path("runs/realistic") / experiment / Path(settings.model).stem,
        {"lorem": run_lorem, "git": run_git}[experiment],
        Report(lambda out: write_report(experiment, out), lambda summary: report_markdown(experiment, summary)),
    )


if __name__ == "__main__":
    restart_with_huge_page_blocks()
    sys.exit(main())
